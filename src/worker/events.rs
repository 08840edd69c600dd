//! A worker's loop: one `epoll` set holds the listeners, the handover socket and every
//! connection this worker keeps between requests; whichever has something ready is
//! served, one request at a time, and nothing waits on a client.
//!
//! Why (docs/keepalive.md has the measurements): a prefork worker that waits on an
//! idle kept-alive connection serves nobody, so a few hundred browsers thinking
//! between pages took every worker and left newcomers in the backlog for seconds.
//! Here a connection between requests costs its worker nothing: it sits in the set
//! (a socket and a few dozen bytes of [`Held`] state) while the worker takes other
//! connections and other requests. A request that is already on its way when the
//! answer to the last one leaves is served by the same worker with no hand-off at
//! all, so busy clients pay one `epoll_wait` (shared by every connection that was
//! ready at once) and nothing else. A round that took several ready events ends
//! with `sched_yield` ([`YIELD_FROM`]): the clients it answered run before the next.
//! A round that programs make last looks at the listeners between its turns
//! ([`LOOK_IN_ROUND`]): a new connection's first request waits for the turn being
//! served, not for the rest of the round. A round serves its connections by their
//! last turn, oldest first ([`oldest_first`]), and an event loop ahead of its
//! siblings takes no new connection until they catch up
//! (`SlotObserver::ahead_of_loops`, [`AHEAD_LOOK`]): a loop's clients wait about
//! a round, and a round is as long as the loop holds clients. A listener's event
//! takes the worker's share of its accept queue at once ([`intake_share`]), so a
//! burst of new connections comes in within a few rounds.
//!
//! Heads are read without waiting: a head that comes in pieces stays in its
//! connection's buffer until the rest arrives or `header_timeout` passes, so a
//! trickling client holds no worker. A connection on a TLS listener carries its
//! rustls session: its handshake advances a turn of this loop at a time as records
//! arrive, under the same `header_timeout` (`serve::tls`). Request bodies are never
//! waited for (`http::body`). Nor are writes: sockets are non-blocking from the
//! accept, and an answer the socket does not take whole waits in the set, watched
//! for room (`EPOLLOUT`) instead of input, and is written as the client reads,
//! between the worker's other turns, under `send_timeout` from its last progress
//! (`serve::unsent`). A client that stops reading costs a socket and a small box,
//! not a worker.
//!
//! A worker about to run a script with a request body first hands the connections
//! it holds in the middle of their bodies to the others (their uploads go on
//! arriving, not held up for the script). While a program keeps it (a CGI script,
//! php-fpm, an upstream), it looks at its set every few milliseconds
//! (`gateway::GLANCE`) and hands the connections whose request came meanwhile to
//! the spare workers, one to each that is idle (lent: a spare's answer on a plain
//! one says `Connection: close` once the loops are free, so the client comes back
//! to a loop); one whose script keeps it waiting a second hands
//! its idle connections too (`Parked::relieve`), so their next requests do not
//! wait for the script. A worker whose last program wait lasted a glance hands
//! those whose request is already here over before the next wait begins; one whose
//! programs answer within a glance (php-fpm's hello: 0.1 ms) keeps them, which
//! they reach sooner than through a hand-over (`docs/scaling.md`, "The FastCGI
//! tail").
//!
//! Leaving: a worker that must retire (pipe of death, reload, WINCH, `max_requests`)
//! stops taking connections and hands every idle plain connection, and every one
//! in the middle of a request body, to a worker that stays ([`crate::fork::handover`]); what cannot be handed over (a TLS session's state is
//! this process's, an answer still being written) is served with `Connection:
//! close` at its next request, written to its end, or closed between requests after
//! a second's grace, so no connection is ever closed under a request on its way.
//! A plain tunnel (a WebSocket after its 101: two sockets in the set, the client's
//! and its upstream's, `serve::relay`) is handed over with both; a TLS one is closed
//! after the same grace, once what it keeps is written (`Loop::drain_tunnels`).
//! Then the worker exits. A hard stop (`TERM`) closes all of them, once the answers
//! being written are logged with what went of them.

use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use nix::sys::epoll::{EpollEvent, EpollFlags, EpollTimeout};

use super::ctx::{ChildExit, SlotObserver, WorkerCtx, must_retire};
use super::home;
use super::parked::{FAR, Handing, Parked, handover_open, interest, publish_counts};
use crate::base::sys;
use crate::fork::handover::Handover;
use crate::fork::listen::Listener;
use crate::scoreboard::{State, now_ms};
use crate::serve::connection::Server;
use crate::serve::held::{Conn, Held, Next, Watch, thaw_body};
use crate::serve::observer::{Hooks, Relief};

/// Whether another worker of this one's generation is a spare holding no answer
/// being written and no tunnel (one the master's pipe of death had better retire).
fn spare_writing_none(ctx: &WorkerCtx<'_>) -> bool {
    ctx.spare_siblings(0, |s| s.conns_writing.load(Relaxed) == 0 && s.conns_tunnels.load(Relaxed) == 0) > 0
}

/// Whether a worker of this one's generation above the event loops (a slot at
/// `loops` or higher) is a spare holding no connection: one a retirement had better
/// take than an event loop.
fn spare_above_loops(ctx: &WorkerCtx<'_>, loops: usize) -> bool {
    ctx.spare_siblings(loops, |s| s.held() == 0) > 0
}

/// Puts a round's events in the order they are served: the listeners, the
/// handover socket and the stop bell first, then the connections by their last
/// turn, oldest first (`last_turn` of a connection's table index; a tunnel's
/// upstream socket goes with its connection).
///
/// Why: `epoll` reports a level-triggered set's ready descriptors in the order it
/// last reported them, and one whose input comes after a wait goes behind those.
/// The connection a round answers last has its next request come just after the
/// next wait began (its client had no time to send it); that request is then
/// served at the end of the round after, two rounds after the answer, where every
/// other client waits one. At 100 kept-alive clients of hello.php (rounds of ~50
/// php-fpm requests, ~7 ms) one connection a round did, and those requests were
/// the p99 (14-16 ms against 7-9); served oldest first, a request that missed a
/// round is the first of the next, and none waits more than a round
/// (`docs/scaling.md`, "Level loops, oldest first").
fn oldest_first(events: &mut [EpollEvent], last_turn: impl Fn(usize) -> u64) {
    events.sort_unstable_by_key(|ev| {
        let tag = ev.data();
        if tag < LISTENER { last_turn((tag & !FAR) as usize) } else { 0 }
    });
}

/// Takes a connection from `listener`, its socket non-blocking (`accept4` with
/// `SOCK_NONBLOCK`: no write of ours ever waits on a client) and closed on exec.
fn accept_nonblocking(
    listener: &std::net::TcpListener,
) -> std::io::Result<(std::net::TcpStream, std::net::SocketAddr)> {
    let (socket, addr) = socket2::SockRef::from(listener).accept4(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK)?;
    let peer = addr.as_socket().ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    Ok((socket.into(), peer))
}

/// The most connections a worker takes from a listener at one event or look.
/// A burst of 500 kept-alive clients taken one per round (each round serving
/// every client taken so far) took ~400 ms to come in, and those first answers
/// were wrk's p99 (270-590 ms, `docs/scaling.md`, "A burst comes in"); taken in
/// shares, a few rounds.
const INTAKE_MAX: usize = 64;

/// How many of the `queued` connections waiting on a listener a worker takes at
/// once: its share among the `takers` (itself and the generation's other event
/// loops that take connections now; rounded up, so one waiting is taken), at most
/// [`INTAKE_MAX`]. Each loop taking its share, a burst is split
/// level as it comes in (the loop that took first is ahead until its siblings
/// have taken theirs: `SlotObserver::ahead_of_loops`).
fn intake_share(queued: u32, takers: usize) -> usize {
    (queued as usize).div_ceil(takers.max(1)).min(INTAKE_MAX)
}

/// Event tags above any index into the connection table.
const LISTENER: u64 = 1 << 62;
const HANDOVER: u64 = 1 << 61;
/// The stop bell (`sys::catch_stop`): rung by `TERM`, looked at after every wait.
const STOP: u64 = 1 << 60;
/// This loop's own socket pair: connections sent home to it (`super::home`). Below
/// `FAR` (`1 << 59`, a tunnel's upstream socket, a bit beside a table index).
const HOME: u64 = 1 << 58;
/// Events taken per `epoll_wait`.
const EVENTS: usize = 64;
/// How often deadlines are looked at (keep-alive, header, linger timeouts are
/// enforced to within this) and the longest sleep, after which the pipe of death,
/// the generation and held log records are looked at again.
const SWEEP: Duration = Duration::from_secs(1);
/// How long a worker out of descriptors stops accepting.
const ACCEPT_BACKOFF: u64 = 100;
/// A worker holding at least this many connections goes to the back of the line of
/// idle workers after each accept, so new connections spread over the idle workers
/// instead of piling up on the oldest (`EPOLLEXCLUSIVE` wakes the first waiter that
/// registered). Workers that hold nothing keep their place: the oldest stays the
/// busiest and its memory stays warm.
const SPREAD_FROM: usize = 1;

/// A round of the loop that took at least this many ready events ends with
/// `sched_yield`: the clients it answered are runnable now, and a worker under
/// `SCHED_BATCH` is not preempted by their wake-ups, so on a CPU it shares with them
/// they would wait for the end of its slice to read their answers and send their
/// next requests. Measured with wrk on the same two cores (`docs/scaling.md`, "The
/// yield"): the kept-alive p99 at 100 clients from ~6 ms to ~1.5 ms, and more
/// requests a second, not fewer (the next round finds more requests ready). When
/// nothing else waits for the CPU the call returns at once; it moves the worker's
/// deadline, not its fair share. A round of one event (a connection closed after each
/// request, an accept) does not yield: that cost the close-per-request cell 5-8 %.
const YIELD_FROM: usize = 2;

/// How long a round of the loop in which a program kept it (php-fpm, a CGI script,
/// an upstream) serves before it looks at the listeners again between two turns: a
/// connection that came meanwhile is accepted, and its first request served, then,
/// not after the rest of the round. A listener's readiness is reported once per
/// `epoll_wait`, so a loop took one new connection a round; under php-fpm a round of
/// 50 kept-alive clients lasts 5-7 ms, and the last of 100 connections opened at
/// once waited ~270 ms for its first answer (wrk's coordinated-omission correction
/// spreads such a wait over its whole p99: 48-79 ms against 14-23 with this look,
/// `docs/scaling.md`, "New connections under a long round"). A look finds nothing
/// most of the time: one `accept` (`EAGAIN`) per listener, at most every this long.
/// Rounds of static answers do not look: at 500 kept-alive clients they last a few
/// ms, which is all a new connection waits there.
const LOOK_IN_ROUND: Duration = Duration::from_micros(300);

/// How soon the first worker in standby (the one right above the loops) looks again
/// whether the event loops below it are still free: a loop held by a program leaves
/// new connections waiting this long at most before that spare takes them. The
/// spare in the next slot looks half as often, and so on (at most once a sweep):
/// an idle pool of 64 wakes some 250 times a second, not 3,000.
const STANDBY_LOOK: u64 = 20;

/// How soon an event loop off the listeners for being ahead of its siblings
/// (`SlotObserver::ahead_of_loops`) looks again whether they have caught up, or
/// whether the one that takes new connections meanwhile waits on a program (then it
/// listens again): they take connections without waking it, and one a program
/// holds is marked so after a glance (`gateway::GLANCE`, 5 ms), so a connection
/// that comes then waits about this long more at most.
const AHEAD_LOOK: u64 = 5;

/// Descriptors a worker keeps for other things than connections (listeners, logs,
/// docroots, cached files; the loops' socket pairs come on top), when `workers.max_connections` is capped by the open-file
/// limit.
const FD_RESERVE: u64 = 64;

/// How long a leaving worker keeps the idle connections it could not hand over (a
/// stop, WINCH) before it closes them between requests: a request already on its way
/// when the stop began arrives within it, and is answered with `Connection: close`.
/// (nginx closes idle connections at once on a graceful stop.)
const LEAVE_GRACE_MS: u64 = 1000;

/// Why a worker leaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leaving {
    Retire,
    Recycle,
}

pub(super) struct Loop<'a, 'c> {
    ctx: &'a WorkerCtx<'a>,
    /// The rustls setup for connections on TLS listeners.
    tls: Option<Arc<rustls::ServerConfig>>,
    server: &'a mut Server<'c>,
    obs: &'a mut SlotObserver<'a>,
    /// The connections it holds. One being served is out of the table for that
    /// time, so a write that stalls can hand the others over ([`Loop::turn`]).
    parked: Parked,
    listening: bool,
    /// A spare listens because a worker below it waited on a program: what it
    /// accepts until it stands by again is lent ([`Turned::lends`]).
    for_a_wait: bool,
    /// A turn of this round waited on a program since the listeners were last
    /// looked at ([`LOOK_IN_ROUND`]).
    program_since_look: bool,
    adopting: bool,
    /// The most connections it holds (`workers.max_connections`, within the
    /// open-file limit); at it, it takes no new ones.
    cap: usize,
    full: bool,
    leaving: Option<Leaving>,
    /// When a leaving worker closes the idle connections it still holds (and from
    /// then on, those that become idle).
    close_idle_at: u64,
    accept_paused_until: u64,
    next_sweep: u64,
    /// The CPU it bound itself to under `cpu_affinity = "home"` ([`Loop::keep_place`]),
    /// and whether it stopped trying (the kernel refused once: a cpuset changed
    /// under it, say).
    placed: Option<usize>,
    place_refused: bool,
    scratch: Vec<u8>,
}

impl<'a, 'c> Loop<'a, 'c> {
    pub(super) fn new(
        ctx: &'a WorkerCtx<'a>,
        tls: Option<Arc<rustls::ServerConfig>>,
        server: &'a mut Server<'c>,
        obs: &'a mut SlotObserver<'a>,
    ) -> std::io::Result<Self> {
        let nofile = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).map_or(1024, |l| l.0);
        let reserve = FD_RESERVE + 2 * ctx.homes.len() as u64;
        let cap = u64::from(ctx.config.workers.max_connections).min(nofile.saturating_sub(reserve).max(1)) as usize;
        let parked = Parked::new()?;
        let mut l = Loop {
            ctx,
            tls,
            server,
            obs,
            parked,
            listening: false,
            for_a_wait: false,
            program_since_look: false,
            adopting: false,
            cap,
            full: false,
            leaving: None,
            close_idle_at: 0,
            accept_paused_until: 0,
            next_sweep: now_ms() + SWEEP.as_millis() as u64,
            placed: None,
            place_refused: false,
            scratch: Vec::new(),
        };
        let bell = sys::catch_stop()?;
        l.parked.epoll.add(bell, EpollEvent::new(EpollFlags::EPOLLIN, STOP))?;
        l.listen(true)?;
        if let Some(home) = l.own_home() {
            l.parked.epoll.add(home.fd(), EpollEvent::new(EpollFlags::EPOLLIN, HOME))?;
        }
        if let Some(h) = ctx.handover {
            let ev = EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLEXCLUSIVE, HANDOVER);
            l.parked.epoll.add(h.fd(), ev)?;
            l.adopting = true;
        }
        Ok(l)
    }

    /// Waits (or stops waiting) on the handover socket beside the listeners.
    fn adopt_from_handover(&mut self, on: bool) {
        let Some(h) = self.ctx.handover else { return };
        if on == self.adopting {
            return;
        }
        let ev = EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLEXCLUSIVE, HANDOVER);
        let epoll = &self.parked.epoll;
        let done = if on { epoll.add(h.fd(), ev) } else { epoll.delete(h.fd()) };
        if done.is_ok() {
            self.adopting = on;
        }
    }

    /// Registers (or removes) the listeners. `EPOLLEXCLUSIVE`: a new connection wakes
    /// one sleeping worker, the first registered first.
    fn listen(&mut self, on: bool) -> std::io::Result<()> {
        if on == self.listening {
            return Ok(());
        }
        let epoll = &self.parked.epoll;
        for (i, l) in self.ctx.listeners.list.iter().enumerate() {
            if on {
                let ev = EpollEvent::new(EpollFlags::EPOLLIN | EpollFlags::EPOLLEXCLUSIVE, LISTENER + i as u64);
                epoll.add(l.socket.as_fd(), ev)?;
            } else {
                let _ = epoll.delete(l.socket.as_fd());
            }
        }
        self.listening = on;
        Ok(())
    }

    /// Serves until the worker must leave and holds nothing more.
    pub(super) fn run(mut self) -> ChildExit {
        let mut events = [EpollEvent::empty(); EVENTS];
        loop {
            // Between turns the worker waits for work, whatever its last turn set
            // (a parked answer's included): ready, or graceful once it leaves.
            let resting = if self.leaving.is_none() { State::Ready } else { State::Graceful };
            if self.obs.slot.state() != resting {
                self.obs.slot.set_state(resting);
            }
            let look = self.stand_by();
            let wait = if !self.parked.ready.is_empty() {
                0
            } else {
                let sweep = self.next_sweep.saturating_sub(now_ms()).min(SWEEP.as_millis() as u64);
                look.map_or(sweep, |look| sweep.min(look))
            };
            let timeout = EpollTimeout::try_from(wait as u32).unwrap_or(EpollTimeout::ZERO);
            let waited = self.parked.epoll.wait(&mut events, timeout);
            let n = match waited {
                Ok(n) => n,
                Err(nix::errno::Errno::EINTR) => 0,
                Err(e) => {
                    log::error!("epoll_wait: {e}; the worker exits to be replaced");
                    return ChildExit::Sick;
                }
            };
            if let Some(sig) = sys::stop_asked() {
                self.stop_at_once(sig);
            }
            if let Err(code) = self.dispatch(&mut events[..n]) {
                return code;
            }
            // Pipelined requests already buffered: one burst each, in turn.
            let turns = self.parked.ready.len();
            for _ in 0..turns {
                let next = self.parked.ready.pop_front();
                let Some(i) = next else { break };
                self.serve(i);
            }
            if n >= YIELD_FROM {
                sys::yield_cpu();
            }
            let now = now_ms();
            if now >= self.next_sweep {
                self.next_sweep = now + SWEEP.as_millis() as u64;
                if n == 0 {
                    // A quiet second: write the access-log records held for `flush`.
                    self.server.idle();
                }
                self.sweep(now);
                self.server.sweep_files();
                // SCHED_BATCH again once no TLS handshake came for a while.
                crate::serve::handshakes::settle(now);
                if let Err(code) = self.look_at_listeners() {
                    return code;
                }
            }
            if self.leaving.is_none() {
                if let Some(why) = self.must_leave(n == 0) {
                    self.leave(why);
                }
            }
            // After the grace, and again as answers being written end (and tunnels
            // opened meanwhile).
            if self.leaving.is_some() && now >= self.close_idle_at {
                let closed = self.parked.close_idle();
                if closed > 0 {
                    log::debug!("leaving: closed {closed} idle connections");
                    self.publish();
                }
                self.drain_tunnels();
            }
            if self.leaving.is_some() && self.parked.table.len == 0 {
                return match self.leaving {
                    Some(Leaving::Recycle) => ChildExit::Recycle,
                    _ => ChildExit::Retired,
                };
            }
            if self.accept_paused_until != 0 && now >= self.accept_paused_until && self.leaving.is_none() && !self.full
            {
                self.accept_paused_until = 0;
                let _ = self.listen(true);
            }
        }
    }

    /// Hands each ready descriptor to its step: a listener's to [`Self::accept`], the
    /// handover socket's to [`Self::adopt`], a connection's to [`Self::serve`];
    /// the connections whose last turn is oldest first ([`oldest_first`]).
    /// A round in which a program kept the loop, once it has lasted
    /// [`LOOK_IN_ROUND`], looks at the listeners between two turns
    /// ([`Self::look_at_listeners`]).
    fn dispatch(&mut self, events: &mut [EpollEvent]) -> Result<(), ChildExit> {
        let mut looked = std::time::Instant::now();
        self.program_since_look = false;
        let table = &self.parked.table;
        oldest_first(events, |i| table.last_turn(i));
        for ev in events.iter() {
            let tag = ev.data();
            if tag < LISTENER && self.program_since_look && self.listening && looked.elapsed() >= LOOK_IN_ROUND {
                looked = std::time::Instant::now();
                self.program_since_look = false;
                // Not a loop ahead of its siblings (a burst of new connections
                // would otherwise pile up on the loop whose round is long).
                if !self.obs.ahead_of_loops() {
                    self.look_at_listeners()?;
                }
            }
            if tag >= LISTENER {
                self.accept((tag - LISTENER) as usize)?;
            } else if tag == HANDOVER {
                if let Some(h) = self.ctx.handover {
                    let _ = self.adopt(h);
                }
            } else if tag == HOME {
                // All that came, at most a burst's intake: siblings send a new
                // burst's clients home together.
                if let Some(h) = self.own_home() {
                    for _ in 0..INTAKE_MAX {
                        if !self.adopt(h) {
                            break;
                        }
                    }
                }
            } else if tag == STOP {
                // Rung by TERM: seen after the wait, before these events.
            } else if tag & FAR != 0 {
                // A tunnel's upstream socket: a turn on its connection.
                self.serve((tag & !FAR) as usize);
            } else {
                self.serve(tag as usize);
            }
        }
        Ok(())
    }

    /// Whether the worker listens, and how soon it looks again (ms) if it must not
    /// sleep until the sweep: a worker stands by when, in the slots below its own,
    /// as many event loops of its generation as there are CPUs take connections
    /// (`SlotObserver::above_free_loops`). Standing by it is off the listeners, so
    /// kept-alive clients stay on about one busy event loop per CPU (fewer workers
    /// taking turns on the cores: a lower tail, `docs/scaling.md`), and it listens
    /// again as soon as a loop below is held by a program, full, leaving or gone:
    /// the spare right above the loops looks every [`STANDBY_LOOK`] ms, each one
    /// above it less often (it is needed only once those below it listen). What
    /// it holds meanwhile it serves, and the plain connections it was lent go back
    /// to the loops after their next answer (`Observer::hand_back`). An event loop
    /// ahead of its siblings (`SlotObserver::ahead_of_loops`) is off the listeners
    /// too, and looks every [`AHEAD_LOOK`] ms whether it still is. A leaving, full
    /// or paused worker keeps
    /// what that decided.
    fn stand_by(&mut self) -> Option<u64> {
        if self.leaving.is_some() || self.full || self.accept_paused_until != 0 {
            return None;
        }
        let standby = self.obs.above_free_loops();
        let turned = Turned::at(standby, self.listening, self.for_a_wait, || self.obs.program_held_below());
        let ahead = turned.listen && self.obs.ahead_of_loops();
        let listen = turned.listen && !ahead;
        if listen != self.listening {
            let _ = self.listen(listen);
        }
        self.for_a_wait = turned.for_a_wait;
        if standby {
            let above = (self.ctx.slot + 1).saturating_sub(self.obs.loops).max(1) as u64;
            Some(STANDBY_LOOK.saturating_mul(above))
        } else {
            ahead.then_some(AHEAD_LOOK)
        }
    }

    /// Takes this worker's share of the connections waiting on listener `i`
    /// ([`intake_share`]) and serves what each brought; stops early when the worker
    /// stops listening (full, out of descriptors), the queue is empty, or a program
    /// kept it waiting (what waits meanwhile is for the spares that listen then,
    /// and this worker's own clients have waited that long already).
    fn accept(&mut self, i: usize) -> Result<(), ChildExit> {
        let ctx = self.ctx;
        let Some(l) = ctx.listeners.list.get(i) else { return Ok(()) };
        // The count unread: the event said one came.
        let queued = sys::accept_queue_len(l.socket.as_fd()).unwrap_or(1);
        let takers = 1 + ctx.scoreboard.other_loops_taking(ctx.generation, ctx.slot, self.obs.loops).count();
        let stalled_before = std::mem::replace(&mut self.program_since_look, false);
        let mut took_any = false;
        for _ in 0..intake_share(queued, takers) {
            if !self.accept_one(l)? {
                break;
            }
            took_any = true;
            if !self.listening || self.program_since_look {
                break;
            }
        }
        self.program_since_look |= stalled_before;
        if took_any && self.parked.table.len >= SPREAD_FROM && self.listening {
            // To the back of the line: re-registering puts this worker's wait entry
            // last on the listeners' queues.
            let _ = self.listen(false);
            let _ = self.listen(true);
        }
        Ok(())
    }

    /// Takes one connection from listener `l` and serves what it brought; `false`
    /// when none was there to take (or accepting must pause).
    fn accept_one(&mut self, l: &Listener) -> Result<bool, ChildExit> {
        let (stream, peer) = match accept_nonblocking(&l.socket) {
            Ok(c) => c,
            Err(e) => {
                return match e.raw_os_error() {
                    // Out of descriptors: the connection waits in the backlog while this
                    // worker stops accepting for a moment (said once), as nginx does.
                    Some(libc::EMFILE) | Some(libc::ENFILE) => {
                        crate::log::shortage::report(crate::log::shortage::Op::Accept, &e);
                        let _ = self.listen(false);
                        self.accept_paused_until = now_ms() + ACCEPT_BACKOFF;
                        Ok(false)
                    }
                    Some(libc::ENOBUFS) | Some(libc::ENOMEM) => {
                        log::error!("accept: {e}; the worker exits to be replaced");
                        Err(ChildExit::Sick)
                    }
                    // The client gave up: the next one may be there.
                    Some(libc::ECONNABORTED) => Ok(true),
                    // EAGAIN: another worker was first.
                    _ => Ok(false),
                };
            }
        };
        crate::log::shortage::recovered(crate::log::shortage::Op::Accept);
        let ctx = self.ctx;
        if let Some(bell) = ctx.doorbell
            && ctx.scoreboard.short_of_idle(ctx.generation, ctx.slot)
        {
            bell.ring(ctx.scoreboard.header);
        }
        self.obs.slot.connections.fetch_add(1, Relaxed);
        let port = l.bound.port();
        let mut held = match (&self.tls, l.tls) {
            (_, false) => Held::new(stream, peer, port, l.proxy_protocol),
            (Some(tls), true) => match Held::new_tls(stream, peer, port, l.proxy_protocol, tls) {
                Ok(h) => h,
                Err(e) => {
                    log::warn!("cannot start a TLS session: {e}");
                    return Ok(true);
                }
            },
            // A TLS listener and no certificate: the config refuses that, so this
            // is not reached; the connection is closed rather than spoken to in
            // plain text.
            (None, true) => return Ok(true),
        };
        if self.obs.spare() && Turned::lends(self.for_a_wait, || self.obs.program_held_below()) {
            held.lend();
        }
        self.take(held);
        Ok(true)
    }

    /// Accepts what waits on the listeners without being told (this worker's
    /// share of each listener's queue, nothing when it is empty). Between the
    /// turns of a long round ([`LOOK_IN_ROUND`]), and once a sweep: `EPOLLEXCLUSIVE` wakes one waiter per
    /// new connection, and a worker killed by a signal is still a waiter until it has
    /// run to its end: a connection that comes in then wakes only that worker, and
    /// sits in the backlog with every other worker asleep until the next connection
    /// comes (seen after a `KILL`: the next request waited for as long as the server
    /// stayed quiet).
    fn look_at_listeners(&mut self) -> Result<(), ChildExit> {
        if !self.listening {
            return Ok(());
        }
        for i in 0..self.ctx.listeners.list.len() {
            self.accept(i)?;
        }
        Ok(())
    }

    /// This worker's socket pair if it is an event loop of a master's generation:
    /// where its siblings send the connections whose home it is (`super::home`).
    fn own_home(&self) -> Option<&'a Handover> {
        let ctx = self.ctx;
        (ctx.slot < self.obs.loops).then(|| ctx.homes.get(ctx.slot)).flatten()
    }

    /// After an answer, while connection `i` waits for its next request: sends it
    /// to its home loop if that is another (`super::home`). Looked at after its
    /// first answer and once more a second later; when its home could not take it,
    /// again later ([`home::retry_in`]).
    fn go_home(&mut self, i: usize) {
        let ctx = self.ctx;
        let me = ctx.slot;
        let loops = self.obs.loops.min(ctx.homes.len());
        if loops < 2 || me >= loops || ctx.master.is_none() || self.leaving.is_some() {
            return;
        }
        let p = &mut self.parked;
        let Some(&at) = p.table.home_at.get(i) else { return };
        if at == home::SETTLED || at != 0 && at > now_ms() {
            return;
        }
        // Home, it is looked at once more a second later: a client thread the
        // scheduler moved just after it connected sends from another CPU then.
        let looks = &mut p.table.home_looks[i];
        *looks = looks.saturating_add(1);
        p.table.home_at[i] = if *looks == 1 { now_ms() + home::AGAIN_MS } else { home::SETTLED };
        let Some(h) = p.table.slots[i].as_ref() else { return };
        if !h.idle() || h.conn().lent || !h.can_hand_over(crate::fork::handover::MAX_PENDING) {
            return;
        }
        let Some(incoming) = sys::incoming_cpu(h.stream().as_fd()) else { return };
        let affinity = &ctx.config.workers.cpu_affinity;
        let to = home::home(incoming, loops, |k| affinity.cpu_for(k, &self.obs.allowed), &self.obs.allowed);
        if to == me {
            self.belongs(i, None);
            self.keep_place();
            return;
        }
        let there = &ctx.scoreboard.slots[to];
        let swap = me < 64 && there.owes.load(Relaxed) & 1 << me != 0;
        let went = there.takes_connections(ctx.generation)
            && (swap || home::may_take(self.obs.slot.clients(), there.clients()))
            && p.send_home(i, &ctx.homes[to]);
        if went {
            self.publish();
        } else {
            p.table.home_at[i] = now_ms() + home::retry_in(p.table.home_looks[i]);
            self.belongs(i, Some(to));
        }
    }

    /// Notes where connection `i` belongs: here (`None`), or loop `to`, which could
    /// not take it yet; publishes what this loop owes if that changed (`Slot::owes`).
    fn belongs(&mut self, i: usize, to: Option<usize>) {
        let table = &mut self.parked.table;
        table.set_here(i, to.is_none());
        if table.set_away(i, to) {
            self.obs.slot.owes.store(table.owes(), Relaxed);
        }
    }

    /// Under `cpu_affinity = "home"`, an event loop runs on its CPU (the one whose
    /// packets make a connection its own, `super::home`) while it holds a connection
    /// found at home there, and anywhere when it holds none. The wake-up rule moves
    /// an unbound loop to whichever CPU is idle at the moment a request comes, so two
    /// loops and their clients' threads traded CPUs all the time (`docs/scaling.md`,
    /// "A loop on its clients' CPU"). A loop whose connections came in on another
    /// CPU (one its home could not take: the loops stay level) stays unbound.
    fn keep_place(&mut self) {
        if self.ctx.config.workers.cpu_affinity != crate::config::Affinity::Home || self.place_refused {
            return;
        }
        // Loop k's CPU: the k-th allowed (under "home" the loops are as many).
        let allowed = &self.obs.allowed;
        let mine = (self.parked.table.at_home() > 0).then(|| allowed.get(self.ctx.slot).copied()).flatten();
        if mine == self.placed {
            return;
        }
        let done = match mine {
            Some(cpu) => sys::pin_to_cpu(cpu),
            None => sys::set_cpus(allowed),
        };
        match done {
            Ok(()) => {
                self.placed = mine;
                self.obs.slot.set_cpu(mine);
            }
            Err(e) => {
                log::warn!("cannot set the event loop's CPUs ({e}): it runs where it is from now on");
                self.place_refused = true;
            }
        }
    }

    /// Adopts one connection a retiring worker handed over, or a sibling sent home;
    /// false when none was there (another worker was first).
    fn adopt(&mut self, h: &Handover) -> bool {
        match h.receive(&mut self.scratch) {
            Ok(Some(got)) => {
                self.adopt_received(got);
                true
            }
            Ok(None) => false,
            Err(e) => {
                log::warn!("handover: {e}");
                false
            }
        }
    }

    fn adopt_received(&mut self, got: crate::fork::handover::Received) {
        let meta = got.meta;
        let conn = Conn {
            peer: meta.peer,
            balancer: meta.balancer,
            local_port: meta.local_port,
            requests: meta.requests,
            lent: meta.lent,
        };
        if let Some(far) = got.far {
            // A tunnel: it relays here from now on.
            let stream = std::net::TcpStream::from(got.conn);
            match self.server.adopt_tunnel((stream, conn), &meta.tunnel, far, meta.waited_ms) {
                Some(held) => self.take(held),
                None => log::warn!("handover: a tunnel's state that does not read"),
            }
            return;
        }
        // In the middle of a request body: its reader goes on here.
        let body = match got.body_file {
            None => None,
            Some(file) => match thaw_body(&meta.body, file.into(), &self.ctx.config.http, self.spool()) {
                Some(incoming) => Some(incoming),
                None => return log::warn!("handover: a request body's state that does not read"),
            },
        };
        let stream = std::net::TcpStream::from(got.conn);
        self.take(Held::resume(stream, conn, meta.pending, body, meta.waited_ms));
    }

    /// Serves what a new or adopted connection has, then keeps it if it stays.
    fn take(&mut self, mut held: Held) {
        let next = self.turn(&mut held, false);
        if next == Next::Close {
            return;
        }
        let fd = held.stream().as_raw_fd();
        let watch = held.watch();
        let p = &mut self.parked;
        let i = p.table.insert(held, watch);
        let h = p.table.take_out(i).expect("just inserted");
        // The tag is the table index, the connection's until it leaves the table
        // (out of the set while it waits for nothing: a tunnel's side).
        if watch != Watch::Neither
            && let Err(e) = p.epoll.add(h.stream().as_fd(), EpollEvent::new(interest(watch), i as u64))
        {
            log::warn!("cannot watch connection {fd}: {e}");
            p.table.release(i);
            return;
        }
        p.watch_far(i, &h);
        p.table.put_back(i, h);
        if next == Next::Again {
            p.ready.push_back(i);
        }
        self.publish();
    }

    /// A held connection has input, or room for the rest of its answer (or was left
    /// with a whole request buffered). It is out of the table while it is served.
    fn serve(&mut self, i: usize) {
        let Some(mut h) = self.parked.table.take_out(i) else { return };
        let was_tunnel = h.tunnel();
        let next = self.turn(&mut h, false);
        // A kept-alive connection that switched protocols: the status page counts
        // its tunnel now, not at the worker's next accept or close.
        let switched = h.tunnel() != was_tunnel;
        self.settle(i, h, next);
        if switched {
            self.publish();
        }
    }

    /// One turn on a connection out of the table: what it has is served (or the rest
    /// of its answer written), or (`expired`) its wait has run out. A script that
    /// keeps the worker waiting hands the idle connections this worker holds to the
    /// others meanwhile (not while it leaves: it finishes them itself), so their next
    /// requests do not wait for it.
    fn turn(&mut self, h: &mut Held, expired: bool) -> Next {
        let Loop { server, obs, parked, ctx, program_since_look, .. } = self;
        server.sync_logs();
        let (slot, retiring) = (obs.slot, obs.retiring);
        // Held by a program for this turn: a sibling in standby takes new
        // connections meanwhile (`stand_by`).
        let mut held_by_program = false;
        let mut stalled = |which| {
            *program_since_look = true;
            match which {
                // A new wait keeps the connections with input here unless the last
                // one lasted a glance.
                Relief::Ready if !std::mem::replace(&mut parked.slow_program, false) => return,
                Relief::Arrived | Relief::All => parked.slow_program = true,
                _ => {}
            }
            if !held_by_program {
                held_by_program = true;
                slot.program_wait.store(1, Relaxed);
            }
            if !retiring {
                parked.relieve(ctx, slot, which);
            }
        };
        let mut hooks = Hooks { obs: &mut **obs, stalled: &mut stalled };
        let next = if expired { server.expire(h, &mut hooks) } else { server.serve_ready(h, &mut hooks) };
        if held_by_program {
            slot.program_wait.store(0, Relaxed);
        }
        if let Some((inode, app)) = crate::gateway::backend::new_local_app() {
            // A bound worker opened a connection to an application on a unix
            // socket: the master binds the process serving it to this CPU, at once
            // for the worker's first (later ones at its next tick: an application
            // that closes its connections must not wake it at every request).
            slot.app_pid.store(app, Relaxed);
            if slot.app_socket.swap(inode, Relaxed) == 0
                && let Some(bell) = ctx.doorbell
            {
                bell.ring(ctx.scoreboard.header);
            }
        }
        next
    }

    /// Puts a connection back after it was served, or lets it go.
    fn settle(&mut self, i: usize, h: Held, next: Next) {
        let p = &mut self.parked;
        match next {
            Next::Park => {
                p.put_back(i, h);
                self.go_home(i);
            }
            Next::Write | Next::Linger => p.put_back(i, h),
            Next::Again => {
                p.put_back(i, h);
                if !p.ready.contains(&i) {
                    p.ready.push_back(i);
                }
            }
            Next::Close => {
                // Closing the only descriptor of the socket takes it out of the set.
                drop(h);
                p.table.release(i);
                p.ready.retain(|&r| r != i);
                self.publish();
            }
        }
    }

    /// Deadlines: idle connections past `keepalive_timeout`, heads past
    /// `header_timeout`, answers the client took nothing of for `send_timeout` (for
    /// [`LEAVING_STALL_MS`](crate::serve::held::LEAVING_STALL_MS) at most once a
    /// reload or a stop replaces the worker), lingering closes past their moment.
    fn sweep(&mut self, now: u64) {
        let http = &self.ctx.config.http;
        // Only a worker a new generation (or a stop) replaces gives up a stalled
        // answer early: its slot is the new generation's.
        let leaving = self.leaving.is_some() && must_retire(self.ctx);
        let slots = self.parked.table.slots.len();
        for i in 0..slots {
            let due = match self.parked.table.get(i) {
                Some(h) => h.deadline_ms(http, leaving) <= now,
                None => false,
            };
            let Some(mut h) = due.then(|| self.parked.table.take_out(i)).flatten() else { continue };
            let next = self.turn(&mut h, true);
            self.settle(i, h, next);
        }
    }

    /// Where this worker counts the bytes of request bodies in temporary files.
    fn spool(&self) -> crate::gateway::spool::Disk {
        let board = self.ctx.scoreboard;
        crate::gateway::spool::Disk::bodies(&board.slots[self.ctx.slot], board.slots)
    }

    /// Tells the scoreboard what this worker holds (the status page's async
    /// connections), and stops or resumes taking connections at its cap.
    fn publish(&mut self) {
        self.keep_place();
        let len = self.parked.table.len;
        if self.leaving.is_none() {
            let full = len >= self.cap;
            // Resume a little below the cap, not at every close.
            let resume = len < self.cap - self.cap / 8;
            if full && !self.full || resume && self.full {
                self.full = full;
                self.obs.slot.full.store(u32::from(full), Relaxed);
                let _ = self.listen(!full);
                self.adopt_from_handover(!full);
                if full {
                    log::debug!("holding {} connections (workers.max_connections): taking no new ones", self.cap);
                }
            }
        }
        publish_counts(self.obs.slot, &self.parked);
    }

    /// `quiet`: nothing happened for a while, so the pipe of death is read even with
    /// no byte announced (end of file there means the master is gone). A worker
    /// writing answers or relaying tunnels leaves the pipe to a spare of its
    /// generation that does neither, if there is one (it reads it within a second):
    /// a worker that leaves finishes its answers first, which a client that stops
    /// reading makes last until `send_timeout`, holding the worker's slot, and
    /// closes its tunnels. An event loop (a slot below the CPU count) leaves it to a
    /// spare above the loops that holds nothing, if there is one: the master's dummy
    /// connection wakes a loop (a spare standing by is off the listeners), and a loop
    /// that left would pass its clients on and leave its slot to a spare that then
    /// listens, so a pool shrinking after a burst ran more busy workers than CPUs.
    fn must_leave(&self, quiet: bool) -> Option<Leaving> {
        let ctx = self.ctx;
        let header = ctx.scoreboard.header;
        let holds = |slot: &crate::scoreboard::Slot| {
            slot.conns_writing.load(Relaxed) > 0 || slot.conns_tunnels.load(Relaxed) > 0
        };
        let defer = || {
            holds(self.obs.slot) && spare_writing_none(ctx)
                || ctx.slot < self.obs.loops && spare_above_loops(ctx, self.obs.loops)
        };
        let pod = ctx.pod.as_deref().is_some_and(|p| {
            let pending = quiet || header.pod_pending.load(std::sync::atomic::Ordering::SeqCst) > 0;
            pending && !defer() && if quiet { p.check_idle(header) } else { p.check(header) }
        });
        if pod || must_retire(ctx) {
            return Some(Leaving::Retire);
        }
        let max = ctx.config.workers.max_requests;
        (max > 0 && self.obs.slot.worker_requests.load(Relaxed) >= max).then_some(Leaving::Recycle)
    }

    /// Told to stop at once (`TERM`; `INT` in `pika -X`): each answer still being
    /// written is logged as cut (`%X` is `X`) with the bytes that went, every held
    /// record is written, and the process ends as the signal would have ended it
    /// (its sockets close with it). A worker that does not get here within
    /// `sys::STOP_ALARM_SECS` (a script holds it) is ended by its alarm, which
    /// writes the held records.
    fn stop_at_once(&mut self, sig: i32) -> ! {
        for i in 0..self.parked.table.slots.len() {
            if let Some(mut h) = self.parked.table.take_out(i) {
                self.server.cut_short(&mut h, &mut *self.obs);
            }
        }
        self.server.flush_logs();
        sys::die_by(sig)
    }

    /// A leaving worker's tunnels that were not handed over (a TLS one: its session
    /// is this process's, as a TLS connection's between requests is; or no worker
    /// could take it): each reads nothing more, writes what it keeps and closes both
    /// its sides (`Server::drain_tunnel`), so the worker never waits on them.
    fn drain_tunnels(&mut self) {
        for i in 0..self.parked.table.slots.len() {
            if !self.parked.table.get(i).is_some_and(|h| h.tunnel_open()) {
                continue;
            }
            let Some(mut h) = self.parked.table.take_out(i) else { continue };
            let next = self.server.drain_tunnel(&mut h, &mut *self.obs);
            self.settle(i, h, next);
        }
    }

    /// Stops taking connections and hands over the idle ones it holds.
    fn leave(&mut self, why: Leaving) {
        // What siblings sent home here goes on with the rest.
        if let Some(home) = self.own_home() {
            while self.adopt(home) {}
        }
        self.leaving = Some(why);
        self.obs.retiring = true;
        self.obs.slot.set_state(State::Graceful);
        let _ = self.listen(false);
        self.adopt_from_handover(false);
        self.obs.slot.full.store(0, Relaxed);
        self.close_idle_at = now_ms() + LEAVE_GRACE_MS;
        let Some(handover) = handover_open(self.ctx) else { return };
        let (sent, kept) = self.parked.hand_over(handover, Relief::All, Handing::Give);
        if sent + kept > 0 {
            log::debug!("leaving: handed over {sent} connections, finishing {kept} here");
        }
        self.publish();
    }
}

/// A spare's listeners at a round of its loop (`Loop::stand_by`): on unless the
/// loops below it take connections, and whether it listens *for a wait*.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Turned {
    listen: bool,
    for_a_wait: bool,
}

impl Turned {
    /// `standby`: the loops below take connections; `listening`, `for_a_wait`:
    /// as the last round left them; `held_below`: a worker below waits on a
    /// program (asked only when the listeners go on). Listeners turned on while a
    /// program holds a worker below are on for that wait until the spare stands by
    /// again, even once the wait has ended; those on since start-up, or for a full
    /// or leaving loop, are not.
    fn at(standby: bool, listening: bool, for_a_wait: bool, held_below: impl FnOnce() -> bool) -> Turned {
        if standby {
            Turned { listen: false, for_a_wait: false }
        } else if listening {
            Turned { listen: true, for_a_wait }
        } else {
            Turned { listen: true, for_a_wait: held_below() }
        }
    }

    /// Whether a connection a spare accepts is lent
    /// ([`crate::serve::held::Conn::lent`]), to go back to the loops after its
    /// next answer once they are free: it listens for a wait (a client that came
    /// just after the wait ended would otherwise keep the spare busy beside the
    /// loops until `max_keepalive_requests`), or a worker below waits on a program
    /// now. One accepted at start-up, before the spare first stood by, or while a
    /// loop is full or leaving, stays. (An adopted connection is lent when the
    /// worker that sent it was relieved, not leaving: `fork::handover::Meta::lent`.)
    fn lends(for_a_wait: bool, held_below: impl FnOnce() -> bool) -> bool {
        for_a_wait || held_below()
    }
}

#[cfg(test)]
mod tests {
    use nix::sys::epoll::{EpollEvent, EpollFlags};

    use super::{FAR, HANDOVER, HOME, INTAKE_MAX, LISTENER, STOP, Turned, intake_share, oldest_first};

    #[test]
    fn the_loops_event_tags_share_no_bit() {
        // A tunnel's upstream is `FAR | index`: a tag with that bit would be taken
        // for the tunnel of connection 0.
        let tags = [LISTENER, HANDOVER, STOP, HOME, FAR];
        for (n, a) in tags.iter().enumerate() {
            for b in &tags[n + 1..] {
                assert_eq!(a & b, 0, "{a:#x} and {b:#x}");
            }
        }
    }

    #[test]
    fn a_round_serves_the_connection_whose_last_turn_is_oldest_first() {
        // Connection 3 was turned last (the end of the last round), 7 long ago,
        // 5 in between; 9 is new (never turned back in).
        let turned = |i: usize| match i {
            3 => 30,
            5 => 20,
            7 => 5,
            _ => 0,
        };
        let tags = [3, LISTENER, 5, FAR | 7, 7, HANDOVER, 9, STOP];
        let mut events: Vec<EpollEvent> = tags.iter().map(|&t| EpollEvent::new(EpollFlags::EPOLLIN, t)).collect();
        oldest_first(&mut events, turned);
        let order: Vec<u64> = events.iter().map(|e| e.data()).collect();
        let (first, rest) = order.split_at(4);
        let mut first = first.to_vec();
        first.sort_unstable();
        assert_eq!(first, [9, STOP, HANDOVER, LISTENER], "the loop's own descriptors and the new connection first");
        assert!(rest[..2].contains(&7) && rest[..2].contains(&(FAR | 7)), "a tunnel's two sides together: {order:?}");
        assert_eq!(rest[2..], [5, 3], "then oldest first: {order:?}");
    }

    #[test]
    fn a_worker_takes_its_share_of_a_listener_queue() {
        assert_eq!(intake_share(0, 2), 0, "nothing waits: no accept");
        assert_eq!(intake_share(1, 2), 1, "one waiting is taken, whoever's share");
        assert_eq!(intake_share(3, 2), 2);
        assert_eq!(intake_share(5, 1), 5, "alone it takes them all");
        assert_eq!(intake_share(500, 2), INTAKE_MAX);
        assert_eq!(intake_share(500, 64), 8);
        assert_eq!(intake_share(3, 0), 3, "no takers counted: itself");
    }

    #[test]
    fn a_spare_lends_what_it_accepts_while_it_listens_for_a_wait() {
        // Start-up: listening, not for a wait; the loops are free, none waits.
        let t = Turned::at(false, true, false, || false);
        assert_eq!(t, Turned { listen: true, for_a_wait: false });
        assert!(!Turned::lends(t.for_a_wait, || false), "a client taken at start-up stays");
        // It stands by.
        let t = Turned::at(true, t.listen, t.for_a_wait, || unreachable!());
        assert_eq!(t, Turned { listen: false, for_a_wait: false });
        // A loop waits on a program: it listens for that wait.
        let t = Turned::at(false, t.listen, t.for_a_wait, || true);
        assert_eq!(t, Turned { listen: true, for_a_wait: true });
        assert!(Turned::lends(t.for_a_wait, || true));
        // The wait ended; the spare has not stood by yet: still lent.
        assert!(Turned::lends(t.for_a_wait, || false), "a client that came just after the wait goes back");
        let t = Turned::at(false, t.listen, t.for_a_wait, || false);
        assert!(t.for_a_wait, "kept until it stands by");
        // Stands by, then listens for a full loop: what it takes then stays.
        let t = Turned::at(true, t.listen, t.for_a_wait, || false);
        let t = Turned::at(false, t.listen, t.for_a_wait, || false);
        assert_eq!(t, Turned { listen: true, for_a_wait: false });
        assert!(!Turned::lends(t.for_a_wait, || false));
        // ... unless a loop waits on a program at the accept.
        assert!(Turned::lends(t.for_a_wait, || true));
    }
}
