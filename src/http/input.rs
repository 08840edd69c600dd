//! The read side of a connection: one buffer, the bytes of the next request head in
//! it, and the body that follows.
//!
//! [`Input::read_head`] waits until a whole head is buffered, within the header and
//! keep-alive timeouts and the size limits; [`Input::discard_body`] reads and drops a
//! request body (by `Content-Length` or chunked, each chunk line checked) so that the
//! next pipelined request starts where it should; [`Input::linger`] drains a closing
//! connection so the client reads our answer instead of a reset. Everything goes
//! through a [`Transport`], so unit tests and the `framing` fuzz target run this code
//! on bytes in memory.

use std::io;
use std::time::{Duration, Instant};

use super::request::{self, Framing, HttpError, Limits, Request};
use super::transport::Transport;
use crate::listen::WAIT_SLICE;

/// The buffer's first size: more than nearly every request head.
const INPUT_START: usize = 4096;

/// The largest trailer section of a chunked body: 431 beyond it, as for a head.
const MAX_TRAILER_SECTION: usize = 8192;

/// Room beyond `http.max_header_size` for the start of a pipelined request.
pub const PIPELINE_ROOM: usize = 4096;

/// Under pressure (no idle worker left and the pool at its maximum), how long an idle
/// kept-alive connection or a trickling head may keep its worker. Long enough for any
/// client that is really sending (its head comes in one round trip); short enough that
/// a pool full of idle or slowloris connections frees itself within seconds.
const PRESSURE_GRACE: Duration = Duration::from_secs(1);

/// How long a closing connection is drained so the client reads our response
/// instead of a reset (Apache's lingering close).
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 64 * 1024;

/// Why no head came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// The client closed or went idle between requests: close quietly.
    Quiet,
    Http(HttpError),
}

/// Why a body could not be read to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyError {
    /// Answer this, then close.
    Http(HttpError),
    /// The connection broke: close without an answer.
    Io,
}

/// The read side of a connection: the buffer and what is in it.
pub struct Input {
    /// Starts at [`INPUT_START`] bytes and grows (doubling) to `limit`: the largest
    /// head plus room for the start of a pipelined one.
    buf: Vec<u8>,
    limit: usize,
    limits: Limits,
    /// Unread bytes are `buf[start..end]`.
    start: usize,
    end: usize,
    /// The transport's read timeout, as last set (None: unknown).
    timeout: Option<Duration>,
    /// Bytes of the current request read so far (head and body).
    bytes_in: u64,
    /// Set while a body is read.
    body: Option<BodyClock>,
}

#[derive(Clone, Copy)]
struct BodyClock {
    started: Instant,
    timeout: Duration,
    min_rate: u64,
    /// `bytes_in` when the body began.
    head_bytes: u64,
}

impl Input {
    /// A buffer for heads within `limits`.
    pub fn new(limits: Limits) -> Input {
        let limit = limits.max_header_size + PIPELINE_ROOM;
        let buf = vec![0; INPUT_START.min(limit)];
        Input { buf, limit, limits, start: 0, end: 0, timeout: None, bytes_in: 0, body: None }
    }

    /// Starts on a new connection whose read timeout is `timeout`, as it came from
    /// the listener.
    pub fn begin(&mut self, timeout: Duration) {
        self.start = 0;
        self.end = 0;
        self.timeout = Some(timeout);
        self.bytes_in = 0;
        self.body = None;
    }

    /// Bytes of the current request read so far (head and body).
    pub fn bytes_in(&self) -> u64 {
        self.bytes_in
    }

    /// True if bytes the client sent are still unread.
    pub fn has_unread(&self) -> bool {
        self.start < self.end
    }

    /// The bytes read from the transport and not yet used.
    pub fn unread(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// The request line of what is buffered (for a head refused before it was
    /// complete).
    pub fn pending_line(&self) -> &[u8] {
        request::request_line(&self.buf[self.start..self.end])
    }

    /// Takes the head that ends at `head_end` (from [`Input::read_head`]) out of the
    /// buffer, counting it as this request's first bytes.
    pub fn take_head(&mut self, head_end: usize) -> &[u8] {
        let head = &self.buf[self.start..head_end];
        self.bytes_in = head.len() as u64;
        self.start = head_end;
        head
    }

    fn set_timeout(&mut self, t: &mut impl Transport, timeout: Duration) {
        let timeout = timeout.max(Duration::from_millis(1));
        if self.timeout != Some(timeout) {
            let _ = t.set_read_timeout(timeout);
            self.timeout = Some(timeout);
        }
    }

    /// Reads more bytes into the buffer; `Ok(0)` is end of stream.
    fn fill(&mut self, t: &mut impl Transport) -> io::Result<usize> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        } else if self.end == self.buf.len() && self.buf.len() < self.limit {
            // A head larger than the buffer so far: grow it, up to the limit.
            let grown = (self.buf.len() * 2).min(self.limit);
            self.buf.resize(grown, 0);
        }
        loop {
            match t.read(&mut self.buf[self.end..]) {
                Ok(n) => {
                    self.end += n;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads until a whole head is buffered; returns the index just past it. The first
    /// byte may take `first_wait`; once it came, the whole head must arrive within
    /// `head_timeout` (mod_reqtimeout's rule, so a trickling client cannot hold a
    /// worker forever). Waits are cut into slices of [`WAIT_SLICE`]; after each,
    /// `pressure()` is asked whether idle workers are scarce, and if they are an idle
    /// or trickling connection gives its worker back after `PRESSURE_GRACE`. Once
    /// the client has kept the worker a slice, `waiting()` is called (once): the
    /// worker writes the log records it holds.
    pub fn read_head(
        &mut self,
        t: &mut impl Transport,
        first_wait: Duration,
        head_timeout: Duration,
        kept_alive: bool,
        pressure: &mut dyn FnMut() -> bool,
        waiting: &mut dyn FnMut(),
    ) -> Result<usize, HeadError> {
        let began = Instant::now();
        let mut waited_long = false;
        let mut scanned = 0;
        let mut deadline: Option<Instant> = None;
        self.bytes_in = 0;
        // Nothing at all on a kept-alive connection is the idle timeout, closed
        // quietly; a head that stopped halfway (or never came) earns a 408.
        let timed_out = |this: &Self, deadline: Option<Instant>| {
            if kept_alive && this.end == this.start && deadline.is_none() {
                HeadError::Quiet
            } else {
                HeadError::Http(HttpError::Timeout)
            }
        };
        let result = loop {
            if self.end > self.start {
                let window = &self.buf[self.start..self.end];
                if let Some(n) = request::find_head_end(window, scanned) {
                    return Ok(self.start + n);
                }
                scanned = window.len();
                if let Err(e) = request::check_partial(window, &self.limits) {
                    break HeadError::Http(e);
                }
                if self.start == 0 && self.end == self.limit {
                    break HeadError::Http(HttpError::HeadersTooLarge);
                }
                if deadline.is_none() {
                    deadline = Some(Instant::now() + head_timeout);
                }
            }
            // One clock read per pass.
            let waited = began.elapsed();
            let full = match deadline {
                None => first_wait.saturating_sub(waited),
                Some(d) => d.saturating_duration_since(began + waited),
            };
            if full.is_zero() {
                break timed_out(self, deadline);
            }
            if waited >= WAIT_SLICE && !waited_long {
                waited_long = true;
                waiting();
            }
            let mut wait = full.min(WAIT_SLICE);
            // The first wait of a fresh read is a plain slice: a healthy client's head
            // is usually there already. Pressure is weighed once a slice went by or a
            // head came in part (and the timeout then changes only for those).
            let dawdling = self.end > self.start || waited >= WAIT_SLICE;
            if dawdling && pressure() {
                let left = PRESSURE_GRACE.saturating_sub(waited);
                if left.is_zero() {
                    break timed_out(self, deadline);
                }
                wait = wait.min(left);
            }
            self.set_timeout(t, wait);
            match self.fill(t) {
                Ok(0) => break HeadError::Quiet,
                Ok(_) => {}
                // The slice ended: look at the deadline and the pressure again.
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
                Err(_) => break HeadError::Quiet,
            }
        };
        // What came of a head that is refused counts as its bytes in.
        self.bytes_in = (self.end - self.start) as u64;
        Err(result)
    }

    /// Reads and drops a request body so that the connection stays in step: at most
    /// `max` bytes, within `timeout` per read, at `min_rate` bytes a second.
    pub fn discard_body(
        &mut self,
        t: &mut impl Transport,
        req: &Request<'_>,
        max: u64,
        timeout: Duration,
        min_rate: u64,
    ) -> Result<(), BodyError> {
        if req.framing == Framing::None {
            return Ok(());
        }
        if let Framing::Length(n) = req.framing {
            if n > max {
                return Err(BodyError::Http(HttpError::BodyTooLarge));
            }
        }
        if req.expect_continue {
            t.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").map_err(|_| BodyError::Io)?;
        }
        self.body = Some(BodyClock { started: Instant::now(), timeout, min_rate, head_bytes: self.bytes_in });
        let result = match req.framing {
            Framing::None => Ok(()),
            Framing::Length(n) => self.skip(t, n),
            Framing::Chunked => self.discard_chunked(t, max),
        };
        self.body = None;
        result
    }

    /// Reads more body bytes, within the body's deadline: `body_timeout`, extended by
    /// one second for every `min_rate` bytes received (mod_reqtimeout's MinRate), so a
    /// client may be slow but must keep moving.
    fn fill_body(&mut self, t: &mut impl Transport) -> Result<usize, BodyError> {
        if let Some(b) = self.body {
            let received = self.bytes_in.saturating_sub(b.head_bytes);
            match received.checked_div(b.min_rate) {
                None => self.set_timeout(t, b.timeout),
                Some(earned) => {
                    let left =
                        (b.started + b.timeout + Duration::from_secs(earned)).saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(BodyError::Http(HttpError::Timeout));
                    }
                    self.set_timeout(t, left.min(b.timeout));
                }
            }
        }
        match self.fill(t) {
            Ok(0) => Err(BodyError::Io),
            Ok(n) => Ok(n),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                Err(BodyError::Http(HttpError::Timeout))
            }
            Err(_) => Err(BodyError::Io),
        }
    }

    /// Takes up to `n` body bytes from the buffer or the transport and drops them.
    fn skip(&mut self, t: &mut impl Transport, mut n: u64) -> Result<(), BodyError> {
        while n > 0 {
            if self.start == self.end {
                self.fill_body(t)?;
            }
            let take = n.min((self.end - self.start) as u64);
            self.start += take as usize;
            self.bytes_in += take;
            n -= take;
        }
        Ok(())
    }

    /// Ensures at least one more line (up to `\n`) is buffered; returns its length.
    fn line(&mut self, t: &mut impl Transport, max: usize) -> Result<usize, BodyError> {
        loop {
            if let Some(p) = memchr::memchr(b'\n', &self.buf[self.start..self.end]) {
                return Ok(p + 1);
            }
            if self.end - self.start > max {
                return Err(BodyError::Http(HttpError::BadRequest("chunk line too long")));
            }
            self.fill_body(t)?;
        }
    }

    /// Drops one line of `len` bytes, counting it in.
    fn consume(&mut self, len: usize) {
        self.start += len;
        self.bytes_in += len as u64;
    }

    /// A chunked body (RFC 9112 §7.1): size lines, data, CRLF after each chunk, the
    /// last chunk, trailer fields, the empty line.
    fn discard_chunked(&mut self, t: &mut impl Transport, max: u64) -> Result<(), BodyError> {
        let mut total: u64 = 0;
        loop {
            let len = self.line(t, 1024)?;
            let line = &self.buf[self.start..self.start + len];
            // httparse reads an empty size as 0, which would end the body early
            // and smuggle the rest in as a request: a size has at least one digit.
            let size = match httparse::parse_chunk_size(line) {
                Ok(httparse::Status::Complete((_, size))) if line.ends_with(b"\r\n") && line[0].is_ascii_hexdigit() => {
                    size
                }
                _ => return Err(BodyError::Http(HttpError::BadRequest("bad chunk size line"))),
            };
            self.consume(len);
            if size == 0 {
                break;
            }
            total = total.saturating_add(size);
            if total > max {
                return Err(BodyError::Http(HttpError::BodyTooLarge));
            }
            self.skip(t, size)?;
            let len = self.line(t, 2)?;
            if &self.buf[self.start..self.start + len] != b"\r\n" {
                return Err(BodyError::Http(HttpError::BadRequest("chunk data longer than its size")));
            }
            self.consume(len);
        }
        // The trailer section, read as a head is, so the message ends where a front
        // end reading it as a head ends it (see request::trailer_end).
        let max = MAX_TRAILER_SECTION.min(self.limit - 1);
        loop {
            match request::trailer_end(&self.buf[self.start..self.end], max) {
                Ok(Some(n)) => {
                    self.consume(n);
                    return Ok(());
                }
                Ok(None) => {
                    self.fill_body(t)?;
                }
                Err(e) => return Err(BodyError::Http(e)),
            }
        }
    }

    /// Closes our side, then reads and drops what the client still sends for a short
    /// while, so our last response is not destroyed by a reset.
    pub fn linger(&mut self, t: &mut impl Transport) {
        t.shutdown_write();
        let deadline = Instant::now() + LINGER;
        let mut drained = 0;
        self.start = 0;
        self.end = 0;
        while drained < LINGER_BYTES {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            self.set_timeout(t, left);
            match t.read(&mut self.buf[..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::mem::MaybeUninit;

    use super::*;
    use crate::http::transport::Memory;

    const LIMITS: Limits = Limits { max_request_line: 8190, max_header_size: 16384, max_headers: 100 };
    const LONG: Duration = Duration::from_secs(60);

    /// Reads one head from `stream`, parses it and discards its body; returns what
    /// is left unread (the next pipelined request) or the error.
    fn one_request(stream: &[u8], piece: usize) -> Result<Vec<u8>, String> {
        let mut t = Memory::new(stream, piece);
        let mut input = Input::new(LIMITS);
        input.begin(WAIT_SLICE);
        let end =
            input.read_head(&mut t, LONG, LONG, false, &mut || false, &mut || {}).map_err(|e| format!("{e:?}"))?;
        let head = input.take_head(end).to_vec();
        let mut headers = [const { MaybeUninit::uninit() }; 100];
        let req = request::parse(&head, &mut headers, &LIMITS).map_err(|e| format!("{e:?}"))?;
        input.discard_body(&mut t, &req, 1 << 20, LONG, 0).map_err(|e| format!("{e:?}"))?;
        let mut rest = input.unread().to_vec();
        rest.extend(t.pieces.into_iter().flatten());
        Ok(rest)
    }

    const CHUNKED: &[u8] = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";

    #[test]
    fn bodies_are_discarded_to_the_next_request() {
        for piece in [1, 3, 7, 4096] {
            let stream =
                [CHUNKED, b"5;ext=1\r\nhello\r\n10\r\n0123456789abcdef\r\n0\r\nX-T: 1\r\n\r\nGET /next"].concat();
            assert_eq!(one_request(&stream, piece).unwrap(), b"GET /next", "pieces of {piece}");
            let stream = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET /next";
            assert_eq!(one_request(stream, piece).unwrap(), b"GET /next", "pieces of {piece}");
        }
    }

    #[test]
    fn bad_chunks_are_refused() {
        let bad = |body: &[u8]| one_request(&[CHUNKED, body].concat(), 4096).unwrap_err();
        // An empty size would end the body early and smuggle the rest in as a request.
        assert!(bad(b"\r\nGET /smuggled HTTP/1.1\r\n\r\n").contains("bad chunk size line"));
        assert!(bad(b"3\r\nhello\r\n0\r\n\r\n").contains("chunk data longer than its size"));
        assert!(bad(b"200000\r\n").contains("BodyTooLarge"));
        assert!(bad(b"5\r\nhel").contains("Io"), "a body cut short closes the connection");
    }

    #[test]
    fn heads_arrive_in_pieces_and_refusals_count_their_bytes() {
        for piece in [1, 2, 5, 4096] {
            assert_eq!(one_request(b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\nrest", piece).unwrap(), b"rest");
        }
        let mut t = Memory::new(b"GET / HTTP/1.1\r\nHost: a\r\n", 4096);
        let mut input = Input::new(LIMITS);
        input.begin(WAIT_SLICE);
        let e = input.read_head(&mut t, LONG, LONG, false, &mut || false, &mut || {}).unwrap_err();
        assert_eq!(e, HeadError::Quiet, "the client closed halfway");
        let long = [b"GET /".as_slice(), &[b'a'; 9000]].concat();
        let mut t = Memory::new(&long, 4096);
        input.begin(WAIT_SLICE);
        let e = input.read_head(&mut t, LONG, LONG, false, &mut || false, &mut || {}).unwrap_err();
        assert_eq!(e, HeadError::Http(HttpError::UriTooLong));
        assert_eq!(input.pending_line(), &long[..input.bytes_in() as usize]);
    }

    #[test]
    fn expect_continue_is_answered_before_the_body() {
        let stream = b"PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok";
        let mut t = Memory::new(stream, 4096);
        let mut input = Input::new(LIMITS);
        input.begin(WAIT_SLICE);
        let end = input.read_head(&mut t, LONG, LONG, false, &mut || false, &mut || {}).unwrap();
        let head = input.take_head(end).to_vec();
        let mut headers = [const { MaybeUninit::uninit() }; 100];
        let req = request::parse(&head, &mut headers, &LIMITS).unwrap();
        input.discard_body(&mut t, &req, 100, LONG, 0).unwrap();
        assert_eq!(t.written, b"HTTP/1.1 100 Continue\r\n\r\n");
        assert_eq!(input.bytes_in(), stream.len() as u64);
    }
}
