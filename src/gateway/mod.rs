//! Dynamic answers: CGI scripts (RFC 3875) run as child processes of the worker,
//! FastCGI applications (PHP-FPM) reached over a socket, and upstream HTTP servers
//! a proxy location passes requests to ([`upstream`]: their answers read as a
//! script's are; which of several a request goes to, and which are down for the
//! pool, [`balance`]).
//!
//! Both share what a script is told and how its answer is read: the
//! meta-variables ([`mod@env`]), which file a path runs ([`script`]), the header
//! block that opens every answer ([`answer`]) and the answer read as it comes,
//! kept whole for the client or streamed ([`output`]); an answer is kept by
//! [`spool`], which knows nothing of scripts. A CGI script is a process spawned and bounded by
//! [`child`]; a FastCGI application is spoken to in the records of [`fcgi`].

use std::path::PathBuf;
use std::time::Duration;

use crate::base::sys::ScriptLimits;

pub mod answer;
pub mod backend;
pub mod balance;
pub mod child;
pub mod env;
pub mod fcgi;
pub mod incoming;
pub mod output;
pub mod script;
pub mod spool;
pub mod upstream;
pub mod watch;

pub use watch::{ClientWatch, GLANCE, WAITING};

/// A CGI location's settings (`cgi = true`, `cgi_interpreters`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgiConfig {
    pub dir: PathBuf,
    /// The location's prefix stands for `dir` (`alias`).
    pub alias: bool,
    pub policy: script::Policy,
    /// `script_timeout`: from the start to the end of the script's output.
    pub timeout: Duration,
    pub limits: ScriptLimits,
    /// `buffering`: the answer is kept ([`spool`]) and the script let go at its
    /// end (else it is sent as it comes, the script held until the client has it).
    pub buffering: bool,
}

/// A FastCGI location's settings (`fastcgi`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FastCgiConfig {
    pub dir: PathBuf,
    pub alias: bool,
    pub addr: AppAddr,
    /// Files run for a path that ends at a directory.
    pub index: Vec<String>,
    /// `script_timeout`: from the connect to the end of the answer.
    pub timeout: Duration,
    /// `buffering`, as for CGI.
    pub buffering: bool,
}

/// A proxy location's settings (`proxy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyConfig {
    /// `proxy`: the upstream servers, as written (one or a list).
    pub upstreams: Vec<upstream::Upstream>,
    /// `proxy_backup`: those used only while every one of `upstreams` is down.
    pub backups: Vec<upstream::Upstream>,
    /// `proxy_balance`: how a request's upstream is chosen among those up.
    pub balance: balance::Balance,
    /// `proxy_max_fails` and `proxy_fail_timeout`: when one is down for the pool.
    pub health: balance::Health,
    /// `proxy_host`: the `Host` sent upstream (else the client's, else the URL's).
    pub host: Option<String>,
    /// `proxy_timeout`: for the connect, the answer's head, and between reads.
    pub timeout: Duration,
    /// `proxy_buffering`: the answer is kept ([`spool`]) and the upstream let go at
    /// its end (else it is sent as it comes).
    pub buffering: bool,
    /// `proxy_via`: pika names itself in `Via` (RFC 9110 §7.6.3), on the request
    /// and on the answer.
    pub via: bool,
    /// `proxy_upgrade`: the protocols a client may switch to through the upstream
    /// (`Upgrade` tokens, lower case, without a version); none: no upgrade is passed.
    pub upgrades: Vec<String>,
    /// `tunnel_timeout`: how long a switched connection's tunnel may carry nothing
    /// either way before both its sides are closed.
    pub tunnel_timeout: Duration,
}

/// Where a FastCGI application listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppAddr {
    Unix(PathBuf),
    /// `host:port`.
    Tcp(String),
}

impl AppAddr {
    /// `unix:/path` or `tcp:host:port`.
    pub fn parse(s: &str) -> Option<AppAddr> {
        if let Some(p) = s.strip_prefix("unix:") {
            return p.starts_with('/').then(|| AppAddr::Unix(p.into()));
        }
        let hp = s.strip_prefix("tcp:")?;
        let (host, port) = hp.rsplit_once(':')?;
        (!host.is_empty() && port.parse::<u16>().is_ok()).then(|| AppAddr::Tcp(hp.to_string()))
    }
}

impl std::fmt::Display for AppAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AppAddr::Unix(p) => write!(f, "unix:{}", p.display()),
            AppAddr::Tcp(a) => write!(f, "tcp:{a}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn application_addresses() {
        assert_eq!(AppAddr::parse("unix:/run/php/fpm.sock"), Some(AppAddr::Unix("/run/php/fpm.sock".into())));
        assert_eq!(AppAddr::parse("tcp:127.0.0.1:9000"), Some(AppAddr::Tcp("127.0.0.1:9000".into())));
        assert_eq!(AppAddr::parse("tcp:[::1]:9000"), Some(AppAddr::Tcp("[::1]:9000".into())));
        for bad in ["unix:relative", "tcp:host", "tcp::9000", "tcp:h:99999", "/run/x.sock", "http://x"] {
            assert_eq!(AppAddr::parse(bad), None, "{bad}");
        }
        assert_eq!(AppAddr::parse("tcp:localhost:9000").unwrap().to_string(), "tcp:localhost:9000");
    }
}
