//! What the whole pool of workers knows of each upstream server a proxy location
//! passes to: a table in shared memory that the master maps with the scoreboard,
//! before the first fork, and every worker reads and writes. A worker choosing an
//! upstream sees the connections the other workers hold to each (least connections),
//! the pool's turn (round robin), and whether the upstream is down for everyone (its
//! failures counted by all workers, nginx's `max_fails` in `fail_timeout`); the status
//! page and the metrics read the requests each upstream answered.
//!
//! An entry is found by a hash of the upstream's name (its URL without the path,
//! `http://10.0.0.1:8000` or `unix:/run/app.sock`), claimed by compare-and-swap on
//! first use, and kept for the master's life: a reload that keeps an upstream keeps
//! its counts, and the workers of two generations count into the same entry. Each
//! worker also counts the connections it holds in a row of its slot's, so that
//! when one dies holding some (killed by the watchdog while it waited on a slow
//! upstream, say) the master takes them back from the entries as it reaps it
//! ([`UpstreamTable::release`]), and least connections does not shun an upstream
//! for connections no one holds. What
//! to do with the counts (which upstream a request goes to, when one is down) is
//! `gateway::balance`'s to say; this is only the counting.

use std::sync::atomic::{AtomicU16, AtomicU64, AtomicUsize, Ordering::Relaxed};

use crate::base::sys;

/// Entries in the table: upstream servers (and round-robin turns, one per list of
/// upstreams) named by any config over the master's life, 32 KiB of shared memory.
/// An upstream past it is counted by each worker alone (said in the error log).
pub const ENTRIES: usize = 256;

/// Bits of the failures word that hold the count; the rest, when the first of them was.
const COUNT_SHIFT: u32 = 48;
const SINCE_MASK: u64 = (1 << COUNT_SHIFT) - 1;

/// One upstream (or one list's turn), on two cache lines of its own.
#[repr(C, align(128))]
pub struct Entry {
    /// A hash of the name; 0: free.
    key: AtomicU64,
    /// Connections the workers use to it now (a request written or its answer read).
    active: AtomicU64,
    /// Failures in the current window: the count, and the monotonic millisecond of
    /// the window's first failure.
    fails: AtomicU64,
    /// 0: up. Else the monotonic millisecond it is down until; once past, it is on
    /// probation: tried again, down again at its next failure, up at its next answer.
    down_until: AtomicU64,
    /// Answers by status class.
    answered: [AtomicU64; 5],
    /// Tries that got no answer (refused, broken off, silent past the timeout).
    failed: AtomicU64,
    /// A list's round-robin turn (an entry of its own, not an upstream's).
    turn: AtomicU64,
}

// SAFETY: only atomics, `repr(C)`, all-zero is a valid value (a free entry).
#[allow(unsafe_code)]
unsafe impl sys::SharedAtomic for Entry {}

/// One worker slot's row: the connections its worker holds to each entry.
#[repr(C)]
pub struct Held([AtomicU16; ENTRIES]);

// SAFETY: only atomics, `repr(C)`, all-zero is a valid value (nothing held).
#[allow(unsafe_code)]
unsafe impl sys::SharedAtomic for Held {}

/// The slot this process serves in (a worker's, set as it starts); `usize::MAX`:
/// none (the master, a test), whose connections no row counts.
static SLOT: AtomicUsize = AtomicUsize::new(usize::MAX);

/// This process is the worker in `slot`: its connections count in that slot's row.
pub fn serve_in_slot(slot: usize) {
    SLOT.store(slot, Relaxed);
}

/// A connection in use to an upstream, counted while it lives: in its entry's
/// `active`, and in the worker's row, from which the master takes it back should
/// the worker die holding it.
pub struct InUse {
    entry: &'static Entry,
    held: Option<&'static AtomicU16>,
}

impl Drop for InUse {
    fn drop(&mut self) {
        if let Some(h) = self.held {
            let _ = h.fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1));
        }
        self.entry.end();
    }
}

/// What a failure did to the upstream's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// Counted; not down (yet).
    Counted(u32),
    /// This failure marked it down (said once, by the process that did it).
    MarkedDown(u32),
    /// It was already down (another worker marked it meanwhile).
    AlreadyDown,
}

impl Entry {
    /// A connection to it is in use ([`InUse`] says when it no longer is).
    fn begin(&self) {
        self.active.fetch_add(1, Relaxed);
    }

    /// A connection to it is no longer in use.
    fn end(&self) {
        let _ = self.active.fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1));
    }

    pub fn active(&self) -> u64 {
        self.active.load(Relaxed)
    }

    /// 0: up; else down until (or, once past, on probation since) that millisecond.
    pub fn down_until(&self) -> u64 {
        self.down_until.load(Relaxed)
    }

    /// The next turn of a list (an entry that is one).
    pub fn next_turn(&self) -> u64 {
        self.turn.fetch_add(1, Relaxed)
    }

    /// It answered with `status`: counted, and its failures forgotten. True when
    /// this answer brought it back up (said once).
    pub fn answered(&self, status: u16) -> bool {
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        self.answered[class].fetch_add(1, Relaxed);
        if self.fails.load(Relaxed) != 0 {
            self.fails.store(0, Relaxed);
        }
        let down = self.down_until.load(Relaxed);
        down != 0 && self.down_until.compare_exchange(down, 0, Relaxed, Relaxed).is_ok()
    }

    /// A try failed at `now_ms`. `max_fails` of them within `window_ms` (or one, on
    /// probation) mark it down for `window_ms`; `max_fails` 0 never does.
    pub fn failed(&self, now_ms: u64, max_fails: u32, window_ms: u64) -> Failure {
        self.failed.fetch_add(1, Relaxed);
        let mut count = 0;
        let _ = self.fails.fetch_update(Relaxed, Relaxed, |w| {
            let (n, since) = (w >> COUNT_SHIFT, w & SINCE_MASK);
            let (n, since) =
                if n == 0 || now_ms.saturating_sub(since) >= window_ms { (1, now_ms) } else { (n + 1, since) };
            count = n.min(u64::from(u16::MAX)) as u32;
            Some((u64::from(count) << COUNT_SHIFT) | (since & SINCE_MASK))
        });
        let down = self.down_until.load(Relaxed);
        if down > now_ms {
            return Failure::AlreadyDown;
        }
        let probation = down != 0;
        if max_fails == 0 || (count < max_fails && !probation) {
            return Failure::Counted(count);
        }
        match self.down_until.compare_exchange(down, now_ms + window_ms, Relaxed, Relaxed) {
            Ok(_) => Failure::MarkedDown(count),
            Err(_) => Failure::AlreadyDown,
        }
    }
}

/// What the status page and the metrics show of one upstream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    pub name: String,
    /// Used only while every other one is down.
    pub backup: bool,
    /// Not marked down (up, or on probation).
    pub up: bool,
    /// Seconds left of its being down.
    pub down_for: u64,
    pub active: u64,
    /// Answers by status class (`counters::CLASSES`: 1xx to 5xx).
    pub answered: [u64; 5],
    /// Tries that got no answer.
    pub failed: u64,
}

/// The upstreams, in shared memory.
#[derive(Clone, Copy)]
pub struct UpstreamTable {
    entries: &'static [Entry],
    /// One row per worker slot.
    held: &'static [Held],
}

/// FNV-1a of the name, never 0.
fn key(name: &str) -> u64 {
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    h.max(1)
}

impl UpstreamTable {
    /// Maps an empty table, with a row for each of `slots` worker slots, shared
    /// with every process forked afterwards.
    pub fn map(slots: usize) -> std::io::Result<UpstreamTable> {
        Ok(UpstreamTable { entries: sys::map_shared::<Entry>(ENTRIES)?, held: sys::map_shared::<Held>(slots)? })
    }

    /// Counts a connection to `e` in use by the worker in `slot` (`None`: not a
    /// worker's) until the value is dropped.
    pub fn in_use(&self, e: &'static Entry, slot: Option<usize>) -> InUse {
        e.begin();
        // An entry of this process's own (the table full) has no place in a row.
        let at = std::ptr::from_ref(e).addr().wrapping_sub(self.entries.as_ptr().addr()) / size_of::<Entry>();
        let held = slot.and_then(|s| self.held.get(s)).filter(|_| at < ENTRIES).map(|row| &row.0[at]);
        if let Some(h) = held {
            h.fetch_add(1, Relaxed);
        }
        InUse { entry: e, held }
    }

    /// Counts a connection to `e` in use by this process (see [`serve_in_slot`]).
    pub fn in_use_here(&self, e: &'static Entry) -> InUse {
        let slot = SLOT.load(Relaxed);
        self.in_use(e, (slot != usize::MAX).then_some(slot))
    }

    /// The worker in `slot` is gone: the connections it still held (it was killed,
    /// or crashed) are no longer in use. Returns how many there were.
    pub fn release(&self, slot: usize) -> u64 {
        let Some(row) = self.held.get(slot) else { return 0 };
        let mut released = 0;
        for (e, h) in self.entries.iter().zip(&row.0) {
            let n = u64::from(h.swap(0, Relaxed));
            if n > 0 {
                let _ = e.active.fetch_update(Relaxed, Relaxed, |a| Some(a.saturating_sub(n)));
                released += n;
            }
        }
        released
    }

    /// The entry named `name`, claimed if it has none; `None` when the table is full.
    pub fn entry(&self, name: &str) -> Option<&'static Entry> {
        let k = key(name);
        // Linear probing from the hash: an entry once claimed is never freed, so a
        // name is found before the first free entry on its path.
        let start = (k as usize) % ENTRIES;
        for i in 0..ENTRIES {
            let e = &self.entries[(start + i) % ENTRIES];
            match e.key.compare_exchange(0, k, Relaxed, Relaxed) {
                Ok(_) => return Some(e),
                Err(found) if found == k => return Some(e),
                Err(_) => {}
            }
        }
        None
    }

    /// The entry named `name`, or (the table full) one of this process's own, so the
    /// upstream is still chosen, counted by this worker alone (said once per worker).
    pub fn entry_or_own(&self, name: &str) -> &'static Entry {
        self.entry(name).unwrap_or_else(|| {
            log::warn!("upstream {name}: the table of upstreams is full ({ENTRIES}): its state is this worker's own");
            let zero = || AtomicU64::new(0);
            Box::leak(Box::new(Entry {
                key: zero(),
                active: zero(),
                fails: zero(),
                down_until: zero(),
                answered: std::array::from_fn(|_| zero()),
                failed: zero(),
                turn: zero(),
            }))
        })
    }

    /// The entry named `name`, if it has one (never claims).
    pub fn find(&self, name: &str) -> Option<&'static Entry> {
        let k = key(name);
        let start = (k as usize) % ENTRIES;
        (0..ENTRIES)
            .map(|i| &self.entries[(start + i) % ENTRIES])
            .take_while(|e| e.key.load(Relaxed) != 0)
            .find(|e| e.key.load(Relaxed) == k)
    }

    /// What to show of the upstreams `names` (each with whether it is a backup) at
    /// `now_ms`; one never used yet shows as up with nothing counted.
    pub fn shown(&self, names: &[(String, bool)], now_ms: u64) -> Vec<Shown> {
        names
            .iter()
            .map(|(name, backup)| {
                let e = self.find(name);
                let down = e.map_or(0, Entry::down_until);
                Shown {
                    name: name.clone(),
                    backup: *backup,
                    up: down <= now_ms,
                    down_for: down.saturating_sub(now_ms).div_ceil(1000),
                    active: e.map_or(0, Entry::active),
                    answered: std::array::from_fn(|i| e.map_or(0, |e| e.answered[i].load(Relaxed))),
                    failed: e.map_or(0, |e| e.failed.load(Relaxed)),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_found_by_name_and_claimed_once() {
        assert_eq!(std::mem::size_of::<Entry>(), 128);
        let t = UpstreamTable::map(2).unwrap();
        assert!(t.find("http://a:1").is_none());
        let a = t.entry("http://a:1").unwrap();
        let b = t.entry("unix:/run/b.sock").unwrap();
        assert!(!std::ptr::eq(a, b));
        assert!(std::ptr::eq(t.entry("http://a:1").unwrap(), a));
        assert!(std::ptr::eq(t.find("http://a:1").unwrap(), a));
        a.begin();
        a.begin();
        a.end();
        b.end();
        assert_eq!((a.active(), b.active()), (1, 0), "never below zero");
        assert_eq!(a.next_turn(), 0);
        assert_eq!(a.next_turn(), 1);
    }

    #[test]
    fn what_a_dead_worker_held_is_taken_back() {
        let t = UpstreamTable::map(2).unwrap();
        let (a, b) = (t.entry("http://a:1").unwrap(), t.entry("http://b:1").unwrap());
        let kept = [t.in_use(a, Some(1)), t.in_use(a, Some(1)), t.in_use(b, Some(1))];
        let other = t.in_use(a, Some(0));
        let gone = t.in_use(b, Some(1));
        drop(gone);
        let not_a_worker = t.in_use(b, None);
        assert_eq!((a.active(), b.active()), (3, 2));
        // The worker in slot 1 is killed: its values are never dropped.
        std::mem::forget(kept);
        assert_eq!(t.release(1), 3);
        assert_eq!((a.active(), b.active()), (1, 1));
        assert_eq!(t.release(1), 0, "once");
        drop((other, not_a_worker));
        assert_eq!((a.active(), b.active()), (0, 0));
        assert_eq!(t.release(7), 0, "no such slot");
    }

    #[test]
    fn a_full_table_says_so() {
        let t = UpstreamTable::map(2).unwrap();
        for i in 0..ENTRIES {
            assert!(t.entry(&format!("http://h{i}:1")).is_some());
        }
        assert!(t.entry("http://one-more:1").is_none());
        assert!(t.entry("http://h7:1").is_some(), "those in it are still found");
    }

    #[test]
    fn max_fails_within_the_window_mark_it_down_for_the_window() {
        let t = UpstreamTable::map(2).unwrap();
        let e = t.entry("http://a:1").unwrap();
        assert_eq!(e.failed(1000, 3, 10_000), Failure::Counted(1));
        assert_eq!(e.failed(2000, 3, 10_000), Failure::Counted(2));
        // The window has passed: the count starts again.
        assert_eq!(e.failed(11_000, 3, 10_000), Failure::Counted(1));
        assert_eq!(e.failed(12_000, 3, 10_000), Failure::Counted(2));
        assert_eq!(e.failed(13_000, 3, 10_000), Failure::MarkedDown(3));
        assert_eq!(e.down_until(), 23_000);
        assert_eq!(e.failed(14_000, 3, 10_000), Failure::AlreadyDown);
        let shown = t.shown(&[("http://a:1".into(), false), ("http://new:1".into(), true)], 14_000);
        assert_eq!((shown[0].up, shown[0].down_for, shown[0].failed), (false, 9, 6));
        assert_eq!((shown[1].up, shown[1].backup, shown[1].failed), (true, true, 0));
        // On probation after the window: one failure marks it down again.
        assert_eq!(e.failed(23_500, 3, 10_000), Failure::MarkedDown(1));
        assert_eq!(e.down_until(), 33_500);
        // An answer on probation brings it back up, once.
        assert!(e.answered(200));
        assert!(!e.answered(503));
        assert_eq!(e.down_until(), 0);
        assert_eq!(e.failed(40_000, 3, 10_000), Failure::Counted(1), "failures forgotten");
        let s = &t.shown(&[("http://a:1".into(), false)], 40_000)[0];
        assert_eq!((s.up, s.answered), (true, [0, 1, 0, 0, 1]));
        assert_eq!(e.failed(40_001, 0, 10_000), Failure::Counted(2), "max_fails 0: never down");
    }
}
