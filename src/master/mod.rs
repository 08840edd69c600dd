//! The master process: it binds, forks, watches and never serves a request.
//!
//! One flat loop with a one-second tick (docs/design.md, The process model):
//! wait for a signal or the tick → act on signals → reap exited workers → on the tick,
//! maintain the pool, retire old generations, stop stuck workers → stop when asked and
//! no worker is left. While the pool is short of idle workers the loop also wakes
//! every [`maintenance::QUICK_LOOK`] to fork for connections waiting in the queue.
//!
//! Only pids from the master's own table are ever signalled; the scoreboard (which
//! workers write) is read for states, never for pids to kill.
//!
//! This file is the loop, forking, reaping and reloading; beside it: [`signals`]
//! (signal → [`signals::Control`]), [`maintenance`] (the pure policies: how many
//! workers to fork or retire, what a worker's exit means), `pool` (counting the pool
//! and forking into free slots), `retire` (the pipe of death, waking old
//! generations, the stuck-worker watchdog, the stops) and [`ready`] (telling the
//! launching command that the server is up).

pub mod maintenance;
mod pool;
pub mod ready;
mod reload;
mod retire;
pub mod signals;
mod upgrade;

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::Signal;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::config::Config;
use crate::handover::Handover;
use crate::listen::{self, Listeners};
use crate::log::access::AccessLogs;
use crate::log::rotate::Schedule;
use crate::pod::{self, Doorbell, Pod};
use crate::scoreboard::{Scoreboard, State};
use crate::statusfile;
use crate::sys::{self, Forked};
use crate::tls::tickets::TicketKeys;
use crate::worker::{self, WorkerCtx};
use maintenance::{Band, Exit, Then};
use ready::Ready;
use reload::prepare_log_files;
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

fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

struct Child {
    slot: usize,
    generation: u32,
    born: Instant,
    /// The master already decided this one's fate (stuck, stop): don't log its death.
    killed: bool,
    /// Sent TERM as stuck: KILL at this time if it is still there.
    kill_at: Option<Instant>,
    /// Stopped by the watchdog (the metrics count its end as `stuck`).
    stuck: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stopping {
    /// QUIT with `server.drain_time`: until `until`, health checks answer 503 and
    /// everything else is served as usual; then the graceful stop.
    Draining { until: Instant },
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
    handover: Handover,
    token: String,
    /// The session-ticket key chain, made before the first fork and stepped on the
    /// tick; every worker copies it and steps its copy itself ([`crate::tls::tickets`]).
    tickets: TicketKeys,
    /// When the certificates are next looked at for expiry (Unix seconds).
    next_cert_check: i64,
    signals: Signals,
    logs: AccessLogs,
    rotations: Schedule,
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
    /// This binary, as it was found at start: what an upgrade (USR2) execs, so a
    /// package that replaced the file brings in the new version.
    exe: Option<std::path::PathBuf>,
    /// The pid file this master owns: the config's, or `<pid_file>.oldbin` while a
    /// new master takes over (and after it did).
    pid_path: std::path::PathBuf,
    /// A binary upgrade under way ([`upgrade`]).
    upgrade: Option<upgrade::Upgrade>,
    /// Upgrades that failed (the status file says, for `pika -k upgrade`).
    upgrades_failed: u32,
    /// This master gave way to a new one: it retires its workers and exits.
    superseded: bool,
    /// A reload told systemd RELOADING=1: READY=1 follows once the new generation
    /// serves.
    reload_unconfirmed: bool,
    /// systemd was told READY=1 (or the start failed).
    announced: bool,
    /// The last STATUS= told systemd, sent again only when it changes.
    notified_status: String,
}

impl Master {
    /// Everything that can fail at start, before the first fork: bind, map the
    /// scoreboard, open the logs.
    ///
    /// `inherited`: sockets given by an old master (binary upgrade) or by systemd;
    /// each `listen` entry takes its own if there is one, and only the others are
    /// bound here.
    pub fn new(config: Config, inherited: &mut crate::inherit::Inherited) -> Result<Master, String> {
        let mut listeners = Vec::new();
        for entry in &config.listen {
            let l = match inherited.take_listener(entry) {
                Some(given) => listen::adopt(*entry, given).map_err(|e| format!("inherited {}: {e}", entry.addr))?,
                None => listen::bind(*entry, config.backlog, listen::defer(&config))
                    .map_err(|e| format!("cannot listen on {}: {e}", entry.addr))?,
            };
            listeners.push(l);
        }
        for left in inherited.listeners.drain(..) {
            let addr = left.socket.local_addr().map_or("?".to_string(), |a| a.to_string());
            inherited
                .notes
                .push(format!("an inherited socket on {addr} ({:?}) matches no listen entry; closed", left.origin));
        }
        let listeners = Listeners::new(listeners, config.http.send_timeout).map_err(|e| e.to_string())?;
        let scoreboard = Scoreboard::new(config.workers.max as usize).map_err(|e| format!("scoreboard: {e}"))?;
        let pod = Pod::new().map_err(|e| format!("pipe of death: {e}"))?;
        let doorbell = Doorbell::new().map_err(|e| format!("doorbell: {e}"))?;
        let handover = match inherited.handover.take() {
            // The old master's pair: its leaving workers hand their kept-alive
            // connections to ours.
            Some((send, recv)) => Handover::from_fds(send, recv),
            None => Handover::new().map_err(|e| format!("handover socket: {e}"))?,
        };
        scoreboard.header.handover_open.store(1, Relaxed);
        let token = match inherited.token.take() {
            Some(t) => t,
            None => pod::make_token().map_err(|e| format!("token: {e}"))?,
        };
        let tickets = TicketKeys::new(unix_now() as u64).map_err(|e| format!("ticket keys: {e}"))?;
        let signals = Signals::install().map_err(|e| format!("signals: {e}"))?;
        // Created for the workers before they are opened, so a new file gets their
        // group (an existing one keeps its own).
        prepare_log_files(&config);
        let logs = AccessLogs::open(&config.access_logs).map_err(|e| e.to_string())?;
        let band = Band::of(&config);
        scoreboard.header.min_spare.store(band.min_spare, Relaxed);
        scoreboard.header.max_spare.store(band.max_spare, Relaxed);
        let rotations = Schedule::new(config.rotated_logs(), &Schedule::default(), unix_now());
        Ok(Master {
            rotations,
            exe: std::env::current_exe().ok(),
            pid_path: config.pid_file.clone(),
            upgrade: None,
            upgrades_failed: 0,
            superseded: false,
            reload_unconfirmed: false,
            announced: false,
            notified_status: String::new(),
            config,
            listeners,
            scoreboard,
            pod,
            doorbell,
            handover,
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

    /// What the config's reader noted that is not an error (keys that no longer
    /// apply), once per start or reload.
    fn say_notes(&self) {
        for note in &self.config.notes {
            log::warn!("{note}");
        }
    }

    /// The addresses actually bound (port 0 in the config picks a free port).
    pub fn bound(&self) -> Vec<std::net::SocketAddr> {
        self.listeners.list.iter().map(|l| l.bound).collect()
    }

    /// The master loop. Returns when the server has stopped. `ready` is told once the
    /// first workers are serving (or could not start).
    pub fn run(mut self, ready: &mut Ready) -> ExitCode {
        self.say_notes();
        prepare_log_files(&self.config);
        self.startup_children(self.config.workers.start);
        let mut next_tick = Instant::now() + TICK;
        let mut last_look = Instant::now();
        loop {
            if ready.pending() || !self.announced {
                self.report_ready(ready);
            }
            // While short of idle workers, look again QUICK_LOOK after the last look.
            let next_look = if self.short { last_look + maintenance::QUICK_LOOK } else { next_tick };
            let mut wait = next_tick.min(next_look).saturating_duration_since(Instant::now());
            if ready.pending() || !self.announced {
                // Report readiness promptly: workers turn ready within milliseconds.
                wait = wait.min(Duration::from_millis(20));
            }
            let ms = u16::try_from(wait.as_millis()).unwrap_or(u16::MAX);
            {
                let mut fds = vec![
                    PollFd::new(self.signals.fd(), PollFlags::POLLIN),
                    PollFd::new(self.doorbell.fd(), PollFlags::POLLIN),
                ];
                if let Some(u) = &self.upgrade {
                    fds.push(PollFd::new(u.fd(), PollFlags::POLLIN));
                }
                let _ = poll(&mut fds, PollTimeout::from(ms));
            }
            if self.doorbell.take() {
                // A worker found too few idle workers: look now (or a quick look
                // after the last one).
                self.short = true;
            }
            for control in self.signals.take() {
                self.handle(control);
            }
            self.reap();
            self.watch_upgrade();
            self.confirm_reload();
            let now = Instant::now();
            if now >= next_tick {
                next_tick = now + TICK;
                last_look = now;
                self.tick();
            } else if self.short && now >= last_look + maintenance::QUICK_LOOK {
                last_look = now;
                self.quick_look();
            }
            if self.winding_down() && self.children.is_empty() {
                self.report_ready(ready);
                break;
            }
        }
        statusfile::remove(&self.pid_path);
        if self.superseded {
            let _ = std::fs::remove_file(&self.pid_path);
            log::info!("pika (pid {}) exits: the new master serves", std::process::id());
        } else {
            log::info!("pika stopped");
        }
        if self.fatal { ExitCode::FAILURE } else { ExitCode::SUCCESS }
    }

    /// Ready when every first-generation worker has left `Starting` (or none was
    /// asked for); failed if one could not start.
    fn report_ready(&mut self, ready: &mut Ready) {
        if self.fatal {
            ready.fail("a worker could not start (see the error log)");
            self.announced = true;
        } else if self.children.values().all(|c| self.scoreboard.slots[c.slot].state() != State::Starting) {
            self.write_status_file();
            ready.ok();
            if !self.announced {
                self.announced = true;
                crate::notify::send(&format!("READY=1\nSTATUS={}", self.status_line()));
            }
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
            Control::Upgrade => self.start_upgrade(),
            Control::ChildExited => {} // reaped right after
        }
    }

    /// A stop is under way, past any drain: workers leave and none is forked.
    fn winding_down(&self) -> bool {
        matches!(self.stopping, Some(Stopping::Graceful { .. } | Stopping::Fast { .. }))
    }

    /// The once-a-second work.
    fn tick(&mut self) {
        match self.stopping {
            Some(Stopping::Draining { until }) if Instant::now() >= until => {
                self.stopping = None;
                self.begin_graceful_stop();
            }
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
        if !self.winding_down() && !self.workers_paused {
            self.perform_idle_server_maintenance();
        } else {
            self.short = false;
        }
        self.wake_retiring_workers();
        self.kill_stuck_workers();
        self.rotate_logs();
        self.write_status_file();
        self.notify_status();
        self.tickets.advance(unix_now() as u64);
        self.check_certificates();
    }

    /// Once a day (and after each reload): certificates close to expiry are said in
    /// the error log.
    fn check_certificates(&mut self) {
        let now = unix_now();
        if now >= self.next_cert_check {
            crate::tls::expiry::log_warnings(&self.config.certificate_expiries(now), now);
            self.next_cert_check = now + crate::tls::expiry::CHECK_EVERY.as_secs() as i64;
        }
    }

    /// Built-in rotation ([`Schedule`]): rename each due log, create its successor
    /// for the workers, then bump the log epoch once so every worker reopens before
    /// its next write.
    fn rotate_logs(&mut self) {
        let owner = self.config.run_as.as_ref().map(|r| (r.uid, r.gid));
        if self.rotations.rotate_due(unix_now(), owner) {
            crate::log::reopen_error_log();
            self.logs.reopen();
            self.scoreboard.header.log_epoch.fetch_add(1, SeqCst);
            log::info!("logs rotated");
        }
    }

    /// The scoreboard's counts in a line, for systemd's STATUS=.
    fn status_line(&self) -> String {
        let snap = crate::status::Snapshot::take(&self.scoreboard, std::process::id() as i32);
        format!(
            "{} workers ({} idle), {} connections held, {} requests, generation {}",
            snap.busy() + snap.idle(),
            snap.idle(),
            snap.conns_total(),
            snap.total_requests,
            self.generation
        )
    }

    /// STATUS= when the counts changed (at most once a tick).
    fn notify_status(&mut self) {
        if self.superseded {
            return; // the new master speaks now
        }
        let line = self.status_line();
        if line != self.notified_status {
            crate::notify::send(&format!("STATUS={line}"));
            self.notified_status = line;
        }
    }

    /// READY=1 after RELOADING=1, once a worker of the new generation serves.
    fn confirm_reload(&mut self) {
        if !self.reload_unconfirmed {
            return;
        }
        let serving = self.children.values().any(|c| {
            c.generation == self.generation
                && !matches!(self.scoreboard.slots[c.slot].state(), State::Starting | State::Dead)
        });
        if serving || self.config.workers.start == 0 {
            self.reload_unconfirmed = false;
            crate::notify::send(&format!("READY=1\nSTATUS={}", self.status_line()));
        }
    }

    /// Rewrites the status file `pika -k status` and `-k reload` read.
    fn write_status_file(&self) {
        let mut text = crate::status::Snapshot::take(&self.scoreboard, std::process::id() as i32).summary();
        text.push_str(&format!("upgrades_failed: {}\n", self.upgrades_failed));
        let _ = statusfile::write(&self.pid_path, &text);
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
                    handover: Some(&self.handover),
                    token: &self.token,
                    tickets: &self.tickets,
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
                    Child {
                        slot,
                        generation: self.generation,
                        born: Instant::now(),
                        killed: false,
                        kill_at: None,
                        stuck: false,
                    },
                );
                self.scoreboard.header.pool.starts.fetch_add(1, Relaxed);
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
            let (pid, exit) = match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => (pid, Exit::Code(code)),
                Ok(WaitStatus::Signaled(pid, signal, core)) => (pid, Exit::Signal { signal, core }),
                Ok(WaitStatus::StillAlive) | Err(_) => return, // ECHILD: none left
                Ok(_) => continue,
            };
            let Some(child) = self.children.remove(&pid) else {
                if !self.new_master_exited(pid, exit) {
                    log::debug!("reaped unknown child {pid}");
                }
                continue;
            };
            let slot = &self.scoreboard.slots[child.slot];
            slot.pid.store(0, Relaxed);
            slot.set_state(State::Dead);
            let current = child.generation == self.generation;
            let cause = maintenance::exit_cause(exit, child.killed, child.stuck);
            self.scoreboard.header.pool.exited(cause);
            let verdict = maintenance::on_exit(pid.as_raw(), child.slot, exit, current, child.killed);
            if let Some((level, line)) = &verdict.say {
                log::log!(*level, "{line}");
            }
            match verdict.then {
                Then::Nothing => {}
                Then::StopServer => {
                    self.fatal = true;
                    self.fast_stop();
                }
                Then::SlowDown => self.spawn_rate = 1,
            }
            // A crashed or recycled worker of the current generation is replaced in its
            // own slot at once, unless it died young (then maintenance paces it).
            if verdict.replace
                && current
                && !self.winding_down()
                && !self.workers_paused
                && child.born.elapsed() >= MIN_LIFETIME_FOR_RESPAWN
            {
                if let Err(e) = self.make_child(child.slot) {
                    log::error!("fork failed: {e}");
                }
            }
        }
    }

    fn new_generation(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        self.scoreboard.header.generation.store(self.generation, SeqCst);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        self.scoreboard.header.generation_started.store(now, Relaxed);
    }
}
