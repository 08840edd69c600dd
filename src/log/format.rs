//! Access-log formats: Apache's `LogFormat` language, compiled once, rendered into one
//! buffer per request.
//!
//! Operators feed these lines to analysers that already read Apache's and nginx's
//! `common` and `combined` logs, so the tokens mean what they mean in
//! `mod_log_config`, and every byte that came from a client is escaped the way Apache
//! escapes it (`\"`, `\\`, `\n`, `\xHH`): a client cannot end a line or forge a field.

use std::time::SystemTime;

use super::record::Record;
use crate::base::text;

/// The named formats, as Apache ships them.
const COMMON: &str = "%h %l %u %t \"%r\" %>s %b";
const COMBINED: &str = "%h %l %u %t \"%r\" %>s %b \"%{Referer}i\" \"%{User-Agent}i\"";
const VHOST_COMBINED: &str = "%v:%p %h %l %u %t \"%r\" %>s %O \"%{Referer}i\" \"%{User-Agent}i\"";

/// One compiled piece of a format.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(String),
    RemoteHost, // %h, %a
    PeerIp,     // %{c}a: the socket's peer (a balancer that named the client)
    User,       // %u: the Basic auth user, else -
    Time,       // %t
    TimeFormat(TimeFmt),
    RequestLine,  // %r
    Method,       // %m
    UrlPath,      // %U
    Query,        // %q ("?x=1" or "")
    Protocol,     // %H
    FinalStatus,  // %>s, %s (no internal redirects here)
    BodyBytesClf, // %b ("-" for 0)
    BodyBytes,    // %B
    Micros,       // %D
    Seconds,      // %T
    VhostName,    // %v
    HostHeader,   // %V
    LocalPort,    // %p, %{local}p, %{canonical}p
    RemotePort,   // %{remote}p
    Pid,          // %P
    BytesIn,      // %I
    BytesOut,     // %O
    HeaderIn(String),
    HeaderOut(String),
    ConnStatus,            // %X
    KeepaliveCount,        // %k
    RequestId,             // %L
    Tls(TlsVar),           // %{SSL_PROTOCOL}x, %{SSL_CIPHER}x, %{SSL_TLS_SNI}x
    Upstream(UpstreamVar), // %{upstream}x, %{upstream_status}x, %{upstream_header_time}x, %{upstream_time}x
    Json,                  // format = "json": the whole record (see json.rs)
}

/// The TLS variables of Apache's mod_ssl that a log may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TlsVar {
    Protocol,
    Cipher,
    Sni,
}

/// What a proxy location's upstream did (nginx's `$upstream_addr`,
/// `$upstream_status`, `$upstream_header_time`, `$upstream_response_time`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UpstreamVar {
    Addr,
    Status,
    HeaderTime,
    Time,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum TimeFmt {
    Sec,
    Msec,
    Usec,
    MsecFrac,
    UsecFrac,
    Strftime(String),
}

/// A compiled access-log format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogFormat {
    /// The format as the config gave it (`combined`, or the string), for `pika -T`.
    spec: String,
    tokens: Vec<Token>,
}

impl LogFormat {
    /// The format as the config gave it.
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// `common`, `combined`, `vhost_combined`, `json`, or a format string with
    /// Apache's tokens.
    pub fn parse(given: &str) -> Result<LogFormat, String> {
        if given == "json" {
            return Ok(LogFormat { spec: given.to_string(), tokens: vec![Token::Json] });
        }
        let spec = match given {
            "common" => COMMON,
            "combined" => COMBINED,
            "vhost_combined" => VHOST_COMBINED,
            other => other,
        };
        let mut tokens = Vec::new();
        let mut lit = String::new();
        let mut chars = spec.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '%' {
                lit.push(c);
                continue;
            }
            let mut arg = None;
            if chars.peek() == Some(&'{') {
                chars.next();
                let mut a = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some(ch) => a.push(ch),
                        None => return Err("unclosed %{".into()),
                    }
                }
                arg = Some(a);
            }
            // Apache's modifiers: `>` / `<` (final/original) and status lists are accepted
            // and ignored: there are no internal redirects to tell apart.
            while matches!(chars.peek(), Some('>' | '<' | '!' | ',' | '0'..='9')) {
                chars.next();
            }
            let Some(t) = chars.next() else { return Err("format ends in %".into()) };
            let token = match (t, arg) {
                ('%', None) => {
                    lit.push('%');
                    continue;
                }
                ('a', Some(c)) if c == "c" => Token::PeerIp,
                ('h' | 'a', _) => Token::RemoteHost,
                // The remote logname (identd) is never asked: always `-`, part of the
                // literal around it (one copy for `" - "`, not three).
                ('l', None) => {
                    lit.push('-');
                    continue;
                }
                ('u', None) => Token::User,
                ('t', None) => Token::Time,
                ('t', Some(f)) => Token::TimeFormat(time_fmt(&f)),
                ('r', None) => Token::RequestLine,
                ('m', None) => Token::Method,
                ('U', None) => Token::UrlPath,
                ('q', None) => Token::Query,
                ('H', None) => Token::Protocol,
                ('s', None) => Token::FinalStatus,
                ('b', None) => Token::BodyBytesClf,
                ('B', None) => Token::BodyBytes,
                ('D', None) => Token::Micros,
                ('T', None) => Token::Seconds,
                ('v', None) => Token::VhostName,
                ('V', None) => Token::HostHeader,
                // Apache's names, in any case.
                ('p', Some(a)) if a.eq_ignore_ascii_case("remote") => Token::RemotePort,
                ('p', None) => Token::LocalPort,
                ('p', Some(a)) if a.eq_ignore_ascii_case("local") || a.eq_ignore_ascii_case("canonical") => {
                    Token::LocalPort
                }
                ('P', _) => Token::Pid,
                ('I', None) => Token::BytesIn,
                ('O', None) => Token::BytesOut,
                ('i', Some(h)) => Token::HeaderIn(h),
                ('o', Some(h)) => Token::HeaderOut(h),
                ('X', None) => Token::ConnStatus,
                ('k', None) => Token::KeepaliveCount,
                ('L', None) => Token::RequestId,
                ('x', Some(v)) => match (upstream_var(&v), v.as_str()) {
                    (Some(u), _) => Token::Upstream(u),
                    (None, "SSL_PROTOCOL") => Token::Tls(TlsVar::Protocol),
                    (None, "SSL_CIPHER") => Token::Tls(TlsVar::Cipher),
                    (None, "SSL_TLS_SNI") => Token::Tls(TlsVar::Sni),
                    _ => {
                        return Err(format!(
                            "unknown %{{{v}}}x (pika has SSL_PROTOCOL, SSL_CIPHER, SSL_TLS_SNI, upstream, \
                             upstream_status, upstream_header_time and upstream_time)"
                        ));
                    }
                },
                (t, Some(a)) => return Err(format!("unknown token %{{{a}}}{t}")),
                (t, None) => return Err(format!("unknown token %{t}")),
            };
            if !lit.is_empty() {
                tokens.push(Token::Literal(std::mem::take(&mut lit)));
            }
            tokens.push(token);
        }
        if !lit.is_empty() {
            tokens.push(Token::Literal(lit));
        }
        Ok(LogFormat { spec: given.to_string(), tokens })
    }

    /// Appends one record (with its newline) to `out`. `clf_time` is the `[dd/Mon/yyyy:HH:MM:SS +zzzz]`
    /// stamp for `%t`, cached by the caller per second.
    pub fn render(&self, r: &Record<'_>, clf_time: &str, out: &mut Vec<u8>) {
        self.render_capped(r, clf_time, out, usize::MAX);
    }

    /// Appends one record of at most `limit` bytes, newline included. Nearly always
    /// that is the whole record. When the client's fields (request line, headers,
    /// path, query, Host) make it longer, each of them is cut to the largest common
    /// length at which the record fits, never inside an escape: the record keeps all
    /// its fields (status, sizes, Referer and User-Agent after a long request line)
    /// and stays parseable. Only a format whose own text is over the limit is cut at
    /// the end.
    pub fn render_within(&self, r: &Record<'_>, clf_time: &str, out: &mut Vec<u8>, limit: usize) {
        let at = out.len();
        self.render_capped(r, clf_time, out, usize::MAX);
        let full = out.len() - at;
        if full <= limit {
            return;
        }
        let fits = |cap: usize, out: &mut Vec<u8>| {
            out.truncate(at);
            self.render_capped(r, clf_time, out, cap);
            out.len() - at <= limit
        };
        if !fits(0, out) {
            out.truncate(at + limit.saturating_sub(1));
            out.push(b'\n');
            return;
        }
        // The record grows with the cap: find the largest cap that fits. No field is
        // longer than the whole record.
        let (mut lo, mut hi) = (0, full);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if fits(mid, out) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        fits(lo, out);
    }

    /// Renders with each client field's escaped text cut to `cap` bytes.
    fn render_capped(&self, r: &Record<'_>, clf_time: &str, out: &mut Vec<u8>, cap: usize) {
        let escape_into = |out: &mut Vec<u8>, bytes: &[u8]| escape_capped(out, bytes, cap);
        for t in &self.tokens {
            match t {
                Token::Literal(s) => out.extend_from_slice(s.as_bytes()),
                Token::RemoteHost => text::push_ip(out, r.client),
                Token::PeerIp => text::push_ip(out, r.peer.ip()),
                Token::User => match r.user {
                    Some(u) if !u.is_empty() => escape_into(out, u.as_bytes()),
                    _ => out.push(b'-'),
                },
                Token::Time => out.extend_from_slice(clf_time.as_bytes()),
                Token::TimeFormat(f) => render_time(f, r.start, out),
                Token::RequestLine => escape_into(out, r.request_line),
                Token::Method => escape_into(out, r.method),
                Token::UrlPath => escape_into(out, r.path),
                Token::Query => {
                    if let Some(q) = r.query {
                        out.push(b'?');
                        escape_into(out, q);
                    }
                }
                Token::Protocol => out.extend_from_slice(r.protocol.as_bytes()),
                Token::FinalStatus => text::push_int(out, r.status),
                Token::BodyBytesClf if r.body_bytes == 0 => out.push(b'-'),
                Token::BodyBytesClf | Token::BodyBytes => text::push_int(out, r.body_bytes),
                Token::Micros => text::push_int(out, r.duration.as_micros()),
                Token::Seconds => text::push_int(out, r.duration.as_secs()),
                Token::VhostName => escape_into(out, r.vhost.as_bytes()),
                Token::HostHeader => match r.host {
                    Some(h) => escape_into(out, h),
                    None => escape_into(out, r.vhost.as_bytes()),
                },
                Token::LocalPort => text::push_int(out, r.local_port),
                Token::RemotePort => text::push_int(out, r.peer.port()),
                Token::Pid => text::push_int(out, crate::base::sys::own_pid()),
                Token::BytesIn => text::push_int(out, r.bytes_in),
                Token::BytesOut => text::push_int(out, r.bytes_out),
                Token::HeaderIn(name) => match (r.headers_in)(name) {
                    Some(v) => escape_into(out, v),
                    None => out.push(b'-'),
                },
                Token::HeaderOut(name) => match response_header(r.response_head, name) {
                    Some(v) => escape_into(out, v),
                    None => out.push(b'-'),
                },
                Token::ConnStatus => out.push(r.conn_status as u8),
                Token::KeepaliveCount => text::push_int(out, r.keepalive_count),
                Token::RequestId => text::push_hex(out, r.request_id, 16),
                Token::Json => super::json::render(r, out, &|out, b| super::json::escape_capped(out, b, cap)),
                Token::Upstream(var) => match (var, r.upstream) {
                    (UpstreamVar::Addr, Some(u)) => escape_into(out, u.addr.as_bytes()),
                    (UpstreamVar::Status, Some(u)) if u.status.is_some() => {
                        text::push_int(out, u.status.unwrap_or(0));
                    }
                    (UpstreamVar::HeaderTime, Some(u)) if u.header_time.is_some() => {
                        push_seconds(out, u.header_time.unwrap_or_default());
                    }
                    (UpstreamVar::Time, Some(u)) => push_seconds(out, u.time),
                    _ => out.push(b'-'),
                },
                Token::Tls(var) => {
                    let value = r.tls.and_then(|t| match var {
                        TlsVar::Protocol => Some(t.protocol),
                        TlsVar::Cipher => Some(t.cipher),
                        TlsVar::Sni => t.sni,
                    });
                    match value {
                        Some(v) => escape_into(out, v.as_bytes()),
                        None => out.push(b'-'),
                    }
                }
            }
        }
        out.push(b'\n');
    }
}

fn time_fmt(f: &str) -> TimeFmt {
    // `begin:` / `end:` prefixes: the request's start is the only time we record.
    let f = f.strip_prefix("begin:").or_else(|| f.strip_prefix("end:")).unwrap_or(f);
    match f {
        "sec" => TimeFmt::Sec,
        "msec" => TimeFmt::Msec,
        "usec" => TimeFmt::Usec,
        "msec_frac" => TimeFmt::MsecFrac,
        "usec_frac" => TimeFmt::UsecFrac,
        other => TimeFmt::Strftime(other.to_string()),
    }
}

fn render_time(f: &TimeFmt, t: SystemTime, out: &mut Vec<u8>) {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    match f {
        TimeFmt::Sec => push_display(out, since.as_secs()),
        TimeFmt::Msec => push_display(out, since.as_millis()),
        TimeFmt::Usec => push_display(out, since.as_micros()),
        TimeFmt::MsecFrac => push_display(out, format_args!("{:03}", since.subsec_millis())),
        TimeFmt::UsecFrac => push_display(out, format_args!("{:06}", since.subsec_micros())),
        TimeFmt::Strftime(s) => {
            let ts = jiff::Timestamp::try_from(t).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
            let zoned = ts.to_zoned_datetime(super::files::local_zone().clone());
            push_display(out, zoned.strftime(s));
        }
    }
}

/// The value of a response header in a raw head, case-insensitively.
fn response_header<'h>(head: &'h [u8], name: &str) -> Option<&'h [u8]> {
    head.split(|&b| b == b'\n').skip(1).find_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|&b| b == b':')?;
        let (n, v) = line.split_at(colon);
        n.eq_ignore_ascii_case(name.as_bytes()).then(|| v[1..].trim_ascii())
    })
}

/// Seconds with milliseconds, as nginx's `$upstream_response_time` (`0.012`).
fn push_seconds(out: &mut Vec<u8>, d: std::time::Duration) {
    push_display(out, format_args!("{}.{:03}", d.as_secs(), d.subsec_millis()));
}

/// The upstream field `%{NAME}x` names, if it names one.
fn upstream_var(name: &str) -> Option<UpstreamVar> {
    Some(match name {
        "upstream" => UpstreamVar::Addr,
        "upstream_status" => UpstreamVar::Status,
        "upstream_header_time" => UpstreamVar::HeaderTime,
        "upstream_time" => UpstreamVar::Time,
        _ => return None,
    })
}

/// Formats straight into the record buffer (no temporary string per field).
fn push_display(out: &mut Vec<u8>, v: impl std::fmt::Display) {
    use std::io::Write as _;
    let _ = write!(out, "{v}");
}

/// [`escape_into`], writing at most `cap` bytes: the escape of a byte is written
/// whole or not at all, so a cut field never ends in a lone backslash.
fn escape_capped(out: &mut Vec<u8>, bytes: &[u8], cap: usize) {
    // One byte escapes to four at most.
    if cap / 4 >= bytes.len() {
        return escape_into(out, bytes);
    }
    let end = out.len() + cap;
    let mut one = Vec::with_capacity(4);
    for &b in bytes {
        one.clear();
        escape_into(&mut one, &[b]);
        if out.len() + one.len() > end {
            break;
        }
        out.extend_from_slice(&one);
    }
}

/// Apache's `ap_escape_logitem`: `"` and `\` are backslash-escaped, the usual control
/// characters get their C escapes, every other byte outside printable ASCII is `\xHH`.
pub fn escape_into(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let plain = |b: u8| (0x20..=0x7e).contains(&b) & (b != b'"') & (b != b'\\');
    // A field with nothing to escape (nearly every one) is one check and one copy.
    if all_plain(bytes) {
        out.extend_from_slice(bytes);
        return;
    }
    let mut rest = bytes;
    while !rest.is_empty() {
        // Runs of plain bytes (nearly all of a real request) are copied whole.
        let run = rest.iter().position(|&b| !plain(b)).unwrap_or(rest.len());
        out.extend_from_slice(&rest[..run]);
        let Some((&b, tail)) = rest[run..].split_first() else { break };
        rest = tail;
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0b => out.extend_from_slice(b"\\v"),
            _ => out.extend_from_slice(&[b'\\', b'x', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]),
        }
    }
}

/// True if no byte of `bytes` needs [`escape_into`]'s escape: printable ASCII
/// other than `"` and `\`. Eight bytes a step (every record escapes its request
/// line and its headers, and a byte at a time cost four instructions a byte).
fn all_plain(bytes: &[u8]) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // A word's result has a high bit set if some byte of it needs escaping: a `"`
    // or `\` (its xor is zero), a control byte (below 0x20), or 0x7f and up (one
    // more sets the high bit, which bytes from 0x80 have already). A borrow or
    // carry may mark a neighbour too, but only beside a byte rightly marked.
    let zero = |w: u64| w.wrapping_sub(ONES) & !w & HIGH;
    let needs = |w: u64| {
        zero(w ^ (ONES * u64::from(b'"')))
            | zero(w ^ (ONES * u64::from(b'\\')))
            | (w.wrapping_sub(ONES * 0x20) & !w & HIGH)
            | ((w.wrapping_add(ONES) | w) & HIGH)
    };
    let mut words = bytes.chunks_exact(8);
    let mut found = 0;
    for w in &mut words {
        found |= needs(u64::from_le_bytes(w.try_into().unwrap_or_default()));
    }
    let tail = words.remainder();
    let mut last = [b' '; 8];
    last[..tail.len()].copy_from_slice(tail);
    found |= needs(u64::from_le_bytes(last));
    found == 0
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use super::*;
    use crate::log::record::TlsFields;

    /// A record with every field set, for the format tests here and in `json.rs`.
    pub(crate) fn record<'a>(headers: &'a dyn Fn(&str) -> Option<&'a [u8]>) -> Record<'a> {
        Record {
            client: "::ffff:127.0.0.1".parse().unwrap(),
            peer: "[::ffff:127.0.0.1]:51234".parse().unwrap(),
            user: None,
            local_port: 8080,
            request_line: b"GET /a%20b?x=1 HTTP/1.1",
            method: b"GET",
            path: b"/a b",
            query: Some(b"x=1"),
            protocol: "HTTP/1.1",
            status: 200,
            body_bytes: 1234,
            bytes_in: 80,
            bytes_out: 1400,
            start: SystemTime::UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456),
            duration: Duration::from_micros(1500),
            vhost: "example.com",
            host: Some(b"Example.com:8080"),
            headers_in: headers,
            response_head: b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nETag: \"x\"\r\n\r\n",
            conn_status: '+',
            keepalive_count: 3,
            health: false,
            request_id: 0xabc,
            tls: None,
            upstream: None,
        }
    }

    fn render<'a>(spec: &str, headers: &'a dyn Fn(&str) -> Option<&'a [u8]>) -> String {
        let f = LogFormat::parse(spec).unwrap();
        let mut out = Vec::new();
        f.render(&record(headers), "[14/Nov/2023:22:13:20 +0000]", &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn combined_matches_apache() {
        let h = |n: &str| match n {
            "User-Agent" => Some(&b"curl/8 \"evil\"\n127.0.0.1 - - fake"[..]),
            _ => None,
        };
        assert_eq!(
            render("combined", &h),
            "127.0.0.1 - - [14/Nov/2023:22:13:20 +0000] \"GET /a%20b?x=1 HTTP/1.1\" 200 1234 \"-\" \"curl/8 \\\"evil\\\"\\n127.0.0.1 - - fake\"\n"
        );
    }

    #[test]
    fn every_token() {
        let h = |n: &str| (n == "X-A").then_some(&b"v"[..]);
        let line = render(
            "%h %a %l %u %m %U %q %H %>s %s %b %B %D %T %v %V %p %I %O %{X-A}i %{X-B}i %{etag}o %X %k %L %% %{sec}t %{msec_frac}t %{usec}t %{%Y-%m-%d}t",
            &h,
        );
        assert_eq!(
            line,
            "127.0.0.1 127.0.0.1 - - GET /a b ?x=1 HTTP/1.1 200 200 1234 1234 1500 0 example.com Example.com:8080 8080 80 1400 v - \\\"x\\\" + 3 0000000000000abc % 1700000000 123 1700000000123456 "
                .to_string()
                + &jiff::Timestamp::from_second(1_700_000_000)
                    .unwrap()
                    .to_zoned_datetime(crate::log::local_zone().clone())
                    .strftime("%Y-%m-%d")
                    .to_string()
                + "\n"
        );
        assert!(render("%P", &h).trim().parse::<u32>().is_ok());
    }

    #[test]
    fn ports_as_apache_names_them() {
        let h = |_: &str| None;
        assert_eq!(render("%p %{local}p %{canonical}p %{remote}p %{REMOTE}p", &h), "8080 8080 8080 51234 51234\n");
        assert!(LogFormat::parse("%{peer}p").is_err());
    }

    #[test]
    fn upstream_fields_as_nginx_names_them() {
        use crate::log::record::UpstreamFields;
        let h = |_: &str| None;
        let f =
            LogFormat::parse("%{upstream}x %{upstream_status}x %{upstream_header_time}x %{upstream_time}x %s").unwrap();
        let mut r = record(&h);
        let mut out = Vec::new();
        f.render(&r, "", &mut out);
        assert_eq!(out, b"- - - - 200\n", "not proxied");
        let addr = "http://127.0.0.1:8000";
        let header_time = Some(Duration::from_micros(12_300));
        r.upstream = Some(UpstreamFields { addr, status: Some(201), header_time, time: Duration::from_millis(1045) });
        out.clear();
        f.render(&r, "", &mut out);
        assert_eq!(out, b"http://127.0.0.1:8000 201 0.012 1.045 200\n");
        r.upstream = Some(UpstreamFields { addr, status: None, header_time: None, time: Duration::from_millis(3) });
        out.clear();
        f.render(&r, "", &mut out);
        assert_eq!(out, b"http://127.0.0.1:8000 - - 0.003 200\n", "no answer came");
    }

    #[test]
    fn tls_variables_as_apache_names_them() {
        let h = |_: &str| None;
        let f = LogFormat::parse("%{SSL_PROTOCOL}x %{SSL_CIPHER}x %{SSL_TLS_SNI}x %h").unwrap();
        let mut r = record(&h);
        let mut out = Vec::new();
        f.render(&r, "", &mut out);
        assert_eq!(out, b"- - - 127.0.0.1\n", "plain HTTP");
        r.tls = Some(TlsFields { protocol: "TLSv1.3", cipher: "TLS_AES_128_GCM_SHA256", sni: Some("www.example.com") });
        out.clear();
        f.render(&r, "", &mut out);
        assert_eq!(out, b"TLSv1.3 TLS_AES_128_GCM_SHA256 www.example.com 127.0.0.1\n");
        r.tls = Some(TlsFields { protocol: "TLSv1.2", cipher: "ECDHE-ECDSA-AES128-GCM-SHA256", sni: None });
        out.clear();
        f.render(&r, "", &mut out);
        assert_eq!(out, b"TLSv1.2 ECDHE-ECDSA-AES128-GCM-SHA256 - 127.0.0.1\n");
        let e = LogFormat::parse("%{SSL_CLIENT_S_DN}x").unwrap_err();
        assert!(
            e.starts_with("unknown %{SSL_CLIENT_S_DN}x (pika has SSL_PROTOCOL, SSL_CIPHER, SSL_TLS_SNI, upstream"),
            "{e}"
        );
        assert!(LogFormat::parse("%x").is_err());
    }

    #[test]
    fn escapes_control_bytes() {
        let mut out = Vec::new();
        escape_into(&mut out, b"a\"b\\c\r\n\t\x08\x0b\x00\x1b\x7f\xff");
        assert_eq!(out, b"a\\\"b\\\\c\\r\\n\\t\\b\\v\\x00\\x1b\\x7f\\xff");
    }

    /// The word-at-a-time check finds every byte that needs escaping, at every
    /// place of a word and of the tail, beside every neighbour that could carry.
    #[test]
    fn all_plain_finds_every_byte_to_escape() {
        let plain = |b: u8| (0x20..=0x7e).contains(&b) && b != b'"' && b != b'\\';
        for len in 1..=19 {
            for at in 0..len {
                for b in 0..=255u8 {
                    for fill in [b' ', b'~', b'a'] {
                        let mut bytes = vec![fill; len];
                        bytes[at] = b;
                        assert_eq!(all_plain(&bytes), plain(b), "{b:#x} at {at} of {len} in {fill:#x}");
                    }
                }
            }
        }
        assert!(all_plain(b""));
    }

    proptest::proptest! {
        /// The run-copying escaper writes what a byte-at-a-time one writes.
        #[test]
        fn escape_matches_bytewise(bytes: Vec<u8>) {
            let mut want = Vec::new();
            for &b in &bytes {
                match b {
                    b'"' | b'\\' => want.extend_from_slice(&[b'\\', b]),
                    b'\n' => want.extend_from_slice(b"\\n"),
                    b'\r' => want.extend_from_slice(b"\\r"),
                    b'\t' => want.extend_from_slice(b"\\t"),
                    0x08 => want.extend_from_slice(b"\\b"),
                    0x0b => want.extend_from_slice(b"\\v"),
                    0x20..=0x7e => want.push(b),
                    _ => want.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
                }
            }
            let mut out = Vec::new();
            escape_into(&mut out, &bytes);
            proptest::prop_assert_eq!(out, want);
        }
    }

    /// `pika -T` prints the format as the config gave it, named or spelled out.
    #[test]
    fn a_format_keeps_its_spec() {
        for spec in ["combined", "json", "%h %>s \"%r\""] {
            assert_eq!(LogFormat::parse(spec).unwrap().spec(), spec);
        }
    }

    #[test]
    fn bad_formats() {
        assert!(LogFormat::parse("%{Referer").is_err());
        assert!(LogFormat::parse("%Z").is_err());
        assert!(LogFormat::parse("abc %").is_err());
        assert_eq!(LogFormat::parse("100%%").unwrap().tokens, vec![Token::Literal("100%".into())]);
    }

    #[test]
    fn a_long_client_field_is_cut_and_the_record_keeps_every_field() {
        // A request line of quotes (two bytes each once escaped), far over the limit.
        let line = [&b"GET /"[..], &[b'"'; 6000], b" HTTP/1.1"].concat();
        let h = |n: &str| match n {
            "Referer" => Some(&b"http://ref.example/"[..]),
            "User-Agent" => Some(&b"agent/1"[..]),
            _ => None,
        };
        let mut r = record(&h);
        r.request_line = &line;
        let f = LogFormat::parse("combined").unwrap();
        let mut out = b"kept".to_vec();
        f.render_within(&r, "[14/Nov/2023:22:13:20 +0000]", &mut out, 4096);
        let rec = String::from_utf8(out[4..].to_vec()).unwrap();
        assert!(rec.len() <= 4096 && rec.len() > 4000, "{}", rec.len());
        assert!(rec.ends_with("\" 200 1234 \"http://ref.example/\" \"agent/1\"\n"), "{rec}");
        // The cut request line holds whole escapes only: `\"` pairs, no lone backslash.
        let field = &rec[rec.find("\"GET /").unwrap() + 6..rec.find("\" 200 ").unwrap()];
        assert!(field.len() % 2 == 0 && field.as_bytes().chunks(2).all(|p| p == b"\\\""), "{field}");
        // Several long fields share the room.
        let ua = vec![b'u'; 5000];
        let h = |n: &str| (n == "User-Agent").then_some(&ua[..]);
        let mut r = record(&h);
        r.request_line = &line;
        let mut out = Vec::new();
        f.render_within(&r, "[14/Nov/2023:22:13:20 +0000]", &mut out, 4096);
        let rec = String::from_utf8(out).unwrap();
        assert!(rec.len() <= 4096 && rec.contains("\" 200 1234 \"-\" \"uuu") && rec.ends_with("u\"\n"), "{rec}");
        // A short record is left whole.
        let h = |_: &str| None;
        let mut out = Vec::new();
        f.render_within(&record(&h), "[14/Nov/2023:22:13:20 +0000]", &mut out, 4096);
        let mut whole = Vec::new();
        f.render(&record(&h), "[14/Nov/2023:22:13:20 +0000]", &mut whole);
        assert_eq!(out, whole);
    }

    proptest::proptest! {
        /// A capped escape is a prefix of the whole one, of at most `cap` bytes, made of
        /// whole escapes.
        #[test]
        fn capped_escape_is_a_whole_prefix(bytes: Vec<u8>, cap in 0usize..64) {
            let (mut whole, mut cut) = (Vec::new(), Vec::new());
            escape_into(&mut whole, &bytes);
            escape_capped(&mut cut, &bytes, cap);
            proptest::prop_assert!(cut.len() <= cap || cut == whole);
            proptest::prop_assert!(whole.starts_with(&cut));
            let mut again = Vec::new();
            let n = (0..=bytes.len()).rev().find(|&n| { again.clear(); escape_into(&mut again, &bytes[..n]); again.len() == cut.len() });
            proptest::prop_assert!(n.is_some(), "the cut falls between two escapes");
        }
    }

    /// Apache's log escapes undone; None for a byte or an escape `escape_into` never
    /// writes (so a raw control byte or a lone backslash fails the round trip).
    fn unescape(text: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < text.len() {
            let b = text[i];
            i += 1;
            if !(0x20..=0x7e).contains(&b) || b == b'"' {
                return None;
            }
            if b != b'\\' {
                out.push(b);
                continue;
            }
            let e = *text.get(i)?;
            i += 1;
            out.push(match e {
                b'"' | b'\\' => e,
                b'n' => b'\n',
                b'r' => b'\r',
                b't' => b'\t',
                b'b' => 0x08,
                b'v' => 0x0b,
                b'x' => {
                    let hex = std::str::from_utf8(text.get(i..i + 2)?).ok()?;
                    i += 2;
                    u8::from_str_radix(hex, 16).ok()?
                }
                _ => return None,
            });
        }
        Some(out)
    }

    /// A response header's value: one line of a head, without its CR and LF.
    fn header_value() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::strategy::Strategy;
        let byte = proptest::num::u8::ANY.prop_filter("a line end", |b| *b != b'\r' && *b != b'\n');
        proptest::collection::vec(byte, 0..64)
    }

    proptest::proptest! {
        /// Every token a client controls, fed arbitrary bytes: the record is one line
        /// of printable ASCII with no bare quote, and the field reads back as exactly
        /// the bytes the client sent (cut by `render_within` only at a whole escape).
        #[test]
        fn every_client_token_is_escaped(
            field: Vec<u8>,
            out_value in header_value(),
            limit in 16usize..256,
        ) {
            let head = [&b"HTTP/1.1 200 OK\r\nX-Out: "[..], &out_value, b"\r\n\r\n"].concat();
            let headers = |n: &str| (n == "X-In").then_some(&field[..]);
            let mut r = record(&headers);
            r.request_line = &field;
            r.method = &field;
            r.path = &field;
            r.query = Some(&field);
            r.host = Some(&field);
            r.response_head = &head;
            let question = [&b"?"[..], &field].concat();
            let trimmed = out_value.trim_ascii();
            let tokens: [(&str, &[u8]); 7] = [
                ("%r", &field),
                ("%m", &field),
                ("%U", &field),
                ("%q", &question),
                ("%V", &field),
                ("%{X-In}i", &field),
                ("%{X-Out}o", trimmed),
            ];
            for (token, sent) in tokens {
                let f = LogFormat::parse(&format!("\"{token}\"")).unwrap();
                let mut out = Vec::new();
                f.render(&r, "", &mut out);
                proptest::prop_assert_eq!(out.pop(), Some(b'\n'));
                let inner = &out[1..out.len() - 1];
                let back = unescape(inner);
                proptest::prop_assert_eq!(back.as_deref(), Some(sent), "{} gave {:?}", token, String::from_utf8_lossy(&out));
                // Within a limit, after a record already in the buffer: that one kept,
                // then one whole line, the field a prefix of what was sent.
                let mut buf = b"earlier record\n".to_vec();
                f.render_within(&r, "", &mut buf, limit);
                proptest::prop_assert!(buf.starts_with(b"earlier record\n"));
                let cut = &buf[15..];
                proptest::prop_assert!(cut.len() <= limit && cut.ends_with(b"\n") && cut.iter().filter(|&&b| b == b'\n').count() == 1);
                // Cut only if the whole did not fit; a cut leaves no room for one more
                // escaped byte.
                proptest::prop_assert_eq!(cut.len() < out.len() + 1, out.len() + 1 > limit);
                if cut.len() < out.len() + 1 {
                    proptest::prop_assert!(cut.len() + 4 > limit, "{} cut to {} of {}", token, cut.len(), limit);
                }
                let inner = &cut[1..cut.len() - 2];
                let back = unescape(inner);
                proptest::prop_assert!(back.as_deref().is_some_and(|b| sent.starts_with(b)), "{} cut to {:?}", token, String::from_utf8_lossy(cut));
            }
        }
    }

    proptest::proptest! {
        /// A capped escape takes every whole escape that fits: the next one would not.
        #[test]
        fn capped_escape_fills_its_cap(bytes: Vec<u8>, cap in 0usize..64) {
            let mut cut = Vec::new();
            escape_capped(&mut cut, &bytes, cap);
            let mut whole = Vec::new();
            escape_into(&mut whole, &bytes);
            if cut != whole {
                let taken = (0..=bytes.len()).find(|&n| { let mut e = Vec::new(); escape_into(&mut e, &bytes[..n]); e == cut }).unwrap();
                let mut next = Vec::new();
                escape_into(&mut next, &bytes[taken..=taken]);
                proptest::prop_assert!(cut.len() + next.len() > cap, "{:?} of {} bytes left room for {:?}", cut, cap, next);
            }
        }
    }

    #[test]
    fn a_record_whose_own_text_is_over_the_limit_is_cut_to_it() {
        // Even with every client field empty the record is longer than the limit:
        // cut to the limit, the newline last, after what the buffer already held.
        let h = |_: &str| None;
        let f = LogFormat::parse("0123456789abcdef %U").unwrap();
        let mut out = b"kept\n".to_vec();
        f.render_within(&record(&h), "", &mut out, 8);
        assert_eq!(String::from_utf8_lossy(&out), "kept\n0123456\n");
    }

    #[test]
    fn zero_bytes_is_a_dash_in_clf() {
        let h = |_: &str| None;
        let f = LogFormat::parse("%b %B").unwrap();
        let mut r = record(&h);
        r.body_bytes = 0;
        let mut out = Vec::new();
        f.render(&r, "", &mut out);
        assert_eq!(out, b"- 0\n");
    }
}
