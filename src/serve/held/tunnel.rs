//! A connection that switched protocols (a WebSocket through a proxy location), as
//! a worker holds it (`Phase::Tunnel`): once the upstream's `101 Switching
//! Protocols` is sent, the worker's loop relays bytes between the client and the
//! upstream, both ways, as they come (its turns and its end: `crate::serve::relay`).
//!
//! A tunnel is two sockets in the worker's set (`Phase::Tunnel`): the client's,
//! through its TLS session on an HTTPS port, and the upstream's. Neither is waited
//! on: a turn reads what has arrived on one side and writes it to the other at
//! once; what that side does not take now is kept (a read's worth at most,
//! [`PIECE`]; over TLS, sealed in the session), and the side it came from is not
//! read again until it is out, so a side that stops reading stops the other's
//! sender too (backpressure), and an idle tunnel holds two sockets and no buffer.
//! An end of stream on one side is passed on as one (a half close: `shutdown` of
//! the other's sending side, a TLS `close_notify`) once what came before it is
//! written; the tunnel ends when both ways have ended, when either side fails,
//! when it carries nothing either way for its `tunnel_timeout`, or when its worker
//! leaves and cannot hand it to another (a TLS one: draining, nothing more is
//! read, what is kept is written for a moment, then both sides are closed). A
//! plain one is handed over whole ([`Tunnel::freeze`], [`Tunnel::thaw`]). Its one
//! access-log record is made when it ends: status 101, the bytes each way, the time
//! it lasted.

use std::io;
use std::net::TcpStream;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::sys::socket::{MsgFlags, Shutdown, recv, send, shutdown};

use crate::http::response::Switched;
use crate::serve::tls::TlsStream;
use crate::serve::transport::Transport;

/// What one read takes at most, from either side: a TLS record's plaintext. A read
/// is made only when nothing waits for the other side, so this is also the most a
/// tunnel keeps for a side that does not take it.
pub(crate) const PIECE: usize = 16 * 1024;

/// What a turn moves at most before the worker's other connections get theirs (a
/// tunnel with more is served again after them).
const TURN_BUDGET: u64 = 256 * 1024;

/// Bytes one side has not taken yet, from `at`.
#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    at: usize,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.at == self.bytes.len()
    }

    /// Keeps `bytes` after what waits (the allocation goes once all is out).
    fn keep(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }

    fn taken(&mut self, n: usize) {
        self.at += n;
        if self.is_empty() {
            *self = Pending::default();
        }
    }
}

/// How far one side's stream has got.
#[derive(Default, Clone, Copy)]
struct End {
    /// Its end of stream has been read.
    read_done: bool,
    /// Our sending side to it is shut.
    write_shut: bool,
}

/// A tunnel between a client and an upstream (see the module's words), with `R`,
/// what the record of its end needs (the request and its 101).
pub(crate) struct Tunnel<R> {
    far: OwnedFd,
    /// From the client, not yet taken by the upstream.
    to_far: Pending,
    /// From the upstream, not yet taken by the client's socket (over TLS what waits
    /// is sealed in the session instead).
    to_client: Pending,
    client: End,
    upstream: End,
    /// The client's `close_notify` is sealed (a TLS client's half close).
    notified: bool,
    /// Bytes relayed: from the client to the upstream, and back.
    pub(crate) up: u64,
    pub(crate) down: u64,
    pub(crate) idle_ms: u64,
    /// The worker leaves: nothing more is read; once what is kept is written, both
    /// sides are closed.
    pub(crate) draining: bool,
    /// What the record of its end needs.
    pub(crate) owed: R,
    /// Its upstream counted in use for the pool while it lives ([`Switched::busy`]);
    /// not carried to another worker (a tunnel handed over at a reload stops
    /// counting).
    _busy: Option<Box<dyn std::any::Any>>,
}

impl<R> Tunnel<R> {
    /// A tunnel for the 101 just sent: `unsent`, what the client's socket did not
    /// take of its head; `from_client`, what the client sent after its request.
    pub(crate) fn new(far: Switched, owed: R, unsent: &[u8], from_client: Vec<u8>) -> Tunnel<R> {
        let mut to_client = Pending::default();
        to_client.keep(unsent);
        to_client.keep(&far.early);
        let idle_ms = far.idle.as_millis() as u64;
        // The upstream's bytes after its head count as relayed; the 101's are the head's.
        let down = far.early.len() as u64;
        Tunnel {
            far: far.far,
            to_far: Pending { bytes: from_client, at: 0 },
            to_client,
            client: End::default(),
            upstream: End::default(),
            notified: false,
            up: 0,
            down,
            idle_ms,
            draining: false,
            owed,
            _busy: far.busy,
        }
    }

    /// Whether the client's socket is watched for input, and for room; `sealed`:
    /// a TLS session holds records to write.
    pub(crate) fn client_waits(&self, sealed: bool) -> (bool, bool) {
        let input = !self.client.read_done && !self.draining && self.to_far.is_empty();
        (input, !self.to_client.is_empty() || sealed)
    }

    /// The upstream's socket, and whether it is watched for input, and for room.
    pub(crate) fn far_waits(&self, sealed: bool) -> (BorrowedFd<'_>, bool, bool) {
        let input = !self.upstream.read_done && !self.draining && self.to_client.is_empty() && !sealed;
        (self.far.as_fd(), input, !self.to_far.is_empty())
    }

    /// The upstream's socket (handed over beside the client's).
    pub(crate) fn far(&self) -> BorrowedFd<'_> {
        self.far.as_fd()
    }

    /// Its state for another worker (`crate::fork::handover`), after `record`'s: what
    /// each side has not taken yet, how far each side's stream got, its counts and
    /// timeout. A draining tunnel is not handed over.
    pub(crate) fn freeze(&self, record: impl FnOnce(&R, &mut Vec<u8>), out: &mut Vec<u8>) {
        out.clear();
        let mut owed = Vec::new();
        record(&self.owed, &mut owed);
        put(out, &owed);
        put(out, &self.to_far.bytes[self.to_far.at..]);
        put(out, &self.to_client.bytes[self.to_client.at..]);
        let ends = [self.client.read_done, self.client.write_shut, self.upstream.read_done, self.upstream.write_shut];
        out.push(ends.iter().enumerate().map(|(i, &e)| u8::from(e) << i).sum());
        for n in [self.up, self.down, self.idle_ms] {
            out.extend_from_slice(&n.to_le_bytes());
        }
    }

    /// A tunnel another worker froze ([`Tunnel::freeze`]), with its upstream's
    /// socket; `record` reads its record's part. `None` if `state` is not one.
    pub(crate) fn thaw(
        state: &[u8],
        far: OwnedFd,
        record: impl FnOnce(&mut Cursor<'_>) -> Option<R>,
    ) -> Option<Tunnel<R>> {
        let mut c = Cursor(state);
        let mut owed = Cursor(c.bytes()?);
        let owed = record(&mut owed).filter(|_| owed.0.is_empty())?;
        let to_far = Pending { bytes: c.bytes()?.to_vec(), at: 0 };
        let to_client = Pending { bytes: c.bytes()?.to_vec(), at: 0 };
        let ends = c.take(1)?[0];
        let end = |i: u32| End { read_done: ends & (1 << i) != 0, write_shut: ends & (2 << i) != 0 };
        let (up, down, idle_ms) = (c.u64()?, c.u64()?, c.u64()?);
        if !c.0.is_empty() {
            return None;
        }
        let (client, upstream) = (end(0), end(2));
        Some(Tunnel {
            far,
            to_far,
            to_client,
            client,
            upstream,
            notified: false,
            up,
            down,
            idle_ms,
            draining: false,
            owed,
            _busy: None,
        })
    }

    /// Both ways have ended (or, draining, all that was kept is written).
    pub(crate) fn ended(&self) -> bool {
        self.client.write_shut
            && self.upstream.write_shut
            && (self.draining || (self.client.read_done && self.upstream.read_done))
    }

    /// Moves what has arrived each way, as far as the other side takes it now, and
    /// passes on ends of stream. Returns the bytes moved, and whether it stopped at
    /// its budget (or with decrypted input held) with more to do.
    pub(crate) fn turn(&mut self, client: &mut Client<'_, '_>, scratch: &mut [u8]) -> io::Result<(u64, bool)> {
        let mut moved = 0;
        let mut more = false;
        // From the upstream to the client.
        loop {
            if !client.flush(&mut self.to_client)? || self.upstream.read_done || self.draining {
                break;
            }
            if moved >= TURN_BUDGET {
                more = true;
                break;
            }
            match recv(self.far.as_raw_fd(), scratch, MsgFlags::MSG_DONTWAIT) {
                Ok(0) => self.upstream.read_done = true,
                Ok(n) => {
                    client.put(&scratch[..n], &mut self.to_client)?;
                    self.down += n as u64;
                    moved += n as u64;
                }
                Err(nix::errno::Errno::EAGAIN) => break,
                Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // From the client to the upstream.
        loop {
            if !flush_far(self.far.as_fd(), &mut self.to_far)? || self.client.read_done || self.draining {
                break;
            }
            if moved >= TURN_BUDGET {
                more = true;
                break;
            }
            match client.read(scratch) {
                Ok(0) => self.client.read_done = true,
                Ok(n) => {
                    put_far(self.far.as_fd(), &scratch[..n], &mut self.to_far)?;
                    self.up += n as u64;
                    moved += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        // Plaintext a TLS session decrypted and holds: its socket will not say so.
        if !self.client.read_done && !self.draining && self.to_far.is_empty() && client.buffered() {
            more = true;
        }
        // Ends of stream passed on once what came before them is written.
        if (self.client.read_done || self.draining) && self.to_far.is_empty() && !self.upstream.write_shut {
            let _ = shutdown(self.far.as_raw_fd(), Shutdown::Write);
            self.upstream.write_shut = true;
        }
        if (self.upstream.read_done || self.draining) && self.to_client.is_empty() && !self.client.write_shut {
            self.client.write_shut = client.shut(&mut self.notified)?;
        }
        Ok((moved, more))
    }
}

/// Appends `bytes` with their length before them (a frozen tunnel's fields).
pub(crate) fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// Reads what [`put`] and little-endian numbers wrote; `None` past the end.
pub(crate) struct Cursor<'a>(pub(crate) &'a [u8]);

impl<'a> Cursor<'a> {
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = (self.0.get(..n)?, self.0.get(n..)?);
        self.0 = rest;
        Some(head)
    }

    pub(crate) fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = u32::from_le_bytes(self.take(4)?.try_into().ok()?);
        self.take(n as usize)
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.take(8)?.try_into().ok()?))
    }
}

/// Writes what waits for the upstream as far as its socket takes it now: true when
/// all of it went.
fn flush_far(far: BorrowedFd<'_>, pending: &mut Pending) -> io::Result<bool> {
    while !pending.is_empty() {
        match send(far.as_raw_fd(), &pending.bytes[pending.at..], MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT) {
            Ok(n) => pending.taken(n),
            Err(nix::errno::Errno::EAGAIN) => return Ok(false),
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

/// Writes `bytes` to the upstream as far as it takes them now, keeping the rest.
fn put_far(far: BorrowedFd<'_>, bytes: &[u8], pending: &mut Pending) -> io::Result<()> {
    pending.keep(bytes);
    flush_far(far, pending).map(drop)
}

/// The client's side of a tunnel for one turn: its socket, or its TLS session.
pub(crate) enum Client<'t, 's> {
    Plain(&'t TcpStream),
    Tls(TlsStream<'s>),
}

impl Client<'_, '_> {
    /// What has arrived: `Ok(0)` at its end (over TLS a close without
    /// `close_notify` too: many clients end so).
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Client::Plain(s) => crate::serve::transport::read_now(s, buf),
            Client::Tls(t) => match t.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
                got => got,
            },
        }
    }

    /// Writes what waits for the client as far as its socket takes it now: true
    /// when all of it went.
    fn flush(&mut self, pending: &mut Pending) -> io::Result<bool> {
        match self {
            Client::Plain(s) => flush_far(s.as_fd(), pending),
            Client::Tls(t) => {
                // Bytes that waited before the session took over (none, over TLS:
                // the 101's rest is sealed already).
                if !pending.is_empty() {
                    t.seal_now(&pending.bytes[pending.at..])?;
                    *pending = Pending::default();
                }
                t.flush_sealed()
            }
        }
    }

    /// Writes `bytes` to the client as far as it takes them now; the rest waits
    /// (over TLS, sealed).
    fn put(&mut self, bytes: &[u8], pending: &mut Pending) -> io::Result<()> {
        match self {
            Client::Plain(s) => put_far(s.as_fd(), bytes, pending),
            Client::Tls(t) => {
                t.seal_now(bytes)?;
                t.flush_sealed().map(drop)
            }
        }
    }

    /// Decrypted input held in the session.
    fn buffered(&mut self) -> bool {
        match self {
            Client::Plain(_) => false,
            Client::Tls(t) => t.buffered(),
        }
    }

    /// Ends our sending side: true once it is (over TLS after `close_notify` is
    /// written; `notified`: it is sealed).
    fn shut(&mut self, notified: &mut bool) -> io::Result<bool> {
        match self {
            Client::Plain(s) => {
                let _ = s.shutdown(std::net::Shutdown::Write);
                Ok(true)
            }
            Client::Tls(t) => {
                if !*notified {
                    t.end_sending();
                    *notified = true;
                }
                if !t.flush_sealed()? {
                    return Ok(false);
                }
                t.shutdown_write();
                Ok(true)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    /// A tunnel between a loopback TCP connection (`user` is the client's end) and
    /// a unix socket pair (`upstream` is the upstream's end), both non-blocking.
    fn tunnel() -> (Tunnel<()>, TcpStream, TcpStream, UnixStream) {
        let (far, upstream) = UnixStream::pair().unwrap();
        far.set_nonblocking(true).unwrap();
        upstream.set_nonblocking(true).unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let user = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (client, _) = l.accept().unwrap();
        client.set_nonblocking(true).unwrap();
        user.set_nonblocking(true).unwrap();
        let switched =
            Switched { far: far.into(), early: b"early ".to_vec(), idle: Duration::from_secs(60), busy: None };
        (Tunnel::new(switched, (), b"HTTP/1.1 101 \r\n\r\n", b"first".to_vec()), client, user, upstream)
    }

    fn drain(s: &mut impl Read, into: &mut Vec<u8>) -> bool {
        let mut buf = [0u8; 65536];
        loop {
            match s.read(&mut buf) {
                Ok(0) => return true,
                Ok(n) => into.extend_from_slice(&buf[..n]),
                Err(_) => return false,
            }
        }
    }

    #[test]
    fn a_side_that_does_not_read_stops_the_reads_of_the_other() {
        let (mut t, client, mut user, mut upstream) = tunnel();
        let mut scratch = vec![0; PIECE];
        let chunk = vec![7u8; 64 * 1024];
        let mut sent = 0;
        let mut turns = 0;
        // The upstream writes as fast as its socket takes it; the user reads nothing.
        loop {
            while let Ok(n) = upstream.write(&chunk) {
                sent += n;
            }
            t.turn(&mut Client::Plain(&client), &mut scratch).unwrap();
            turns += 1;
            let (_, far_input, _) = t.far_waits(false);
            if !far_input {
                break;
            }
            assert!(turns < 10_000, "the client's socket never filled");
        }
        let (_, room) = t.client_waits(false);
        assert!(room, "the client's side waits for room");
        assert!(t.to_client.bytes.len() - t.to_client.at <= PIECE, "a read's worth kept at most");
        let mut got_up = Vec::new();
        drain(&mut upstream, &mut got_up);
        assert_eq!(got_up, b"first", "what the client sent after its request went first");

        // The user reads: everything comes, in order, after the 101 and the early bytes.
        let mut got = Vec::new();
        while got.len() < "HTTP/1.1 101 \r\n\r\nearly ".len() + sent {
            drain(&mut user, &mut got);
            t.turn(&mut Client::Plain(&client), &mut scratch).unwrap();
        }
        assert!(got.starts_with(b"HTTP/1.1 101 \r\n\r\nearly \x07"));
        assert_eq!(t.down, sent as u64 + "early ".len() as u64);

        // The upstream's end of stream reaches the user after the bytes; the user's
        // own then ends the tunnel.
        drop(upstream);
        while !t.client.write_shut {
            t.turn(&mut Client::Plain(&client), &mut scratch).unwrap();
        }
        let mut rest = Vec::new();
        user.set_nonblocking(false).unwrap();
        assert!(drain(&mut user, &mut rest) && rest.is_empty(), "the end of stream, nothing after");
        assert!(!t.ended(), "the client has not ended its side");
        user.shutdown(std::net::Shutdown::Write).unwrap();
        while !t.ended() {
            if t.turn(&mut Client::Plain(&client), &mut scratch).is_err() {
                break;
            }
        }
        assert!(t.ended());
    }

    #[test]
    fn a_frozen_tunnel_thaws_as_it_was() {
        let (mut t, client, mut user, mut upstream) = tunnel();
        let mut scratch = vec![0; PIECE];
        upstream.write_all(b"from the upstream").unwrap();
        t.turn(&mut Client::Plain(&client), &mut scratch).unwrap();
        let mut got = Vec::new();
        drain(&mut user, &mut got);
        t.to_far.keep(b" not taken yet");
        t.upstream.read_done = true;
        let mut state = Vec::new();
        t.freeze(|(), out| out.extend_from_slice(&[0; 3]), &mut state);
        let (far, _other) = UnixStream::pair().unwrap();
        let back = Tunnel::thaw(&state, far.into(), |c| Some(c.take(3)?[0])).expect("it thaws");
        assert_eq!(back.owed, 0);
        assert_eq!(&back.to_far.bytes[back.to_far.at..], &t.to_far.bytes[t.to_far.at..]);
        assert!(back.to_client.is_empty());
        assert_eq!((back.up, back.down, back.idle_ms), (t.up, t.down, 60_000));
        assert_eq!((back.upstream.read_done, back.upstream.write_shut, back.client.read_done), (true, false, false));
        let (far, _other) = UnixStream::pair().unwrap();
        assert!(Tunnel::thaw(&state[..state.len() - 1], far.into(), |c| Some(c.take(3)?[0])).is_none());
        let (far, _other) = UnixStream::pair().unwrap();
        assert!(Tunnel::<u8>::thaw(&state, far.into(), |c| Some(c.take(2)?[0])).is_none(), "a record longer");
    }
}
