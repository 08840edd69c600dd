//! The PROXY protocol (HAProxy's, versions 1 and 2): the header a load balancer sends
//! first on each connection to say who the real client is.
//!
//! It comes before any HTTP and is not part of it, so it lives beside the HTTP code,
//! where both sides may use it: the worker reads it, and the master's dummy
//! connection to a `proxy_protocol` listener starts with [`V2_LOCAL`].
//!
//! A listener marked `proxy_protocol = true` expects this header before the first
//! request head; the worker reads it the way it reads a head, without waiting
//! (`serve::connection`), and hands the bytes it has so far to [`parse`], which says
//! "not all there yet", "here is the header and its length", or why the bytes can
//! never be one. Nothing here allocates or trusts a length it has not checked: the
//! `proxy_header` fuzz target feeds it arbitrary bytes.
//!
//! What is taken from a header: the source address (the client the balancer
//! serves), for the request's client in logs, log filters and the status page's
//! allow list. A v1 `UNKNOWN` line, a v2 `LOCAL` command (the balancer's own health
//! check) and a v2 `UNSPEC` family carry no client: the connection is served as the
//! balancer itself. v2's TLVs are walked to check that each one fits, and ignored.
//!
//! The specification: <https://www.haproxy.org/download/2.6/doc/proxy-protocol.txt>.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// v2's twelve-byte signature.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// The longest v1 line, CRLF included (the specification's 107 bytes).
pub const V1_MAX: usize = 107;
/// v2's fixed part: signature, version and command, family, length.
const V2_FIXED: usize = 16;
/// The most address and TLV bytes a v2 header may carry. HAProxy sends a few
/// hundred at most (addresses, ALPN, authority, unique id, TLS fields); a longer
/// header is refused rather than buffered.
pub const V2_MAX_PAYLOAD: usize = 4096;
/// The longest header of either version.
pub const MAX_HEADER: usize = V2_FIXED + V2_MAX_PAYLOAD;

/// What a whole header said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// The real client; `None` when the header names none (v1 `UNKNOWN`, v2
    /// `LOCAL` or `UNSPEC`): the connection is then the balancer's own.
    pub source: Option<SocketAddr>,
    /// The address the client connected to, as the balancer saw it.
    pub destination: Option<SocketAddr>,
    /// 1 or 2.
    pub version: u8,
}

/// Why bytes cannot be a PROXY header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    #[error("no PROXY protocol signature")]
    BadSignature,
    #[error("v1 line longer than 107 bytes")]
    V1TooLong,
    #[error("malformed v1 line")]
    V1Malformed,
    #[error("unknown v2 version or command")]
    BadCommand,
    #[error("unsupported v2 address family or protocol")]
    BadFamily,
    #[error("v2 header longer than {V2_MAX_PAYLOAD} bytes")]
    V2TooLong,
    #[error("v2 addresses longer than the header")]
    V2Truncated,
    #[error("a v2 TLV runs past the header")]
    BadTlv,
}

/// Parses the header at the start of `buf`. `Ok(None)`: what is there may still
/// become a header, read more. `Ok(Some((len, header)))`: the header is the first
/// `len` bytes; what follows is the client's first request.
pub fn parse(buf: &[u8]) -> Result<Option<(usize, Header)>, ProxyError> {
    let Some(&first) = buf.first() else { return Ok(None) };
    match first {
        b'P' => parse_v1(buf),
        b'\r' => parse_v2(buf),
        _ => Err(ProxyError::BadSignature),
    }
}

fn parse_v1(buf: &[u8]) -> Result<Option<(usize, Header)>, ProxyError> {
    const SIG: &[u8] = b"PROXY ";
    let n = buf.len().min(SIG.len());
    if buf[..n] != SIG[..n] {
        return Err(ProxyError::BadSignature);
    }
    let Some(lf) = buf.iter().take(V1_MAX).position(|&b| b == b'\n') else {
        return if buf.len() >= V1_MAX { Err(ProxyError::V1TooLong) } else { Ok(None) };
    };
    let line = buf[..lf].strip_suffix(b"\r").ok_or(ProxyError::V1Malformed)?;
    let line = std::str::from_utf8(&line[SIG.len()..]).map_err(|_| ProxyError::V1Malformed)?;
    let mut words = line.split(' ');
    let header = match words.next() {
        // "UNKNOWN" may be followed by anything: the receiver ignores it.
        Some("UNKNOWN") => Header { source: None, destination: None, version: 1 },
        Some(proto @ ("TCP4" | "TCP6")) => {
            let v4 = proto == "TCP4";
            let mut next = || words.next().ok_or(ProxyError::V1Malformed);
            let (src, dst, sport, dport) = (next()?, next()?, next()?, next()?);
            if words.next().is_some() {
                return Err(ProxyError::V1Malformed);
            }
            let ip = |s: &str| -> Result<IpAddr, ProxyError> {
                let ip = if v4 {
                    IpAddr::V4(s.parse::<Ipv4Addr>().map_err(|_| ProxyError::V1Malformed)?)
                } else {
                    IpAddr::V6(s.parse::<Ipv6Addr>().map_err(|_| ProxyError::V1Malformed)?)
                };
                Ok(ip)
            };
            let port = |s: &str| -> Result<u16, ProxyError> {
                // Decimal, no sign, no leading zero (the specification's words).
                if s.is_empty()
                    || s.len() > 5
                    || (s.len() > 1 && s.starts_with('0'))
                    || !s.bytes().all(|b| b.is_ascii_digit())
                {
                    return Err(ProxyError::V1Malformed);
                }
                s.parse().map_err(|_| ProxyError::V1Malformed)
            };
            Header {
                source: Some(SocketAddr::new(ip(src)?, port(sport)?)),
                destination: Some(SocketAddr::new(ip(dst)?, port(dport)?)),
                version: 1,
            }
        }
        _ => return Err(ProxyError::V1Malformed),
    };
    Ok(Some((lf + 1, header)))
}

fn parse_v2(buf: &[u8]) -> Result<Option<(usize, Header)>, ProxyError> {
    let n = buf.len().min(V2_SIGNATURE.len());
    if buf[..n] != V2_SIGNATURE[..n] {
        return Err(ProxyError::BadSignature);
    }
    if buf.len() < V2_FIXED {
        // Check what has come of the fixed part as early as it can be.
        if let Some(&vc) = buf.get(12) {
            check_command(vc)?;
        }
        return Ok(None);
    }
    let local = check_command(buf[12])?;
    let family = buf[13];
    let len = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if len > V2_MAX_PAYLOAD {
        return Err(ProxyError::V2TooLong);
    }
    // The family is checked even for LOCAL: a balancer that sends garbage there is
    // no balancer we understand.
    let addr_len = match family {
        0x00 => 0,  // UNSPEC
        0x11 => 12, // TCP over IPv4
        0x21 => 36, // TCP over IPv6
        _ => return Err(ProxyError::BadFamily),
    };
    if addr_len > len {
        return Err(ProxyError::V2Truncated);
    }
    let Some(payload) = buf.get(V2_FIXED..V2_FIXED + len) else { return Ok(None) };
    let (addrs, tlvs) = payload.split_at(addr_len);
    check_tlvs(tlvs)?;
    let (source, destination) = match family {
        _ if local => (None, None),
        0x11 => {
            let ip = |i: usize| IpAddr::V4(Ipv4Addr::new(addrs[i], addrs[i + 1], addrs[i + 2], addrs[i + 3]));
            let port = |i: usize| u16::from_be_bytes([addrs[i], addrs[i + 1]]);
            (Some(SocketAddr::new(ip(0), port(8))), Some(SocketAddr::new(ip(4), port(10))))
        }
        0x21 => {
            let ip = |i: usize| {
                let mut a = [0u8; 16];
                a.copy_from_slice(&addrs[i..i + 16]);
                IpAddr::V6(Ipv6Addr::from(a))
            };
            let port = |i: usize| u16::from_be_bytes([addrs[i], addrs[i + 1]]);
            (Some(SocketAddr::new(ip(0), port(32))), Some(SocketAddr::new(ip(16), port(34))))
        }
        _ => (None, None),
    };
    Ok(Some((V2_FIXED + len, Header { source, destination, version: 2 })))
}

/// Version 2 and a known command; true for `LOCAL`.
fn check_command(vc: u8) -> Result<bool, ProxyError> {
    match vc {
        0x20 => Ok(true),
        0x21 => Ok(false),
        _ => Err(ProxyError::BadCommand),
    }
}

/// Walks the TLVs (type, 16-bit length, value): each must end within the header.
/// Their values are not used.
fn check_tlvs(mut tlvs: &[u8]) -> Result<(), ProxyError> {
    while !tlvs.is_empty() {
        let Some(&[_, hi, lo]) = tlvs.first_chunk::<3>() else { return Err(ProxyError::BadTlv) };
        let end = 3 + usize::from(u16::from_be_bytes([hi, lo]));
        tlvs = tlvs.get(end..).ok_or(ProxyError::BadTlv)?;
    }
    Ok(())
}

/// A v2 header with the `LOCAL` command and no address: what the master's dummy
/// connection sends first to a listener that expects one.
pub const V2_LOCAL: [u8; 16] = {
    let mut h = [0u8; 16];
    let mut i = 0;
    while i < 12 {
        h[i] = V2_SIGNATURE[i];
        i += 1;
    }
    h[12] = 0x20;
    h
};

/// A v2 `PROXY` header for a TCP connection from `source` to `destination` (both of
/// one family) with `tlvs` appended: what a balancer sends (tests, the bench).
pub fn v2_header(source: SocketAddr, destination: SocketAddr, tlvs: &[u8]) -> Vec<u8> {
    let mut h = V2_SIGNATURE.to_vec();
    h.push(0x21);
    let mut addrs = Vec::new();
    match (source.ip(), destination.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            h.push(0x11);
            addrs.extend_from_slice(&s.octets());
            addrs.extend_from_slice(&d.octets());
        }
        (s, d) => {
            h.push(0x21);
            let v6 = |a: IpAddr| match a {
                IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
                IpAddr::V6(a) => a.octets(),
            };
            addrs.extend_from_slice(&v6(s));
            addrs.extend_from_slice(&v6(d));
        }
    }
    addrs.extend_from_slice(&source.port().to_be_bytes());
    addrs.extend_from_slice(&destination.port().to_be_bytes());
    addrs.extend_from_slice(tlvs);
    h.extend_from_slice(&(addrs.len() as u16).to_be_bytes());
    h.extend_from_slice(&addrs);
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// Every proper prefix of a valid header is "not yet"; the whole is the header.
    fn whole_and_prefixes(h: &[u8]) -> Header {
        for cut in 0..h.len() {
            assert_eq!(parse(&h[..cut]), Ok(None), "prefix of {cut} bytes of {h:?}");
        }
        let mut with_request = h.to_vec();
        with_request.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        let (len, header) = parse(&with_request).unwrap().unwrap();
        assert_eq!(len, h.len());
        header
    }

    #[test]
    fn v1_lines() {
        let h = whole_and_prefixes(b"PROXY TCP4 192.0.2.7 198.51.100.1 40000 80\r\n");
        assert_eq!((h.source, h.destination, h.version), (Some(sa("192.0.2.7:40000")), Some(sa("198.51.100.1:80")), 1));
        let h = whole_and_prefixes(b"PROXY TCP6 2001:db8::1 ::1 65535 443\r\n");
        assert_eq!(h.source, Some(sa("[2001:db8::1]:65535")));
        let h = whole_and_prefixes(b"PROXY UNKNOWN\r\n");
        assert_eq!(h.source, None);
        let h = whole_and_prefixes(b"PROXY UNKNOWN ffff:f...f:ffff ffff:f...f:ffff 65535 65535\r\n");
        assert_eq!(h.source, None);
        // The longest line the specification allows.
        let longest = b"PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
        assert_eq!(longest.len(), V1_MAX);
        assert_eq!(whole_and_prefixes(longest).source, None);
    }

    #[test]
    fn v1_mistakes() {
        let bad = |b: &[u8]| parse(b).unwrap_err();
        assert_eq!(bad(b"GET / HTTP/1.1\r\n"), ProxyError::BadSignature);
        assert_eq!(bad(b"PROXZ"), ProxyError::BadSignature);
        assert_eq!(bad(b"PROXY TCP4 192.0.2.7 198.51.100.1 40000 80\n"), ProxyError::V1Malformed, "no CR");
        assert_eq!(bad(b"PROXY TCP4 ::1 ::1 1 2\r\n"), ProxyError::V1Malformed, "family mismatch");
        assert_eq!(bad(b"PROXY TCP4 1.2.3.4 1.2.3.4 65536 2\r\n"), ProxyError::V1Malformed);
        assert_eq!(bad(b"PROXY TCP4 1.2.3.4 1.2.3.4 01 2\r\n"), ProxyError::V1Malformed);
        assert_eq!(bad(b"PROXY TCP4 1.2.3.4 1.2.3.4 +1 2\r\n"), ProxyError::V1Malformed);
        assert_eq!(bad(b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2 3\r\n"), ProxyError::V1Malformed);
        assert_eq!(bad(b"PROXY TCP4 1.2.3.4 1.2.3.4 1\r\n"), ProxyError::V1Malformed);
        assert_eq!(bad(b"PROXY TCP4  1.2.3.4 1.2.3.4 1 2\r\n"), ProxyError::V1Malformed, "two spaces");
        assert_eq!(bad(b"PROXY UDP4 1.2.3.4 1.2.3.4 1 2\r\n"), ProxyError::V1Malformed);
        assert_eq!(bad(b"PROXY TCP4 1.2.3.4 1.2.3.\xff 1 2\r\n"), ProxyError::V1Malformed);
        assert_eq!(bad(&[b"PROXY UNKNOWN ".as_slice(), &[b'x'; 100]].concat()), ProxyError::V1TooLong);
    }

    #[test]
    fn v2_headers() {
        let h = whole_and_prefixes(&v2_header(sa("192.0.2.7:40000"), sa("198.51.100.1:80"), b""));
        assert_eq!((h.source, h.destination, h.version), (Some(sa("192.0.2.7:40000")), Some(sa("198.51.100.1:80")), 2));
        let h = whole_and_prefixes(&v2_header(sa("[2001:db8::1]:1"), sa("[::1]:2"), b""));
        assert_eq!(h.source, Some(sa("[2001:db8::1]:1")));
        // LOCAL: the balancer's own connection, whatever addresses follow.
        let h = whole_and_prefixes(&V2_LOCAL);
        assert_eq!((h.source, h.version), (None, 2));
        let mut local = v2_header(sa("192.0.2.7:1"), sa("192.0.2.8:2"), b"");
        local[12] = 0x20;
        assert_eq!(whole_and_prefixes(&local).source, None);
        // UNSPEC with PROXY: no address; what follows is TLVs (here an empty NOOP).
        let mut unspec = V2_SIGNATURE.to_vec();
        unspec.extend_from_slice(&[0x21, 0x00, 0, 3, 0x04, 0, 0]);
        assert_eq!(whole_and_prefixes(&unspec).source, None);
    }

    #[test]
    fn v2_tlvs_of_every_length_are_skipped() {
        // HAProxy's: ALPN, authority, a unique id, a NOOP; then empty and large values.
        let mut tlvs = Vec::new();
        for (ty, value) in [(0x01u8, &b"http/1.1"[..]), (0x02, b"www.example"), (0x05, &[7u8; 64]), (0x04, b"")] {
            tlvs.push(ty);
            tlvs.extend_from_slice(&(value.len() as u16).to_be_bytes());
            tlvs.extend_from_slice(value);
        }
        let h = whole_and_prefixes(&v2_header(sa("192.0.2.7:40000"), sa("198.51.100.1:80"), &tlvs));
        assert_eq!(h.source, Some(sa("192.0.2.7:40000")));
        for n in [0usize, 1, 2, 255, 256, V2_MAX_PAYLOAD - 12 - 3] {
            let mut t = vec![0xE0, (n >> 8) as u8, n as u8];
            t.resize(3 + n, 0xAB);
            let h = v2_header(sa("192.0.2.7:1"), sa("192.0.2.8:2"), &t);
            assert_eq!(parse(&h).unwrap().unwrap().0, h.len(), "a TLV of {n} bytes");
            // The same TLV claiming one byte more than the header holds.
            let mut t = vec![0xE0, ((n + 1) >> 8) as u8, (n + 1) as u8];
            t.resize(3 + n, 0xAB);
            let h = v2_header(sa("192.0.2.7:1"), sa("192.0.2.8:2"), &t);
            assert_eq!(parse(&h), Err(ProxyError::BadTlv), "a TLV of {n} bytes claiming {}", n + 1);
        }
        // A TLV cut inside its own type and length.
        for stub in [&[0x01u8][..], &[0x01, 0x00]] {
            let h = v2_header(sa("192.0.2.7:1"), sa("192.0.2.8:2"), stub);
            assert_eq!(parse(&h), Err(ProxyError::BadTlv));
        }
    }

    #[test]
    fn v2_mistakes() {
        let good = v2_header(sa("192.0.2.7:40000"), sa("198.51.100.1:80"), b"");
        let with = |i: usize, b: u8| {
            let mut h = good.clone();
            h[i] = b;
            parse(&h)
        };
        assert_eq!(with(3, b'x'), Err(ProxyError::BadSignature));
        assert_eq!(parse(&good[..5].iter().chain(b"x").copied().collect::<Vec<_>>()), Err(ProxyError::BadSignature));
        assert_eq!(with(12, 0x11), Err(ProxyError::BadCommand), "version 1 in a v2 header");
        assert_eq!(with(12, 0x22), Err(ProxyError::BadCommand), "unknown command");
        assert_eq!(
            parse(&good[..13].iter().copied().map(|b| if b == 0x21 { 0x31 } else { b }).collect::<Vec<_>>()),
            Err(ProxyError::BadCommand),
            "known early"
        );
        for family in [0x12u8, 0x22, 0x31, 0x32, 0x10, 0x01, 0xff] {
            assert_eq!(with(13, family), Err(ProxyError::BadFamily), "family {family:#x}");
        }
        // An IPv6 family in a header too short for its addresses.
        assert_eq!(with(13, 0x21), Err(ProxyError::V2Truncated));
        let mut long = good.clone();
        long[14..16].copy_from_slice(&((V2_MAX_PAYLOAD + 1) as u16).to_be_bytes());
        assert_eq!(parse(&long), Err(ProxyError::V2TooLong), "refused before its bytes come");
        assert_eq!(parse(&[0u8]), Err(ProxyError::BadSignature));
        assert_eq!(parse(b""), Ok(None));
    }
}
