//! The master's life as one state ([`Life`]), and every move between its phases: the
//! stops (graceful with its drain, fast, the fast stop a worker that cannot start
//! forces), WINCH's pause, the resumption a reload brings, and an upgrade's hand-over
//! to a new master. The loop asks the phase what to do ([`Life::forks`],
//! [`Life::due`]); nothing else in the master keeps a flag of its own about them.

use std::process::ExitCode;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::Instant;

use nix::sys::signal::{Signal, kill};

use super::{Fate, Master, STOP_GRACE};

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
    fn fast(self, deadline: Instant, failed: bool) -> Option<Life> {
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

impl Master {
    /// The tick's part: the drain's end, the graceful stop's deadline, the KILL.
    pub(super) fn advance_life(&mut self) {
        match self.life.due(Instant::now()) {
            Due::Nothing => {}
            Due::GracefulStop => self.begin_graceful_stop(),
            Due::FastStop => {
                log::warn!(
                    "graceful stop timed out after {:?}; terminating the remaining workers",
                    self.config.graceful_timeout
                );
                self.fast_stop(false);
            }
            Due::Kill => self.signal_all(Signal::SIGKILL),
        }
    }

    /// TERM, INT (`failed` false), or a worker of the current generation that could
    /// not start (`failed`: the master exits with failure): TERM to every worker,
    /// KILL after [`STOP_GRACE`].
    pub(super) fn fast_stop(&mut self, failed: bool) {
        let already = matches!(self.life, Life::Stopping(Stop::Fast { .. }) | Life::Superseded(Stop::Fast { .. }));
        let Some(next) = self.life.fast(Instant::now() + STOP_GRACE, failed) else { return };
        self.life = next;
        if already {
            return; // only `failed` was added
        }
        log::info!("fast stop: terminating {} workers", self.children.len());
        self.report_stopping();
        self.scoreboard.header.stopping.store(1, SeqCst);
        self.signal_all(Signal::SIGTERM);
    }

    /// QUIT: with `server.drain_time`, the drain first, then the graceful stop.
    pub(super) fn graceful_stop(&mut self) {
        if !self.life.takes_orders() {
            return;
        }
        let drain = self.config.drain_time;
        self.report_stopping();
        if drain.is_zero() {
            self.begin_graceful_stop();
            return;
        }
        self.scoreboard.header.draining.store(1, SeqCst);
        log::info!("graceful stop: draining for {drain:?} (health checks answer 503, requests are served as usual)");
        self.life = Life::Draining { until: Instant::now() + drain };
    }

    /// The graceful stop proper: workers stop taking connections, finish, exit.
    fn begin_graceful_stop(&mut self) {
        // Workers see the stop before anyone reads of it in the log.
        self.scoreboard.header.stopping.store(1, SeqCst);
        log::info!(
            "graceful stop: waiting up to {:?} for {} workers to finish",
            self.config.graceful_timeout,
            self.children.len()
        );
        self.life = Life::Stopping(Stop::Graceful { deadline: Instant::now() + self.config.graceful_timeout });
        self.wake_retiring_workers();
    }

    /// WINCH: every worker retires gracefully, the master stays; a reload serves
    /// again.
    pub(super) fn pause(&mut self) {
        if !self.life.takes_orders() {
            log::warn!("SIGWINCH ignored: a stop or an upgrade's hand-over is under way");
            return;
        }
        log::info!("SIGWINCH: retiring all workers gracefully; HUP starts them again");
        self.life = Life::Paused;
        // No worker will be left to adopt kept-alive connections: the leaving ones
        // finish theirs with `Connection: close`.
        self.scoreboard.header.handover_open.store(0, Relaxed);
        self.new_generation();
        self.wake_retiring_workers();
    }

    /// A reload's new generation serves (after a pause, too).
    pub(super) fn resume(&mut self) {
        self.life = Life::Serving;
        self.scoreboard.header.handover_open.store(1, Relaxed);
    }

    /// The new master of an upgrade serves: this generation leaves (as after WINCH,
    /// but the new master's workers adopt our kept-alive connections over the shared
    /// handover socket, so none is closed), and the master exits after it.
    pub(super) fn supersede(&mut self) {
        self.life = Life::Superseded(Stop::Graceful { deadline: Instant::now() + self.config.graceful_timeout });
        self.scoreboard.header.draining.store(1, SeqCst);
        self.scoreboard.header.handover_open.store(1, Relaxed);
        self.new_generation();
        self.wake_retiring_workers();
    }

    fn signal_all(&mut self, sig: Signal) {
        for (pid, child) in self.children.iter_mut() {
            if child.fate == Fate::Own {
                child.fate = Fate::Stopped;
            }
            let _ = kill(*pid, sig);
        }
    }

    /// The last words, once the last worker is gone.
    pub(super) fn exit(&self) -> ExitCode {
        crate::statusfile::remove(&self.upgrade.pid_path);
        if self.life.superseded() {
            let _ = std::fs::remove_file(&self.upgrade.pid_path);
            log::info!("pika (pid {}) exits: the new master serves", std::process::id());
        } else {
            log::info!("pika stopped");
        }
        if self.life.failed() { ExitCode::FAILURE } else { ExitCode::SUCCESS }
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
