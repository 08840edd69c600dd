//! Session tickets that every worker can open, with keys that change every hour and
//! that no worker has to ask for.
//!
//! A resumed TLS handshake skips the certificate and its signature (most of a
//! handshake's CPU). The client offers its ticket on a new connection, which any worker
//! may accept, so every worker must hold the same key; a per-process session cache
//! would resume on one worker in N.
//!
//! The master makes a random secret before the first fork. Time is cut into periods
//! of [`PERIOD`] (counted from the Unix epoch, so every process agrees on the number);
//! the secret of period p+1 is `HMAC(secret_p, "next")`, the ticket key of period p is
//! `HMAC(secret_p, "ticket key")`. A worker inherits the master's state at fork and
//! steps it forward itself when its clock enters a new period: the workers agree on
//! the key without a word to the master. A ticket carries its period; the keys of the
//! current and the previous period open tickets, so a ticket is good for one to two
//! periods (the lifetime told to clients is one).
//!
//! The chain only goes forward, and a process keeps the current secret and the
//! previous period's key, never older ones: memory taken from a worker or the master
//! today opens no ticket issued two periods ago. A key derived from one fixed secret
//! and the period number would open every past ticket once that secret leaked.

use std::sync::Mutex;
use std::time::Duration;

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::hmac;

/// How long one ticket key is used to seal tickets. An hour: a returning visitor
/// resumes within it (nginx's and Apache's session timeouts are five minutes), and a
/// key that leaks opens at most two hours of tickets.
pub const PERIOD: Duration = Duration::from_secs(3600);

const KEY_LEN: usize = 32;
/// A ticket: the period (8 bytes), the nonce, the sealed session state, the tag.
const PERIOD_LEN: usize = 8;
const TAG_LEN: usize = 16;

/// The ticket-key chain at one period. The master makes it before the first fork and
/// steps it forward on its tick; each worker copies it at fork.
#[derive(Clone)]
pub struct TicketKeys {
    period: u64,
    secret: [u8; KEY_LEN],
    key: [u8; KEY_LEN],
    previous: Option<[u8; KEY_LEN]>,
}

impl std::fmt::Debug for TicketKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TicketKeys {{ period: {} }}", self.period)
    }
}

fn period_of(unix: u64) -> u64 {
    unix / PERIOD.as_secs()
}

fn derive(secret: &[u8; KEY_LEN], label: &[u8]) -> [u8; KEY_LEN] {
    let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, secret), label);
    let mut out = [0; KEY_LEN];
    out.copy_from_slice(&tag.as_ref()[..KEY_LEN]);
    out
}

impl TicketKeys {
    /// A fresh random chain, starting at the period of `unix` (seconds).
    pub fn new(unix: u64) -> std::io::Result<TicketKeys> {
        let mut secret = [0; KEY_LEN];
        aws_lc_rs::rand::fill(&mut secret).map_err(|_| std::io::Error::other("no random bytes for ticket keys"))?;
        Ok(TicketKeys::from_secret(secret, period_of(unix)))
    }

    fn from_secret(secret: [u8; KEY_LEN], period: u64) -> TicketKeys {
        TicketKeys { period, key: derive(&secret, b"ticket key"), secret, previous: None }
    }

    /// Steps the chain to the period of `unix`, overwriting what it leaves behind. A
    /// clock that went back leaves the chain where it is.
    pub fn advance(&mut self, unix: u64) {
        let target = period_of(unix);
        while self.period < target {
            self.previous = Some(self.key);
            self.secret = derive(&self.secret, b"next");
            self.key = derive(&self.secret, b"ticket key");
            self.period += 1;
        }
    }
}

/// [`TicketKeys::to_bytes`]: the period, the secret, a flag and the previous key.
const STATE_LEN: usize = 8 + KEY_LEN + 1 + KEY_LEN;

impl TicketKeys {
    /// The chain's state as a fleet shares it (sealed, in Redis) and a node caches
    /// it (root's, on disk): the period, its secret and the previous period's key.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(STATE_LEN);
        out.extend_from_slice(&self.period.to_be_bytes());
        out.extend_from_slice(&self.secret);
        out.push(u8::from(self.previous.is_some()));
        out.extend_from_slice(&self.previous.unwrap_or([0; KEY_LEN]));
        out
    }

    /// The chain [`TicketKeys::to_bytes`] wrote.
    pub fn from_bytes(bytes: &[u8]) -> Option<TicketKeys> {
        if bytes.len() != STATE_LEN {
            return None;
        }
        let period = u64::from_be_bytes(bytes[..8].try_into().ok()?);
        let secret: [u8; KEY_LEN] = bytes[8..8 + KEY_LEN].try_into().ok()?;
        let previous: [u8; KEY_LEN] = bytes[9 + KEY_LEN..].try_into().ok()?;
        let mut keys = TicketKeys::from_secret(secret, period);
        keys.previous = (bytes[8 + KEY_LEN] == 1).then_some(previous);
        Some(keys)
    }

    /// The period the chain is at (periods of [`PERIOD`] since the Unix epoch).
    pub fn period(&self) -> u64 {
        self.period
    }

    /// Whether both chains, stepped to the period of `unix`, seal with the same key:
    /// the same chain, whatever period each was last at.
    pub fn same_chain(&self, other: &TicketKeys, unix: u64) -> bool {
        let (mut a, mut b) = (self.clone(), other.clone());
        a.advance(unix);
        b.advance(unix);
        a.period == b.period && a.key == b.key
    }
}

/// The sealing keys of one process, kept in step with its clock.
struct Sealers {
    keys: TicketKeys,
    current: LessSafeKey,
    previous: Option<LessSafeKey>,
}

fn aead_key(key: &[u8; KEY_LEN]) -> LessSafeKey {
    // AES-256-GCM takes any 32 bytes: this cannot fail.
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, key).unwrap_or_else(|_| unreachable!()))
}

impl Sealers {
    fn new(keys: TicketKeys) -> Sealers {
        Sealers { current: aead_key(&keys.key), previous: keys.previous.as_ref().map(aead_key), keys }
    }

    fn refresh(&mut self, unix: u64) {
        if period_of(unix) > self.keys.period {
            let mut keys = self.keys.clone();
            keys.advance(unix);
            *self = Sealers::new(keys);
        }
    }
}

/// rustls' [`ProducesTickets`](rustls::server::ProducesTickets) over a
/// [`TicketKeys`] chain. (A worker has one thread; the mutex is never contended.)
pub struct Ticketer {
    sealers: Mutex<Sealers>,
    clock: fn() -> u64,
}

impl std::fmt::Debug for Ticketer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ticketer")
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Ticketer {
    pub fn new(keys: TicketKeys) -> Ticketer {
        Ticketer::with_clock(keys, unix_now)
    }

    fn with_clock(keys: TicketKeys, clock: fn() -> u64) -> Ticketer {
        Ticketer { sealers: Mutex::new(Sealers::new(keys)), clock }
    }

    fn sealers(&self) -> std::sync::MutexGuard<'_, Sealers> {
        let mut s = self.sealers.lock().unwrap_or_else(|e| e.into_inner());
        s.refresh((self.clock)());
        s
    }
}

impl rustls::server::ProducesTickets for Ticketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        PERIOD.as_secs() as u32
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let s = self.sealers();
        let mut nonce = [0; NONCE_LEN];
        aws_lc_rs::rand::fill(&mut nonce).ok()?;
        let period = s.keys.period.to_be_bytes();
        let mut out = Vec::with_capacity(PERIOD_LEN + NONCE_LEN + plain.len() + TAG_LEN);
        out.extend_from_slice(&period);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plain);
        let tag = s
            .current
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(period),
                &mut out[PERIOD_LEN + NONCE_LEN..],
            )
            .ok()?;
        out.extend_from_slice(tag.as_ref());
        Some(out)
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        if ticket.len() < PERIOD_LEN + NONCE_LEN + TAG_LEN {
            return None;
        }
        let (period, rest) = ticket.split_at(PERIOD_LEN);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let period_n = u64::from_be_bytes(period.try_into().ok()?);
        let s = self.sealers();
        let key = if period_n == s.keys.period {
            &s.current
        } else if period_n.checked_add(1) == Some(s.keys.period) {
            s.previous.as_ref()?
        } else {
            return None;
        };
        let mut buf = sealed.to_vec();
        let len =
            key.open_in_place(Nonce::try_assume_unique_for_key(nonce).ok()?, Aad::from(period), &mut buf).ok()?.len();
        buf.truncate(len);
        Some(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::server::ProducesTickets;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

    const HOUR: u64 = 3600;

    // Each test owns one clock: tests run on threads of one process.
    static CLOCK_A: AtomicU64 = AtomicU64::new(0);
    static CLOCK_B: AtomicU64 = AtomicU64::new(0);

    #[test]
    fn workers_forked_apart_open_each_others_tickets_across_one_period() {
        let start = 1000 * HOUR + 10;
        CLOCK_A.store(start, Relaxed);
        let mut master = TicketKeys::new(start).unwrap();
        let early = Ticketer::with_clock(master.clone(), || CLOCK_A.load(Relaxed));
        // The master steps on its tick; a worker forked two hours later starts there.
        master.advance(start + 2 * HOUR);
        let late = Ticketer::with_clock(master.clone(), || CLOCK_A.load(Relaxed));

        let t0 = early.encrypt(b"session 0").unwrap();
        assert_eq!(early.decrypt(&t0).unwrap(), b"session 0");
        CLOCK_A.store(start + HOUR, Relaxed);
        let t1 = early.encrypt(b"session 1").unwrap();
        assert_eq!(early.decrypt(&t0).unwrap(), b"session 0", "the previous period still opens");
        CLOCK_A.store(start + 2 * HOUR, Relaxed);
        // The late worker never saw periods 0 and 1 as current, yet agrees on period 1.
        assert_eq!(late.decrypt(&t1).unwrap(), b"session 1");
        assert_eq!(early.decrypt(&t1).unwrap(), b"session 1");
        assert!(late.decrypt(&t0).is_none() && early.decrypt(&t0).is_none(), "two periods old");
        let t2 = late.encrypt(b"session 2").unwrap();
        assert_eq!(early.decrypt(&t2).unwrap(), b"session 2");
    }

    #[test]
    fn forged_and_foreign_tickets_are_refused() {
        CLOCK_B.store(7 * HOUR, Relaxed);
        let a = Ticketer::with_clock(TicketKeys::new(7 * HOUR).unwrap(), || CLOCK_B.load(Relaxed));
        let b = Ticketer::with_clock(TicketKeys::new(7 * HOUR).unwrap(), || CLOCK_B.load(Relaxed));
        let t = a.encrypt(b"state").unwrap();
        assert!(b.decrypt(&t).is_none(), "another server's secret");
        for i in 0..t.len() {
            let mut bad = t.clone();
            bad[i] ^= 1;
            assert!(a.decrypt(&bad).is_none(), "flipped byte {i}");
        }
        for len in 0..t.len() {
            assert!(a.decrypt(&t[..len]).is_none());
        }
        let mut future = t.clone();
        future[..8].copy_from_slice(&u64::MAX.to_be_bytes());
        assert!(a.decrypt(&future).is_none());
        assert_ne!(a.encrypt(b"state").unwrap(), t, "a fresh nonce per ticket");
    }

    #[test]
    fn a_chain_crosses_to_another_node_whole() {
        let start = 500 * HOUR;
        let mut a = TicketKeys::new(start).unwrap();
        a.advance(start + HOUR);
        let b = TicketKeys::from_bytes(&a.to_bytes()).unwrap();
        assert_eq!((b.period, b.secret, b.key, b.previous), (a.period, a.secret, a.key, a.previous));
        assert!(a.same_chain(&b, start + 3 * HOUR));
        let mut behind = TicketKeys::from_bytes(&a.to_bytes()).unwrap();
        a.advance(start + 2 * HOUR);
        assert!(a.same_chain(&behind, start + 2 * HOUR), "a node a period behind is on the same chain");
        behind.advance(start + 2 * HOUR);
        assert_eq!(behind.previous, a.previous, "and opens the same previous period's tickets");
        assert!(!a.same_chain(&TicketKeys::new(start).unwrap(), start + 2 * HOUR));
        assert!(TicketKeys::from_bytes(&a.to_bytes()[1..]).is_none());
    }

    #[test]
    fn the_chain_is_deterministic_and_moves_only_forward() {
        let mut a = TicketKeys::from_secret([7; 32], 10);
        let mut b = TicketKeys::from_secret([7; 32], 10);
        a.advance(13 * HOUR);
        for h in 11..=13 {
            b.advance(h * HOUR);
        }
        assert_eq!((a.period, a.key, a.previous), (13, b.key, b.previous));
        let before = a.key;
        a.advance(2 * HOUR);
        assert_eq!((a.period, a.key), (13, before), "a clock that went back changes nothing");
        assert_ne!(a.key, TicketKeys::from_secret([7; 32], 13).key, "period 13's key comes from the chain");
    }
}
