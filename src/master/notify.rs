//! `sd_notify`: telling systemd how the server is doing, for `Type=notify` units.
//!
//! systemd names a datagram socket in `NOTIFY_SOCKET` (a path, or `@name` in the
//! abstract namespace); each message is newline-separated `KEY=value` lines. The
//! master sends `READY=1` once its first workers serve, `RELOADING=1` with
//! `MONOTONIC_USEC=` when a reload begins and `READY=1` when the new generation
//! serves, `STOPPING=1` when a stop begins, `STATUS=` with the scoreboard's counts
//! when they change, and after a binary upgrade the old master names the new one
//! with `MAINPID=`. Without `NOTIFY_SOCKET` (not under systemd, or another `Type=`)
//! nothing is sent. A message that cannot be sent is dropped: systemd's state is a
//! convenience, never a reason to stop serving.

use std::os::unix::net::UnixDatagram;

/// The variable systemd sets.
pub const SOCKET_ENV: &str = "NOTIFY_SOCKET";

/// Sends `msg` to systemd, if it listens.
pub fn send(msg: &str) {
    let Some(path) = std::env::var_os(SOCKET_ENV) else { return };
    let Ok(sock) = UnixDatagram::unbound() else { return };
    let bytes = path.as_encoded_bytes();
    let sent = match bytes.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(name).and_then(|a| sock.send_to_addr(msg.as_bytes(), &a))
        }
        None => sock.send_to(msg.as_bytes(), std::path::Path::new(&path)),
    };
    if let Err(e) = sent {
        log::debug!("sd_notify: {e}");
    }
}

/// `MONOTONIC_USEC=`: CLOCK_MONOTONIC in microseconds, as systemd wants it with
/// `RELOADING=1`.
pub fn monotonic_usec() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map_or(0, |t| t.tv_sec() as u64 * 1_000_000 + t.tv_nsec() as u64 / 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_moves_forward() {
        let a = monotonic_usec();
        assert!(a > 0);
        assert!(monotonic_usec() >= a);
    }
}
