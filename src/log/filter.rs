//! Which requests an access log records.
//!
//! A log has `include` and `exclude` lists of conditions. A condition is a small table
//! whose keys must all match (`{ method = "GET", status = "5xx" }`); a list matches if
//! any of its conditions does. A request is recorded when the include list is empty or
//! matches, and the exclude list does not. By default `exclude = [{ internal = true }]`:
//! the master's dummy connections stay out (Apache users filter them by hand with
//! `SetEnvIf ... dontlog`), and so do the balancer's checks of a health location
//! (`exclude = [{ internal = true }, { health = true }]`). A client cannot make its
//! request internal: that takes the master's per-boot token.

use std::net::IpAddr;

use regex_lite::Regex;

use super::record::Record;
use crate::base::cidr::Cidr;

/// One condition; every key that is set must match.
#[derive(Debug, Clone, Default)]
pub struct Condition {
    pub internal: Option<bool>,
    /// The request was answered by a health-check location.
    pub health: Option<bool>,
    pub client: Option<Cidr>,
    pub method: Option<String>,
    /// A path prefix (`/static/`).
    pub path: Option<String>,
    pub path_pattern: Option<Regex>,
    /// Inclusive status range.
    pub status: Option<(u16, u16)>,
    pub user_agent: Option<Regex>,
    /// A request header that must be present.
    pub header: Option<String>,
}

/// What a filter looks at, beyond the record.
pub struct Facts<'a, 'r> {
    pub internal: bool,
    pub record: &'a Record<'r>,
}

impl Condition {
    fn matches(&self, f: &Facts<'_, '_>) -> bool {
        let r = f.record;
        // The keys that cost a comparison first: the default conditions (`internal`,
        // `health`) are decided there for every record, without the path's work.
        let plain = self.internal.is_none_or(|i| i == f.internal)
            && self.health.is_none_or(|h| h == r.health)
            && self.client.is_none_or(|c| c.contains(unmap(r.client)))
            && self.method.as_ref().is_none_or(|m| m.as_bytes() == r.method)
            && self.status.is_none_or(|(lo, hi)| (lo..=hi).contains(&r.status));
        if !plain {
            return false;
        }
        // Paths are matched as they are served: decoded, dot segments removed, so
        // `/%61dmin` and `/x/../admin` are `/admin`. A target that cannot be cleaned
        // (it was answered 400) is matched as sent. Cleaned only when a path is asked.
        let cleaned = (self.path.is_some() || self.path_pattern.is_some())
            .then(|| crate::http::path::clean(r.path).ok())
            .flatten();
        let path: &[u8] = cleaned.as_ref().map_or(r.path, |(c, _)| &c.bytes);
        self.path.as_ref().is_none_or(|p| path.starts_with(p.as_bytes()))
            && self.path_pattern.as_ref().is_none_or(|re| re.is_match(&String::from_utf8_lossy(path)))
            && self.user_agent.as_ref().is_none_or(|re| {
                (r.headers_in)("User-Agent").is_some_and(|ua| re.is_match(&String::from_utf8_lossy(ua)))
            })
            && self.header.as_ref().is_none_or(|h| (r.headers_in)(h).is_some())
    }

    /// True if no key is set (such a condition would match everything: refused).
    pub fn is_empty(&self) -> bool {
        self.internal.is_none()
            && self.health.is_none()
            && self.client.is_none()
            && self.method.is_none()
            && self.path.is_none()
            && self.path_pattern.is_none()
            && self.status.is_none()
            && self.user_agent.is_none()
            && self.header.is_none()
    }
}

fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    }
}

/// A log's include and exclude lists.
#[derive(Debug, Clone)]
pub struct Filter {
    pub include: Vec<Condition>,
    pub exclude: Vec<Condition>,
}

impl Default for Filter {
    fn default() -> Self {
        Filter {
            include: Vec::new(),
            exclude: vec![
                Condition { internal: Some(true), ..Condition::default() },
                Condition { health: Some(true), ..Condition::default() },
            ],
        }
    }
}

impl Filter {
    pub fn allows(&self, f: &Facts<'_, '_>) -> bool {
        (self.include.is_empty() || self.include.iter().any(|c| c.matches(f)))
            && !self.exclude.iter().any(|c| c.matches(f))
    }
}

/// `404`, `"404"`, `"4xx"`, `"400-499"`.
pub fn parse_status(s: &str) -> Option<(u16, u16)> {
    let s = s.trim();
    if let Some((a, b)) = s.split_once('-') {
        let (a, b) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
        return (a <= b).then_some((a, b));
    }
    if let Some(d) = s.strip_suffix("xx") {
        let d: u16 = d.parse().ok().filter(|d| (1..=5).contains(d))?;
        return Some((d * 100, d * 100 + 99));
    }
    let n = s.parse().ok()?;
    Some((n, n))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    fn record<'a>(headers: &'a dyn Fn(&str) -> Option<&'a [u8]>, status: u16, path: &'a [u8]) -> Record<'a> {
        Record {
            client: "10.1.2.3".parse().unwrap(),
            peer: "10.1.2.3:40000".parse().unwrap(),
            user: None,
            local_port: 80,
            request_line: b"GET / HTTP/1.1",
            method: b"GET",
            path,
            query: None,
            protocol: "HTTP/1.1",
            status,
            body_bytes: 0,
            bytes_in: 0,
            bytes_out: 0,
            start: SystemTime::UNIX_EPOCH,
            duration: Duration::ZERO,
            vhost: "v",
            host: None,
            headers_in: headers,
            response_head: b"",
            conn_status: '+',
            keepalive_count: 0,
            health: false,
            request_id: 0,
            tls: None,
            upstream: None,
        }
    }

    #[test]
    fn default_leaves_internal_out() {
        let h = |_: &str| None;
        let r = record(&h, 200, b"/");
        let f = Filter::default();
        assert!(f.allows(&Facts { internal: false, record: &r }));
        assert!(!f.allows(&Facts { internal: true, record: &r }));
        let debug = Filter { include: vec![], exclude: vec![] };
        assert!(debug.allows(&Facts { internal: true, record: &r }));
    }

    #[test]
    fn conditions_combine() {
        let h = |n: &str| match n {
            "User-Agent" => Some(&b"Googlebot/2.1"[..]),
            "X-Debug" => Some(&b"1"[..]),
            _ => None,
        };
        let r = record(&h, 503, b"/static/a.png");
        let facts = Facts { internal: false, record: &r };
        let c = |f: fn(&mut Condition)| {
            let mut c = Condition::default();
            f(&mut c);
            c.matches(&facts)
        };
        assert!(c(|c| c.client = Cidr::parse("10.0.0.0/8")));
        assert!(!c(|c| c.client = Cidr::parse("192.168.0.0/16")));
        assert!(c(|c| c.method = Some("GET".into())));
        assert!(!c(|c| c.method = Some("POST".into())));
        assert!(c(|c| c.path = Some("/static/".into())));
        assert!(c(|c| c.path_pattern = Regex::new(r"\.png$").ok()));
        assert!(c(|c| c.status = parse_status("5xx")));
        assert!(!c(|c| c.status = parse_status("400-499")));
        assert!(c(|c| c.user_agent = Regex::new("(?i)bot").ok()));
        assert!(c(|c| c.header = Some("X-Debug".into())));
        assert!(!c(|c| c.header = Some("X-Other".into())));
        assert!(!c(|c| {
            c.method = Some("GET".into());
            c.status = Some((200, 200));
        }));
        let errors_only =
            Filter { include: vec![Condition { status: parse_status("5xx"), ..Default::default() }], exclude: vec![] };
        assert!(errors_only.allows(&facts));
        let r2 = record(&h, 200, b"/");
        assert!(!errors_only.allows(&Facts { internal: false, record: &r2 }));
    }

    #[test]
    fn paths_are_matched_as_served_not_as_sent() {
        let h = |_: &str| None;
        let only_admin =
            Filter { include: vec![Condition { path: Some("/admin".into()), ..Default::default() }], exclude: vec![] };
        let by_pattern = Filter {
            include: vec![Condition { path_pattern: Regex::new("^/admin(/|$)").ok(), ..Default::default() }],
            exclude: vec![],
        };
        for sent in [&b"/admin"[..], b"/%61dmin", b"/x/../admin", b"//admin/./", b"/%2e/admin"] {
            let r = record(&h, 200, sent);
            let facts = Facts { internal: false, record: &r };
            assert!(only_admin.allows(&facts), "{}", String::from_utf8_lossy(sent));
            assert!(by_pattern.allows(&facts), "{}", String::from_utf8_lossy(sent));
        }
        for other in [&b"/public"[..], b"/admin%2fx/../../public"] {
            let r = record(&h, 200, other);
            assert!(!by_pattern.allows(&Facts { internal: false, record: &r }), "{}", String::from_utf8_lossy(other));
        }
    }

    #[test]
    fn statuses() {
        assert_eq!(parse_status("404"), Some((404, 404)));
        assert_eq!(parse_status("4xx"), Some((400, 499)));
        assert_eq!(parse_status("300-399"), Some((300, 399)));
        assert_eq!(parse_status("9xx"), None);
        assert_eq!(parse_status("500-400"), None);
        assert_eq!(parse_status("abc"), None);
    }

    /// A condition with no key would match every request: the config refuses one,
    /// and this is how it knows.
    #[test]
    fn a_condition_is_empty_until_one_key_is_set() {
        assert!(Condition::default().is_empty());
        let d = Condition::default;
        let one_key = [
            Condition { internal: Some(false), ..d() },
            Condition { client: Cidr::parse("10.0.0.0/8"), ..d() },
            Condition { method: Some("GET".into()), ..d() },
            Condition { path: Some("/static/".into()), ..d() },
            Condition { path_pattern: Regex::new("x").ok(), ..d() },
            Condition { status: Some((400, 499)), ..d() },
            Condition { user_agent: Regex::new("bot").ok(), ..d() },
            Condition { header: Some("X-Debug".into()), ..d() },
        ];
        for c in one_key {
            assert!(!c.is_empty(), "{c:?}");
        }
    }
}
