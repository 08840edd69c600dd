//! The spare-worker policy, as a pure function: counts in, decision out.
//!
//! Apache prefork's `perform_idle_server_maintenance`, once a tick: fewer idle
//! workers than `min_spare` → spawn 1, then 2, 4 … up to [`MAX_SPAWN_RATE`] per tick
//! while the shortage lasts; more than `max_spare` → retire one idle worker per tick
//! (growing fast and shrinking slowly avoids fork churn); never more than `max`
//! workers. Any tick without a shortage resets the rate to 1.
//!
//! One addition: the master sees the listen queues. When short of idle workers with
//! connections already waiting, it forks one per waiting connection at once (up to
//! `max`) instead of ramping up over several seconds while clients wait. And while
//! short, it does not wait for the next tick to look again: every [`QUICK_LOOK`]
//! it forks for the connections waiting then ([`quick`]), so a burst has its
//! workers within a fraction of a second rather than at the next tick.
//!
//! What a worker's end means for the pool ([`on_exit`]) is decided here too, from its
//! exit code or signal: the protocol of [`ChildExit`] codes (Apache's
//! `APEXIT_CHILDFATAL` and `APEXIT_CHILDSICK`).

use std::time::Duration;

use log::Level;
use nix::sys::signal::Signal;

use crate::config::Config;
use crate::scoreboard::counters::ExitCause;
use crate::worker::ChildExit;

/// Most workers forked in one tick. Apache's value: enough to answer a burst within a
/// few seconds, few enough that forking does not starve the workers already serving.
pub const MAX_SPAWN_RATE: u32 = 32;

/// How often the master looks at the pool between ticks while it is short of idle
/// workers ([`short`]): a connection that finds every worker busy waits about this
/// long for one to be forked. A look costs the master a scan of its table and one
/// `getsockopt` per listener.
pub const QUICK_LOOK: Duration = Duration::from_millis(50);

/// A worker that dies younger than this is replaced by the tick's maintenance (whose
/// rate starts at one a second), not at once: a worker that crashes on start must
/// not become a fork loop.
pub const MIN_LIFETIME_FOR_RESPAWN: Duration = Duration::from_secs(1);

/// What the master counted this tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Idle workers of the current generation (ready or starting).
    pub idle: u32,
    /// Slots in use by any worker, of any generation.
    pub used_slots: u32,
    /// Connections waiting in the listen queues with no worker to take them: none
    /// of the generation takes connections now (each waits on a program, is full
    /// or starting). While an event loop takes them, a queue is a burst coming in
    /// (500 kept-alive clients at once), which the loops take in a few rounds: a
    /// worker forked per waiting connection then (28-59 forks at that burst) only
    /// took CPU from them.
    pub queued: u32,
}

/// The spare band and the ceiling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Band {
    pub min_spare: u32,
    pub max_spare: u32,
    pub max: u32,
}

impl Band {
    /// The band `[workers]` asks for.
    pub fn of(config: &Config) -> Band {
        let w = &config.workers;
        Band { min_spare: w.min_spare, max_spare: w.max_spare, max: w.max }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Nothing,
    Spawn(u32),
    RetireOne,
    /// Short of idle workers, but every slot is taken.
    Full,
}

/// Whether to look again before the next tick: fewer idle workers than wanted, and
/// room for more.
pub fn short(c: Counts, band: Band) -> bool {
    c.idle < band.min_spare && c.used_slots < band.max
}

/// A look between ticks: short of idle workers with connections waiting → a worker
/// per waiting connection, at most [`MAX_SPAWN_RATE`] a look (forking must not starve
/// the workers already serving). Never retires and leaves the tick's rate alone.
pub fn quick(c: Counts, band: Band) -> Decision {
    if c.idle >= band.min_spare || c.queued == 0 {
        return Decision::Nothing;
    }
    match c.queued.min(band.max.saturating_sub(c.used_slots)).min(MAX_SPAWN_RATE) {
        0 => Decision::Nothing,
        n => Decision::Spawn(n),
    }
}

/// Decides this tick's action; `rate` is the spawn rate carried between ticks.
pub fn decide(c: Counts, band: Band, rate: &mut u32) -> Decision {
    if c.idle > band.max_spare {
        *rate = 1;
        return Decision::RetireOne;
    }
    if c.idle < band.min_spare {
        let free = band.max.saturating_sub(c.used_slots);
        if free == 0 {
            *rate = 1;
            return Decision::Full;
        }
        let n = (*rate).max(c.queued).min(free);
        *rate = (*rate * 2).min(MAX_SPAWN_RATE);
        return Decision::Spawn(n);
    }
    *rate = 1;
    Decision::Nothing
}

/// How a worker ended, as `waitpid` tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(i32),
    Signal { signal: Signal, core: bool },
}

/// What a worker's end means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The slot wants a new worker at once (a crash or a recycle, not a retirement).
    pub replace: bool,
    pub then: Then,
    /// What the error log says about it, if anything.
    pub say: Option<(Level, String)>,
}

/// What else the master does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Then {
    Nothing,
    /// A worker of the current generation could not start: stop the server (and
    /// exit with failure) rather than fork it again and again.
    StopServer,
    /// A worker ran short of a resource: spawn slowly again.
    SlowDown,
}

/// Why a worker ended, for the metrics: `killed` and `stuck` as in [`on_exit`] (a
/// stuck worker may end by its `TERM` handler's exit or by `KILL`).
pub fn exit_cause(exit: Exit, killed: bool, stuck: bool) -> ExitCause {
    if stuck {
        return ExitCause::Stuck;
    }
    match exit {
        Exit::Signal { .. } if killed => ExitCause::Stopped,
        Exit::Signal { .. } => ExitCause::Signal,
        Exit::Code(code) => match ChildExit::from_code(code) {
            Some(ChildExit::Retired) => ExitCause::Retired,
            Some(ChildExit::Recycle) => ExitCause::MaxRequests,
            Some(ChildExit::Sick) => ExitCause::Sick,
            Some(ChildExit::Fatal) => ExitCause::Fatal,
            None if killed => ExitCause::Stopped,
            None => ExitCause::Code,
        },
    }
}

/// Whether the slot of a worker that ended gets a new worker at once: its end asks
/// for it ([`Verdict::replace`]: a crash or a recycle), it was of the current
/// generation (an old one's slot is the new generation's to fill), the master keeps
/// a pool now (`forking`: not paused, not stopping), and it lived at least
/// [`MIN_LIFETIME_FOR_RESPAWN`].
pub fn respawn_at_once(verdict: &Verdict, current: bool, forking: bool, lived: Duration) -> bool {
    verdict.replace && current && forking && lived >= MIN_LIFETIME_FOR_RESPAWN
}

/// Decides what the end of worker `pid` in `slot` means. `current`: it belonged to
/// the current generation; `killed`: the master had already decided its fate (it
/// was stuck, or the server stops), so its death by signal is no news.
pub fn on_exit(pid: i32, slot: usize, exit: Exit, current: bool, killed: bool) -> Verdict {
    let verdict = |replace, then, say: Option<(Level, String)>| Verdict { replace, then, say };
    let code = match exit {
        Exit::Signal { signal, core } => {
            if killed {
                return verdict(false, Then::Nothing, None);
            }
            let hint = if signal == Signal::SIGKILL { " (perhaps out of memory?)" } else { "" };
            let dump = if core { ", core dumped" } else { "" };
            let say = format!("worker {pid} (slot {slot}) killed by signal {signal}{dump}{hint}");
            return verdict(true, Then::Nothing, Some((Level::Error, say)));
        }
        Exit::Code(code) => code,
    };
    match ChildExit::from_code(code) {
        Some(ChildExit::Retired) => verdict(false, Then::Nothing, None),
        Some(ChildExit::Recycle) => verdict(true, Then::Nothing, None),
        Some(ChildExit::Fatal) if current => {
            let say = format!("worker {pid} (slot {slot}) could not start; stopping the server");
            verdict(false, Then::StopServer, Some((Level::Error, say)))
        }
        Some(ChildExit::Fatal) => {
            let say = format!("ignoring a fatal error in worker {pid} of an older generation");
            verdict(false, Then::Nothing, Some((Level::Warn, say)))
        }
        Some(ChildExit::Sick) => {
            let say = format!("worker {pid} (slot {slot}) exited short of resources");
            verdict(false, Then::SlowDown, Some((Level::Warn, say)))
        }
        None => {
            let say = format!("worker {pid} (slot {slot}) exited with code {code}");
            verdict(true, Then::Nothing, Some((Level::Error, say)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BAND: Band = Band { min_spare: 5, max_spare: 10, max: 256 };

    #[test]
    fn spawn_rate_doubles_to_32_then_resets() {
        let mut rate = 1;
        let short = Counts { idle: 0, used_slots: 10, queued: 0 };
        let spawned: Vec<_> = (0..8).map(|_| decide(short, BAND, &mut rate)).collect();
        assert_eq!(spawned, [1, 2, 4, 8, 16, 32, 32, 32].map(Decision::Spawn).to_vec());
        assert_eq!(decide(Counts { idle: 7, used_slots: 10, queued: 0 }, BAND, &mut rate), Decision::Nothing);
        assert_eq!(rate, 1);
    }

    #[test]
    fn waiting_connections_get_their_workers_at_once() {
        let mut rate = 1;
        let queued = Counts { idle: 0, used_slots: 10, queued: 40 };
        assert_eq!(decide(queued, BAND, &mut rate), Decision::Spawn(40));
        // The ramp goes on from where it was; the queue only raises a tick's count.
        assert_eq!(decide(Counts { queued: 0, ..queued }, BAND, &mut rate), Decision::Spawn(2));
        let band = Band { max: 20, ..BAND };
        assert_eq!(decide(queued, band, &mut rate), Decision::Spawn(10));
        // No shortage: a queue that idle workers are about to take forks nothing.
        assert_eq!(decide(Counts { idle: 6, used_slots: 10, queued: 3 }, BAND, &mut rate), Decision::Nothing);
    }

    #[test]
    fn a_quick_look_forks_for_waiting_connections_only() {
        let short = Counts { idle: 0, used_slots: 10, queued: 3 };
        assert_eq!(quick(short, BAND), Decision::Spawn(3));
        assert_eq!(quick(Counts { queued: 0, ..short }, BAND), Decision::Nothing);
        assert_eq!(quick(Counts { idle: 5, ..short }, BAND), Decision::Nothing);
        assert_eq!(quick(Counts { queued: 500, ..short }, BAND), Decision::Spawn(MAX_SPAWN_RATE));
        let band = Band { max: 12, ..BAND };
        assert_eq!(quick(short, band), Decision::Spawn(2));
        assert_eq!(quick(Counts { used_slots: 12, ..short }, band), Decision::Nothing);
        // Too many idle workers is the tick's business.
        assert_eq!(quick(Counts { idle: 30, used_slots: 30, queued: 1 }, BAND), Decision::Nothing);
    }

    #[test]
    fn looks_between_ticks_only_while_short_with_room() {
        let c = Counts { idle: 4, used_slots: 10, queued: 0 };
        assert!(short(c, BAND));
        assert!(!short(Counts { idle: 5, ..c }, BAND));
        assert!(!short(c, Band { max: 10, ..BAND }));
    }

    #[test]
    fn never_above_max() {
        let mut rate = 32;
        let band = Band { max: 12, ..BAND };
        assert_eq!(decide(Counts { idle: 0, used_slots: 9, queued: 0 }, band, &mut rate), Decision::Spawn(3));
        assert_eq!(decide(Counts { idle: 0, used_slots: 12, queued: 0 }, band, &mut rate), Decision::Full);
        assert_eq!(rate, 1);
    }

    #[test]
    fn retires_one_at_a_time() {
        let mut rate = 8;
        assert_eq!(decide(Counts { idle: 30, used_slots: 30, queued: 0 }, BAND, &mut rate), Decision::RetireOne);
        assert_eq!(rate, 1);
        assert_eq!(decide(Counts { idle: 11, used_slots: 11, queued: 0 }, BAND, &mut rate), Decision::RetireOne);
        assert_eq!(decide(Counts { idle: 10, used_slots: 10, queued: 0 }, BAND, &mut rate), Decision::Nothing);
        assert_eq!(decide(Counts { idle: 5, used_slots: 10, queued: 0 }, BAND, &mut rate), Decision::Nothing);
    }

    #[test]
    fn old_generation_slots_count_against_max() {
        let mut rate = 4;
        let band = Band { max: 10, ..BAND };
        // 8 slots held by a retiring generation, none of the new one idle yet.
        assert_eq!(decide(Counts { idle: 0, used_slots: 8, queued: 0 }, band, &mut rate), Decision::Spawn(2));
    }

    fn exit(code: ChildExit) -> Exit {
        Exit::Code(code as i32)
    }

    #[test]
    fn a_retired_worker_is_not_replaced_a_recycled_one_is() {
        assert_eq!(
            on_exit(7, 1, exit(ChildExit::Retired), true, false),
            Verdict { replace: false, then: Then::Nothing, say: None }
        );
        assert_eq!(
            on_exit(7, 1, exit(ChildExit::Recycle), true, false),
            Verdict { replace: true, then: Then::Nothing, say: None }
        );
    }

    #[test]
    fn a_worker_that_cannot_start_stops_the_server_unless_it_is_old() {
        let v = on_exit(7, 2, exit(ChildExit::Fatal), true, false);
        assert_eq!((v.replace, v.then), (false, Then::StopServer));
        assert_eq!(v.say, Some((Level::Error, "worker 7 (slot 2) could not start; stopping the server".into())));
        let v = on_exit(7, 2, exit(ChildExit::Fatal), false, false);
        assert_eq!((v.replace, v.then), (false, Then::Nothing));
        assert_eq!(v.say.unwrap().0, Level::Warn);
    }

    #[test]
    fn a_sick_worker_slows_the_spawning() {
        let v = on_exit(7, 3, exit(ChildExit::Sick), true, false);
        assert_eq!((v.replace, v.then), (false, Then::SlowDown));
        assert_eq!(v.say, Some((Level::Warn, "worker 7 (slot 3) exited short of resources".into())));
    }

    #[test]
    fn an_unknown_code_or_a_signal_is_a_crash_said_and_replaced() {
        let v = on_exit(7, 4, Exit::Code(101), true, false);
        assert_eq!((v.replace, v.then), (true, Then::Nothing));
        assert_eq!(v.say, Some((Level::Error, "worker 7 (slot 4) exited with code 101".into())));
        let v = on_exit(7, 4, Exit::Signal { signal: Signal::SIGSEGV, core: true }, true, false);
        assert!(v.replace);
        assert_eq!(v.say, Some((Level::Error, "worker 7 (slot 4) killed by signal SIGSEGV, core dumped".into())));
        let v = on_exit(7, 4, Exit::Signal { signal: Signal::SIGKILL, core: false }, false, false);
        assert!(v.say.unwrap().1.ends_with("killed by signal SIGKILL (perhaps out of memory?)"));
    }

    #[test]
    fn a_crashed_worker_is_replaced_at_once_only_if_it_lived_and_belongs() {
        let crash = on_exit(7, 4, Exit::Code(101), true, false);
        let retired = on_exit(7, 4, exit(ChildExit::Retired), true, false);
        let old = MIN_LIFETIME_FOR_RESPAWN;
        assert!(respawn_at_once(&crash, true, true, old));
        assert!(!respawn_at_once(&crash, true, true, old - Duration::from_millis(1)), "young: paced");
        assert!(!respawn_at_once(&crash, false, true, old), "an old generation's slot");
        assert!(!respawn_at_once(&crash, true, false, old), "paused or stopping");
        assert!(!respawn_at_once(&retired, true, true, old), "it left as asked");
    }

    #[test]
    fn a_worker_the_master_killed_dies_quietly() {
        for signal in [Signal::SIGTERM, Signal::SIGKILL] {
            let v = on_exit(7, 5, Exit::Signal { signal, core: false }, true, true);
            assert_eq!(v, Verdict { replace: false, then: Then::Nothing, say: None });
        }
    }

    #[test]
    fn every_end_has_its_cause() {
        let term = Exit::Signal { signal: Signal::SIGTERM, core: false };
        let segv = Exit::Signal { signal: Signal::SIGSEGV, core: true };
        let cases = [
            (exit(ChildExit::Retired), false, false, ExitCause::Retired),
            (exit(ChildExit::Recycle), false, false, ExitCause::MaxRequests),
            (exit(ChildExit::Sick), false, false, ExitCause::Sick),
            (exit(ChildExit::Fatal), false, false, ExitCause::Fatal),
            (Exit::Code(101), false, false, ExitCause::Code),
            (segv, false, false, ExitCause::Signal),
            (term, true, false, ExitCause::Stopped),
            (Exit::Code(101), true, false, ExitCause::Stopped),
            // The watchdog's TERM, or its KILL, or a worker that got out just in time.
            (term, true, true, ExitCause::Stuck),
            (Exit::Signal { signal: Signal::SIGKILL, core: false }, true, true, ExitCause::Stuck),
            (exit(ChildExit::Retired), true, true, ExitCause::Stuck),
            // A stopping worker that finished on its own left as asked.
            (exit(ChildExit::Retired), true, false, ExitCause::Retired),
        ];
        for (how, killed, stuck, cause) in cases {
            assert_eq!(exit_cause(how, killed, stuck), cause, "{how:?} killed={killed} stuck={stuck}");
        }
    }
}
