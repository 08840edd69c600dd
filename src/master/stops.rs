//! The moves between the master's phases ([`super::life::Life`]) as the master
//! makes them: the tick's deadlines, the graceful and fast stops, WINCH's pause and
//! the resumption a reload brings, an upgrade's hand-over, and the exit code.

use std::process::ExitCode;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::Instant;

use nix::sys::signal::{Signal, kill};

use super::life::{Due, Life, STOP_GRACE, Stop};
use super::state::{Fate, Master};

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
        crate::master::statusfile::remove(&self.upgrade.pid_path);
        if self.life.superseded() {
            let _ = std::fs::remove_file(&self.upgrade.pid_path);
            log::info!("pika (pid {}) exits: the new master serves", std::process::id());
        } else {
            log::info!("pika stopped");
        }
        if self.life.failed() { ExitCode::FAILURE } else { ExitCode::SUCCESS }
    }
}
