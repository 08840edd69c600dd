//! The harness: a temp site with its own config, the real `pika` binary started on
//! 127.0.0.1 port 0, raw HTTP over TCP, and waits on conditions with deadlines.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_pika");

/// Set (to anything but empty or `0`) by `.ci/run`: a test whose external tool is
/// missing fails instead of being skipped.
pub const REQUIRE_TOOLS: &str = "PIKA_TEST_REQUIRE_TOOLS";

/// The external program `tool` (a name in `tests/tools.txt`), found on `PATH`; or,
/// for a package known by a file it installs (an application, a PHP module), that
/// file, named in `tests/tools.txt` by its absolute path.
///
/// Missing: under `PIKA_TEST_REQUIRE_TOOLS=1` (as `.ci/run` runs) the test panics;
/// otherwise this returns `None` after writing a line that names the test, the tool and
/// its Debian package, and the test returns early (skipped). Use it as
/// `let Some(goaccess) = need_tool("goaccess") else { return };`.
pub fn need_tool(tool: &str) -> Option<PathBuf> {
    let package = tool_package(tool)
        .unwrap_or_else(|| panic!("{tool} is not listed in tests/tools.txt: add it with its Debian package"));
    let found = match tool.starts_with('/') {
        true => Some(PathBuf::from(tool)).filter(|p| p.exists()),
        false => on_path(tool),
    };
    if let Some(path) = found {
        return Some(path);
    }
    let test = std::thread::current().name().unwrap_or("a test").to_string();
    let why = format!("`{tool}` is not installed (Debian package {package}; .ci/run installs it)");
    if std::env::var(REQUIRE_TOOLS).is_ok_and(|v| !v.is_empty() && v != "0") {
        panic!("{why}, and {REQUIRE_TOOLS} is set");
    }
    // Straight to the file descriptor: libtest captures `eprintln!` of a passing test,
    // and a skip must be seen.
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
    None
}

/// The Debian package `tests/tools.txt` names for `tool`.
fn tool_package(tool: &str) -> Option<String> {
    let list = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/tools.txt");
    let text = std::fs::read_to_string(&list).unwrap_or_else(|e| panic!("{}: {e}", list.display()));
    text.lines().filter(|l| !l.trim_start().starts_with('#')).find_map(|l| {
        let mut words = l.split_whitespace();
        (words.next()? == tool).then(|| words.next().map(str::to_string))?
    })
}

/// `cmd` in a folder of `PATH`, if it is there and executable.
fn on_path(cmd: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(cmd))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// A port no process listens on now, for a test that must name a port before the
/// server binds it (a config another program is told). Taken below the kernel's
/// ephemeral range (32768 and up here), where the clients' own connections and every
/// bind to port 0 take theirs, so it is still free when the server binds it; each
/// call in this process gets a new one, so tests running side by side never share one.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    const FIRST: u16 = 20_000;
    const SPAN: u16 = 12_000;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = (std::process::id() % u32::from(SPAN)) as u16;
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = FIRST + (start.wrapping_add(n.wrapping_mul(7))) % SPAN;
        let tcp = std::net::TcpListener::bind(("127.0.0.1", port));
        let udp = std::net::UdpSocket::bind(("127.0.0.1", port));
        if tcp.is_ok() && udp.is_ok() {
            return port;
        }
    }
}

/// How long any wait in a test may take before it fails. Generous: CI machines are
/// small and shared.
pub const DEADLINE: Duration = Duration::from_secs(20);

/// Polls `f` until it returns `Some`, or panics with `what` after `limit`.
pub fn wait_until<T>(limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > end {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A site on disk: conf/, htdocs/, logs/ in a temp dir.
pub struct Site {
    pub dir: tempfile::TempDir,
}

impl Site {
    pub fn new() -> Site {
        let dir = tempfile::tempdir().expect("tempdir");
        for d in ["conf", "htdocs", "logs"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        let mime = Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/mime.types");
        std::fs::copy(mime, dir.path().join("conf/mime.types")).unwrap();
        std::fs::write(dir.path().join("htdocs/index.html"), "<h1>hello</h1>\n").unwrap();
        Site { dir }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn write(&self, rel: &str, data: impl AsRef<[u8]>) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, data).unwrap();
    }

    pub fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap_or_default()
    }

    /// Writes conf/pika.toml: `[server]` with port 0 and the given extra server keys,
    /// then `rest` (other tables). A default vhost and access log are added unless
    /// `rest` has its own.
    pub fn config(&self, server_extra: &str, rest: &str) -> PathBuf {
        let mut text = format!("[server]\nlisten = [\"127.0.0.1:0\"]\nlog_level = \"debug\"\n{server_extra}\n{rest}\n");
        if !rest.contains("[[vhost]]") {
            text.push_str("\n[[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n");
        }
        if !rest.contains("[[access_log]]") {
            text.push_str("\n[[access_log]]\npath = \"logs/access.log\"\nformat = \"combined\"\n");
        }
        let p = self.path("conf/pika.toml");
        std::fs::write(&p, with_body_dir(&text)).unwrap();
        p
    }

    /// The master's status file (`pika -k status`), as the master writes it.
    pub fn status(&self) -> String {
        pika::master::statusfile::read(&self.path("logs/pika.pid")).unwrap_or_default()
    }

    pub fn status_file(&self) -> PathBuf {
        pika::master::statusfile::path(&self.path("logs/pika.pid"))
    }

    pub fn error_log(&self) -> String {
        self.read("logs/error.log")
    }

    pub fn access_lines(&self) -> Vec<String> {
        self.read("logs/access.log").lines().map(str::to_string).collect()
    }
}

/// A running pika started by a test; stopped (TERM, then KILL) when dropped.
pub struct Pika {
    pub child: Child,
    pub addr: SocketAddr,
    pub pid: i32,
}

impl Pika {
    /// Starts `pika -F` (or another mode flag) on the site's config and waits until
    /// it listens and, for the master, until its first workers are ready.
    pub fn start(site: &Site, mode: &str) -> Pika {
        Pika::start_env(site, mode, &[])
    }

    /// Like [`Pika::start`], with extra environment variables.
    pub fn start_env(site: &Site, mode: &str, env: &[(&str, &str)]) -> Pika {
        let child = Command::new(BIN)
            .envs(env.iter().copied())
            .args([mode, "-f"])
            .arg(site.path("conf/pika.toml"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn pika");
        let pid = child.id() as i32;
        let mut p = Pika { child, addr: "127.0.0.1:0".parse().unwrap(), pid };
        p.addr = wait_until(DEADLINE, "pika to listen", || {
            if let Ok(Some(status)) = p.child.try_wait() {
                panic!("pika exited early ({status}); error log:\n{}", site.error_log());
            }
            listening_addr(&site.error_log())
        });
        if mode == "-F" {
            wait_until(DEADLINE, "first workers ready", || {
                let s = site.status();
                (field(&s, "workers")? > 0 && field(&s, "current_generation_ready")? == field(&s, "workers")?)
                    .then_some(())
            });
        }
        p
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY-free: libc::kill through nix.
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid), nix::sys::signal::Signal::try_from(sig).unwrap())
            .unwrap();
    }

    /// Waits for the process to exit; returns its exit code.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let end = Instant::now() + limit;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            if Instant::now() > end {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Pika {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid), nix::sys::signal::Signal::SIGTERM);
            if self.wait_exit(Duration::from_secs(10)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

/// The last "listening on ADDR" in an error log.
pub fn listening_addr(log: &str) -> Option<SocketAddr> {
    log.lines().rev().find_map(|l| l.split("listening on ").nth(1)?.split_whitespace().next()?.parse().ok())
}

/// A `key: number` field of the status file.
pub use pika::master::statusfile::field;

/// Pids of the direct children of `pid`, from /proc.
pub fn children_of(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        if ppid_of(p) == Some(pid) {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// The `n` worker processes of a master: waits until it has exactly `n` children,
/// so that a loop over them cannot pass by running zero times.
pub fn n_children(pid: i32, n: usize) -> Vec<i32> {
    wait_until(DEADLINE, &format!("{n} children of {pid}"), || {
        let c = children_of(pid);
        (c.len() == n).then_some(c)
    })
}

/// The fields of /proc/PID/stat after the command name: `[0]` is the state (field 3
/// in proc(5)), so field N of proc(5) is `[N - 3]`. None once the process is gone.
pub fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(stat[stat.rfind(')')? + 1..].split_whitespace().map(str::to_owned).collect())
}

/// The scheduling policy of a process (proc(5) field 41: 0 other, 3 batch).
pub fn sched_policy(pid: i32) -> u32 {
    stat_fields(pid).unwrap()[38].parse().unwrap()
}

pub fn ppid_of(pid: i32) -> Option<i32> {
    let f = stat_fields(pid)?;
    if f[0] == "Z" {
        return None;
    }
    f[1].parse().ok()
}

pub fn alive(pid: i32) -> bool {
    stat_fields(pid).is_some_and(|f| f[0] != "Z")
}

/// Stops the master named by the site's pid file (and an upgrade's `.oldbin`) when
/// dropped: after an upgrade or a restart it is not the process the test started.
/// Only a process whose command line names this site's config is signalled.
pub struct StopAtEnd<'a>(pub &'a Site);

impl Drop for StopAtEnd<'_> {
    fn drop(&mut self) {
        let conf = self.0.path("conf/pika.toml");
        for file in ["logs/pika.pid", "logs/pika.pid.oldbin"] {
            let Some(pid) = self.0.read(file).trim().parse::<i32>().ok() else { continue };
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if alive(pid) && String::from_utf8_lossy(&cmdline).contains(conf.to_str().unwrap()) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
            }
        }
    }
}

/// A parsed response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub head: String,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.set_write_timeout(Some(DEADLINE)).unwrap();
    s
}

/// Reads one response from a stream (a socket, or a TLS stream over one);
/// `head_request` means no body follows.
pub fn read_response(s: &mut impl Read, head_request: bool) -> Option<Resp> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => buf.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8_lossy(&buf).into_owned();
    let status: u16 = head.split_whitespace().nth(1)?.parse().ok()?;
    let mut r = Resp { status, head, body: Vec::new() };
    if head_request || status == 304 || status == 204 || (100..200).contains(&status) {
        return Some(r);
    }
    let chunked = r.header("transfer-encoding").is_some_and(|te| te.eq_ignore_ascii_case("chunked"));
    match r.header("content-length") {
        Some(n) => {
            let mut body = vec![0; n.parse().ok()?];
            s.read_exact(&mut body).ok()?;
            r.body = body;
        }
        None if chunked => r.body = read_chunked(s)?,
        None => {
            s.read_to_end(&mut r.body).ok()?;
        }
    }
    Some(r)
}

/// Reads a chunked body off `s`, decoded, up to the end of its last chunk (no
/// trailers); None if the stream ends or breaks before.
pub fn read_chunked(s: &mut impl Read) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    let line = |s: &mut dyn Read| -> Option<String> {
        let mut l = Vec::new();
        let mut byte = [0u8; 1];
        while !l.ends_with(b"\r\n") {
            match s.read(&mut byte) {
                Ok(1) => l.push(byte[0]),
                _ => return None,
            }
        }
        Some(String::from_utf8_lossy(&l[..l.len() - 2]).into_owned())
    };
    loop {
        let size = usize::from_str_radix(line(s)?.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            line(s)?;
            return Some(body);
        }
        let at = body.len();
        body.resize(at + size, 0);
        s.read_exact(&mut body[at..]).ok()?;
        if !line(s)?.is_empty() {
            return None;
        }
    }
}

/// Sends raw bytes on a new connection and reads one response.
pub fn raw(addr: SocketAddr, req: &[u8]) -> Resp {
    let mut s = connect(addr);
    s.write_all(req).unwrap();
    let head = req.starts_with(b"HEAD ");
    read_response(&mut s, head).unwrap_or_else(|| panic!("no response to {:?}", String::from_utf8_lossy(req)))
}

/// A plain GET with `Connection: close`.
pub fn get(addr: SocketAddr, path: &str) -> Resp {
    raw(addr, format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes())
}

/// GET with extra header lines (each ending in \r\n).
pub fn get_with(addr: SocketAddr, path: &str, headers: &str) -> Resp {
    raw(addr, format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n{headers}\r\n").as_bytes())
}

/// How soon a server that says it closes must have closed: well under the keep-alive
/// timeout a test leaves at its default (5 s), so a connection merely kept open fails.
pub const CLOSE_WITHIN: Duration = Duration::from_secs(3);

/// Reads what is left on `s` until the server closes it, and returns those bytes.
/// Panics unless the stream ends cleanly (end of stream, no reset) within `limit`:
/// this is how a test claims a close.
pub fn read_until_closed(s: &mut TcpStream, limit: Duration) -> Vec<u8> {
    let end = Instant::now() + limit;
    let mut out = Vec::new();
    let mut chunk = [0u8; 64 * 1024];
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            panic!("the server did not close within {limit:?} ({} bytes read)", out.len());
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut chunk) {
            Ok(0) => return out,
            Ok(n) => out.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                panic!("the server did not close within {limit:?} ({} bytes read)", out.len());
            }
            Err(e) => panic!("the connection ended with an error, not a clean close, after {} bytes: {e}", out.len()),
        }
    }
}

/// [`read_until_closed`] with nothing more to read: the server closed, cleanly and
/// within [`CLOSE_WITHIN`], and sent nothing after what was read.
pub fn assert_closed(s: &mut TcpStream, what: &str) {
    let rest = read_until_closed(s, CLOSE_WITHIN);
    assert!(rest.is_empty(), "{what}: {} bytes after the response: {:?}", rest.len(), String::from_utf8_lossy(&rest));
}

/// A load generator: threads that send GETs to `addr` until stopped (or a bound on
/// requests and time is reached), each from its own source address if given
/// (`127.0.0.x`), half of them on one kept-alive connection each (a new one only
/// after an answer that said `Connection: close`), half with a new connection per
/// request. Any request without a whole `200` answer is a failure.
pub struct Load {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<LoadResult>>,
}

#[derive(Debug, Default)]
pub struct LoadResult {
    pub ok: u64,
    pub failed: u64,
    /// The first few failures, said.
    pub errors: Vec<String>,
}

/// Most requests one load thread sends, and the longest it runs: a load test stops
/// by itself.
const LOAD_MAX_REQUESTS: u64 = 200_000;
const LOAD_MAX_TIME: Duration = Duration::from_secs(120);

impl Load {
    /// `sources`: one thread per source address (`None`: the system's choice);
    /// even threads keep their connection alive, odd ones close after each request.
    pub fn start(addr: SocketAddr, sources: &[Option<std::net::IpAddr>], path: &str) -> Load {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = sources
            .iter()
            .enumerate()
            .map(|(i, src)| {
                let (stop, src, path) = (stop.clone(), *src, path.to_string());
                std::thread::spawn(move || load_thread(addr, src, i % 2 == 0, &path, &stop))
            })
            .collect();
        Load { stop, threads }
    }

    /// Stops the threads and adds up what they saw.
    pub fn finish(self) -> LoadResult {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let mut total = LoadResult::default();
        for t in self.threads {
            let r = t.join().expect("a load thread panicked");
            total.ok += r.ok;
            total.failed += r.failed;
            total.errors.extend(r.errors.into_iter().take(5));
        }
        total
    }
}

fn load_connect(addr: SocketAddr, src: Option<std::net::IpAddr>) -> std::io::Result<TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::for_address(addr), socket2::Type::STREAM, None)?;
    if let Some(ip) = src {
        s.bind(&SocketAddr::new(ip, 0).into())?;
    }
    s.connect_timeout(&addr.into(), Duration::from_secs(5))?;
    let s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    Ok(s)
}

fn load_thread(
    addr: SocketAddr,
    src: Option<std::net::IpAddr>,
    keepalive: bool,
    path: &str,
    stop: &std::sync::atomic::AtomicBool,
) -> LoadResult {
    let mut r = LoadResult::default();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: localhost\r\n{}\r\n",
        if keepalive { "" } else { "Connection: close\r\n" }
    );
    let started = Instant::now();
    let mut conn: Option<TcpStream> = None;
    let fail = |r: &mut LoadResult, what: String| {
        r.failed += 1;
        if r.errors.len() < 5 {
            r.errors.push(what);
        }
    };
    while !stop.load(std::sync::atomic::Ordering::SeqCst)
        && r.ok + r.failed < LOAD_MAX_REQUESTS
        && started.elapsed() < LOAD_MAX_TIME
    {
        let reused = conn.is_some();
        let mut s = match conn.take() {
            Some(s) => s,
            None => match load_connect(addr, src) {
                Ok(s) => s,
                Err(e) => {
                    fail(&mut r, format!("connect: {e}"));
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
            },
        };
        if let Err(e) = s.write_all(req.as_bytes()) {
            fail(&mut r, format!("write (reused: {reused}): {e}"));
            continue;
        }
        match read_response(&mut s, false) {
            Some(resp) if resp.status == 200 => {
                r.ok += 1;
                let close = resp.header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
                if keepalive && !close {
                    conn = Some(s);
                }
            }
            Some(resp) => fail(&mut r, format!("status {} (reused: {reused})", resp.status)),
            None => fail(&mut r, format!("no whole answer (reused: {reused})")),
        }
    }
    r
}

/// Splits a chunked body off the front of `bytes` (what follows a head that said
/// `Transfer-Encoding: chunked`): the data, and what follows the last chunk. Panics
/// on a malformed one.
pub fn dechunk(mut bytes: &[u8]) -> (Vec<u8>, &[u8]) {
    let mut data = Vec::new();
    loop {
        let nl = bytes.windows(2).position(|w| w == b"\r\n").expect("a chunk-size line");
        let size = usize::from_str_radix(std::str::from_utf8(&bytes[..nl]).unwrap(), 16).expect("a hex size");
        bytes = &bytes[nl + 2..];
        if size == 0 {
            assert!(bytes.starts_with(b"\r\n"), "the end of the chunked body");
            return (data, &bytes[2..]);
        }
        data.extend_from_slice(&bytes[..size]);
        assert_eq!(&bytes[size..size + 2], b"\r\n", "a chunk ends with CRLF");
        bytes = &bytes[size + 2..];
    }
}

/// Splits a response head off the front of `bytes`: the head (as text) and the rest.
pub fn split_head(bytes: &[u8]) -> (String, &[u8]) {
    let end = bytes.windows(4).position(|w| w == b"\r\n\r\n").expect("a whole head") + 4;
    (String::from_utf8_lossy(&bytes[..end]).into_owned(), &bytes[end..])
}

/// A config that keeps request bodies in the site's `bodies` folder unless it names
/// one: not in the machine's `/var/lib/pika/bodies`, which the master would make
/// (root's, or the workers' user's) for a location that reads bodies.
pub fn with_body_dir(config: &str) -> String {
    if config.contains("body_temp_dir") {
        config.to_string()
    } else if config.contains("\n[http]\n") {
        config.replacen("\n[http]\n", "\n[http]\nbody_temp_dir = \"bodies\"\n", 1)
    } else {
        format!("{config}\n[http]\nbody_temp_dir = \"bodies\"\n")
    }
}

/// Lets `nobody` reach the site (temp dirs are 0700).
pub fn open_up(site: &Site) {
    for entry in walk(site.dir.path()) {
        let mode = if entry.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    std::fs::set_permissions(site.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
}

pub fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        }
        out.push(p);
    }
    out
}

/// Whether a TCP connection to `port` on this machine was closed by that end and
/// not yet by this one (`CLOSE_WAIT`, state 08 in /proc/net/tcp).
pub fn closed_by_peer(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let remote = format!(":{port:04X}");
    table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3 && f[2].ends_with(&remote) && f[3] == "08"
    })
}
