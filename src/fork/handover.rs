//! Kept-alive connections passed from a worker that leaves to one that stays.
//!
//! A worker holds its idle kept-alive connections in its own `epoll` set (see
//! `worker::events`). When it must retire (the pipe of death, a reload, WINCH,
//! `max_requests`) those connections are not closed under their clients: each one is
//! sent, with what the worker knew of it, over a `SOCK_SEQPACKET` socket pair that the
//! master made before the first fork (`SCM_RIGHTS`). Every worker of the current
//! generation waits on the receiving end beside its listeners, with
//! `EPOLLEXCLUSIVE`, so one idle worker wakes per connection and adopts it. The
//! sockets carry connections between requests, and connections in the middle of a
//! request body (a worker about to run a script sends them on, so their uploads go
//! on arriving): the decoder's state travels in the message ([`Meta::body`]), what
//! was kept of the body in a file whose descriptor travels beside the socket's. And
//! they carry plain tunnels (a WebSocket after its 101): the tunnel's state (what
//! each side has not taken yet, its counts, its request for the log) in the message
//! ([`Meta::tunnel`]), the upstream's socket beside the client's. Whole requests are
//! never in flight here.
//!
//! A connection that cannot be sent (the queue is full, or nobody may adopt it: the
//! server is stopping) stays with its worker, which serves its next request with
//! `Connection: close` or lets it reach `keepalive_timeout`.

use std::io::{self, IoSlice, IoSliceMut};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg, sendmsg, socketpair,
};

/// What travels with a connection: all a worker needs to go on serving it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Meta {
    /// The client (after a PROXY header, the real one).
    pub peer: SocketAddr,
    /// The socket's own peer when a PROXY header named another client.
    pub balancer: Option<SocketAddr>,
    pub local_port: u16,
    /// Requests served on the connection so far.
    pub requests: u64,
    /// Milliseconds the connection has been waiting in its current phase, so
    /// `keepalive_timeout` and `header_timeout` count from when it began to wait.
    pub waited_ms: u64,
    /// Bytes read but not used yet: the start of the next request.
    pub pending: Vec<u8>,
    /// A request body on its way: its reader's state
    /// (`gateway::incoming::Incoming::freeze`); empty between requests.
    pub body: Vec<u8>,
    /// A tunnel's state (`serve` freezes it); empty for any other connection.
    pub tunnel: Vec<u8>,
    /// Sent by a worker a program holds, not by one that leaves: the connection is
    /// lent (`serve::held::Conn::lent`).
    pub lent: bool,
}

/// Bytes of [`Meta`] before `pending`: the format's version, two addresses (family,
/// IPv6 or mapped IPv4 bytes, port), the local port, two counts, whether it is
/// lent, the lengths of `pending`, `body` and `tunnel`.
const FIXED: usize = 1 + 2 * ADDR + 2 + 8 + 8 + 1 + 4 + 4 + 4;
const ADDR: usize = 1 + 16 + 2;
/// The layout's version, first in every message. A binary upgrade passes this
/// socket to the new master, whose workers adopt the old ones' connections: a new
/// layout takes a new number, and a master that finds another number makes a
/// socket of its own.
/// 2: a request body's state and file (1 carried connections between requests only).
/// 3: a tunnel's state and its upstream's socket.
/// 4: whether the connection is lent.
pub const VERSION: u8 = 4;
/// The most bytes of its state a connection may carry over (pending input, a
/// body's request head and decoder, or a tunnel's); one with more (a head larger
/// than 64 KiB on its way, under a config that allows it) stays with its worker.
pub const MAX_PENDING: usize = 64 * 1024;
/// The largest message.
const MAX_MESSAGE: usize = FIXED + MAX_PENDING;
const NONE: u8 = 0;
const V4: u8 = 4;
const V6: u8 = 6;

fn push_addr(out: &mut Vec<u8>, addr: Option<SocketAddr>) {
    let (family, ip, port) = match addr {
        None => (NONE, [0; 16], 0),
        Some(a) => match a.ip() {
            IpAddr::V4(ip) => (V4, ip.to_ipv6_mapped().octets(), a.port()),
            IpAddr::V6(ip) => (V6, ip.octets(), a.port()),
        },
    };
    out.push(family);
    out.extend_from_slice(&ip);
    out.extend_from_slice(&port.to_le_bytes());
}

/// `Err`: not an address this layout writes; `Ok(None)`: none.
fn addr_at(b: &[u8]) -> Result<Option<SocketAddr>, ()> {
    let ip: [u8; 16] = b[1..17].try_into().expect("16 bytes");
    let ip = match b[0] {
        NONE => return Ok(None),
        V4 => IpAddr::V4(Ipv6Addr::from(ip).to_ipv4_mapped().ok_or(())?),
        V6 => IpAddr::V6(Ipv6Addr::from(ip)),
        _ => return Err(()),
    };
    Ok(Some(SocketAddr::new(ip, u16::from_le_bytes([b[17], b[18]]))))
}

impl Meta {
    /// Little-endian, fixed fields first.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        out.push(VERSION);
        push_addr(out, Some(self.peer));
        push_addr(out, self.balancer);
        out.extend_from_slice(&self.local_port.to_le_bytes());
        out.extend_from_slice(&self.requests.to_le_bytes());
        out.extend_from_slice(&self.waited_ms.to_le_bytes());
        out.push(u8::from(self.lent));
        out.extend_from_slice(&(self.pending.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.body.len() as u32).to_le_bytes());
        out.extend_from_slice(&(self.tunnel.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.pending);
        out.extend_from_slice(&self.body);
        out.extend_from_slice(&self.tunnel);
    }

    /// Whether the message fits what a worker receives.
    pub fn fits(&self) -> bool {
        self.pending.len() + self.body.len() + self.tunnel.len() <= MAX_PENDING
    }

    pub fn decode(b: &[u8]) -> Option<Meta> {
        if b.len() < FIXED || b[0] != VERSION {
            return None;
        }
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let peer = addr_at(&b[1..]).ok()??;
        let balancer = addr_at(&b[1 + ADDR..]).ok()?;
        let at = 1 + 2 * ADDR;
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes")) as usize;
        let (len, body, tunnel) = (u32_at(at + 19), u32_at(at + 23), u32_at(at + 27));
        if b.len() != FIXED + len + body + tunnel {
            return None;
        }
        Some(Meta {
            peer,
            balancer,
            local_port: u16_at(at),
            requests: u64_at(at + 2),
            waited_ms: u64_at(at + 10),
            lent: b[at + 18] != 0,
            pending: b[FIXED..FIXED + len].to_vec(),
            body: b[FIXED + len..FIXED + len + body].to_vec(),
            tunnel: b[FIXED + len + body..].to_vec(),
        })
    }
}

/// A connection taken from the socket pair.
pub struct Received {
    pub conn: OwnedFd,
    /// The file holding what arrived of its request body, when it is in one.
    pub body_file: Option<OwnedFd>,
    /// A tunnel's upstream socket, when it is one.
    pub far: Option<OwnedFd>,
    pub meta: Meta,
}

/// The socket pair: workers send on one end and receive on the other.
pub struct Handover {
    send: OwnedFd,
    recv: OwnedFd,
}

impl Handover {
    pub fn new() -> io::Result<Handover> {
        let (send, recv) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK,
        )?;
        // Room for a retiring worker's connections (about a kilobyte of kernel memory
        // each): the kernel doubles the value and caps it at net.core.wmem_max.
        let _ = nix::sys::socket::setsockopt(&send, nix::sys::socket::sockopt::SndBuf, &(4 << 20));
        Ok(Handover { send, recv })
    }

    /// The pair an old master passed on (binary upgrade).
    pub fn from_fds(send: OwnedFd, recv: OwnedFd) -> Handover {
        Handover { send, recv }
    }

    /// Both ends (a worker keeps them across its descriptor clean-up).
    pub fn fds(&self) -> [RawFd; 2] {
        [self.send.as_raw_fd(), self.recv.as_raw_fd()]
    }

    /// Both ends, borrowed (an upgrade makes them inheritable).
    pub fn borrowed(&self) -> [BorrowedFd<'_>; 2] {
        [self.send.as_fd(), self.recv.as_fd()]
    }

    /// What a worker polls to adopt connections.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.recv.as_fd()
    }

    /// Sends one connection, and beside it the file of its request body if it is
    /// in the middle of one, or its upstream's socket if it is a tunnel. Never
    /// blocks: `WouldBlock` when the queue is full.
    pub fn send(
        &self,
        conn: BorrowedFd<'_>,
        body: Option<BorrowedFd<'_>>,
        meta: &Meta,
        scratch: &mut Vec<u8>,
    ) -> io::Result<()> {
        meta.encode(scratch);
        let both = [conn.as_raw_fd(), body.map_or(-1, |f| f.as_raw_fd())];
        let fds = if body.is_some() { &both[..] } else { &both[..1] };
        let cmsg = [ControlMessage::ScmRights(fds)];
        let iov = [IoSlice::new(scratch)];
        match sendmsg::<()>(self.send.as_raw_fd(), &iov, &cmsg, MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL, None) {
            Ok(_) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Takes one connection if one is queued (`Ok(None)`: another worker was first).
    pub fn receive(&self, buf: &mut Vec<u8>) -> io::Result<Option<Received>> {
        buf.resize(MAX_MESSAGE, 0);
        let mut space = nix::cmsg_space!([RawFd; 2]);
        let (bytes, fd, file) = {
            let mut iov = [IoSliceMut::new(buf)];
            let msg = match recvmsg::<()>(
                self.recv.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC,
            ) {
                Ok(m) => m,
                Err(nix::errno::Errno::EAGAIN) => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            let mut fds = Vec::new();
            for c in msg.cmsgs()? {
                if let ControlMessageOwned::ScmRights(raw) = c {
                    // Every descriptor received is ours to close.
                    fds.extend(raw.into_iter().map(crate::base::sys::own_fd));
                }
            }
            let mut fds = fds.into_iter();
            (msg.bytes, fds.next(), fds.next())
        };
        let Some(conn) = fd else { return Err(io::Error::other("handover message without a descriptor")) };
        let meta = Meta::decode(&buf[..bytes]).ok_or_else(|| io::Error::other("malformed handover message"))?;
        if (meta.body.is_empty() && meta.tunnel.is_empty()) != file.is_none()
            || !meta.body.is_empty() && !meta.tunnel.is_empty()
        {
            return Err(io::Error::other(
                "handover message: a request body or a tunnel without its descriptor, or a descriptor without one",
            ));
        }
        let (body_file, far) = if meta.tunnel.is_empty() { (file, None) } else { (None, file) };
        Ok(Some(Received { conn, body_file, far, meta }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    fn meta(peer: &str, pending: &[u8]) -> Meta {
        Meta {
            peer: peer.parse().unwrap(),
            balancer: None,
            local_port: 8080,
            requests: 7,
            waited_ms: 1234,
            pending: pending.to_vec(),
            body: Vec::new(),
            tunnel: Vec::new(),
            lent: false,
        }
    }

    #[test]
    fn meta_round_trips_for_both_families() {
        let mut buf = Vec::new();
        for m in [meta("192.0.2.7:40000", b""), meta("[2001:db8::1]:1", b"GET / HTTP/1.1\r\nHo")] {
            m.encode(&mut buf);
            assert_eq!(Meta::decode(&buf), Some(m));
        }
        // An IPv4-mapped IPv6 client stays IPv6.
        let m = meta("[::ffff:192.0.2.7]:5", b"");
        m.encode(&mut buf);
        assert_eq!(Meta::decode(&buf), Some(m));
        // A client named by a balancer's PROXY header keeps the balancer beside it.
        let m = Meta { balancer: Some("127.0.0.9:1234".parse().unwrap()), ..meta("192.0.2.7:40000", b"x") };
        m.encode(&mut buf);
        assert_eq!(Meta::decode(&buf), Some(m));
        // Lent by a worker a program holds.
        let m = Meta { lent: true, ..meta("192.0.2.7:40000", b"x") };
        m.encode(&mut buf);
        assert_eq!(Meta::decode(&buf), Some(m));
        // In the middle of a body: its state after what was read of the next request.
        let m = Meta { body: b"state".to_vec(), ..meta("192.0.2.7:40000", b"") };
        m.encode(&mut buf);
        assert_eq!(Meta::decode(&buf), Some(m));
        // A tunnel: its state.
        let m = Meta { tunnel: b"tunnel".to_vec(), ..meta("192.0.2.7:40000", b"") };
        m.encode(&mut buf);
        assert_eq!(Meta::decode(&buf), Some(m));
    }

    #[test]
    fn a_message_fits_what_a_worker_receives_or_is_not_sent() {
        let at_most = Meta { body: vec![1; 100], ..meta("192.0.2.7:1", &vec![b'x'; MAX_PENDING - 100]) };
        assert!(at_most.fits());
        let mut buf = Vec::new();
        at_most.encode(&mut buf);
        assert!(buf.len() <= MAX_MESSAGE);
        let over = Meta { body: vec![1; 101], ..at_most.clone() };
        assert!(!over.fits(), "pending and body together past MAX_PENDING");
        let over = Meta { tunnel: vec![1; 1], ..at_most };
        assert!(!over.fits(), "and a tunnel's state");
    }

    #[test]
    fn malformed_messages_are_refused() {
        let mut buf = Vec::new();
        meta("192.0.2.7:1", b"abc").encode(&mut buf);
        assert_eq!(Meta::decode(&buf[..buf.len() - 1]), None, "pending shorter than its length");
        let mut longer = buf.clone();
        longer.push(b'x');
        assert_eq!(Meta::decode(&longer), None, "a byte past what the lengths say");
        assert_eq!(Meta::decode(&buf[..FIXED - 1]), None, "truncated");
        buf[1] = 9;
        assert_eq!(Meta::decode(&buf), None, "unknown family");
        buf[1] = V4;
        assert!(Meta::decode(&buf).is_some());
        buf[0] = VERSION + 1;
        assert_eq!(Meta::decode(&buf), None, "another layout");
    }

    #[test]
    fn a_connection_crosses_with_its_meta_and_still_talks() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server_side, _) = listener.accept().unwrap();
        let h = Handover::new().unwrap();
        let mut scratch = Vec::new();
        assert!(h.receive(&mut scratch).unwrap().is_none(), "nothing queued yet");
        let m = meta("192.0.2.7:40000", b"GE");
        h.send(server_side.as_fd(), None, &m, &mut scratch).unwrap();
        drop(server_side); // the sender's copy goes; the one in flight keeps it open
        let got = h.receive(&mut scratch).unwrap().expect("a connection");
        assert_eq!(got.meta, m);
        assert!(got.body_file.is_none());
        let mut adopted = TcpStream::from(got.conn);
        client.write_all(b"ping").unwrap();
        let mut four = [0u8; 4];
        adopted.read_exact(&mut four).unwrap();
        assert_eq!(&four, b"ping");
        adopted.write_all(b"pong").unwrap();
        client.read_exact(&mut four).unwrap();
        assert_eq!(&four, b"pong");
    }

    #[test]
    fn a_connection_in_a_body_crosses_with_its_file() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server_side, _) = listener.accept().unwrap();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"kept so far").unwrap();
        let h = Handover::new().unwrap();
        let mut scratch = Vec::new();
        let m = Meta { body: b"state".to_vec(), ..meta("192.0.2.7:40000", b"") };
        h.send(server_side.as_fd(), Some(file.as_fd()), &m, &mut scratch).unwrap();
        drop(file);
        let got = h.receive(&mut scratch).unwrap().expect("a connection");
        assert_eq!(got.meta, m);
        assert!(got.far.is_none());
        let mut kept = String::new();
        let mut file = std::fs::File::from(got.body_file.expect("the body's file"));
        std::io::Seek::rewind(&mut file).unwrap();
        file.read_to_string(&mut kept).unwrap();
        assert_eq!(kept, "kept so far");
    }

    #[test]
    fn a_tunnel_crosses_with_its_upstream_socket() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let _client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server_side, _) = listener.accept().unwrap();
        let (far, mut upstream) = std::os::unix::net::UnixStream::pair().unwrap();
        let h = Handover::new().unwrap();
        let mut scratch = Vec::new();
        let m = Meta { tunnel: b"state".to_vec(), ..meta("192.0.2.7:40000", b"") };
        h.send(server_side.as_fd(), Some(far.as_fd()), &m, &mut scratch).unwrap();
        drop(far);
        let got = h.receive(&mut scratch).unwrap().expect("a connection");
        assert_eq!(got.meta, m);
        assert!(got.body_file.is_none());
        let mut far = std::os::unix::net::UnixStream::from(got.far.expect("the upstream's socket"));
        far.write_all(b"up").unwrap();
        let mut two = [0u8; 2];
        upstream.read_exact(&mut two).unwrap();
        assert_eq!(&two, b"up");
    }
}
