//! Per-location rules: what a `[[vhost.location]]` (or its `[[vhost]]`, as the default
//! for its locations) asks of every request there, besides what answers it.
//!
//! Each rule is resolved when the config is read into what a request checks cheaply,
//! and each is a pure module here, tested beside its code:
//!
//! - [`access`]: `allow` / `deny` address lists, first match wins.
//! - [`htpasswd`] and [`basic`]: HTTP Basic auth, the files Debian's `htpasswd` writes,
//!   the `Authorization` header, the per-worker cache of verified credentials and the
//!   slowing of a client that keeps failing.
//! - [`redirect`]: `return` (a status, or a redirect whose target takes the captures of
//!   a regex location and a few request variables).
//! - [`headers`]: `headers` to add, `expires`, `charset`.
//! - [`encoding`]: `Accept-Encoding` negotiation for precompressed siblings and
//!   compression on the fly; [`compress`] makes the compressed copies.
//!
//! [`Rules`] is where they meet the config: the rules of one location or vhost, as
//! written. [`Rules::read`] takes each rule's keys out of the table (a location's or a
//! vhost's, the same keys on both), [`Rules::show`] writes them back for `pika -T`,
//! [`Rules::over`] makes those in force (a location's own, else its kind's default
//! (the status page and the metrics: `[status] allow`), else its vhost's; when a
//! worker builds its sites), and [`Rules::gate`] makes what the request path checks
//! before the location's handler: the [`Gate`]. A new rule is its module, its field
//! in [`Rules`] (with its line in each of those four functions), its keys in
//! [`KEYS`], and, if a request is checked by it, its field in [`Gate`].

pub mod access;
pub mod basic;
pub mod compress;
pub mod encoding;
pub mod headers;
pub mod htpasswd;
pub mod redirect;

use crate::config::read::{ConfigError, Ctx, Keys};
use crate::config::show::Toml;
use crate::handlers::Ask;
use crate::http::response::Reply;
use access::Access;

/// Every key of the rules, as the config writes them (on a location and a vhost).
pub const KEYS: &[&str] = &[access::ALLOW];

/// The rules of one location or vhost, as written: `None` where a rule is not set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    /// `allow`: who may ask.
    pub access: Option<Access>,
}

impl Rules {
    /// Takes the rules' keys out of a location's or a vhost's table.
    pub(crate) fn read(keys: &mut Keys, ctx: &Ctx) -> Result<Rules, ConfigError> {
        Ok(Rules { access: access::read(keys, ctx)? })
    }

    /// These rules where set, else `under`'s, rule by rule.
    pub fn over(&self, under: &Rules) -> Rules {
        Rules { access: self.access.clone().or_else(|| under.access.clone()) }
    }

    /// The keys as written, for `pika -T`.
    pub(crate) fn show(&self, t: &mut Toml) {
        if let Some(a) = &self.access {
            access::show(a, t);
        }
    }

    /// What the request path checks for these rules (those in force).
    pub fn gate(&self) -> Gate {
        Gate { access: self.access.clone().filter(|a| !a.is_open()), host_names: None }
    }
}

/// What a request must pass before its location's handler answers it.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    /// `None`: every client may ask.
    access: Option<Access>,
    /// The names a request's Host must be (else an IP literal or `localhost`, see
    /// [`crate::vhost::names_this_server`]); `None`: any Host.
    host_names: Option<Vec<String>>,
}

impl Gate {
    /// The same gate, and a Host that is not one of `names` (nor an IP literal, nor
    /// `localhost`) is answered 421: for the status page and the metrics, which a
    /// browser on an allowed address must not be made to read through a name an
    /// attacker's DNS points at this server.
    pub fn only_for_names(mut self, names: &[String]) -> Gate {
        self.host_names = Some(names.to_vec());
        self
    }

    /// True when the request may go on to the handler; else `reply` holds the refusal.
    #[inline]
    pub fn admit(&self, ask: &Ask<'_>, reply: &mut Reply<'_>) -> bool {
        if let (Some(names), Some(host)) = (&self.host_names, ask.req.host)
            && !crate::vhost::names_this_server(names, host)
        {
            reply.error(421, "This server does not answer this page for that host name; use one of its names.");
            return false;
        }
        if let Some(a) = &self.access
            && !a.allows(ask.client)
        {
            reply.error(403, "This resource is not available to this client.");
            return false;
        }
        true
    }
}
