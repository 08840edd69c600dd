//! `cgi = true` and `cgi_interpreters = { py = "/usr/bin/python3" }`: CGI scripts
//! ([`crate::handlers::cgi`]) from the location's `root` or `alias`, with
//! `script_timeout`, `cgi_memory` and `buffering`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::{Build, Reading, files};
use crate::keys::read::{ConfigError, Keys};
use crate::keys::write::{Toml, duration, path, size};
use crate::keys::units::{Bytes, Secs};
use crate::gateway::CgiConfig;
use crate::gateway::script::Policy;
use crate::handlers::Handler;
use crate::handlers::cgi::Cgi;
use crate::handlers::script::Scripts;
use crate::http::pattern::Pattern;
use crate::sys::ScriptLimits;

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

pub(super) fn build<'c>(c: &'c CgiConfig, at: Option<&'c Pattern>, b: &Build<'c, '_>) -> std::io::Result<Handler<'c>> {
    let scripts = Scripts {
        dir: std::fs::File::open(&c.dir)?,
        dir_path: &c.dir,
        symlinks: b.symlinks,
        strip: if c.alias { at.map_or(0, |p| p.text().len()) } else { 0 },
        pattern: at,
        server_name: b.server_name,
        policy: c.policy.clone(),
    };
    Ok(Handler::Cgi(Cgi { config: c, scripts }))
}
