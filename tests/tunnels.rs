//! WebSockets through a proxy location: the upgrade passed to Debian's
//! python3-websockets echo server, its 101 relayed, then bytes tunnelled both ways by
//! the worker's event loop, over HTTP and HTTPS; a thousand idle tunnels that hold
//! no worker; `tunnel_timeout`; a reload and a binary upgrade with tunnels open.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// The echo server: every message comes back as it went (no pings of its own, so an
/// idle tunnel stays idle); its open-file limit raised for a thousand clients.
const SERVER: &str = r#"
import asyncio, resource, sys, websockets
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
async def echo(ws, path=None):
    async for m in ws:
        await ws.send(m)
async def main():
    async with websockets.serve(echo, "127.0.0.1", int(sys.argv[1]), ping_interval=None):
        await asyncio.Future()
asyncio.run(main())
"#;

/// The real client: text, a large text and binary messages, each echoed; prints ok.
const CLIENT: &str = r#"
import asyncio, ssl, sys, websockets
async def main():
    kw = {"ssl": ssl.create_default_context(cafile=sys.argv[2])} if sys.argv[1].startswith("wss:") else {}
    async with websockets.connect(sys.argv[1], **kw) as ws:
        for m in ["hello", "x" * 300000, bytes(range(256)) * 300]:
            await ws.send(m)
            got = await ws.recv()
            assert got == m, (len(got), len(m))
    print("ok")
asyncio.run(main())
"#;

/// Debian's python3 (not a pyenv one, which would not see Debian's modules) with
/// python3-websockets, or None (the test is skipped, as `need_tool` says).
fn python_with_websockets() -> Option<PathBuf> {
    need_tool("/usr/lib/python3/dist-packages/websockets/__init__.py")?;
    need_tool("/usr/bin/python3")
}

/// The echo server on a free port; stopped by pid.
struct Echo {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Echo {
    fn start(py: &Path) -> Echo {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("server.py"), SERVER).unwrap();
        let port = free_port();
        let child = Command::new(py)
            .arg(dir.path().join("server.py"))
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the echo server");
        wait_until(DEADLINE, "the echo server to listen", || TcpStream::connect(("127.0.0.1", port)).ok().map(drop));
        Echo { child, port, _dir: dir }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Raises this process's open-file limit to its hard limit (a thousand clients).
fn more_files() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
}

/// Asks for a WebSocket at `path` on `s` and reads the answer's head (through its
/// blank line, byte by byte: what follows is the new protocol's).
fn ws_open(s: &mut (impl Read + Write), path: &str) -> String {
    s.write_all(
        format!(
            "GET {path} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => head.push(b[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// A WebSocket on a new connection to `addr`, its 101 checked.
fn ws_connect(addr: SocketAddr, path: &str) -> TcpStream {
    let mut s = connect(addr);
    let head = ws_open(&mut s, path);
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    s
}

/// Sends one masked text frame (as a client must).
fn ws_send(s: &mut impl Write, payload: &[u8]) {
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut frame = vec![0x81];
    match payload.len() {
        n if n < 126 => frame.push(0x80 | n as u8),
        n => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
    }
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    s.write_all(&frame).unwrap();
}

/// Reads one frame from the server (unmasked): its payload.
fn ws_recv(s: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let mut h = [0u8; 2];
    s.read_exact(&mut h)?;
    let len = match h[1] & 0x7f {
        126 => {
            let mut l = [0u8; 2];
            s.read_exact(&mut l)?;
            u16::from_be_bytes(l) as usize
        }
        n => n as usize,
    };
    let mut payload = vec![0; len];
    s.read_exact(&mut payload)?;
    Ok(payload)
}

/// A message there and back.
fn ws_echo(s: &mut (impl Read + Write), text: &str) {
    ws_send(s, text.as_bytes());
    let got = ws_recv(s).unwrap_or_else(|e| panic!("no echo of {text:?}: {e}"));
    assert_eq!(String::from_utf8_lossy(&got), text);
}

/// A site passing `/ws/` to the echo server (with `extra` keys on its location),
/// `/plain/` to it with no upgrade allowed, and the status page; `rest`: tables
/// before the vhost.
fn site_for(echo: &Echo, extra: &str, rest: &str) -> Site {
    let site = Site::new();
    let up = format!("http://127.0.0.1:{}", echo.port);
    site.config(
        "",
        &format!(
            "{rest}\n[[access_log]]\npath = \"logs/access.log\"\nbuffer = 0\n\
             format = \"%r %>s %I %O %{{upstream_status}}x\"\n\
             [[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n\
             [[vhost.location]]\nprefix = \"/ws/\"\nproxy = \"{up}\"\n{extra}\n\
             [[vhost.location]]\nprefix = \"/plain/\"\nproxy = \"{up}\"\nproxy_upgrade = []\n\
             [[vhost.location]]\nexact = \"/status\"\nstatus = true\n"
        ),
    );
    site
}

/// A site like [`site_for`] with a TLS listener beside the plain one (a certificate
/// for localhost from the returned CA).
fn tls_site_for(echo: &Echo, rest: &str) -> (Site, crate::tls::test_certs::Ca) {
    let site = Site::new();
    let root = crate::tls::test_certs::ca("Test Root", -10, 3650);
    site.write("conf/ca.pem", &root.pem);
    crate::tls::test_certs::leaf(&["localhost"], -1, 90, Some(&root)).write(&site.path("conf"), "localhost");
    let up = format!("http://127.0.0.1:{}", echo.port);
    site.write(
        "conf/pika.toml",
        with_body_dir(&format!(
            "[server]\nlisten = [\"127.0.0.1:0\", {{ addr = \"127.0.0.1:0\", tls = true }}]\nlog_level = \"debug\"\n\
             {rest}\n[[access_log]]\npath = \"logs/access.log\"\nbuffer = 0\n\
             format = \"%r %>s %I %O %{{upstream_status}}x %{{SSL_PROTOCOL}}x %D\"\n\
             [[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n\
             tls_cert = \"conf/localhost.pem\"\ntls_key = \"conf/localhost.key\"\n\
             [[vhost.location]]\nprefix = \"/ws/\"\nproxy = \"{up}\"\n\
             [[vhost.location]]\nprefix = \"/plain/\"\nproxy = \"{up}\"\nproxy_upgrade = []\n"
        )),
    );
    (site, root)
}

/// The plain and the TLS listener's addresses, as the error log names them.
fn listeners(site: &Site) -> (SocketAddr, SocketAddr) {
    let addrs: Vec<SocketAddr> = site
        .error_log()
        .lines()
        .filter_map(|l| l.split("listening on ").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect();
    let [plain, tls] = addrs[..] else { panic!("two listeners: {addrs:?}") };
    (plain, tls)
}

/// A `Name: number` line of the status page's `?auto`.
fn auto(addr: SocketAddr, name: &str) -> u64 {
    let page = get(addr, "/status?auto").text();
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(": ")?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {page}"))
}

#[test]
fn websockets_echo_over_http_and_https_through_a_real_client() {
    let Some(py) = python_with_websockets() else { return };
    let echo = Echo::start(&py);
    let (site, root) = tls_site_for(&echo, "");
    let _p = Pika::start(&site, "-F");
    let (plain, tls) = listeners(&site);
    let client = site.path("client.py");
    std::fs::write(&client, CLIENT).unwrap();
    for url in [format!("ws://127.0.0.1:{}/ws/a", plain.port()), format!("wss://localhost:{}/ws/b", tls.port())] {
        let out = Command::new(&py).arg(&client).arg(&url).arg(site.path("conf/ca.pem")).output().unwrap();
        let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && said.contains("ok"), "{url}: {said}\n{}", site.error_log());
    }

    // One record for each, once it ended: the 101, the bytes both ways (300 KB
    // and 76.8 KB each way, messages not compressed: the client offers
    // permessage-deflate and the echo server takes it, so at least the head's).
    let lines = wait_until(DEADLINE, "the tunnels' records", || {
        let lines: Vec<String> = site.access_lines().into_iter().filter(|l| l.contains(" 101 ")).collect();
        (lines.len() >= 2).then_some(lines)
    });
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("GET /ws/a HTTP/1.1 101 ") && lines[0].contains(" 101 - "), "{lines:?}");
    assert!(lines[1].starts_with("GET /ws/b HTTP/1.1 101 ") && lines[1].contains(" 101 TLSv1.3 "), "{lines:?}");
    for l in &lines {
        let f: Vec<u64> = l.split(' ').skip(4).take(2).map(|n| n.parse().unwrap()).collect();
        assert!(f[0] > 300 && f[1] > 200, "bytes in and out after the request's and the head's: {l}");
        let micros: u64 = l.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(micros > 1000, "%D: the tunnel's whole life, not the 101's: {l}");
    }

    // Hand-made frames over TLS too, larger than a TLS record each way.
    let config = crate::https::client_config(&root.pem);
    let mut s = crate::https::tls_connect(tls, "localhost", &config);
    let head = ws_open(&mut s, "/ws/c");
    assert!(head.starts_with("HTTP/1.1 101 Switching Protocols\r\n"), "{head}");
    assert!(head.contains("\r\nConnection: Upgrade\r\n") && head.contains("\r\nUpgrade: websocket\r\n"), "{head}");
    assert!(head.contains("\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"), "{head}");
    let big = "y".repeat(40_000);
    for m in ["one", big.as_str(), "two"] {
        ws_echo(&mut s, m);
    }

    // No upgrade allowed there: the request goes as an ordinary one, and the echo
    // server's refusal (426) is an ordinary answer.
    let mut s = connect(plain);
    let head = ws_open(&mut s, "/plain/x");
    assert!(head.starts_with("HTTP/1.1 426 "), "{head}");

    // Passed, and refused by the upstream (no Sec-WebSocket-Key): its 400 is an
    // ordinary answer, with its body, and the connection serves on.
    let mut s = connect(plain);
    s.write_all(b"GET /ws/bad HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s, false).expect("an answer");
    assert_eq!(r.status, 400, "{}", r.head);
    assert!(r.text().contains("Sec-WebSocket-Key"), "the upstream's words: {}", r.text());
    s.write_all(b"GET /ws/after HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let r = read_response(&mut s, false).expect("the next answer on the connection");
    assert!(r.status >= 400, "an ordinary request, answered: {}", r.head);
}

#[test]
fn a_thousand_idle_websockets_hold_no_worker() {
    let Some(py) = python_with_websockets() else { return };
    more_files();
    let echo = Echo::start(&py);
    // Two workers, three at most: tunnels that held one each would stop at three.
    // A worker leaves after 100 requests (`max_requests`).
    let pool = "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 2\nmax = 3\nmax_requests = 100\n";
    let site = site_for(&echo, "", pool);
    let p = Pika::start(&site, "-F");
    let first = n_children(p.pid, 2);
    let started = Instant::now();
    let mut open: Vec<TcpStream> = (0..1000).map(|_| ws_connect(p.addr, "/ws/idle")).collect();
    eprintln!("1000 WebSockets open in {:?}", started.elapsed());
    // Requests until the first two workers have left (a tunnel counts when it
    // ends): each hands its tunnels to the others as it goes, and goes at once.
    wait_until(DEADLINE, "the first workers to leave", || {
        for _ in 0..10 {
            assert_eq!(get(p.addr, "/").status, 200);
        }
        first.iter().all(|&w| !alive(w)).then_some(())
    });
    // The pool within max_spare with all of them open.
    wait_until(DEADLINE, "the pool within max_spare, the status page counting the tunnels", || {
        let workers = field(&site.status(), "workers")?;
        (workers <= 2 && auto(p.addr, "ConnsTunnels") == 1000).then_some(())
    });
    // Each of them still carries messages, the first ones last.
    for (i, s) in open.iter_mut().enumerate().rev() {
        ws_echo(s, &format!("message {i}"));
    }
    drop(open);
    let records = || site.access_lines().iter().filter(|l| l.starts_with("GET /ws/idle HTTP/1.1 101 ")).count();
    wait_until(DEADLINE, "a record for each tunnel", || (records() >= 1000).then_some(()));
    wait_until(DEADLINE, "the tunnels to end", || (auto(p.addr, "ConnsTunnels") == 0).then_some(()));
    assert_eq!(records(), 1000, "one record each");
}

/// An open tunnel keeps its upstream counted in use for the pool (what
/// `least_conn` chooses by, and the status page's upstream line says): one while
/// it is open, none once it has ended. And the tunnels count is the status page's
/// as soon as a kept-alive connection switches, not at the worker's next accept.
#[test]
fn an_open_tunnel_keeps_its_upstream_counted_in_use() {
    let Some(py) = python_with_websockets() else { return };
    let echo = Echo::start(&py);
    let pool = "[workers]\nstart = 1\nmin_spare = 1\nmax_spare = 1\nmax = 1\n";
    let site = site_for(&echo, "", pool);
    let p = Pika::start(&site, "-F");
    let in_use = || {
        let page = get(p.addr, "/status?auto").text();
        let name = format!("Upstream: http://127.0.0.1:{} ", echo.port);
        let line = page.lines().find_map(|l| l.strip_prefix(&name).map(str::to_string));
        line.and_then(|l| l.split_whitespace().nth(2)?.parse::<u64>().ok())
    };
    // A kept-alive connection asks a plain page first, then switches.
    let mut ws = connect(p.addr);
    ws.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut ws, false).unwrap().status, 200);
    let head = ws_open(&mut ws, "/ws/busy");
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    ws_echo(&mut ws, "hello");
    assert_eq!(in_use(), Some(1), "the tunnel's upstream in use");
    assert_eq!(auto(p.addr, "ConnsTunnels"), 1);
    drop(ws);
    wait_until(DEADLINE, "the upstream free again", || (in_use() == Some(0)).then_some(()));
    assert_eq!(auto(p.addr, "ConnsTunnels"), 0);
}

#[test]
fn tunnel_timeout_closes_an_idle_tunnel_and_not_a_busy_one() {
    let Some(py) = python_with_websockets() else { return };
    let echo = Echo::start(&py);
    let site = site_for(&echo, "tunnel_timeout = \"1s\"", "");
    let p = Pika::start(&site, "-X");
    // Busy: a message every 400 ms for 3 s goes through (its silences are shorter
    // than the timeout, its life longer).
    let mut busy = ws_connect(p.addr, "/ws/busy");
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        ws_echo(&mut busy, "still here");
        std::thread::sleep(Duration::from_millis(400));
    }
    // Then idle: both sides closed within the timeout and the sweep's second.
    let began = Instant::now();
    busy.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut rest = Vec::new();
    let got = busy.read_to_end(&mut rest);
    let took = began.elapsed();
    assert!(got.is_ok() && rest.is_empty(), "closed, nothing sent: {got:?} {rest:?}");
    // Its last message was up to 400 ms before; the sweep looks once a second.
    assert!(took >= Duration::from_millis(500) && took < Duration::from_secs(6), "closed after {took:?}");
    let line = wait_until(DEADLINE, "the record", || {
        site.access_lines().into_iter().find(|l| l.starts_with("GET /ws/busy HTTP/1.1 101 "))
    });
    assert!(line.ends_with(" 101"), "{line}");
    // The upstream's side was closed too: the echo server sees its client go, and
    // a new tunnel works.
    let mut again = ws_connect(p.addr, "/ws/again");
    ws_echo(&mut again, "new");
}

/// Sends a message on each and reads it back.
fn all_echo(tunnels: &mut [TcpStream], text: &str) {
    for s in tunnels.iter_mut() {
        ws_echo(s, text);
    }
}

/// Reads to the end of each: closed cleanly (over TLS with `close_notify`), nothing
/// more sent.
fn all_closed<S: Read>(tunnels: &mut [S]) {
    for s in tunnels.iter_mut() {
        let mut rest = Vec::new();
        let got = s.read_to_end(&mut rest);
        assert!(got.is_ok() && rest.is_empty(), "closed cleanly: {got:?} {rest:?}");
    }
}

#[test]
fn a_reload_and_a_binary_upgrade_with_tunnels_open() {
    let Some(py) = python_with_websockets() else { return };
    let echo = Echo::start(&py);
    let (site, root) = tls_site_for(&echo, "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 4\n");
    let _stop = StopAtEnd(&site);
    let mut p = Pika::start(&site, "-F");
    let (plain, tls) = listeners(&site);
    let config = crate::https::client_config(&root.pem);
    let tls_tunnel = || {
        let mut s = crate::https::tls_connect(tls, "localhost", &config);
        let head = ws_open(&mut s, "/ws/tls");
        assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
        s.get_ref().set_read_timeout(Some(DEADLINE)).unwrap();
        s
    };

    // A reload: the plain tunnels go to the new generation's workers with what they
    // carry and go on; the TLS ones (their sessions are their workers') are closed
    // cleanly; the old workers leave at once, and new tunnels work.
    let mut kept: Vec<TcpStream> = (0..20).map(|_| ws_connect(plain, "/ws/kept")).collect();
    all_echo(&mut kept, "before the reload");
    let mut secure: Vec<_> = (0..5).map(|_| tls_tunnel()).collect();
    for s in secure.iter_mut() {
        ws_echo(s, "over TLS");
    }
    let workers = n_children(p.pid, 2);
    p.signal(libc::SIGHUP);
    wait_until(DEADLINE, "the old generation to exit", || workers.iter().all(|&w| !alive(w)).then_some(()));
    all_closed(&mut secure);
    all_echo(&mut kept, "after the reload");
    let mut after: Vec<TcpStream> = (0..10).map(|_| ws_connect(plain, "/ws/after")).collect();
    all_echo(&mut after, "opened after the reload");
    let mut secure_after = tls_tunnel();
    ws_echo(&mut secure_after, "over TLS after the reload");
    drop(secure_after);

    // A binary upgrade (USR2) with those open: the new master serves, the old one
    // exits by itself, its workers' plain tunnels taken by the new master's
    // workers; new tunnels work.
    p.signal(libc::SIGUSR2);
    let new = wait_until(DEADLINE, "the new master to serve", || {
        let pid = pika::master::pidfile::running(&site.path("logs/pika.pid")).filter(|&n| n != p.pid)?;
        (field(&site.status(), "current_generation_ready")? > 0).then_some(pid)
    });
    assert_eq!(p.wait_exit(DEADLINE), Some(0), "the old master exits cleanly");
    all_echo(&mut kept, "after the upgrade");
    all_echo(&mut after, "after the upgrade");
    let mut upgraded = ws_connect(plain, "/ws/upgraded");
    ws_echo(&mut upgraded, "opened after the upgrade");
    assert!(alive(new));

    // Each logged once, when it ended, by the worker that held it then.
    for s in kept.iter_mut().chain(after.iter_mut()) {
        s.shutdown(std::net::Shutdown::Write).unwrap();
    }
    all_closed(&mut kept);
    all_closed(&mut after);
    let count = |lines: &[String], path: &str| lines.iter().filter(|l| l.starts_with(&format!("GET {path} "))).count();
    let lines = wait_until(DEADLINE, "the records", || {
        let lines: Vec<String> = site.access_lines().into_iter().filter(|l| l.contains(" 101 ")).collect();
        (count(&lines, "/ws/kept") == 20 && count(&lines, "/ws/after") == 10 && count(&lines, "/ws/tls") == 6)
            .then_some(lines)
    });
    assert_eq!(lines.len(), 36, "once each: {lines:#?}");
}
