//! Workers leaving one by one: an idle worker retired through the pipe of death,
//! the idle workers that must go woken to notice it, stuck workers stopped. (The
//! stops, which send every worker away, are the master's phases: `life`.)

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use nix::sys::signal::{Signal, kill};

use super::life::STOP_GRACE;
use super::state::{Fate, Master};
use crate::fork::pod;
use crate::scoreboard::State;

impl Master {
    /// Asks one idle worker of the current generation to exit: a byte on the pipe of
    /// death, then a dummy connection to wake a worker sleeping in `epoll_wait`.
    pub(super) fn retire_one(&mut self) {
        self.pod.signal(self.scoreboard.header);
        self.dummy_connections(1);
    }

    /// Idle workers that must go (of an older generation, or all of them when the
    /// master keeps no pool) sleep in `epoll_wait` for up to a second: a dummy
    /// connection each wakes them to notice it at once. Sent every tick until none is
    /// left (a dummy may be taken by a worker that stays instead).
    pub(super) fn wake_retiring_workers(&mut self) {
        let all_leave = !self.life.forks();
        let idle_retiring = self
            .children
            .values()
            .filter(|c| {
                (all_leave || c.generation != self.generation) && self.scoreboard.slots[c.slot].state() == State::Ready
            })
            .count();
        self.dummy_connections(idle_retiring);
    }

    /// Wakes `n` idle workers with a dummy connection each, sent to a plain listener.
    /// With TLS listeners only there is none to send: a plain request on a TLS port
    /// would be refused there, and a TLS handshake from the master would cost a
    /// worker a signature for a wake-up. It is not needed either: an idle worker
    /// wakes at least every second (`worker::events`' sweep) and then looks at the
    /// pipe of death and the generation, so it leaves within a second instead of at
    /// once.
    pub(super) fn dummy_connections(&self, n: usize) {
        // A plain listener, best one that expects no PROXY header either.
        let plain = || self.listeners.list.iter().filter(|l| !l.tls);
        let Some(listener) = plain().find(|l| !l.proxy_protocol).or(plain().next()) else { return };
        let target = pod::dummy_target(listener.bound);
        for _ in 0..n {
            if let Err(e) = pod::dummy_connection(target, &self.token, listener.proxy_protocol) {
                // The backlog is full or nobody accepts: the workers are busy and will
                // check the pipe and generation when they finish.
                log::debug!("dummy connection to {target}: {e}");
                break;
            }
        }
    }

    /// A worker showing no progress in one request for longer than
    /// `http.request_timeout` is stopped: TERM first, so that it (or, stuck, its
    /// alarm a second later) writes the access-log records it holds, then KILL after
    /// [`STOP_GRACE`] if it is still there, whose records the master writes when it
    /// reaps it (each read and write has its own timeout, so only a bug, a kernel
    /// stall or a client slower than the timeouts allow gets here).
    pub(super) fn kill_stuck_workers(&mut self) {
        let now = crate::scoreboard::now_ms();
        let limit = self.config.http.request_timeout.as_millis() as u64;
        let at = Instant::now();
        for (pid, child) in self.children.iter_mut() {
            if let Fate::Stuck { kill_at: Some(t) } = child.fate
                && at >= t
            {
                log::error!("worker {pid} (slot {}) is still there {STOP_GRACE:?} after TERM; killing it", child.slot);
                child.fate = Fate::Stuck { kill_at: None };
                let _ = kill(*pid, Signal::SIGKILL);
                continue;
            }
            let slot = &self.scoreboard.slots[child.slot];
            let busy = matches!(slot.state(), State::Writing | State::Logging | State::Reading | State::Closing);
            if busy && !child.fate.decided() && now.saturating_sub(slot.heartbeat_ms.load(Relaxed)) > limit {
                // The client's bytes, escaped as in the access log: no control, C1
                // or bidi character reaches an operator's terminal.
                let mut line = Vec::new();
                crate::log::format::escape_into(&mut line, &slot.request_bytes());
                log::error!(
                    "worker {pid} (slot {}) made no progress on \"{}\" for over {:?}; terminating it",
                    child.slot,
                    String::from_utf8_lossy(&line),
                    self.config.http.request_timeout
                );
                child.fate = Fate::Stuck { kill_at: Some(at + STOP_GRACE) };
                let _ = kill(*pid, Signal::SIGTERM);
            }
        }
    }
}
