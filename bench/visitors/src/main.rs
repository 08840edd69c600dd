//! Browser-like load for pika's benchmarks: visitors that think.
//!
//! wrk, ab and siege keep every connection busy; real sites get browsers. Each
//! visitor here loads a page, then its assets over up to `--conns` kept-alive
//! connections (a browser's six per host), then thinks for a random 1-5 s and loads
//! the next page over the connections it kept. What a browser does on a reused
//! connection that fails before any byte of the answer came (the server closed it
//! while the request was on its way) is done here too: the request is retried once
//! on a new connection, and counted as a retry, apart from failures. A connection the
//! server closed while the visitor was thinking is seen before reuse (a browser
//! checks an idle socket before it sends on it) and replaced without a retry. On
//! loopback each visitor connects from its own address (127.1.0.1, 127.1.0.2, ...).
//!
//! Output: one JSON object on stdout (latency percentiles over the requests started
//! after the warm-up, failures, retries, connections, the client's own CPU time, how
//! long it waited for a CPU and how late its event loop ran), a readable summary on
//! stderr.

use std::collections::VecDeque;
use std::io;
use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use socket2::SockRef;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

struct Args {
    addr: SocketAddr,
    host: String,
    clients: usize,
    duration: Duration,
    ramp: Duration,
    think: (Duration, Duration),
    conns: usize,
    page: String,
    assets: Vec<String>,
    timeout: Duration,
    threads: usize,
}

// pika's .clippy.toml (found up the tree) reserves exit() for its forked workers.
#[allow(clippy::disallowed_methods, reason = "a load generator, not a forked worker")]
fn usage() -> ! {
    eprintln!(
        "usage: visitors --addr IP:PORT --clients N --duration SECS [--ramp SECS] [--think MIN-MAX] \
         [--conns N] [--page PATH] [--assets P1,P2,...] [--host NAME] [--timeout SECS] [--threads N]"
    );
    std::process::exit(2)
}

fn secs(s: &str) -> Duration {
    Duration::from_secs_f64(s.parse().unwrap_or_else(|_| usage()))
}

fn parse_args() -> Args {
    let mut a = Args {
        addr: "127.0.0.1:8080".parse().unwrap(),
        host: "localhost".into(),
        clients: 300,
        duration: Duration::from_secs(30),
        ramp: Duration::from_secs(5),
        think: (Duration::from_secs(1), Duration::from_secs(5)),
        conns: 6,
        page: "/index.html".into(),
        assets: Vec::new(),
        timeout: Duration::from_secs(30),
        threads: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().unwrap_or_else(|| usage());
        match flag.as_str() {
            "--addr" => a.addr = v.parse().unwrap_or_else(|_| usage()),
            "--host" => a.host = v,
            "--clients" => a.clients = v.parse().unwrap_or_else(|_| usage()),
            "--duration" => a.duration = secs(&v),
            "--ramp" => a.ramp = secs(&v),
            "--think" => {
                let (lo, hi) = v.split_once('-').unwrap_or_else(|| usage());
                a.think = (secs(lo), secs(hi));
            }
            "--conns" => a.conns = v.parse().unwrap_or_else(|_| usage()),
            "--page" => a.page = v,
            "--assets" => a.assets = v.split(',').filter(|s| !s.is_empty()).map(String::from).collect(),
            "--timeout" => a.timeout = secs(&v),
            "--threads" => a.threads = v.parse().unwrap_or_else(|_| usage()),
            _ => usage(),
        }
    }
    if a.conns == 0 || a.clients == 0 {
        usage();
    }
    a
}

/// xorshift64*: think times and start offsets, reproducible per visitor.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let span = hi.saturating_sub(lo).as_micros() as u64;
        lo + Duration::from_micros(if span == 0 { 0 } else { self.next() % span })
    }
}

#[derive(Default)]
struct Tally {
    /// Microseconds per request (started after the warm-up), including a retry's time.
    latencies: Vec<u32>,
    requests: u64,
    failures: u64,
    retries: u64,
    /// Connections opened, and those found closed by the server before reuse.
    connects: u64,
    /// Connections that took a second or more to open: the kernel dropped the SYN
    /// (the server's listen queue was full) and it was sent again after 1 s.
    slow_connects: u64,
    closed_idle: u64,
    /// Answers that said `Connection: close`.
    told_close: u64,
    bytes: u64,
    first_error: Option<String>,
}

impl Tally {
    fn merge(&mut self, o: Tally) {
        self.latencies.extend(o.latencies);
        self.requests += o.requests;
        self.failures += o.failures;
        self.retries += o.retries;
        self.connects += o.connects;
        self.slow_connects += o.slow_connects;
        self.closed_idle += o.closed_idle;
        self.told_close += o.told_close;
        self.bytes += o.bytes;
        if self.first_error.is_none() {
            self.first_error = o.first_error;
        }
    }
}

/// One kept-alive connection and its read buffer.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

struct Shared {
    args: Args,
    measure_from: Instant,
    end: Instant,
}

/// How a request went wrong: before any byte of the answer (on a reused connection a
/// browser retries that), or after.
enum Fail {
    BeforeAnswer(String),
    Other(String),
}

/// Sends one GET on `conn` and reads the whole answer by `deadline`. Returns (bytes,
/// keep-alive).
async fn exchange(conn: &mut Conn, req: &[u8], deadline: Instant) -> Result<(u64, bool), Fail> {
    let run = async {
        conn.stream.write_all(req).await.map_err(|e| Fail::BeforeAnswer(format!("write: {e}")))?;
        conn.buf.clear();
        let head_end = loop {
            if let Some(p) = find(&conn.buf, b"\r\n\r\n") {
                break p + 4;
            }
            let mut chunk = [0u8; 16384];
            match conn.stream.read(&mut chunk).await {
                Ok(0) if conn.buf.is_empty() => return Err(Fail::BeforeAnswer("closed before the answer".into())),
                Ok(0) => return Err(Fail::Other("closed in the head".into())),
                Ok(n) => conn.buf.extend_from_slice(&chunk[..n]),
                Err(e) if conn.buf.is_empty() => return Err(Fail::BeforeAnswer(format!("read: {e}"))),
                Err(e) => return Err(Fail::Other(format!("read: {e}"))),
            }
        };
        let head = String::from_utf8_lossy(&conn.buf[..head_end]).to_ascii_lowercase();
        let status: u16 = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
        if !(200..400).contains(&status) {
            return Err(Fail::Other(format!("status {status}")));
        }
        let length: Option<u64> =
            head.lines().find_map(|l| l.strip_prefix("content-length:")).and_then(|v| v.trim().parse().ok());
        let close = head.lines().any(|l| l.starts_with("connection:") && l.contains("close"));
        let Some(length) = length else { return Err(Fail::Other("no Content-Length".into())) };
        let mut have = (conn.buf.len() - head_end) as u64;
        let mut chunk = vec![0u8; 65536];
        while have < length {
            match conn.stream.read(&mut chunk).await {
                Ok(0) => return Err(Fail::Other("closed in the body".into())),
                Ok(n) => have += n as u64,
                Err(e) => return Err(Fail::Other(format!("read body: {e}"))),
            }
        }
        if have > length {
            return Err(Fail::Other("more bytes than Content-Length (no pipelining here)".into()));
        }
        Ok((head_end as u64 + length, !close))
    };
    match tokio::time::timeout_at(deadline.into(), run).await {
        Ok(r) => r,
        Err(_) => Err(Fail::Other("no answer within the timeout".into())),
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// True if the server closed (or reset) this idle connection: a browser's check
/// before it reuses a pooled socket (Chromium peeks at it with `recv(MSG_PEEK)`).
/// This asks the kernel too: tokio's `try_read` answers from the readiness its
/// reactor last saw and, until that reactor has polled the FIN, says "nothing
/// there" without a syscall, so a close the browser would have seen became a retry.
fn closed_while_idle(conn: &Conn) -> bool {
    let mut probe = [MaybeUninit::<u8>::uninit(); 1];
    match SockRef::from(&conn.stream).peek(&mut probe) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
        _ => true, // EOF, reset, or bytes nobody asked for
    }
}

/// The address a visitor's connections come from: on loopback each visitor gets its own
/// (127.1.0.1, 127.1.0.2, ...), as every browser has its own on the internet. From one
/// address, 18,000 connections to one port leave the kernel few free ports for the
/// next connect(), and it scans thousands of them each time: measured with 3,000
/// visitors, this client's loop ran up to 1.8 s late against nginx and 6.5 s against a
/// server whose backlog overflowed, time that landed in the latencies it measured.
fn source_for(addr: SocketAddr, id: u64) -> Option<IpAddr> {
    match addr.ip() {
        IpAddr::V4(ip) if ip.is_loopback() => {
            Some(IpAddr::V4(Ipv4Addr::from(u32::from(Ipv4Addr::new(127, 1, 0, 1)) + id as u32)))
        }
        _ => None,
    }
}

async fn connect(
    shared: &Shared,
    source: Option<IpAddr>,
    deadline: Instant,
    tally: &mut Tally,
) -> Result<Conn, String> {
    let started = Instant::now();
    let addr = shared.args.addr;
    let socket = if addr.is_ipv4() { TcpSocket::new_v4() } else { TcpSocket::new_v6() };
    let socket = socket.map_err(|e| format!("socket: {e}"))?;
    if let Some(ip) = source {
        socket.bind(SocketAddr::new(ip, 0)).map_err(|e| format!("bind {ip}: {e}"))?;
    }
    let c = tokio::time::timeout_at(deadline.into(), socket.connect(addr))
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| format!("connect: {e}"))?;
    let _ = c.set_nodelay(true);
    tally.connects += 1;
    if started.elapsed() >= Duration::from_secs(1) {
        tally.slow_connects += 1;
    }
    Ok(Conn { stream: c, buf: Vec::with_capacity(16384) })
}

/// One request as a browser makes it, on the connection in `slot` (opened if empty).
/// Connecting, sending, the answer and a retry all fit in one `--timeout`, so no
/// request outlasts it (nor the run's end by more than it). Only a request started
/// after the warm-up counts, with everything that happened to it (bytes, retries,
/// connections opened or found closed).
async fn fetch(shared: &Shared, source: Option<IpAddr>, slot: &mut Option<Conn>, path: &str, total: &mut Tally) {
    let mut tally = Tally::default();
    let req = format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nUser-Agent: pika-bench-visitors\r\nAccept: */*\r\n\
         Accept-Encoding: identity\r\n\r\n",
        shared.args.host
    );
    let started = Instant::now();
    let deadline = started + shared.args.timeout;
    let mut retried = false;
    let outcome = loop {
        if slot.as_ref().is_some_and(closed_while_idle) {
            *slot = None;
            tally.closed_idle += 1;
        }
        let reused = slot.is_some();
        if slot.is_none() {
            match connect(shared, source, deadline, &mut tally).await {
                Ok(c) => *slot = Some(c),
                Err(e) => break Err(e),
            }
        }
        let conn = slot.as_mut().expect("connected");
        match exchange(conn, req.as_bytes(), deadline).await {
            Ok((bytes, keep)) => {
                tally.bytes += bytes;
                if !keep {
                    tally.told_close += 1;
                    *slot = None;
                }
                break Ok(());
            }
            Err(Fail::BeforeAnswer(e)) if reused && !retried => {
                // The server closed the kept-alive connection under our request.
                *slot = None;
                retried = true;
                tally.retries += 1;
                let _ = e;
            }
            Err(Fail::BeforeAnswer(e)) | Err(Fail::Other(e)) => {
                *slot = None;
                break Err(e);
            }
        }
    };
    if started < shared.measure_from {
        return;
    }
    tally.requests += 1;
    match outcome {
        Ok(()) => tally.latencies.push(started.elapsed().as_micros().min(u32::MAX as u128) as u32),
        Err(e) => {
            tally.failures += 1;
            tally.first_error = Some(format!("{path}: {e}"));
        }
    }
    total.merge(tally);
}

async fn visitor(shared: Arc<Shared>, id: u64) -> Tally {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (id + 1).wrapping_mul(0xD1B5_4A32_D192_ED03));
    let mut tally = Tally::default();
    let mut pool: Vec<Option<Conn>> = (0..shared.args.conns).map(|_| None).collect();
    let source = source_for(shared.args.addr, id);
    // Arrivals spread over the ramp, so the run does not open with every visitor at once.
    tokio::time::sleep(rng.between(Duration::ZERO, shared.args.ramp)).await;
    while Instant::now() < shared.end {
        fetch(&shared, source, &mut pool[0], &shared.args.page, &mut tally).await;
        // The assets, over as many connections as there are assets (up to `conns`),
        // each taking the next asset not yet fetched.
        let queue = Arc::new(Mutex::new(shared.args.assets.iter().cloned().collect::<VecDeque<_>>()));
        let lanes = shared.args.conns.min(shared.args.assets.len());
        let mut set = tokio::task::JoinSet::new();
        for (lane, conn) in pool.iter_mut().take(lanes).enumerate() {
            let mut conn = conn.take();
            let queue = queue.clone();
            let shared = shared.clone();
            set.spawn(async move {
                let mut t = Tally::default();
                // No request starts after the end: the rate is over the measured
                // window, and the run stops at most one --timeout after it.
                while Instant::now() < shared.end {
                    let next = queue.lock().unwrap().pop_front();
                    let Some(path) = next else { break };
                    fetch(&shared, source, &mut conn, &path, &mut t).await;
                }
                (lane, conn, t)
            });
        }
        while let Some(done) = set.join_next().await {
            let (lane, conn, t) = done.expect("lane task");
            pool[lane] = conn;
            tally.merge(t);
        }
        let think = rng.between(shared.args.think.0, shared.args.think.1);
        if Instant::now() + think >= shared.end {
            break;
        }
        tokio::time::sleep(think).await;
    }
    tally
}

/// How late this client's own event loop runs: a task on the same runtime that asks
/// to wake every 10 ms over the measured window and notes how much later it did
/// (microseconds, one per wake-up). A busy or starved client adds up to that much
/// to any latency it measures.
async fn lag_watch(shared: Arc<Shared>) -> Vec<u32> {
    const TICK: Duration = Duration::from_millis(10);
    tokio::time::sleep_until(shared.measure_from.into()).await;
    let mut lags = Vec::new();
    while Instant::now() < shared.end {
        let asked = Instant::now() + TICK;
        tokio::time::sleep_until(asked.into()).await;
        lags.push(asked.elapsed().as_micros().min(u32::MAX as u128) as u32);
    }
    lags.sort_unstable();
    lags
}

/// User + system CPU seconds of this process so far (from /proc/self/stat).
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 =
        f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0) + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

/// Seconds this process's threads have spent runnable but waiting for a CPU (second
/// field of /proc/self/task/*/schedstat): time a busy machine, not the server, added
/// to the latencies measured here.
fn cpu_wait_seconds() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0.0 };
    let ns: u64 = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum();
    ns as f64 / 1e9
}

fn percentile(sorted: &[u32], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)] as f64 / 1000.0
}

fn main() {
    let args = parse_args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads.max(1))
        .enable_all()
        .build()
        .expect("runtime");
    let cpu0 = cpu_seconds();
    let wait0 = cpu_wait_seconds();
    let t0 = Instant::now();
    let clients = args.clients;
    let duration = args.duration;
    let measure_from = t0 + args.ramp;
    let shared = Arc::new(Shared { end: t0 + args.ramp + args.duration, measure_from, args });
    let (total, lags) = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for id in 0..clients {
            set.spawn(visitor(shared.clone(), id as u64));
        }
        let lag = tokio::spawn(lag_watch(shared.clone()));
        let mut total = Tally::default();
        while let Some(t) = set.join_next().await {
            total.merge(t.expect("visitor task"));
        }
        (total, lag.await.expect("lag watch"))
    });
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    // read while the runtime's threads still exist
    let cpu_wait = cpu_wait_seconds() - wait0;
    drop(rt);
    let mut lat = total.latencies;
    lat.sort_unstable();
    let measured = duration.as_secs_f64();
    let (p50, p90, p99) = (percentile(&lat, 50.0), percentile(&lat, 90.0), percentile(&lat, 99.0));
    let max = lat.last().map_or(0.0, |v| *v as f64 / 1000.0);
    let (lag_p99, lag_max) = (percentile(&lags, 99.0), lags.last().map_or(0.0, |v| *v as f64 / 1000.0));
    let rps = total.requests as f64 / measured;
    let err = total.first_error.as_deref().unwrap_or("").replace('\\', "\\\\").replace('"', "\\\"");
    println!(
        "{{\"clients\": {clients}, \"requests\": {}, \"rps\": {rps:.1}, \"failures\": {}, \"retries\": {}, \
         \"p50_ms\": {p50:.3}, \"p90_ms\": {p90:.3}, \"p99_ms\": {p99:.3}, \"max_ms\": {max:.3}, \
         \"connects\": {}, \"slow_connects\": {}, \"closed_idle\": {}, \"told_close\": {}, \"bytes\": {}, \"client_cpu_s\": {cpu:.2}, \"client_cpu_wait_s\": {cpu_wait:.2}, \"client_lag_p99_ms\": {lag_p99:.1}, \"client_lag_max_ms\": {lag_max:.1}, \
         \"wall_s\": {wall:.2}, \"first_error\": \"{err}\"}}",
        total.requests,
        total.failures,
        total.retries,
        total.connects,
        total.slow_connects,
        total.closed_idle,
        total.told_close,
        total.bytes
    );
    eprintln!(
        "{clients} visitors: {} requests ({rps:.0}/s) p50 {p50:.2} ms p90 {p90:.2} ms p99 {p99:.2} ms max {max:.1} ms; \
         {} failed, {} retried; {} connections ({} took 1 s or more), {} found closed while idle, {} told to close; \
         client CPU {cpu:.1} s (and {cpu_wait:.1} s waiting for one) in {wall:.1} s, its loop late by {lag_p99:.1} ms \
         (p99), {lag_max:.0} ms (max)",
        total.requests,
        total.failures,
        total.retries,
        total.connects,
        total.slow_connects,
        total.closed_idle,
        total.told_close
    );
}
