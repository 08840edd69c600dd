//! systemd: socket activation (`LISTEN_FDS`, run by `systemd-socket-activate`) and
//! `sd_notify` for `Type=notify` units, read from a notify socket the test binds.

use std::io::{Read, Write};
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// The notify socket as systemd reads it: every message in the order it came, with
/// its sender's pid (SO_PASSCRED), so the test can say who said what, and when.
struct Notes {
    sock: UnixDatagram,
    got: Vec<(i32, String)>,
}

impl Notes {
    fn bind(path: &std::path::Path) -> Notes {
        let sock = UnixDatagram::bind(path).unwrap();
        nix::sys::socket::setsockopt(&sock, nix::sys::socket::sockopt::PassCred, &true).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
        Notes { sock, got: Vec::new() }
    }

    /// Reads one message if one comes within the read timeout.
    fn read_one(&mut self) {
        use nix::sys::socket::{ControlMessageOwned, MsgFlags, UnixAddr, recvmsg};
        use std::os::fd::AsRawFd;
        let mut buf = [0u8; 4096];
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let mut space = nix::cmsg_space!(nix::sys::socket::UnixCredentials);
        let Ok(msg) = recvmsg::<UnixAddr>(self.sock.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::empty()) else {
            return; // the read timeout
        };
        let pid = msg
            .cmsgs()
            .unwrap()
            .find_map(|c| match c {
                ControlMessageOwned::ScmCredentials(cred) => Some(cred.pid()),
                _ => None,
            })
            .expect("SCM_CREDENTIALS with every message");
        let n = msg.bytes;
        self.got.push((pid, String::from_utf8_lossy(&buf[..n]).into_owned()));
    }

    /// The index of the first message from `from` on with a line starting `want`.
    fn next(&mut self, from: usize, want: &str) -> usize {
        let end = Instant::now() + DEADLINE;
        loop {
            if let Some(i) = self.got.iter().skip(from).position(|(_, m)| m.lines().any(|l| l.starts_with(want))) {
                return from + i;
            }
            assert!(Instant::now() < end, "no {want} from message {from} on; got {:?}", self.got);
            self.read_one();
        }
    }

    fn sender(&self, i: usize) -> i32 {
        self.got[i].0
    }

    fn text(&self, i: usize) -> &str {
        &self.got[i].1
    }
}

fn field<'a>(msg: &'a str, key: &str) -> Option<&'a str> {
    msg.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
}

/// `STATUS=` with the scoreboard's counts: "N workers (M idle), C connections held,
/// R requests, generation G"; returns G.
fn generation_in_status(msg: &str) -> u64 {
    let status = field(msg, "STATUS").unwrap_or_else(|| panic!("no STATUS= in {msg:?}"));
    let words: Vec<&str> = status.split([' ', ',', '(', ')']).filter(|w| !w.is_empty()).collect();
    match words[..] {
        [w, "workers", i, "idle", c, "connections", "held", r, "requests", "generation", g]
            if [w, i, c, r].iter().all(|n| n.parse::<u64>().is_ok()) =>
        {
            g.parse().unwrap()
        }
        _ => panic!("STATUS= without the scoreboard's counts: {status:?}"),
    }
}

#[test]
fn socket_activation_and_notify_messages_in_order() {
    let Some(activate) = need_tool("systemd-socket-activate") else { return };
    let site = Site::new();
    // A free port for systemd-socket-activate to bind (it takes no port 0).
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let conf = site.config("", "[workers]\nstart = 2\nmin_spare = 1\n");
    // Larger than loopback's socket buffers: a worker still sends it at the upgrade.
    site.write("htdocs/big.bin", vec![b'x'; 48 << 20]);
    let text = site.read("conf/pika.toml").replace("127.0.0.1:0", &addr.to_string());
    site.write("conf/pika.toml", text);
    let notify = site.path("notify.sock");
    let mut notes = Notes::bind(&notify);

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
    // systemd-socket-activate binds, then runs pika (as its own pid: it execs) on the
    // first connection. Each message is looked for after the one before it, so
    // they must come in this order.
    let served = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until(DEADLINE, "systemd-socket-activate to listen", || std::net::TcpStream::connect(addr).ok());
        let r = get(addr, "/");
        assert_eq!(r.status, 200);
        let ready = notes.next(0, "READY=1");
        assert_eq!(notes.sender(ready), first, "{:?}", notes.got);
        let generation = generation_in_status(notes.text(ready));
        let log = site.error_log();
        assert!(log.contains(&format!("inherited {addr}: the socket systemd passed (web)")), "{log}");

        // A reload: RELOADING=1 with the monotonic clock, then READY=1 and the new
        // generation's counts.
        let before = pika::master::notify::monotonic_usec();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(first), nix::sys::signal::Signal::SIGHUP).unwrap();
        let reloading = notes.next(ready + 1, "RELOADING=1");
        assert_eq!(notes.sender(reloading), first);
        let usec: u64 = field(notes.text(reloading), "MONOTONIC_USEC").expect("MONOTONIC_USEC").parse().unwrap();
        assert!(
            before <= usec && usec <= pika::master::notify::monotonic_usec(),
            "{usec} not between {before} and now"
        );
        let reloaded = notes.next(reloading + 1, "READY=1");
        assert_eq!(notes.sender(reloaded), first);
        assert_eq!(generation_in_status(notes.text(reloaded)), generation + 1);

        // An upgrade: the new master says READY=1 (NotifyAccess=all) and the old one
        // names it with MAINPID=; the old one's retirement is no STOPPING=1, not
        // even when it is told to stop at once while a worker of its still sends
        // a file (held here: the test does not read it).
        let mut held = connect(addr);
        held.write_all(b"GET /big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
        let mut first_bytes = [0u8; 1024];
        held.read_exact(&mut first_bytes).unwrap();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(first), nix::sys::signal::Signal::SIGUSR2).unwrap();
        let main = notes.next(reloaded + 1, "MAINPID=");
        assert_eq!(notes.sender(main), first);
        let new: i32 = field(notes.text(main), "MAINPID").unwrap().parse().unwrap();
        assert_ne!(new, first);
        let new_ready = notes.next(reloaded + 1, "READY=1");
        assert_eq!(notes.sender(new_ready), new, "{:?}", notes.got);
        wait_until(DEADLINE, "the new master's pid file", || {
            (site.read("logs/pika.pid").trim() == new.to_string()).then_some(())
        });
        assert_eq!(get(addr, "/").status, 200);
        assert!(alive(first), "the old master waits for its worker");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(first), nix::sys::signal::Signal::SIGTERM).unwrap();
        wait_until(DEADLINE, "the old master to exit", || (!alive(first)).then_some(()));
        drop(held);
        assert_eq!(get(addr, "/").status, 200, "the new master serves on");

        // A stop, said by the new master.
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(new), nix::sys::signal::Signal::SIGTERM).unwrap();
        let stopping = notes.next(main.max(new_ready) + 1, "STOPPING=1");
        assert_eq!(notes.sender(stopping), new);
        wait_until(DEADLINE, "the new master to exit", || (!alive(new)).then_some(()));
        let from_old: Vec<&String> = notes.got.iter().filter(|(pid, _)| *pid == first).map(|(_, m)| m).collect();
        assert!(from_old.iter().all(|m| !m.contains("STOPPING=1")), "{from_old:?}");
        eprintln!("notify messages: {:?}", notes.got);
    }));
    stop_all(&site);
    let _ = child.wait();
    if let Err(e) = served {
        std::panic::resume_unwind(e);
    }
}
