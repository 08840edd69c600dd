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
//! - [`apply`]: where they meet a request: the gate's checks before the handler, the
//!   decoration of the answer after it.
//!
//! [`Rules`] is where they meet the config: the rules of one location or vhost, as
//! written. [`Rules::read`] takes each rule's keys out of the table (a location's or a
//! vhost's, the same keys on both), [`Rules::show`] writes them back for `pika -T`,
//! [`Rules::over`] makes those in force (a location's own, else its kind's default
//! (the status page and the metrics: `[status] allow`), else its vhost's; when a
//! worker builds its sites), and [`Rules::gate`] makes what the request path checks
//! before the location's handler: the [`Gate`]; [`Rules::decor`] what is added to the
//! answer after it ([`Decor`]); [`Rules::files`] what a files location does with its
//! files ([`FileRules`]: fallbacks, codings). A new rule is its module, its field in
//! [`Rules`] (with its line in each of those functions), its keys in [`KEYS`], and
//! its field in [`Gate`], [`Decor`] or [`FileRules`].

pub mod access;
pub mod apply;
pub mod basic;
pub mod compress;
pub mod encoding;
pub mod headers;
pub mod htpasswd;
pub mod redirect;

use std::path::Path;
use std::sync::Arc;

use crate::keys::read::{ConfigError, Ctx, Keys};
use crate::keys::write::{Toml, string, strings};
use access::Access;
pub use apply::{Decor, Gate};
pub use basic::Auth;
use encoding::Coding;
use headers::{AddHeaders, Expires};
use redirect::{Return, Template};

/// Every key of the rules, as the config writes them (on a location and a vhost).
pub const KEYS: &[&str] = &[
    access::ALLOW,
    access::DENY,
    basic::KEYS[0],
    basic::KEYS[1],
    basic::KEYS[2],
    redirect::KEYS[0],
    redirect::KEYS[1],
    headers::KEYS[0],
    headers::KEYS[1],
    headers::KEYS[2],
    headers::KEYS[3],
    compress::KEYS[0],
    compress::KEYS[1],
    compress::KEYS[2],
    compress::KEYS[3],
];

/// The keys of the rules a location has and a vhost does not (a vhost's would
/// apply to every location, round and round).
pub const LOCATION_KEYS: &[&str] = &[redirect::KEYS[2], redirect::KEYS[3]];

/// The rules of one location or vhost, as written: `None` where a rule is not set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    /// `allow` / `deny`: who may ask.
    pub access: Option<Access>,
    /// `auth_file` and `auth_realm` (`Some(None)`: `auth_file = "off"`).
    pub auth: Option<Option<Arc<Auth>>>,
    /// `satisfy = "any"` (true) or `"all"`.
    pub satisfy_any: Option<bool>,
    /// `return`.
    pub ret: Option<Return>,
    /// `try_files`.
    pub try_files: Option<Vec<String>>,
    /// `rewrite`: served again at this target (a location's own, never inherited).
    pub rewrite: Option<Template>,
    /// `internal`: reached by internal redirects only (a location's own).
    pub internal: Option<bool>,
    /// `headers` and `headers_always`.
    pub headers: Option<AddHeaders>,
    /// `expires` (empty: `"off"`).
    pub expires: Option<Expires>,
    /// `charset` (`"off"`: none).
    pub charset: Option<String>,
    /// `precompressed`: the siblings looked for, in the server's order.
    pub precompressed: Option<Vec<Coding>>,
    /// `compress`: the codings made on the fly, in the server's order.
    pub compress: Option<Vec<Coding>>,
    pub compress_types: Option<Vec<String>>,
    pub compress_min_size: Option<u64>,
}

/// What a table's rules are read with besides its keys.
pub(crate) struct Reading<'a> {
    /// Where relative paths start (the server's root).
    pub(crate) root: &'a Path,
    /// The location's regex, whose captures `return` and `rewrite` may name.
    pub(crate) regex: Option<&'a regex_lite::Regex>,
    /// The table is a location's (else a vhost's).
    pub(crate) location: bool,
}

impl Rules {
    /// Takes the rules' keys out of a location's or a vhost's table.
    pub(crate) fn read(keys: &mut Keys, ctx: &Ctx, r: &Reading<'_>) -> Result<Rules, ConfigError> {
        let rules = Rules {
            access: access::read(keys, ctx)?,
            auth: basic::read(keys, ctx, r.root)?,
            satisfy_any: basic::read_satisfy(keys, ctx)?,
            ret: redirect::read(keys, ctx, r.regex)?,
            try_files: redirect::read_try_files(keys, ctx)?,
            rewrite: redirect::read_rewrite(keys, ctx, r.regex, r.location)?,
            internal: redirect::read_internal(keys, ctx, r.location)?,
            headers: headers::read(keys, ctx)?,
            expires: headers::read_expires(keys, ctx)?,
            charset: headers::read_charset(keys, ctx)?,
            precompressed: compress::read_codings(keys, ctx, "precompressed")?,
            compress: compress::read_codings(keys, ctx, "compress")?,
            compress_types: compress::read_types(keys, ctx)?,
            compress_min_size: compress::read_min_size(keys, ctx)?,
        };
        if rules.rewrite.is_some() && rules.ret.is_some() {
            return Err(ctx.error(0..0, "a location with return and rewrite: keep one"));
        }
        let sets_cache_control = rules.headers.as_ref().is_some_and(|h| h.sets("cache-control"));
        if sets_cache_control && rules.expires.as_ref().is_some_and(|e| !e.is_empty()) {
            return Err(ctx.error(0..0, "headers sets Cache-Control and expires sets it too: keep one"));
        }
        Ok(rules)
    }

    /// The key of a rule that only a files location can have, if one is set
    /// (`try_files` a FastCGI location may have too).
    pub fn files_only(&self, fastcgi: bool) -> Option<&'static str> {
        if self.try_files.is_some() && !fastcgi {
            Some("try_files")
        } else if self.precompressed.as_ref().is_some_and(|p| !p.is_empty()) {
            Some("precompressed")
        } else {
            None
        }
    }

    /// These rules where set, else `under`'s, rule by rule.
    pub fn over(&self, under: &Rules) -> Rules {
        fn or<T: Clone>(a: &Option<T>, b: &Option<T>) -> Option<T> {
            a.clone().or_else(|| b.clone())
        }
        Rules {
            access: or(&self.access, &under.access),
            auth: or(&self.auth, &under.auth),
            satisfy_any: or(&self.satisfy_any, &under.satisfy_any),
            ret: or(&self.ret, &under.ret),
            try_files: or(&self.try_files, &under.try_files),
            // A location's own: a vhost has none, and a kind's default is none.
            rewrite: self.rewrite.clone(),
            internal: self.internal,
            headers: or(&self.headers, &under.headers),
            expires: or(&self.expires, &under.expires),
            charset: or(&self.charset, &under.charset),
            precompressed: or(&self.precompressed, &under.precompressed),
            compress: or(&self.compress, &under.compress),
            compress_types: or(&self.compress_types, &under.compress_types),
            compress_min_size: or(&self.compress_min_size, &under.compress_min_size),
        }
    }

    /// The keys as written, for `pika -T`.
    pub(crate) fn show(&self, t: &mut Toml) {
        if let Some(a) = &self.access {
            access::show(a, t);
        }
        basic::show(self.auth.as_ref(), self.satisfy_any, t);
        redirect::show(self.ret.as_ref(), self.try_files.as_ref(), self.rewrite.as_ref(), self.internal, t);
        headers::show(self.headers.as_ref(), self.expires.as_ref(), self.charset.as_ref(), t);
        self.show_compress(t);
    }

    /// The compression keys for `pika -T`, as written.
    fn show_compress(&self, t: &mut Toml) {
        let codings = |list: &[Coding]| toml::Value::Array(list.iter().map(|c| string(c.token())).collect());
        if let Some(p) = &self.precompressed {
            t.key("precompressed", codings(p));
        }
        if let Some(c) = &self.compress {
            t.key("compress", codings(c));
        }
        if let Some(types) = &self.compress_types {
            t.key("compress_types", strings(types));
        }
        if let Some(n) = self.compress_min_size {
            t.key("compress_min_size", n);
        }
    }

    /// What the request path checks for these rules (those in force).
    pub fn gate(&self) -> Gate {
        Gate {
            access: self.access.clone().filter(|a| !a.is_open()),
            auth: self.auth.clone().flatten(),
            satisfy_any: self.satisfy_any.unwrap_or(false),
            ret: self.ret.clone(),
            rewrite: self.rewrite.clone(),
            internal: self.internal.unwrap_or(false),
            host_names: None,
        }
    }

    /// The gate of these rules' access alone (`allow`, `deny`, `auth_file`,
    /// `satisfy`), if they set any: what a prefix location asks of a request that a
    /// regex location takes from it.
    pub fn access_gate(&self) -> Option<Gate> {
        let auth = self.auth.clone().flatten();
        let access = self.access.clone().filter(|a| !a.is_open());
        if access.is_none() && auth.is_none() {
            return None;
        }
        Some(Gate { access, auth, satisfy_any: self.satisfy_any.unwrap_or(false), ..Gate::default() })
    }

    /// What is added to the answers (those in force).
    pub fn decor(&self) -> Decor {
        Decor {
            headers: self.headers.clone().unwrap_or_default(),
            expires: self.expires.clone().unwrap_or_default(),
            charset: self.charset.clone().filter(|c| c != "off"),
            compress: self.compress.clone().unwrap_or_default(),
            compress_types: self.compress_types(),
            compress_min_size: self.compress_min_size.unwrap_or(compress::DEFAULT_MIN_SIZE),
        }
    }

    /// What a files location does with its files (those in force).
    pub fn files(&self) -> FileRules {
        FileRules {
            try_files: self.try_files.clone().unwrap_or_default(),
            precompressed: self.precompressed.clone().unwrap_or_default(),
            compress: self.compress.clone().unwrap_or_default(),
            compress_types: self.compress_types(),
            compress_min_size: self.compress_min_size.unwrap_or(compress::DEFAULT_MIN_SIZE),
        }
    }

    fn compress_types(&self) -> Vec<String> {
        self.compress_types.clone().unwrap_or_else(|| compress::DEFAULT_TYPES.iter().map(|t| t.to_string()).collect())
    }
}

/// What a files location does with its files: `try_files`, precompressed siblings,
/// compression on the fly.
#[derive(Debug, Clone, Default)]
pub struct FileRules {
    pub try_files: Vec<String>,
    pub precompressed: Vec<Coding>,
    pub compress: Vec<Coding>,
    pub compress_types: Vec<String>,
    pub compress_min_size: u64,
}
