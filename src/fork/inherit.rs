//! Sockets a master is given instead of binding them: by the old master of a binary
//! upgrade, or by systemd's socket activation.
//!
//! A binary upgrade (`USR2`, `master::upgrade`) execs the new binary with the
//! listening sockets left open and their numbers in the environment
//! ([`LISTENERS_ENV`]: `fd=address` pairs, the address as the config wrote it), with
//! the handover socket pair (so the new workers adopt the old workers' kept-alive
//! connections), the per-boot token (so either generation's dummy connections stay
//! internal) and a pipe on which the new master says when it serves. systemd passes
//! `LISTEN_FDS` sockets from descriptor 3 on, for `LISTEN_PID` only, named by
//! `LISTEN_FDNAMES`; each is matched to the `listen` entry of its address.
//!
//! [`capture`] reads all of it once, at the start of `main` (before a daemon's
//! forks change the pid that `LISTEN_PID` names), and takes the variables out of the
//! environment, so no worker or later upgrade sees stale numbers. The master then
//! takes each listener it needs ([`Inherited::take_listener`]) and binds only what
//! it was not given; what is left over is closed.

use std::fs::File;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Mutex;

use crate::base::sys;
use crate::config::Listen;

/// `fd=address,fd=address`: the listeners an upgrade passes, by configured address.
pub const LISTENERS_ENV: &str = "PIKA_INHERIT_LISTENERS";
/// `version:send,recv`: the handover socket pair.
pub const HANDOVER_ENV: &str = "PIKA_INHERIT_HANDOVER";
/// The per-boot token of the internal dummy requests.
pub const TOKEN_ENV: &str = "PIKA_INHERIT_TOKEN";
/// The pipe the new master writes `ok` (or why not) to.
pub const READY_ENV: &str = "PIKA_UPGRADE_READY";
/// The old master's pid.
pub const FROM_ENV: &str = "PIKA_UPGRADE_FROM";

/// Where a listener came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The old master of a binary upgrade, keyed by its configured address.
    Upgrade(SocketAddr),
    /// systemd, with its `FileDescriptorName=`.
    Systemd(String),
}

/// One listening socket given to this process.
#[derive(Debug)]
pub struct Given {
    pub socket: TcpListener,
    pub origin: Origin,
}

/// Everything this process was given at start.
#[derive(Debug, Default)]
pub struct Inherited {
    pub listeners: Vec<Given>,
    /// The handover pair, if its layout is this binary's.
    pub handover: Option<(OwnedFd, OwnedFd)>,
    pub token: Option<String>,
    /// The upgrade's ready pipe.
    pub ready: Option<File>,
    /// The old master, when this one is the new master of an upgrade.
    pub old_master: Option<i32>,
    /// What could not be used (said once the error log is open, as warnings).
    pub notes: Vec<String>,
    /// What was used (said at info).
    pub used: Vec<String>,
}

static CAPTURED: Mutex<Option<Inherited>> = Mutex::new(None);

/// Reads and removes the variables (once, at the start of `main`).
pub fn capture() {
    let got = Inherited::from_env();
    if let Ok(mut c) = CAPTURED.lock() {
        *c = Some(got);
    }
}

/// What [`capture`] found (once; later calls get nothing).
pub fn take() -> Inherited {
    CAPTURED.lock().ok().and_then(|mut c| c.take()).unwrap_or_default()
}

/// Tells the old master of an upgrade that this one cannot start, and why (a config
/// that does not load never reaches the master).
pub fn report_failure(why: &str) {
    if let Ok(mut c) = CAPTURED.lock()
        && let Some(ready) = c.as_mut().and_then(|i| i.ready.as_mut())
    {
        let _ = writeln!(ready, "{why}");
    }
}

impl Inherited {
    fn from_env() -> Inherited {
        let mut got = Inherited::default();
        let listeners = sys::take_env(LISTENERS_ENV);
        let handover = sys::take_env(HANDOVER_ENV);
        got.token = sys::take_env(TOKEN_ENV);
        let ready = sys::take_env(READY_ENV);
        got.old_master = sys::take_env(FROM_ENV).and_then(|p| p.parse().ok());
        let listen_pid = sys::take_env("LISTEN_PID");
        let listen_fds = sys::take_env("LISTEN_FDS");
        let names = sys::take_env("LISTEN_FDNAMES");

        for (fd, addr) in listeners.iter().flat_map(|l| parse_pairs(l)) {
            match adopt_listener(fd) {
                Ok(socket) => got.listeners.push(Given { socket, origin: Origin::Upgrade(addr) }),
                Err(e) => got.notes.push(format!("inherited listener {addr} (descriptor {fd}): {e}")),
            }
        }
        if let Some(h) = handover {
            match parse_handover(&h) {
                Some((crate::fork::handover::VERSION, send, recv)) => {
                    match (sys::adopt_inherited_fd(send), sys::adopt_inherited_fd(recv)) {
                        (Ok(s), Ok(r)) => got.handover = Some((s, r)),
                        _ => got.notes.push("the inherited handover socket is not open; making a new one".into()),
                    }
                }
                // Another layout: the old workers' connections stay with them.
                _ => got.notes.push(format!("the old master's handover socket ({h}) is of another layout; not used")),
            }
        }
        if let Some(fd) = ready.and_then(|r| r.parse().ok()) {
            match sys::adopt_inherited_fd(fd) {
                Ok(f) => got.ready = Some(File::from(f)),
                Err(e) => got.notes.push(format!("upgrade ready pipe: {e}")),
            }
        }
        // sd_listen_fds(3): only for the pid systemd started.
        let ours = listen_pid.and_then(|p| p.parse::<u32>().ok()) == Some(std::process::id());
        if let Some(n) = listen_fds.and_then(|n| n.parse::<i32>().ok()).filter(|_| ours) {
            let names: Vec<&str> = names.as_deref().map(|n| n.split(':').collect()).unwrap_or_default();
            for i in 0..n.clamp(0, 1024) {
                let fd = SD_LISTEN_FDS_START + i;
                let name = names.get(i as usize).copied().unwrap_or("unknown").to_string();
                match adopt_listener(fd) {
                    Ok(socket) => got.listeners.push(Given { socket, origin: Origin::Systemd(name) }),
                    Err(e) => got.notes.push(format!("systemd socket {name} (descriptor {fd}): {e}")),
                }
            }
        }
        // The new master of an upgrade was also given whatever the first master was
        // started with and never closed (a shell's or a supervisor's descriptors):
        // it keeps only what it was handed on purpose. Nothing else is open yet.
        if got.old_master.is_some() || got.ready.is_some() {
            let mut keep: Vec<i32> = got.listeners.iter().map(|g| g.socket.as_raw_fd()).collect();
            keep.extend(got.handover.iter().flat_map(|(s, r)| [s.as_raw_fd(), r.as_raw_fd()]));
            keep.extend(got.ready.as_ref().map(File::as_raw_fd));
            if let Err(e) = sys::close_descriptors_except(&keep) {
                got.notes.push(format!("cannot close the descriptors the old master left open: {e}"));
            }
        }
        got
    }

    /// The given socket for a `listen` entry: an upgrade's by the address the config
    /// wrote, systemd's by the address it is bound to.
    pub fn take_listener(&mut self, entry: &Listen) -> Option<Given> {
        let at = self.listeners.iter().position(|g| match &g.origin {
            Origin::Upgrade(configured) => *configured == entry.addr,
            Origin::Systemd(_) => g.socket.local_addr().is_ok_and(|a| a == entry.addr),
        })?;
        let given = self.listeners.remove(at);
        self.used.push(match &given.origin {
            Origin::Upgrade(_) => format!("{}: the socket of the old master", entry.addr),
            Origin::Systemd(name) => format!("{}: the socket systemd passed ({name})", entry.addr),
        });
        Some(given)
    }

    /// True if the process was given anything at all.
    pub fn is_empty(&self) -> bool {
        self.listeners.is_empty() && self.handover.is_none() && self.ready.is_none()
    }
}

/// systemd's first passed descriptor.
const SD_LISTEN_FDS_START: i32 = 3;

/// A listening TCP socket at `fd`.
fn adopt_listener(fd: i32) -> Result<TcpListener, String> {
    let owned = sys::adopt_inherited_fd(fd).map_err(|e| e.to_string())?;
    let socket = socket2::Socket::from(owned);
    match (socket.r#type(), socket.is_listener()) {
        (Ok(socket2::Type::STREAM), Ok(true)) => {}
        _ => return Err("not a listening stream socket".into()),
    }
    Ok(socket.into())
}

/// `3=127.0.0.1:8080,4=[::1]:80`.
pub fn parse_pairs(s: &str) -> Vec<(i32, SocketAddr)> {
    s.split(',')
        .filter_map(|pair| {
            let (fd, addr) = pair.split_once('=')?;
            Some((fd.parse().ok()?, addr.parse().ok()?))
        })
        .collect()
}

/// `1:5,6` → (version, send, recv).
fn parse_handover(s: &str) -> Option<(u8, i32, i32)> {
    let (version, fds) = s.split_once(':')?;
    let (send, recv) = fds.split_once(',')?;
    Some((version.parse().ok()?, send.parse().ok()?, recv.parse().ok()?))
}

/// The environment an upgrade's new master gets: the listeners by configured
/// address, the handover pair, the token, the ready pipe, the old master's pid.
pub fn upgrade_env(
    listeners: &[(std::os::fd::RawFd, SocketAddr)],
    handover: [std::os::fd::RawFd; 2],
    token: &str,
    ready: &impl AsRawFd,
) -> Vec<(&'static str, String)> {
    let pairs: Vec<String> = listeners.iter().map(|(fd, addr)| format!("{fd}={addr}")).collect();
    vec![
        (LISTENERS_ENV, pairs.join(",")),
        (HANDOVER_ENV, format!("{}:{},{}", crate::fork::handover::VERSION, handover[0], handover[1])),
        (TOKEN_ENV, token.to_string()),
        (READY_ENV, ready.as_raw_fd().to_string()),
        (FROM_ENV, std::process::id().to_string()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_and_handover_read_back() {
        let l: Vec<(i32, SocketAddr)> = vec![(5, "127.0.0.1:8080".parse().unwrap()), (6, "[::1]:0".parse().unwrap())];
        let (r, _w) = nix::unistd::pipe().unwrap();
        let env = upgrade_env(&l, [7, 8], "tok", &r);
        let get = |k: &str| env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone()).unwrap();
        assert_eq!(parse_pairs(&get(LISTENERS_ENV)), l);
        assert_eq!(parse_handover(&get(HANDOVER_ENV)), Some((crate::fork::handover::VERSION, 7, 8)));
        assert_eq!(parse_pairs("x=1,3=nope,4=127.0.0.1:1"), vec![(4, "127.0.0.1:1".parse().unwrap())]);
        assert_eq!(parse_handover("1:2"), None);
    }
}
