//! `proxy = "http://127.0.0.1:8000"` or `"unix:/run/app.sock"`: requests passed to an
//! upstream HTTP server ([`crate::kinds::proxy::relay`]), with `proxy_host`,
//! `proxy_timeout` and `proxy_buffering` (nginx's names), and `proxy_via` (Apache's
//! `ProxyVia`: nginx has none).

use std::time::Duration;

pub mod relay;

use super::files::Reading;
use crate::gateway::ProxyConfig;
use crate::gateway::upstream::Upstream;
use crate::http::pattern::Pattern;
use crate::keys::read::{ConfigError, Keys};
use crate::keys::units::Secs;
use crate::keys::write::{Toml, duration, string};
use relay::Proxy;

/// The key that chooses it.
pub const KEY: &str = "proxy";
/// Its keys.
pub const KEYS: &[&str] = &["proxy", "proxy_host", "proxy_timeout", "proxy_buffering", "proxy_via"];

/// `proxy_timeout` when unset: a minute, as nginx's `proxy_read_timeout`.
pub const PROXY_TIMEOUT: Duration = Duration::from_secs(60);

pub(super) fn read(keys: &mut Keys, r: &Reading<'_>) -> Result<ProxyConfig, ConfigError> {
    let Some(given) = keys.take::<String>(r.ctx, KEY)? else {
        return Err(r.ctx.error(r.at.clone(), "proxy: no upstream"));
    };
    let upstream = Upstream::parse(given.get_ref()).ok_or_else(|| {
        r.ctx.spanned(
            &given,
            format!(
                "proxy {:?}: give \"http://host:port\" (a path after it optional) or \"unix:/path/to.sock\"",
                given.get_ref()
            ),
        )
    })?;
    let host = match keys.take::<String>(r.ctx, "proxy_host")? {
        Some(h) if h.get_ref().is_empty() || !h.get_ref().bytes().all(|b| b.is_ascii_graphic()) => {
            return Err(r.ctx.spanned(&h, "proxy_host must be a host name (with a port if need be)"));
        }
        h => h.map(|h| h.into_inner()),
    };
    let timeout = match keys.take::<Secs>(r.ctx, "proxy_timeout")? {
        Some(t) if t.get_ref().0.is_zero() => return Err(r.ctx.spanned(&t, "proxy_timeout must be more than zero")),
        Some(t) => t.into_inner().0,
        None => PROXY_TIMEOUT,
    };
    let buffering = keys.take::<bool>(r.ctx, "proxy_buffering")?.is_none_or(|b| b.into_inner());
    let via = keys.take::<bool>(r.ctx, "proxy_via")?.is_some_and(|b| b.into_inner());
    Ok(ProxyConfig { upstream, host, timeout, buffering, via })
}

pub(super) fn show(p: &ProxyConfig, t: &mut Toml) {
    t.key(KEY, string(&p.upstream.to_string()));
    if let Some(h) = &p.host {
        t.key("proxy_host", string(h));
    }
    t.key("proxy_timeout", duration(p.timeout));
    t.key("proxy_buffering", toml::Value::Boolean(p.buffering));
    t.key("proxy_via", toml::Value::Boolean(p.via));
}

pub(super) fn build<'c>(p: &'c ProxyConfig, at: Option<&'c Pattern>) -> Proxy<'c> {
    // A path in the URL replaces what a prefix (or exact) location matched.
    let prefix = match at {
        Some(Pattern::Prefix(s) | Pattern::Exact(s)) => Some(s.as_str()),
        _ => None,
    };
    Proxy::new(p, prefix)
}
