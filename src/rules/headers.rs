//! `headers`, `expires` and `charset`: what a location adds to its answers.
//!
//! `headers = { "Cache-Control" = "no-store", "Content-Security-Policy" = "..." }` adds
//! lines, checked when the config is read (a name is an HTTP token, a value has no
//! control characters, and pika's own framing and validator headers cannot be set),
//! and made into bytes then, so a request copies one slice. They go on 2xx and 3xx
//! answers, or on every answer with `headers_always = true` (nginx's `add_header ...
//! always`). `expires` sets `Cache-Control: max-age` and `Expires`, for the location
//! or by content type (`{ "image/*" = "30d", "text/html" = "0s" }`), on the statuses
//! nginx gives it (200, 201, 204, 206, 301, 302, 303, 304, 307, 308), in place of a
//! script's own `Cache-Control` and `Expires` (as nginx's replaces them). `charset`
//! names the encoding of text answers (`Content-Type: text/html; charset=utf-8`).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::keys::read::{ConfigError, Ctx, Keys};
use crate::keys::units::parse_duration;
use crate::keys::write::{Toml, duration, string};

/// Its keys.
pub const KEYS: [&str; 4] = ["headers", "headers_always", "expires", "charset"];

/// `headers` (and `headers_always`) of a table, if set.
pub(crate) fn read(keys: &mut Keys, ctx: &Ctx) -> Result<Option<AddHeaders>, ConfigError> {
    let (list, always) =
        (keys.take::<BTreeMap<String, String>>(ctx, "headers")?, keys.take::<bool>(ctx, "headers_always")?);
    let Some(list) = list else {
        return match always {
            None => Ok(None),
            Some(a) => Err(ctx.spanned(&a, "headers_always goes with the headers it is about")),
        };
    };
    let pairs = list.get_ref().iter().map(|(n, v)| (n.clone(), v.clone())).collect();
    AddHeaders::new(pairs, always.is_some_and(|a| *a.get_ref()))
        .map(Some)
        .map_err(|e| ctx.spanned(&list, e.to_string()))
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum RawExpires {
    Seconds(u64),
    Time(String),
    ByType(BTreeMap<String, String>),
}

/// `expires` of a table, if set (`"off"`: none, whatever the vhost says).
pub(crate) fn read_expires(keys: &mut Keys, ctx: &Ctx) -> Result<Option<Expires>, ConfigError> {
    let Some(e) = keys.take::<RawExpires>(ctx, "expires")? else { return Ok(None) };
    let time = |s: &str| {
        parse_duration(s)
            .ok_or_else(|| ctx.spanned(&e, format!("expires {s:?} is not a time (\"30d\", \"1h\", \"0s\") or \"off\"")))
    };
    let expires = match e.get_ref() {
        RawExpires::Seconds(n) => Expires::all(Duration::from_secs(*n)),
        RawExpires::Time(s) if s == "off" => Expires::default(),
        RawExpires::Time(s) => Expires::all(time(s)?),
        RawExpires::ByType(map) => {
            let list = map.iter().map(|(ty, t)| Ok((ty.clone(), time(t)?))).collect::<Result<Vec<_>, ConfigError>>()?;
            Expires::by_type(list).map_err(|m| ctx.spanned(&e, m))?
        }
    };
    Ok(Some(expires))
}

/// `charset` of a table, if set (`"off"` kept: none, whatever the vhost says).
pub(crate) fn read_charset(keys: &mut Keys, ctx: &Ctx) -> Result<Option<String>, ConfigError> {
    let Some(c) = keys.take::<String>(ctx, "charset")? else { return Ok(None) };
    if !valid_charset(c.get_ref()) {
        return Err(
            ctx.spanned(&c, format!("charset {:?} is not a charset name (utf-8, iso-8859-1, ...)", c.get_ref()))
        );
    }
    Ok(Some(c.into_inner()))
}

/// The keys for `pika -T`, as written.
pub(crate) fn show(h: Option<&AddHeaders>, e: Option<&Expires>, charset: Option<&String>, t: &mut Toml) {
    if let Some(h) = h {
        let pairs: Vec<String> = h.list.iter().map(|(n, v)| format!("{} = {}", string(n), string(v))).collect();
        t.key("headers", format!("{{ {} }}", pairs.join(", ")));
        t.key("headers_always", h.always);
    }
    match e.map(Expires::list) {
        None => {}
        Some([]) => t.key("expires", string("off")),
        Some([(all, d)]) if all == "*" => t.key("expires", duration(*d)),
        Some(list) => {
            let pairs: Vec<String> = list.iter().map(|(ty, d)| format!("{} = {}", string(ty), duration(*d))).collect();
            t.key("expires", format!("{{ {} }}", pairs.join(", ")));
        }
    }
    if let Some(c) = charset {
        t.key("charset", string(c));
    }
}

/// Headers pika writes itself, which a `headers` rule may not set: the framing
/// (a second length would split the response), the validators (they must match the
/// bytes), and what the rules set through their own keys.
pub const RESERVED: [&str; 14] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "upgrade",
    "date",
    "server",
    "content-range",
    "content-encoding",
    "etag",
    "last-modified",
    "accept-ranges",
    "www-authenticate",
    "expires",
];

/// Whether `name` is an HTTP token (RFC 9110 §5.6.2).
pub fn is_token(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Whether `value` may be sent as a field value: visible characters, spaces and tabs,
/// and UTF-8 text beyond ASCII (sent as is); no line breaks, no NUL.
pub fn is_field_value(value: &str) -> bool {
    value.chars().all(|c| c == '\t' || !c.is_control())
}

/// Why a header cannot be added.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("header name {0:?} is not a token (letters, digits and !#$%&'*+-.^_`|~)")]
    NotToken(String),
    #[error("header {0:?}: the value has a line break or a control character")]
    BadValue(String),
    #[error("header {0:?} is pika's own (framing, validators, or set by another key: expires, auth_realm)")]
    Reserved(String),
}

/// Header lines to add, ready to copy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AddHeaders {
    /// `Name: value\r\n` lines.
    lines: Box<[u8]>,
    /// On every status, not only 2xx and 3xx.
    pub always: bool,
    /// (name, value) as written, for `-T`.
    pub list: Vec<(String, String)>,
}

impl AddHeaders {
    pub fn new(list: Vec<(String, String)>, always: bool) -> Result<AddHeaders, HeaderError> {
        let mut lines = Vec::new();
        for (name, value) in &list {
            if !is_token(name) {
                return Err(HeaderError::NotToken(name.clone()));
            }
            if !is_field_value(value) {
                return Err(HeaderError::BadValue(name.clone()));
            }
            if RESERVED.contains(&name.to_ascii_lowercase().as_str()) {
                return Err(HeaderError::Reserved(name.clone()));
            }
            for part in [name.as_str(), ": ", value.trim(), "\r\n"] {
                lines.extend_from_slice(part.as_bytes());
            }
        }
        Ok(AddHeaders { lines: lines.into_boxed_slice(), always, list })
    }

    pub fn is_empty(&self) -> bool {
        self.lines.is_empty()
    }

    /// The lines for an answer with `status`, if it gets them.
    #[inline]
    pub fn for_status(&self, status: u16) -> Option<&[u8]> {
        (!self.lines.is_empty() && (self.always || (200..400).contains(&status))).then_some(&self.lines[..])
    }

    /// Whether it sets `name` (any case).
    pub fn sets(&self, name: &str) -> bool {
        self.list.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
    }
}

/// `expires`: how long answers may be kept, for the whole location or by type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expires {
    /// (type pattern, time): `text/html`, `image/*` or `*`, first match wins (exact
    /// types are put before wildcards when the config is read).
    by_type: Vec<(String, Duration)>,
}

impl Expires {
    /// One time for every answer.
    pub fn all(d: Duration) -> Expires {
        Expires { by_type: vec![("*".into(), d)] }
    }

    /// Times by content type; a pattern is `type/subtype`, `type/*` or `*`. Exact
    /// types are tried first, then `type/*`, then `*`.
    pub fn by_type(mut list: Vec<(String, Duration)>) -> Result<Expires, String> {
        for (p, _) in &list {
            let ok = p == "*" || p.split_once('/').is_some_and(|(t, s)| is_token(t) && (s == "*" || is_token(s)));
            if !ok {
                return Err(format!("expires type {p:?} is not type/subtype, type/* or *"));
            }
        }
        list.sort_by_key(|(p, _)| match p.as_str() {
            "*" => 2,
            p if p.ends_with("/*") => 1,
            _ => 0,
        });
        Ok(Expires { by_type: list })
    }

    pub fn is_empty(&self) -> bool {
        self.by_type.is_empty()
    }

    pub fn list(&self) -> &[(String, Duration)] {
        &self.by_type
    }

    /// The time for an answer of `content_type` (parameters ignored), if any.
    pub fn for_type(&self, content_type: &str) -> Option<Duration> {
        let ty = content_type.split(';').next().unwrap_or("").trim();
        let major = ty.split('/').next().unwrap_or("");
        self.by_type
            .iter()
            .find(|(p, _)| {
                p == "*"
                    || p.eq_ignore_ascii_case(ty)
                    || p.strip_suffix("/*").is_some_and(|m| m.eq_ignore_ascii_case(major))
            })
            .map(|(_, d)| *d)
    }
}

/// Whether an answer with `status` gets `expires` (nginx's list).
pub fn expires_status(status: u16) -> bool {
    matches!(status, 200 | 201 | 204 | 206 | 301 | 302 | 303 | 304 | 307 | 308)
}

/// The `Cache-Control` and `Expires` values for keeping an answer `d` from `now`.
pub fn expiry_values(d: Duration, now: SystemTime) -> (String, String) {
    (format!("max-age={}", d.as_secs()), httpdate::fmt_http_date(now + d))
}

/// Whether a content type gets `charset`: text types and the textual application
/// types (nginx's `charset_types`, with JSON), when it names no charset yet.
pub fn takes_charset(content_type: &str) -> bool {
    let ty = content_type.split(';').next().unwrap_or("").trim();
    let textual = ty.starts_with("text/")
        || matches!(ty, "application/javascript" | "application/json" | "application/xml" | "application/rss+xml")
        || ty.ends_with("+xml")
        || ty.ends_with("+json");
    textual && !content_type.to_ascii_lowercase().contains("charset=")
}

/// Whether `charset` can be written as a parameter value (a token).
pub fn valid_charset(charset: &str) -> bool {
    is_token(charset)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    #[test]
    fn headers_become_lines_for_the_statuses_they_go_on() {
        let h = AddHeaders::new(
            list(&[("X-Content-Type-Options", "nosniff"), ("Content-Security-Policy", "default-src 'self'")]),
            false,
        )
        .unwrap();
        let lines = b"X-Content-Type-Options: nosniff\r\nContent-Security-Policy: default-src 'self'\r\n";
        assert_eq!(h.for_status(200), Some(&lines[..]));
        assert_eq!(h.for_status(304), Some(&lines[..]));
        assert_eq!(h.for_status(404), None, "2xx and 3xx by default");
        let always = AddHeaders::new(list(&[("Cache-Control", "no-store")]), true).unwrap();
        assert!(always.for_status(500).is_some() && always.sets("cache-control"));
        assert_eq!(AddHeaders::default().for_status(200), None);
    }

    #[test]
    fn bad_names_values_and_reserved_headers_are_refused() {
        let e = |n: &str, v: &str| AddHeaders::new(list(&[(n, v)]), false).unwrap_err();
        assert_eq!(e("Bad Name", "x"), HeaderError::NotToken("Bad Name".into()));
        assert_eq!(e("X:Y", "x"), HeaderError::NotToken("X:Y".into()));
        assert_eq!(e("", "x"), HeaderError::NotToken("".into()));
        assert_eq!(e("X-A", "a\r\nSet-Cookie: b"), HeaderError::BadValue("X-A".into()));
        assert_eq!(e("Content-Length", "1"), HeaderError::Reserved("Content-Length".into()));
        assert_eq!(e("etag", "\"x\""), HeaderError::Reserved("etag".into()));
        assert!(AddHeaders::new(list(&[("X-Ünïcode", "x")]), false).is_err());
        assert!(AddHeaders::new(list(&[("X-Note", "café\tok")]), false).is_ok());
    }

    #[test]
    fn expires_by_type_tries_exact_then_wildcards() {
        let d = |s| Duration::from_secs(s);
        let e =
            Expires::by_type(vec![("*".into(), d(60)), ("image/*".into(), d(3600)), ("image/svg+xml".into(), d(0))])
                .unwrap();
        assert_eq!(e.for_type("image/png"), Some(d(3600)));
        assert_eq!(e.for_type("image/svg+xml"), Some(d(0)), "exact beats image/*");
        assert_eq!(e.for_type("text/html; charset=utf-8"), Some(d(60)));
        let only = Expires::by_type(vec![("text/css".into(), d(5))]).unwrap();
        assert_eq!(only.for_type("text/html"), None);
        assert_eq!(Expires::all(d(7)).for_type("x/y"), Some(d(7)));
        assert!(Expires::by_type(vec![("image".into(), d(1))]).is_err());
        assert!(Expires::by_type(vec![("image/a b".into(), d(1))]).is_err());
        assert!(expires_status(304) && !expires_status(404) && !expires_status(500));
        let at = SystemTime::UNIX_EPOCH + d(784_111_777);
        let (cc, exp) = expiry_values(d(3600), at);
        assert_eq!((cc.as_str(), exp.as_str()), ("max-age=3600", "Sun, 06 Nov 1994 09:49:37 GMT"));
    }

    #[test]
    fn charset_goes_on_text_without_one() {
        assert!(takes_charset("text/html") && takes_charset("application/javascript"));
        assert!(takes_charset("image/svg+xml") && takes_charset("application/ld+json"));
        assert!(!takes_charset("text/html; charset=utf-8") && !takes_charset("image/png"));
        assert!(valid_charset("utf-8") && !valid_charset("utf 8"));
    }
}
