//! The master's life as one state ([`Life`]), and every move between its phases: the
//! stops (graceful with its drain, fast, the fast stop a worker that cannot start
//! forces), WINCH's pause, the resumption a reload brings, and an upgrade's hand-over
//! to a new master. The loop asks the phase what to do ([`Life::forks`],
//! [`Life::due`]); nothing else in the master keeps a flag of its own about them.

use std::time::{Duration, Instant};

/// How long a fast stop, or the stuck-worker watchdog, waits after TERM before KILL.
/// A worker told to stop logs the answers it was writing and writes the records it
/// holds, then dies: milliseconds, and never more than its own alarm
/// (`sys::STOP_ALARM_SECS`) unless the log's disk hangs. What a KILLed worker held,
/// the master writes.
pub(super) const STOP_GRACE: Duration = Duration::from_secs(3);

/// Where the master is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Life {
    /// Workers are forked and retired by maintenance.
    Serving,
    /// WINCH: every worker retires and none is forked, until a reload (HUP).
    Paused,
    /// QUIT with `server.drain_time`: until `until`, health checks answer 503 and all
    /// else is served as usual (the pool too is kept), so a balancer takes the node
    /// out before it stops accepting; then the graceful stop.
    Draining { until: Instant },
    /// QUIT, TERM, or a worker that could not start: the workers leave, and the
    /// master exits after the last.
    Stopping(Stop),
    /// A binary upgrade's new master serves: this one's workers leave as in a stop
    /// (their idle connections go to the new master's workers), and it exits after
    /// the last, leaving the pid file and systemd to the new one.
    Superseded(Stop),
}

/// How the workers are leaving.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stop {
    /// They finish what they serve, then exit; at `deadline`, a fast stop.
    Graceful { deadline: Instant },
    /// They got TERM; at `deadline`, KILL. `failed`: a worker could not start, so
    /// the master exits with failure.
    Fast { deadline: Instant, failed: bool },
}

/// What the phase asks of the tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Due {
    Nothing,
    /// The drain is over.
    GracefulStop,
    /// The graceful stop's time is up.
    FastStop,
    /// The fast stop's grace is over: KILL what is left.
    Kill,
}

impl Life {
    /// The pool is kept: maintenance forks and retires, a crashed worker is
    /// replaced. Otherwise every worker is leaving.
    pub(super) fn forks(self) -> bool {
        matches!(self, Life::Serving | Life::Draining { .. })
    }

    /// The operator's orders that change the pool (reload, upgrade, graceful stop,
    /// WINCH) are taken: not once a drain or a stop has begun, nor after an upgrade
    /// took over (the new master takes them).
    pub(super) fn takes_orders(self) -> bool {
        matches!(self, Life::Serving | Life::Paused)
    }

    /// The master exits once its last worker is gone.
    pub(super) fn ends_with_the_workers(self) -> bool {
        matches!(self, Life::Stopping(_) | Life::Superseded(_))
    }

    pub(super) fn superseded(self) -> bool {
        matches!(self, Life::Superseded(_))
    }

    /// A worker could not start: the master stops and exits with failure.
    pub(super) fn failed(self) -> bool {
        matches!(self, Life::Stopping(Stop::Fast { failed: true, .. }))
    }

    /// What is due at `now`.
    pub(super) fn due(self, now: Instant) -> Due {
        match self {
            Life::Draining { until } if now >= until => Due::GracefulStop,
            Life::Stopping(stop) | Life::Superseded(stop) => match stop {
                Stop::Graceful { deadline } if now >= deadline => Due::FastStop,
                Stop::Fast { deadline, .. } if now >= deadline => Due::Kill,
                _ => Due::Nothing,
            },
            _ => Due::Nothing,
        }
    }

    /// The phase after a fast stop begins, with `deadline` for the KILL; `None`
    /// when the workers already got TERM (then only `failed` is added).
    pub(super) fn fast(self, deadline: Instant, failed: bool) -> Option<Life> {
        match self {
            Life::Stopping(Stop::Fast { deadline: d, failed: f }) => {
                (failed && !f).then_some(Life::Stopping(Stop::Fast { deadline: d, failed: true }))
            }
            Life::Superseded(Stop::Fast { .. }) => None,
            Life::Superseded(_) => Some(Life::Superseded(Stop::Fast { deadline, failed })),
            _ => Some(Life::Stopping(Stop::Fast { deadline, failed })),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn only_serving_and_draining_keep_the_pool() {
        let t = Instant::now();
        let graceful = Stop::Graceful { deadline: t };
        let fast = Stop::Fast { deadline: t, failed: false };
        let all = [
            Life::Serving,
            Life::Paused,
            Life::Draining { until: t },
            Life::Stopping(graceful),
            Life::Stopping(fast),
            Life::Superseded(graceful),
        ];
        let forks: Vec<bool> = all.iter().map(|l| l.forks()).collect();
        assert_eq!(forks, [true, false, true, false, false, false]);
        let orders: Vec<bool> = all.iter().map(|l| l.takes_orders()).collect();
        assert_eq!(orders, [true, true, false, false, false, false]);
        let ends: Vec<bool> = all.iter().map(|l| l.ends_with_the_workers()).collect();
        assert_eq!(ends, [false, false, false, true, true, true], "a pause keeps the master");
    }

    #[test]
    fn each_stop_moves_on_at_its_time() {
        let t = Instant::now();
        let later = t + Duration::from_secs(1);
        assert_eq!(Life::Draining { until: later }.due(t), Due::Nothing);
        assert_eq!(Life::Draining { until: later }.due(later), Due::GracefulStop);
        let graceful = Stop::Graceful { deadline: later };
        for life in [Life::Stopping(graceful), Life::Superseded(graceful)] {
            assert_eq!(life.due(t), Due::Nothing);
            assert_eq!(life.due(later), Due::FastStop);
        }
        let fast = Life::Stopping(Stop::Fast { deadline: later, failed: false });
        assert_eq!((fast.due(t), fast.due(later)), (Due::Nothing, Due::Kill));
        assert_eq!(Life::Serving.due(later), Due::Nothing);
        assert_eq!(Life::Paused.due(later), Due::Nothing);
    }

    #[test]
    fn a_fast_stop_begins_once_and_remembers_a_failure() {
        let t = Instant::now();
        let d = t + STOP_GRACE;
        assert_eq!(Life::Serving.fast(d, false), Some(Life::Stopping(Stop::Fast { deadline: d, failed: false })));
        let graceful = Life::Stopping(Stop::Graceful { deadline: t });
        assert_eq!(graceful.fast(d, true), Some(Life::Stopping(Stop::Fast { deadline: d, failed: true })));
        let fast = Life::Stopping(Stop::Fast { deadline: t, failed: false });
        assert_eq!(fast.fast(d, false), None, "TERM twice: the first deadline holds");
        let failed = fast.fast(d, true).unwrap();
        assert_eq!(failed, Life::Stopping(Stop::Fast { deadline: t, failed: true }));
        assert!(failed.failed() && !fast.failed());
        // A superseded master stays superseded: it never speaks for the service again.
        let old = Life::Superseded(Stop::Graceful { deadline: t }).fast(d, false).unwrap();
        assert!(old.superseded());
        assert_eq!(old.fast(d, false), None);
    }
}
