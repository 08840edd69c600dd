//! The TLS handshakes a worker has under way: counted as sessions begin and end
//! theirs, with a hook through which the worker hears when its first one begins
//! and when, its last one ended, none has come for [`QUIET_MS`] ([`settle`]).
//!
//! A worker that runs under `SCHED_BATCH` (`workers.sched_batch`) waits, once woken,
//! for the running task's slice instead of preempting it. Between the requests of a
//! kept-alive client that saves switches; a handshake is a conversation, and each
//! turn of it that waits for a slice lengthens it: a resumed handshake wakes the
//! worker twice (its ClientHello, then its Finished with the request) where a plain
//! request wakes it once. So the worker leaves `SCHED_BATCH` while handshakes come
//! (`crate::worker` sets the hook). Going back at the end of each one cost more than
//! the slices it saved: with a resumed handshake a connection (`wrk -c20`, one request
//! each) the worker flipped back and forth, and wrk spent half as much again of its
//! CPU on each request (360 against 250 µs): 4,000 req/s against 5,400-5,600 with
//! the worker kept under the normal policy (`docs/scaling.md`). This module only
//! counts: it knows nothing of processes.

use std::cell::Cell;

thread_local! {
    /// Handshakes under way in this worker (its one thread; a test's own thread).
    static UNDER_WAY: Cell<usize> = const { Cell::new(0) };
    /// Called with `true` when a handshake begins while none came for a while,
    /// `false` once none has come for [`QUIET_MS`].
    static HOOK: Cell<Option<fn(bool)>> = const { Cell::new(None) };
    /// The hook was last told `true`.
    static TOLD: Cell<bool> = const { Cell::new(false) };
    /// When the last handshake ended (`clock::now_ms`), none under way since.
    static ENDED_MS: Cell<u64> = const { Cell::new(0) };
}

/// How long after its last handshake ended a worker keeps what the hook's `true`
/// set: the connections of an HTTPS site come closer together than that, and each
/// keeps the worker as it was.
pub const QUIET_MS: u64 = 1000;

/// Sets what the worker does when a handshake begins after a quiet time (`true`)
/// and when none has come for [`QUIET_MS`] (`false`).
pub fn on_handshakes_coming(hook: fn(bool)) {
    HOOK.set(Some(hook));
}

/// The worker's once-a-second look (`now_ms`, the clock's): tells the hook `false`
/// once no handshake is under way and none ended for [`QUIET_MS`].
pub fn settle(now_ms: u64) {
    if TOLD.get() && UNDER_WAY.get() == 0 && now_ms >= ENDED_MS.get().saturating_add(QUIET_MS) {
        TOLD.set(false);
        if let Some(hook) = HOOK.get() {
            hook(false);
        }
    }
}

/// One handshake under way: from the accept of its connection to the end of its
/// handshake, or the connection's close, whichever comes first (the value dropped).
#[derive(Debug)]
pub(crate) struct UnderWay(());

impl UnderWay {
    pub(crate) fn begin() -> UnderWay {
        UNDER_WAY.set(UNDER_WAY.get() + 1);
        if let Some(hook) = HOOK.get()
            && !TOLD.replace(true)
        {
            hook(true);
        }
        UnderWay(())
    }
}

impl Drop for UnderWay {
    fn drop(&mut self) {
        let left = UNDER_WAY.get().saturating_sub(1);
        UNDER_WAY.set(left);
        if left == 0 {
            ENDED_MS.set(crate::base::clock::now_ms());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static HEARD: std::cell::RefCell<Vec<bool>> = const { std::cell::RefCell::new(Vec::new()) };
    }

    fn heard() -> Vec<bool> {
        HEARD.with_borrow_mut(std::mem::take)
    }

    #[test]
    fn the_hook_hears_the_first_handshake_begin_and_a_quiet_time_after_the_last() {
        let unheard = UnderWay::begin();
        drop(unheard);
        settle(u64::MAX);
        on_handshakes_coming(|any| HEARD.with_borrow_mut(|h| h.push(any)));
        assert_eq!(heard(), [false; 0]);
        let a = UnderWay::begin();
        assert_eq!(heard(), [true]);
        let b = UnderWay::begin();
        drop(a);
        let c = UnderWay::begin();
        assert_eq!(heard(), [false; 0], "one under way all along");
        drop(c);
        settle(u64::MAX);
        assert_eq!(heard(), [false; 0], "one still under way");
        drop(b);
        let ended = ENDED_MS.get();
        settle(ended + QUIET_MS - 1);
        assert_eq!(heard(), [false; 0], "not quiet long enough");
        // The next handshake within the quiet time: nothing to say either way.
        drop(UnderWay::begin());
        assert_eq!(heard(), [false; 0]);
        let ended = ENDED_MS.get();
        settle(ended + QUIET_MS);
        assert_eq!(heard(), [false]);
        settle(u64::MAX);
        drop(UnderWay::begin());
        assert_eq!(heard(), [true], "said once each way");
    }
}
