//! HTTP/1.1 to an upstream server (a reverse proxy's `proxy = "http://…"`), its pure
//! parts: where the upstream is ([`Upstream`]), the path it is asked for (nginx's
//! `proxy_pass` rule: a URL with a path replaces the location's prefix, one
//! without passes the request's path as it came), the request head sent to it
//! ([`request_head`]: hop-by-hop headers dropped, `Host` passed or set, the
//! forwarding headers added; an upgrade the location allows passed,
//! [`upgrade_asked`]), and its answer's head ([`parse_head`]) and body framing
//! ([`Framing`], [`Chunked`]).
//!
//! The upstream's head is turned into the header block a script would print
//! (`Status: …` first), so the answer goes through the same reading, keeping and
//! streaming as a script's ([`super::output`]); its body is given there decoded
//! (chunks undone: the client side frames it again).

use std::net::IpAddr;
use std::path::PathBuf;

/// Where a proxy location sends its requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    pub addr: UpstreamAddr,
    /// The `Host` an upstream is named by in the URL (`host:port` as written; for a
    /// unix socket, `localhost`).
    pub host: String,
    /// The URL's path, if it has one (even `/`): it replaces the location's prefix.
    pub path: Option<String>,
}

/// How the upstream is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpstreamAddr {
    /// `host:port`.
    Tcp(String),
    Unix(PathBuf),
}

impl Upstream {
    /// `http://host[:port][/path]` or `unix:/path/to.sock`.
    pub fn parse(s: &str) -> Option<Upstream> {
        if let Some(p) = s.strip_prefix("unix:") {
            return (p.starts_with('/') && p.len() > 1).then(|| Upstream {
                addr: UpstreamAddr::Unix(p.into()),
                host: "localhost".into(),
                path: None,
            });
        }
        let rest = s.strip_prefix("http://")?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], Some(rest[i..].to_string())),
            None => (rest, None),
        };
        if authority.is_empty() || authority.contains(['@', '?', '#', ' ']) {
            return None;
        }
        if path.as_deref().is_some_and(|p| p.contains(['?', '#', ' '])) {
            return None;
        }
        // The port: after the last colon outside an IPv6 literal's brackets.
        let (host, port) = match authority.rfind(':') {
            Some(i) if !authority[i..].contains(']') => (&authority[..i], authority[i + 1..].parse::<u16>().ok()?),
            _ => (authority, 80),
        };
        if host.is_empty() || (host.starts_with('[') != host.ends_with(']')) {
            return None;
        }
        Some(Upstream { addr: UpstreamAddr::Tcp(format!("{host}:{port}")), host: authority.to_string(), path })
    }

    /// The request target sent upstream for a request to `target` (path and query
    /// as the client sent them) at a location whose prefix is `prefix` (`None`: not
    /// a prefix location). With a path in the URL, the part of the path the
    /// prefix matched is replaced by it (when the request's path, as sent, starts
    /// with the prefix; else the URL's path with the whole of it, as nginx does
    /// for a regex location); without, the target passes as it came.
    pub fn target(&self, target: &[u8], prefix: Option<&str>) -> Vec<u8> {
        let Some(path) = &self.path else { return target.to_vec() };
        let rest = match prefix.and_then(|p| target.strip_prefix(p.as_bytes())) {
            Some(rest) => rest,
            None => target.strip_prefix(b"/").unwrap_or(target),
        };
        let mut out = path.as_bytes().to_vec();
        if out.ends_with(b"/") && rest.starts_with(b"/") {
            out.pop();
        }
        out.extend_from_slice(rest);
        out
    }
}

impl Upstream {
    /// The server, as the status page, the metrics and the pool's table name it: the
    /// URL without its path (`http://10.0.0.1:8000`, `unix:/run/app.sock`), so the
    /// locations that pass to one server share its state.
    pub fn server(&self) -> String {
        match &self.addr {
            UpstreamAddr::Unix(p) => format!("unix:{}", p.display()),
            UpstreamAddr::Tcp(_) => format!("http://{}", self.host),
        }
    }
}

impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.addr {
            UpstreamAddr::Unix(p) => write!(f, "unix:{}", p.display()),
            UpstreamAddr::Tcp(_) => write!(f, "http://{}{}", self.host, self.path.as_deref().unwrap_or("")),
        }
    }
}

/// Headers that belong to one connection (RFC 9110 §7.6.1), never passed on, with
/// those a proxy sets itself.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-authorization",
    "proxy-authenticate",
];

/// Request headers the proxy writes itself.
const SET_HERE: [&str; 5] = ["host", "content-length", "expect", "x-forwarded-proto", "x-forwarded-host"];

/// How pika names itself in `Via` (RFC 9110 §7.6.3: a pseudonym, no version).
pub const VIA_NAME: &str = "pika";

/// What the request head sent upstream says besides the client's headers.
pub struct Forwarding<'a> {
    pub method: &'a str,
    pub target: &'a [u8],
    /// `Host` as sent upstream.
    pub host: &'a [u8],
    /// The client's `Host`, for `X-Forwarded-Host` and `Forwarded: host=`.
    pub client_host: Option<&'a [u8]>,
    pub client: IpAddr,
    pub https: bool,
    /// The request body's length, if it has one (a request with a body, or a
    /// method that carries one).
    pub content_length: Option<u64>,
    /// Pika names itself in `Via` with the client's protocol version (`1.1`).
    pub via: Option<&'a str>,
    /// The protocols the client asks to switch to, as its `Upgrade` named them
    /// ([`upgrade_asked`]): passed with `Connection: Upgrade`.
    pub upgrade: Option<&'a [u8]>,
}

/// The protocols of a request's `Upgrade` that a location allows (`allowed`: lower
/// case names without a version), as the client wrote them, when the request asks
/// for an upgrade: HTTP/1.1 (RFC 9110 §7.8: one in a 1.0 request is ignored),
/// `Upgrade` in its `Connection`. None: no upgrade is passed (the request goes as
/// an ordinary one, its `Upgrade` dropped with the other hop-by-hop headers).
pub fn upgrade_asked(headers: &[httparse::Header<'_>], http11: bool, allowed: &[String]) -> Option<Vec<u8>> {
    let list = |name: &'static str| {
        headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .flat_map(|h| h.value.split(|&b| b == b','))
            .map(<[u8]>::trim_ascii)
            .filter(|t| !t.is_empty())
    };
    if !http11 || allowed.is_empty() || !list("connection").any(|t| t.eq_ignore_ascii_case(b"upgrade")) {
        return None;
    }
    let mut out = Vec::new();
    for protocol in list("upgrade") {
        let name = protocol.split(|&b| b == b'/').next().unwrap_or(b"");
        if allowed.iter().any(|a| a.as_bytes().eq_ignore_ascii_case(name)) {
            if !out.is_empty() {
                out.extend_from_slice(b", ");
            }
            out.extend_from_slice(protocol);
        }
    }
    (!out.is_empty()).then_some(out)
}

/// The head of the request sent upstream: the client's headers but the hop-by-hop
/// ones (and those its `Connection` names) and those set here; `X-Forwarded-For`
/// and `Forwarded` with the client appended to those it sent (and `Via`, when
/// pika names itself there).
pub fn request_head(f: &Forwarding<'_>, headers: &[httparse::Header<'_>]) -> Vec<u8> {
    let named: Vec<String> = headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("connection"))
        .flat_map(|h| h.value.split(|&b| b == b','))
        .map(|t| String::from_utf8_lossy(t.trim_ascii()).to_ascii_lowercase())
        .collect();
    let mut out = Vec::with_capacity(1024);
    out.extend_from_slice(f.method.as_bytes());
    out.push(b' ');
    out.extend_from_slice(f.target);
    out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    out.extend_from_slice(f.host);
    out.extend_from_slice(b"\r\n");
    let (mut xff, mut forwarded, mut via) = (Vec::new(), Vec::new(), Vec::new());
    for h in headers {
        let lower = h.name.to_ascii_lowercase();
        if HOP_BY_HOP.contains(&lower.as_str()) || SET_HERE.contains(&lower.as_str()) || named.contains(&lower) {
            continue;
        }
        let list = match lower.as_str() {
            "x-forwarded-for" => &mut xff,
            "forwarded" => &mut forwarded,
            "via" if f.via.is_some() => &mut via,
            _ => {
                header(&mut out, h.name, h.value);
                continue;
            }
        };
        if !list.is_empty() {
            list.extend_from_slice(b", ");
        }
        list.extend_from_slice(h.value.trim_ascii());
    }
    let client = f.client.to_canonical();
    if !xff.is_empty() {
        xff.extend_from_slice(b", ");
    }
    xff.extend_from_slice(client.to_string().as_bytes());
    header(&mut out, "X-Forwarded-For", &xff);
    header(&mut out, "X-Forwarded-Proto", if f.https { b"https" } else { b"http" });
    if let Some(h) = f.client_host {
        header(&mut out, "X-Forwarded-Host", h);
    }
    // RFC 7239 §4: an IPv6 address is quoted in brackets; a host with odd bytes quoted.
    if !forwarded.is_empty() {
        forwarded.extend_from_slice(b", ");
    }
    match client {
        IpAddr::V4(a) => forwarded.extend_from_slice(format!("for={a}").as_bytes()),
        IpAddr::V6(a) => forwarded.extend_from_slice(format!("for=\"[{a}]\"").as_bytes()),
    }
    if let Some(h) = f.client_host.filter(|h| h.iter().all(|&b| b.is_ascii_graphic() && b != b'"' && b != b'\\')) {
        forwarded.extend_from_slice(b";host=\"");
        forwarded.extend_from_slice(h);
        forwarded.push(b'"');
    }
    forwarded.extend_from_slice(if f.https { b";proto=https" } else { b";proto=http" });
    header(&mut out, "Forwarded", &forwarded);
    if let Some(version) = f.via {
        if !via.is_empty() {
            via.extend_from_slice(b", ");
        }
        via.extend_from_slice(format!("{version} {VIA_NAME}").as_bytes());
        header(&mut out, "Via", &via);
    }
    if let Some(n) = f.content_length {
        header(&mut out, "Content-Length", n.to_string().as_bytes());
    }
    if let Some(protocols) = f.upgrade {
        header(&mut out, "Connection", b"Upgrade");
        header(&mut out, "Upgrade", protocols);
    }
    out.extend_from_slice(b"\r\n");
    out
}

fn header(out: &mut Vec<u8>, name: &str, value: &[u8]) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// The most headers an upstream's answer may have.
const MAX_HEADERS: usize = 100;

/// How the upstream's answer body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (an answer to HEAD, a 204, a 304).
    None,
    Length(u64),
    Chunked,
    /// Until the upstream closes the connection (which is then not kept).
    Close,
}

/// The upstream's answer head, read.
#[derive(Debug, PartialEq, Eq)]
pub struct UpstreamHead {
    /// The head as a script's header block (`Status: …`, the end-to-end headers
    /// but `Date` and `Server`, an empty line).
    pub block: Vec<u8>,
    pub framing: Framing,
    /// The connection may carry another request once this answer is read.
    pub keep: bool,
    /// Bytes of the input the head took.
    pub len: usize,
    /// A 1xx interim answer: skipped, the real one follows.
    pub interim: bool,
    pub status: u16,
    /// A 101's `Upgrade`: the protocol the upstream switched to.
    pub upgrade: Option<Vec<u8>>,
}

/// Why an upstream's answer is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeadError {
    #[error("its answer's head is not HTTP: {0}")]
    Bad(String),
    #[error("its answer's Content-Length is not one number")]
    BadLength,
    #[error("its answer's head is longer than {0} bytes")]
    TooLong(usize),
}

/// Reads the upstream's answer head at the start of `buf` (`Ok(None)`: not all
/// there yet); `head_request`: the request was a HEAD (no body follows).
pub fn parse_head(buf: &[u8], head_request: bool, max: usize) -> Result<Option<UpstreamHead>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut res = httparse::Response::new(&mut headers);
    let len = match res.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > max => return Err(HeadError::TooLong(max)),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(HeadError::Bad(e.to_string())),
    };
    let code = res.code.unwrap_or(0);
    if (100..200).contains(&code) && code != 101 {
        let interim = UpstreamHead {
            block: Vec::new(),
            framing: Framing::None,
            keep: true,
            len,
            interim: true,
            status: code,
            upgrade: None,
        };
        return Ok(Some(interim));
    }
    // After a 101 the connection speaks another protocol: no body, never kept.
    let switched = code == 101;
    let upgrade = switched.then(|| res.headers.iter().find(|h| h.name.eq_ignore_ascii_case("upgrade"))).flatten();
    let upgrade = upgrade.map(|h| h.value.to_vec());
    let mut keep = res.version == Some(1) && !switched;
    let (mut length, mut chunked, mut coded) = (None, false, false);
    let mut block = format!("Status: {code} {}\r\n", res.reason.unwrap_or("")).into_bytes();
    for h in res.headers.iter() {
        let lower = h.name.to_ascii_lowercase();
        match lower.as_str() {
            "connection" => {
                for t in h.value.split(|&b| b == b',') {
                    let t = t.trim_ascii();
                    if t.eq_ignore_ascii_case(b"close") {
                        keep = false;
                    } else if t.eq_ignore_ascii_case(b"keep-alive") && res.version == Some(0) {
                        keep = true;
                    }
                }
            }
            "transfer-encoding" => {
                coded = true;
                let last = h.value.rsplit(|&b| b == b',').next().unwrap_or(b"").trim_ascii();
                chunked = last.eq_ignore_ascii_case(b"chunked");
            }
            "content-length" => {
                let v = std::str::from_utf8(h.value).map_err(|_| HeadError::BadLength)?.trim();
                let n: u64 = v
                    .parse()
                    .ok()
                    .filter(|_| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                    .ok_or(HeadError::BadLength)?;
                if length.is_some_and(|l| l != n) {
                    return Err(HeadError::BadLength);
                }
                length = Some(n);
            }
            // The server's own: said by pika (nginx hides an upstream's too).
            "date" | "server" => {}
            n if HOP_BY_HOP.contains(&n) || n == "status" => {}
            _ => header(&mut block, h.name, h.value),
        }
    }
    let framing = if head_request || code == 204 || code == 304 || switched {
        // No body follows; a HEAD's length (the GET's) is not passed, as a
        // script's HEAD answer says none.
        Framing::None
    } else if coded {
        // RFC 9112 §6.3: a Transfer-Encoding overrides a Content-Length; one that
        // does not end in chunked runs until the close.
        if chunked { Framing::Chunked } else { Framing::Close }
    } else if let Some(n) = length {
        header(&mut block, "Content-Length", n.to_string().as_bytes());
        Framing::Length(n)
    } else {
        Framing::Close
    };
    if framing == Framing::Close {
        keep = false;
    }
    block.extend_from_slice(b"\r\n");
    Ok(Some(UpstreamHead { block, framing, keep, len, interim: false, status: code, upgrade }))
}

/// Undoes the chunked coding of a body as its bytes come (RFC 9112 §7.1):
/// extensions and trailers dropped.
#[derive(Debug, Default)]
pub struct Chunked {
    state: ChunkState,
    /// A size or trailer line not whole yet.
    line: Vec<u8>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    #[default]
    Size,
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    Trailer,
    Done,
}

/// The longest chunk-size or trailer line taken.
const MAX_CHUNK_LINE: usize = 4096;

impl Chunked {
    /// Decodes `input` into `out`; true once the last chunk and the trailers are read.
    pub fn feed(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> Result<bool, HeadError> {
        let bad = |why: &str| HeadError::Bad(format!("bad chunked body: {why}"));
        while !input.is_empty() && self.state != ChunkState::Done {
            match self.state {
                ChunkState::Data(left) => {
                    let n = input.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    out.extend_from_slice(&input[..n]);
                    input = &input[n..];
                    self.state = if left == n as u64 { ChunkState::DataEnd } else { ChunkState::Data(left - n as u64) };
                }
                ChunkState::Size | ChunkState::DataEnd | ChunkState::Trailer => {
                    let Some(nl) = memchr::memchr(b'\n', input) else {
                        self.line.extend_from_slice(input);
                        if self.line.len() > MAX_CHUNK_LINE {
                            return Err(bad("a line too long"));
                        }
                        return Ok(false);
                    };
                    self.line.extend_from_slice(&input[..nl]);
                    input = &input[nl + 1..];
                    let line = std::mem::take(&mut self.line);
                    let line = line.strip_suffix(b"\r").unwrap_or(&line);
                    self.state = match self.state {
                        ChunkState::DataEnd if line.is_empty() => ChunkState::Size,
                        ChunkState::DataEnd => return Err(bad("no line end after a chunk")),
                        ChunkState::Trailer if line.is_empty() => ChunkState::Done,
                        ChunkState::Trailer => ChunkState::Trailer,
                        _ => {
                            let digits = line.split(|&b| b == b';').next().unwrap_or(b"").trim_ascii();
                            let size = std::str::from_utf8(digits)
                                .ok()
                                .filter(|d| !d.is_empty() && d.len() <= 15)
                                .and_then(|d| u64::from_str_radix(d, 16).ok())
                                .ok_or_else(|| bad("a chunk size that is not one"))?;
                            if size == 0 { ChunkState::Trailer } else { ChunkState::Data(size) }
                        }
                    };
                }
                ChunkState::Done => {}
            }
        }
        Ok(self.state == ChunkState::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upstream_is_a_url_or_a_unix_socket() {
        let u = Upstream::parse("http://127.0.0.1:8000").unwrap();
        assert_eq!(
            (u.addr, u.host.as_str(), u.path),
            (UpstreamAddr::Tcp("127.0.0.1:8000".into()), "127.0.0.1:8000", None)
        );
        let u = Upstream::parse("http://app/api/").unwrap();
        assert_eq!((u.to_string().as_str(), u.server().as_str()), ("http://app/api/", "http://app"));
        assert_eq!((u.addr, u.path.as_deref()), (UpstreamAddr::Tcp("app:80".into()), Some("/api/")));
        let u = Upstream::parse("http://[::1]:9000/").unwrap();
        assert_eq!(u.addr, UpstreamAddr::Tcp("[::1]:9000".into()));
        let u = Upstream::parse("unix:/run/app.sock").unwrap();
        assert_eq!((u.addr, u.host.as_str()), (UpstreamAddr::Unix("/run/app.sock".into()), "localhost"));
        for bad in ["https://a", "http://", "http://a:x", "http://u@a", "unix:rel", "http://a/?q", "tcp:a:1"] {
            assert_eq!(Upstream::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_path_in_the_url_replaces_the_prefix_as_nginx_does() {
        let with = Upstream::parse("http://app:8000/api/").unwrap();
        assert_eq!(with.target(b"/api/users?x=1", Some("/api/")), b"/api/users?x=1");
        let moved = Upstream::parse("http://app:8000/v2/").unwrap();
        assert_eq!(moved.target(b"/api/users?x=1", Some("/api/")), b"/v2/users?x=1");
        assert_eq!(moved.target(b"/api/", Some("/api/")), b"/v2/");
        let root = Upstream::parse("http://app:8000/").unwrap();
        assert_eq!(root.target(b"/api/a/b", Some("/api")), b"/a/b");
        let without = Upstream::parse("http://app:8000").unwrap();
        assert_eq!(without.target(b"/api/a%20b?q", Some("/api/")), b"/api/a%20b?q", "as sent");
        assert_eq!(moved.target(b"/x.php", None), b"/v2/x.php", "not a prefix location: the whole path after");
    }

    fn forwarding<'a>(client: IpAddr, host: Option<&'a [u8]>) -> Forwarding<'a> {
        Forwarding {
            method: "POST",
            target: b"/a?b",
            host: b"app:8000",
            client_host: host,
            client,
            https: true,
            content_length: Some(3),
            via: None,
            upgrade: None,
        }
    }

    #[test]
    fn the_request_head_drops_hop_by_hop_headers_and_says_who_asked() {
        let h = |name, value: &'static [u8]| httparse::Header { name, value };
        let headers = [
            h("Host", b"example.com"),
            h("Connection", b"keep-alive, X-Secret"),
            h("X-Secret", b"1"),
            h("Keep-Alive", b"timeout=5"),
            h("Transfer-Encoding", b"chunked"),
            h("Content-Length", b"99"),
            h("X-Forwarded-For", b"10.0.0.1"),
            h("X-Forwarded-Proto", b"gopher"),
            h("Accept", b"*/*"),
            h("Cookie", b"a=1"),
        ];
        let head = request_head(&forwarding("192.0.2.7".parse().unwrap(), Some(b"example.com")), &headers);
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "POST /a?b HTTP/1.1\r\nHost: app:8000\r\nAccept: */*\r\nCookie: a=1\r\n\
             X-Forwarded-For: 10.0.0.1, 192.0.2.7\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: example.com\r\n\
             Forwarded: for=192.0.2.7;host=\"example.com\";proto=https\r\nContent-Length: 3\r\n\r\n"
        );
        let via = Forwarding { via: Some("1.0"), ..forwarding("192.0.2.7".parse().unwrap(), None) };
        let head = String::from_utf8(request_head(&via, &[h("Via", b"1.1 edge"), h("Accept", b"*/*")])).unwrap();
        assert!(head.contains("\r\nAccept: */*\r\n") && head.contains("\r\nVia: 1.1 edge, 1.0 pika\r\n"), "{head}");
        let head =
            String::from_utf8(request_head(&forwarding("192.0.2.7".parse().unwrap(), None), &[h("Via", b"1.1 edge")]));
        assert!(head.unwrap().contains("\r\nVia: 1.1 edge\r\n"), "passed as it came without proxy_via");
        let head = request_head(&forwarding("2001:db8::1".parse().unwrap(), None), &[]);
        let head = String::from_utf8(head).unwrap();
        assert!(head.contains("\r\nForwarded: for=\"[2001:db8::1]\";proto=https\r\n"), "{head}");
        assert!(head.contains("\r\nX-Forwarded-For: 2001:db8::1\r\n"), "{head}");
    }

    #[test]
    fn an_upgrade_is_passed_only_when_asked_and_allowed() {
        let h = |name, value: &'static [u8]| httparse::Header { name, value };
        let ws = vec!["websocket".to_string()];
        let asked = [h("Connection", b"keep-alive, Upgrade"), h("Upgrade", b"WebSocket")];
        assert_eq!(upgrade_asked(&asked, true, &ws).as_deref(), Some(&b"WebSocket"[..]));
        assert_eq!(upgrade_asked(&asked, false, &ws), None, "HTTP/1.0: ignored");
        assert_eq!(upgrade_asked(&asked, true, &[]), None, "proxy_upgrade = []");
        assert_eq!(upgrade_asked(&asked[1..], true, &ws), None, "Upgrade not named in Connection");
        let two = [h("Connection", b"upgrade"), h("Upgrade", b"h2c, websocket/13")];
        assert_eq!(upgrade_asked(&two, true, &ws).as_deref(), Some(&b"websocket/13"[..]), "the allowed ones");
        let other = [h("Connection", b"upgrade"), h("Upgrade", b"h2c")];
        assert_eq!(upgrade_asked(&other, true, &ws), None);

        // Passed with both headers, the client's own dropped.
        let f = Forwarding { upgrade: Some(b"websocket"), ..forwarding("192.0.2.7".parse().unwrap(), None) };
        let head = String::from_utf8(request_head(&f, &asked)).unwrap();
        assert!(head.ends_with("\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"), "{head}");
        assert_eq!(head.matches("Upgrade").count(), 2, "{head}");
    }

    #[test]
    fn a_101_is_an_answer_with_no_body_and_its_protocol() {
        let raw = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                    Sec-WebSocket-Accept: abc=\r\n\r\n\x81\x02hi";
        let h = parse_head(raw, false, 65536).unwrap().unwrap();
        assert_eq!((h.status, h.interim, h.keep, h.framing), (101, false, false, Framing::None));
        assert_eq!(h.upgrade.as_deref(), Some(&b"websocket"[..]));
        assert_eq!(h.block, b"Status: 101 Switching Protocols\r\nSec-WebSocket-Accept: abc=\r\n\r\n");
        assert_eq!(&raw[h.len..], b"\x81\x02hi", "the new protocol's first bytes are left");
    }

    #[test]
    fn the_answer_head_becomes_a_header_block_with_its_framing() {
        let got = |raw: &[u8], head_req| parse_head(raw, head_req, 65536);
        let raw = b"HTTP/1.1 200 OK\r\nServer: gunicorn\r\nDate: x\r\nContent-Length: 5\r\nSet-Cookie: a\r\n\r\nhello";
        let h = got(raw, false).unwrap().unwrap();
        assert_eq!(h.block, b"Status: 200 OK\r\nSet-Cookie: a\r\nContent-Length: 5\r\n\r\n");
        assert_eq!((h.framing, h.keep, h.len, h.interim), (Framing::Length(5), true, raw.len() - 5, false));
        let h =
            got(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", false).unwrap().unwrap();
        assert_eq!((h.framing, h.keep), (Framing::Chunked, true));
        assert!(!String::from_utf8_lossy(&h.block).contains("Length"), "the coding wins");
        let h = got(b"HTTP/1.0 200 OK\r\nContent-Type: a/b\r\n\r\n", false).unwrap().unwrap();
        assert_eq!((h.framing, h.keep), (Framing::Close, false));
        let h = got(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", false).unwrap().unwrap();
        assert_eq!((h.framing, h.keep), (Framing::Length(0), false));
        let h = got(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n", true).unwrap().unwrap();
        assert_eq!((h.framing, &h.block[..]), (Framing::None, &b"Status: 200 OK\r\n\r\n"[..]));
        assert_eq!(got(b"HTTP/1.1 304 Not Modified\r\n\r\n", false).unwrap().unwrap().framing, Framing::None);
        assert!(got(b"HTTP/1.1 100 Continue\r\n\r\n", false).unwrap().unwrap().interim);
        assert_eq!(got(b"HTTP/1.1 200 OK\r\nContent-", false), Ok(None));
        assert_eq!(got(b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\n", false), Err(HeadError::BadLength));
        assert!(matches!(got(b"SSH-2.0\r\n\r\n", false), Err(HeadError::Bad(_))));
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\nA: b", false, 4), Err(HeadError::TooLong(4)));
    }

    #[test]
    fn chunks_are_undone_whatever_the_pieces() {
        let body = b"5;ext=1\r\nhello\r\n0007\r\n, world\r\n0\r\nTrailer: x\r\n\r\n";
        for step in [1, 2, 3, 7, body.len()] {
            let (mut c, mut out, mut done) = (Chunked::default(), Vec::new(), false);
            for piece in body.chunks(step) {
                assert!(!done);
                done = c.feed(piece, &mut out).unwrap();
            }
            assert!(done, "{step}");
            assert_eq!(out, b"hello, world");
        }
        let mut c = Chunked::default();
        assert!(c.feed(b"zz\r\n", &mut Vec::new()).is_err());
        let mut c = Chunked::default();
        assert!(c.feed(b"1\r\nab\r\n", &mut Vec::new()).is_err(), "a chunk longer than its size");
    }
}
