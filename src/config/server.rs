//! The `[server]` and `[workers]` keys that take more than a copy: listen addresses,
//! the error log's target and level, content types, the workers' user, the
//! `Server` header, the trusted forwarders, the spare band.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Group, Uid, User};

use super::raw::{RawAffinity, RawConfig, RawListen};
use crate::base::cidr::Cidr;
use crate::http::forwarded::ForwardedHeader;
use crate::http::mime::MimeTypes;
use crate::keys::read::{ConfigError, Ctx, absolute};
use crate::log::ErrorLogTarget;
use log::LevelFilter;

impl Ctx<'_> {
    /// `server.listen`: at least one address, none twice.
    pub(super) fn listen(&self, raw: &RawConfig) -> Result<Vec<Listen>, ConfigError> {
        if raw.server.listen.is_empty() {
            return Err(self.error(self.table("server"), "server.listen needs at least one address"));
        }
        let mut listen: Vec<Listen> = Vec::new();
        for l in &raw.server.listen {
            let (addr, tls, proxy_protocol) = match l.get_ref() {
                RawListen::Addr(a) => (a, false, false),
                RawListen::Table(t) => (&t.addr, t.tls, t.proxy_protocol),
            };
            let addr = parse_listen(addr).ok_or_else(|| {
                self.spanned(
                    l,
                    format!("bad listen address {addr:?} (want \"127.0.0.1:8080\", \"[::1]:8080\" or \"8080\")"),
                )
            })?;
            // Port 0 picks a free port each time: twice is two listeners.
            if addr.port() != 0 && listen.iter().any(|e| e.addr == addr) {
                return Err(self.spanned(l, format!("listen address {addr} given twice")));
            }
            listen.push(Listen { addr, tls, proxy_protocol });
        }
        Ok(listen)
    }

    /// `server.log_level`, and `server.error_log` with its `syslog_socket`.
    pub(super) fn error_log(&self, raw: &RawConfig, root: &Path) -> Result<(LevelFilter, ErrorLogTarget), ConfigError> {
        let log_level = match &raw.server.log_level {
            None => LevelFilter::Info,
            Some(l) => l
                .get_ref()
                .parse::<LevelFilter>()
                .map_err(|_| self.spanned(l, "log_level must be one of off, error, warn, info, debug, trace"))?,
        };
        let mut error_log = parse_error_log(&raw.server.error_log, root)
            .ok_or_else(|| self.error(self.table("server"), format!("bad error_log {:?}", raw.server.error_log)))?;
        if let (ErrorLogTarget::Syslog(_, socket), Some(path)) = (&mut error_log, &raw.server.syslog_socket) {
            *socket = Some(absolute(root, path));
        }
        Ok((log_level, error_log))
    }

    /// `server.server_tokens`.
    pub(super) fn server_tokens(&self, raw: &RawConfig) -> Result<ServerTokens, ConfigError> {
        Ok(match &raw.server.server_tokens {
            None => ServerTokens::Full,
            Some(t) => match t.get_ref().as_str() {
                "full" => ServerTokens::Full,
                "product" => ServerTokens::Product,
                _ => return Err(self.spanned(t, "server_tokens must be \"full\" or \"product\"")),
            },
        })
    }

    /// `server.trusted_proxies` and the `forwarded_header` they name the client in.
    pub(super) fn forwarders(&self, raw: &RawConfig) -> Result<(Vec<Cidr>, ForwardedHeader), ConfigError> {
        let trusted_proxies = self.cidrs(&raw.server.trusted_proxies)?;
        let forwarded_header = match &raw.server.forwarded_header {
            None => ForwardedHeader::XForwardedFor,
            Some(h) => match h.get_ref().to_ascii_lowercase().as_str() {
                "x-forwarded-for" => ForwardedHeader::XForwardedFor,
                "forwarded" => ForwardedHeader::Forwarded,
                _ => return Err(self.spanned(h, "forwarded_header must be \"X-Forwarded-For\" or \"Forwarded\"")),
            },
        };
        Ok((trusted_proxies, forwarded_header))
    }

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
        let cpu_affinity = self.affinity(&w.cpu_affinity)?;
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
            cpu_affinity,
        })
    }

    /// `cpu_affinity`: a word, or CPUs this process may run on (a CPU the machine,
    /// its cgroup or `taskset` does not give pika is refused, as nginx does).
    fn affinity(&self, raw: &RawAffinity) -> Result<Affinity, ConfigError> {
        let at = self.table("workers");
        match raw {
            RawAffinity::Word(w) if w == "off" => Ok(Affinity::Off),
            RawAffinity::Word(w) if w == "auto" => Ok(Affinity::Auto),
            RawAffinity::Word(w) if w == "home" => Ok(Affinity::Home),
            RawAffinity::Word(w) => Err(self.error(
                at,
                format!("workers.cpu_affinity is \"home\", \"off\", \"auto\" or a list of CPUs, not {w:?}"),
            )),
            RawAffinity::Cpus(list) if list.is_empty() => {
                Err(self.error(at, "workers.cpu_affinity: an empty list of CPUs (\"off\" leaves them unbound)"))
            }
            RawAffinity::Cpus(list) => {
                let allowed = crate::base::sys::allowed_cpus();
                let cpus: Vec<usize> = list.iter().map(|&c| c as usize).collect();
                match cpus.iter().find(|c| !allowed.contains(c)) {
                    Some(c) => Err(self.error(
                        at,
                        format!("workers.cpu_affinity: CPU {c} is not one pika may run on (it may use {allowed:?})"),
                    )),
                    None => Ok(Affinity::Cpus(cpus)),
                }
            }
        }
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

/// The identity workers run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub user: String,
    pub uid: Uid,
    pub gid: Gid,
    /// The supplementary groups (`initgroups`' list), looked up when the config is
    /// loaded: workers then call `setgroups` and never load the NSS modules (whose
    /// state cost each worker 16-20 KiB of private pages, and which a chroot lacks).
    pub groups: Vec<Gid>,
}

/// How much the `Server` header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerTokens {
    /// `pika/0.1.0`
    Full,
    /// `pika`
    Product,
}

/// One `listen` entry: an address and how its connections speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listen {
    pub addr: SocketAddr,
    /// TLS (`{ addr = "…", tls = true }`).
    pub tls: bool,
    /// Each connection starts with a PROXY protocol header (v1 or v2) naming the
    /// real client (`{ addr = "…", proxy_protocol = true }`).
    pub proxy_protocol: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workers {
    pub start: u32,
    pub min_spare: u32,
    pub max_spare: u32,
    pub max: u32,
    pub max_requests: u64,
    /// Connections one worker holds at once, busy or idle (nginx's
    /// `worker_connections`); a worker holding this many takes no new ones.
    pub max_connections: u32,
    /// Address-space limit for each worker (`RLIMIT_AS`), if any.
    pub max_memory: Option<u64>,
    /// Workers run under `SCHED_BATCH` (no wake-up preemption).
    pub sched_batch: bool,
    /// Which CPU each worker is bound to, if any.
    pub cpu_affinity: Affinity,
}

/// `workers.cpu_affinity`: where the workers run. By default each event loop on its
/// own CPU while it serves clients that come in there (`Home`); or every worker
/// bound for its life to a CPU by its scoreboard slot (`Auto`, `Cpus`: nginx's
/// `worker_cpu_affinity`), so that as many event loops as CPUs each keep their own
/// core's caches; or none (`Off`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Affinity {
    /// Each event loop bound to its CPU while it holds a connection whose packets
    /// come in there (`worker::home`), unbound otherwise; the spares unbound.
    Home,
    /// Unbound: the scheduler places them.
    Off,
    /// The CPUs the master may use, one to a slot in turn.
    Auto,
    /// These CPUs, one to a slot in turn.
    Cpus(Vec<usize>),
}

impl Affinity {
    /// The CPU of the worker in scoreboard slot `slot`, given the CPUs the master
    /// may use (`allowed`); `None`: unbound.
    pub fn cpu_for(&self, slot: usize, allowed: &[usize]) -> Option<usize> {
        let list = match self {
            Affinity::Off | Affinity::Home => return None,
            Affinity::Auto => allowed,
            Affinity::Cpus(cpus) => cpus,
        };
        (!list.is_empty()).then(|| list[slot % list.len()])
    }

    /// How many event loops a generation runs: one per CPU its workers spread over
    /// (the CPUs the master may use, `allowed`, unless a list names fewer). Read
    /// before a worker binds itself: bound, it may use one.
    pub fn loops(&self, allowed: &[usize]) -> usize {
        let n = match self {
            Affinity::Off | Affinity::Auto | Affinity::Home => allowed.len(),
            Affinity::Cpus(cpus) => {
                let mut distinct = cpus.clone();
                distinct.sort_unstable();
                distinct.dedup();
                distinct.len()
            }
        };
        n.max(1)
    }
}

#[derive(Debug, Clone)]
pub struct Status {
    pub enabled: bool,
    pub path: String,
    pub allow: Vec<Cidr>,
}

/// `server.mime_types` when unset, if the file exists (else the built-in table).
pub(crate) const DEFAULT_MIME_TYPES: &str = "conf/mime.types";

/// `server.mime_types` naming the built-in table.
pub const MIME_BUILTIN: &str = "builtin";
