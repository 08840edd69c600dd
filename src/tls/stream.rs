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
//! Writes block, as a plain connection's do, bounded by the send timeout
//! ([`Pacer`]). A response is staged into records of [`RECORD`] bytes (the head and a
//! small body in one), sealed, and written once [`FLUSH_AT`] bytes wait or it ends.
//! File bytes reach the stage by `pread` from the file, or, for a small file the
//! worker keeps only mapped, by a copy the kernel makes (`process_vm_readv`): our
//! code never reads a mapping, so a file that shrinks under it fails that one
//! response (`EFAULT`, short read) instead of killing the worker with `SIGBUS`.
//! No `sendfile`: the bytes must be encrypted here.

use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::time::Duration;

use rustls::{ServerConfig, ServerConnection};

use crate::http::response::Body;
use crate::log::record::TlsFields;
use crate::serve::transport::{Pacer, Transport, pump, read_now};

/// Plaintext bytes per record: TLS's largest, so a response goes out in as few
/// records (and AEAD calls) as it can.
pub const RECORD: usize = 16 * 1024;

/// Sealed bytes held before they are written: four records, so a large file goes
/// out in writes of 64 KiB (nginx's TLS writes are one record each).
pub const FLUSH_AT: usize = 4 * (RECORD + 64);

/// A TLS session on a connection a worker holds.
pub struct Session {
    pub conn: ServerConnection,
    /// The first byte has been looked at and opened a TLS handshake.
    opened: bool,
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
        Ok(Session { conn, opened: false })
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

    /// Ends the session: a `close_notify` after a handshake (and an alert rustls
    /// queued after a failed one), written if the socket takes it now. Never waits:
    /// the connection is being closed.
    pub fn close(&mut self, s: &TcpStream) {
        if !self.conn.is_handshaking() {
            self.conn.send_close_notify();
        }
        let mut out = Sock { s, dontwait: true };
        while self.conn.wants_write() {
            if self.conn.write_tls(&mut out).is_err() {
                break;
            }
        }
    }
}

/// The socket under a session: reads never wait; writes block up to the socket's send
/// timeout, or never wait (`dontwait`).
struct Sock<'a> {
    s: &'a TcpStream,
    dontwait: bool,
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
        let mut flags = MsgFlags::MSG_NOSIGNAL;
        if self.dontwait {
            flags |= MsgFlags::MSG_DONTWAIT;
        }
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
    /// Where a response is staged into records (the worker's, reused).
    stage: &'a mut Vec<u8>,
    send_timeout: Duration,
    /// Sealed bytes not written yet.
    unflushed: usize,
    /// The response being sent is the last: `close_notify` follows it in its write.
    last: bool,
    /// Why the session failed, if it did (rustls' error, or what the client did).
    pub failure: Option<String>,
}

impl<'a> TlsStream<'a> {
    pub fn new(
        sock: &'a TcpStream,
        session: &'a mut Session,
        stage: &'a mut Vec<u8>,
        send_timeout: Duration,
    ) -> TlsStream<'a> {
        TlsStream { sock, conn: &mut session.conn, stage, send_timeout, unflushed: 0, last: false, failure: None }
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
    /// Only a handshake's flight may wait for the socket (within the send timeout):
    /// the client waits for it, and it goes into a socket buffer nothing was written
    /// to yet. Anything else said on the read path (an alert, tickets, a key update)
    /// is written only as far as the socket takes it now: the socket may be full of
    /// answers a client does not read, and a worker must not wait on it here. What
    /// is left leaves before the next answer's bytes; an alert that closes the
    /// session is then dropped with it, as a close never waits either.
    fn process(&mut self) -> io::Result<()> {
        let processed = self.conn.process_new_packets();
        let request_waits =
            !self.conn.is_handshaking() && processed.as_ref().is_ok_and(|s| s.plaintext_bytes_to_read() > 0);
        if self.conn.wants_write() && !request_waits {
            if self.conn.is_handshaking() && processed.is_ok() {
                self.flush_handshake()?;
            } else {
                self.write_now();
            }
        }
        match processed {
            Ok(_) => Ok(()),
            Err(e) => {
                self.failure = Some(e.to_string());
                Err(io::Error::new(io::ErrorKind::InvalidData, e))
            }
        }
    }

    /// Writes what rustls has sealed, waiting up to the send timeout.
    fn flush(&mut self, pacer: &mut Pacer<'_>) -> io::Result<()> {
        let mut out = Sock { s: self.sock, dontwait: false };
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut out) {
                Ok(_) => pacer.sent(),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => pacer.stalled(e)?,
            }
        }
        self.unflushed = 0;
        Ok(())
    }

    /// Writes what rustls has sealed as far as the socket takes it without waiting.
    fn write_now(&mut self) {
        let mut out = Sock { s: self.sock, dontwait: true };
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut out) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
    }

    /// Sends a handshake's flight within the send timeout: a few kilobytes, which an
    /// empty socket buffer takes at once.
    fn flush_handshake(&mut self) -> io::Result<()> {
        let (mut beat, mut wait) = (|| {}, || {});
        let mut pacer = Pacer::new(self.send_timeout, &mut beat, &mut wait);
        self.flush(&mut pacer)
    }

    /// Seals the staged bytes into a record.
    fn seal(&mut self, pacer: &mut Pacer<'_>) -> io::Result<()> {
        if self.stage.is_empty() {
            return Ok(());
        }
        // No buffer limit (Session::new): the writer takes it all.
        self.conn.writer().write_all(self.stage)?;
        self.unflushed += self.stage.len();
        self.stage.clear();
        if self.unflushed >= FLUSH_AT { self.flush(pacer) } else { Ok(()) }
    }

    /// Room left in the stage's record (sealing it first if it is full).
    fn room(&mut self, pacer: &mut Pacer<'_>) -> io::Result<usize> {
        if self.stage.len() == RECORD {
            self.seal(pacer)?;
        }
        Ok(RECORD - self.stage.len())
    }

    fn put(&mut self, mut bytes: &[u8], pacer: &mut Pacer<'_>) -> io::Result<()> {
        while !bytes.is_empty() {
            let n = self.room(pacer)?.min(bytes.len());
            self.stage.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        Ok(())
    }

    /// Bytes of a mapped file, copied by the kernel (see the module's comment).
    fn put_mapped(&mut self, mut mapped: &[u8], pacer: &mut Pacer<'_>) -> io::Result<()> {
        while !mapped.is_empty() {
            let n = self.room(pacer)?.min(mapped.len());
            let at = self.stage.len();
            self.stage.resize(at + n, 0);
            copy_from_mapping(&mapped[..n], &mut self.stage[at..])?;
            mapped = &mapped[n..];
        }
        Ok(())
    }

    /// Bytes `start..end` of `file`, read with `pread`.
    fn put_file(&mut self, file: &File, mut at: u64, end: u64, pacer: &mut Pacer<'_>) -> io::Result<()> {
        while at < end {
            let n = self.room(pacer)?.min((end - at) as usize);
            let from = self.stage.len();
            self.stage.resize(from + n, 0);
            let got = match file.read_at(&mut self.stage[from..], at) {
                Ok(got) => got,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => 0,
                Err(e) => return Err(e),
            };
            self.stage.truncate(from + got);
            if got == 0 && self.stage.len() == from {
                // The file shrank under us: the response cannot be finished.
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            at += got as u64;
        }
        Ok(())
    }
}

/// Copies `src`, bytes of a file mapping, into `dst` (as long) by a kernel copy: past
/// the end of a file that shrank, the kernel reports `EFAULT` or a short copy where
/// our own read would take `SIGBUS`. `process_vm_readv` on this process needs no
/// privilege (it is its own memory) and is in systemd's `@system-service` set.
fn copy_from_mapping(src: &[u8], dst: &mut [u8]) -> io::Result<()> {
    use nix::sys::uio::{RemoteIoVec, process_vm_readv};
    let mut done = 0;
    while done < src.len() {
        let remote = [RemoteIoVec { base: src[done..].as_ptr() as usize, len: src.len() - done }];
        match process_vm_readv(nix::unistd::getpid(), &mut [IoSliceMut::new(&mut dst[done..])], &remote) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => done += n,
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
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
            match self.conn.read_tls(&mut Sock { s: self.sock, dontwait: true }) {
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

    fn send(
        &mut self,
        head: &[u8],
        mut body: Option<&mut Body>,
        chunked: bool,
        pacer: &mut Pacer<'_>,
    ) -> io::Result<u64> {
        self.stage.clear();
        self.stage.reserve(RECORD);
        self.put(head, pacer)?;
        let mut framing = 0;
        match body.as_deref_mut() {
            None | Some(Body::None) => {}
            Some(Body::Stream(s)) => framing = pump(s, chunked, &mut |bytes| self.put(bytes, pacer))?,
            Some(Body::Owned(v)) => self.put(v, pacer)?,
            Some(Body::Mapped { map, start, end }) => self.put_mapped(&map[*start..*end], pacer)?,
            Some(Body::File { file, start, end }) => self.put_file(file, *start, *end, pacer)?,
            Some(Body::Multipart { map, parts, tail }) => {
                for (part_head, r) in parts {
                    self.put(part_head, pacer)?;
                    self.put_mapped(&map[r.start as usize..=r.end as usize], pacer)?;
                }
                self.put(tail, pacer)?;
            }
        }
        self.seal(pacer)?;
        if self.last {
            // Sent once: the session's close finds nothing more to say.
            self.conn.send_close_notify();
        }
        self.flush(pacer)?;
        Ok(head.len() as u64 + body.map_or(0, |b| b.sent()) + framing)
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
            protocol: self.conn.protocol_version().map_or("-", super::protocol_name),
            cipher: self.conn.negotiated_cipher_suite().map_or("-", |s| super::cipher_name(s.suite())),
            sni: self.conn.server_name(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::range::ByteRange;
    use crate::tls::test_certs::leaf;
    use std::rc::Rc;

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
        let mut t = TlsStream::new(&sock, &mut session, &mut stage, Duration::from_secs(10));
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
        let map = Rc::new(crate::sys::map_file(&file, data.len() as u64).unwrap());
        let file = Rc::new(file);
        let parts = vec![
            (b"<a>".to_vec(), ByteRange { start: 5, end: 9 }),
            (b"<b>".to_vec(), ByteRange { start: 70_000, end: 99_999 }),
        ];
        let mut bodies = [
            Body::Owned(b"owned".to_vec()),
            Body::Mapped { map: map.clone(), start: 10, end: 40_000 },
            Body::File { file, start: 3, end: 100_000 },
            Body::Multipart { map, parts, tail: b"<end>".to_vec() },
        ];
        let mut want = Vec::new();
        let (mut beats, mut wait) = (0, || {});
        {
            let mut beat = || beats += 1;
            let mut pacer = Pacer::new(Duration::from_secs(10), &mut beat, &mut wait);
            for b in &mut bodies {
                let n = t.send(b"HEAD\r\n", Some(b), false, &mut pacer).unwrap();
                assert_eq!(n, 6 + b.len());
            }
        }
        assert!(beats >= 4, "progress seen");
        for b in &bodies {
            want.extend_from_slice(b"HEAD\r\n");
            match b {
                Body::Owned(v) => want.extend_from_slice(v),
                Body::Mapped { start, end, .. } => want.extend_from_slice(&data[*start..*end]),
                Body::File { start, end, .. } => want.extend_from_slice(&data[*start as usize..*end as usize]),
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
        drop(t);
        session.close(&sock);
        drop(sock);
        assert!(client.join().unwrap() == want, "the client read every byte sent, then a close_notify");
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
        let mut t = TlsStream::new(&sock, &mut session, &mut stage, Duration::from_secs(5));
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
        // The alert did not wait for the socket (the send timeout is 5 s here).
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
        let mut t = TlsStream::new(&sock, &mut session, &mut stage, Duration::from_secs(10));
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
        let map = crate::sys::map_file(&file, 3 * 4096).unwrap();
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
