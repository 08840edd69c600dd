//! Where the rules meet a request: [`Gate::admit`] (with its [`check`]) before the
//! handler (address, password, `return`, `rewrite`), [`decorate`] after it (headers,
//! `expires`, `charset`, and the compression of bodies pika makes itself: error
//! pages, listings).
//!
//! A worker's verified credentials ([`basic::Verified`]) live here, its own: a worker
//! serves one request at a time. The failing clients ([`basic::Failures`]) are the
//! server's, counted in the table the master maps with the scoreboard, which the
//! worker names here when it starts ([`share_failures`]).

use std::cell::RefCell;
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime};

use super::access::Access;
use super::basic::Auth;
use super::basic::{self, Failures, Verified};
use super::compress;
use super::encoding;
use super::encoding::Coding;
use super::headers;
use super::headers::{AddHeaders, Expires};
use super::redirect::Template;
use super::redirect::{Return, Vars};
use crate::exchange::Ask;
use crate::http::response::{self, Body, Internal, Reply, SpooledReader, Streamed};
use crate::scoreboard::failures::FailureTable;

/// What a request must pass before its location's handler answers it.
#[derive(Debug, Clone, Default)]
pub struct Gate {
    /// `None`: every client may ask.
    pub access: Option<Access>,
    /// A password is asked for.
    pub auth: Option<Arc<Auth>>,
    /// With both: an allowed address or a password is enough.
    pub satisfy_any: bool,
    /// The location answers with this itself.
    pub ret: Option<Return>,
    /// The request is served again at this target.
    pub rewrite: Option<Template>,
    /// Only internal redirects reach the location.
    pub internal: bool,
    /// The names a request's Host must be (else an IP literal or `localhost`, see
    /// [`crate::http::host::names_this_server`]); `None`: any Host.
    pub(super) host_names: Option<Vec<String>>,
}

impl Gate {
    /// The same gate, and a Host that is not one of `names` (nor an IP literal, nor
    /// `localhost`) is answered 421: for the status page and the metrics, which a
    /// browser on an allowed address must not be made to read through a name an
    /// attacker's DNS points at this server.
    pub fn only_for_names(mut self, names: &[String]) -> Gate {
        self.host_names = Some(names.to_vec());
        self
    }

    /// True when the request may go on to the handler; else `reply` holds the refusal
    /// (or the `return`).
    #[inline]
    pub fn admit(&self, ask: &Ask<'_>, reply: &mut Reply<'_>) -> bool {
        if let (Some(names), Some(host)) = (&self.host_names, ask.req.host)
            && !crate::http::host::names_this_server(names, host)
        {
            reply.error(421, "This server does not answer this page for that host name; use one of its names.");
            return false;
        }
        if self.access.is_none()
            && self.auth.is_none()
            && self.ret.is_none()
            && self.rewrite.is_none()
            && !self.internal
        {
            return true;
        }
        check(self, ask, reply)
    }
}

/// What is added to an answer after its handler made it.
#[derive(Debug, Clone, Default)]
pub struct Decor {
    pub headers: AddHeaders,
    pub expires: Expires,
    pub charset: Option<String>,
    /// Codings for the bodies pika makes (error pages, listings).
    pub compress: Vec<Coding>,
    pub compress_types: Vec<String>,
    pub compress_min_size: u64,
}

impl Decor {
    /// Whether there is anything to add.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.headers.is_empty() && self.expires.is_empty() && self.charset.is_none() && self.compress.is_empty()
    }
}

thread_local! {
    static VERIFIED: RefCell<Verified> = RefCell::new(Verified::default());
}

/// The failing clients' table this process counts into.
static FAILING: OnceLock<Option<&'static FailureTable>> = OnceLock::new();

/// Counts this process's failed logins into `table`, shared with every worker (a
/// worker calls it as it starts, with the scoreboard's).
pub fn share_failures(table: &'static FailureTable) {
    let _ = FAILING.set(Some(table));
}

/// The failing clients: the shared table, or (in a process given none) one of its
/// own; `None` if none can be mapped, and then nobody is slowed.
fn failures() -> Option<Failures<'static>> {
    let table =
        FAILING.get_or_init(|| FailureTable::map().inspect_err(|e| log::error!("no table of failed logins: {e}")).ok());
    table.map(Failures)
}

/// Whether the request goes on to the handler; if not, `reply` holds the answer
/// (403, 401, 400, 429, a `return` status or redirect).
pub fn check(gate: &Gate, ask: &Ask<'_>, reply: &mut Reply<'_>) -> bool {
    if gate.internal && !ask.redirected {
        // As nginx's `internal`: to a client the location is not there.
        reply.error(404, "The requested resource was not found.");
        return false;
    }
    let address_ok = gate.access.as_ref().is_none_or(|a| a.allows(ask.client));
    let allowed = match &gate.auth {
        None => address_ok,
        // satisfy = "any": an allow rule that matches the client is enough; an
        // address no rule names is not (a deny list alone lets nobody in without a
        // password, as nginx's satisfy any).
        Some(_) if gate.satisfy_any && gate.access.as_ref().is_some_and(|a| a.allows_by_rule(ask.client)) => true,
        Some(_) if !address_ok && !gate.satisfy_any => false,
        Some(auth) => {
            if !password(auth, ask, reply) {
                return false;
            }
            true
        }
    };
    if !allowed {
        reply.error(403, "Access to this resource is forbidden.");
        return false;
    }
    let vars = || Vars {
        target: ask.req.target,
        path: &ask.path.bytes,
        query: ask.query,
        host: host_name(ask.req.host.unwrap_or(b"")),
        https: ask.link.https,
    };
    if let Some(to) = &gate.rewrite
        && gate.ret.is_none()
    {
        reply.internal = Some(Internal { target: to.expand(&vars()).into_bytes(), as_get: false });
        return false;
    }
    match &gate.ret {
        None => true,
        Some(Return::Status(s)) => {
            reply.error(*s, detail(*s));
            if *s == 204 {
                reply.headers.clear();
                reply.body = Body::None;
            }
            false
        }
        Some(Return::Redirect { status, to }) => {
            let location = to.expand(&vars());
            reply.error(*status, "The resource has moved; follow the Location header.");
            reply.header("Location", location);
            false
        }
    }
}

/// Whether the request carries the password of a user of `auth`; if not, the
/// answer is in `reply`.
fn password(auth: &Auth, ask: &Ask<'_>, reply: &mut Reply<'_>) -> bool {
    let Some(value) = ask.req.header("authorization") else {
        challenge(auth, reply, "This resource needs a user name and password.");
        return false;
    };
    let now = Instant::now();
    // The file's identity in this worker: its place in memory, fixed since the fork.
    let key = Verified::key(std::ptr::from_ref(auth) as usize, value);
    if VERIFIED.with(|v| v.borrow().get(&key, now).is_some()) {
        return true;
    }
    let failing = failures();
    let now_ms = crate::base::clock::now_ms();
    if let Some(wait) = failing.and_then(|f| f.wait(ask.client, now_ms)) {
        reply.error(429, "Too many failed logins; try again later.");
        reply.header("Retry-After", (wait.as_secs() + 1).to_string());
        return false;
    }
    let creds = match basic::parse(value) {
        Ok(c) => c,
        Err(e) if e.status() == 401 => {
            challenge(auth, reply, "This resource needs a user name and password (Basic).");
            return false;
        }
        Err(e) => {
            log::info!("{}: {e}", ask.client);
            reply.error(400, &format!("Bad request: {e}."));
            return false;
        }
    };
    let known = auth.users.get(&creds.user);
    let ok = match known {
        Some(h) => h.verify(&creds.password),
        None => {
            // As long as a wrong password for a real user takes.
            std::hint::black_box(auth.users.decoy().is_some_and(|d| d.verify(&creds.password)));
            false
        }
    };
    if ok {
        VERIFIED.with(|v| v.borrow_mut().insert(key, &creds.user, now));
        if let Some(f) = failing {
            f.succeeded(ask.client);
        }
        return true;
    }
    if let Some(f) = failing {
        f.failed(ask.client, now_ms);
    }
    let why = if known.is_some() { "wrong password" } else { "no such user" };
    log::info!("{}: Basic auth as {:?} failed ({why} in {})", ask.client, creds.user, auth.file.display());
    challenge(auth, reply, "The user name or password is wrong.");
    false
}

fn challenge(auth: &Auth, reply: &mut Reply<'_>, detail: &str) {
    reply.error(401, detail);
    reply.header("WWW-Authenticate", &auth.challenge);
}

fn detail(status: u16) -> &'static str {
    match status {
        403 => "Access to this resource is forbidden.",
        404 => "The requested resource was not found.",
        410 => "The requested resource is gone.",
        _ => "The server answers this resource with this status.",
    }
}

/// The host without its port (`[::1]:8080` → `[::1]`).
fn host_name(host: &[u8]) -> &[u8] {
    if host.starts_with(b"[") {
        return host.iter().position(|&b| b == b']').map_or(host, |e| &host[..=e]);
    }
    host.iter().position(|&b| b == b':').map_or(host, |c| &host[..c])
}

/// Adds what the rules add to an answer: headers, `expires`, `charset`, and
/// compresses a body pika made (an error page, a listing) or a script's answer,
/// whole or streamed, when the client accepts (see [`compress_answer`]).
pub fn decorate(rules: &Decor, accept_encoding: Option<&[u8]>, reply: &mut Reply<'_>, now: SystemTime) {
    if let Some(lines) = rules.headers.for_status(reply.status) {
        reply.headers.extend_from_slice(lines);
    }
    if rules.expires.is_empty() && rules.charset.is_none() && rules.compress.is_empty() {
        return;
    }
    let content_type = content_type(reply.headers).map(str::to_string);
    if !rules.expires.is_empty()
        && headers::expires_status(reply.status)
        && let Some(d) = rules.expires.for_type(content_type.as_deref().unwrap_or(""))
    {
        // As nginx's `expires`: it replaces what a script said of its caching.
        let (cache_control, expires) = headers::expiry_values(d, now);
        reply.remove_headers(&["cache-control", "expires"]);
        reply.header("Cache-Control", cache_control).header("Expires", expires);
    }
    if let (Some(cs), Some(ct)) = (&rules.charset, &content_type)
        && headers::takes_charset(ct)
    {
        reply.set_content_type(&format!("{ct}; charset={cs}"));
    }
    if !rules.compress.is_empty()
        && content_type.as_deref().is_some_and(|ct| compress::compressible(ct, &rules.compress_types))
    {
        compress_answer(rules, accept_encoding, reply);
    }
}

/// An answer of a compressible type, in the coding the client prefers among the
/// location's: a body made whole or a script's answer kept whole (of at least
/// `compress_min_size`; one kept in a file is compressed as it is read back), or a
/// stream (a script's answer still coming), compressed as it comes. Never an answer in a
/// coding already (a script's own `Content-Encoding`), a part (`Content-Range`), or
/// one without content. Every such answer says `Vary: Accept-Encoding` (a cache must
/// not give the compressed one to a client that did not ask), and a compressed one's
/// strong ETag becomes weak (`W/`): its bytes are not the ones the ETag named.
fn compress_answer(rules: &Decor, accept_encoding: Option<&[u8]>, reply: &mut Reply<'_>) {
    let headers = &*reply.headers;
    if response::bodiless(reply.status)
        || header_value(headers, "content-encoding").is_some()
        || header_value(headers, "content-range").is_some()
    {
        return;
    }
    match &reply.body {
        Body::Owned(b) if !b.is_empty() => {}
        Body::Stream(_) => {}
        Body::Spooled { start, end, .. } if start < end => {}
        // Files (their own codings, kept per version) and empty answers.
        _ => return,
    }
    reply.header("Vary", "Accept-Encoding");
    let big_enough = reply.body.length().is_none_or(|n| n >= rules.compress_min_size);
    let Some(coding) = encoding::choose(accept_encoding, &rules.compress).filter(|_| big_enough) else { return };
    reply.body = match std::mem::replace(&mut reply.body, Body::None) {
        Body::Owned(bytes) => Body::Owned(compress::compress(coding, &bytes)),
        Body::Stream(s) => {
            let from = Box::new(compress::Compressing::new(coding, s.from));
            Body::Stream(Box::new(Streamed { from, len: None, sent: 0, until_ms: s.until_ms }))
        }
        // A kept answer, read back from its file as it is compressed.
        Body::Spooled { file, start, end, hold } => {
            let from = Box::new(SpooledReader::new(file, start, end, hold));
            Streamed::body(Box::new(compress::Compressing::new(coding, from)), None)
        }
        other => other,
    };
    reply.header("Content-Encoding", coding.token());
    reply.weaken_etag();
}

/// The value of the first `name` line in `headers` (`Name: value\r\n` lines).
fn header_value<'h>(headers: &'h [u8], name: &str) -> Option<&'h [u8]> {
    headers.split(|&b| b == b'\n').find_map(|line| {
        let colon = line.iter().position(|&b| b == b':')?;
        line[..colon].eq_ignore_ascii_case(name.as_bytes()).then(|| line[colon + 1..].trim_ascii())
    })
}

fn content_type(headers: &[u8]) -> Option<&str> {
    header_value(headers, "content-type").and_then(|v| std::str::from_utf8(v).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_lines_are_found_by_name() {
        let h = b"ETag: \"x\"\r\nContent-Type: text/html\r\nVary: a\r\n";
        assert_eq!(header_value(h, "content-type"), Some(&b"text/html"[..]));
        assert_eq!(header_value(h, "Content-Encoding"), None);
        assert_eq!(content_type(h), Some("text/html"));
    }

    #[test]
    fn hosts_lose_their_port() {
        assert_eq!(host_name(b"example.com:8080"), b"example.com");
        assert_eq!(host_name(b"[::1]:8080"), b"[::1]");
        assert_eq!(host_name(b"example.com"), b"example.com");
    }

    #[test]
    fn decorate_adds_headers_expiry_charset_and_compresses_made_bodies() {
        use crate::rules::headers::{AddHeaders, Expires};
        let rules = Decor {
            headers: AddHeaders::new(vec![("X-A".into(), "1".into())], false).unwrap(),
            expires: Expires::all(std::time::Duration::from_secs(60)),
            charset: Some("utf-8".into()),
            compress: vec![encoding::Coding::Gzip],
            compress_types: vec!["text/*".into()],
            compress_min_size: 10,
        };
        let mut buf = Vec::new();
        let mut reply = Reply::new(&mut buf);
        reply.header("Content-Type", "text/plain");
        reply.body = Body::Owned(vec![b'a'; 1000]);
        decorate(&rules, Some(b"gzip"), &mut reply, SystemTime::UNIX_EPOCH);
        let head = String::from_utf8_lossy(reply.headers).into_owned();
        assert!(head.contains("X-A: 1\r\n") && head.contains("Cache-Control: max-age=60\r\n"), "{head}");
        assert!(head.contains("Content-Type: text/plain; charset=utf-8\r\n"), "{head}");
        assert!(head.contains("Content-Encoding: gzip\r\n") && head.contains("Vary: Accept-Encoding\r\n"), "{head}");
        assert!(reply.body.len() < 100);
        // A script's own caching lines are replaced, not sent beside the rule's.
        let mut buf = Vec::new();
        let mut reply = Reply::new(&mut buf);
        reply.header("Cache-Control", "public, max-age=5").header("Content-Type", "text/plain");
        reply.header("Expires", "Fri, 13 Feb 2009 23:31:30 GMT").header("X-B", "2");
        reply.body = Body::Owned(b"short".to_vec());
        decorate(&rules, None, &mut reply, SystemTime::UNIX_EPOCH);
        let head = String::from_utf8_lossy(reply.headers).into_owned();
        assert_eq!(head.matches("Cache-Control").count(), 1, "{head}");
        assert_eq!(head.matches("Expires").count(), 1, "{head}");
        assert!(head.contains("Cache-Control: max-age=60\r\n") && !head.contains("2009"), "{head}");
        assert!(head.contains("X-B: 2\r\n") && head.contains("Content-Type: text/plain"), "{head}");
        // An error: no headers (2xx/3xx only), no expiry; its page still compressed.
        let mut buf = Vec::new();
        let mut reply = Reply::new(&mut buf);
        reply.error(404, "gone");
        decorate(&rules, None, &mut reply, SystemTime::UNIX_EPOCH);
        let head = String::from_utf8_lossy(reply.headers).into_owned();
        assert!(!head.contains("X-A") && !head.contains("Cache-Control"), "{head}");
        assert!(head.contains("Vary: Accept-Encoding") && !head.contains("Content-Encoding"), "{head}");
    }
}
