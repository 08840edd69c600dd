//! HTTP Basic auth (RFC 7617) as a request sees it: the `Authorization` header read
//! strictly, the credentials a worker has already verified, and the clients that keep
//! failing.
//!
//! A bcrypt check at htpasswd's default cost takes a couple of milliseconds of a
//! worker, which a browser would pay on every request of a page (it resends the
//! header each time). So a worker keeps what it verified ([`Verified`]): the SHA-256
//! of the header's value (never the password itself) and the user, for
//! [`VERIFIED_FOR`]. A client that fails [`FREE_FAILURES`] times in a row is then
//! answered 429 with `Retry-After` for a time that doubles with each further failure
//! ([`Failures`]), without a hash being checked: the worker is not held (no sleep,
//! no waiting connection), and guessing costs the guesser time, not the server. The
//! failures are counted for the whole server, in the scoreboard's shared memory
//! ([`crate::scoreboard::failures`]): a client whose connections reach several
//! workers has one allowance, not one per worker. An IPv6 client is its /64
//! ([`client_key`]): what one subscriber or one server is given, so the 2^64 addresses
//! of a guesser's /64 are one client, as an IPv4 address is. The verified credentials
//! are the worker's own (a cache: a second worker verifies once more).
//!
//! A user the file does not name is checked against a decoy hash made like the
//! file's ([`crate::rules::htpasswd::Users::decoy`]), so a wrong password takes as
//! long for a name that does not exist as for one that does: the time of a 401 does
//! not tell which user names are real.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use base64::Engine;

use super::htpasswd::Users;
use crate::keys::read::{ConfigError, Ctx, Keys, absolute};
use crate::keys::watch::Stamp;
use crate::keys::write::{Toml, string};
use crate::scoreboard::failures::FailureTable;

/// Its keys: the htpasswd file, the realm, and how an address list combines.
pub const KEYS: [&str; 3] = ["auth_file", "auth_realm", "satisfy"];

/// `auth_file` and `auth_realm` of a table, if set: the users, read now (when the
/// config is read, so by the master as root: the file may be readable by root
/// alone); `Some(None)`: `auth_file = "off"` (no password here, whatever the vhost
/// says). `root`: where a relative path starts.
pub(crate) fn read(
    keys: &mut Keys,
    ctx: &Ctx,
    root: &std::path::Path,
) -> Result<Option<Option<std::sync::Arc<Auth>>>, ConfigError> {
    let (file, realm) = (keys.take::<String>(ctx, "auth_file")?, keys.take::<String>(ctx, "auth_realm")?);
    let (file, realm) = match (file, realm) {
        (None, None) => return Ok(None),
        (Some(f), _) if f.get_ref() == "off" => return Ok(Some(None)),
        (None, Some(r)) => return Err(ctx.spanned(&r, "auth_realm needs auth_file (the htpasswd file of its users)")),
        (Some(f), None) => return Err(ctx.spanned(&f, "auth_file needs auth_realm (the name the browser shows)")),
        (Some(f), Some(r)) => (f, r),
    };
    if realm.get_ref().is_empty() || realm.get_ref().chars().any(char::is_control) {
        return Err(ctx.spanned(&realm, "auth_realm is a name shown to users: not empty, no control characters"));
    }
    let path = absolute(root, file.get_ref());
    let stamp = Stamp::of(&path);
    let text =
        std::fs::read_to_string(&path).map_err(|e| ctx.spanned(&file, format!("auth_file {}: {e}", path.display())))?;
    let (users, problems) = Users::parse(&text);
    let notes: Vec<String> = problems.iter().map(|p| format!("{}:{}: {}", path.display(), p.line, p.what)).collect();
    if users.is_empty() {
        let why: Vec<String> = problems.iter().map(|p| format!("line {}: {}", p.line, p.what)).collect();
        return Err(
            ctx.spanned(&file, format!("auth_file {}: no user that can log in ({})", path.display(), why.join("; ")))
        );
    }
    let realm = realm.into_inner();
    let challenge = challenge(&realm);
    Ok(Some(Some(std::sync::Arc::new(Auth { realm, file: path, users, challenge, stamp, notes }))))
}

/// `satisfy`: `Some(true)` for `"any"`, `Some(false)` for `"all"`.
pub(crate) fn read_satisfy(keys: &mut Keys, ctx: &Ctx) -> Result<Option<bool>, ConfigError> {
    let Some(s) = keys.take::<String>(ctx, "satisfy")? else { return Ok(None) };
    match s.get_ref().as_str() {
        "any" => Ok(Some(true)),
        "all" => Ok(Some(false)),
        other => Err(ctx.spanned(&s, format!("satisfy is \"any\" or \"all\", not {other:?}"))),
    }
}

/// The keys for `pika -T`, as written.
pub(crate) fn show(auth: Option<&Option<std::sync::Arc<Auth>>>, satisfy_any: Option<bool>, t: &mut Toml) {
    match auth {
        None => {}
        Some(None) => t.key("auth_file", string("off")),
        Some(Some(a)) => {
            t.key("auth_file", string(&a.file.display().to_string()));
            t.key("auth_realm", string(&a.realm));
        }
    }
    if let Some(any) = satisfy_any {
        t.key("satisfy", string(if any { "any" } else { "all" }));
    }
}

/// Longest `Authorization` value read: a user and password of several hundred
/// bytes each. A longer one is refused (400) before anything is decoded.
pub const MAX_AUTHORIZATION: usize = 1024;

/// How long a worker trusts credentials it verified. A password changed in the file
/// reaches the workers through a new generation anyway (the file is read with the
/// config); this bounds how long a header seen once keeps its worth in memory.
pub const VERIFIED_FOR: Duration = Duration::from_secs(300);

/// Most verified credentials a worker keeps; when full it starts over.
pub const MAX_VERIFIED: usize = 1024;

/// Failures in a row a client may have before it is slowed.
pub const FREE_FAILURES: u32 = 5;

/// The longest a failing client is turned away for at a time.
pub const MAX_PENALTY: Duration = Duration::from_secs(60);

/// A client with no failure for this long starts afresh.
pub const FAILURES_FORGOTTEN: Duration = Duration::from_secs(600);

/// The user and password of a `Basic` header.
#[derive(Debug, PartialEq, Eq)]
pub struct Credentials {
    pub user: String,
    pub password: Vec<u8>,
}

/// What is wrong with an `Authorization` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BadHeader {
    /// Another scheme (`Bearer`, `Digest`): asked again, with the challenge (401).
    #[error("the Authorization header is not Basic")]
    NotBasic,
    /// A broken `Basic` header: the client is at fault (400).
    #[error("the Authorization header is longer than {MAX_AUTHORIZATION} bytes")]
    TooLong,
    #[error("the Basic credentials are not base64")]
    NotBase64,
    #[error("the Basic credentials have no ':' between user and password")]
    NoColon,
    #[error("the Basic user name is not UTF-8 or has control characters")]
    BadUser,
}

impl BadHeader {
    /// The status it is answered with.
    pub fn status(self) -> u16 {
        match self {
            BadHeader::NotBasic => 401,
            _ => 400,
        }
    }
}

/// The credentials of an `Authorization` value: `Basic`, any case, then the base64
/// of `user:password` (RFC 7617 §2).
pub fn parse(value: &[u8]) -> Result<Credentials, BadHeader> {
    if value.len() > MAX_AUTHORIZATION {
        return Err(BadHeader::TooLong);
    }
    let value = value.trim_ascii();
    let (scheme, rest) = match value.iter().position(|&b| b == b' ') {
        Some(at) => (&value[..at], value[at..].trim_ascii_start()),
        None => (value, &b""[..]),
    };
    if !scheme.eq_ignore_ascii_case(b"basic") {
        return Err(BadHeader::NotBasic);
    }
    let decoded = base64::engine::general_purpose::STANDARD.decode(rest).map_err(|_| BadHeader::NotBase64)?;
    let colon = decoded.iter().position(|&b| b == b':').ok_or(BadHeader::NoColon)?;
    let user = std::str::from_utf8(&decoded[..colon]).map_err(|_| BadHeader::BadUser)?;
    if user.chars().any(char::is_control) {
        return Err(BadHeader::BadUser);
    }
    Ok(Credentials { user: user.to_string(), password: decoded[colon + 1..].to_vec() })
}

/// The `WWW-Authenticate` value for `realm` (quotes and backslashes escaped).
pub fn challenge(realm: &str) -> String {
    let mut v = String::from("Basic realm=\"");
    for c in realm.chars() {
        if c == '"' || c == '\\' {
            v.push('\\');
        }
        v.push(c);
    }
    v.push_str("\", charset=\"UTF-8\"");
    v
}

/// Credentials a worker verified: the SHA-256 of (which file, the header's value) →
/// the user and when it was verified.
#[derive(Default)]
pub struct Verified {
    entries: HashMap<[u8; 32], (String, Instant)>,
}

impl Verified {
    /// The key of a header value checked against file number `file`.
    pub fn key(file: usize, value: &[u8]) -> [u8; 32] {
        let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
        ctx.update(&(file as u64).to_le_bytes());
        ctx.update(value);
        ctx.finish().as_ref().try_into().expect("SHA-256 is 32 bytes")
    }

    /// The user verified under `key` less than [`VERIFIED_FOR`] ago.
    pub fn get(&self, key: &[u8; 32], now: Instant) -> Option<&str> {
        let (user, at) = self.entries.get(key)?;
        (now.saturating_duration_since(*at) < VERIFIED_FOR).then_some(user.as_str())
    }

    pub fn insert(&mut self, key: [u8; 32], user: &str, now: Instant) {
        if self.entries.len() >= MAX_VERIFIED {
            self.entries.clear();
        }
        self.entries.insert(key, (user.to_string(), now));
    }
}

/// Which addresses are one client for [`Failures`]: an IPv4 address (written as
/// IPv4-mapped IPv6 or not), or an IPv6 /64.
pub fn client_key(ip: IpAddr) -> u128 {
    let v6 = match ip {
        IpAddr::V4(v4) => return u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => v6,
    };
    match v6.to_ipv4_mapped() {
        Some(v4) => u128::from(v4.to_ipv6_mapped()),
        None => u128::from(v6) & !(u128::from(u64::MAX)),
    }
}

/// The clients that failed lately, and until when each is turned away: counted in
/// the table every worker shares.
#[derive(Clone, Copy)]
pub struct Failures<'t>(pub &'t FailureTable);

impl Failures<'_> {
    /// How long `client` must still wait before its next try is checked, if it must.
    pub fn wait(&self, client: IpAddr, now_ms: u64) -> Option<Duration> {
        let f = self.0.get(client_key(client))?;
        let until = f.last_ms.saturating_add(penalty(f.count).as_millis() as u64);
        (until > now_ms).then(|| Duration::from_millis(until - now_ms))
    }

    /// `client` sent credentials that did not verify.
    pub fn failed(&self, client: IpAddr, now_ms: u64) {
        self.0.failed(client_key(client), now_ms, FAILURES_FORGOTTEN.as_millis() as u64);
    }

    /// `client` logged in: its failures are forgotten.
    pub fn succeeded(&self, client: IpAddr) {
        self.0.forget(client_key(client));
    }
}

/// How long a client with `count` failures in a row waits: nothing for the first
/// [`FREE_FAILURES`], then 1 s, doubling, at most [`MAX_PENALTY`].
pub fn penalty(count: u32) -> Duration {
    if count < FREE_FAILURES {
        return Duration::ZERO;
    }
    let shift = (count - FREE_FAILURES).min(6);
    Duration::from_secs(1 << shift).min(MAX_PENALTY)
}

/// `auth_file` and `auth_realm`: who may log in, read when the config is read.
#[derive(Debug, PartialEq, Eq)]
pub struct Auth {
    pub realm: String,
    pub file: PathBuf,
    pub users: Users,
    /// The `WWW-Authenticate` value.
    pub challenge: String,
    /// The file as it was when read (the master reads the config again when it
    /// changes: [`crate::keys::watch::Watch`]).
    pub stamp: Option<crate::keys::watch::Stamp>,
    /// What `pika -t` says of its lines (a weak hash, a line no user can use).
    pub notes: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(s: &str) -> Vec<u8> {
        format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(s)).into_bytes()
    }

    #[test]
    fn basic_credentials_are_read() {
        let c = parse(&basic("alice:pa:ss wörd")).unwrap();
        assert_eq!((c.user.as_str(), c.password.as_slice()), ("alice", "pa:ss wörd".as_bytes()));
        assert_eq!(parse(b"bAsIc   YTpi").unwrap(), Credentials { user: "a".into(), password: b"b".to_vec() });
        assert_eq!(parse(&basic("a:")).unwrap().password, b"");
    }

    #[test]
    fn broken_headers_are_refused_with_their_status() {
        let cases: [(&[u8], BadHeader); 7] = [
            (b"Bearer abc", BadHeader::NotBasic),
            (b"Basic", BadHeader::NoColon),
            (b"Basic !!!", BadHeader::NotBase64),
            (b"Basic YWxpY2U=", BadHeader::NoColon),
            (b"Basic /w==", BadHeader::NoColon),
            (b"Basic /zpi", BadHeader::BadUser),
            (b"Basic YQFiOmM=", BadHeader::BadUser),
        ];
        for (value, want) in cases {
            assert_eq!(parse(value), Err(want), "{}", String::from_utf8_lossy(value));
        }
        let huge = basic(&format!("u:{}", "p".repeat(MAX_AUTHORIZATION)));
        assert_eq!(parse(&huge), Err(BadHeader::TooLong));
        assert_eq!(BadHeader::NotBasic.status(), 401);
        assert_eq!(BadHeader::TooLong.status(), 400);
    }

    #[test]
    fn the_challenge_escapes_the_realm() {
        assert_eq!(challenge("Staff"), "Basic realm=\"Staff\", charset=\"UTF-8\"");
        assert_eq!(challenge("a\"b\\"), "Basic realm=\"a\\\"b\\\\\", charset=\"UTF-8\"");
    }

    #[test]
    fn verified_credentials_are_kept_for_a_while_per_file() {
        let mut v = Verified::default();
        let now = Instant::now();
        let key = Verified::key(0, b"Basic YTpi");
        assert_ne!(key, Verified::key(1, b"Basic YTpi"), "another file, another key");
        assert_eq!(v.get(&key, now), None);
        v.insert(key, "a", now);
        assert_eq!(v.get(&key, now + Duration::from_secs(1)), Some("a"));
        assert_eq!(v.get(&key, now + VERIFIED_FOR), None, "expired");
        for i in 0..MAX_VERIFIED {
            v.insert(Verified::key(i + 2, b"x"), "b", now);
        }
        assert!(v.entries.len() <= MAX_VERIFIED);
    }

    #[test]
    fn a_client_that_keeps_failing_waits_longer_each_time() {
        let f = Failures(FailureTable::map().unwrap());
        let (me, other) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        let t0 = 5_000_000;
        for _ in 0..FREE_FAILURES - 1 {
            f.failed(me, t0);
        }
        assert_eq!(f.wait(me, t0), None, "a few typing errors cost nothing");
        f.failed(me, t0);
        assert_eq!(f.wait(me, t0), Some(Duration::from_secs(1)));
        assert_eq!(f.wait(me, t0 + 1000), None, "then it may try again");
        f.failed(me, t0);
        assert_eq!(f.wait(me, t0), Some(Duration::from_secs(2)), "doubled");
        assert_eq!(f.wait(other, t0), None, "another client is not slowed");
        assert_eq!(penalty(FREE_FAILURES + 30), MAX_PENALTY);
        // A success, or a long quiet, forgets.
        f.succeeded(me);
        assert_eq!(f.wait(me, t0), None);
        for _ in 0..FREE_FAILURES {
            f.failed(other, t0);
        }
        let later = t0 + FAILURES_FORGOTTEN.as_millis() as u64;
        f.failed(other, later);
        assert_eq!(f.wait(other, later), None, "one failure after a long quiet");
    }

    #[test]
    fn an_ipv6_client_is_its_64() {
        let f = Failures(FailureTable::map().unwrap());
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        for i in 0..FREE_FAILURES {
            f.failed(ip(&format!("2001:db8:1:2::{:x}", i + 1)), 1000);
        }
        assert!(f.wait(ip("2001:db8:1:2:ffff:ffff:ffff:ffff"), 1000).is_some(), "the same /64");
        assert_eq!(f.wait(ip("2001:db8:1:3::1"), 1000), None, "the next /64");
        assert_eq!(client_key(ip("192.0.2.1")), client_key(ip("::ffff:192.0.2.1")), "one IPv4 client either way");
        assert_ne!(client_key(ip("0.0.0.0")), client_key(ip("::1")));
        assert_ne!(client_key(ip("192.0.2.1")), client_key(ip("192.0.2.2")), "IPv4 by address");
    }
}
