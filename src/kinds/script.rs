//! What the two handlers that run scripts share (CGI scripts, [`super::cgi`];
//! a FastCGI application's, [`super::fastcgi`]): the script a request's path names
//! under the location's directory, with the meta-variables it is told
//! ([`Scripts::prepare`]), and its answer turned into the reply ([`answered`]):
//! whole, or streamed as it comes ([`crate::gateway::output`]).

use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::base::sys::Symlinks;
use crate::gateway::output::{Failed, Fault, Got, Source};
use crate::gateway::script::{self, Missing, Policy};
use crate::gateway::{env, incoming};
use crate::http::pattern::Pattern;
use crate::http::request::Method;
use crate::http::response::{Body, Internal, Reply, Streamed};

use crate::exchange::Ask;

/// Where a location's scripts are and how they run.
pub struct Scripts<'c> {
    /// The location's directory, opened once.
    pub dir: File,
    pub dir_path: &'c Path,
    pub symlinks: Symlinks,
    /// Bytes of the URL path that `dir` stands for (a location's `alias`).
    pub strip: usize,
    pub server_name: &'c str,
    pub policy: Policy,
    /// What the location matches: a script's own URL path must match it too, or
    /// it is not run (`/uploads/a.jpg/x.php` names `a.jpg`, no `.php`).
    pub pattern: Option<&'c Pattern>,
}

/// A script found for a request, with what the meta-variables say of it.
pub struct Found {
    pub script: script::Script,
    /// Its URL path.
    pub script_name: Vec<u8>,
    pub filename: PathBuf,
    pub path_info: Vec<u8>,
}

/// A request ready for its script: the script, how the log names it, its
/// meta-variables.
pub struct Prepared {
    pub found: Found,
    /// Its URL path, for the error log.
    pub name: String,
    /// The request, as its stderr lines in the error log end.
    pub context: String,
    pub env: Vec<(Vec<u8>, Vec<u8>)>,
}

impl<'c> Scripts<'c> {
    /// The scripts of a location whose directory is `dir` (opened now), an `alias`
    /// of the prefix `at` or a root; how they run is `policy`.
    pub fn open(
        (dir, alias): (&'c Path, bool),
        at: Option<&'c Pattern>,
        symlinks: Symlinks,
        server_name: &'c str,
        policy: Policy,
    ) -> std::io::Result<Scripts<'c>> {
        Ok(Scripts {
            dir: File::open(dir)?,
            dir_path: dir,
            symlinks,
            // An alias stands for the prefix: what follows it is looked up.
            strip: if alias { at.map_or(0, |p| p.text().len()) } else { 0 },
            pattern: at,
            server_name,
            policy,
        })
    }
}

impl Scripts<'_> {
    /// The script `ask`'s path runs, and its variables; on `None` the reply says
    /// why (403, 404).
    pub fn prepare(&self, ask: &Ask<'_>, reply: &mut Reply<'_>) -> Option<Prepared> {
        let found = self.find(&ask.path.bytes, reply)?;
        let name = String::from_utf8_lossy(&found.script_name).into_owned();
        let env = found.env(ask, self.server_name, self.dir_path);
        let server = ask.req.host.unwrap_or(self.server_name.as_bytes());
        let context = crate::gateway::child::request_context(ask.client, server, ask.req.line);
        Some(Prepared { found, name, context, env })
    }

    /// Whether `path` names a script here by itself: a file (or, `dir`, a directory
    /// with an index), with nothing left over for `PATH_INFO`.
    pub fn runs_exactly(&self, path: &[u8], dir: bool) -> bool {
        let rest = match path.get(self.strip.min(path.len())..) {
            Some(r) => r,
            None => return false,
        };
        match script::find(&self.dir, self.dir_path, self.symlinks, rest, &self.policy) {
            Ok(s) if s.index.is_some() => dir,
            Ok(s) => !dir && s.name_len == rest.len(),
            Err(_) => false,
        }
    }

    fn find(&self, path: &[u8], reply: &mut Reply<'_>) -> Option<Found> {
        let cut = self.strip.min(path.len());
        let (prefix, rest) = path.split_at(cut);
        match script::find(&self.dir, self.dir_path, self.symlinks, rest, &self.policy) {
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
                if self.pattern.is_some_and(|p| !p.matches(&script_name)) {
                    // The file that would run is not one this location runs by its
                    // own name: never sent (as nginx's Debian snippet answers).
                    reply.error(404, "The requested resource was not found.");
                    return None;
                }
                let filename = self.dir_path.join(&script.rel);
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
}

impl Found {
    /// The meta-variables for this request to this script.
    pub fn env(&self, ask: &Ask<'_>, server_name: &str, root: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
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
            server_addr: local_addr(ask.link.socket),
        };
        env::variables(&meta)
    }
}

/// The address the client's connection was made to; one system call, made for a
/// script alone (the listener may be bound to every address).
fn local_addr(socket: std::os::fd::BorrowedFd<'_>) -> Option<std::net::IpAddr> {
    use nix::sys::socket::{SockaddrStorage, getsockname};
    use std::os::fd::AsRawFd;
    let a: SockaddrStorage = getsockname(socket.as_raw_fd()).ok()?;
    if let Some(v4) = a.as_sockaddr_in() {
        return Some(v4.ip().into());
    }
    let v6 = a.as_sockaddr_in6()?.ip();
    // An IPv4 client on a dual-stack listener: its address as IPv4.
    Some(v6.to_ipv4_mapped().map_or(v6.into(), Into::into))
}

/// The request's body as a script's stdin (its own copy); on `None` the reply is a
/// 500, said in the error log.
pub fn stdin(ask: &Ask<'_>, name: &str, reply: &mut Reply<'_>) -> Option<crate::gateway::child::Stdin> {
    match ask.link.body.map_or(Ok(crate::gateway::child::Stdin::Empty), incoming::RequestBody::stdin) {
        Ok(s) => Some(s),
        Err(e) => {
            log::error!("{name}: the request body cannot be read again: {e}");
            reply.error(500, "The request body could not be read.");
            None
        }
    }
}

/// Turns a script's answer to `ask` into the reply: its status and headers (its
/// `Date` and `Server` instead of the server's), its body whole or as a stream; an
/// answer that is not one is a 502 said in the error log. A fault (the script
/// stopped before its head was read) is the handler's to say.
pub fn answered<S: Source + 'static>(
    got: Result<Got<S>, Failed>,
    ask: &Ask<'_>,
    name: &str,
    reply: &mut Reply<'_>,
) -> Option<Fault> {
    let (head, body) = match got {
        // A HEAD: the script sends no body (PHP does not), so the length it did not
        // give is not known, and none is said (RFC 9110 §8.6).
        Ok(Got::Whole(head, _)) if ask.req.method == Method::Head && head.content_length.is_none() => {
            (head, Streamed::body(Box::new(std::io::empty()), None))
        }
        Ok(Got::Whole(head, mut body)) => {
            if let Some(n) = head.content_length
                && n != body.len()
            {
                log::warn!("{name}: its Content-Length says {n} but it sent {} bytes", body.len());
                body.truncate(n);
            }
            (head, body.into_body())
        }
        Ok(Got::Streaming(head, stream)) => {
            let len = head.content_length;
            // The script's time bounds the stream while it waits for room in its
            // socket too.
            let left = stream.deadline().saturating_duration_since(std::time::Instant::now());
            let until_ms = Some(crate::base::clock::ms_after(left));
            (head, Body::Stream(Box::new(Streamed { from: Box::new(stream), len, sent: 0, until_ms })))
        }
        Err(Failed::Answer(e)) => {
            log::error!("{name}: bad answer: {e}");
            reply.error(502, "The script's answer was not valid.");
            return None;
        }
        Err(Failed::Fault(f)) => return Some(f),
    };
    if let Some(path) = head.local_redirect {
        // A local redirect (RFC 3875 §6.2.2): the server answers that path itself,
        // as a GET; what the script printed besides is dropped (and a script still
        // printing is stopped with its body).
        reply.internal = Some(Internal { target: path.into_bytes(), as_get: true });
        return None;
    }
    reply.status = head.status;
    for (n, v) in &head.headers {
        if n.eq_ignore_ascii_case("date") {
            reply.date = Some(String::from_utf8_lossy(v).into_owned());
        } else if n.eq_ignore_ascii_case("server") {
            reply.server = Some(String::from_utf8_lossy(v).into_owned());
        } else {
            reply.header_bytes(n, v);
        }
    }
    reply.body = body;
    None
}
