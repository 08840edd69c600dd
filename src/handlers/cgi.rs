//! A location that runs CGI scripts (`cgi = true`, `cgi_interpreters`): the script
//! the path names ([`crate::gateway::script`]), run as a child of the worker with the
//! request's meta-variables and its body on stdin ([`crate::gateway::child`]), its answer
//! read strictly ([`crate::gateway::answer`]) and sent.
//!
//! What goes wrong is said once in the error log with the script's URL path: a
//! script that cannot start (500), an answer that is not one (502), a script past
//! `script_timeout` (killed, 504), one that prints more than [`MAX_OUTPUT`]
//! (killed, 502).

use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use crate::gateway::child::{self, Ended, Spawn, Stdin};
use crate::gateway::script::{self, Missing, Policy};
use crate::gateway::{CgiConfig, answer, env};
use crate::http::response::{Body, Reply};
use crate::sys::Symlinks;

use super::Ask;

/// The most output a script may print: the answer is held in the worker until the
/// script is done, so this is memory.
pub const MAX_OUTPUT: usize = 64 << 20;
/// The longest header block a script may print.
pub const MAX_HEAD: usize = 64 * 1024;

/// The CGI handler of one location, in one worker.
pub struct Cgi<'c> {
    pub config: &'c CgiConfig,
    /// `dir`, opened once.
    pub dir: File,
    pub symlinks: Symlinks,
    /// Bytes of the URL path that `dir` stands for.
    pub strip: usize,
    pub server_name: &'c str,
}

impl Cgi<'_> {
    pub fn serve(&self, ask: &Ask<'_>, reply: &mut Reply<'_>) {
        let Some(found) = find(&self.dir, &self.config.dir, self.symlinks, self.strip, &self.config.policy, ask, reply)
        else {
            return;
        };
        let name = String::from_utf8_lossy(&found.script_name).into_owned();
        let env = found.env(ask, self.server_name, &self.config.dir);
        let spec = Spawn {
            script: &found.filename,
            interpreter: found.script.interpreter.as_deref(),
            env: &env,
            limits: self.config.limits,
            timeout: self.config.timeout,
            max_output: MAX_OUTPUT,
            name: &name,
            waiting: ask.link.waiting,
        };
        let stdin = ask.link.body.map_or(Stdin::Empty, |b| b.stdin());
        match child::run(&spec, stdin, ask.link.socket) {
            Ended::Done { output, .. } => answered(output, &name, reply),
            Ended::TimedOut { .. } => {
                log::error!("{name}: killed: still running after script_timeout ({:?})", self.config.timeout);
                reply.error(504, "The script did not answer in time.");
            }
            Ended::TooLong => {
                log::error!("{name}: killed: its output passed {MAX_OUTPUT} bytes");
                reply.error(502, "The script's answer was too long.");
            }
            Ended::ClientGone => {
                log::info!("{name}: killed: the client closed the connection");
                reply.error(400, "The client went away.");
                reply.close = true;
            }
            Ended::NotStarted(e) => {
                log::error!("{name}: could not start {}: {e}", found.filename.display());
                reply.error(500, "The script could not be started.");
            }
        }
    }
}

/// A script found for a request, with what the meta-variables say of it.
pub struct Found {
    pub script: script::Script,
    /// Its URL path.
    pub script_name: Vec<u8>,
    pub filename: PathBuf,
    pub path_info: Vec<u8>,
}

impl Found {
    /// The meta-variables for this request to this script.
    pub fn env(&self, ask: &Ask<'_>, server_name: &str, root: &std::path::Path) -> Vec<(Vec<u8>, Vec<u8>)> {
        let host = ask.req.host.map(|h| {
            // Host without its port (IPv6 literals keep their brackets).
            match h.iter().rposition(|&b| b == b':') {
                Some(i) if !h[i..].contains(&b']') => &h[..i],
                _ => h,
            }
        });
        let meta = env::Meta {
            req: ask.req,
            query: ask.query.unwrap_or(b""),
            script_name: &self.script_name,
            script_filename: self.filename.as_os_str().as_bytes(),
            path_info: &self.path_info,
            document_root: root.as_os_str().as_bytes(),
            client: ask.link.peer,
            server_name: host.unwrap_or(server_name.as_bytes()),
            server_port: ask.link.local_port,
            https: ask.link.https,
            content_length: ask.link.body.map(|b| b.len()),
        };
        env::variables(&meta)
    }
}

/// Finds the script for `ask` under `dir`; on `None` the reply says why (403, 404).
pub fn find(
    dir: &File,
    dir_path: &std::path::Path,
    symlinks: Symlinks,
    strip: usize,
    policy: &Policy,
    ask: &Ask<'_>,
    reply: &mut Reply<'_>,
) -> Option<Found> {
    let path = &ask.path.bytes[..];
    let prefix = &path[..strip.min(path.len())];
    let rest = &path[strip.min(path.len())..];
    match script::find(dir, dir_path, symlinks, rest, policy) {
        Ok(script) => {
            let mut script_name = prefix.to_vec();
            let (named, info) = rest.split_at(script.name_len.min(rest.len()));
            script_name.extend_from_slice(named);
            if let Some(index) = &script.index {
                if !script_name.ends_with(b"/") {
                    script_name.push(b'/');
                }
                script_name.extend_from_slice(index.as_bytes());
            }
            let path_info = if script.index.is_some() { Vec::new() } else { info.to_vec() };
            let filename = dir_path.join(&script.rel);
            Some(Found { script, script_name, filename, path_info })
        }
        Err(Missing::NotFound) => {
            reply.error(404, "The requested resource was not found.");
            None
        }
        Err(Missing::NotRunnable) => {
            reply.error(403, "This file is not run here.");
            None
        }
    }
}

/// Turns a script's whole output into the reply, or a 502 said in the error log.
pub fn answered(mut output: Vec<u8>, name: &str, reply: &mut Reply<'_>) {
    match answer::parse(&output, MAX_HEAD, true) {
        Ok(Some((head, body_start))) => {
            reply.status = head.status;
            for (n, v) in &head.headers {
                reply.header(n, v);
            }
            if let Some(path) = head.local_redirect {
                // Served as the client's own redirect: the path is on this server.
                reply.status = 302;
                reply.header("Location", path);
            }
            output.drain(..body_start);
            if let Some(n) = head.content_length
                && n != output.len() as u64
            {
                log::warn!("{name}: its Content-Length says {n} but it sent {} bytes", output.len());
            }
            reply.body = Body::Owned(output);
        }
        Ok(None) => {
            reply.error(502, "The script's answer was not valid.");
        }
        Err(e) => {
            log::error!("{name}: bad answer: {e}");
            reply.error(502, "The script's answer was not valid.");
        }
    }
}
