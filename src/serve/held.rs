//! A connection between its requests, as a worker holds it in its set: the socket,
//! what is known of the client ([`Conn`]), what it speaks under HTTP ([`Layer`]: the
//! TLS session rides here), and its phase: what it waits for, with the bytes read so
//! far and the moment the wait began.
//!
//! The phases a connection goes through (`Phase`): on a `proxy_protocol`
//! listener first its PROXY header; on a TLS listener its handshake; then a head
//! (the first is counted from the accept, the later ones from their first byte);
//! for a location that reads bodies, the rest of its request's body; an answer the
//! socket did not take whole, written as it drains (`super::unsent`); between
//! requests idle (nothing of the next one read); after a 101, a tunnel to the
//! upstream ([`tunnel`]); at the end perhaps a lingering close. Only the request cycle ([`super::connection`]) moves a connection
//! from one phase to the next; the worker asks when its wait runs out
//! ([`Held::deadline_ms`]) and whether it may leave this process
//! ([`Held::can_hand_over`]).

pub(super) mod tunnel;

use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::SystemTime;

use super::input::{Buffer, Input};
use super::transport::{Rest, Transport};
use crate::base::clock::now_ms;
use crate::config::Http as HttpConfig;
use crate::gateway::incoming::{Incoming, Keep, Pace};
use crate::gateway::spool::Disk;
use crate::http::request::HttpError;
use crate::serve::tls::Session;
use crate::site::Picked;
use tunnel::Tunnel;

/// What is known of one connection between its requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conn {
    /// The client: the socket's peer, or the one a PROXY protocol header named.
    pub peer: SocketAddr,
    /// The socket's own peer when a PROXY header named another client (the
    /// balancer; `%{c}a`).
    pub balancer: Option<SocketAddr>,
    pub local_port: u16,
    /// Requests read on it so far.
    pub requests: u64,
    /// Taken by a spare while a worker below it waited on a program: it goes back
    /// to the event loops once they are free ([`crate::serve::observer::Observer::hand_back`]).
    pub lent: bool,
}

impl Conn {
    pub fn new(peer: SocketAddr, local_port: u16) -> Conn {
        Conn { peer, balancer: None, local_port, requests: 0, lent: false }
    }

    /// The socket's peer: the balancer that sent a PROXY header, or the client.
    pub fn socket_peer(&self) -> SocketAddr {
        self.balancer.unwrap_or(self.peer)
    }
}

/// How long a lingering close reads and drops what the client still sends (Apache's
/// lingering close is 2 s too).
const LINGER_MS: u64 = 2000;

/// How long a worker that a reload (a new generation) or a stop replaces waits on an
/// answer the client takes nothing of before it gives the answer up, when that is
/// sooner than `send_timeout`. A download that moves goes on to its end; one that
/// stalls would keep the old worker, and the slot the new generation needs, for the
/// whole `send_timeout`: clients that never read, spread over every worker, would
/// hold a reload back that long. A worker the pool lets go (fewer spares,
/// `max_requests`) keeps `send_timeout`: a client that paused reading, a video's
/// buffer full, is not cut for it.
pub const LEAVING_STALL_MS: u64 = 5000;

/// The reader of a request body another worker was reading (`state` and the `file`
/// of what it kept: `crate::fork::handover`), to go on under this worker's `http` limits,
/// its file counted in this worker's `disk`.
pub fn thaw_body(state: &[u8], file: std::fs::File, http: &HttpConfig, disk: Disk) -> Option<Incoming> {
    Incoming::thaw(state, file, keep(http, disk))
}

/// A connection the worker holds.
pub struct Held {
    pub(super) stream: TcpStream,
    pub(super) conn: Conn,
    pub(super) layer: Layer,
    pub(super) wait: Wait,
}

/// What a connection speaks under HTTP.
pub(super) enum Layer {
    Plain,
    /// Accepted on a TLS listener (boxed: a plain connection stays small).
    Tls(Box<Session>),
    /// Accepted on a TLS listener, and the client sent a plain HTTP request: it is
    /// answered 400, in plain text, as nginx does (a hang or a reset would tell the
    /// user nothing).
    PlainOnTlsPort,
}

/// The answer to plain HTTP on a TLS port (nginx's words).
pub(super) const PLAIN_ON_TLS_PORT: HttpError = HttpError::BadRequest("The plain HTTP request was sent to HTTPS port.");

/// What a connection waits for, and since when.
pub(super) struct Wait {
    pub(super) phase: Phase,
    /// When the wait began (`clock::now_ms`): the accept for a new connection, the
    /// first byte of a head on a kept-alive one, the last answer for an idle one,
    /// the start of a lingering close.
    since_ms: u64,
    /// In the `Body` phase: the request's route (its vhost and place), found on its
    /// first turn, for its second. `None` for a body taken over from another worker
    /// (whose config may be another generation's): that request is routed here.
    pub(super) route: Option<(usize, Picked)>,
}

/// A connection's phase between two turns of the worker's loop.
pub(super) enum Phase {
    /// Its PROXY protocol header, before anything else (the bytes of it so far).
    Proxy(Buffer),
    /// On a TLS listener: the handshake, from the first byte until it is done.
    Handshaking,
    /// A request head: the first (from the accept), or one begun (from its first
    /// byte). The bytes of it so far, and any pipelined requests after it.
    Head(Buffer),
    /// The rest of a request body, read by the event loop for a location that reads
    /// bodies (`body_timeout`, longer by what `body_min_rate` earns up to
    /// `body_timeout_max`, and `body_idle_timeout` between reads); the request is
    /// served once it is whole.
    Body(Box<Incoming>),
    /// An answer the socket did not take whole: the rest waits for room
    /// (`send_timeout` from the last write that moved bytes), and with it the
    /// connection's unread input; no next request is read meanwhile.
    Writing(Box<Unsent>),
    /// Between requests, nothing of the next one read (`keepalive_timeout`).
    Idle,
    /// Switched protocols: bytes relayed between the client and an upstream, both
    /// ways (`tunnel_timeout` since the last that moved).
    Tunnel(Box<Tunnel<Owed>>),
    /// Shut for writing; what still comes is read and dropped.
    Lingering { drained: usize },
}

impl Wait {
    fn new(phase: Phase) -> Wait {
        Wait { phase, since_ms: now_ms(), route: None }
    }

    /// Moves to `phase`. The clock starts again when a wait of another kind begins:
    /// idle after an answer, a head on an idle connection, a lingering close. The
    /// first head keeps the accept's moment through the PROXY header and handshake.
    /// An answer's wait starts when it is parked, and again at each write
    /// ([`Wait::progress`]).
    #[inline]
    pub(super) fn enter(&mut self, phase: Phase) {
        let restart = matches!(
            (&self.phase, &phase),
            (_, Phase::Idle | Phase::Lingering { .. } | Phase::Writing(_) | Phase::Tunnel(_))
                | (Phase::Idle, Phase::Head(_))
        );
        if restart {
            self.since_ms = now_ms();
        }
        self.phase = phase;
    }

    /// A parked answer's write moved bytes: its send timeout starts over.
    pub(super) fn progress(&mut self) {
        self.since_ms = now_ms();
    }

    /// Takes the bytes this phase holds, for a turn ([`Input::begin`]).
    pub(super) fn take_buffer(&mut self) -> Buffer {
        match &mut self.phase {
            Phase::Proxy(b) | Phase::Head(b) => std::mem::take(b),
            _ => Buffer::default(),
        }
    }

    /// Gives back what a turn left unread ([`Input::end`]): the rest of a PROXY
    /// header or a head, or the pipelined requests behind a parked answer; bytes on
    /// an idle connection begin a head.
    pub(super) fn keep(&mut self, unread: Buffer) {
        match &mut self.phase {
            Phase::Proxy(b) | Phase::Head(b) => *b = unread,
            Phase::Writing(u) => u.input = unread,
            Phase::Idle | Phase::Handshaking if !unread.is_empty() => self.enter(Phase::Head(unread)),
            _ => {}
        }
    }
}

/// An answer the socket did not take whole, waiting for room with what its record
/// needs at the end (`super::unsent` writes and accounts it).
pub(super) struct Unsent {
    pub(super) rest: Box<Rest>,
    pub(super) owed: Owed,
    /// The connection's bytes read and not used yet (pipelined requests).
    pub(super) input: Buffer,
}

/// What the access log and the metrics need of an answer once it is out.
pub(super) struct Owed {
    /// The request's head (its bytes as parsed), or a refused head's line.
    pub(super) head: Vec<u8>,
    /// Where the request's fields lie in `head`, for the record (`None`: refused).
    pub(super) spans: Option<crate::http::request::Spans>,
    pub(super) vhost: usize,
    /// Its tags for the logs' filters (`super::output::LogTags`), field by field:
    /// `output` imports this module (a connection's `Conn`), so this one does not
    /// import `output`.
    pub(super) internal: bool,
    pub(super) health: bool,
    pub(super) auth: bool,
    pub(super) client: Option<IpAddr>,
    pub(super) cached: Option<bool>,
    /// What a proxy location's upstream did, for the log.
    pub(super) upstream: Option<crate::http::response::Upstreamed>,
    pub(super) status: u16,
    pub(super) body_bytes: u64,
    pub(super) keep_alive: bool,
    pub(super) start: SystemTime,
    pub(super) bytes_in: u64,
    /// The response's head (the log may quote its fields).
    pub(super) response_head: Vec<u8>,
    /// The request's body was read whole (else the connection lingers after).
    pub(super) body_done: bool,
}

/// What the worker watches a connection's socket for ([`Held::watch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    Input,
    Room,
    Both,
    /// Nothing for now (a tunnel's side that waits on the other): out of the set,
    /// so a hang-up it cannot act on yet does not wake the worker again and again.
    Neither,
}

impl Watch {
    /// The watch for a socket that waits for `input`, `room`, both or neither.
    fn of(input: bool, room: bool) -> Watch {
        match (input, room) {
            (true, true) => Watch::Both,
            (true, false) => Watch::Input,
            (false, true) => Watch::Room,
            (false, false) => Watch::Neither,
        }
    }
}

/// What the worker does with a connection after a turn on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Keep it in the set until it has input (or its deadline).
    Park,
    /// Keep it in the set until its socket has room for the rest of its answer (or
    /// its deadline).
    Write,
    /// A whole request is already buffered: serve it again after the others.
    Again,
    /// It lingers in the set, shut for writing, until the client closes or
    /// `LINGER_MS` pass (the worker parks it like any other).
    Linger,
    Close,
}

impl Held {
    /// A connection just accepted; `proxy`: its listener expects a PROXY protocol
    /// header first.
    pub fn new(stream: TcpStream, peer: SocketAddr, local_port: u16, proxy: bool) -> Held {
        let phase = if proxy { Phase::Proxy(Buffer::default()) } else { Phase::Head(Buffer::default()) };
        Held { stream, conn: Conn::new(peer, local_port), layer: Layer::Plain, wait: Wait::new(phase) }
    }

    /// A connection just accepted on a TLS listener: its handshake begins with its
    /// first input (after its PROXY header, if the listener expects one).
    pub fn new_tls(
        stream: TcpStream,
        peer: SocketAddr,
        local_port: u16,
        proxy: bool,
        tls: &std::sync::Arc<rustls::ServerConfig>,
    ) -> Result<Held, rustls::Error> {
        let mut held = Held::new(stream, peer, local_port, proxy);
        held.layer = Layer::Tls(Box::new(Session::new(tls)?));
        if !proxy {
            held.wait.phase = Phase::Handshaking;
        }
        Ok(held)
    }

    /// A connection taken over from another worker, with the bytes of its next
    /// request read so far (`pending`), or in the middle of a request body (`body`),
    /// waiting since `waited_ms` ago.
    pub fn resume(stream: TcpStream, conn: Conn, pending: Vec<u8>, body: Option<Incoming>, waited_ms: u64) -> Held {
        let phase = match body {
            Some(incoming) => Phase::Body(Box::new(incoming)),
            None if pending.is_empty() && conn.requests > 0 => Phase::Idle,
            None => Phase::Head(Buffer::holding(pending)),
        };
        let since_ms = now_ms().saturating_sub(waited_ms);
        Held { stream, conn, layer: Layer::Plain, wait: Wait { phase, since_ms, route: None } }
    }

    /// A tunnel taken over from another worker, last busy `waited_ms` ago.
    pub(super) fn resume_tunnel(stream: TcpStream, conn: Conn, tunnel: Box<Tunnel<Owed>>, waited_ms: u64) -> Held {
        let since_ms = now_ms().saturating_sub(waited_ms);
        Held { stream, conn, layer: Layer::Plain, wait: Wait { phase: Phase::Tunnel(tunnel), since_ms, route: None } }
    }

    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    pub fn conn(&self) -> &Conn {
        &self.conn
    }

    /// Marks the connection lent to a spare ([`Conn::lent`]).
    pub fn lend(&mut self) {
        self.conn.lent = true;
    }

    /// Whether another worker can take this connection over now: a plain one waiting
    /// for a head or idle can (its state is what `handover::Meta` carries), with at
    /// most `max_pending` bytes read of its next request, one in the middle of a
    /// request body ([`Held::freeze_body`]), and a tunnel not draining
    /// ([`Held::freeze_tunnel`]: a draining one's worker writes its last bytes). A TLS session's state lives in this
    /// process (and a TLS port's plain-HTTP connection must stay refused); a
    /// connection owing its PROXY header finishes it here, so the header's client
    /// always travels with it; an answer being written and a lingering close end
    /// here.
    pub fn can_hand_over(&self, max_pending: usize) -> bool {
        matches!(self.layer, Layer::Plain)
            && match &self.wait.phase {
                Phase::Idle | Phase::Body(_) => true,
                Phase::Tunnel(t) => !t.draining,
                Phase::Head(b) => b.unread().len() <= max_pending,
                _ => false,
            }
    }

    /// Whether it waits for the rest of a request body.
    pub fn in_body(&self) -> bool {
        matches!(self.wait.phase, Phase::Body(_))
    }

    /// For a connection in the middle of a request body: its reader's state written
    /// to `out` ([`Incoming::freeze`]), and the socket and the file of what was kept,
    /// to be sent together. `None` in any other phase.
    pub fn freeze_body(&mut self, out: &mut Vec<u8>) -> Option<std::io::Result<[BorrowedFd<'_>; 2]>> {
        let Phase::Body(incoming) = &mut self.wait.phase else { return None };
        Some(incoming.freeze(out).map(|file| [self.stream.as_fd(), file.as_fd()]))
    }

    /// For a tunnel: its state written to `out` (its record's with it), and the
    /// client's socket and the upstream's, to be sent together. `None` in any other
    /// phase.
    pub fn freeze_tunnel(&self, out: &mut Vec<u8>) -> Option<[BorrowedFd<'_>; 2]> {
        let Phase::Tunnel(t) = &self.wait.phase else { return None };
        t.freeze(Owed::freeze, out);
        Some([self.stream.as_fd(), t.far()])
    }

    /// Bytes of the next request already read.
    pub fn pending(&self) -> &[u8] {
        match &self.wait.phase {
            Phase::Head(b) => b.unread(),
            _ => &[],
        }
    }

    /// Milliseconds since the current wait began.
    pub fn waited_ms(&self) -> u64 {
        now_ms().saturating_sub(self.wait.since_ms)
    }

    /// Between requests with nothing of the next read: may be closed at a request
    /// boundary.
    pub fn idle(&self) -> bool {
        matches!(self.wait.phase, Phase::Idle)
    }

    pub fn lingering(&self) -> bool {
        matches!(self.wait.phase, Phase::Lingering { .. })
    }

    /// An answer waits for room in the socket.
    pub fn writing(&self) -> bool {
        matches!(self.wait.phase, Phase::Writing(_))
    }

    /// A tunnel to an upstream, after a 101.
    pub fn tunnel(&self) -> bool {
        matches!(self.wait.phase, Phase::Tunnel(_))
    }

    /// A tunnel that does not yet drain (the worker leaving ends it).
    pub fn tunnel_open(&self) -> bool {
        matches!(&self.wait.phase, Phase::Tunnel(t) if !t.draining)
    }

    /// A tunnel's upstream socket, and what it is watched for.
    pub fn far(&self) -> Option<(BorrowedFd<'_>, Watch)> {
        let Phase::Tunnel(t) = &self.wait.phase else { return None };
        let (fd, input, room) = t.far_waits(matches!(&self.layer, Layer::Tls(s) if s.wants_write()));
        Some((fd, Watch::of(input, room)))
    }

    /// What the worker watches the socket for: input; room alone while an answer
    /// waits (no next request is read meanwhile); or both while a TLS session's
    /// sealed records wait (the rest of a handshake's flight, which the client waits
    /// for; the turn writes them first). A lingering close watches input only: what
    /// it still had to say is dropped, as a close never waits.
    #[inline]
    pub fn watch(&self) -> Watch {
        match (&self.layer, &self.wait.phase) {
            (_, Phase::Writing(_)) => Watch::Room,
            (layer, Phase::Tunnel(t)) => {
                let (input, room) = t.client_waits(matches!(layer, Layer::Tls(s) if s.wants_write()));
                Watch::of(input, room)
            }
            (Layer::Tls(s), phase) if s.wants_write() && !matches!(phase, Phase::Lingering { .. }) => Watch::Both,
            _ => Watch::Input,
        }
    }

    /// When its current wait runs out: `header_timeout` for a PROXY header, a
    /// handshake or a head, a request body's own ([`Incoming::deadline_ms`]), `send_timeout` since an answer's last write that moved
    /// bytes (at most [`LEAVING_STALL_MS`] in a worker that is `leaving`; and for
    /// an answer streamed from a script, no later than the script's own end,
    /// [`Held::source_late`]), `keepalive_timeout` between requests, a tunnel's
    /// `tunnel_timeout` since it last moved bytes (a draining one's
    /// [`LEAVING_STALL_MS`] at most), `LINGER_MS` for a lingering close.
    pub fn deadline_ms(&self, http: &HttpConfig, leaving: bool) -> u64 {
        if let Phase::Writing(u) = &self.wait.phase
            && let Some(until) = u.rest.until_ms()
        {
            let stall = if leaving { LEAVING_STALL_MS } else { u64::MAX };
            let wait = (http.send_timeout.as_millis() as u64).min(stall);
            return self.wait.since_ms.saturating_add(wait).min(until);
        }
        let wait = match &self.wait.phase {
            Phase::Writing(_) if leaving => (http.send_timeout.as_millis() as u64).min(LEAVING_STALL_MS),
            Phase::Writing(_) => http.send_timeout.as_millis() as u64,
            Phase::Body(body) => return body.deadline_ms(&pace(http)),
            // Draining (the worker leaves): what it keeps is written for a moment.
            Phase::Tunnel(t) if t.draining => t.idle_ms.min(LEAVING_STALL_MS),
            Phase::Tunnel(t) => t.idle_ms,
            Phase::Lingering { .. } => LINGER_MS,
            Phase::Idle => http.keepalive_timeout.as_millis() as u64,
            Phase::Proxy(_) | Phase::Handshaking | Phase::Head(_) => http.header_timeout.as_millis() as u64,
        };
        self.wait.since_ms.saturating_add(wait)
    }

    /// Whether an answer waiting for room is one streamed from a source whose time
    /// is out at `now_ms` (a script past `script_timeout`): given up then.
    pub(super) fn source_late(&self, now_ms: u64) -> bool {
        matches!(&self.wait.phase, Phase::Writing(u) if u.rest.until_ms().is_some_and(|until| until <= now_ms))
    }

    /// Shuts our side and lingers: what the client still sends is dropped (a TLS
    /// session says `close_notify` first; what follows is dropped undecrypted).
    /// [`Next::Close`] if the client has closed already.
    pub(super) fn linger(&mut self, input: &mut Input) -> Next {
        if let Layer::Tls(s) = &mut self.layer {
            s.close(&self.stream);
        }
        let mut t = &self.stream;
        t.shutdown_write();
        let mut drained = 0;
        if input.drain(&mut t, &mut drained) {
            return Next::Close;
        }
        self.wait.enter(Phase::Lingering { drained });
        Next::Linger
    }
}

/// Every close of a TLS connection ends its session: `close_notify`, if the socket
/// takes it now.
impl Drop for Held {
    fn drop(&mut self) {
        if let Layer::Tls(s) = &mut self.layer {
            s.close(&self.stream);
        }
    }
}

/// How the config says request bodies are kept, counted in `disk` (whose caps the
/// config sets).
pub fn keep(http: &HttpConfig, disk: Disk) -> Keep {
    let disk = disk.capped(http.body_spool_max_worker, http.body_spool_max);
    Keep { memory: http.client_body_buffer, max: http.max_body_size, dir: http.body_temp_dir.clone(), disk }
}

/// How long the config lets a request body take.
pub fn pace(http: &HttpConfig) -> Pace {
    Pace {
        timeout: http.body_timeout,
        min_rate: http.body_min_rate,
        max: http.body_timeout_max,
        idle: http.body_idle_timeout,
    }
}
