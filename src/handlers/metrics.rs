//! The Prometheus metrics (`metrics = true` on a location): the scoreboard's counters
//! in Prometheus' text format ([`crate::metrics::render`]), for the clients
//! `[status] allow` lets in (loopback by default), as the status page.

use super::ask::Ask;
use crate::config::Config;
use crate::http::response::{Body, Reply};
use crate::scoreboard::Scoreboard;

/// The metrics handler of a worker.
#[derive(Clone, Copy)]
pub struct Metrics<'c> {
    pub scoreboard: &'c Scoreboard,
    pub config: &'c Config,
}

impl Metrics<'_> {
    pub fn serve(&self, _ask: &Ask<'_>, reply: &mut Reply<'_>) {
        let text = crate::metrics::render(self.scoreboard, self.config);
        // The version of the text format, as Prometheus' own clients send it.
        reply.header("Content-Type", "text/plain; version=0.0.4; charset=utf-8").header("Cache-Control", "no-store");
        reply.body = Body::Owned(text.into_bytes());
    }
}
