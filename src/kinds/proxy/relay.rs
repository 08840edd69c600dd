//! A location that passes its requests to an upstream HTTP server (`proxy =
//! "http://127.0.0.1:8000"` or `"unix:/run/app.sock"`): gunicorn, uvicorn, a Node
//! or Go server, another web server.
//!
//! The request goes out as HTTP/1.1 ([`crate::gateway::upstream`]: its path mapped
//! as nginx's `proxy_pass` maps it, hop-by-hop headers dropped, `Host` passed or
//! `proxy_host`, `X-Forwarded-For`, `X-Forwarded-Proto`, `X-Forwarded-Host` and
//! `Forwarded` naming the client), with the body the event loop read whole and its
//! length. The upstream's answer goes through what a script's goes through
//! ([`crate::gateway::output`]): by default read to its end as fast as the upstream
//! sends it, in memory and then in a temporary file ([`crate::gateway::spool`]), so
//! the upstream's worker is free at once however slowly the client reads (nginx's
//! `proxy_buffering`); with `proxy_buffering = false` it is sent as it comes
//! (server-sent events, long polls), the upstream held until the client has it.
//!
//! A location may pass to several upstreams (`proxy = [...]`, `proxy_backup`): each
//! try goes to the one [`crate::gateway::balance`] chooses by the whole pool's
//! counts (in turn, or the fewest connections in use), and a try that fails
//! (refused, broken off, silent past `proxy_timeout`) is counted against its
//! upstream for the pool (`proxy_max_fails` in `proxy_fail_timeout` mark it down)
//! and goes on to another upstream when it may: nothing of an answer came, and the
//! request may run twice (an idempotent method) or none of it was written.
//!
//! Each worker keeps up to [`MAX_IDLE`] idle connections to each of a location's upstreams,
//! put back at the clean end of an answer. One found with anything to read before a
//! request (the upstream closed it while idle) is dropped unused; one that breaks
//! before the first byte of an answer is tried again once on a fresh connection
//! when the request may run twice (an idempotent method) or none of it was written.
//! A refused or failed connect is 502, no head within `proxy_timeout` (or a silence
//! that long between reads) 504, each with one error-log line naming the client,
//! the request and the upstream; an upstream that breaks off in the middle of an
//! answer being streamed leaves the client's answer visibly cut (no last chunk, or
//! the connection closed short of the length), and one being kept is a 502.
//!
//! A request that asks to switch protocols (`Connection: Upgrade` and an `Upgrade`
//! the location's `proxy_upgrade` allows: a WebSocket) is passed with both, on a
//! connection that is never kept after. An upstream that answers `101 Switching
//! Protocols` gives its socket to the reply ([`Switched`]): the 101 goes to the
//! client, and from then on the worker's loop relays bytes between the two
//! (`crate::serve` tunnels them); any other answer is an ordinary one.

use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::BorrowedFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, poll};

use crate::gateway::backend::{Backend, Dial};
use crate::gateway::balance::Chooser;
use crate::gateway::child::Stdin;
use crate::gateway::output::{self, Failed, Fault, Got, MAX_HEAD, MAX_OUTPUT, Source, poll_ms};
use crate::gateway::spool::Place;
use crate::gateway::upstream::{self, Chunked, Forwarding, Framing, Upstream, UpstreamAddr};
use crate::gateway::{ClientWatch, ProxyConfig};
use crate::http::request::Method;
use crate::http::response::{Body, Reply, Switched, Upstreamed};
use crate::scoreboard::upstreams::{Failure, InUse, UpstreamTable};

use crate::exchange::Ask;
use crate::kinds::fastcgi::app::replayable;

/// Idle connections a worker keeps to one location's upstream: enough for the
/// requests a worker has in flight one after another (it serves one at a time),
/// few enough that a pool of sync workers upstream (gunicorn's, a handful) is not
/// held open by pika's workers.
pub const MAX_IDLE: usize = 4;

/// What one read from the upstream takes at most.
const READ: usize = 64 * 1024;

/// A connection to the upstream.
type Conn = Backend;

/// Where the upstream listens, as a backend is dialled.
fn dial(addr: &UpstreamAddr) -> Dial<'_> {
    match addr {
        UpstreamAddr::Unix(p) => Dial::Unix(p),
        UpstreamAddr::Tcp(a) => Dial::Tcp(a),
    }
}

type Pool = Rc<RefCell<Vec<Conn>>>;

/// One of a location's upstreams, in one worker.
struct Up<'c> {
    upstream: &'c Upstream,
    /// Its idle connections, kept by this worker.
    idle: Pool,
    /// As the error log names it.
    name: Rc<str>,
}

/// The proxy handler of one location, in one worker.
pub struct Proxy<'c> {
    pub config: &'c ProxyConfig,
    /// The location's prefix, which a path in the upstream's URL replaces.
    pub prefix: Option<&'c str>,
    /// The upstreams: those of `proxy`, then those of `proxy_backup`.
    ups: Vec<Up<'c>>,
    /// Which of them a try goes to, by the pool's counts.
    chooser: Chooser,
}

impl<'c> Proxy<'c> {
    pub fn new(config: &'c ProxyConfig, prefix: Option<&'c str>, table: &UpstreamTable) -> Self {
        let all = config.upstreams.iter().chain(&config.backups);
        let ups = all.map(|u| Up { upstream: u, idle: Rc::default(), name: u.to_string().into() }).collect();
        let servers = |l: &[Upstream]| l.iter().map(Upstream::server).collect::<Vec<_>>();
        let chooser =
            Chooser::new(table, &servers(&config.upstreams), &servers(&config.backups), config.balance, config.health);
        Proxy { config, prefix, ups, chooser }
    }

    pub fn serve(&self, ask: &Ask<'_>, reply: &mut Reply<'_>) {
        let server = ask.req.host.unwrap_or(b"");
        let context = crate::gateway::child::request_context(ask.client, server, ask.req.line);
        let keep = self.config.buffering.then_some(ask.link.answers);
        let began = Instant::now();
        let seen: Rc<Cell<Seen>> = Rc::default();
        // Not with a body: the connection switches once the head is read, and what
        // the upstream had not read of a body would be lost.
        let upgrade = upstream::upgrade_asked(ask.req.headers, ask.req.http11, &self.config.upgrades)
            .filter(|_| ask.link.body.map_or(0, |b| b.len()) == 0);
        let switched: Rc<RefCell<Option<Switch>>> = Rc::default();
        let mut tried = vec![false; self.ups.len()];
        // The upstreams tried, as the access log names them (nginx's `$upstream_addr`).
        let mut names: Vec<&str> = Vec::new();
        let mut at = self.chooser.choose(&tried).unwrap_or(0);
        let mut tries = 0;
        let (got, name) = loop {
            let up = &self.ups[at];
            if tries == 0 {
                names.push(&up.name);
            }
            tries += 1;
            let name = format!("upstream {}{context}", up.name);
            let asked = Asked { keep, seen: &seen, name: &name, upgrade: upgrade.as_deref(), switched: &switched };
            let Some(got) = self.attempt(at, ask, asked, reply) else { return };
            match got {
                Err(Failed::Fault(Fault::Broken { retry: true, .. })) if tries < 2 => continue,
                Err(Failed::Fault(f @ (Fault::Broken { .. } | Fault::TimedOut))) => {
                    tried[at] = true;
                    self.failed(at);
                    // Another upstream, when the request may run twice or none of it
                    // reached this one, and nothing of an answer came (nginx's
                    // `proxy_next_upstream error timeout`, non-idempotent requests
                    // passed on only when not sent).
                    let s = seen.get();
                    let next = (!s.got && (!s.sent || replayable(ask.req.method_str)))
                        .then(|| self.chooser.choose(&tried))
                        .flatten();
                    if let Some(next) = next {
                        log::error!("{name}: {}; trying {}", fault_words(&f, self.config.timeout), self.ups[next].name);
                        (at, tries) = (next, 0);
                        continue;
                    }
                    break (Err(Failed::Fault(f)), name);
                }
                Ok(got) => {
                    if let Some(status) = seen.get().status
                        && self.chooser.entry(at).answered(status)
                    {
                        log::warn!("upstream {}: up again (it answered)", self.chooser_name(at));
                    }
                    break (Ok(got), name);
                }
                other => break (other, name),
            }
        };
        let s = seen.get();
        reply.upstream = Some(Upstreamed {
            addr: if names.len() == 1 { self.ups[at].name.clone() } else { names.join(", ").into() },
            status: s.status,
            header_time: s.head_at.map(|at| at.duration_since(began)),
            time: began.elapsed(),
        });
        match crate::kinds::script::answered(got, ask, &name, reply) {
            None => {
                if let Some(switch) = switched.borrow_mut().take() {
                    self.switch(switch, reply);
                }
                // The upstream's answer passed on: pika names itself after those its
                // Via names (a field line of its own adds to the list).
                if self.config.via && s.status.is_some() && reply.internal.is_none() {
                    reply.header("Via", format!("1.1 {}", upstream::VIA_NAME));
                }
                // A stream waiting for its client is bounded by send_timeout, as any
                // answer: proxy_timeout is for the upstream's silences (a script's
                // stream ends by script_timeout, an upstream's may be endless).
                if let Body::Stream(s) = &mut reply.body {
                    s.until_ms = None;
                }
            }
            Some(f @ Fault::Broken { .. }) => {
                log::error!("{name}: {}", fault_words(&f, self.config.timeout));
                reply.error(502, "The upstream server is not available.");
            }
            Some(f @ Fault::TimedOut) => {
                log::error!("{name}: {}", fault_words(&f, self.config.timeout));
                reply.error(504, "The upstream server did not answer in time.");
            }
            Some(Fault::TooLong) => {
                log::error!("{name}: answer over {MAX_OUTPUT} bytes");
                reply.error(502, "The upstream server's answer was too long.");
            }
            Some(Fault::ClientGone) => {
                log::info!("{name}: the client closed the connection before the upstream answered");
                reply.error(400, "The client went away.");
                reply.close = true;
            }
        }
    }

    /// One try of the request on upstream `at`, on a connection this worker kept
    /// or a new one: its head and body written, its answer read (kept whole with
    /// `keep`, else streaming). `None`: the request's body could not be read again
    /// (`reply` says so).
    fn attempt(
        &self,
        at: usize,
        ask: &Ask<'_>,
        Asked { keep, seen, name, upgrade, switched }: Asked<'_>,
        reply: &mut Reply<'_>,
    ) -> Option<Result<Got<Talk>, Failed>> {
        let up = &self.ups[at];
        let body_len = ask.link.body.map(|b| b.len());
        let target = up.upstream.target(ask.req.target, self.prefix);
        let host =
            self.config.host.as_deref().map_or(ask.req.host.unwrap_or(up.upstream.host.as_bytes()), str::as_bytes);
        let forwarding = Forwarding {
            method: ask.req.method_str,
            target: &target,
            host,
            client_host: ask.req.host,
            client: ask.client,
            https: ask.link.https,
            // A body, or a method that carries one, says its length (0 for none).
            content_length: body_len.filter(|&n| n > 0 || matches!(ask.req.method_str, "POST" | "PUT" | "PATCH")),
            via: self.config.via.then_some(if ask.req.http11 { "1.1" } else { "1.0" }),
            upgrade,
        };
        let head = upstream::request_head(&forwarding, ask.req.headers);
        seen.set(Seen::default());
        let body = crate::kinds::script::stdin(ask, name, reply)?;
        let kept = loop {
            let Some(c) = up.idle.borrow_mut().pop() else { break None };
            if !c.stale() {
                break Some(c);
            }
        };
        let opened = match kept {
            Some(c) => Ok((c, false)),
            None => Conn::open(dial(&up.upstream.addr), self.config.timeout).map(|c| (c, true)),
        };
        Some(match opened {
            Err(e) => Err(Failed::Fault(Fault::Broken { why: format!("cannot connect: {e}"), retry: false })),
            Ok((conn, fresh)) => {
                let talk = Talk {
                    conn: Some(conn),
                    fresh,
                    replayable: replayable(ask.req.method_str),
                    wrote_any: false,
                    got_any: false,
                    out: head,
                    written: 0,
                    body,
                    sent_body: 0,
                    scratch: Vec::new(),
                    raw: Vec::new(),
                    answer: None,
                    head_request: ask.req.method == Method::Head,
                    taken: 0,
                    timeout: self.config.timeout,
                    deadline: Instant::now() + self.config.timeout,
                    fed: false,
                    name: name.to_string(),
                    watch: ClientWatch::default(),
                    idle: up.idle.clone(),
                    seen: Rc::clone(seen),
                    busy: Some(self.chooser.in_use(at)),
                    upgrade: upgrade.is_some(),
                    switching: None,
                    switched: Rc::clone(switched),
                };
                output::read(talk, ask.link.socket, ask.link.waiting, keep)
            }
        })
    }

    /// Upstream `i` as the pool's table names it.
    fn chooser_name(&self, i: usize) -> String {
        self.ups[i].upstream.server()
    }

    /// A try of upstream `i` failed: counted for the pool; its being marked down
    /// said once.
    fn failed(&self, i: usize) {
        let h = self.config.health;
        if let Failure::MarkedDown(n) = self.chooser.failed(i) {
            log::warn!(
                "upstream {}: down for {:?} after {n} failed tries within {:?} (proxy_max_fails {})",
                self.chooser_name(i),
                h.fail_timeout,
                h.fail_timeout,
                h.max_fails
            );
        }
    }
}

/// What the error log says of a try that failed.
fn fault_words(f: &Fault, timeout: Duration) -> String {
    match f {
        Fault::TimedOut => format!("no answer within proxy_timeout ({timeout:?})"),
        Fault::Broken { why, .. } => why.clone(),
        Fault::TooLong => format!("answer over {MAX_OUTPUT} bytes"),
        Fault::ClientGone => "the client went away".into(),
    }
}

/// What one try of a request carries from the handler: where a kept answer goes,
/// what the access log is told, the try's name for the error log, the protocol
/// the client asked to switch to, and where a 101's connection is left.
struct Asked<'a> {
    keep: Option<&'a Place>,
    seen: &'a Rc<Cell<Seen>>,
    name: &'a str,
    upgrade: Option<&'a [u8]>,
    switched: &'a Rc<RefCell<Option<Switch>>>,
}

impl Proxy<'_> {
    /// The upstream switched protocols: the reply becomes its 101 (its end-to-end
    /// headers, `Connection: Upgrade` and the protocol it switched to), carrying
    /// the upstream's socket for the tunnel.
    fn switch(&self, switch: Switch, reply: &mut Reply<'_>) {
        reply.status = 101;
        reply.body = Body::None;
        reply.headers.clear();
        reply.headers.extend_from_slice(&switch.headers);
        reply.headers.extend_from_slice(b"Connection: Upgrade\r\n");
        if let Some(protocol) = &switch.protocol {
            reply.headers.extend_from_slice(b"Upgrade: ");
            reply.headers.extend_from_slice(protocol);
            reply.headers.extend_from_slice(b"\r\n");
        }
        reply.switched = Some(Box::new(Switched {
            far: switch.conn.into_fd(),
            early: switch.early,
            idle: self.config.tunnel_timeout,
            busy: switch.busy.map(|b| Box::new(b) as Box<dyn std::any::Any>),
        }));
    }
}

/// An upstream's 101 as it is read: what it said (its end-to-end header lines and
/// the protocol it switched to), and what came after its head.
struct Switching {
    headers: Vec<u8>,
    protocol: Option<Vec<u8>>,
    early: Vec<u8>,
}

/// An upstream's 101 once its answer is read: its connection too, taken from the
/// request's reader for the tunnel.
struct Switch {
    conn: Conn,
    headers: Vec<u8>,
    protocol: Option<Vec<u8>>,
    early: Vec<u8>,
    /// The upstream counted in use: the tunnel keeps it so.
    busy: Option<InUse>,
}

/// What the access log is told of the upstream's answer: its status, when its head came.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    status: Option<u16>,
    head_at: Option<Instant>,
    /// Bytes of the request were written, of the answer read: whether a failed try
    /// may go to another upstream.
    sent: bool,
    got: bool,
}

/// Notes in what the handler sees that bytes went out or came in.
fn note(seen: &Cell<Seen>, sent: bool, got: bool) {
    let mut s = seen.get();
    s.sent |= sent;
    s.got |= got;
    seen.set(s);
}

/// The upstream's answer being read: its head, then its body by its framing.
struct Answer {
    framing: Framing,
    keep: bool,
    /// Bytes left of a `Content-Length` body.
    left: u64,
    chunks: Chunked,
}

/// One request to the upstream: the head and body to write, the answer read (its
/// head turned into a script's header block, its body decoded). It lives on as the
/// answer's reader while the answer streams; the connection goes back to the
/// worker's idle ones only at the clean end of an answer that lets it.
struct Talk {
    /// None once the answer ended (kept or closed).
    conn: Option<Conn>,
    fresh: bool,
    replayable: bool,
    wrote_any: bool,
    got_any: bool,
    /// Request bytes not written yet, from `written`.
    out: Vec<u8>,
    written: usize,
    body: Stdin,
    sent_body: u64,
    scratch: Vec<u8>,
    /// Answer bytes read and not taken yet (the head while it is incomplete).
    raw: Vec<u8>,
    answer: Option<Answer>,
    head_request: bool,
    /// Answer bytes taken.
    taken: u64,
    timeout: Duration,
    /// The head's, then the next read's deadline.
    deadline: Instant,
    /// The last step gave answer bytes, which the reader took away: its next step
    /// (maybe much later, after a client that read slowly) waits `timeout` anew.
    /// `proxy_timeout` bounds the upstream's silences, not the client's.
    fed: bool,
    name: String,
    watch: ClientWatch,
    idle: Pool,
    seen: Rc<Cell<Seen>>,
    /// The connection counted in use for the pool's least-connections choice (a
    /// tunnel takes it on after a 101).
    busy: Option<InUse>,
    /// The request asked to switch protocols.
    upgrade: bool,
    /// The upstream answered 101: what it said, until the connection is taken.
    switching: Option<Switching>,
    /// Where the handler finds the switched connection once the answer is read.
    switched: Rc<RefCell<Option<Switch>>>,
}

impl Talk {
    /// Whether the request may go again on a fresh connection should this one break
    /// now (see the module's words).
    fn may_retry(&self) -> bool {
        !self.fresh && !self.got_any && (self.replayable || !self.wrote_any)
    }

    /// Keeps up to 64 KiB of the request to write.
    fn fill(&mut self) -> io::Result<()> {
        while self.out.len() - self.written < 64 * 1024 && self.sent_body < self.body.len() {
            let chunk = self.body.read_at(self.sent_body, &mut self.scratch)?;
            if chunk.is_empty() {
                break;
            }
            self.sent_body += chunk.len() as u64;
            self.out.extend_from_slice(chunk);
        }
        Ok(())
    }

    /// Takes what was read into `out`: the head (as a header block) once whole,
    /// then the body. True at the end of the answer.
    fn take(&mut self, out: &mut Vec<u8>, eof: bool) -> Result<bool, Fault> {
        let broken = |why: String| Fault::Broken { why, retry: false };
        while self.answer.is_none() {
            let Some(h) =
                upstream::parse_head(&self.raw, self.head_request, MAX_HEAD).map_err(|e| broken(e.to_string()))?
            else {
                return Ok(false);
            };
            self.raw.drain(..h.len);
            if h.interim {
                continue;
            }
            if h.status == 101 {
                if !self.upgrade {
                    return Err(broken("it switched protocols, which the request did not ask".into()));
                }
                // What the answer's reader needs to end (the reply is the 101,
                // `Proxy::switch`); the head's lines wait for it with the connection.
                out.extend_from_slice(b"Status: 200 OK\r\n\r\n");
                let lines = h.block.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1);
                let headers = h.block[lines..h.block.len().saturating_sub(2).max(lines)].to_vec();
                let early = std::mem::take(&mut self.raw);
                self.switching = Some(Switching { headers, protocol: h.upgrade, early });
                self.seen.set(Seen { status: Some(101), head_at: Some(Instant::now()), ..self.seen.get() });
                self.answer = Some(Answer { framing: Framing::None, keep: false, left: 0, chunks: Chunked::default() });
                return Ok(true);
            }
            out.extend_from_slice(&h.block);
            self.seen.set(Seen { status: Some(h.status), head_at: Some(Instant::now()), ..self.seen.get() });
            let left = if let Framing::Length(n) = h.framing { n } else { 0 };
            self.answer = Some(Answer { framing: h.framing, keep: h.keep, left, chunks: Chunked::default() });
        }
        let a = self.answer.as_mut().expect("a head");
        let before = out.len();
        let done = match a.framing {
            Framing::None => true,
            Framing::Length(_) => {
                let n = self.raw.len().min(usize::try_from(a.left).unwrap_or(usize::MAX));
                out.extend_from_slice(&self.raw[..n]);
                a.left -= n as u64;
                if self.raw.len() > n {
                    a.keep = false;
                }
                self.raw.clear();
                a.left == 0
            }
            Framing::Chunked => {
                let done = a.chunks.feed(&self.raw, out).map_err(|e| broken(e.to_string()))?;
                self.raw.clear();
                done
            }
            Framing::Close => {
                out.append(&mut self.raw);
                eof
            }
        };
        self.taken += (out.len() - before) as u64;
        if self.taken > MAX_OUTPUT {
            return Err(Fault::TooLong);
        }
        Ok(done)
    }
}

impl Source for Talk {
    fn step(&mut self, out: &mut Vec<u8>, wait: Duration, client: BorrowedFd<'_>) -> Result<bool, Fault> {
        if self.conn.is_none() {
            return Ok(true);
        }
        if std::mem::take(&mut self.fed) {
            self.deadline = Instant::now() + self.timeout;
        }
        self.fill()
            .map_err(|e| Fault::Broken { why: format!("reading the request body failed: {e}"), retry: false })?;
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Fault::TimedOut);
        }
        let retry = self.may_retry();
        let broken = |why: String, retry| Fault::Broken { why, retry };
        let pending = self.written < self.out.len();
        let conn = self.conn.as_mut().expect("a connection");
        let want = if pending { PollFlags::POLLIN | PollFlags::POLLOUT } else { PollFlags::POLLIN };
        let mut fds = [PollFd::new(conn.fd(), want), PollFd::new(client, self.watch.flags())];
        match poll(&mut fds, poll_ms(wait.min(left))) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => return Ok(false),
            Err(e) => return Err(broken(format!("poll: {e}"), retry)),
        }
        let up = fds[0].revents().unwrap_or(PollFlags::empty());
        let client_ready = fds[1].any().unwrap_or(true);
        if self.watch.gone(client, client_ready) {
            return Err(Fault::ClientGone);
        }
        if up.contains(PollFlags::POLLOUT) && pending {
            match conn.write(&self.out[self.written..]) {
                Ok(n) => {
                    self.written += n;
                    self.wrote_any |= n > 0;
                    note(&self.seen, n > 0, false);
                    if self.written == self.out.len() {
                        self.out.clear();
                        self.written = 0;
                    }
                }
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {}
                // The upstream may answer before it reads the whole body (a 413): read on.
                Err(e) if !up.intersects(PollFlags::POLLIN | PollFlags::POLLHUP) => {
                    return Err(broken(format!("writing the request: {e}"), retry));
                }
                Err(_) => {}
            }
        }
        let retry = !self.fresh && !self.got_any && (self.replayable || !self.wrote_any);
        if !up.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
            return Ok(false);
        }
        let at = self.raw.len();
        self.raw.resize(at + READ, 0);
        let got = conn.read(&mut self.raw[at..]);
        self.raw.truncate(at + *got.as_ref().unwrap_or(&0));
        let eof = match got {
            Ok(0) => true,
            Ok(_) => {
                self.got_any = true;
                note(&self.seen, false, true);
                self.deadline = Instant::now() + self.timeout;
                false
            }
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => return Ok(false),
            Err(e) => return Err(broken(format!("reading the answer: {e}"), retry)),
        };
        let before = out.len();
        let done = self.take(out, eof)?;
        self.fed = out.len() > before;
        if done {
            let conn = self.conn.take();
            if let Some(s) = self.switching.take() {
                let conn = conn.expect("a connection");
                let (headers, protocol, early) = (s.headers, s.protocol, s.early);
                let busy = self.busy.take();
                *self.switched.borrow_mut() = Some(Switch { conn, headers, protocol, early, busy });
                return Ok(true);
            }
            let whole = self.out.is_empty() && self.sent_body == self.body.len();
            if let Some(c) = conn.filter(|_| whole && !eof && self.answer.as_ref().is_some_and(|a| a.keep)) {
                let mut idle = self.idle.borrow_mut();
                if idle.len() < MAX_IDLE {
                    idle.push(c);
                }
            }
            return Ok(true);
        }
        if eof {
            let why = if self.answer.is_some() {
                "closed the connection before the end of its answer"
            } else {
                "closed the connection before its answer's head"
            };
            return Err(broken(why.into(), retry));
        }
        Ok(false)
    }

    fn deadline(&self) -> Instant {
        if self.fed { Instant::now() + self.timeout } else { self.deadline }
    }

    fn cut(&mut self, why: &Fault) {
        let name = &self.name;
        match why {
            Fault::TimedOut => log::error!("{name}: silent past proxy_timeout ({:?}): answer cut", self.timeout),
            Fault::TooLong => log::error!("{name}: answer over {MAX_OUTPUT} bytes: cut"),
            Fault::ClientGone => log::info!("{name}: the client closed the connection while the upstream answered"),
            Fault::Broken { why, .. } => log::error!("{name}: {why}: answer cut"),
        }
    }

    fn name(&self) -> &str {
        &self.name
    }
}
