//! Location kinds: what answers at a `[[vhost.location]]` (files, the status page,
//! the health check, the metrics, CGI scripts, a FastCGI application, an upstream HTTP server, the echo). Each kind is one module that owns its keys: it
//! reads and checks them from the location's table, shows them (`pika -T`), and
//! builds its handler when a worker opens its sites. `config/vhost.rs`,
//! `config/show.rs` and `site.rs` only call [`Kind::read`], [`Kind::show`] and
//! [`Kind::build`], which dispatch here.
//!
//! A location is files unless one kind's key chooses another (`status = true`, …).
//! A new kind is a module here, a variant of [`Kind`] with its line in each `match`
//! below and in [`CHOSEN`], and its handler (`crate::handlers`). A new key of a kind
//! is that kind's module alone (and its documentation: `conf/pika.toml`, the README;
//! a test checks both have every key).

pub mod cgi;
pub mod echo;
pub mod fastcgi;
pub mod files;
pub mod health;
pub mod metrics;
pub mod proxy;
pub mod status;

use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::config::Config;
use crate::config::read::{ConfigError, Ctx, Keys};
use crate::config::show::Toml;
use crate::handlers::Handler;
use crate::handlers::static_file::Root;
use crate::handlers::status_page::StatusPage;
use crate::http::pattern::Pattern;
use crate::rules::Rules;
use files::Files;

/// What answers at a location, with its settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// Files from a directory.
    Files(Files),
    /// The server-status page (`status = true`).
    Status,
    /// The health check (`health = true`): 200 while serving, 503 while draining.
    Health,
    /// The Prometheus metrics (`metrics = true`).
    Metrics,
    /// CGI scripts (`cgi = true`, `cgi_interpreters`).
    Cgi(Box<crate::gateway::CgiConfig>),
    /// Scripts a FastCGI application runs (`fastcgi`).
    FastCgi(Box<crate::gateway::FastCgiConfig>),
    /// The request's body sent back (`echo = true`).
    Echo,
    /// An upstream HTTP server the requests are passed to (`proxy`).
    Proxy(Box<crate::gateway::ProxyConfig>),
}

/// The kinds other than files: the key that chooses each (set to true), and what a
/// message says of it.
pub const CHOSEN: [(&str, &str); 4] = [
    (status::KEY, "status = true serves the status page"),
    (health::KEY, "health = true answers health checks"),
    (metrics::KEY, "metrics = true serves the metrics"),
    (echo::KEY, "echo = true sends request bodies back"),
];

/// Every kind's keys, as the config writes them.
pub fn keys() -> impl Iterator<Item = &'static str> {
    CHOSEN
        .iter()
        .map(|(key, _)| *key)
        .chain(files::KEYS.iter().copied())
        .chain(cgi::KEYS.iter().copied())
        .chain(fastcgi::KEYS.iter().copied().filter(|k| !cgi::KEYS.contains(k)))
        .chain(proxy::KEYS.iter().copied())
}

/// What a kind's reader is given besides the location's keys.
pub(crate) struct Reading<'a> {
    pub(crate) ctx: &'a Ctx<'a>,
    /// The server's root, which relative paths are under.
    pub(crate) root: &'a Path,
    /// The vhost's own files: the default of a files location's.
    pub(crate) vhost_files: &'a Files,
    /// The location is a prefix.
    pub(crate) prefix: bool,
    /// The location's own position, for errors about it as a whole.
    pub(crate) at: std::ops::Range<usize>,
}

/// What a kind's builder is given when a worker opens a vhost.
pub struct Build<'c, 'o> {
    pub config: &'c Config,
    pub status: StatusPage<'c>,
    /// The vhost's `serve_hidden`.
    pub serve_hidden: bool,
    /// The vhost's `symlinks`.
    pub symlinks: crate::sys::Symlinks,
    /// The vhost's first name (`SERVER_NAME` when a request has no Host).
    pub server_name: &'c str,
    /// Opens a directory to serve files from (once per worker).
    pub open: &'o mut dyn FnMut(&Path) -> io::Result<Rc<Root>>,
}

impl Kind {
    /// The kind a location's keys choose, its keys taken out of `keys`.
    pub(crate) fn read(keys: &mut Keys, r: &Reading<'_>) -> Result<Kind, ConfigError> {
        // The kinds that run scripts take root or alias (and FastCGI index) too.
        let names: Vec<&str> = keys.names().collect();
        let fastcgi = names.contains(&fastcgi::KEY);
        let cgi = names.iter().any(|k| cgi::CHOOSING.contains(k));
        if names.contains(&proxy::KEY) {
            let other = names.iter().find(|k| {
                cgi::KEYS.contains(k)
                    || fastcgi::KEYS.contains(k)
                    || files::KEYS.contains(k)
                    || CHOSEN.iter().any(|(c, _)| c == *k)
            });
            if let Some(other) = other {
                return Err(r.ctx.error(
                    r.at.clone(),
                    format!(
                        "a proxy location passes its requests on: no {other} (it serves no files, runs no scripts)"
                    ),
                ));
            }
            return Ok(Kind::Proxy(Box::new(proxy::read(keys, r)?)));
        }
        if (cgi || fastcgi)
            && let Some(other) = CHOSEN.iter().find(|(k, _)| names.contains(k))
        {
            return Err(r
                .ctx
                .error(r.at.clone(), format!("a location with {}, not scripts: no cgi or fastcgi", other.1)));
        }
        if cgi && fastcgi {
            return Err(r
                .ctx
                .error(r.at.clone(), "a location runs CGI scripts (cgi, cgi_interpreters) or FastCGI, not both"));
        }
        if cgi {
            return Ok(Kind::Cgi(Box::new(cgi::read(keys, r)?)));
        }
        if fastcgi {
            return Ok(Kind::FastCgi(Box::new(fastcgi::read(keys, r)?)));
        }
        let mut chosen = None;
        for (key, what) in CHOSEN {
            if !keys.take::<bool>(r.ctx, key)?.is_some_and(|on| *on.get_ref()) {
                continue;
            }
            if chosen.is_some() {
                return Err(r.ctx.error(
                    r.at.clone(),
                    "a location is one of the status page (status = true), the health check (health = true), \
                     the metrics (metrics = true) or the echo (echo = true), not two",
                ));
            }
            chosen = Some((key, what));
        }
        let Some((key, what)) = chosen else {
            return Ok(Kind::Files(files::read(keys, r.ctx, r.vhost_files, r.root, r.prefix)?));
        };
        if keys.names().any(|k| files::KEYS.contains(&k)) {
            return Err(r.ctx.error(
                r.at.clone(),
                format!("a location with {what}, not files: no root, alias, index or autoindex"),
            ));
        }
        Ok(match key {
            status::KEY => Kind::Status,
            health::KEY => Kind::Health,
            echo::KEY => Kind::Echo,
            _ => Kind::Metrics,
        })
    }

    /// Its keys for `pika -T`.
    pub(crate) fn show(&self, t: &mut Toml) {
        match self {
            Kind::Files(f) => f.show(t),
            Kind::Status => status::show(t),
            Kind::Health => health::show(t),
            Kind::Metrics => metrics::show(t),
            Kind::Cgi(c) => cgi::show(c, t),
            Kind::FastCgi(f) => fastcgi::show(f, t),
            Kind::Echo => echo::show(t),
            Kind::Proxy(p) => proxy::show(p, t),
        }
    }

    /// The rules it has unless its location sets them (before the vhost's).
    pub fn rules(&self, config: &Config) -> Rules {
        match self {
            Kind::Status => status::rules(config),
            Kind::Metrics => metrics::rules(config),
            Kind::Files(_) | Kind::Health | Kind::Cgi(_) | Kind::FastCgi(_) | Kind::Echo | Kind::Proxy(_) => {
                Rules::default()
            }
        }
    }

    /// Whether a request must name the vhost to be answered here (or use an IP
    /// literal or `localhost`): the status page and the metrics, what they show
    /// being for the server's operators only (DNS rebinding).
    pub fn by_name_only(&self) -> bool {
        matches!(self, Kind::Status | Kind::Metrics)
    }

    /// The handler a worker answers with; `at`: the location's pattern as written.
    pub fn build<'c>(&'c self, at: Option<&'c Pattern>, b: &mut Build<'c, '_>) -> io::Result<Handler<'c>> {
        Ok(match self {
            Kind::Files(f) => f.build(at, b)?,
            Kind::Status => status::build(b),
            Kind::Health => health::build(b),
            Kind::Metrics => metrics::build(b),
            Kind::Cgi(c) => cgi::build(c, at, b)?,
            Kind::FastCgi(f) => fastcgi::build(f, at, b)?,
            Kind::Echo => echo::build(),
            Kind::Proxy(p) => proxy::build(p, at, b),
        })
    }

    /// Whether it runs scripts (CGI, FastCGI).
    pub fn runs_scripts(&self) -> bool {
        self.scripts_dir().is_some()
    }

    /// Where the scripts it runs are, and whether that directory stands for the
    /// location's prefix (`alias`); None for a kind that runs none.
    pub fn scripts_dir(&self) -> Option<(&Path, bool)> {
        match self {
            Kind::Cgi(c) => Some((&c.dir, c.alias)),
            Kind::FastCgi(f) => Some((&f.dir, f.alias)),
            Kind::Files(_) | Kind::Status | Kind::Health | Kind::Metrics | Kind::Echo | Kind::Proxy(_) => None,
        }
    }

    /// Whether it answers from request bodies, which the workers keep in
    /// `body_temp_dir` past `client_body_buffer` (scripts and the echo; a files
    /// location's `try_files` hands its bodies to one of those), and the proxy.
    pub fn reads_bodies(&self) -> bool {
        matches!(self, Kind::Cgi(_) | Kind::FastCgi(_) | Kind::Echo | Kind::Proxy(_))
    }

    /// The directory it serves files from, if any (for the chroot's check).
    pub fn dir(&self) -> Option<&PathBuf> {
        match self {
            Kind::Files(f) => Some(&f.dir),
            Kind::Cgi(c) => Some(&c.dir),
            Kind::FastCgi(f) => Some(&f.dir),
            Kind::Status | Kind::Health | Kind::Metrics | Kind::Echo | Kind::Proxy(_) => None,
        }
    }

    /// The same kind as seen from inside a chroot: `inside` maps a path.
    pub fn jail(&mut self, inside: impl Fn(&Path) -> PathBuf) {
        match self {
            Kind::Files(f) => f.dir = inside(&f.dir),
            Kind::Cgi(c) => c.dir = inside(&c.dir),
            Kind::FastCgi(f) => f.dir = inside(&f.dir),
            Kind::Status | Kind::Health | Kind::Metrics | Kind::Echo | Kind::Proxy(_) => {}
        }
    }
}
