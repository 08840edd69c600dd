//! Location kinds: what answers at a `[[vhost.location]]` (files, the status page,
//! the health check, the metrics, CGI scripts, a FastCGI application, an upstream
//! HTTP server, the echo). Each kind is one room (a module or a folder) that owns its
//! keys and its handler: it reads and checks its keys from the location's table,
//! shows them (`pika -T`), and builds its handler when a worker opens its sites.
//! `config/vhost.rs`, `command/show.rs` and `site.rs` only call [`Kind::read`],
//! [`Kind::show`] and [`Kind::build`], and a worker only [`Handler`]'s methods,
//! which dispatch here: no other module matches on a kind.
//!
//! A location is files unless one kind's key chooses another (`status = true`, …).
//! A new kind is a room here, a variant of [`Kind`] and of [`Handler`] with its line
//! in each `match` below and in [`CHOSEN`]. A new key of a kind is that kind's room
//! alone (and its documentation: `conf/pika.toml`, the README; a test checks both
//! have every key).

pub mod cgi;
pub mod echo;
pub mod fastcgi;
pub mod files;
pub mod health;
pub mod metrics;
pub mod proxy;
pub mod script;
pub mod status;

use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::base::cidr::Cidr;
use crate::exchange::{Ask, Methods};
use crate::http::mime::MimeTypes;
use crate::http::pattern::Pattern;
use crate::http::response::Reply;
use crate::keys::read::{ConfigError, Keys};
use crate::keys::write::Toml;
use crate::rules::Rules;
use files::static_file::{Root, StaticFiles};
use files::{Files, Reading};
use status::StatusPage;

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

/// What a worker gives its kinds to build their handlers from: the vhost's ways
/// and the server's settings each kind needs, never the whole config.
pub struct Build<'c, 'o> {
    /// The status page, whose view of the server the metrics and the health check
    /// share.
    pub status: StatusPage<'c>,
    pub serve_hidden: bool,
    pub symlinks: crate::base::sys::Symlinks,
    pub server_name: &'c str,
    pub mime: &'c MimeTypes,
    pub max_ranges: usize,
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
    /// Its rules unless its location sets them: the status page and the metrics
    /// let in `[status] allow` (`status_allow`).
    pub fn rules(&self, status_allow: &[Cidr]) -> Rules {
        match self {
            Kind::Status | Kind::Metrics => status::rules(status_allow),
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
            Kind::Files(f) => Handler::Files(f.build(at, (b.open)(&f.dir)?, b.serve_hidden, b.mime, b.max_ranges)),
            Kind::Status => Handler::Status(b.status),
            Kind::Health => Handler::Health(health::HealthCheck { header: b.status.server.scoreboard.header }),
            Kind::Metrics => Handler::Metrics(metrics::Metrics { server: b.status.server }),
            Kind::Cgi(c) => Handler::Cgi(cgi::build(c, at, b.symlinks, b.server_name)?),
            Kind::FastCgi(f) => Handler::FastCgi(fastcgi::build(f, at, b.symlinks, b.server_name)?),
            Kind::Echo => Handler::Echo(echo::Echo),
            Kind::Proxy(p) => Handler::Proxy(proxy::build(p, at, &b.status.server.scoreboard.upstreams)),
        })
    }

    /// Whether it runs scripts (CGI, FastCGI).
    /// Whether it serves files (the keys only files locations take are its).
    pub fn serves_files(&self) -> bool {
        matches!(self, Kind::Files(_))
    }

    /// Whether it takes `try_files` for its own (a FastCGI application, as nginx's
    /// PHP recipes write it) though it serves no files.
    pub fn tries_files_itself(&self) -> bool {
        matches!(self, Kind::FastCgi(_))
    }

    /// A proxy's upstream servers, each with whether it is a backup; none for
    /// another kind.
    pub fn upstreams(&self) -> impl Iterator<Item = (&crate::gateway::upstream::Upstream, bool)> {
        let proxy = match self {
            Kind::Proxy(p) => Some(p),
            _ => None,
        };
        let primaries = proxy.into_iter().flat_map(|p| p.upstreams.iter().map(|u| (u, false)));
        primaries.chain(proxy.into_iter().flat_map(|p| p.backups.iter().map(|u| (u, true))))
    }

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

/// A location's kind as a worker serves it: the handler that answers there, built
/// from its [`Kind`] when the worker opens its sites.
pub enum Handler<'c> {
    Files(StaticFiles<'c>),
    Status(StatusPage<'c>),
    Health(health::HealthCheck<'c>),
    Metrics(metrics::Metrics<'c>),
    Cgi(cgi::Cgi<'c>),
    FastCgi(fastcgi::app::FastCgi<'c>),
    Echo(echo::Echo),
    Proxy(proxy::relay::Proxy<'c>),
}

impl<'c> Handler<'c> {
    /// The methods it answers (checked before it is asked).
    #[inline]
    pub fn methods(&self) -> Methods {
        match self {
            Handler::Cgi(_) | Handler::FastCgi(_) | Handler::Echo(_) | Handler::Proxy(_) => Methods::Any,
            Handler::Files(files) if files.may_redirect() => Methods::Any,
            Handler::Files(_) | Handler::Status(_) | Handler::Health(_) | Handler::Metrics(_) => Methods::ReadOnly,
        }
    }

    /// Fills `reply` for `ask`.
    #[inline]
    pub fn serve(&self, ask: &Ask<'_>, reply: &mut Reply<'_>) {
        match self {
            Handler::Files(files) => files.serve(ask, reply),
            Handler::Status(page) => page.serve(ask, reply),
            Handler::Health(check) => check.serve(ask, reply),
            Handler::Metrics(metrics) => metrics.serve(ask, reply),
            Handler::Cgi(cgi) => cgi.serve(ask, reply),
            Handler::FastCgi(app) => app.serve(ask, reply),
            Handler::Echo(echo) => echo.serve(ask, reply),
            Handler::Proxy(proxy) => proxy.serve(ask, reply),
        }
    }

    /// Whether the request body is read before it is asked (whole, by the event
    /// loop): scripts, the echo, a proxy, and files that may redirect to a script.
    #[inline]
    pub fn reads_body(&self) -> bool {
        match self {
            Handler::Cgi(_) | Handler::FastCgi(_) | Handler::Echo(_) | Handler::Proxy(_) => true,
            Handler::Files(files) => files.may_redirect(),
            Handler::Status(_) | Handler::Health(_) | Handler::Metrics(_) => false,
        }
    }

    /// The files handler, if it is one (a vhost's own files: its error pages).
    pub fn files(&self) -> Option<&StaticFiles<'c>> {
        match self {
            Handler::Files(files) => Some(files),
            _ => None,
        }
    }

    /// The files handler to finish setting up, if it is one.
    pub fn files_mut(&mut self) -> Option<&mut StaticFiles<'c>> {
        match self {
            Handler::Files(files) => Some(files),
            _ => None,
        }
    }

    /// The FastCGI handler to finish setting up, if it is one.
    pub fn fastcgi_mut(&mut self) -> Option<&mut fastcgi::app::FastCgi<'c>> {
        match self {
            Handler::FastCgi(app) => Some(app),
            _ => None,
        }
    }

    /// Whether answering keeps the worker waiting on a program (a CGI script, a
    /// FastCGI application, an upstream server), while its other connections wait.
    #[inline]
    pub fn waits_on_a_program(&self) -> bool {
        matches!(self, Handler::Cgi(_) | Handler::FastCgi(_) | Handler::Proxy(_))
    }

    /// Whether it is the health check (its requests stay out of the logs by default).
    #[inline]
    pub fn is_health(&self) -> bool {
        matches!(self, Handler::Health(_))
    }
}
