//! The read side of a connection: one buffer, the bytes of the next request head in
//! it, and what follows. Nothing here waits.
//!
//! A worker holds many connections and serves whichever has a whole head
//! (`worker::events`), so reads only take what has arrived: [`Input::try_head`] says
//! whether a whole head is there yet, and the bytes of one that is not stay with
//! their connection ([`Input::unread`], then the connection's own [`Buffer`]) until
//! more come. [`Input::drop_body`] drops a request body that is all there (for the
//! locations that need none) or says that it is not, and the answer closes the
//! connection; a body a location reads is taken from here by the event loop
//! ([`Input::consume`], then [`Input::read_past`] into the worker's scratch); [`Input::drain`] reads and drops
//! what a closing client still sends, so it reads our answer rather than a reset.
//! Everything goes through a [`Transport`], so unit tests and the `framing` fuzz
//! target run this code on bytes in memory.

use std::io;

use super::transport::Transport;
use crate::http::body;
use crate::http::proxy_protocol;
use crate::http::request::{self, Framing, HttpError, Limits, Request};

/// The buffer's first size: more than nearly every request head.
const INPUT_START: usize = 4096;

/// Room beyond `http.max_header_size` for the start of a pipelined request.
pub const PIPELINE_ROOM: usize = 4096;

/// The most body bytes read (beyond those already buffered) to find where a body
/// ends, so that the connection stays in step and kept alive. A larger body, or one
/// not all sent yet, is not waited for: the answer closes the connection.
pub const DROP_MAX: usize = 64 * 1024;

/// The most bytes a lingering close reads and drops.
pub const LINGER_BYTES: usize = 64 * 1024;

/// Why no head came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// The client closed (or the connection broke): close quietly.
    Quiet,
    Http(HttpError),
}

/// Why no PROXY protocol header came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyFail {
    /// The client closed (or the connection broke); `partial`: after some bytes of
    /// a header.
    Closed { partial: bool },
    /// What came cannot be a header.
    Invalid(proxy_protocol::ProxyError),
}

/// A connection's own bytes read and not used yet (a head in part, pipelined
/// requests): moved between the connection and the worker's [`Input`], never copied.
/// Unread bytes are `bytes[start..end]`; an empty one owns no memory.
#[derive(Debug, Default)]
pub struct Buffer {
    bytes: Vec<u8>,
    start: usize,
    end: usize,
}

impl Buffer {
    /// A buffer holding `unread` (a connection taken over from another worker).
    pub fn holding(unread: Vec<u8>) -> Buffer {
        let end = unread.len();
        Buffer { bytes: unread, start: 0, end }
    }

    /// The bytes read and not used yet.
    pub fn unread(&self) -> &[u8] {
        &self.bytes[self.start..self.end]
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
}

/// The read side of the connection being served: its [`Buffer`] for the turn, and
/// what is known of the request in it.
pub struct Input {
    /// Grows (doubling from [`INPUT_START`] bytes) to `limit`: the largest head plus
    /// room for the start of a pipelined one (and, to drop a body, up to
    /// [`DROP_MAX`] more).
    buf: Buffer,
    /// A buffer to serve the next connection with when this one keeps `buf`.
    spare: Vec<u8>,
    limit: usize,
    limits: Limits,
    /// Bytes of the current request read so far (head and body).
    bytes_in: u64,
}

impl Input {
    /// A reader for heads within `limits`.
    pub fn new(limits: Limits) -> Input {
        let limit = limits.max_header_size + PIPELINE_ROOM;
        let buf = Buffer { bytes: vec![0; INPUT_START.min(limit)], start: 0, end: 0 };
        Input { buf, spare: Vec::new(), limit, limits, bytes_in: 0 }
    }

    /// Takes up a connection with the bytes its earlier turns left (`held`, moved
    /// in; none: the worker's own buffer serves).
    pub fn begin(&mut self, held: Buffer) {
        if held.is_empty() {
            self.buf.start = 0;
            self.buf.end = 0;
        } else {
            let own = std::mem::replace(&mut self.buf, held);
            if own.bytes.capacity() > self.spare.capacity() {
                self.spare = own.bytes;
            }
        }
        self.bytes_in = 0;
    }

    /// Ends the turn: the unread bytes, in the buffer that holds them, go with the
    /// connection (an empty [`Buffer`] when there are none: the worker keeps its own).
    pub fn end(&mut self) -> Buffer {
        if self.buf.is_empty() {
            return Buffer::default();
        }
        let mut next = std::mem::take(&mut self.spare);
        if next.len() < INPUT_START.min(self.limit) {
            next.resize(INPUT_START.min(self.limit), 0);
        }
        std::mem::replace(&mut self.buf, Buffer { bytes: next, start: 0, end: 0 })
    }

    /// Bytes of the current request read so far (head and body).
    pub fn bytes_in(&self) -> u64 {
        self.bytes_in
    }

    /// True if bytes the client sent are still unread.
    pub fn has_unread(&self) -> bool {
        self.buf.start < self.buf.end
    }

    /// The bytes read from the transport and not yet used.
    pub fn unread(&self) -> &[u8] {
        &self.buf.bytes[self.buf.start..self.buf.end]
    }

    /// Where the unread bytes end (a [`Input::take_head`] of all of them).
    pub fn unread_end(&self) -> usize {
        self.buf.end
    }

    /// Takes the unread bytes out (a TLS connection's first records, read with its
    /// PROXY header).
    pub fn take_unread(&mut self) -> Vec<u8> {
        let bytes = self.unread().to_vec();
        self.buf.start = self.buf.end;
        bytes
    }

    /// The request line of what is buffered (for a head refused before it was
    /// complete).
    pub fn pending_line(&self) -> &[u8] {
        request::request_line(&self.buf.bytes[self.buf.start..self.buf.end])
    }

    /// Takes the head that ends at `head_end` (from [`Input::try_head`]) out of the
    /// buffer, counting it as this request's first bytes.
    pub fn take_head(&mut self, head_end: usize) -> &[u8] {
        let head = &self.buf.bytes[self.buf.start..head_end];
        self.bytes_in = head.len() as u64;
        self.buf.start = head_end;
        head
    }

    /// Reads what has arrived into the buffer, up to `cap` bytes of it in all;
    /// `Ok(0)` is end of stream, `WouldBlock` nothing more yet.
    fn fill(&mut self, t: &mut impl Transport, cap: usize) -> io::Result<usize> {
        if self.buf.start == self.buf.end {
            self.buf.start = 0;
            self.buf.end = 0;
        } else if self.buf.end == self.buf.bytes.len() && self.buf.start > 0 {
            self.buf.bytes.copy_within(self.buf.start..self.buf.end, 0);
            self.buf.end -= self.buf.start;
            self.buf.start = 0;
        }
        if self.buf.end == self.buf.bytes.len() && self.buf.bytes.len() < cap {
            // More than the buffer holds so far: grow it, up to the cap.
            let grown = (self.buf.bytes.len() * 2).min(cap);
            self.buf.bytes.resize(grown, 0);
        }
        if self.buf.end == self.buf.bytes.len() {
            return Err(io::ErrorKind::OutOfMemory.into());
        }
        loop {
            match t.read(&mut self.buf.bytes[self.buf.end..]) {
                Ok(n) => {
                    self.buf.end += n;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Where the next head ends, if all of it is buffered or has arrived;
    /// `Ok(None)`: not yet (what came stays in [`Input::unread`]). The limits are
    /// checked on what has come so far, so an oversized head is refused as soon as
    /// it is one.
    pub fn try_head(&mut self, t: &mut impl Transport) -> Result<Option<usize>, HeadError> {
        let mut scanned = 0;
        self.bytes_in = 0;
        loop {
            if self.buf.end > self.buf.start {
                let window = &self.buf.bytes[self.buf.start..self.buf.end];
                if let Some(n) = request::find_head_end(window, scanned) {
                    return Ok(Some(self.buf.start + n));
                }
                scanned = window.len();
                let refused = match request::check_partial(window, &self.limits) {
                    Err(e) => Some(e),
                    Ok(()) if self.buf.start == 0 && self.buf.end >= self.limit => Some(HttpError::HeadersTooLarge),
                    Ok(()) => None,
                };
                if let Some(e) = refused {
                    // What came of a head that is refused counts as its bytes in.
                    self.bytes_in = (self.buf.end - self.buf.start) as u64;
                    return Err(HeadError::Http(e));
                }
            }
            match self.fill(t, self.limit) {
                Ok(0) => return Err(HeadError::Quiet),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(_) => return Err(HeadError::Quiet),
            }
        }
    }

    /// Counts `n` bytes of the current request read in earlier turns (a body the
    /// event loop read while its connection waited in the set).
    pub fn count(&mut self, n: u64) {
        self.bytes_in += n;
    }

    /// Counts `n` bytes taken from [`Input::unread`] (a request body's) as read.
    pub fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.buf.end - self.buf.start);
        self.buf.start += n;
        self.bytes_in += n as u64;
    }

    /// Reads what has arrived past the buffer, straight into `scratch` (a request
    /// body's bytes, which the caller takes from there: a large upload moves in
    /// reads of the scratch's size, not the buffer's); only when nothing is left
    /// unread. `Ok(0)` is end of stream.
    pub fn read_past(&mut self, t: &mut impl Transport, scratch: &mut [u8]) -> io::Result<usize> {
        debug_assert!(!self.has_unread());
        loop {
            match t.read(scratch) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }

    /// Counts `n` bytes taken from a [`Input::read_past`] scratch as read, and keeps
    /// `rest`, what followed them (the next request), as unread.
    pub fn took_past(&mut self, n: usize, rest: &[u8]) {
        self.bytes_in += n as u64;
        if rest.is_empty() {
            return;
        }
        self.buf.start = 0;
        self.buf.end = rest.len();
        if self.buf.bytes.len() < rest.len() {
            self.buf.bytes.resize(rest.len(), 0);
        }
        self.buf.bytes[..rest.len()].copy_from_slice(rest);
    }

    /// Reads a PROXY protocol header from what has arrived (`proxy_protocol`):
    /// `Ok(None)` when not all of it is there yet (what came stays in
    /// [`Input::unread`]), else the header, taken out of the buffer; what follows it
    /// is the first request.
    pub fn try_proxy_header(&mut self, t: &mut impl Transport) -> Result<Option<proxy_protocol::Header>, ProxyFail> {
        let cap = self.limit.max(proxy_protocol::MAX_HEADER);
        loop {
            match proxy_protocol::parse(&self.buf.bytes[self.buf.start..self.buf.end]) {
                Ok(Some((len, header))) => {
                    self.buf.start += len;
                    return Ok(Some(header));
                }
                Ok(None) => {}
                Err(e) => return Err(ProxyFail::Invalid(e)),
            }
            match self.fill(t, cap) {
                Ok(0) => return Err(ProxyFail::Closed { partial: self.has_unread() }),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(_) => return Err(ProxyFail::Closed { partial: self.has_unread() }),
            }
        }
    }

    /// Drops the body of `req` if all of it is buffered or arrives without waiting
    /// (at most [`DROP_MAX`] more bytes): `Ok(true)`, and the next request starts
    /// where it should. `Ok(false)`: the body is not all there and will not be
    /// waited for, so the connection must close after the answer. An error is a
    /// body refused by its framing or size (`max`).
    pub fn drop_body(&mut self, t: &mut impl Transport, req: &Request<'_>, max: u64) -> Result<bool, HttpError> {
        if req.framing == Framing::None {
            return Ok(true);
        }
        let cap = self.limit + DROP_MAX;
        loop {
            let buffered = &self.buf.bytes[self.buf.start..self.buf.end];
            if let Some(n) = body::buffered_len(buffered, req.framing, max)? {
                self.buf.start += n;
                self.bytes_in += n as u64;
                return Ok(true);
            }
            if let Framing::Length(n) = req.framing
                && n > (buffered.len() + DROP_MAX) as u64
            {
                return Ok(false);
            }
            match self.fill(t, cap) {
                Ok(0) => return Ok(false),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Not there yet, or more than DROP_MAX: not waited for.
                Err(_) => return Ok(false),
            }
        }
    }

    /// Reads and drops what a closing client still sends (our side is shut for
    /// writing). True when done with it: it closed, broke, or sent `LINGER_BYTES`
    /// in all (`drained` counts them).
    pub fn drain(&mut self, t: &mut impl Transport, drained: &mut usize) -> bool {
        self.buf.start = 0;
        self.buf.end = 0;
        loop {
            match t.read(&mut self.buf.bytes[..]) {
                Ok(0) => return true,
                Ok(n) => {
                    *drained += n;
                    if *drained >= LINGER_BYTES {
                        return true;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
                Err(_) => return true,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::mem::MaybeUninit;

    use super::*;
    use crate::serve::transport::Memory;

    const LIMITS: Limits =
        Limits { max_request_line: 8190, max_header_size: 16384, max_header_line: 8192, max_headers: 100 };

    /// Feeds `stream` in pieces of `piece` bytes, each after a "nothing yet", until a
    /// head is whole; then parses it and drops its body. Returns what is left unread
    /// (the next pipelined request) or the error.
    fn one_request(stream: &[u8], piece: usize) -> Result<Vec<u8>, String> {
        let mut t = Memory::new(stream, piece);
        let mut input = Input::new(LIMITS);
        input.begin(Buffer::default());
        let end = loop {
            match input.try_head(&mut t).map_err(|e| format!("{e:?}"))? {
                Some(end) => break end,
                None => continue, // the connection would wait in the worker's set
            }
        };
        let head = input.take_head(end).to_vec();
        let mut headers = [const { MaybeUninit::uninit() }; 100];
        let req = request::parse(&head, &mut headers, &LIMITS).map_err(|e| format!("{e:?}"))?;
        // A body is dropped only if it is all there: deliver the rest of the stream.
        let mut rest: Vec<u8> = t.pieces.drain(..).flatten().collect();
        let mut t = Memory::new(&rest, 1 << 20);
        if !input.drop_body(&mut t, &req, 1 << 20).map_err(|e| format!("{e:?}"))? {
            return Err("body not all there".into());
        }
        rest = input.unread().to_vec();
        rest.extend(t.pieces.into_iter().flatten());
        Ok(rest)
    }

    const CHUNKED: &[u8] = b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";

    #[test]
    fn bodies_that_are_all_there_are_dropped_to_the_next_request() {
        for piece in [1, 3, 7, 4096] {
            let stream =
                [CHUNKED, b"5;ext=1\r\nhello\r\n10\r\n0123456789abcdef\r\n0\r\nX-T: 1\r\n\r\nGET /next"].concat();
            assert_eq!(one_request(&stream, piece).unwrap(), b"GET /next", "pieces of {piece}");
            let stream = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET /next";
            assert_eq!(one_request(stream, piece).unwrap(), b"GET /next", "pieces of {piece}");
        }
    }

    #[test]
    fn bodies_not_all_there_are_not_waited_for() {
        // Cut short: the rest never comes, and nothing waits for it.
        assert_eq!(one_request(&[CHUNKED, b"5\r\nhel"].concat(), 4096).unwrap_err(), "body not all there");
        let big = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1000000\r\n\r\nxx";
        assert_eq!(one_request(big, 4096).unwrap_err(), "body not all there");
    }

    #[test]
    fn bad_chunks_are_refused() {
        let bad = |body: &[u8]| one_request(&[CHUNKED, body].concat(), 4096).unwrap_err();
        // An empty size would end the body early and smuggle the rest in as a request.
        assert!(bad(b"\r\nGET /smuggled HTTP/1.1\r\n\r\n").contains("bad chunk size line"));
        assert!(bad(b"3\r\nhello\r\n0\r\n\r\n").contains("chunk data longer than its size"));
        assert!(bad(b"200000\r\n").contains("BodyTooLarge"));
    }

    #[test]
    fn heads_arrive_in_pieces_and_refusals_count_their_bytes() {
        for piece in [1, 2, 5, 4096] {
            assert_eq!(one_request(b"\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\nrest", piece).unwrap(), b"rest");
        }
        let mut t = Memory::new(b"GET / HTTP/1.1\r\nHost: a\r\n", 4096);
        t.pieces.push_back(Vec::new());
        let mut input = Input::new(LIMITS);
        input.begin(Buffer::default());
        assert_eq!(input.try_head(&mut t), Ok(None), "half a head: not yet");
        assert_eq!(input.unread(), b"GET / HTTP/1.1\r\nHost: a\r\n", "kept for later");
        assert_eq!(input.try_head(&mut t), Err(HeadError::Quiet), "the client closed halfway");
        let long = [b"GET /".as_slice(), &[b'a'; 9000]].concat();
        let mut t = Memory::new(&long, 4096);
        input.begin(Buffer::default());
        let e = loop {
            match input.try_head(&mut t) {
                Ok(None) => continue,
                other => break other.unwrap_err(),
            }
        };
        assert_eq!(e, HeadError::Http(HttpError::UriTooLong));
        assert_eq!(input.pending_line(), &long[..input.bytes_in() as usize]);
    }

    #[test]
    fn a_held_connection_resumes_with_its_pending_bytes() {
        let mut input = Input::new(LIMITS);
        input.begin(Buffer::holding(b"GET / HTTP/1.1\r\nHo".to_vec()));
        let mut t = Memory::new(b"st: a\r\n\r\n", 4096);
        let end = input.try_head(&mut t).unwrap().expect("whole now");
        assert_eq!(input.take_head(end), b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
    }

    #[test]
    fn a_proxy_header_in_pieces_then_the_request() {
        use crate::http::proxy_protocol::{ProxyError, v2_header};
        let peer = "192.0.2.7:40000".parse().unwrap();
        let header = v2_header(peer, "198.51.100.1:80".parse().unwrap(), &[4, 0, 2, 0, 0]);
        for piece in [1, 5, 17, 4096] {
            let stream = [&header[..], b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"].concat();
            let mut t = Memory::new(&stream, piece);
            let mut input = Input::new(LIMITS);
            input.begin(Buffer::default());
            // Memory never blocks: the header is whole after one call.
            let got = input.try_proxy_header(&mut t).unwrap().expect("a whole header");
            assert_eq!(got.source, Some(peer));
            let end = loop {
                if let Some(end) = input.try_head(&mut t).unwrap() {
                    break end;
                }
            };
            assert_eq!(input.take_head(end), b"GET / HTTP/1.1\r\nHost: a\r\n\r\n", "pieces of {piece}");
        }
        // Half a header, then a wait: kept; then the client goes.
        let mut t = Memory::new(&header[..9], 4096);
        t.pieces.push_back(Vec::new());
        let mut input = Input::new(LIMITS);
        input.begin(Buffer::default());
        assert_eq!(input.try_proxy_header(&mut t), Ok(None));
        assert_eq!(input.unread(), &header[..9]);
        assert_eq!(input.try_proxy_header(&mut t), Err(ProxyFail::Closed { partial: true }));
        let mut t = Memory::new(b"GET / HTTP/1.1\r\n\r\n", 4096);
        input.begin(Buffer::default());
        assert_eq!(input.try_proxy_header(&mut t), Err(ProxyFail::Invalid(ProxyError::BadSignature)));
    }

    #[test]
    fn expect_continue_gets_no_interim_answer() {
        let stream = b"PUT / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok";
        let mut t = Memory::new(stream, 4096);
        let mut input = Input::new(LIMITS);
        input.begin(Buffer::default());
        let end = input.try_head(&mut t).unwrap().unwrap();
        let head = input.take_head(end).to_vec();
        let mut headers = [const { MaybeUninit::uninit() }; 100];
        let req = request::parse(&head, &mut headers, &LIMITS).unwrap();
        assert!(input.drop_body(&mut t, &req, 100).unwrap());
        assert!(t.written.is_empty(), "no 100 Continue: the body is not needed");
        assert_eq!(input.bytes_in(), stream.len() as u64);
    }

    #[test]
    fn draining_stops_at_the_end_or_the_budget() {
        let mut input = Input::new(LIMITS);
        let mut drained = 0;
        let mut t = Memory::new(&[b'x'; 100], 10);
        assert!(input.drain(&mut t, &mut drained), "the client closed");
        assert_eq!(drained, 100);
        let mut t = Memory::new(&[b'x'; 100], 10);
        t.pieces.insert(3, Vec::new());
        drained = 0;
        assert!(!input.drain(&mut t, &mut drained), "nothing more yet");
        assert_eq!(drained, 30);
    }
}
