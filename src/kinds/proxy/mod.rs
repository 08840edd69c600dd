//! `proxy = "http://127.0.0.1:8000"` or `"unix:/run/app.sock"`, or a list of them:
//! requests passed to upstream HTTP servers ([`relay`]), with
//! `proxy_host`, `proxy_timeout` and `proxy_buffering` (nginx's names), and
//! `proxy_via` (Apache's `ProxyVia`: nginx has none). Several upstreams
//! ([`crate::gateway::balance`]) take `proxy_balance` (`"round_robin"`, nginx's
//! default, or `"least_conn"`, nginx's directive), `proxy_max_fails` and
//! `proxy_fail_timeout` (nginx's `max_fails` and `fail_timeout`), and `proxy_backup`
//! (nginx's `backup` flag as a key of its own: the list in `proxy` stays plain URLs,
//! and `-T` shows the backups apart).
//!
//! For connections that switch protocols (a WebSocket): `proxy_upgrade` (Apache's
//! `upgrade=` on `ProxyPass`) and `tunnel_timeout`.

use std::time::Duration;

pub mod relay;

use super::files::Reading;
use crate::gateway::ProxyConfig;
use crate::gateway::balance::{Balance, FAIL_TIMEOUT, Health, MAX_FAILS};
use crate::gateway::upstream::Upstream;
use crate::http::pattern::Pattern;
use crate::keys::read::{ConfigError, Keys};
use crate::keys::units::Secs;
use crate::keys::write::{Toml, duration, int, string, strings};
use crate::scoreboard::upstreams::UpstreamTable;
use relay::Proxy;

/// The key that chooses it.
pub const KEY: &str = "proxy";
/// Its keys.
pub const KEYS: &[&str] = &[
    "proxy",
    "proxy_host",
    "proxy_timeout",
    "proxy_buffering",
    "proxy_via",
    "proxy_balance",
    "proxy_max_fails",
    "proxy_fail_timeout",
    "proxy_backup",
    "proxy_upgrade",
    "tunnel_timeout",
];

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

/// One URL or a list of them.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum RawUrls {
    One(String),
    List(Vec<String>),
}

/// The upstreams of `key` (`proxy`, `proxy_backup`), none if unset.
fn urls(keys: &mut Keys, r: &Reading<'_>, key: &str) -> Result<Vec<Upstream>, ConfigError> {
    let Some(given) = keys.take::<RawUrls>(r.ctx, key)? else { return Ok(Vec::new()) };
    let list = match given.get_ref() {
        RawUrls::One(u) => std::slice::from_ref(u),
        RawUrls::List(l) => &l[..],
    };
    if list.is_empty() && key == KEY {
        return Err(r.ctx.spanned(&given, format!("{key}: an empty list")));
    }
    let mut out: Vec<Upstream> = Vec::new();
    for u in list {
        let up = Upstream::parse(u).ok_or_else(|| {
            r.ctx.spanned(
                &given,
                format!("{key} {u:?}: give \"http://host:port\" (a path after it optional) or \"unix:/path/to.sock\""),
            )
        })?;
        if out.iter().any(|o| o.server() == up.server()) {
            return Err(r.ctx.spanned(&given, format!("{key}: {} is listed twice", up.server())));
        }
        out.push(up);
    }
    Ok(out)
}

pub(super) fn read(keys: &mut Keys, r: &Reading<'_>) -> Result<ProxyConfig, ConfigError> {
    let upstreams = urls(keys, r, KEY)?;
    if upstreams.is_empty() {
        return Err(r.ctx.error(r.at.clone(), "proxy: no upstream"));
    }
    let backups = urls(keys, r, "proxy_backup")?;
    if let Some(b) = backups.iter().find(|b| upstreams.iter().any(|u| u.server() == b.server())) {
        return Err(r.ctx.error(r.at.clone(), format!("proxy_backup: {} is in proxy too", b.server())));
    }
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
    let balance = match keys.take::<String>(r.ctx, "proxy_balance")? {
        None => Balance::default(),
        Some(b) => Balance::parse(b.get_ref()).ok_or_else(|| {
            r.ctx.spanned(&b, format!("proxy_balance {:?}: give one of {:?}", b.get_ref(), Balance::NAMES))
        })?,
    };
    let max_fails = keys.take::<u32>(r.ctx, "proxy_max_fails")?.map_or(MAX_FAILS, |n| n.into_inner());
    let fail_timeout = match keys.take::<Secs>(r.ctx, "proxy_fail_timeout")? {
        Some(t) if t.get_ref().0 < Duration::from_secs(1) => {
            return Err(r.ctx.spanned(&t, "proxy_fail_timeout must be a second or more"));
        }
        Some(t) => t.into_inner().0,
        None => FAIL_TIMEOUT,
    };
    let health = Health { max_fails, fail_timeout };
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
    Ok(ProxyConfig { upstreams, backups, balance, health, host, timeout, buffering, via, upgrades, tunnel_timeout })
}

/// One URL as a string, several as a list.
fn urls_value(list: &[Upstream]) -> toml::Value {
    match list {
        [one] => string(&one.to_string()),
        _ => toml::Value::Array(list.iter().map(|u| string(&u.to_string())).collect()),
    }
}

pub(super) fn show(p: &ProxyConfig, t: &mut Toml) {
    t.key(KEY, urls_value(&p.upstreams));
    if let Some(h) = &p.host {
        t.key("proxy_host", string(h));
    }
    t.key("proxy_timeout", duration(p.timeout));
    t.key("proxy_buffering", toml::Value::Boolean(p.buffering));
    t.key("proxy_via", toml::Value::Boolean(p.via));
    t.key("proxy_balance", string(p.balance.name()));
    t.key("proxy_max_fails", int(p.health.max_fails));
    t.key("proxy_fail_timeout", duration(p.health.fail_timeout));
    // None shows as an empty list (one URL would read as a string).
    let backups = if p.backups.is_empty() { toml::Value::Array(Vec::new()) } else { urls_value(&p.backups) };
    t.key("proxy_backup", backups);
    t.key("proxy_upgrade", strings(&p.upgrades));
    t.key("tunnel_timeout", duration(p.tunnel_timeout));
}

pub(super) fn build<'c>(p: &'c ProxyConfig, at: Option<&'c Pattern>, table: &'c UpstreamTable) -> Proxy<'c> {
    // A path in the URL replaces what a prefix (or exact) location matched.
    let prefix = match at {
        Some(Pattern::Prefix(s) | Pattern::Exact(s)) => Some(s.as_str()),
        _ => None,
    };
    Proxy::new(p, prefix, table)
}
