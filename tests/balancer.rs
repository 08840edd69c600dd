//! Behind a load balancer: the PROXY protocol on listeners marked for it, and the
//! client named by trusted forwarders, for logs, log filters and the status page.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use pika::http::proxy_protocol::{V2_LOCAL, v2_header};

use crate::util::*;

/// `%a` the client, `%{c}a` the socket's peer, `%h` the client again.
const FORMAT: &str = "%a %{c}a %h \\\"%r\\\" %>s";

/// A site whose one listener expects a PROXY header (`proxy` false: a plain one),
/// with `extra` server keys and `rest` tables.
fn balanced_site(proxy: bool, extra: &str, rest: &str) -> Site {
    let site = Site::new();
    site.write(
        "conf/pika.toml",
        format!(
            "[server]\nlisten = [{{ addr = \"127.0.0.1:0\", proxy_protocol = {proxy} }}]\nlog_level = \"debug\"\n{extra}\n\
             [workers]\nstart = 2\nmin_spare = 1\n[http]\nheader_timeout = \"2s\"\n{rest}\n\
             [[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n\
             [[access_log]]\npath = \"logs/access.log\"\nformat = \"{FORMAT}\"\nflush = \"100ms\"\n"
        ),
    );
    site
}

const GET: &[u8] = b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";

/// The access log once it has `n` lines.
fn access_lines(site: &Site, n: usize) -> Vec<String> {
    wait_until(DEADLINE, &format!("{n} access-log lines"), || {
        let lines = site.access_lines();
        (lines.len() >= n).then_some(lines)
    })
}

/// The line of the request for `path` (workers write in their own order).
fn line_for<'a>(lines: &'a [String], path: &str) -> &'a str {
    let key = format!("\"GET {path} ");
    lines.iter().find(|l| l.contains(&key)).unwrap_or_else(|| panic!("no line for {path}: {lines:?}"))
}

fn v2(client: &str, server: SocketAddr) -> Vec<u8> {
    v2_header(client.parse().unwrap(), server, &[0x04, 0, 3, 1, 2, 3])
}

#[test]
fn the_proxy_header_names_the_client_of_every_request() {
    let site = balanced_site(true, "", "");
    let p = Pika::start(&site, "-F");
    // v2, the header in two pieces with a pause between (it waits in the worker's set),
    // then two requests on the kept-alive connection.
    let mut s = connect(p.addr);
    let header = v2("192.0.2.7:40000", p.addr);
    s.write_all(&header[..10]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    s.write_all(&[&header[10..], GET].concat()).unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().status, 200);
    s.write_all(GET).unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().status, 200);
    // v1, with the request in the same packet.
    let r = raw(
        p.addr,
        b"PROXY TCP6 2001:db8::5 ::1 5555 80\r\nGET /v1 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(r.status, 404);
    // v2 LOCAL (a balancer's health check) and v1 UNKNOWN: the balancer itself.
    assert_eq!(raw(p.addr, &[&V2_LOCAL[..], b"GET /local HTTP/1.0\r\n\r\n"].concat()).status, 404);
    assert_eq!(raw(p.addr, b"PROXY UNKNOWN\r\nGET /unknown HTTP/1.0\r\n\r\n").status, 404);
    // Two workers write in their own order: compare sorted.
    let mut lines = access_lines(&site, 5);
    lines.sort();
    let mut want = [
        "192.0.2.7 127.0.0.1 192.0.2.7 \"GET / HTTP/1.1\" 200",
        "192.0.2.7 127.0.0.1 192.0.2.7 \"GET / HTTP/1.1\" 200",
        "2001:db8::5 127.0.0.1 2001:db8::5 \"GET /v1 HTTP/1.1\" 404",
        "127.0.0.1 127.0.0.1 127.0.0.1 \"GET /local HTTP/1.0\" 404",
        "127.0.0.1 127.0.0.1 127.0.0.1 \"GET /unknown HTTP/1.0\" 404",
    ];
    want.sort();
    assert_eq!(lines, want);
}

/// Reads until the server closes; panics on an answer or on a connection left open.
fn closed_without_answer(s: &mut TcpStream, within: Duration) {
    s.set_read_timeout(Some(within)).unwrap();
    let mut buf = Vec::new();
    match s.read_to_end(&mut buf) {
        Ok(_) => assert!(buf.is_empty(), "an answer came: {:?}", String::from_utf8_lossy(&buf)),
        // A reset is a close too (the client's unread bytes were still there).
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("not closed within {within:?}: {e}"),
    }
}

#[test]
fn a_missing_or_invalid_header_closes_the_connection_with_one_info_line() {
    let site = balanced_site(true, "", "");
    let p = Pika::start(&site, "-F");
    let cases: [(&[u8], &str); 4] = [
        (GET, "no PROXY protocol signature"),
        (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 99999\r\n", "malformed v1 line"),
        (b"\r\n\r\n\0\r\nQUIT\n\x21\x31\x00\x00", "unsupported v2 address family"),
        (b"\r\n\r\n\0\r\nQUIT\n\x21\x11\xff\xff", "v2 header longer than"),
    ];
    for (bytes, _) in &cases {
        let mut s = connect(p.addr);
        s.write_all(bytes).unwrap();
        let started = Instant::now();
        closed_without_answer(&mut s, CLOSE_WITHIN);
        assert!(started.elapsed() < Duration::from_secs(1), "closed at once, not at a timeout");
    }
    // Half a header that never ends: closed at header_timeout (2 s).
    let mut s = connect(p.addr);
    s.write_all(&v2("192.0.2.7:1", p.addr)[..20]).unwrap();
    closed_without_answer(&mut s, Duration::from_secs(6));
    let log = wait_until(DEADLINE, "five info lines", || {
        let log = site.error_log();
        (log.matches("PROXY protocol").count() >= 5).then_some(log)
    });
    for (_, why) in &cases {
        assert_eq!(log.matches(why).count(), 1, "one line for {why:?}:\n{log}");
    }
    assert!(log.contains("[info]") && log.contains("no whole PROXY protocol header within header_timeout"), "{log}");
    assert!(site.access_lines().is_empty(), "nothing was served");
    // The workers are all there: nothing crashed.
    assert_eq!(get_proxied(p.addr, "192.0.2.7:1", "/").status, 200);
}

/// A GET through a v2 header naming `client`, with `Connection: close`.
fn get_proxied(addr: SocketAddr, client: &str, path: &str) -> Resp {
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    raw(addr, &[v2(client, addr), req.into_bytes()].concat())
}

#[test]
fn the_status_page_and_log_filters_see_the_real_client() {
    let site = balanced_site(
        true,
        "",
        "[status]\nenabled = true\nallow = [\"192.0.2.0/24\"]\n\
         [[access_log]]\npath = \"logs/filtered.log\"\nformat = \"%a %U\"\nflush = \"100ms\"\nexclude = [{ client = \"198.51.100.0/24\" }]\n",
    );
    let p = Pika::start(&site, "-F");
    assert_eq!(get_proxied(p.addr, "192.0.2.7:1", "/server-status?auto").status, 200);
    assert_eq!(get_proxied(p.addr, "198.51.100.1:1", "/server-status?auto").status, 403);
    // The balancer itself (loopback, allowed by default elsewhere) is not the client.
    assert_eq!(raw(p.addr, &[&V2_LOCAL[..], b"GET /server-status HTTP/1.0\r\n\r\n"].concat()).status, 403);
    access_lines(&site, 3);
    let filtered = wait_until(DEADLINE, "the filtered log", || {
        let t = site.read("logs/filtered.log");
        (t.lines().count() >= 2).then_some(t)
    });
    let mut filtered: Vec<&str> = filtered.lines().collect();
    filtered.sort();
    assert_eq!(filtered, ["127.0.0.1 /server-status", "192.0.2.7 /server-status"]);
}

#[test]
fn forwarded_headers_count_only_from_trusted_proxies() {
    // 127.0.0.1 (this test) is trusted; the PROXY header's clients in 10/8 are too.
    let site = balanced_site(
        false,
        "trusted_proxies = [\"127.0.0.1\", \"10.0.0.0/8\"]",
        "[status]\nenabled = true\nallow = [\"203.0.113.0/24\"]\n",
    );
    let p = Pika::start(&site, "-F");
    assert_eq!(get_with(p.addr, "/server-status", "X-Forwarded-For: 203.0.113.9\r\n").status, 200);
    assert_eq!(get(p.addr, "/server-status").status, 403, "the forwarder itself is not allowed");
    get_with(p.addr, "/a", "X-Forwarded-For: 6.6.6.6, 203.0.113.9, 10.0.0.2\r\n");
    get_with(p.addr, "/b", "X-Forwarded-For: 10.0.0.3\r\nX-Forwarded-For: 10.0.0.2\r\n");
    get_with(p.addr, "/c", "Forwarded: for=203.0.113.9\r\n");
    get_with(p.addr, "/d", "X-Forwarded-For: unknown\r\n");
    let lines = access_lines(&site, 6);
    assert_eq!(line_for(&lines, "/a"), "203.0.113.9 127.0.0.1 203.0.113.9 \"GET /a HTTP/1.1\" 404");
    assert_eq!(
        line_for(&lines, "/b"),
        "10.0.0.3 127.0.0.1 10.0.0.3 \"GET /b HTTP/1.1\" 404",
        "all trusted: the leftmost"
    );
    assert_eq!(
        line_for(&lines, "/c"),
        "127.0.0.1 127.0.0.1 127.0.0.1 \"GET /c HTTP/1.1\" 404",
        "Forwarded is not the header read"
    );
    assert_eq!(line_for(&lines, "/d"), "127.0.0.1 127.0.0.1 127.0.0.1 \"GET /d HTTP/1.1\" 404");
    drop(p);

    // Behind a PROXY-protocol balancer: the header's client is the peer the list is
    // read from. An untrusted one (192.0.2.7) is the client, whatever it sends.
    let site = balanced_site(true, "trusted_proxies = [\"10.0.0.0/8\"]\nforwarded_header = \"Forwarded\"", "");
    let p = Pika::start(&site, "-F");
    let req = |path: &str| {
        format!(
            "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nForwarded: for=\"[2001:db8::9]:1\"\r\n\r\n"
        )
    };
    raw(p.addr, &[v2("10.1.1.1:1", p.addr), req("/e").into_bytes()].concat());
    raw(p.addr, &[v2("192.0.2.7:1", p.addr), req("/f").into_bytes()].concat());
    let lines = access_lines(&site, 2);
    assert_eq!(line_for(&lines, "/e"), "2001:db8::9 127.0.0.1 2001:db8::9 \"GET /e HTTP/1.1\" 404");
    assert_eq!(line_for(&lines, "/f"), "192.0.2.7 127.0.0.1 192.0.2.7 \"GET /f HTTP/1.1\" 404");
}

#[test]
fn the_health_location_answers_503_from_the_start_of_a_graceful_stop() {
    let site = balanced_site(false, "drain_time = \"2s\"", "");
    let text = site
        .read("conf/pika.toml")
        .replace("root = \"htdocs\"\n", "root = \"htdocs\"\n[[vhost.location]]\nexact = \"/healthz\"\nhealth = true\n");
    site.write("conf/pika.toml", text);
    let mut p = Pika::start(&site, "-F");
    let r = get(p.addr, "/healthz");
    assert_eq!((r.status, r.text().as_str()), (200, "ok\n"));
    assert_eq!(r.header("cache-control").as_deref(), Some("no-store"));
    // A kept-alive connection opened before the stop keeps being served.
    let mut kept = connect(p.addr);
    kept.write_all(GET).unwrap();
    assert_eq!(read_response(&mut kept, false).unwrap().status, 200);

    p.signal(libc::SIGQUIT);
    let started = Instant::now();
    wait_until(DEADLINE, "the health check to say 503", || (get(p.addr, "/healthz").status == 503).then_some(()));
    let r = get(p.addr, "/healthz");
    assert_eq!((r.status, r.text().as_str()), (503, "draining\n"));
    // Everything else is served as usual while it drains, new connections too.
    assert_eq!(get(p.addr, "/").status, 200);
    kept.write_all(GET).unwrap();
    let again = read_response(&mut kept, false).unwrap();
    assert_eq!(again.status, 200);
    assert!(started.elapsed() < Duration::from_secs(2), "still within the drain");
    assert_eq!(p.wait_exit(DEADLINE), Some(0));
    assert!(started.elapsed() >= Duration::from_secs(2), "the drain lasted drain_time");
    let log = site.error_log();
    assert!(log.contains("graceful stop: draining for 2s"), "{log}");
    // Health checks are not logged by default; the rest is.
    let lines = site.access_lines();
    assert!(lines.iter().all(|l| !l.contains("/healthz")), "{lines:?}");
    assert_eq!(lines.iter().filter(|l| l.contains("\"GET / ")).count(), 3, "{lines:?}");
}

/// A free loopback port (bound and let go: a restarted pika must find its port again).
/// A pika node behind the balancer: PROXY protocol on a fixed port, a health
/// location, a drain longer than the balancer needs to see it, and a log of the
/// client (`%a`) and the peer (`%{c}a`).
fn node(port: u16) -> Site {
    let site = Site::new();
    site.write(
        "conf/pika.toml",
        format!(
            "[server]\nlisten = [{{ addr = \"127.0.0.1:{port}\", proxy_protocol = true }}]\nlog_level = \"debug\"\n\
             drain_time = \"1500ms\"\ngraceful_timeout = \"10s\"\n\
             [workers]\nstart = 3\nmin_spare = 2\nmax_spare = 6\n[http]\nkeepalive_timeout = \"30s\"\n\
             [[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n\
             [[vhost.location]]\nexact = \"/healthz\"\nhealth = true\n\
             [[access_log]]\npath = \"logs/access.log\"\nformat = \"%a %{{c}}a \\\"%r\\\" %>s\"\nflush = \"100ms\"\n"
        ),
    );
    site
}

fn master_of(site: &Site) -> i32 {
    site.read("logs/pika.pid").trim().parse().expect("a pid file")
}

#[test]
fn haproxy_in_front_of_two_nodes_upgrade_reload_and_restart_under_load_with_no_request_failed() {
    let Some(haproxy) = need_tool("haproxy") else { return };
    let (port_a, port_b, port_h) = (free_port(), free_port(), free_port());
    let (a, b) = (node(port_a), node(port_b));
    let (_ga, _gb) = (StopAtEnd(&a), StopAtEnd(&b));
    let mut first_a = Pika::start(&a, "-F");
    let _pb = Pika::start(&b, "-F");

    // Checks every 100 ms, down after 2 failures: a node is out of rotation within
    // about 300 ms of its drain's start, well inside drain_time (1.5 s).
    let cfg = a.path("haproxy.cfg");
    std::fs::write(
        &cfg,
        format!(
            "global\n  maxconn 4000\n\
             defaults\n  mode http\n  timeout connect 2s\n  timeout client 30s\n  timeout server 30s\n\
             frontend web\n  bind 127.0.0.1:{port_h}\n  default_backend nodes\n\
             backend nodes\n  option httpchk\n  http-check send meth GET uri /healthz ver HTTP/1.1 hdr Host localhost\n\
             \x20 http-check expect status 200\n\
             \x20 default-server check inter 100ms fall 2 rise 2 send-proxy-v2 check-send-proxy\n\
             \x20 server a 127.0.0.1:{port_a}\n  server b 127.0.0.1:{port_b}\n"
        ),
    )
    .unwrap();
    let check = std::process::Command::new(&haproxy).args(["-c", "-f"]).arg(&cfg).output().unwrap();
    assert!(check.status.success(), "haproxy -c: {}", String::from_utf8_lossy(&check.stderr));
    let lb = std::process::Command::new(&haproxy)
        .args(["-db", "-f"])
        .arg(&cfg)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let _lb = KillOnDrop(lb);
    let front: SocketAddr = format!("127.0.0.1:{port_h}").parse().unwrap();
    {
        // Both nodes in rotation: each has served a request through the balancer.
        wait_until(DEADLINE, "both nodes to serve through haproxy", || {
            let _ = std::net::TcpStream::connect(front).ok().map(|mut s| {
                let _ = s.write_all(b"GET /warm HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
                let _ = s.read_to_end(&mut Vec::new());
            });
            (a.access_lines().iter().any(|l| l.contains("/warm"))
                && b.access_lines().iter().any(|l| l.contains("/warm")))
            .then_some(())
        });

        // Eight clients, 127.0.0.2 to 127.0.0.9, half kept alive, half a connection
        // per request.
        let clients: Vec<Option<std::net::IpAddr>> =
            (2..10).map(|i| Some(std::net::IpAddr::from([127, 0, 0, i as u8]))).collect();
        let load = Load::start(front, &clients, "/");
        std::thread::sleep(Duration::from_secs(1));

        // 1. A's binary upgraded (the same binary): the new master takes its sockets.
        let old_a = master_of(&a);
        first_a.signal(libc::SIGUSR2);
        let new_a = wait_until(DEADLINE, "A's new master to serve", || {
            let pid = pika::master::pidfile::running(&a.path("logs/pika.pid")).filter(|p| *p != old_a)?;
            (field(&a.status(), "current_generation_ready")? > 0).then_some(pid)
        });
        assert_eq!(first_a.wait_exit(DEADLINE), Some(0), "A's old master exits");
        std::thread::sleep(Duration::from_millis(500));

        // 2. B reloaded three times.
        for _ in 0..3 {
            let out =
                std::process::Command::new(BIN).args(["-k", "reload", "-f"]).arg(b.path("conf/pika.toml")).output();
            let out = out.unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            std::thread::sleep(Duration::from_millis(300));
        }

        // 3. A stopped gracefully (it drains first), then started again.
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(new_a), nix::sys::signal::Signal::SIGQUIT).unwrap();
        wait_until(DEADLINE, "A's master to exit", || (!alive(new_a)).then_some(()));
        let served_before = a.access_lines().len();
        let _again = Pika::start(&a, "-F");
        wait_until(DEADLINE, "A back in rotation", || (a.access_lines().len() > served_before + 20).then_some(()));
        std::thread::sleep(Duration::from_millis(500));
        let r = load.finish();
        eprintln!("through haproxy: {r:?}");
        assert_eq!(r.failed, 0, "{r:?}");
        assert!(r.ok > 2000, "thousands of requests: {r:?}");

        // Every request the clients sent is logged by a node with its client's own
        // address, and HAProxy's as the peer; none with the balancer's as the client.
        let want: Vec<String> = (2..10).map(|i| format!("127.0.0.{i}")).collect();
        let count = || {
            let mut per_client = vec![0u64; want.len()];
            for site in [&a, &b] {
                // The warm-up requests came from this test's own address.
                for l in site.access_lines().iter().filter(|l| !l.contains("/warm")) {
                    let mut f = l.split(' ');
                    let (client, peer) = (f.next().unwrap(), f.next().unwrap());
                    assert_eq!(peer, "127.0.0.1", "{l}");
                    let i =
                        want.iter().position(|w| w == client).unwrap_or_else(|| panic!("not a client's address: {l}"));
                    per_client[i] += 1;
                }
            }
            per_client
        };
        // Idle workers write the records they hold within a second or so.
        let per_client = wait_until(DEADLINE, "every request in the logs", || {
            let per_client = count();
            (per_client.iter().sum::<u64>() >= r.ok).then_some(per_client)
        });
        assert!(per_client.iter().all(|n| *n > 0), "every client logged: {per_client:?}");
        // The masters' own dummy connections (reloads, retirements) spoke the
        // PROXY protocol too: no node closed one as invalid.
        for site in [&a, &b] {
            let log = site.error_log();
            assert!(!log.contains("PROXY protocol"), "{log}");
        }
    }
}

/// A process this test started, killed (by its pid) when the test ends either way.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
