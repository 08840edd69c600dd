//! The configuration: read `pika.toml`, check it, and resolve it into a `Config` that
//! the rest of pika can use without ever failing again.
//!
//! Everything that can be wrong with a config is found here, before any socket is bound
//! or any process forked, so that `pika -t` and a reload (`HUP`) catch it: syntax and
//! unknown keys (serde + toml give line and column), bad addresses, users that do not
//! exist, docroots that are missing, log formats that do not compile. Relative paths are
//! resolved against `server.root`, which defaults to the folder above the config file's
//! folder (`conf/pika.toml` → the folder holding `conf/`, `htdocs/`, `logs/`).

mod include;
mod raw;
pub mod show;
pub mod units;
mod vhost;

use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use log::LevelFilter;
use nix::unistd::{Gid, Group, Uid, User};
use raw::{RawAccessLog, RawCondition, RawConfig, RawInclude, RawListen, RawRotate, RawVhost, StatusSpec};
use toml::Spanned;

use crate::cidr::Cidr;
pub use crate::http::forwarded::ForwardedHeader;
use crate::http::mime::MimeTypes;
use crate::location::Serve;
pub use crate::log::ErrorLogTarget;
use crate::log::filter::{self, Condition, Filter};
use crate::log::format::LogFormat;
use crate::log::rotate::{Interval, Naming, Rotate};
pub use crate::sys::Symlinks;
pub use vhost::Vhost;

/// A config that cannot be used, with where and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read the config: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}:{line}:{column}: {message}")]
    Invalid { path: String, line: usize, column: usize, message: String },
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

#[derive(Debug, Clone)]
pub struct Config {
    /// The config file, absolute, so a reload reads the same file.
    pub file: PathBuf,
    /// The files it includes, in the order they were read.
    pub includes: Vec<PathBuf>,
    pub root: PathBuf,
    pub listen: Vec<Listen>,
    pub backlog: u32,
    pub pid_file: PathBuf,
    pub error_log: ErrorLogTarget,
    pub error_log_rotate: Option<Rotate>,
    pub log_level: LevelFilter,
    pub mime: MimeTypes,
    /// The file `mime` was read from; `None`: the built-in table.
    pub mime_types: Option<PathBuf>,
    pub run_as: Option<RunAs>,
    /// Workers `chroot` here before they serve; every docroot and log lies inside.
    pub chroot: Option<PathBuf>,
    /// Workers may dump core, into this folder (else they are not dumpable).
    pub coredump_dir: Option<PathBuf>,
    pub graceful_timeout: Duration,
    /// How long a graceful stop answers health checks with 503 while it still serves
    /// as usual, before it stops taking connections (`server.drain_time`).
    pub drain_time: Duration,
    pub max_open_files: Option<u64>,
    pub server_tokens: ServerTokens,
    /// Forwarders whose `X-Forwarded-For` / `Forwarded` headers name the client
    /// (`server.trusted_proxies`); empty: those headers are never read.
    pub trusted_proxies: Vec<Cidr>,
    /// The header they name the client in (`server.forwarded_header`).
    pub forwarded_header: ForwardedHeader,
    pub workers: Workers,
    pub http: Http,
    pub status: Status,
    pub vhosts: Vec<Vhost>,
    pub access_logs: Vec<AccessLog>,
    /// The certificates by SNI name; `None` when no vhost has one.
    pub tls: Option<Arc<crate::tls::Certificates>>,
    /// What the operator should hear about this config that is not an error (keys
    /// that no longer do anything): said by `pika -t` and in the error log at start
    /// and reload.
    pub notes: Vec<String>,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
}

#[derive(Debug, Clone)]
pub struct Http {
    pub header_timeout: Duration,
    pub keepalive_timeout: Duration,
    pub send_timeout: Duration,
    pub request_timeout: Duration,
    /// How long a worker trusts a cached file without looking at it again.
    pub file_check_interval: Duration,
    pub keepalive: bool,
    /// `TCP_DEFER_ACCEPT`: connections reach a worker only once they sent data.
    pub defer_accept: bool,
    pub max_keepalive_requests: u64,
    pub max_request_line: usize,
    pub max_header_size: usize,
    pub max_headers: usize,
    pub max_body_size: u64,
    pub max_ranges: usize,
}

#[derive(Debug, Clone)]
pub struct Status {
    pub enabled: bool,
    pub path: String,
    pub allow: Vec<Cidr>,
}

#[derive(Debug, Clone)]
pub struct AccessLog {
    pub path: PathBuf,
    pub format: LogFormat,
    pub filter: Filter,
    pub rotate: Option<Rotate>,
    /// Set for a log declared inside a `[[vhost]]`: only that vhost's requests.
    pub vhost: Option<usize>,
    /// Bytes of records a worker holds back for one write (0: each record at once),
    /// and the longest a record waits while the worker is busy.
    pub buffer: usize,
    pub flush: Duration,
    /// The included file that declares it (`None`: the main file).
    pub source: Option<PathBuf>,
}

/// `[[access_log]] buffer` unless set: lighttpd's 8 KiB, ~40 combined records.
pub const DEFAULT_LOG_BUFFER: usize = 8192;
/// `[[access_log]] flush` unless set.
pub const DEFAULT_LOG_FLUSH: Duration = Duration::from_secs(1);
/// `server.mime_types` when unset, if the file exists (else the built-in table).
const DEFAULT_MIME_TYPES: &str = "conf/mime.types";
/// `server.mime_types` naming the built-in table.
pub const MIME_BUILTIN: &str = "builtin";
/// The largest `buffer` accepted.
const MAX_LOG_BUFFER: u64 = 1 << 20;

/// Reads and resolves a config file.
pub fn load(file: &Path) -> Result<Config, ConfigError> {
    let abs = if file.is_absolute() {
        file.to_path_buf()
    } else {
        std::env::current_dir().map(|d| d.join(file)).unwrap_or_else(|_| file.to_path_buf())
    };
    let text = std::fs::read_to_string(&abs)
        .map_err(|source| ConfigError::Read { path: file.display().to_string(), source })?;
    parse(&text, &abs)
}

/// Parses and resolves config text; `file` names it in errors, anchors `root`, and
/// is where its `include` patterns start.
pub fn parse(text: &str, file: &Path) -> Result<Config, ConfigError> {
    let ctx = Ctx { text, file };
    let raw: RawConfig = ctx.toml()?;
    let included = ctx.includes(&raw)?;
    ctx.resolve(raw, &included)
}

/// One included file, read and parsed.
struct Included {
    file: PathBuf,
    text: String,
    raw: RawInclude,
}

impl Included {
    fn ctx(&self) -> Ctx<'_> {
        Ctx { text: &self.text, file: &self.file }
    }
}

/// The vhosts and logs of one file (`file`: an included one, or `None`: the main).
struct Source<'a> {
    ctx: Ctx<'a>,
    vhosts: &'a [RawVhost],
    logs: &'a [RawAccessLog],
    file: Option<&'a Path>,
}

/// A config text and its file, for errors with a position.
#[derive(Clone, Copy)]
struct Ctx<'a> {
    text: &'a str,
    file: &'a Path,
}

impl Ctx<'_> {
    fn toml<T: serde::de::DeserializeOwned>(&self) -> Result<T, ConfigError> {
        toml::from_str(self.text).map_err(|e| self.error(e.span().unwrap_or(0..0), e.message().to_string()))
    }

    /// Reads every file the `include` patterns name (see `include.rs`); an error in
    /// one is reported with that file's name, line and column.
    fn includes(&self, raw: &RawConfig) -> Result<Vec<Included>, ConfigError> {
        let base = self.file.parent().unwrap_or(Path::new("/"));
        let mut out: Vec<Included> = Vec::new();
        for pattern in &raw.include {
            let files = include::expand(base, pattern.get_ref())
                .map_err(|e| self.spanned(pattern, format!("include {:?}: {e}", pattern.get_ref())))?;
            for file in files {
                let same = |p: &Path| std::fs::canonicalize(p).ok() == std::fs::canonicalize(&file).ok();
                if same(self.file) {
                    return Err(self.spanned(pattern, format!("include {:?} names this file", pattern.get_ref())));
                }
                if out.iter().any(|i| same(&i.file)) {
                    return Err(self.spanned(pattern, format!("{} is included twice", file.display())));
                }
                let text = std::fs::read_to_string(&file)
                    .map_err(|e| self.spanned(pattern, format!("include {}: {e}", file.display())))?;
                let raw = Ctx { text: &text, file: &file }.toml()?;
                out.push(Included { file, text, raw });
            }
        }
        Ok(out)
    }

    /// `file:line` of a span, for messages that are not errors.
    fn position(&self, span: Range<usize>) -> String {
        let line = self.text[..span.start.min(self.text.len())].matches('\n').count() + 1;
        format!("{}:{line}", self.file.display())
    }

    fn error(&self, span: Range<usize>, message: impl Into<String>) -> ConfigError {
        let before = &self.text[..span.start.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
        ConfigError::Invalid { path: self.file.display().to_string(), line, column, message: message.into() }
    }

    fn spanned<T>(&self, v: &Spanned<T>, message: impl Into<String>) -> ConfigError {
        self.error(v.span(), message)
    }

    /// Position of a table header, for errors about keys that may have been defaulted.
    fn table(&self, name: &str) -> Range<usize> {
        let header = format!("[{name}]");
        let at = self.text.find(&header).unwrap_or(0);
        at..at
    }

    fn resolve(&self, raw: RawConfig, included: &[Included]) -> Result<Config, ConfigError> {
        let conf_dir = self.file.parent().unwrap_or(Path::new("/"));
        let root = match &raw.server.root {
            Some(r) => absolute(conf_dir, r),
            None => conf_dir.parent().unwrap_or(conf_dir).to_path_buf(),
        };
        let at_root = |p: &str| absolute(&root, p);

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

        let log_level = match &raw.server.log_level {
            None => LevelFilter::Info,
            Some(l) => l
                .get_ref()
                .parse::<LevelFilter>()
                .map_err(|_| self.spanned(l, "log_level must be one of off, error, warn, info, debug, trace"))?,
        };
        let mut error_log = parse_error_log(&raw.server.error_log, &root)
            .ok_or_else(|| self.error(self.table("server"), format!("bad error_log {:?}", raw.server.error_log)))?;
        if let (ErrorLogTarget::Syslog(_, socket), Some(path)) = (&mut error_log, &raw.server.syslog_socket) {
            *socket = Some(absolute(&root, path));
        }

        let (mime, mime_types) = self.mime(&raw, &root)?;

        let run_as = self.run_as(&raw)?;
        let server_tokens = match &raw.server.server_tokens {
            None => ServerTokens::Full,
            Some(t) => match t.get_ref().as_str() {
                "full" => ServerTokens::Full,
                "product" => ServerTokens::Product,
                _ => return Err(self.spanned(t, "server_tokens must be \"full\" or \"product\"")),
            },
        };

        let workers = self.workers(&raw)?;
        let h = &raw.http;
        let http = Http {
            header_timeout: h.header_timeout.0,
            keepalive_timeout: h.keepalive_timeout.0,
            send_timeout: h.send_timeout.0,
            request_timeout: h.request_timeout.0,
            file_check_interval: h.file_check_interval.0,
            keepalive: h.keepalive,
            defer_accept: h.defer_accept,
            max_keepalive_requests: h.max_keepalive_requests,
            max_request_line: h.max_request_line.0 as usize,
            max_header_size: h.max_header_size.0 as usize,
            max_headers: h.max_headers as usize,
            max_body_size: h.max_body_size.0,
            max_ranges: h.max_ranges as usize,
        };
        for (name, d) in [
            ("header_timeout", http.header_timeout),
            ("keepalive_timeout", http.keepalive_timeout),
            ("send_timeout", http.send_timeout),
            ("request_timeout", http.request_timeout),
        ] {
            if d.is_zero() {
                return Err(self.error(self.table("http"), format!("http.{name} must be more than zero")));
            }
        }
        if http.max_request_line < 16
            || http.max_header_size < http.max_request_line
            || http.max_headers == 0
            || http.max_headers > crate::http::request::MAX_HEADERS
        {
            return Err(self.error(
                self.table("http"),
                format!(
                    "http limits: max_request_line >= 16, max_header_size >= max_request_line, max_headers from 1 to {}",
                    crate::http::request::MAX_HEADERS
                ),
            ));
        }

        let mut trusted_proxies = Vec::new();
        for a in &raw.server.trusted_proxies {
            trusted_proxies.push(
                Cidr::parse(a.get_ref())
                    .ok_or_else(|| self.spanned(a, format!("bad address range {:?}", a.get_ref())))?,
            );
        }
        let forwarded_header = match &raw.server.forwarded_header {
            None => ForwardedHeader::XForwardedFor,
            Some(h) => match h.get_ref().to_ascii_lowercase().as_str() {
                "x-forwarded-for" => ForwardedHeader::XForwardedFor,
                "forwarded" => ForwardedHeader::Forwarded,
                _ => return Err(self.spanned(h, "forwarded_header must be \"X-Forwarded-For\" or \"Forwarded\"")),
            },
        };
        let mut allow = Vec::new();
        for a in &raw.status.allow {
            allow.push(
                Cidr::parse(a.get_ref())
                    .ok_or_else(|| self.spanned(a, format!("bad address range {:?}", a.get_ref())))?,
            );
        }
        if allow.is_empty() {
            // Loopback only unless the operator says otherwise, as mod_status is usually set up.
            allow = vec![
                Cidr::parse("127.0.0.0/8").unwrap_or_else(|| unreachable!()),
                Cidr::parse("::1").unwrap_or_else(|| unreachable!()),
            ];
        }
        if !raw.status.path.starts_with('/') {
            return Err(self.error(self.table("status"), "status.path must start with '/'"));
        }
        let status = Status { enabled: raw.status.enabled, path: raw.status.path.clone(), allow };

        // The main file's vhosts and logs first, then each included file's in turn:
        // the first vhost of all is the default.
        let main = Source { ctx: *self, vhosts: &raw.vhost, logs: &raw.access_log, file: None };
        let sources: Vec<Source<'_>> = std::iter::once(main)
            .chain(included.iter().map(|i| Source {
                ctx: i.ctx(),
                vhosts: &i.raw.vhost,
                logs: &i.raw.access_log,
                file: Some(&i.file),
            }))
            .collect();
        let tls_listener = raw.server.listen.iter().zip(&listen).find(|(_, l)| l.tls).map(|(raw, _)| raw);
        let mut vhosts = Vec::new();
        let mut vhost_logs = Vec::new();
        let mut notes = self.notes(&raw);
        for s in &sources {
            for v in s.vhosts {
                let mut vhost = s.ctx.vhost(v, &root, tls_listener.is_some())?;
                vhost.source = s.file.map(Path::to_path_buf);
                s.ctx.locations(&v.location, &mut vhost, &root, &status, &mut notes)?;
                for a in &v.access_log {
                    vhost_logs.push(s.ctx.access_log(a, &root, Some(vhosts.len()), s.file)?);
                }
                vhosts.push(vhost);
            }
        }
        if vhosts.is_empty() {
            return Err(self.error(0..0, "at least one [[vhost]] is needed (the first is the default)"));
        }
        let tls = crate::tls::Certificates::new(&vhosts).map(Arc::new);
        if let Some(l) = tls_listener
            && tls.is_none()
        {
            return Err(self.spanned(l, "a tls listener needs a certificate: set tls_cert and tls_key in a [[vhost]]"));
        }
        let mut access_logs = Vec::new();
        for s in &sources {
            for a in s.logs {
                access_logs.push(s.ctx.access_log(a, &root, None, s.file)?);
            }
        }
        access_logs.append(&mut vhost_logs);
        let error_log_rotate = raw.server.error_log_rotate.as_ref().map(|r| self.rotate(r)).transpose()?;

        let coredump_dir = match &raw.server.coredump_dir {
            None => None,
            Some(d) => {
                let dir = std::fs::canonicalize(absolute(&root, d.get_ref()))
                    .map_err(|e| self.spanned(d, format!("coredump_dir {:?}: {e}", d.get_ref())))?;
                if !dir.is_dir() {
                    return Err(self.spanned(d, format!("coredump_dir {} is not a directory", dir.display())));
                }
                Some(dir)
            }
        };
        let chroot = match &raw.server.chroot {
            None => None,
            Some(c) => {
                let dir = std::fs::canonicalize(absolute(&root, c.get_ref()))
                    .map_err(|e| self.spanned(c, format!("chroot {:?}: {e}", c.get_ref())))?;
                let logs = access_logs.iter().map(|a| &a.path).chain(match &error_log {
                    ErrorLogTarget::File(p) => Some(p),
                    _ => None,
                });
                for p in vhosts.iter().flat_map(Vhost::dirs).chain(logs).chain(&coredump_dir) {
                    if !p.starts_with(&dir) {
                        return Err(self.spanned(
                            c,
                            format!(
                                "{} is outside the chroot {}: workers could not reach it",
                                p.display(),
                                dir.display()
                            ),
                        ));
                    }
                }
                Some(dir)
            }
        };

        // Files the master writes as root must not lie where others may plant a link.
        let pid_file = at_root(&raw.server.pid_file);
        crate::safe_files::check_folder(&pid_file).map_err(|e| self.error(self.table("server"), e))?;
        if let ErrorLogTarget::File(p) = &error_log {
            crate::safe_files::check_folder(p).map_err(|e| self.error(self.table("server"), e))?;
        }
        for a in &access_logs {
            crate::safe_files::check_folder(&a.path).map_err(|e| self.error(self.table("access_log"), e))?;
        }

        Ok(Config {
            chroot,
            coredump_dir,
            file: self.file.to_path_buf(),
            includes: included.iter().map(|i| i.file.clone()).collect(),
            listen,
            backlog: raw.server.backlog.max(1),
            pid_file,
            error_log,
            error_log_rotate,
            log_level,
            mime,
            mime_types,
            run_as,
            graceful_timeout: raw.server.graceful_timeout.0,
            drain_time: raw.server.drain_time.0,
            max_open_files: raw.server.max_open_files,
            server_tokens,
            trusted_proxies,
            forwarded_header,
            workers,
            http,
            status,
            vhosts,
            access_logs,
            tls,
            root,
            notes,
        })
    }

    /// Keys that are read but no longer apply.
    fn notes(&self, raw: &RawConfig) -> Vec<String> {
        let mut notes = Vec::new();
        if raw.http.body_timeout.is_some() || raw.http.body_min_rate.is_some() {
            notes.push(format!(
                "{}: http.body_timeout and http.body_min_rate no longer apply and can be removed: \
                 pika answers without reading request bodies (docs/keepalive.md)",
                self.file.display()
            ));
        }
        notes
    }

    /// The content-type table: the file `mime_types` names (it must be readable), or
    /// with no `mime_types` the default `conf/mime.types` if it exists, else the
    /// built-in copy of it; `mime_types = "builtin"` asks for that copy by name.
    fn mime(&self, raw: &RawConfig, root: &Path) -> Result<(MimeTypes, Option<PathBuf>), ConfigError> {
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

    fn access_log(
        &self,
        a: &RawAccessLog,
        root: &Path,
        vhost: Option<usize>,
        source: Option<&Path>,
    ) -> Result<AccessLog, ConfigError> {
        let format = match &a.format {
            None => LogFormat::parse("combined").map_err(|e| self.error(0..0, e))?,
            Some(f) => {
                LogFormat::parse(f.get_ref()).map_err(|e| self.spanned(f, format!("bad access log format: {e}")))?
            }
        };
        let conditions = |list: &Vec<Spanned<RawCondition>>| -> Result<Vec<Condition>, ConfigError> {
            list.iter().map(|c| self.condition(c)).collect()
        };
        let mut filter = Filter::default();
        if let Some(include) = &a.include {
            filter.include = conditions(include)?;
        }
        if let Some(exclude) = &a.exclude {
            filter.exclude = conditions(exclude)?;
        }
        let rotate = a.rotate.as_ref().map(|r| self.rotate(r)).transpose()?;
        let buffer = match &a.buffer {
            None => DEFAULT_LOG_BUFFER,
            Some(b) if b.get_ref().0 > MAX_LOG_BUFFER => {
                return Err(self.spanned(b, "access log buffer above 1MiB"));
            }
            Some(b) => b.get_ref().0 as usize,
        };
        let flush = a.flush.as_ref().map_or(DEFAULT_LOG_FLUSH, |f| f.0);
        Ok(AccessLog {
            path: absolute(root, &a.path),
            format,
            filter,
            rotate,
            vhost,
            buffer,
            flush,
            source: source.map(Path::to_path_buf),
        })
    }

    fn condition(&self, c: &Spanned<RawCondition>) -> Result<Condition, ConfigError> {
        let raw = c.get_ref();
        let bad = |what: &str| self.spanned(c, what.to_string());
        let regex = |p: &Option<String>| -> Result<Option<regex_lite::Regex>, ConfigError> {
            p.as_ref()
                .map(|p| regex_lite::Regex::new(p).map_err(|e| bad(&format!("bad pattern {p:?}: {e}"))))
                .transpose()
        };
        let cond = Condition {
            internal: raw.internal,
            health: raw.health,
            client: raw
                .client
                .as_ref()
                .map(|s| Cidr::parse(s).ok_or_else(|| bad(&format!("bad address range {s:?}"))))
                .transpose()?,
            method: raw.method.clone(),
            path: raw.path.clone(),
            path_pattern: regex(&raw.path_pattern)?,
            status: match &raw.status {
                None => None,
                Some(StatusSpec::Code(n)) => Some((*n, *n)),
                Some(StatusSpec::Text(t)) => Some(
                    filter::parse_status(t)
                        .ok_or_else(|| bad(&format!("bad status {t:?} (404, \"4xx\", \"400-499\")")))?,
                ),
            },
            user_agent: regex(&raw.user_agent)?,
            header: raw.header.clone(),
        };
        if cond.is_empty() {
            return Err(bad("an empty condition would match every request"));
        }
        Ok(cond)
    }

    fn rotate(&self, r: &Spanned<RawRotate>) -> Result<Rotate, ConfigError> {
        let raw = r.get_ref();
        let interval = match &raw.interval {
            None => None,
            Some(i) => Some(Interval::parse(i).ok_or_else(|| {
                self.spanned(r, format!("bad rotate.interval {i:?} (hourly, daily, or a duration like \"30m\")"))
            })?),
        };
        let size = raw.size.map(|b| b.0);
        if interval.is_none() && size.is_none() {
            return Err(self.spanned(r, "rotate needs an interval, a size, or both"));
        }
        let naming = match raw.naming.as_deref() {
            None | Some("numbered") => Naming::Numbered,
            Some(p) if p.contains('%') => Naming::Pattern(p.to_string()),
            Some(p) => {
                return Err(self.spanned(r, format!("rotate.naming {p:?}: \"numbered\" or a pattern with % fields")));
            }
        };
        Ok(Rotate { interval, size, keep: raw.keep.max(1), naming, local_time: raw.local_time, compress: raw.compress })
    }

    fn workers(&self, raw: &RawConfig) -> Result<Workers, ConfigError> {
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

    fn run_as(&self, raw: &RawConfig) -> Result<Option<RunAs>, ConfigError> {
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

impl Config {
    /// The logs pika rotates by itself: access logs with a `rotate`, then the error
    /// log if it is a file with `error_log_rotate`.
    pub fn rotated_logs(&self) -> impl Iterator<Item = (&Path, &Rotate)> {
        let error_log = match (&self.error_log, &self.error_log_rotate) {
            (ErrorLogTarget::File(p), Some(r)) => Some((p.as_path(), r)),
            _ => None,
        };
        self.access_logs.iter().filter_map(|a| Some((a.path.as_path(), a.rotate.as_ref()?))).chain(error_log)
    }

    /// The same config as seen from inside `chroot`: docroots and log paths without
    /// the jail's prefix. Workers switch to it after they `chroot`.
    pub fn jailed(&self, jail: &Path) -> Config {
        let inside = |p: &Path| Path::new("/").join(p.strip_prefix(jail).unwrap_or(p));
        let mut c = self.clone();
        for v in &mut c.vhosts {
            v.root = inside(&v.root);
            for l in &mut v.locations.list {
                if let Serve::Files(f) = &mut l.serve {
                    f.dir = inside(&f.dir);
                }
            }
        }
        for a in &mut c.access_logs {
            a.path = inside(&a.path);
        }
        if let ErrorLogTarget::File(p) = &mut c.error_log {
            *p = inside(p);
        }
        if let Some(d) = &mut c.coredump_dir {
            *d = inside(d);
        }
        c
    }
}

fn absolute(base: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() { p.to_path_buf() } else { base.join(p) }
}

/// `"8080"` (all IPv4 addresses), `"127.0.0.1:8080"`, `"[::1]:8080"`, `"*:8080"`.
fn parse_listen(s: &str) -> Option<SocketAddr> {
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

fn parse_error_log(s: &str, root: &Path) -> Option<ErrorLogTarget> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("conf")).unwrap();
        std::fs::create_dir_all(dir.path().join("htdocs")).unwrap();
        std::fs::write(dir.path().join("conf/mime.types"), "text/html html\n").unwrap();
        dir
    }

    fn try_parse(dir: &tempfile::TempDir, text: &str) -> Result<Config, ConfigError> {
        parse(text, &dir.path().join("conf/pika.toml"))
    }

    const MINIMAL: &str = "[server]\nlisten = [\"127.0.0.1:8080\"]\n[[vhost]]\nroot = \"htdocs\"\n";

    #[test]
    fn minimal_config_gets_defaults() {
        let dir = setup();
        let c = try_parse(&dir, MINIMAL).unwrap();
        assert_eq!(c.root, dir.path());
        assert_eq!(
            c.listen,
            vec![Listen { addr: "127.0.0.1:8080".parse().unwrap(), tls: false, proxy_protocol: false }]
        );
        assert_eq!(
            c.workers,
            Workers {
                start: 2,
                min_spare: 1,
                max_spare: 3,
                max: 64,
                max_requests: 0,
                max_connections: 1024,
                max_memory: None,
                sched_batch: true
            }
        );
        assert_eq!(c.pid_file, dir.path().join("logs/pika.pid"));
        assert!(matches!(&c.error_log, ErrorLogTarget::File(p) if *p == dir.path().join("logs/error.log")));
        assert_eq!(c.vhosts[0].index, vec!["index.html".to_string()]);
        assert_eq!(c.http.keepalive_timeout, Duration::from_secs(60));
        assert_eq!(c.backlog, 511);
    }

    #[test]
    fn unknown_key_is_an_error_with_position() {
        let dir = setup();
        let text = "[server]\nlisten = [\"127.0.0.1:8080\"]\nlisen = 1\n[[vhost]]\nroot = \"htdocs\"\n";
        match try_parse(&dir, text) {
            Err(ConfigError::Invalid { line, column, message, .. }) => {
                assert_eq!((line, column), (3, 1));
                assert!(message.contains("unknown field"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn semantic_errors_point_at_the_value() {
        let dir = setup();
        let text = "[server]\nlisten = [\"127.0.0.1:8080\", \"nope\"]\n[[vhost]]\nroot = \"htdocs\"\n";
        let err = try_parse(&dir, text).unwrap_err().to_string();
        assert!(err.contains("pika.toml:2:29: bad listen address"), "{err}");

        let text = "[server]\nlisten = [\"8080\"]\n[[vhost]]\nroot = \"missing\"\n";
        let err = try_parse(&dir, text).unwrap_err().to_string();
        assert!(err.contains(":4:8: vhost root"), "{err}");

        let text = "[server]\nlisten = [\"8080\"]\nuser = \"no-such-user-here\"\n[[vhost]]\nroot = \"htdocs\"\n";
        let err = try_parse(&dir, text).unwrap_err().to_string();
        assert!(err.contains(":3:8: no such user"), "{err}");
    }

    #[test]
    fn mime_types_file_default_or_builtin() {
        let dir = setup();
        // No key: conf/mime.types under root when it exists (setup writes a one-line one).
        let c = try_parse(&dir, MINIMAL).unwrap();
        assert_eq!(c.mime_types, Some(dir.path().join("conf/mime.types")));
        assert_eq!((c.mime.len(), c.mime.lookup(b"a.css")), (1, "application/octet-stream"));
        // No key and no file: the built-in table, so a config written anywhere starts.
        std::fs::remove_file(dir.path().join("conf/mime.types")).unwrap();
        let c = try_parse(&dir, MINIMAL).unwrap();
        assert_eq!((c.mime_types.as_deref(), c.mime.lookup(b"a.css")), (None, "text/css"));
        // Asked for by name.
        let text = MINIMAL.replace("listen", "mime_types = \"builtin\"\nlisten");
        assert_eq!(try_parse(&dir, &text).unwrap().mime.lookup(b"x.epub"), "application/epub+zip");
        // A file that is named must be there: the error points at the key's value.
        let text = MINIMAL.replace("listen", "mime_types = \"conf/mime.types\"\nlisten");
        let err = try_parse(&dir, &text).unwrap_err().to_string();
        assert!(err.contains("pika.toml:2:14: cannot read mime_types"), "{err}");
    }

    #[test]
    fn includes_add_vhosts_and_logs_in_order() {
        let dir = setup();
        let d = dir.path();
        std::fs::create_dir_all(d.join("conf/conf.d")).unwrap();
        std::fs::create_dir_all(d.join("www/b")).unwrap();
        std::fs::create_dir_all(d.join("www/a")).unwrap();
        let write = |name: &str, text: &str| std::fs::write(d.join("conf/conf.d").join(name), text).unwrap();
        write(
            "20-b.toml",
            "[[vhost]]\nserver_names = [\"b.test\"]\nroot = \"www/b\"\n\
             [[vhost.access_log]]\npath = \"logs/b.log\"\n",
        );
        write("10-a.toml", "[[vhost]]\nserver_names = [\"a.test\"]\nroot = \"www/a\"\n");
        write("30-logs.toml", "[[access_log]]\npath = \"logs/all.json\"\n");
        write("notes.txt", "not toml");
        let text = format!("include = [\"conf.d/*.toml\"]\n{MINIMAL}[[access_log]]\npath = \"logs/main.log\"\n");
        let c = try_parse(&dir, &text).unwrap();
        let names: Vec<&str> = c.vhosts.iter().map(|v| v.server_names.first().map_or("", |n| n)).collect();
        assert_eq!(names, ["", "a.test", "b.test"], "the main file's vhost stays the default");
        assert_eq!(c.vhosts[2].source, Some(d.join("conf/conf.d/20-b.toml")));
        assert_eq!(c.vhosts[0].source, None);
        let logs: Vec<(String, Option<usize>)> =
            c.access_logs.iter().map(|a| (a.path.strip_prefix(d).unwrap().display().to_string(), a.vhost)).collect();
        assert_eq!(
            logs,
            [("logs/main.log".into(), None), ("logs/all.json".into(), None), ("logs/b.log".into(), Some(2))]
        );
        assert_eq!(c.includes.len(), 3);

        // A main file with no vhost of its own: the first included one is the default.
        let text = "include = [\"conf.d/10-a.toml\"]\n[server]\nlisten = [\"8080\"]\n";
        assert_eq!(try_parse(&dir, text).unwrap().vhosts[0].server_names, ["a.test"]);
    }

    #[test]
    fn include_errors_name_the_included_file() {
        let dir = setup();
        let d = dir.path();
        std::fs::create_dir_all(d.join("conf/conf.d")).unwrap();
        let text = format!("include = [\"conf.d/*.toml\"]\n{MINIMAL}");
        let err_with = |name: &str, body: &str| {
            let f = d.join("conf/conf.d").join(name);
            std::fs::write(&f, body).unwrap();
            let e = try_parse(&dir, &text).unwrap_err().to_string();
            std::fs::remove_file(&f).unwrap();
            e
        };
        let e = err_with("x.toml", "[[vhost]]\nroot = \"htdocs\"\nautoindex = yes\n");
        assert!(e.contains("conf.d/x.toml:3:13:"), "{e}");
        let e = err_with("x.toml", "\n[server]\nlisten = [\"1\"]\n");
        assert!(e.contains("conf.d/x.toml:2:2: unknown field `server`"), "{e}");
        let e = err_with("x.toml", "include = [\"y.toml\"]\n");
        assert!(e.contains("conf.d/x.toml:1:1: unknown field `include`"), "{e}");
        let e = err_with("x.toml", "[[vhost]]\nserver_names = [\"x\"]\nroot = \"missing\"\n");
        assert!(e.contains("conf.d/x.toml:3:8: vhost root"), "{e}");
        let e = err_with("x.toml", "[[access_log]]\npath = \"a.log\"\nformat = \"%Z\"\n");
        assert!(e.contains("conf.d/x.toml:3:10: bad access log format"), "{e}");

        // Errors in the pattern itself point at the main file.
        let e = try_parse(&dir, &format!("include = [\"conf.d/none.toml\"]\n{MINIMAL}")).unwrap_err().to_string();
        assert!(e.contains("pika.toml:1:12: include \"conf.d/none.toml\"") && e.contains("No such file"), "{e}");
        let text = format!("include = [\"*.toml\"]\n{MINIMAL}");
        std::fs::write(d.join("conf/pika.toml"), &text).unwrap();
        let e = try_parse(&dir, &text).unwrap_err().to_string();
        assert!(e.contains("names this file"), "{e}");
        std::fs::write(d.join("conf/conf.d/a.toml"), "").unwrap();
        let e = try_parse(&dir, &format!("include = [\"conf.d/*.toml\", \"conf.d/a.toml\"]\n{MINIMAL}"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("pika.toml:1:29:") && e.contains("included twice"), "{e}");
        // A folder with nothing in it, or none at all, includes nothing.
        let text = format!("include = [\"conf.d/*.conf\", \"sites-enabled/*\"]\n{MINIMAL}");
        assert!(try_parse(&dir, &text).unwrap().includes.is_empty());
    }

    #[test]
    fn sched_batch_can_be_turned_off() {
        let dir = setup();
        let text = format!("{MINIMAL}[workers]\nsched_batch = false\n");
        assert!(!try_parse(&dir, &text).unwrap().workers.sched_batch);
    }

    #[test]
    fn workers_band_is_checked_and_widened() {
        let dir = setup();
        let text = format!("{MINIMAL}[workers]\nmin_spare = 4\nmax_spare = 2\n");
        assert!(try_parse(&dir, &text).unwrap_err().to_string().contains("min_spare"));
        let text = format!("{MINIMAL}[workers]\nmin_spare = 3\nmax_spare = 3\nstart = 900\nmax = 8\n");
        let w = try_parse(&dir, &text).unwrap().workers;
        assert_eq!((w.start, w.min_spare, w.max_spare, w.max), (8, 3, 4, 8));
        // Found by the config fuzzer: this once overflowed computing max_spare.
        let text = format!("{MINIMAL}[workers]\nmin_spare = 4294967295\nmax_spare = 4294967295\n");
        let w = try_parse(&dir, &text).unwrap().workers;
        assert_eq!((w.min_spare, w.max_spare), (64, 4294967295));
        let text = format!("{MINIMAL}[workers]\nmax = 1\nmin_spare = 2\n");
        let w = try_parse(&dir, &text).unwrap().workers;
        assert_eq!((w.start, w.min_spare, w.max_spare, w.max), (1, 1, 3, 1));
    }

    #[test]
    fn access_log_buffer_and_flush() {
        let dir = setup();
        let log = |extra: &str| format!("{MINIMAL}[[access_log]]\npath = \"a.log\"\n{extra}");
        let a = &try_parse(&dir, &log("")).unwrap().access_logs[0];
        assert_eq!((a.buffer, a.flush), (DEFAULT_LOG_BUFFER, DEFAULT_LOG_FLUSH));
        let a = &try_parse(&dir, &log("buffer = 0\nflush = \"250ms\"\n")).unwrap().access_logs[0];
        assert_eq!((a.buffer, a.flush), (0, Duration::from_millis(250)));
        let a = &try_parse(&dir, &log("buffer = \"64KiB\"\n")).unwrap().access_logs[0];
        assert_eq!(a.buffer, 65536);
        let e = try_parse(&dir, &log("buffer = \"2MiB\"\n")).unwrap_err().to_string();
        assert!(e.contains("buffer above") && e.contains(":7:10:"), "{e}");
    }

    #[test]
    fn listen_forms() {
        assert_eq!(parse_listen("8080"), Some("0.0.0.0:8080".parse().unwrap()));
        assert_eq!(parse_listen("*:81"), Some("0.0.0.0:81".parse().unwrap()));
        assert_eq!(parse_listen("[::1]:8080"), Some("[::1]:8080".parse().unwrap()));
        assert_eq!(parse_listen("localhost:8080"), None);
    }

    #[test]
    fn listen_entries_are_strings_or_tables() {
        let dir = setup();
        let text = "[server]\nlisten = [\"127.0.0.1:8080\", { addr = \"127.0.0.1:8443\", tls = true }, { addr = \"[::1]:8081\" }]\n[[vhost]]\nroot = \"htdocs\"\ntls_cert = \"c.pem\"\ntls_key = \"c.key\"\n";
        crate::tls::test_certs::leaf(&["localhost"], -1, 30, None).write(dir.path(), "c");
        let c = try_parse(&dir, text).unwrap();
        let got: Vec<(String, bool)> = c.listen.iter().map(|l| (l.addr.to_string(), l.tls)).collect();
        assert_eq!(
            got,
            [("127.0.0.1:8080".into(), false), ("127.0.0.1:8443".into(), true), ("[::1]:8081".into(), false)]
        );
        // A typo in a table is an error at its place, naming the keys there are.
        let text = "[server]\nlisten = [{ addr = \"127.0.0.1:8443\", tsl = true }]\n[[vhost]]\nroot = \"htdocs\"\n";
        let e = try_parse(&dir, text).unwrap_err().to_string();
        assert!(
            e.contains(":2:") && e.contains("unknown field `tsl`, expected one of `addr`, `tls`, `proxy_protocol`"),
            "{e}"
        );
        let text = "[server]\nlisten = [{ tls = true }]\n[[vhost]]\nroot = \"htdocs\"\n";
        let e = try_parse(&dir, text).unwrap_err().to_string();
        assert!(e.contains("missing field `addr`"), "{e}");
        let text = "[server]\nlisten = [8080]\n[[vhost]]\nroot = \"htdocs\"\n";
        let e = try_parse(&dir, text).unwrap_err().to_string();
        assert!(e.contains("an address (\"127.0.0.1:8080\") or a table"), "{e}");
        let text = "[server]\nlisten = [\"127.0.0.1:1\", { addr = \"127.0.0.1:1\", tls = true }]\n[[vhost]]\nroot = \"htdocs\"\n";
        let e = try_parse(&dir, text).unwrap_err().to_string();
        assert!(e.contains("given twice"), "{e}");
        let text = "[server]\nlisten = [\"127.0.0.1:0\", \"127.0.0.1:0\"]\n[[vhost]]\nroot = \"htdocs\"\n";
        assert_eq!(try_parse(&dir, text).unwrap().listen.len(), 2, "port 0: two free ports");
    }

    /// A config with a TLS listener and the given `[[vhost]]` blocks.
    fn tls_config(vhosts: &str) -> String {
        format!("[server]\nlisten = [\"127.0.0.1:8080\", {{ addr = \"127.0.0.1:8443\", tls = true }}]\n{vhosts}")
    }

    #[test]
    fn certificates_per_vhost_and_the_default() {
        use crate::tls::test_certs::leaf;
        let dir = setup();
        leaf(&["a.example"], -1, 30, None).write(dir.path(), "a");
        leaf(&["b.example", "*.b.example"], -1, 30, None).write(dir.path(), "b");
        let text = tls_config(
            "[[vhost]]\nroot = \"htdocs\"\n\
             [[vhost]]\nserver_names = [\"a.example\"]\nroot = \"htdocs\"\ntls_cert = \"a.pem\"\ntls_key = \"a.key\"\n\
             [[vhost]]\nserver_names = [\"b.example\", \"*.b.example\"]\nroot = \"htdocs\"\ntls_cert = \"b.pem\"\ntls_key = \"b.key\"\nhttps_redirect = 308\nhsts = \"max-age=31536000; includeSubDomains\"\n",
        );
        let c = try_parse(&dir, &text).unwrap();
        let certs = c.tls.as_ref().unwrap();
        let a = c.vhosts[1].tls.as_ref().unwrap();
        let b = c.vhosts[2].tls.as_ref().unwrap();
        assert!(std::sync::Arc::ptr_eq(certs.for_name(Some("a.example")), &a.key));
        assert!(std::sync::Arc::ptr_eq(certs.for_name(Some("B.Example")), &b.key));
        assert!(std::sync::Arc::ptr_eq(certs.for_name(Some("www.b.example")), &b.key));
        // No SNI, an unknown name, a vhost without a certificate: the first certificate.
        assert!(std::sync::Arc::ptr_eq(certs.for_name(None), &a.key));
        assert!(std::sync::Arc::ptr_eq(certs.for_name(Some("c.example")), &a.key));
        assert_eq!(a.cert_file, dir.path().join("a.pem"));
        assert_eq!(
            (c.vhosts[2].https_redirect, c.vhosts[2].hsts.as_deref()),
            (Some(308), Some("max-age=31536000; includeSubDomains"))
        );
        assert_eq!((c.vhosts[1].https_redirect, c.vhosts[1].hsts.as_deref()), (None, None));
    }

    #[test]
    fn tls_mistakes_point_at_the_key_and_name_the_file() {
        use crate::tls::test_certs::leaf;
        let dir = setup();
        leaf(&["a.example"], -1, 30, None).write(dir.path(), "a");
        leaf(&["b.example"], -1, 30, None).write(dir.path(), "b");
        leaf(&["a.example"], -30, -1, None).write(dir.path(), "old");
        let vhost =
            |extra: &str| tls_config(&format!("[[vhost]]\nserver_names = [\"a.example\"]\nroot = \"htdocs\"\n{extra}"));
        let err = |extra: &str| try_parse(&dir, &vhost(extra)).unwrap_err().to_string();
        let d = dir.path().display();

        let e = try_parse(&dir, &vhost("")).unwrap_err().to_string();
        assert!(e.contains("pika.toml:2:29: a tls listener needs a certificate"), "{e}");
        let e = err("tls_cert = \"a.pem\"\n");
        assert!(e.contains(":6:12: tls_cert needs tls_key"), "{e}");
        let e = err("tls_cert = \"a.pem\"\ntls_key = \"b.key\"\n");
        assert!(e.ends_with(&format!(":7:11: {d}/b.key: the key does not match the certificate in {d}/a.pem")), "{e}");
        let e = err("tls_cert = \"a.pem\"\ntls_key = \"nope.key\"\n");
        assert!(e.contains(&format!(":7:11: {d}/nope.key: cannot read: No such file")), "{e}");
        let e = err("tls_cert = \"b.pem\"\ntls_key = \"b.key\"\n");
        assert!(
            e.contains(&format!(":6:12: {d}/b.pem: the certificate does not cover the server name \"a.example\"")),
            "{e}"
        );
        let e = err("tls_cert = \"old.pem\"\ntls_key = \"old.key\"\n");
        assert!(e.contains(&format!(":6:12: {d}/old.pem: the certificate expired on ")), "{e}");
        let certs = "tls_cert = \"a.pem\"\ntls_key = \"a.key\"\n";
        let e = err(&format!("{certs}https_redirect = 302\n"));
        assert!(e.contains(":8:18: https_redirect must be 301 or 308"), "{e}");
        for bad in ["max-age=", "maxage=1", "max-age=1; preload; nope", "max-age=-1"] {
            let e = err(&format!("{certs}hsts = \"{bad}\"\n"));
            assert!(e.contains(":8:8: hsts must be a Strict-Transport-Security value"), "{bad}: {e}");
        }
        let plain_only =
            "[server]\nlisten = [\"127.0.0.1:8080\"]\n[[vhost]]\nroot = \"htdocs\"\nhttps_redirect = 301\n";
        let e = try_parse(&dir, plain_only).unwrap_err().to_string();
        assert!(e.contains(":5:18: https_redirect needs a listen entry with tls = true"), "{e}");
    }

    #[test]
    fn units_in_http_section() {
        let dir = setup();
        let text = format!("{MINIMAL}[http]\nkeepalive_timeout = \"1500ms\"\nmax_body_size = \"2MiB\"\n");
        let c = try_parse(&dir, &text).unwrap();
        assert_eq!(c.http.keepalive_timeout, Duration::from_millis(1500));
        assert_eq!(c.http.max_body_size, 2 << 20);
        let text = format!("{MINIMAL}[http]\nkeepalive_timeout = \"soon\"\n");
        assert!(try_parse(&dir, &text).unwrap_err().to_string().contains("a duration"));
    }
}
