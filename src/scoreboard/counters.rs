//! What the workers and the master count for the metrics page, kept in the
//! scoreboard: each worker in its own slot ([`Traffic`]) as it answers, the master
//! in the header ([`PoolEvents`]) as it forks, reaps and reloads. A slot has one
//! writer, so a worker's counters are plain loads and stores ([`add`]), not
//! locked read-modify-writes; a slot's counters outlive the worker in it (a new
//! worker goes on from them), so every sum only grows until the server restarts, as
//! a Prometheus counter must. [`crate::kinds::metrics::render`] sums and renders them.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// The `method` label's values: the methods a browser or a client library sends, and
/// `other` for the rest (a label must not take whatever a client writes there).
pub const METHODS: [&str; 8] = ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "other"];

/// The `code` label's values: status classes, as nginx's and Apache's exporters give them.
pub const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];

/// Upper bounds of the request-duration buckets, in microseconds: from 100 µs (a
/// cached file over loopback takes tens) to 10 s (a large file to a slow client),
/// about three to a decade.
pub const BUCKETS_US: [u64; 16] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000,
    5_000_000, 10_000_000,
];

/// The index of a method in [`METHODS`].
#[inline]
pub fn method_index(method: &[u8]) -> usize {
    match method {
        b"GET" => 0,
        b"HEAD" => 1,
        b"POST" => 2,
        b"PUT" => 3,
        b"DELETE" => 4,
        b"OPTIONS" => 5,
        b"PATCH" => 6,
        _ => 7,
    }
}

/// The index of a status's class in [`CLASSES`].
#[inline]
fn class_index(status: u16) -> usize {
    usize::from(status / 100).clamp(1, CLASSES.len()) - 1
}

/// The index of the bucket that `us` falls in (the last: above every bound).
#[inline]
fn bucket_index(us: u64) -> usize {
    // Most answers fall in the first bucket: a scan from the bottom ends at once.
    BUCKETS_US.iter().position(|&b| us <= b).unwrap_or(BUCKETS_US.len())
}

/// One answered request, as the metrics count it.
#[derive(Debug, Clone, Copy)]
pub struct Outcome<'a> {
    /// The method as the client sent it.
    pub method: &'a [u8],
    pub status: u16,
    /// Bytes written, head and body.
    pub bytes: u64,
    /// From the whole head to the last byte handed to the kernel.
    pub duration: Duration,
    /// A file was sent: from the worker's file cache (true) or opened for it (false).
    pub cached: Option<bool>,
    /// Refused before it was read whole (400, 408, 413, 431, 501 …): not in the
    /// status page's request count, which is Apache's.
    pub refused: bool,
}

/// A worker's counters, in its scoreboard slot.
#[repr(C)]
pub struct Traffic {
    /// By method and status class.
    pub(crate) requests: [[AtomicU64; CLASSES.len()]; METHODS.len()],
    /// Request durations by bucket (not cumulative: the page adds them up).
    pub(crate) durations: [AtomicU64; BUCKETS_US.len() + 1],
    pub(crate) duration_us: AtomicU64,
    /// Bytes of refused requests' answers (the slot's `bytes` has the others).
    pub(crate) refused_bytes: AtomicU64,
    pub(crate) cache_hits: AtomicU64,
    pub(crate) cache_misses: AtomicU64,
    /// Writes to an access log that failed (their records are lost).
    pub log_write_errors: AtomicU64,
}

impl Traffic {
    /// Counts one answered request. Only the worker in the slot calls this.
    #[inline]
    pub fn count(&self, o: &Outcome<'_>) {
        add(&self.requests[method_index(o.method)][class_index(o.status)], 1);
        let us = o.duration.as_secs().saturating_mul(1_000_000) + u64::from(o.duration.subsec_micros());
        add(&self.durations[bucket_index(us)], 1);
        add(&self.duration_us, us);
        if o.refused {
            add(&self.refused_bytes, o.bytes);
        }
        match o.cached {
            Some(true) => add(&self.cache_hits, 1),
            Some(false) => add(&self.cache_misses, 1),
            None => {}
        }
    }
}

/// Why a worker ended, for `pika_worker_exits_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum ExitCause {
    /// Left when asked: pipe of death, reload, graceful stop.
    Retired,
    /// Served `workers.max_requests`.
    MaxRequests,
    /// Exited short of a resource (descriptors, memory).
    Sick,
    /// Could not start.
    Fatal,
    /// Stopped by the master's watchdog: no progress for `request_timeout`.
    Stuck,
    /// Stopped by the master in a fast stop.
    Stopped,
    /// Killed by a signal the master did not send (a crash, the OOM killer).
    Signal,
    /// Exited with a code no worker gives.
    Code,
}

impl ExitCause {
    pub const ALL: [ExitCause; 8] = [
        ExitCause::Retired,
        ExitCause::MaxRequests,
        ExitCause::Sick,
        ExitCause::Fatal,
        ExitCause::Stuck,
        ExitCause::Stopped,
        ExitCause::Signal,
        ExitCause::Code,
    ];

    /// The `cause` label.
    pub fn name(self) -> &'static str {
        match self {
            ExitCause::Retired => "retired",
            ExitCause::MaxRequests => "max_requests",
            ExitCause::Sick => "sick",
            ExitCause::Fatal => "fatal",
            ExitCause::Stuck => "stuck",
            ExitCause::Stopped => "stopped",
            ExitCause::Signal => "signal",
            ExitCause::Code => "exit_code",
        }
    }
}

/// What the master counts, in the scoreboard's header.
#[repr(C)]
pub struct PoolEvents {
    /// Workers forked.
    pub starts: AtomicU64,
    /// Workers reaped, by [`ExitCause`].
    pub(crate) exits: [AtomicU64; ExitCause::ALL.len()],
    pub reloads: AtomicU64,
    /// Reloads refused (the config did not load): the old one kept serving.
    pub reloads_failed: AtomicU64,
}

impl PoolEvents {
    pub fn exited(&self, cause: ExitCause) {
        self.exits[cause as usize].fetch_add(1, Relaxed);
    }

    pub fn exits(&self, cause: ExitCause) -> u64 {
        self.exits[cause as usize].load(Relaxed)
    }
}

/// Adds `n` to a counter that only this process writes (a worker's own slot, the
/// master's header): a load and a store, without the locked read-modify-write that
/// `fetch_add` costs on every request. Readers see the old value or the new one.
#[inline]
pub fn add(counter: &AtomicU64, n: u64) {
    counter.store(counter.load(Relaxed).wrapping_add(n), Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_stay_in_their_sets() {
        assert_eq!(METHODS[method_index(b"GET")], "GET");
        assert_eq!(METHODS[method_index(b"PATCH")], "PATCH");
        assert_eq!(METHODS[method_index(b"PROPFIND")], "other");
        assert_eq!(METHODS[method_index(b"get")], "other", "methods are case-sensitive");
        assert_eq!(METHODS[method_index(b"")], "other");
        for (status, class) in [(100, "1xx"), (200, "2xx"), (304, "3xx"), (404, "4xx"), (599, "5xx"), (0, "1xx")] {
            assert_eq!(CLASSES[class_index(status)], class, "{status}");
        }
    }

    #[test]
    fn buckets_hold_what_is_at_most_their_bound() {
        assert_eq!(bucket_index(0), 0);
        assert_eq!(bucket_index(100), 0);
        assert_eq!(bucket_index(101), 1);
        assert_eq!(bucket_index(10_000_000), BUCKETS_US.len() - 1);
        assert_eq!(bucket_index(10_000_001), BUCKETS_US.len(), "+Inf");
        assert!(BUCKETS_US.windows(2).all(|w| w[0] < w[1]));
    }
}
