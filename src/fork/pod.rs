//! The pipe of death and the dummy connection: how the master retires one idle worker.
//!
//! An idle worker sleeps in `epoll_wait` for up to a second at a time; a signal
//! cannot be aimed at it (the master does not know which worker is idle, and workers
//! ignore the master's signals). So the master writes one byte to
//! the pipe of death and then connects to its own listener with an `OPTIONS *`
//! request carrying the per-boot token. Whichever worker accepts it answers, then
//! finds the byte and exits. Any worker that finishes a connection also checks the
//! pipe, so the byte always ends with an idle worker (Apache's `mpm_unix.c`).
//!
//! `pod_pending` in the scoreboard counts bytes not yet taken, so a worker looks at the
//! pipe (a syscall) only when there is something to find.
//!
//! The [`Doorbell`] goes the other way: a worker that takes a connection and sees
//! too few idle workers left wakes the master, which forks more at once instead of
//! at its next tick.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering::SeqCst;
use std::time::Duration;

use nix::fcntl::OFlag;
use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::scoreboard::Header;

/// How long the master waits to connect to its own listener. Apache uses 3 s; a
/// loopback connect that takes longer means the backlog is full, and then a worker
/// will come back to check the pipe by itself.
const DUMMY_TIMEOUT: Duration = Duration::from_millis(500);

pub struct Pod {
    read: std::fs::File,
    write: Option<std::fs::File>,
}

impl Pod {
    pub fn new() -> io::Result<Pod> {
        let (r, w): (OwnedFd, OwnedFd) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        Ok(Pod { read: r.into(), write: Some(w.into()) })
    }

    /// In a worker: drop the write end, so the pipe reads EOF once the master is gone.
    pub fn close_write(&mut self) {
        self.write = None;
    }

    /// The read end, which a worker keeps.
    pub fn read_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.read.as_fd()
    }

    /// Master: ask one idle worker to exit.
    pub fn signal(&self, header: &Header) {
        if let Some(mut w) = self.write.as_ref() {
            header.pod_pending.fetch_add(1, SeqCst);
            if w.write(b"!").is_err() {
                header.pod_pending.fetch_sub(1, SeqCst);
            }
        }
    }

    /// Worker, after a connection: true if a byte was taken (this worker must exit).
    /// Reads the pipe only when the scoreboard says a byte is pending.
    pub fn check(&self, header: &Header) -> bool {
        if header.pod_pending.load(SeqCst) == 0 {
            return false;
        }
        self.check_idle(header)
    }

    /// Worker, once per idle second: true if a byte was taken, or if the pipe reads
    /// end of file, which it does once every write end is closed: the master is gone
    /// (the workers close theirs at start).
    pub fn check_idle(&self, header: &Header) -> bool {
        let mut byte = [0u8; 1];
        match (&self.read).read(&mut byte) {
            Ok(1) => {
                header.pod_pending.fetch_sub(1, SeqCst);
                true
            }
            Ok(_) => true, // EOF: the master has exited.
            Err(_) => false,
        }
    }
}

/// Workers → master: "the pool is short of idle workers, look now".
///
/// An eventfd the master polls beside its signals. `look_wanted` in the scoreboard
/// says a ring is already pending, so under a sustained shortage the workers ring
/// once per look of the master, not once per connection.
pub struct Doorbell(EventFd);

impl Doorbell {
    pub fn new() -> io::Result<Doorbell> {
        Ok(Doorbell(EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)?))
    }

    /// Worker: wake the master unless a ring is already pending.
    pub fn ring(&self, header: &Header) {
        if header.look_wanted.swap(1, SeqCst) == 0 {
            let _ = self.0.write(1);
        }
    }

    /// Master: what to poll.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.0.as_fd()
    }

    /// Master: take the rings (clears the eventfd; `look_wanted` stays set, so no
    /// worker rings again before the look).
    pub fn take(&self) -> bool {
        self.0.read().is_ok()
    }

    /// Master: about to count the workers; a worker that finds a shortage after the
    /// count may ring again.
    pub fn rearm(&self, header: &Header) {
        header.look_wanted.store(0, SeqCst);
    }
}

/// The address the master connects to for a listener (a wildcard becomes loopback).
pub fn dummy_target(listen: SocketAddr) -> SocketAddr {
    let ip = match listen.ip() {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, listen.port())
}

/// Connects to our own listener and sends one internal request, so that a worker
/// waiting for a connection wakes up. `proxy_protocol`: the listener expects a
/// PROXY header first; a v2 `LOCAL` one goes first (the master is its own client).
pub fn dummy_connection(target: SocketAddr, token: &str, proxy_protocol: bool) -> io::Result<()> {
    let mut s = TcpStream::connect_timeout(&target, DUMMY_TIMEOUT)?;
    s.set_write_timeout(Some(DUMMY_TIMEOUT))?;
    // A whole request: with TCP_DEFER_ACCEPT the kernel hands over the connection only
    // once data arrived (Apache's comment in dummy_connection()).
    let req = format!(
        "OPTIONS * HTTP/1.0\r\nUser-Agent: pika/{} (internal dummy connection)\r\n{}: {token}\r\n\r\n",
        env!("CARGO_PKG_VERSION"),
        crate::base::dummy::INTERNAL_HEADER
    );
    let local: &[u8] = if proxy_protocol { &crate::http::proxy_protocol::V2_LOCAL } else { b"" };
    s.write_all(&[local, req.as_bytes()].concat())
}

/// A per-boot secret: 128 random bits, hex.
pub fn make_token() -> io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
