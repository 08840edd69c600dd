//! One connection, from the first byte to the close: the keep-alive loop.
//!
//! read the head (bounded in size and time) → parse and validate → read and discard
//! any body (so the next pipelined request starts where it should) → pick the vhost →
//! run the handler → `writev` head and body → log → keep alive or close.
//!
//! This code knows nothing about processes: what the worker needs to see (state
//! changes for the scoreboard, whether it must stop keeping connections alive) goes
//! through the [`Observer`] it is given.

use std::io::{self, IoSlice, Read, Write};
use std::mem::MaybeUninit;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant, SystemTime};

use super::date::DateCache;
use super::path::{self, PathError};
use super::request::{self, Framing, HttpError, Limits, Method, Request};
use super::response::{self, ALLOW, Body, Reply};
use crate::config::{Config, ServerTokens};
use crate::handlers::static_file::{self, Env, Site};
use crate::listen::WAIT_SLICE;
use crate::log::access::AccessLogs;
use crate::log::format::Record;
use crate::pod::INTERNAL_HEADER;
use crate::text;
use crate::vhost;

/// What a connection is doing, for the scoreboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    Reading,
    KeepAlive,
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
    /// Idle workers are scarce: idle and slow connections should yield.
    fn under_pressure(&mut self) -> bool {
        false
    }
    /// Connections wait in the listeners' accept queues for a worker.
    fn clients_waiting(&mut self) -> bool {
        false
    }
    /// An optional page the worker serves itself (`server-status`).
    fn status_page(&mut self, _req: &Request<'_>, _query: Option<&[u8]>, _reply: &mut Reply<'_>) -> bool {
        false
    }
}

/// After every this many requests a kept-alive connection looks whether clients wait
/// in the accept queue (one `getsockopt` per listener) and, if so, closes so that one
/// of them gets the worker. `max_keepalive_requests` (default 1000, as nginx and
/// lighttpd) caps a connection in any case; Apache's default cap is 100.
pub const TURN_REQUESTS: u64 = 100;

/// How a connection ended.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub requests: u64,
    /// The connection carried the master's internal dummy request.
    pub internal: bool,
}

/// How long a closing connection is drained so the client reads our response
/// instead of a reset (Apache's lingering close).
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 64 * 1024;

/// Everything a worker keeps from one connection to the next: config, open roots,
/// logs, and buffers reused for every request.
pub struct Server<'c> {
    config: &'c Config,
    sites: Vec<Site<'c>>,
    token: String,
    limits: Limits,
    out: Output,
    buf: Vec<u8>,
    req_head: Vec<u8>,
}

/// The write side: what builds, sends and logs responses.
struct Output {
    logs: AccessLogs,
    date: DateCache,
    server_header: &'static str,
    head: Vec<u8>,
    extra: Vec<u8>,
    request_id: u64,
}

/// The read side of a connection: the socket, the buffer and what is in it.
struct Input<'a> {
    stream: &'a TcpStream,
    /// Starts at [`INPUT_START`] bytes and grows (doubling) to `limit`: the largest
    /// head plus room for the start of a pipelined one.
    buf: &'a mut Vec<u8>,
    limit: usize,
    start: usize,
    end: usize,
    timeout: Option<Duration>,
    bytes_in: u64,
    /// Set while a body is read.
    body: Option<BodyClock>,
}

#[derive(Clone, Copy)]
struct BodyClock {
    started: Instant,
    timeout: Duration,
    min_rate: u64,
    /// `bytes_in` when the body began.
    head_bytes: u64,
}

/// The input buffer's first size: more than nearly every request head.
const INPUT_START: usize = 4096;

/// Header slots on the stack: the default `http.max_headers`.
const FEW_HEADERS: usize = 100;

/// Under pressure (no idle worker left and the pool at its maximum), how long an idle
/// kept-alive connection or a trickling head may keep its worker. Long enough for any
/// client that is really sending (its head comes in one round trip); short enough that a pool full of idle or slowloris
/// connections frees itself within seconds.
const PRESSURE_GRACE: Duration = Duration::from_secs(1);

enum HeadError {
    /// The client closed or went idle between requests: close quietly.
    Quiet,
    Http(HttpError),
}

impl<'c> Server<'c> {
    /// Prepares to serve: opens every vhost root.
    pub fn new(config: &'c Config, logs: AccessLogs, token: String) -> io::Result<Server<'c>> {
        let check = config.http.file_check_interval;
        let sites = config.vhosts.iter().map(|v| Site::open(v, check)).collect::<io::Result<Vec<_>>>()?;
        let limits = Limits {
            max_request_line: config.http.max_request_line,
            max_header_size: config.http.max_header_size,
            max_headers: config.http.max_headers,
        };
        let server_header = match config.server_tokens {
            ServerTokens::Full => concat!("pika/", env!("CARGO_PKG_VERSION")),
            ServerTokens::Product => "pika",
        };
        Ok(Server {
            config,
            sites,
            token,
            limits,
            out: Output {
                logs,
                date: DateCache::default(),
                server_header,
                head: Vec::with_capacity(512),
                extra: Vec::with_capacity(256),
                request_id: u64::from(std::process::id()) << 32,
            },
            // Grows to the largest head plus the start of a pipelined one (Input::limit).
            buf: vec![0; INPUT_START.min(config.http.max_header_size + 4096)],
            req_head: Vec::with_capacity(1024),
        })
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

    /// Serves one connection to its end. The socket comes from a listener set up by
    /// `listen::configure`: no delay, the send timeout, and [`WAIT_SLICE`] as its
    /// receive timeout are already in place.
    pub fn serve(&mut self, stream: TcpStream, peer: SocketAddr, local_port: u16, obs: &mut dyn Observer) -> Outcome {
        let Server { config, sites, token, limits, out, buf, req_head } = self;
        let http = &config.http;
        let limit = http.max_header_size + 4096;
        let conn = Conn { peer, local_port, default_vhost: vhost_name(config, 0), send_timeout: http.send_timeout };
        let mut outcome = Outcome::default();
        let mut input =
            Input { stream: &stream, buf, limit, start: 0, end: 0, timeout: Some(WAIT_SLICE), bytes_in: 0, body: None };
        loop {
            obs.state(if outcome.requests == 0 { ConnState::Reading } else { ConnState::KeepAlive });
            let first_wait = if outcome.requests == 0 { http.header_timeout } else { http.keepalive_timeout };
            let kept_alive = outcome.requests > 0;
            let head_end = match input.read_head(
                first_wait,
                http.header_timeout,
                limits,
                kept_alive,
                &mut || obs.under_pressure(),
                // The client has kept this worker a second: write the held records.
                &mut || out.logs.waiting(),
            ) {
                Ok(n) => {
                    if kept_alive {
                        // No longer waiting: the status page shows this worker busy.
                        obs.state(ConnState::Reading);
                    }
                    n
                }
                Err(HeadError::Quiet) => break,
                Err(HeadError::Http(e)) => {
                    req_head.clear();
                    req_head.extend_from_slice(request::request_line(&input.buf[input.start..input.end]));
                    out.fail(&mut input, e, req_head, &conn, obs);
                    break;
                }
            };
            // Only a format with %D or %T reads the clock a second time.
            let started = out.logs.timed().then(Instant::now);
            let start_time = SystemTime::now();
            // The head is copied out (a few hundred bytes, into a reused buffer) so the
            // input buffer is free for the body and for pipelined requests.
            req_head.clear();
            req_head.extend_from_slice(&input.buf[input.start..head_end]);
            input.bytes_in = req_head.len() as u64;
            input.start = head_end;
            // Room for the default 100 headers on the stack; a config allowing more
            // allocates per request. A 1000-entry array (32 KiB) here kept eight
            // stack pages dirty in every worker.
            let mut few = [const { MaybeUninit::uninit() }; FEW_HEADERS];
            let mut many: Vec<MaybeUninit<httparse::Header<'_>>>;
            let headers: &mut [MaybeUninit<httparse::Header<'_>>] = if limits.max_headers <= FEW_HEADERS {
                &mut few
            } else {
                // The config caps max_headers at `request::MAX_HEADERS`.
                many = std::iter::repeat_with(MaybeUninit::uninit).take(limits.max_headers).collect();
                &mut many
            };
            let req = match request::parse(req_head, headers, limits) {
                Ok(r) => r,
                Err(e) => {
                    out.fail(&mut input, e, request::request_line(req_head), &conn, obs);
                    break;
                }
            };
            obs.request(req.line, peer);
            outcome.requests += 1;

            if req.framing != Framing::None {
                // Reading a body may wait on the client for long.
                out.logs.waiting();
            }
            if let Err(e) = input.discard_body(&req, http.max_body_size, http.body_timeout, http.body_min_rate) {
                if let BodyError::Http(e) = e {
                    out.fail(&mut input, e, req.line, &conn, obs);
                }
                break;
            }

            let mut reply = Reply::new(&mut out.extra);
            let mut internal = false;
            let vhost_index = dispatch(sites, config, &req, &mut reply, token, &mut internal, obs);
            outcome.internal |= internal;
            if reply.status >= 400 {
                custom_error_page(&sites[vhost_index], &config.mime, &mut reply);
            }

            let keep_alive = req.keep_alive
                && http.keepalive
                && !reply.close
                && !obs.must_close()
                && (http.max_keepalive_requests == 0 || outcome.requests < http.max_keepalive_requests)
                // Every 100th request: if clients wait in the backlog, hand the worker on.
                && !(outcome.requests % TURN_REQUESTS == 0 && obs.clients_waiting());
            obs.state(ConnState::Writing);
            let status = reply.status;
            let body = std::mem::replace(&mut reply.body, Body::None);
            write_head(
                &mut out.head,
                out.date.at(start_time),
                out.server_header,
                &reply,
                &body,
                req.http11,
                keep_alive,
            );
            let send_body = req.method != Method::Head && !response::bodiless(status);
            let mut stall = Stall::new(http.send_timeout, &mut out.logs);
            let sent = write_response(&stream, &out.head, send_body.then_some(&body), obs, &mut stall);
            if let Err(e) = &sent
                && file_shrank(e)
            {
                sites[vhost_index].files_changed();
                let mut target = Vec::new();
                crate::log::format::escape_into(&mut target, req.target);
                log::warn!(
                    "{}: the file shrank while it was sent ({e}); the response was cut short, and the cached files are looked at again",
                    String::from_utf8_lossy(&target)
                );
            }
            let body_bytes = if send_body { body.len() } else { 0 };
            drop(body);
            if !internal {
                // The master's dummy requests are not traffic: they stay out of the
                // counts as they stay out of the logs.
                obs.served(sent.as_ref().map_or(0, |n| *n));
            }

            // Every request goes to the logs' filters; their default leaves the
            // master's dummy requests out.
            {
                obs.state(ConnState::Logging);
                out.request_id = out.request_id.wrapping_add(1);
                let (path_part, query) = split_query(req.target);
                let lookup = |name: &str| req.header(name);
                let record = Record {
                    client: peer.ip(),
                    local_port,
                    request_line: req.line,
                    method: req.method_str.as_bytes(),
                    path: path_part,
                    query,
                    protocol: req.protocol(),
                    status,
                    body_bytes,
                    bytes_in: input.bytes_in,
                    bytes_out: sent.as_ref().map_or(0, |n| *n),
                    start: start_time,
                    duration: started.map_or(Duration::ZERO, |t| t.elapsed()),
                    vhost: vhost_name(config, vhost_index),
                    host: req.host,
                    headers_in: &lookup,
                    response_head: &out.head,
                    conn_status: if sent.is_err() {
                        'X'
                    } else if keep_alive {
                        '+'
                    } else {
                        '-'
                    },
                    keepalive_count: outcome.requests - 1,
                    request_id: out.request_id,
                    tls: None,
                };
                out.logs.write(&record, internal, vhost_index);
            }
            if sent.is_err() {
                break;
            }
            if !keep_alive {
                obs.state(ConnState::Closing);
                // Only unread input can turn our close into a reset that destroys the
                // response; without any, close at once (nginx's lingering_close on).
                if input.start < input.end {
                    out.logs.waiting();
                    input.linger();
                }
                break;
            }
        }
        outcome
    }
}

/// Facts about the connection that every log record of it repeats.
struct Conn<'a> {
    peer: SocketAddr,
    local_port: u16,
    default_vhost: &'a str,
    send_timeout: Duration,
}

fn vhost_name(config: &Config, index: usize) -> &str {
    config.vhosts[index].server_names.first().map_or("-", String::as_str)
}

impl Output {
    /// Answers a request that cannot be served with its error status, logs it, and
    /// closes (lingering, so the client sees the answer).
    fn fail(&mut self, input: &mut Input<'_>, e: HttpError, line: &[u8], conn: &Conn<'_>, obs: &mut dyn Observer) {
        let start_time = SystemTime::now();
        let mut reply = Reply::new(&mut self.extra);
        reply.error(e.status(), &e.to_string());
        obs.state(ConnState::Writing);
        let body = std::mem::replace(&mut reply.body, Body::None);
        write_head(&mut self.head, self.date.at(start_time), self.server_header, &reply, &body, true, false);
        // A HEAD request never gets content, not even an error page (RFC 9110 §9.3.2).
        let send_body = !line.starts_with(b"HEAD ");
        let mut stall = Stall::new(conn.send_timeout, &mut self.logs);
        let sent = write_response(input.stream, &self.head, send_body.then_some(&body), obs, &mut stall);
        let method_end = line.iter().position(|&b| b == b' ').unwrap_or(line.len());
        let no_headers = |_: &str| None;
        let record = Record {
            client: conn.peer.ip(),
            local_port: conn.local_port,
            request_line: line,
            method: &line[..method_end],
            path: b"-",
            query: None,
            protocol: "HTTP/1.1",
            status: e.status(),
            body_bytes: body.len(),
            bytes_in: input.bytes_in,
            bytes_out: sent.unwrap_or(0),
            start: start_time,
            duration: Duration::ZERO,
            vhost: conn.default_vhost,
            host: None,
            headers_in: &no_headers,
            response_head: &self.head,
            conn_status: '-',
            keepalive_count: 0,
            request_id: 0,
            tls: None,
        };
        self.logs.write(&record, false, 0);
        obs.state(ConnState::Closing);
        self.logs.waiting();
        input.linger();
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

/// Picks what answers the request and runs it. Returns the vhost used.
fn dispatch(
    sites: &[Site<'_>],
    config: &Config,
    req: &Request<'_>,
    reply: &mut Reply<'_>,
    token: &str,
    internal: &mut bool,
    obs: &mut dyn Observer,
) -> usize {
    let index = vhost::select(&config.vhosts, req.host);
    if req.method == Method::OtherKnown {
        reply.error(405, "This resource only answers GET, HEAD and OPTIONS.");
        return index;
    }
    if req.target == b"*" {
        // `OPTIONS *`: the server's own capabilities. The master's dummy connection is
        // one of these, recognised by its per-boot token (a client cannot know it).
        *internal = !token.is_empty() && req.header(INTERNAL_HEADER).is_some_and(|t| same_secret(t, token.as_bytes()));
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
    if obs.status_page(req, query, reply) {
        return index;
    }
    let env = Env { mime: &config.mime, max_ranges: config.http.max_ranges };
    static_file::serve(&sites[index], &env, req, &clean, query, reply);
    index
}

/// Replaces a generated error body with the vhost's own page for that status, if it
/// has one that can be opened.
fn custom_error_page(site: &Site<'_>, mime: &crate::http::mime::MimeTypes, reply: &mut Reply<'_>) {
    let Some((_, page)) = site.vhost.error_pages.iter().find(|(code, _)| *code == reply.status) else { return };
    let Some(entry) = static_file::open_error_page(site, page) else { return };
    let body = match &entry.map {
        None => Body::Owned(Vec::new()),
        Some(map) => Body::Mapped { map: map.clone(), start: 0, end: entry.len as usize },
    };
    // Keep headers that still apply (Allow, Location, Content-Range); swap the type.
    let kept: Vec<u8> = reply
        .headers
        .split_inclusive(|&b| b == b'\n')
        .filter(|l| !l.to_ascii_lowercase().starts_with(b"content-type:"))
        .flatten()
        .copied()
        .collect();
    *reply.headers = kept;
    reply.header("Content-Type", mime.lookup(page.as_bytes()));
    reply.body = body;
}

fn split_query(target: &[u8]) -> (&[u8], Option<&[u8]>) {
    match target.iter().position(|&b| b == b'?') {
        Some(q) => (&target[..q], Some(&target[q + 1..])),
        None => (target, None),
    }
}

/// Writes the status line and the headers every response carries.
fn write_head(
    head: &mut Vec<u8>,
    date: &str,
    server: &str,
    reply: &Reply<'_>,
    body: &Body,
    http11: bool,
    keep_alive: bool,
) {
    head.clear();
    head.extend_from_slice(b"HTTP/1.1 ");
    text::push_int(head, reply.status);
    head.push(b' ');
    head.extend_from_slice(response::reason(reply.status).as_bytes());
    head.extend_from_slice(b"\r\nDate: ");
    head.extend_from_slice(date.as_bytes());
    head.extend_from_slice(b"\r\nServer: ");
    head.extend_from_slice(server.as_bytes());
    head.extend_from_slice(b"\r\n");
    head.extend_from_slice(reply.headers);
    if !response::bodiless(reply.status) {
        head.extend_from_slice(b"Content-Length: ");
        text::push_int(head, body.len());
        head.extend_from_slice(b"\r\n");
    }
    if !keep_alive {
        head.extend_from_slice(b"Connection: close\r\n");
    } else if !http11 {
        head.extend_from_slice(b"Connection: keep-alive\r\n");
    }
    head.extend_from_slice(b"\r\n");
}

/// Most body bytes handed to the kernel in one call. A blocking write returns only
/// when all of it is queued, and the stuck-worker watchdog sees progress only between
/// calls: with a whole 64 MB file in one call, a client reading slowly for longer
/// than `request_timeout` had its worker killed mid-download. 256 KiB keeps a client
/// down to about 1 KB/s alive under the default 300 s (nginx's sendfile_max_chunk is
/// 2 MiB, for fairness between its connections).
const SEND_CHUNK: usize = 256 * 1024;

/// Sends head and body with as few `writev` calls as the kernel allows. Returns the
/// bytes sent.
fn write_response(
    stream: &TcpStream,
    head: &[u8],
    body: Option<&Body>,
    obs: &mut dyn Observer,
    stall: &mut Stall<'_>,
) -> io::Result<u64> {
    // One slice for the head and one for a body need no allocation; only multipart
    // bodies build a list.
    let mut pair = [IoSlice::new(head), IoSlice::new(&[])];
    let mut many: Vec<IoSlice<'_>>;
    let slices: &mut [IoSlice<'_>] = match body {
        None | Some(Body::None) => &mut pair[..1],
        Some(Body::File { file, start, end }) => return send_file(stream, head, file, *start, *end, obs, stall),
        Some(Body::Owned(v)) => {
            pair[1] = IoSlice::new(v);
            &mut pair
        }
        Some(Body::Mapped { map, start, end }) => {
            pair[1] = IoSlice::new(&map[*start..*end]);
            &mut pair
        }
        Some(Body::Multipart { map, parts, tail }) => {
            many = vec![IoSlice::new(head)];
            for (h, r) in parts {
                many.push(IoSlice::new(h));
                many.push(IoSlice::new(&map[r.start as usize..=r.end as usize]));
            }
            many.push(IoSlice::new(tail));
            &mut many
        }
    };
    let total: u64 = slices.iter().map(|s| s.len() as u64).sum();
    let mut rest = slices;
    let mut stream = stream;
    while !rest.is_empty() {
        // IOV_MAX is 1024: a response with thousands of ranges goes out in batches;
        // and at most SEND_CHUNK bytes per call, so a slow client's progress is seen.
        let mut batch = rest.len().min(1024);
        let mut bytes = 0;
        for (i, sl) in rest[..batch].iter().enumerate() {
            bytes += sl.len();
            if bytes >= SEND_CHUNK {
                batch = i + 1;
                break;
            }
        }
        let written = if bytes > SEND_CHUNK {
            // The last slice of the batch is cut to the chunk (only multipart bodies
            // and large custom error pages are this big: files go out by sendfile).
            let mut capped: Vec<IoSlice<'_>> = rest[..batch - 1].iter().map(|s| IoSlice::new(s)).collect();
            let last = &rest[batch - 1];
            capped.push(IoSlice::new(&last[..last.len() - (bytes - SEND_CHUNK)]));
            stream.write_vectored(&capped)
        } else {
            stream.write_vectored(&rest[..batch])
        };
        match written {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                IoSlice::advance_slices(&mut rest, n);
                obs.heartbeat();
                stall.progress();
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => stall.slice(e)?,
        }
    }
    Ok(total)
}

/// Sends the head with `MSG_MORE` (it leaves with the first body bytes) and then
/// bytes `start..end` of `file` with `sendfile`: the kernel hands the page-cache
/// pages to the socket, our code never touches them. Returns the bytes sent.
fn send_file(
    stream: &TcpStream,
    head: &[u8],
    file: &std::fs::File,
    start: u64,
    end: u64,
    obs: &mut dyn Observer,
    stall: &mut Stall<'_>,
) -> io::Result<u64> {
    use std::os::fd::{AsFd, AsRawFd};
    // nix names no MSG_MORE.
    let more = nix::sys::socket::MsgFlags::from_bits_retain(libc::MSG_MORE | libc::MSG_NOSIGNAL);
    let mut sent = 0;
    while sent < head.len() {
        match nix::sys::socket::send(stream.as_raw_fd(), &head[sent..], more) {
            Ok(n) => {
                sent += n;
                stall.progress();
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => stall.slice(e.into())?,
        }
    }
    let mut offset = start as i64;
    while (offset as u64) < end {
        let count = ((end - offset as u64) as usize).min(SEND_CHUNK);
        match nix::sys::sendfile::sendfile64(stream.as_fd(), file.as_fd(), Some(&mut offset), count) {
            // The file shrank under us: the response cannot be finished.
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(_) => {
                obs.heartbeat();
                stall.progress();
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => stall.slice(e.into())?,
        }
    }
    Ok(head.len() as u64 + end - start)
}

/// A send failed because the file under the body got shorter: the kernel's copy
/// from a mapping past the new end fails with `EFAULT`, `sendfile` reaches the end
/// early (see `send_file`). Not a client going away.
fn file_shrank(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EFAULT) || e.kind() == io::ErrorKind::UnexpectedEof
}

/// A write waits on a slow client in slices of [`WAIT_SLICE`] (the listener's send
/// timeout, see `listen`), so that a worker held by such a client writes out the
/// access-log records it holds once it has waited one slice, instead of holding
/// them until the client lets go (a kill or a crash meanwhile would lose them).
/// The write fails once `send_timeout` has gone by with nothing sent.
struct Stall<'l> {
    slices: u32,
    max: u32,
    logs: &'l mut AccessLogs,
}

impl<'l> Stall<'l> {
    fn new(send_timeout: Duration, logs: &'l mut AccessLogs) -> Stall<'l> {
        let max = send_timeout.as_millis().div_ceil(WAIT_SLICE.as_millis()).max(1);
        Stall { slices: 0, max: u32::try_from(max).unwrap_or(u32::MAX), logs }
    }

    /// Bytes went out.
    fn progress(&mut self) {
        self.slices = 0;
    }

    /// A write call failed with `e`: a slice went by with nothing sent (go on, after
    /// writing the held records) unless `send_timeout` has, or another error.
    fn slice(&mut self, e: io::Error) -> io::Result<()> {
        if !matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) {
            return Err(e);
        }
        self.slices += 1;
        if self.slices >= self.max {
            return Err(e);
        }
        if self.slices == 1 {
            self.logs.waiting();
        }
        Ok(())
    }
}

enum BodyError {
    Http(HttpError),
    Io,
}

impl Input<'_> {
    fn set_timeout(&mut self, t: Duration) {
        let t = t.max(Duration::from_millis(1));
        if self.timeout != Some(t) {
            let _ = self.stream.set_read_timeout(Some(t));
            self.timeout = Some(t);
        }
    }

    /// Reads more bytes into the buffer; `Ok(0)` is end of stream.
    fn fill(&mut self) -> io::Result<usize> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() && self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        } else if self.end == self.buf.len() && self.buf.len() < self.limit {
            // A head larger than the buffer so far: grow it, up to the limit.
            let grown = (self.buf.len() * 2).min(self.limit);
            self.buf.resize(grown, 0);
        }
        loop {
            match self.stream.read(&mut self.buf[self.end..]) {
                Ok(n) => {
                    self.end += n;
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads until a whole head is buffered; returns the index just past it. The first
    /// byte may take `first_wait`; once it came, the whole head must arrive within
    /// `head_timeout` (mod_reqtimeout's rule, so a trickling client cannot hold a
    /// worker forever). Waits are cut into slices so that, when `pressure()` says idle
    /// workers are scarce, an idle or trickling connection gives its worker back after
    /// [`PRESSURE_GRACE`]. Once the client has kept the worker a slice, `waiting()`
    /// is called (once): the worker writes the log records it holds.
    fn read_head(
        &mut self,
        first_wait: Duration,
        head_timeout: Duration,
        limits: &Limits,
        kept_alive: bool,
        pressure: &mut dyn FnMut() -> bool,
        waiting: &mut dyn FnMut(),
    ) -> Result<usize, HeadError> {
        let began = Instant::now();
        let mut waited_long = false;
        let mut scanned = 0;
        let mut deadline: Option<Instant> = None;
        // Nothing at all on a kept-alive connection is the idle timeout, closed
        // quietly; a head that stopped halfway (or never came) earns a 408.
        let timed_out = |this: &Self, deadline: Option<Instant>| {
            if kept_alive && this.end == this.start && deadline.is_none() {
                HeadError::Quiet
            } else {
                HeadError::Http(HttpError::Timeout)
            }
        };
        loop {
            if self.end > self.start {
                let window = &self.buf[self.start..self.end];
                if let Some(n) = request::find_head_end(window, scanned) {
                    return Ok(self.start + n);
                }
                scanned = window.len();
                request::check_partial(window, limits).map_err(HeadError::Http)?;
                if self.start == 0 && self.end == self.limit {
                    return Err(HeadError::Http(HttpError::HeadersTooLarge));
                }
                if deadline.is_none() {
                    deadline = Some(Instant::now() + head_timeout);
                }
            }
            // One clock read per pass.
            let waited = began.elapsed();
            let full = match deadline {
                None => first_wait.saturating_sub(waited),
                Some(d) => d.saturating_duration_since(began + waited),
            };
            if full.is_zero() {
                return Err(timed_out(self, deadline));
            }
            if waited >= WAIT_SLICE && !waited_long {
                waited_long = true;
                waiting();
            }
            let mut wait = full.min(WAIT_SLICE);
            // The first wait of a fresh read is a plain slice: a healthy client's head
            // is usually there already. Pressure is weighed once a slice went by or a
            // head came in part (and the timeout then changes only for those).
            let dawdling = self.end > self.start || waited >= WAIT_SLICE;
            if dawdling && pressure() {
                let left = PRESSURE_GRACE.saturating_sub(waited);
                if left.is_zero() {
                    return Err(timed_out(self, deadline));
                }
                wait = wait.min(left);
            }
            self.set_timeout(wait);
            match self.fill() {
                Ok(0) => return Err(HeadError::Quiet),
                Ok(_) => {}
                // The slice ended: look at the deadline and the pressure again.
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
                Err(_) => return Err(HeadError::Quiet),
            }
        }
    }

    /// Reads more body bytes, within the body's deadline: `body_timeout`, extended by
    /// one second for every `min_rate` bytes received (mod_reqtimeout's MinRate), so a
    /// client may be slow but must keep moving.
    fn fill_body(&mut self) -> Result<usize, BodyError> {
        if let Some(b) = self.body {
            let received = self.bytes_in.saturating_sub(b.head_bytes);
            match received.checked_div(b.min_rate) {
                None => self.set_timeout(b.timeout),
                Some(earned) => {
                    let left =
                        (b.started + b.timeout + Duration::from_secs(earned)).saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Err(BodyError::Http(HttpError::Timeout));
                    }
                    self.set_timeout(left.min(b.timeout));
                }
            }
        }
        match self.fill() {
            Ok(0) => Err(BodyError::Io),
            Ok(n) => Ok(n),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                Err(BodyError::Http(HttpError::Timeout))
            }
            Err(_) => Err(BodyError::Io),
        }
    }

    /// Takes up to `n` body bytes from the buffer or the socket and drops them.
    fn skip(&mut self, mut n: u64) -> Result<(), BodyError> {
        while n > 0 {
            if self.start == self.end {
                self.fill_body()?;
            }
            let take = n.min((self.end - self.start) as u64);
            self.start += take as usize;
            self.bytes_in += take;
            n -= take;
        }
        Ok(())
    }

    /// Ensures at least one more line (up to `\n`) is buffered; returns its length.
    fn line(&mut self, max: usize) -> Result<usize, BodyError> {
        loop {
            if let Some(p) = self.buf[self.start..self.end].iter().position(|&b| b == b'\n') {
                return Ok(p + 1);
            }
            if self.end - self.start > max {
                return Err(BodyError::Http(HttpError::BadRequest("chunk line too long")));
            }
            self.fill_body()?;
        }
    }

    /// Reads and drops a request body so that the connection stays in step.
    fn discard_body(&mut self, req: &Request<'_>, max: u64, timeout: Duration, min_rate: u64) -> Result<(), BodyError> {
        if req.framing == Framing::None {
            return Ok(());
        }
        if let Framing::Length(n) = req.framing {
            if n > max {
                return Err(BodyError::Http(HttpError::BodyTooLarge));
            }
        }
        if req.expect_continue {
            let mut s = self.stream;
            s.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").map_err(|_| BodyError::Io)?;
        }
        self.body = Some(BodyClock { started: Instant::now(), timeout, min_rate, head_bytes: self.bytes_in });
        let result = self.discard_framed(req, max);
        self.body = None;
        result
    }

    fn discard_framed(&mut self, req: &Request<'_>, max: u64) -> Result<(), BodyError> {
        match req.framing {
            Framing::None => Ok(()),
            Framing::Length(n) => self.skip(n),
            Framing::Chunked => {
                let mut total: u64 = 0;
                loop {
                    let len = self.line(1024)?;
                    let line = &self.buf[self.start..self.start + len];
                    // httparse reads an empty size as 0, which would end the body early
                    // and smuggle the rest in as a request: a size has at least one digit.
                    let size = match httparse::parse_chunk_size(line) {
                        Ok(httparse::Status::Complete((_, size)))
                            if line.ends_with(b"\r\n") && line[0].is_ascii_hexdigit() =>
                        {
                            size
                        }
                        _ => return Err(BodyError::Http(HttpError::BadRequest("bad chunk size line"))),
                    };
                    self.start += len;
                    self.bytes_in += len as u64;
                    if size == 0 {
                        break;
                    }
                    total = total.saturating_add(size);
                    if total > max {
                        return Err(BodyError::Http(HttpError::BodyTooLarge));
                    }
                    self.skip(size)?;
                    let len = self.line(2)?;
                    if &self.buf[self.start..self.start + len] != b"\r\n" {
                        return Err(BodyError::Http(HttpError::BadRequest("chunk data longer than its size")));
                    }
                    self.start += len;
                }
                // Trailer fields, then the empty line.
                let mut trailer = 0;
                loop {
                    let len = self.line(8192)?;
                    let blank = &self.buf[self.start..self.start + len] == b"\r\n";
                    self.start += len;
                    trailer += len;
                    if blank {
                        return Ok(());
                    }
                    if trailer > 8192 {
                        return Err(BodyError::Http(HttpError::HeadersTooLarge));
                    }
                }
            }
        }
    }

    /// Closes our side, then reads and drops what the client still sends for a short
    /// while, so our last response is not destroyed by a reset.
    fn linger(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Write);
        let deadline = Instant::now() + LINGER;
        let mut drained = 0;
        self.start = 0;
        self.end = 0;
        while drained < LINGER_BYTES {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            self.set_timeout(left);
            match self.stream.read(&mut self.buf[..]) {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
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
