//! Proxy locations (`proxy = "http://…"`, `"unix:…"`) in front of Debian's gunicorn
//! running a WSGI app the test writes: the request as the upstream sees it, the
//! path mapping, bodies, kept answers that free the upstream, streamed answers,
//! kept connections, and the faults (502, 504, an answer cut).

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// The WSGI app: `/big` is 8 MiB (more than the sockets between gunicorn and pika
/// hold on loopback, about 4 MiB: an upstream that writes it waits for its reader), `/slow` sleeps 5 s, `/stream` yields a first
/// piece and waits (up to 10 s) for the file named by its query before its last,
/// `/die` sends part of a 100000-byte answer and kills its worker, `/mega` is
/// [`MEGA`] bytes (bytes 0 to 255 over and over), `/digest` answers the length and
/// SHA-256 of the body it read; anything else echoes the request as lines, a blank
/// line, then the body.
const APP: &str = r#"
import hashlib, os, time
BIG = b"x" * (8 << 20)
MEGA = bytes(range(256)) * 4096

def app(environ, start):
    path = environ["PATH_INFO"]
    if path.endswith("/big"):
        start("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(BIG)))])
        return [BIG]
    if path.endswith("/slow"):
        time.sleep(5)
        start("200 OK", [("Content-Type", "text/plain")])
        return [b"late"]
    if path.endswith("/stream"):
        flag = environ["QUERY_STRING"]
        def pieces():
            yield b"first\n"
            end = time.time() + 10
            while not os.path.exists(flag) and time.time() < end:
                time.sleep(0.05)
            yield b"last\n"
        start("200 OK", [("Content-Type", "text/plain")])
        return pieces()
    if path.endswith("/pieces"):
        def pieces():
            for i in range(16):
                yield bytes([97 + i]) * (1 << 20)
                time.sleep(0.3)
        start("200 OK", [("Content-Type", "application/octet-stream")])
        return pieces()
    if path.endswith("/diechunked"):
        def pieces():
            yield b"z" * 1000
            time.sleep(0.2)
            os._exit(1)
        start("200 OK", [("Content-Type", "text/plain")])
        return pieces()
    if path.endswith("/die"):
        def pieces():
            yield b"y" * 1000
            time.sleep(0.2)
            os._exit(1)
        start("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "100000")])
        return pieces()
    if path.endswith("/mega"):
        start("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(MEGA)))])
        return [MEGA]
    if path.endswith("/digest"):
        sha, n, given = hashlib.sha256(), 0, environ["wsgi.input"]
        while True:
            piece = given.read(1 << 16)
            if not piece:
                break
            sha.update(piece)
            n += len(piece)
        out = ("length %d\nsha256 %s\n" % (n, sha.hexdigest())).encode()
        start("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(out)))])
        return [out]
    body = environ["wsgi.input"].read()
    sock = environ.get("gunicorn.socket")
    try:
        peer = sock.getpeername()[1]
    except Exception:
        peer = "unix"
    lines = ["method " + environ["REQUEST_METHOD"], "path " + path, "query " + environ["QUERY_STRING"],
             "peer " + str(peer), "length " + environ.get("CONTENT_LENGTH", "")]
    for k, v in sorted(environ.items()):
        if k.startswith("HTTP_"):
            lines.append("header " + k[5:] + " " + v)
    out = ("\n".join(lines) + "\n\n").encode() + body
    start("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(out)))])
    return [out]
"#;

/// The length of the app's `/mega` answer: 1 MiB.
const MEGA: usize = 1 << 20;

/// A gunicorn serving [`APP`] on a TCP port and a unix socket; stopped by pid.
struct Gunicorn {
    child: Child,
    port: u16,
    sock: PathBuf,
    _dir: tempfile::TempDir,
}

impl Gunicorn {
    fn start(bin: &Path, worker_class: &str) -> Gunicorn {
        Gunicorn::start_with(bin, worker_class, "30")
    }

    /// With gunicorn's `--keep-alive` seconds (how long it keeps an idle connection).
    fn start_with(bin: &Path, worker_class: &str, keep_alive: &str) -> Gunicorn {
        Gunicorn::start_at(bin, worker_class, keep_alive, free_port())
    }

    /// On TCP port `port` (a stopped one started again where it was).
    fn start_at(bin: &Path, worker_class: &str, keep_alive: &str, port: u16) -> Gunicorn {
        Gunicorn::spawn(bin, worker_class, keep_alive, port, 2)
    }

    /// With `workers` worker processes (each answers one request at a time when sync).
    fn start_workers(bin: &Path, worker_class: &str, workers: u32) -> Gunicorn {
        Gunicorn::spawn(bin, worker_class, "30", free_port(), workers)
    }

    fn spawn(bin: &Path, worker_class: &str, keep_alive: &str, port: u16, workers: u32) -> Gunicorn {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("app.py"), APP).unwrap();
        let sock = dir.path().join("app.sock");
        let child = Command::new(bin)
            .args(["--workers", &workers.to_string()])
            .args(["--worker-class", worker_class, "--threads", "1", "--keep-alive", keep_alive])
            .args(["--timeout", "60", "--bind", &format!("127.0.0.1:{port}")])
            .arg("--bind")
            .arg(format!("unix:{}", sock.display()))
            .arg("--chdir")
            .arg(dir.path())
            .arg("--access-logfile")
            .arg(dir.path().join("access.log"))
            .arg("app:app")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn gunicorn");
        let g = Gunicorn { child, port, sock, _dir: dir };
        wait_until(DEADLINE, "gunicorn to listen", || {
            (std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() && g.sock.exists()).then_some(())
        });
        g
    }
}

impl Drop for Gunicorn {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP port on 127.0.0.1 that refuses connections for as long as the socket
/// lives: bound, never listening.
fn refusing_port() -> (socket2::Socket, u16) {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    s.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into()).unwrap();
    let port = s.local_addr().unwrap().as_socket().unwrap().port();
    (s, port)
}

/// A site whose locations pass to `g` in every way these tests need.
fn proxied(g: &Gunicorn) -> Site {
    let site = Site::new();
    let up = format!("http://127.0.0.1:{}", g.port);
    let dead = free_port();
    site.config(
        "",
        &format!(
            "[[access_log]]\npath = \"logs/json.log\"\nformat = \"json\"\n\
             [[access_log]]\npath = \"logs/access.log\"\n\
             format = \"%r %>s %{{upstream}}x %{{upstream_status}}x %{{upstream_header_time}}x %{{upstream_time}}x\"\n\
             [http]\nmax_body_size = \"4MiB\"\n[[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n\
             [[vhost.location]]\nprefix = \"/app/\"\nproxy = \"{up}\"\n\
             [[vhost.location]]\nprefix = \"/api/\"\nproxy = \"{up}/v2/\"\n\
             [[vhost.location]]\nprefix = \"/sock/\"\nproxy = \"unix:{}\"\nproxy_host = \"backend.example\"\n\
             [[vhost.location]]\nprefix = \"/stream/\"\nproxy = \"{up}\"\nproxy_buffering = false\n\
             [[vhost.location]]\nprefix = \"/short/\"\nproxy = \"{up}\"\nproxy_timeout = \"1s\"\n\
             [[vhost.location]]\nprefix = \"/down/\"\nproxy = \"http://127.0.0.1:{dead}\"\n\
             [[vhost.location]]\nprefix = \"/z/\"\nproxy = \"{up}\"\ncompress = true\ncompress_min_size = 1\n\
             [[vhost.location]]\nprefix = \"/via/\"\nproxy = \"{up}\"\nproxy_via = true\n\
             [[vhost.location]]\nprefix = \"/closed/\"\nproxy = \"{up}\"\ndeny = [\"127.0.0.0/8\"]\n\
             [[vhost.location]]\nprefix = \"/sse/\"\nproxy = \"{up}\"\nproxy_buffering = false\nproxy_timeout = \"1s\"\n",
            g.sock.display()
        ),
    );
    site
}

/// The echo's lines, up to the blank line, and the body after it.
fn echo(r: &Resp) -> (Vec<String>, Vec<u8>) {
    let at =
        r.body.windows(2).position(|w| w == b"\n\n").unwrap_or_else(|| panic!("not an echo: {} {}", r.head, r.text()));
    let lines = String::from_utf8_lossy(&r.body[..at]).lines().map(str::to_string).collect();
    (lines, r.body[at + 2..].to_vec())
}

fn has(lines: &[String], line: &str) -> bool {
    lines.iter().any(|l| l == line)
}

#[test]
fn requests_reach_gunicorn_as_nginx_passes_them() {
    let Some(bin) = need_tool("gunicorn") else { return };
    let g = Gunicorn::start(&bin, "sync");
    let site = proxied(&g);
    let p = Pika::start(&site, "-X");

    // No path in the URL: the target as sent; Host passed; the client named.
    let r = get_with(
        p.addr,
        "/app/a%20b?x=1&y=2",
        "X-Forwarded-For: 203.0.113.9\r\nX-Secret: s\r\nConnection: close, X-Secret\r\n",
    );
    assert_eq!(r.status, 200, "{}", site.error_log());
    let (l, _) = echo(&r);
    assert!(has(&l, "method GET") && has(&l, "path /app/a b") && has(&l, "query x=1&y=2"), "{l:?}");
    assert!(has(&l, "header HOST localhost"), "{l:?}");
    assert!(has(&l, "header X_FORWARDED_FOR 203.0.113.9, 127.0.0.1"), "appended: {l:?}");
    assert!(has(&l, "header X_FORWARDED_PROTO http") && has(&l, "header X_FORWARDED_HOST localhost"), "{l:?}");
    assert!(has(&l, "header FORWARDED for=127.0.0.1;host=\"localhost\";proto=http"), "{l:?}");
    assert!(!l.iter().any(|x| x.starts_with("header X_SECRET") || x.starts_with("header CONNECTION")), "{l:?}");
    assert!(r.header("server").is_some_and(|s| s.starts_with("pika")), "pika's Server, not gunicorn's: {}", r.head);

    // A HEAD: the upstream's head, no body, nothing said in the log.
    let r = raw(p.addr, b"HEAD /app/h HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 200);
    assert!(!site.error_log().contains("/app/h"), "{}", site.error_log());

    // The upstream's text answer compressed on the way out.
    let r = get_with(p.addr, "/z/x", "Accept-Encoding: gzip\r\n");
    assert_eq!(r.header("content-encoding").as_deref(), Some("gzip"), "{}", r.head);

    // proxy_via: pika named after the client's Via, and on the answer.
    let r = get_with(p.addr, "/via/x", "Via: 1.1 edge\r\n");
    let (l, _) = echo(&r);
    assert!(has(&l, "header VIA 1.1 edge, 1.1 pika"), "{l:?}");
    assert_eq!(r.header("via").as_deref(), Some("1.1 pika"), "{}", r.head);
    let (l, _) = echo(&get_with(p.addr, "/app/x", "Via: 1.1 edge\r\n"));
    assert!(has(&l, "header VIA 1.1 edge"), "passed as it came: {l:?}");

    // A path in the URL replaces the prefix.
    let (l, _) = echo(&get(p.addr, "/api/users/7?full"));
    assert!(has(&l, "path /v2/users/7") && has(&l, "query full"), "{l:?}");

    // Over a unix socket, with proxy_host.
    let (l, _) = echo(&get(p.addr, "/sock/x"));
    assert!(has(&l, "path /sock/x") && has(&l, "header HOST backend.example") && has(&l, "peer unix"), "{l:?}");

    // A 2 MB body arrives whole with its length.
    let body: Vec<u8> = (0..2_000_000u32).map(|i| (i % 251) as u8).collect();
    let mut s = connect(p.addr);
    s.write_all(
        format!(
            "POST /app/up HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .unwrap();
    s.write_all(&body).unwrap();
    let r = read_response(&mut s, false).expect("an answer to the POST");
    let (l, got) = echo(&r);
    assert!(has(&l, "method POST") && has(&l, "length 2000000"), "{l:?}");
    assert!(got == body, "the body arrived whole");

    // The rules apply before the upstream is asked: a denied client gets 403.
    let r = get(p.addr, "/closed/x");
    assert_eq!(r.status, 403, "{}", r.text());

    // Connect refused: 502, one line naming the client, the request, the upstream.
    assert_eq!(get(p.addr, "/down/x").status, 502);
    let log = site.error_log();
    let line: Vec<&str> = log.lines().filter(|l| l.contains("/down/x")).collect();
    assert_eq!(line.len(), 1, "{log}");
    assert!(line[0].contains("cannot connect") && line[0].contains("client: 127.0.0.1"), "{log}");
    assert!(line[0].contains("upstream http://127.0.0.1:") && line[0].contains("\"GET /down/x HTTP/1.1\""), "{log}");

    // Past proxy_timeout: 504, one line.
    assert_eq!(get(p.addr, "/short/slow").status, 504);
    assert!(site.error_log().contains("no answer within proxy_timeout"), "{}", site.error_log());

    // The access log names the upstream, its status and its times.
    let up = format!("http://127.0.0.1:{}", g.port);
    let lines = wait_until(DEADLINE, "the access log", || {
        let l = site.access_lines();
        l.iter().any(|l| l.starts_with("GET /short/slow ")).then_some(l)
    });
    let fields = |start: &str| -> Vec<String> {
        let line = lines.iter().find(|l| l.starts_with(start)).unwrap_or_else(|| panic!("{start}: {lines:?}"));
        line.split(' ').skip(3).map(str::to_string).collect()
    };
    let f = fields("GET /api/users/7?full ");
    assert_eq!(&f[..3], ["200", &format!("{up}/v2/"), "200"], "named as the config names it: {f:?}");
    assert!(f[3].parse::<f64>().is_ok() && f[4].parse::<f64>().is_ok(), "{f:?}");
    let f = fields("GET /down/x ");
    assert_eq!((&f[0][..], f[1].starts_with("http://127.0.0.1:"), &f[2][..], &f[3][..]), ("502", true, "-", "-"));
    let json = site.read("logs/json.log");
    let v: serde_json::Value = json
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .find(|v: &serde_json::Value| v["path"] == "/down/x")
        .unwrap();
    assert_eq!((v["status"].as_u64(), v["upstream"]["status"].is_null()), (Some(502), true), "{v}");
    assert!(
        v["upstream"]["addr"].as_str().unwrap().starts_with("http://127.0.0.1:") && v["upstream"]["time_us"].is_u64(),
        "{v}"
    );
    let f = fields("GET /short/slow ");
    assert_eq!((&f[0][..], &f[2][..], &f[3][..]), ("504", "-", "-"), "{f:?}");
    assert!(f[4].parse::<f64>().unwrap() >= 1.0, "waited proxy_timeout: {f:?}");
}

/// 4 clients that do not read the 8 MiB answer leave both sync workers free: the
/// answers are kept by pika, so a fresh request is answered at once (streamed, two
/// of them would hold both workers until their clients read).
#[test]
fn kept_answers_free_the_upstream_for_the_next_request() {
    let Some(bin) = need_tool("gunicorn") else { return };
    let g = Gunicorn::start(&bin, "sync");
    let site = proxied(&g);
    let p = Pika::start(&site, "-X");
    let mut slow = Vec::new();
    for _ in 0..4 {
        let mut s = connect(p.addr);
        s.write_all(b"GET /app/big HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
        slow.push(s);
    }
    // Each has its head: pika read its answer from the upstream.
    for s in &mut slow {
        let mut head = [0u8; 12];
        s.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 200");
    }
    let t = Instant::now();
    let r = get(p.addr, "/app/now");
    assert_eq!(r.status, 200);
    assert!(t.elapsed() < Duration::from_secs(1), "answered in {:?}", t.elapsed());
    // And they all get the whole answer as they read.
    for mut s in slow {
        let mut rest = Vec::new();
        let mut buf = [0u8; 10 * 1024];
        while rest.windows(4).all(|w| w != b"\r\n\r\n") {
            let n = s.read(&mut buf[..1]).unwrap();
            rest.extend_from_slice(&buf[..n]);
        }
        let mut body = vec![0u8; 8 << 20];
        s.read_exact(&mut body).unwrap();
        assert!(body.iter().all(|&b| b == b'x'));
    }
}

/// A 20 MB upload through a location that keeps answers (the default): pika reads
/// the body (into its temporary file past `client_body_buffer`) and gunicorn reads
/// it whole, as the length and SHA-256 it answers say.
#[test]
fn a_20_mb_upload_reaches_gunicorn_whole() {
    const UPLOAD: usize = 20_000_000;
    let Some(bin) = need_tool("gunicorn") else { return };
    let g = Gunicorn::start(&bin, "sync");
    let site = Site::new();
    site.config(
        "",
        &format!(
            "[http]\nmax_body_size = \"32MiB\"\n[[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n\
             [[vhost.location]]\nprefix = \"/app/\"\nproxy = \"http://127.0.0.1:{}\"\n",
            g.port
        ),
    );
    let p = Pika::start(&site, "-X");
    // No repeating pattern (xorshift): a piece lost, doubled or moved changes the digest.
    let mut x: u32 = 2_463_534_242;
    let body: Vec<u8> = (0..UPLOAD)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect();
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &body);
    let want: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let mut s = connect(p.addr);
    let head = format!(
        "POST /app/digest HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {UPLOAD}\r\n\r\n"
    );
    // A refusal said before the body is read may cut the write: the answer tells.
    let sent = s.write_all(head.as_bytes()).and_then(|()| s.write_all(&body));
    let r = read_response(&mut s, false).unwrap_or_else(|| panic!("no answer (write: {sent:?}): {}", site.error_log()));
    assert_eq!(r.status, 200, "{}{}\n{}", r.head, r.text(), site.error_log());
    assert_eq!(r.text(), format!("length {UPLOAD}\nsha256 {want}\n"), "what gunicorn read");
}

/// Slow clients as over slow links: a small receive buffer and Ethernet's segment
/// size each (over loopback's 64 KiB segments the kernel would keep about a
/// megabyte in each connection's sockets, and no upstream would wait on them).
const SLOW_RCVBUF: usize = 4096;
const SLOW_MSS: u32 = 1460;
const SLOW_CLIENTS: usize = 100;
/// Each slow client's pace: a piece, then a pause: about 10 KB/s.
const SLOW_PIECE: usize = 1024;
const SLOW_PAUSE: Duration = Duration::from_millis(100);
/// What each slow client reads of its answer (head and body) before it hangs up:
/// about 8 s at its pace, the slow period; the whole [`MEGA`] would take 100 s.
const SLOW_READ: usize = 80 * 1024;
/// Fresh requests spread over the first 5 s of the slow period, and the bound on
/// their 99th percentile (of 100 requests: all but the slowest).
const FRESH: usize = 100;
const FRESH_EVERY: Duration = Duration::from_millis(50);
const FRESH_P99: Duration = Duration::from_millis(100);
/// How long a fresh request may wait before it counts as not answered.
const FRESH_GIVE_UP: Duration = Duration::from_secs(5);

/// One slow client: asks for `/app/mega` and reads [`SLOW_READ`] bytes of it at its
/// pace, checking them, and counts itself in `begun` once its answer begins; Err
/// says how far it got.
fn read_slowly(addr: SocketAddr, begun: &std::sync::atomic::AtomicUsize) -> Result<(), String> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).map_err(|e| e.to_string())?;
    s.set_recv_buffer_size(SLOW_RCVBUF).map_err(|e| e.to_string())?;
    s.set_tcp_mss(SLOW_MSS).map_err(|e| e.to_string())?;
    s.connect_timeout(&addr.into(), DEADLINE).map_err(|e| e.to_string())?;
    let mut s: std::net::TcpStream = s.into();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.write_all(b"GET /app/mega HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut got = Vec::new();
    let mut piece = [0u8; SLOW_PIECE];
    while got.len() < SLOW_READ {
        match s.read(&mut piece) {
            Ok(0) => return Err(format!("closed after {} bytes", got.len())),
            Ok(n) => {
                if got.is_empty() {
                    begun.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                got.extend_from_slice(&piece[..n]);
            }
            Err(e) => return Err(format!("{e} after {} bytes", got.len())),
        }
        std::thread::sleep(SLOW_PAUSE);
    }
    let (head, body) = split_head(&got);
    if !head.starts_with("HTTP/1.1 200 ") || !head.contains(&format!("Content-Length: {MEGA}\r\n")) {
        return Err(head);
    }
    match body.iter().enumerate().position(|(i, &b)| b != i as u8) {
        Some(at) => Err(format!("byte {at} of the body is wrong")),
        None => Ok(()),
    }
}

/// A fresh request for the echo, on a connection of its own: how long it took to
/// be answered, or None past [`FRESH_GIVE_UP`].
fn fresh_request(addr: SocketAddr, i: usize) -> Option<Duration> {
    let t = Instant::now();
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(FRESH_GIVE_UP)).unwrap();
    s.write_all(format!("GET /app/fresh{i} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes())
        .ok()?;
    let r = read_response(&mut s, false)?;
    (r.status == 200 && echo(&r).0.contains(&format!("path /app/fresh{i}"))).then(|| t.elapsed())
}

/// gunicorn's 4 sync workers behind a pool of pika workers: 100 clients reading a
/// 1 MiB answer at about 10 KB/s hold none of them, as pika keeps the answers, so
/// fresh requests meanwhile are answered at once (their 99th percentile under
/// 100 ms). Streamed (`proxy_buffering = false`), four of the slow readers would
/// hold all four workers until they had read their megabyte.
///
/// gunicorn is reached on its unix socket, as it is usually bound behind a proxy:
/// a unix socket holds about 200 KiB (`net.core.wmem_default`), so a streamed
/// megabyte waits on its reader. Over loopback TCP the two sockets between
/// gunicorn and pika hold it all (up to about 4 MiB), streamed or kept, and the
/// test would tell nothing.
#[test]
fn slow_readers_of_kept_answers_leave_gunicorn_answering_others() {
    let Some(bin) = need_tool("gunicorn") else { return };
    let g = Gunicorn::start_workers(&bin, "sync", 4);
    let site = Site::new();
    site.config(
        "",
        &format!(
            "[workers]\nstart = 4\nmin_spare = 2\nmax_spare = 8\n\
             [[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n\
             [[vhost.location]]\nprefix = \"/app/\"\nproxy = \"unix:{}\"\n",
            g.sock.display()
        ),
    );
    let p = Pika::start(&site, "-F");
    let addr = p.addr;
    let begun = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let slow: Vec<_> = (0..SLOW_CLIENTS)
        .map(|_| {
            let begun = begun.clone();
            std::thread::spawn(move || read_slowly(addr, &begun))
        })
        .collect();
    // The slow period begins when every slow client has the start of its answer
    // (gunicorn has made them all: real work, which fresh requests would queue
    // behind with any proxy), or at the deadline (streamed, most never get one).
    let asked = Instant::now();
    while begun.load(std::sync::atomic::Ordering::Relaxed) < SLOW_CLIENTS && asked.elapsed() < DEADLINE {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (heads, made_in) = (begun.load(std::sync::atomic::Ordering::Relaxed), asked.elapsed());
    // The fresh requests, each at its time on a connection of its own.
    let start = Instant::now();
    let fresh: Vec<_> = (0..FRESH)
        .map(|i| {
            std::thread::sleep((start + FRESH_EVERY * i as u32).saturating_duration_since(Instant::now()));
            std::thread::spawn(move || fresh_request(addr, i))
        })
        .collect();
    let fresh: Vec<_> = fresh.into_iter().map(|t| t.join().unwrap()).collect();
    let unanswered = fresh.iter().filter(|t| t.is_none()).count();
    let mut took: Vec<Duration> = fresh.into_iter().flatten().collect();
    // What gunicorn had written whole by then, while each slow client had read
    // about 50 KB of its megabyte.
    let megas = served(&g, "/app/mega");
    let slow: Vec<_> = slow.into_iter().map(|t| t.join().unwrap()).collect();
    took.sort();
    let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
    let p99 = took.get((FRESH * 99).div_ceil(100) - 1).copied();
    let figures = format!(
        "{heads} of {SLOW_CLIENTS} slow answers begun after {made_in:.1?}; \
         {} of {FRESH} fresh requests answered; p50 {:.1} ms, p99 {}, max {:.1} ms; \
         gunicorn had written {megas} of {SLOW_CLIENTS} slow answers whole",
        took.len(),
        took.get(took.len() / 2).map_or(f64::NAN, ms),
        p99.map_or(format!("past {FRESH_GIVE_UP:?} (unanswered)"), |d| format!("{:.1} ms", ms(&d))),
        took.last().map_or(f64::NAN, ms),
    );
    eprintln!("{figures}");
    assert_eq!((heads, unanswered), (SLOW_CLIENTS, 0), "{figures}");
    assert!(p99.is_some_and(|d| d < FRESH_P99), "p99 not under {FRESH_P99:?}: {figures}");
    assert_eq!(megas, SLOW_CLIENTS, "{figures}");
    let failed: Vec<_> = slow.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(failed.is_empty(), "{} slow clients failed: {failed:?}", failed.len());
}

/// `proxy_buffering = false`: the first piece reaches the client while the upstream
/// still waits to send the last.
#[test]
fn an_unbuffered_answer_streams_as_the_upstream_sends() {
    let Some(bin) = need_tool("gunicorn") else { return };
    let g = Gunicorn::start(&bin, "sync");
    let site = proxied(&g);
    let p = Pika::start(&site, "-X");
    let flag = site.path("go");
    let mut s = connect(p.addr);
    s.write_all(
        format!("GET /stream/stream?{} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", flag.display())
            .as_bytes(),
    )
    .unwrap();
    let t = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(6).any(|w| w == b"first\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the first piece");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(t.elapsed() < Duration::from_secs(5), "first piece after {:?}", t.elapsed());
    std::fs::write(&flag, "").unwrap();
    let rest = read_until_closed(&mut s, Duration::from_secs(10));
    got.extend_from_slice(&rest);
    let (head, body) = split_head(&got);
    assert!(head.to_ascii_lowercase().contains("transfer-encoding: chunked"), "{head}");
    assert_eq!(dechunk(body).0, b"first\nlast\n");
}

/// An upstream that dies mid-answer: a streamed answer is visibly cut (short of its
/// length, the connection closed), a kept one is a 502; each said once.
#[test]
fn an_upstream_that_dies_mid_answer_leaves_a_broken_answer() {
    let Some(bin) = need_tool("gunicorn") else { return };
    let g = Gunicorn::start(&bin, "sync");
    let site = proxied(&g);
    let p = Pika::start(&site, "-X");
    let mut s = connect(p.addr);
    s.write_all(b"GET /stream/die HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let got = read_until_closed(&mut s, Duration::from_secs(10));
    let (head, body) = split_head(&got);
    assert!(head.contains("Content-Length: 100000"), "{head}");
    assert!(body.len() < 100000, "cut short and closed: {} bytes", body.len());
    wait_until(DEADLINE, "the cut said", || site.error_log().contains("answer cut").then_some(()));
    // Chunked: the client's answer lacks its last chunk, and the connection closes.
    let mut s = connect(p.addr);
    s.write_all(b"GET /stream/diechunked HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let got = read_until_closed(&mut s, Duration::from_secs(10));
    let (head, body) = split_head(&got);
    assert!(head.to_ascii_lowercase().contains("transfer-encoding: chunked"), "{head}");
    assert!(read_chunked(&mut &body[..]).is_none(), "no last chunk: {} bytes", body.len());
    let r = get(p.addr, "/app/die");
    assert_eq!(r.status, 502, "{}", r.text());
    assert!(site.error_log().contains("closed the connection before the end of its answer"), "{}", site.error_log());
}

/// Requests one after another go on one kept connection (gthread workers keep
/// connections alive; the app names the port pika's connection came from).
#[test]
fn connections_to_the_upstream_are_kept_and_reused() {
    let Some(bin) = need_tool("gunicorn") else { return };
    let g = Gunicorn::start(&bin, "gthread");
    let site = proxied(&g);
    let p = Pika::start(&site, "-X");
    let peer = |addr: SocketAddr| {
        let (l, _) = echo(&get(addr, "/app/who"));
        l.iter().find_map(|x| x.strip_prefix("peer ").map(str::to_string)).unwrap()
    };
    let first = peer(p.addr);
    for _ in 0..3 {
        assert_eq!(peer(p.addr), first, "the same upstream connection");
    }
}

/// A kept connection gunicorn closed while it was idle (its `--keep-alive`) is seen
/// closed before it is used: a POST after it goes on a new one and is answered
/// (on the closed one it would have been written, and failed: a POST is not sent twice).
#[test]
fn a_kept_connection_the_upstream_closed_is_not_used() {
    let Some(bin) = need_tool("gunicorn") else { return };
    let g = Gunicorn::start_with(&bin, "gthread", "1");
    let site = proxied(&g);
    let p = Pika::start(&site, "-X");
    for round in 0..3 {
        let mut s = connect(p.addr);
        let body = format!("round {round}");
        s.write_all(
            format!(
                "POST /app/p HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .unwrap();
        let r = read_response(&mut s, false).unwrap();
        assert_eq!(r.status, 200, "round {round}: {}\n{}", r.text(), site.error_log());
        assert_eq!(echo(&r).1, body.as_bytes());
        // gunicorn closes the connection pika kept once it has been idle a second.
        wait_until(DEADLINE, "gunicorn to close the kept connection", || closed_by_peer(g.port).then_some(()));
    }
}

/// An unbuffered answer that lasts longer than `proxy_timeout`, with its client
/// pausing longer than that too: `proxy_timeout` bounds the upstream's silences
/// (each under 1 s here), not the stream's whole life nor the client's pauses, so
/// it arrives whole (16 MiB in 16 pieces over about 5 s).
#[test]
fn a_long_stream_outlives_proxy_timeout_while_its_upstream_keeps_sending() {
    let Some(bin) = need_tool("gunicorn") else { return };
    let g = Gunicorn::start(&bin, "sync");
    let site = proxied(&g);
    let p = Pika::start(&site, "-X");
    let mut s = connect(p.addr);
    s.write_all(b"GET /sse/pieces HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    // The client reads nothing for twice proxy_timeout: pika's write waits for room
    // and the upstream waits for pika.
    std::thread::sleep(Duration::from_secs(2));
    let got = read_until_closed(&mut s, Duration::from_secs(30));
    let (head, body) = split_head(&got);
    let (body, rest) = dechunk(body);
    assert!(rest.is_empty() && body.len() == 16 << 20, "{head}\n{} bytes\n{}", body.len(), site.error_log());
    assert!(body.chunks(1 << 20).enumerate().all(|(i, c)| c.iter().all(|&b| b == 97 + i as u8)));
}

/// An upstream that answers the first request on each connection with keep-alive
/// and, on a connection's second request, notes it and closes without a word (as
/// a server closing an idle connection just as a request arrives). Each request's
/// line is noted.
fn hangs_up_on_second_requests() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let noted = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let noted = noted.clone();
            std::thread::spawn(move || {
                for n in 0.. {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        match conn.read(&mut byte) {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    let text = String::from_utf8_lossy(&head).into_owned();
                    noted.lock().unwrap().push(text.lines().next().unwrap_or("").to_string());
                    let len = text
                        .lines()
                        .find_map(|l| l.strip_prefix("Content-Length: "))
                        .map_or(0, |v| v.trim().parse().unwrap());
                    let mut body = vec![0u8; len];
                    if conn.read_exact(&mut body).is_err() || n == 1 {
                        return;
                    }
                    conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").unwrap();
                }
            });
        }
    });
    (port, seen)
}

/// A kept connection that breaks before any answer: a GET goes again, once, on a
/// new connection and is answered; a POST, written already, is not sent twice: 502.
#[test]
fn a_broken_kept_connection_is_retried_only_when_safe() {
    let (port, seen) = hangs_up_on_second_requests();
    let site = Site::new();
    site.config(
        "",
        &format!(
            "[[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n\
             [[vhost.location]]\nprefix = \"/\"\nproxy = \"http://127.0.0.1:{port}\"\n"
        ),
    );
    let p = Pika::start(&site, "-X");
    assert_eq!(get(p.addr, "/one").text(), "ok");
    let r = get(p.addr, "/two");
    assert_eq!((r.status, r.text().as_str()), (200, "ok"), "{}", site.error_log());
    let mut s = connect(p.addr);
    s.write_all(b"POST /pay HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 2\r\n\r\n10").unwrap();
    let r = read_response(&mut s, false).unwrap();
    assert_eq!(r.status, 502, "{}", r.text());
    let lines = seen.lock().unwrap().clone();
    assert_eq!(lines, ["GET /one HTTP/1.1", "GET /two HTTP/1.1", "GET /two HTTP/1.1", "POST /pay HTTP/1.1"]);
    let log = site.error_log();
    assert_eq!(log.lines().filter(|l| l.contains("POST /pay")).count(), 1, "{log}");
}

/// The requests of gunicorn `g`'s access log whose line holds `needle`.
fn served(g: &Gunicorn, needle: &str) -> usize {
    let log = std::fs::read_to_string(g._dir.path().join("access.log")).unwrap_or_default();
    log.lines().filter(|l| l.contains(needle)).count()
}

/// A site on a pool of three workers whose `/app/` passes to `upstreams` (ports),
/// with `extra` keys on that location, the status page and the metrics.
fn pooled(upstreams: &[u16], extra: &str) -> Site {
    let site = Site::new();
    let list: Vec<String> = upstreams.iter().map(|p| format!("\"http://127.0.0.1:{p}\"")).collect();
    site.config(
        "",
        &format!(
            "[workers]\nstart = 3\nmin_spare = 3\nmax_spare = 4\n[status]\nenabled = true\n\
             [[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n\
             [[vhost.location]]\nprefix = \"/app/\"\nproxy = [{}]\n{extra}\n\
             [[vhost.location]]\nexact = \"/metrics\"\nmetrics = true\n",
            list.join(", ")
        ),
    );
    site
}

/// A POST of `body` to `path`, on a connection of its own.
fn post(addr: SocketAddr, path: &str, body: &str) -> Resp {
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    raw(addr, req.as_bytes())
}

/// The value of the metrics line that starts with `series `.
fn metric(addr: SocketAddr, series: &str) -> Option<String> {
    let page = get(addr, "/metrics").text();
    page.lines().find_map(|l| Some(l.strip_prefix(series)?.strip_prefix(' ')?.to_string()))
}

/// The status page's `?auto` line of upstream port `port`, its fields after the name.
fn status_line(addr: SocketAddr, port: u16) -> Option<String> {
    let page = get(addr, "/server-status?auto").text();
    let name = format!("Upstream: http://127.0.0.1:{port} ");
    page.lines().find_map(|l| Some(l.strip_prefix(&name)?.to_string()))
}

#[test]
fn round_robin_spreads_requests_across_the_upstreams_for_the_whole_pool() {
    let Some(bin) = need_tool("gunicorn") else { return };
    let (a, b) = (Gunicorn::start(&bin, "sync"), Gunicorn::start(&bin, "sync"));
    let site = pooled(&[a.port, b.port], "");
    let p = Pika::start(&site, "-F");
    // Four clients at once, each request on a connection of its own, so several
    // workers serve them: the turn is the pool's, and each upstream takes exactly
    // one request in two.
    let addr = p.addr;
    let clients: Vec<_> = (0..4)
        .map(|c| {
            std::thread::spawn(move || (0..5).map(|i| get(addr, &format!("/app/rr{c}-{i}")).status).collect::<Vec<_>>())
        })
        .collect();
    for c in clients {
        assert_eq!(c.join().unwrap(), [200; 5], "{}", site.error_log());
    }
    wait_until(DEADLINE, "gunicorn's access logs", || {
        (served(&a, "/app/rr") + served(&b, "/app/rr") == 20).then_some(())
    });
    assert_eq!((served(&a, "/app/rr"), served(&b, "/app/rr")), (10, 10));
}

#[test]
fn least_conn_sends_requests_to_the_upstream_not_busy() {
    let Some(bin) = need_tool("gunicorn") else { return };
    let (a, b) = (Gunicorn::start(&bin, "sync"), Gunicorn::start(&bin, "sync"));
    let site = pooled(&[a.port, b.port], "proxy_balance = \"least_conn\"");
    let p = Pika::start(&site, "-F");
    // A slow request (5 s) holds a connection to one upstream, in one worker.
    let addr = p.addr;
    let slow = std::thread::spawn(move || get(addr, "/app/slow").status);
    let busy = wait_until(DEADLINE, "the slow request to hold an upstream", || {
        [a.port, b.port].into_iter().find(|&port| status_line(p.addr, port).is_some_and(|l| l.contains(" primary 1 ")))
    });
    // The other workers send every request meanwhile to the other upstream (its
    // second sync worker would answer them as well, round robin would send half).
    for i in 0..10 {
        assert_eq!(get(p.addr, &format!("/app/q{i}")).status, 200, "{}", site.error_log());
    }
    assert!(!slow.is_finished(), "the slow request still holds its upstream");
    let (held, idle) = if busy == a.port { (&a, &b) } else { (&b, &a) };
    wait_until(DEADLINE, "gunicorn's access logs", || {
        (served(&a, "/app/q") + served(&b, "/app/q") == 10).then_some(())
    });
    assert_eq!((served(held, "/app/q"), served(idle, "/app/q")), (0, 10), "none to the busy upstream");
    assert_eq!(slow.join().unwrap(), 200);
}

#[test]
fn a_stopped_upstream_fails_max_fails_tries_for_the_pool_and_no_request() {
    let Some(bin) = need_tool("gunicorn") else { return };
    let a = Gunicorn::start(&bin, "sync");
    // A stopped upstream: its port bound and never listening, so it refuses every
    // connection and nothing else can take it meanwhile (a gunicorn stopped by TERM
    // once accepted a POST there in CI, and reset it).
    let (_held, port) = refusing_port();
    let site = pooled(&[a.port, port], "proxy_max_fails = 2\nproxy_fail_timeout = \"60s\"");
    let p = Pika::start(&site, "-F");
    // GETs and POSTs, each on a connection of its own (several workers): a refused
    // connect sent nothing, so a POST goes on to the other upstream as a GET does.
    for i in 0..30 {
        let r = if i % 3 == 0 { post(p.addr, &format!("/app/post{i}"), "hello") } else { get(p.addr, "/app/get") };
        assert_eq!(r.status, 200, "request {i}: {}", site.error_log());
        if i % 3 == 0 {
            let (l, body) = echo(&r);
            assert!(has(&l, "method POST") && body == b"hello", "{l:?}");
        }
    }
    // Only the first two tries met the stopped one, whichever workers made them.
    let log = site.error_log();
    let name = format!("upstream http://127.0.0.1:{port}");
    let refused = log.lines().filter(|l| l.contains(&name) && l.contains("cannot connect")).count();
    assert_eq!(refused, 2, "{log}");
    assert_eq!(log.lines().filter(|l| l.contains(&name) && l.contains("down for 60s")).count(), 1, "said once: {log}");
}

#[test]
fn the_backup_serves_only_while_every_primary_is_down() {
    let Some(bin) = need_tool("gunicorn") else { return };
    let (a, b, c) = (Gunicorn::start(&bin, "sync"), Gunicorn::start(&bin, "sync"), Gunicorn::start(&bin, "sync"));
    let (a_port, b_port) = (a.port, b.port);
    let extra = format!("proxy_backup = \"http://127.0.0.1:{}\"\nproxy_fail_timeout = \"1s\"", c.port);
    let site = pooled(&[a.port, b.port], &extra);
    let p = Pika::start(&site, "-F");
    let ask = |tag: &str| {
        for i in 0..10 {
            let r = get(p.addr, &format!("/app/{tag}{i}"));
            assert_eq!(r.status, 200, "{tag}{i}: {}", site.error_log());
        }
    };
    ask("both-up");
    let all = |tag: &str, gs: &[&Gunicorn]| gs.iter().map(|g| served(g, tag)).sum::<usize>();
    wait_until(DEADLINE, "gunicorn's access logs", || (all("/app/both-up", &[&a, &b, &c]) == 10).then_some(()));
    assert_eq!(served(&c, "/app/both-up"), 0, "the backup unused while the primaries are up");

    drop((a, b));
    ask("none-up");
    wait_until(DEADLINE, "the backup's access log", || (served(&c, "/app/none-up") == 10).then_some(()));

    // One primary back: once it is tried again (its second of being down past), the
    // requests leave the backup.
    let a = Gunicorn::start_at(&bin, "sync", "30", a_port);
    wait_until(DEADLINE, "the primary to be used again", || {
        get(p.addr, "/app/probe");
        (served(&a, "/app/probe") > 0).then_some(())
    });
    ask("one-up");
    wait_until(DEADLINE, "gunicorn's access logs", || (all("/app/one-up", &[&a, &c]) == 10).then_some(()));
    assert_eq!(served(&c, "/app/one-up"), 0, "the backup left ({b_port} still down)");
}

#[test]
fn metrics_and_status_show_each_upstream_up_or_down() {
    let Some(bin) = need_tool("gunicorn") else { return };
    let a = Gunicorn::start(&bin, "sync");
    let dead = free_port();
    let site = pooled(&[a.port, dead], "proxy_fail_timeout = \"60s\"");
    let p = Pika::start(&site, "-F");
    let up = |port: u16| format!("pika_upstream_up{{upstream=\"http://127.0.0.1:{port}\"}}");
    assert_eq!(metric(p.addr, &up(a.port)).as_deref(), Some("1"));
    assert_eq!(metric(p.addr, &up(dead)).as_deref(), Some("1"), "up until it fails");
    assert!(
        status_line(p.addr, dead).is_some_and(|l| l.starts_with("up primary 0 0 0")),
        "{:?}",
        status_line(p.addr, dead)
    );
    for _ in 0..4 {
        assert_eq!(get(p.addr, "/app/m").status, 200, "{}", site.error_log());
    }
    assert_eq!(metric(p.addr, &up(a.port)).as_deref(), Some("1"));
    assert_eq!(metric(p.addr, &up(dead)).as_deref(), Some("0"));
    let answered = format!("pika_upstream_requests_total{{upstream=\"http://127.0.0.1:{}\",code=\"2xx\"}}", a.port);
    assert_eq!(metric(p.addr, &answered).as_deref(), Some("4"));
    let fails = format!("pika_upstream_fails_total{{upstream=\"http://127.0.0.1:{dead}\"}}");
    assert_eq!(metric(p.addr, &fails).as_deref(), Some("1"), "one try, then down for the pool");
    let conns = format!("pika_upstream_connections{{upstream=\"http://127.0.0.1:{}\"}}", a.port);
    assert_eq!(metric(p.addr, &conns).as_deref(), Some("0"));
    assert_eq!(status_line(p.addr, a.port).as_deref(), Some("up primary 0 4 0"));
    assert_eq!(status_line(p.addr, dead).as_deref(), Some("down primary 0 0 1"));
    let json = get(p.addr, "/server-status?json").text();
    assert!(json.contains(&format!("{{\"name\":\"http://127.0.0.1:{dead}\",\"up\":false,")), "{json}");
    let html = get(p.addr, "/server-status").text();
    assert!(html.contains(&format!("<td>http://127.0.0.1:{dead}</td><td>down (")), "{html}");
}

#[test]
fn a_worker_killed_holding_an_upstream_connection_gives_it_back() {
    let Some(bin) = need_tool("gunicorn") else { return };
    let (a, b) = (Gunicorn::start(&bin, "sync"), Gunicorn::start(&bin, "sync"));
    let site = pooled(&[a.port, b.port], "proxy_balance = \"least_conn\"");
    let p = Pika::start(&site, "-F");
    let mut slow = connect(p.addr);
    slow.write_all(b"GET /app/slow HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let busy = wait_until(DEADLINE, "the slow request to hold an upstream", || {
        [a.port, b.port].into_iter().find(|&port| status_line(p.addr, port).is_some_and(|l| l.contains(" primary 1 ")))
    });
    // The worker waiting on it, by the status page's row of its request.
    let json = get(p.addr, "/server-status?json").text();
    let row = json.split("{\"slot\":").find(|r| r.contains("\"request\":\"GET /app/slow")).expect("its row");
    let pid: i32 = row.split("\"pid\":").nth(1).and_then(|r| r.split(',').next()).unwrap().parse().unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    // The master takes its connection back: least connections does not shun the
    // upstream for a connection no one holds.
    wait_until(DEADLINE, "the connection given back", || {
        status_line(p.addr, busy).is_some_and(|l| l.starts_with("up primary 0 ")).then_some(())
    });
    assert!(site.error_log().contains(&format!("worker {pid} (slot")), "{}", site.error_log());
    assert!(site.error_log().contains("ended holding 1 upstream connections"), "{}", site.error_log());
    drop(slow);
}

/// An upstream that reads each request whole and hangs up without an answer; the
/// request lines it read.
fn hangs_up_unanswered() -> (u16, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let noted = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") {
                match conn.read(&mut byte) {
                    Ok(1) => head.push(byte[0]),
                    _ => break,
                }
            }
            let text = String::from_utf8_lossy(&head).into_owned();
            let len =
                text.lines().find_map(|l| l.strip_prefix("Content-Length: ")).map_or(0, |v| v.trim().parse().unwrap());
            let _ = conn.read_exact(&mut vec![0u8; len]);
            noted.lock().unwrap().push(text.lines().next().unwrap_or("").to_string());
        }
    });
    (port, seen)
}

#[test]
fn a_request_sent_to_an_upstream_that_failed_goes_on_only_if_it_may_run_twice() {
    let Some(bin) = need_tool("gunicorn") else { return };
    let g = Gunicorn::start(&bin, "sync");
    let (closer, got) = hangs_up_unanswered();
    // Never marked down: the requests keep alternating between the two.
    let site = pooled(&[closer, g.port], "proxy_max_fails = 0");
    let p = Pika::start(&site, "-F");
    for i in 0..6 {
        let r = get(p.addr, &format!("/app/get{i}"));
        assert_eq!(r.status, 200, "a GET the closer dropped goes on to gunicorn: {}", site.error_log());
        let r = post(p.addr, &format!("/app/post{i}"), "once");
        let at_closer = got.lock().unwrap().iter().any(|l| l.starts_with(&format!("POST /app/post{i} ")));
        // A POST the closer read is not sent again: 502, never run twice.
        assert_eq!(r.status, if at_closer { 502 } else { 200 }, "post{i}: {}", site.error_log());
    }
    let got = got.lock().unwrap().clone();
    let (gets, posts) =
        (got.iter().filter(|l| l.starts_with("GET ")).count(), got.iter().filter(|l| l.starts_with("POST ")).count());
    assert!(gets > 0 && posts > 0, "the closer had its turns: {got:?}");
    wait_until(DEADLINE, "gunicorn's access log", || (served(&g, "/app/get") == 6).then_some(()));
    assert_eq!(served(&g, "POST /app/post"), 6 - posts, "gunicorn ran only the POSTs the closer never read");
}
