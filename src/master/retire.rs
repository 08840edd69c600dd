//! Workers leaving: one idle worker retired through the pipe of death, old
//! generations woken to notice they must go, stuck workers stopped, and the stops
//! (graceful, fast, WINCH's pause).

use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::Instant;

use nix::sys::signal::{Signal, kill};

use super::{Master, STOP_GRACE, Stopping};
use crate::pod;
use crate::scoreboard::State;

impl Master {
    /// Asks one idle worker of the current generation to exit: a byte on the pipe of
    /// death, then a dummy connection to wake a worker blocked in `accept()`.
    pub(super) fn retire_one(&mut self) {
        self.pod.signal(self.scoreboard.header);
        self.dummy_connections(1);
    }

    /// Idle workers of an older generation (or all, when stopping) sit in `accept()`:
    /// a dummy connection each wakes them to notice they must go. Sent every tick until
    /// none is left (a dummy may be taken by a current worker instead).
    pub(super) fn wake_retiring_workers(&mut self) {
        let stopping = self.winding_down() || self.workers_paused;
        let idle_retiring = self
            .children
            .values()
            .filter(|c| {
                (stopping || c.generation != self.generation) && self.scoreboard.slots[c.slot].state() == State::Ready
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
    /// `http.request_timeout` is stopped: TERM first, so its handler writes the
    /// access-log records the worker holds, then KILL after [`STOP_GRACE`] if it is
    /// still there (each read and write has its own timeout, so only a bug, a kernel
    /// stall or a client slower than the timeouts allow gets here).
    pub(super) fn kill_stuck_workers(&mut self) {
        let now = crate::scoreboard::now_ms();
        let limit = self.config.http.request_timeout.as_millis() as u64;
        let at = Instant::now();
        for (pid, child) in self.children.iter_mut() {
            if child.kill_at.is_some_and(|t| at >= t) {
                log::error!("worker {pid} (slot {}) is still there {STOP_GRACE:?} after TERM; killing it", child.slot);
                child.kill_at = None;
                let _ = kill(*pid, Signal::SIGKILL);
                continue;
            }
            let slot = &self.scoreboard.slots[child.slot];
            let busy = matches!(slot.state(), State::Writing | State::Logging | State::Reading | State::Closing);
            if busy && !child.killed && now.saturating_sub(slot.heartbeat_ms.load(Relaxed)) > limit {
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
                child.killed = true;
                child.stuck = true;
                child.kill_at = Some(at + STOP_GRACE);
                let _ = kill(*pid, Signal::SIGTERM);
            }
        }
    }

    pub(super) fn signal_all(&mut self, sig: Signal) {
        for (pid, child) in self.children.iter_mut() {
            child.killed = true;
            let _ = kill(*pid, sig);
        }
    }

    pub(super) fn fast_stop(&mut self) {
        if matches!(self.stopping, Some(Stopping::Fast { .. })) {
            return;
        }
        log::info!("fast stop: terminating {} workers", self.children.len());
        // An old master that handed over to a new one is not the service: the new
        // master serves on.
        if !self.superseded {
            crate::notify::send("STOPPING=1");
        }
        self.scoreboard.header.stopping.store(1, SeqCst);
        self.signal_all(Signal::SIGTERM);
        self.stopping = Some(Stopping::Fast { deadline: Instant::now() + STOP_GRACE });
    }

    /// QUIT: with `server.drain_time`, health checks answer 503 for that long while
    /// everything else is served as usual (a balancer takes the node out), then the
    /// graceful stop begins.
    pub(super) fn graceful_stop(&mut self) {
        if self.stopping.is_some() {
            return;
        }
        let drain = self.config.drain_time;
        crate::notify::send("STOPPING=1");
        if drain.is_zero() {
            self.begin_graceful_stop();
            return;
        }
        self.scoreboard.header.draining.store(1, SeqCst);
        log::info!("graceful stop: draining for {drain:?} (health checks answer 503, requests are served as usual)");
        self.stopping = Some(Stopping::Draining { until: Instant::now() + drain });
    }

    /// The graceful stop proper: workers stop taking connections, finish, exit.
    pub(super) fn begin_graceful_stop(&mut self) {
        // Workers see the stop before anyone reads of it in the log.
        self.scoreboard.header.stopping.store(1, SeqCst);
        log::info!(
            "graceful stop: waiting up to {:?} for {} workers to finish",
            self.config.graceful_timeout,
            self.children.len()
        );
        self.stopping = Some(Stopping::Graceful { deadline: Instant::now() + self.config.graceful_timeout });
        self.wake_retiring_workers();
    }

    pub(super) fn pause_workers(&mut self) {
        log::info!("SIGWINCH: retiring all workers gracefully; HUP starts them again");
        self.workers_paused = true;
        // No worker will be left to adopt kept-alive connections: the leaving ones
        // finish theirs with `Connection: close`.
        self.scoreboard.header.handover_open.store(0, Relaxed);
        self.new_generation();
        self.wake_retiring_workers();
    }
}
