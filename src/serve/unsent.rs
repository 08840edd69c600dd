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
//! and its count in the metrics are made then ([`Server::finish_answer`]), or when
//! the write fails or `send_timeout` passes with no byte taken, or the worker is told
//! to stop at once ([`Server::cut_short`]), with the bytes sent by then: every
//! answered request is logged once, with its real size.

use super::connection::Server;
use super::cycle::file_shrank;
use super::held::tunnel::{Cursor, put};
use super::held::{Held, Layer, Next, Owed, Phase, Unsent};
use super::input::Buffer;
use super::observer::{ConnState, Observer};
use super::output::{Answer, Asked, LogTags};
use super::transport::{self, Transport};
use crate::http::request;
use crate::http::response::Upstreamed;
use crate::serve::tls::TlsStream;
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

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
        let owed = Owed::new(&answer, asked, head, response_head, bytes_in, body_done);
        let rest = answer.rest.take().expect("an answer with a rest");
        Box::new(Unsent { rest, owed, input: Buffer::default() })
    }
}

impl Owed {
    /// What the record of `answer` to `asked` (whose head is `head`) needs once it
    /// is out; `response_head`: the head sent.
    pub(super) fn new(
        answer: &Answer,
        asked: &Asked<'_>,
        head: &[u8],
        response_head: &[u8],
        bytes_in: u64,
        body_done: bool,
    ) -> Owed {
        let (head, spans, vhost, kind, client, cached, upstream) = match *asked {
            Asked::Request { req, vhost, kind, client, cached, upstream } => {
                let spans = req.spans(head);
                debug_assert!(spans.is_some(), "a request's fields lie in the head it was parsed from");
                (head.to_vec(), spans, vhost, kind, Some(client), cached, upstream.cloned())
            }
            Asked::Refused { line } => (line.to_vec(), None, 0, LogTags::default(), None, None, None),
        };
        Owed {
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
        }
    }
}

/// A moment as microseconds since the epoch (0 before it), and back.
fn micros(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// An absent time, frozen.
const NO_TIME: u64 = u64::MAX;

impl Owed {
    /// What the record of a tunnel's end needs, for another worker
    /// (`crate::fork::handover`), after what `out` holds: all but its vhost, which the worker that takes it
    /// finds again by the request's `Host` under its own config.
    pub(super) fn freeze(&self, out: &mut Vec<u8>) {
        put(out, &self.head);
        put(out, &self.response_head);
        let refused = self.spans.is_none();
        let flags = [self.internal, self.health, self.auth, self.keep_alive, self.body_done, refused];
        out.push(flags.iter().enumerate().map(|(i, &f)| u8::from(f) << i).sum());
        let client = self.client.map_or([0; 16], |ip| match ip {
            IpAddr::V4(a) => a.to_ipv6_mapped().octets(),
            IpAddr::V6(a) => a.octets(),
        });
        out.push(match self.client {
            None => 0,
            Some(IpAddr::V4(_)) => 4,
            Some(IpAddr::V6(_)) => 6,
        });
        out.extend_from_slice(&client);
        out.push(match self.cached {
            None => 0,
            Some(false) => 1,
            Some(true) => 2,
        });
        for n in [u64::from(self.status), self.body_bytes, self.bytes_in, micros(self.start)] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        match &self.upstream {
            None => out.push(0),
            Some(u) => {
                out.push(1);
                put(out, u.addr.as_bytes());
                let header_time = u.header_time.map_or(NO_TIME, |d| d.as_micros() as u64);
                for n in [u.status.map_or(0, u64::from), header_time, u.time.as_micros() as u64] {
                    out.extend_from_slice(&n.to_le_bytes());
                }
            }
        }
    }

    /// What [`Owed::freeze`] wrote, its vhost `vhost`. The request's head is parsed
    /// here once more, in the worker that takes the tunnel (its positions are this
    /// process's to find), with no limit but its own length: it was read whole
    /// once.
    pub(super) fn thaw(c: &mut Cursor<'_>, vhost: usize) -> Option<Owed> {
        let head = c.bytes()?.to_vec();
        let response_head = c.bytes()?.to_vec();
        let flags = c.take(1)?[0];
        let flag = |i: u8| flags & (1 << i) != 0;
        let family = c.take(1)?[0];
        let ip = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(c.take(16)?).ok()?);
        let client = match family {
            0 => None,
            4 => Some(IpAddr::V4(ip.to_ipv4_mapped()?)),
            6 => Some(IpAddr::V6(ip)),
            _ => return None,
        };
        let cached = match c.take(1)?[0] {
            0 => None,
            1 => Some(false),
            2 => Some(true),
            _ => return None,
        };
        let (status, body_bytes, bytes_in, start) = (c.u64()?, c.u64()?, c.u64()?, c.u64()?);
        let upstream = match c.take(1)?[0] {
            0 => None,
            1 => {
                let addr = std::str::from_utf8(c.bytes()?).ok()?.into();
                let (status, header_time, time) = (c.u64()?, c.u64()?, c.u64()?);
                Some(Upstreamed {
                    addr,
                    status: u16::try_from(status).ok().filter(|&s| s > 0),
                    header_time: (header_time != NO_TIME).then(|| Duration::from_micros(header_time)),
                    time: Duration::from_micros(time),
                })
            }
            _ => return None,
        };
        let spans = if flag(5) {
            None
        } else {
            let n = head.len();
            let limits = request::Limits {
                max_request_line: n,
                max_header_size: n,
                max_header_line: n,
                max_headers: request::MAX_HEADERS,
            };
            let mut slots = vec![std::mem::MaybeUninit::uninit(); request::MAX_HEADERS];
            Some(request::parse(&head, &mut slots, &limits).ok()?.spans(&head)?)
        };
        Some(Owed {
            head,
            spans,
            vhost,
            internal: flag(0),
            health: flag(1),
            auth: flag(2),
            client,
            cached,
            upstream,
            status: u16::try_from(status).ok()?,
            body_bytes,
            keep_alive: flag(3),
            start: SystemTime::UNIX_EPOCH + Duration::from_micros(start),
            bytes_in,
            response_head,
            body_done: flag(4),
        })
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
    /// (`%X` is `X`), with the bytes sent so far, and so is a tunnel with the bytes
    /// it relayed. Any other phase has no answer to account.
    pub fn cut_short(&mut self, h: &mut Held, obs: &mut dyn Observer) {
        let stop = || std::io::Error::new(std::io::ErrorKind::Interrupted, "the worker stopped");
        match h.wait.phase {
            Phase::Writing(_) => drop(self.finish_answer(h, Err(stop()), obs)),
            Phase::Tunnel(_) => drop(self.end_tunnel(h, Err(stop()), obs)),
            _ => {}
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
        let owed_bytes_in = owed.bytes_in;
        let answer = Answer {
            status: owed.status,
            body_bytes: rest.streamed().unwrap_or(owed.body_bytes),
            sent: result.map(|()| rest.sent),
            rest: None,
            cut_at: rest.sent,
            keep_alive: owed.keep_alive,
            start: owed.start,
            duration: owed.start.elapsed().unwrap_or_default(),
            switched: None,
        };
        let (next, unread) = self.record(h, owed, &answer, owed_bytes_in, !input.is_empty(), obs);
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

    /// The finish stage of an answer that waited with its connection (or of a
    /// tunnel), from what it `owed`: its record and its count ([`Output::finish`],
    /// the one end of every answer; `bytes_in`, the client's bytes; the request read
    /// again from its fields' positions, no second parse), and what the finish says
    /// becomes of the connection, with whether input waits unread (`pending`: bytes
    /// after the request; a TLS session's decrypted input counts too).
    ///
    /// [`Output::finish`]: super::output::Output::finish
    pub(super) fn record(
        &mut self,
        h: &mut Held,
        owed: Owed,
        answer: &Answer,
        bytes_in: u64,
        pending: bool,
        obs: &mut dyn Observer,
    ) -> (Next, bool) {
        let mut stage = std::mem::take(&mut self.tls_stage);
        let mut tls = match &mut h.layer {
            Layer::Tls(s) => Some(TlsStream::new(&h.stream, s, &mut stage)),
            Layer::Plain | Layer::PlainOnTlsPort => None,
        };
        let buffered = tls.as_mut().is_some_and(|t| t.buffered());
        let fields = tls.as_ref().and_then(|t| t.tls());
        // The head sent, for the record (the worker's buffer is the next answer's).
        self.out.writer.head = owed.response_head;
        let mut slots = Vec::new();
        let parsed = owed.spans.as_ref().map(|s| s.view(&owed.head, &mut slots));
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
            _ => Asked::Refused { line: request::request_line(&owed.head) },
        };
        let unread = pending || buffered;
        let done = (owed.body_done, unread);
        let next = self.out.finish(self.config, &h.conn, &asked, answer, (bytes_in, fields), done, obs);
        drop(tls);
        self.tls_stage = stage;
        (next, unread)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_tunnels_record_needs_crosses_to_another_worker() {
        let head = b"GET /ws HTTP/1.1\r\nHost: a\r\n\r\n".to_vec();
        let mut slots = [const { std::mem::MaybeUninit::uninit() }; 4];
        let limits = request::Limits { max_request_line: 99, max_header_size: 99, max_header_line: 99, max_headers: 4 };
        let spans = request::parse(&head, &mut slots, &limits).unwrap().spans(&head);
        let owed = Owed {
            head,
            spans,
            vhost: 3,
            internal: false,
            health: false,
            auth: true,
            client: Some("192.0.2.7".parse().unwrap()),
            cached: None,
            upstream: Some(Upstreamed {
                addr: "http://127.0.0.1:9000".into(),
                status: Some(101),
                header_time: Some(Duration::from_micros(1500)),
                time: Duration::from_micros(2500),
            }),
            status: 101,
            body_bytes: 0,
            keep_alive: true,
            start: SystemTime::UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456),
            bytes_in: 250,
            response_head: b"HTTP/1.1 101 Switching Protocols\r\n\r\n".to_vec(),
            body_done: true,
        };
        let mut out = Vec::new();
        owed.freeze(&mut out);
        let mut c = Cursor(&out);
        let back = Owed::thaw(&mut c, 5).expect("it thaws");
        assert!(c.0.is_empty());
        let fields =
            |o: &Owed| (o.head.clone(), o.auth, o.client, o.cached, o.upstream.clone(), o.status, o.start, o.bytes_in);
        assert_eq!(fields(&back), fields(&owed));
        assert_eq!(
            (back.vhost, back.keep_alive, back.body_done, &back.response_head),
            (5, true, true, &owed.response_head)
        );
        let v6 = Owed { client: Some("2001:db8::1".parse().unwrap()), upstream: None, ..owed };
        out.clear();
        v6.freeze(&mut out);
        let back = Owed::thaw(&mut Cursor(&out), 0).unwrap();
        assert_eq!((back.client, back.upstream), (v6.client, None));
        assert!(Owed::thaw(&mut Cursor(&out[..out.len() - 1]), 0).is_none());
    }
}
