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

pub mod access;
pub mod basic;
pub mod compress;
pub mod encoding;
pub mod headers;
pub mod htpasswd;
pub mod redirect;
