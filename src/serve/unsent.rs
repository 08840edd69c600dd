//! An answer the socket did not take whole: a client that reads slowly, or not at
//! all, costs a socket and this box, never a worker.
//!
//! What is left of the answer ([`Rest`](super::transport::Rest): the bytes not written, a file's range, a
//! stream's reader; over TLS also the records sealed in the session) waits with the
//! connection in the worker's set (`Phase::Writing`), which watches the socket for
//! room and gives it a turn when there is some: [`Server::write_more`] writes what
//! the socket takes then (about [`SEND_CHUNK`](super::transport::SEND_CHUNK) at
//! most, so one fast reader does not starve the others) between the worker's other
//! turns. The connection reads no further request meanwhile: its unread bytes wait
//! here too, and are served once the answer is out. The answer's access-log record
//! and its count in the metrics are made then ([`Server::finish_answer`], through
//! the one finish stage every answer ends with, `Output::finish`), or when
//! the write fails or `send_timeout` passes with no byte taken, or the worker is told
//! to stop at once ([`Server::cut_short`]), with the bytes sent by then: every
//! answered request is logged once, with its real size.

use super::connection::Server;
use super::cycle::file_shrank;
use super::held::{Held, Layer, Next, Owed, Phase, Unsent};
use super::input::Buffer;
use super::observer::{ConnState, Observer};
use super::output::{Answer, Asked, LogTags};
use super::transport::{self, Transport};
use crate::http::request;
use crate::serve::tls::TlsStream;

impl Unsent {
    /// The rest of `answer` (whose [`Answer::rest`] is some), for the request `asked`
    /// whose head is `head`; `response_head`: the head sent.
    #[cold]
    #[inline(never)]
    pub(super) fn owe(
        mut answer: Answer,
        asked: &Asked<'_>,
        head: &[u8],
        response_head: &[u8],
        bytes_in: u64,
        body_done: bool,
    ) -> Box<Unsent> {
        let (head, spans, vhost, kind, client, cached, upstream) = match *asked {
            Asked::Request { req, vhost, kind, client, cached, upstream } => {
                let spans = req.spans(head);
                debug_assert!(spans.is_some(), "a request's fields lie in the head it was parsed from");
                (head.to_vec(), spans, vhost, kind, Some(client), cached, upstream.cloned())
            }
            Asked::Refused { line } => (line.to_vec(), None, 0, LogTags::default(), None, None, None),
        };
        let owed = Owed {
            head,
            spans,
            vhost,
            internal: kind.internal,
            health: kind.health,
            auth: kind.auth,
            client,
            cached,
            upstream,
            status: answer.status,
            body_bytes: answer.body_bytes,
            keep_alive: answer.keep_alive,
            start: answer.start,
            bytes_in,
            response_head: response_head.to_vec(),
            body_done,
        };
        let rest = answer.rest.take().expect("an answer with a rest");
        Box::new(Unsent { rest, owed, input: Buffer::default() })
    }
}

impl Server<'_> {
    /// A turn on a connection whose answer waits: the socket has room (or broke).
    /// Writes what it takes; once all is out (or the write failed), the answer is
    /// accounted and the connection goes on as the answer said.
    pub(super) fn write_more(&mut self, h: &mut Held, obs: &mut dyn Observer) -> Next {
        let Phase::Writing(u) = &mut h.wait.phase else { return Next::Park };
        let done = match &mut h.layer {
            Layer::Plain | Layer::PlainOnTlsPort => (&h.stream).resume(&mut u.rest),
            Layer::Tls(s) => {
                let mut stage = std::mem::take(&mut self.tls_stage);
                let done = TlsStream::new(&h.stream, s, &mut stage).resume(&mut u.rest);
                self.tls_stage = stage;
                done
            }
        };
        match done {
            Ok(false) => {
                // The socket took bytes: the send timeout starts over.
                h.wait.progress();
                Next::Write
            }
            Ok(true) => self.finish_answer(h, Ok(()), obs),
            Err(e) => self.finish_answer(h, Err(e), obs),
        }
    }

    /// The worker stops at once (`TERM`: a fast stop, the watchdog, the master's
    /// death): an answer still being written to `h` is accounted and logged as cut
    /// (`%X` is `X`), with the bytes sent so far. Any other phase has no answer to
    /// account.
    pub fn cut_short(&mut self, h: &mut Held, obs: &mut dyn Observer) {
        if matches!(h.wait.phase, Phase::Writing(_)) {
            let stop = std::io::Error::new(std::io::ErrorKind::Interrupted, "the worker stopped");
            let _ = self.finish_answer(h, Err(stop), obs);
        }
    }

    /// The answer of a connection in `Phase::Writing` is out, or failed (`result`),
    /// or its send timeout passed: it is counted and logged, and the connection goes
    /// on: its next request (pipelined: [`Next::Again`]), idle, a lingering close, or
    /// closed.
    pub(super) fn finish_answer(&mut self, h: &mut Held, result: std::io::Result<()>, obs: &mut dyn Observer) -> Next {
        let Phase::Writing(u) = std::mem::replace(&mut h.wait.phase, Phase::Idle) else { return Next::Park };
        // Idle from now: the keep-alive wait starts when the answer is out.
        h.wait.enter(Phase::Idle);
        let Unsent { rest, owed, input } = *u;
        let answer = Answer {
            status: owed.status,
            body_bytes: rest.streamed().unwrap_or(owed.body_bytes),
            sent: result.map(|()| rest.sent),
            rest: None,
            cut_at: rest.sent,
            keep_alive: owed.keep_alive,
            start: owed.start,
            duration: owed.start.elapsed().unwrap_or_default(),
        };
        let mut stage = std::mem::take(&mut self.tls_stage);
        let mut tls = match &mut h.layer {
            Layer::Tls(s) => Some(TlsStream::new(&h.stream, s, &mut stage)),
            Layer::Plain | Layer::PlainOnTlsPort => None,
        };
        let buffered = tls.as_mut().is_some_and(|t| t.buffered());
        let fields = tls.as_ref().and_then(|t| t.tls());
        // The head sent, for the record (the worker's buffer is the next answer's).
        self.out.writer.head = owed.response_head;
        // The request again from the positions its fields had in its head: no second
        // parse.
        let mut slots = Vec::new();
        let head = owed.head;
        let parsed = owed.spans.as_ref().map(|s| s.view(&head, &mut slots));
        let asked = match (&parsed, owed.client) {
            (Some(req), Some(client)) => {
                if let Err(e) = &answer.sent
                    && transport::file_shrank(e)
                {
                    file_shrank(&self.sites[owed.vhost], req.target, e);
                }
                let kind = LogTags { internal: owed.internal, health: owed.health, auth: owed.auth };
                let upstream = owed.upstream.as_ref();
                Asked::Request { req, vhost: owed.vhost, kind, client, cached: owed.cached, upstream }
            }
            _ => Asked::Refused { line: request::request_line(&head) },
        };
        let unread = !input.is_empty() || buffered;
        let bytes_in = (owed.bytes_in, fields);
        let next = self.out.finish(self.config, &h.conn, &asked, &answer, bytes_in, (owed.body_done, unread), obs);
        drop(tls);
        self.tls_stage = stage;
        match next {
            // The next request, already here, is served (with `Connection: close`
            // if the worker is leaving); else the connection waits for one, or, if
            // the worker was told to leave while it wrote, is closed at this
            // request boundary.
            Next::Park => {
                h.wait.keep(input);
                if unread {
                    Next::Again
                } else if !obs.must_close() {
                    Next::Park
                } else {
                    obs.state(ConnState::Closing);
                    Next::Close
                }
            }
            Next::Linger => h.linger(&mut self.input),
            next => next,
        }
    }
}
