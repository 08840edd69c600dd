//! Listening sockets: bound once by the master, before any fork, and kept open across
//! every reload, so a reload never refuses a connection.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::AsFd;
use std::time::Duration;

use socket2::{Domain, Socket, Type};

/// One bound listener: the address as configured (the key across reloads), the
/// address actually bound (port 0 picks one), the socket, and whether its
/// connections speak TLS (the config's say, updated on reload).
pub struct Listener {
    pub configured: SocketAddr,
    pub bound: SocketAddr,
    pub socket: TcpListener,
    pub tls: bool,
    /// Each connection starts with a PROXY protocol header (the config's say).
    pub proxy_protocol: bool,
}

/// Binds `addr` with the options a server wants: `SO_REUSEADDR` (restart while old
/// connections sit in TIME_WAIT), IPv6 sockets IPv6-only (a separate `0.0.0.0` entry
/// covers IPv4, as in nginx), close-on-exec.
///
/// `defer` sets `TCP_DEFER_ACCEPT`: a connection is handed to `accept()` only once
/// its first bytes arrived (Apache's `AcceptFilter http data`), so connections that
/// never speak never take a worker.
pub fn bind(entry: crate::config::Listen, backlog: u32, defer: Option<Duration>) -> io::Result<Listener> {
    let addr = entry.addr;
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())?;
    if let Some(d) = defer {
        let secs = i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX);
        crate::base::sys::set_int_sockopt(socket.as_fd(), libc::IPPROTO_TCP, libc::TCP_DEFER_ACCEPT, secs)?;
    }
    // The kernel clamps the backlog to net.core.somaxconn.
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    let socket: TcpListener = socket.into();
    let bound = socket.local_addr()?;
    Ok(Listener { configured: addr, bound, socket, tls: entry.tls, proxy_protocol: entry.proxy_protocol })
}

/// A listener given to this process (binary upgrade, socket activation) for `entry`:
/// used as it is, never bound again, so no connection waiting in it is lost.
pub fn adopt(entry: crate::config::Listen, given: crate::fork::inherit::Given) -> io::Result<Listener> {
    let bound = given.socket.local_addr()?;
    Ok(Listener {
        configured: entry.addr,
        bound,
        socket: given.socket,
        tls: entry.tls,
        proxy_protocol: entry.proxy_protocol,
    })
}

/// The listeners, set up for the workers' event loops.
pub struct Listeners {
    pub list: Vec<Listener>,
}

impl Listeners {
    /// Prepares bound listeners for the workers' event loops (`worker::events`) and
    /// for the connections they hand out.
    ///
    /// The listeners are non-blocking (a worker sleeps in `epoll_wait`, not in
    /// `accept`). `TCP_NODELAY` is set once on the listener, which every accepted
    /// socket inherits on Linux (a response goes out in one `writev`, nothing to
    /// coalesce), sparing a `setsockopt` per connection. `O_NONBLOCK` is not
    /// inherited: the worker asks for it in its `accept4`, as no write waits on a
    /// client (`serve::transport`).
    pub fn new(list: Vec<Listener>) -> io::Result<Listeners> {
        for l in &list {
            l.socket.set_nonblocking(true)?;
            socket2::SockRef::from(&l.socket).set_tcp_nodelay(true)?;
        }
        Ok(Listeners { list })
    }

    /// The listeners for a new config (a reload): sockets this set already has are
    /// kept (never closed and bound again, so no connection is refused), new
    /// addresses are bound, the rest are closed with this set. When an address
    /// cannot be bound, this set is left as it was.
    pub fn rebind(&mut self, new: &crate::config::Config) -> Result<Listeners, String> {
        let mut old: Vec<Listener> = std::mem::take(&mut self.list);
        let mut result = Vec::new();
        for entry in &new.listen {
            // The same address and kind first: entries with port 0 may repeat.
            let same = |l: &Listener| l.configured == entry.addr;
            let at = old.iter().position(|l| same(l) && l.tls == entry.tls).or_else(|| old.iter().position(same));
            if let Some(i) = at {
                let mut l = old.swap_remove(i);
                l.tls = entry.tls;
                l.proxy_protocol = entry.proxy_protocol;
                result.push(l);
            } else {
                match bind(*entry, new.backlog, defer(new)) {
                    Ok(l) => {
                        log::info!("listening on {}", l.bound);
                        result.push(l);
                    }
                    Err(e) => {
                        // Put everything back as it was.
                        old.extend(result);
                        self.list = old;
                        return Err(format!("cannot listen on {}: {e}", entry.addr));
                    }
                }
            }
        }
        for l in &old {
            log::info!("no longer listening on {}", l.bound);
        }
        Listeners::new(result).map_err(|e| e.to_string())
    }

    /// Connections accepted by the kernel and waiting for a worker, over every
    /// listener (0 where the kernel does not say).
    pub fn queued(&self) -> u32 {
        self.list.iter().map(|l| crate::base::sys::accept_queue_len(l.socket.as_fd()).unwrap_or(0)).sum()
    }
}

/// The `TCP_DEFER_ACCEPT` period for a config: the header timeout, if enabled.
pub fn defer(config: &crate::config::Config) -> Option<Duration> {
    config.http.defer_accept.then_some(config.http.header_timeout)
}
