//! The clients whose logins keep failing, counted once for the whole server: a table
//! in shared memory that the master maps with the scoreboard, before the first fork,
//! and every worker reads and writes. A client whose guesses land on several workers
//! (a new connection each, or a kept one moved) meets one count, not one per worker.
//! What a count costs the client (the 429 and its `Retry-After`) and which addresses
//! are one client (an IPv6 /64) are `rules::basic`'s to say; this is only the
//! counting.
//!
//! Each client is one word, changed by compare-and-swap alone: a 16-bit tag of its
//! key, its failures in a row (8 bits, saturating) and the monotonic millisecond of
//! the last one (40 bits: 34 years of uptime; the monotonic clock is the same in every
//! process, [`crate::base::clock`]). A key picks a set of [`WAYS`] words by a hash seeded
//! with random bytes the master draws when it maps the table, so no one can choose
//! addresses that fall on another client's set. A new client takes a free word of
//! its set, else one whose failures are forgotten, else the one whose last failure
//! is oldest: a crowd wider than the table pushes out the oldest failers, who start
//! afresh. Two keys with the same set and tag share a count (one chance in 65536 for
//! two clients of one set): they slow each other, nothing worse.

use std::hash::Hasher;
use std::io::{self, Read};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::base::sys;

/// Words in the table: as many clients failing at once (within the time their
/// failures are remembered) as it remembers, 128 KiB of shared memory whatever
/// `workers.max` is. Every client that fails counts, so this bounds how many
/// distinct failing clients (IPv4 addresses, IPv6 /64s) the server can tell apart;
/// past it the oldest are forgotten first.
pub const FAILURE_WORDS: usize = 16 * 1024;

/// Words a key may use: one 64-byte cache line, read whole on each look-up.
pub const WAYS: usize = 8;

/// Tries of a change that other processes keep changing first, before the failure
/// goes uncounted (a count lost under such contention only gives one more guess).
const TRIES: usize = 16;

const COUNT_BITS: u32 = 8;
const TIME_BITS: u32 = 40;
const TIME_MASK: u64 = (1 << TIME_BITS) - 1;
const COUNT_MAX: u64 = (1 << COUNT_BITS) - 1;

/// The failing clients, in the scoreboard's shared memory.
#[repr(C)]
pub struct FailureTable {
    /// Page-aligned by the mapping: each set of [`WAYS`] words is one cache line.
    words: [AtomicU64; FAILURE_WORDS],
    /// The hash's key, drawn by the master before the first fork.
    seed: [AtomicU64; 2],
}

// SAFETY: only atomics, `repr(C)`, all-zero is a valid value (an empty table).
#[allow(unsafe_code)]
unsafe impl sys::SharedAtomic for FailureTable {}

/// What the table holds of one client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failing {
    /// Failures in a row (at most 255).
    pub count: u32,
    /// Monotonic milliseconds of the last one.
    pub last_ms: u64,
}

fn pack(tag: u16, count: u64, at_ms: u64) -> u64 {
    (u64::from(tag) << (COUNT_BITS + TIME_BITS)) | (count.min(COUNT_MAX) << TIME_BITS) | (at_ms & TIME_MASK)
}

fn tag_of(word: u64) -> u16 {
    (word >> (COUNT_BITS + TIME_BITS)) as u16
}

fn unpack(word: u64) -> Failing {
    Failing { count: ((word >> TIME_BITS) & COUNT_MAX) as u32, last_ms: word & TIME_MASK }
}

impl FailureTable {
    /// Maps an empty table, shared with every process forked afterwards, and seeds
    /// its hash.
    pub fn map() -> io::Result<&'static FailureTable> {
        let table = &sys::map_shared::<FailureTable>(1)?[0];
        let mut bytes = [0u8; 16];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
        let (a, b) = bytes.split_at(8);
        table.seed[0].store(u64::from_le_bytes(a.try_into().expect("8 bytes")), Relaxed);
        table.seed[1].store(u64::from_le_bytes(b.try_into().expect("8 bytes")), Relaxed);
        Ok(table)
    }

    /// The set of `key` (its words) and its tag (never 0: a zero word is free).
    fn place(&self, key: u128) -> (&[AtomicU64], u16) {
        let mut h = std::hash::DefaultHasher::new();
        h.write_u64(self.seed[0].load(Relaxed));
        h.write_u64(self.seed[1].load(Relaxed));
        h.write_u128(key);
        let h = h.finish();
        let set = (h as usize) % (FAILURE_WORDS / WAYS);
        let tag = ((h >> 48) as u16).max(1);
        (&self.words[set * WAYS..(set + 1) * WAYS], tag)
    }

    /// What the table holds of `key`, if anything.
    pub fn get(&self, key: u128) -> Option<Failing> {
        let (set, tag) = self.place(key);
        set.iter().map(|w| w.load(Relaxed)).find(|&v| v != 0 && tag_of(v) == tag).map(unpack)
    }

    /// `key` failed at `now_ms`: one more in a row, or the first after failures
    /// older than `forget_ms`. Returns the count now.
    pub fn failed(&self, key: u128, now_ms: u64, forget_ms: u64) -> u32 {
        let (set, tag) = self.place(key);
        let forgotten = |v: u64| now_ms.saturating_sub(unpack(v).last_ms) >= forget_ms;
        for _ in 0..TRIES {
            let seen: [u64; WAYS] = std::array::from_fn(|i| set[i].load(Relaxed));
            let (at, old, count) = match seen.iter().position(|&v| v != 0 && tag_of(v) == tag) {
                Some(i) if !forgotten(seen[i]) => (i, seen[i], u64::from(unpack(seen[i]).count) + 1),
                Some(i) => (i, seen[i], 1),
                None => {
                    // A free word, else a forgotten one, else the oldest failure's.
                    let free = seen.iter().position(|&v| v == 0);
                    let stale = || seen.iter().position(|&v| forgotten(v));
                    let oldest = || (0..WAYS).min_by_key(|&i| unpack(seen[i]).last_ms).unwrap_or(0);
                    let i = free.or_else(stale).unwrap_or_else(oldest);
                    (i, seen[i], 1)
                }
            };
            if set[at].compare_exchange(old, pack(tag, count, now_ms), Relaxed, Relaxed).is_ok() {
                return count.min(COUNT_MAX) as u32;
            }
        }
        0
    }

    /// `key` logged in: its failures are forgotten.
    pub fn forget(&self, key: u128) {
        let (set, tag) = self.place(key);
        for w in set {
            let v = w.load(Relaxed);
            if v != 0 && tag_of(v) == tag {
                let _ = w.compare_exchange(v, 0, Relaxed, Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FORGET: u64 = 600_000;

    #[test]
    fn words_pack_and_unpack() {
        let w = pack(0xbeef, 7, 123_456_789);
        assert_eq!((tag_of(w), unpack(w)), (0xbeef, Failing { count: 7, last_ms: 123_456_789 }));
        assert_eq!(unpack(pack(1, 1000, 0)).count, 255, "saturates");
        assert_eq!(std::mem::size_of::<FailureTable>(), FAILURE_WORDS * 8 + 16);
    }

    #[test]
    fn failures_count_in_a_row_until_forgotten_or_forgiven() {
        let t = FailureTable::map().unwrap();
        let (me, other) = (1u128, 2u128);
        assert_eq!(t.get(me), None);
        for n in 1..=3 {
            assert_eq!(t.failed(me, 1000 + n, FORGET), n as u32);
        }
        assert_eq!(t.get(me), Some(Failing { count: 3, last_ms: 1003 }));
        assert_eq!(t.get(other), None, "another client");
        assert_eq!(t.failed(me, 1003 + FORGET, FORGET), 1, "after a long quiet, the first again");
        t.forget(me);
        assert_eq!(t.get(me), None);
    }

    #[test]
    fn a_full_table_lets_the_oldest_failers_go() {
        let t = FailureTable::map().unwrap();
        // Far more clients than words: each failing once, at a later time.
        let n = FAILURE_WORDS as u128 * 2;
        for key in 0..n {
            t.failed(key, 10 + key as u64, FORGET);
        }
        // The latest are all there; most of the first half was pushed out.
        let recent = (n - 100..n).filter(|&k| t.get(k).is_some()).count();
        assert!(recent >= 99, "{recent} of the last 100");
        let old = (0..1000).filter(|&k| t.get(k).is_some()).count();
        assert!(old < 100, "{old} of the first 1000 still there");
        // A client failing again keeps its count while newcomers arrive.
        let me = n + 1;
        for i in 0..5 {
            t.failed(me, 1_000_000 + i, FORGET);
        }
        for key in n + 2..n + 2 + FAILURE_WORDS as u128 / 4 {
            t.failed(key, 999_000, FORGET);
        }
        assert_eq!(t.get(me).map(|f| f.count), Some(5), "not the oldest in its set");
    }

    #[test]
    fn two_tables_hash_apart() {
        let (a, b) = (FailureTable::map().unwrap(), FailureTable::map().unwrap());
        let spread = (0..64u128).filter(|&k| a.place(k).1 != b.place(k).1).count();
        assert!(spread > 60, "seeded: {spread}");
    }
}
