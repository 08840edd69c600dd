//! A connection between its requests, as a worker holds it in its set: the socket,
//! what is known of the client ([`Conn`]), the bytes of its next request read so
//! far, and what it waits for (a PROXY header, a head, the end of a lingering close)
//! with its deadline.

use std::net::{SocketAddr, TcpStream};

use super::input::Input;
use super::transport::Transport;
use crate::clock::now_ms;
use crate::config::Http as HttpConfig;

/// What is known of one connection between its requests: owned by the caller, so a
/// connection can be put aside between two requests and taken up again.
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
    /// It carried the master's internal dummy request.
    pub internal: bool,
}

impl Conn {
    pub fn new(peer: SocketAddr, local_port: u16) -> Conn {
        Conn { peer, balancer: None, local_port, requests: 0, internal: false }
    }

    /// The socket's peer: the balancer that sent a PROXY header, or the client.
    pub fn socket_peer(&self) -> SocketAddr {
        self.balancer.unwrap_or(self.peer)
    }
}

/// How long a lingering close reads and drops what the client still sends (Apache's
/// lingering close is 2 s too).
const LINGER_MS: u64 = 2000;

/// A connection the worker holds: the socket, what is known of it, and the bytes
/// read but not used yet (the start of its next request).
pub struct Held {
    pub stream: TcpStream,
    pub conn: Conn,
    pub(super) pending: Vec<u8>,
    pub(super) phase: Phase,
    /// When the current wait began (`clock::now_ms`): the last answer for an idle
    /// connection, the first byte of a head that came in part, the accept for a new
    /// one, the start of a lingering close.
    pub(super) since_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Waiting for (the rest of) a PROXY protocol header, before the first head.
    Proxy,
    /// Waiting for (the rest of) a head.
    Waiting,
    /// Shut for writing; what still comes is read and dropped.
    Lingering { drained: usize },
}

/// What the worker does with a connection after
/// [`Server::serve_ready`](super::connection::Server::serve_ready).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Keep it in the set until it has input (or its deadline).
    Park,
    /// A whole request is already buffered: serve it again after the others.
    Again,
    Close,
}

impl Held {
    /// A connection just accepted.
    pub fn new(stream: TcpStream, peer: SocketAddr, local_port: u16) -> Held {
        Held {
            stream,
            conn: Conn::new(peer, local_port),
            pending: Vec::new(),
            phase: Phase::Waiting,
            since_ms: now_ms(),
        }
    }

    /// A connection that starts with a PROXY protocol header (the listener says so):
    /// it is read before the first head, within `header_timeout`.
    pub fn expect_proxy_header(mut self) -> Held {
        self.phase = Phase::Proxy;
        self
    }

    /// Still waiting for its PROXY protocol header.
    pub fn awaiting_proxy_header(&self) -> bool {
        self.phase == Phase::Proxy
    }

    /// A connection taken over from another worker, waiting since `waited_ms` ago.
    pub fn resume(stream: TcpStream, conn: Conn, pending: Vec<u8>, waited_ms: u64) -> Held {
        let since_ms = now_ms().saturating_sub(waited_ms);
        Held { stream, conn, pending, phase: Phase::Waiting, since_ms }
    }

    /// Bytes of the next request already read.
    pub fn pending(&self) -> &[u8] {
        &self.pending
    }

    /// Milliseconds since the current wait began.
    pub fn waited_ms(&self) -> u64 {
        now_ms().saturating_sub(self.since_ms)
    }

    pub fn lingering(&self) -> bool {
        matches!(self.phase, Phase::Lingering { .. })
    }

    /// When its current wait runs out: `header_timeout` for a head (counted from the
    /// accept for the first one, from its first byte for later ones),
    /// `keepalive_timeout` between requests, `LINGER_MS` for a lingering close.
    pub fn deadline_ms(&self, http: &HttpConfig) -> u64 {
        let wait = match self.phase {
            Phase::Lingering { .. } => LINGER_MS,
            Phase::Waiting if self.conn.requests > 0 && self.pending.is_empty() => {
                http.keepalive_timeout.as_millis() as u64
            }
            Phase::Waiting | Phase::Proxy => http.header_timeout.as_millis() as u64,
        };
        self.since_ms.saturating_add(wait)
    }

    /// Shuts our side and lingers: what the client still sends is dropped.
    pub(super) fn linger(&mut self, input: &mut Input) -> Next {
        let mut t = &self.stream;
        t.shutdown_write();
        let mut drained = 0;
        // The client may have closed already.
        if input.drain(&mut t, &mut drained) {
            return Next::Close;
        }
        self.phase = Phase::Lingering { drained };
        self.since_ms = now_ms();
        self.pending.clear();
        Next::Park
    }
}
