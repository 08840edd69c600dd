//! The request body, in the request cycle's read stage. A location that reads
//! bodies (scripts, the echo: [`crate::kinds::Handler::reads_body`]) gets its
//! request's body whole, read by the event loop ([`crate::gateway::incoming`]): what
//! has arrived is taken at once; for the rest the connection waits in the worker's
//! set in its `Body` phase, holding no worker, and once the body is whole its request
//! is served again, with it. Other locations need no body: one that is all there is
//! dropped, one that is not is never waited for (the answer closes the connection).

use std::net::SocketAddr;

use super::held::{Next, keep};
use super::input::Input;
use super::transport::Transport;
use crate::config::Http;
use crate::gateway::incoming::{BodyError, Incoming, RequestBody};
use crate::gateway::spool::Disk;
use crate::http::request::{Framing, HttpError, Request};
use crate::site::Picked;

/// The bodies the cycle holds for the request being served.
pub(super) struct Bodies {
    /// The current request's body, whole (what its handler reads).
    pub(super) current: Option<RequestBody>,
    /// One just begun that must wait in the set: it goes into the connection's phase.
    pub(super) started: Option<Box<Incoming>>,
    /// One that became whole in the set, for its request's second turn, and the
    /// bytes it took on the wire (counted in the request's bytes in, `%I`).
    pub(super) finished: Option<(RequestBody, u64)>,
    /// The folder for body files was made (once per worker).
    dir_ready: bool,
    /// The route of a request whose body became whole in the set (its vhost and
    /// place, [`Picked`]), for its second turn; or, from the read stage, the route
    /// of one whose body is just begun, for the connection's phase.
    pub(super) kept: Option<(usize, Picked)>,
    /// The worker's buffer for body bytes past a connection's ([`take_body`]).
    pub(super) scratch: Vec<u8>,
    /// Where this worker counts the bytes its bodies hold in temporary files.
    pub(super) disk: Disk,
}

/// What the read stage found of a request's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum BodyState {
    /// Read whole, or dropped, or none: the next request starts where it should.
    Done,
    /// Not all there and not waited for: the connection closes after the answer.
    NotThere,
    /// Read by the event loop: the connection waits for the rest in the set.
    Waits,
}

impl Bodies {
    pub(super) fn new(disk: Disk) -> Bodies {
        Bodies { current: None, started: None, finished: None, kept: None, dir_ready: false, scratch: Vec::new(), disk }
    }

    /// The body of a request routed to `vhost` and `picked` must be waited for: the
    /// rest is read by the event loop while the connection waits in the set, with
    /// the route (the connection's phase takes both), and the request is served
    /// again once its body is whole, on the route found now.
    #[cold]
    pub(super) fn wait_with(&mut self, vhost: usize, picked: Option<Picked>) -> Next {
        self.kept = picked.map(|p| (vhost, p));
        Next::Park
    }

    /// Finds the body of `req` (whose head is `head`; from `peer`): read whole for a
    /// location that `reads` it, else dropped if it is all there.
    pub(super) fn read(
        &mut self,
        input: &mut Input,
        t: &mut impl Transport,
        (req, reads, peer): (&Request<'_>, bool, SocketAddr),
        head: &[u8],
        http: &Http,
    ) -> Result<BodyState, HttpError> {
        self.current = self.finished.take().map(|(body, wire_bytes)| {
            input.count(wire_bytes);
            body
        });
        if !reads || req.framing == Framing::None {
            let all_there = input.drop_body(t, req, http.max_body_size)?;
            return Ok(if all_there { BodyState::Done } else { BodyState::NotThere });
        }
        if self.current.is_some() {
            return Ok(BodyState::Done);
        }
        let keep = keep(http, self.disk);
        if !self.dir_ready {
            self.dir_ready = prepare_body_dir(&http.body_temp_dir);
        }
        let mut incoming = Incoming::new(head.to_vec(), req.framing, keep)?;
        if req.expect_continue && req.http11 && !input.has_unread() {
            // Never waited for: a socket with no room now (full of earlier answers
            // the client has not read) gets none, and the client sends its body
            // after its own wait, as it does when an interim answer is lost.
            let _ = t.send(b"HTTP/1.1 100 Continue\r\n\r\n", None, false);
        }
        match take_body(input, t, &mut incoming, &mut self.scratch) {
            Ok(true) => {
                self.current = Some(incoming.into_body());
                Ok(BodyState::Done)
            }
            Ok(false) => {
                self.started = Some(Box::new(incoming));
                Ok(BodyState::Waits)
            }
            Err(e) => Err(refusal(&e, peer)),
        }
    }
}

/// Bytes a worker reads of a request body at a time once the connection's buffer
/// is used up: one buffer for the worker, not one per connection (an upload costs
/// its connection a buffer of a head's size, and a 10 MB body about 40 reads and
/// 40 writes to its file instead of 500 of each).
pub(super) const BODY_SCRATCH: usize = 256 * 1024;

/// Takes what has arrived of a request body: true once it is whole (what followed
/// it stays in `input`), false when the rest must be waited for. What the
/// connection's buffer held is taken first; the rest is read through `scratch`
/// (the worker's, [`BODY_SCRATCH`] bytes, made at its first use), no further than
/// a body of known length goes.
pub(super) fn take_body(
    input: &mut Input,
    t: &mut impl Transport,
    incoming: &mut Incoming,
    scratch: &mut Vec<u8>,
) -> Result<bool, BodyError> {
    let used = incoming.take(input.unread())?;
    input.consume(used);
    while !incoming.done() {
        if scratch.len() < BODY_SCRATCH {
            scratch.resize(BODY_SCRATCH, 0);
        }
        let want = incoming.left().map_or(BODY_SCRATCH, |n| usize::try_from(n).unwrap_or(usize::MAX).min(BODY_SCRATCH));
        match input.read_past(t, &mut scratch[..want]) {
            Ok(0) => return Err(BodyError::Closed),
            Ok(n) => {
                let used = incoming.take(&scratch[..n])?;
                input.took_past(used, &scratch[used..n]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(false),
            Err(_) => return Err(BodyError::Closed),
        }
    }
    Ok(true)
}

/// The answer to a body that could not be read, said in the error log when it is
/// the server's fault.
pub(super) fn refusal(e: &BodyError, peer: SocketAddr) -> HttpError {
    match e {
        BodyError::Http(h) => *h,
        BodyError::Closed => HttpError::BadRequest("the request body ended early"),
        BodyError::Io(io) => {
            log::error!("{peer}: keeping a request body failed: {io}");
            HttpError::Internal
        }
        BodyError::Spool(full) => {
            log::error!("{peer}: a request body refused (503): {full}");
            HttpError::Busy
        }
    }
}

/// Makes the folder for request-body files (once per worker); says so in the error
/// log when it cannot.
fn prepare_body_dir(dir: &std::path::Path) -> bool {
    match crate::gateway::spool::prepare_dir(dir) {
        Ok(()) => true,
        Err(e) => {
            log::error!("body_temp_dir {}: {e}", dir.display());
            false
        }
    }
}
