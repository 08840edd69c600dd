//! Name-based virtual hosts: which `[[vhost]]` serves a request, chosen by its Host.
//!
//! Matching is case-insensitive and ignores the port and a trailing dot, as Apache and
//! nginx do. Exact names win over wildcards (`*.example.com`), the longest wildcard wins
//! among wildcards, and a Host that matches nothing gets the first vhost (the default).

/// Picks the index of the vhost for a Host value (`None`: no Host, HTTP/1.0), each
/// vhost known by its server names (`names_of`). A TLS handshake picks its
/// certificate by the SNI name the same way ([`crate::tls::Certificates`]); the
/// request's vhost is [`crate::config::Config::vhost_for`].
pub fn select<T>(vhosts: &[T], names_of: impl Fn(&T) -> &[String], host: Option<&[u8]>) -> usize {
    let Some(host) = host else { return 0 };
    // One vhost serves every Host (the first is the default): nothing to compare.
    if vhosts.len() == 1 {
        return 0;
    }
    let name = host_name(host);
    let mut best: Option<(usize, usize)> = None; // (index, wildcard suffix length)
    for (i, v) in vhosts.iter().enumerate() {
        for n in names_of(v) {
            if let Some(suffix) = n.strip_prefix("*.") {
                if under_wildcard(suffix, name) && best.is_none_or(|(_, len)| suffix.len() > len) {
                    best = Some((i, suffix.len()));
                }
            } else if n.as_bytes().eq_ignore_ascii_case(name) {
                return i;
            }
        }
    }
    best.map_or(0, |(i, _)| i)
}

/// True when a Host value names this server without asking DNS what it is: one of
/// `names` (exact or wildcard, as [`select`] matches them), an IP literal, or
/// `localhost`. A page that only the server's own addresses may see (the status
/// page, the metrics) asks this, so a name an attacker's DNS points at one of those
/// addresses (DNS rebinding: a browser on an allowed address, sent there by a page of
/// theirs) does not read it.
pub fn names_this_server(names: &[String], host: &[u8]) -> bool {
    let name = host_name(host);
    let literal = |n: &[u8]| {
        let inner = n.strip_prefix(b"[").and_then(|n| n.strip_suffix(b"]"));
        std::str::from_utf8(inner.unwrap_or(n)).is_ok_and(|s| s.parse::<std::net::IpAddr>().is_ok())
    };
    name.eq_ignore_ascii_case(b"localhost") || literal(name) || select_among(names, name)
}

/// Whether `name` (a Host's name part) is one of `names`.
fn select_among(names: &[String], name: &[u8]) -> bool {
    names.iter().any(|n| match n.strip_prefix("*.") {
        Some(suffix) => under_wildcard(suffix, name),
        None => n.as_bytes().eq_ignore_ascii_case(name),
    })
}

/// Whether `name` is a subdomain of `suffix` (a wildcard `*.suffix`): at least one
/// label, then a dot, then the suffix.
fn under_wildcard(suffix: &str, name: &[u8]) -> bool {
    name.len() > suffix.len() + 1
        && name[name.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
        && name[name.len() - suffix.len() - 1] == b'.'
}

/// The host part of a Host value, without port and trailing dot (compared without
/// case: configured names are lower-cased when the config is loaded).
fn host_name(host: &[u8]) -> &[u8] {
    let host = host.trim_ascii();
    let name = if host.first() == Some(&b'[') {
        // An IPv6 literal keeps its brackets; only a port after `]` goes.
        match host.iter().position(|&b| b == b']') {
            Some(end) => &host[..=end],
            None => host,
        }
    } else {
        match host.iter().rposition(|&b| b == b':') {
            Some(c) => &host[..c],
            None => host,
        }
    };
    name.strip_suffix(b".").unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vh(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn pick(vhosts: &[Vec<String>], host: Option<&[u8]>) -> usize {
        select(vhosts, |names| names, host)
    }

    #[test]
    fn picks_by_name() {
        let v = [
            vh(&["default"]),
            vh(&["example.com", "www.example.com"]),
            vh(&["*.example.com"]),
            vh(&["*.a.example.com"]),
            vh(&["[::1]"]),
        ];
        assert_eq!(pick(&v, None), 0);
        assert_eq!(pick(&v, Some(b"unknown")), 0);
        assert_eq!(pick(&v, Some(b"Example.COM")), 1);
        assert_eq!(pick(&v, Some(b"www.example.com.:8080")), 1);
        assert_eq!(pick(&v, Some(b"img.example.com")), 2);
        assert_eq!(pick(&v, Some(b"x.a.example.com")), 3);
        assert_eq!(pick(&v, Some(b"xexample.com")), 0);
        assert_eq!(pick(&v, Some(b"[::1]:8080")), 4);
        assert_eq!(pick(&v, Some(b"")), 0);
    }

    #[test]
    fn this_server_is_named_by_its_names_its_addresses_and_localhost() {
        let names = vh(&["status.example", "*.ops.example"]);
        for host in [
            &b"status.example"[..],
            b"STATUS.example.:8080",
            b"a.ops.example",
            b"127.0.0.1",
            b"127.0.0.1:8080",
            b"[::1]",
            b"[::1]:80",
            b"192.0.2.7",
            b"localhost",
            b"LocalHost:9000",
        ] {
            assert!(names_this_server(&names, host), "{}", String::from_utf8_lossy(host));
        }
        for host in
            [&b"rebind.attacker.example"[..], b"ops.example", b"localhost.attacker.example", b"127.0.0.1.nip.io"]
        {
            assert!(!names_this_server(&names, host), "{}", String::from_utf8_lossy(host));
        }
    }

    #[test]
    fn a_wildcard_needs_a_label_before_its_suffix_and_the_first_of_equals_wins() {
        let v = [vh(&["default"]), vh(&["*.w.test"]), vh(&["*.w.test"])];
        assert_eq!(pick(&v, Some(b"a.w.test")), 1, "the first of two equal wildcards");
        assert_eq!(pick(&v, Some(b"w.test")), 0, "the bare suffix is not a subdomain");
        assert_eq!(pick(&v, Some(b".w.test")), 0, "an empty label is not a subdomain");
        assert_eq!(pick(&v, Some(b"xw.test")), 0, "the suffix starts at a dot");
    }
}
