//! `health = true`: the health check a load balancer polls: `200 ok` while the
//! server serves, `503 draining` from the moment a graceful stop begins (through
//! its `server.drain_time`, while everything else is still served as usual) or an
//! upgrade's old generation gives way to the new master. So HAProxy's `option
//! httpchk` takes the node out before any of its connections close. Its requests
//! stay out of the access logs by default. No other key, no rule of its own: anyone
//! may ask unless its location or vhost sets `allow`.

use crate::exchange::Ask;
use crate::http::response::{Body, Reply};
use crate::keys::write::Toml;
use crate::scoreboard::Header;

/// The key that chooses it.
pub const KEY: &str = "health";

pub(super) fn show(t: &mut Toml) {
    t.key(KEY, toml::Value::Boolean(true));
}

/// The health-check handler of a worker.
#[derive(Clone, Copy)]
pub struct HealthCheck<'c> {
    pub header: &'c Header,
}

impl HealthCheck<'_> {
    pub fn serve(&self, _ask: &Ask<'_>, reply: &mut Reply<'_>) {
        reply.header("Content-Type", "text/plain; charset=utf-8").header("Cache-Control", "no-store");
        if self.header.draining() {
            reply.status = 503;
            reply.body = Body::Owned(b"draining\n".to_vec());
        } else {
            reply.body = Body::Owned(b"ok\n".to_vec());
        }
    }
}
