//! Content codings: which one an answer goes in, from the client's `Accept-Encoding`
//! (RFC 9110 §12.5.3) and the server's order.
//!
//! The client's q-values come first; between codings it likes as much, the server's
//! order (`precompressed = ["br", "zstd", "gzip"]`) decides. `*` stands for every
//! coding the client did not name; `q=0` refuses one. An absent header asks for no
//! coding (nginx and Apache read it so: a client that sends none may not decode).

/// A coding pika can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Coding {
    Br,
    Zstd,
    Gzip,
}

/// Every coding, in the default server order: the smallest answers first.
pub const ALL: [Coding; 3] = [Coding::Br, Coding::Zstd, Coding::Gzip];

impl Coding {
    /// Its name in `Accept-Encoding` and `Content-Encoding`.
    pub fn token(self) -> &'static str {
        match self {
            Coding::Br => "br",
            Coding::Zstd => "zstd",
            Coding::Gzip => "gzip",
        }
    }

    /// The file name suffix of a precompressed sibling (`app.js.br`).
    pub fn suffix(self) -> &'static str {
        match self {
            Coding::Br => ".br",
            Coding::Zstd => ".zst",
            Coding::Gzip => ".gz",
        }
    }

    /// As the config names it: `br`, `zstd` (or `zst`), `gzip` (or `gz`).
    pub fn parse(s: &str) -> Option<Coding> {
        match s {
            "br" => Some(Coding::Br),
            "zstd" | "zst" => Some(Coding::Zstd),
            "gzip" | "gz" => Some(Coding::Gzip),
            _ => None,
        }
    }

    /// A small index for tables kept per coding.
    pub fn index(self) -> usize {
        match self {
            Coding::Br => 0,
            Coding::Zstd => 1,
            Coding::Gzip => 2,
        }
    }
}

/// The coding to answer in among `offered` (the server's order), for the client's
/// `Accept-Encoding` value; None: the identity.
pub fn choose(accept: Option<&[u8]>, offered: &[Coding]) -> Option<Coding> {
    let accept = accept?;
    let mut best: Option<(u16, Coding)> = None;
    for &c in offered {
        let q = quality(accept, c.token());
        // Strictly better only: of equal q-values the server's earlier choice stays.
        if q > 0 && best.is_none_or(|(bq, _)| q > bq) {
            best = Some((q, c));
        }
    }
    best.map(|(_, c)| c)
}

/// The client's q-value for `token` in thousandths: its own entry, else `*`'s, else 0
/// (`x-gzip` counts as `gzip`).
fn quality(accept: &[u8], token: &str) -> u16 {
    let mut star = None;
    for item in accept.split(|&b| b == b',') {
        let mut parts = item.split(|&b| b == b';');
        let name = parts.next().unwrap_or(b"").trim_ascii();
        let q = parts
            .find_map(|p| {
                let p = p.trim_ascii();
                (p.len() >= 2 && p[..2].eq_ignore_ascii_case(b"q=")).then(|| parse_q(&p[2..]))
            })
            .unwrap_or(Some(1000));
        // A malformed q-value: the entry is ignored.
        let Some(q) = q else { continue };
        if name.eq_ignore_ascii_case(token.as_bytes()) || (token == "gzip" && name.eq_ignore_ascii_case(b"x-gzip")) {
            return q;
        }
        if name == b"*" {
            star = Some(q);
        }
    }
    star.unwrap_or(0)
}

/// `1`, `1.0`, `0.5`, `0.125` → thousandths; anything else → None.
fn parse_q(s: &[u8]) -> Option<u16> {
    let s = s.trim_ascii();
    let (int, frac) = match s.iter().position(|&b| b == b'.') {
        Some(at) => (&s[..at], &s[at + 1..]),
        None => (s, &b""[..]),
    };
    if int.len() != 1 || frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths: u16 = 0;
    for i in 0..3 {
        thousandths = thousandths * 10 + frac.get(i).map_or(0, |d| u16::from(d - b'0'));
    }
    match int[0] {
        b'0' => Some(thousandths),
        b'1' if thousandths == 0 => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Coding::*;

    fn pick(accept: &str, offered: &[Coding]) -> Option<Coding> {
        choose(Some(accept.as_bytes()), offered)
    }

    #[test]
    fn the_clients_q_values_then_the_servers_order() {
        assert_eq!(pick("gzip, deflate, br, zstd", &ALL), Some(Br), "as browsers send it: the server's order");
        assert_eq!(pick("gzip, deflate, br, zstd", &[Gzip, Br]), Some(Gzip));
        assert_eq!(pick("br;q=0.5, gzip", &ALL), Some(Gzip), "the client's q-value first");
        assert_eq!(pick("br;q=0.5, gzip;q=0.50", &ALL), Some(Br), "equal: the server's order");
        assert_eq!(pick("gzip", &[Br, Zstd]), None);
        assert_eq!(pick("identity", &ALL), None);
        assert_eq!(choose(None, &ALL), None, "no header: no coding");
        assert_eq!(pick("", &ALL), None);
        assert_eq!(pick("x-gzip", &ALL), Some(Gzip));
        assert_eq!(pick("GZIP;Q=1.0", &ALL), Some(Gzip));
    }

    #[test]
    fn star_and_refusals() {
        assert_eq!(pick("*", &ALL), Some(Br));
        assert_eq!(pick("*;q=0.1, gzip", &ALL), Some(Gzip));
        assert_eq!(pick("br;q=0, *", &ALL), Some(Zstd), "br refused, the rest by *");
        assert_eq!(pick("*;q=0", &ALL), None);
        assert_eq!(pick("gzip;q=0", &ALL), None);
    }

    #[test]
    fn malformed_q_values_ignore_their_entry() {
        assert_eq!(pick("br;q=2, gzip", &ALL), Some(Gzip));
        assert_eq!(pick("br;q=0.1234, gzip;q=abc", &ALL), None);
        assert_eq!(pick("br;q=, gzip;q=0.001", &ALL), Some(Gzip));
        assert_eq!(parse_q(b"1.000"), Some(1000));
        assert_eq!(parse_q(b"1.001"), None);
        assert_eq!(parse_q(b"0.5"), Some(500));
    }

    #[test]
    fn names_and_suffixes() {
        for c in ALL {
            assert_eq!(Coding::parse(c.token()), Some(c));
        }
        assert_eq!(Coding::parse("zst"), Some(Zstd));
        assert_eq!(Coding::parse("deflate"), None);
        assert_eq!(Zstd.suffix(), ".zst");
    }
}
