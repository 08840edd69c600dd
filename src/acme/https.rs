//! The ACME child's HTTPS client: one request per connection (`Connection: close`),
//! blocking, each within a deadline (connect, handshake, request and the whole
//! answer: a server that sends a byte now and then does not hold it longer); rustls
//! over aws-lc-rs, trusting the system's roots or `ca_roots`. ACME needs a handful
//! of requests a day, so nothing here is pooled.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

/// How long a connection may take to open, and each read or write to progress
/// (within the request's deadline).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// When a request must be done, and the setting that said so (the error's words).
#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    pub at: Instant,
    pub why: &'static str,
}

impl Deadline {
    /// The time left, `None` once it has passed.
    fn left(&self) -> Option<Duration> {
        self.at.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())
    }
}

/// A socket whose every read and write waits no longer than its deadline allows
/// (nor [`IO_TIMEOUT`]); past it, each fails with `TimedOut`.
struct Timed {
    tcp: TcpStream,
    deadline: Deadline,
}

impl Timed {
    fn left(&self) -> std::io::Result<Duration> {
        let left = self.deadline.left().ok_or_else(|| std::io::Error::from(std::io::ErrorKind::TimedOut))?;
        Ok(left.min(IO_TIMEOUT))
    }
}

impl Read for Timed {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.tcp.set_read_timeout(Some(self.left()?))?;
        self.tcp.read(buf)
    }
}

impl Write for Timed {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.tcp.set_write_timeout(Some(self.left()?))?;
        self.tcp.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.tcp.flush()
    }
}
/// No ACME answer comes near this (a certificate chain is a few KiB).
const MAX_RESPONSE: usize = 1 << 20;

/// A response, read whole.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of a header (names compared without case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// Every value of a header (`Link` comes several times).
    pub fn headers<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> {
        self.headers.iter().filter(move |(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

pub struct Https {
    tls: Arc<ClientConfig>,
}

/// Reads the roots to trust from a PEM file.
pub fn roots(file: &Path) -> Result<RootCertStore, String> {
    let pem = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut roots = RootCertStore::empty();
    for der in CertificateDer::pem_slice_iter(&pem) {
        let der = der.map_err(|e| format!("{}: {e}", file.display()))?;
        roots.add(der).map_err(|e| format!("{}: {e}", file.display()))?;
    }
    if roots.is_empty() {
        return Err(format!("{}: no certificate found", file.display()));
    }
    Ok(roots)
}

impl Https {
    pub fn new(roots: RootCertStore) -> Result<Https, String> {
        let tls = ClientConfig::builder_with_provider(Arc::new(crate::tls::provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Https { tls: Arc::new(tls) })
    }

    /// One request, done by `deadline`. `body`: `(content type, bytes)` for a POST.
    pub fn request(
        &self,
        method: &str,
        url: &str,
        body: Option<(&str, &[u8])>,
        deadline: Deadline,
    ) -> Result<Response, String> {
        let (host, port, path) = split_url(url).ok_or_else(|| format!("not an https URL: {url}"))?;
        let late = |e: &std::io::Error| match deadline.left() {
            None => format!("{host}:{port}: no whole answer within {}", deadline.why),
            Some(_) => format!("{host}:{port}: {e}"),
        };
        let addrs = (host, port).to_socket_addrs().map_err(|e| format!("{host}: {e}"))?;
        let mut last = format!("{host}: no address");
        let mut tcp = None;
        for a in addrs {
            let Some(left) = deadline.left() else { break };
            match TcpStream::connect_timeout(&a, left.min(CONNECT_TIMEOUT)) {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last = format!("{host}:{port}: {e}"),
            }
        }
        let tcp = tcp
            .ok_or_else(|| if deadline.left().is_none() { late(&std::io::ErrorKind::TimedOut.into()) } else { last })?;
        let name = ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']').to_string())
            .map_err(|e| format!("{host}: {e}"))?;
        let conn = ClientConnection::new(self.tls.clone(), name).map_err(|e| e.to_string())?;
        let mut stream = StreamOwned::new(conn, Timed { tcp, deadline });
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}{}\r\nUser-Agent: pika/{} (ACME)\r\nAccept: */*\r\nConnection: close\r\n",
            if port == 443 { String::new() } else { format!(":{port}") },
            env!("CARGO_PKG_VERSION")
        );
        if let Some((kind, bytes)) = body {
            head.push_str(&format!("Content-Type: {kind}\r\nContent-Length: {}\r\n", bytes.len()));
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        out.extend_from_slice(body.map_or(&[][..], |(_, b)| b));
        stream.write_all(&out).and_then(|()| stream.flush()).map_err(|e| late(&e))?;
        let mut raw = Vec::new();
        let mut buf = [0u8; 16 * 1024];
        loop {
            match stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => raw.extend_from_slice(&buf[..n]),
                // A server that closes without close_notify after a whole response.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(late(&e)),
            }
            if raw.len() > MAX_RESPONSE {
                return Err(format!("{host}:{port}: the response is larger than {MAX_RESPONSE} bytes"));
            }
        }
        parse_response(&raw).ok_or_else(|| format!("{host}:{port}: a response that cannot be read"))
    }
}

/// `https://host[:port]/path` → (host, port, path and query).
fn split_url(url: &str) -> Option<(&str, u16, &str)> {
    let rest = url.strip_prefix("https://")?;
    let (authority, path) = rest.find('/').map_or((rest, "/"), |i| (&rest[..i], &rest[i..]));
    let (host, port) = match authority.rfind(':') {
        Some(i) if !authority[i..].contains(']') => (&authority[..i], authority[i + 1..].parse().ok()?),
        _ => (authority, 443),
    };
    (!host.is_empty()).then_some((host, port, path))
}

/// Whether a string is an https URL this client can ask.
pub fn valid_url(url: &str) -> bool {
    split_url(url).is_some()
}

fn parse_response(raw: &[u8]) -> Option<Response> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut r = httparse::Response::new(&mut headers);
    let httparse::Status::Complete(at) = r.parse(raw).ok()? else { return None };
    let status = r.code?;
    let headers: Vec<(String, String)> =
        r.headers.iter().map(|h| (h.name.to_string(), String::from_utf8_lossy(h.value).trim().to_string())).collect();
    let mut resp = Response { status, headers, body: Vec::new() };
    let rest = &raw[at..];
    resp.body = if resp.header("Transfer-Encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
        dechunk(rest)?
    } else if let Some(len) = resp.header("Content-Length") {
        rest.get(..len.parse::<usize>().ok()?)?.to_vec()
    } else {
        rest.to_vec()
    };
    Some(resp)
}

/// A chunked body (RFC 9112 §7.1), whole.
fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let eol = rest.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&rest[..eol]).ok()?.split(';').next()?.trim();
        let size = usize::from_str_radix(size, 16).ok()?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

/// A response made in a test.
#[cfg(test)]
pub fn tests_response(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Response {
    Response {
        status,
        headers: headers.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect(),
        body: body.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(split_url("https://acme.example/dir"), Some(("acme.example", 443, "/dir")));
        assert_eq!(split_url("https://127.0.0.1:14000/dir?x"), Some(("127.0.0.1", 14000, "/dir?x")));
        assert_eq!(split_url("https://[::1]:14000/d"), Some(("[::1]", 14000, "/d")));
        assert_eq!(split_url("https://[::1]/d"), Some(("[::1]", 443, "/d")));
        assert_eq!(split_url("https://h"), Some(("h", 443, "/")));
        assert_eq!(split_url("http://h/d"), None);
        assert_eq!(split_url("https:///d"), None);
        assert_eq!(split_url("https://h:x/d"), None);
    }

    #[test]
    fn responses_by_length_chunks_or_close() {
        let r = parse_response(b"HTTP/1.1 201 Created\r\nLocation: /o/1\r\nContent-Length: 2\r\n\r\n{}xx").unwrap();
        assert_eq!((r.status, r.header("location"), &r.body[..]), (201, Some("/o/1"), &b"{}"[..]));
        let r = parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.body, b"abcde");
        let r = parse_response(b"HTTP/1.1 200 OK\r\nLink: <a>;rel=\"up\"\r\nLink: <b>;rel=\"index\"\r\n\r\nto the end")
            .unwrap();
        assert_eq!(r.body, b"to the end");
        assert_eq!(r.headers("link").count(), 2);
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab").is_none());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab").is_none());
    }
}
