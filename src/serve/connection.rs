//! One connection, from the first byte to the close, served a request at a time.
//!
//! The worker holds each connection as a [`Held`] between requests and calls
//! [`Server::serve_ready`] when it has input: is a whole head there yet ([`Input`],
//! which never waits)? If so `Server::serve_request` answers it: parse and
//! validate → drop a body that is all there, or plan to close → pick the vhost and
//! what answers there → the answer's head and body ([`crate::http::response`], blocking writes)
//! → one access-log record (`output::Output::log`, the only place one is made) → keep alive
//! or close. Then the next pipelined request, or back to the worker's set to wait.
//! A closing connection lingers in that set too: shut for writing, its input read
//! and dropped for a moment, so the client reads our answer and not a reset.
//!
//! This code knows nothing about processes: what the worker needs to see (state
//! changes for the scoreboard, whether it must stop keeping connections alive) goes
//! through the [`Observer`] it is given.

use std::mem::MaybeUninit;
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::time::SystemTime;

use super::held::{Conn, Held, Layer, Next, PLAIN_ON_TLS_PORT, Phase};
use super::input::{HeadError, Input, ProxyFail};
use super::observer::{ConnState, Observer};
use super::output::{Asked, Delivery, HeadWriter, Kind, Output};
use super::transport::{self, Transport};
use crate::clock::now_ms;
use crate::config::{Config, Http, ServerTokens};
use crate::gateway::incoming::{BodyError, Incoming, Keep, RequestBody};
use crate::handlers::{self, Ask, Link};
use crate::http::date::DateCache;
use crate::http::forwarded;
use crate::http::path::{self, PathError};
use crate::http::request::{self, HttpError, Limits, Method, Request};
use crate::http::response::{ALLOW, Body, Reply};
use crate::log::access::AccessLogs;
use crate::pod::INTERNAL_HEADER;
use crate::site::Site;
use crate::tls::stream::{Opening, TlsStream};

/// Pipelined requests served from one connection's buffer in a row, before the
/// worker's other connections get a turn.
const BURST: u32 = 16;

/// What a turn on a connection ended with.
enum Step {
    Park,
    Again,
    Close,
    Linger,
}

/// How a request ended, for the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Served {
    KeepAlive,
    /// The request's body is not all there: the connection waits for it in the set
    /// (`Server::started` holds it).
    AwaitBody,
    Close,
    /// Close, after draining what the client still sends.
    Linger,
}

/// Header slots on the stack: the default `http.max_headers`.
const FEW_HEADERS: usize = 100;

/// Everything a worker keeps from one connection to the next: config, open roots,
/// logs, and buffers reused for every request.
pub struct Server<'c> {
    config: &'c Config,
    sites: Vec<Site<'c>>,
    token: String,
    limits: Limits,
    input: Input,
    /// The current request's head, copied out of the input buffer.
    req_head: Vec<u8>,
    out: Output,
    /// The port of the first TLS listener, where `https_redirect` sends clients.
    https_port: Option<u16>,
    /// Where TLS responses are staged into records (allocated by the first one).
    tls_stage: Vec<u8>,
    /// Request bodies: the current request's, whole; one just begun that must wait
    /// for more in the set; one just finished there, for its request's second turn.
    body: Option<RequestBody>,
    started: Option<Box<Incoming>>,
    finished: Option<RequestBody>,
    /// Whether the folder for body files was made (once per worker).
    body_dir_ready: bool,
}

impl<'c> Server<'c> {
    /// Prepares to serve `config`'s vhosts (`sites`, in the same order). `https_port`:
    /// the port of the first TLS listener (the redirects' target).
    pub fn new(
        config: &'c Config,
        sites: Vec<Site<'c>>,
        logs: AccessLogs,
        token: String,
        https_port: Option<u16>,
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
                writer: HeadWriter {
                    date: DateCache::default(),
                    server_header,
                    send_timeout: config.http.send_timeout,
                    head: Vec::with_capacity(512),
                },
                extra: Vec::with_capacity(256),
            },
            https_port,
            tls_stage: Vec::new(),
            body: None,
            started: None,
            finished: None,
            body_dir_ready: false,
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

    /// Serves what a held connection has: every whole request in its buffer or
    /// arrived (a burst at most), without waiting for more. Says what the worker
    /// does with it next.
    pub fn serve_ready(&mut self, h: &mut Held, obs: &mut dyn Observer) -> Next {
        if let Phase::Lingering { drained } = &mut h.phase {
            let mut t = &h.stream;
            return if self.input.drain(&mut t, drained) { Next::Close } else { Next::Park };
        }
        if h.phase == Phase::Proxy
            && let Some(next) = self.proxy_header(h)
        {
            return next;
        }
        let step = match &mut h.layer {
            Layer::Plain => self.serve_on(
                &mut &h.stream,
                &h.stream,
                &mut h.body,
                &mut h.conn,
                &mut h.pending,
                &mut h.since_ms,
                false,
                obs,
            ),
            Layer::PlainOnTlsPort => self.serve_on(
                &mut &h.stream,
                &h.stream,
                &mut h.body,
                &mut h.conn,
                &mut h.pending,
                &mut h.since_ms,
                true,
                obs,
            ),
            // Before the handshake, bytes already read (after a PROXY header) are its
            // first; else the first byte waiting on the socket tells what comes.
            // Once it began, `pending` holds decrypted bytes (a head in part).
            Layer::Tls(s) => match (s.opened(), s.opening(&h.stream, &h.pending)) {
                (was_open, Opening::Tls) => {
                    let early = if was_open { Vec::new() } else { std::mem::take(&mut h.pending) };
                    let mut stage = std::mem::take(&mut self.tls_stage);
                    let mut t = TlsStream::new(&h.stream, s, &mut stage, self.config.http.send_timeout);
                    let step = match t.feed(&early) {
                        Ok(()) => self.serve_on(
                            &mut t,
                            &h.stream,
                            &mut h.body,
                            &mut h.conn,
                            &mut h.pending,
                            &mut h.since_ms,
                            false,
                            obs,
                        ),
                        Err(_) => Step::Close,
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
                    step
                }
                (_, Opening::PlainHttp) => {
                    h.layer = Layer::PlainOnTlsPort;
                    self.serve_on(
                        &mut &h.stream,
                        &h.stream,
                        &mut h.body,
                        &mut h.conn,
                        &mut h.pending,
                        &mut h.since_ms,
                        true,
                        obs,
                    )
                }
                (_, Opening::Garbage(b)) => {
                    log::info!("TLS handshake with {} failed: not TLS (first byte 0x{b:02x})", h.conn.peer);
                    Step::Close
                }
                (_, Opening::Nothing) => Step::Park,
                (_, Opening::Closed) => Step::Close,
            },
        };
        match step {
            Step::Park => Next::Park,
            Step::Again => Next::Again,
            Step::Close => Next::Close,
            Step::Linger => h.linger(&mut self.input),
        }
    }

    /// Reads the PROXY protocol header a connection owes: `None` once it is read
    /// (what followed it is in `pending`), else what the worker does with the
    /// connection.
    fn proxy_header(&mut self, h: &mut Held) -> Option<Next> {
        self.input.begin(&h.pending);
        h.pending.clear();
        match self.input.try_proxy_header(&mut &h.stream) {
            Ok(Some(header)) => {
                h.phase = Phase::Waiting;
                // No source (LOCAL, UNKNOWN): the balancer's own connection.
                if let Some(source) = header.source {
                    h.conn.balancer = Some(h.conn.peer);
                    h.conn.peer = source;
                }
                h.pending.extend_from_slice(self.input.unread());
                None
            }
            Ok(None) => {
                h.pending.extend_from_slice(self.input.unread());
                Some(Next::Park)
            }
            Err(ProxyFail::Closed { partial: false }) => Some(Next::Close),
            Err(ProxyFail::Closed { partial: true }) => {
                log::info!("{}: closed: the connection ended inside its PROXY protocol header", h.conn.peer);
                Some(Next::Close)
            }
            Err(ProxyFail::Invalid(e)) => {
                log::info!(
                    "{}: closed: {e} (port {} expects a PROXY protocol header first)",
                    h.conn.peer,
                    h.conn.local_port
                );
                Some(Next::Close)
            }
        }
    }

    /// The requests of one connection over its transport `t`: every whole head
    /// buffered or arrived, a burst at most. `wrong_port`: plain HTTP on a TLS port,
    /// every head is refused.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn serve_on(
        &mut self,
        t: &mut impl Transport,
        socket: &std::net::TcpStream,
        body: &mut Option<Box<Incoming>>,
        conn: &mut Conn,
        pending: &mut Vec<u8>,
        since_ms: &mut u64,
        wrong_port: bool,
        obs: &mut dyn Observer,
    ) -> Step {
        let had_pending = !pending.is_empty();
        self.input.begin(pending);
        pending.clear();
        if let Some(incoming) = body {
            // A request waits for the rest of its body.
            match read_body(&mut self.input, t, incoming) {
                Ok(false) => return Step::Park,
                Ok(true) => {
                    let whole = body.take().expect("a body in progress");
                    // Its head goes back in front of what followed the body, and is
                    // served again, now with its body.
                    let mut again = std::mem::take(&mut self.req_head);
                    again.clear();
                    again.extend_from_slice(&whole.head);
                    again.extend_from_slice(self.input.unread());
                    self.input.begin(&again);
                    self.req_head = again;
                    self.finished = Some(whole.into_body());
                }
                Err(e) => {
                    self.req_head.clear();
                    self.req_head.extend_from_slice(request::request_line(&body.take().expect("a body").head));
                    self.refuse(t, conn, body_refusal(&e, conn), obs);
                    return Step::Linger;
                }
            }
        }
        for _ in 0..BURST {
            let head_end = match self.input.try_head(t) {
                Ok(Some(end)) => end,
                Ok(None) => {
                    if self.input.has_unread() {
                        // A head began on an idle connection: its header clock starts.
                        if !had_pending && conn.requests > 0 {
                            *since_ms = now_ms();
                        }
                        pending.extend_from_slice(self.input.unread());
                    }
                    return Step::Park;
                }
                Err(HeadError::Quiet) => return Step::Close,
                Err(HeadError::Http(e)) => {
                    self.req_head.clear();
                    self.req_head.extend_from_slice(self.input.pending_line());
                    self.refuse(t, conn, e, obs);
                    return Step::Linger;
                }
            };
            if wrong_port {
                self.req_head.clear();
                let line = request::request_line(self.input.take_head(head_end));
                self.req_head.extend_from_slice(line);
                self.refuse(t, conn, PLAIN_ON_TLS_PORT, obs);
                return Step::Linger;
            }
            match self.serve_request(t, socket, conn, head_end, obs) {
                // Pipelined: the next one.
                Served::KeepAlive if self.input.has_unread() || t.buffered() => {}
                Served::KeepAlive => {
                    *since_ms = now_ms();
                    return Step::Park;
                }
                Served::Close => return Step::Close,
                Served::Linger => return Step::Linger,
                Served::AwaitBody => {
                    *body = self.started.take();
                    return Step::Park;
                }
            }
        }
        pending.extend_from_slice(self.input.unread());
        Step::Again
    }

    /// A held connection's wait ran out ([`Held::deadline_ms`]): an idle one is
    /// closed quietly (the keep-alive timeout), a head that never came whole gets a
    /// 408, a lingering close ends, a TLS handshake that never ended is closed (one
    /// line in the error log).
    pub fn expire(&mut self, h: &mut Held, obs: &mut dyn Observer) -> Next {
        if let Some(incoming) = h.body.take() {
            // A body that did not come in time: 408, as for a head.
            log::info!("{}: the request body did not come within body_timeout (and body_min_rate)", h.conn.peer);
            h.pending = request::request_line(&incoming.head).to_vec();
        } else if h.lingering() || (h.conn.requests > 0 && h.pending.is_empty()) {
            return Next::Close;
        }
        if h.awaiting_proxy_header() {
            log::info!("{}: closed: no whole PROXY protocol header within header_timeout", h.conn.peer);
            return Next::Close;
        }
        match &mut h.layer {
            Layer::Plain | Layer::PlainOnTlsPort => self.time_out(&mut &h.stream, &h.conn, &h.pending, obs),
            Layer::Tls(s) if s.handshaking() => {
                log::info!(
                    "TLS handshake with {} failed: not done within header_timeout ({:?})",
                    h.conn.peer,
                    self.config.http.header_timeout
                );
                return Next::Close;
            }
            Layer::Tls(s) => {
                let mut stage = std::mem::take(&mut self.tls_stage);
                let mut t = TlsStream::new(&h.stream, s, &mut stage, self.config.http.send_timeout);
                self.time_out(&mut t, &h.conn, &h.pending, obs);
                self.tls_stage = stage;
            }
        }
        h.linger(&mut self.input)
    }

    /// Answers 408 to a head that did not come whole in time (`pending` is what came).
    fn time_out(&mut self, t: &mut impl Transport, conn: &Conn, pending: &[u8], obs: &mut dyn Observer) {
        self.input.begin(pending);
        self.req_head.clear();
        self.req_head.extend_from_slice(self.input.pending_line());
        // What came of the head counts as its bytes in.
        let _ = self.input.take_head(pending.len());
        self.refuse(t, conn, HttpError::Timeout, obs);
    }

    /// Answers the request whose head is buffered up to `head_end`, and says whether
    /// the connection stays open for another.
    // The steps of a request are functions of their own for the reader, and one
    // function in the machine code: out of line they cost 100 more instructions per
    // keep-alive request (callgrind, 6,870 -> 6,970).
    #[inline(always)]
    fn serve_request(
        &mut self,
        t: &mut impl Transport,
        socket: &std::net::TcpStream,
        conn: &mut Conn,
        head_end: usize,
        obs: &mut dyn Observer,
    ) -> Served {
        let http = &self.config.http;
        obs.state(ConnState::Reading);
        // One clock for the Date header, the log's time stamp and the time taken (the
        // metrics' histogram, `%D`), as Apache measures `%D`: a second read of the
        // monotonic clock cost 50 more instructions a request (callgrind).
        let start = SystemTime::now();
        // The head is copied out (a few hundred bytes, into a reused buffer) so the
        // input buffer is free for the body and for pipelined requests.
        self.req_head.clear();
        self.req_head.extend_from_slice(self.input.take_head(head_end));
        // Room for the default 100 headers on the stack; a config allowing more
        // allocates per request. A 1000-entry array (32 KiB) here kept eight
        // stack pages dirty in every worker.
        let mut few = [const { MaybeUninit::uninit() }; FEW_HEADERS];
        let mut many: Vec<MaybeUninit<httparse::Header<'_>>>;
        let headers: &mut [MaybeUninit<httparse::Header<'_>>] = if self.limits.max_headers <= FEW_HEADERS {
            &mut few
        } else {
            // The config caps max_headers at `request::MAX_HEADERS`.
            many = std::iter::repeat_with(MaybeUninit::uninit).take(self.limits.max_headers).collect();
            &mut many
        };
        request::serve_later_minor_as_11(&mut self.req_head);
        let req = match request::parse(&self.req_head, headers, &self.limits) {
            Ok(r) => r,
            Err(e) => {
                self.refuse(t, conn, e, obs);
                return Served::Linger;
            }
        };
        // A location that runs scripts gets the body whole, read by the event loop
        // (a slow upload waits in the set, not in this worker); the others need no
        // body: one that is all there is dropped, one that is not is never waited for.
        let reads_body = req.framing != request::Framing::None && reads_body(&self.sites, self.config, &req);
        self.body = self.finished.take();
        if reads_body && self.body.is_none() {
            let keep =
                Keep { memory: http.client_body_buffer, max: http.max_body_size, dir: http.body_temp_dir.clone() };
            if !self.body_dir_ready {
                self.body_dir_ready = prepare_body_dir(&http.body_temp_dir);
            }
            let mut incoming = match Incoming::new(self.req_head.clone(), req.framing, keep) {
                Ok(i) => i,
                Err(e) => {
                    self.refuse(t, conn, e, obs);
                    return Served::Linger;
                }
            };
            if req.expect_continue && req.http11 && !self.input.has_unread() {
                let (mut beat, mut wait) = (|| {}, || {});
                let mut pacer = transport::Pacer::new(http.send_timeout, &mut beat, &mut wait);
                let _ = t.send(b"HTTP/1.1 100 Continue\r\n\r\n", None, &mut pacer);
            }
            match read_body(&mut self.input, t, &mut incoming) {
                Ok(true) => self.body = Some(incoming.into_body()),
                Ok(false) => {
                    self.started = Some(Box::new(incoming));
                    return Served::AwaitBody;
                }
                Err(e) => {
                    self.refuse(t, conn, body_refusal(&e, conn), obs);
                    return Served::Linger;
                }
            }
        }
        let client = self.client(&req, conn.peer);
        obs.request(req.line, client);
        conn.requests += 1;

        let body_dropped = reads_body
            || match self.input.drop_body(t, &req, http.max_body_size) {
                Ok(all_there) => all_there,
                Err(e) => {
                    self.refuse(t, conn, e, obs);
                    return Served::Linger;
                }
            };

        let mut reply = Reply::new(&mut self.out.extra);
        let mut kind = Kind::default();
        let fields = t.tls();
        let misdirected = fields.as_ref().and_then(|f| f.sni).and_then(|sni| misdirected(self.config, sni, &req));
        let tls = fields.is_some();
        // A plain request to a vhost that wants HTTPS is sent there.
        let https_port = if tls { None } else { self.https_port };
        let vhost = if let Some(vhost) = acme_challenge(self.config, &req, &mut reply) {
            vhost
        } else if let Some(sni_vhost) = misdirected {
            reply.error(421, "This connection was made for another host; open a new one for this host.");
            sni_vhost
        } else {
            match redirect_to_https(self.config, &req, https_port, &mut reply) {
                Some(vhost) => vhost,
                None => {
                    let observer = std::cell::RefCell::new(&mut *obs);
                    let waiting = || observer.borrow_mut().stalled();
                    let link = Link {
                        peer: if client.ip() == conn.peer.ip() { conn.peer } else { client },
                        local_port: conn.local_port,
                        https: tls,
                        socket: socket.as_fd(),
                        body: self.body.as_ref(),
                        waiting: &waiting,
                    };
                    dispatch(&self.sites, self.config, &req, client.ip(), link, &mut reply, &self.token, &mut kind)
                }
            }
        };
        let internal = kind.internal;
        conn.internal |= internal;
        if reply.status >= 400 {
            self.sites[vhost].error_page(&mut reply);
        }
        if tls && let Some(hsts) = &self.config.vhosts[vhost].hsts {
            reply.header("Strict-Transport-Security", hsts);
        }

        let keep_alive = req.keep_alive && body_dropped && !reply.close && may_keep_alive(http, conn, obs);
        let how = Delivery { http11: req.http11, keep_alive, head_only: req.method == Method::Head };
        let cached = reply.cached;
        let logs = &mut self.out.logs;
        let answer = self.out.writer.send(t, reply, start, how, obs, &mut || logs.waiting());
        if let Err(e) = &answer.sent
            && transport::file_shrank(e)
        {
            file_shrank(&self.sites[vhost], req.target, e);
        }
        if !internal {
            // The master's dummy requests are not traffic: they stay out of the
            // counts as they stay out of the logs.
            obs.served(&answer.outcome(req.method_str.as_bytes(), cached, false));
        }
        // Every request goes to the logs' filters; their default leaves the
        // master's dummy requests out.
        obs.state(ConnState::Logging);
        let asked = Asked::Request { req: &req, vhost, kind, client: client.ip() };
        self.out.log(self.config, conn, &asked, &answer, self.input.bytes_in(), t.tls());
        if answer.sent.is_err() {
            return Served::Close;
        }
        if !keep_alive {
            obs.state(ConnState::Closing);
            // Only unread input can turn our close into a reset that destroys the
            // response; without any, close at once (nginx's lingering_close on).
            return if !body_dropped || self.input.has_unread() || t.buffered() {
                Served::Linger
            } else {
                Served::Close
            };
        }
        Served::KeepAlive
    }

    /// The request's client: the one a trusted forwarder names (for this request
    /// only), else the peer (or the client its PROXY header named).
    fn client(&self, req: &Request<'_>, peer: SocketAddr) -> SocketAddr {
        if self.config.trusted_proxies.is_empty() {
            return peer;
        }
        let header = self.config.forwarded_header;
        req.header_list(header.name())
            .and_then(|v| forwarded::client(peer.ip(), &self.config.trusted_proxies, header, &v))
            .map_or(peer, |ip| SocketAddr::new(ip, 0))
    }

    /// Answers a request that cannot be served (its line is in `req_head`) with the
    /// error's status and logs it; the caller lingers, so the client sees the answer.
    #[cold]
    #[inline(never)]
    fn refuse(&mut self, t: &mut impl Transport, conn: &Conn, e: HttpError, obs: &mut dyn Observer) {
        let start = SystemTime::now();
        let line = request::request_line(&self.req_head);
        let mut reply = Reply::new(&mut self.out.extra);
        reply.error(e.status(), &e.to_string());
        // A HEAD request never gets content, not even an error page (RFC 9110 §9.3.2).
        let how = Delivery { http11: true, keep_alive: false, head_only: line.starts_with(b"HEAD ") };
        let logs = &mut self.out.logs;
        let answer = self.out.writer.send(t, reply, start, how, obs, &mut || logs.waiting());
        let method = &line[..line.iter().position(|&b| b == b' ').unwrap_or(line.len())];
        obs.served(&answer.outcome(method, None, true));
        let bytes_in = self.input.bytes_in();
        self.out.log(self.config, conn, &Asked::Refused { line }, &answer, bytes_in, t.tls());
        obs.state(ConnState::Closing);
    }
}

/// Whether the location `req` asks for reads request bodies (runs scripts).
fn reads_body(sites: &[Site<'_>], config: &Config, req: &Request<'_>) -> bool {
    let Ok((clean, _)) = path::clean(req.target) else { return false };
    sites[config.vhost_for(req.host)].place(&clean.bytes).handler.reads_body()
}

/// Takes what has arrived of a request body: true once it is whole (what followed
/// it stays in `input`), false when the rest must be waited for.
fn read_body(input: &mut Input, t: &mut impl Transport, incoming: &mut Incoming) -> Result<bool, BodyError> {
    loop {
        let used = incoming.take(input.unread())?;
        input.consume(used);
        if incoming.done() {
            return Ok(true);
        }
        match input.read_more(t) {
            Ok(0) => return Err(BodyError::Closed),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
            Err(_) => return Err(BodyError::Closed),
        }
    }
}

/// The answer to a body that could not be read, said in the error log when it is
/// the server's fault.
fn body_refusal(e: &BodyError, conn: &Conn) -> HttpError {
    match e {
        BodyError::Http(h) => *h,
        BodyError::Closed => HttpError::BadRequest("the request body ended early"),
        BodyError::Io(io) => {
            log::error!("{}: keeping a request body failed: {io}", conn.peer);
            HttpError::Internal
        }
    }
}

/// Makes the folder for request-body files (once per worker); says so in the error
/// log when it cannot.
fn prepare_body_dir(dir: &std::path::Path) -> bool {
    match crate::gateway::incoming::prepare_dir(dir) {
        Ok(()) => true,
        Err(e) => {
            log::error!("body_temp_dir {}: {e}", dir.display());
            false
        }
    }
}

/// Whether the server lets a connection take another request: keep-alive on, not
/// at `max_keepalive_requests`, and the worker not leaving.
fn may_keep_alive(http: &Http, conn: &Conn, obs: &mut dyn Observer) -> bool {
    http.keepalive
        && !obs.must_close()
        && (http.max_keepalive_requests == 0 || conn.requests < http.max_keepalive_requests)
}

/// A file got shorter while it was sent: the response was cut, and the vhost's
/// cached files are looked at again.
#[cold]
fn file_shrank(site: &Site<'_>, target: &[u8], e: &std::io::Error) {
    site.files_changed();
    let mut escaped = Vec::new();
    crate::log::format::escape_into(&mut escaped, target);
    log::warn!(
        "{}: the file shrank while it was sent ({e}); the response was cut short, and the cached files are looked at again",
        String::from_utf8_lossy(&escaped)
    );
}

/// Compares a secret in time that does not depend on where the bytes differ (`==`
/// stops at the first difference, which a client timing many guesses could use to
/// find the token a byte at a time). The length is not secret: every token has 32.
fn same_secret(given: &[u8], secret: &[u8]) -> bool {
    if given.len() != secret.len() {
        return false;
    }
    let diff = given.iter().zip(secret).fold(0u8, |acc, (a, b)| acc | (a ^ b));
    // Keeps the compiler from turning the fold back into an early exit.
    std::hint::black_box(diff) == 0
}

/// An ACME CA asking for an HTTP-01 token under way ([`crate::acme::http01`]):
/// answered before any redirect or location. Returns the vhost.
fn acme_challenge(config: &Config, req: &Request<'_>, reply: &mut Reply<'_>) -> Option<usize> {
    if !req.target.starts_with(crate::acme::http01::PREFIX) {
        return None;
    }
    let key_authorization = crate::acme::http01::answer(req.target)?;
    reply.header("Content-Type", "application/octet-stream");
    reply.body = Body::Owned(key_authorization);
    Some(config.vhost_for(req.host))
}

/// When the request came on a plain listener (`https_port`: where HTTPS is served)
/// for a vhost with `https_redirect`: answers with the redirect and returns the
/// vhost. `OPTIONS *` names no resource to redirect (and the master's dummy
/// requests come that way).
fn redirect_to_https(
    config: &Config,
    req: &Request<'_>,
    https_port: Option<u16>,
    reply: &mut Reply<'_>,
) -> Option<usize> {
    let port = https_port?;
    if req.target == b"*" {
        return None;
    }
    let index = config.vhost_for(req.host);
    let code = config.vhosts[index].https_redirect?;
    let name = config.vhosts[index].server_names.first().map_or("", String::as_str);
    let location = crate::http::https::location(req.host, name, port, req.target);
    reply.error(code, "This site is served over HTTPS.");
    reply.header("Location", String::from_utf8_lossy(&location));
    Some(index)
}

/// Picks the vhost, then what answers the request there, and runs it. Returns the
/// vhost used.
/// The vhost of the connection's TLS name, when the request's Host names another:
/// the certificate the client checked was chosen for that name, so the request is
/// answered 421 (RFC 9110 §15.5.20), as Apache does, rather than served another
/// site's content over it. Names that pick the same vhost (a wildcard, a vhost
/// without a certificate of its own) agree.
fn misdirected(config: &Config, sni: &str, req: &Request<'_>) -> Option<usize> {
    let by_name = config.vhost_for(Some(sni.as_bytes()));
    (by_name != config.vhost_for(req.host)).then_some(by_name)
}

#[allow(clippy::too_many_arguments)]
fn dispatch(
    sites: &[Site<'_>],
    config: &Config,
    req: &Request<'_>,
    client: std::net::IpAddr,
    link: Link<'_>,
    reply: &mut Reply<'_>,
    token: &str,
    kind: &mut Kind,
) -> usize {
    let index = config.vhost_for(req.host);
    if req.target == b"*" {
        // `OPTIONS *`: the server's own capabilities. The master's dummy connection is
        // one of these, recognised by its per-boot token (a client cannot know it).
        kind.internal =
            !token.is_empty() && req.header(INTERNAL_HEADER).is_some_and(|t| same_secret(t, token.as_bytes()));
        reply.header("Allow", ALLOW);
        reply.body = Body::Owned(Vec::new());
        return index;
    }
    // "http://host?q" arrives as "?q": its path is "/".
    let rooted;
    let target = if req.target.first() == Some(&b'?') {
        rooted = [&b"/"[..], req.target].concat();
        &rooted[..]
    } else {
        req.target
    };
    let (clean, query) = match path::clean(target) {
        Ok(p) => p,
        // Without a path no handler is reached; a method none of them answers is the
        // first thing wrong (`CONNECT host:443`).
        Err(_) if req.method == Method::OtherKnown => {
            handlers::not_allowed(reply);
            return index;
        }
        Err(PathError::EncodedSlash) => {
            // Apache's AllowEncodedSlashes Off answers 404: no file name holds a '/'.
            reply.error(404, "The requested resource was not found.");
            return index;
        }
        Err(e) => {
            reply.error(400, &format!("Bad request path: {e}."));
            return index;
        }
    };
    let site = &sites[index];
    let ask = Ask { req, path: &clean, query, client, link };
    let place = site.place(&clean.bytes);
    kind.health = matches!(place.handler, handlers::Handler::Health(_));
    place.serve(&ask, reply);
    index
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_compared_whole() {
        let token = b"0123456789abcdef0123456789abcdef";
        assert!(same_secret(token, token));
        assert!(!same_secret(b"x123456789abcdef0123456789abcdef", token), "first byte differs");
        assert!(!same_secret(b"0123456789abcdef0123456789abcdex", token), "last byte differs");
        assert!(!same_secret(b"0123456789abcdef", token), "a prefix");
        assert!(!same_secret(b"", token));
    }
}
