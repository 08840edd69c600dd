//! A worker's turns on its tunnels (connections that switched protocols, held as
//! [`Tunnel`]s: what a tunnel is, its buffers and its ends, is there): one opened by
//! a 101, a turn that relays what its sockets have, the drain of a worker that
//! leaves, and its end with its one access-log record.

use std::io;
use std::net::TcpStream;
use std::os::fd::OwnedFd;

use super::connection::Server;
use super::held::tunnel::{Client, PIECE, Tunnel};
use super::held::{Conn, Held, Layer, Next, Owed, Phase};
use super::observer::{ConnState, Observer};
use super::output::Answer;
use crate::serve::tls::TlsStream;

impl Server<'_> {
    /// A tunnel another worker handed over (`Held::freeze_tunnel`): the client's
    /// socket, what is known of it, the tunnel's `state`, its upstream's socket, and
    /// how long it has been idle; its record's vhost found again by the request's
    /// `Host` under this worker's config. `None` if the state does not read.
    pub fn adopt_tunnel(
        &self,
        (stream, conn): (TcpStream, Conn),
        state: &[u8],
        far: OwnedFd,
        waited_ms: u64,
    ) -> Option<Held> {
        let mut tunnel = Tunnel::thaw(state, far, |c| Owed::thaw(c, 0))?;
        let vhost = {
            let mut slots = Vec::new();
            let req = tunnel.owed.spans.as_ref()?.view(&tunnel.owed.head, &mut slots);
            self.config.vhost_for(req.host)
        };
        tunnel.owed.vhost = vhost;
        Some(Held::resume_tunnel(stream, conn, Box::new(tunnel), waited_ms))
    }

    /// A turn on a tunnel: its sockets have input or room (or broke). Relays what
    /// they take; at its end, the record and the close.
    pub(super) fn relay(&mut self, h: &mut Held, obs: &mut dyn Observer) -> Next {
        let Phase::Tunnel(tunnel) = &mut h.wait.phase else { return Next::Park };
        let mut scratch = std::mem::take(&mut self.tunnel_scratch);
        scratch.resize(PIECE, 0);
        let mut stage = std::mem::take(&mut self.tls_stage);
        let mut client = match &mut h.layer {
            Layer::Plain | Layer::PlainOnTlsPort => Client::Plain(&h.stream),
            Layer::Tls(s) => Client::Tls(TlsStream::new(&h.stream, s, &mut stage)),
        };
        let step = tunnel.turn(&mut client, &mut scratch);
        drop(client);
        self.tls_stage = stage;
        self.tunnel_scratch = scratch;
        match step {
            Ok((moved, more)) => {
                let ended = tunnel.ended();
                if moved > 0 {
                    h.wait.progress();
                }
                if ended {
                    return self.end_tunnel(h, Ok(()), obs);
                }
                if more { Next::Again } else { Next::Park }
            }
            Err(e) => self.end_tunnel(h, Err(e), obs),
        }
    }

    /// The worker leaves: the tunnel reads nothing more, writes what it keeps (for
    /// a moment at most, `Held::deadline_ms`), then closes both sides.
    pub fn drain_tunnel(&mut self, h: &mut Held, obs: &mut dyn Observer) -> Next {
        match &mut h.wait.phase {
            Phase::Tunnel(t) if !t.draining => t.draining = true,
            _ => return Next::Park,
        }
        h.wait.progress();
        self.relay(h, obs)
    }

    /// A tunnel ends (`result`: cleanly, or why not): its one record (status 101,
    /// the client's bytes in after its request's, the upstream's out after the
    /// head, the time since the request), and the close of both sides.
    pub(super) fn end_tunnel(&mut self, h: &mut Held, result: io::Result<()>, obs: &mut dyn Observer) -> Next {
        let Phase::Tunnel(tunnel) = std::mem::replace(&mut h.wait.phase, Phase::Idle) else { return Next::Close };
        let Tunnel { owed, up, down, .. } = *tunnel;
        match &result {
            Ok(()) => log::debug!("{}: tunnel ended: {up} bytes in, {down} out", h.conn.peer),
            Err(e) => log::debug!("{}: tunnel ended ({e}): {up} bytes in, {down} out", h.conn.peer),
        }
        let head = owed.response_head.len() as u64;
        let answer = Answer {
            status: owed.status,
            body_bytes: down,
            sent: result.map(|()| head + down),
            rest: None,
            cut_at: head + down,
            keep_alive: false,
            start: owed.start,
            duration: owed.start.elapsed().unwrap_or_default(),
            switched: None,
        };
        let bytes_in = owed.bytes_in + up;
        let _ = self.record(h, owed, &answer, bytes_in, false, obs);
        obs.state(ConnState::Closing);
        Next::Close
    }
}
