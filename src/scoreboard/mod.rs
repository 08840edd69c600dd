//! The scoreboard: memory shared by the master and every worker, made before the first
//! fork (anonymous `MAP_SHARED`, see `sys::map_shared`).
//!
//! It holds only atomics. Each slot has one writer (the worker in it); the master and
//! the status page only read slots, and write the header (generation, log epoch).
//! Beside them, the clients whose logins keep failing ([`failures`]), which every
//! worker counts into, and the upstream servers of the proxy locations ([`upstreams`]:
//! connections, answers, failures, down or up), which every worker counts into and
//! chooses by.
//! The master never trusts a pid read from here for `kill()` (a worker could write
//! anything into its slot): it signals only pids from its own table.

use std::sync::atomic::{AtomicI32, AtomicU8, AtomicU32, AtomicU64, Ordering::Relaxed};

pub mod counters;
pub mod failures;
pub mod upstreams;

use crate::base::sys;
pub use counters::add;
use counters::{PoolEvents, Traffic};
use failures::FailureTable;
use upstreams::UpstreamTable;

/// What a worker is doing. The letters are Apache's, so `?auto` output reads the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    Dead = 0,
    Starting,
    Ready,
    Reading,
    Writing,
    Logging,
    Closing,
    Graceful,
}

impl State {
    pub const ALL: [State; 8] = [
        State::Dead,
        State::Starting,
        State::Ready,
        State::Reading,
        State::Writing,
        State::Logging,
        State::Closing,
        State::Graceful,
    ];

    fn from_u8(v: u8) -> State {
        match v {
            1 => State::Starting,
            2 => State::Ready,
            3 => State::Reading,
            4 => State::Writing,
            5 => State::Logging,
            6 => State::Closing,
            7 => State::Graceful,
            _ => State::Dead,
        }
    }

    /// Apache's scoreboard letter.
    pub fn letter(self) -> char {
        match self {
            State::Dead => '.',
            State::Starting => 'S',
            State::Ready => '_',
            State::Reading => 'R',
            State::Writing => 'W',
            State::Logging => 'L',
            State::Closing => 'C',
            State::Graceful => 'G',
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            State::Dead => "dead",
            State::Starting => "starting",
            State::Ready => "ready",
            State::Reading => "reading",
            State::Writing => "writing",
            State::Logging => "logging",
            State::Closing => "closing",
            State::Graceful => "graceful",
        }
    }

    /// Idle for the spare-worker count: Apache counts a starting worker as idle (it
    /// was forked a tick ago; forking more would "swamp things worse").
    pub fn is_idle(self) -> bool {
        matches!(self, State::Starting | State::Ready)
    }

    /// Answering a request (the status page's busy workers): neither idle, nor
    /// finishing after it was told to leave, nor an open slot.
    pub fn is_busy(self) -> bool {
        !matches!(self, State::Dead | State::Starting | State::Ready | State::Graceful)
    }
}

const TEXT_WORDS: usize = 16; // 128 bytes of request line
const CLIENT_WORDS: usize = 6; // 48 bytes: an IPv6 address with port

/// Server-wide values.
#[repr(C)]
pub struct Header {
    /// Bumped by every reload; a worker of an older generation retires.
    pub generation: AtomicU32,
    /// Bumped when logs are rotated; a worker reopens before its next write.
    pub log_epoch: AtomicU32,
    /// Bytes written to the pipe of death and not yet taken by a worker.
    pub pod_pending: AtomicU32,
    /// Non-zero once a stop began: every worker finishes and exits.
    pub stopping: AtomicU32,
    /// The master's `min_spare` and `max_spare` (they change with TTIN/TTOU and reloads).
    pub min_spare: AtomicU32,
    pub max_spare: AtomicU32,
    /// Non-zero while a worker's ring of the master's doorbell is unanswered.
    pub look_wanted: AtomicU32,
    /// Non-zero while workers of the current generation adopt the kept-alive
    /// connections of retiring ones (not while stopping or paused by WINCH).
    pub handover_open: AtomicU32,
    /// Non-zero once health checks must answer 503: a graceful stop began (its
    /// drain), or a new master took over from this one.
    pub draining: AtomicU32,
    /// When the master started (seconds since the epoch).
    pub started: AtomicU64,
    /// When the current generation started.
    pub generation_started: AtomicU64,
    /// Workers forked and reaped, reloads (the metrics page's).
    pub pool: PoolEvents,
}

// SAFETY: only atomics, `repr(C)`, all-zero is a valid value.
#[allow(unsafe_code)]
unsafe impl sys::SharedAtomic for Header {}

impl Header {
    /// Health checks answer 503 (see [`Header::draining`]'s field).
    pub fn draining(&self) -> bool {
        self.draining.load(Relaxed) != 0 || self.stopping.load(Relaxed) != 0
    }
}

/// One worker's place. Each starts on its own 128-byte boundary (two cache lines: the
/// pair a core's adjacent-line prefetcher fetches together), so the counters one worker
/// writes on every request never share a line with its neighbour's: without it, every
/// request on one core would take the line from the core serving the slot beside it.
#[repr(C, align(128))]
pub struct Slot {
    pub pid: AtomicI32,
    pub generation: AtomicU32,
    state: AtomicU8,
    /// Since the slot was made (survives worker replacement, as Apache's counts do).
    pub requests: AtomicU64,
    pub bytes: AtomicU64,
    pub connections: AtomicU64,
    /// Requests served by the worker now in the slot.
    pub worker_requests: AtomicU64,
    /// Connections the worker holds between requests, waiting for their next one
    /// (Apache event's "keep-alive" async connections), writing (an answer waits
    /// for room in the socket), and closing (lingering).
    pub conns_keepalive: AtomicU32,
    pub conns_writing: AtomicU32,
    pub conns_closing: AtomicU32,
    /// Tunnels it relays (a connection that switched protocols, a WebSocket).
    pub conns_tunnels: AtomicU32,
    /// Non-zero while the worker holds `workers.max_connections` and takes no new
    /// connection: not a spare, however idle it looks.
    pub full: AtomicU32,
    /// Non-zero while the worker waits on a program (a CGI script, php-fpm, an
    /// upstream) for the request it serves: its event loop turns for nobody
    /// meanwhile, so a sibling in standby takes new connections.
    pub program_wait: AtomicU32,
    /// Bytes of request bodies the worker holds in temporary files
    /// (`gateway::spool::Disk`): each worker reads every slot's for the server's
    /// `body_spool_max`. Zero when the slot is claimed and when its worker dies (its
    /// files died with it).
    pub body_spool: AtomicU64,
    /// Bytes of answers it keeps in temporary files for their clients, likewise
    /// (`answer_spool_max`).
    pub answer_spool: AtomicU64,
    /// The inode of the last unix-socket connection to an application the worker
    /// opened while bound to a CPU, and the pid of the application's listening
    /// process (`SO_PEERCRED`); 0 when none: the master binds the process at its
    /// other end to the worker's CPU (`master::pairs`).
    pub app_socket: AtomicU64,
    pub app_pid: AtomicI32,
    /// The event loops this one holds connections of (bit `k`: loop `k`) that
    /// they could not take yet: a loop may send one of its own there even when
    /// that is the heavier, as it will get one back (`worker::home`).
    pub owes: AtomicU64,
    /// The CPU the worker is bound to, plus one (0: unbound): `cpu_affinity`'s
    /// binding for its life, or an event loop's while it holds clients that come in
    /// on its CPU (`"home"`).
    cpu: AtomicU32,
    /// Monotonic milliseconds of the last state change.
    pub since_ms: AtomicU64,
    /// Monotonic milliseconds of the last sign of progress (a state change).
    pub heartbeat_ms: AtomicU64,
    /// The current (or last) request line, truncated.
    request: [AtomicU64; TEXT_WORDS],
    client: [AtomicU64; CLIENT_WORDS],
    /// Requests by method, status and duration, and the like (the metrics page's);
    /// like `requests`, kept across worker replacement.
    pub traffic: Traffic,
}

// SAFETY: only atomics, `repr(C)`, all-zero is a valid value.
#[allow(unsafe_code)]
unsafe impl sys::SharedAtomic for Slot {}

pub use crate::base::clock::now_ms;

fn store_text(words: &[AtomicU64], text: &[u8]) {
    let mut chunks = text.chunks_exact(8);
    let mut words = words.iter();
    // Little-endian, zero-padded: a whole chunk is one load, the last one is padded
    // in a word on the stack (no per-byte work: this runs for every request).
    for c in chunks.by_ref() {
        // A text longer than the words is cut.
        let Some(w) = words.next() else { return };
        w.store(u64::from_le_bytes(c.try_into().expect("8 bytes")), Relaxed);
    }
    let rest = chunks.remainder();
    if let Some(w) = words.next() {
        let mut last = [0u8; 8];
        last[..rest.len()].copy_from_slice(rest);
        w.store(u64::from_le_bytes(last), Relaxed);
    }
    for w in words {
        w.store(0, Relaxed);
    }
}

fn load_text(words: &[AtomicU64]) -> String {
    String::from_utf8_lossy(&load_bytes(words)).into_owned()
}

fn load_bytes(words: &[AtomicU64]) -> Vec<u8> {
    let mut bytes: Vec<u8> = words.iter().flat_map(|w| w.load(Relaxed).to_le_bytes()).collect();
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    bytes.truncate(end);
    bytes
}

impl Slot {
    /// Every connection the worker holds: [`Self::clients`] and lingering closes.
    pub fn held(&self) -> u32 {
        self.clients() + self.conns_closing.load(Relaxed)
    }

    /// The connections the worker holds whose clients are still there: kept alive,
    /// writing, tunnels (not lingering closes; not the one it serves now).
    pub fn clients(&self) -> u32 {
        self.conns_keepalive.load(Relaxed) + self.conns_writing.load(Relaxed) + self.conns_tunnels.load(Relaxed)
    }

    /// Whether the worker in this slot is one of `generation` that takes new
    /// connections now: serving or waiting for work (not starting, not leaving),
    /// not full, not held by a program.
    pub fn takes_connections(&self, generation: u32) -> bool {
        matches!(self.state(), State::Ready | State::Reading | State::Writing | State::Logging | State::Closing)
            && self.generation.load(Relaxed) == generation
            && self.full.load(Relaxed) == 0
            && self.program_wait.load(Relaxed) == 0
    }

    pub fn state(&self) -> State {
        State::from_u8(self.state.load(Relaxed))
    }

    pub fn set_state(&self, s: State) {
        let now = now_ms();
        self.state.store(s as u8, Relaxed);
        self.since_ms.store(now, Relaxed);
        self.heartbeat_ms.store(now, Relaxed);
    }

    pub fn set_request(&self, line: &[u8]) {
        store_text(&self.request, line);
    }

    /// `client` is `ip:port` as text (see `text::push_socket_addr`).
    pub fn set_client(&self, client: &[u8]) {
        store_text(&self.client, client);
    }

    pub fn request_line(&self) -> String {
        load_text(&self.request)
    }

    /// The request line as the client sent it (its first bytes), for escaping.
    pub fn request_bytes(&self) -> Vec<u8> {
        load_bytes(&self.request)
    }

    pub fn client(&self) -> String {
        load_text(&self.client)
    }

    /// Notes the CPU the worker is bound to (`None`: unbound).
    pub fn set_cpu(&self, cpu: Option<usize>) {
        self.cpu.store(cpu.map_or(0, |c| c as u32 + 1), Relaxed);
    }

    /// The CPU the worker is bound to, if it is.
    pub fn cpu(&self) -> Option<usize> {
        self.cpu.load(Relaxed).checked_sub(1).map(|c| c as usize)
    }

    /// Idle and able to take a new connection: what the spare-worker count counts.
    pub fn is_spare(&self) -> bool {
        self.state().is_idle() && self.full.load(Relaxed) == 0
    }

    /// Prepares the slot for a new worker (called by the master before the fork).
    pub fn claim(&self, generation: u32) {
        self.pid.store(0, Relaxed);
        self.generation.store(generation, Relaxed);
        self.worker_requests.store(0, Relaxed);
        self.conns_keepalive.store(0, Relaxed);
        self.conns_writing.store(0, Relaxed);
        self.conns_closing.store(0, Relaxed);
        self.conns_tunnels.store(0, Relaxed);
        self.full.store(0, Relaxed);
        self.program_wait.store(0, Relaxed);
        self.body_spool.store(0, Relaxed);
        self.answer_spool.store(0, Relaxed);
        self.app_socket.store(0, Relaxed);
        self.app_pid.store(0, Relaxed);
        self.cpu.store(0, Relaxed);
        self.owes.store(0, Relaxed);
        store_text(&self.request, b"");
        store_text(&self.client, b"");
        self.set_state(State::Starting);
    }
}

/// The whole scoreboard.
pub struct Scoreboard {
    pub header: &'static Header,
    pub slots: &'static [Slot],
    /// The clients failing to log in, shared by every worker.
    pub failures: &'static FailureTable,
    /// The proxy locations' upstream servers, shared by every worker.
    pub upstreams: UpstreamTable,
}

impl Scoreboard {
    /// Maps a scoreboard with `slots` slots (`workers.max` at boot: it cannot grow later).
    pub fn new(slots: usize) -> std::io::Result<Scoreboard> {
        let header = &sys::map_shared::<Header>(1)?[0];
        let slots = sys::map_shared::<Slot>(slots)?;
        let failures = FailureTable::map()?;
        let upstreams = UpstreamTable::map(slots.len())?;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        header.started.store(now, Relaxed);
        header.generation_started.store(now, Relaxed);
        Ok(Scoreboard { header, slots, failures, upstreams })
    }

    pub fn generation(&self) -> u32 {
        self.header.generation.load(Relaxed)
    }

    /// Whether fewer than `min_spare` workers of `generation` other than slot `me`
    /// are idle (ready or starting). Stops counting at `min_spare`.
    pub fn short_of_idle(&self, generation: u32, me: usize) -> bool {
        let want = self.header.min_spare.load(Relaxed) as usize;
        let idle = self
            .slots
            .iter()
            .enumerate()
            .filter(|&(i, s)| i != me && s.is_spare() && s.generation.load(Relaxed) == generation);
        idle.take(want).count() < want
    }

    /// Whether a worker of `generation` in a slot below `me` waits on a program.
    pub fn program_held_below(&self, generation: u32, me: usize) -> bool {
        self.slots[..me.min(self.slots.len())]
            .iter()
            .any(|s| s.generation.load(Relaxed) == generation && s.program_wait.load(Relaxed) != 0)
    }

    /// The fewest clients ([`Slot::clients`]) an event loop of `generation` other
    /// than `me` holds, of those that take new connections now
    /// ([`Slot::takes_connections`]); `None` when none does.
    pub fn lightest_other_loop(&self, generation: u32, me: usize, loops: usize) -> Option<u32> {
        self.other_loops_taking(generation, me, loops).map(Slot::clients).min()
    }

    /// The event loops of `generation` (its lowest `loops` slots) other than `me`
    /// that take new connections now ([`Slot::takes_connections`]).
    pub fn other_loops_taking(&self, generation: u32, me: usize, loops: usize) -> impl Iterator<Item = &Slot> {
        self.slots[..loops.min(self.slots.len())]
            .iter()
            .enumerate()
            .filter(move |&(i, s)| i != me && s.takes_connections(generation))
            .map(|(_, s)| s)
    }

    /// The workers of `generation` in slots below `me`, up to `enough`, that take
    /// new connections now ([`Slot::takes_connections`]). The lowest such slots are
    /// a generation's event loops; a worker with enough of them below it may stand
    /// by.
    pub fn free_loops_below(&self, generation: u32, me: usize, enough: usize) -> usize {
        let free = |s: &&Slot| s.takes_connections(generation);
        self.slots[..me.min(self.slots.len())].iter().filter(free).take(enough).count()
    }

    /// Whether any worker of `generation` takes new connections now
    /// ([`Slot::takes_connections`]): what waits in the listen queue has a taker.
    pub fn takes_connections(&self, generation: u32) -> bool {
        self.slots.iter().any(|s| s.takes_connections(generation))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_never_share_a_cache_line() {
        assert_eq!(std::mem::align_of::<Slot>(), 128);
        let sb = Scoreboard::new(3).unwrap();
        for slot in sb.slots {
            assert_eq!(std::ptr::from_ref(slot).addr() % 128, 0);
        }
    }

    #[test]
    fn the_lightest_other_loop_is_one_that_takes_connections() {
        let sb = Scoreboard::new(4).unwrap();
        for (i, held) in [5, 9, 2, 0].into_iter().enumerate() {
            sb.slots[i].claim(1);
            sb.slots[i].set_state(State::Ready);
            sb.slots[i].conns_keepalive.store(held, Relaxed);
        }
        sb.slots[1].conns_writing.store(1, Relaxed);
        sb.slots[1].conns_closing.store(3, Relaxed);
        // Loops are slots 0-2; slot 3 (a spare holding nothing) is not one.
        assert_eq!(sb.lightest_other_loop(1, 0, 3), Some(2));
        assert_eq!(sb.lightest_other_loop(1, 2, 3), Some(5), "itself left out");
        sb.slots[0].program_wait.store(1, Relaxed);
        assert_eq!(
            sb.lightest_other_loop(1, 2, 3),
            Some(10),
            "a loop a program holds takes none now; closes not counted"
        );
        assert_eq!(sb.other_loops_taking(1, 2, 3).count(), 1, "slot 1 only");
        assert_eq!(sb.other_loops_taking(1, 3, 3).count(), 2, "a spare counts every loop that takes");
        sb.slots[1].full.store(1, Relaxed);
        assert_eq!(sb.lightest_other_loop(1, 2, 3), None);
        assert_eq!(sb.lightest_other_loop(2, 0, 3), None, "another generation's");
    }

    #[test]
    fn free_loops_are_the_lower_slots_that_take_connections() {
        let sb = Scoreboard::new(7).unwrap();
        let states =
            [State::Ready, State::Writing, State::Starting, State::Graceful, State::Ready, State::Ready, State::Ready];
        for (i, state) in states.into_iter().enumerate() {
            sb.slots[i].claim(if i == 4 { 2 } else { 1 });
            sb.slots[i].set_state(state);
        }
        // Slots 0 and 1 take connections; 2 starts, 3 leaves, 4 is another generation's.
        assert_eq!(sb.free_loops_below(1, 5, 8), 2);
        assert_eq!(sb.free_loops_below(1, 5, 1), 1, "counted up to enough");
        assert_eq!(sb.free_loops_below(1, 0, 8), 0, "nothing below slot 0");
        sb.slots[1].program_wait.store(1, Relaxed);
        assert_eq!(sb.free_loops_below(1, 5, 8), 1, "a worker held by a program is no loop");
        sb.slots[0].full.store(1, Relaxed);
        assert_eq!(sb.free_loops_below(1, 6, 8), 1, "nor is a full one; slot 5 is");
        assert!(sb.takes_connections(1), "slots 5 and 6");
        for i in [5, 6] {
            sb.slots[i].program_wait.store(1, Relaxed);
        }
        assert!(!sb.takes_connections(1), "every worker of the generation held, full, starting or leaving");
        assert!(sb.takes_connections(2), "slot 4");
    }

    #[test]
    fn short_of_idle_counts_the_others_of_the_generation() {
        let sb = Scoreboard::new(6).unwrap();
        sb.header.min_spare.store(2, Relaxed);
        for (i, (generation, state)) in
            [(1, State::Ready), (1, State::Ready), (1, State::Reading), (0, State::Ready), (1, State::Dead)]
                .into_iter()
                .enumerate()
        {
            sb.slots[i].claim(generation);
            sb.slots[i].set_state(state);
        }
        assert!(!sb.short_of_idle(1, 2));
        assert!(sb.short_of_idle(1, 0), "slot 0 is the one asking; slot 3 is of another generation");
        sb.slots[5].claim(1); // forked, starting: counts as idle
        assert!(!sb.short_of_idle(1, 0));
        sb.header.min_spare.store(0, Relaxed);
        assert!(!sb.short_of_idle(1, 0));
    }

    #[test]
    fn health_checks_fail_from_a_drain_or_a_stop() {
        let sb = Scoreboard::new(1).unwrap();
        assert!(!sb.header.draining(), "serving");
        sb.header.draining.store(1, Relaxed);
        assert!(sb.header.draining(), "draining");
        sb.header.draining.store(0, Relaxed);
        sb.header.stopping.store(1, Relaxed);
        assert!(sb.header.draining(), "stopping");
    }

    #[test]
    fn text_round_trips_and_truncates() {
        let sb = Scoreboard::new(2).unwrap();
        let s = &sb.slots[1];
        s.set_request(b"GET /index.html HTTP/1.1");
        s.set_client(b"127.0.0.1:5000");
        assert_eq!(s.request_line(), "GET /index.html HTTP/1.1");
        assert_eq!(s.client(), "127.0.0.1:5000");
        // The bytes as sent, for the watchdog's escaped line.
        s.set_request(b"GET /\xff\x01 HTTP/1.1");
        assert_eq!(s.request_bytes(), b"GET /\xff\x01 HTTP/1.1");
        let long = vec![b'x'; 500];
        s.set_request(&long);
        assert_eq!(s.request_bytes(), vec![b'x'; TEXT_WORDS * 8]);
        assert_eq!(s.request_line().len(), TEXT_WORDS * 8);
        s.claim(3);
        assert_eq!((s.request_line(), s.state(), s.generation.load(Relaxed)), (String::new(), State::Starting, 3));
    }

    #[test]
    fn the_generation_is_the_headers() {
        let sb = Scoreboard::new(1).unwrap();
        assert_eq!(sb.generation(), 0);
        sb.header.generation.store(7, Relaxed);
        assert_eq!(sb.generation(), 7);
    }

    #[test]
    fn states_and_letters() {
        for v in 0..=7u8 {
            assert_eq!(State::from_u8(v) as u8, v);
            assert_eq!(State::ALL[v as usize] as u8, v);
        }
        let busy: Vec<char> = State::ALL.iter().filter(|s| s.is_busy()).map(|s| s.letter()).collect();
        assert_eq!(busy, ['R', 'W', 'L', 'C']);
        assert_eq!(State::Ready.letter(), '_');
        // The names the status file, `pika -k status` and ?json print.
        let names: Vec<&str> = (0..=7u8).map(|v| State::from_u8(v).name()).collect();
        assert_eq!(names, ["dead", "starting", "ready", "reading", "writing", "logging", "closing", "graceful"]);
        assert!(State::Starting.is_idle() && State::Ready.is_idle() && !State::Logging.is_idle());
    }
}
