//! What a worker is and holds whatever it does: what it gets from the master
//! ([`WorkerCtx`]), how it ends ([`ChildExit`], the exit-code protocol), whether it
//! must leave ([`must_retire`]), and the [`Observer`] through which its requests
//! report into its scoreboard slot ([`SlotObserver`]). The worker's start
//! (`super`), its event loop (`super::events`) and what that loop holds
//! (`super::parked`) all use these.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;

use nix::unistd::Pid;

use crate::config::Config;
use crate::fork::handover::Handover;
use crate::fork::listen::Listeners;
use crate::fork::pod::{Doorbell, Pod};
use crate::log::access::AccessLogs;
use crate::log::held::Shelf;
use crate::scoreboard::counters::{Outcome, add};
use crate::scoreboard::{Scoreboard, Slot, State};
use crate::serve::observer::{ConnState, Observer};
use crate::tls::tickets::TicketKeys;

/// How a worker ended: the exit-code protocol between worker and master.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum ChildExit {
    /// Retired: pipe of death, old generation, or stop.
    Retired = 0,
    /// Could not start (privileges, roots, logs): the server must stop, not respawn.
    Fatal = 3,
    /// Out of a resource (descriptors, memory): respawn, but slowly.
    Sick = 4,
    /// Served `max_requests`: replace it at once.
    Recycle = 5,
}

impl ChildExit {
    pub fn from_code(code: i32) -> Option<ChildExit> {
        Some(match code {
            0 => ChildExit::Retired,
            3 => ChildExit::Fatal,
            4 => ChildExit::Sick,
            5 => ChildExit::Recycle,
            _ => return None,
        })
    }
}

/// Everything a worker gets from the master.
pub struct WorkerCtx<'a> {
    pub config: &'a Config,
    pub listeners: &'a Listeners,
    pub scoreboard: &'a Scoreboard,
    pub slot: usize,
    pub generation: u32,
    pub pod: Option<&'a mut Pod>,
    /// Rung when this worker takes a connection and too few others are idle.
    pub doorbell: Option<&'a Doorbell>,
    /// Where a leaving worker sends its idle connections and others adopt them.
    pub handover: Option<&'a Handover>,
    /// The event loops' socket pairs, by slot (`super::home`).
    pub homes: &'a [Handover],
    pub token: &'a str,
    /// The session-ticket keys every worker shares ([`crate::tls::tickets`]).
    pub tickets: &'a TicketKeys,
    pub logs: AccessLogs,
    /// The log epoch `logs` (and the error log) were opened under. Read by the master
    /// before the fork: the master may rotate and bump the epoch while this process
    /// starts, and a worker that read the epoch itself after that bump would take its
    /// inherited, already renamed files for the current ones.
    pub log_epoch: u32,
    /// The master's pid (None in single-process mode).
    pub master: Option<Pid>,
    /// This worker's slot's piece of the shared memory where it holds access-log
    /// records, so that the master writes them if this worker is killed (`None` in
    /// single-process mode: a piece of its own).
    pub held: Option<Shelf>,
}

impl WorkerCtx<'_> {
    /// How many other workers of this one's generation, in slot `from` or above,
    /// are spares (idle, not full) of which `also` holds.
    pub(super) fn spare_siblings(&self, from: usize, also: impl Fn(&Slot) -> bool) -> usize {
        let slots = self.scoreboard.slots.iter().enumerate().skip(from);
        slots
            .filter(|&(i, s)| {
                i != self.slot && s.generation.load(Relaxed) == self.generation && s.is_spare() && also(s)
            })
            .count()
    }
}

/// Whether the worker must leave: a new generation serves, or the server stops.
pub(super) fn must_retire(ctx: &WorkerCtx<'_>) -> bool {
    ctx.master.is_some()
        && (ctx.scoreboard.generation() != ctx.generation || ctx.scoreboard.header.stopping.load(Relaxed) != 0)
}

/// Whether a loop holding `held` connections is level with a sibling loop holding
/// `least`: at most one more, and a 32nd (two at 50 each, four at 100).
fn level_with(held: u32, least: u32) -> bool {
    u64::from(held) <= u64::from(least) + 1 + u64::from(least) / 32
}

/// Reports a connection's progress into the worker's scoreboard slot.
pub(super) struct SlotObserver<'a> {
    pub(super) slot: &'a Slot,
    pub(super) ctx: &'a WorkerCtx<'a>,
    /// How many event loops the generation runs (one per CPU the workers spread
    /// over, `Affinity::loops`): the workers in its lowest slots; those above them
    /// are spares.
    pub(super) loops: usize,
    /// The CPUs the workers may use (before this one bound itself to one).
    pub(super) allowed: Vec<usize>,
    /// The client of the current request.
    pub(super) client: Option<SocketAddr>,
    /// Reused to format the client for the slot.
    pub(super) scratch: Vec<u8>,
    /// The worker is leaving: every answer says `Connection: close`.
    pub(super) retiring: bool,
}

impl Observer for SlotObserver<'_> {
    fn state(&mut self, state: ConnState) {
        self.slot.set_state(match state {
            ConnState::Reading => State::Reading,
            ConnState::Writing => State::Writing,
            ConnState::Logging => State::Logging,
            ConnState::Closing => State::Closing,
        });
    }

    fn request(&mut self, line: &[u8], client: SocketAddr) {
        self.slot.set_request(line);
        // The client is the same for every request of a connection: written once.
        if self.client != Some(client) {
            self.client = Some(client);
            self.scratch.clear();
            crate::base::text::push_socket_addr(&mut self.scratch, client);
            self.slot.set_client(&self.scratch);
        }
    }

    fn served(&mut self, outcome: &Outcome<'_>) {
        // This worker is its slot's one writer: plain adds, no locked instructions.
        if !outcome.refused {
            add(&self.slot.requests, 1);
            add(&self.slot.worker_requests, 1);
            add(&self.slot.bytes, outcome.bytes);
        }
        self.slot.traffic.count(outcome);
    }

    fn must_close(&self) -> bool {
        // A leaving worker hands its idle connections over (`events`); those it
        // cannot, it closes only after an answer that said so.
        self.retiring || must_retire(self.ctx)
    }

    fn hand_back(&self) -> bool {
        self.above_free_loops()
    }
}

impl SlotObserver<'_> {
    /// Whether this worker is a spare above its generation's event loops and they
    /// take connections now: as many of them in the slots below its own as there
    /// are loops, none held by a program, full or leaving
    /// (`Scoreboard::free_loops_below`). Such a worker stands by off the listeners
    /// (`events`), and the plain connections it was lent go back to the loops
    /// through them ([`Observer::hand_back`]): a moment a program held a loop gave it
    /// those clients, and a spare that kept them would be one more event loop taking
    /// turns on the cores for as long as they stay.
    pub(super) fn above_free_loops(&self) -> bool {
        let ctx = self.ctx;
        // A loop has fewer loops than that below it: the scan is for spares only
        // (`stand_by` asks on every round of the loop).
        ctx.master.is_some()
            && ctx.slot >= self.loops
            && ctx.scoreboard.free_loops_below(ctx.generation, ctx.slot, self.loops) >= self.loops
    }

    /// Whether this worker is an event loop holding more clients than its lightest
    /// sibling loop by more than [`level_with`] allows (each counted as its slot
    /// says, `Slot::clients`; `Scoreboard::lightest_other_loop`): such a loop
    /// takes no new connection until the others have caught up (`events`).
    /// Kept-alive clients are served a round at a time, so a loop's clients wait
    /// about as long as it holds connections: with 100 clients split 60 / 40
    /// (where the loops' accepts left them) the 60 waited 1.5 x as long, and that
    /// loop's tail was the server's p99 (`docs/scaling.md`, "Level loops, oldest
    /// first").
    pub(super) fn ahead_of_loops(&self) -> bool {
        let ctx = self.ctx;
        ctx.master.is_some()
            && self.loops > 1
            && ctx.slot < self.loops
            && ctx
                .scoreboard
                .lightest_other_loop(ctx.generation, ctx.slot, self.loops)
                .is_some_and(|least| !level_with(self.slot.clients(), least))
    }

    /// Whether this worker is a spare: above its generation's event loops, under a
    /// master (a foreground single worker is its own loop).
    pub(super) fn spare(&self) -> bool {
        self.ctx.master.is_some() && self.ctx.slot >= self.loops
    }

    /// Whether a worker of this generation in a slot below this one waits on a
    /// program (what makes a spare listen).
    pub(super) fn program_held_below(&self) -> bool {
        self.ctx.scoreboard.program_held_below(self.ctx.generation, self.ctx.slot)
    }
}

#[cfg(test)]
mod tests {
    use super::level_with;

    #[test]
    fn a_loop_is_level_with_its_sibling_within_one_and_a_32nd() {
        assert!(level_with(0, 0));
        assert!(level_with(1, 0), "one more: level");
        assert!(!level_with(2, 0));
        assert!(level_with(51, 49));
        assert!(!level_with(52, 49), "52 against 49: ahead");
        assert!(level_with(104, 100), "one and a 32nd of 100");
        assert!(!level_with(105, 100));
        assert!(level_with(10, 40), "fewer is always level");
    }
}
