//! What the master knows of the fleet and the workers show (status page, metrics):
//! whether Redis answers, since when, and when the ticket keys were last taken from
//! or given to the fleet. One entry in shared memory, mapped before the first fork,
//! written by the master on its tick.

use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

#[repr(C)]
pub struct Entry {
    /// [`Link`] as a number; 0: no `[cluster]`.
    link: AtomicU64,
    /// Unix seconds of the last change of `link`.
    since: AtomicU64,
    /// Unix seconds when this node last agreed with the fleet on the ticket keys.
    tickets: AtomicU64,
    /// Failed tries in a row while down.
    tries: AtomicU64,
}

// SAFETY: only atomics, `repr(C)`, all-zero is a valid entry (no `[cluster]`).
#[allow(unsafe_code)]
unsafe impl crate::sys::SharedAtomic for Entry {}

static ENTRY: OnceLock<&'static Entry> = OnceLock::new();

/// The link to Redis as shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Not tried yet.
    Unknown = 1,
    Up = 2,
    Down = 3,
}

/// Maps the entry (once, in the master, before any fork).
pub fn map() -> std::io::Result<()> {
    if ENTRY.get().is_none() {
        let _ = ENTRY.set(&crate::sys::map_shared::<Entry>(1)?[0]);
    }
    Ok(())
}

/// The master: the link now (`None`: no `[cluster]`) and the failed tries in a row,
/// at `now`.
pub fn set_link(link: Option<Link>, tries: u32, now: i64) {
    if let Some(e) = ENTRY.get() {
        let n = link.map_or(0, |l| l as u64);
        if e.link.swap(n, Relaxed) != n {
            e.since.store(now.max(0) as u64, Relaxed);
        }
        e.tries.store(u64::from(tries), Relaxed);
    }
}

/// The master: the ticket keys agree with the fleet's at `now`.
pub fn set_tickets(now: i64) {
    if let Some(e) = ENTRY.get() {
        e.tickets.store(now.max(0) as u64, Relaxed);
    }
}

/// What the workers show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shown {
    pub link: Link,
    pub since: i64,
    /// 0: never yet.
    pub tickets: i64,
    /// Failed tries in a row while down.
    pub tries: u32,
}

/// The workers: what the master last said; `None` without `[cluster]`.
pub fn lookup() -> Option<Shown> {
    let e = ENTRY.get()?;
    let link = match e.link.load(Relaxed) {
        1 => Link::Unknown,
        2 => Link::Up,
        3 => Link::Down,
        _ => return None,
    };
    Some(Shown {
        link,
        since: e.since.load(Relaxed) as i64,
        tickets: e.tickets.load(Relaxed) as i64,
        tries: e.tries.load(Relaxed) as u32,
    })
}

impl Link {
    pub fn word(self) -> &'static str {
        match self {
            Link::Unknown => "unknown",
            Link::Up => "up",
            Link::Down => "down",
        }
    }
}
