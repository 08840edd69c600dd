//! A TLS connection as the HTTP code sees it: a [`Transport`] that decrypts what has
//! arrived and encrypts what it sends, driven by the worker's event loop.
//!
//! Nothing here waits for input. A worker holds each TLS connection in its set like a
//! plain one ([`Session`] rides in the connection's `Held`); when the socket has
//! input, [`TlsStream::read`] feeds the records to rustls (`read_tls`,
//! `process_new_packets`), sends what rustls has to say (the handshake's flights,
//! tickets, alerts) and hands back the plaintext, if any yet. A handshake is thus a
//! few turns of the loop, and a slow one holds no worker: it waits in the set under
//! `header_timeout` like a slow head.
//!
//! Writes never wait either, as a plain connection's do. A response is staged into
//! records of [`RECORD`] bytes (the head and a small body in one), sealed, and
//! written once [`FLUSH_AT`] records wait or it ends; when the socket takes no more,
//! the sealed records stay in the session and the rest of the answer (a file's
//! range, a stream) in its [`Rest`], and both are written as the socket drains
//! ([`Transport::resume`]).
//! File bytes reach the stage by `pread` from the file, or, for a small file the
//! worker keeps only mapped, by a copy the kernel makes (`process_vm_readv`): our
//! code never reads a mapping, so a file that shrinks under it fails that one
//! response (`EFAULT`, short read) instead of killing the worker with `SIGBUS`.
//! No `sendfile`: the bytes must be encrypted here.

use std::io::{self, IoSlice, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use rustls::{ServerConfig, ServerConnection};

use crate::http::response::Body;
use crate::log::record::TlsFields;
use crate::serve::handshakes::UnderWay;
use crate::serve::transport::{FIRST_TURN, Rest, SEND_CHUNK, Sent, Transport, copy_from_mapping, read_now};

/// Plaintext bytes per record: TLS's largest, so a response goes out in as few
/// records (and AEAD calls) as it can.
pub const RECORD: usize = 16 * 1024;

/// Records sealed before they are written: four, so a large file goes out in writes
/// of 64 KiB (nginx's TLS writes are one record each).
pub const FLUSH_AT: usize = 4;

/// A TLS session on a connection a worker holds.
pub struct Session {
    pub conn: ServerConnection,
    /// The first byte has been looked at and opened a TLS handshake.
    opened: bool,
    /// Counted among the worker's handshakes under way until the handshake ends.
    under_way: Option<UnderWay>,
}

/// What the first byte on a TLS port says the client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// A TLS handshake record (0x16).
    Tls,
    /// An upper-case letter: the start of a plain HTTP request line.
    PlainHttp,
    /// Anything else: not a client of ours.
    Garbage(u8),
    /// Nothing has arrived yet.
    Nothing,
    /// The client closed (or the connection broke) before a byte.
    Closed,
}

/// Looks at the first byte waiting on `s` without taking it.
pub fn opening(s: &TcpStream) -> Opening {
    use std::os::fd::AsRawFd;
    let mut first = [0u8; 1];
    let flags = nix::sys::socket::MsgFlags::MSG_PEEK | nix::sys::socket::MsgFlags::MSG_DONTWAIT;
    match nix::sys::socket::recv(s.as_raw_fd(), &mut first, flags) {
        Ok(0) => Opening::Closed,
        Ok(_) => first_byte(first[0]),
        Err(nix::errno::Errno::EAGAIN) | Err(nix::errno::Errno::EINTR) => Opening::Nothing,
        Err(_) => Opening::Closed,
    }
}

fn first_byte(b: u8) -> Opening {
    match b {
        0x16 => Opening::Tls,
        b'A'..=b'Z' => Opening::PlainHttp,
        b => Opening::Garbage(b),
    }
}

impl Session {
    pub fn new(config: &Arc<ServerConfig>) -> Result<Session, rustls::Error> {
        let mut conn = ServerConnection::new(config.clone())?;
        // The sender bounds what it seals itself (FLUSH_AT).
        conn.set_buffer_limit(None);
        Ok(Session { conn, opened: false, under_way: Some(UnderWay::begin()) })
    }

    /// Whether the first byte has been seen to open a handshake; else looks at it:
    /// the first of `early` (bytes read already, after a PROXY header), or the first
    /// waiting on `s`.
    pub fn opening(&mut self, s: &TcpStream, early: &[u8]) -> Opening {
        if self.opened {
            return Opening::Tls;
        }
        let o = early.first().map_or_else(|| opening(s), |&b| first_byte(b));
        self.opened = o == Opening::Tls;
        o
    }

    /// The first byte has been seen, and opened a handshake.
    pub fn opened(&self) -> bool {
        self.opened
    }

    pub fn handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// Sealed records wait for room in the socket (a handshake's flight, or an
    /// answer's records).
    pub fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Ends the session: a `close_notify` after a handshake (and an alert rustls
    /// queued after a failed one), written if the socket takes it now. Never waits:
    /// the connection is being closed.
    pub fn close(&mut self, s: &TcpStream) {
        if !self.conn.is_handshaking() {
            self.conn.send_close_notify();
        }
        let mut out = Sock { s };
        while self.conn.wants_write() {
            if self.conn.write_tls(&mut out).is_err() {
                break;
            }
        }
    }
}

/// The socket under a session: neither reads nor writes wait.
struct Sock<'a> {
    s: &'a TcpStream,
}

impl Read for Sock<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        read_now(self.s, buf)
    }
}

impl Write for Sock<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        use nix::sys::socket::{MsgFlags, sendmsg};
        use std::os::fd::AsRawFd;
        let flags = MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT;
        sendmsg::<()>(self.s.as_raw_fd(), bufs, &[], flags, None).map_err(io::Error::from)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// A session and its socket, for the time of one turn of the worker's loop.
pub struct TlsStream<'a> {
    sock: &'a TcpStream,
    conn: &'a mut ServerConnection,
    under_way: &'a mut Option<UnderWay>,
    /// Where a response is staged into records (the worker's, reused).
    stage: &'a mut Vec<u8>,
    /// The response being sent is the last: `close_notify` follows it in its write.
    last: bool,
    /// Why the session failed, if it did (rustls' error, or what the client did).
    pub failure: Option<String>,
}

impl<'a> TlsStream<'a> {
    pub fn new(sock: &'a TcpStream, session: &'a mut Session, stage: &'a mut Vec<u8>) -> TlsStream<'a> {
        TlsStream {
            sock,
            conn: &mut session.conn,
            under_way: &mut session.under_way,
            stage,
            last: false,
            failure: None,
        }
    }

    /// Hands rustls records already read from the socket (what followed a PROXY
    /// header), and answers what they complete.
    pub fn feed(&mut self, mut early: &[u8]) -> io::Result<()> {
        while !early.is_empty() {
            if let Err(e) = self.conn.read_tls(&mut early) {
                self.failure = Some(e.to_string());
                return Err(e);
            }
            self.process()?;
        }
        Ok(())
    }

    /// Processes the records rustls has read, and sends what it answers (the
    /// handshake's next flight, tickets, or the alert of a failure). Tickets sent
    /// after the handshake wait when a request came with the client's `Finished`:
    /// they leave with its answer, in one write (the client wakes once, not twice).
    ///
    /// What is said is written only as far as the socket takes it now: the socket
    /// may be full of answers a client does not read, and a worker must not wait on
    /// it. What is left of a handshake's flight is written as the socket drains (the
    /// worker watches it for room while the session [`Session::wants_write`]); the
    /// rest leaves before the next answer's bytes; an alert that closes the session
    /// is dropped with it, as a close never waits either.
    fn process(&mut self) -> io::Result<()> {
        let processed = self.conn.process_new_packets();
        if !self.conn.is_handshaking() {
            *self.under_way = None;
        }
        let request_waits =
            !self.conn.is_handshaking() && processed.as_ref().is_ok_and(|s| s.plaintext_bytes_to_read() > 0);
        if self.conn.wants_write() && !request_waits {
            self.write_now();
        }
        match processed {
            Ok(_) => Ok(()),
            Err(e) => {
                self.failure = Some(e.to_string());
                Err(io::Error::new(io::ErrorKind::InvalidData, e))
            }
        }
    }

    /// Seals `bytes` into records as they are (a tunnel's, after a 101; rustls cuts
    /// them at [`RECORD`]), to be written by [`TlsStream::flush_sealed`].
    pub fn seal_now(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.conn.writer().write_all(bytes)
    }

    /// Writes what is sealed as far as the socket takes it now: true when all went.
    pub fn flush_sealed(&mut self) -> io::Result<bool> {
        self.write_out(&mut 0)
    }

    /// Ends what the session sends: its `close_notify` is sealed after what waits.
    pub fn end_sending(&mut self) {
        self.conn.send_close_notify();
    }

    /// Writes what rustls has sealed as far as the socket takes it without waiting.
    pub fn write_now(&mut self) {
        let _ = self.write_out(&mut 0);
    }

    /// Writes what rustls has sealed as far as the socket takes it without waiting,
    /// adding the bytes written to `moved`: true when all of it went.
    fn write_out(&mut self, moved: &mut u64) -> io::Result<bool> {
        let mut out = Sock { s: self.sock };
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut out) {
                Ok(n) => *moved += n as u64,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Seals the staged bytes into a record.
    fn seal(&mut self) -> io::Result<()> {
        if self.stage.is_empty() {
            return Ok(());
        }
        // No buffer limit (Session::new): the writer takes it all.
        self.conn.writer().write_all(self.stage)?;
        self.stage.clear();
        Ok(())
    }

    /// Stages `bytes`, sealing each record as it fills.
    fn put(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            let n = (RECORD - self.stage.len()).min(bytes.len());
            self.stage.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.stage.len() == RECORD {
                self.seal()?;
            }
        }
        Ok(())
    }

    /// Bytes of a mapped file, copied by the kernel (see the module's comment).
    fn put_mapped(&mut self, mut mapped: &[u8]) -> io::Result<()> {
        while !mapped.is_empty() {
            let n = (RECORD - self.stage.len()).min(mapped.len());
            let at = self.stage.len();
            self.stage.resize(at + n, 0);
            copy_from_mapping(&mapped[..n], &mut self.stage[at..])?;
            mapped = &mapped[n..];
            if self.stage.len() == RECORD {
                self.seal()?;
            }
        }
        Ok(())
    }

    /// Stages the next bytes of `rest` (up to a record's worth): its copied bytes,
    /// then its body's (a file's by `pread`, a mapping's by a kernel copy, a
    /// stream's next piece). False when nothing is left.
    fn stage_more(&mut self, rest: &mut Rest) -> io::Result<bool> {
        if rest.at < rest.bytes.len() {
            let n = (RECORD - self.stage.len()).min(rest.bytes.len() - rest.at);
            self.stage.extend_from_slice(&rest.bytes[rest.at..rest.at + n]);
            rest.at += n;
            rest.sent += n as u64;
            return Ok(true);
        }
        match &mut rest.body {
            Body::None => return Ok(false),
            Body::Stream(_) if rest.ended => return Ok(false),
            Body::Stream(_) => rest.refill()?,
            Body::File { file, start, end } | Body::Spooled { file, start, end, .. } => {
                let n = (RECORD - self.stage.len()).min((*end - *start) as usize);
                let from = self.stage.len();
                self.stage.resize(from + n, 0);
                let got = match file.read_at(&mut self.stage[from..], *start) {
                    Ok(got) => got,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
                    Err(e) => return Err(e),
                };
                self.stage.truncate(from + got);
                if got == 0 && n > 0 {
                    // The file shrank under us: the response cannot be finished.
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                *start += got as u64;
                rest.sent += got as u64;
                if *start == *end {
                    rest.body = Body::None;
                }
            }
            Body::Mapped { map, start, end } => {
                let n = (RECORD - self.stage.len()).min(*end - *start);
                let at = self.stage.len();
                self.stage.resize(at + n, 0);
                copy_from_mapping(&map[*start..*start + n], &mut self.stage[at..])?;
                *start += n;
                rest.sent += n as u64;
                if *start == *end {
                    rest.body = Body::None;
                }
            }
            // Staged whole by `send`.
            Body::Owned(_) | Body::Multipart { .. } => rest.body = Body::None,
        }
        Ok(true)
    }

    /// Writes the records sealed, then seals and writes more of `rest`,
    /// [`FLUSH_AT`] records at a time, as far as the socket takes them now and at
    /// most about `budget` bytes. True when all of it is out. The stage is empty
    /// after (it is the worker's, shared by its connections).
    fn pour(&mut self, rest: &mut Rest, budget: u64) -> io::Result<bool> {
        let mut moved = 0;
        loop {
            let all_out = self.write_out(&mut moved)?;
            if all_out && rest.done() {
                return Ok(true);
            }
            if !all_out || moved >= budget {
                // What `send` staged (a head before its file) is sealed after what
                // waited before it.
                self.seal()?;
                return Ok(false);
            }
            let mut records = 0;
            while records < FLUSH_AT {
                if !self.stage_more(rest)? {
                    break;
                }
                if self.stage.len() == RECORD {
                    self.seal()?;
                    records += 1;
                }
            }
            // A record begun when the rest ended, or a stream's piece: sealed now.
            self.seal()?;
        }
    }
}

impl Transport for TlsStream<'_> {
    /// Plaintext that has arrived: decrypts the records waiting on the socket,
    /// answering the handshake on the way. `Ok(0)`: the client sent `close_notify`;
    /// an error: it closed without one, or the session failed ([`TlsStream::failure`]).
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.conn.reader().read(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    if self.conn.is_handshaking() {
                        self.failure = Some("the client closed the connection".into());
                    }
                    return Err(e);
                }
                done => return done,
            }
            match self.conn.read_tls(&mut Sock { s: self.sock }) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    // A record or handshake message larger than TLS allows.
                    self.failure = Some(e.to_string());
                    return Err(e);
                }
                Err(e) => return Err(e),
            }
            self.process()?;
        }
    }

    /// The head and a body in memory are sealed whole (a mapping's is under 32 KiB,
    /// a page of ours small); a file or a stream is sealed as it is written, and
    /// what the socket does not take now waits in the [`Rest`].
    fn send(&mut self, head: &[u8], body: Option<&mut Body>, chunked: bool) -> io::Result<Sent> {
        self.stage.clear();
        self.stage.reserve(RECORD);
        self.put(head)?;
        let mut later = None;
        let mut sent = head.len() as u64;
        match body {
            None | Some(Body::None) => {}
            Some(b @ (Body::File { .. } | Body::Spooled { .. } | Body::Stream(_))) => later = Some(b),
            Some(b) => {
                sent += b.len();
                match b {
                    Body::Owned(v) => self.put(v)?,
                    Body::Mapped { map, start, end } => self.put_mapped(&map[*start..*end])?,
                    Body::Multipart { map, parts, tail } => {
                        for (part_head, r) in parts.iter() {
                            self.put(part_head)?;
                            self.put_mapped(&map[r.start as usize..=r.end as usize])?;
                        }
                        self.put(tail)?;
                    }
                    Body::None | Body::File { .. } | Body::Spooled { .. } | Body::Stream(_) => {}
                }
            }
        }
        let mut rest = Rest::new(Vec::new(), Body::None, chunked, sent);
        match &mut later {
            Some(b) => rest.body = std::mem::replace(*b, Body::None),
            None => {
                self.seal()?;
                if self.last {
                    // The answer is sealed whole: its close_notify leaves in the same
                    // write (one segment, one wake-up of the client, not two).
                    self.conn.send_close_notify();
                }
            }
        }
        if !self.pour(&mut rest, FIRST_TURN)? {
            return Ok(Sent::Parked(Box::new(rest)));
        }
        if self.last {
            // After a file or a stream. Sent once (rustls says it once): the
            // session's close finds nothing more to say.
            self.conn.send_close_notify();
            self.write_now();
        }
        if let Some(b) = later {
            *b = rest.body;
        }
        Ok(Sent::All(rest.sent))
    }

    fn resume(&mut self, rest: &mut Rest) -> io::Result<bool> {
        self.pour(rest, SEND_CHUNK as u64)
    }

    fn last_response(&mut self) {
        self.last = true;
    }

    fn shutdown_write(&mut self) {
        let _ = self.sock.shutdown(std::net::Shutdown::Write);
    }

    fn buffered(&mut self) -> bool {
        self.conn.process_new_packets().is_ok_and(|s| s.plaintext_bytes_to_read() > 0)
    }

    fn tls(&self) -> Option<TlsFields<'_>> {
        Some(TlsFields {
            protocol: self.conn.protocol_version().map_or("-", crate::tls::protocol_name),
            cipher: self.conn.negotiated_cipher_suite().map_or("-", |s| crate::tls::cipher_name(s.suite())),
            sni: self.conn.server_name(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::range::ByteRange;
    use crate::tls::test_certs::leaf;
    use std::fs::File;
    use std::rc::Rc;
    use std::time::Duration;

    fn server_config(made: &crate::tls::test_certs::Made) -> Arc<ServerConfig> {
        let c = ServerConfig::builder_with_provider(Arc::new(crate::tls::provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(made.chain.clone(), made.key())
            .unwrap();
        Arc::new(c)
    }

    /// A client in a thread: sends `requests` in one write, reads until the server's
    /// close_notify, returns what it read. (A thread of the test harness: the rule
    /// against threads is the server's.)
    #[allow(clippy::disallowed_methods)]
    fn client(
        made: &crate::tls::test_certs::Made,
        addr: std::net::SocketAddr,
        requests: &'static [u8],
    ) -> std::thread::JoinHandle<Vec<u8>> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(made.chain[0].clone()).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(crate::tls::provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        std::thread::spawn(move || {
            let c = rustls::ClientConnection::new(Arc::new(config), "a.example".try_into().unwrap()).unwrap();
            let mut s = rustls::StreamOwned::new(c, TcpStream::connect(addr).unwrap());
            s.write_all(requests).unwrap();
            let mut got = Vec::new();
            s.read_to_end(&mut got).expect("a close_notify at the end");
            got
        })
    }

    /// Reads on `t` until `want` plaintext bytes came, as the worker's loop would
    /// (each `WouldBlock` is a wait in the set).
    fn read_all(t: &mut TlsStream<'_>, want: usize) -> Vec<u8> {
        let mut got = Vec::new();
        let mut buf = [0u8; 7];
        let end = std::time::Instant::now() + Duration::from_secs(20);
        while got.len() < want {
            assert!(std::time::Instant::now() < end, "read {got:?}");
            match t.read(&mut buf) {
                Ok(0) => panic!("closed"),
                Ok(n) => got.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(2)),
                Err(e) => panic!("{e}: {:?}", t.failure),
            }
        }
        got
    }

    #[test]
    fn requests_come_through_the_handshake_and_every_body_kind_goes_out_whole() {
        let made = leaf(&["a.example"], -1, 30, None);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let requests: &[u8] = b"GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n";
        let client = client(&made, listener.local_addr().unwrap(), requests);
        let (sock, _) = listener.accept().unwrap();
        let mut session = Session::new(&server_config(&made)).unwrap();
        let mut stage = Vec::new();
        let mut t = TlsStream::new(&sock, &mut session, &mut stage);
        assert!(t.tls().is_some_and(|f| f.protocol == "-"), "no protocol before the handshake");
        // Read 7 bytes at a time: what is decrypted and not read yet stays buffered.
        assert_eq!(read_all(&mut t, 7), b"GET /1 ");
        assert!(t.buffered(), "the rest of the records is held decrypted");
        assert_eq!(read_all(&mut t, requests.len() - 7), &requests[7..]);
        let fields = t.tls().unwrap();
        assert_eq!((fields.protocol, fields.sni), ("TLSv1.3", Some("a.example")));

        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&p, &data).unwrap();
        let file = File::open(&p).unwrap();
        let map = Rc::new(crate::base::sys::map_file(&file, data.len() as u64).unwrap());
        let file = Rc::new(file);
        let parts = vec![
            (b"<a>".to_vec(), ByteRange { start: 5, end: 9 }),
            (b"<b>".to_vec(), ByteRange { start: 70_000, end: 99_999 }),
        ];
        let mut bodies = [
            Body::Owned(b"owned".to_vec()),
            Body::Mapped { map: map.clone(), start: 10, end: 40_000 },
            Body::File { file: file.clone(), start: 3, end: 100_000 },
            Body::Spooled { file, start: 7, end: 90_000, hold: Rc::new(()) },
            Body::Multipart { map, parts, tail: b"<end>".to_vec() },
        ];
        let mut want = Vec::new();
        for b in &bodies {
            want.extend_from_slice(b"HEAD\r\n");
            match b {
                Body::Owned(v) => want.extend_from_slice(v),
                Body::Mapped { start, end, .. } => want.extend_from_slice(&data[*start..*end]),
                Body::File { start, end, .. } | Body::Spooled { start, end, .. } => {
                    want.extend_from_slice(&data[*start as usize..*end as usize])
                }
                Body::Multipart { .. } => {
                    want.extend_from_slice(b"<a>");
                    want.extend_from_slice(&data[5..=9]);
                    want.extend_from_slice(b"<b>");
                    want.extend_from_slice(&data[70_000..]);
                    want.extend_from_slice(b"<end>");
                }
                Body::None | Body::Stream(_) => {}
            }
        }
        // Never waiting: what the socket does not take goes as the client reads.
        sock.set_nonblocking(true).unwrap();
        for b in &mut bodies {
            let len = b.len();
            let n = match t.send(b"HEAD\r\n", Some(b), false).unwrap() {
                Sent::All(n) => n,
                Sent::Parked(mut rest) => {
                    let end = std::time::Instant::now() + Duration::from_secs(20);
                    while !t.resume(&mut rest).unwrap() {
                        assert!(std::time::Instant::now() < end, "the client reads");
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    rest.sent
                }
            };
            assert_eq!(n, 6 + len);
        }
        drop(t);
        session.close(&sock);
        drop(sock);
        assert!(client.join().unwrap() == want, "the client read every byte sent, then a close_notify");
    }

    #[test]
    fn the_last_answer_and_its_close_notify_leave_in_one_segment() {
        let made = leaf(&["a.example"], -1, 30, None);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = client(&made, listener.local_addr().unwrap(), b"GET / HTTP/1.1\r\n\r\n");
        let (sock, _) = listener.accept().unwrap();
        // Each write a segment of its own at once: what is counted is what we wrote.
        sock.set_nodelay(true).unwrap();
        let mut session = Session::new(&server_config(&made)).unwrap();
        let mut stage = Vec::new();
        let mut t = TlsStream::new(&sock, &mut session, &mut stage);
        assert_eq!(read_all(&mut t, 18), b"GET / HTTP/1.1\r\n\r\n");
        t.last_response();
        let before = crate::base::sys::tcp_data_segments_out(&sock).unwrap();
        let sent = t.send(b"HEAD\r\n", Some(&mut Body::Owned(b"body".to_vec())), false).unwrap();
        assert!(matches!(sent, Sent::All(10)));
        let after = crate::base::sys::tcp_data_segments_out(&sock).unwrap();
        assert_eq!(after - before, 1, "the answer (with the tickets it took along) and the close_notify in one write");
        drop(t);
        // The close finds nothing more to say.
        assert!(!session.wants_write());
        session.close(&sock);
        assert_eq!(crate::base::sys::tcp_data_segments_out(&sock).unwrap(), after);
        drop(sock);
        assert_eq!(client.join().unwrap(), b"HEAD\r\nbody", "read to the close_notify");
    }

    /// A client that completes its handshake, sends one request, then (when told)
    /// a record that cannot be decrypted, and never reads.
    #[allow(clippy::disallowed_methods)]
    fn client_that_never_reads(
        made: &crate::tls::test_certs::Made,
        addr: std::net::SocketAddr,
        go: std::sync::mpsc::Receiver<()>,
    ) -> std::thread::JoinHandle<()> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(made.chain[0].clone()).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(crate::tls::provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        std::thread::spawn(move || {
            let c = rustls::ClientConnection::new(Arc::new(config), "a.example".try_into().unwrap()).unwrap();
            let mut s = rustls::StreamOwned::new(c, TcpStream::connect(addr).unwrap());
            s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
            go.recv().unwrap();
            s.sock.write_all(b"\x17\x03\x03\x00\x20not a record this session can open").unwrap();
            let _ = go.recv();
        })
    }

    #[test]
    fn an_alert_on_the_read_path_never_waits_for_a_full_socket() {
        let made = leaf(&["a.example"], -1, 30, None);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let (go, went) = std::sync::mpsc::channel();
        let client = client_that_never_reads(&made, listener.local_addr().unwrap(), went);
        let (sock, _) = listener.accept().unwrap();
        let mut session = Session::new(&server_config(&made)).unwrap();
        let mut stage = Vec::new();
        let mut t = TlsStream::new(&sock, &mut session, &mut stage);
        assert_eq!(read_all(&mut t, 18), b"GET / HTTP/1.1\r\n\r\n");
        // The socket full of answers the client does not read (written past TLS, as
        // only the fill matters), with the workers' one-second slices of waiting.
        sock.set_nonblocking(true).unwrap();
        // Until it stays full: what loopback moves on to the client's buffer, and
        // what the client's kernel packs there, frees room for a while.
        let (mut rounds, mut full) = (0, 0);
        while full < 3 && rounds < 200 {
            let mut took = 0;
            for size in [65536, 1024, 1] {
                while let Ok(n) = (&sock).write(&vec![0u8; size]) {
                    took += n;
                }
            }
            full = if took == 0 { full + 1 } else { 0 };
            rounds += 1;
            std::thread::sleep(Duration::from_millis(50));
        }
        sock.set_nonblocking(false).unwrap();
        sock.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
        go.send(()).unwrap();
        let started = std::time::Instant::now();
        let e = loop {
            match t.read(&mut [0u8; 64]) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(2)),
                Ok(n) => panic!("read {n} bytes"),
                Err(e) => break e,
            }
            assert!(started.elapsed() < Duration::from_secs(20), "no failure seen");
        };
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
        // The alert did not wait for the socket (which blocks writes for up to 1 s).
        assert!(started.elapsed() < Duration::from_secs(2), "the read path waited {:?}", started.elapsed());
        go.send(()).unwrap();
        client.join().unwrap();
    }

    #[test]
    fn garbage_after_a_record_header_fails_the_handshake_with_a_reason() {
        let made = leaf(&["a.example"], -1, 30, None);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (sock, _) = listener.accept().unwrap();
        c.write_all(b"\x16\x03\x01\x00\x08not a hello").unwrap();
        let mut session = Session::new(&server_config(&made)).unwrap();
        let mut b = [0u8; 1];
        sock.peek(&mut b).unwrap();
        assert_eq!(session.opening(&sock, b""), Opening::Tls);
        let mut stage = Vec::new();
        let mut t = TlsStream::new(&sock, &mut session, &mut stage);
        let e = t.read(&mut [0u8; 64]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(t.failure.as_deref().is_some_and(|f| f.contains("corrupt message")), "{:?}", t.failure);
    }

    #[test]
    fn a_mapping_past_the_end_of_a_shrunk_file_is_an_error_not_a_signal() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![7u8; 3 * 4096]).unwrap();
        let file = File::open(&p).unwrap();
        let map = crate::base::sys::map_file(&file, 3 * 4096).unwrap();
        let mut dst = vec![0u8; 3 * 4096];
        copy_from_mapping(&map[..], &mut dst).unwrap();
        assert!(dst.iter().all(|&b| b == 7));
        // Cut to one page: the mapping's later pages are past the end of the file,
        // where a read of our own would take SIGBUS and kill the test binary.
        std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(4096).unwrap();
        let e = copy_from_mapping(&map[4096..], &mut dst[..2 * 4096]).unwrap_err();
        assert!(
            e.raw_os_error() == Some(libc::EFAULT) || e.kind() == io::ErrorKind::UnexpectedEof,
            "an error, not a signal: {e}"
        );
        copy_from_mapping(&map[..4096], &mut dst[..4096]).unwrap();
    }

    #[test]
    fn the_first_byte_tells_a_handshake_from_plain_http_and_garbage() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        for (sent, want) in [
            (&b"\x16\x03\x01\x00"[..], Opening::Tls),
            (b"GET / HTTP/1.1\r\n", Opening::PlainHttp),
            (b"\x00\x01", Opening::Garbage(0)),
            (b"get /", Opening::Garbage(b'g')),
            (b"", Opening::Nothing),
        ] {
            let mut client = TcpStream::connect(addr).unwrap();
            let (server, _) = listener.accept().unwrap();
            client.write_all(sent).unwrap();
            if !sent.is_empty() {
                // Arrived, as TCP_DEFER_ACCEPT makes sure of before an accept.
                let mut b = [0u8; 1];
                server.peek(&mut b).unwrap();
            }
            assert_eq!(opening(&server), want, "{sent:?}");
            assert_eq!(opening(&server), want, "peeked, not taken");
            if let Some(&b) = sent.first() {
                assert_eq!(first_byte(b), want, "the same from bytes read already");
            }
            drop(client);
            if sent.is_empty() {
                let mut b = [0u8; 1];
                let _ = server.peek(&mut b);
                assert_eq!(opening(&server), Opening::Closed);
            }
        }
    }
}
