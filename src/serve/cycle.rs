//! One request, by its stages: read, route, gate, answer, decorate, deliver,
//! finish. `Server::serve_request` calls them in that order, each stage under a
//! comment naming it; the request is one value from its route to its finish, an
//! [`Exchange`]. A request refused before it could be routed (`Server::refuse`)
//! joins the same deliver and finish tail.
//!
//! - **read**: the head copied and parsed ([`request::parse`]).
//! - **route**, once ([`Router::route`]): the request's client (a trusted
//!   forwarder's header, or the connection's peer), the vhost by Host, then what
//!   answers there ([`Site::pick`], [`Site::place`]: the place, and the access
//!   rules of a prefix a regex location took the path from); an ACME token, a Host
//!   that is not the TLS name's, `OPTIONS *`, a plain request to a vhost that wants
//!   HTTPS and a path that cannot be cleaned are answered here, without a handler.
//!   Then its body, by the place found ([`Bodies::read`]: for a location that reads
//!   bodies, read whole, the rest coming while the connection waits in the worker's
//!   set with the route; for the others dropped if all of it has arrived, else left
//!   unread and the connection closed after the answer).
//! - **gate**: before any handler, who may ask (that prefix's access rules, then
//!   the location's rules, [`crate::rules::Gate`]), then the methods its handler
//!   answers.
//! - **answer**: the handler fills the [`Reply`] from the [`Ask`]; an internal
//!   redirect it asks for is a new route of the same request (`follow`).
//! - **decorate**: what an answer gets whatever made it ([`decorate::decorate`]:
//!   the vhost's error pages, the location's [`crate::rules::Decor`], HSTS).
//! - **deliver**: keep alive or not, the head and the body sent (`output`), as far
//!   as the socket takes them now.
//! - **finish**: once the last byte is out, the metrics (through the [`Observer`])
//!   and one access-log record, and what becomes of the connection
//!   ([`Output::finish`], the one end of every answer); an answer the socket did not
//!   take whole waits with the connection and is finished as the client reads it
//!   (`unsent`).

use std::mem::MaybeUninit;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::time::SystemTime;

use super::body::{Bodies, BodyState};
use super::connection::Server;
use super::decorate;
use super::held::tunnel::Tunnel;
use super::held::{Conn, Next, Owed, Unsent};
use super::input::Input;
use super::observer::{ConnState, Hooks, Observer, Relief};
use super::output::{Answer, Asked, Delivery, LogTags, Output};
use super::transport::{self, Transport};
use crate::base::dummy;
use crate::config::{Config, Http};
use crate::exchange::{self, Ask, Link};
use crate::gateway::spool;
use crate::http::forwarded;
use crate::http::path::{self, CleanPath, PathError};
use crate::http::request::{self, Framing, HttpError, Method, Request};
use crate::http::response::{ALLOW, Body, Reply, Upstreamed};
use crate::log::access::AccessLogs;
use crate::site::{Picked, Place, Site};

/// Header slots on the stack: the default `http.max_headers`.
const FEW_HEADERS: usize = 100;

/// Room for a request's headers: the default 100 on the stack; a config allowing
/// more allocates per request. (A 1000-entry array, 32 KiB, kept eight stack pages
/// dirty in every worker.)
pub(super) struct HeaderSlots<'h> {
    few: [MaybeUninit<httparse::Header<'h>>; FEW_HEADERS],
    many: Vec<MaybeUninit<httparse::Header<'h>>>,
}

impl<'h> HeaderSlots<'h> {
    pub(super) fn new() -> Self {
        HeaderSlots { few: [const { MaybeUninit::uninit() }; FEW_HEADERS], many: Vec::new() }
    }

    pub(super) fn get(&mut self, max: usize) -> &mut [MaybeUninit<httparse::Header<'h>>] {
        if max <= FEW_HEADERS {
            return &mut self.few;
        }
        // The config caps max_headers at `request::MAX_HEADERS`.
        self.many = std::iter::repeat_with(MaybeUninit::uninit).take(max).collect();
        &mut self.many
    }
}

/// One request as the cycle carries it from its read to its finish: the parsed
/// head, its client, when it began, over what, and where it goes, found once.
pub(super) struct Exchange<'s, 'r> {
    pub(super) req: &'r Request<'r>,
    /// The peer, or the client a trusted forwarder named (for this request only).
    pub(super) client: SocketAddr,
    /// One clock for the Date header, the log's time stamp and the time taken,
    /// read once its head is parsed.
    pub(super) start: SystemTime,
    pub(super) tls: bool,
    pub(super) vhost: usize,
    /// The place that answers and the access rules of the prefix a regex location
    /// took the path from, with the clean path and the query; `None` when the route
    /// stage answered itself (a redirect to HTTPS, `OPTIONS *`, a path that is none).
    pub(super) to: Option<(Routed<'s>, CleanPath<'r>, Option<&'r [u8]>)>,
    /// The route as positions: kept with the connection while the body is read.
    pub(super) picked: Option<Picked>,
    /// What the logs' filters need of the route.
    pub(super) kind: LogTags,
}

impl<'r> Exchange<'_, 'r> {
    /// How its answer goes out: kept alive if it asks, its body was all read, the
    /// answer does not close and the server lets it (`server_keeps`); its head only
    /// for a HEAD.
    #[inline(always)]
    fn delivery(&self, body: BodyState, reply: &Reply<'_>, server_keeps: bool) -> Delivery {
        // A 101 that carries its other end opens a tunnel: its head says no
        // `Connection: close`, whatever the worker's state.
        let switches = reply.switched.is_some() && reply.status == 101 && body == BodyState::Done;
        let keep_alive = switches || self.req.keep_alive && body == BodyState::Done && !reply.close && server_keeps;
        Delivery { http11: self.req.http11, keep_alive, head_only: self.req.method == Method::Head }
    }

    /// Its body is read (or not needed): it is under way, on the scoreboard and as
    /// the connection's next request.
    #[inline(always)]
    fn begun(&self, conn: &mut Conn, obs: &mut dyn Observer) {
        obs.request(self.req.line, self.client);
        conn.requests += 1;
    }

    /// What the finish stage logs and counts of it: `cached`, whether a file was
    /// sent from the worker's cache; `upstream`, what a proxy's upstream did.
    #[inline(always)]
    fn asked<'a>(&'a self, cached: Option<bool>, upstream: Option<&'a Upstreamed>) -> Asked<'a> {
        Asked::Request { req: self.req, vhost: self.vhost, kind: self.kind, client: self.client.ip(), cached, upstream }
    }

    /// What the read of its body needs: the request, whether its body is read
    /// whole before it is answered, and the connection's `peer` (what a refusal
    /// logs).
    #[inline(always)]
    fn body_of(&self, peer: SocketAddr) -> (&'r Request<'r>, bool, SocketAddr) {
        (self.req, self.reads_body(), peer)
    }

    /// Whether its body is read whole before it is answered (scripts, the echo, a
    /// proxy, a location that rewrites or may redirect to a script).
    #[inline]
    pub(super) fn reads_body(&self) -> bool {
        self.req.framing != Framing::None && self.to.as_ref().is_some_and(|((place, _), _, _)| place.reads_body())
    }
}

/// Where a path goes in a vhost: the place that answers it, and the access rules
/// of a prefix that a regex location took it from.
type Routed<'s> = (&'s Place<'s>, Option<&'s crate::rules::Gate>);

impl<'c> Server<'c> {
    /// Answers the request whose head is buffered up to `head_end` by its stages:
    /// read, route, gate and answer, decorate, deliver, finish. [`Next::Park`]: the
    /// connection stays open for another.
    // The stages are functions of their own for the reader, and one function in the
    // machine code (`inline`): out of line they cost about 100 more instructions per
    // kept-alive request (callgrind).
    #[inline(always)]
    pub(super) fn serve_request(
        &mut self,
        t: &mut impl Transport,
        socket: &TcpStream,
        conn: &mut Conn,
        head_end: usize,
        hooks: &mut Hooks<'_>,
    ) -> Next {
        hooks.obs.state(ConnState::Reading);
        // read
        self.copy_head(head_end);
        let (mut slots, mut later) = (HeaderSlots::new(), (Vec::new(), HeaderSlots::new()));
        let (req, head) = match read_head(&self.req_head, &self.limits, &mut slots, &mut later) {
            Ok(r) => r,
            Err(e) => return self.refuse(t, conn, e, hooks),
        };
        // route
        let (mut reply, mut rooted, kept) = (Reply::new(&mut self.extra), Vec::new(), self.bodies.kept.take());
        let router = Router { sites: &self.sites, config: self.config, https: self.https_port, token: &self.token };
        let ex = router.route(&req, (t.tls().map(|f| f.sni), conn.peer), kept, &mut rooted, &mut reply);
        let body = match self.bodies.read(&mut self.input, t, ex.body_of(conn.peer), &self.req_head, &self.config.http)
        {
            Ok(BodyState::Waits) => return self.bodies.wait_with(ex.vhost, ex.picked),
            Ok(body) => body,
            Err(e) => return self.refuse(t, conn, e, hooks),
        };
        ex.begun(conn, hooks.obs);
        // gate, answer
        let stage = Answering { bodies: &mut self.bodies, logs: &mut self.out.logs, answers: &self.answers };
        let answered = stage.answer(&self.sites[ex.vhost], &ex, (socket, conn), hooks, &mut reply);
        // decorate
        decorate::decorate(&self.sites[ex.vhost], answered.map(|p| &p.decor), (&req, ex.start), ex.tls, &mut reply);
        // deliver
        let how = ex.delivery(body, &reply, may_keep_alive(&self.config.http, conn, ex.tls, hooks.obs));
        let (cached, upstream) = (reply.cached, reply.upstream.take());
        let answer = self.out.deliver(t, reply, ex.start, how, hooks.obs);
        // finish
        let asked = ex.asked(cached, upstream.as_ref());
        finishing!(self).finish(t, conn, (&asked, head), answer, body == BodyState::Done, hooks)
    }

    /// The read stage's copy of a head out of the input, `head_end` bytes: the
    /// request's fields borrow it until its finish.
    #[inline(always)]
    fn copy_head(&mut self, head_end: usize) {
        self.req_head.clear();
        self.req_head.extend_from_slice(self.input.take_head(head_end));
    }

    /// Answers a request that cannot be served (its line is in `req_head`) with the
    /// error's status, by the same deliver and finish stages; the connection
    /// lingers, so the client sees the answer.
    #[cold]
    #[inline(never)]
    pub(super) fn refuse(&mut self, t: &mut impl Transport, conn: &Conn, e: HttpError, hooks: &mut Hooks<'_>) -> Next {
        // A route kept for this request's second turn is no other request's.
        self.bodies.kept = None;
        let start = SystemTime::now();
        let line = request::request_line(&self.req_head).to_vec();
        let mut reply = Reply::new(&mut self.extra);
        reply.error(e.status(), &e.to_string());
        // A HEAD request never gets content, not even an error page (RFC 9110 §9.3.2).
        let how = Delivery { http11: true, keep_alive: false, head_only: line.starts_with(b"HEAD ") };
        let answer = self.out.deliver(t, reply, start, how, hooks.obs);
        finishing!(self).finish(t, conn, (&Asked::Refused { line: &line }, &line), answer, false, hooks)
    }
}

/// [`Finishing`] from a server's fields, each borrowed alone (a macro: the request,
/// which borrows the server's head buffer, stays alive beside them).
macro_rules! finishing {
    ($s:expr) => {
        Finishing {
            out: &mut $s.out,
            input: &mut $s.input,
            sites: &$s.sites,
            unsent: &mut $s.unsent,
            tunnel: &mut $s.tunnel,
            config: $s.config,
        }
    };
}
use finishing;

/// What the finish stage uses of the server: the write side (its logs), the input
/// (bytes in, what is unread, what a tunnel's client sent after its request), the
/// vhosts (a file that shrank), where an answer that waits goes or the tunnel a
/// 101 opens, and the config.
struct Finishing<'a, 'c> {
    out: &'a mut Output,
    input: &'a mut Input,
    sites: &'a [Site<'c>],
    unsent: &'a mut Option<Box<Unsent>>,
    tunnel: &'a mut Option<Box<Tunnel<Owed>>>,
    config: &'c Config,
}

impl Finishing<'_, '_> {
    /// The finish stage of an answer delivered now: once its last byte is out, its
    /// count and its access-log record ([`Output::finish`], as for an answer that
    /// waited for the client, `unsent`), and what becomes of the connection; an
    /// answer the socket did not take whole waits with the connection.
    #[inline(always)]
    fn finish(
        self,
        t: &mut impl Transport,
        conn: &Conn,
        (asked, head): (&Asked<'_>, &[u8]),
        mut answer: Answer,
        body_done: bool,
        hooks: &mut Hooks<'_>,
    ) -> Next {
        let bytes_in = self.input.bytes_in();
        if let Err(e) = &answer.sent
            && transport::file_shrank(e)
            && let Asked::Request { req, vhost, .. } = asked
        {
            file_shrank(&self.sites[*vhost], req.target, e);
        }
        if let Some(far) = answer.switched.take()
            && answer.sent.is_ok()
            && body_done
        {
            // Switched protocols: the connection becomes a tunnel to `far`, with the
            // rest of the 101's head and what the client sent after its request
            // (`Next::Again`: its first turn relays what is there); its end makes
            // the record.
            let owed = Owed::new(&answer, asked, head, &self.out.writer.head, bytes_in, true);
            let unsent = answer.rest.as_ref().map_or(&[][..], |r| &r.bytes[r.at..]);
            *self.tunnel = Some(Box::new(Tunnel::new(*far, owed, unsent, self.input.take_unread())));
            return Next::Again;
        }
        if answer.rest.is_some() {
            *self.unsent = Some(Unsent::owe(answer, asked, head, &self.out.writer.head, bytes_in, body_done));
            return Next::Write;
        }
        let unread = self.input.has_unread() || t.buffered();
        self.out.finish(self.config, conn, asked, &answer, (bytes_in, t.tls()), (body_done, unread), hooks.obs)
    }
}

/// The read stage's parse: the head parsed into `slots`, and the bytes parsed (the
/// request's fields lie in them). A head that says `HTTP/1.2` to `1.9` is
/// rewritten to say 1.1 and parsed again (rare: the line is looked at only after
/// httparse refused it), in `later`.
#[inline(always)]
fn read_head<'h>(
    head: &'h [u8],
    limits: &request::Limits,
    slots: &'h mut HeaderSlots<'h>,
    (as_11, slots_11): &'h mut (Vec<u8>, HeaderSlots<'h>),
) -> Result<(Request<'h>, &'h [u8]), HttpError> {
    match request::parse(head, slots.get(limits.max_headers), limits) {
        Ok(r) => Ok((r, head)),
        Err(HttpError::Version) if later_minor(head, as_11) => {
            Ok((request::parse(as_11, slots_11.get(limits.max_headers), limits)?, as_11))
        }
        Err(e) => Err(e),
    }
}

/// A head refused for its version: if it says `HTTP/1.2` to `1.9`, `as_11` is a copy
/// that says 1.1 ([`request::serve_later_minor_as_11`]).
#[cold]
#[inline(never)]
fn later_minor(head: &[u8], as_11: &mut Vec<u8>) -> bool {
    as_11.extend_from_slice(head);
    request::serve_later_minor_as_11(as_11)
}

/// Internal redirects one request may take (a location's `rewrite`, an index
/// file, `try_files`' last entry, a script's local `Location`) before it is
/// answered 500: a loop of them ends here,
/// as Apache's `LimitInternalRecursion` (10) and nginx's cycle check do.
const MAX_INTERNAL_REDIRECTS: usize = 10;

/// What the gate and answer stages use of the server: the request bodies (the
/// one the handler reads), the logs (written when a script keeps the worker
/// waiting), and where the worker keeps scripts' answers.
struct Answering<'a> {
    bodies: &'a mut Bodies,
    logs: &'a mut AccessLogs,
    answers: &'a spool::Place,
}

impl Answering<'_> {
    /// The gate, then the handler, for a request the route stage sent to a place;
    /// an internal redirect it asks for is a new route of the same request
    /// ([`follow`]). Returns the place that answered last. The request's body is
    /// its handler's: its file goes with the request, not at the worker's next.
    #[inline(always)]
    fn answer<'s>(
        self,
        site: &'s Site<'s>,
        ex: &Exchange<'s, '_>,
        (socket, conn): (&TcpStream, &Conn),
        hooks: &mut Hooks<'_>,
        reply: &mut Reply<'_>,
    ) -> Option<&'s Place<'s>> {
        let Some((routed, path, query)) = &ex.to else {
            self.bodies.current = None;
            return None;
        };
        if self.bodies.current.is_some() {
            // A request with a body goes to a script: the worker's connections in
            // the middle of their bodies go to others first, so their uploads do
            // not wait for this script.
            (hooks.stalled)(Relief::Bodies);
        }
        let (place, guards) = *routed;
        if place.handler.waits_on_a_program() {
            // The worker's connections whose requests came with this one would wait
            // for the program: free workers serve them now, if the worker's last
            // program kept it a glance (`Relief::Ready`).
            (hooks.stalled)(Relief::Ready);
        }
        // While a script keeps the worker, the connections whose request comes
        // meanwhile go to others (`Hooks::stalled`) at each glance; once it has
        // kept it a second, the log records held are written (a kill meanwhile
        // would lose them), and the worker's idle connections go too.
        let stalled = std::cell::RefCell::new((&mut *hooks.stalled, &mut *self.logs));
        let told = std::cell::Cell::new(false);
        let waiting = |kept: std::time::Duration| {
            let (stalled, logs) = &mut *stalled.borrow_mut();
            if kept >= crate::gateway::WAITING && !told.replace(true) {
                logs.waiting();
                stalled(Relief::All);
            } else {
                stalled(Relief::Arrived);
            }
        };
        let link = Link {
            peer: if ex.client.ip() == conn.peer.ip() { conn.peer } else { ex.client },
            local_port: conn.local_port,
            https: ex.tls,
            socket: socket.as_fd(),
            body: self.bodies.current.as_ref(),
            waiting: &waiting,
            answers: self.answers,
        };
        let ask = Ask { req: ex.req, path, query: *query, client: ex.client.ip(), link, redirected: false };
        if pass_gate((place, guards), &ask, reply) {
            place.handler.serve(&ask, reply);
        }
        // A handler's internal redirect, or the location's `rewrite`.
        let place = if reply.internal.is_some() { follow(site, place, &ask, reply) } else { place };
        self.bodies.current = None;
        Some(place)
    }
}

/// Serves the request again at the path an internal redirect names, through the
/// vhost's locations (gate included), as often as it is asked, up to
/// [`MAX_INTERNAL_REDIRECTS`]. What the script sees of the request stays the
/// client's (`REQUEST_URI`); a script's local `Location` makes it a GET without its
/// body (RFC 3875 §6.2.2, as Apache's `mod_cgi` does; a HEAD stays a HEAD).
#[cold]
#[inline(never)]
fn follow<'s>(site: &'s Site<'s>, mut place: &'s Place<'s>, ask: &Ask<'_>, reply: &mut Reply<'_>) -> &'s Place<'s> {
    let mut hops = 0;
    while let Some(again) = reply.internal.take() {
        hops += 1;
        let said = |what: &str| {
            let (mut from, mut to) = (Vec::new(), Vec::new());
            crate::log::format::escape_into(&mut from, ask.req.target);
            crate::log::format::escape_into(&mut to, &again.target);
            let (from, to) = (String::from_utf8_lossy(&from), String::from_utf8_lossy(&to));
            log::error!("{from}: {what} (the last to {to}): answered 500");
        };
        let clean = path::clean(&again.target);
        let (clean, query) = match clean {
            Ok(c) if hops <= MAX_INTERNAL_REDIRECTS => c,
            Ok(_) => {
                said(&format!(
                    "more than {MAX_INTERNAL_REDIRECTS} internal redirects (rewrite, index, try_files, a script's Location)"
                ));
                reply.start_over();
                reply.error(500, "The request was redirected within the server too many times.");
                return place;
            }
            Err(e) => {
                said(&format!("an internal redirect to a path that is not one ({e})"));
                reply.start_over();
                reply.error(500, "The request was redirected within the server to a bad path.");
                return place;
            }
        };
        let get;
        let req = if again.as_get && !matches!(ask.req.method, Method::Get | Method::Head) {
            get = Request { method: Method::Get, method_str: "GET", framing: Framing::None, ..*ask.req };
            &get
        } else {
            ask.req
        };
        let link = Link { body: if again.as_get { None } else { ask.link.body }, ..ask.link };
        let next = Ask { req, path: &clean, query, client: ask.client, link, redirected: true };
        let routed = site.place(site.pick(&clean.bytes));
        place = routed.0;
        reply.start_over();
        if pass_gate(routed, &next, reply) {
            place.handler.serve(&next, reply);
        }
    }
    place
}

/// The gate stage, before any handler: the access rules of a prefix a
/// regex location took the path from, the location's rules (who may ask: `allow`;
/// [`crate::rules::Gate`]), then the methods its handler answers.
#[inline(always)]
fn pass_gate((place, guards): Routed<'_>, ask: &Ask<'_>, reply: &mut Reply<'_>) -> bool {
    guards.is_none_or(|g| g.admit(ask, reply))
        && place.gate.admit(ask, reply)
        && place.handler.methods().answers(ask.req.method, reply)
}

/// Whether the server lets a connection take another request: keep-alive on, not
/// at `max_keepalive_requests`, the worker not leaving, and not a plain connection
/// lent to a spare while the event loops are free.
fn may_keep_alive(http: &Http, conn: &Conn, tls: bool, obs: &mut dyn Observer) -> bool {
    http.keepalive
        && !obs.must_close()
        && (!conn.lent || tls || !obs.hand_back())
        && (http.max_keepalive_requests == 0 || conn.requests < http.max_keepalive_requests)
}

/// A file got shorter while it was sent: the response was cut, and the vhost's
/// cached files are looked at again.
#[cold]
pub(super) fn file_shrank(site: &Site<'_>, target: &[u8], e: &std::io::Error) {
    site.files_changed();
    let mut escaped = Vec::new();
    crate::log::format::escape_into(&mut escaped, target);
    log::warn!(
        "{}: the file shrank while it was sent ({e}); the response was cut short, and the cached files are looked at again",
        String::from_utf8_lossy(&escaped)
    );
}

/// What the route stage reads: the vhosts as the worker serves them, the config
/// (names, trusted forwarders), where HTTPS is served, and the master's token.
struct Router<'s> {
    sites: &'s [Site<'s>],
    config: &'s Config,
    /// The port of the first TLS listener (a plain request's `https_redirect`).
    https: Option<u16>,
    token: &'s str,
}

impl<'s> Router<'s> {
    /// The route stage: the request's client (the one a trusted forwarder names,
    /// else the peer), the vhost, then what answers the request there, found once
    /// (`kept`: the route found on the request's first turn, when its body was read
    /// by the event loop in between). An ACME CA's HTTP-01 request for a token under
    /// way is answered first. Over TLS (`sni`: the connection's TLS name, if any), a
    /// Host that picks another vhost than the connection's TLS name is answered 421
    /// (RFC 9110 §15.5.20), as Apache does: the certificate the client checked was
    /// chosen for that name, and names that pick the same vhost agree. A plain
    /// request to a vhost with `https_redirect` is redirected; `OPTIONS *` gets the
    /// server's methods (and the master's dummy request, recognised by its per-boot
    /// token, is marked internal); a path that cannot be cleaned is refused.
    /// `rooted` holds the path of an absolute-form target with none
    /// ("http://host?q" arrives as "?q": its path is "/").
    #[inline(always)]
    fn route<'p>(
        &self,
        req: &'p Request<'p>,
        (sni, peer): (Option<Option<&str>>, SocketAddr),
        kept: Option<(usize, Picked)>,
        rooted: &'p mut Vec<u8>,
        reply: &mut Reply<'_>,
    ) -> Exchange<'s, 'p> {
        let client = self.client(req, peer);
        let vhost = match kept {
            Some((v, _)) => v,
            None => self.config.vhost_for(req.host),
        };
        let mut ex = Exchange {
            req,
            client,
            start: SystemTime::now(),
            tls: sni.is_some(),
            vhost,
            to: None,
            picked: None,
            kind: LogTags::default(),
        };
        if kept.is_none() && self.answered_here(req, sni, &mut ex, reply) {
            return ex;
        }
        let target: &'p [u8] = if req.target.first() == Some(&b'?') {
            rooted.push(b'/');
            rooted.extend_from_slice(req.target);
            rooted
        } else {
            req.target
        };
        match path::clean(target) {
            Ok((clean, query)) => {
                let site = &self.sites[vhost];
                let picked = match kept {
                    Some((_, p)) => p,
                    None => site.pick(&clean.bytes),
                };
                let (place, guards) = site.place(picked);
                ex.kind.health = place.handler.is_health();
                ex.kind.auth = place.gate.auth.is_some() || guards.is_some_and(|g| g.auth.is_some());
                ex.picked = Some(picked);
                ex.to = Some(((place, guards), clean, query));
            }
            // Without a path no handler is reached; a method none of them answers is the
            // first thing wrong (`CONNECT host:443`).
            Err(_) if req.method == Method::OtherKnown => exchange::not_allowed(reply),
            // Apache's AllowEncodedSlashes Off answers 404: no file name holds a '/'.
            Err(PathError::EncodedSlash) => {
                reply.error(404, "The requested resource was not found.");
            }
            Err(e) => {
                reply.error(400, &format!("Bad request path: {e}."));
            }
        }
        ex
    }

    /// What the route stage answers itself, before any location: an ACME token,
    /// a Host that is not the TLS name's, `OPTIONS *`, a redirect to HTTPS. True
    /// when `reply` holds the answer.
    #[inline(always)]
    fn answered_here(
        &self,
        req: &Request<'_>,
        sni: Option<Option<&str>>,
        ex: &mut Exchange<'_, '_>,
        reply: &mut Reply<'_>,
    ) -> bool {
        // An ACME CA asking for an HTTP-01 token under way ([`crate::acme::http01`]):
        // answered before any redirect or location.
        if req.target.starts_with(crate::acme::http01::PREFIX)
            && let Some(key_authorization) = crate::acme::http01::answer(req.target)
        {
            reply.header("Content-Type", "application/octet-stream");
            reply.body = Body::Owned(key_authorization);
            return true;
        }
        if let Some(Some(name)) = sni
            && let by_name = self.config.vhost_for(Some(name.as_bytes()))
            && by_name != ex.vhost
        {
            reply.error(421, "This connection was made for another host; open a new one for this host.");
            ex.vhost = by_name;
            return true;
        }
        if req.target == b"*" {
            ex.kind.internal = dummy::is_internal(req.header(dummy::INTERNAL_HEADER), self.token);
            reply.header("Allow", ALLOW);
            reply.body = Body::Owned(Vec::new());
            return true;
        }
        if sni.is_none()
            && let Some(port) = self.https
            && let Some(code) = self.config.vhosts[ex.vhost].https_redirect
        {
            let name = self.config.vhosts[ex.vhost].server_names.first().map_or("", String::as_str);
            let location = crate::http::https::location(req.host, name, port, req.target);
            reply.error(code, "This site is served over HTTPS.");
            reply.header("Location", String::from_utf8_lossy(&location));
            return true;
        }
        false
    }

    /// The request's client: the one a trusted forwarder names (for this request
    /// only), else the peer (or the client its PROXY header named).
    #[inline(always)]
    fn client(&self, req: &Request<'_>, peer: SocketAddr) -> SocketAddr {
        if self.config.trusted_proxies.is_empty() {
            return peer;
        }
        let header = self.config.forwarded_header;
        req.header_list(header.name())
            .and_then(|v| forwarded::client(peer.ip(), &self.config.trusted_proxies, header, &v))
            .map_or(peer, |ip| SocketAddr::new(ip, 0))
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    use super::super::held::Held;
    use super::super::observer::{ConnState, Hooks, Observer, Relief};
    use super::*;
    use crate::kinds::status::page::{StatusPage, View};
    use crate::log::access::AccessLogs;
    use crate::scoreboard::Scoreboard;
    use crate::scoreboard::counters::Outcome;
    use crate::site::PICKS;

    struct Quiet;
    impl Observer for Quiet {
        fn state(&mut self, _: ConnState) {}
        fn request(&mut self, _: &[u8], _: SocketAddr) {}
        fn served(&mut self, _: &Outcome<'_>) {}
        fn must_close(&self) -> bool {
            false
        }
        fn hand_back(&self) -> bool {
            false
        }
    }

    /// Routes picked while `f` runs.
    fn picks(f: impl FnOnce()) -> u64 {
        let before = PICKS.with(|n| n.get());
        f();
        PICKS.with(|n| n.get()) - before
    }

    /// Every request is routed once: a GET, a POST whose body came with its head, and
    /// a POST whose body the event loop waits for (routed on its first turn, served
    /// on its second with the route it kept). (An index file, a `rewrite`, a
    /// script's local `Location` is an internal redirect: a new route of the same
    /// request, at its new path.)
    #[test]
    fn a_request_is_routed_once() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("htdocs")).unwrap();
        std::fs::write(dir.path().join("htdocs/index.html"), "hello").unwrap();
        let text = format!(
            "[server]\nlisten = [\"8080\"]\nmime_types = \"builtin\"\n[http]\nbody_temp_dir = \"{}\"\n\
             [[vhost]]\nroot = \"htdocs\"\n[[vhost.location]]\nprefix = \"/echo\"\necho = true\n",
            dir.path().join("bodies").display()
        );
        let config = crate::config::parse(&text, &dir.path().join("conf/pika.toml")).unwrap();
        let sb = Scoreboard::new(2).unwrap();
        let certificates = |_| Vec::new();
        let server = View {
            scoreboard: &sb,
            master_pid: 1,
            workers_max: 1,
            max_connections: 1,
            certificates: &certificates,
            upstreams: &[],
        };
        let sites = Site::open_all(&config, StatusPage { server }).unwrap();
        let logs = AccessLogs::open(&[]).unwrap();
        let disks = (spool::Disk::bodies(&sb.slots[1], sb.slots), spool::Disk::answers(&sb.slots[1], sb.slots));
        let mut server = Server::new(&config, sites, logs, "token".into(), None, disks);

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, peer) = listener.accept().unwrap();
        stream.set_nonblocking(true).unwrap();
        let mut held = Held::new(stream, peer, 8080, false);
        fn turn(server: &mut Server<'_>, held: &mut Held, client: &mut TcpStream, bytes: &[u8]) -> u64 {
            client.write_all(bytes).unwrap();
            // The turn reads what has arrived: wait until the bytes have (5 s at most).
            let mut fds = [nix::poll::PollFd::new(held.stream().as_fd(), nix::poll::PollFlags::POLLIN)];
            nix::poll::poll(&mut fds, 5000u16).unwrap();
            let (mut obs, mut stalled) = (Quiet, |_: Relief| {});
            let mut hooks = Hooks { obs: &mut obs, stalled: &mut stalled };
            picks(|| {
                server.serve_ready(held, &mut hooks);
            })
        }
        let answer = |client: &mut TcpStream, ends: &[u8]| {
            client.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !got.windows(ends.len()).any(|w| w == ends) {
                let n = client.read(&mut buf).unwrap();
                assert!(n > 0, "the answer ended early: {}", String::from_utf8_lossy(&got));
                got.extend_from_slice(&buf[..n]);
            }
            String::from_utf8_lossy(&got).into_owned()
        };

        assert_eq!(
            turn(&mut server, &mut held, &mut client, b"GET /index.html HTTP/1.1\r\nHost: a\r\n\r\n"),
            1,
            "a GET"
        );
        assert!(answer(&mut client, b"hello").starts_with("HTTP/1.1 200"));
        let whole = b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nwhole";
        assert_eq!(turn(&mut server, &mut held, &mut client, whole), 1, "a POST with its body");
        assert!(answer(&mut client, b"whole\r\n0\r\n\r\n").contains("200 OK"));
        let head = b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nfirst";
        assert_eq!(turn(&mut server, &mut held, &mut client, head), 1, "a POST's first turn");
        assert!(held.in_body(), "its body is waited for");
        assert_eq!(turn(&mut server, &mut held, &mut client, b"later"), 0, "its second turn: the route it kept");
        assert!(answer(&mut client, b"firstlater\r\n0\r\n\r\n").contains("200 OK"));
    }
}
