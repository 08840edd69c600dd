//! `cgi = true` and `cgi_interpreters = { py = "/usr/bin/python3" }`: CGI scripts
//! from the location's `root` or `alias`, with `script_timeout`, `cgi_memory` and
//! `buffering`; its keys read, checked and shown, and its handler ([`Cgi`]): the
//! script the path names ([`super::script`]), run as a child of the worker with the
//! request's meta-variables and its body on stdin ([`crate::gateway::child`]), its
//! answer read strictly and kept whole for the client, the script reaped at its end
//! (or, with `buffering = false`, sent as it comes: [`crate::gateway::output`]).
//!
//! What goes wrong is said once in the error log with the script's URL path: a
//! script that cannot start (500), an answer that is not one (502), a script past
//! `script_timeout` (killed, 504, or its answer cut once it was begun), one that
//! prints more than [`crate::gateway::output::MAX_OUTPUT`] (killed, likewise).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::files::{self, Reading};
use super::script::{self, Scripts};
use crate::base::sys::{ScriptLimits, Symlinks};
use crate::exchange::Ask;
use crate::gateway::CgiConfig;
use crate::gateway::child::{self, Spawn};
use crate::gateway::output::{self, Fault, MAX_OUTPUT};
use crate::gateway::script::Policy;
use crate::http::pattern::Pattern;
use crate::http::response::Reply;
use crate::keys::read::{ConfigError, Keys};
use crate::keys::units::{Bytes, Secs};
use crate::keys::write::{Toml, duration, path, size};

/// The keys that choose it.
pub const CHOOSING: &[&str] = &["cgi", "cgi_interpreters"];
/// Its keys (with `root` and `alias`, which are files').
pub const KEYS: &[&str] = &["cgi", "cgi_interpreters", "script_timeout", "cgi_memory", "buffering"];

/// `script_timeout` when unset: a minute, as nginx's `fastcgi_read_timeout`.
pub const SCRIPT_TIMEOUT: Duration = Duration::from_secs(60);
/// `cgi_memory` when unset: address space for an interpreter and its libraries with
/// room to work (PHP's own `memory_limit` is 128 MiB), not a runaway's.
const CGI_MEMORY: u64 = 1 << 30;

/// `script_timeout`, shared with FastCGI.
pub(super) fn read_timeout(keys: &mut Keys, r: &Reading<'_>) -> Result<Duration, ConfigError> {
    match keys.take::<Secs>(r.ctx, "script_timeout")? {
        Some(t) if t.get_ref().0.is_zero() => Err(r.ctx.spanned(&t, "script_timeout must be more than zero")),
        Some(t) => Ok(t.into_inner().0),
        None => Ok(SCRIPT_TIMEOUT),
    }
}

/// `buffering` (true unless set), shared with FastCGI.
pub(super) fn read_buffering(keys: &mut Keys, r: &Reading<'_>) -> Result<bool, ConfigError> {
    Ok(keys.take::<bool>(r.ctx, "buffering")?.is_none_or(|b| b.into_inner()))
}

pub(super) fn read(keys: &mut Keys, r: &Reading<'_>) -> Result<CgiConfig, ConfigError> {
    let (dir, alias) = files::read_dir(keys, r.ctx, r.vhost_files, r.root, r.prefix)?;
    if keys.names().any(|k| k == "index" || k == "autoindex") {
        return Err(r.ctx.error(r.at.clone(), "a CGI location runs the file a path names: no index or autoindex"));
    }
    let executables = keys.take::<bool>(r.ctx, "cgi")?.is_some_and(|c| c.into_inner());
    let mut interpreters = BTreeMap::new();
    if let Some(map) = keys.take::<BTreeMap<String, String>>(r.ctx, "cgi_interpreters")? {
        for (ext, program) in map.get_ref() {
            if ext.is_empty() || ext.contains(['.', '/']) {
                return Err(r
                    .ctx
                    .spanned(&map, format!("cgi_interpreters: {ext:?} is not a file extension (say \"py\")")));
            }
            let program = PathBuf::from(program);
            if !program.is_absolute() {
                return Err(r.ctx.spanned(&map, format!("cgi_interpreters: {:?} must be an absolute path", program)));
            }
            interpreters.insert(ext.clone(), program);
        }
    }
    let timeout = read_timeout(keys, r)?;
    let memory = keys.take::<Bytes>(r.ctx, "cgi_memory")?.map_or(CGI_MEMORY, |b| b.into_inner().0);
    let policy = Policy { executables, interpreters, fastcgi: false, index: Vec::new() };
    // The CPU a script may use: its run time and a second (one that spins on two
    // cores is stopped by the run-time limit first).
    let limits = ScriptLimits { cpu_secs: timeout.as_secs() + 1, memory };
    let buffering = read_buffering(keys, r)?;
    Ok(CgiConfig { dir, alias, policy, timeout, limits, buffering })
}

pub(super) fn show(c: &CgiConfig, t: &mut Toml) {
    t.key(if c.alias { "alias" } else { "root" }, path(&c.dir));
    t.key("cgi", toml::Value::Boolean(c.policy.executables));
    if !c.policy.interpreters.is_empty() {
        let mut map = toml::map::Map::new();
        for (ext, program) in &c.policy.interpreters {
            map.insert(ext.clone(), path(program));
        }
        t.key("cgi_interpreters", toml::Value::Table(map));
    }
    t.key("script_timeout", duration(c.timeout));
    t.key("cgi_memory", size(c.limits.memory));
    t.key("buffering", toml::Value::Boolean(c.buffering));
}

pub(super) fn build<'c>(
    c: &'c CgiConfig,
    at: Option<&'c Pattern>,
    symlinks: Symlinks,
    server_name: &'c str,
) -> std::io::Result<Cgi<'c>> {
    let scripts = Scripts::open((&c.dir, c.alias), at, symlinks, server_name, c.policy.clone())?;
    Ok(Cgi { config: c, scripts })
}

/// The CGI handler of one location, in one worker.
pub struct Cgi<'c> {
    pub config: &'c CgiConfig,
    pub scripts: Scripts<'c>,
}

impl Cgi<'_> {
    pub fn serve(&self, ask: &Ask<'_>, reply: &mut Reply<'_>) {
        let Some(p) = self.scripts.prepare(ask, reply) else { return };
        let Some(body) = script::stdin(ask, &p.name, reply) else { return };
        let spec = Spawn {
            script: &p.found.filename,
            interpreter: p.found.script.interpreter.as_deref(),
            env: &p.env,
            limits: self.config.limits,
            timeout: self.config.timeout,
            max_output: MAX_OUTPUT,
            name: &p.name,
            context: &p.context,
        };
        let running = match child::spawn(&spec, body) {
            Ok(r) => r,
            Err(e) => {
                log::error!("{}: could not start {}: {e}", p.name, p.found.filename.display());
                reply.error(500, "The script could not be started.");
                return;
            }
        };
        let keep = self.config.buffering.then_some(ask.link.answers);
        let got = output::read(running, ask.link.socket, ask.link.waiting, keep);
        let name = &p.name;
        match script::answered(got, ask, name, reply) {
            None => {}
            Some(Fault::TimedOut) => {
                log::error!("{name}: killed: still running after script_timeout ({:?})", self.config.timeout);
                reply.error(504, "The script did not answer in time.");
            }
            Some(Fault::TooLong) => {
                log::error!("{name}: killed: its output passed {MAX_OUTPUT} bytes");
                reply.error(502, "The script's answer was too long.");
            }
            Some(Fault::ClientGone) => {
                log::info!("{name}: killed: the client closed the connection");
                reply.error(400, "The client went away.");
                reply.close = true;
            }
            Some(Fault::Broken { why, .. }) => {
                log::error!("{name}: {why}");
                reply.error(502, "The script's answer was not valid.");
            }
        }
    }
}
