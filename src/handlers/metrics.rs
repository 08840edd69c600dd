//! The Prometheus metrics (`metrics = true` on a location): the scoreboard's counters
//! in Prometheus' text format ([`crate::metrics::render`]). Who may see them is its
//! location's `allow` (by default `[status] allow`, as the status page's), checked
//! before it is asked.

use super::ask::{Ask, read_only};
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
    pub fn serve(&self, ask: &Ask<'_>, reply: &mut Reply<'_>) {
        if !read_only(ask.req, reply) {
            return;
        }
        let text = crate::metrics::render(self.scoreboard, self.config);
        // The version of the text format, as Prometheus' own clients send it.
        reply.header("Content-Type", "text/plain; version=0.0.4; charset=utf-8").header("Cache-Control", "no-store");
        reply.body = Body::Owned(text.into_bytes());
    }
}
