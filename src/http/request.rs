//! Reading a request head: limits, `httparse`, and the checks httparse leaves to us
//! (Host, framing, versions, methods).
//!
//! Every way a head can be wrong is an [`HttpError`], and the status each one earns is
//! decided in exactly one place, [`HttpError::status`].
//!
//! It stays one file past 500 lines because the head's checks are one reading of
//! RFC 9112 (limits, target, fields, Host, framing) that a reviewer reads together.

use std::ops::Range;

use std::mem::MaybeUninit;

/// Most header fields a request may carry, whatever the config says: the parser's
/// scratch array lives on the stack, uninitialised, at no cost per request.
pub const MAX_HEADERS: usize = 1000;

/// A request the server will not serve, and why. Every one of them closes the
/// connection: after a framing or syntax error nothing that follows can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    #[error("{0}")]
    BadRequest(&'static str),
    #[error("request timed out")]
    Timeout,
    #[error("request body too large")]
    BodyTooLarge,
    #[error("request-target too long")]
    UriTooLong,
    #[error("request header fields too large")]
    HeadersTooLarge,
    #[error("method not implemented")]
    NotImplemented,
    #[error("transfer-coding not implemented")]
    UnknownCoding,
    #[error("HTTP version not supported")]
    Version,
    #[error("expectation failed")]
    Expectation,
    /// The server could not keep what the request sent (a body's temporary file).
    #[error("the request could not be kept")]
    Internal,
    /// The server has no room for what the request sends now (the bodies in
    /// temporary files are at their cap): another time may do.
    #[error("no room for the request body now")]
    Busy,
}

impl HttpError {
    /// The one mapping from a parse or framing error to a status code.
    pub fn status(self) -> u16 {
        match self {
            HttpError::BadRequest(_) => 400,
            HttpError::Timeout => 408,
            HttpError::BodyTooLarge => 413,
            HttpError::UriTooLong => 414,
            HttpError::Expectation => 417,
            HttpError::HeadersTooLarge => 431,
            HttpError::NotImplemented | HttpError::UnknownCoding => 501,
            HttpError::Version => 505,
            HttpError::Internal => 500,
            HttpError::Busy => 503,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Options,
    /// Known to HTTP but not served by a static-file origin: 405.
    OtherKnown,
}

impl Method {
    fn parse(s: &str) -> Option<Method> {
        // Methods are case-sensitive (RFC 9110 §9.1): `get` is an unknown method.
        Some(match s {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "OPTIONS" => Method::Options,
            "POST" | "PUT" | "DELETE" | "PATCH" | "TRACE" | "CONNECT" | "PROPFIND" | "PROPPATCH" | "MKCOL" | "COPY"
            | "MOVE" | "LOCK" | "UNLOCK" => Method::OtherKnown,
            _ => return None,
        })
    }
}

/// How the request body is framed (RFC 9112 §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    None,
    Length(u64),
    Chunked,
}

/// A parsed, validated request head. Borrows the connection's buffer.
pub struct Request<'b> {
    pub method: Method,
    pub method_str: &'b str,
    /// The request-target as sent (origin-form or `*`; absolute-form is reduced to its path).
    pub target: &'b [u8],
    /// HTTP/1.1 (true) or HTTP/1.0.
    pub http11: bool,
    /// The host the client asked for: from an absolute-form target, else the Host header.
    pub host: Option<&'b [u8]>,
    pub keep_alive: bool,
    pub framing: Framing,
    pub expect_continue: bool,
    pub headers: &'b [httparse::Header<'b>],
    /// The request line as sent, for logs and the scoreboard.
    pub line: &'b [u8],
    /// Length of the head, including the blank line.
    pub head_len: usize,
}

impl<'b> Request<'b> {
    /// The first value of a header, by case-insensitive name.
    pub fn header(&self, name: &str) -> Option<&'b [u8]> {
        self.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value)
    }

    /// A list-valued header: repeated field lines count as one line joined by
    /// commas (RFC 9110 §5.3). Borrowed unless the field really was repeated.
    pub fn header_list(&self, name: &str) -> Option<std::borrow::Cow<'b, [u8]>> {
        let mut lines = self.headers.iter().filter(|h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value);
        let first = lines.next()?;
        let mut joined: Option<Vec<u8>> = None;
        for more in lines {
            let j = joined.get_or_insert_with(|| first.to_vec());
            j.extend_from_slice(b", ");
            j.extend_from_slice(more);
        }
        Some(joined.map_or(std::borrow::Cow::Borrowed(first), std::borrow::Cow::Owned))
    }

    pub fn protocol(&self) -> &'static str {
        if self.http11 { "HTTP/1.1" } else { "HTTP/1.0" }
    }
}

/// Limits applied while a head is read and parsed.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_request_line: usize,
    pub max_header_size: usize,
    /// Longest header field line (name, colon and value): 431 above it.
    pub max_header_line: usize,
    pub max_headers: usize,
}

/// Where the end of the head is in `buf`, if it has arrived. `from` is how far an
/// earlier call already looked, so a head trickling in is scanned once, not once per
/// byte received.
pub fn find_head_end(buf: &[u8], from: usize) -> Option<usize> {
    // Leading empty lines before the request line are allowed (RFC 9112 §2.2): the
    // head starts at the first byte that is neither CR nor LF.
    let content = buf.iter().position(|&b| b != b'\r' && b != b'\n')?;
    let look_from = from.saturating_sub(3).max(content);
    for nl in memchr::memchr_iter(b'\n', &buf[look_from..]).map(|off| look_from + off) {
        // The head ends at an empty line ("\n" or "\r\n" right after a "\n") that
        // starts after the request line began: two bytes back are enough to tell.
        let empty_from = match buf[..nl] {
            [.., b'\n'] => Some(nl),
            [.., b'\n', b'\r'] => Some(nl - 1),
            _ => None,
        };
        if empty_from.is_some_and(|start| content < start) {
            return Some(nl + 1);
        }
    }
    None
}

/// Checks the limits on a head that has not fully arrived: 414 when the request line
/// alone is over its limit, 431 when the head is.
pub fn check_partial(buf: &[u8], limits: &Limits) -> Result<(), HttpError> {
    let content = buf.iter().position(|&b| b != b'\r' && b != b'\n').unwrap_or(buf.len());
    let line_end = memchr::memchr(b'\n', &buf[content..]);
    // A read may end between the CR and the LF of a line that is exactly at the limit.
    let pending = (buf.len() - content).saturating_sub(usize::from(buf.ends_with(b"\r")));
    match line_end {
        None if pending > limits.max_request_line => Err(HttpError::UriTooLong),
        Some(n) if n > limits.max_request_line + 1 => Err(HttpError::UriTooLong),
        _ if buf.len() > limits.max_header_size => Err(HttpError::HeadersTooLarge),
        _ => Ok(()),
    }
}

/// Most fields a trailer section may have; more is a 431, as for a head.
const MAX_TRAILERS: usize = 100;

/// The end of a chunked body's trailer section, read with the rules of a head, so that
/// pika ends the message where any front end that reads it as a head does: `buf`
/// starts right after the last chunk (`0\r\n`); the section ends at its first empty
/// line, `\r\n` or a bare `\n` as in a head (with the last chunk's line, `0\r\n\n`
/// ends the message); every line before it must be a field httparse takes in a head
/// (a token, a colon, a value without a bare CR or a control byte). Returns the index
/// just past the empty line, or `None` while the section has not fully arrived.
pub fn trailer_end(buf: &[u8], max_size: usize) -> Result<Option<usize>, HttpError> {
    let mut line_start = 0;
    let mut end = None;
    for nl in memchr::memchr_iter(b'\n', buf) {
        if matches!(&buf[line_start..nl], b"" | b"\r") {
            end = Some(nl + 1);
            break;
        }
        line_start = nl + 1;
    }
    let Some(end) = end else {
        return if buf.len() > max_size { Err(HttpError::HeadersTooLarge) } else { Ok(None) };
    };
    if end > max_size {
        return Err(HttpError::HeadersTooLarge);
    }
    let mut fields = [httparse::EMPTY_HEADER; MAX_TRAILERS];
    match httparse::parse_headers(&buf[..end], &mut fields) {
        Ok(httparse::Status::Complete((n, _))) if n == end => Ok(Some(end)),
        Err(httparse::Error::TooManyHeaders) => Err(HttpError::HeadersTooLarge),
        _ => Err(HttpError::BadRequest("malformed trailer section")),
    }
}

/// Rewrites a request line that says `HTTP/1.2` to `HTTP/1.9` to say `HTTP/1.1`, the
/// version it is then served (and logged) as: RFC 9110 §2.5 says a server SHOULD
/// read a later minor version it does not know as the highest it knows, and nginx,
/// Apache and lighttpd do. httparse knows 1.0 and 1.1 only: a head [`parse`] refused
/// with [`HttpError::Version`] is rewritten by this (true: it was such a line) and
/// parsed again, so the line is looked for only then.
pub fn serve_later_minor_as_11(head: &mut [u8]) -> bool {
    let Some(minor) = later_minor_version(head) else { return false };
    head[minor] = b'1';
    true
}

/// Parses and validates a complete head (`buf` ends with the blank line); see
/// [`serve_later_minor_as_11`] for a `Version` error.
pub fn parse<'b>(
    buf: &'b [u8],
    headers: &'b mut [MaybeUninit<httparse::Header<'b>>],
    limits: &Limits,
) -> Result<Request<'b>, HttpError> {
    check_partial(&buf[..buf.len().saturating_sub(2)], limits)?;
    let mut req = httparse::Request::new(&mut []);
    let max = limits.max_headers.min(headers.len());
    let head_len = match req.parse_with_uninit_headers(buf, &mut headers[..max]) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Err(HttpError::BadRequest("incomplete request head")),
        Err(httparse::Error::TooManyHeaders) => return Err(HttpError::HeadersTooLarge),
        Err(httparse::Error::Version) => {
            // `HTTP/2.0` or `HTTP/1.2` is well-formed but not ours: 505. Anything else
            // in that place is a malformed request line.
            return Err(if looks_like_version(buf) {
                HttpError::Version
            } else {
                HttpError::BadRequest("bad HTTP version")
            });
        }
        Err(_) => return Err(HttpError::BadRequest("malformed request head")),
    };
    let method_str = req.method.unwrap_or("");
    let raw_target = req.path.unwrap_or("").as_bytes();
    let http11 = req.version == Some(1);
    let headers: &'b [httparse::Header<'b>] = req.headers;

    let line = request_line(buf);
    let method = Method::parse(method_str).ok_or(HttpError::NotImplemented)?;
    if raw_target.len() > limits.max_request_line {
        return Err(HttpError::UriTooLong);
    }

    // The target: origin-form, `*` for OPTIONS, or absolute-form (whose authority then
    // replaces Host, RFC 9112 §3.2.2). authority-form is only for CONNECT, which is
    // refused by method; CONNECT with any other form is malformed.
    let (target, uri_host) = split_target(raw_target, method_str)?;

    let f = read_fields(headers, limits)?;
    check_host(f.host, f.host_count, http11)?;
    let framing = body_framing(f.te_seen, f.chunked, f.content_length, http11)?;
    let Fields { host, close, keep_alive_token, expect_continue, .. } = f;
    let keep_alive = if http11 { !close } else { keep_alive_token && !close };
    Ok(Request {
        method,
        method_str,
        target,
        http11,
        host: uri_host.or(host),
        keep_alive,
        framing,
        expect_continue: expect_continue && http11 && framing != Framing::None,
        headers,
        line,
        head_len,
    })
}

/// What the field lines say that the server acts on, before it is checked as a whole.
struct Fields<'b> {
    host: Option<&'b [u8]>,
    host_count: usize,
    content_length: Option<u64>,
    chunked: bool,
    te_seen: bool,
    close: bool,
    keep_alive_token: bool,
    expect_continue: bool,
}

/// Reads the field lines: each line's length, Host, Content-Length, Transfer-Encoding,
/// Connection and Expect.
fn read_fields<'b>(headers: &'b [httparse::Header<'b>], limits: &Limits) -> Result<Fields<'b>, HttpError> {
    let mut host = None;
    let mut host_count = 0;
    let mut content_length: Option<u64> = None;
    let mut chunked = false;
    let mut te_seen = false;
    let mut close = false;
    let mut keep_alive_token = false;
    let mut expect_continue = false;
    for h in headers {
        // The field line from its name to the end of its value: the value lies after
        // the name in the same buffer.
        let line_len = h.value.as_ptr() as usize + h.value.len() - h.name.as_ptr() as usize;
        if line_len > limits.max_header_line {
            return Err(HttpError::HeadersTooLarge);
        }
        let name = h.name;
        if name.eq_ignore_ascii_case("host") {
            host_count += 1;
            host = Some(h.value);
        } else if name.eq_ignore_ascii_case("content-length") {
            let n = parse_content_length(h.value)?;
            if content_length.is_some_and(|m| m != n) {
                return Err(HttpError::BadRequest("conflicting Content-Length"));
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            te_seen = true;
            chunked = transfer_coding(h.value, chunked)?;
        } else if name.eq_ignore_ascii_case("connection") {
            for tok in h.value.split(|&b| b == b',') {
                let tok = tok.trim_ascii();
                close |= tok.eq_ignore_ascii_case(b"close");
                keep_alive_token |= tok.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case("expect") {
            if h.value.trim_ascii().eq_ignore_ascii_case(b"100-continue") {
                expect_continue = true;
            } else {
                return Err(HttpError::Expectation);
            }
        }
    }
    Ok(Fields { host, host_count, content_length, chunked, te_seen, close, keep_alive_token, expect_continue })
}

/// Host: exactly one in HTTP/1.1, at most one in 1.0, never empty, well-formed.
fn check_host(host: Option<&[u8]>, host_count: usize, http11: bool) -> Result<(), HttpError> {
    if http11 && host_count != 1 {
        return Err(HttpError::BadRequest(if host_count == 0 {
            "missing Host header"
        } else {
            "repeated Host header"
        }));
    }
    if host_count > 1 {
        return Err(HttpError::BadRequest("repeated Host header"));
    }
    if let Some(h) = host {
        if h.is_empty() {
            return Err(HttpError::BadRequest("empty Host header"));
        }
        if !valid_host(h) {
            return Err(HttpError::BadRequest("invalid Host header"));
        }
    }
    Ok(())
}

/// The body's framing from Transfer-Encoding and Content-Length.
fn body_framing(te_seen: bool, chunked: bool, content_length: Option<u64>, http11: bool) -> Result<Framing, HttpError> {
    // RFC 9112 §6.1: a message with both is a smuggling attempt or a broken client;
    // TE in an HTTP/1.0 request cannot be trusted either.
    match (te_seen, content_length) {
        (true, Some(_)) => Err(HttpError::BadRequest("both Content-Length and Transfer-Encoding")),
        (true, None) if !http11 => Err(HttpError::BadRequest("Transfer-Encoding in an HTTP/1.0 request")),
        (true, None) if !chunked => Err(HttpError::BadRequest("chunked is not the final transfer-coding")),
        (true, None) => Ok(Framing::Chunked),
        (false, Some(0)) | (false, None) => Ok(Framing::None),
        (false, Some(n)) => Ok(Framing::Length(n)),
    }
}

/// The request line (without CRLF), skipping empty lines before it.
pub fn request_line(buf: &[u8]) -> &[u8] {
    let start = buf.iter().position(|&b| b != b'\r' && b != b'\n').unwrap_or(buf.len());
    let rest = &buf[start..];
    let end = memchr::memchr(b'\n', rest).unwrap_or(rest.len());
    let line = &rest[..end];
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Where the minor digit of an `HTTP/1.2` to `HTTP/1.9` request line is, if it is one.
fn later_minor_version(buf: &[u8]) -> Option<usize> {
    let line = request_line(buf);
    let start = line.as_ptr() as usize - buf.as_ptr() as usize;
    let v = line.get(line.len().checked_sub(9)?..)?;
    (v[0] == b' ' && v.starts_with(b" HTTP/1.") && (b'2'..=b'9').contains(&v[8])).then_some(start + line.len() - 1)
}

fn looks_like_version(buf: &[u8]) -> bool {
    let line = request_line(buf);
    // Only a well-formed request line (method SP target SP version) earns a 505;
    // `GET /  HTTP/1.1` or a space in the target is a malformed line (400).
    let parts: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
    let [method, target, v] = parts[..] else { return false };
    if method.is_empty() || target.is_empty() {
        return false;
    }
    v.len() == 8 && v.starts_with(b"HTTP/") && v[5].is_ascii_digit() && v[6] == b'.' && v[7].is_ascii_digit()
}

fn split_target<'t>(raw: &'t [u8], method: &str) -> Result<(&'t [u8], Option<&'t [u8]>), HttpError> {
    // authority-form (host:port) is CONNECT's, and CONNECT has no other form
    // (RFC 9112 §3.2.3); a static-file origin then refuses the method with 405.
    if method == "CONNECT" {
        return match raw.iter().rposition(|&b| b == b':') {
            Some(colon) if colon + 1 < raw.len() && !raw.contains(&b'/') && valid_host(raw) => Ok((raw, None)),
            _ => Err(HttpError::BadRequest("CONNECT needs a host:port target")),
        };
    }
    if raw.first() == Some(&b'/') {
        return Ok((raw, None));
    }
    if raw == b"*" {
        return if method == "OPTIONS" {
            Ok((raw, None))
        } else {
            Err(HttpError::BadRequest("'*' is only for OPTIONS"))
        };
    }
    // Both schemes name this server (RFC 9112 §3.2.2: a server MUST accept the
    // absolute form); which vhost answers is Host's business, as for any request.
    let scheme = if raw.get(..7).is_some_and(|s| s.eq_ignore_ascii_case(b"http://")) {
        7
    } else if raw.get(..8).is_some_and(|s| s.eq_ignore_ascii_case(b"https://")) {
        8
    } else {
        0
    };
    if scheme > 0 {
        let rest = &raw[scheme..];
        let end = rest.iter().position(|&b| b == b'/' || b == b'?').unwrap_or(rest.len());
        let authority = &rest[..end];
        if authority.is_empty() || authority.contains(&b'@') || !valid_host(authority) {
            return Err(HttpError::BadRequest("bad absolute-form target"));
        }
        // An empty path is "/" (RFC 9112 §3.2.1); "http://h?q" keeps its query and
        // the dispatcher reads a target starting with '?' as "/?q".
        let path: &[u8] = if end == rest.len() { b"/" } else { &rest[end..] };
        return Ok((path, Some(authority)));
    }
    Err(HttpError::BadRequest("bad request-target"))
}

fn parse_content_length(v: &[u8]) -> Result<u64, HttpError> {
    // A list of identical values ("5, 5") is allowed by RFC 9110 §8.6; anything else
    // that is not 1*DIGIT is an error.
    let mut value = None;
    for part in v.split(|&b| b == b',') {
        let part = part.trim_ascii();
        if part.is_empty() || !part.iter().all(u8::is_ascii_digit) {
            return Err(HttpError::BadRequest("invalid Content-Length"));
        }
        // Leading zeros are digits too (`1*DIGIT`); what remains must fit in a u64.
        let digits = &part[part.iter().position(|&b| b != b'0').unwrap_or(part.len() - 1)..];
        if digits.len() > 19 {
            return Err(HttpError::BadRequest("invalid Content-Length"));
        }
        let part = digits;
        let n: u64 = std::str::from_utf8(part)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or(HttpError::BadRequest("invalid Content-Length"))?;
        if value.is_some_and(|m| m != n) {
            return Err(HttpError::BadRequest("conflicting Content-Length"));
        }
        value = Some(n);
    }
    value.ok_or(HttpError::BadRequest("invalid Content-Length"))
}

/// Folds one Transfer-Encoding field into "is chunked the final coding so far".
fn transfer_coding(v: &[u8], mut chunked_last: bool) -> Result<bool, HttpError> {
    for coding in v.split(|&b| b == b',') {
        let coding = coding.trim_ascii();
        if coding.is_empty() {
            continue;
        }
        if chunked_last {
            // Anything after chunked, or chunked twice, leaves the length unknowable.
            return Err(HttpError::BadRequest("chunked is not the final transfer-coding"));
        }
        let name = coding.split(|&b| b == b';').next().unwrap_or(b"").trim_ascii();
        if name.eq_ignore_ascii_case(b"chunked") {
            if coding.len() != name.len() {
                return Err(HttpError::BadRequest("parameters on chunked"));
            }
            chunked_last = true;
        } else if !(name.eq_ignore_ascii_case(b"gzip")
            || name.eq_ignore_ascii_case(b"deflate")
            || name.eq_ignore_ascii_case(b"compress")
            || name.eq_ignore_ascii_case(b"x-gzip"))
        {
            return Err(HttpError::UnknownCoding);
        }
    }
    Ok(chunked_last)
}

/// RFC 3986 `host[:port]`: reg-name characters, or an IP-literal in brackets.
fn valid_host(h: &[u8]) -> bool {
    // An empty Host is what a client sends for a target without an authority (RFC
    // 9112 §3.2), which an http(s) URI always has: nginx, Apache and lighttpd refuse it.
    if h.is_empty() || h.len() > 255 {
        return false;
    }
    let (host, port) = if h[0] == b'[' {
        let Some(end) = h.iter().position(|&b| b == b']') else { return false };
        if !h[1..end].iter().all(|&b| b.is_ascii_hexdigit() || b == b':' || b == b'.') {
            return false;
        }
        (&h[..=end], &h[end + 1..])
    } else {
        match h.iter().position(|&b| b == b':') {
            Some(c) => (&h[..c], &h[c..]),
            None => (h, &b""[..]),
        }
    };
    let port_ok = port.is_empty() || (port[0] == b':' && port.len() <= 6 && port[1..].iter().all(u8::is_ascii_digit));
    let host_ok = host.first() == Some(&b'[') || host.iter().all(|&b| REG_NAME[usize::from(b)]);
    port_ok && host_ok && !host.is_empty()
}

/// Bytes of a Host's reg-name (RFC 3986: unreserved, sub-delims, and `%` of a
/// pct-encoding), one table look per byte.
const REG_NAME: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        t[b] = (b as u8).is_ascii_alphanumeric();
        b += 1;
    }
    let others = b"-._~!$&'()*+,;=%";
    let mut i = 0;
    while i < others.len() {
        t[others[i] as usize] = true;
        i += 1;
    }
    t
};

/// A parsed request's fields as positions in its head: what is kept with an answer
/// that waits for its client, so the answer's log record reads the request again
/// without parsing it ([`Spans::view`]).
#[derive(Debug, Clone)]
pub struct Spans {
    method: Method,
    method_str: Range<usize>,
    target: Range<usize>,
    http11: bool,
    host: Option<Range<usize>>,
    keep_alive: bool,
    framing: Framing,
    expect_continue: bool,
    headers: Vec<(Range<usize>, Range<usize>)>,
    line: Range<usize>,
    head_len: usize,
}

impl<'b> Request<'b> {
    /// Its fields as positions in `head`, the bytes it was parsed from; `None` if
    /// one lies elsewhere.
    pub fn spans(&self, head: &[u8]) -> Option<Spans> {
        let at = |s: &[u8]| {
            let start = (s.as_ptr() as usize).checked_sub(head.as_ptr() as usize)?;
            (start + s.len() <= head.len()).then_some(start..start + s.len())
        };
        let mut headers = Vec::with_capacity(self.headers.len());
        for h in self.headers {
            headers.push((at(h.name.as_bytes())?, at(h.value)?));
        }
        Some(Spans {
            method: self.method,
            method_str: at(self.method_str.as_bytes())?,
            target: at(self.target)?,
            http11: self.http11,
            host: match self.host {
                Some(h) => Some(at(h)?),
                None => None,
            },
            keep_alive: self.keep_alive,
            framing: self.framing,
            expect_continue: self.expect_continue,
            headers,
            line: at(self.line)?,
            head_len: self.head_len,
        })
    }
}

impl Spans {
    /// The request again, its fields in `head` (the bytes it was parsed from), its
    /// headers in `slots`.
    pub fn view<'h>(&self, head: &'h [u8], slots: &'h mut Vec<httparse::Header<'h>>) -> Request<'h> {
        let text = |r: &Range<usize>| std::str::from_utf8(&head[r.clone()]).unwrap_or("");
        slots.clear();
        slots.extend(self.headers.iter().map(|(n, v)| httparse::Header { name: text(n), value: &head[v.clone()] }));
        Request {
            method: self.method,
            method_str: text(&self.method_str),
            target: &head[self.target.clone()],
            http11: self.http11,
            host: self.host.clone().map(|h| &head[h]),
            keep_alive: self.keep_alive,
            framing: self.framing,
            expect_continue: self.expect_continue,
            headers: slots,
            line: &head[self.line.clone()],
            head_len: self.head_len,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_read_again_from_its_spans_is_the_same() {
        let head = b"POST http://example.com/a?b=c HTTP/1.1\r\nHost: x\r\nUser-Agent: t/1\r\nX-A: 1\r\nX-A: 2\r\n\
                     Content-Length: 3\r\n\r\n";
        let mut slots = [const { std::mem::MaybeUninit::uninit() }; 16];
        let limits = Limits { max_request_line: 8192, max_header_size: 8192, max_header_line: 8192, max_headers: 16 };
        let req = parse(head, &mut slots, &limits).unwrap();
        let kept = head.to_vec();
        let spans = req.spans(head).unwrap();
        let mut again = Vec::new();
        let view = spans.view(&kept, &mut again);
        assert_eq!(
            (view.method, view.method_str, view.target, view.host),
            (req.method, req.method_str, req.target, req.host)
        );
        assert_eq!(
            (view.line, view.http11, view.keep_alive, view.framing),
            (req.line, req.http11, req.keep_alive, req.framing)
        );
        assert_eq!(view.header("user-agent"), Some(&b"t/1"[..]));
        assert_eq!(view.header_list("X-A").unwrap().as_ref(), b"1, 2");
        assert_eq!(view.headers.len(), req.headers.len());
        // Fields that lie in other bytes have no spans there.
        assert!(req.spans(&kept).is_none());
    }

    const LIMITS: Limits = Limits { max_request_line: 64, max_header_size: 256, max_header_line: 100, max_headers: 8 };

    #[test]
    fn reg_name_table_is_rfc_3986() {
        for b in 0..=255u8 {
            let spec = b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=%".contains(&b);
            assert_eq!(REG_NAME[usize::from(b)], spec, "byte {b:#04x}");
        }
        assert!(valid_host(b"example.com:8080") && valid_host(b"a-b_c~d") && valid_host(b"[::1]:80"));
        for bad in [&b"a b"[..], b"a/b", b"a@b", b"a\\b", b"a\x00b", b"caf\xc3\xa9", b"a:80x"] {
            assert!(!valid_host(bad), "{bad:?}");
        }
    }

    /// Method, framing, keep-alive, host, target.
    type Parsed = (Method, Framing, bool, Option<Vec<u8>>, Vec<u8>);

    fn parse_str(s: &str) -> Result<Parsed, HttpError> {
        let mut headers = [const { MaybeUninit::uninit() }; 16];
        let mut buf = s.as_bytes().to_vec();
        if let Err(HttpError::Version) = parse(&buf, &mut [const { MaybeUninit::uninit() }; 16], &LIMITS)
            && serve_later_minor_as_11(&mut buf)
        {
            let mut again = [const { MaybeUninit::uninit() }; 16];
            let r = parse(&buf, &mut again, &LIMITS);
            assert!(r.as_ref().map_or_else(|e| *e != HttpError::Version, |r| r.http11), "{s:?} served as 1.1");
        }
        let r = parse(&buf, &mut headers, &LIMITS)?;
        Ok((r.method, r.framing, r.keep_alive, r.host.map(<[u8]>::to_vec), r.target.to_vec()))
    }

    fn status(s: &str) -> u16 {
        match parse_str(s) {
            Ok(_) => 200,
            Err(e) => e.status(),
        }
    }

    /// The line-by-line rule `find_head_end` implements, written plainly.
    fn head_end_reference(buf: &[u8]) -> Option<usize> {
        let content = buf.iter().position(|&b| b != b'\r' && b != b'\n')?;
        let mut line_start = 0;
        for (nl, _) in buf.iter().enumerate().filter(|(_, b)| **b == b'\n') {
            let line = &buf[line_start..nl];
            if (line.is_empty() || line == b"\r") && content < line_start {
                return Some(nl + 1);
            }
            line_start = nl + 1;
        }
        None
    }

    proptest::proptest! {
        #[test]
        fn head_end_matches_the_line_rule(
            bytes in proptest::collection::vec(proptest::sample::select(b"\r\nGa: ".to_vec()), 0..40),
            cut in 0usize..40,
        ) {
            let want = head_end_reference(&bytes);
            proptest::prop_assert_eq!(find_head_end(&bytes, 0), want);
            // A scan resumed where an earlier one (that found nothing) stopped agrees.
            let cut = cut.min(bytes.len());
            if find_head_end(&bytes[..cut], 0).is_none() {
                proptest::prop_assert_eq!(find_head_end(&bytes, cut), want);
            }
        }
    }

    #[test]
    fn head_end_is_found_incrementally() {
        let buf = b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\nNEXT";
        assert_eq!(find_head_end(buf, 0), Some(buf.len() - 4));
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\nHost: a\r\n", 0), None);
        assert_eq!(find_head_end(b"GET / HTTP/1.0\n\n", 10), Some(16));
        assert_eq!(find_head_end(b"\r\n\r\n", 0), None);
    }

    #[test]
    fn simple_requests() {
        let (m, f, ka, host, target) = parse_str("GET /a?b HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!((m, f, ka), (Method::Get, Framing::None, true));
        assert_eq!((host.as_deref(), target.as_slice()), (Some(&b"x"[..]), &b"/a?b"[..]));
        let (_, _, ka, host, _) = parse_str("HEAD / HTTP/1.0\r\n\r\n").unwrap();
        assert!(!ka && host.is_none());
        let (_, _, ka, _, _) = parse_str("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").unwrap();
        assert!(ka);
        let (_, _, ka, _, _) = parse_str("GET / HTTP/1.1\r\nHost: x\r\nConnection: foo, close\r\n\r\n").unwrap();
        assert!(!ka);
    }

    #[test]
    fn absolute_form_sets_host() {
        let (_, _, _, host, target) =
            parse_str("GET http://Example.COM:80/p?q HTTP/1.1\r\nHost: other\r\n\r\n").unwrap();
        assert_eq!((host.unwrap(), target), (b"Example.COM:80".to_vec(), b"/p?q".to_vec()));
        let (_, _, _, host, target) = parse_str("GET https://x/p HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!((host.unwrap(), target), (b"x".to_vec(), b"/p".to_vec()));
        assert_eq!(status("GET ftp://x/ HTTP/1.1\r\nHost: x\r\n\r\n"), 400);
        assert_eq!(status("GET http://u@x/ HTTP/1.1\r\nHost: x\r\n\r\n"), 400);
    }

    #[test]
    fn trailers_follow_the_head_rules() {
        let end = |b: &[u8]| trailer_end(b, 8192);
        assert_eq!(end(b"\r\nGET / HTTP/1.1\r\n"), Ok(Some(2)), "no trailers");
        assert_eq!(end(b"\nGET / HTTP/1.1\r\n"), Ok(Some(1)), "a bare LF ends the section, as in a head");
        assert_eq!(end(b"X-A: 1\r\nX-B: 2\r\n\r\nNEXT"), Ok(Some(18)));
        assert_eq!(end(b"X-A: 1\nX-B: 2\n\nNEXT"), Ok(Some(15)), "LF-ended fields, as a head may have");
        assert_eq!(end(b"X-A: 1\r\n"), Ok(None), "more to come");
        assert_eq!(end(b""), Ok(None));
        let bad = Err(HttpError::BadRequest("malformed trailer section"));
        assert_eq!(end(b"not a field\r\n\r\n"), bad, "no colon");
        assert_eq!(end(b"X-T: a\rb\r\n\r\n"), bad, "a bare CR");
        assert_eq!(end(b"X T: a\r\n\r\n"), bad, "a space in the name");
        assert_eq!(end(b": a\r\n\r\n"), bad, "no name");
        assert_eq!(end(b"X-T: a\x00b\r\n\r\n"), bad, "a NUL");
        assert_eq!(end(b"X-A: one\r\n two\r\n\r\n"), bad, "obs-fold, refused in a head too");
        let big = [b"X-T: ".as_slice(), &[b't'; 9000], b"\r\n\r\n"].concat();
        assert_eq!(end(&big), Err(HttpError::HeadersTooLarge));
        assert_eq!(end(&big[..8500]), Err(HttpError::HeadersTooLarge), "too large before its end came");
        let many: Vec<u8> = (0..200).flat_map(|i| format!("a{i}:\r\n").into_bytes()).chain(*b"\r\n").collect();
        assert_eq!(end(&many), Err(HttpError::HeadersTooLarge));
    }

    #[test]
    fn statuses_for_bad_heads() {
        assert_eq!(status("GET / HTTP/1.1\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a b\r\n\r\n"), 400);
        assert_eq!(status("BREW / HTTP/1.1\r\nHost: a\r\n\r\n"), 501);
        assert_eq!(status("get / HTTP/1.1\r\nHost: a\r\n\r\n"), 501);
        assert_eq!(status("POST / HTTP/1.1\r\nHost: a\r\n\r\n"), 200); // 405 is decided by the handler
        assert_eq!(status("GET / HTTP/2.0\r\nHost: a\r\n\r\n"), 505);
        assert_eq!(status("GET / HTTP/1.2\r\nHost: a\r\n\r\n"), 200);
        assert_eq!(status("GET / HTTP/1.9\r\nHost: a\r\n\r\n"), 200);
        assert_eq!(status("GET / HTTP/1.9\r\n\r\n"), 400, "served as 1.1, so Host is needed");
        assert_eq!(status("GET /  HTTP/1.2\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.1\r\nHost:\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTP/1.0\r\nHost: \r\n\r\n"), 400);
        assert_eq!(status("CONNECT a:443 HTTP/1.1\r\nHost: a\r\n\r\n"), 200); // 405 by the handler
        assert_eq!(status("CONNECT / HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("CONNECT a HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("CONNECT http://a:1/ HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("POST a:443 HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("GET / HTTX/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("GET * HTTP/1.1\r\nHost: a\r\n\r\n"), 400);
        assert_eq!(status("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n"), 200);
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a\r\nExpect: teapot\r\n\r\n"), 417);
        let long = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(80));
        assert_eq!(status(&long), 414);
        let many: String = (0..9).map(|i| format!("X-{i}: v\r\n")).collect();
        assert_eq!(status(&format!("GET / HTTP/1.1\r\nHost: a\r\n{many}\r\n")), 431);
        let big = format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n", "v".repeat(300));
        assert_eq!(status(&big), 431);
        // One field line up to max_header_line (100 here), counted from its name.
        let line = |n: usize| format!("GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n", "v".repeat(n - 3));
        assert_eq!((status(&line(100)), status(&line(101))), (200, 431));
        assert_eq!(status("GET / HTTP/1.1\r\nHost: a\r\nX-A: one\r\n two\r\n\r\n"), 400);
    }

    #[test]
    fn framing_rules() {
        let cl = |v: &str| parse_str(&format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {v}\r\n\r\n"));
        assert_eq!(cl("5").unwrap().1, Framing::Length(5));
        assert_eq!(cl("5, 5").unwrap().1, Framing::Length(5));
        assert_eq!(cl("0").unwrap().1, Framing::None);
        for bad in ["-1", "+5", "5, 6", "", "0x10", "99999999999999999999", "5 5"] {
            assert_eq!(cl(bad).err().map(HttpError::status), Some(400), "{bad}");
        }
        let two = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n";
        assert_eq!(status(two), 400);
        let te = |v: &str| parse_str(&format!("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: {v}\r\n\r\n"));
        assert_eq!(te("chunked").unwrap().1, Framing::Chunked);
        assert_eq!(te("gzip, chunked").unwrap().1, Framing::Chunked);
        assert_eq!(te("chunked, gzip").err().map(HttpError::status), Some(400));
        assert_eq!(te("chunked, chunked").err().map(HttpError::status), Some(400));
        assert_eq!(te("bogus").err().map(HttpError::status), Some(501));
        assert_eq!(te("gzip").err().map(HttpError::status), Some(400));
        let both = "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(status(both), 400);
        assert_eq!(status("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"), 400);
    }

    #[test]
    fn lone_carriage_returns_are_not_a_long_line() {
        assert_eq!(check_partial(b"\r", &LIMITS), Ok(()));
        assert_eq!(check_partial(b"\r\n\r", &LIMITS), Ok(()));
        assert_eq!(find_head_end(b"\r", 0), None);
    }

    #[test]
    fn leading_blank_lines_cost_linear_time() {
        let mut buf = b"\r\n".repeat(8000);
        buf.extend_from_slice(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        let t = std::time::Instant::now();
        assert_eq!(find_head_end(&buf, 0), Some(buf.len()));
        // Quadratic rescanning took ~90 ms here; linear is microseconds.
        assert!(t.elapsed() < std::time::Duration::from_millis(50), "{:?}", t.elapsed());
    }

    #[test]
    fn partial_limits() {
        assert_eq!(check_partial(&[b'a'; 70], &LIMITS), Err(HttpError::UriTooLong));
        assert_eq!(check_partial(b"GET / HTTP/1.1\r\nX: y", &LIMITS), Ok(()));
        let mut big = b"GET / HTTP/1.1\r\n".to_vec();
        big.extend_from_slice(&[b'x'; 300]);
        assert_eq!(check_partial(&big, &LIMITS), Err(HttpError::HeadersTooLarge));
    }
}
