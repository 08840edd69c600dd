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
//! The master's phase (serving, paused, draining, stopping, superseded by an upgrade)
//! is one value, [`life::Life`]; the loop asks it what to do.
//!
//! This file is the loop, forking and reaping; beside it: [`signals`] (signal →
//! [`signals::Control`]), `life` (the phases and every move between them: the
//! stops, WINCH's pause, an upgrade's hand-over), [`maintenance`] (the pure policies:
//! how many workers to fork or retire, what a worker's exit means, whether it is
//! replaced at once), `pool` (counting the pool and forking into free slots),
//! `retire` (the pipe of death, waking the workers that must go, the stuck-worker
//! watchdog), `reload` (HUP, USR1), `upgrade` (USR2), `report` (all the master
//! tells systemd, the status file and the launching command), [`ready`] (the
//! launching command's pipe), `acme` (certificates: the ACME child and its reports),
//! `fleet` (a fleet's shared state through Redis, `[cluster]`) and `pairs` (a
//! bound worker's application process bound to its CPU).

mod acme;
mod fleet;
mod fleet_sync;
mod life;
pub mod maintenance;
pub mod notify;
mod pairs;
pub mod pidfile;
mod pool;
pub mod ready;
mod reload;
mod report;
mod retire;
pub mod signals;
mod state;
pub mod statusfile;
mod stops;
mod upgrade;

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::base::clock::unix_secs;
use crate::base::sys::{self, Forked};
use crate::config::Config;
use crate::fork::handover::Handover;
use crate::fork::listen::{self, Listeners};
use crate::fork::pod::{self, Doorbell, Pod};
use crate::log::access::AccessLogs;
use crate::log::held::Region;
use crate::log::rotate::Schedule;
use crate::scoreboard::{Scoreboard, State};
use crate::worker::{self, WorkerCtx};
use life::Life;
use maintenance::{Band, Exit, Then};
use ready::Ready;
use reload::prepare_log_files;
use signals::{Control, Signals};
pub use state::Master;
use state::{Acme, Child, Fate, Pool, Report, Upgrades};

/// The maintenance period (Apache's: one second).
const TICK: Duration = Duration::from_secs(1);
impl Master {
    /// Everything that can fail at start, before the first fork: bind, map the
    /// scoreboard, open the logs.
    ///
    /// `inherited`: sockets given by an old master (binary upgrade) or by systemd;
    /// each `listen` entry takes its own if there is one, and only the others are
    /// bound here.
    pub fn new(config: Config, inherited: &mut crate::fork::inherit::Inherited) -> Result<Master, String> {
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
        let listeners = Listeners::new(listeners).map_err(|e| e.to_string())?;
        // The workers' folder for request bodies, which they may not be able to make.
        config.make_body_dir()?;
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
        let loops = config.workers.cpu_affinity.loops(&sys::allowed_cpus()).min(config.workers.max as usize);
        let homes = (0..loops)
            .map(|_| Handover::new())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("event loops' socket pairs: {e}"))?;
        let token = match inherited.token.take() {
            Some(t) => t,
            None => pod::make_token().map_err(|e| format!("token: {e}"))?,
        };
        // In a fleet, the fleet's chain as this node last cached it (Redis is not
        // asked before the first fork: a start never waits on it).
        let tickets = fleet::start_tickets(config.cluster.as_ref(), unix_secs() as u64)
            .map_err(|e| format!("ticket keys: {e}"))?;
        let signals = Signals::install().map_err(|e| format!("signals: {e}"))?;
        // The ACME challenges' table, shared with every process forked from here on.
        crate::acme::challenges::map().map_err(|e| format!("acme challenges: {e}"))?;
        crate::acme::status::map().map_err(|e| format!("acme status: {e}"))?;
        crate::cluster::status::map().map_err(|e| format!("cluster status: {e}"))?;
        // Created for the workers before they are opened, so a new file gets their
        // group (an existing one keeps its own).
        prepare_log_files(&config);
        let logs = AccessLogs::open(&config.access_logs).map_err(|e| e.to_string())?;
        let held = Region::map(&AccessLogs::buffers(&config.access_logs), config.workers.max as usize)
            .map_err(|e| format!("held log records: {e}"))?;
        let rotations = Schedule::new(config.rotated_logs(), &Schedule::default(), unix_secs());
        let auth_files = crate::keys::watch::Watch::new(config.auth_files(), config.http.file_check_interval);
        let mut master = Master {
            rotations,
            upgrade: Upgrades::new(&config.pid_file),
            report: Report::new(),
            pool: Pool::new(Band::of(&config)),
            life: Life::Serving,
            acme: Acme::default(),
            fleet: None,
            pairs: Default::default(),
            config,
            listeners,
            scoreboard,
            pod,
            doorbell,
            handover,
            homes,
            token,
            tickets,
            next_cert_check: 0,
            auth_files,
            signals,
            logs,
            held,
            children: HashMap::new(),
            generation: 0,
        };
        master.new_pool();
        Ok(master)
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
        self.fleet_start();
        prepare_log_files(&self.config);
        self.startup_children(self.config.workers.start);
        let mut next_tick = Instant::now() + TICK;
        let mut last_look = Instant::now();
        loop {
            if ready.pending() || self.report.start_pending() {
                self.report_ready(ready);
            }
            // While short of idle workers, look again QUICK_LOOK after the last look.
            let next_look = if self.pool.short { last_look + maintenance::QUICK_LOOK } else { next_tick };
            let mut wait = next_tick.min(next_look).saturating_duration_since(Instant::now());
            if ready.pending() || self.report.start_pending() {
                // Report readiness promptly: workers turn ready within milliseconds.
                wait = wait.min(Duration::from_millis(20));
            }
            let ms = u16::try_from(wait.as_millis()).unwrap_or(u16::MAX);
            {
                let mut fds = vec![
                    PollFd::new(self.signals.fd(), PollFlags::POLLIN),
                    PollFd::new(self.doorbell.fd(), PollFlags::POLLIN),
                ];
                if let Some(u) = &self.upgrade.under_way {
                    fds.push(PollFd::new(u.fd(), PollFlags::POLLIN));
                }
                if let Some(fd) = self.acme.fd() {
                    fds.push(PollFd::new(fd, PollFlags::POLLIN));
                }
                let _ = poll(&mut fds, PollTimeout::from(ms));
            }
            self.acme_read();
            if self.doorbell.take() {
                // A worker found too few idle workers: look now (or a quick look
                // after the last one). Or a bound worker opened a connection to a
                // local application: its process is bound beside it.
                self.pool.short = true;
            }
            let live = self.children.iter().map(|(pid, c)| (c.slot, pid.as_raw()));
            self.pairs.look(self.scoreboard.slots, live, &self.config.workers.cpu_affinity);
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
            } else if self.pool.short && now >= last_look + maintenance::QUICK_LOOK {
                last_look = now;
                self.quick_look();
            }
            if self.life.ends_with_the_workers() && self.children.is_empty() {
                self.report_ready(ready);
                return self.exit();
            }
        }
    }

    fn handle(&mut self, control: Control) {
        match control {
            Control::FastStop => self.fast_stop(false),
            Control::GracefulStop => self.graceful_stop(),
            Control::Reload => {
                self.acme_forget();
                self.reload();
            }
            Control::ReopenLogs => self.reopen_logs(),
            Control::StopWorkers => self.pause(),
            Control::MoreSpare => self.adjust_band(1),
            Control::FewerSpare => self.adjust_band(-1),
            Control::Upgrade => self.start_upgrade(),
            Control::ChildExited => {} // reaped right after
        }
    }

    /// The once-a-second work.
    fn tick(&mut self) {
        self.advance_life();
        self.perform_idle_server_maintenance();
        self.wake_retiring_workers();
        self.kill_stuck_workers();
        self.rotate_logs();
        self.report_tick();
        self.tickets.advance(unix_secs() as u64);
        self.check_certificates();
        self.fleet_tick();
        self.acme_tick();
        self.check_auth_files();
    }

    /// An htpasswd file changed (looked at once per `file_check_interval`): the
    /// config is read again, its users with it, as on HUP.
    fn check_auth_files(&mut self) {
        if let Some(file) = self.auth_files.changed(Instant::now()) {
            log::info!("auth_file {} changed: reading the config again", file.display());
            self.reload();
        }
    }

    /// Once a day (and after each reload): certificates close to expiry are said in
    /// the error log.
    fn check_certificates(&mut self) {
        let now = unix_secs();
        if now >= self.next_cert_check {
            crate::acme::expiry::log_warnings(&self.config.certificate_expiries(now), now);
            self.next_cert_check = now + crate::acme::expiry::CHECK_EVERY.as_secs() as i64;
        }
    }

    /// Built-in rotation ([`Schedule`]): rename each due log, create its successor
    /// for the workers, then bump the log epoch once so every worker reopens before
    /// its next write.
    fn rotate_logs(&mut self) {
        let owner = self.config.run_as.as_ref().map(|r| (r.uid, r.gid));
        if self.rotations.rotate_due(unix_secs(), owner) {
            crate::log::reopen_error_log();
            self.logs.reopen();
            self.scoreboard.header.log_epoch.fetch_add(1, SeqCst);
            log::info!("logs rotated");
        }
    }

    fn make_child(&mut self, slot: usize) -> std::io::Result<()> {
        self.scoreboard.slots[slot].claim(self.generation);
        // Where the child will hold its records: counted empty until it lays the
        // shelf out itself, and remembered for its end.
        let shelf = self.held.shelf(slot);
        let areas = shelf.layout(&AccessLogs::buffers(&self.config.access_logs));
        shelf.clear(&areas);
        let held = self
            .config
            .access_logs
            .iter()
            .zip(&areas)
            .filter_map(|(log, area)| Some((log.path.clone(), (*area)?)))
            .collect();
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
                    homes: &self.homes,
                    token: &self.token,
                    tickets: &self.tickets,
                    logs,
                    log_epoch,
                    master: Some(nix::unistd::getppid()),
                    held: Some(shelf),
                };
                worker::child_main(ctx)
            }
            Ok(Forked::Parent(pid)) => {
                sys::restore_signals(&old_mask);
                let born = Instant::now();
                self.children.insert(pid, Child { slot, generation: self.generation, born, fate: Fate::Own, held });
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
                if !self.acme_child_exited(pid, exit) && !self.new_master_exited(pid, exit) {
                    log::debug!("reaped unknown child {pid}");
                }
                continue;
            };
            self.write_leftovers(pid, &child);
            self.pairs.release(child.slot);
            let slot = &self.scoreboard.slots[child.slot];
            slot.pid.store(0, Relaxed);
            slot.body_spool.store(0, Relaxed);
            slot.answer_spool.store(0, Relaxed);
            let released = self.scoreboard.upstreams.release(child.slot);
            if released > 0 {
                log::info!("worker {pid} (slot {}) ended holding {released} upstream connections", child.slot);
            }
            slot.set_state(State::Dead);
            let current = child.generation == self.generation;
            let stuck = matches!(child.fate, Fate::Stuck { .. });
            let cause = maintenance::exit_cause(exit, child.fate.decided(), stuck);
            self.scoreboard.header.pool.exited(cause);
            let verdict = maintenance::on_exit(pid.as_raw(), child.slot, exit, current, child.fate.decided());
            if let Some((level, line)) = &verdict.say {
                log::log!(*level, "{line}");
            }
            match verdict.then {
                Then::Nothing => {}
                Then::StopServer => self.fast_stop(true),
                Then::SlowDown => self.slow_down(),
            }
            if maintenance::respawn_at_once(&verdict, current, self.life.forks(), child.born.elapsed()) {
                if let Err(e) = self.make_child(child.slot) {
                    log::error!("fork failed: {e}");
                }
            }
        }
    }

    /// Writes the access-log records a worker that ended held (killed by `KILL`, or
    /// crashed: one that exits writes its own), before its slot gets another.
    fn write_leftovers(&self, pid: Pid, child: &Child) {
        let written = self.logs.write_leftovers(self.held.shelf(child.slot), &child.held);
        if written > 0 {
            log::info!("wrote the {written} bytes of access-log records worker {pid} (slot {}) held", child.slot);
        }
    }

    fn new_generation(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        self.scoreboard.header.generation.store(self.generation, SeqCst);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        self.scoreboard.header.generation_started.store(now, Relaxed);
    }
}
