//! The server-status page: the scoreboard as HTML, Apache's `?auto` text or `?json`
//! ([`crate::status::Snapshot`]), for the clients `[status] allow` lets in.

use super::ask::{Ask, read_only};
use crate::config::Config;
use crate::http::response::{Body, Reply};
use crate::scoreboard::Scoreboard;
use crate::status::Snapshot;

/// The status-page handler of a worker.
#[derive(Clone, Copy)]
pub struct StatusPage<'c> {
    pub scoreboard: &'c Scoreboard,
    /// The master's pid (this process's own in single-process mode).
    pub master_pid: i32,
    pub config: &'c Config,
}

/// The status page's rules, which the metrics share: only read (GET and HEAD; OPTIONS
/// gets its `Allow`, other methods 405), and only by the clients `[status] allow`
/// lets in. False when `reply` already holds the answer; `what` names the resource
/// in a refusal.
pub fn admit(config: &Config, ask: &Ask<'_>, reply: &mut Reply<'_>, what: &str) -> bool {
    if !read_only(ask.req, reply) {
        return false;
    }
    if !config.status.allow.iter().any(|cidr| cidr.contains(ask.client)) {
        reply.error(403, &format!("{what} not available to this client."));
        return false;
    }
    true
}

impl StatusPage<'_> {
    pub fn serve(&self, ask: &Ask<'_>, reply: &mut Reply<'_>) {
        if !admit(self.config, ask, reply, "The status page is") {
            return;
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        let snap =
            Snapshot::take(self.scoreboard, self.master_pid).with_certificates(self.config.certificate_expiries(now));
        let query = ask.query.unwrap_or(b"");
        let wants = |key: &[u8]| query.split(|&b| b == b'&' || b == b';').any(|k| k == key);
        let (ty, body) = if wants(b"auto") {
            ("text/plain; charset=utf-8", snap.auto())
        } else if wants(b"json") {
            ("application/json", snap.json())
        } else {
            ("text/html; charset=utf-8", snap.html())
        };
        reply.header("Content-Type", ty).header("Cache-Control", "no-store");
        reply.body = Body::Owned(body.into_bytes());
    }
}
