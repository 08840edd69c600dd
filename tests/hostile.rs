//! Slow, idle and hostile clients against a small pool: the server must keep serving
//! real users, within a bound.

use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::util::*;

/// The longest a normal client may wait while the pool is flooded. Silent
/// connections never reach a worker (TCP_DEFER_ACCEPT) and a slowloris holds none
/// (its half head waits in the worker's set, docs/keepalive.md): a normal client is
/// served at once; the bound is for scheduling on a loaded 2-core machine.
pub const FLOODED_BOUND: Duration = Duration::from_secs(2);

#[test]
fn a_real_client_is_served_through_slowloris_and_silent_connections() {
    let site = Site::new();
    site.config("", "[workers]\nstart = 4\nmin_spare = 1\nmax_spare = 4\nmax = 4\n[http]\nheader_timeout = \"4s\"\n");
    let p = Pika::start(&site, "-F");
    let stop = Arc::new(AtomicBool::new(false));
    // 2 x workers.max slowloris connections: one header byte every 1.5 s.
    let trickle: Vec<_> = (0..8)
        .map(|i| {
            let stop = stop.clone();
            let addr = p.addr;
            std::thread::spawn(move || {
                let Ok(mut s) = TcpStream::connect(addr) else { return };
                let head = format!("GET /?slow={i} HTTP/1.1\r\nHost: localhost\r\nX-Slow: {}", "a".repeat(200));
                for b in head.bytes() {
                    if stop.load(Ordering::Relaxed) || s.write_all(&[b]).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(1500));
                }
            })
        })
        .collect();
    // And as many that connect and say nothing.
    let silent: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(p.addr).unwrap()).collect();
    std::thread::sleep(Duration::from_millis(1500));
    let mut waits = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let r = get(p.addr, "/");
        let waited = t.elapsed();
        assert_eq!(r.status, 200);
        assert!(waited < FLOODED_BOUND, "a real client waited {waited:?}");
        waits.push(waited);
    }
    eprintln!("flooded pool: a normal client waited {waits:?}");
    assert!(!site.error_log().contains("reached workers.max"), "slow heads took workers:\n{}", site.error_log());
    // The slowloris heads are cut with 408s at header_timeout, not served.
    wait_until(DEADLINE, "408s for the slow heads", || {
        (site.access_lines().iter().filter(|l| l.contains("\" 408 ")).count() == 8).then_some(())
    });
    stop.store(true, Ordering::Relaxed);
    drop(silent);
    for t in trickle {
        t.join().unwrap();
    }
}

#[test]
fn idle_keepalive_connections_leave_the_pool_free() {
    let site = Site::new();
    site.config(
        "",
        "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 2\nmax = 2\n[http]\nkeepalive_timeout = \"60s\"\n",
    );
    let p = Pika::start(&site, "-F");
    // More idle kept-alive connections than workers.
    let mut held = Vec::new();
    for _ in 0..6 {
        let mut s = connect(p.addr);
        s.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
        assert_eq!(read_response(&mut s, false).unwrap().status, 200);
        held.push(s);
    }
    let t = Instant::now();
    let r = get(p.addr, "/");
    assert_eq!(r.status, 200);
    assert!(t.elapsed() < FLOODED_BOUND, "waited {:?} behind idle keep-alive connections", t.elapsed());
    // None was closed to make room: each is answered again on the same connection.
    for mut s in held {
        s.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
        let r = read_response(&mut s, false).expect("answered on the kept connection");
        assert_eq!((r.status, r.header("connection")), (200, None));
    }
}

/// Busy keep-alive clients, three times as many as workers, none ever idle: each
/// connection closes after `max_keepalive_requests`, goes to the back of the backlog,
/// and every client is served in turn.
#[test]
fn busy_keepalive_clients_beyond_max_take_turns() {
    let site = Site::new();
    site.config(
        "",
        "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 2\nmax = 2\n[http]\nmax_keepalive_requests = 5\n",
    );
    let p = Pika::start(&site, "-F");
    const CLIENTS: usize = 6;
    const EACH: usize = 40;
    let addr = p.addr;
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            std::thread::spawn(move || {
                let started = Instant::now();
                let mut conn: Option<TcpStream> = None;
                let mut connections = 0;
                for _ in 0..EACH {
                    let s = conn.get_or_insert_with(|| {
                        connections += 1;
                        connect(addr)
                    });
                    s.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
                    let r = read_response(s, false).expect("a response");
                    assert_eq!(r.status, 200);
                    if r.header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close")) {
                        conn = None;
                    }
                }
                (started.elapsed(), connections)
            })
        })
        .collect();
    for c in clients {
        let (took, connections) = c.join().unwrap();
        // 40 requests at 5 per connection: the connection was closed every 5th.
        assert_eq!(connections, EACH / 5);
        assert!(took < FLOODED_BOUND, "a client took {took:?} for {EACH} requests");
    }
    // The last records may be written just after their responses were read.
    wait_until(DEADLINE, "every request logged", || {
        (site.access_lines().iter().filter(|l| l.contains("\" 200 ")).count() == CLIENTS * EACH).then_some(())
    });
}

#[test]
fn busy_keepalive_clients_beyond_max_are_served_side_by_side() {
    let site = Site::new();
    // max_keepalive_requests left at its default (1000).
    site.config("", "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 2\nmax = 2\n");
    let p = Pika::start(&site, "-F");
    let addr = p.addr;
    // Eight busy clients on two workers, 300 requests each. Each worker serves the
    // connections it holds in turn: nobody waits in the backlog for another client
    // to finish, and no connection is closed to make room.
    const EACH: usize = 300;
    let clients: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                let mut s = connect(addr);
                let mut slowest = Duration::ZERO;
                for _ in 0..EACH {
                    let t = Instant::now();
                    s.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
                    let r = read_response(&mut s, false).expect("a response on the same connection");
                    assert_eq!((r.status, r.header("connection")), (200, None));
                    slowest = slowest.max(t.elapsed());
                }
                slowest
            })
        })
        .collect();
    for c in clients {
        let slowest = c.join().unwrap();
        assert!(slowest < FLOODED_BOUND, "a request waited {slowest:?}");
    }
}

#[test]
fn a_slow_download_is_not_taken_for_a_stuck_worker() {
    let site = Site::new();
    let data: Vec<u8> = (0..48_000_000u32).map(|i| (i % 251) as u8).collect();
    site.write("htdocs/big.bin", &data);
    // The watchdog stops a worker that shows no progress for request_timeout; a
    // whole body in one blocking call showed none until the end. (3 s, not 1: on a
    // loaded 2-core machine the reading thread or the worker can miss a second.)
    site.config("", "[workers]\nstart = 1\nmin_spare = 1\nmax_spare = 2\n[http]\nrequest_timeout = \"3s\"\n");
    let p = Pika::start(&site, "-F");
    // A file (sendfile), then two large ranges (multipart, writev).
    let requests = [("", 48_000_000), ("Range: bytes=0-19999999,28000000-47999999\r\n", 40_000_000)];
    for (range, body_at_least) in requests {
        let mut s = connect(p.addr);
        nix::sys::socket::setsockopt(&s, nix::sys::socket::sockopt::RcvBuf, &65536).unwrap();
        s.write_all(format!("GET /big.bin HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{range}\r\n").as_bytes())
            .unwrap();
        // Slowly for 4.5 s (well past request_timeout and a master tick), then at speed.
        let started = Instant::now();
        let mut got = Vec::new();
        let mut buf = vec![0u8; 65536];
        loop {
            let n = std::io::Read::read(&mut s, &mut buf).unwrap_or(0);
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
            if started.elapsed() < Duration::from_millis(4500) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        assert!(got.len() > body_at_least, "cut off after {} bytes ({range:?})", got.len());
    }
    assert!(!site.error_log().contains("made no progress"), "{}", site.error_log());
}

/// Sets a process's soft open-file limit from outside (util-linux prlimit; the hard
/// limit stays, so it can be raised again without privileges).
fn set_nofile(prlimit: &Path, pid: i32, n: u64) {
    let ok = std::process::Command::new(prlimit)
        .args(["--pid", &pid.to_string(), &format!("--nofile={n}:")])
        .status()
        .unwrap()
        .success();
    assert!(ok, "prlimit failed");
}

#[test]
fn out_of_descriptors_is_said_once_and_recovers() {
    let site = Site::new();
    site.write("htdocs/a.txt", "a");
    site.write("htdocs/b.txt", "b");
    let Some(prlimit) = need_tool("prlimit") else { return };
    let set_nofile = |pid, n| set_nofile(&prlimit, pid, n);
    site.config("", "[workers]\nstart = 1\nmin_spare = 0\nmax_spare = 1\n");
    let p = Pika::start(&site, "-F");
    let w = children_of(p.pid)[0];
    let open: Vec<u64> = std::fs::read_dir(format!("/proc/{w}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    // A limit is on descriptor numbers: find the limits leaving exactly one free
    // number (room for the connection, none for a file) and none.
    let free_below = |limit: u64| limit - open.iter().filter(|&&fd| fd < limit).count() as u64;
    let one_free = (1..4096).find(|&l| free_below(l) == 1).unwrap();
    let none_free = (1..4096).take_while(|&l| free_below(l) == 0).last().unwrap();
    set_nofile(w, one_free);
    for path in ["/a.txt", "/b.txt", "/a.txt"] {
        assert_eq!(get(p.addr, path).status, 503, "{path}");
    }
    let log = site.error_log();
    assert_eq!(log.matches("out of file descriptors").count(), 1, "said once:\n{log}");
    // No room even to accept: the client waits in the backlog, the worker backs off.
    set_nofile(w, none_free);
    // A worker blocked in accept() reserved its descriptor number under the old
    // limit; its accept returns within one wait slice (1 s) and retries under the
    // new one.
    std::thread::sleep(Duration::from_millis(1500));
    let addr = p.addr;
    let waiting = std::thread::spawn(move || get(addr, "/b.txt").status);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(site.error_log().matches("out of file descriptors").count(), 1);
    // Descriptors come back: the waiting client is served and the log says so.
    set_nofile(w, 1024);
    assert_eq!(waiting.join().unwrap(), 200);
    assert_eq!(get(p.addr, "/a.txt").text(), "a");
    wait_until(DEADLINE, "the recovery line", || site.error_log().contains("available again").then_some(()));
    assert_eq!(children_of(p.pid), vec![w], "the same worker served throughout");
}
