//! What the master knows of each ACME certificate and the workers show (status page,
//! metrics): when it is next asked for and how many tries failed in a row. A small
//! table in shared memory, mapped before the first fork; the master writes it on its
//! tick, the workers read it. A reader may see the two numbers of an entry from two
//! different ticks: they are shown, never acted on.

use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// ACME vhosts shown; more are served and renewed, only not shown.
pub const ENTRIES: usize = 128;

#[repr(C)]
pub struct Entry {
    /// A hash of the vhost's first name; 0: free.
    key: AtomicU64,
    /// Unix seconds.
    next: AtomicU64,
    failures: AtomicU64,
}

// SAFETY: only atomics, `repr(C)`, all-zero is a valid (free) entry.
#[allow(unsafe_code)]
unsafe impl crate::base::sys::SharedAtomic for Entry {}

static TABLE: OnceLock<&'static [Entry]> = OnceLock::new();

/// Maps the table (once, in the master, before any fork).
pub fn map() -> std::io::Result<()> {
    if TABLE.get().is_none() {
        let _ = TABLE.set(crate::base::sys::map_shared::<Entry>(ENTRIES)?);
    }
    Ok(())
}

/// FNV-1a of the name, never 0.
fn key(name: &str) -> u64 {
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    h.max(1)
}

/// What the table says of a vhost: when its certificate is next asked for (Unix
/// seconds), and the failures in a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shown {
    pub next: i64,
    pub failures: u32,
}

fn put(table: &[Entry], name: &str, shown: Shown) {
    let k = key(name);
    let slot =
        table.iter().find(|e| e.key.load(Acquire) == k).or_else(|| table.iter().find(|e| e.key.load(Relaxed) == 0));
    if let Some(e) = slot {
        e.next.store(shown.next as u64, Relaxed);
        e.failures.store(u64::from(shown.failures), Relaxed);
        e.key.store(k, Release);
    }
}

fn get(table: &[Entry], name: &str) -> Option<Shown> {
    let k = key(name);
    let e = table.iter().find(|e| e.key.load(Acquire) == k)?;
    Some(Shown { next: e.next.load(Relaxed) as i64, failures: e.failures.load(Relaxed) as u32 })
}

/// The master: the state of the vhost whose first name is `name`.
pub fn set(name: &str, shown: Shown) {
    if let Some(t) = TABLE.get() {
        put(t, name, shown);
    }
}

/// The workers: what the master last said of `name`.
pub fn lookup(name: &str) -> Option<Shown> {
    get(TABLE.get()?, name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_then_lookup_by_name() {
        let table: Vec<Entry> = (0..4)
            .map(|_| Entry { key: AtomicU64::new(0), next: AtomicU64::new(0), failures: AtomicU64::new(0) })
            .collect();
        put(&table, "a.example", Shown { next: 100, failures: 0 });
        put(&table, "b.example", Shown { next: 200, failures: 2 });
        put(&table, "a.example", Shown { next: 150, failures: 1 });
        assert_eq!(get(&table, "a.example"), Some(Shown { next: 150, failures: 1 }));
        assert_eq!(get(&table, "b.example"), Some(Shown { next: 200, failures: 2 }));
        assert_eq!(get(&table, "c.example"), None);
        assert_eq!(table.iter().filter(|e| e.key.load(Relaxed) != 0).count(), 2);
        assert_ne!(key(""), 0);
    }
}
