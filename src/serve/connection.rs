//! One connection, from the first byte to the close: the turns the worker's loop
//! gives it.
//!
//! The worker holds each connection as a [`Held`] between requests and calls
//! [`Server::serve_ready`] when it has input. A turn takes up the connection's
//! buffer ([`Input`], which never waits), moves it through its phases (a PROXY
//! header, a TLS handshake, heads) and serves every whole request it finds, a burst
//! at most, each by the stages of `cycle` (read, route, gate, answer, decorate,
//! deliver, finish). Then the bytes left unread go back with the connection, and
//! the worker parks it, serves it again after the others, lets it linger (shut for
//! writing, its input read and dropped for a moment, so the client reads our answer
//! and not a reset) or closes it ([`Next`]).
//!
//! This code knows nothing about processes: what the worker needs to see goes through
//! the [`Observer`](super::observer::Observer) it is given, and what it does when a
//! script keeps it waiting is the hook it passes with each turn ([`Hooks`]).

use std::net::TcpStream;

use crate::config::{Config, ServerTokens};
use crate::gateway::spool::{self, Disk, Place};
use crate::http::date::DateCache;
use crate::http::request::{self, HttpError, Limits};
use crate::log::access::AccessLogs;
use crate::serve::tls::{Opening, TlsStream};
use crate::site::Site;

use super::body::{self, Bodies};
use super::held::{Conn, Held, Layer, Next, PLAIN_ON_TLS_PORT, Phase, Unsent, Wait};
use super::input::{Buffer, HeadError, Input, ProxyFail};
use super::observer::Hooks;
use super::output::{HeadWriter, Output};
use super::transport::Transport;

/// Pipelined requests served from one connection's buffer in a row, before the
/// worker's other connections get a turn.
const BURST: u32 = 16;

/// Everything a worker keeps from one connection to the next: config, open roots,
/// logs, and buffers reused for every request.
pub struct Server<'c> {
    pub(super) config: &'c Config,
    pub(super) sites: Vec<Site<'c>>,
    pub(super) token: String,
    pub(super) limits: Limits,
    pub(super) input: Input,
    /// The current request's head, copied out of the input buffer.
    pub(super) req_head: Vec<u8>,
    pub(super) out: Output,
    /// A reply's own header lines, reused.
    pub(super) extra: Vec<u8>,
    /// The port of the first TLS listener, where `https_redirect` sends clients.
    pub(super) https_port: Option<u16>,
    /// Where TLS responses are staged into records (allocated by the first one).
    pub(super) tls_stage: Vec<u8>,
    /// An answer the socket did not take whole, on its way from the request's
    /// stages to its connection's phase (`Phase::Writing`).
    pub(super) unsent: Option<Box<Unsent>>,
    /// The request bodies read by the event loop.
    pub(super) bodies: Bodies,
    /// Where scripts' answers are kept while their clients take them.
    pub(super) answers: Place,
    /// A tunnel just opened by a 101, on its way from the request's stages to its
    /// connection's phase (`Phase::Tunnel`).
    pub(super) tunnel: Option<Box<super::held::tunnel::Tunnel<super::held::Owed>>>,
    /// What tunnels read into, reused (allocated by the first).
    pub(super) tunnel_scratch: Vec<u8>,
}

impl<'c> Server<'c> {
    /// Prepares to serve `config`'s vhosts (`sites`, in the same order). `https_port`:
    /// the port of the first TLS listener (the redirects' target); `disks`: where
    /// the worker counts the bytes of request bodies, and of answers, in temporary
    /// files.
    pub fn new(
        config: &'c Config,
        sites: Vec<Site<'c>>,
        logs: AccessLogs,
        token: String,
        https_port: Option<u16>,
        (bodies, answers): (Disk, Disk),
    ) -> Server<'c> {
        let limits = Limits {
            max_request_line: config.http.max_request_line,
            max_header_size: config.http.max_header_size,
            max_header_line: config.http.max_header_line,
            max_headers: config.http.max_headers,
        };
        let server_header = match config.server_tokens {
            ServerTokens::Full => concat!("pika/", env!("CARGO_PKG_VERSION")),
            ServerTokens::Product => "pika",
        };
        Server {
            config,
            sites,
            token,
            limits,
            input: Input::new(limits),
            req_head: Vec::with_capacity(1024),
            out: Output {
                logs,
                request_id: u64::from(std::process::id()) << 32,
                writer: HeadWriter { date: DateCache::default(), server_header, head: Vec::with_capacity(512) },
            },
            extra: Vec::with_capacity(256),
            https_port,
            tls_stage: Vec::new(),
            unsent: None,
            bodies: Bodies::new(bodies),
            answers: Place::new(
                config.http.body_temp_dir.clone(),
                spool::MEMORY,
                answers.capped(u64::MAX, config.http.answer_spool_max),
            ),
            tunnel: None,
            tunnel_scratch: Vec::new(),
        }
    }

    /// Reopens the logs if the master rotated them since the last look.
    pub fn sync_logs(&mut self) {
        self.out.logs.sync_epoch();
    }

    /// The worker waited a second for work: write out the access-log records held
    /// back for `flush`.
    pub fn idle(&mut self) {
        self.out.logs.idle();
    }

    /// The worker's once-a-second look: the open files no request used for a
    /// while are let go (a deleted one's space with them).
    pub fn sweep_files(&self) {
        let now = crate::base::clock::now_ms();
        for site in &self.sites {
            site.sweep_files(now);
        }
    }

    /// Writes out every held access-log record (the worker stops at once).
    pub fn flush_logs(&mut self) {
        self.out.logs.flush();
    }

    /// Serves what a held connection has: every whole request in its buffer or
    /// arrived (a burst at most), without waiting for more; or, while an answer
    /// waits, as much more of it as the socket takes. Says what the worker does with
    /// it next.
    pub fn serve_ready(&mut self, h: &mut Held, hooks: &mut Hooks<'_>) -> Next {
        match &mut h.wait.phase {
            Phase::Lingering { drained } => {
                let mut t = &h.stream;
                return if self.input.drain(&mut t, drained) { Next::Close } else { Next::Linger };
            }
            Phase::Writing(_) => return self.write_more(h, hooks.obs),
            Phase::Tunnel(_) => return self.relay(h, hooks.obs),
            _ => {}
        }
        self.input.begin(h.wait.take_buffer());
        let mut next = Next::Park;
        if matches!(h.wait.phase, Phase::Proxy(_)) {
            next = self.proxy_header(h);
        }
        if !matches!(h.wait.phase, Phase::Proxy(_)) {
            next = self.serve_heads(h, hooks);
        }
        if next == Next::Write {
            self.park_answer(&mut h.wait);
        }
        h.wait.keep(self.input.end());
        match next {
            Next::Linger => h.linger(&mut self.input),
            next => next,
        }
    }

    /// The answer just sent waits for the socket: the connection's phase holds it
    /// (and, once the turn ends, its unread input).
    #[cold]
    #[inline(never)]
    fn park_answer(&mut self, wait: &mut Wait) {
        if let Some(u) = self.unsent.take() {
            wait.enter(Phase::Writing(u));
        }
    }

    /// Reads the PROXY protocol header a connection owes: once it is read the
    /// connection moves on (what followed it stays in the input), else what the
    /// worker does with it.
    fn proxy_header(&mut self, h: &mut Held) -> Next {
        match self.input.try_proxy_header(&mut &h.stream) {
            Ok(Some(header)) => {
                // No source (LOCAL, UNKNOWN): the balancer's own connection.
                if let Some(source) = header.source {
                    h.conn.balancer = Some(h.conn.peer);
                    h.conn.peer = source;
                }
                let tls = matches!(h.layer, Layer::Tls(_));
                h.wait.enter(if tls { Phase::Handshaking } else { Phase::Head(Default::default()) });
                Next::Park
            }
            Ok(None) => Next::Park,
            Err(ProxyFail::Closed { partial: false }) => Next::Close,
            Err(ProxyFail::Closed { partial: true }) => {
                log::info!("{}: closed: the connection ended inside its PROXY protocol header", h.conn.peer);
                Next::Close
            }
            Err(ProxyFail::Invalid(e)) => {
                log::info!(
                    "{}: closed: {e} (port {} expects a PROXY protocol header first)",
                    h.conn.peer,
                    h.conn.local_port
                );
                Next::Close
            }
        }
    }

    /// The heads of a connection past its PROXY header, over the transport its
    /// layer makes.
    #[inline(always)]
    fn serve_heads(&mut self, h: &mut Held, hooks: &mut Hooks<'_>) -> Next {
        let socket = &h.stream;
        match &mut h.layer {
            Layer::Plain => self.serve_on(&mut &h.stream, socket, &mut h.conn, &mut h.wait, false, hooks),
            Layer::PlainOnTlsPort => self.serve_on(&mut &h.stream, socket, &mut h.conn, &mut h.wait, true, hooks),
            // Before the handshake, bytes already read (after a PROXY header) are its
            // first records; else the first byte waiting on the socket tells what
            // comes. Once it began, the input holds decrypted bytes.
            Layer::Tls(s) => match (s.opened(), s.opening(&h.stream, self.input.unread())) {
                (was_open, Opening::Tls) => {
                    let early = if was_open { Vec::new() } else { self.input.take_unread() };
                    let mut stage = std::mem::take(&mut self.tls_stage);
                    let mut t = TlsStream::new(&h.stream, s, &mut stage);
                    // What is left of a handshake's flight, as the socket has room.
                    t.write_now();
                    let next = match t.feed(&early) {
                        Ok(()) => self.serve_on(&mut t, socket, &mut h.conn, &mut h.wait, false, hooks),
                        Err(_) => Next::Close,
                    };
                    if let Some(why) = t.failure.take() {
                        if s.handshaking() {
                            // The internet sends many: a line an operator may look at,
                            // not an error.
                            log::info!("TLS handshake with {} failed: {why}", h.conn.peer);
                        } else {
                            log::debug!("TLS session with {} failed: {why}", h.conn.peer);
                        }
                    }
                    self.tls_stage = stage;
                    if matches!(h.wait.phase, Phase::Handshaking) && !s.handshaking() {
                        h.wait.enter(Phase::Head(Default::default()));
                    }
                    next
                }
                (_, Opening::PlainHttp) => {
                    h.layer = Layer::PlainOnTlsPort;
                    h.wait.enter(Phase::Head(Default::default()));
                    self.serve_on(&mut &h.stream, socket, &mut h.conn, &mut h.wait, true, hooks)
                }
                (_, Opening::Garbage(b)) => {
                    log::info!("TLS handshake with {} failed: not TLS (first byte 0x{b:02x})", h.conn.peer);
                    Next::Close
                }
                (_, Opening::Nothing) => Next::Park,
                (_, Opening::Closed) => Next::Close,
            },
        }
    }

    /// The requests of one connection over its transport `t`: every whole head
    /// buffered or arrived, a burst at most. `wrong_port`: plain HTTP on a TLS port,
    /// every head is refused.
    #[inline(always)]
    fn serve_on(
        &mut self,
        t: &mut impl Transport,
        socket: &TcpStream,
        conn: &mut Conn,
        wait: &mut Wait,
        wrong_port: bool,
        hooks: &mut Hooks<'_>,
    ) -> Next {
        if matches!(wait.phase, Phase::Body(_))
            && let Some(next) = self.body_came(t, conn, wait, hooks)
        {
            return next;
        }
        for _ in 0..BURST {
            let head_end = match self.input.try_head(t) {
                Ok(Some(end)) => end,
                // What came of a head stays in the input, and goes back with the
                // connection.
                Ok(None) => return Next::Park,
                Err(HeadError::Quiet) => return Next::Close,
                Err(HeadError::Http(e)) => return self.refuse_head(t, conn, None, e, hooks),
            };
            if wrong_port {
                return self.refuse_head(t, conn, Some(head_end), PLAIN_ON_TLS_PORT, hooks);
            }
            let next = self.serve_request(t, socket, conn, head_end, hooks);
            if let Some(tunnel) = self.tunnel.take() {
                // Switched protocols: its bytes are relayed from now on.
                wait.enter(Phase::Tunnel(tunnel));
                return next;
            }
            if let Some(incoming) = self.bodies.started.take() {
                // The body is read by the event loop: the connection waits for it,
                // with the request's route.
                wait.enter(Phase::Body(incoming));
                wait.route = self.bodies.kept.take();
                return Next::Park;
            }
            match next {
                // Pipelined: the next one.
                Next::Park if self.input.has_unread() || t.buffered() => wait.enter(Phase::Idle),
                Next::Park => {
                    wait.enter(Phase::Idle);
                    return Next::Park;
                }
                next => return next,
            }
        }
        Next::Again
    }

    /// In the `Body` phase, more of a request body came: `None` once it is whole (its
    /// head is put back in front of what followed, to be served again with its body)
    /// or when the connection was not waiting for one, else what the worker does with
    /// the connection.
    #[cold]
    #[inline(never)]
    fn body_came(
        &mut self,
        t: &mut impl Transport,
        conn: &Conn,
        wait: &mut Wait,
        hooks: &mut Hooks<'_>,
    ) -> Option<Next> {
        let Phase::Body(incoming) = &mut wait.phase else { return None };
        match body::take_body(&mut self.input, t, incoming, &mut self.bodies.scratch) {
            Ok(false) => Some(Next::Park),
            Ok(true) => {
                if let Phase::Body(whole) = std::mem::replace(&mut wait.phase, Phase::Head(Buffer::default())) {
                    let mut again = whole.head.clone();
                    again.extend_from_slice(self.input.unread());
                    self.input.begin(Buffer::holding(again));
                    let wire_bytes = whole.wire_bytes;
                    self.bodies.finished = Some((whole.into_body(), wire_bytes));
                    self.bodies.kept = wait.route.take();
                }
                None
            }
            Err(e) => {
                self.req_head.clear();
                self.req_head.extend_from_slice(request::request_line(&incoming.head));
                // What came of the body (its temporary file too) goes before the
                // refusal does: once the client has its answer, the file is closed.
                wait.phase = Phase::Head(Buffer::default());
                Some(self.refuse(t, conn, body::refusal(&e, conn.peer), hooks))
            }
        }
    }

    /// A held connection's wait ran out ([`Held::deadline_ms`]): an idle one is
    /// closed quietly (the keep-alive timeout), and so is a tunnel that carried
    /// nothing for its `tunnel_timeout` (its record made), a head that never came whole gets a
    /// 408, an answer the client took nothing of for `send_timeout` (or streamed
    /// from a script past its `script_timeout`, which the script's reader says in
    /// the error log as it goes) is logged with what went and closed, a lingering
    /// close ends, a PROXY header or a TLS handshake that never ended is closed
    /// (one line in the error log).
    pub fn expire(&mut self, h: &mut Held, hooks: &mut Hooks<'_>) -> Next {
        match &h.wait.phase {
            Phase::Idle | Phase::Lingering { .. } => return Next::Close,
            Phase::Tunnel(_) => return self.end_tunnel(h, Ok(()), hooks.obs),
            Phase::Writing(_) => {
                let why = if h.source_late(crate::base::clock::now_ms()) { "script_timeout" } else { "send_timeout" };
                let timeout = std::io::Error::new(std::io::ErrorKind::TimedOut, why);
                return self.finish_answer(h, Err(timeout), hooks.obs);
            }
            Phase::Body(incoming) => {
                // A body that did not come in time: 408, as for a head.
                let why = incoming.late_why(&super::held::pace(&self.config.http), crate::base::clock::now_ms());
                log::info!("{}: the request body timed out (408): {why}", h.conn.peer);
                let line = request::request_line(&incoming.head).to_vec();
                h.wait.enter(Phase::Head(Buffer::holding(line)));
            }
            Phase::Proxy(_) => {
                log::info!("{}: closed: no whole PROXY protocol header within header_timeout", h.conn.peer);
                return Next::Close;
            }
            Phase::Handshaking => {
                log::info!(
                    "TLS handshake with {} failed: not done within header_timeout ({:?})",
                    h.conn.peer,
                    self.config.http.header_timeout
                );
                return Next::Close;
            }
            Phase::Head(_) => {}
        }
        self.input.begin(h.wait.take_buffer());
        // What came of the head counts as its bytes in.
        let came = Some(self.input.unread_end());
        let next = match &mut h.layer {
            Layer::Plain | Layer::PlainOnTlsPort => {
                self.refuse_head(&mut &h.stream, &h.conn, came, HttpError::Timeout, hooks)
            }
            Layer::Tls(s) => {
                let mut stage = std::mem::take(&mut self.tls_stage);
                let mut t = TlsStream::new(&h.stream, s, &mut stage);
                let next = self.refuse_head(&mut t, &h.conn, came, HttpError::Timeout, hooks);
                self.tls_stage = stage;
                next
            }
        };
        if next == Next::Write {
            // The 408 waits for a socket full of earlier answers; the connection
            // lingers once it is out.
            self.park_answer(&mut h.wait);
            h.wait.keep(self.input.end());
            return next;
        }
        h.linger(&mut self.input)
    }

    /// Refuses the head in the input, whole up to `head_end` or as far as it came
    /// (`None`): its request line is what the log and the metrics say of it.
    #[cold]
    #[inline(never)]
    fn refuse_head(
        &mut self,
        t: &mut impl Transport,
        conn: &Conn,
        head_end: Option<usize>,
        e: HttpError,
        hooks: &mut Hooks<'_>,
    ) -> Next {
        self.req_head.clear();
        match head_end {
            Some(end) => self.req_head.extend_from_slice(request::request_line(self.input.take_head(end))),
            None => self.req_head.extend_from_slice(self.input.pending_line()),
        }
        self.refuse(t, conn, e, hooks)
    }
}
