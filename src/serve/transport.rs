//! What a connection reads from and writes to: the one place the HTTP code meets a
//! socket.
//!
//! A [`Transport`] reads what has arrived (never waiting) and sends whole responses
//! (blocking, paced by the send timeout). Plain TCP ([`TcpStream`]) writes heads and
//! bodies with `writev`, and large files with `sendfile` ([`Stream`], through
//! [`send`]); a TLS session (`tls::stream`) encrypts what it sends, so it
//! reads a file's bytes itself, never through a mapping that a shrinking file would
//! turn into `SIGBUS`. [`Memory`] serves unit tests and the fuzz targets:
//! the read side and the chunked decoder run on bytes in memory, cut where a test
//! says.
//!
//! The connection code is generic over the transport, so the TCP path costs what
//! direct calls on the socket cost.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, IoSlice, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use crate::http::response::{Body, LAST_CHUNK, Streamed, chunk_line};
use crate::listen::WAIT_SLICE;
use crate::log::record::TlsFields;

/// A connection's byte stream, as the HTTP code uses it.
pub trait Transport {
    /// Reads what has arrived, never waiting: `Ok(0)` is the end of the stream,
    /// `WouldBlock` nothing yet (the worker's event loop says when more comes).
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize>;

    /// Sends a response: `head`, then `body` (None: the head alone; a stream of
    /// unknown length in chunks if `chunked`, else as it comes), telling `pacer` how
    /// each write went. Returns the response's bytes sent.
    fn send(&mut self, head: &[u8], body: Option<&mut Body>, chunked: bool, pacer: &mut Pacer<'_>) -> io::Result<u64>;

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
    /// Writes some of `bufs` (at least one byte, or an error), waiting at most the
    /// send timeout.
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize>;

    /// Sends `head`, then bytes `start..end` of `file`, at most `chunk` bytes per
    /// call, telling `pacer` how each call went. Returns the bytes sent.
    fn send_head_and_file(
        &mut self,
        head: &[u8],
        file: &File,
        start: u64,
        end: u64,
        chunk: usize,
        pacer: &mut Pacer<'_>,
    ) -> io::Result<u64>;

    /// Writes all of `bytes`.
    fn write_all(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            match self.write_vectored(&[IoSlice::new(bytes)]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// How a long write goes. Each call that moved bytes is progress (the stuck-worker
/// watchdog reads the heartbeat). The socket's send timeout is a slice
/// ([`WAIT_SLICE`] at most, set on the listener): a call that ran out of it sent
/// nothing for a slice. After the first such slice the worker writes out the
/// access-log records it holds (`waiting`: a kill or crash while a slow client holds
/// it would lose them); once `send_timeout` has gone by with nothing sent, the write
/// fails.
pub struct Pacer<'a> {
    heartbeat: &'a mut dyn FnMut(),
    waiting: &'a mut dyn FnMut(),
    /// Slices in a row with nothing sent, and how many make the send timeout.
    slices: u32,
    max: u32,
}

impl<'a> Pacer<'a> {
    pub fn new(send_timeout: Duration, heartbeat: &'a mut dyn FnMut(), waiting: &'a mut dyn FnMut()) -> Pacer<'a> {
        let max = send_timeout.as_millis().div_ceil(WAIT_SLICE.as_millis()).max(1);
        Pacer { heartbeat, waiting, slices: 0, max: u32::try_from(max).unwrap_or(u32::MAX) }
    }

    /// Bytes went out.
    pub fn sent(&mut self) {
        (self.heartbeat)();
        self.slices = 0;
    }

    /// A write call failed with `e`: if a slice went by with nothing sent and the
    /// send timeout has not, go on (`Ok`); else the write fails with `e`.
    pub fn stalled(&mut self, e: io::Error) -> io::Result<()> {
        if !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) {
            return Err(e);
        }
        self.slices += 1;
        if self.slices >= self.max {
            return Err(e);
        }
        if self.slices == 1 {
            (self.waiting)();
        }
        Ok(())
    }
}

/// A TCP connection: reads that never wait (`MSG_DONTWAIT` on a blocking socket),
/// blocking writes in slices of the socket's send timeout (see [`Pacer`]).
impl Transport for &TcpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read_now(self, buf)
    }

    #[inline(always)]
    fn send(&mut self, head: &[u8], body: Option<&mut Body>, chunked: bool, pacer: &mut Pacer<'_>) -> io::Result<u64> {
        send(self, head, body, chunked, pacer)
    }

    fn shutdown_write(&mut self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

/// Reads what has arrived on `s` without waiting (`MSG_DONTWAIT` on a blocking
/// socket): `WouldBlock` when nothing has.
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
    /// with `sendfile`: the kernel hands the page-cache pages to the socket, our code
    /// never touches them.
    fn send_head_and_file(
        &mut self,
        head: &[u8],
        file: &File,
        start: u64,
        end: u64,
        chunk: usize,
        pacer: &mut Pacer<'_>,
    ) -> io::Result<u64> {
        use std::os::fd::{AsFd, AsRawFd};
        // nix names no MSG_MORE.
        let more = nix::sys::socket::MsgFlags::from_bits_retain(libc::MSG_MORE | libc::MSG_NOSIGNAL);
        let mut sent = 0;
        while sent < head.len() {
            match nix::sys::socket::send(self.as_raw_fd(), &head[sent..], more) {
                Ok(n) => {
                    sent += n;
                    pacer.sent();
                }
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => pacer.stalled(e.into())?,
            }
        }
        let mut offset = start as i64;
        while (offset as u64) < end {
            let count = ((end - offset as u64) as usize).min(chunk);
            match nix::sys::sendfile::sendfile64(self.as_fd(), file.as_fd(), Some(&mut offset), count) {
                // The file shrank under us: the response cannot be finished.
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(_) => pacer.sent(),
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => pacer.stalled(e.into())?,
            }
        }
        Ok(head.len() as u64 + end - start)
    }
}

/// A connection in memory: reads come from a script of pieces (each read returns
/// at most one piece; an empty piece is a wait that ran out; after the last piece,
/// the end of the stream), writes go to `written`.
#[derive(Debug, Default)]
pub struct Memory {
    pub pieces: VecDeque<Vec<u8>>,
    pub written: Vec<u8>,
    pub shut: bool,
}

impl Memory {
    /// A stream that delivers `bytes` in pieces of at most `piece` bytes.
    pub fn new(bytes: &[u8], piece: usize) -> Memory {
        Memory { pieces: bytes.chunks(piece.max(1)).map(<[u8]>::to_vec).collect(), ..Memory::default() }
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

    fn send(&mut self, head: &[u8], body: Option<&mut Body>, chunked: bool, pacer: &mut Pacer<'_>) -> io::Result<u64> {
        send(self, head, body, chunked, pacer)
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
        let before = self.written.len();
        for b in bufs {
            self.written.extend_from_slice(b);
        }
        Ok(self.written.len() - before)
    }

    /// Reads the file with `pread`, as a transport that cannot use `sendfile` would.
    fn send_head_and_file(
        &mut self,
        head: &[u8],
        file: &File,
        start: u64,
        end: u64,
        chunk: usize,
        pacer: &mut Pacer<'_>,
    ) -> io::Result<u64> {
        use std::os::unix::fs::FileExt;
        self.write_all(head)?;
        let mut buf = vec![0; chunk.min((end - start) as usize)];
        let mut at = start;
        while at < end {
            let want = ((end - at) as usize).min(buf.len());
            let n = file.read_at(&mut buf[..want], at)?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.write_all(&buf[..n])?;
            at += n as u64;
            pacer.sent();
        }
        Ok(head.len() as u64 + end - start)
    }
}

/// Most body bytes handed to the kernel in one call. A blocking write returns only
/// when all of it is queued, and the stuck-worker watchdog sees progress only between
/// calls: with a whole 64 MB file in one call, a client reading slowly for longer
/// than `request_timeout` had its worker killed mid-download. 256 KiB keeps a client
/// down to about 1 KB/s alive under the default 300 s (nginx's sendfile_max_chunk is
/// 2 MiB, for fairness between its connections).
pub const SEND_CHUNK: usize = 256 * 1024;

/// Sends head and body (None: the head only) with as few `writev` calls as the
/// kernel allows, a file body with `sendfile`, telling `pacer` how each call went.
/// Returns the bytes sent.
pub fn send(
    t: &mut impl Stream,
    head: &[u8],
    body: Option<&mut Body>,
    chunked: bool,
    pacer: &mut Pacer<'_>,
) -> io::Result<u64> {
    // One slice for the head and one for a body need no allocation; only multipart
    // bodies build a list.
    let mut pair = [IoSlice::new(head), IoSlice::new(&[])];
    let mut many: Vec<IoSlice<'_>>;
    let slices: &mut [IoSlice<'_>] = match body {
        None | Some(Body::None) => &mut pair[..1],
        Some(Body::Stream(s)) => {
            write_paced(t, head, pacer)?;
            let framing = pump(s, chunked, &mut |bytes| write_paced(t, bytes, pacer))?;
            return Ok(head.len() as u64 + s.sent + framing);
        }
        Some(Body::File { file, start, end }) => {
            return t.send_head_and_file(head, file, *start, *end, SEND_CHUNK, pacer);
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
    while !rest.is_empty() {
        // IOV_MAX is 1024: a response with thousands of ranges goes out in batches;
        // and at most SEND_CHUNK bytes per call, so a slow client's progress is seen.
        let mut batch = rest.len().min(1024);
        let mut bytes = 0;
        for (i, sl) in rest[..batch].iter().enumerate() {
            bytes += sl.len();
            if bytes >= SEND_CHUNK {
                batch = i + 1;
                break;
            }
        }
        let written = if bytes > SEND_CHUNK {
            // The last slice of the batch is cut to the chunk (only multipart bodies
            // and large custom error pages are this big: files go out by sendfile).
            let mut capped: Vec<IoSlice<'_>> = rest[..batch - 1].iter().map(|s| IoSlice::new(s)).collect();
            let last = &rest[batch - 1];
            capped.push(IoSlice::new(&last[..last.len() - (bytes - SEND_CHUNK)]));
            t.write_vectored(&capped)
        } else {
            t.write_vectored(&rest[..batch])
        };
        match written {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                IoSlice::advance_slices(&mut rest, n);
                pacer.sent();
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => pacer.stalled(e)?,
        }
    }
    Ok(total)
}

/// Writes all of `bytes`, telling `pacer` how each write went.
fn write_paced(t: &mut impl Stream, mut bytes: &[u8], pacer: &mut Pacer<'_>) -> io::Result<()> {
    while !bytes.is_empty() {
        match t.write_vectored(&[IoSlice::new(bytes)]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                bytes = &bytes[n..];
                pacer.sent();
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => pacer.stalled(e)?,
        }
    }
    Ok(())
}

/// Bytes read from a stream's source at a time (a TLS record's worth).
const PUMP_PIECE: usize = 16 * 1024;

/// Reads a streamed body to its end and hands it to `put` as it comes: each piece
/// as a chunk when `chunked` (then the last chunk), else as it is. A body of a
/// known length must be that long. Returns the bytes of framing added.
pub fn pump(s: &mut Streamed, chunked: bool, put: &mut dyn FnMut(&[u8]) -> io::Result<()>) -> io::Result<u64> {
    let mut piece = vec![0u8; PUMP_PIECE];
    let mut framing = 0;
    loop {
        let n = match s.from.read(&mut piece) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            break;
        }
        if chunked {
            let mut line = [0u8; 18];
            let line = chunk_line(n, &mut line);
            put(line)?;
            put(&piece[..n])?;
            put(b"\r\n")?;
            framing += line.len() as u64 + 2;
        } else {
            put(&piece[..n])?;
        }
        s.sent += n as u64;
    }
    if s.len.is_some_and(|len| len != s.sent) {
        // The Content-Length sent promised otherwise: the response cannot be finished.
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    if chunked {
        put(LAST_CHUNK)?;
        framing += LAST_CHUNK.len() as u64;
    }
    Ok(framing)
}

/// A send failed because the file under the body got shorter: the kernel's copy
/// from a mapping past the new end fails with `EFAULT`, `sendfile` reaches the end
/// early (see `send_head_and_file`). Not a client going away.
pub fn file_shrank(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EFAULT) || e.kind() == io::ErrorKind::UnexpectedEof
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_waits_in_slices_up_to_the_send_timeout() {
        let (mut beats, mut waits) = (0, 0);
        let (mut beat, mut wait) = (|| beats += 1, || waits += 1);
        {
            let mut pacer = Pacer::new(WAIT_SLICE * 3, &mut beat, &mut wait);
            let slice = || io::Error::from(io::ErrorKind::WouldBlock);
            assert!(pacer.stalled(slice()).is_ok() && pacer.stalled(slice()).is_ok());
            pacer.sent();
            assert!(pacer.stalled(slice()).is_ok() && pacer.stalled(slice()).is_ok(), "bytes sent start over");
            assert!(pacer.stalled(slice()).is_err(), "three slices with nothing sent are the send timeout");
            assert!(pacer.stalled(io::ErrorKind::BrokenPipe.into()).is_err(), "another error ends the write at once");
        }
        assert_eq!((beats, waits), (1, 2), "held records are written once per stall");
    }

    #[test]
    fn bodies_go_out_whole_with_progress_seen() {
        let pace = |beat: &mut dyn FnMut(), f: &mut dyn FnMut(&mut Pacer<'_>)| {
            let mut wait = || {};
            f(&mut Pacer::new(std::time::Duration::from_secs(60), beat, &mut wait));
        };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..SEND_CHUNK * 2 + 10).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let file = std::rc::Rc::new(File::open(&p).unwrap());
        let mut t = Memory::default();
        let mut calls = 0;
        let mut body = Body::File { file, start: 5, end: data.len() as u64 };
        pace(&mut || calls += 1, &mut |p| {
            let n = send(&mut t, b"HEAD", Some(&mut body), false, p).unwrap();
            assert_eq!(n, 4 + data.len() as u64 - 5);
        });
        assert_eq!(&t.written[..4], b"HEAD");
        assert!(t.written[4..] == data[5..], "the file's bytes, from the offset");
        assert_eq!(calls, 3, "one progress per chunk");

        let mut t = Memory::default();
        let mut big = Body::Owned(data.clone());
        pace(&mut || {}, &mut |p| {
            assert_eq!(send(&mut t, b"H", Some(&mut big), false, p).unwrap(), 1 + data.len() as u64);
            assert_eq!(send(&mut t, b"H", None, false, p).unwrap(), 1, "the head alone");
        });
        assert_eq!(t.written.len(), 2 + data.len());
    }

    #[test]
    fn a_stream_goes_out_in_chunks_or_as_it_comes() {
        let data: Vec<u8> = (0..PUMP_PIECE + 5).map(|i| (i % 251) as u8).collect();
        let mut beat = || {};
        let mut wait = || {};
        let mut pacer = Pacer::new(std::time::Duration::from_secs(60), &mut beat, &mut wait);
        let mut t = Memory::default();
        let mut body = Streamed::body(Box::new(std::io::Cursor::new(data.clone())), None);
        let n = send(&mut t, b"H", Some(&mut body), true, &mut pacer).unwrap();
        assert_eq!(n, t.written.len() as u64);
        let mut want = b"H4000\r\n".to_vec();
        want.extend_from_slice(&data[..PUMP_PIECE]);
        want.extend_from_slice(b"\r\n5\r\n");
        want.extend_from_slice(&data[PUMP_PIECE..]);
        want.extend_from_slice(b"\r\n0\r\n\r\n");
        assert!(t.written == want, "two chunks and the last");
        assert_eq!(body.sent(), data.len() as u64, "the body's bytes, framing left out");

        let mut t = Memory::default();
        let mut body = Streamed::body(Box::new(std::io::Cursor::new(data.clone())), None);
        send(&mut t, b"H", Some(&mut body), false, &mut pacer).unwrap();
        assert!(t.written[1..] == data[..], "close-delimited: the bytes as they are");

        let mut body = Streamed::body(Box::new(std::io::Cursor::new(data.clone())), Some(3));
        assert!(send(&mut Memory::default(), b"H", Some(&mut body), false, &mut pacer).is_err(), "longer than said");
    }
}
