//! Steering clients to HTTPS: where a plain request is redirected (a vhost's
//! `https_redirect`), kept apart from the connection code so the rules are tested on
//! their own.

/// The `Location` of the redirect for a request that arrived on a plain listener:
/// `https://`, the host the client asked for (without its port), the HTTPS port
/// unless it is 443, then the request target as sent (path and query kept; bytes
/// outside printable ASCII, which a request line may carry, percent-encoded so the
/// header stays ASCII).
///
/// A Host value that is not a plain name or IP literal (a client may send anything)
/// is replaced by `fallback` (the vhost's first server name), so the answer cannot
/// point at a host the server does not serve under a trick spelling
/// (`evil.example@`, `a/b`).
pub fn location(host: Option<&[u8]>, fallback: &str, https_port: u16, target: &[u8]) -> Vec<u8> {
    let name = host.map(host_without_port).filter(|h| is_plain_host(h)).unwrap_or(fallback.as_bytes());
    let mut out = Vec::with_capacity(16 + name.len() + target.len());
    out.extend_from_slice(b"https://");
    out.extend_from_slice(name);
    if https_port != 443 {
        out.push(b':');
        crate::base::text::push_int(&mut out, https_port);
    }
    if target.first() != Some(&b'/') {
        out.push(b'/');
    }
    for &b in target {
        if b.is_ascii_graphic() {
            out.push(b);
        } else {
            out.push(b'%');
            out.extend_from_slice(format!("{b:02X}").as_bytes());
        }
    }
    out
}

fn host_without_port(host: &[u8]) -> &[u8] {
    let host = host.trim_ascii();
    if host.first() == Some(&b'[') {
        return match host.iter().position(|&b| b == b']') {
            Some(end) => &host[..=end],
            None => host,
        };
    }
    match host.iter().rposition(|&b| b == b':') {
        Some(c) => &host[..c],
        None => host,
    }
}

/// Letters, digits, `-` and `.` (a DNS name or an IPv4 address), or an IPv6 literal
/// in brackets.
fn is_plain_host(h: &[u8]) -> bool {
    if let Some(inner) = h.strip_prefix(b"[").and_then(|h| h.strip_suffix(b"]")) {
        return !inner.is_empty() && inner.iter().all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.');
    }
    !h.is_empty() && h.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(host: Option<&str>, port: u16, target: &str) -> String {
        String::from_utf8(location(host.map(str::as_bytes), "www.example.com", port, target.as_bytes())).unwrap()
    }

    #[test]
    fn keeps_host_path_and_query() {
        assert_eq!(loc(Some("example.com"), 443, "/a/b?x=1&y"), "https://example.com/a/b?x=1&y");
        assert_eq!(loc(Some("Example.com:8080"), 443, "/"), "https://Example.com/");
        assert_eq!(loc(Some("example.com:80"), 8443, "/p%20q"), "https://example.com:8443/p%20q");
        assert_eq!(loc(Some("[::1]:8080"), 8443, "/"), "https://[::1]:8443/");
        assert_eq!(loc(Some("127.0.0.1"), 443, "?q"), "https://127.0.0.1/?q");
        let raw = location(Some(b"a.example"), "x", 443, "/caf\u{e9}?n=\u{e9}".as_bytes());
        assert_eq!(raw, b"https://a.example/caf%C3%A9?n=%C3%A9");
    }

    #[test]
    fn odd_hosts_fall_back_to_the_vhost_name() {
        for host in [None, Some(""), Some("evil.example@good"), Some("a/b"), Some("[zz]"), Some("a b"), Some("[]")] {
            assert_eq!(loc(host, 443, "/x"), "https://www.example.com/x", "{host:?}");
        }
    }
}
