//! What answers a request once it is read and its vhost and location are known.
//!
//! A [`Handler`] is what the connection calls: it gets the request ([`Ask`]) and
//! fills a [`Reply`]. Static files ([`static_file`]: files, directories, listings
//! from [`listing`], each worker's cache of mapped files in [`file_cache`]), the
//! status page ([`status_page`]), the health check ([`health`]) and the Prometheus
//! metrics ([`metrics`]) are handlers. Another kind (CGI) is one more variant of
//! [`Handler`], its module here, and its key in a `[[vhost.location]]` block
//! (`config`, `site`).

mod ask;
pub mod file_cache;
pub mod health;
pub mod listing;
pub mod metrics;
pub mod static_file;
pub mod status_page;

pub use ask::{Ask, not_allowed, read_only};

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
}

impl Handler<'_> {
    pub fn serve(&self, ask: &Ask<'_>, reply: &mut Reply<'_>) {
        match self {
            Handler::Files(files) => files.serve(ask, reply),
            Handler::Status(page) => page.serve(ask, reply),
            Handler::Health(check) => check.serve(ask, reply),
            Handler::Metrics(metrics) => metrics.serve(ask, reply),
        }
    }
}
