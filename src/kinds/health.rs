//! `health = true`: the health check a load balancer polls
//! ([`crate::handlers::health`]) at a location. No other key, no rule of its own:
//! anyone may ask unless its location or vhost sets `allow`.

use super::Build;
use crate::keys::write::Toml;
use crate::handlers::Handler;
use crate::handlers::health::HealthCheck;

/// The key that chooses it.
pub const KEY: &str = "health";

pub(super) fn show(t: &mut Toml) {
    t.key(KEY, toml::Value::Boolean(true));
}

pub(super) fn build<'c>(b: &Build<'c, '_>) -> Handler<'c> {
    Handler::Health(HealthCheck { header: b.status.scoreboard.header })
}
