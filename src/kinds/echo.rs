//! `echo = true`: a diagnostic location that answers a request with its own body,
//! sent back as it comes ([`crate::handlers::echo`]). No other key; anyone may ask
//! unless its location or vhost sets `allow`.

use crate::keys::write::Toml;
use crate::handlers::Handler;
use crate::handlers::echo::Echo;

/// The key that chooses it.
pub const KEY: &str = "echo";

pub(super) fn show(t: &mut Toml) {
    t.key(KEY, toml::Value::Boolean(true));
}

pub(super) fn build<'c>() -> Handler<'c> {
    Handler::Echo(Echo)
}
