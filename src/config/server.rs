//! The `[server]` and `[workers]` keys that take more than a copy: content types,
//! the workers' user, the spare band, listen addresses, the error log's target.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use nix::unistd::{Group, User};

use super::raw::RawConfig;
use super::{ConfigError, Ctx, DEFAULT_MIME_TYPES, ErrorLogTarget, MIME_BUILTIN, RunAs, Workers, absolute};
use crate::http::mime::MimeTypes;

impl Ctx<'_> {
    /// The content-type table: the file `mime_types` names (it must be readable), or
    /// with no `mime_types` the default `conf/mime.types` if it exists, else the
    /// built-in copy of it; `mime_types = "builtin"` asks for that copy by name.
    pub(super) fn mime(&self, raw: &RawConfig, root: &Path) -> Result<(MimeTypes, Option<PathBuf>), ConfigError> {
        let default_type = &raw.server.default_type;
        let path = match &raw.server.mime_types {
            Some(m) if m.get_ref() == MIME_BUILTIN => return Ok((MimeTypes::builtin(default_type), None)),
            Some(m) => absolute(root, m.get_ref()),
            None => {
                let path = root.join(DEFAULT_MIME_TYPES);
                match std::fs::read_to_string(&path) {
                    Ok(text) => return Ok((MimeTypes::parse(&text, default_type), Some(path))),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                        return Ok((MimeTypes::builtin(default_type), None));
                    }
                    Err(e) => {
                        return Err(self.error(
                            self.table("server"),
                            format!("cannot read the default mime_types {}: {e}", path.display()),
                        ));
                    }
                }
            }
        };
        let text = std::fs::read_to_string(&path).map_err(|e| {
            let at = raw.server.mime_types.as_ref().map_or(0..0, |m| m.span());
            self.error(at, format!("cannot read mime_types {}: {e}", path.display()))
        })?;
        Ok((MimeTypes::parse(&text, default_type), Some(path)))
    }

    pub(super) fn workers(&self, raw: &RawConfig) -> Result<Workers, ConfigError> {
        let w = &raw.workers;
        let at = self.table("workers");
        if w.max == 0 {
            return Err(self.error(at, "workers.max must be at least 1"));
        }
        if w.max > 20_000 {
            return Err(self.error(at, "workers.max above 20000 is not supported"));
        }
        if w.min_spare > w.max_spare {
            return Err(self.error(at, "workers.min_spare must not be above workers.max_spare"));
        }
        // More spares than workers can never be reached: the pool stops at max.
        let min_spare = w.min_spare.min(w.max);
        Ok(Workers {
            start: w.start.min(w.max),
            min_spare,
            // Apache keeps MaxSpare at least MinSpare + 1, so the pool cannot oscillate
            // between spawning and retiring on every tick.
            max_spare: w.max_spare.max(min_spare.saturating_add(1)),
            max: w.max,
            max_requests: w.max_requests,
            max_connections: w.max_connections.max(1),
            max_memory: w.max_memory.map(|b| b.0),
            sched_batch: w.sched_batch,
        })
    }

    pub(super) fn run_as(&self, raw: &RawConfig) -> Result<Option<RunAs>, ConfigError> {
        let Some(user) = &raw.server.user else {
            if let Some(g) = &raw.server.group {
                return Err(self.spanned(g, "server.group needs server.user"));
            }
            return Ok(None);
        };
        let u = User::from_name(user.get_ref())
            .ok()
            .flatten()
            .ok_or_else(|| self.spanned(user, format!("no such user {:?}", user.get_ref())))?;
        let gid = match &raw.server.group {
            None => u.gid,
            Some(g) => {
                Group::from_name(g.get_ref())
                    .ok()
                    .flatten()
                    .ok_or_else(|| self.spanned(g, format!("no such group {:?}", g.get_ref())))?
                    .gid
            }
        };
        let name = std::ffi::CString::new(u.name.as_str()).map_err(|_| self.spanned(user, "bad user name"))?;
        let groups = nix::unistd::getgrouplist(&name, gid)
            .map_err(|e| self.spanned(user, format!("cannot list the groups of {:?}: {e}", u.name)))?;
        Ok(Some(RunAs { user: u.name, uid: u.uid, gid, groups }))
    }
}

/// `"8080"` (all IPv4 addresses), `"127.0.0.1:8080"`, `"[::1]:8080"`, `"*:8080"`.
pub(super) fn parse_listen(s: &str) -> Option<SocketAddr> {
    if let Ok(port) = s.parse::<u16>() {
        return Some(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    if let Some(port) = s.strip_prefix("*:") {
        return Some(SocketAddr::from(([0, 0, 0, 0], port.parse().ok()?)));
    }
    s.parse().ok()
}

/// The syslog facilities `error_log = "syslog:NAME"` accepts.
pub(crate) const FACILITIES: [(&str, syslog::Facility); 10] = {
    use syslog::Facility::*;
    [
        ("daemon", LOG_DAEMON),
        ("user", LOG_USER),
        ("local0", LOG_LOCAL0),
        ("local1", LOG_LOCAL1),
        ("local2", LOG_LOCAL2),
        ("local3", LOG_LOCAL3),
        ("local4", LOG_LOCAL4),
        ("local5", LOG_LOCAL5),
        ("local6", LOG_LOCAL6),
        ("local7", LOG_LOCAL7),
    ]
};

pub(super) fn parse_error_log(s: &str, root: &Path) -> Option<ErrorLogTarget> {
    if s == "stderr" {
        return Some(ErrorLogTarget::Stderr);
    }
    if s == "syslog" {
        return Some(ErrorLogTarget::Syslog(syslog::Facility::LOG_DAEMON, None));
    }
    if let Some(f) = s.strip_prefix("syslog:") {
        let fac = FACILITIES.iter().find(|(name, _)| *name == f)?.1;
        return Some(ErrorLogTarget::Syslog(fac, None));
    }
    if s.is_empty() {
        return None;
    }
    Some(ErrorLogTarget::File(absolute(root, s)))
}
