//! A request body as the worker's event loop reads it, for a location that needs
//! the body whole before it answers (a CGI script, a FastCGI application).
//!
//! A connection whose request needs its body parks with an [`Incoming`]: each time
//! the socket has input, what arrived is decoded (`Content-Length` or chunked) and
//! kept, in memory up to `http.client_body_buffer`, past that in a temporary file
//! (`O_TMPFILE`: it has no name, so nothing is left behind, not even after a crash)
//! in a folder only the workers' user can open. Only a whole body sends the request
//! on to its handler, so a client uploading slowly costs a socket and a buffer, not
//! a worker. `http.max_body_size` bounds it (a declared length past it is refused
//! before a byte of the body is read).
//!
//! What a body may cost while it comes is bounded three ways: time ([`Pace`]: the
//! whole body within `body_timeout`, longer by what `body_min_rate` earns but never
//! past `body_timeout_max`, and no silence longer than `body_idle_timeout` between
//! two reads), and the bytes kept in temporary files at once ([`Disk`]: per worker,
//! `body_spool_max_worker`, and for the whole server, `body_spool_max`; a body that
//! would pass either is refused, 503). Each worker counts its bytes in its scoreboard
//! slot, so the server's count is the sum of the slots, and a worker that dies takes
//! its count with it (the master clears the slot; the kernel frees the files).

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use crate::http::request::{Framing, HttpError};

use super::child::Stdin;
use super::spool::{Disk, DiskFull, temp_file};

/// Longest chunk-size line (with extensions).
const MAX_CHUNK_LINE: usize = 1024;
/// Largest trailer section.
const MAX_TRAILER: usize = 8192;

/// A whole request body.
pub enum RequestBody {
    Memory(Vec<u8>),
    /// In an unnamed temporary file, `len` bytes.
    File(File, u64),
}

impl RequestBody {
    pub fn len(&self) -> u64 {
        match self {
            RequestBody::Memory(v) => v.len() as u64,
            RequestBody::File(_, n) => *n,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The body as a script's stdin, its own copy (a file's descriptor again): the
    /// script may still read it while its answer is sent.
    pub fn stdin(&self) -> io::Result<Stdin> {
        Ok(match self {
            RequestBody::Memory(v) if v.is_empty() => Stdin::Empty,
            RequestBody::Memory(v) => Stdin::Bytes(v.clone()),
            RequestBody::File(f, n) => Stdin::File(f.try_clone()?, *n),
        })
    }
}

/// How bodies are kept: the limits and where the temporary files go.
#[derive(Debug, Clone)]
pub struct Keep {
    /// Bytes kept in memory before a temporary file takes the body.
    pub memory: usize,
    /// `http.max_body_size`.
    pub max: u64,
    /// The folder for temporary files (made by the worker, mode 0700).
    pub dir: PathBuf,
    /// Where the bytes in temporary files are counted, and their caps.
    pub disk: Disk,
}

/// How long a body may take (`http.body_*`): see [`Incoming::deadline_ms`].
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// `body_timeout`: the whole body, from its start…
    pub timeout: Duration,
    /// …longer by a second for every `body_min_rate` bytes received (0: never)…
    pub min_rate: u64,
    /// …but never longer than `body_timeout_max` from its start.
    pub max: Duration,
    /// `body_idle_timeout`: the longest silence between two reads that bring bytes
    /// (nginx's `client_body_timeout`).
    pub idle: Duration,
}

/// Why a body was not read whole.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("{0}")]
    Http(HttpError),
    #[error("the client closed the connection inside the request body")]
    Closed,
    #[error("keeping the request body failed: {0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Spool(DiskFull),
}

/// The decoder's place in a chunked body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Reading a size line (bytes of it so far).
    Size,
    /// `left` data bytes of a chunk.
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// The trailer section (bytes of it so far).
    Trailer,
}

/// A body being read.
pub struct Incoming {
    /// The request's head, to be parsed again once the body is whole.
    pub head: Vec<u8>,
    framing: Decode,
    kept: Store,
    keep: Keep,
    /// Bytes of a chunk-size line or the trailers not yet whole.
    line: Vec<u8>,
    /// Bytes of the message read off the wire (framing included).
    pub wire_bytes: u64,
    /// When the body began (`clock::now_ms`).
    started_ms: u64,
    /// When bytes of it last came (`clock::now_ms`; its start before the first).
    last_ms: u64,
}

enum Decode {
    Length(u64),
    Chunked(Chunk),
}

enum Store {
    Memory(Vec<u8>),
    /// In a temporary file, `n` bytes, counted in the [`Disk`] until the file goes.
    File(File, u64),
}

impl Incoming {
    /// Starts reading the body of the request whose head is `head` (with
    /// `framing`); a declared length past the limit is refused now.
    pub fn new(head: Vec<u8>, framing: Framing, keep: Keep) -> Result<Incoming, HttpError> {
        let framing = match framing {
            Framing::None => Decode::Length(0),
            Framing::Length(n) if n > keep.max => return Err(HttpError::BodyTooLarge),
            Framing::Length(n) => Decode::Length(n),
            Framing::Chunked => Decode::Chunked(Chunk::Size),
        };
        let now = crate::base::clock::now_ms();
        let first = match framing {
            Decode::Length(n) => (n as usize).min(keep.memory),
            Decode::Chunked(_) => 4096,
        };
        Ok(Incoming {
            head,
            framing,
            kept: Store::Memory(Vec::with_capacity(first)),
            keep,
            line: Vec::new(),
            wire_bytes: 0,
            started_ms: now,
            last_ms: now,
        })
    }

    /// When the wait for the rest of the body runs out: the sooner of its whole
    /// time ([`Incoming::whole_by_ms`]) and `pace.idle` after the last bytes came.
    pub fn deadline_ms(&self, pace: &Pace) -> u64 {
        self.whole_by_ms(pace).min(self.last_ms.saturating_add(pace.idle.as_millis() as u64))
    }

    /// When the client must have sent the whole body: `pace.timeout` from its
    /// start, plus a second for every `pace.min_rate` bytes received (`min_rate`
    /// 0: no extension), and never later than `pace.max` from its start. A client
    /// that sends a burst and then stops earns its extension once and is held to
    /// `pace.idle` meanwhile.
    pub fn whole_by_ms(&self, pace: &Pace) -> u64 {
        let earned = self.wire_bytes.saturating_mul(1000).checked_div(pace.min_rate).unwrap_or(0);
        let wait = (pace.timeout.as_millis() as u64).saturating_add(earned).min(pace.max.as_millis() as u64);
        self.started_ms.saturating_add(wait)
    }

    /// Why the wait ran out at `now_ms`: the silence, or the whole time (the
    /// error log's words).
    pub fn late_why(&self, pace: &Pace, now_ms: u64) -> &'static str {
        if now_ms >= self.last_ms.saturating_add(pace.idle.as_millis() as u64) {
            "nothing of it came for body_idle_timeout"
        } else {
            "it did not come whole within body_timeout (with body_min_rate, at most body_timeout_max)"
        }
    }

    /// Body bytes kept so far.
    pub fn len(&self) -> u64 {
        match &self.kept {
            Store::Memory(v) => v.len() as u64,
            Store::File(_, n) => *n,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes of a body of known length still to come (None: chunked, its
    /// end not known yet).
    pub fn left(&self) -> Option<u64> {
        match self.framing {
            Decode::Length(n) => Some(n),
            Decode::Chunked(_) => None,
        }
    }

    /// Whether the body is whole.
    pub fn done(&self) -> bool {
        matches!(self.framing, Decode::Length(0))
    }

    /// The whole body (after [`Incoming::take`] said it is done). It leaves the
    /// spool's count: it is the request now being served, one at a time in a worker,
    /// and `max_body_size` at most.
    pub fn into_body(mut self) -> RequestBody {
        match std::mem::replace(&mut self.kept, Store::Memory(Vec::new())) {
            Store::Memory(v) => RequestBody::Memory(v),
            Store::File(f, n) => {
                self.keep.disk.give_back(n);
                RequestBody::File(f, n)
            }
        }
    }

    /// Takes what `bytes` holds of the body; returns how many bytes were used (the
    /// rest is the next request). The body is whole when [`Incoming::done`].
    pub fn take(&mut self, bytes: &[u8]) -> Result<usize, BodyError> {
        let mut used = 0;
        while used < bytes.len() && !self.done() {
            let rest = &bytes[used..];
            let n = match &mut self.framing {
                Decode::Length(left) => {
                    let n = rest.len().min(usize::try_from(*left).unwrap_or(usize::MAX));
                    *left -= n as u64;
                    self.keep_bytes(&rest[..n])?;
                    n
                }
                Decode::Chunked(state) => {
                    let state = *state;
                    self.chunked(state, rest)?
                }
            };
            used += n;
        }
        if used > 0 {
            self.wire_bytes += used as u64;
            self.last_ms = crate::base::clock::now_ms();
        }
        Ok(used)
    }

    /// One step of a chunked body: the bytes used.
    fn chunked(&mut self, state: Chunk, rest: &[u8]) -> Result<usize, BodyError> {
        let bad = |why| BodyError::Http(HttpError::BadRequest(why));
        match state {
            Chunk::Size => {
                let Some(nl) = memchr::memchr(b'\n', rest) else {
                    self.line.extend_from_slice(rest);
                    if self.line.len() > MAX_CHUNK_LINE {
                        return Err(bad("chunk line too long"));
                    }
                    return Ok(rest.len());
                };
                self.line.extend_from_slice(&rest[..=nl]);
                let line = std::mem::take(&mut self.line);
                if line.len() > MAX_CHUNK_LINE {
                    return Err(bad("chunk line too long"));
                }
                let size = match httparse::parse_chunk_size(&line) {
                    Ok(httparse::Status::Complete((_, size)))
                        if line.ends_with(b"\r\n") && line[0].is_ascii_hexdigit() =>
                    {
                        size
                    }
                    _ => return Err(bad("bad chunk size line")),
                };
                if self.len().saturating_add(size) > self.keep.max {
                    return Err(BodyError::Http(HttpError::BodyTooLarge));
                }
                self.framing = Decode::Chunked(if size == 0 { Chunk::Trailer } else { Chunk::Data(size) });
                Ok(nl + 1)
            }
            Chunk::Data(left) => {
                let n = rest.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                self.keep_bytes(&rest[..n])?;
                let left = left - n as u64;
                self.framing = Decode::Chunked(if left == 0 { Chunk::DataEnd } else { Chunk::Data(left) });
                Ok(n)
            }
            Chunk::DataEnd => {
                // The CRLF, perhaps split over two reads.
                let take = (2 - self.line.len()).min(rest.len());
                self.line.extend_from_slice(&rest[..take]);
                if self.line.len() == 2 {
                    if self.line != b"\r\n" {
                        return Err(bad("chunk data longer than its size"));
                    }
                    self.line.clear();
                    self.framing = Decode::Chunked(Chunk::Size);
                }
                Ok(take)
            }
            Chunk::Trailer => {
                let before = self.line.len();
                self.line.extend_from_slice(&rest[..rest.len().min(MAX_TRAILER + 4)]);
                match crate::http::request::trailer_end(&self.line, MAX_TRAILER) {
                    Ok(Some(end)) => {
                        self.line.clear();
                        self.framing = Decode::Length(0);
                        Ok(end - before)
                    }
                    Ok(None) => Ok(self.line.len() - before),
                    Err(e) => Err(BodyError::Http(e)),
                }
            }
        }
    }

    fn keep_bytes(&mut self, bytes: &[u8]) -> Result<(), BodyError> {
        if let Store::Memory(v) = &mut self.kept {
            if v.len() + bytes.len() <= self.keep.memory {
                v.extend_from_slice(bytes);
                return Ok(());
            }
            let spilled = v.len() as u64;
            self.keep.disk.take(spilled + bytes.len() as u64).map_err(BodyError::Spool)?;
            // Counted with the bytes that follow: given back if the file fails.
            if let Err(e) = self.spill(false) {
                self.keep.disk.give_back(spilled + bytes.len() as u64);
                return Err(e.into());
            }
        } else {
            self.keep.disk.take(bytes.len() as u64).map_err(BodyError::Spool)?;
        }
        if let Store::File(f, n) = &mut self.kept {
            // `n` is what the spool counts for this file, a failed write's bytes
            // too: all given back when the reader goes, which the error makes soon.
            *n += bytes.len() as u64;
            f.write_all(bytes)?;
        }
        Ok(())
    }

    /// Moves what memory holds of the body into a temporary file; `count`: its bytes
    /// join the spool's count here (else the caller counted them).
    fn spill(&mut self, count: bool) -> io::Result<&File> {
        if let Store::Memory(v) = &self.kept {
            let mut file = temp_file(&self.keep.dir)?;
            file.write_all(v)?;
            let n = v.len() as u64;
            if count {
                self.keep.disk.force(n);
            }
            self.kept = Store::File(file, n);
        }
        match &self.kept {
            Store::File(f, _) => Ok(f),
            Store::Memory(_) => unreachable!("just moved to a file"),
        }
    }

    /// For another worker to go on reading the body (`crate::fork::handover`): what is
    /// kept goes to a file (one in memory is written to one), whose descriptor
    /// travels beside the socket; the rest of the state is written to `out`, for
    /// [`Incoming::thaw`]. This reader stays whole: if the connection cannot be
    /// sent, it goes on here.
    pub fn freeze(&mut self, out: &mut Vec<u8>) -> io::Result<&File> {
        let (tag, value) = match self.framing {
            Decode::Length(n) => (0, n),
            Decode::Chunked(Chunk::Size) => (1, 0),
            Decode::Chunked(Chunk::Data(left)) => (2, left),
            Decode::Chunked(Chunk::DataEnd) => (3, 0),
            Decode::Chunked(Chunk::Trailer) => (4, 0),
        };
        out.clear();
        out.extend_from_slice(&(self.head.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.head);
        out.push(tag);
        out.extend_from_slice(&value.to_le_bytes());
        out.extend_from_slice(&(self.line.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.line);
        out.extend_from_slice(&self.wire_bytes.to_le_bytes());
        let now = crate::base::clock::now_ms();
        out.extend_from_slice(&now.saturating_sub(self.started_ms).to_le_bytes());
        out.extend_from_slice(&now.saturating_sub(self.last_ms).to_le_bytes());
        out.extend_from_slice(&self.len().to_le_bytes());
        self.spill(true)
    }

    /// A reader another worker froze ([`Incoming::freeze`]), with the file of what
    /// it kept; `None` if `state` is not one.
    pub fn thaw(state: &[u8], mut file: File, keep: Keep) -> Option<Incoming> {
        let mut c = Cursor(state);
        let head = c.bytes_u32()?.to_vec();
        let (tag, value) = (c.bytes(1)?[0], c.u64()?);
        let framing = match tag {
            0 => Decode::Length(value),
            1 => Decode::Chunked(Chunk::Size),
            2 if value > 0 => Decode::Chunked(Chunk::Data(value)),
            3 => Decode::Chunked(Chunk::DataEnd),
            4 => Decode::Chunked(Chunk::Trailer),
            _ => return None,
        };
        let line = c.bytes_u32()?.to_vec();
        let (wire_bytes, ago, quiet, kept) = (c.u64()?, c.u64()?, c.u64()?, c.u64()?);
        if !c.0.is_empty() {
            return None;
        }
        // Appends go on where the other worker stopped.
        std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(kept)).ok()?;
        // Counted here now, whatever the caps: the other worker gives it back.
        keep.disk.force(kept);
        let now = crate::base::clock::now_ms();
        Some(Incoming {
            head,
            framing,
            kept: Store::File(file, kept),
            keep,
            line,
            wire_bytes,
            started_ms: now.saturating_sub(ago),
            last_ms: now.saturating_sub(quiet),
        })
    }
}

/// A body refused, closed or handed over leaves the spool's count with its file.
impl Drop for Incoming {
    fn drop(&mut self) {
        if let Store::File(_, n) = self.kept {
            self.keep.disk.give_back(n);
        }
    }
}

/// Reads a frozen reader's fields in order.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let b = self.0.get(..n)?;
        self.0 = &self.0[n..];
        Some(b)
    }

    /// Bytes after their length (four bytes).
    fn bytes_u32(&mut self) -> Option<&'a [u8]> {
        let n = u32::from_le_bytes(self.bytes(4)?.try_into().ok()?);
        self.bytes(n as usize)
    }

    fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(8)?.try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;
    use std::path::Path;
    use std::sync::atomic::Ordering::Relaxed;

    use super::*;
    use crate::scoreboard::Slot;

    fn keep(dir: &Path, memory: usize) -> Keep {
        Keep { memory, max: 1 << 20, dir: dir.to_path_buf(), disk: disk(u64::MAX, u64::MAX).0 }
    }

    /// A count in the first of two fresh scoreboard slots.
    fn disk(max_worker: u64, max: u64) -> (Disk, &'static [Slot]) {
        let slots = crate::scoreboard::Scoreboard::new(2).unwrap().slots;
        (Disk::bodies(&slots[0], slots).capped(max_worker, max), slots)
    }

    fn contents(b: RequestBody) -> Vec<u8> {
        match b {
            RequestBody::Memory(v) => v,
            RequestBody::File(f, n) => {
                let mut v = vec![0; n as usize];
                f.read_exact_at(&mut v, 0).unwrap();
                v
            }
        }
    }

    #[test]
    fn a_length_body_stops_at_its_end_whatever_the_pieces() {
        let d = tempfile::tempdir().unwrap();
        let wire = b"hello worldGET / HTTP/1.1\r\n";
        for piece in 1..wire.len() {
            let mut inc = Incoming::new(Vec::new(), Framing::Length(11), keep(d.path(), 4)).unwrap();
            let mut used = 0;
            for part in wire.chunks(piece) {
                if inc.done() {
                    break;
                }
                used += inc.take(part).unwrap();
            }
            assert!(inc.done());
            assert_eq!(used, 11);
            assert_eq!(contents(inc.into_body()), b"hello world");
        }
    }

    #[test]
    fn chunked_bodies_are_decoded_in_any_pieces() {
        let d = tempfile::tempdir().unwrap();
        let wire = b"5\r\nhello\r\n6;x=1\r\n world\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        for piece in 1..wire.len() {
            let mut inc = Incoming::new(Vec::new(), Framing::Chunked, keep(d.path(), 1 << 20)).unwrap();
            let mut used = 0;
            for part in wire.chunks(piece) {
                let mut off = 0;
                while off < part.len() && !inc.done() {
                    let n = inc.take(&part[off..]).unwrap();
                    off += n;
                    used += n;
                }
            }
            assert!(inc.done(), "piece {piece}");
            assert_eq!(used, wire.len() - 4, "piece {piece}");
            assert_eq!(contents(inc.into_body()), b"hello world");
        }
    }

    #[test]
    fn a_large_body_goes_to_a_nameless_file() {
        let d = tempfile::tempdir().unwrap();
        let body: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
        let mut inc = Incoming::new(Vec::new(), Framing::Length(body.len() as u64), keep(d.path(), 1000)).unwrap();
        for part in body.chunks(7000) {
            inc.take(part).unwrap();
        }
        assert!(inc.done());
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0, "the file has no name");
        let b = inc.into_body();
        assert!(matches!(b, RequestBody::File(..)));
        assert_eq!(contents(b), body);
    }

    #[test]
    fn a_reader_frozen_anywhere_goes_on_in_another_worker() {
        let d = tempfile::tempdir().unwrap();
        let chunked = &b"5\r\nhello\r\n6;x=1\r\n world\r\n0\r\nX-T: 1\r\n\r\n"[..];
        let plain = &b"hello world"[..];
        for (framing, wire) in [(Framing::Chunked, chunked), (Framing::Length(11), plain)] {
            // Frozen after every byte, in memory (4 KiB kept there) or a file (4 bytes).
            for memory in [4, 4096] {
                for cut in 0..wire.len() {
                    let head = b"POST /x HTTP/1.1\r\n\r\n".to_vec();
                    let mut inc = Incoming::new(head.clone(), framing, keep(d.path(), memory)).unwrap();
                    assert_eq!(inc.take(&wire[..cut]).unwrap(), cut);
                    let mut state = Vec::new();
                    let file = inc.freeze(&mut state).unwrap().try_clone().unwrap();
                    drop(inc); // the sending worker's reader goes
                    let mut inc = Incoming::thaw(&state, file, keep(d.path(), memory)).expect("thawed");
                    assert_eq!(inc.head, head);
                    let mut used = cut;
                    while !inc.done() {
                        used += inc.take(&wire[used..]).unwrap();
                    }
                    assert_eq!((used, inc.wire_bytes), (wire.len(), wire.len() as u64), "cut {cut}");
                    assert_eq!(contents(inc.into_body()), b"hello world", "{memory}, cut {cut}");
                }
            }
        }
        let mut state = Vec::new();
        let mut inc = Incoming::new(Vec::new(), Framing::Length(3), keep(d.path(), 10)).unwrap();
        let file = inc.freeze(&mut state).unwrap();
        for bad in [&state[..state.len() - 1], &[state.as_slice(), b"x"].concat()] {
            assert!(Incoming::thaw(bad, file.try_clone().unwrap(), keep(d.path(), 10)).is_none());
        }
    }

    #[test]
    fn limits_and_bad_chunks_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let k = Keep { memory: 100, max: 10, dir: d.path().into(), disk: disk(u64::MAX, u64::MAX).0 };
        assert!(matches!(Incoming::new(Vec::new(), Framing::Length(11), k.clone()), Err(HttpError::BodyTooLarge)));
        let mut inc = Incoming::new(Vec::new(), Framing::Chunked, k.clone()).unwrap();
        assert!(matches!(inc.take(b"b\r\n"), Err(BodyError::Http(HttpError::BodyTooLarge))));
        for bad in [&b"x\r\n"[..], b"5\nhello", b"5\r\nhelloXY", b"\r\n"] {
            let mut inc = Incoming::new(Vec::new(), Framing::Chunked, keep(d.path(), 100)).unwrap();
            assert!(matches!(inc.take(bad), Err(BodyError::Http(HttpError::BadRequest(_)))), "{bad:?}");
        }
    }

    #[test]
    fn a_burst_then_silence_is_held_to_the_idle_bound_and_the_extension_is_capped() {
        let d = tempfile::tempdir().unwrap();
        let pace = Pace {
            timeout: Duration::from_secs(20),
            min_rate: 500,
            max: Duration::from_secs(600),
            idle: Duration::from_secs(20),
        };
        let big = Keep { max: 64 << 20, ..keep(d.path(), 1 << 20) };
        let mut inc = Incoming::new(Vec::new(), Framing::Length(64 << 20), big.clone()).unwrap();
        // Nothing yet: body_timeout from the start (the idle bound is as long).
        assert_eq!(inc.deadline_ms(&pace), inc.started_ms + 20_000);
        // 4 MB at once earns 8000 s at 500 B/s: capped at body_timeout_max, and the
        // silence after it ends the wait body_idle_timeout after the burst.
        inc.take(&vec![0; 4_000_000]).unwrap();
        assert_eq!(inc.whole_by_ms(&pace), inc.started_ms + 600_000);
        assert_eq!(inc.deadline_ms(&pace), inc.last_ms + 20_000);
        assert_eq!(inc.late_why(&pace, inc.last_ms + 20_000), "nothing of it came for body_idle_timeout");
        // A body that keeps coming is held to its whole time.
        let slow = Pace { idle: Duration::from_secs(3600), ..pace };
        assert_eq!(inc.deadline_ms(&slow), inc.started_ms + 600_000);
        assert!(inc.late_why(&slow, inc.started_ms + 600_000).contains("body_timeout_max"));
        // No min_rate: body_timeout, however much came.
        let flat = Pace { min_rate: 0, ..slow };
        assert_eq!(inc.deadline_ms(&flat), inc.started_ms + 20_000);
        // Frozen and thawed elsewhere: the silence so far goes with it.
        inc.last_ms -= 5000;
        let mut state = Vec::new();
        let file = inc.freeze(&mut state).unwrap().try_clone().unwrap();
        let other = Incoming::thaw(&state, file, big).unwrap();
        let quiet = crate::base::clock::now_ms() - other.last_ms;
        assert!((5000..6000).contains(&quiet), "{quiet}");
    }

    #[test]
    fn bytes_in_files_are_counted_and_capped_per_worker_and_per_server() {
        let d = tempfile::tempdir().unwrap();
        let (sp, slots) = disk(300, 500);
        let k = Keep { memory: 100, max: 1 << 20, dir: d.path().into(), disk: sp };
        let mine = || slots[0].body_spool.load(Relaxed);
        // In memory: not counted. Past memory: all of it, the memory's bytes too.
        let mut a = Incoming::new(Vec::new(), Framing::Length(1000), k.clone()).unwrap();
        a.take(&[1; 100]).unwrap();
        assert_eq!(mine(), 0);
        a.take(&[1; 100]).unwrap();
        assert_eq!(mine(), 200);
        // This worker's cap: 300.
        let mut b = Incoming::new(Vec::new(), Framing::Length(1000), k.clone()).unwrap();
        b.take(&[1; 100]).unwrap();
        assert!(matches!(b.take(&[1; 1]), Err(BodyError::Spool(DiskFull { server: false, cap: 300, .. }))));
        assert_eq!(mine(), 200, "nothing counted for a refused body");
        // The server's: 500, the other worker holding 250.
        slots[1].body_spool.store(250, Relaxed);
        assert!(matches!(a.take(&[1; 60]), Err(BodyError::Spool(DiskFull { server: true, cap: 500, .. }))));
        a.take(&[1; 50]).unwrap();
        assert_eq!(mine(), 250);
        // A whole body leaves the count (it is being served); a dropped one too.
        drop(b);
        let mut c = Incoming::new(Vec::new(), Framing::Length(80), k.clone()).unwrap();
        assert!(c.take(&[1; 80]).is_ok_and(|n| n == 80) && c.done());
        assert_eq!(mine(), 250, "in memory");
        drop(c);
        // Handed to another worker: counted there whatever its caps, given back here.
        let (there, there_slots) = disk(10, 10);
        let mut state = Vec::new();
        let file = a.freeze(&mut state).unwrap().try_clone().unwrap();
        let moved = Incoming::thaw(&state, file, Keep { disk: there, ..k.clone() }).unwrap();
        drop(a);
        assert_eq!((mine(), there_slots[0].body_spool.load(Relaxed)), (0, 250));
        let body = moved.into_body();
        assert_eq!((body.len(), there_slots[0].body_spool.load(Relaxed)), (250, 0));
    }
}
