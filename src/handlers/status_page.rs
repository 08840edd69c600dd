//! The server-status page: the scoreboard as HTML, Apache's `?auto` text or `?json`
//! ([`crate::status::Snapshot`]), for the clients `[status] allow` lets in.

use super::ask::Ask;
use crate::config::Config;
use crate::http::response::{Body, Reply};
use crate::scoreboard::Scoreboard;
use crate::status::{LIVE_CSS, LIVE_JS, Snapshot};

/// The HTML page's policy: its script, its stylesheet and its reads of `?json` come
/// from this server (`?js`, `?css`: the page's own path, which any location type
/// matches), and nothing else is loaded, run, framed or submitted. No inline script
/// or style, so no hash to keep in step with the page.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; \
                       base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The status-page handler of a worker.
#[derive(Clone, Copy)]
pub struct StatusPage<'c> {
    pub scoreboard: &'c Scoreboard,
    /// The master's pid (this process's own in single-process mode).
    pub master_pid: i32,
    pub config: &'c Config,
}

impl StatusPage<'_> {
    pub fn serve(&self, ask: &Ask<'_>, reply: &mut Reply<'_>) {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        let snap =
            Snapshot::take(self.scoreboard, self.master_pid).with_certificates(self.config.certificate_expiries(now));
        let upstreams = self.scoreboard.upstreams.shown(&self.config.upstreams(), crate::clock::now_ms());
        let snap = snap.with_upstreams(upstreams);
        let query = ask.query.unwrap_or(b"");
        let wants = |key: &[u8]| query.split(|&b| b == b'&' || b == b';').any(|k| k == key);
        if wants(b"js") || wants(b"css") {
            let (ty, body) = if wants(b"js") {
                ("text/javascript; charset=utf-8", LIVE_JS)
            } else {
                ("text/css; charset=utf-8", LIVE_CSS)
            };
            reply
                .header("Content-Type", ty)
                .header("Cache-Control", "no-cache")
                .header("X-Content-Type-Options", "nosniff");
            reply.body = Body::Owned(body.as_bytes().to_vec());
            return;
        }
        let (ty, body) = if wants(b"auto") {
            ("text/plain; charset=utf-8", snap.auto())
        } else if wants(b"json") {
            ("application/json", snap.json())
        } else {
            reply.header("Content-Security-Policy", CSP);
            ("text/html; charset=utf-8", snap.html())
        };
        reply.header("Content-Type", ty).header("Cache-Control", "no-store");
        reply.body = Body::Owned(body.into_bytes());
    }
}
