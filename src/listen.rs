//! Listening sockets: bound once by the master, before any fork, and kept open across
//! every reload, so a reload never refuses a connection.

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use socket2::{Domain, Socket, Type};

pub use crate::http::connection::WAIT_SLICE;

/// One bound listener: the address as configured (the key across reloads), the
/// address actually bound (port 0 picks one), and the socket.
pub struct Listener {
    pub configured: SocketAddr,
    pub bound: SocketAddr,
    pub socket: TcpListener,
}

/// Binds `addr` with the options a server wants: `SO_REUSEADDR` (restart while old
/// connections sit in TIME_WAIT), IPv6 sockets IPv6-only (a separate `0.0.0.0` entry
/// covers IPv4, as in nginx), close-on-exec.
///
/// `defer` sets `TCP_DEFER_ACCEPT`: a connection is handed to `accept()` only once
/// its first bytes arrived (Apache's `AcceptFilter http data`), so connections that
/// never speak never take a worker.
pub fn bind(addr: SocketAddr, backlog: u32, defer: Option<std::time::Duration>) -> io::Result<Listener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())?;
    if let Some(d) = defer {
        let secs = i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX);
        crate::sys::set_int_sockopt(socket.as_fd(), libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT, secs)?;
    }
    // The kernel clamps the backlog to net.core.somaxconn.
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    let socket: TcpListener = socket.into();
    let bound = socket.local_addr()?;
    Ok(Listener { configured: addr, bound, socket })
}

/// Blocks until one of the listeners has a connection and accepts it.
///
/// With one listener this is a plain blocking `accept()`: Linux wakes one waiter per
/// connection, so no accept lock is needed. With several, the listeners are
/// non-blocking and the worker waits in `poll()`; a worker that loses the race for a
/// connection gets `EAGAIN` and polls again.
pub fn accept(listeners: &[Listener]) -> io::Result<(TcpStream, SocketAddr, u16)> {
    if let [only] = listeners {
        let (s, peer) = only.socket.accept()?;
        return Ok((s, peer, only.bound.port()));
    }
    loop {
        let mut fds: Vec<PollFd<'_>> =
            listeners.iter().map(|l| PollFd::new(l.socket.as_fd(), PollFlags::POLLIN)).collect();
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
        let ready: Vec<usize> = fds
            .iter()
            .enumerate()
            .filter(|(_, f)| f.revents().is_some_and(|r| r.contains(PollFlags::POLLIN)))
            .map(|(i, _)| i)
            .collect();
        for i in ready {
            match listeners[i].socket.accept() {
                Ok((s, peer)) => {
                    // Accepted sockets inherit O_NONBLOCK from the listener on some
                    // systems; the worker wants blocking I/O with timeouts.
                    s.set_nonblocking(false)?;
                    return Ok((s, peer, listeners[i].bound.port()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// Prepares listeners for [`accept`] and for the connections they hand out.
///
/// Several listeners are non-blocking (workers wait in `poll`). Options a connection
/// needs are set once on the listener, which every accepted socket inherits on Linux:
/// `TCP_NODELAY` (a response goes out in one `writev`, nothing to coalesce),
/// `SO_SNDTIMEO` (the send timeout) and `SO_RCVTIMEO` ([`WAIT_SLICE`], the reads'
/// first timeout). That spares three `setsockopt` calls per connection. On a blocking
/// listener the receive timeout also bounds `accept()`, so an idle worker looks at
/// the pipe of death and the generation at least once per slice.
pub fn configure(listeners: &[Listener], send_timeout: Duration) -> io::Result<()> {
    let several = listeners.len() > 1;
    for l in listeners {
        l.socket.set_nonblocking(several)?;
        let s = socket2::SockRef::from(&l.socket);
        s.set_tcp_nodelay(true)?;
        s.set_write_timeout(Some(send_timeout))?;
        s.set_read_timeout(Some(WAIT_SLICE))?;
    }
    Ok(())
}

/// The `TCP_DEFER_ACCEPT` period for a config: the header timeout, if enabled.
pub fn defer(config: &crate::config::Config) -> Option<std::time::Duration> {
    config.http.defer_accept.then_some(config.http.header_timeout)
}
