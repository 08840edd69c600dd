//! What the master holds ([`Master`]: the config, the listeners, the scoreboard,
//! the pid table, its life, and each part's own state: the pool's, what it has
//! told, the upgrade's, ACME's). The loop (`super`) and each part's moves (`pool`,
//! `report`, `upgrade`, `acme`, `stops`, `retire`, `reload`) work on it.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::time::Instant;

use nix::unistd::Pid;

use super::life::Life;
use super::maintenance::Band;
use super::signals::Signals;
use crate::acme::schedule;
use crate::config::Config;
use crate::fork::handover::Handover;
use crate::fork::listen::Listeners;
use crate::fork::pod::{Doorbell, Pod};
use crate::log::access::AccessLogs;
use crate::log::held::{Area, Region};
use crate::log::rotate::Schedule;
use crate::scoreboard::Scoreboard;
use crate::tls::tickets::TicketKeys;

pub(super) struct Child {
    pub(super) slot: usize,
    pub(super) generation: u32,
    pub(super) born: Instant,
    pub(super) fate: Fate,
    /// Where its buffered logs hold records on its slot's shelf, by path, as its
    /// config laid them out: what the master writes out if it dies holding some.
    pub(super) held: Vec<(PathBuf, Area)>,
}

/// What the master decided about a worker, if anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fate {
    /// Nothing: its death is news (a crash is said and the worker replaced).
    Own,
    /// Sent away by a stop (TERM, KILL): its death by signal is no news.
    Stopped,
    /// Stopped by the watchdog (the metrics count its end as `stuck`): TERM was sent;
    /// KILL at `kill_at` if it is still there (`None` once sent).
    Stuck { kill_at: Option<Instant> },
}

impl Fate {
    /// The master already decided this one's fate: don't log its death.
    pub(super) fn decided(self) -> bool {
        self != Fate::Own
    }
}

pub struct Master {
    pub(super) config: Config,
    pub(super) listeners: Listeners,
    pub(super) scoreboard: Scoreboard,
    pub(super) pod: Pod,
    pub(super) doorbell: Doorbell,
    pub(super) handover: Handover,
    /// One socket pair per event loop of a generation, by slot: where a loop sends
    /// the connections whose packets come in on another loop's CPU
    /// (`worker::home`).
    pub(super) homes: Vec<Handover>,
    pub(super) token: String,
    /// The session-ticket key chain, made before the first fork and stepped on the
    /// tick; every worker copies it and steps its copy itself ([`crate::tls::tickets`]).
    pub(super) tickets: TicketKeys,
    /// When the certificates are next looked at for expiry (Unix seconds).
    pub(super) next_cert_check: i64,
    /// The htpasswd files the config read: one that changes is a reason to read the
    /// config again (as HUP does).
    pub(super) auth_files: crate::keys::watch::Watch,
    pub(super) signals: Signals,
    pub(super) logs: AccessLogs,
    /// Every slot's shelf of held access-log records (`log::held`), made before the
    /// first fork.
    pub(super) held: Region,
    pub(super) rotations: Schedule,
    /// The pid table: the only pids the master ever signals.
    pub(super) children: HashMap<Pid, Child>,
    pub(super) generation: u32,
    /// Serving, paused, draining, stopping, or superseded by an upgrade.
    pub(super) life: Life,
    pub(super) pool: Pool,
    pub(super) upgrade: Upgrades,
    pub(super) report: Report,
    /// Certificates from ACME: the child, and each certificate's tries (`acme.rs`).
    pub(super) acme: Acme,
    /// The fleet this node is one of (`[cluster]`, `fleet.rs`); `None`: alone.
    pub(super) fleet: Option<super::fleet::Fleet>,
    /// Bound workers' application processes, bound beside them (`pairs.rs`).
    pub(super) pairs: super::pairs::Pairs,
}

/// The pool's own state between looks.
pub(super) struct Pool {
    /// The spare band and the ceiling (the config's, moved by TTIN and TTOU).
    pub(super) band: Band,
    /// Workers forked at the next shortage, doubling while it lasts.
    pub(super) spawn_rate: u32,
    /// The last look found the pool short of idle workers: look again before the
    /// tick.
    pub(super) short: bool,
    /// "workers.max reached" was said: the error log says it once, not every tick,
    /// until a reload.
    pub(super) full_reported: bool,
}

impl Pool {
    pub(super) fn new(band: Band) -> Pool {
        // The first look comes soon after start (or a reload): a burst may be
        // waiting already.
        Pool { band, spawn_rate: 1, short: true, full_reported: false }
    }
}

/// What has been said, so each thing is said once.
pub(super) struct Report {
    /// The `READY=1` systemd still waits for.
    pub(super) awaited: Awaited,
    /// The last `STATUS=` sent, sent again only when it changes.
    pub(super) status: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Awaited {
    /// The start's: once the first workers serve (or, if one cannot start, the
    /// launching command hears why).
    Start,
    /// A reload's, after `RELOADING=1`: once a worker of the new generation serves.
    Reload,
    Nothing,
}

impl Report {
    pub(super) fn new() -> Report {
        Report { awaited: Awaited::Start, status: String::new() }
    }

    /// The start is not told yet: the loop looks again within milliseconds.
    pub(super) fn start_pending(&self) -> bool {
        self.awaited == Awaited::Start
    }
}

/// What the master keeps for upgrades.
pub(super) struct Upgrades {
    /// This binary, as it was found at start: what an upgrade execs, so a package
    /// that replaced the file brings in the new version.
    pub(super) exe: Option<PathBuf>,
    /// The pid file this master owns: the config's, or `<pid_file>.oldbin` while a
    /// new master takes over (and after it did). The status file lies beside it.
    pub(super) pid_path: PathBuf,
    /// The upgrade under way.
    pub(super) under_way: Option<Upgrade>,
    /// Upgrades that failed (the status file says, for `pika -k upgrade`).
    pub(super) failed: u32,
}

impl Upgrades {
    pub(super) fn new(pid_file: &Path) -> Upgrades {
        Upgrades { exe: std::env::current_exe().ok(), pid_path: pid_file.to_path_buf(), under_way: None, failed: 0 }
    }
}

/// An upgrade under way: the new master and the pipe it answers on.
pub(super) struct Upgrade {
    pub(super) child: Pid,
    pub(super) pipe: File,
    pub(super) said: Vec<u8>,
    pub(super) deadline: Instant,
}

impl Upgrade {
    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.pipe.as_fd()
    }
}

/// The ACME side of the master's state.
#[derive(Default)]
pub(super) struct Acme {
    pub(super) running: Option<Running>,
    /// Per certificate (its names): failures, back-off, when obtained.
    pub(super) lives: HashMap<Vec<String>, schedule::CertRetry>,
    /// New certificates are stored: reload once the child is done.
    pub(super) install: bool,
}

pub(super) struct Running {
    pub(super) pid: Pid,
    /// `None` once it read end of file.
    pub(super) pipe: Option<std::fs::File>,
    pub(super) buf: Vec<u8>,
    /// The certificates it was sent for, and not yet reported on.
    pub(super) waiting: Vec<Vec<String>>,
    /// Its start, or its last report on a job (each job has its own order_timeout).
    pub(super) since: Instant,
    /// Why the master ended it, once it did.
    pub(super) ending: Option<Ending>,
}

/// Why the master ended the ACME child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    /// The server stops.
    Stopping,
    /// An operator's reload: a child of the new config takes its jobs.
    Replaced,
    /// It reported nothing for longer than an order may take.
    Late,
}

impl Acme {
    /// The pipe the master polls while the child runs.
    pub(super) fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.running.as_ref()?.pipe.as_ref().map(|p| p.as_fd())
    }

    /// When each certificate is next tried and how many tries failed in a row.
    pub(super) fn life(&self, names: &[String]) -> schedule::CertRetry {
        self.lives.get(names).copied().unwrap_or_default()
    }

    /// A certificate another node of the fleet obtained at `at` was installed here:
    /// it counts as this node's for the one-hour floor (`schedule::RENEW_FLOOR`), so a
    /// fleet orders a name at most once an hour too, and the failures are over.
    pub(super) fn obtained_elsewhere(&mut self, names: &[String], at: i64) {
        self.lives.insert(names.to_vec(), schedule::CertRetry { failures: 0, not_before_try: 0, obtained: at });
    }
}
