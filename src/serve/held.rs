//! A connection between its requests, as a worker holds it in its set: the socket,
//! what is known of the client ([`Conn`]), the bytes of its next request read so
//! far, what it waits for (a PROXY header, a head, the end of a lingering close)
//! with its deadline, and on a TLS listener its session.

use std::net::{SocketAddr, TcpStream};

use super::input::Input;
use super::transport::Transport;
use crate::clock::now_ms;
use crate::config::Http as HttpConfig;
use crate::http::request::HttpError;
use crate::tls::stream::Session;

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
    pub(super) layer: Layer,
    /// A request body being read (the request waits for it whole, in the set).
    pub(super) body: Option<Box<crate::gateway::incoming::Incoming>>,
}

/// What a connection speaks under HTTP.
pub(super) enum Layer {
    Plain,
    /// Accepted on a TLS listener (boxed: a plain connection stays a hundred bytes).
    Tls(Box<Session>),
    /// Accepted on a TLS listener, and the client sent a plain HTTP request: it is
    /// answered 400, in plain text, as nginx does (a hang or a reset would tell the
    /// user nothing).
    PlainOnTlsPort,
}

/// The answer to plain HTTP on a TLS port (nginx's words).
pub(super) const PLAIN_ON_TLS_PORT: HttpError = HttpError::BadRequest("The plain HTTP request was sent to HTTPS port.");

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
            body: None,
            conn: Conn::new(peer, local_port),
            pending: Vec::new(),
            phase: Phase::Waiting,
            since_ms: now_ms(),
            layer: Layer::Plain,
        }
    }

    /// A connection just accepted on a TLS listener: its handshake begins with its
    /// first input (after its PROXY header, if the listener expects one).
    pub fn new_tls(
        stream: TcpStream,
        peer: SocketAddr,
        local_port: u16,
        tls: &std::sync::Arc<rustls::ServerConfig>,
    ) -> Result<Held, rustls::Error> {
        let mut held = Held::new(stream, peer, local_port);
        held.layer = Layer::Tls(Box::new(Session::new(tls)?));
        Ok(held)
    }

    /// Whether another worker can take this connection over: a plain one can (its
    /// state is what `handover::Meta` carries); a TLS session's state lives in this
    /// process (and a TLS port's plain-HTTP connection must stay refused).
    pub fn can_hand_over(&self) -> bool {
        matches!(self.layer, Layer::Plain) && self.body.is_none()
    }

    /// Between two requests: a request served, nothing of the next one read.
    pub fn between_requests(&self) -> bool {
        self.conn.requests > 0 && self.pending.is_empty() && self.body.is_none() && !self.lingering()
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
        Held { stream, conn, pending, phase: Phase::Waiting, since_ms, layer: Layer::Plain, body: None }
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
        if let Some(body) = &self.body {
            return body.deadline_ms(http.body_timeout, http.body_min_rate);
        }
        let wait = match self.phase {
            Phase::Lingering { .. } => LINGER_MS,
            Phase::Waiting if self.conn.requests > 0 && self.pending.is_empty() => {
                http.keepalive_timeout.as_millis() as u64
            }
            Phase::Waiting | Phase::Proxy => http.header_timeout.as_millis() as u64,
        };
        self.since_ms.saturating_add(wait)
    }

    /// Shuts our side and lingers: what the client still sends is dropped (a TLS
    /// session says `close_notify` first; what follows is dropped undecrypted).
    pub(super) fn linger(&mut self, input: &mut Input) -> Next {
        if let Layer::Tls(s) = &mut self.layer {
            s.close(&self.stream);
        }
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

/// Every close of a TLS connection ends its session: `close_notify`, if the socket
/// takes it now.
impl Drop for Held {
    fn drop(&mut self) {
        if let Layer::Tls(s) = &mut self.layer {
            s.close(&self.stream);
        }
    }
}
