//! One connection, from the first byte to the close, served a request at a time.
//!
//! The worker holds each connection as a [`Held`] between requests and calls
//! [`Server::serve_ready`] when it has input: is a whole head there yet ([`Input`],
//! which never waits)? If so `Server::serve_request` answers it: parse and
//! validate → drop a body that is all there, or plan to close → pick the vhost and
//! what answers there → the answer's head and body ([`response`], blocking writes)
//! → one access-log record (`Output::log`, the only place one is made) → keep alive
//! or close. Then the next pipelined request, or back to the worker's set to wait.
//! A closing connection lingers in that set too: shut for writing, its input read
//! and dropped for a moment, so the client reads our answer and not a reset.
//!
//! This code knows nothing about processes: what the worker needs to see (state
//! changes for the scoreboard, whether it must stop keeping connections alive) goes
//! through the [`Observer`] it is given.

use std::io;
use std::mem::MaybeUninit;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant, SystemTime};

use super::date::DateCache;
use super::forwarded;
use super::input::{HeadError, Input, ProxyFail};
use super::path::{self, PathError};
use super::request::{self, HttpError, Limits, Method, Request};
use super::response::{self, ALLOW, Body, Reply};
use super::transport::{Pacer, Transport};
use crate::clock::now_ms;
use crate::config::Http as HttpConfig;
use crate::config::{Config, ServerTokens};
use crate::handlers::{self, Ask};
use crate::log::access::AccessLogs;
use crate::log::record::Record;
use crate::pod::INTERNAL_HEADER;
use crate::site::Site;
use crate::vhost;

/// What a connection is doing, for the scoreboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    Reading,
    Writing,
    Logging,
    Closing,
}

/// The worker's view into a connection.
pub trait Observer {
    fn state(&mut self, state: ConnState);
    /// A request head has been read.
    fn request(&mut self, line: &[u8], client: SocketAddr);
    /// A response has been sent, `bytes` of it.
    fn served(&mut self, bytes: u64);
    /// Progress on a long write (a stuck-worker watchdog reads it).
    fn heartbeat(&mut self);
    /// The worker must finish: answer this request with `Connection: close`.
    fn must_close(&self) -> bool;
    /// A write has waited a slice on a client slow to read: the worker may let the
    /// other connections it holds be served elsewhere meanwhile.
    fn stalled(&mut self) {}
}

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

/// Pipelined requests served from one connection's buffer in a row, before the
/// worker's other connections get a turn.
const BURST: u32 = 16;

/// How long a lingering close reads and drops what the client still sends (Apache's
/// lingering close is 2 s too).
const LINGER_MS: u64 = 2000;

/// A connection the worker holds: the socket, what is known of it, and the bytes
/// read but not used yet (the start of its next request).
pub struct Held {
    pub stream: TcpStream,
    pub conn: Conn,
    pending: Vec<u8>,
    phase: Phase,
    /// When the current wait began (`clock::now_ms`): the last answer for an idle
    /// connection, the first byte of a head that came in part, the accept for a new
    /// one, the start of a lingering close.
    since_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for (the rest of) a PROXY protocol header, before the first head.
    Proxy,
    /// Waiting for (the rest of) a head.
    Waiting,
    /// Shut for writing; what still comes is read and dropped.
    Lingering { drained: usize },
}

/// What the worker does with a connection after [`Server::serve_ready`].
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
    fn linger(&mut self, input: &mut Input) -> Next {
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

/// How a request ended, for the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Served {
    KeepAlive,
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
}

/// The write side: what builds, sends and logs responses.
struct Output {
    logs: AccessLogs,
    request_id: u64,
    writer: HeadWriter,
    /// A reply's own header lines, reused.
    extra: Vec<u8>,
}

/// Makes response heads and sends them with their bodies.
struct HeadWriter {
    date: DateCache,
    server_header: &'static str,
    send_timeout: Duration,
    /// The last head sent (the access log may quote its fields).
    head: Vec<u8>,
}

impl<'c> Server<'c> {
    /// Prepares to serve `config`'s vhosts (`sites`, in the same order).
    pub fn new(config: &'c Config, sites: Vec<Site<'c>>, logs: AccessLogs, token: String) -> Server<'c> {
        let limits = Limits {
            max_request_line: config.http.max_request_line,
            max_header_size: config.http.max_header_size,
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
        let mut t = &h.stream;
        if let Phase::Lingering { drained } = &mut h.phase {
            return if self.input.drain(&mut t, drained) { Next::Close } else { Next::Park };
        }
        let had_pending = !h.pending.is_empty();
        self.input.begin(&h.pending);
        h.pending.clear();
        if h.phase == Phase::Proxy {
            match self.input.try_proxy_header(&mut t) {
                Ok(Some(header)) => {
                    h.phase = Phase::Waiting;
                    // No source (LOCAL, UNKNOWN): the balancer's own connection.
                    if let Some(source) = header.source {
                        h.conn.balancer = Some(h.conn.peer);
                        h.conn.peer = source;
                    }
                }
                Ok(None) => {
                    h.pending.extend_from_slice(self.input.unread());
                    return Next::Park;
                }
                Err(ProxyFail::Closed { partial: false }) => return Next::Close,
                Err(ProxyFail::Closed { partial: true }) => {
                    log::info!("{}: closed: the connection ended inside its PROXY protocol header", h.conn.peer);
                    return Next::Close;
                }
                Err(ProxyFail::Invalid(e)) => {
                    log::info!(
                        "{}: closed: {e} (port {} expects a PROXY protocol header first)",
                        h.conn.peer,
                        h.conn.local_port
                    );
                    return Next::Close;
                }
            }
        }
        for _ in 0..BURST {
            let head_end = match self.input.try_head(&mut t) {
                Ok(Some(end)) => end,
                Ok(None) => {
                    if self.input.has_unread() {
                        // A head began on an idle connection: its header clock starts.
                        if !had_pending && h.conn.requests > 0 {
                            h.since_ms = now_ms();
                        }
                        h.pending.extend_from_slice(self.input.unread());
                    }
                    return Next::Park;
                }
                Err(HeadError::Quiet) => return Next::Close,
                Err(HeadError::Http(e)) => {
                    self.req_head.clear();
                    self.req_head.extend_from_slice(self.input.pending_line());
                    self.refuse(&mut t, &h.conn, e, obs);
                    return h.linger(&mut self.input);
                }
            };
            match self.serve_request(&mut t, &mut h.conn, head_end, obs) {
                Served::KeepAlive if self.input.has_unread() => {} // pipelined: the next one
                Served::KeepAlive => {
                    h.since_ms = now_ms();
                    return Next::Park;
                }
                Served::Close => return Next::Close,
                Served::Linger => return h.linger(&mut self.input),
            }
        }
        h.pending.extend_from_slice(self.input.unread());
        Next::Again
    }

    /// A held connection's wait ran out ([`Held::deadline_ms`]): an idle one is
    /// closed quietly (the keep-alive timeout), a head that never came whole gets a
    /// 408, a lingering close ends.
    pub fn expire(&mut self, h: &mut Held, obs: &mut dyn Observer) -> Next {
        if h.lingering() || (h.conn.requests > 0 && h.pending.is_empty()) {
            return Next::Close;
        }
        if h.awaiting_proxy_header() {
            log::info!("{}: closed: no whole PROXY protocol header within header_timeout", h.conn.peer);
            return Next::Close;
        }
        let mut t = &h.stream;
        self.input.begin(&h.pending);
        self.req_head.clear();
        self.req_head.extend_from_slice(self.input.pending_line());
        // What came of the head counts as its bytes in.
        let _ = self.input.take_head(h.pending.len());
        self.refuse(&mut t, &h.conn, HttpError::Timeout, obs);
        h.linger(&mut self.input)
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
        conn: &mut Conn,
        head_end: usize,
        obs: &mut dyn Observer,
    ) -> Served {
        let http = &self.config.http;
        obs.state(ConnState::Reading);
        // Only a format with %D or %T reads the clock a second time.
        let started = self.out.logs.timed().then(Instant::now);
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
        let req = match request::parse(&self.req_head, headers, &self.limits) {
            Ok(r) => r,
            Err(e) => {
                self.refuse(t, conn, e, obs);
                return Served::Linger;
            }
        };
        // The client a trusted forwarder names, for this request only.
        let client = match self.config.trusted_proxies.is_empty() {
            true => None,
            false => {
                let header = self.config.forwarded_header;
                req.header_list(header.name())
                    .and_then(|v| forwarded::client(conn.peer.ip(), &self.config.trusted_proxies, header, &v))
            }
        };
        let client = client.map_or(conn.peer, |ip| SocketAddr::new(ip, 0));
        obs.request(req.line, client);
        conn.requests += 1;

        // No answer needs the body: one that is all there is dropped, one that is
        // not is never waited for (that wait was how slow bodies took the pool).
        let body_dropped = match self.input.drop_body(t, &req, http.max_body_size) {
            Ok(all_there) => all_there,
            Err(e) => {
                self.refuse(t, conn, e, obs);
                return Served::Linger;
            }
        };

        let mut reply = Reply::new(&mut self.out.extra);
        let mut kind = Kind::default();
        let vhost = dispatch(&self.sites, self.config, &req, client.ip(), &mut reply, &self.token, &mut kind);
        let internal = kind.internal;
        conn.internal |= internal;
        if reply.status >= 400 {
            self.sites[vhost].error_page(&mut reply);
        }

        let keep_alive = req.keep_alive
            && http.keepalive
            && body_dropped
            && !reply.close
            && !obs.must_close()
            && (http.max_keepalive_requests == 0 || conn.requests < http.max_keepalive_requests);
        let how = Delivery { http11: req.http11, keep_alive, head_only: req.method == Method::Head };
        let logs = &mut self.out.logs;
        let answer = self.out.writer.send(t, reply, start, how, obs, &mut || logs.waiting());
        if let Err(e) = &answer.sent
            && response::file_shrank(e)
        {
            self.sites[vhost].files_changed();
            let mut target = Vec::new();
            crate::log::format::escape_into(&mut target, req.target);
            log::warn!(
                "{}: the file shrank while it was sent ({e}); the response was cut short, and the cached files are looked at again",
                String::from_utf8_lossy(&target)
            );
        }
        if !internal {
            // The master's dummy requests are not traffic: they stay out of the
            // counts as they stay out of the logs.
            obs.served(*answer.sent.as_ref().unwrap_or(&0));
        }
        // Every request goes to the logs' filters; their default leaves the
        // master's dummy requests out.
        obs.state(ConnState::Logging);
        let duration = started.map_or(Duration::ZERO, |t| t.elapsed());
        let asked = Asked::Request { req: &req, vhost, kind, client: client.ip() };
        self.out.log(self.config, conn, &asked, &answer, self.input.bytes_in(), duration);
        if answer.sent.is_err() {
            return Served::Close;
        }
        if !keep_alive {
            obs.state(ConnState::Closing);
            // Only unread input can turn our close into a reset that destroys the
            // response; without any, close at once (nginx's lingering_close on).
            return if !body_dropped || self.input.has_unread() { Served::Linger } else { Served::Close };
        }
        Served::KeepAlive
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
        self.out.log(self.config, conn, &Asked::Refused { line }, &answer, self.input.bytes_in(), Duration::ZERO);
        obs.state(ConnState::Closing);
    }
}

/// What the client asked, as far as the log is concerned.
enum Asked<'a> {
    /// A parsed request, served by vhost number `vhost`, from `client` (the peer,
    /// or the client a trusted forwarder named).
    Request { req: &'a Request<'a>, vhost: usize, kind: Kind, client: std::net::IpAddr },
    /// A head refused before or while it was read: only its line is known.
    Refused { line: &'a [u8] },
}

/// How a reply goes out.
#[derive(Clone, Copy)]
struct Delivery {
    http11: bool,
    /// Else `Connection: close`.
    keep_alive: bool,
    /// The head without the body (a HEAD request).
    head_only: bool,
}

/// What went back.
struct Answer {
    status: u16,
    /// The body's length (0 when only the head was sent).
    body_bytes: u64,
    /// The bytes written, or why the write failed.
    sent: io::Result<u64>,
    keep_alive: bool,
    start: SystemTime,
}

impl HeadWriter {
    /// Sends `reply`: the head made from it, then its body unless the request or
    /// the status wants none. `waiting` when the client has kept the worker waiting
    /// a slice (see [`Pacer`]).
    #[inline(always)]
    fn send(
        &mut self,
        t: &mut impl Transport,
        mut reply: Reply<'_>,
        start: SystemTime,
        how: Delivery,
        obs: &mut dyn Observer,
        waiting: &mut dyn FnMut(),
    ) -> Answer {
        obs.state(ConnState::Writing);
        let body = std::mem::replace(&mut reply.body, Body::None);
        let date = self.date.at(start);
        response::write_head(&mut self.head, date, self.server_header, &reply, &body, how.http11, how.keep_alive);
        let send_body = !how.head_only && !response::bodiless(reply.status);
        // Both callbacks reach the observer; they never run at the same time.
        let obs = std::cell::RefCell::new(obs);
        let mut heartbeat = || obs.borrow_mut().heartbeat();
        let mut stalled = || {
            waiting();
            obs.borrow_mut().stalled();
        };
        let mut pacer = Pacer::new(self.send_timeout, &mut heartbeat, &mut stalled);
        let sent = response::send(t, &self.head, send_body.then_some(&body), &mut pacer);
        let body_bytes = if send_body { body.len() } else { 0 };
        Answer { status: reply.status, body_bytes, sent, keep_alive: how.keep_alive, start }
    }
}

fn vhost_name(config: &Config, index: usize) -> &str {
    config.vhosts[index].server_names.first().map_or("-", String::as_str)
}

impl Output {
    /// Makes the access-log record of one request and hands it to the logs: the one
    /// place a record is made.
    #[inline(always)]
    fn log(
        &mut self,
        config: &Config,
        conn: &Conn,
        asked: &Asked<'_>,
        answer: &Answer,
        bytes_in: u64,
        duration: Duration,
    ) {
        let (line, method, path, query, protocol, host, vhost, kind, client) = match *asked {
            Asked::Request { req, vhost, kind, client } => {
                let (path, query) = split_query(req.target);
                (req.line, req.method_str.as_bytes(), path, query, req.protocol(), req.host, vhost, kind, client)
            }
            // Of a refused head only the line is known; the default vhost logs it.
            Asked::Refused { line } => {
                let method_end = line.iter().position(|&b| b == b' ').unwrap_or(line.len());
                (line, &line[..method_end], &b"-"[..], None, "HTTP/1.1", None, 0, Kind::default(), conn.peer.ip())
            }
        };
        let headers_in = |name: &str| match asked {
            Asked::Request { req, .. } => req.header(name),
            Asked::Refused { .. } => None,
        };
        // A refused head gets no request id and no keep-alive count.
        let refused = matches!(asked, Asked::Refused { .. });
        let (request_id, keepalive_count) = if refused {
            (0, 0)
        } else {
            self.request_id = self.request_id.wrapping_add(1);
            (self.request_id, conn.requests - 1)
        };
        let conn_status = match (&answer.sent, answer.keep_alive) {
            _ if refused => '-',
            (Err(_), _) => 'X',
            (Ok(_), true) => '+',
            (Ok(_), false) => '-',
        };
        let record = Record {
            client,
            peer: conn.socket_peer().ip(),
            local_port: conn.local_port,
            request_line: line,
            method,
            path,
            query,
            protocol,
            status: answer.status,
            body_bytes: answer.body_bytes,
            bytes_in,
            bytes_out: *answer.sent.as_ref().unwrap_or(&0),
            start: answer.start,
            duration,
            vhost: vhost_name(config, vhost),
            host,
            headers_in: &headers_in,
            response_head: &self.writer.head,
            conn_status,
            keepalive_count,
            health: kind.health,
            request_id,
            tls: None,
        };
        self.logs.write(&record, kind.internal, vhost);
    }
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

/// Picks the vhost, then what answers the request there, and runs it. Returns the
/// vhost used.
fn dispatch(
    sites: &[Site<'_>],
    config: &Config,
    req: &Request<'_>,
    client: std::net::IpAddr,
    reply: &mut Reply<'_>,
    token: &str,
    kind: &mut Kind,
) -> usize {
    let index = vhost::select(&config.vhosts, req.host);
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
    let ask = Ask { req, path: &clean, query, client };
    let handler = site.handler(&clean.bytes);
    kind.health = matches!(handler, handlers::Handler::Health(_));
    handler.serve(&ask, reply);
    index
}

/// What kind of request it was, for the logs' filters.
#[derive(Debug, Default, Clone, Copy)]
struct Kind {
    /// The master's dummy request (its per-boot token).
    internal: bool,
    /// Answered by a health-check location.
    health: bool,
}

fn split_query(target: &[u8]) -> (&[u8], Option<&[u8]>) {
    match target.iter().position(|&b| b == b'?') {
        Some(q) => (&target[..q], Some(&target[q + 1..])),
        None => (target, None),
    }
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
