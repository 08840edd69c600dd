//! systemd: socket activation (`LISTEN_FDS`, run by `systemd-socket-activate`) and
//! `sd_notify` for `Type=notify` units, read from a notify socket the test binds.

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// Reads notify messages until one has a line `want` (a prefix); returns all read.
fn until(sock: &UnixDatagram, got: &mut Vec<String>, want: &str) -> String {
    let end = Instant::now() + DEADLINE;
    let mut buf = [0u8; 4096];
    loop {
        if let Some(m) = got.iter().find(|m| m.lines().any(|l| l.starts_with(want))) {
            let m = m.clone();
            got.retain(|x| *x != m);
            return m;
        }
        assert!(Instant::now() < end, "no {want} message; got {got:?}");
        if let Ok(n) = sock.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    }
}

fn field<'a>(msg: &'a str, key: &str) -> Option<&'a str> {
    msg.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
}

#[test]
fn socket_activation_and_notify_messages_in_order() {
    let Some(activate) = need_tool("systemd-socket-activate") else { return };
    let site = Site::new();
    // A free port for systemd-socket-activate to bind (it takes no port 0).
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let conf = site.config("", "[workers]\nstart = 2\nmin_spare = 1\n");
    let text = site.read("conf/pika.toml").replace("127.0.0.1:0", &addr.to_string());
    site.write("conf/pika.toml", text);
    let notify = site.path("notify.sock");
    let sock = UnixDatagram::bind(&notify).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200))).unwrap();

    let mut child = Command::new(activate)
        .args(["-l", &addr.to_string(), "--fdname=web", "-E", "NOTIFY_SOCKET", BIN, "-F", "-f"])
        .arg(&conf)
        .env("NOTIFY_SOCKET", &notify)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let first = child.id() as i32;
    let stop_all = |site: &Site| {
        for pid in [site.read("logs/pika.pid").trim().parse::<i32>().unwrap_or(0), first] {
            if pid > 0 && alive(pid) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
            }
        }
    };
    // systemd-socket-activate binds, then runs pika on the first connection.
    let served = std::panic::catch_unwind(|| {
        let mut got = Vec::new();
        wait_until(DEADLINE, "systemd-socket-activate to listen", || std::net::TcpStream::connect(addr).ok());
        let r = get(addr, "/");
        assert_eq!(r.status, 200);
        let ready = until(&sock, &mut got, "READY=1");
        assert!(field(&ready, "STATUS").is_some_and(|s| s.contains("workers")), "{ready}");
        let log = site.error_log();
        assert!(log.contains(&format!("inherited {addr}: the socket systemd passed (web)")), "{log}");

        // A reload: RELOADING=1 with the monotonic clock, then READY=1.
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(first), nix::sys::signal::Signal::SIGHUP).unwrap();
        let reloading = until(&sock, &mut got, "RELOADING=1");
        let usec: u64 = field(&reloading, "MONOTONIC_USEC").expect("MONOTONIC_USEC").parse().unwrap();
        assert!(usec > 0 && usec <= pika::notify::monotonic_usec());
        until(&sock, &mut got, "READY=1");

        // An upgrade: the old master names the new one.
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(first), nix::sys::signal::Signal::SIGUSR2).unwrap();
        let main = until(&sock, &mut got, "MAINPID=");
        let new: i32 = field(&main, "MAINPID").unwrap().parse().unwrap();
        assert_ne!(new, first);
        wait_until(DEADLINE, "the new master's pid file", || {
            (site.read("logs/pika.pid").trim() == new.to_string()).then_some(())
        });
        assert_eq!(get(addr, "/").status, 200);

        // A stop.
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(new), nix::sys::signal::Signal::SIGTERM).unwrap();
        until(&sock, &mut got, "STOPPING=1");
        wait_until(DEADLINE, "the new master to exit", || (!alive(new)).then_some(()));
    });
    stop_all(&site);
    let _ = child.wait();
    if let Err(e) = served {
        std::panic::resume_unwind(e);
    }
}
