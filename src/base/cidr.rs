//! Client address ranges (`127.0.0.0/8`, `::1`, `10.1.2.3`), a plain value type: who
//! may read `server-status`, which clients a log filter matches.

use std::net::IpAddr;

/// An address and a prefix length; a bare address is a /32 or /128.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Option<Cidr> {
        let (addr, prefix) = match s.trim().split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s.trim(), None),
        };
        let addr: IpAddr = addr.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p.parse::<u8>().ok().filter(|p| *p <= max)?,
            None => max,
        };
        Some(Cidr { addr, prefix })
    }

    /// True if `ip` is inside the range. An IPv4-mapped IPv6 client (`::ffff:a.b.c.d`,
    /// as a dual-stack listener reports it) matches IPv4 ranges.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                mask_eq(u32::from(net) as u128, u32::from(ip) as u128, self.prefix, 32)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => mask_eq(u128::from(net), u128::from(ip), self.prefix, 128),
            _ => false,
        }
    }
}

/// As the config writes it: `10.0.0.0/8`, a bare address for a single host.
impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let full = if self.addr.is_ipv4() { 32 } else { 128 };
        if self.prefix == full { write!(f, "{}", self.addr) } else { write!(f, "{}/{}", self.addr, self.prefix) }
    }
}

fn mask_eq(net: u128, ip: u128, prefix: u8, bits: u32) -> bool {
    if prefix == 0 {
        return true;
    }
    let shift = bits - u32::from(prefix);
    (net >> shift) == (ip >> shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn v4_ranges() {
        let c = Cidr::parse("127.0.0.0/8").unwrap();
        assert!(c.contains(ip("127.1.2.3")));
        assert!(!c.contains(ip("128.0.0.1")));
        assert!(c.contains(ip("::ffff:127.0.0.1")));
        assert!(Cidr::parse("0.0.0.0/0").unwrap().contains(ip("8.8.8.8")));
        assert!(Cidr::parse("10.0.0.1").unwrap().contains(ip("10.0.0.1")));
        assert!(!Cidr::parse("10.0.0.1").unwrap().contains(ip("10.0.0.2")));
    }

    #[test]
    fn v6_ranges() {
        let c = Cidr::parse("::1/128").unwrap();
        assert!(c.contains(ip("::1")));
        assert!(!c.contains(ip("::2")));
        assert!(!c.contains(ip("127.0.0.1")));
        assert!(Cidr::parse("2001:db8::/32").unwrap().contains(ip("2001:db8:1::5")));
    }

    #[test]
    fn rejects_garbage() {
        assert_eq!(Cidr::parse("10.0.0.0/33"), None);
        assert_eq!(Cidr::parse("nonsense"), None);
        assert_eq!(Cidr::parse("::/129"), None);
    }
}
