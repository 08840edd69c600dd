//! The client behind trusted forwarders: `X-Forwarded-For` or `Forwarded` (RFC 7239)
//! read only when the connection comes from an address in `server.trusted_proxies`.
//!
//! Anyone can send these headers, so they say nothing unless the peer is a
//! forwarder we trust; and a forwarder appends to the list a client sent, so only
//! the right end of the list is the forwarders' own word. The rule is nginx's
//! `real_ip_recursive on`: walk the list from the right, skipping trusted
//! addresses; the first address that is not trusted is the client. If every address
//! is trusted, the leftmost is. An entry that is not an address (`unknown`, an
//! obfuscated `_name`, garbage) ends the walk at the last address found, so a
//! client cannot push a forged address past one it cannot parse.
//!
//! The client found here is the request's client for the log's `%a`/`%h`, log
//! filters and the status page's allow list; `%{c}a` still names the socket's peer.

use std::net::{IpAddr, Ipv6Addr};

use crate::base::cidr::Cidr;

/// Which header names the clients, as `server.forwarded_header` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (HAProxy's `option forwardfor`,
    /// nginx's `$proxy_add_x_forwarded_for`).
    XForwardedFor,
    /// RFC 7239: `Forwarded: for=client;proto=https, for="[2001:db8::1]:4711"`.
    Forwarded,
}

impl ForwardedHeader {
    pub fn name(self) -> &'static str {
        match self {
            ForwardedHeader::XForwardedFor => "X-Forwarded-For",
            ForwardedHeader::Forwarded => "Forwarded",
        }
    }
}

/// The request's client when `peer` is a trusted forwarder and `value` (the
/// header's field lines joined by commas) names one; `None`: the peer is the
/// client.
pub fn client(peer: IpAddr, trusted: &[Cidr], header: ForwardedHeader, value: &[u8]) -> Option<IpAddr> {
    let is_trusted = |ip: IpAddr| trusted.iter().any(|c| c.contains(ip));
    if !is_trusted(peer) {
        return None;
    }
    let mut found = None;
    for element in value.rsplit(|&b| b == b',') {
        let addr = match header {
            ForwardedHeader::XForwardedFor => parse_addr(trim(element)),
            ForwardedHeader::Forwarded => for_param(element).and_then(parse_addr),
        };
        let Some(ip) = addr else { break };
        found = Some(ip);
        if !is_trusted(ip) {
            break;
        }
    }
    found
}

fn trim(b: &[u8]) -> &[u8] {
    b.trim_ascii()
}

/// The `for=` value of one `Forwarded` element, unquoted.
fn for_param(element: &[u8]) -> Option<&[u8]> {
    element.split(|&b| b == b';').find_map(|pair| {
        let pair = trim(pair);
        let eq = pair.iter().position(|&b| b == b'=')?;
        if !pair[..eq].eq_ignore_ascii_case(b"for") {
            return None;
        }
        let v = trim(&pair[eq + 1..]);
        Some(v.strip_prefix(b"\"").and_then(|v| v.strip_suffix(b"\"")).unwrap_or(v))
    })
}

/// `192.0.2.7`, `192.0.2.7:40000`, `2001:db8::1`, `[2001:db8::1]`,
/// `[2001:db8::1]:4711`. An IPv4-mapped IPv6 address is taken as the IPv4 one.
fn parse_addr(b: &[u8]) -> Option<IpAddr> {
    let s = std::str::from_utf8(b).ok()?;
    let ip = if let Some(rest) = s.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        IpAddr::V6(inside.parse::<Ipv6Addr>().ok()?)
    } else if let Ok(ip) = s.parse::<IpAddr>() {
        ip
    } else {
        let (host, port) = s.rsplit_once(':')?;
        if !is_port(port) {
            return None;
        }
        IpAddr::V4(host.parse().ok()?)
    };
    Some(match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    })
}

fn is_port(p: &str) -> bool {
    !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ForwardedHeader::{Forwarded, XForwardedFor};

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn trusted() -> Vec<Cidr> {
        ["10.0.0.0/8", "127.0.0.1", "2001:db8:ffff::/48"].iter().map(|c| Cidr::parse(c).unwrap()).collect()
    }

    fn xff(peer: &str, value: &str) -> Option<IpAddr> {
        client(ip(peer), &trusted(), XForwardedFor, value.as_bytes())
    }

    #[test]
    fn only_a_trusted_peer_is_heard() {
        assert_eq!(xff("192.0.2.1", "203.0.113.9"), None, "an untrusted peer names nobody");
        assert_eq!(xff("127.0.0.1", "203.0.113.9"), Some(ip("203.0.113.9")));
        assert_eq!(client(ip("127.0.0.1"), &[], XForwardedFor, b"203.0.113.9"), None, "nothing trusted");
    }

    #[test]
    fn the_rightmost_untrusted_address_wins() {
        // The client forged the first entry; the trusted chain appended the rest.
        assert_eq!(xff("10.0.0.1", "6.6.6.6, 203.0.113.9, 10.0.0.2"), Some(ip("203.0.113.9")));
        assert_eq!(xff("10.0.0.1", "6.6.6.6,203.0.113.9"), Some(ip("203.0.113.9")));
        // Every entry trusted: the leftmost.
        assert_eq!(xff("10.0.0.1", "10.9.9.9, 10.0.0.2"), Some(ip("10.9.9.9")));
        // Something that is not an address ends the walk at the last address found.
        assert_eq!(xff("10.0.0.1", "203.0.113.9, unknown, 10.0.0.2"), Some(ip("10.0.0.2")));
        assert_eq!(xff("10.0.0.1", "garbage"), None);
        assert_eq!(xff("10.0.0.1", ""), None);
        // Ports and brackets, and a mapped IPv4 address.
        assert_eq!(xff("10.0.0.1", "203.0.113.9:5555"), Some(ip("203.0.113.9")));
        assert_eq!(xff("10.0.0.1", "[2001:db8::7]:5555"), Some(ip("2001:db8::7")));
        assert_eq!(xff("10.0.0.1", "2001:db8::7"), Some(ip("2001:db8::7")));
        assert_eq!(xff("10.0.0.1", "::ffff:203.0.113.9"), Some(ip("203.0.113.9")));
        assert_eq!(xff("10.0.0.1", "[2001:db8::7]x"), None);
        assert_eq!(xff("10.0.0.1", "203.0.113.9:"), None);
        // A peer that came as an IPv4-mapped address is still trusted.
        assert_eq!(xff("::ffff:10.0.0.1", "203.0.113.9"), Some(ip("203.0.113.9")));
    }

    #[test]
    fn forwarded_elements_and_their_for() {
        let fwd = |peer: &str, v: &str| client(ip(peer), &trusted(), Forwarded, v.as_bytes());
        assert_eq!(fwd("10.0.0.1", "for=203.0.113.9;proto=https"), Some(ip("203.0.113.9")));
        assert_eq!(
            fwd("10.0.0.1", "for=6.6.6.6, For=\"[2001:db8::7]:4711\";by=10.0.0.1, for=10.0.0.2"),
            Some(ip("2001:db8::7"))
        );
        assert_eq!(fwd("10.0.0.1", "proto=https;for=203.0.113.9"), Some(ip("203.0.113.9")));
        assert_eq!(fwd("10.0.0.1", "for=unknown"), None);
        assert_eq!(fwd("10.0.0.1", "for=_hidden, for=10.0.0.2"), Some(ip("10.0.0.2")));
        assert_eq!(fwd("10.0.0.1", "by=10.0.0.1"), None, "an element without for=");
        assert_eq!(fwd("192.0.2.1", "for=203.0.113.9"), None);
    }
}
