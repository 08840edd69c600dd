//! The server-status page: the scoreboard as HTML, Apache's `?auto` text or `?json`
//! ([`crate::status::Snapshot`]), for the clients `[status] allow` lets in.

use crate::acme::expiry::Expiry;
use crate::exchange::Ask;
use crate::http::response::{Body, Reply};
use crate::scoreboard::Scoreboard;
use crate::status::Snapshot;

/// The live view's script (`?js`): it redraws the page's charts from `?json`.
pub const LIVE_JS: &str = include_str!("live.js");
/// The live view's stylesheet (`?css`).
pub const LIVE_CSS: &str = include_str!("live.css");

/// The HTML page's policy: its script, its stylesheet and its reads of `?json` come
/// from this server (`?js`, `?css`: the page's own path, which any location type
/// matches), and nothing else is loaded, run, framed or submitted. No inline script
/// or style, so no hash to keep in step with the page.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; \
                       base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The status-page handler of a worker.
#[derive(Clone, Copy)]
pub struct StatusPage<'c> {
    pub server: View<'c>,
}

/// What the status page, the metrics and the health check see of the server: its
/// scoreboard and the few settings they show, never the whole config.
#[derive(Clone, Copy)]
pub struct View<'c> {
    pub scoreboard: &'c Scoreboard,
    /// The master's pid (this process's own in single-process mode).
    pub master_pid: i32,
    pub workers_max: u32,
    pub max_connections: u32,
    /// Each vhost's certificate and its expiry, as of a time (Unix seconds).
    pub certificates: &'c dyn Fn(i64) -> Vec<Expiry>,
    /// The proxy locations' upstream servers as the pool's table names them, each
    /// with whether it is a backup.
    pub upstreams: &'c [(String, bool)],
}

impl StatusPage<'_> {
    pub fn serve(&self, ask: &Ask<'_>, reply: &mut Reply<'_>) {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        let snap = Snapshot::take(self.server.scoreboard, self.server.master_pid)
            .with_certificates((self.server.certificates)(now))
            .with_upstreams(
                self.server.scoreboard.upstreams.shown(self.server.upstreams, crate::base::clock::now_ms()),
            );
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
