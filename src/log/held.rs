//! Access-log records held back in a worker (`[[access_log]] buffer`), and the one
//! thing that may touch them from a signal handler: writing them out when a `TERM`
//! (fast stop, or the master's death) ends the process.
//!
//! Each buffered log owns a fixed buffer that never moves or grows, and publishes
//! three facts about it in a [`TermWrite`]: its descriptor, where the buffer is, and
//! how many bytes of it hold whole records. Records are copied in first and counted
//! after, so the handler ([`sys::write_on_term`]) only ever sees whole records.
//! Writing the buffer out (or swapping the descriptor on a reopen) happens with
//! `TERM` blocked, so the handler runs before (and writes the records itself) or
//! after (and finds none): never both, never neither.

use std::sync::atomic::Ordering::Release;

use crate::sys::{self, TermBlocked, TermWrite};

/// One buffered log: the records waiting for their `write()`.
pub struct Held {
    buf: Box<[u8]>,
    len: usize,
    /// When the oldest waiting record came (`scoreboard::now_ms`).
    since_ms: u64,
    shared: &'static TermWrite,
}

impl Held {
    /// Free room.
    pub fn room(&self) -> usize {
        self.buf.len() - self.len
    }

    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How long ago the oldest waiting record came.
    pub fn age_ms(&self, now_ms: u64) -> u64 {
        now_ms.saturating_sub(self.since_ms)
    }

    /// Copies one whole record in (the caller made room).
    pub fn push(&mut self, record: &[u8], now_ms: u64) {
        if self.len == 0 {
            self.since_ms = now_ms;
        }
        self.buf[self.len..self.len + record.len()].copy_from_slice(record);
        self.len += record.len();
        self.shared.len.store(self.len, Release);
    }

    /// Hands the waiting records, if any, to `write` (one call) and forgets them,
    /// with `TERM` held off meanwhile.
    pub fn drain(&mut self, write: impl FnOnce(&[u8])) {
        if self.len == 0 {
            return;
        }
        let _quiet = TermBlocked::hold();
        write(&self.buf[..self.len]);
        self.len = 0;
        self.shared.len.store(0, Release);
    }

    /// The log's descriptor changed (reopened).
    pub fn set_fd(&self, fd: i32) {
        let _quiet = TermBlocked::hold();
        self.shared.fd.store(fd, Release);
    }
}

/// Makes `sizes.len()` buffers (for descriptors `fds`) and arranges for `TERM` to
/// write what they hold before the process ends. Call once per process, before any
/// record; a worker is single-threaded, which the handler relies on.
pub fn install(sizes: &[usize], fds: &[i32]) -> Vec<Held> {
    let shared: &'static [TermWrite] =
        Box::leak(fds.iter().map(|&fd| TermWrite::new(fd)).collect::<Vec<_>>().into_boxed_slice());
    let held = sizes
        .iter()
        .zip(shared)
        .map(|(&size, shared)| {
            let mut buf = vec![0u8; size].into_boxed_slice();
            shared.buf.store(buf.as_mut_ptr(), Release);
            Held { buf, len: 0, since_ms: 0, shared }
        })
        .collect();
    sys::write_on_term(shared);
    held
}
