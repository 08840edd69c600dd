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
//! (`FCGI_KEEP_CONN`), and opens a new one when the application closed it. A
//! PHP-FPM child serves one connection at a time, so a kept connection holds one of
//! the pool's children for this worker: the pool needs at least as many children as
//! pika has workers (`pm.max_children >= workers.max_workers`). The application
//! down or refusing gives 502, past `script_timeout` 504, each with one line in the
//! error log.

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::gateway::child::{StderrLines, Stdin};
use crate::gateway::fcgi::{Event, Reader, Request};
use crate::gateway::script::Policy;
use crate::gateway::{AppAddr, ClientWatch, FastCgiConfig};
use crate::http::response::Reply;
use crate::sys::Symlinks;

use super::Ask;
use super::cgi::{self, MAX_OUTPUT};

/// A connection to the application.
enum AppConn {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl AppConn {
    fn open(addr: &AppAddr, timeout: Duration) -> io::Result<AppConn> {
        let conn = match addr {
            AppAddr::Unix(p) => AppConn::Unix(UnixStream::connect(p)?),
            AppAddr::Tcp(a) => {
                let mut last = io::Error::from(io::ErrorKind::NotFound);
                let mut found = None;
                for sa in std::net::ToSocketAddrs::to_socket_addrs(a.as_str())? {
                    match TcpStream::connect_timeout(&sa, timeout) {
                        Ok(s) => {
                            let _ = s.set_nodelay(true);
                            found = Some(s);
                            break;
                        }
                        Err(e) => last = e,
                    }
                }
                AppConn::Tcp(found.ok_or(last)?)
            }
        };
        match &conn {
            AppConn::Unix(s) => s.set_nonblocking(true)?,
            AppConn::Tcp(s) => s.set_nonblocking(true)?,
        }
        Ok(conn)
    }

    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            AppConn::Unix(s) => s.as_fd(),
            AppConn::Tcp(s) => s.as_fd(),
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            AppConn::Unix(s) => s.read(buf),
            AppConn::Tcp(s) => s.read(buf),
        }
    }

    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            AppConn::Unix(s) => s.write(buf),
            AppConn::Tcp(s) => s.write(buf),
        }
    }
}

/// The FastCGI handler of one location, in one worker.
pub struct FastCgi<'c> {
    pub config: &'c FastCgiConfig,
    pub dir: File,
    pub symlinks: Symlinks,
    pub strip: usize,
    pub server_name: &'c str,
    /// The connection kept from the last request.
    kept: RefCell<Option<AppConn>>,
}

/// How an exchange with the application ended.
enum Exchange {
    Answered(Vec<u8>),
    /// The application refused or broke; `fresh`: on a connection opened for this
    /// request (a kept one may just have been closed by the application: retried).
    Failed {
        why: String,
        fresh: bool,
        got_any: bool,
    },
    TimedOut,
    TooLong,
    ClientGone,
}

impl<'c> FastCgi<'c> {
    pub fn new(config: &'c FastCgiConfig, dir: File, symlinks: Symlinks, strip: usize, server_name: &'c str) -> Self {
        FastCgi { config, dir, symlinks, strip, server_name, kept: RefCell::new(None) }
    }

    pub fn serve(&self, ask: &Ask<'_>, reply: &mut Reply<'_>) {
        let policy = Policy {
            executables: false,
            interpreters: Default::default(),
            fastcgi: true,
            index: self.config.index.clone(),
        };
        let Some(found) = cgi::find(&self.dir, &self.config.dir, self.symlinks, self.strip, &policy, ask, reply) else {
            return;
        };
        let name = String::from_utf8_lossy(&found.script_name).into_owned();
        let env = found.env(ask, self.server_name, &self.config.dir);
        let begin = Request::begin(&env);
        let stdin = ask.link.body.map_or(Stdin::Empty, |b| b.stdin());
        let deadline = Instant::now() + self.config.timeout;
        let mut tries = 0;
        let ended = loop {
            tries += 1;
            let (conn, fresh) = match self.kept.borrow_mut().take() {
                Some(c) => (c, false),
                None => match AppConn::open(&self.config.addr, self.config.timeout) {
                    Ok(c) => (c, true),
                    Err(e) => {
                        break Exchange::Failed { why: format!("cannot connect: {e}"), fresh: true, got_any: false };
                    }
                },
            };
            match self.exchange(conn, fresh, &begin.bytes, stdin, ask.link, deadline, &name) {
                Exchange::Failed { fresh: false, got_any: false, .. } if tries < 2 => continue,
                other => break other,
            }
        };
        match ended {
            Exchange::Answered(output) => cgi::answered(output, &name, reply),
            Exchange::Failed { why, .. } => {
                log::error!("{name}: FastCGI application at {}: {why}", self.config.addr);
                reply.error(502, "The application is not available.");
            }
            Exchange::TimedOut => {
                log::error!(
                    "{name}: FastCGI application at {}: no answer within script_timeout ({:?})",
                    self.config.addr,
                    self.config.timeout
                );
                reply.error(504, "The application did not answer in time.");
            }
            Exchange::TooLong => {
                log::error!("{name}: FastCGI application at {}: answer over {MAX_OUTPUT} bytes", self.config.addr);
                reply.error(502, "The application's answer was too long.");
            }
            Exchange::ClientGone => {
                log::info!("{name}: the client closed the connection before the application answered");
                reply.error(400, "The client went away.");
                reply.close = true;
            }
        }
    }

    /// One request over `conn` (`fresh`: opened for it); keeps the connection for the next if it ended well.
    #[allow(clippy::too_many_arguments)]
    fn exchange(
        &self,
        mut conn: AppConn,
        fresh: bool,
        begin: &[u8],
        stdin: Stdin<'_>,
        link: super::Link<'_>,
        deadline: Instant,
        name: &str,
    ) -> Exchange {
        let client = link.socket;
        let mut told = Some(Instant::now() + crate::gateway::WAITING);
        let mut out = begin.to_vec();
        let mut sent_body = 0u64;
        let mut stdin_ended = false;
        let mut written = 0;
        let mut scratch = Vec::new();
        let mut reader = Reader::default();
        let mut output = Vec::new();
        let mut errors = StderrLines::new(name);
        let mut got_any = false;
        let mut watch = ClientWatch::default();
        let fail = |why: String, got_any| Exchange::Failed { why, fresh, got_any };
        loop {
            if let Err(e) = fill_stdin(&stdin, &mut out, written, &mut sent_body, &mut stdin_ended, &mut scratch) {
                return fail(format!("reading the request body failed: {e}"), true);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                errors.flush();
                return Exchange::TimedOut;
            }
            if told.is_some_and(|at| Instant::now() >= at) {
                told = None;
                (link.waiting)();
            }
            let wait = told.map_or(left, |at| left.min(at.saturating_duration_since(Instant::now())));
            let ms = u16::try_from(wait.as_millis().max(1)).unwrap_or(u16::MAX);
            let want = if written < out.len() { PollFlags::POLLIN | PollFlags::POLLOUT } else { PollFlags::POLLIN };
            let mut fds = [PollFd::new(conn.fd(), want), PollFd::new(client, watch.flags())];
            match poll(&mut fds, PollTimeout::from(ms)) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return fail(format!("poll: {e}"), got_any),
            }
            let app = fds[0].revents().unwrap_or(PollFlags::empty());
            let client_ready = fds[1].any().unwrap_or(true);
            if watch.gone(client, client_ready) {
                errors.flush();
                return Exchange::ClientGone;
            }
            if app.contains(PollFlags::POLLOUT) && written < out.len() {
                if let Err(e) = write_some(&mut conn, &mut out, &mut written) {
                    return fail(format!("writing the request: {e}"), got_any);
                }
            }
            if app.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR) {
                let space = reader.space(64 * 1024);
                let got = conn.read(space);
                reader.filled(64 * 1024, *got.as_ref().unwrap_or(&0));
                match got {
                    Ok(0) => {
                        errors.flush();
                        return fail("closed the connection before the end of its answer".into(), got_any);
                    }
                    Ok(_) => got_any = true,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return fail(format!("reading the answer: {e}"), got_any),
                }
                match take_records(&mut reader, &mut output, &mut errors) {
                    Records::More => {}
                    Records::TooLong => return Exchange::TooLong,
                    Records::Failed(why) => return fail(why, true),
                    Records::End => {
                        // The connection is in step again: kept for the next request.
                        if stdin_ended && written == 0 && !reader.has_partial() {
                            *self.kept.borrow_mut() = Some(conn);
                        }
                        return Exchange::Answered(output);
                    }
                }
            }
        }
    }
}

/// Keeps a few records of the body ready to send: reads on while less than 64 KiB of
/// `out` is unsent, and ends the stdin stream after the last byte.
fn fill_stdin(
    stdin: &Stdin<'_>,
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
/// starts over.
fn write_some(conn: &mut AppConn, out: &mut Vec<u8>, written: &mut usize) -> io::Result<()> {
    match conn.write(&out[*written..]) {
        Ok(n) => *written += n,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => {}
        Err(e) => return Err(e),
    }
    if *written == out.len() {
        out.clear();
        *written = 0;
    }
    Ok(())
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
fn take_records(reader: &mut Reader, output: &mut Vec<u8>, errors: &mut StderrLines<'_>) -> Records {
    loop {
        match reader.record() {
            Ok(None) => return Records::More,
            Ok(Some(Event::Stdout(b))) => {
                if output.len() + b.len() > MAX_OUTPUT {
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
