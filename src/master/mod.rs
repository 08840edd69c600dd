//! The master process: it binds, forks, watches and never serves a request.
//!
//! One flat loop with a one-second tick (DESIGN §1):
//! wait for a signal or the tick → act on signals → reap exited workers → on the tick,
//! maintain the pool, retire old generations, stop stuck workers → stop when asked and
//! no worker is left. While the pool is short of idle workers the loop also wakes
//! every [`maintenance::QUICK_LOOK`] to fork for connections waiting in the queue.
//!
//! Only pids from the master's own table are ever signalled; the scoreboard (which
//! workers write) is read for states, never for pids to kill.

pub mod maintenance;
pub mod signals;

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::config::{self, Config};
use crate::daemon::Ready;
use crate::listen::{self, Listener, Listeners};
use crate::log::access::AccessLogs;
use crate::log::rotate::{self as rotation, Rotate, next_boundary, offset_at, period_start};
use crate::pod::{self, Doorbell, Pod};
use crate::scoreboard::{Scoreboard, State};
use crate::sys::{self, Forked};
use crate::tls::tickets::TicketKeys;
use crate::worker::{self, ChildExit, WorkerCtx};
use maintenance::{Band, Counts, Decision};
use signals::{Control, Signals};

/// The maintenance period (Apache's: one second).
const TICK: Duration = Duration::from_secs(1);
/// How long a fast stop, or the stuck-worker watchdog, waits after TERM before KILL.
/// A worker's TERM handler only writes the access-log records it holds, then dies:
/// that takes milliseconds unless the log's disk hangs.
const STOP_GRACE: Duration = Duration::from_secs(3);
/// A worker that dies younger than this is replaced by maintenance (rate-limited),
/// not at once: a worker that crashes on start must not become a fork loop.
const MIN_LIFETIME_FOR_RESPAWN: Duration = Duration::from_secs(1);

/// A log the master rotates by itself.
struct Rotation {
    path: std::path::PathBuf,
    rotate: Rotate,
    /// When the current time period ends (time-based rotation).
    next_at: Option<i64>,
}

fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// The logs of `config` that rotate, keeping the schedule of those already known.
fn rotations(config: &Config, old: &[Rotation]) -> Vec<Rotation> {
    let error_log = match (&config.error_log, &config.error_log_rotate) {
        (config::ErrorLogTarget::File(p), Some(r)) => Some((p.clone(), r.clone())),
        _ => None,
    };
    let access = config.access_logs.iter().filter_map(|a| Some((a.path.clone(), a.rotate.clone()?)));
    let now = unix_now();
    access
        .chain(error_log)
        .map(|(path, rotate)| {
            let next_at = match old.iter().find(|o| o.path == path && o.rotate.interval == rotate.interval) {
                Some(o) => o.next_at,
                None => rotate.interval.map(|i| next_boundary(now, i, offset_at(now, rotate.local_time))),
            };
            Rotation { path, rotate, next_at }
        })
        .collect()
}

struct Child {
    slot: usize,
    generation: u32,
    born: Instant,
    /// The master already decided this one's fate (stuck, stop): don't log its death.
    killed: bool,
    /// Sent TERM as stuck: KILL at this time if it is still there.
    kill_at: Option<Instant>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopping {
    /// QUIT: until `deadline`, workers finish; then TERM.
    Graceful { deadline: Instant },
    /// TERM: workers got TERM; at `deadline`, KILL.
    Fast { deadline: Instant },
}

pub struct Master {
    config: Config,
    listeners: Listeners,
    scoreboard: Scoreboard,
    pod: Pod,
    doorbell: Doorbell,
    token: String,
    /// The session-ticket key chain, made before the first fork and stepped on the
    /// tick; every worker copies it and steps its copy itself ([`crate::tls::tickets`]).
    tickets: TicketKeys,
    /// When the certificates are next looked at for expiry (Unix seconds).
    next_cert_check: i64,
    signals: Signals,
    logs: AccessLogs,
    rotations: Vec<Rotation>,
    children: HashMap<Pid, Child>,
    generation: u32,
    band: Band,
    spawn_rate: u32,
    /// The last look found the pool short of idle workers: look again before the tick.
    short: bool,
    full_reported: bool,
    /// WINCH: workers retired, none spawned until the next reload.
    workers_paused: bool,
    stopping: Option<Stopping>,
    /// A worker could not start: stop, and exit with failure.
    fatal: bool,
}

impl Master {
    /// Everything that can fail at start, before the first fork: bind, map the
    /// scoreboard, open the logs.
    pub fn new(config: Config) -> Result<Master, String> {
        let mut listeners = Vec::new();
        for entry in &config.listen {
            let l = listen::bind(*entry, config.backlog, listen::defer(&config))
                .map_err(|e| format!("cannot listen on {}: {e}", entry.addr))?;
            listeners.push(l);
        }
        let listeners = Listeners::new(listeners, config.http.send_timeout).map_err(|e| e.to_string())?;
        let scoreboard = Scoreboard::new(config.workers.max as usize).map_err(|e| format!("scoreboard: {e}"))?;
        let pod = Pod::new().map_err(|e| format!("pipe of death: {e}"))?;
        let doorbell = Doorbell::new().map_err(|e| format!("doorbell: {e}"))?;
        let token = pod::make_token().map_err(|e| format!("token: {e}"))?;
        let tickets = TicketKeys::new(unix_now() as u64).map_err(|e| format!("ticket keys: {e}"))?;
        let signals = Signals::install().map_err(|e| format!("signals: {e}"))?;
        // Created for the workers before they are opened, so a new file gets their
        // group (an existing one keeps its own).
        prepare_log_files(&config);
        let logs = AccessLogs::open(&config.access_logs).map_err(|e| e.to_string())?;
        let band = band(&config);
        scoreboard.header.min_spare.store(band.min_spare, Relaxed);
        let rotations = rotations(&config, &[]);
        Ok(Master {
            rotations,
            config,
            listeners,
            scoreboard,
            pod,
            doorbell,
            token,
            tickets,
            next_cert_check: 0,
            signals,
            logs,
            children: HashMap::new(),
            generation: 0,
            band,
            spawn_rate: 1,
            // The first look comes soon after start: a burst may be waiting already.
            short: true,
            full_reported: false,
            workers_paused: false,
            stopping: None,
            fatal: false,
        })
    }

    /// The addresses actually bound (port 0 in the config picks a free port).
    pub fn bound(&self) -> Vec<std::net::SocketAddr> {
        self.listeners.list.iter().map(|l| l.bound).collect()
    }

    /// The master loop. Returns when the server has stopped. `ready` is told once the
    /// first workers are serving (or could not start).
    pub fn run(mut self, ready: &mut Ready) -> ExitCode {
        prepare_log_files(&self.config);
        self.startup_children(self.config.workers.start);
        let mut next_tick = Instant::now() + TICK;
        let mut last_look = Instant::now();
        loop {
            if ready.pending() {
                self.report_ready(ready);
            }
            // While short of idle workers, look again QUICK_LOOK after the last look.
            let next_look = if self.short { last_look + maintenance::QUICK_LOOK } else { next_tick };
            let mut wait = next_tick.min(next_look).saturating_duration_since(Instant::now());
            if ready.pending() {
                // Report readiness promptly: workers turn ready within milliseconds.
                wait = wait.min(Duration::from_millis(20));
            }
            let mut fds =
                [PollFd::new(self.signals.fd(), PollFlags::POLLIN), PollFd::new(self.doorbell.fd(), PollFlags::POLLIN)];
            let ms = u16::try_from(wait.as_millis()).unwrap_or(u16::MAX);
            let _ = poll(&mut fds, PollTimeout::from(ms));
            if self.doorbell.take() {
                // A worker found too few idle workers: look now (or a quick look
                // after the last one).
                self.short = true;
            }
            for control in self.signals.take() {
                self.handle(control);
            }
            self.reap();
            let now = Instant::now();
            if now >= next_tick {
                next_tick = now + TICK;
                last_look = now;
                self.tick();
            } else if self.short && now >= last_look + maintenance::QUICK_LOOK {
                last_look = now;
                self.quick_look();
            }
            if self.stopping.is_some() && self.children.is_empty() {
                self.report_ready(ready);
                break;
            }
        }
        let _ = std::fs::remove_file(crate::ctl::status_file(&self.config.pid_file));
        log::info!("pika stopped");
        if self.fatal { ExitCode::FAILURE } else { ExitCode::SUCCESS }
    }

    /// Ready when every first-generation worker has left `Starting` (or none was
    /// asked for); failed if one could not start.
    fn report_ready(&self, ready: &mut Ready) {
        if self.fatal {
            ready.fail("a worker could not start (see the error log)");
        } else if self.children.values().all(|c| self.scoreboard.slots[c.slot].state() != State::Starting) {
            self.write_status_file();
            ready.ok();
        }
    }

    fn handle(&mut self, control: Control) {
        match control {
            Control::FastStop => self.fast_stop(),
            Control::GracefulStop => self.graceful_stop(),
            Control::Reload => self.reload(),
            Control::ReopenLogs => self.reopen_logs(),
            Control::StopWorkers => self.pause_workers(),
            Control::MoreSpare => self.adjust_band(1),
            Control::FewerSpare => self.adjust_band(-1),
            Control::Upgrade => log::warn!("SIGUSR2 (binary upgrade) is not supported yet; ignored"),
            Control::ChildExited => {} // reaped right after
        }
    }

    /// The once-a-second work.
    fn tick(&mut self) {
        match self.stopping {
            Some(Stopping::Graceful { deadline }) if Instant::now() >= deadline => {
                log::warn!(
                    "graceful stop timed out after {:?}; terminating the remaining workers",
                    self.config.graceful_timeout
                );
                self.fast_stop();
            }
            Some(Stopping::Fast { deadline }) if Instant::now() >= deadline => self.signal_all(Signal::SIGKILL),
            _ => {}
        }
        if self.stopping.is_none() && !self.workers_paused {
            self.perform_idle_server_maintenance();
        } else {
            self.short = false;
        }
        self.wake_retiring_workers();
        self.kill_stuck_workers();
        self.update_busy_flag();
        self.rotate_logs();
        self.write_status_file();
        self.tickets.advance(unix_now() as u64);
        self.check_certificates();
    }

    /// Once a day (and after each reload): certificates close to expiry are said in
    /// the error log.
    fn check_certificates(&mut self) {
        let now = unix_now();
        if now >= self.next_cert_check {
            crate::tls::expiry::log_warnings(&self.config.vhosts, now);
            self.next_cert_check = now + crate::tls::expiry::CHECK_EVERY.as_secs() as i64;
        }
    }

    /// Built-in rotation: rename each due log, create its successor for the workers,
    /// then bump the log epoch once so every worker reopens before its next write.
    fn rotate_logs(&mut self) {
        let now = unix_now();
        let owner = self.config.run_as.as_ref().map(|r| (r.uid, r.gid));
        let mut rotated = false;
        for r in &mut self.rotations {
            let time_due = r.next_at.is_some_and(|t| now >= t);
            let size_due =
                r.rotate.size.is_some_and(|limit| std::fs::metadata(&r.path).is_ok_and(|m| m.len() >= limit));
            if !time_due && !size_due {
                continue;
            }
            let offset = offset_at(now, r.rotate.local_time);
            // The old file is named for the period it holds.
            let period = match (r.next_at, r.rotate.interval) {
                (Some(t), Some(i)) if time_due => period_start(t - 1, i, offset),
                (_, Some(i)) => period_start(now, i, offset),
                (_, None) => now,
            };
            match rotation::rotate(&r.path, &r.rotate, period) {
                Ok(old) => {
                    if let Err(e) = crate::log::prepare_for_workers(&r.path, owner) {
                        log::error!("cannot create {} after rotation: {e}", r.path.display());
                    }
                    if r.rotate.compress {
                        rotation::compress(&old, owner);
                    }
                    rotated = true;
                }
                Err(e) => log::error!("cannot rotate {}: {e}", r.path.display()),
            }
            if let Some(i) = r.rotate.interval {
                r.next_at = Some(next_boundary(now, i, offset));
            }
        }
        if rotated {
            crate::log::reopen_error_log();
            self.logs.reopen();
            self.scoreboard.header.log_epoch.fetch_add(1, SeqCst);
            log::info!("logs rotated");
        }
    }

    /// Rewrites the status file `pika -k status` and `-k reload` read (write, then
    /// rename, so a reader never sees half a file).
    fn write_status_file(&self) {
        let path = crate::ctl::status_file(&self.config.pid_file);
        let tmp = path.with_extension("status.tmp");
        let text = crate::status::Snapshot::take(&self.scoreboard, std::process::id() as i32).summary();
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, &path);
        }
    }

    /// Counts the pool for a look; workers may ring the doorbell again from here on.
    fn counts(&self) -> Counts {
        self.doorbell.rearm(self.scoreboard.header);
        Counts {
            idle: self
                .children
                .values()
                .filter(|c| c.generation == self.generation && self.scoreboard.slots[c.slot].state().is_idle())
                .count() as u32,
            used_slots: self.children.len() as u32,
            queued: self.listeners.queued(),
        }
    }

    /// Between ticks, while short of idle workers: fork for the connections waiting.
    fn quick_look(&mut self) {
        self.short = false;
        if self.stopping.is_some() || self.workers_paused {
            return;
        }
        let counts = self.counts();
        self.short = maintenance::short(counts, self.band);
        if let Decision::Spawn(n) = maintenance::quick(counts, self.band) {
            log::debug!(
                "maintenance: spawning {n} workers now ({} idle, {} total, {} connections waiting)",
                counts.idle,
                counts.used_slots,
                counts.queued
            );
            self.startup_children(n);
        }
    }

    fn perform_idle_server_maintenance(&mut self) {
        let counts = self.counts();
        self.short = maintenance::short(counts, self.band);
        let before = self.spawn_rate;
        match maintenance::decide(counts, self.band, &mut self.spawn_rate) {
            Decision::Nothing => {}
            Decision::Spawn(n) => {
                log::debug!(
                    "maintenance: spawning {n} workers ({} idle, {} total, {} connections waiting)",
                    counts.idle,
                    counts.used_slots,
                    counts.queued
                );
                if before >= 8 {
                    log::info!(
                        "server seems busy (you may need to increase workers.start or min_spare/max_spare): spawning {n} workers, there are {} idle and {} total",
                        counts.idle,
                        counts.used_slots
                    );
                }
                self.startup_children(n);
            }
            Decision::RetireOne => {
                log::debug!("maintenance: retiring one idle worker ({} idle)", counts.idle);
                self.retire_one();
            }
            Decision::Full => {
                if !self.full_reported {
                    log::error!("server reached workers.max ({}); consider raising it", self.band.max);
                    self.full_reported = true;
                }
            }
        }
    }

    /// Forks up to `n` workers into free slots, lowest first.
    fn startup_children(&mut self, n: u32) {
        for _ in 0..n {
            let Some(slot) = self.free_slot() else { break };
            if let Err(e) = self.make_child(slot) {
                log::error!("fork failed: {e}");
                self.spawn_rate = 1;
                break;
            }
        }
    }

    fn free_slot(&self) -> Option<usize> {
        let limit = (self.band.max as usize).min(self.scoreboard.slots.len());
        let mut used = vec![false; limit];
        for c in self.children.values() {
            if c.slot < limit {
                used[c.slot] = true;
            }
        }
        used.iter().position(|u| !u)
    }

    fn make_child(&mut self, slot: usize) -> std::io::Result<()> {
        self.scoreboard.slots[slot].claim(self.generation);
        // The epoch of the logs the child inherits, read here: once forked, this
        // process may rotate them before the child looks.
        let log_epoch = self.scoreboard.header.log_epoch.load(SeqCst);
        // Block every signal across the fork: the child must not run the master's
        // handlers before it has replaced them.
        let old_mask = sys::block_all_signals();
        match sys::fork() {
            Ok(Forked::Child) => {
                let logs = std::mem::replace(&mut self.logs, AccessLogs::none());
                let ctx = WorkerCtx {
                    config: &self.config,
                    listeners: &self.listeners,
                    scoreboard: &self.scoreboard,
                    slot,
                    generation: self.generation,
                    pod: Some(&mut self.pod),
                    doorbell: Some(&self.doorbell),
                    token: &self.token,
                    logs,
                    log_epoch,
                    master: Some(nix::unistd::getppid()),
                };
                worker::child_main(ctx)
            }
            Ok(Forked::Parent(pid)) => {
                sys::restore_signals(&old_mask);
                self.children.insert(
                    pid,
                    Child { slot, generation: self.generation, born: Instant::now(), killed: false, kill_at: None },
                );
                Ok(())
            }
            Err(e) => {
                sys::restore_signals(&old_mask);
                self.scoreboard.slots[slot].set_state(State::Dead);
                Err(e)
            }
        }
    }

    /// Reaps every exited worker and decides what each death means.
    fn reap(&mut self) {
        loop {
            let (pid, status) = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => (pid, Ok(code)),
                Ok(WaitStatus::Signaled(pid, sig, core)) => (pid, Err((sig, core))),
                Ok(WaitStatus::StillAlive) | Err(_) => return, // ECHILD: none left
                Ok(_) => continue,
            };
            let Some(child) = self.children.remove(&pid) else {
                log::debug!("reaped unknown child {pid}");
                continue;
            };
            let slot = &self.scoreboard.slots[child.slot];
            slot.pid.store(0, Relaxed);
            slot.set_state(State::Dead);
            let current = child.generation == self.generation;
            let replace = match status {
                Ok(code) => match ChildExit::from_code(code) {
                    Some(ChildExit::Retired) => false,
                    Some(ChildExit::Recycle) => true,
                    Some(ChildExit::Fatal) if current => {
                        log::error!("worker {pid} (slot {}) could not start; stopping the server", child.slot);
                        self.fatal = true;
                        self.fast_stop();
                        false
                    }
                    Some(ChildExit::Fatal) => {
                        log::warn!("ignoring a fatal error in worker {pid} of an older generation");
                        false
                    }
                    Some(ChildExit::Sick) => {
                        log::warn!("worker {pid} (slot {}) exited short of resources", child.slot);
                        self.spawn_rate = 1;
                        false
                    }
                    None => {
                        log::error!("worker {pid} (slot {}) exited with code {code}", child.slot);
                        true
                    }
                },
                Err((sig, core)) => {
                    if !child.killed {
                        let hint = if sig == Signal::SIGKILL { " (perhaps out of memory?)" } else { "" };
                        let dump = if core { ", core dumped" } else { "" };
                        log::error!("worker {pid} (slot {}) killed by signal {sig}{dump}{hint}", child.slot);
                    }
                    !child.killed
                }
            };
            // A crashed or recycled worker of the current generation is replaced in its
            // own slot at once, unless it died young (then maintenance paces it).
            if replace
                && current
                && self.stopping.is_none()
                && !self.workers_paused
                && child.born.elapsed() >= MIN_LIFETIME_FOR_RESPAWN
            {
                if let Err(e) = self.make_child(child.slot) {
                    log::error!("fork failed: {e}");
                }
            }
        }
    }

    /// Asks one idle worker of the current generation to exit: a byte on the pipe of
    /// death, then a dummy connection to wake a worker blocked in `accept()`.
    fn retire_one(&mut self) {
        self.pod.signal(self.scoreboard.header);
        self.dummy_connections(1);
    }

    /// Idle workers of an older generation (or all, when stopping) sit in `accept()`:
    /// a dummy connection each wakes them to notice they must go. Sent every tick until
    /// none is left (a dummy may be taken by a current worker instead).
    fn wake_retiring_workers(&mut self) {
        let stopping = self.stopping.is_some() || self.workers_paused;
        let idle_retiring = self
            .children
            .values()
            .filter(|c| {
                (stopping || c.generation != self.generation) && self.scoreboard.slots[c.slot].state() == State::Ready
            })
            .count();
        self.dummy_connections(idle_retiring);
    }

    fn dummy_connections(&self, n: usize) {
        // A plain listener if there is one: its worker needs no handshake to read it.
        let list = &self.listeners.list;
        let Some(listener) = list.iter().find(|l| !l.tls).or(list.first()) else { return };
        let target = pod::dummy_target(listener.bound);
        for _ in 0..n {
            if let Err(e) = pod::dummy_connection(target, &self.token) {
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
    fn kill_stuck_workers(&mut self) {
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
                child.kill_at = Some(at + STOP_GRACE);
                let _ = kill(*pid, Signal::SIGTERM);
            }
        }
    }

    /// Tells workers whether idle workers are scarce, so keep-alive can yield.
    fn update_busy_flag(&self) {
        let idle = self.children.values().filter(|c| self.scoreboard.slots[c.slot].state().is_idle()).count() as u32;
        let scarce = self.children.len() as u32 >= self.band.max && idle == 0;
        self.scoreboard.header.busy.store(u32::from(scarce), Relaxed);
    }

    fn signal_all(&mut self, sig: Signal) {
        for (pid, child) in self.children.iter_mut() {
            child.killed = true;
            let _ = kill(*pid, sig);
        }
    }

    fn fast_stop(&mut self) {
        if matches!(self.stopping, Some(Stopping::Fast { .. })) {
            return;
        }
        log::info!("fast stop: terminating {} workers", self.children.len());
        self.scoreboard.header.stopping.store(1, SeqCst);
        self.signal_all(Signal::SIGTERM);
        self.stopping = Some(Stopping::Fast { deadline: Instant::now() + STOP_GRACE });
    }

    fn graceful_stop(&mut self) {
        if self.stopping.is_some() {
            return;
        }
        log::info!(
            "graceful stop: waiting up to {:?} for {} workers to finish",
            self.config.graceful_timeout,
            self.children.len()
        );
        self.scoreboard.header.stopping.store(1, SeqCst);
        self.stopping = Some(Stopping::Graceful { deadline: Instant::now() + self.config.graceful_timeout });
        self.wake_retiring_workers();
    }

    fn pause_workers(&mut self) {
        log::info!("SIGWINCH: retiring all workers gracefully; HUP starts them again");
        self.workers_paused = true;
        self.new_generation();
        self.wake_retiring_workers();
    }

    fn new_generation(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        self.scoreboard.header.generation.store(self.generation, SeqCst);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        self.scoreboard.header.generation_started.store(now, Relaxed);
    }

    /// HUP: the new config is read and checked in full before anything changes; a
    /// broken one is logged and the old one keeps serving.
    fn reload(&mut self) {
        if self.stopping.is_some() {
            return;
        }
        let new = match config::load(&self.config.file) {
            Ok(c) => c,
            Err(e) => {
                log::error!("reload failed, still serving the previous configuration: {e}");
                return;
            }
        };
        let listeners = match self.rebind(&new) {
            Ok(l) => l,
            Err(e) => {
                log::error!("reload failed, still serving the previous configuration: {e}");
                return;
            }
        };
        prepare_log_files(&new);
        let logs = match AccessLogs::open(&new.access_logs) {
            Ok(l) => l,
            Err(e) => {
                log::error!("reload failed, still serving the previous configuration: {e}");
                return;
            }
        };
        if let Err(e) = crate::log::set_target(&new.error_log, new.log_level) {
            log::error!("cannot open the new error log, keeping the old one: {e}");
        }
        if new.workers.max as usize > self.scoreboard.slots.len() {
            log::warn!(
                "workers.max can only grow up to {} without a restart (the scoreboard is sized at start)",
                self.scoreboard.slots.len()
            );
        }
        self.listeners = listeners;
        self.logs = logs;
        self.rotations = rotations(&new, &self.rotations);
        self.config = new;
        prepare_log_files(&self.config);
        self.band = band(&self.config);
        self.scoreboard.header.min_spare.store(self.band.min_spare, Relaxed);
        self.spawn_rate = 1;
        self.short = true;
        self.full_reported = false;
        self.workers_paused = false;
        self.next_cert_check = 0;
        self.new_generation();
        log::info!("reloaded {}: generation {}", self.config.file.display(), self.generation);
        self.startup_children(self.config.workers.start);
        self.wake_retiring_workers();
        self.write_status_file();
    }

    /// The listeners for a new config: existing sockets are kept (never closed and
    /// rebound, so no connection is refused), new addresses are bound.
    fn rebind(&mut self, new: &Config) -> Result<Listeners, String> {
        let mut old: Vec<Listener> = std::mem::take(&mut self.listeners.list);
        let mut result = Vec::new();
        for entry in &new.listen {
            // The same address and kind first: entries with port 0 may repeat.
            let same = |l: &Listener| l.configured == entry.addr;
            let at = old.iter().position(|l| same(l) && l.tls == entry.tls).or_else(|| old.iter().position(same));
            if let Some(i) = at {
                let mut l = old.swap_remove(i);
                l.tls = entry.tls;
                result.push(l);
            } else {
                match listen::bind(*entry, new.backlog, listen::defer(new)) {
                    Ok(l) => {
                        log::info!("listening on {}", l.bound);
                        result.push(l);
                    }
                    Err(e) => {
                        // Put everything back as it was.
                        old.extend(result);
                        self.listeners.list = old;
                        return Err(format!("cannot listen on {}: {e}", entry.addr));
                    }
                }
            }
        }
        for l in &old {
            log::info!("no longer listening on {}", l.bound);
        }
        Listeners::new(result, new.http.send_timeout).map_err(|e| e.to_string())
    }

    /// USR1: reopen the logs by path (after logrotate renamed them).
    fn reopen_logs(&mut self) {
        prepare_log_files(&self.config);
        crate::log::reopen_error_log();
        self.logs.reopen();
        self.scoreboard.header.log_epoch.fetch_add(1, SeqCst);
        log::info!("logs reopened");
    }

    fn adjust_band(&mut self, delta: i32) {
        let min = (self.band.min_spare as i32 + delta).max(0) as u32;
        let max = (self.band.max_spare as i32 + delta).max(min as i32 + 1) as u32;
        self.band.min_spare = min;
        self.band.max_spare = max;
        self.scoreboard.header.min_spare.store(min, Relaxed);
        log::info!("spare workers: min_spare {min}, max_spare {max}");
    }
}

/// Creates every log file the workers write, owned by the workers' user.
fn prepare_log_files(config: &Config) {
    let owner = config.run_as.as_ref().map(|r| (r.uid, r.gid));
    let error_log = match &config.error_log {
        config::ErrorLogTarget::File(p) => Some(p),
        _ => None,
    };
    for path in config.access_logs.iter().map(|a| &a.path).chain(error_log) {
        if let Err(e) = crate::log::prepare_for_workers(path, owner) {
            log::error!("cannot prepare log file {}: {e}", path.display());
        }
    }
}

fn band(config: &Config) -> Band {
    Band { min_spare: config.workers.min_spare, max_spare: config.workers.max_spare, max: config.workers.max }
}
