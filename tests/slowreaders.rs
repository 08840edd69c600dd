//! Clients that stop reading (docs/slow-readers.md): many connections pipeline GETs
//! for large files, or for many small ones, and never read a byte, against a small
//! pool. A fresh client must still be answered at once, the pool must not grow to
//! its limit for them, and every answer a client received must be in the access log.
//!
//! Each test holds its attackers in one thread with non-blocking sockets (plain or
//! TLS, a small receive buffer each, as over a slow link), probes the server with
//! fresh connections meanwhile, then lets a few attackers read everything and checks
//! those answers against the log.

use std::io::{BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, StreamOwned};

use crate::https::client_config;
use crate::tls::test_certs::{ca, leaf};
use crate::util::*;

/// The pool under attack: small, so that a few stalled workers would take it all.
const POOL: &str = "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 2\nmax = 8\n";
/// `workers.max` and `min_spare` above.
const MAX_WORKERS: u64 = 8;
const MIN_SPARE: u64 = 1;
/// The most workers the status file may show busy (reading, writing, logging,
/// closing) while attacked: a probe and an attacker's turn. Attackers that hold
/// workers show them all writing, none idle.
const MOST_BUSY: u64 = 2;
/// The pool's band: `max_spare` idle workers and the few busy. A burst of attackers
/// may grow the pool for a moment (their first answers are real work); while they
/// hold their connections it must come back to this, not stay at `MAX_WORKERS`.
/// Workers told to retire are not counted: they leave once their clients are done.
const BAND: u64 = 2 + MOST_BUSY;
const _: () = assert!(BAND < MAX_WORKERS, "the band must tell a pool taken by the attackers");

/// Fresh requests made while the attackers hold their connections, each on a new
/// connection, one every `PROBE_EVERY` (so the attack is held through a few of the
/// master's one-second ticks).
const PROBES: usize = 50;
const PROBE_EVERY: Duration = Duration::from_millis(60);
/// A probe not answered whole within this is a failure.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// The probing stops after this even if not all probes were made (a server that
/// does not answer would otherwise take `PROBES` x `PROBE_TIMEOUT`).
const PROBE_PHASE: Duration = Duration::from_secs(12);
/// The probes' median must be below this. A median of many, not each one: on a
/// loaded 2-core machine a stray probe can wait for a core; a pool taken by the
/// attackers makes most of them wait `PROBE_TIMEOUT`.
const MEDIAN_BOUND: Duration = Duration::from_millis(100);

/// The attackers' receive buffer (the kernel doubles it): the server's writes stall
/// after a few kilobytes, as over a slow link.
const ATTACKER_RCVBUF: usize = 4096;
/// The attackers' segment size, as over Ethernet. Over loopback (64 KiB segments)
/// the kernel would give each server socket a send buffer of about a megabyte
/// (ten segments, twice) before a write stalls: real work for every attacker,
/// sealed under TLS, that no attacker over a real link gets.
const ATTACKER_MSS: u32 = 1460;
/// After the attackers are set up, how long the server may take to have written all
/// it can (its counters of requests and bytes still for `QUIET`).
const SETTLE_LIMIT: Duration = Duration::from_secs(30);
const QUIET: Duration = Duration::from_millis(2500);
/// How long the attackers may take to connect (and shake hands) in all. Their
/// first answers are real work (the kernel takes about a megabyte of each before
/// the write stalls, and TLS seals it), which a loaded 2-core machine spreads thin.
const SETUP_LIMIT: Duration = Duration::from_secs(60);
/// The attackers come in groups, each once the server has begun answering the one
/// before (first bytes arrive, unread), so the pool meets a steady stream rather
/// than a queue it would grow for. A server that does not answer a group within
/// `PACE_LIMIT` is not waited for again.
const PACE_GROUP: usize = 16;
const PACE_LIMIT: Duration = Duration::from_secs(2);
/// Attackers that read all their answers at the end; the others just close.
const READERS: usize = 4;
/// How long the readers may take to read everything.
const READ_LIMIT: Duration = Duration::from_secs(60);

const INDEX: &[u8] = b"<h1>hello</h1>\n";
const CLOSED: &str = "closed by the server";

/// What each attacker pipelines.
#[derive(Clone, Copy, Debug)]
enum Shape {
    /// 8 GETs for a 2 MB file.
    Big,
    /// 1,000 GETs for a 20 KB file.
    Small,
}

impl Shape {
    fn file(self) -> (&'static str, usize) {
        match self {
            Shape::Big => ("/big.bin", 2 << 20),
            Shape::Small => ("/small.bin", 20 * 1024),
        }
    }

    fn count(self) -> usize {
        match self {
            Shape::Big => 8,
            Shape::Small => 1000,
        }
    }

    /// Attacker `conn`'s pipelined requests, each tagged so its log record can be found.
    fn requests(self, conn: usize) -> Vec<u8> {
        let (path, _) = self.file();
        (0..self.count())
            .map(|r| format!("GET {path}?c={conn}&r={r} HTTP/1.1\r\nHost: localhost\r\n\r\n"))
            .collect::<String>()
            .into_bytes()
    }
}

/// One connection that sends its requests and reads nothing until told to.
struct Attacker {
    sock: TcpStream,
    tls: Option<Box<ClientConnection>>,
    requests: Vec<u8>,
    sent: usize,
    /// The server cut the connection.
    cut: bool,
}

impl Attacker {
    /// Connects (and shakes hands, for TLS) with a small receive buffer, then turns
    /// the socket non-blocking.
    fn open(addr: SocketAddr, tls: Option<&Arc<ClientConfig>>, requests: Vec<u8>) -> std::io::Result<Attacker> {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        s.set_recv_buffer_size(ATTACKER_RCVBUF)?;
        s.set_tcp_mss(ATTACKER_MSS)?;
        s.connect_timeout(&addr.into(), Duration::from_secs(5))?;
        let mut sock: TcpStream = s.into();
        sock.set_read_timeout(Some(Duration::from_secs(5)))?;
        sock.set_write_timeout(Some(Duration::from_secs(5)))?;
        let tls = match tls {
            Some(config) => {
                let name = ServerName::try_from("localhost").unwrap();
                let mut c = ClientConnection::new(config.clone(), name).map_err(std::io::Error::other)?;
                while c.is_handshaking() {
                    c.complete_io(&mut sock)?;
                }
                Some(Box::new(c))
            }
            None => None,
        };
        sock.set_nonblocking(true)?;
        Ok(Attacker { sock, tls, requests, sent: 0, cut: false })
    }

    fn has_work(&self) -> bool {
        !self.cut && self.sent < self.requests.len() || self.tls.as_ref().is_some_and(|t| t.wants_write())
    }

    /// Writes what the socket takes now. Err: the server cut the connection.
    fn push(&mut self) -> std::io::Result<()> {
        use std::io::ErrorKind::WouldBlock;
        loop {
            let rest = &self.requests[self.sent..];
            let wrote = match self.tls.as_mut() {
                None if rest.is_empty() => return Ok(()),
                None => self.sock.write(rest),
                Some(t) => {
                    if !rest.is_empty() {
                        self.sent += t.writer().write(rest)?;
                    }
                    if !t.wants_write() {
                        return Ok(());
                    }
                    t.write_tls(&mut self.sock).map(|_| 0)
                }
            };
            match wrote {
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads what has arrived into `answers`. Ok(false): the server closed.
    fn pull(&mut self, answers: &mut Answers) -> std::io::Result<bool> {
        use std::io::ErrorKind::WouldBlock;
        let mut buf = [0u8; 64 * 1024];
        loop {
            let got = match self.tls.as_mut() {
                None => self.sock.read(&mut buf),
                Some(t) => {
                    // Plaintext already decrypted first: rustls refuses more records
                    // while its plaintext buffer is full.
                    match t.reader().read(&mut buf) {
                        Ok(n) => Ok(n),
                        Err(e) if e.kind() == WouldBlock => match t.read_tls(&mut self.sock) {
                            Ok(0) => Ok(0),
                            Ok(_) => {
                                t.process_new_packets().map_err(std::io::Error::other)?;
                                continue;
                            }
                            Err(e) => Err(e),
                        },
                        Err(e) => Err(e),
                    }
                }
            };
            match got {
                Ok(0) => return Ok(false),
                Ok(n) => answers.feed(&buf[..n]),
                Err(e) if e.kind() == WouldBlock => return Ok(true),
                Err(e) => return Err(e),
            }
        }
    }
}

/// Counts whole answers in a stream of pipelined responses, each of which must be a
/// 200 with the file's length.
struct Answers {
    length: usize,
    head: Vec<u8>,
    body_left: usize,
    whole: usize,
    wrong: Option<String>,
}

impl Answers {
    fn new(length: usize) -> Answers {
        Answers { length, head: Vec::new(), body_left: 0, whole: 0, wrong: None }
    }

    fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.body_left > 0 {
                let n = self.body_left.min(data.len());
                self.body_left -= n;
                data = &data[n..];
                if self.body_left == 0 {
                    self.whole += 1;
                }
                continue;
            }
            self.head.push(data[0]);
            data = &data[1..];
            if self.head.ends_with(b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.head).into_owned();
                let length = head
                    .lines()
                    .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()));
                if !head.starts_with("HTTP/1.1 200 ") || length != Some(self.length.to_string()) {
                    self.wrong
                        .get_or_insert(format!("answer {} is not a 200 of {} bytes: {head}", self.whole, self.length));
                }
                self.body_left = self.length;
                self.head.clear();
            }
        }
    }
}

/// Writes what the attackers can send until `until`, waiting for their sockets to
/// take more. Returns how many the server cut meanwhile.
fn push_all(attackers: &mut [Attacker], until: Instant) -> usize {
    let mut cut = 0;
    loop {
        for a in attackers.iter_mut().filter(|a| a.has_work()) {
            if a.push().is_err() {
                a.cut = true;
                cut += 1;
            }
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return cut;
        }
        let mut fds: Vec<PollFd> = attackers
            .iter()
            .filter(|a| a.has_work())
            .map(|a| PollFd::new(a.sock.as_fd(), PollFlags::POLLOUT))
            .collect();
        let _ = poll(&mut fds, PollTimeout::from(u16::try_from(left.as_millis()).unwrap_or(u16::MAX)));
    }
}

/// Waits until the server has written all it can to the attackers: the status
/// file's counts of requests and bytes unchanged for `QUIET` (two of the master's
/// ticks). Returns how long that took, counting the quiet time.
fn settle(site: &Site) -> Duration {
    let start = Instant::now();
    let counts = || {
        let s = site.status();
        (field(&s, "requests"), field(&s, "bytes"))
    };
    let (mut last, mut since) = (counts(), Instant::now());
    while since.elapsed() < QUIET {
        assert!(start.elapsed() < SETTLE_LIMIT, "the server still wrote to the attackers after {SETTLE_LIMIT:?}");
        std::thread::sleep(Duration::from_millis(100));
        let now = counts();
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    start.elapsed()
}

/// Waits until each of `group` has something to read (left unread), or `until`.
fn first_bytes(group: &[Attacker], until: Instant) -> bool {
    let mut waiting: Vec<&Attacker> = group.iter().collect();
    while !waiting.is_empty() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let mut fds: Vec<PollFd> = waiting.iter().map(|a| PollFd::new(a.sock.as_fd(), PollFlags::POLLIN)).collect();
        let _ = poll(&mut fds, PollTimeout::from(u16::try_from(left.as_millis()).unwrap_or(u16::MAX)));
        let answered: Vec<bool> = fds.iter().map(|f| f.revents().is_some_and(|r| !r.is_empty())).collect();
        drop(fds);
        waiting = waiting.into_iter().zip(answered).filter(|(_, a)| !a).map(|(w, _)| w).collect();
    }
    true
}

/// One fresh request on a new connection: how long it took to be answered whole.
fn probe(addr: SocketAddr, tls: Option<&Arc<ClientConfig>>, k: usize) -> Result<Duration, String> {
    let t = Instant::now();
    let sock = TcpStream::connect_timeout(&addr, PROBE_TIMEOUT).map_err(|e| format!("connect: {e}"))?;
    sock.set_read_timeout(Some(PROBE_TIMEOUT)).unwrap();
    sock.set_write_timeout(Some(PROBE_TIMEOUT)).unwrap();
    let req = format!("GET /index.html?probe={k} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let resp = match tls {
        None => {
            let mut s = BufReader::new(sock);
            s.get_mut().write_all(req.as_bytes()).map_err(|e| format!("write: {e}"))?;
            read_response(&mut s, false)
        }
        Some(config) => {
            let name = ServerName::try_from("localhost").unwrap();
            let c = ClientConnection::new(config.clone(), name).unwrap();
            let mut s = StreamOwned::new(c, sock);
            s.write_all(req.as_bytes()).map_err(|e| format!("handshake or write: {e}"))?;
            read_response(&mut s, false)
        }
    };
    let took = t.elapsed();
    match resp {
        None => Err(format!("no whole answer after {took:?}")),
        Some(r) if r.status != 200 || r.body != INDEX => Err(format!("status {} after {took:?}", r.status)),
        Some(_) if took > PROBE_TIMEOUT => Err(format!("answered after {took:?}")),
        Some(_) => Ok(took),
    }
}

/// Raises this process's soft open-file limit to at least `need` (up to the hard one).
fn raise_nofile(need: u64) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    if soft < need {
        assert!(hard >= need, "the tests need {need} open files; the hard limit is {hard}");
        setrlimit(Resource::RLIMIT_NOFILE, need, hard).unwrap();
    }
}

/// The pool as the status file's `states:` line has it.
#[derive(Debug, Default, Clone, Copy)]
struct Pool {
    /// Ready (or starting: a worker forked a tick ago counts as idle).
    idle: u64,
    /// Reading, writing, logging or closing.
    busy: u64,
    /// Told to leave, finishing what it holds.
    retiring: u64,
}

impl Pool {
    fn of(status: &str) -> Pool {
        let mut pool = Pool::default();
        let states = status.lines().find_map(|l| l.strip_prefix("states: ")).unwrap_or("");
        for (state, n) in states.split(", ").filter_map(|s| s.split_once(' ')) {
            let n: u64 = n.parse().unwrap_or(0);
            match state {
                "ready" | "starting" => pool.idle += n,
                "reading" | "writing" | "logging" | "closing" => pool.busy += n,
                "graceful" => pool.retiring += n,
                _ => {}
            }
        }
        pool
    }
}

fn median(sorted: &[Duration]) -> Duration {
    sorted.get(sorted.len() / 2).copied().unwrap_or(Duration::MAX)
}

/// `conns` attackers of `shape` (over TLS if `tls`) against the small pool, probes
/// meanwhile, then the readers' answers against the access log.
fn hold_and_probe(conns: usize, shape: Shape, tls: bool) {
    // One at a time: 500 attackers being set up (handshakes, first answers) take
    // the machine's two cores for seconds, and another case's probes measured then
    // would time the machine, not the server.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // The attackers, the probes, and whatever else the test binary runs beside.
    raise_nofile(conns as u64 + 512);
    let site = Site::new();
    let (_, length) = shape.file();
    site.write("htdocs/index.html", INDEX);
    site.write("htdocs/big.bin", (0..2u32 << 20).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    site.write("htdocs/small.bin", (0..20 * 1024u32).map(|i| (i % 241) as u8).collect::<Vec<u8>>());
    let (listen, vhost_tls, client) = if tls {
        let root = ca("Test Root", -10, 3650);
        leaf(&["localhost"], -1, 90, Some(&root)).write(&site.path("conf"), "localhost");
        (
            "{ addr = \"127.0.0.1:0\", tls = true }",
            "tls_cert = \"conf/localhost.pem\"\ntls_key = \"conf/localhost.key\"\n",
            Some(client_config(&root.pem)),
        )
    } else {
        ("\"127.0.0.1:0\"", "", None)
    };
    site.write(
        "conf/pika.toml",
        format!(
            "[server]\nlisten = [{listen}]\n{POOL}\
             [[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n{vhost_tls}\
             [[access_log]]\npath = \"logs/access.log\"\nformat = \"%r %>s %b\"\n"
        ),
    );
    let p = Pika::start(&site, "-F");
    let client = client.as_ref();

    // The attack: every connection made, each with its requests on the way.
    let setup = Instant::now();
    let mut attackers = Vec::with_capacity(conns);
    let mut refused = Vec::new();
    let mut paced = true;
    for c in 0..conns {
        if setup.elapsed() > SETUP_LIMIT {
            refused.push(format!("{} not tried: setup took over {SETUP_LIMIT:?}", conns - c));
            break;
        }
        match Attacker::open(p.addr, client, shape.requests(c)) {
            Ok(mut a) => {
                let _ = a.push();
                attackers.push(a);
            }
            Err(e) => refused.push(format!("attacker {c}: {e}")),
        }
        if paced && (attackers.len() % PACE_GROUP == 0 || c + 1 == conns) {
            let group = &attackers[attackers.len().saturating_sub(PACE_GROUP)..];
            paced = first_bytes(group, Instant::now() + PACE_LIMIT);
        }
    }
    let setup_took = setup.elapsed();
    // The server writes to each attacker until its socket is full, then waits.
    let settled = settle(&site);

    // Fresh clients meanwhile, and the pool's size at each.
    let mut waits = Vec::new();
    let mut failures = Vec::new();
    let mut answered = Vec::new();
    let mut most_workers = 0;
    let mut most_busy = 0;
    let mut least_idle = u64::MAX;
    let mut cut = 0;
    let phase = Instant::now();
    for k in 0..PROBES {
        if phase.elapsed() > PROBE_PHASE {
            break;
        }
        let next = Instant::now() + PROBE_EVERY;
        match probe(p.addr, client, k) {
            Ok(took) => {
                waits.push(took);
                answered.push(k);
            }
            Err(e) => {
                failures.push(format!("probe {k}: {e}"));
                waits.push(PROBE_TIMEOUT);
            }
        }
        most_workers = most_workers.max(children_of(p.pid).len());
        let pool = Pool::of(&site.status());
        most_busy = most_busy.max(pool.busy);
        least_idle = least_idle.min(pool.idle);
        cut += push_all(&mut attackers, next);
    }
    let held = phase.elapsed();
    waits.sort();
    let figures = format!(
        "{conns} {} attackers ({shape:?}): {} set up in {setup_took:?}, quiet after {settled:?}; \
         {} probes over {held:?}: {} failed, \
         median {:?}, slowest {:?}; pool: at most {most_workers} workers, {most_busy} busy, at least {least_idle} idle; {cut} attackers cut",
        if tls { "TLS" } else { "plain" },
        attackers.len(),
        waits.len(),
        failures.len(),
        median(&waits),
        waits.last().copied().unwrap_or_default(),
    );
    eprintln!("{figures}");
    assert!(failures.is_empty(), "{figures}\nfailed probes: {failures:?}");
    assert_eq!(waits.len(), PROBES, "{figures}");
    assert!(median(&waits) < MEDIAN_BOUND, "{figures}");
    assert!(refused.is_empty(), "{figures}\nattackers not set up: {refused:?}");
    assert!(
        most_busy <= MOST_BUSY && least_idle >= MIN_SPARE,
        "the attackers hold workers: {figures}\n{}",
        site.status()
    );
    // Still attacked: the pool sheds what a burst grew (one worker a second).
    let back = Instant::now() + DEADLINE;
    let mut pool = Pool::of(&site.status());
    while pool.idle + pool.busy > BAND {
        assert!(Instant::now() < back, "the pool stayed past its band: {pool:?}; {figures}\n{}", site.status());
        std::thread::sleep(Duration::from_millis(50));
        pool = Pool::of(&site.status());
    }
    eprintln!("the pool back in its band while attacked: {pool:?}");
    let log = site.error_log();
    assert!(!log.contains("reached workers.max"), "{figures}\n{log}");

    // The end: the readers read every answer; the others leave (the server sees a
    // reset at its next write).
    attackers.truncate(READERS);
    let mut answers: Vec<Answers> = attackers.iter().map(|_| Answers::new(length)).collect();
    // Why a reader stopped before its last answer (the server closed, or an error).
    let mut ended: Vec<Option<String>> = attackers.iter().map(|_| None).collect();
    for a in &attackers {
        let _ = socket2::SockRef::from(&a.sock).set_recv_buffer_size(1 << 20);
    }
    let end = Instant::now() + READ_LIMIT;
    while answers.iter().zip(&ended).any(|(n, e)| e.is_none() && n.whole < shape.count()) {
        assert!(
            Instant::now() < end,
            "the readers took over {READ_LIMIT:?}: {} answers",
            answers.iter().map(|n| n.whole).sum::<usize>()
        );
        for (i, a) in attackers.iter_mut().enumerate() {
            if ended[i].is_some() {
                continue;
            }
            let _ = a.push();
            match a.pull(&mut answers[i]) {
                Ok(true) => {}
                Ok(false) => ended[i] = Some(CLOSED.into()),
                Err(e) => ended[i] = Some(e.to_string()),
            }
        }
        let mut fds: Vec<PollFd> = attackers
            .iter()
            .zip(&ended)
            .filter(|(_, e)| e.is_none())
            .map(|(a, _)| {
                let out = if a.has_work() { PollFlags::POLLOUT } else { PollFlags::empty() };
                PollFd::new(a.sock.as_fd(), PollFlags::POLLIN | out)
            })
            .collect();
        let _ = poll(&mut fds, PollTimeout::from(100u16));
    }
    // A server may close a kept-alive connection between answers (a worker that
    // retires does), and the client sends the rest again: never inside an answer.
    for (i, n) in answers.iter().enumerate() {
        assert_eq!(n.wrong, None, "reader {i}");
        let between = n.head.is_empty() && n.body_left == 0;
        assert!(
            n.whole == shape.count() || (ended[i].as_deref() == Some(CLOSED) && between && n.whole > 0),
            "reader {i}: {:?} after {} whole answers (inside one: {}); {figures}",
            ended[i],
            n.whole,
            !between
        );
    }
    drop(attackers);

    // Every answer a reader received, and every probe answered, is in the log, once.
    let (path, _) = shape.file();
    let wanted: Vec<String> = (0..READERS)
        .flat_map(|c| (0..answers[c].whole).map(move |r| format!("GET {path}?c={c}&r={r} HTTP/1.1 200 {length}")))
        .chain(answered.iter().map(|k| format!("GET /index.html?probe={k} HTTP/1.1 200 {}", INDEX.len())))
        .collect();
    let missing = |lines: &[String]| {
        let have: std::collections::HashSet<&str> = lines.iter().map(String::as_str).collect();
        wanted.iter().filter(|w| !have.contains(w.as_str())).cloned().collect::<Vec<String>>()
    };
    // Records are held up to a second (the log's `flush`) before they are written.
    let logged = Instant::now() + DEADLINE;
    while !missing(&site.access_lines()).is_empty() && Instant::now() < logged {
        std::thread::sleep(Duration::from_millis(50));
    }
    // Stopped: each worker writes what it holds.
    drop(p);
    let lines = site.access_lines();
    let not_logged = missing(&lines);
    assert!(
        not_logged.is_empty(),
        "{} answers received but not logged, such as {:?}",
        not_logged.len(),
        &not_logged[..3.min(not_logged.len())]
    );
    let mut requests: Vec<&str> = lines.iter().filter_map(|l| l.split(" HTTP/1.1 ").next()).collect();
    let total = requests.len();
    requests.sort();
    requests.dedup();
    assert_eq!(requests.len(), total, "a request was logged twice");
    assert!(total <= conns * shape.count() + PROBES, "{total} records for fewer requests");
}

#[test]
fn plain_64_clients_pipelining_a_2mb_file_8_times() {
    hold_and_probe(64, Shape::Big, false);
}

#[test]
fn plain_64_clients_pipelining_a_20kb_file_1000_times() {
    hold_and_probe(64, Shape::Small, false);
}

#[test]
fn plain_500_clients_pipelining_a_2mb_file_8_times() {
    hold_and_probe(500, Shape::Big, false);
}

#[test]
fn plain_500_clients_pipelining_a_20kb_file_1000_times() {
    hold_and_probe(500, Shape::Small, false);
}

#[test]
fn tls_64_clients_pipelining_a_2mb_file_8_times() {
    hold_and_probe(64, Shape::Big, true);
}

#[test]
fn tls_64_clients_pipelining_a_20kb_file_1000_times() {
    hold_and_probe(64, Shape::Small, true);
}

#[test]
fn tls_500_clients_pipelining_a_2mb_file_8_times() {
    hold_and_probe(500, Shape::Big, true);
}

#[test]
fn tls_500_clients_pipelining_a_20kb_file_1000_times() {
    hold_and_probe(500, Shape::Small, true);
}
