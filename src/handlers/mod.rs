//! What answers a request once it is read and its vhost and location are known.
//!
//! A [`Handler`] is what the connection calls: it gets the request ([`Ask`]) and
//! fills a [`Reply`]. Static files ([`static_file`]: files, directories, listings
//! from [`listing`], each worker's cache of mapped files in [`file_cache`]) and the
//! status page ([`status_page`]) and the health check ([`health`]) are handlers.
//! Another kind (metrics,
//! CGI) is one more variant of [`Handler`], its module here, and its key in a
//! `[[vhost.location]]` block (`config`, `site`).

pub mod file_cache;
pub mod health;
pub mod listing;
pub mod static_file;
pub mod status_page;

use std::net::IpAddr;

use crate::http::path::CleanPath;
use crate::http::request::{Method, Request};
use crate::http::response::{ALLOW, Body, Reply};

/// What one request asks of a handler.
pub struct Ask<'a> {
    pub req: &'a Request<'a>,
    /// The request's path, decoded and cleaned: what the locations were matched on.
    pub path: &'a CleanPath<'a>,
    /// The query string as sent (after `?`), if any.
    pub query: Option<&'a [u8]>,
    pub client: IpAddr,
}

/// What answers at a location (or, with no location matching, at a vhost).
pub enum Handler<'c> {
    /// Files from a directory.
    Files(static_file::StaticFiles<'c>),
    /// The server-status page.
    Status(status_page::StatusPage<'c>),
    /// The health check a load balancer polls.
    Health(health::HealthCheck<'c>),
}

impl Handler<'_> {
    pub fn serve(&self, ask: &Ask<'_>, reply: &mut Reply<'_>) {
        match self {
            Handler::Files(files) => files.serve(ask, reply),
            Handler::Status(page) => page.serve(ask, reply),
            Handler::Health(check) => check.serve(ask, reply),
        }
    }
}

/// The methods of a resource that is only read: true for GET and HEAD (serve them);
/// OPTIONS is answered here with `Allow`, any other method with 405.
pub fn read_only(req: &Request<'_>, reply: &mut Reply<'_>) -> bool {
    match req.method {
        Method::Get | Method::Head => true,
        Method::Options => {
            reply.header("Allow", ALLOW);
            reply.body = Body::Owned(Vec::new());
            false
        }
        Method::OtherKnown => {
            not_allowed(reply);
            false
        }
    }
}

/// 405 for a method no handler here answers.
pub fn not_allowed(reply: &mut Reply<'_>) {
    reply.error(405, "This resource only answers GET, HEAD and OPTIONS.");
}
