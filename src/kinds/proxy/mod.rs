//! `proxy = "http://127.0.0.1:8000"` or `"unix:/run/app.sock"`: requests passed to an
//! upstream HTTP server ([`crate::kinds::proxy::relay`]), with `proxy_host`,
//! `proxy_timeout` and `proxy_buffering` (nginx's names), `proxy_via` (Apache's
//! `ProxyVia`: nginx has none), and for connections that switch protocols (a
//! WebSocket) `proxy_upgrade` (Apache's `upgrade=` on `ProxyPass`) and
//! `tunnel_timeout`.

use std::time::Duration;

pub mod relay;

use super::files::Reading;
use crate::gateway::ProxyConfig;
use crate::gateway::upstream::Upstream;
use crate::http::pattern::Pattern;
use crate::keys::read::{ConfigError, Keys};
use crate::keys::units::Secs;
use crate::keys::write::{Toml, duration, string, strings};
use relay::Proxy;

/// The key that chooses it.
pub const KEY: &str = "proxy";
/// Its keys.
pub const KEYS: &[&str] =
    &["proxy", "proxy_host", "proxy_timeout", "proxy_buffering", "proxy_via", "proxy_upgrade", "tunnel_timeout"];

/// `proxy_timeout` when unset: a minute, as nginx's `proxy_read_timeout`.
pub const PROXY_TIMEOUT: Duration = Duration::from_secs(60);

/// `proxy_upgrade` when unset: WebSocket, the upgrade browsers make.
pub const UPGRADES: &[&str] = &["websocket"];

/// `tunnel_timeout` when unset: a minute, what a tunnel gets from nginx (its
/// `proxy_read_timeout`) and from Apache (`ProxyWebsocketIdleTimeout`, after
/// `ProxyTimeout`), so a site moved from either keeps its behaviour; every common
/// WebSocket server pings well within it (python's websockets every 20 s,
/// Socket.IO 25 s), and a client gone without a word lets its two sockets go
/// within the minute. An idle tunnel holds no worker, so a longer one costs only
/// those sockets.
pub const TUNNEL_TIMEOUT: Duration = Duration::from_secs(60);

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
    let upgrades = match keys.take::<Vec<String>>(r.ctx, "proxy_upgrade")? {
        Some(list) => {
            // A token of RFC 9110 §5.6.2, as `Upgrade` names a protocol (without its version).
            let token = |t: &str| {
                !t.is_empty() && t.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
            };
            if let Some(bad) = list.get_ref().iter().find(|t| !token(t)) {
                return Err(r.ctx.spanned(
                    &list,
                    format!("proxy_upgrade {bad:?}: give protocol names as Upgrade says them (\"websocket\")"),
                ));
            }
            list.into_inner().iter().map(|t| t.to_ascii_lowercase()).collect()
        }
        None => UPGRADES.iter().map(|t| t.to_string()).collect(),
    };
    let tunnel_timeout = match keys.take::<Secs>(r.ctx, "tunnel_timeout")? {
        Some(t) if t.get_ref().0.is_zero() => return Err(r.ctx.spanned(&t, "tunnel_timeout must be more than zero")),
        Some(t) => t.into_inner().0,
        None => TUNNEL_TIMEOUT,
    };
    Ok(ProxyConfig { upstream, host, timeout, buffering, via, upgrades, tunnel_timeout })
}

pub(super) fn show(p: &ProxyConfig, t: &mut Toml) {
    t.key(KEY, string(&p.upstream.to_string()));
    if let Some(h) = &p.host {
        t.key("proxy_host", string(h));
    }
    t.key("proxy_timeout", duration(p.timeout));
    t.key("proxy_buffering", toml::Value::Boolean(p.buffering));
    t.key("proxy_via", toml::Value::Boolean(p.via));
    t.key("proxy_upgrade", strings(&p.upgrades));
    t.key("tunnel_timeout", duration(p.tunnel_timeout));
}

pub(super) fn build<'c>(p: &'c ProxyConfig, at: Option<&'c Pattern>) -> Proxy<'c> {
    // A path in the URL replaces what a prefix (or exact) location matched.
    let prefix = match at {
        Some(Pattern::Prefix(s) | Pattern::Exact(s)) => Some(s.as_str()),
        _ => None,
    };
    Proxy::new(p, prefix)
}
