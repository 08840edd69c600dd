//! A location whose scripts a FastCGI application runs (`fastcgi =
//! "unix:/run/php/php8.2-fpm.sock"` or `"tcp:127.0.0.1:9000"`): PHP-FPM, or any
//! FastCGI responder.
//!
//! The script is found under the location's directory as for CGI (the file must
//! exist: the path after it is `PATH_INFO`, so `index.php/route` runs `index.php`;
//! a path that ends at a directory runs its `index`), and sent to the application
//! as `SCRIPT_FILENAME` with the same meta-variables as a CGI script, the body as
//! `FCGI_STDIN`; the answer comes back as `FCGI_STDOUT` (read like a CGI
//! script's) and `FCGI_STDERR` (to the error log, a line at a time with the script's
//! name).
//!
//! Each worker keeps one connection to the application open across requests
//! (`FCGI_KEEP_CONN`), and opens a new one when the application closed it: a kept
//! connection with anything to read before a request (the application's end of file,
//! or bytes out of step) is dropped unused. A kept connection that breaks before the
//! first byte of an answer may be one the application closed as the request went out,
//! or one whose application died running it (a php-fpm child past
//! `request_terminate_timeout`, killed for its memory, crashed): the request is sent
//! again on a new connection only when running it twice does no harm (an idempotent
//! method, [`replayable`]) or when not a byte of it was written, so a POST never runs
//! twice. A
//! PHP-FPM child serves one connection at a time, so a kept connection holds one of
//! the pool's children for this worker: the pool needs at least as many children as
//! pika has workers (`pm.max_children >= workers.max_workers`). The answer is read
//! to its end and kept for the client ([`crate::gateway::spool`]), so the child is
//! free again once it has answered, however slowly the client reads (unless
//! `buffering = false`: then the child is held until the client has the answer). The application
//! down or refusing gives 502, past `script_timeout` 504, each with one line in the
//! error log.

use std::cell::RefCell;
use std::io;
use std::os::fd::BorrowedFd;
use std::rc::Rc;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, poll};

use crate::gateway::backend::{Backend, Dial};
use crate::gateway::child::{StderrLines, Stdin};
use crate::gateway::fcgi::{Event, Reader, Request};
use crate::gateway::output::{self, Failed, Fault, MAX_OUTPUT, Source, poll_ms};
use crate::gateway::{AppAddr, ClientWatch, FastCgiConfig};
use crate::http::path::CleanPath;
use crate::http::response::{Internal, Reply};

use crate::exchange::Ask;
use crate::kinds::files::try_files::{self, Tried};
use crate::kinds::script::{self, Scripts};

/// A connection to the application.
type AppConn = Backend;

/// Where the application listens, as a backend is dialled.
fn dial(addr: &AppAddr) -> Dial<'_> {
    match addr {
        AppAddr::Unix(p) => Dial::Unix(p),
        AppAddr::Tcp(a) => Dial::Tcp(a),
    }
}

/// The FastCGI handler of one location, in one worker.
pub struct FastCgi<'c> {
    pub config: &'c FastCgiConfig,
    pub scripts: Scripts<'c>,
    /// The connection kept from the last request (put back at the clean end of an
    /// answer: at once when the answer is kept for its client, when the client has
    /// it when it streams).
    kept: Rc<RefCell<Option<AppConn>>>,
    /// The application's address as the error log says it.
    addr: Rc<str>,
    /// The location's own `try_files` (a front controller: every path that is not
    /// a script here goes to `/index.php`).
    pub try_files: Vec<String>,
}

impl<'c> FastCgi<'c> {
    pub fn new(config: &'c FastCgiConfig, scripts: Scripts<'c>) -> Self {
        FastCgi { config, scripts, kept: Rc::default(), addr: config.addr.to_string().into(), try_files: Vec::new() }
    }

    pub fn serve(&self, ask: &Ask<'_>, reply: &mut Reply<'_>) {
        if self.try_files.is_empty() || ask.redirected {
            return self.run(ask, reply);
        }
        let exists = |c: &CleanPath<'_>, dir: bool| self.scripts.runs_exactly(&c.bytes, dir);
        match try_files::try_files(&self.try_files, ask.path, ask.query, exists) {
            Tried::Found(path) => {
                let ask = Ask {
                    path: &path,
                    req: ask.req,
                    query: ask.query,
                    client: ask.client,
                    link: ask.link,
                    redirected: false,
                };
                self.run(&ask, reply);
            }
            Tried::Fallback(target) => reply.internal = Some(Internal { target, as_get: false }),
            Tried::Status(status) => {
                reply.error(status, "The requested resource was not found.");
            }
        }
    }

    /// Runs the script `ask`'s path names.
    fn run(&self, ask: &Ask<'_>, reply: &mut Reply<'_>) {
        let Some(p) = self.scripts.prepare(ask, reply) else { return };
        let begin = Request::begin(&p.env);
        let deadline = Instant::now() + self.config.timeout;
        let addr = &self.config.addr;
        let keep = self.config.buffering.then_some(ask.link.answers);
        let mut tries = 0;
        let got = loop {
            tries += 1;
            let Some(body) = script::stdin(ask, &p.name, reply) else { return };
            let kept = self.kept.borrow_mut().take().filter(|c| !c.stale());
            let (conn, fresh) = match kept {
                Some(c) => (c, false),
                None => match AppConn::open(dial(addr), self.config.timeout) {
                    Ok(c) => (c, true),
                    Err(e) => {
                        break Err(Failed::Fault(Fault::Broken { why: format!("cannot connect: {e}"), retry: false }));
                    }
                },
            };
            let talk = Talk {
                conn: Some(conn),
                so_far: SoFar { fresh, replayable: replayable(ask.req.method_str), wrote_any: false, got_any: false },
                out: begin.bytes.clone(),
                written: 0,
                body,
                sent_body: 0,
                stdin_ended: false,
                scratch: Vec::new(),
                reader: Reader::default(),
                errors: StderrLines::new(&p.name, &p.context),
                taken: 0,
                deadline,
                addr: self.addr.clone(),
                timeout: self.config.timeout,
                watch: ClientWatch::default(),
                kept: self.kept.clone(),
            };
            match output::read(talk, ask.link.socket, ask.link.waiting, keep) {
                // A kept connection the application had closed, and a request that may
                // be sent again: once more on a new one.
                Err(Failed::Fault(Fault::Broken { retry: true, .. })) if tries < 2 => continue,
                other => break other,
            }
        };
        let name = &p.name;
        match script::answered(got, ask, name, reply) {
            None => {}
            Some(Fault::Broken { why, .. }) => {
                log::error!("{name}: FastCGI application at {addr}: {why}");
                reply.error(502, "The application is not available.");
            }
            Some(Fault::TimedOut) => {
                let timeout = self.config.timeout;
                log::error!("{name}: FastCGI application at {addr}: no answer within script_timeout ({timeout:?})");
                reply.error(504, "The application did not answer in time.");
            }
            Some(Fault::TooLong) => {
                log::error!("{name}: FastCGI application at {addr}: answer over {MAX_OUTPUT} bytes");
                reply.error(502, "The application's answer was too long.");
            }
            Some(Fault::ClientGone) => {
                log::info!("{name}: the client closed the connection before the application answered");
                reply.error(400, "The client went away.");
                reply.close = true;
            }
        }
    }
}

/// One request to the application: the records of the request to write (the body
/// among them, read as they go), and the answer's records read. It lives on as the
/// answer's reader while the answer streams; the connection is kept for the next
/// request only when the application ended this one cleanly.
struct Talk {
    /// None once the answer ended (kept or closed).
    conn: Option<AppConn>,
    /// What decides whether the request may go again should the connection break.
    so_far: SoFar,
    /// Request records not written yet, from `written`.
    out: Vec<u8>,
    written: usize,
    body: Stdin,
    sent_body: u64,
    stdin_ended: bool,
    scratch: Vec<u8>,
    reader: Reader,
    errors: StderrLines,
    /// FCGI_STDOUT bytes taken.
    taken: u64,
    deadline: Instant,
    /// The application's address, for the error log.
    addr: Rc<str>,
    timeout: Duration,
    watch: ClientWatch,
    kept: Rc<RefCell<Option<AppConn>>>,
}

/// What one try of a request has done so far on its connection.
struct SoFar {
    /// Opened for this request (a kept one may just have been closed by the application).
    fresh: bool,
    /// The request's method lets it run twice ([`replayable`]).
    replayable: bool,
    /// Some byte of the request went out: the application may have begun to run it.
    wrote_any: bool,
    /// Some byte of the answer came.
    got_any: bool,
}

impl SoFar {
    /// Whether the request may go again on a new connection should this one break
    /// now: it was kept from an earlier request (the application may have closed
    /// it as this one went out), no answer came, and either running it twice does no
    /// harm or none of it was written.
    fn may_retry(&self) -> bool {
        !self.fresh && !self.got_any && (self.replayable || !self.wrote_any)
    }
}

impl Source for Talk {
    fn step(&mut self, out: &mut Vec<u8>, wait: Duration, client: BorrowedFd<'_>) -> Result<bool, Fault> {
        let Some(conn) = &mut self.conn else { return Ok(true) };
        let retry = self.so_far.may_retry();
        let broken = |why: String, retry| Fault::Broken { why, retry };
        fill_stdin(
            &self.body,
            &mut self.out,
            self.written,
            &mut self.sent_body,
            &mut self.stdin_ended,
            &mut self.scratch,
        )
        .map_err(|e| broken(format!("reading the request body failed: {e}"), false))?;
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Fault::TimedOut);
        }
        let want =
            if self.written < self.out.len() { PollFlags::POLLIN | PollFlags::POLLOUT } else { PollFlags::POLLIN };
        let mut fds = [PollFd::new(conn.fd(), want), PollFd::new(client, self.watch.flags())];
        match poll(&mut fds, poll_ms(wait.min(left))) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => return Ok(false),
            Err(e) => return Err(broken(format!("poll: {e}"), retry)),
        }
        let app = fds[0].revents().unwrap_or(PollFlags::empty());
        let client_ready = fds[1].any().unwrap_or(true);
        if self.watch.gone(client, client_ready) {
            return Err(Fault::ClientGone);
        }
        if app.contains(PollFlags::POLLOUT) && self.written < self.out.len() {
            let wrote = write_some(conn, &mut self.out, &mut self.written)
                .map_err(|e| broken(format!("writing the request: {e}"), retry))?;
            self.so_far.wrote_any |= wrote > 0;
        }
        let retry = self.so_far.may_retry();
        if !app.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
            return Ok(false);
        }
        let space = self.reader.space(64 * 1024);
        let got = conn.read(space);
        self.reader.filled(64 * 1024, *got.as_ref().unwrap_or(&0));
        match got {
            Ok(0) => return Err(broken("closed the connection before the end of its answer".into(), retry)),
            Ok(_) => self.so_far.got_any = true,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(broken(format!("reading the answer: {e}"), retry)),
        }
        match take_records(&mut self.reader, out, &mut self.errors, &mut self.taken) {
            Records::More => Ok(false),
            Records::TooLong => Err(Fault::TooLong),
            Records::Failed(why) => Err(broken(why, false)),
            Records::End => {
                // The connection is in step again: kept for the next request.
                let conn = self.conn.take();
                if self.stdin_ended && self.written == 0 && !self.reader.has_partial() {
                    *self.kept.borrow_mut() = conn;
                }
                Ok(true)
            }
        }
    }

    fn deadline(&self) -> Instant {
        self.deadline
    }

    fn cut(&mut self, why: &Fault) {
        self.errors.flush();
        let (name, addr) = (self.errors.name(), &self.addr);
        match why {
            Fault::TimedOut => log::error!(
                "{name}: FastCGI application at {addr}: answer not ended within script_timeout ({:?}): cut",
                self.timeout
            ),
            Fault::TooLong => log::error!("{name}: FastCGI application at {addr}: answer over {MAX_OUTPUT} bytes: cut"),
            Fault::ClientGone => log::info!("{name}: the client closed the connection while the application answered"),
            Fault::Broken { why, .. } => log::error!("{name}: FastCGI application at {addr}: {why}: answer cut"),
        }
    }

    fn name(&self) -> &str {
        self.errors.name()
    }
}

/// Keeps a few records of the body ready to send: reads on while less than 64 KiB of
/// `out` is unsent, and ends the stdin stream after the last byte.
fn fill_stdin(
    stdin: &Stdin,
    out: &mut Vec<u8>,
    written: usize,
    sent_body: &mut u64,
    stdin_ended: &mut bool,
    scratch: &mut Vec<u8>,
) -> io::Result<()> {
    while out.len() - written < 64 * 1024 && !*stdin_ended {
        match stdin.read_at(*sent_body, scratch)? {
            [] => {
                Request::end_stdin(out);
                *stdin_ended = true;
            }
            chunk => {
                *sent_body += chunk.len() as u64;
                Request::stdin(out, chunk);
            }
        }
    }
    Ok(())
}

/// Writes what the socket takes of `out` past `written`; all of it written, `out`
/// starts over. Returns how many bytes went.
fn write_some(conn: &mut AppConn, out: &mut Vec<u8>, written: &mut usize) -> io::Result<usize> {
    let n = match conn.write(&out[*written..]) {
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => 0,
        Err(e) => return Err(e),
    };
    *written += n;
    if *written == out.len() {
        out.clear();
        *written = 0;
    }
    Ok(n)
}

/// Whether a request with this method may be sent to the application a second time
/// when its first try broke before any answer: the idempotent methods of RFC 9110
/// §9.2.2, for which two runs leave what one run leaves. A POST or a PATCH may have
/// written a ledger line before its application died; it is sent again only when no
/// byte of it had gone out.
pub(crate) fn replayable(method: &str) -> bool {
    matches!(method, "GET" | "HEAD" | "OPTIONS" | "TRACE" | "PUT" | "DELETE")
}

/// What the records read so far said.
enum Records {
    /// The answer goes on in records not read yet.
    More,
    /// The application ended the request and its answer is whole.
    End,
    TooLong,
    Failed(String),
}

/// Takes the records read so far: standard output into `output`, standard error to
/// the error log, up to the end of the request.
fn take_records(reader: &mut Reader, output: &mut Vec<u8>, errors: &mut StderrLines, taken: &mut u64) -> Records {
    loop {
        match reader.record() {
            Ok(None) => return Records::More,
            Ok(Some(Event::Stdout(b))) => {
                *taken += b.len() as u64;
                if *taken > MAX_OUTPUT {
                    return Records::TooLong;
                }
                output.extend_from_slice(b);
            }
            Ok(Some(Event::Stderr(b))) => errors.message(b),
            Ok(Some(Event::Other)) => {}
            Ok(Some(Event::End { complete, .. })) => {
                errors.flush();
                if !complete {
                    return Records::Failed("refused the request (overloaded or busy)".into());
                }
                return Records::End;
            }
            Err(e) => return Records::Failed(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_idempotent_methods_are_sent_twice() {
        for m in ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"] {
            assert!(replayable(m), "{m}");
        }
        for m in ["POST", "PATCH", "LOCK", "MKCOL", "COPY", "MOVE", "get"] {
            assert!(!replayable(m), "{m}");
        }
    }

    #[test]
    fn a_post_goes_again_only_when_none_of_it_was_written() {
        let post = SoFar { fresh: false, replayable: false, wrote_any: false, got_any: false };
        assert!(post.may_retry(), "a kept connection found closed before a byte went");
        assert!(!SoFar { wrote_any: true, ..post }.may_retry(), "the application may have run it");
        let get = SoFar { replayable: true, wrote_any: true, ..post };
        assert!(get.may_retry());
        assert!(!SoFar { got_any: true, ..get }.may_retry(), "an answer began");
        assert!(!SoFar { fresh: true, ..get }.may_retry(), "a new connection is not tried twice");
    }
}
