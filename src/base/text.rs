//! Text helpers. For the per-request path, formatting straight into byte buffers:
//! `core::fmt` costs more per small field than everything else a request does in
//! user space (through `core::fmt`, the head, the log record and the scoreboard's
//! fields would be over a third of a keep-alive request's instructions). Integers go through `itoa`, IPv4 addresses are written by
//! hand; anything rarer keeps `core::fmt`. For the pages pika makes (error pages,
//! listings, the status page): escaping for HTML and JSON.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

/// Appends `n` in decimal.
pub fn push_int(out: &mut Vec<u8>, n: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// Appends `n` in lower-case hex, zero-padded to `width` digits.
pub fn push_hex(out: &mut Vec<u8>, n: u64, width: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digits = (64 - n.leading_zeros() as usize).div_ceil(4).max(1);
    out.extend(std::iter::repeat_n(b'0', width.saturating_sub(digits)));
    for i in (0..digits).rev() {
        out.push(HEX[((n >> (i * 4)) & 15) as usize]);
    }
}

/// Appends an address as a log or status page shows it: IPv4 dotted, an IPv4-mapped
/// IPv6 address (what a dual-stack socket reports) as IPv4, other IPv6 as `Display`.
pub fn push_ip(out: &mut Vec<u8>, ip: IpAddr) {
    let v4 = match ip {
        IpAddr::V4(v4) => v4,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4,
            None => {
                use std::io::Write as _;
                let _ = write!(out, "{v6}");
                return;
            }
        },
    };
    // Digits straight into a 15-byte buffer and one copy out: every access-log
    // record starts with this (itoa per octet took ~225 instructions).
    let mut text = [0u8; 15];
    let mut n = 0;
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            text[n] = b'.';
            n += 1;
        }
        if octet >= 100 {
            text[n] = b'0' + octet / 100;
            n += 1;
        }
        if octet >= 10 {
            text[n] = b'0' + octet / 10 % 10;
            n += 1;
        }
        text[n] = b'0' + octet % 10;
        n += 1;
    }
    out.extend_from_slice(&text[..n]);
}

/// Appends `ip:port` (`[v6]:port` for IPv6), as `SocketAddr`'s `Display` does.
pub fn push_socket_addr(out: &mut Vec<u8>, addr: SocketAddr) {
    match addr {
        SocketAddr::V4(a) => push_ip(out, IpAddr::V4(*a.ip())),
        SocketAddr::V6(a) => {
            use std::io::Write as _;
            let _ = write!(out, "[{}]", a.ip());
        }
    }
    out.push(b':');
    push_int(out, addr.port());
}

/// Escape text for HTML element content and attribute values (& < > " ').
pub fn html_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// A JSON string literal (RFC 8259 escaping).
pub fn json_string(v: &str) -> String {
    let mut s = String::with_capacity(v.len() + 2);
    s.push('"');
    for c in v.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            '\r' => s.push_str("\\r"),
            '\t' => s.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '<' || c == '>' => {
                let _ = write!(s, "\\u{:04x}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn text(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut v = Vec::new();
        f(&mut v);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn addresses_read_as_display_does() {
        assert_eq!(text(|o| push_ip(o, "10.0.0.255".parse().unwrap())), "10.0.0.255");
        assert_eq!(text(|o| push_ip(o, "::ffff:127.0.0.1".parse().unwrap())), "127.0.0.1");
        assert_eq!(text(|o| push_ip(o, "2001:db8::1".parse().unwrap())), "2001:db8::1");
        for sa in ["[::1]:8080", "[::ffff:1.2.3.4]:80"] {
            assert_eq!(text(|o| push_socket_addr(o, sa.parse().unwrap())), sa);
        }
        assert_eq!(text(|o| push_socket_addr(o, "1.2.3.4:5".parse().unwrap())), "1.2.3.4:5");
    }

    proptest! {
        #[test]
        fn numbers_match_fmt(n: u64, width in 0usize..20) {
            prop_assert_eq!(text(|o| push_int(o, n)), n.to_string());
            prop_assert_eq!(text(|o| push_hex(o, n, width)), format!("{n:0width$x}"));
        }

        #[test]
        fn ipv4_matches_fmt(a: [u8; 4], port: u16) {
            let ip = std::net::Ipv4Addr::from(a);
            prop_assert_eq!(text(|o| push_ip(o, IpAddr::V4(ip))), ip.to_string());
            let sa = SocketAddr::from((ip, port));
            prop_assert_eq!(text(|o| push_socket_addr(o, sa)), sa.to_string());
        }
    }

    #[test]
    fn html_escape_escapes_the_five() {
        assert_eq!(html_escape("a&b<c>d\"e'f"), "a&amp;b&lt;c&gt;d&quot;e&#39;f");
        assert_eq!(html_escape("café"), "café");
        assert_eq!(html_escape(""), "");
        assert_eq!(html_escape("&amp;"), "&amp;amp;");
    }

    #[test]
    fn json_strings_escape_quotes_controls_and_angle_brackets() {
        assert_eq!(json_string("q\"<\\\n\u{1}é"), "\"q\\\"\\u003c\\\\\\n\\u0001é\"");
    }
}
