//! `status = true`: the server-status page ([`crate::handlers::status_page`]) at a
//! location. No other key; unless the location sets it, its `allow` is `[status]
//! allow` (loopback unless set), whatever its vhost's.

use super::Build;
use crate::config::Config;
use crate::keys::write::Toml;
use crate::handlers::Handler;
use crate::rules::Rules;
use crate::rules::access::{Access, Who};

/// The key that chooses it.
pub const KEY: &str = "status";

pub(super) fn show(t: &mut Toml) {
    t.key(KEY, toml::Value::Boolean(true));
}

/// Its rules unless its location sets them: `[status] allow`.
pub(super) fn rules(config: &Config) -> Rules {
    let allow: Vec<Who> = config.status.allow.iter().map(|c| Who::Range(*c)).collect();
    Rules { access: Some(Access::new(&allow, &[], true)), ..Rules::default() }
}

pub(super) fn build<'c>(b: &Build<'c, '_>) -> Handler<'c> {
    Handler::Status(b.status)
}
