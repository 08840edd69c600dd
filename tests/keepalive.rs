//! Kept-alive connections held by workers between requests (docs/keepalive.md): many
//! idle clients cost no worker, no connection is closed under a request on its way,
//! and a worker that leaves hands its connections to one that stays.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::util::*;

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";

/// Opens `n` connections and has each one served once, kept alive.
fn kept_alive(addr: std::net::SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let mut s = connect(addr);
            s.write_all(GET).unwrap();
            let r = read_response(&mut s, false).expect("an answer");
            assert_eq!(r.status, 200);
            assert_eq!(r.header("connection"), None, "kept alive");
            s
        })
        .collect()
}

/// Sends one more request on each connection: every one is answered on the
/// connection it was sent on, and says whether it stays open.
fn all_answer_again(conns: &mut [TcpStream]) -> Vec<bool> {
    for s in conns.iter_mut() {
        s.write_all(GET).unwrap();
    }
    conns
        .iter_mut()
        .enumerate()
        .map(|(i, s)| {
            let r = read_response(s, false).unwrap_or_else(|| panic!("connection {i} got no answer"));
            assert_eq!(r.status, 200);
            r.header("connection").is_none_or(|v| !v.eq_ignore_ascii_case("close"))
        })
        .collect()
}

fn status_auto(addr: std::net::SocketAddr) -> String {
    get(addr, "/server-status?auto").text()
}

fn auto_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(": ")?.trim().parse().ok())
}

fn worker_pids(p: &Pika) -> Vec<i32> {
    children_of(p.pid)
}

fn rss_kib(pid: i32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines().find_map(|l| l.strip_prefix("VmRSS:")?.trim().strip_suffix("kB")?.trim().parse().ok()).unwrap_or(0)
}

/// Access-log lines, once the workers wrote what they hold (records are held for
/// `flush`, 1 s by default).
fn wait_lines(site: &Site, n: usize) -> Vec<String> {
    wait_until(DEADLINE, &format!("{n} access-log lines"), || {
        let l = site.access_lines();
        (l.len() >= n).then_some(l)
    })
}

const POOL_OF_8: &str = "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 3\nmax = 8\n\
                         [http]\nkeepalive_timeout = \"60s\"\n[status]\nenabled = true\n";

#[test]
fn two_hundred_idle_connections_hold_no_worker() {
    let site = Site::new();
    site.config("", POOL_OF_8);
    let p = Pika::start(&site, "-F");
    let mut idle = kept_alive(p.addr, 200);
    // The last answer reaches the client before its worker has put the connection
    // back among the kept-alive ones (it counts and logs the request first).
    wait_until(DEADLINE, "200 kept-alive connections on the status page", || {
        (auto_field(&status_auto(p.addr), "ConnsAsyncKeepAlive") == Some(200)).then_some(())
    });

    // A newcomer does not wait behind them: before, it waited until one of the idle
    // connections was closed to free a worker (a second under pressure).
    let t = Instant::now();
    assert_eq!(get(p.addr, "/").status, 200);
    let waited = t.elapsed();
    eprintln!("a new client beside 200 idle connections on 8 workers waited {waited:?}");
    assert!(waited < Duration::from_millis(500), "a new client waited {waited:?}");

    // None of them was closed under its client.
    assert!(all_answer_again(&mut idle).iter().all(|&open| open));
    let workers = worker_pids(&p);
    assert!(workers.len() <= 8, "{} workers", workers.len());
    for w in &workers {
        assert!(rss_kib(*w) < 64 * 1024, "worker {w} uses {} KiB", rss_kib(*w));
    }
    // 200 x 2 requests and the newcomer's, beside the status page's (asked until it
    // counted the 200: once, or more on a loaded machine).
    let lines = wait_lines(&site, 402);
    let served = lines.iter().filter(|l| !l.contains("/server-status")).count();
    assert_eq!(served, 401, "{lines:?}");
}

#[test]
fn a_reload_hands_idle_connections_to_the_new_generation() {
    let site = Site::new();
    site.config("", POOL_OF_8);
    let p = Pika::start(&site, "-F");
    let mut held = kept_alive(p.addr, 40);
    let old = worker_pids(&p);
    p.signal(libc::SIGHUP);
    // The old workers leave at once: they hold nothing a client is waiting for
    // (before, each one stayed until its connections closed or timed out).
    wait_until(DEADLINE, "the old generation to exit", || old.iter().all(|&w| !alive(w)).then_some(()));
    assert!(all_answer_again(&mut held).iter().all(|&open| open), "adopted connections stay open");
    assert_eq!(wait_lines(&site, 80).len(), 80);
    assert!(!site.error_log().contains("handover: "), "{}", site.error_log());
}

#[test]
fn the_pipe_of_death_retires_workers_that_hold_connections() {
    let site = Site::new();
    site.config(
        "",
        "[workers]\nstart = 6\nmin_spare = 0\nmax_spare = 1\nmax = 8\n[http]\nkeepalive_timeout = \"60s\"\n",
    );
    let p = Pika::start(&site, "-F");
    // Spread over several workers: each accept sends its worker to the back of the line.
    let mut held = kept_alive(p.addr, 30);
    // Idle workers above max_spare retire one a second, whatever they hold.
    wait_until(DEADLINE, "the pool to shrink to 2", || (worker_pids(&p).len() <= 2).then_some(()));
    assert!(all_answer_again(&mut held).iter().all(|&open| open));
    assert_eq!(wait_lines(&site, 60).len(), 60);
}

#[test]
fn max_requests_recycles_workers_without_closing_their_connections() {
    let site = Site::new();
    site.config(
        "",
        "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 3\nmax = 8\nmax_requests = 10\n\
         [http]\nkeepalive_timeout = \"60s\"\n",
    );
    let p = Pika::start(&site, "-F");
    let first = worker_pids(&p);
    let mut held = kept_alive(p.addr, 25);
    for _ in 0..3 {
        assert!(all_answer_again(&mut held).iter().all(|&open| open));
    }
    assert!(first.iter().any(|&w| !alive(w)), "a worker was recycled");
    assert_eq!(wait_lines(&site, 100).len(), 100);
}

#[test]
fn graceful_stop_tells_held_connections_before_closing_them() {
    let site = Site::new();
    site.config("graceful_timeout = \"30s\"", "[http]\nkeepalive_timeout = \"60s\"\n");
    let mut p = Pika::start(&site, "-F");
    let mut held = kept_alive(p.addr, 10);
    p.signal(libc::SIGQUIT);
    wait_until(DEADLINE, "the graceful stop to begin", || site.error_log().contains("graceful stop:").then_some(()));
    // Each held connection's next request is answered, and told the connection closes.
    assert!(all_answer_again(&mut held).iter().all(|&open| !open));
    for s in &mut held {
        expect_clean_close(s);
    }
    // Then nothing is left to wait for.
    assert_eq!(p.wait_exit(Duration::from_secs(10)), Some(0));
    assert_eq!(wait_lines(&site, 20).len(), 20);
}

/// Requires the peer to close cleanly (end of stream, no reset) within the deadline.
fn expect_clean_close(s: &mut TcpStream) {
    let mut rest = Vec::new();
    match s.read_to_end(&mut rest) {
        Ok(_) => assert!(rest.is_empty(), "unexpected bytes: {:?}", String::from_utf8_lossy(&rest)),
        Err(e) => panic!("not a clean close: {e}"),
    }
}

#[test]
fn a_trickling_head_holds_no_worker() {
    let site = Site::new();
    site.config("", "[workers]\nstart = 1\nmin_spare = 0\nmax_spare = 1\nmax = 1\n[http]\nheader_timeout = \"3s\"\n");
    let p = Pika::start(&site, "-F");
    let mut slow = connect(p.addr);
    slow.write_all(b"GET /slow HTTP/1.1\r\nHost: local").unwrap();
    // The only worker is free for others meanwhile.
    let t = Instant::now();
    assert_eq!(get(p.addr, "/").status, 200);
    assert!(t.elapsed() < Duration::from_millis(500), "waited {:?} behind half a head", t.elapsed());
    // The half head gets its 408 after header_timeout.
    let r = read_response(&mut slow, false).expect("a 408");
    assert_eq!(r.status, 408);
    assert!(t.elapsed() >= Duration::from_secs(2), "{:?}", t.elapsed());
}

/// Slow request bodies behind pipelined GETs, on a pool of two: no worker waits for a
/// body its location does not read, so a plain GET beside them is answered at once,
/// the watchdog stops no worker, and every request is in the access log (a worker
/// that waited in such a body would be held until the watchdog killed it, with the
/// records it held).
#[test]
fn slow_request_bodies_do_not_take_the_pool_and_every_request_is_logged() {
    let site = Site::new();
    site.config("", "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 2\nmax = 2\n[http]\nrequest_timeout = \"10s\"\n");
    let p = Pika::start(&site, "-F");
    let evil: Vec<_> = (0..3)
        .map(|c| {
            let addr = p.addr;
            std::thread::spawn(move || {
                let mut s = connect(addr);
                let mut head = String::new();
                for i in 0..5 {
                    head.push_str(&format!("GET /evil{c}{i} HTTP/1.1\r\nHost: localhost\r\n\r\n"));
                }
                head.push_str("POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 1000000\r\n\r\n");
                s.write_all(head.as_bytes()).unwrap();
                // 500 bytes a second, one at a time, for 3 seconds (the answer comes
                // long before; the writes stop when the server closes).
                let end = Instant::now() + Duration::from_secs(3);
                while Instant::now() < end && s.write_all(b"x").is_ok() {
                    std::thread::sleep(Duration::from_millis(2));
                }
                let mut statuses = Vec::new();
                for _ in 0..6 {
                    match read_response(&mut s, false) {
                        Some(r) => statuses.push(r.status),
                        None => break,
                    }
                }
                statuses
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    assert_eq!(get(p.addr, "/").status, 200);
    assert!(t.elapsed() < Duration::from_secs(1), "a plain GET waited {:?}", t.elapsed());
    for e in evil {
        let statuses = e.join().unwrap();
        assert_eq!(statuses, vec![404, 404, 404, 404, 404, 405], "five GETs and the POST answered");
    }
    // 15 GETs, 3 POSTs and the plain GET.
    let lines = wait_lines(&site, 19);
    assert_eq!(lines.iter().filter(|l| l.contains("\"GET /evil")).count(), 15, "{lines:?}");
    assert_eq!(lines.iter().filter(|l| l.contains("\"POST / ")).count(), 3, "{lines:?}");
    assert!(!site.error_log().contains("made no progress"), "{}", site.error_log());
}

#[test]
fn a_body_already_sent_is_dropped_and_the_connection_stays() {
    let site = Site::new();
    site.config("", "");
    let p = Pika::start(&site, "-F");
    let mut s = connect(p.addr);
    s.write_all(b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\nhello").unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
        .unwrap();
    s.write_all(GET).unwrap();
    let a = read_response(&mut s, false).unwrap();
    assert_eq!((a.status, a.header("connection")), (405, None));
    let b = read_response(&mut s, false).unwrap();
    assert_eq!((b.status, b.header("connection")), (200, None));
    assert_eq!(read_response(&mut s, false).unwrap().status, 200);
}

#[test]
fn a_body_not_yet_sent_is_not_waited_for() {
    let site = Site::new();
    site.config("", "");
    let p = Pika::start(&site, "-F");
    let mut s = connect(p.addr);
    // Expect: 100-continue gets the final answer at once, and no 100.
    s.write_all(b"PUT /f HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s, false).expect("an answer without the body");
    assert_eq!(r.status, 405);
    assert_eq!(r.header("connection").as_deref(), Some("close"));
    // The client sends its body anyway: the server drains a little of it and closes
    // cleanly, so the client read the answer rather than a reset.
    let _ = s.write_all(&[b'x'; 20000]);
    s.shutdown(std::net::Shutdown::Write).unwrap();
    expect_clean_close(&mut s);
}

#[test]
fn a_worker_takes_no_more_than_max_connections_and_the_pool_grows_instead() {
    let site = Site::new();
    site.config(
        "",
        "[workers]\nstart = 1\nmin_spare = 1\nmax_spare = 2\nmax = 6\nmax_connections = 4\n\
         [http]\nkeepalive_timeout = \"60s\"\n[status]\nenabled = true\n",
    );
    let p = Pika::start(&site, "-F");
    let mut held = kept_alive(p.addr, 14);
    let status = wait_until(DEADLINE, "the 14 connections in the status", || {
        let s = get(p.addr, "/server-status?json").text();
        s.contains("\"conns_keepalive\":14,").then_some(s)
    });
    // Per worker: never more than max_connections.
    let per_worker: Vec<u64> = status
        .split("\"conns_keepalive\":")
        .skip(2)
        .map(|v| v.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap())
        .collect();
    assert!(per_worker.iter().all(|&n| n <= 4), "{per_worker:?}\n{status}");
    assert!(per_worker.iter().filter(|&&n| n > 0).count() >= 4, "{per_worker:?}");
    assert!(all_answer_again(&mut held).iter().all(|&open| open));
}

/// A client that asks for a large file and reads none of it holds no worker: its
/// answer waits in its worker's set, and the same worker answers the connections
/// beside it at once. Its request is logged once, when it ends (here: the client
/// goes), with the bytes it took.
#[test]
fn a_slow_reader_does_not_hold_up_the_connections_beside_it() {
    let site = Site::new();
    std::fs::File::create(site.path("htdocs/big")).unwrap().set_len(256 << 20).unwrap();
    site.config(
        "",
        "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 3\nmax = 4\n\
         [http]\nkeepalive_timeout = \"60s\"\nsend_timeout = \"60s\"\n\
         [[access_log]]\npath = \"logs/access.log\"\nformat = \"%P %{X-Id}i %>s %O %X\"\nbuffer = 0\n",
    );
    let p = Pika::start(&site, "-F");
    // Eight kept-alive connections; the log says which worker holds which.
    let mut conns: Vec<TcpStream> = (0..8)
        .map(|n| {
            let mut s = connect(p.addr);
            s.write_all(format!("GET / HTTP/1.1\r\nHost: localhost\r\nX-Id: {n}\r\n\r\n").as_bytes()).unwrap();
            assert_eq!(read_response(&mut s, false).unwrap().status, 200);
            s
        })
        .collect();
    let lines = wait_lines(&site, 8);
    let field = |l: &str, i: usize| l.split(' ').nth(i).unwrap_or_default().to_string();
    let worker_of = |n: usize| -> i32 {
        lines.iter().find(|l| field(l, 1) == n.to_string()).and_then(|l| field(l, 0).parse().ok()).expect("a line")
    };
    // A connection whose worker holds at least one other: it asks for a large file
    // and reads none of it.
    let slow = (0..8).find(|&n| (0..8).any(|m| m != n && worker_of(m) == worker_of(n))).expect("two on one worker");
    let stuck = worker_of(slow);
    let beside: Vec<usize> = (0..8).filter(|&m| m != slow && worker_of(m) == stuck).collect();
    nix::sys::socket::setsockopt(&conns[slow], nix::sys::socket::sockopt::RcvBuf, &4096).unwrap();
    conns[slow].write_all(b"GET /big HTTP/1.1\r\nHost: localhost\r\nX-Id: slow\r\n\r\n").unwrap();
    conns[slow].set_read_timeout(Some(DEADLINE)).unwrap();
    assert!(conns[slow].peek(&mut [0u8; 1]).unwrap() > 0, "the answer began");
    let t = Instant::now();
    for &m in &beside {
        conns[m].write_all(format!("GET / HTTP/1.1\r\nHost: localhost\r\nX-Id: b{m}\r\n\r\n").as_bytes()).unwrap();
    }
    for &m in &beside {
        let r = read_response(&mut conns[m], false).expect("an answer");
        assert_eq!((r.status, r.header("connection")), (200, None), "answered on its own connection, kept alive");
    }
    let waited = t.elapsed();
    eprintln!("beside a stalled download, {} held connections were answered after {waited:?}", beside.len());
    assert!(waited < Duration::from_secs(10), "they waited {waited:?} behind the slow reader");
    let lines = wait_lines(&site, 8 + beside.len());
    for &m in &beside {
        let line = lines.iter().find(|l| field(l, 1) == format!("b{m}")).expect("logged");
        assert_eq!(field(line, 0), stuck.to_string(), "answered by the worker the slow reader is on: {line}");
    }
    assert!(!lines.iter().any(|l| field(l, 1) == "slow"), "not logged while it is being sent: {lines:?}");
    // The client goes: the write fails, and the request is logged with what went.
    drop(conns.remove(slow));
    let lines = wait_lines(&site, 9 + beside.len());
    let line = lines.iter().find(|l| field(l, 1) == "slow").expect("logged once it ended");
    let sent: u64 = field(line, 3).parse().unwrap();
    assert!(field(line, 2) == "200" && field(line, 4) == "X", "{line}");
    assert!(sent > 0 && sent < 256 << 20, "the bytes that went, not the file's size: {line}");
    assert_eq!(lines.iter().filter(|l| field(l, 1) == "slow").count(), 1, "logged once");
}

/// An answer its client takes nothing of for `send_timeout` is given up: logged once,
/// with the bytes that went and status `X`, and its connection closed; the pipelined
/// request behind it is not served. Its worker meanwhile answers everyone else.
#[test]
fn an_answer_no_one_reads_is_given_up_after_send_timeout() {
    let site = Site::new();
    let (p, slow) = an_answer_no_one_reads(&site, 1, "2s", "GET /?after HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let t = Instant::now();
    // The one worker serves others while it holds the unread answer.
    assert_eq!(get(p.addr, "/").status, 200);
    let lines = wait_lines(&site, 2);
    let big = lines.iter().find(|l| l.starts_with("GET /big ")).expect("logged once given up");
    let waited = t.elapsed();
    let fields: Vec<&str> = big.split(' ').collect();
    let sent: u64 = fields[4].parse().unwrap();
    assert_eq!((fields[3], fields[5]), ("200", "X"), "{big}");
    assert!(sent > 0 && sent < 64 << 20, "the bytes that went: {big}");
    assert!(waited >= Duration::from_millis(1500), "given up after {waited:?}, before send_timeout");
    // Closed by the server (its side past ESTABLISHED; the bytes it had sent still
    // queued for the client's 4 KiB window), and the pipelined request never read.
    let client_port = slow.local_addr().unwrap().port();
    wait_until(DEADLINE, "the server's side closed", || {
        tcp_state(p.addr.port(), client_port).filter(|&st| st != TCP_ESTABLISHED)
    });
    let lines = site.access_lines();
    assert_eq!(lines.iter().filter(|l| l.starts_with("GET /big ")).count(), 1, "{lines:?}");
    assert!(!lines.iter().any(|l| l.starts_with("GET /?after")), "{lines:?}");
}

/// A worker a reload replaces gives up an answer its client has taken nothing of for
/// 5 s, well before `send_timeout`: clients that never read cannot hold the slots the
/// new generation needs for the whole of it.
#[test]
fn a_leaving_worker_gives_up_a_stalled_answer_within_seconds() {
    let site = Site::new();
    let (p, _slow) = an_answer_no_one_reads(&site, 2, "120s", "");
    let old = n_children(p.pid, 1)[0];
    // Its answer parked, the worker serves others.
    assert_eq!(get(p.addr, "/").status, 200);
    let t = Instant::now();
    p.signal(libc::SIGHUP);
    wait_until(Duration::from_secs(40), "the old worker gone", || (!alive(old)).then_some(()));
    let gone = t.elapsed();
    assert!(gone < Duration::from_secs(30), "the leaving worker waited {gone:?} on a client that reads nothing");
    let lines = wait_lines(&site, 2);
    let big = lines.iter().find(|l| l.starts_with("GET /big ")).expect("the given-up answer logged");
    let fields: Vec<&str> = big.split(' ').collect();
    assert_eq!((fields[3], fields[5]), ("200", "X"), "{big}");
    // The new generation serves.
    assert_eq!(get(p.addr, "/").status, 200);
}

/// A pika of one worker (`max` at most) with `send_timeout`, and a client with a
/// 4 KiB receive buffer that asked for a 64 MB file (then `pipelined`) and reads
/// none of it; returned once the answer began.
fn an_answer_no_one_reads(site: &Site, max: u32, send_timeout: &str, pipelined: &str) -> (Pika, TcpStream) {
    std::fs::File::create(site.path("htdocs/big")).unwrap().set_len(64 << 20).unwrap();
    site.config(
        "",
        &format!(
            "[workers]\nstart = 1\nmin_spare = 0\nmax_spare = 1\nmax = {max}\n\
             [http]\nsend_timeout = \"{send_timeout}\"\n\
             [[access_log]]\npath = \"logs/access.log\"\nformat = \"%r %>s %O %X\"\nbuffer = 0\n"
        ),
    );
    let p = Pika::start(site, "-F");
    let mut slow = connect(p.addr);
    nix::sys::socket::setsockopt(&slow, nix::sys::socket::sockopt::RcvBuf, &4096).unwrap();
    slow.write_all(format!("GET /big HTTP/1.1\r\nHost: localhost\r\n\r\n{pipelined}").as_bytes()).unwrap();
    slow.set_read_timeout(Some(DEADLINE)).unwrap();
    assert!(slow.peek(&mut [0u8; 1]).unwrap() > 0, "the answer began");
    (p, slow)
}

const TCP_ESTABLISHED: u8 = 1;

/// The state (`/proc/net/tcp`'s `st`) of the IPv4 loopback socket from `local_port`
/// to `remote_port`.
fn tcp_state(local_port: u16, remote_port: u16) -> Option<u8> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let port = |addr: &str| u16::from_str_radix(addr.rsplit(':').next()?, 16).ok();
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (port(f.get(1)?)? == local_port && port(f.get(2)?)? == remote_port)
            .then(|| u8::from_str_radix(f[3], 16).ok())?
    })
}
