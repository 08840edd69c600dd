//! `metrics = true`: the Prometheus metrics at a location: the scoreboard's counters
//! in Prometheus' text format ([`render`]), for the clients `[status] allow` lets in
//! (loopback by default) unless the location sets its own `allow`, as the status
//! page. No other key.

pub mod render;

use super::status::page::View;
use crate::exchange::Ask;
use crate::http::response::{Body, Reply};
use crate::keys::write::Toml;

/// The key that chooses it.
pub const KEY: &str = "metrics";

pub(super) fn show(t: &mut Toml) {
    t.key(KEY, toml::Value::Boolean(true));
}

/// The metrics handler of a worker.
#[derive(Clone, Copy)]
pub struct Metrics<'c> {
    pub server: View<'c>,
}

impl Metrics<'_> {
    pub fn serve(&self, _ask: &Ask<'_>, reply: &mut Reply<'_>) {
        let text = render::render(&self.server);
        // The version of the text format, as Prometheus' own clients send it.
        reply.header("Content-Type", "text/plain; version=0.0.4; charset=utf-8").header("Cache-Control", "no-store");
        reply.body = Body::Owned(text.into_bytes());
    }
}
