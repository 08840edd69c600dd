//! What answers a request once it is read and its vhost and location are known.
//!
//! A [`Handler`] is what the connection calls: it gets the request ([`Ask`]) and
//! fills a [`Reply`]. Static files ([`static_file`]: files, directories, listings
//! from [`listing`], each worker's cache of mapped files in [`file_cache`]), the
//! status page ([`status_page`]), the health check ([`health`]) and the Prometheus
//! metrics ([`metrics`]), CGI scripts ([`cgi`]), a FastCGI application's
//! scripts ([`fastcgi`]), an upstream HTTP server's answers ([`proxy`]) and the echo
//! ([`echo`]) are handlers.

mod ask;
pub mod cgi;
pub mod echo;
pub mod fastcgi;
pub mod file_cache;
pub mod health;
pub mod listing;
pub mod metrics;
pub mod proxy;
pub mod reach;
pub mod script;
pub mod static_file;
pub mod status_page;
pub mod try_files;

pub use ask::{Ask, Link, Methods, not_allowed};

use crate::http::response::Reply;

/// What answers at a location (or, with no location matching, at a vhost).
pub enum Handler<'c> {
    /// Files from a directory.
    Files(static_file::StaticFiles<'c>),
    /// The server-status page.
    Status(status_page::StatusPage<'c>),
    /// The health check a load balancer polls.
    Health(health::HealthCheck<'c>),
    /// The Prometheus metrics.
    Metrics(metrics::Metrics<'c>),
    /// CGI scripts.
    Cgi(cgi::Cgi<'c>),
    /// Scripts a FastCGI application runs.
    FastCgi(fastcgi::FastCgi<'c>),
    /// A request's body sent back as it came.
    Echo(echo::Echo),
    /// Requests passed to an upstream HTTP server.
    Proxy(proxy::Proxy<'c>),
}

impl<'c> Handler<'c> {
    /// The methods it answers, checked before [`Handler::serve`] (the request
    /// cycle's admit stage, after the location's rules): scripts and the echo take
    /// every one, the others are only read.
    pub fn methods(&self) -> Methods {
        match self {
            Handler::Cgi(_) | Handler::FastCgi(_) | Handler::Echo(_) | Handler::Proxy(_) => Methods::Any,
            // A files location whose try_files may hand the request to a script
            // lets every method reach it; it answers only GET and HEAD itself.
            Handler::Files(files) if files.may_redirect() => Methods::Any,
            Handler::Files(_) | Handler::Status(_) | Handler::Health(_) | Handler::Metrics(_) => Methods::ReadOnly,
        }
    }

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

    /// Whether it answers from the request's body: the event loop reads the body
    /// whole before the request reaches it (`gateway::incoming`). A files location
    /// whose `try_files` ends at a path does too: it may hand the request to a
    /// script (a front controller).
    pub fn reads_body(&self) -> bool {
        match self {
            Handler::Cgi(_) | Handler::FastCgi(_) | Handler::Echo(_) | Handler::Proxy(_) => true,
            Handler::Files(files) => files.may_redirect(),
            _ => false,
        }
    }
}
