//! What a connection reads from and writes to: the one place the HTTP code meets a
//! socket.
//!
//! A [`Transport`] reads what has arrived and sends responses, never waiting: what
//! the socket does not take now is the answer's [`Rest`] ([`Sent::Parked`]), which
//! the connection keeps and [`Transport::resume`] writes as the socket drains. Plain
//! TCP ([`TcpStream`]) writes heads and bodies with `writev`, and large files with
//! `sendfile` ([`Stream`], through [`send`]); a TLS session (`serve::tls`) encrypts
//! what it sends, so it reads a file's bytes itself, never through a mapping that a
//! shrinking file would turn into `SIGBUS`. [`Memory`] serves unit tests and the
//! fuzz targets: the read side and the chunked decoder run on bytes in memory, cut
//! where a test says, and writes go to a socket of the room a test gives.
//!
//! The connection code is generic over the transport, so the TCP path costs what
//! direct calls on the socket cost.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, IoSlice, Write};
use std::net::{Shutdown, TcpStream};

use crate::http::response::{Body, LAST_CHUNK, Streamed, chunk_line};
use crate::log::record::TlsFields;

/// A connection's byte stream, as the HTTP code uses it.
pub trait Transport {
    /// Reads what has arrived, never waiting: `Ok(0)` is the end of the stream,
    /// `WouldBlock` nothing yet (the worker's event loop says when more comes).
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize>;

    /// Sends a response: `head`, then `body` (None: the head alone; a stream of
    /// unknown length in chunks if `chunked`, else as it comes), never waiting:
    /// [`Sent::All`], or the rest that the socket did not take now (the body may
    /// then have moved into it).
    fn send(&mut self, head: &[u8], body: Option<&mut Body>, chunked: bool) -> io::Result<Sent>;

    /// Writes more of an answer's rest, as far as the socket takes it now (about
    /// [`SEND_CHUNK`] at most). True when all of it is out.
    fn resume(&mut self, rest: &mut Rest) -> io::Result<bool>;

    /// The next response is the connection's last: a TLS session may end with it
    /// (its `close_notify` leaves in the response's last write).
    fn last_response(&mut self) {}

    /// Ends our side of the stream; reads still work.
    fn shutdown_write(&mut self);

    /// Input that has arrived and is held below the HTTP code (decrypted TLS
    /// records): the socket will not report it again, so the caller reads on.
    fn buffered(&mut self) -> bool {
        false
    }

    /// The TLS session's names for the log (None: plain HTTP).
    fn tls(&self) -> Option<TlsFields<'_>> {
        None
    }
}

/// A byte stream the kernel writes for us: what [`send`] writes a plain
/// response to.
pub trait Stream {
    /// Writes some of `bufs` (at least one byte, or an error), never waiting:
    /// `WouldBlock` when the socket takes nothing now.
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize>;

    /// Sends `head`, then bytes `start..end` of `file`, as far as the socket takes
    /// them now and at most about `budget` bytes. Returns the bytes sent (fewer than
    /// all when the socket is full or the budget spent).
    fn send_head_and_file(&mut self, head: &[u8], file: &File, start: u64, end: u64, budget: u64) -> io::Result<u64>;
}

/// A TCP connection (`O_NONBLOCK`, from the accept): neither reads nor writes wait.
impl Transport for &TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read_now(self, buf)
    }

    #[inline(always)]
    fn send(&mut self, head: &[u8], body: Option<&mut Body>, chunked: bool) -> io::Result<Sent> {
        send(self, head, body, chunked)
    }

    fn resume(&mut self, rest: &mut Rest) -> io::Result<bool> {
        resume(self, rest, SEND_CHUNK as u64)
    }

    fn shutdown_write(&mut self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

/// Reads what has arrived on `s` without waiting (`MSG_DONTWAIT`, for a socket
/// handed in blocking): `WouldBlock` when nothing has.
pub fn read_now(s: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    match nix::sys::socket::recv(s.as_raw_fd(), buf, nix::sys::socket::MsgFlags::MSG_DONTWAIT) {
        Ok(n) => Ok(n),
        Err(e) => Err(e.into()),
    }
}

impl Stream for &TcpStream {
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        Write::write_vectored(self, bufs)
    }

    /// The head with `MSG_MORE` (it leaves with the first body bytes), then the body
    /// with `sendfile`, [`SEND_CHUNK`] at a time: the kernel hands the page-cache
    /// pages to the socket, our code never touches them.
    fn send_head_and_file(&mut self, head: &[u8], file: &File, start: u64, end: u64, budget: u64) -> io::Result<u64> {
        use std::os::fd::{AsFd, AsRawFd};
        // nix names no MSG_MORE.
        let more = nix::sys::socket::MsgFlags::from_bits_retain(libc::MSG_MORE | libc::MSG_NOSIGNAL);
        let mut sent = 0;
        while sent < head.len() {
            match nix::sys::socket::send(self.as_raw_fd(), &head[sent..], more) {
                Ok(n) => sent += n,
                Err(nix::errno::Errno::EINTR) => {}
                Err(nix::errno::Errno::EAGAIN) => return Ok(sent as u64),
                Err(e) => return Err(e.into()),
            }
        }
        let mut offset = start as i64;
        let stop = end.min(start.saturating_add(budget));
        while (offset as u64) < stop {
            let count = ((stop - offset as u64) as usize).min(SEND_CHUNK);
            match nix::sys::sendfile::sendfile64(self.as_fd(), file.as_fd(), Some(&mut offset), count) {
                // The file shrank under us: the response cannot be finished.
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => {}
                Err(nix::errno::Errno::EAGAIN) => break,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(head.len() as u64 + offset as u64 - start)
    }
}

/// A connection in memory: reads come from a script of pieces (each read returns
/// at most one piece; an empty piece is a wait that ran out; after the last piece,
/// the end of the stream), writes go to `written`, as far as `room` allows (None:
/// no limit; a full socket says `WouldBlock`).
#[derive(Debug, Default)]
pub struct Memory {
    pub pieces: VecDeque<Vec<u8>>,
    pub written: Vec<u8>,
    pub shut: bool,
    pub room: Option<usize>,
}

impl Memory {
    /// A stream that delivers `bytes` in pieces of at most `piece` bytes.
    pub fn new(bytes: &[u8], piece: usize) -> Memory {
        Memory { pieces: bytes.chunks(piece.max(1)).map(<[u8]>::to_vec).collect(), ..Memory::default() }
    }

    /// Room for `n` bytes at most: how much of `want` a write takes now.
    fn take(&mut self, want: usize) -> io::Result<usize> {
        let n = self.room.map_or(want, |r| r.min(want));
        if n == 0 && want > 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        if let Some(r) = &mut self.room {
            *r -= n;
        }
        Ok(n)
    }
}

impl Transport for Memory {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(piece) = self.pieces.front_mut() else { return Ok(0) };
        if piece.is_empty() {
            self.pieces.pop_front();
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let n = piece.len().min(buf.len());
        buf[..n].copy_from_slice(&piece[..n]);
        piece.drain(..n);
        if piece.is_empty() {
            self.pieces.pop_front();
        }
        Ok(n)
    }

    fn send(&mut self, head: &[u8], body: Option<&mut Body>, chunked: bool) -> io::Result<Sent> {
        send(self, head, body, chunked)
    }

    fn resume(&mut self, rest: &mut Rest) -> io::Result<bool> {
        resume(self, rest, SEND_CHUNK as u64)
    }

    fn shutdown_write(&mut self) {
        self.shut = true;
    }
}

impl Stream for Memory {
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if self.shut {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let want: usize = bufs.iter().map(|b| b.len()).sum();
        let mut n = self.take(want)?;
        let took = n;
        for b in bufs {
            let k = n.min(b.len());
            self.written.extend_from_slice(&b[..k]);
            n -= k;
        }
        Ok(took)
    }

    /// Reads the file with `pread`, as a transport that cannot use `sendfile` would.
    fn send_head_and_file(&mut self, head: &[u8], file: &File, start: u64, end: u64, budget: u64) -> io::Result<u64> {
        use std::os::unix::fs::FileExt;
        let mut sent = 0;
        while sent < head.len() {
            match self.write_vectored(&[IoSlice::new(&head[sent..])]) {
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(sent as u64),
                Err(e) => return Err(e),
            }
        }
        let stop = end.min(start.saturating_add(budget));
        let mut buf = vec![0; SEND_CHUNK.min((stop - start) as usize)];
        let mut at = start;
        while at < stop {
            let want = ((stop - at) as usize).min(buf.len());
            let n = file.read_at(&mut buf[..want], at)?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            match self.write_vectored(&[IoSlice::new(&buf[..n])]) {
                Ok(k) => at += k as u64,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(sent as u64 + at - start)
    }
}

/// Most body bytes handed to the kernel in one call, and written to a parked answer
/// in one turn of the worker's loop, so one fast reader does not starve the
/// connections beside it (nginx's `sendfile_max_chunk` is 2 MiB).
pub const SEND_CHUNK: usize = 256 * 1024;

/// Most bytes an answer's first turn writes before it waits in the set like a
/// parked one: a file the socket keeps taking goes out in one turn up to this (the
/// 1.7 MB of a large image in one go), a larger one between the worker's other
/// turns.
pub const FIRST_TURN: u64 = 8 * SEND_CHUNK as u64;

/// How far a send went.
pub enum Sent {
    /// All of the answer: its bytes.
    All(u64),
    /// The socket took only part of it: the rest waits with the connection, written
    /// as the socket drains ([`Transport::resume`]).
    Parked(Box<Rest>),
}

/// What is left of an answer the socket did not take whole.
pub struct Rest {
    /// Bytes to write first, from `at`: what was left of the head and of a body in
    /// memory, or of a streamed piece, copied at the stall.
    pub(crate) bytes: Vec<u8>,
    pub(crate) at: usize,
    /// Then the rest of the body: a file's range, a mapping's, a stream (with
    /// `chunked`: in chunks), or none.
    pub(crate) body: Body,
    pub(crate) chunked: bool,
    /// A streamed body has ended (its last chunk is in `bytes`); the stream stays
    /// for the count of its bytes.
    pub(crate) ended: bool,
    /// The answer's bytes sent so far (a TLS session's: sealed).
    pub sent: u64,
}

impl Rest {
    /// The rest of an answer whose first `sent` bytes went: `bytes` (copied), then
    /// `body`.
    pub fn new(bytes: Vec<u8>, body: Body, chunked: bool, sent: u64) -> Rest {
        Rest { bytes, at: 0, body, chunked, ended: false, sent }
    }

    /// Bytes of a streamed body sent so far (None: not a stream).
    pub fn streamed(&self) -> Option<u64> {
        match &self.body {
            Body::Stream(s) => Some(s.sent),
            _ => None,
        }
    }

    /// When the source of a streamed body must have ended it ([`Streamed::until_ms`]).
    pub fn until_ms(&self) -> Option<u64> {
        match &self.body {
            Body::Stream(s) if !self.ended => s.until_ms,
            _ => None,
        }
    }

    /// Whether all of it has gone (to the socket, or sealed).
    pub fn done(&self) -> bool {
        self.at == self.bytes.len() && (self.ended || matches!(self.body, Body::None))
    }

    /// When the copied bytes are out: the next piece of a stream (framed, into
    /// `bytes`), or its end.
    pub(crate) fn refill(&mut self) -> io::Result<()> {
        let Body::Stream(s) = &mut self.body else { return Ok(()) };
        if self.ended {
            return Ok(());
        }
        self.bytes.clear();
        self.at = 0;
        if !next_piece(s, self.chunked, &mut self.bytes)? {
            if self.chunked {
                self.bytes.extend_from_slice(LAST_CHUNK);
            }
            self.ended = true;
        }
        Ok(())
    }
}

/// Reads the next piece of a stream into `out`, framed as a chunk when `chunked`.
/// False at its end (a body of a known length must be that long).
fn next_piece(s: &mut Streamed, chunked: bool, out: &mut Vec<u8>) -> io::Result<bool> {
    let mut piece = vec![0u8; PUMP_PIECE];
    let n = loop {
        match s.from.read(&mut piece) {
            Ok(n) => break n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    };
    if n == 0 {
        if s.len.is_some_and(|len| len != s.sent) {
            // The Content-Length sent promised otherwise: the response cannot be finished.
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        return Ok(false);
    }
    if chunked {
        let mut line = [0u8; 18];
        out.extend_from_slice(chunk_line(n, &mut line));
        out.extend_from_slice(&piece[..n]);
        out.extend_from_slice(b"\r\n");
    } else {
        out.extend_from_slice(&piece[..n]);
    }
    s.sent += n as u64;
    Ok(true)
}

/// Sends head and body (None: the head only) with as few `writev` calls as the
/// kernel allows, a file body with `sendfile`, never waiting: what the socket does
/// not take now is [`Sent::Parked`].
pub fn send(t: &mut impl Stream, head: &[u8], body: Option<&mut Body>, chunked: bool) -> io::Result<Sent> {
    // One slice for the head and one for a body need no allocation; only multipart
    // bodies build a list.
    let mut pair = [IoSlice::new(head), IoSlice::new(&[])];
    let mut many: Vec<IoSlice<'_>>;
    let slices: &mut [IoSlice<'_>] = match body {
        None | Some(Body::None) => &mut pair[..1],
        Some(b @ Body::Stream(_)) => return send_stream(t, head, b, chunked),
        Some(b @ (Body::File { .. } | Body::Spooled { .. })) => {
            let (Body::File { file, start, end } | Body::Spooled { file, start, end, .. }) = &*b else {
                unreachable!("a file")
            };
            let total = head.len() as u64 + *end - *start;
            let n = t.send_head_and_file(head, file, *start, *end, FIRST_TURN)?;
            if n == total {
                return Ok(Sent::All(total));
            }
            // The head is the first bytes out.
            let head_left = head.get(n as usize..).unwrap_or_default().to_vec();
            let from = *start + n.saturating_sub(head.len() as u64);
            let rest = match &*b {
                Body::Spooled { hold, .. } => {
                    Body::Spooled { file: file.clone(), start: from, end: *end, hold: hold.clone() }
                }
                _ => Body::File { file: file.clone(), start: from, end: *end },
            };
            return Ok(Sent::Parked(Box::new(Rest::new(head_left, rest, false, n))));
        }
        Some(Body::Owned(v)) => {
            pair[1] = IoSlice::new(v);
            &mut pair
        }
        Some(Body::Mapped { map, start, end }) => {
            pair[1] = IoSlice::new(&map[*start..*end]);
            &mut pair
        }
        Some(Body::Multipart { map, parts, tail }) => {
            many = vec![IoSlice::new(head)];
            for (h, r) in parts {
                many.push(IoSlice::new(h));
                many.push(IoSlice::new(&map[r.start as usize..=r.end as usize]));
            }
            many.push(IoSlice::new(tail));
            &mut many
        }
    };
    let total: u64 = slices.iter().map(|s| s.len() as u64).sum();
    let mut rest = slices;
    let mut sent = 0;
    while !rest.is_empty() {
        match write_some(t, rest) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                IoSlice::advance_slices(&mut rest, n);
                sent += n as u64;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Ok(Sent::Parked(Box::new(Rest::new(copy_slices(rest)?, Body::None, false, sent))));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Sent::All(total))
}

/// One `writev` of `slices`: at most IOV_MAX (1024) of them, and at most
/// [`SEND_CHUNK`] bytes.
fn write_some(t: &mut impl Stream, rest: &[IoSlice<'_>]) -> io::Result<usize> {
    let mut batch = rest.len().min(1024);
    let mut bytes = 0;
    for (i, sl) in rest[..batch].iter().enumerate() {
        bytes += sl.len();
        if bytes >= SEND_CHUNK {
            batch = i + 1;
            break;
        }
    }
    if bytes > SEND_CHUNK {
        // The last slice of the batch is cut to the chunk (only multipart bodies and
        // large pages of our own are this big: files go out by sendfile).
        let mut capped: Vec<IoSlice<'_>> = rest[..batch - 1].iter().map(|s| IoSlice::new(s)).collect();
        let last = &rest[batch - 1];
        capped.push(IoSlice::new(&last[..last.len() - (bytes - SEND_CHUNK)]));
        t.write_vectored(&capped)
    } else {
        t.write_vectored(&rest[..batch])
    }
}

/// Copies what is left of an answer's slices, for the time it waits: by the kernel
/// ([`copy_from_mapping`]), as some are a file's mapping, which our own read would
/// turn into `SIGBUS` should the file have shrunk.
fn copy_slices(slices: &[IoSlice<'_>]) -> io::Result<Vec<u8>> {
    let len = slices.iter().map(|s| s.len()).sum();
    let mut out = vec![0u8; len];
    let mut at = 0;
    for s in slices {
        copy_from_mapping(s, &mut out[at..at + s.len()])?;
        at += s.len();
    }
    Ok(out)
}

/// A streamed body: the head, then its pieces as they are read, as long as the
/// socket takes them (the first turn's worth); the rest waits like any other. A
/// stream sent whole goes back into `body` (its count of bytes is the log's).
#[cold]
fn send_stream(t: &mut impl Stream, head: &[u8], body: &mut Body, chunked: bool) -> io::Result<Sent> {
    let mut rest = Rest::new(head.to_vec(), std::mem::replace(body, Body::None), chunked, 0);
    if resume(t, &mut rest, FIRST_TURN)? {
        *body = rest.body;
        return Ok(Sent::All(rest.sent));
    }
    Ok(Sent::Parked(Box::new(rest)))
}

/// Writes more of a parked answer, as far as the socket takes it now and at most
/// about `budget` bytes. True when all of it is out.
pub fn resume(t: &mut impl Stream, rest: &mut Rest, budget: u64) -> io::Result<bool> {
    let mut moved = 0u64;
    loop {
        if rest.at < rest.bytes.len() {
            match t.write_vectored(&[IoSlice::new(&rest.bytes[rest.at..])]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    rest.at += n;
                    rest.sent += n as u64;
                    moved += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        } else {
            match &mut rest.body {
                Body::None => return Ok(true),
                Body::Stream(_) if rest.ended => return Ok(true),
                Body::Stream(_) => rest.refill()?,
                Body::File { file, start, end } | Body::Spooled { file, start, end, .. } => {
                    let n = t.send_head_and_file(&[], file, *start, *end, budget.saturating_sub(moved).max(1))?;
                    *start += n;
                    rest.sent += n;
                    moved += n;
                    if *start == *end {
                        rest.body = Body::None;
                    } else if n == 0 || moved >= budget {
                        return Ok(false);
                    }
                }
                Body::Mapped { map, start, end } => {
                    match t.write_vectored(&[IoSlice::new(&map[*start..*end])]) {
                        Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(n) => {
                            *start += n;
                            rest.sent += n as u64;
                            moved += n as u64;
                        }
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                        Err(e) => return Err(e),
                    }
                    if *start == *end {
                        rest.body = Body::None;
                    }
                }
                // Copied into `bytes` at the stall.
                Body::Owned(_) | Body::Multipart { .. } => rest.body = Body::None,
            }
        }
        if moved >= budget && !rest.done() {
            return Ok(false);
        }
    }
}

/// Copies `src`, bytes of a file mapping, into `dst` (as long) by a kernel copy: past
/// the end of a file that shrank, the kernel reports `EFAULT` or a short copy where
/// our own read would take `SIGBUS`. `process_vm_readv` on this process needs no
/// privilege (it is its own memory) and is in systemd's `@system-service` set.
pub fn copy_from_mapping(src: &[u8], dst: &mut [u8]) -> io::Result<()> {
    use nix::sys::uio::{RemoteIoVec, process_vm_readv};
    let mut done = 0;
    while done < src.len() {
        let remote = [RemoteIoVec { base: src[done..].as_ptr() as usize, len: src.len() - done }];
        match process_vm_readv(nix::unistd::getpid(), &mut [std::io::IoSliceMut::new(&mut dst[done..])], &remote) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => done += n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Bytes read from a stream's source at a time (a TLS record's worth).
const PUMP_PIECE: usize = 16 * 1024;

/// A send failed because the file under the body got shorter: the kernel's copy
/// from a mapping past the new end fails with `EFAULT`, `sendfile` reaches the end
/// early (see `send_head_and_file`). Not a client going away.
pub fn file_shrank(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EFAULT) || e.kind() == io::ErrorKind::UnexpectedEof
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Resumes `rest` on `t`, `room` bytes of room a turn, until it is out; the turns
    /// it took.
    fn drain(t: &mut Memory, rest: &mut Rest, room: usize) -> usize {
        let mut turns = 0;
        loop {
            turns += 1;
            t.room = Some(room);
            if t.resume(rest).unwrap() {
                return turns;
            }
            assert!(turns < 10_000, "no end");
        }
    }

    /// A file a little over two `SEND_CHUNK`s long (kept while its folder is), its
    /// bytes, and the file open.
    fn a_file_of_two_chunks() -> (tempfile::TempDir, Vec<u8>, std::rc::Rc<File>) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..SEND_CHUNK * 2 + 10).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let file = std::rc::Rc::new(File::open(&p).unwrap());
        (dir, data, file)
    }

    #[test]
    fn what_the_socket_does_not_take_waits_and_goes_out_as_it_drains() {
        let (_dir, data, file) = a_file_of_two_chunks();

        // A body in memory: the rest is copied at the stall.
        let mut t = Memory { room: Some(3), ..Memory::default() };
        let mut body = Body::Owned(b"0123456789".to_vec());
        let Sent::Parked(mut rest) = send(&mut t, b"HEAD", Some(&mut body), false).unwrap() else { panic!("whole") };
        assert_eq!((rest.sent, &t.written[..]), (3, &b"HEA"[..]));
        drain(&mut t, &mut rest, 4);
        assert_eq!(&t.written[..], b"HEAD0123456789");
        assert_eq!(rest.sent, 14);

        // A file: the head in part, then the file's range as the socket drains.
        let mut t = Memory { room: Some(2), ..Memory::default() };
        let mut body = Body::File { file: file.clone(), start: 5, end: data.len() as u64 };
        let Sent::Parked(mut rest) = send(&mut t, b"HEAD", Some(&mut body), false).unwrap() else { panic!("whole") };
        assert_eq!(rest.sent, 2);
        let turns = drain(&mut t, &mut rest, SEND_CHUNK * 4);
        assert_eq!(&t.written[..4], b"HEAD");
        assert!(t.written[4..] == data[5..], "the file's bytes, from the offset");
        assert_eq!(rest.sent, 4 + data.len() as u64 - 5);
        assert!(turns >= 2, "at most about SEND_CHUNK a turn, however much room: {turns}");

        // Nothing taken at all: all of it waits.
        let mut t = Memory { room: Some(0), ..Memory::default() };
        let mut body = Body::File { file, start: 0, end: 10 };
        let Sent::Parked(mut rest) = send(&mut t, b"H", Some(&mut body), false).unwrap() else { panic!("whole") };
        assert_eq!(rest.sent, 0);
        drain(&mut t, &mut rest, 1);
        assert!(t.written[1..] == data[..10]);
    }

    #[test]
    fn bodies_the_socket_takes_whole_go_out_at_once() {
        let (_dir, data, file) = a_file_of_two_chunks();
        let mut t = Memory::default();
        let mut body = Body::File { file, start: 5, end: data.len() as u64 };
        let Sent::All(n) = send(&mut t, b"HEAD", Some(&mut body), false).unwrap() else { panic!("parked") };
        assert_eq!(n, 4 + data.len() as u64 - 5);
        assert_eq!(&t.written[..4], b"HEAD");
        assert!(t.written[4..] == data[5..], "the file's bytes, from the offset");

        let mut t = Memory::default();
        let mut big = Body::Owned(data.clone());
        assert!(
            matches!(send(&mut t, b"H", Some(&mut big), false).unwrap(), Sent::All(n) if n == 1 + data.len() as u64)
        );
        assert!(matches!(send(&mut t, b"H", None, false).unwrap(), Sent::All(1)), "the head alone");
        assert_eq!(t.written.len(), 2 + data.len());
    }

    #[test]
    fn a_stream_goes_out_in_chunks_or_as_it_comes() {
        let data: Vec<u8> = (0..PUMP_PIECE + 5).map(|i| (i % 251) as u8).collect();
        let mut want = b"H4000\r\n".to_vec();
        want.extend_from_slice(&data[..PUMP_PIECE]);
        want.extend_from_slice(b"\r\n5\r\n");
        want.extend_from_slice(&data[PUMP_PIECE..]);
        want.extend_from_slice(b"\r\n0\r\n\r\n");

        let mut t = Memory::default();
        let mut body = Streamed::body(Box::new(std::io::Cursor::new(data.clone())), None);
        let Sent::All(n) = send(&mut t, b"H", Some(&mut body), true).unwrap() else { panic!("parked") };
        assert_eq!(n, t.written.len() as u64);
        assert!(t.written == want, "two chunks and the last");
        assert_eq!(body.sent(), data.len() as u64, "the body's bytes, framing left out");

        // Parked in its first piece: the rest as the socket drains.
        let mut t = Memory { room: Some(100), ..Memory::default() };
        let mut body = Streamed::body(Box::new(std::io::Cursor::new(data.clone())), None);
        let Sent::Parked(mut rest) = send(&mut t, b"H", Some(&mut body), true).unwrap() else { panic!("whole") };
        assert_eq!(rest.streamed(), Some(PUMP_PIECE as u64), "a piece read");
        drain(&mut t, &mut rest, 1000);
        assert!(t.written == want, "the same bytes, in turns");
        assert_eq!(rest.streamed(), Some(data.len() as u64));

        let mut t = Memory::default();
        let mut body = Streamed::body(Box::new(std::io::Cursor::new(data.clone())), None);
        send(&mut t, b"H", Some(&mut body), false).unwrap();
        assert!(t.written[1..] == data[..], "close-delimited: the bytes as they are");

        let mut body = Streamed::body(Box::new(std::io::Cursor::new(data.clone())), Some(3));
        assert!(send(&mut Memory::default(), b"H", Some(&mut body), false).is_err(), "longer than said");
    }
}
