//! A stream to a server pika passes requests to (a FastCGI application, an upstream
//! HTTP server): a unix socket or TCP, non-blocking once connected (the handler polls
//! it beside the client), and the test a kept connection passes before it carries
//! another request.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, poll};

thread_local! {
    /// Whether connections to unix sockets are noted ([`note_local_apps`]).
    static NOTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The last unix-socket connection opened and not yet taken
    /// ([`new_local_app`]): its inode and the pid of the application's master.
    static NEW_LOCAL_APP: std::cell::Cell<Option<(u64, i32)>> = const { std::cell::Cell::new(None) };
}

/// A worker bound to a CPU notes each connection it opens to an application on a
/// unix socket, so that the master binds the process that serves it to the same
/// CPU ([`new_local_app`]).
pub fn note_local_apps() {
    NOTING.set(true);
}

/// The unix-socket connection to an application opened since the last call, if any
/// (while [`note_local_apps`] is on): its socket's inode, and the pid of the
/// process that listens for the application.
pub fn new_local_app() -> Option<(u64, i32)> {
    NEW_LOCAL_APP.take()
}

/// Where a backend listens.
#[derive(Clone, Copy)]
pub enum Dial<'a> {
    Unix(&'a Path),
    /// `host:port` (a name is looked up; each address is tried in turn).
    Tcp(&'a str),
}

/// A connection to a backend.
pub enum Backend {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Backend {
    /// Connects (within `timeout` for each TCP address), then turns non-blocking.
    pub fn open(to: Dial<'_>, timeout: Duration) -> io::Result<Backend> {
        let conn = match to {
            Dial::Unix(p) => {
                let s = UnixStream::connect(p)?;
                if NOTING.get() {
                    NEW_LOCAL_APP.set(crate::base::sys::unix_socket_ids(s.as_fd()).ok());
                }
                Backend::Unix(s)
            }
            Dial::Tcp(a) => {
                let mut last = io::Error::from(io::ErrorKind::NotFound);
                let mut found = None;
                for sa in std::net::ToSocketAddrs::to_socket_addrs(a)? {
                    match TcpStream::connect_timeout(&sa, timeout) {
                        Ok(s) => {
                            let _ = s.set_nodelay(true);
                            found = Some(s);
                            break;
                        }
                        Err(e) => last = e,
                    }
                }
                Backend::Tcp(found.ok_or(last)?)
            }
        };
        match &conn {
            Backend::Unix(s) => s.set_nonblocking(true)?,
            Backend::Tcp(s) => s.set_nonblocking(true)?,
        }
        Ok(conn)
    }

    /// Whether a kept connection has anything to read before a request is written on
    /// it: the backend's end of file (it closed the connection while idle: its
    /// request limit, its idle timeout, a restart), or bytes no request asked for.
    /// Either way it cannot carry the next request.
    pub fn stale(&self) -> bool {
        let mut fds = [PollFd::new(self.fd(), PollFlags::POLLIN)];
        !matches!(poll(&mut fds, nix::poll::PollTimeout::ZERO), Ok(0))
    }

    /// The socket alone, for a tunnel to relay bytes on once the connection
    /// switched protocols.
    pub fn into_fd(self) -> OwnedFd {
        match self {
            Backend::Unix(s) => s.into(),
            Backend::Tcp(s) => s.into(),
        }
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Backend::Unix(s) => s.as_fd(),
            Backend::Tcp(s) => s.as_fd(),
        }
    }

    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Backend::Unix(s) => s.read(buf),
            Backend::Tcp(s) => s.read(buf),
        }
    }

    pub fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Backend::Unix(s) => s.write(buf),
            Backend::Tcp(s) => s.write(buf),
        }
    }
}
