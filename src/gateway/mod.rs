//! Dynamic answers: CGI scripts (RFC 3875) run as child processes of the worker,
//! and FastCGI applications (PHP-FPM) reached over a socket.
//!
//! Both share what a script is told and how its answer is read: the
//! meta-variables ([`env`]), which file a path runs ([`script`]) and the header
//! block that opens every answer ([`answer`]). A CGI script is a process spawned
//! and bounded by [`child`]; a FastCGI application is spoken to in the records of
//! [`fcgi`].

pub mod answer;
pub mod child;
pub mod env;
pub mod fcgi;
pub mod incoming;
pub mod script;

use std::os::fd::BorrowedFd;

use nix::poll::PollFlags;
use nix::sys::socket::{MsgFlags, recv};

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
