//! What a worker watches while a program it runs keeps it: the client's socket
//! ([`ClientWatch`], a client that hangs up stops the program), and the time after
//! which the worker lets its other connections be served elsewhere ([`GLANCE`] for
//! those whose request came meanwhile, [`WAITING`] for all).

use std::os::fd::BorrowedFd;
use std::time::Duration;

use nix::poll::PollFlags;
use nix::sys::socket::{MsgFlags, recv};

/// How long a script may keep its worker before the worker's idle connections are
/// handed to others.
pub const WAITING: Duration = Duration::from_secs(1);

/// How often a worker a program keeps looks at the other connections it holds, and
/// hands those whose request has come meanwhile to an idle sibling: a request that
/// comes while its worker waits on php-fpm or an upstream waits at most about this
/// long for a worker (while one is idle), not for the program. A look is a scan of
/// the scoreboard and, while a spare is idle, an `epoll_wait` that does not wait;
/// 5 ms keeps a long wait's wake-ups to 200 a second and is well inside the tail it
/// cuts (tens of milliseconds at a hundred kept-alive clients). Every 2 ms cost a
/// proxied request more CPU (its upstream's waits are longer: more looks) for no
/// better tail.
pub const GLANCE: Duration = Duration::from_millis(5);

/// Watches the client's socket while a script runs, to stop the script when the
/// client hangs up. Readable means either the end of the stream (gone) or bytes
/// of a pipelined request, after which the socket is not watched any more (they
/// stay unread for the next request; a hang-up is then seen when the answer is
/// sent).
#[derive(Default)]
pub struct ClientWatch {
    off: bool,
}

impl ClientWatch {
    /// What to poll the client's socket for.
    pub fn flags(&self) -> PollFlags {
        if self.off { PollFlags::empty() } else { PollFlags::POLLIN }
    }

    /// After a poll: `ready` is whether the socket reported anything. True when the
    /// client is gone.
    pub fn gone(&mut self, client: BorrowedFd<'_>, ready: bool) -> bool {
        if self.off || !ready {
            return false;
        }
        let mut byte = [0u8; 1];
        use std::os::fd::AsRawFd;
        match recv(client.as_raw_fd(), &mut byte, MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT) {
            Ok(0) => true,
            Ok(_) => {
                self.off = true;
                false
            }
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => false,
            Err(_) => true,
        }
    }
}
