//! Each client's connections on one event loop: the loop of the CPU its packets
//! come in on.
//!
//! A kept-alive client that runs several threads (wrk, a browser, a load
//! balancer's connection pool) spreads its connections over the loops that
//! accepted them, so each loop answers every thread and each thread waits on every
//! loop: every answer wakes a task on the other CPU, and the scheduler cannot put a
//! loop beside the client it serves. Measured on 2 cores with `wrk -t2 -c10`: a
//! loop per client thread (two servers, one wrk thread each) served 243-265k
//! requests a second with a p99 of 0.1-1.5 ms, unbound, where one server's two
//! loops shared by both threads served 100-120k with a p99 of 1.0-1.7 ms
//! (`docs/scaling.md`, "A client's connections on one loop").
//!
//! So after a connection's first answer, while it waits for its next request, its
//! loop reads the CPU its packets came in on (`SO_INCOMING_CPU`: over loopback the
//! CPU the client sent from, over a network card the CPU its receive queue
//! interrupts) and, if that CPU is another loop's ([`home`]), sends the
//! connection there over that loop's own socket pair (the master makes one per
//! loop; the connection travels as a hand-over does). A client thread's
//! connections then share a loop, wherever the scheduler puts the two. The map
//! from CPUs to loops is fixed, so every loop sends a CPU's connections to the
//! same one; a connection is looked at once, as the CPU a client sends from moves
//! with it and its connections move together. A loop takes one while it holds at
//! most one more than the sender ([`may_take`]), so the loops stay level when
//! every client comes in on one CPU.

/// `home_at` of a connection that is not looked at again.
pub(super) const SETTLED: u64 = u64::MAX;
/// When a connection found at home is looked at a second time (ms).
pub(super) const AGAIN_MS: u64 = 1000;

/// The loop (slot) home to connections whose packets come in on CPU `incoming`,
/// among `loops`: the loop bound to that CPU (`bound_to(k)`: loop `k`'s CPU under
/// `workers.cpu_affinity`), else the one it falls to in turn among `allowed` (the
/// CPUs the workers may use; a CPU outside them by its number).
pub(super) fn home(
    incoming: usize,
    loops: usize,
    bound_to: impl Fn(usize) -> Option<usize>,
    allowed: &[usize],
) -> usize {
    if let Some(k) = (0..loops).find(|&k| bound_to(k) == Some(incoming)) {
        return k;
    }
    allowed.iter().position(|&c| c == incoming).unwrap_or(incoming) % loops.max(1)
}

/// Whether a loop holding `theirs` clients may take one from a loop holding
/// `mine` (the one that goes counted): if it then holds at most one more than the
/// sender, so the loops stay level (`SlotObserver::ahead_of_loops`). A loop that
/// holds one of the sender's own may take one whatever the counts: a swap
/// (`Slot::owes`).
pub(super) fn may_take(mine: u32, theirs: u32) -> bool {
    theirs < mine
}

/// How long (ms) a connection that could not go home waits before it is looked
/// at again, after `tries` tries: 200 ms, doubling to 6.4 s.
pub(super) fn retry_in(tries: u8) -> u64 {
    200 << u64::from(tries.saturating_sub(1).min(5))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cpu_is_home_to_the_loop_bound_to_it_or_to_one_in_turn() {
        let unbound = |_| None;
        assert_eq!(home(0, 2, unbound, &[0, 1]), 0);
        assert_eq!(home(1, 2, unbound, &[0, 1]), 1);
        assert_eq!(home(5, 2, unbound, &[4, 5, 6, 7]), 1);
        assert_eq!(home(6, 2, unbound, &[4, 5, 6, 7]), 0);
        // A CPU the workers may not use (a network card's interrupts elsewhere).
        assert_eq!(home(3, 2, unbound, &[0, 1]), 1);
        // workers.cpu_affinity = [3, 1]: loop 0 on CPU 3, loop 1 on CPU 1.
        let listed = |k: usize| Some([3, 1][k % 2]);
        assert_eq!(home(3, 2, listed, &[0, 1, 2, 3]), 0);
        assert_eq!(home(1, 2, listed, &[0, 1, 2, 3]), 1);
        assert_eq!(home(1, 1, unbound, &[0, 1]), 0, "one loop");
    }

    #[test]
    fn a_loop_takes_a_connection_if_it_then_holds_at_most_one_more() {
        assert!(may_take(5, 4), "5 / 4 to 4 / 5");
        assert!(!may_take(5, 5), "5 / 5 to 4 / 6: not level");
        assert!(may_take(1, 0));
        assert!(!may_take(1, 1));
    }

    #[test]
    fn a_connection_that_could_not_go_home_waits_longer_each_time() {
        assert_eq!(retry_in(1), 200);
        assert_eq!(retry_in(2), 400);
        assert_eq!(retry_in(6), 6400);
        assert_eq!(retry_in(200), 6400);
    }
}
