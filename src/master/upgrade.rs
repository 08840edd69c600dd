//! The binary upgrade (USR2, `pika -k upgrade`): nginx's dance, with the listeners
//! never closed.
//!
//! 1. The master renames its pid file to `<pid_file>.oldbin` and starts this binary
//!    again (the file as found at start, so a package's new version) as
//!    `pika -F -f CONFIG`, with the listening sockets, the handover socket pair, the
//!    per-boot token and a pipe left open and named in the environment
//!    (`crate::fork::inherit`).
//! 2. The new master reads and checks its config, takes the listeners it was given
//!    (binding only addresses the old one did not have), writes the pid file, starts
//!    its workers, and writes `ok` on the pipe once they serve.
//! 3. The old master then retires its workers gracefully (WINCH's way, except that
//!    the new workers adopt their kept-alive connections over the shared handover
//!    socket), tells systemd the new main pid, and exits once they are gone
//!    (QUIT's way, bounded by `graceful_timeout`).
//!
//! If the new binary fails at any point (it cannot be run, its config is bad, it
//! dies, or it is not serving within [`READY_TIMEOUT`]), the old master stops it,
//! takes its pid file back, says why, and goes on serving: it never stopped.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::maintenance::Exit;
use super::state::{Master, Upgrade};
use crate::base::sys;

/// How long the new master has to serve. It reads its config, maybe checks
/// certificates, and forks `workers.start` workers: seconds at most; a binary that
/// hangs is given up on after this.
pub(super) const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The suffix of the old master's pid file.
pub const OLDBIN: &str = "oldbin";

/// The pid file an old master keeps while a new one takes over.
pub fn oldbin_path(pid_file: &Path) -> PathBuf {
    let mut p = pid_file.as_os_str().to_owned();
    p.push(".");
    p.push(OLDBIN);
    p.into()
}

impl Master {
    /// USR2.
    pub(super) fn start_upgrade(&mut self) {
        if self.upgrade.under_way.is_some() || !self.life.takes_orders() {
            log::warn!("SIGUSR2 ignored: an upgrade or a stop is under way");
            return;
        }
        let Some(exe) = self.upgrade.exe.clone() else {
            log::error!("upgrade: the path of this binary is unknown; not upgrading");
            return;
        };
        let oldbin = oldbin_path(&self.config.pid_file);
        if let Err(e) = std::fs::rename(&self.config.pid_file, &oldbin) {
            log::error!(
                "upgrade: cannot rename {} to {}: {e}; not upgrading",
                self.config.pid_file.display(),
                oldbin.display()
            );
            return;
        }
        crate::master::statusfile::remove(&self.upgrade.pid_path);
        self.upgrade.pid_path = oldbin;
        match self.spawn_new_master(&exe) {
            Ok((child, pipe)) => {
                log::info!("upgrade: started {} as pid {child}; waiting for it to serve", exe.display());
                self.upgrade.under_way =
                    Some(Upgrade { child, pipe, said: Vec::new(), deadline: Instant::now() + READY_TIMEOUT });
                self.write_status_file();
            }
            Err(e) => self.upgrade_failed(&format!("cannot run {}: {e}", exe.display())),
        }
    }

    /// Runs `exe -F -f CONFIG` with the listeners, the handover pair and a ready
    /// pipe inherited. The descriptors are made inheritable only around the spawn
    /// (the master is single-threaded: nothing else execs meanwhile).
    fn spawn_new_master(&self, exe: &Path) -> std::io::Result<(Pid, File)> {
        let (read, write): (OwnedFd, OwnedFd) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let listeners: Vec<(i32, std::net::SocketAddr)> =
            self.listeners.list.iter().map(|l| (l.socket.as_raw_fd(), l.configured)).collect();
        let env = crate::fork::inherit::upgrade_env(&listeners, self.handover.fds(), &self.token, &write);
        let mut shared: Vec<BorrowedFd<'_>> = self.listeners.list.iter().map(|l| l.socket.as_fd()).collect();
        shared.extend(self.handover.borrowed());
        shared.push(write.as_fd());
        for fd in &shared {
            sys::set_cloexec(*fd, false)?;
        }
        let spawned = Command::new(exe).arg("-F").arg("-f").arg(&self.config.file).envs(env).spawn();
        for fd in &shared {
            let _ = sys::set_cloexec(*fd, true);
        }
        let child = spawned?;
        drop(write);
        nix::fcntl::fcntl(read.as_fd(), nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK))?;
        Ok((Pid::from_raw(child.id() as i32), File::from(read)))
    }

    /// Reads what the new master said, and gives up on it at the deadline.
    pub(super) fn watch_upgrade(&mut self) {
        let Some(u) = &mut self.upgrade.under_way else { return };
        let mut buf = [0u8; 512];
        let mut eof = false;
        loop {
            match u.pipe.read(&mut buf) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => u.said.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break, // WouldBlock: nothing more yet
            }
        }
        let line = u.said.iter().position(|&b| b == b'\n').map(|i| String::from_utf8_lossy(&u.said[..i]).into_owned());
        let child = u.child;
        match line.as_deref() {
            Some("ok") => self.upgrade_done(child),
            Some(why) => self.upgrade_failed(&format!("the new master (pid {child}) could not start: {why}")),
            None if eof => self
                .upgrade_failed(&format!("the new master (pid {child}) exited before it served (see the error log)")),
            None if Instant::now() >= u.deadline => {
                self.upgrade_failed(&format!("the new master (pid {child}) did not serve within {READY_TIMEOUT:?}"))
            }
            None => {}
        }
    }

    /// A child that is not a worker was reaped: the new master of an upgrade.
    /// True if it was that.
    pub(super) fn new_master_exited(&mut self, pid: Pid, exit: Exit) -> bool {
        match &self.upgrade.under_way {
            Some(u) if u.child == pid => {
                let how = match exit {
                    Exit::Code(c) => format!("exit code {c}"),
                    Exit::Signal { signal, .. } => format!("signal {signal}"),
                };
                // What it wrote before it went says more than its exit.
                self.watch_upgrade();
                if self.upgrade.under_way.is_some() {
                    self.upgrade_failed(&format!("the new master (pid {pid}) exited ({how}) before it served"));
                }
                true
            }
            // One that failed and was stopped, or one that took over and ended.
            _ => true,
        }
    }

    /// The new master serves: this generation retires and the master exits.
    fn upgrade_done(&mut self, child: Pid) {
        self.upgrade.under_way = None;
        self.report_upgraded(child);
        self.supersede();
        self.write_status_file();
    }

    /// The upgrade did not take: stop the new master if it runs, take the pid file
    /// back, say why, serve on.
    pub(super) fn upgrade_failed(&mut self, why: &str) {
        if let Some(u) = self.upgrade.under_way.take() {
            // Ours: it was started by this process and is not reaped yet (or, if it
            // is gone, the signal finds nobody).
            let _ = kill(u.child, Signal::SIGTERM);
        }
        let oldbin = oldbin_path(&self.config.pid_file);
        crate::master::statusfile::remove(&self.upgrade.pid_path);
        if let Err(e) = std::fs::rename(&oldbin, &self.config.pid_file) {
            log::error!("upgrade: cannot rename {} back: {e}", oldbin.display());
        }
        self.upgrade.pid_path = self.config.pid_file.clone();
        self.upgrade.failed += 1;
        self.report_upgrade_failed(why);
    }
}
