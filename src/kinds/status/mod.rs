//! `status = true`: the server-status page at a location ([`page`]: Apache's
//! `?auto`, `?json` and the HTML page with its live view). No other key; unless the
//! location sets it, its `allow` is `[status] allow` (loopback unless set), whatever
//! its vhost's; the metrics share that default.

pub mod page;

use crate::base::cidr::Cidr;
use crate::keys::write::Toml;
use crate::rules::Rules;
use crate::rules::access::{Access, Who};

pub use page::StatusPage;

/// The key that chooses it.
pub const KEY: &str = "status";

pub(super) fn show(t: &mut Toml) {
    t.key(KEY, toml::Value::Boolean(true));
}

/// Its rules unless its location sets them: `[status] allow`.
pub(super) fn rules(allow: &[Cidr]) -> Rules {
    let allow: Vec<Who> = allow.iter().map(|c| Who::Range(*c)).collect();
    Rules { access: Some(Access::new(&allow, &[], true)), ..Rules::default() }
}
