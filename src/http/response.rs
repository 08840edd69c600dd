//! What a handler answers, and how it becomes bytes on the wire.
//!
//! A handler fills a [`Reply`]: a status, header lines written straight into a reused
//! buffer, and a [`Body`]. [`write_head`] adds the headers every response carries
//! (Date, Server, Content-Length, Connection). [`serve::transport::send`](crate::serve::transport::send)
//! hands head and body to a plain stream in one `writev`, or, for a large file, the
//! head with `MSG_MORE` and the body with `sendfile`: a file's bytes are never read by
//! our code (a file truncated under a mapping fails one response, not the worker).
//! A TLS session sends through its own writer (`serve::tls`), which reads file
//! bytes with `pread` or a kernel copy, never by touching a mapping.

use std::any::Any;
use std::fs::File;
use std::rc::Rc;

use memmap2::Mmap;

use super::range::ByteRange;
use crate::base::text;

/// A response body.
pub enum Body {
    /// No body at all (and no Content-Length for 304).
    None,
    /// Bytes we made (error pages, listings, the status page).
    Owned(Vec<u8>),
    /// A slice of a mapped file (the whole file, or one range).
    Mapped { map: Rc<Mmap>, start: usize, end: usize },
    /// A slice of an open file, sent with `sendfile` (files of at least
    /// [`SENDFILE_MIN`](crate::kinds::files::file_cache::SENDFILE_MIN) bytes).
    File { file: Rc<File>, start: u64, end: u64 },
    /// `multipart/byteranges`: each part's head, then its range of the map; `tail` closes.
    Multipart { map: Rc<Mmap>, parts: Vec<(Vec<u8>, ByteRange)>, tail: Vec<u8> },
    /// Bytes read from a source until its end, as they come.
    Stream(Box<Streamed>),
    /// A range of a temporary file pika wrote (an answer kept for its client,
    /// `gateway::spool`), sent as a file is; `hold` keeps the file's bytes counted
    /// as long as the body lives.
    Spooled { file: Rc<File>, start: u64, end: u64, hold: Rc<dyn Any> },
}

/// A body read from a source as it is sent (a program's output). Of unknown length
/// (`len` None) it goes out chunked to an HTTP/1.1 client, and until the connection
/// closes to an HTTP/1.0 one; of a known length, as it is, after its Content-Length.
pub struct Streamed {
    pub from: Box<dyn std::io::Read>,
    pub len: Option<u64>,
    /// Bytes of it sent so far (its framing left out).
    pub sent: u64,
    /// When the source must have ended it (`clock::now_ms`; a script's
    /// `script_timeout`): an answer still waiting for room in its socket then is
    /// given up, as one past `send_timeout` is.
    pub until_ms: Option<u64>,
}

impl Streamed {
    /// A body read from `from` as it is sent; `len`: its length, when known.
    pub fn body(from: Box<dyn std::io::Read>, len: Option<u64>) -> Body {
        Body::Stream(Box::new(Streamed { from, len, sent: 0, until_ms: None }))
    }
}

/// The bytes `at..end` of a spooled file, read with `pread`; `hold` is the file's
/// count (see [`Body::Spooled`]).
pub struct SpooledReader {
    file: Rc<File>,
    at: u64,
    end: u64,
    _hold: Rc<dyn Any>,
}

impl SpooledReader {
    pub fn new(file: Rc<File>, at: u64, end: u64, hold: Rc<dyn Any>) -> SpooledReader {
        SpooledReader { file, at, end, _hold: hold }
    }
}

impl std::io::Read for SpooledReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::unix::fs::FileExt;
        let want = buf.len().min(usize::try_from(self.end - self.at).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.at)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        self.at += n as u64;
        Ok(n)
    }
}

impl Body {
    /// The body's length, when it is known before it is sent.
    pub fn length(&self) -> Option<u64> {
        match self {
            Body::Stream(s) => s.len,
            _ => Some(self.len()),
        }
    }

    /// The bytes of the body sent (all of a body known whole, as much of a stream as
    /// went out).
    pub fn sent(&self) -> u64 {
        match self {
            Body::Stream(s) => s.sent,
            _ => self.len(),
        }
    }

    /// The body's length (0 for a stream of unknown length).
    pub fn len(&self) -> u64 {
        match self {
            Body::Stream(s) => s.len.unwrap_or(0),
            Body::None => 0,
            Body::Owned(v) => v.len() as u64,
            Body::Mapped { start, end, .. } => (end - start) as u64,
            Body::File { start, end, .. } | Body::Spooled { start, end, .. } => end - start,
            Body::Multipart { parts, tail, .. } => {
                parts.iter().map(|(h, r)| h.len() as u64 + r.len()).sum::<u64>() + tail.len() as u64
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A handler's answer.
pub struct Reply<'h> {
    pub status: u16,
    /// Extra header lines, each `Name: value\r\n`.
    pub headers: &'h mut Vec<u8>,
    pub body: Body,
    /// Close the connection after this response.
    pub close: bool,
    /// A file is sent: from the worker's file cache (true) or opened for this
    /// request (false); the metrics count which.
    pub cached: Option<bool>,
    /// Not an answer: the request is to be served again at another path of the
    /// same vhost (an internal redirect).
    pub internal: Option<Internal>,
    /// `Date` and `Server` as a script gave them, sent instead of the server's.
    pub date: Option<String>,
    pub server: Option<String>,
    /// The upstream a proxy location asked, for the access log.
    pub upstream: Option<Upstreamed>,
    /// With a 101: the connection's other end, which the client's bytes are
    /// tunnelled to once the head is sent.
    pub switched: Option<Box<Switched>>,
}

/// The other end of a connection that switches protocols (a proxy's upstream after
/// its `101 Switching Protocols`): from the answer's head on, the worker's loop
/// relays bytes between it and the client, both ways, as they come.
#[derive(Debug)]
pub struct Switched {
    /// The upstream's socket (non-blocking).
    pub far: std::os::fd::OwnedFd,
    /// What it sent after its 101's head: the client's first bytes of the new protocol.
    pub early: Vec<u8>,
    /// How long the tunnel may carry nothing either way.
    pub idle: std::time::Duration,
    /// What keeps the upstream counted in use for its pool (`least_conn`) while
    /// the tunnel lives: dropped with it.
    pub busy: Option<Box<dyn std::any::Any>>,
}

/// What the access log says of the upstream a request was passed to (nginx's
/// `$upstream_addr`, `$upstream_status`, `$upstream_header_time`,
/// `$upstream_response_time`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstreamed {
    pub addr: Rc<str>,
    /// Its answer's status; None when no head came.
    pub status: Option<u16>,
    /// From the first try to its answer's head.
    pub header_time: Option<std::time::Duration>,
    /// From the first try to the end of the answer as the handler read it (the
    /// head and what followed at once, for an answer streamed).
    pub time: std::time::Duration,
}

/// An internal redirect: the request served again at `target` (a path, and a
/// query after `?`), the client none the wiser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Internal {
    pub target: Vec<u8>,
    /// As a GET without its body (a script's local `Location`, RFC 3875 §6.2.2), or
    /// as it came (`try_files`).
    pub as_get: bool,
}

impl<'h> Reply<'h> {
    pub fn new(headers: &'h mut Vec<u8>) -> Reply<'h> {
        headers.clear();
        Reply {
            status: 200,
            headers,
            body: Body::None,
            close: false,
            cached: None,
            internal: None,
            date: None,
            server: None,
            upstream: None,
            switched: None,
        }
    }

    /// Empties the reply for another answer (after an internal redirect); `close`
    /// stays, and so does a file opened for the request so far (a miss of the
    /// file cache, counted once the request is answered).
    pub fn start_over(&mut self) {
        self.status = 200;
        self.headers.clear();
        self.body = Body::None;
        self.cached = self.cached.filter(|hit| !hit);
        self.internal = None;
        self.date = None;
        self.server = None;
    }

    /// Adds a header line. Values must not come unescaped from the client.
    pub fn header(&mut self, name: &str, value: impl AsRef<str>) -> &mut Self {
        let start = self.headers.len();
        // Plain copies: `write!` costs several times more on the per-request path.
        for part in [name, ": ", value.as_ref(), "\r\n"] {
            self.headers.extend_from_slice(part.as_bytes());
        }
        debug_assert!(!self.headers[start..self.headers.len() - 2].contains(&b'\n'), "header injection");
        self
    }

    /// Adds a header line whose value is bytes as a script sent them (obs-text
    /// allowed; no CR or LF, which the script's head reader refuses).
    pub fn header_bytes(&mut self, name: &str, value: &[u8]) -> &mut Self {
        debug_assert!(!value.contains(&b'\n') && !value.contains(&b'\r'), "header injection");
        self.headers.extend_from_slice(name.as_bytes());
        self.headers.extend_from_slice(b": ");
        self.headers.extend_from_slice(value);
        self.headers.extend_from_slice(b"\r\n");
        self
    }

    /// Makes a strong `ETag` weak (`W/"…"`): the body sent is not the bytes it named
    /// (compressed on the way), though it means the same.
    pub fn weaken_etag(&mut self) {
        let mut out = Vec::with_capacity(self.headers.len() + 2);
        for line in self.headers.split_inclusive(|&b| b == b'\n') {
            let colon = line.iter().position(|&b| b == b':').unwrap_or(0);
            let value = line[colon..].strip_prefix(b":").unwrap_or(b"").trim_ascii_start();
            if line[..colon].eq_ignore_ascii_case(b"etag") && value.starts_with(b"\"") {
                out.extend_from_slice(b"ETag: W/");
                out.extend_from_slice(value);
            } else {
                out.extend_from_slice(line);
            }
        }
        *self.headers = out;
    }

    /// Replaces the `Content-Type` line's value, keeping every other header line.
    pub fn set_content_type(&mut self, value: &str) -> &mut Self {
        self.remove_headers(&["content-type"]);
        self.header("Content-Type", value)
    }

    /// Drops every header line with one of `names` (lowercase), keeping the others
    /// in their order.
    pub fn remove_headers(&mut self, names: &[&str]) -> &mut Self {
        let named = |line: &[u8]| {
            let colon = line.iter().position(|&b| b == b':').unwrap_or(line.len());
            names.iter().any(|n| line[..colon].eq_ignore_ascii_case(n.as_bytes()))
        };
        let kept: Vec<u8> =
            self.headers.split_inclusive(|&b| b == b'\n').filter(|l| !named(l)).flatten().copied().collect();
        *self.headers = kept;
        self
    }

    /// Turns this reply into a short HTML error page for `status`.
    pub fn error(&mut self, status: u16, detail: &str) -> &mut Self {
        self.status = status;
        self.headers.clear();
        self.header("Content-Type", "text/html; charset=utf-8");
        if status == 405 || status == 501 {
            self.header("Allow", ALLOW);
        }
        self.body = Body::Owned(error_page(status, detail));
        self
    }
}

/// The methods a static-file resource allows.
pub const ALLOW: &str = "GET, HEAD, OPTIONS";

/// A short, complete HTML page for an error status.
pub fn error_page(status: u16, detail: &str) -> Vec<u8> {
    let reason = reason(status);
    format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{status} {reason}</title></head>\n<body><h1>{status} {reason}</h1>\n<p>{}</p>\n</body></html>\n",
        crate::base::text::html_escape(detail)
    )
    .into_bytes()
}

/// The reason phrase for a status code.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        301 => "Moved Permanently",
        302 => "Found",
        303 => "See Other",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        416 => "Range Not Satisfiable",
        417 => "Expectation Failed",
        421 => "Misdirected Request",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

/// The line that opens a chunk of `len` bytes (`len` in hex, then CRLF), in `out`.
pub fn chunk_line(len: usize, out: &mut [u8; 18]) -> &[u8] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digits = (usize::BITS - len.leading_zeros()).div_ceil(4).max(1) as usize;
    for i in 0..digits {
        out[digits - 1 - i] = HEX[(len >> (4 * i)) & 0xf];
    }
    out[digits] = b'\r';
    out[digits + 1] = b'\n';
    &out[..digits + 2]
}

/// The last chunk and the end of a chunked body (no trailers).
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// Statuses that never carry a body (RFC 9110 §6.4.1).
pub fn bodiless(status: u16) -> bool {
    status == 204 || status == 304 || (100..200).contains(&status)
}

/// Writes the status line and the headers every response carries into `head`.
pub fn write_head(
    head: &mut Vec<u8>,
    date: &str,
    server: &str,
    reply: &Reply<'_>,
    body: &Body,
    http11: bool,
    keep_alive: bool,
) {
    head.clear();
    head.extend_from_slice(b"HTTP/1.1 ");
    text::push_int(head, reply.status);
    head.push(b' ');
    head.extend_from_slice(reason(reply.status).as_bytes());
    head.extend_from_slice(b"\r\nDate: ");
    head.extend_from_slice(date.as_bytes());
    head.extend_from_slice(b"\r\nServer: ");
    head.extend_from_slice(server.as_bytes());
    head.extend_from_slice(b"\r\n");
    head.extend_from_slice(reply.headers);
    match body.length() {
        _ if bodiless(reply.status) => {}
        Some(len) => {
            head.extend_from_slice(b"Content-Length: ");
            text::push_int(head, len);
            head.extend_from_slice(b"\r\n");
        }
        None if http11 => head.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
        // HTTP/1.0: the body ends with the connection.
        None => {}
    }
    if !keep_alive {
        head.extend_from_slice(b"Connection: close\r\n");
    } else if !http11 {
        head.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    head.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_pages_escape_details() {
        let page = String::from_utf8(error_page(404, "<script>x</script>")).unwrap();
        assert!(page.contains("404 Not Found"));
        assert!(page.contains("&lt;script&gt;"));
        assert!(!page.contains("<script>"));
    }

    #[test]
    fn reply_headers() {
        let mut buf = Vec::new();
        let mut r = Reply::new(&mut buf);
        r.header("X-A", "1").header("X-B", "two");
        r.error(405, "no");
        assert_eq!(r.status, 405);
        assert_eq!(&r.headers[..], &b"Content-Type: text/html; charset=utf-8\r\nAllow: GET, HEAD, OPTIONS\r\n"[..]);
        assert!(bodiless(304) && bodiless(204) && !bodiless(200));
    }

    #[test]
    fn chunk_lines_are_hex_sizes() {
        let mut out = [0u8; 18];
        assert_eq!(chunk_line(0, &mut out), b"0\r\n");
        assert_eq!(chunk_line(10, &mut out), b"a\r\n");
        assert_eq!(chunk_line(16 * 1024, &mut out), b"4000\r\n");
        assert_eq!(chunk_line(usize::MAX, &mut out), b"ffffffffffffffff\r\n");
    }

    #[test]
    fn a_body_of_unknown_length_is_chunked_or_ends_with_the_connection() {
        let (mut extra, mut head) = (Vec::new(), Vec::new());
        let r = Reply::new(&mut extra);
        let body = Streamed::body(Box::new(std::io::empty()), None);
        write_head(&mut head, "d", "pika", &r, &body, true, true);
        let text = String::from_utf8_lossy(&head);
        assert!(text.contains("Transfer-Encoding: chunked\r\n") && !text.contains("Content-Length"), "{text}");
        write_head(&mut head, "d", "pika", &r, &body, false, false);
        let text = String::from_utf8_lossy(&head);
        assert!(!text.contains("Transfer-Encoding") && !text.contains("Content-Length"), "{text}");
        assert!(text.contains("Connection: close"), "{text}");
        let known = Streamed::body(Box::new(std::io::empty()), Some(7));
        write_head(&mut head, "d", "pika", &r, &known, true, true);
        assert!(String::from_utf8_lossy(&head).contains("Content-Length: 7\r\n"));
    }

    #[test]
    fn heads_carry_length_and_connection() {
        let (mut extra, mut head) = (Vec::new(), Vec::new());
        let mut r = Reply::new(&mut extra);
        r.header("X-A", "1");
        let body = Body::Owned(b"hello".to_vec());
        write_head(&mut head, "Thu, 01 Jan 1970 00:00:00 GMT", "pika", &r, &body, false, true);
        let want = "HTTP/1.1 200 OK\r\nDate: Thu, 01 Jan 1970 00:00:00 GMT\r\nServer: pika\r\nX-A: 1\r\n\
                    Content-Length: 5\r\nConnection: keep-alive\r\n\r\n";
        assert_eq!(String::from_utf8_lossy(&head), want);
        r.status = 304;
        write_head(&mut head, "d", "pika", &r, &Body::None, true, false);
        assert_eq!(
            String::from_utf8_lossy(&head),
            "HTTP/1.1 304 Not Modified\r\nDate: d\r\nServer: pika\r\nX-A: 1\r\nConnection: close\r\n\r\n"
        );
    }
}
