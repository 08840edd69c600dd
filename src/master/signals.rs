//! Signals into the master: handlers only record that a signal came (a flag, then a
//! byte on a self-pipe); the master loop turns them into [`Control`]s and does the work.
//!
//! The meanings are nginx's and unicorn's, which init scripts and logrotate expect.

use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};

/// What the operator asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// TERM, INT: stop now (workers get TERM; stragglers KILL).
    FastStop,
    /// QUIT: stop accepting, let workers finish, then exit.
    GracefulStop,
    /// HUP: reread the config; on success a new generation replaces the old.
    Reload,
    /// USR1: reopen the log files (logrotate's postrotate).
    ReopenLogs,
    /// WINCH: retire every worker gracefully, keep the master.
    StopWorkers,
    /// TTIN: one more spare worker (raise the band by one).
    MoreSpare,
    /// TTOU: one fewer spare worker.
    FewerSpare,
    /// USR2: binary upgrade (not implemented yet: logged and ignored).
    Upgrade,
    /// CHLD: a worker exited; reap now rather than at the next tick.
    ChildExited,
}

/// Each handled signal with its control, in the order they are acted on when several
/// arrive together (a stop outranks a reload).
const TABLE: [(i32, Control); 10] = [
    (libc::SIGTERM, Control::FastStop),
    (libc::SIGINT, Control::FastStop),
    (libc::SIGQUIT, Control::GracefulStop),
    (libc::SIGHUP, Control::Reload),
    (libc::SIGUSR1, Control::ReopenLogs),
    (libc::SIGWINCH, Control::StopWorkers),
    (libc::SIGTTIN, Control::MoreSpare),
    (libc::SIGTTOU, Control::FewerSpare),
    (libc::SIGCHLD, Control::ChildExited),
    (libc::SIGUSR2, Control::Upgrade),
];

#[allow(clippy::declare_interior_mutable_const)]
const CLEAR: AtomicBool = AtomicBool::new(false);
static PENDING: [AtomicBool; TABLE.len()] = [CLEAR; TABLE.len()];

/// The read end of the self-pipe, for the master's `poll`.
pub struct Signals {
    wake: UnixStream,
}

impl Signals {
    /// Installs the handlers. Call once, in the master, before the first fork.
    pub fn install() -> std::io::Result<Signals> {
        let (read, write) = UnixStream::pair()?;
        read.set_nonblocking(true)?;
        write.set_nonblocking(true)?;
        for (i, (sig, _)) in TABLE.iter().enumerate() {
            // Flag first, then the pipe: the loop drains the pipe, then reads flags.
            signal_hook::flag::register(*sig, &PENDING[i])?;
            signal_hook::low_level::pipe::register(*sig, write.try_clone()?)?;
        }
        Ok(Signals { wake: read })
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// Drains the pipe and returns the controls that arrived, most urgent first.
    pub fn take(&mut self) -> Vec<Control> {
        let mut sink = [0u8; 64];
        while matches!((&self.wake).read(&mut sink), Ok(n) if n > 0) {}
        TABLE
            .iter()
            .enumerate()
            .filter(|(i, _)| PENDING[*i].swap(false, Ordering::SeqCst))
            .map(|(_, (_, c))| *c)
            .collect()
    }
}
