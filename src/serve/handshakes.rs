//! The TLS handshakes a worker has under way: counted as sessions begin and end
//! theirs, with a hook through which the worker hears when its first one begins and
//! its last one ends.
//!
//! A worker that runs under `SCHED_BATCH` (`workers.sched_batch`) waits, once woken,
//! for the running task's slice instead of preempting it. Between the requests of a
//! kept-alive client that saves switches; a handshake is a conversation, and each
//! turn of it that waits for a slice lengthens it: a resumed handshake wakes the
//! worker twice (its ClientHello, then its Finished with the request) where a plain
//! request wakes it once. So the worker leaves `SCHED_BATCH` while a handshake is
//! under way (`crate::worker` sets the hook). This module only counts: it knows
//! nothing of processes.

use std::cell::Cell;

thread_local! {
    /// Handshakes under way in this worker (its one thread; a test's own thread).
    static UNDER_WAY: Cell<usize> = const { Cell::new(0) };
    /// Called with `true` when the first handshake begins, `false` when the last ends.
    static HOOK: Cell<Option<fn(bool)>> = const { Cell::new(None) };
}

/// Sets what the worker does when its first handshake begins (`true`) and its last
/// one ends (`false`).
pub fn on_first_and_last(hook: fn(bool)) {
    HOOK.set(Some(hook));
}

/// One handshake under way: from the accept of its connection to the end of its
/// handshake, or the connection's close, whichever comes first (the value dropped).
#[derive(Debug)]
pub(crate) struct UnderWay(());

impl UnderWay {
    pub(crate) fn begin() -> UnderWay {
        let before = UNDER_WAY.get();
        UNDER_WAY.set(before + 1);
        if before == 0
            && let Some(hook) = HOOK.get()
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
        if left == 0
            && let Some(hook) = HOOK.get()
        {
            hook(false);
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
    fn the_hook_hears_the_first_handshake_begin_and_the_last_end() {
        let unheard = UnderWay::begin();
        drop(unheard);
        on_first_and_last(|any| HEARD.with_borrow_mut(|h| h.push(any)));
        assert_eq!(heard(), [false; 0]);
        let a = UnderWay::begin();
        assert_eq!(heard(), [true]);
        let b = UnderWay::begin();
        drop(a);
        let c = UnderWay::begin();
        assert_eq!(heard(), [false; 0], "one under way all along");
        drop(c);
        drop(b);
        assert_eq!(heard(), [false]);
        drop(UnderWay::begin());
        assert_eq!(heard(), [true, false]);
    }
}
