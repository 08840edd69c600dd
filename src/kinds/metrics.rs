//! `metrics = true`: the Prometheus metrics ([`crate::handlers::metrics`]) at a
//! location. No other key; unless the location sets it, its `allow` is `[status]
//! allow`, as the status page's.

use super::Build;
use crate::config::Config;
use crate::keys::write::Toml;
use crate::handlers::Handler;
use crate::handlers::metrics::Metrics;
use crate::rules::Rules;

/// The key that chooses it.
pub const KEY: &str = "metrics";

pub(super) fn show(t: &mut Toml) {
    t.key(KEY, toml::Value::Boolean(true));
}

/// Its rules unless its location sets them: `[status] allow`.
pub(super) fn rules(config: &Config) -> Rules {
    super::status::rules(config)
}

pub(super) fn build<'c>(b: &Build<'c, '_>) -> Handler<'c> {
    Handler::Metrics(Metrics { scoreboard: b.status.scoreboard, config: b.config })
}
