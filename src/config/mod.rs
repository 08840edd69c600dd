//! The configuration: read `pika.toml`, check it, and resolve it into a `Config` that
//! the rest of pika can use without ever failing again.
//!
//! Everything that can be wrong with a config is found here, before any socket is bound
//! or any process forked, so that `pika -t` and a reload (`HUP`) catch it: syntax and
//! unknown keys (serde + toml give line and column), bad addresses, users that do not
//! exist, docroots that are missing, log formats that do not compile. Relative paths are
//! resolved against `server.root`, which defaults to the folder above the config file's
//! folder (`conf/pika.toml` → the folder holding `conf/`, `htdocs/`, `logs/`).
//!
//! It stays one file past 500 lines: the resolved types and the resolver that fills
//! them are read side by side; sections with logic of their own live in the
//! submodules below.

mod acme;
mod cluster;
mod include;
mod logs;
pub(crate) mod raw;
mod server;
pub(crate) mod vhost;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

pub use crate::keys::read::ConfigError;
use crate::keys::read::{Ctx, Split, absolute};
use log::LevelFilter;
use nix::unistd::Gid;
use raw::{RawAccessLog, RawConfig, RawInclude, RawVhost};

use crate::base::cidr::Cidr;
pub use crate::base::sys::Symlinks;
pub use crate::http::forwarded::ForwardedHeader;
use crate::http::mime::MimeTypes;
pub use crate::log::ErrorLogTarget;
use crate::log::rotate::Rotate;
pub use logs::{AccessLog, DEFAULT_LOG_BUFFER, DEFAULT_LOG_FLUSH};
pub(crate) use server::FACILITIES;
pub use server::{Affinity, Listen, MIME_BUILTIN, RunAs, ServerTokens, Status, Workers};
pub use vhost::Vhost;

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
    /// `[acme]`: the CA the vhosts with `acme = true` get their certificates from.
    pub acme: Option<crate::acme::Settings>,
    /// `[cluster]`: the fleet's Redis, where `[acme]` keeps its state and the ticket
    /// keys are shared; `None`: this node alone, its state in `acme.state_dir`.
    pub cluster: Option<crate::cluster::Settings>,
    /// What the operator should hear about this config that is not an error (keys
    /// that no longer do anything): said by `pika -t` and in the error log at start
    /// and reload.
    pub notes: Vec<String>,
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
    pub max_header_line: usize,
    pub max_headers: usize,
    pub max_body_size: u64,
    pub max_ranges: usize,
    /// A request body read for a CGI or FastCGI location may take `body_timeout`,
    /// plus a second for every `body_min_rate` bytes received (0: no extension),
    /// `body_timeout_max` at most, with no silence longer than `body_idle_timeout`.
    pub body_timeout: Duration,
    pub body_min_rate: u64,
    pub body_timeout_max: Duration,
    pub body_idle_timeout: Duration,
    /// The bytes such bodies may hold in temporary files at once, in one worker
    /// and in the whole server (503 past either).
    pub body_spool_max_worker: u64,
    pub body_spool_max: u64,
    /// Bytes of such a body kept in memory before a temporary file takes it.
    pub client_body_buffer: usize,
    /// Where those temporary files go: the workers' folder (mode 0700), made by the
    /// master for them when a location reads bodies ([`Config::make_body_dir`]); a
    /// script's answers kept for their clients go there too.
    pub body_temp_dir: PathBuf,
    /// The bytes the server's kept answers may hold in temporary files at once
    /// (past it, what is left of an answer is sent as its source gives it).
    pub answer_spool_max: u64,
}

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

/// What the `[[vhost]]` and `[[access_log]]` tables of every file make.
struct Sites {
    vhosts: Vec<Vhost>,
    access_logs: Vec<AccessLog>,
    tls: Option<Arc<crate::tls::Certificates>>,
}

/// The vhosts and logs of one file (`file`: an included one, or `None`: the main).
struct Source<'a> {
    ctx: Ctx<'a>,
    vhosts: &'a [Split<RawVhost>],
    logs: &'a [RawAccessLog],
    file: Option<&'a Path>,
}

impl Ctx<'_> {
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

    /// The whole config, section by section; what one section needs of another
    /// (the vhosts of the TLS listeners, the chroot of every path) is checked here.
    fn resolve(&self, raw: RawConfig, included: &[Included]) -> Result<Config, ConfigError> {
        let conf_dir = self.file.parent().unwrap_or(Path::new("/"));
        let root = match &raw.server.root {
            Some(r) => absolute(conf_dir, r),
            None => conf_dir.parent().unwrap_or(conf_dir).to_path_buf(),
        };
        let listen = self.listen(&raw)?;
        let (log_level, error_log) = self.error_log(&raw, &root)?;
        let error_log_rotate = raw.server.error_log_rotate.as_ref().map(|r| self.rotate(r)).transpose()?;
        let (mime, mime_types) = self.mime(&raw, &root)?;
        let run_as = self.run_as(&raw)?;
        let server_tokens = self.server_tokens(&raw)?;
        let (trusted_proxies, forwarded_header) = self.forwarders(&raw)?;
        let acme = self.acme(&raw, &root, run_as.as_ref())?;
        let cluster = self.cluster(&raw, &root)?;
        let workers = self.workers(&raw)?;
        let http = self.http(&raw, &root)?;
        let status = self.status(&raw)?;
        let mut notes = Vec::new();
        let Sites { vhosts, access_logs, tls } =
            self.sites(&raw, included, &root, &listen, &status, acme.as_ref(), &mut notes)?;
        let coredump_dir = self.coredump_dir(&raw, &root)?;
        // Where request bodies are kept, if a location reads them.
        let body_dir = vhosts.iter().any(Vhost::reads_bodies).then_some(&http.body_temp_dir);
        let chroot = self.chroot(&raw, &root, &vhosts, &access_logs, &error_log, [coredump_dir.as_ref(), body_dir])?;
        let pid_file = absolute(&root, &raw.server.pid_file);
        self.written_as_root(&pid_file, &error_log, &access_logs)?;
        if let Some(dir) = body_dir {
            let groups = own_groups();
            crate::base::safe_files::check_workers_folder("body_temp_dir", dir, workers_ids(run_as.as_ref(), &groups))
                .map_err(|e| self.error(self.table("http"), e))?;
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
            acme,
            cluster,
            root,
            notes,
        })
    }

    /// `[http]`: timeouts and limits, each checked against its bounds.
    fn http(&self, raw: &RawConfig, root: &Path) -> Result<Http, ConfigError> {
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
            max_header_line: h.max_header_line.0 as usize,
            max_headers: h.max_headers as usize,
            max_body_size: h.max_body_size.0,
            max_ranges: h.max_ranges as usize,
            body_timeout: h.body_timeout.0,
            body_min_rate: h.body_min_rate.0,
            body_timeout_max: h.body_timeout_max.0,
            body_idle_timeout: h.body_idle_timeout.0,
            body_spool_max_worker: h.body_spool_max_worker.0,
            body_spool_max: h.body_spool_max.0,
            client_body_buffer: h.client_body_buffer.0 as usize,
            body_temp_dir: absolute(root, &h.body_temp_dir),
            answer_spool_max: h.answer_spool_max.0,
        };
        for (name, d) in [
            ("header_timeout", http.header_timeout),
            ("keepalive_timeout", http.keepalive_timeout),
            ("send_timeout", http.send_timeout),
            ("request_timeout", http.request_timeout),
            ("body_timeout", http.body_timeout),
            ("body_idle_timeout", http.body_idle_timeout),
        ] {
            if d.is_zero() {
                return Err(self.error(self.table("http"), format!("http.{name} must be more than zero")));
            }
        }
        if http.max_request_line < 16
            || http.max_header_size < http.max_request_line
            || http.max_header_line < 16
            || http.max_headers == 0
            || http.max_headers > crate::http::request::MAX_HEADERS
        {
            return Err(self.error(
                self.table("http"),
                format!(
                    "http limits: max_request_line >= 16, max_header_size >= max_request_line, max_header_line >= 16, max_headers from 1 to {}",
                    crate::http::request::MAX_HEADERS
                ),
            ));
        }
        if http.body_timeout_max < http.body_timeout {
            return Err(self.error(self.table("http"), "http.body_timeout_max must be at least body_timeout"));
        }
        if http.body_spool_max_worker < http.max_body_size || http.body_spool_max < http.max_body_size {
            return Err(self.error(
                self.table("http"),
                "http.body_spool_max_worker and body_spool_max must be at least max_body_size (else no body that large could be read)",
            ));
        }
        Ok(http)
    }

    /// `[status]`: who may see the status page and the metrics (loopback unless
    /// set), and the older way to place the page.
    fn status(&self, raw: &RawConfig) -> Result<Status, ConfigError> {
        let mut allow = self.cidrs(&raw.status.allow)?;
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
        Ok(Status { enabled: raw.status.enabled, path: raw.status.path.clone(), allow })
    }

    /// Every `[[vhost]]` with its locations and logs, then every `[[access_log]]`: the
    /// main file's first, then each included file's in turn (the first vhost of all
    /// is the default), and the certificates they have, which a TLS listener needs.
    #[allow(clippy::too_many_arguments)] // the sections a vhost reads: listen, status, acme
    fn sites(
        &self,
        raw: &RawConfig,
        included: &[Included],
        root: &Path,
        listen: &[Listen],
        status: &Status,
        acme: Option<&crate::acme::Settings>,
        notes: &mut Vec<String>,
    ) -> Result<Sites, ConfigError> {
        let main = Source { ctx: *self, vhosts: &raw.vhost, logs: &raw.access_log, file: None };
        let sources: Vec<Source<'_>> = std::iter::once(main)
            .chain(included.iter().map(|i| Source {
                ctx: i.ctx(),
                vhosts: &i.raw.vhost,
                logs: &i.raw.access_log,
                file: Some(&i.file),
            }))
            .collect();
        let tls_listener = raw.server.listen.iter().zip(listen).find(|(_, l)| l.tls).map(|(raw, _)| raw);
        let mut vhosts = Vec::new();
        let mut vhost_logs = Vec::new();
        for s in &sources {
            for v in s.vhosts {
                let mut vhost = s.ctx.vhost(v, root, tls_listener.is_some(), acme)?;
                vhost.source = s.file.map(Path::to_path_buf);
                s.ctx.locations(&v.location, &mut vhost, root, status, notes)?;
                // What the htpasswd files' lines call for (a weak hash), once a file.
                let all = std::iter::once(&vhost.rules).chain(vhost.locations.list.iter().map(|l| &l.rules));
                for auth in all.filter_map(|r| r.auth.clone().flatten()) {
                    for n in &auth.notes {
                        if !notes.contains(n) {
                            notes.push(n.clone());
                        }
                    }
                }
                for a in &v.access_log {
                    vhost_logs.push(s.ctx.access_log(a, root, Some(vhosts.len()), s.file)?);
                }
                vhosts.push(vhost);
            }
        }
        if vhosts.is_empty() {
            return Err(self.error(0..0, "at least one [[vhost]] is needed (the first is the default)"));
        }
        let tls =
            crate::tls::Certificates::new(vhosts.iter().map(|v| (&v.server_names[..], v.tls.as_deref()))).map(Arc::new);
        if let Some(l) = tls_listener
            && tls.is_none()
        {
            return Err(self.spanned(l, "a tls listener needs a certificate: set tls_cert and tls_key in a [[vhost]]"));
        }
        let mut access_logs = Vec::new();
        for s in &sources {
            for a in s.logs {
                access_logs.push(s.ctx.access_log(a, root, None, s.file)?);
            }
        }
        access_logs.append(&mut vhost_logs);
        Ok(Sites { vhosts, access_logs, tls })
    }

    /// `server.coredump_dir`: an existing directory, canonical.
    fn coredump_dir(&self, raw: &RawConfig, root: &Path) -> Result<Option<PathBuf>, ConfigError> {
        let Some(d) = &raw.server.coredump_dir else { return Ok(None) };
        let dir = std::fs::canonicalize(absolute(root, d.get_ref()))
            .map_err(|e| self.spanned(d, format!("coredump_dir {:?}: {e}", d.get_ref())))?;
        if !dir.is_dir() {
            return Err(self.spanned(d, format!("coredump_dir {} is not a directory", dir.display())));
        }
        Ok(Some(dir))
    }

    /// `server.chroot`: canonical, and holding every directory served, every log and
    /// the workers' own folders (core dumps, request bodies), which workers must
    /// reach from inside it.
    fn chroot(
        &self,
        raw: &RawConfig,
        root: &Path,
        vhosts: &[Vhost],
        access_logs: &[AccessLog],
        error_log: &ErrorLogTarget,
        workers_dirs: [Option<&PathBuf>; 2],
    ) -> Result<Option<PathBuf>, ConfigError> {
        let Some(c) = &raw.server.chroot else { return Ok(None) };
        let dir = std::fs::canonicalize(absolute(root, c.get_ref()))
            .map_err(|e| self.spanned(c, format!("chroot {:?}: {e}", c.get_ref())))?;
        let logs = access_logs.iter().map(|a| &a.path).chain(match error_log {
            ErrorLogTarget::File(p) => Some(p),
            _ => None,
        });
        for p in vhosts.iter().flat_map(Vhost::dirs).chain(logs).chain(workers_dirs.into_iter().flatten()) {
            if !p.starts_with(&dir) {
                return Err(self.spanned(
                    c,
                    format!("{} is outside the chroot {}: workers could not reach it", p.display(), dir.display()),
                ));
            }
        }
        Ok(Some(dir))
    }

    /// Files the master writes as root must not lie where others may plant a link.
    fn written_as_root(
        &self,
        pid_file: &Path,
        error_log: &ErrorLogTarget,
        access_logs: &[AccessLog],
    ) -> Result<(), ConfigError> {
        crate::base::safe_files::check_folder(pid_file).map_err(|e| self.error(self.table("server"), e))?;
        if let ErrorLogTarget::File(p) = error_log {
            crate::base::safe_files::check_folder(p).map_err(|e| self.error(self.table("server"), e))?;
        }
        for a in access_logs {
            crate::base::safe_files::check_folder(&a.path).map_err(|e| self.error(self.table("access_log"), e))?;
        }
        Ok(())
    }
}

impl Config {
    /// The index of the vhost that serves a Host value (`None`: no Host).
    #[inline]
    pub fn vhost_for(&self, host: Option<&[u8]>) -> usize {
        crate::http::host::select(&self.vhosts, |v| &v.server_names, host)
    }

    /// Every upstream server of the proxy locations (once each, as the pool's table
    /// names it), with whether it is a backup: what the status page and the metrics
    /// show.
    pub fn upstreams(&self) -> Vec<(String, bool)> {
        let mut out: Vec<(String, bool)> = Vec::new();
        for v in &self.vhosts {
            for l in &v.locations.list {
                for (u, backup) in l.kind.upstreams() {
                    let name = u.server();
                    if !out.iter().any(|(n, _)| *n == name) {
                        out.push((name, backup));
                    }
                }
            }
        }
        out
    }

    /// Every vhost's certificate and how long it has left, at `now` (Unix seconds).
    pub fn certificate_expiries(&self, now: i64) -> Vec<crate::acme::expiry::Expiry> {
        let certs = self.vhosts.iter().filter_map(|v| Some((&v.server_names[..], v.tls.as_deref()?, v.acme)));
        crate::acme::expiry::list(certs, now)
    }

    /// Every htpasswd file the config read (once each), with its stamp then: what
    /// the master watches for a change ([`crate::keys::watch::Watch`]).
    pub fn auth_files(&self) -> Vec<(PathBuf, Option<crate::keys::watch::Stamp>)> {
        let mut out: Vec<(PathBuf, Option<crate::keys::watch::Stamp>)> = Vec::new();
        for v in &self.vhosts {
            let all = std::iter::once(&v.rules).chain(v.locations.list.iter().map(|l| &l.rules));
            for a in all.filter_map(|r| r.auth.clone().flatten()) {
                if !out.iter().any(|(p, _)| *p == a.file) {
                    out.push((a.file.clone(), a.stamp));
                }
            }
        }
        out
    }

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
            v.files.dir = inside(&v.files.dir);
            for l in &mut v.locations.list {
                l.kind.jail(inside);
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
        c.http.body_temp_dir = inside(&c.http.body_temp_dir);
        c
    }

    /// Makes `body_temp_dir` for the workers when a location reads request bodies:
    /// by the master, at start and at each reload, before workers that need it are
    /// forked (as root it may be where only root may make it, as
    /// `/var/lib/pika/bodies`); given to the workers' user when just made, checked
    /// as theirs otherwise.
    pub fn make_body_dir(&self) -> Result<(), String> {
        if !self.vhosts.iter().any(Vhost::reads_bodies) {
            return Ok(());
        }
        let groups = own_groups();
        let workers = workers_ids(self.run_as.as_ref(), &groups);
        crate::base::safe_files::make_workers_folder("body_temp_dir", &self.http.body_temp_dir, workers)
    }
}

/// The ids the workers run as: `server.user`'s, else this process's own
/// (`own_groups` are its supplementary groups).
fn workers_ids<'a>(run_as: Option<&'a RunAs>, own_groups: &'a [Gid]) -> crate::base::safe_files::Workers<'a> {
    match run_as {
        Some(r) => crate::base::safe_files::Workers { uid: r.uid, gid: r.gid, groups: &r.groups },
        None => crate::base::safe_files::Workers {
            uid: nix::unistd::geteuid(),
            gid: nix::unistd::getegid(),
            groups: own_groups,
        },
    }
}

/// This process's supplementary groups (none if they cannot be read).
fn own_groups() -> Vec<Gid> {
    nix::unistd::getgroups().unwrap_or_default()
}

#[cfg(test)]
mod tests;
