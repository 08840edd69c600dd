//! The write side of a connection: an answer's head and body sent
//! ([`HeadWriter::send`], through [`response`]), and what the access log says of each
//! request ([`Output::log`], the only place a record is made).

use std::io;
use std::time::{Duration, SystemTime};

use super::held::{Conn, Next};
use super::observer::{ConnState, Observer};
use super::transport::{Rest, Sent, Transport};
use crate::config::Config;
use crate::http::date::DateCache;
use crate::http::request::Request;
use crate::http::response::{self, Body, Reply, Switched, Upstreamed};
use crate::log::access::AccessLogs;
use crate::log::record::{Record, TlsFields, UpstreamFields};
use crate::scoreboard::counters::Outcome;

/// The write side: what builds, sends and logs responses.
pub(super) struct Output {
    pub(super) logs: AccessLogs,
    pub(super) request_id: u64,
    pub(super) writer: HeadWriter,
}

/// Makes response heads and sends them with their bodies.
pub(super) struct HeadWriter {
    pub(super) date: DateCache,
    pub(super) server_header: &'static str,
    /// The last head sent (the access log may quote its fields).
    pub(super) head: Vec<u8>,
}

/// What the client asked, as far as the log is concerned.
pub(super) enum Asked<'a> {
    /// A parsed request, served by vhost number `vhost`, from `client` (the peer,
    /// or the client a trusted forwarder named).
    /// `cached`: a file was sent, from the worker's cache or not (the metrics count
    /// which).
    /// `upstream`: what a proxy location's upstream did.
    Request {
        req: &'a Request<'a>,
        vhost: usize,
        kind: LogTags,
        client: std::net::IpAddr,
        cached: Option<bool>,
        upstream: Option<&'a Upstreamed>,
    },
    /// A head refused before or while it was read: only its line is known.
    Refused { line: &'a [u8] },
}

/// How a reply goes out.
#[derive(Clone, Copy)]
pub(super) struct Delivery {
    pub(super) http11: bool,
    /// Else `Connection: close`.
    pub(super) keep_alive: bool,
    /// The head without the body (a HEAD request).
    pub(super) head_only: bool,
}

/// What went back.
pub(super) struct Answer {
    pub(super) status: u16,
    /// The body's length (0 when only the head was sent).
    pub(super) body_bytes: u64,
    /// The bytes written (so far, when `rest` waits), or why the write failed.
    pub(super) sent: io::Result<u64>,
    /// What the socket did not take: it waits with the connection.
    pub(super) rest: Option<Box<Rest>>,
    /// The bytes written before the write failed (a parked answer's).
    pub(super) cut_at: u64,
    pub(super) keep_alive: bool,
    pub(super) start: SystemTime,
    /// How long answering took (%D, %T, the metrics' histogram).
    pub(super) duration: Duration,
    /// A 101 that switched protocols: the other end of the tunnel it opens.
    pub(super) switched: Option<Box<Switched>>,
}

impl HeadWriter {
    /// Sends `reply`: the head made from it, then its body unless the request or
    /// the status wants none, as far as the socket takes it now.
    #[inline(always)]
    fn send(
        &mut self,
        t: &mut impl Transport,
        mut reply: Reply<'_>,
        start: SystemTime,
        mut how: Delivery,
        obs: &mut dyn Observer,
    ) -> Answer {
        obs.state(ConnState::Writing);
        let mut body = std::mem::replace(&mut reply.body, Body::None);
        // A body of unknown length ends with the connection where it cannot be
        // chunked (HTTP/1.0).
        how.keep_alive &= how.http11 || body.length().is_some();
        let date = reply.date.as_deref().unwrap_or_else(|| self.date.at(start));
        let server = reply.server.as_deref().unwrap_or(self.server_header);
        response::write_head(&mut self.head, date, server, &reply, &body, how.http11, how.keep_alive);
        let send_body = !how.head_only && !response::bodiless(reply.status);
        if !how.keep_alive {
            t.last_response();
        }
        let chunked = how.http11 && body.length().is_none();
        // Known before the send: a file's range may move into what waits.
        let known = if send_body { body.sent() } else { 0 };
        let (sent, rest) = match t.send(&self.head, send_body.then_some(&mut body), chunked) {
            Ok(Sent::All(n)) => (Ok(n), None),
            Ok(Sent::Parked(rest)) => (Ok(rest.sent), Some(rest)),
            Err(e) => (Err(e), None),
        };
        let body_bytes = match &rest {
            Some(r) => r.streamed().unwrap_or(known),
            None if send_body && matches!(body, Body::Stream(_)) => body.sent(),
            None => known,
        };
        let duration = start.elapsed().unwrap_or_default();
        let switched = reply.switched.take().filter(|_| reply.status == 101);
        let keep_alive = how.keep_alive;
        Answer { status: reply.status, body_bytes, sent, rest, cut_at: 0, keep_alive, start, duration, switched }
    }
}

impl Answer {
    /// The bytes written, all of the answer or as far as it went.
    pub(super) fn bytes_out(&self) -> u64 {
        *self.sent.as_ref().unwrap_or(&self.cut_at)
    }

    /// The request as the metrics count it.
    pub(super) fn outcome<'a>(&self, method: &'a [u8], cached: Option<bool>, refused: bool) -> Outcome<'a> {
        let bytes = self.bytes_out();
        Outcome { method, status: self.status, bytes, duration: self.duration, cached, refused }
    }
}

fn vhost_name(config: &Config, index: usize) -> &str {
    config.vhosts[index].server_names.first().map_or("-", String::as_str)
}

impl Output {
    /// The deliver stage: sends `reply` as `how` says, as far as the socket takes it
    /// now (the rest, if any, in the [`Answer`]).
    #[inline(always)]
    pub(super) fn deliver(
        &mut self,
        t: &mut impl Transport,
        reply: Reply<'_>,
        start: SystemTime,
        how: Delivery,
        obs: &mut dyn Observer,
    ) -> Answer {
        self.writer.send(t, reply, start, how, obs)
    }

    /// The finish stage's record: the request's access-log record is made, and the metrics
    /// count it (not the master's dummy requests, which are not traffic).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn account(
        &mut self,
        config: &Config,
        conn: &Conn,
        asked: &Asked<'_>,
        answer: &Answer,
        bytes_in: u64,
        tls: Option<TlsFields<'_>>,
        obs: &mut dyn Observer,
    ) {
        obs.state(ConnState::Logging);
        // Logged, then counted: a worker killed between the two (a few instructions)
        // has the request in its log (the master writes what it held) and not in
        // the count of answered requests, never answered and unlogged.
        self.log(config, conn, asked, answer, bytes_in, tls);
        match *asked {
            Asked::Request { req, kind, cached, .. } if !kind.internal => {
                obs.served(&answer.outcome(req.method_str.as_bytes(), cached, false));
            }
            Asked::Request { .. } => {}
            Asked::Refused { line } => {
                let method = &line[..line.iter().position(|&b| b == b' ').unwrap_or(line.len())];
                obs.served(&answer.outcome(method, None, true));
            }
        }
    }

    /// The finish stage, once an answer's last byte is out (or the write failed, or
    /// `send_timeout` passed with nothing taken): its count and its access-log
    /// record ([`Output::account`]), and what becomes of the connection: kept alive
    /// ([`Next::Park`]), closed at once, or a lingering close when input is still
    /// unread (`body_done`: the request's body was read whole; `unread`: bytes
    /// after it are) — only unread input can turn our close into a reset that
    /// destroys the response (nginx's `lingering_close on`). The one end of every
    /// answer, written at once (`cycle`) or as the client read it (`unsent`).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn finish(
        &mut self,
        config: &Config,
        conn: &Conn,
        asked: &Asked<'_>,
        answer: &Answer,
        (bytes_in, tls): (u64, Option<TlsFields<'_>>),
        (body_done, unread): (bool, bool),
        obs: &mut dyn Observer,
    ) -> Next {
        self.account(config, conn, asked, answer, bytes_in, tls, obs);
        if answer.sent.is_err() {
            return Next::Close;
        }
        if answer.keep_alive {
            return Next::Park;
        }
        obs.state(ConnState::Closing);
        if !body_done || unread { Next::Linger } else { Next::Close }
    }

    /// Makes the access-log record of one request and hands it to the logs: the one
    /// place a record is made.
    #[inline(always)]
    fn log(
        &mut self,
        config: &Config,
        conn: &Conn,
        asked: &Asked<'_>,
        answer: &Answer,
        bytes_in: u64,
        tls: Option<TlsFields<'_>>,
    ) {
        let upstream = match *asked {
            Asked::Request { upstream: Some(u), .. } => {
                Some(UpstreamFields { addr: &u.addr, status: u.status, header_time: u.header_time, time: u.time })
            }
            _ => None,
        };
        let (line, method, path, query, protocol, host, vhost, kind, client) = match *asked {
            Asked::Request { req, vhost, kind, client, .. } => {
                let (path, query) = split_query(req.target);
                (req.line, req.method_str.as_bytes(), path, query, req.protocol(), req.host, vhost, kind, client)
            }
            // Of a refused head only the line is known; the default vhost logs it.
            Asked::Refused { line } => {
                let method_end = line.iter().position(|&b| b == b' ').unwrap_or(line.len());
                (line, &line[..method_end], &b"-"[..], None, "HTTP/1.1", None, 0, LogTags::default(), conn.peer.ip())
            }
        };
        let headers_in = |name: &str| match asked {
            Asked::Request { req, .. } => req.header(name),
            Asked::Refused { .. } => None,
        };
        // A refused head gets no request id and no keep-alive count.
        let refused = matches!(asked, Asked::Refused { .. });
        let (request_id, keepalive_count) = if refused {
            (0, 0)
        } else {
            self.request_id = self.request_id.wrapping_add(1);
            (self.request_id, conn.requests - 1)
        };
        let conn_status = match (&answer.sent, answer.keep_alive) {
            _ if refused => '-',
            (Err(_), _) => 'X',
            (Ok(_), true) => '+',
            (Ok(_), false) => '-',
        };
        // The user a password was given for, where one is asked (decoded again
        // here: the header is short, and only such locations pay).
        let user = if kind.auth {
            headers_in("authorization").and_then(|v| crate::rules::basic::parse(v).ok()).map(|c| c.user)
        } else {
            None
        };
        let record = Record {
            client,
            peer: conn.socket_peer(),
            user: user.as_deref(),
            local_port: conn.local_port,
            request_line: line,
            method,
            path,
            query,
            protocol,
            status: answer.status,
            body_bytes: answer.body_bytes,
            bytes_in,
            bytes_out: answer.bytes_out(),
            start: answer.start,
            duration: answer.duration,
            vhost: vhost_name(config, vhost),
            host,
            headers_in: &headers_in,
            response_head: &self.writer.head,
            conn_status,
            keepalive_count,
            health: kind.health,
            request_id,
            tls,
            upstream,
        };
        self.logs.write(&record, kind.internal, vhost);
    }
}

/// What kind of request it was, for the logs' filters.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct LogTags {
    /// The master's dummy request (its per-boot token).
    pub(super) internal: bool,
    /// Answered by a health-check location.
    pub(super) health: bool,
    /// Its location asks for a password (the log's `%u` is the user it names).
    pub(super) auth: bool,
}

fn split_query(target: &[u8]) -> (&[u8], Option<&[u8]>) {
    match target.iter().position(|&b| b == b'?') {
        Some(q) => (&target[..q], Some(&target[q + 1..])),
        None => (target, None),
    }
}
