//! A connection that switched protocols (a WebSocket through a proxy location): once
//! the upstream's `101 Switching Protocols` is sent, the worker's loop relays bytes
//! between the client and the upstream, both ways, as they come.
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
//! when it carries nothing either way for its `tunnel_timeout`, or when the worker
//! leaves (`Server::drain_tunnel`: nothing more is read, what is kept is written
//! for a moment, then both sides are closed). Its one access-log record is made
//! then ([`Server::end_tunnel`]): status 101, the bytes each way, the time it
//! lasted.

use std::io;
use std::net::TcpStream;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::sys::socket::{MsgFlags, Shutdown, recv, send, shutdown};

use super::connection::Server;
use super::held::{Held, Layer, Next, Owed, Phase, Watch};
use super::observer::{ConnState, Observer};
use super::output::Answer;
use super::transport::Transport;
use crate::http::response::Switched;
use crate::tls::stream::TlsStream;

/// What one read takes at most, from either side: a TLS record's plaintext. A read
/// is made only when nothing waits for the other side, so this is also the most a
/// tunnel keeps for a side that does not take it.
const PIECE: usize = 16 * 1024;

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

/// A tunnel between a client and an upstream (see the module's words).
pub(super) struct Tunnel {
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
    up: u64,
    down: u64,
    pub(super) idle_ms: u64,
    /// The worker leaves: nothing more is read; once what is kept is written, both
    /// sides are closed.
    pub(super) draining: bool,
    /// The record its end makes: the request and its 101.
    owed: Owed,
}

/// The watch for a socket that waits for `input`, `room`, both or neither.
fn watch(input: bool, room: bool) -> Watch {
    match (input, room) {
        (true, true) => Watch::Both,
        (true, false) => Watch::Input,
        (false, true) => Watch::Room,
        (false, false) => Watch::Neither,
    }
}

impl Tunnel {
    /// A tunnel for the 101 just sent: `unsent`, what the client's socket did not
    /// take of its head; `from_client`, what the client sent after its request.
    pub(super) fn new(far: Switched, owed: Owed, unsent: &[u8], from_client: Vec<u8>) -> Tunnel {
        let mut to_client = Pending::default();
        to_client.keep(unsent);
        to_client.keep(&far.early);
        let idle_ms = far.idle.as_millis() as u64;
        Tunnel {
            far: far.far,
            to_far: Pending { bytes: from_client, at: 0 },
            to_client,
            client: End::default(),
            upstream: End::default(),
            notified: false,
            up: 0,
            down: 0,
            idle_ms,
            draining: false,
            owed,
        }
    }

    /// What the client's socket is watched for; `sealed`: a TLS session holds
    /// records to write.
    pub(super) fn client_watch(&self, sealed: bool) -> Watch {
        let input = !self.client.read_done && !self.draining && self.to_far.is_empty();
        watch(input, !self.to_client.is_empty() || sealed)
    }

    /// The upstream's socket and what it is watched for.
    pub(super) fn far_watch(&self, sealed: bool) -> (BorrowedFd<'_>, Watch) {
        let input = !self.upstream.read_done && !self.draining && self.to_client.is_empty() && !sealed;
        (self.far.as_fd(), watch(input, !self.to_far.is_empty()))
    }

    /// Both ways have ended (or, draining, all that was kept is written).
    fn ended(&self) -> bool {
        self.client.write_shut
            && self.upstream.write_shut
            && (self.draining || (self.client.read_done && self.upstream.read_done))
    }

    /// Moves what has arrived each way, as far as the other side takes it now, and
    /// passes on ends of stream. Returns the bytes moved, and whether it stopped at
    /// its budget (or with decrypted input held) with more to do.
    fn turn(&mut self, client: &mut Client<'_, '_>, scratch: &mut [u8]) -> io::Result<(u64, bool)> {
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
enum Client<'t, 's> {
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

impl Server<'_> {
    /// The 101 of a request whose reply switched protocols went (as far as the
    /// socket took it: `unsent`, the rest of its head): the connection becomes a
    /// tunnel to `far`, with what the client sent after its request (`Next::Again`:
    /// its first turn relays what is there). `owed`: the record its end makes.
    pub(super) fn open_tunnel(&mut self, far: Switched, owed: Owed, unsent: &[u8]) -> Next {
        let from_client = self.input.take_unread();
        self.tunnel = Some(Box::new(Tunnel::new(far, owed, unsent, from_client)));
        Next::Again
    }

    /// A turn on a tunnel: its sockets have input or room (or broke). Relays what
    /// they take; at its end, the record and the close.
    pub(super) fn relay(&mut self, h: &mut Held, obs: &mut dyn Observer) -> Next {
        let Phase::Tunnel(tunnel) = &mut h.wait.phase else { return Next::Park };
        let mut scratch = std::mem::take(&mut self.tunnel_scratch);
        scratch.resize(PIECE, 0);
        let mut stage = std::mem::take(&mut self.tls_stage);
        let mut client = match &mut h.layer {
            Layer::Plain | Layer::PlainOnTlsPort => Client::Plain(&h.stream),
            Layer::Tls(s) => Client::Tls(TlsStream::new(&h.stream, s, &mut stage)),
        };
        let step = tunnel.turn(&mut client, &mut scratch);
        drop(client);
        self.tls_stage = stage;
        self.tunnel_scratch = scratch;
        match step {
            Ok((moved, more)) => {
                let ended = tunnel.ended();
                if moved > 0 {
                    h.wait.progress();
                }
                if ended {
                    return self.end_tunnel(h, Ok(()), obs);
                }
                if more { Next::Again } else { Next::Park }
            }
            Err(e) => self.end_tunnel(h, Err(e), obs),
        }
    }

    /// The worker leaves: the tunnel reads nothing more, writes what it keeps (for
    /// a moment at most, `Held::deadline_ms`), then closes both sides.
    pub fn drain_tunnel(&mut self, h: &mut Held, obs: &mut dyn Observer) -> Next {
        match &mut h.wait.phase {
            Phase::Tunnel(t) if !t.draining => t.draining = true,
            _ => return Next::Park,
        }
        h.wait.progress();
        self.relay(h, obs)
    }

    /// A tunnel ends (`result`: cleanly, or why not): its one record (status 101,
    /// the client's bytes in after its request's, the upstream's out after the
    /// head, the time since the request), and the close of both sides.
    pub(super) fn end_tunnel(&mut self, h: &mut Held, result: io::Result<()>, obs: &mut dyn Observer) -> Next {
        let Phase::Tunnel(tunnel) = std::mem::replace(&mut h.wait.phase, Phase::Idle) else { return Next::Close };
        let Tunnel { owed, up, down, .. } = *tunnel;
        match &result {
            Ok(()) => log::debug!("{}: tunnel ended: {up} bytes in, {down} out", h.conn.peer),
            Err(e) => log::debug!("{}: tunnel ended ({e}): {up} bytes in, {down} out", h.conn.peer),
        }
        let head = owed.response_head.len() as u64;
        let answer = Answer {
            status: owed.status,
            body_bytes: down,
            sent: result.map(|()| head + down),
            rest: None,
            cut_at: head + down,
            keep_alive: false,
            start: owed.start,
            duration: owed.start.elapsed().unwrap_or_default(),
        };
        let bytes_in = owed.bytes_in + up;
        self.record(h, owed, &answer, bytes_in, obs);
        obs.state(ConnState::Closing);
        Next::Close
    }
}
