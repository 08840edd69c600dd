//! The worker's view into a connection: what the request cycle tells it (state
//! changes for the scoreboard and the watchdog, what the metrics count) and
//! asks it (must this worker stop keeping connections alive?), without knowing about
//! processes.

use std::net::SocketAddr;

/// What a connection is doing, for the scoreboard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    Reading,
    Writing,
    Logging,
    Closing,
}

/// The worker's view into a connection.
pub trait Observer {
    fn state(&mut self, state: ConnState);
    /// A request head has been read.
    fn request(&mut self, line: &[u8], client: SocketAddr);
    /// A request has been answered (not the master's internal ones): what the
    /// metrics count of it.
    fn served(&mut self, outcome: &crate::scoreboard::counters::Outcome<'_>);
    /// The worker must finish: answer this request with `Connection: close`.
    fn must_close(&self) -> bool;
    /// The worker is a spare and the event loops below it are free: the answer on
    /// a plain connection lent to it ([`crate::serve::held::Conn::lent`]) says
    /// `Connection: close`, and its client's next connection goes to a loop (a TLS
    /// one stays: its handshake costs more).
    fn hand_back(&self) -> bool;
}

/// What the worker lends a turn on a connection: its observer, and what to do when a
/// script keeps it (the worker hands connections to others meanwhile: those in the
/// middle of a body before a script with a body runs, [`Relief::Bodies`]; those
/// whose request is here as a program's wait begins, [`Relief::Ready`], or came
/// during it, [`Relief::Arrived`]; its idle ones too once a script has kept it
/// waiting a second, [`Relief::All`]).
pub struct Hooks<'a> {
    pub obs: &'a mut dyn Observer,
    pub stalled: &'a mut dyn FnMut(Relief),
}

/// Which connections a worker that a script keeps sends to the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Relief {
    /// Those whose input is here as a request is about to wait on a program: they
    /// would wait for it. The worker hands them over only when its last program
    /// wait lasted a glance (a program that answers within one keeps them: handed
    /// over at every request, they took turns between the workers).
    Ready,
    /// Those in the middle of a request body.
    Bodies,
    /// Those whose input came while a program keeps the worker (reported by a look
    /// at its set without waiting), while a spare worker can take them at once.
    Arrived,
    /// Every one it can.
    All,
}

impl Relief {
    /// Those whose input is here ([`Relief::Ready`], [`Relief::Arrived`]): they go
    /// only where they are served at once, to a spare worker.
    pub fn with_input(self) -> bool {
        matches!(self, Relief::Ready | Relief::Arrived)
    }
}
