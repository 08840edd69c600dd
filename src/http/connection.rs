//! One connection, from the first byte to the close, served a request at a time.
//!
//! The worker holds each connection as a [`Held`] between requests and calls
//! [`Server::serve_ready`] when it has input: is a whole head there yet ([`Input`],
//! which never waits)? If so `Server::serve_request` answers it: parse and
//! validate → drop a body that is all there, or plan to close → pick the vhost and
//! what answers there → the answer's head and body ([`response`], blocking writes)
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
use std::time::{Duration, Instant, SystemTime};

use super::date::DateCache;
use super::forwarded;
use super::held::{Conn, Held, Next, Phase};
use super::input::{HeadError, Input, ProxyFail};
use super::observer::{ConnState, Observer};
use super::output::{Asked, Delivery, HeadWriter, Kind, Output};
use super::path::{self, PathError};
use super::request::{self, HttpError, Limits, Method, Request};
use super::response::{self, ALLOW, Body, Reply};
use super::transport::Transport;
use crate::clock::now_ms;
use crate::config::{Config, ServerTokens};
use crate::handlers::{self, Ask};
use crate::log::access::AccessLogs;
use crate::pod::INTERNAL_HEADER;
use crate::site::Site;
use crate::vhost;

/// Pipelined requests served from one connection's buffer in a row, before the
/// worker's other connections get a turn.
const BURST: u32 = 16;

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
