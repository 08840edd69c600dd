//! One request, by its stages: read, route, admit, answer, decorate, deliver,
//! account. `Server::serve_request` calls them in that order, each stage under a
//! comment naming it; a request refused before it could be routed
//! (`Server::refuse`) joins the same deliver and account tail.
//!
//! - **read**: parse the head ([`request::parse`]), find its body
//!   ([`Bodies::read`](super::body::Bodies::read): for a location that reads bodies,
//!   read whole, the rest coming while the connection waits in the worker's set; for
//!   the others dropped if all of it has arrived, else left unread and the
//!   connection closed after the answer), and find the request's client (a trusted
//!   forwarder's header, or the connection's peer).
//! - **route**: pick the vhost by Host, then what answers there by location
//!   ([`Site::route`]: the place, and the access rules of a prefix a regex location
//!   took the path from); a plain request to a vhost that wants HTTPS, `OPTIONS *`
//!   and a path that cannot be cleaned are answered here, without a handler.
//! - **admit**: the gate before any handler: who may ask (that prefix's access
//!   rules, then the location's rules, [`crate::rules::Gate`]), then the methods its
//!   handler answers.
//! - **answer**: the handler fills the [`Reply`] from the [`Ask`]; an internal
//!   redirect it asks for is served again through the locations (`follow`).
//! - **decorate**: what an answer gets whatever made it ([`decorate::decorate`]:
//!   the vhost's error pages, the location's [`crate::rules::Decor`], HSTS).
//! - **deliver**: keep alive or not, the head and the body sent (`output`), as far
//!   as the socket takes them now; the rest waits with the connection (`unsent`).
//! - **account**: the metrics (through the [`Observer`]) and one access-log record,
//!   once the last byte is out (`unsent` for an answer that waited).

use std::mem::MaybeUninit;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::time::SystemTime;

use super::body::BodyState;
use super::connection::Server;
use super::decorate;
use super::held::{Conn, Next, Owed, Unsent};
use super::input::Input;
use super::observer::{ConnState, Hooks, Observer, Relief};
use super::output::{Answer, Asked, Delivery, Kind};
use super::transport::{self, Transport};
use crate::config::{Config, Http};
use crate::dummy;
use crate::handlers::{self, Ask, Handler, Link};
use crate::http::forwarded;
use crate::http::path::{self, CleanPath, PathError};
use crate::http::request::{self, Framing, HttpError, Method, Request};
use crate::http::response::{ALLOW, Body, Reply};
use crate::site::{Place, Site};

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

/// Where the route stage sends a request: the vhost (by index), and the handler with
/// what it is asked, unless the route answered already.
struct Route<'s, 'p> {
    vhost: usize,
    to: Option<(Routed<'s>, CleanPath<'p>, Option<&'p [u8]>)>,
    kind: Kind,
}

/// Where a path goes in a vhost: the place that answers it, and the access rules
/// of a prefix that a regex location took it from.
type Routed<'s> = (&'s Place<'s>, Option<&'s crate::rules::Gate>);

impl Server<'_> {
    /// Answers the request whose head is buffered up to `head_end`. [`Next::Park`]:
    /// the connection stays open for another.
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
        // One clock for the Date header, the log's time stamp and the time taken.
        let start = SystemTime::now();
        // read
        self.req_head.clear();
        self.req_head.extend_from_slice(self.input.take_head(head_end));
        // A copy of a head that says `HTTP/1.2` to `1.9`, rewritten to say 1.1 and
        // parsed again (rare: the line is looked at only after httparse refused it).
        let (mut as_11, mut slots_11) = (Vec::new(), HeaderSlots::new());
        let mut slots = HeaderSlots::new();
        let req = match request::parse(&self.req_head, slots.get(self.limits.max_headers), &self.limits) {
            Ok(r) => r,
            Err(HttpError::Version) if later_minor(&self.req_head, &mut as_11) => {
                match request::parse(&as_11, slots_11.get(self.limits.max_headers), &self.limits) {
                    Ok(r) => r,
                    Err(e) => return self.refuse(t, conn, e, hooks),
                }
            }
            Err(e) => return self.refuse(t, conn, e, hooks),
        };
        let reads = req.framing != Framing::None && reads_body(&self.sites, self.config, &req);
        let body =
            match self.bodies.read(&mut self.input, t, (&req, &self.req_head), reads, &self.config.http, conn.peer) {
                // The rest of the body is read by the event loop; the request is served
                // again once it is whole.
                Ok(BodyState::Waits) => return Next::Park,
                Ok(body) => body,
                Err(e) => return self.refuse(t, conn, e, hooks),
            };
        let client = self.client(&req, conn.peer);
        hooks.obs.request(req.line, client);
        conn.requests += 1;
        // route
        let (tls, sni) = t.tls().map_or((false, None), |f| (true, f.sni));
        let mut reply = Reply::new(&mut self.extra);
        let https_port = if tls { None } else { self.https_port };
        let mut rooted = Vec::new();
        let route = route(&self.sites, self.config, &req, (https_port, sni), &self.token, &mut rooted, &mut reply);
        let mut answered_at = None;
        if let Some((place, path, query)) = &route.to {
            if self.bodies.current.is_some() {
                // A request with a body goes to a script: the worker's connections in
                // the middle of their bodies go to others first, so their uploads do
                // not wait for this script.
                (hooks.stalled)(Relief::Bodies);
            }
            // A script that keeps the worker waiting a second: the log records held
            // are written (a kill meanwhile would lose them), and the worker's idle
            // connections go to others (`Hooks::stalled`).
            let stalled = std::cell::RefCell::new((&mut *hooks.stalled, &mut self.out.logs));
            let waiting = || {
                let (stalled, logs) = &mut *stalled.borrow_mut();
                logs.waiting();
                stalled(Relief::All);
            };
            let link = Link {
                peer: if client.ip() == conn.peer.ip() { conn.peer } else { client },
                local_port: conn.local_port,
                https: tls,
                socket: socket.as_fd(),
                body: self.bodies.current.as_ref(),
                waiting: &waiting,
                answers: &self.answers,
            };
            let ask = Ask { req: &req, path, query: *query, client: client.ip(), link, redirected: false };
            // admit, answer
            answered_at = Some(answer(&self.sites[route.vhost], *place, &ask, &mut reply));
        }
        // The body is its handler's now (a script's stdin and the echo's stream hold
        // their own copies): its file goes with the request, not at the worker's next.
        self.bodies.current = None;
        // decorate
        let decor = answered_at.map(|place| &place.decor);
        decorate::decorate(&self.sites[route.vhost], decor, (&req, start), tls, &mut reply);
        // deliver (a 101 that carries its other end opens a tunnel: its head says
        // no `Connection: close`, whatever the worker's state)
        let switched = reply.switched.take().filter(|_| reply.status == 101 && body == BodyState::Done);
        let keep_alive = switched.is_some()
            || req.keep_alive
                && body == BodyState::Done
                && !reply.close
                && may_keep_alive(&self.config.http, conn, hooks.obs);
        let how = Delivery { http11: req.http11, keep_alive, head_only: req.method == Method::Head };
        let cached = reply.cached;
        let upstream = reply.upstream.take();
        let answer = self.out.deliver(t, reply, start, how, hooks.obs);
        if let Err(e) = &answer.sent
            && transport::file_shrank(e)
        {
            file_shrank(&self.sites[route.vhost], req.target, e);
        }
        // account (once the answer is out: what the socket did not take waits)
        let asked = Asked::Request {
            req: &req,
            vhost: route.vhost,
            kind: route.kind,
            client: client.ip(),
            cached,
            upstream: upstream.as_ref(),
        };
        let bytes_in = self.input.bytes_in();
        if let Some(far) = switched
            && answer.sent.is_ok()
        {
            let owed = Owed::new(&answer, &asked, &self.req_head, &self.out.writer.head, bytes_in, true);
            let unsent = answer.rest.as_ref().map_or(&[][..], |r| &r.bytes[r.at..]);
            return self.open_tunnel(far, owed, unsent);
        }
        if answer.rest.is_some() {
            let head = &self.out.writer.head;
            self.unsent = Some(Unsent::owe(answer, &asked, &self.req_head, head, bytes_in, body == BodyState::Done));
            return Next::Write;
        }
        self.out.account(self.config, conn, &asked, &answer, bytes_in, t.tls(), hooks.obs);
        after(&self.input, t, &answer, body == BodyState::Done, hooks.obs)
    }

    /// Answers a request that cannot be served (its line is in `req_head`) with the
    /// error's status, by the same deliver and account stages; the connection
    /// lingers, so the client sees the answer.
    #[cold]
    #[inline(never)]
    pub(super) fn refuse(&mut self, t: &mut impl Transport, conn: &Conn, e: HttpError, hooks: &mut Hooks<'_>) -> Next {
        let start = SystemTime::now();
        let line = request::request_line(&self.req_head);
        let mut reply = Reply::new(&mut self.extra);
        reply.error(e.status(), &e.to_string());
        // A HEAD request never gets content, not even an error page (RFC 9110 §9.3.2).
        let how = Delivery { http11: true, keep_alive: false, head_only: line.starts_with(b"HEAD ") };
        let answer = self.out.deliver(t, reply, start, how, hooks.obs);
        let asked = Asked::Refused { line };
        if answer.rest.is_some() {
            let head = &self.out.writer.head;
            self.unsent = Some(Unsent::owe(answer, &asked, line, head, self.input.bytes_in(), false));
            return Next::Write;
        }
        self.out.account(self.config, conn, &asked, &answer, self.input.bytes_in(), t.tls(), hooks.obs);
        hooks.obs.state(ConnState::Closing);
        Next::Linger
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
}

/// A head refused for its version: if it says `HTTP/1.2` to `1.9`, `as_11` is a copy
/// that says 1.1 ([`request::serve_later_minor_as_11`]).
#[cold]
#[inline(never)]
fn later_minor(head: &[u8], as_11: &mut Vec<u8>) -> bool {
    as_11.extend_from_slice(head);
    request::serve_later_minor_as_11(as_11)
}

/// Whether the location `req` asks for reads request bodies (runs scripts, echoes).
fn reads_body(sites: &[Site<'_>], config: &Config, req: &Request<'_>) -> bool {
    let Ok((clean, _)) = path::clean(req.target) else { return false };
    sites[config.vhost_for(req.host)].place(&clean.bytes).reads_body()
}

/// What becomes of the connection after an answer: kept alive ([`Next::Park`]),
/// closed at once, or a lingering close when input is still unread (only unread input
/// can turn our close into a reset that destroys the response; nginx's
/// `lingering_close on`).
fn after(input: &Input, t: &mut impl Transport, answer: &Answer, body_done: bool, obs: &mut dyn Observer) -> Next {
    if answer.sent.is_err() {
        return Next::Close;
    }
    if answer.keep_alive {
        return Next::Park;
    }
    obs.state(ConnState::Closing);
    if !body_done || input.has_unread() || t.buffered() { Next::Linger } else { Next::Close }
}

/// Internal redirects one request may take (a location's `rewrite`, an index
/// file, `try_files`' last entry, a script's local `Location`) before it is
/// answered 500: a loop of them ends here,
/// as Apache's `LimitInternalRecursion` (10) and nginx's cycle check do.
const MAX_INTERNAL_REDIRECTS: usize = 10;

/// The admit and answer stages: the gate, then the handler; an internal redirect
/// it asks for is followed ([`follow`]). Returns the place that answered last.
#[inline(always)]
fn answer<'s>(site: &'s Site<'s>, (place, guards): Routed<'s>, ask: &Ask<'_>, reply: &mut Reply<'_>) -> &'s Place<'s> {
    if admit((place, guards), ask, reply) {
        place.handler.serve(ask, reply);
    }
    // A handler's internal redirect, or the location's `rewrite`.
    if reply.internal.is_some() {
        return follow(site, place, ask, reply);
    }
    place
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
        let routed = site.route(&clean.bytes);
        place = routed.0;
        reply.start_over();
        if admit(routed, &next, reply) {
            place.handler.serve(&next, reply);
        }
    }
    place
}

/// The admit stage, the gate before any handler: the access rules of a prefix a
/// regex location took the path from, the location's rules (who may ask: `allow`;
/// [`crate::rules::Gate`]), then the methods its handler answers.
#[inline(always)]
fn admit((place, guards): Routed<'_>, ask: &Ask<'_>, reply: &mut Reply<'_>) -> bool {
    guards.is_none_or(|g| g.admit(ask, reply))
        && place.gate.admit(ask, reply)
        && place.handler.methods().admit(ask.req.method, reply)
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
pub(super) fn file_shrank(site: &Site<'_>, target: &[u8], e: &std::io::Error) {
    site.files_changed();
    let mut escaped = Vec::new();
    crate::log::format::escape_into(&mut escaped, target);
    log::warn!(
        "{}: the file shrank while it was sent ({e}); the response was cut short, and the cached files are looked at again",
        String::from_utf8_lossy(&escaped)
    );
}

/// The route stage: the vhost, then what answers the request there. An ACME CA's
/// HTTP-01 request for a token under way is answered first. Over TLS, a Host
/// that picks another vhost than the connection's TLS name (`sni`) is answered 421
/// (RFC 9110 §15.5.20), as Apache does: the certificate the client checked was
/// chosen for that name, and names that pick the same vhost agree. A plain request
/// (`https_port`: where HTTPS is served) to a vhost with `https_redirect` is
/// redirected; `OPTIONS *` gets the server's methods (and the master's dummy
/// request, recognised by its per-boot token, is marked internal); a path that
/// cannot be cleaned is refused. `rooted` holds the path of an absolute-form target
/// with none ("http://host?q" arrives as "?q": its path is "/").
fn route<'s, 'p>(
    sites: &'s [Site<'s>],
    config: &Config,
    req: &'p Request<'p>,
    (https_port, sni): (Option<u16>, Option<&str>),
    token: &str,
    rooted: &'p mut Vec<u8>,
    reply: &mut Reply<'_>,
) -> Route<'s, 'p> {
    let vhost = config.vhost_for(req.host);
    let mut route = Route { vhost, to: None, kind: Kind::default() };
    // An ACME CA asking for an HTTP-01 token under way ([`crate::acme::http01`]):
    // answered before any redirect or location.
    if req.target.starts_with(crate::acme::http01::PREFIX)
        && let Some(key_authorization) = crate::acme::http01::answer(req.target)
    {
        reply.header("Content-Type", "application/octet-stream");
        reply.body = Body::Owned(key_authorization);
        return route;
    }
    if let Some(sni) = sni
        && let by_name = config.vhost_for(Some(sni.as_bytes()))
        && by_name != vhost
    {
        reply.error(421, "This connection was made for another host; open a new one for this host.");
        route.vhost = by_name;
        return route;
    }
    if req.target == b"*" {
        route.kind.internal = dummy::is_internal(req.header(dummy::INTERNAL_HEADER), token);
        reply.header("Allow", ALLOW);
        reply.body = Body::Owned(Vec::new());
        return route;
    }
    if let Some(port) = https_port
        && let Some(code) = config.vhosts[vhost].https_redirect
    {
        let name = config.vhosts[vhost].server_names.first().map_or("", String::as_str);
        let location = crate::http::https::location(req.host, name, port, req.target);
        reply.error(code, "This site is served over HTTPS.");
        reply.header("Location", String::from_utf8_lossy(&location));
        return route;
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
            let (place, guards) = sites[vhost].route(&clean.bytes);
            route.kind.health = matches!(place.handler, Handler::Health(_));
            route.kind.auth = place.gate.auth.is_some() || guards.is_some_and(|g| g.auth.is_some());
            route.to = Some(((place, guards), clean, query));
        }
        // Without a path no handler is reached; a method none of them answers is the
        // first thing wrong (`CONNECT host:443`).
        Err(_) if req.method == Method::OtherKnown => handlers::not_allowed(reply),
        // Apache's AllowEncodedSlashes Off answers 404: no file name holds a '/'.
        Err(PathError::EncodedSlash) => {
            reply.error(404, "The requested resource was not found.");
        }
        Err(e) => {
            reply.error(400, &format!("Bad request path: {e}."));
        }
    }
    route
}
