//! What a worker holds between requests: its `epoll` set, the connections in it by
//! index, and the ways they leave it other than by a request (handed to a sibling
//! worker, closed when the worker leaves). The loop that serves them is
//! [`super::events`].

use std::collections::VecDeque;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering::Relaxed;

use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags, EpollTimeout};

use super::ctx::WorkerCtx;
use crate::fork::handover::{self, Handover};
use crate::serve::held::{Conn, Held, Watch};
use crate::serve::observer::Relief;

/// `Table::away_to` of a connection at home.
const NO_LOOP: u32 = u32::MAX;

/// What a worker holds between requests: its `epoll` set and the connections in it.
pub(crate) struct Parked {
    pub(super) epoll: Epoll,
    pub(super) table: Table,
    /// Connections with a whole request already in their buffer (pipelined): served
    /// before the next wait, a burst each, in turn.
    pub(super) ready: VecDeque<usize>,
    /// Connections a look at the set found with input while a program keeps the
    /// worker: what `Relief::Arrived` and `Relief::Ready` hand to the others.
    pub(super) arrived: Vec<usize>,
    /// Whether the last program wait lasted a glance: the next one hands the
    /// connections with input over before it begins (`Relief::Ready`).
    pub(super) slow_program: bool,
    pub(super) scratch: Vec<u8>,
}

/// The connections this worker holds, by index (the index is the epoll tag). A
/// connection being served is out of its slot (`take_out`) and back after it.
#[derive(Default)]
pub(super) struct Table {
    pub(super) slots: Vec<Option<Held>>,
    /// What each slot's socket is watched for.
    watch: Vec<Watch>,
    /// What a tunnel's upstream socket is watched for (`Watch::Neither`: none in
    /// the set).
    far: Vec<Watch>,
    /// When each slot's connection last went back after a turn, in turns of this
    /// worker (`put_back`): a round serves the oldest first ([`Table::last_turn`]).
    turned: Vec<u64>,
    turns: u64,
    /// When each slot's connection is next looked at for its home loop, in
    /// milliseconds (0: after its next answer; `home::SETTLED`: never again;
    /// `super::home`), and how many times it was looked at.
    pub(super) home_at: Vec<u64>,
    pub(super) home_looks: Vec<u8>,
    /// The loop each slot's connection belongs to when that is another that
    /// could not take it yet ([`NO_LOOP`]: none), and how many such each loop has
    /// here ([`Table::owes`]).
    away_to: Vec<u32>,
    away: Vec<u32>,
    /// Whether each slot's connection was found at home here (its packets come in
    /// on this loop's CPU), and how many are ([`Table::at_home`]).
    here: Vec<bool>,
    at_home: u32,
    free: Vec<usize>,
    pub(super) len: usize,
}

impl Table {
    /// Holds `h`, its socket watched for `watch`.
    pub(super) fn insert(&mut self, h: Held, watch: Watch) -> usize {
        self.len += 1;
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(h);
                self.watch[i] = watch;
                self.far[i] = Watch::Neither;
                self.turned[i] = 0;
                self.home_at[i] = 0;
                self.home_looks[i] = 0;
                self.away_to[i] = NO_LOOP;
                self.here[i] = false;
                i
            }
            None => {
                self.slots.push(Some(h));
                self.watch.push(watch);
                self.far.push(Watch::Neither);
                self.turned.push(0);
                self.home_at.push(0);
                self.home_looks.push(0);
                self.away_to.push(NO_LOOP);
                self.here.push(false);
                self.slots.len() - 1
            }
        }
    }

    /// Takes a connection out of its slot while it is served; the slot stays its.
    pub(super) fn take_out(&mut self, i: usize) -> Option<Held> {
        self.slots.get_mut(i)?.take()
    }

    pub(super) fn put_back(&mut self, i: usize, h: Held) {
        self.slots[i] = Some(h);
        self.turns += 1;
        self.turned[i] = self.turns;
    }

    /// When the connection in slot `i` last went back after a turn (0: never, or
    /// no connection there).
    pub(super) fn last_turn(&self, i: usize) -> u64 {
        self.turned.get(i).copied().unwrap_or(0)
    }

    /// Frees the slot of a connection taken out (and closed).
    pub(super) fn release(&mut self, i: usize) {
        let _ = self.set_away(i, None);
        self.set_here(i, false);
        self.free.push(i);
        self.len -= 1;
    }

    /// Notes that slot `i`'s connection belongs to loop `to` (`None`: here);
    /// true if that changed.
    pub(super) fn set_away(&mut self, i: usize, to: Option<usize>) -> bool {
        let now = to.map_or(NO_LOOP, |k| k as u32);
        let was = std::mem::replace(&mut self.away_to[i], now);
        if was != NO_LOOP {
            self.away[was as usize] -= 1;
        }
        if let Some(k) = to {
            if self.away.len() <= k {
                self.away.resize(k + 1, 0);
            }
            self.away[k] += 1;
        }
        was != now
    }

    /// Notes whether slot `i`'s connection was found at home on this loop.
    pub(super) fn set_here(&mut self, i: usize, here: bool) {
        if std::mem::replace(&mut self.here[i], here) != here {
            if here {
                self.at_home += 1;
            } else {
                self.at_home -= 1;
            }
        }
    }

    /// How many of its connections were found at home on this loop.
    pub(super) fn at_home(&self) -> u32 {
        self.at_home
    }

    /// The loops this one holds connections of that could not go to them yet, a
    /// bit each (loop `k`: bit `k`, for the first 64).
    pub(super) fn owes(&self) -> u64 {
        self.away.iter().take(64).enumerate().filter(|&(_, &n)| n > 0).fold(0, |m, (k, _)| m | 1 << k)
    }

    pub(super) fn remove(&mut self, i: usize) -> Option<Held> {
        let h = self.slots.get_mut(i)?.take()?;
        self.release(i);
        Some(h)
    }

    pub(super) fn get(&mut self, i: usize) -> Option<&mut Held> {
        self.slots.get_mut(i)?.as_mut()
    }
}

/// What travels with a connection handed to another worker between its requests
/// (who it is, how long it waited, what it sent ahead): no body, no tunnel, not lent.
fn meta_of(conn: &Conn, waited_ms: u64, pending: Vec<u8>) -> handover::Meta {
    handover::Meta {
        peer: conn.peer,
        balancer: conn.balancer,
        local_port: conn.local_port,
        requests: conn.requests,
        waited_ms,
        pending,
        body: Vec::new(),
        tunnel: Vec::new(),
        lent: false,
    }
}

impl Parked {
    /// An empty table in a new `epoll` set.
    pub(super) fn new() -> std::io::Result<Parked> {
        Ok(Parked {
            epoll: Epoll::new(nix::sys::epoll::EpollCreateFlags::EPOLL_CLOEXEC)?,
            table: Table::default(),
            ready: VecDeque::new(),
            arrived: Vec::new(),
            slow_program: false,
            scratch: Vec::new(),
        })
    }
    /// Puts a connection back after a turn, watched from now on for what it waits
    /// for: input, or room for an answer (and a tunnel's upstream socket for what
    /// it waits for, tagged [`FAR`]).
    #[inline]
    pub(super) fn put_back(&mut self, i: usize, h: Held) {
        let watch = h.watch();
        if watch != self.table.watch[i] {
            match rewatch(&self.epoll, h.stream().as_fd(), i as u64, self.table.watch[i], watch) {
                Ok(()) => self.table.watch[i] = watch,
                Err(e) => log::warn!("cannot watch connection {i}: {e}"),
            }
        }
        self.watch_far(i, &h);
        self.table.put_back(i, h);
    }

    /// Watches a tunnel's upstream socket for what it waits for now.
    pub(super) fn watch_far(&mut self, i: usize, h: &Held) {
        let Some((fd, watch)) = h.far() else { return };
        let was = self.table.far[i];
        if watch != was {
            match rewatch(&self.epoll, fd, FAR | i as u64, was, watch) {
                Ok(()) => self.table.far[i] = watch,
                Err(e) => log::warn!("cannot watch the upstream of tunnel {i}: {e}"),
            }
        }
    }

    /// Connections kept alive (held between requests: waiting for a request, or
    /// for the rest of one), answers waiting for room in their socket, lingering
    /// closes, and tunnels.
    pub(super) fn counts(&self) -> (u32, u32, u32, u32) {
        let (mut keepalive, mut writing, mut closing, mut tunnels) = (0, 0, 0, 0);
        for h in self.table.slots.iter().flatten() {
            if h.lingering() {
                closing += 1;
            } else if h.writing() {
                writing += 1;
            } else if h.tunnel() {
                tunnels += 1;
            } else {
                keepalive += 1;
            }
        }
        (keepalive, writing, closing, tunnels)
    }

    /// A script keeps the worker (`Relief::Ready`: it is about to wait on a program,
    /// and the last one lasted a glance; `Relief::Arrived`: every
    /// [`crate::gateway::GLANCE`] of its wait; `Relief::Bodies`: to run one with a
    /// request body; `Relief::All`: one has kept it waiting a second): the
    /// connections whose input is here (while a spare worker can take them at
    /// once), those in the middle of a body, and after a second the idle ones too,
    /// go to workers that are free meanwhile, if a worker of this generation stays
    /// to adopt them.
    pub(super) fn relieve(&mut self, ctx: &WorkerCtx<'_>, slot: &crate::scoreboard::Slot, which: Relief) {
        let Some(handover) = handover_open(ctx) else { return };
        // Connections with their input here go where it is served at once: to a
        // spare worker, one to each that is idle; with none, handing them over would
        // only move their wait. (At 100 kept-alive clients every connection of a
        // loop has its next request here: a glance handed all of them to one or two
        // spares, which then took turns on the cores with the loops.)
        let most = if which.with_input() {
            let spares = ctx.spare_siblings(0, |_| true);
            if spares == 0 || !self.look() && self.ready.is_empty() {
                return;
            }
            spares
        } else {
            usize::MAX
        };
        let (sent, _) = self.hand_over(handover, which, Handing::Lend { most });
        if sent > 0 {
            log::debug!("a script holds this worker: handed {sent} connections to others");
            publish_counts(slot, self);
        }
    }

    /// Looks at the set without waiting: the connections it reports with input go
    /// into `arrived` (not the one being served: it is out of its slot; nor the
    /// listeners and the handover socket, whose tags are above any index). The set
    /// is level-triggered: what is not handed over is reported again by the loop's
    /// next wait. True if any.
    fn look(&mut self) -> bool {
        let mut events = [EpollEvent::empty(); LOOK_EVENTS];
        let n = self.epoll.wait(&mut events, EpollTimeout::ZERO).unwrap_or(0);
        self.arrived.clear();
        for ev in &events[..n] {
            let i = ev.data();
            let held = i < FAR && self.table.slots.get(i as usize).is_some_and(Option::is_some);
            if held && ev.events().contains(EpollFlags::EPOLLIN) {
                self.arrived.push(i as usize);
            }
        }
        !self.arrived.is_empty()
    }

    /// Sends every connection it can (of `which`, as many as `how` says) to the
    /// workers that stay: all but lingering closes, answers being written, TLS
    /// sessions, draining tunnels and oversized pending heads. Returns how many
    /// went and how many stay.
    pub(crate) fn hand_over(&mut self, handover: &Handover, which: Relief, how: Handing) -> (usize, usize) {
        let (most, lent) = match how {
            Handing::Lend { most } => (most, true),
            Handing::Give => (usize::MAX, false),
        };
        let (mut sent, mut kept) = (0, 0);
        let (mut state, mut tunnel) = (Vec::new(), Vec::new());
        for i in 0..self.table.slots.len() {
            if sent == most {
                break;
            }
            let Some(h) = self.table.slots[i].as_mut() else { continue };
            if !h.can_hand_over(handover::MAX_PENDING) {
                kept += 1;
                continue;
            }
            if which == Relief::Bodies && !h.in_body() {
                continue;
            }
            if which.with_input() && !(self.arrived.contains(&i) || self.ready.contains(&i)) {
                continue;
            }
            let conn = *h.conn();
            let (waited_ms, pending) = (h.waited_ms(), h.pending().to_vec());
            let in_body = h.in_body();
            let far_watch = self.table.far[i];
            // The socket, and the file of what came of a body, or a tunnel's upstream.
            let (socket, second) = if in_body {
                match h.freeze_body(&mut state) {
                    Some(Ok([socket, file])) => (socket, Some(file)),
                    Some(Err(e)) => {
                        log::warn!("handover: cannot pass on a request body: {e}");
                        kept += 1;
                        continue;
                    }
                    None => unreachable!("in a body"),
                }
            } else if let Some([socket, far]) = h.freeze_tunnel(&mut tunnel) {
                (socket, Some(far))
            } else {
                (h.stream().as_fd(), None)
            };
            let is_tunnel = !tunnel.is_empty();
            let meta = handover::Meta {
                body: if in_body { std::mem::take(&mut state) } else { Vec::new() },
                tunnel: std::mem::take(&mut tunnel),
                lent,
                ..meta_of(&conn, waited_ms, pending)
            };
            if !meta.fits() {
                kept += 1;
                continue;
            }
            // Out of this worker's set first, so it never reports the socket again
            // (nor a tunnel's upstream: a registration lives as long as the socket,
            // in flight or in the worker that takes it, not this worker's descriptor).
            let _ = self.epoll.delete(socket);
            if let Some(far) = second.filter(|_| is_tunnel && far_watch != Watch::Neither) {
                let _ = self.epoll.delete(far);
            }
            match handover.send(socket, second, &meta, &mut self.scratch) {
                Ok(()) => {
                    self.table.remove(i);
                    self.ready.retain(|&r| r != i);
                    sent += 1;
                }
                Err(e) => {
                    if is_tunnel {
                        // Watched again for what it waits for.
                        self.table.watch[i] = Watch::Neither;
                        self.table.far[i] = Watch::Neither;
                        if let Some(h) = self.table.take_out(i) {
                            self.put_back(i, h);
                        }
                    } else {
                        // Handed over only while it waits for input.
                        let ev = EpollEvent::new(EpollFlags::EPOLLIN, i as u64);
                        let _ = self.epoll.add(socket, ev);
                    }
                    kept += 1;
                    if e.kind() != std::io::ErrorKind::WouldBlock {
                        log::warn!("handover: {e}");
                    }
                }
            }
        }
        (sent, kept)
    }

    /// Sends connection `i`, idle between requests, to the event loop whose socket
    /// pair `to` is (`super::home`); false if it stays (the pair is full).
    pub(super) fn send_home(&mut self, i: usize, to: &Handover) -> bool {
        let Some(h) = self.table.slots.get(i).and_then(Option::as_ref) else { return false };
        let meta = meta_of(h.conn(), h.waited_ms(), h.pending().to_vec());
        if !meta.fits() {
            return false;
        }
        let socket = h.stream().as_fd();
        let _ = self.epoll.delete(socket);
        if to.send(socket, None, &meta, &mut self.scratch).is_ok() {
            self.table.remove(i);
            self.ready.retain(|&r| r != i);
            return true;
        }
        let ev = EpollEvent::new(interest(self.table.watch[i]), i as u64);
        let _ = self.epoll.add(socket, ev);
        false
    }

    /// Closes the connections that wait between requests (a clean close at a request
    /// boundary). Returns how many.
    pub(super) fn close_idle(&mut self) -> usize {
        let mut closed = 0;
        for i in 0..self.table.slots.len() {
            let Some(h) = self.table.slots[i].as_ref() else { continue };
            if h.idle() {
                self.table.remove(i);
                self.ready.retain(|&r| r != i);
                closed += 1;
            }
        }
        closed
    }
}

/// How a worker's connections leave it by the handover socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handing {
    /// Lent by a worker a program holds, `most` of them: each goes back to the
    /// event loops from the spare that takes it (`handover::Meta::lent`).
    Lend { most: usize },
    /// Given by a worker that leaves (a reload, `max_requests`, the pipe of death),
    /// every one it can: they stay where they go.
    Give,
}

/// Events taken by one look at the set while a program keeps the worker: more than
/// the connections a worker holds at a hundred clients; any beyond wait for the
/// next look.
const LOOK_EVENTS: usize = 64;

/// The tag of a tunnel's upstream socket: its connection's index with this bit.
/// Below the worker's other tags (`events`), above any index.
pub(super) const FAR: u64 = 1 << 59;

/// Moves a socket's registration from `was` to `now`: out of the set for
/// `Watch::Neither` (a hang-up it cannot act on would wake the worker again and
/// again), back in when it waits for something again.
fn rewatch(epoll: &Epoll, fd: std::os::fd::BorrowedFd<'_>, tag: u64, was: Watch, now: Watch) -> nix::Result<()> {
    match (was, now) {
        (_, Watch::Neither) => epoll.delete(fd),
        (Watch::Neither, now) => epoll.add(fd, EpollEvent::new(interest(now), tag)),
        (_, now) => epoll.modify(fd, &mut EpollEvent::new(interest(now), tag)),
    }
}

/// The `epoll` events for what a connection is watched for (level-triggered).
pub(super) fn interest(watch: Watch) -> EpollFlags {
    match watch {
        Watch::Input => EpollFlags::EPOLLIN,
        Watch::Room => EpollFlags::EPOLLOUT,
        Watch::Both => EpollFlags::EPOLLIN | EpollFlags::EPOLLOUT,
        Watch::Neither => EpollFlags::empty(),
    }
}

/// Whether idle connections may be handed over now: a worker of the current
/// generation stays to adopt them (not while stopping, nor after WINCH).
pub(crate) fn handover_open<'a>(ctx: &WorkerCtx<'a>) -> Option<&'a Handover> {
    let header = ctx.scoreboard.header;
    let open = header.handover_open.load(Relaxed) != 0 && header.stopping.load(Relaxed) == 0;
    ctx.handover.filter(|_| open)
}

/// Writes what a worker holds into its scoreboard slot (the status page's async
/// connections).
pub(crate) fn publish_counts(slot: &crate::scoreboard::Slot, parked: &Parked) {
    slot.owes.store(parked.table.owes(), Relaxed);
    let (keepalive, writing, closing, tunnels) = parked.counts();
    slot.conns_keepalive.store(keepalive, Relaxed);
    slot.conns_writing.store(writing, Relaxed);
    slot.conns_closing.store(closing, Relaxed);
    slot.conns_tunnels.store(tunnels, Relaxed);
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};

    use super::*;

    /// `n` connections held in `p`, each watched in its set if `in_set`; their
    /// clients' ends.
    fn hold(p: &mut Parked, n: usize, in_set: bool) -> Vec<TcpStream> {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut clients = Vec::new();
        for _ in 0..n {
            clients.push(TcpStream::connect(listener.local_addr().unwrap()).unwrap());
            let (s, peer) = listener.accept().unwrap();
            let i = p.table.insert(Held::new(s, peer, 80, false), Watch::Input);
            if in_set {
                let h = p.table.get(i).unwrap();
                p.epoll.add(h.stream().as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, i as u64)).unwrap();
            }
        }
        clients
    }

    /// While a program keeps the worker, a look at its set finds the connections
    /// whose request came meanwhile: those go to the others, not the idle ones, nor
    /// the one being served (out of its slot, its socket still in the set).
    #[test]
    fn an_arrived_relief_hands_over_the_connections_whose_request_came_during_the_wait() {
        let mut p = Parked::new().unwrap();
        let mut clients = hold(&mut p, 4, true);
        let served = p.table.take_out(2).unwrap();
        for c in [1, 2] {
            std::io::Write::write_all(&mut clients[c], b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !p.look() {
            assert!(std::time::Instant::now() < deadline, "the request never seen");
        }
        assert_eq!(p.arrived, [1]);
        let handover = Handover::new().unwrap();
        let (sent, _) = p.hand_over(&handover, Relief::Arrived, Handing::Lend { most: usize::MAX });
        assert_eq!(sent, 1);
        p.table.put_back(2, served);
        let held: Vec<bool> = p.table.slots.iter().map(Option::is_some).collect();
        assert_eq!(held, [true, false, true, true]);
        let mut buf = Vec::new();
        let got = handover.receive(&mut buf).unwrap().expect("it went to the others");
        assert_eq!(got.meta.requests, 0);
        assert!(got.meta.lent);
    }

    /// The connections found at home are counted once each, and a slot freed (or
    /// found to belong elsewhere) no longer counts: the count an event loop under
    /// `cpu_affinity = "home"` stays bound by (`Loop::keep_place`).
    #[test]
    fn the_connections_found_at_home_are_counted_until_they_go() {
        let mut p = Parked::new().unwrap();
        let _clients = hold(&mut p, 3, false);
        p.table.set_here(0, true);
        p.table.set_here(0, true);
        p.table.set_here(2, true);
        assert_eq!(p.table.at_home(), 2);
        p.table.set_here(2, false);
        assert_eq!(p.table.at_home(), 1);
        drop(p.table.remove(0));
        assert_eq!(p.table.at_home(), 0);
        let _more = hold(&mut p, 1, false);
        assert_eq!(p.table.at_home(), 0, "a reused slot starts away from home");
    }

    /// Connections with their request here go one to each idle spare (`most`):
    /// the rest stay, reported again by the loop's next wait.
    #[test]
    fn a_relief_hands_over_at_most_as_many_as_asked() {
        let mut p = Parked::new().unwrap();
        let mut clients = hold(&mut p, 4, true);
        for c in [0, 1, 3] {
            std::io::Write::write_all(&mut clients[c], b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !(p.look() && p.arrived.len() == 3) {
            assert!(std::time::Instant::now() < deadline, "the requests never seen");
        }
        let handover = Handover::new().unwrap();
        assert_eq!(p.hand_over(&handover, Relief::Arrived, Handing::Lend { most: 2 }).0, 2);
        assert_eq!(p.table.len, 2, "one with its request and the idle one stay");
        assert!(p.table.slots[2].is_some(), "the idle one stays");
    }
}
