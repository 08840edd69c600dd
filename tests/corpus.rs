//! The raw-request corpus, gunicorn-style: every `tests/requests/{valid,invalid}/*.http`
//! is sent byte for byte on a fresh connection to a running pika, and the answer is
//! checked against the sibling `.expect` file (the status on its first line, and
//! `close` on a second when the server must close the connection after answering).
//! A case that keeps the connection open is followed on it by a sentinel request,
//! which must be answered: a server that lost its place in the stream (misread a
//! body, dropped a pipelined request) or closed fails the case.
//!
//! The cases are written by `tests/requests/generate.py`, so a parser bug found
//! anywhere becomes one more line there. One test replays them all and reports every
//! mismatch at once, then checks that no worker died on the way and that the server
//! still answers. A second does the same with `tests/requests/proxy/` against a
//! listener that expects a PROXY protocol header, where a case may also expect to be
//! `dropped`: closed without a byte of answer.

use std::fmt;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::util::{Pika, Site, alive, children_of, ppid_of, raw};

/// How long a case may take to be answered. Under the server's 20 s header timeout,
/// so a server still waiting for bytes shows up as "no response", never as a 408.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// How soon the server must close after its response when a case says `close`. Under
/// the 5 s keep-alive timeout, so a connection merely kept alive fails the check.
const CLOSE_WITHIN: Duration = Duration::from_secs(3);

/// The run stops at this many mismatches (each may have waited `ANSWER_WITHIN`).
const MAX_MISMATCHES: usize = 20;

/// Most bytes read while waiting for the close or the sentinel's answer (the rest of
/// the case's response bodies).
const MAX_DRAIN: usize = 4 << 20;

/// Sent after every keep-alive case, on the same connection and in the same write.
const SENTINEL_REQUEST: &[u8] = b"GET /sentinel.txt HTTP/1.1\r\nHost: localhost\r\n\r\n";
/// `htdocs/sentinel.txt`: found in no other response, so reading up to it skips
/// whatever the case itself was answered (several responses for a pipelined case).
const SENTINEL_BODY: &[u8] = b"corpus sentinel: the connection still works\n";

/// What a case expects.
enum Expect {
    /// This final status, then the close or (`close` false) the sentinel answered.
    Answer { status: u16, close: bool },
    /// `dropped`: the connection closed with no answer at all.
    Dropped,
}

impl Expect {
    fn parse(text: &str, path: &Path) -> Expect {
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
        let first = lines.next();
        if first == Some("dropped") && lines.next().is_none() {
            return Expect::Dropped;
        }
        let status = first.and_then(|l| l.parse().ok());
        let close = match lines.next() {
            None => false,
            Some("close") => true,
            Some(other) => panic!("{}: second line must be `close`, not {other:?}", path.display()),
        };
        match (status, lines.next()) {
            (Some(status), None) => Expect::Answer { status, close },
            _ => panic!("{}: want a status code, then optionally `close`; or `dropped`", path.display()),
        }
    }

    fn met_by(&self, answer: &Answer) -> bool {
        match (self, answer) {
            (Expect::Answer { status: want, .. }, Answer::Status { status, after }) => status == want && after.is_ok(),
            (Expect::Dropped, Answer::Dropped) => true,
            _ => false,
        }
    }
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expect::Answer { status, close: true } => write!(f, "{status}, then close"),
            Expect::Answer { status, close: false } => write!(f, "{status}, then the sentinel answered"),
            Expect::Dropped => write!(f, "a close with no answer"),
        }
    }
}

/// What the server did with one case.
enum Answer {
    /// A final status, and what followed: the clean close a `close` case expects, or
    /// the sentinel's answer on a kept-alive connection (`Err` says what went wrong).
    Status { status: u16, after: Result<(), String> },
    /// No final response head: why not.
    Nothing(String),
    /// Closed (or reset) before a single byte of answer.
    Dropped,
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Answer::Status { status, after: Ok(()) } => write!(f, "{status}"),
            Answer::Status { status, after: Err(why) } => write!(f, "{status}, then {why}"),
            Answer::Nothing(why) => write!(f, "no response ({why})"),
            Answer::Dropped => write!(f, "a close with no answer"),
        }
    }
}

struct Case {
    /// `valid/001-get-root.http`, for the report.
    name: String,
    request: Vec<u8>,
    expect: Expect,
}

/// Every case of `dirs` (under `tests/requests`), each folder sorted by file name.
fn load_cases(dirs: &[&str]) -> Vec<Case> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/requests");
    let mut cases = Vec::new();
    for &dir in dirs {
        let mut files: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
            .unwrap_or_else(|e| panic!("{}: {e}", root.join(dir).display()))
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "http"))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "no cases in {}", root.join(dir).display());
        for http in files {
            let expect_path = http.with_extension("expect");
            let text =
                std::fs::read_to_string(&expect_path).unwrap_or_else(|e| panic!("{}: {e}", expect_path.display()));
            cases.push(Case {
                name: format!("{dir}/{}", http.file_name().unwrap().to_string_lossy()),
                request: std::fs::read(&http).unwrap(),
                expect: Expect::parse(&text, &expect_path),
            });
        }
    }
    cases
}

/// Sends one case on a fresh connection and reads the final response's head (1xx
/// interim responses are skipped); with `close`, then waits for the close, else
/// sends the sentinel with the case and waits for its answer. A case that expects
/// to be dropped is sent alone, and the first thing read says what happened.
fn send(addr: SocketAddr, case: &[u8], expect: &Expect) -> Answer {
    let mut s = match TcpStream::connect(addr) {
        Ok(s) => s,
        Err(e) => return Answer::Nothing(format!("connect: {e}")),
    };
    let close = match expect {
        Expect::Answer { close, .. } => *close,
        Expect::Dropped => {
            let _ = s.write_all(case);
            return dropped_or_what(&mut s);
        }
    };
    // why: the whole case is written and the write side left open. A half-close
    // (`shutdown(Write)`) would change the request: the server would see the stream
    // end, not a client waiting for an answer. A server that answers early and stops
    // reading may fail the write; its answer is what counts.
    let mut request = case.to_vec();
    if !close {
        // A case ending in a lone CR has begun a line: end it, so that the sentinel
        // starts on a line of its own after an empty one (RFC 9112 §2.2).
        if request.ends_with(b"\r") {
            request.push(b'\n');
        }
        request.extend_from_slice(SENTINEL_REQUEST);
    }
    let wrote = s.write_all(&request);
    let deadline = Instant::now() + ANSWER_WITHIN;
    let mut buf = Vec::new();
    let status = loop {
        let head = match read_head(&mut s, &mut buf, deadline) {
            Ok(head) => head,
            Err(why) => {
                return Answer::Nothing(match wrote {
                    Ok(()) => why,
                    Err(e) => format!("{why}; the write failed: {e}"),
                });
            }
        };
        match status_of(&head) {
            Some(status) if (100..200).contains(&status) && status != 101 => continue,
            Some(status) => break status,
            None => {
                let line = head.split(|&b| b == b'\n').next().unwrap_or(&[]);
                return Answer::Nothing(format!("garbled status line {:?}", String::from_utf8_lossy(line)));
            }
        }
    };
    let after = if close { closes_within(&mut s, CLOSE_WITHIN) } else { sentinel_answered(&mut s, buf, deadline) };
    Answer::Status { status, after }
}

/// What came on a connection a case expects closed with no answer: `Dropped` (the
/// end of the stream, or a reset, before any byte), else what came instead.
fn dropped_or_what(s: &mut TcpStream) -> Answer {
    s.set_read_timeout(Some(ANSWER_WITHIN)).unwrap();
    let mut byte = [0u8; 1];
    loop {
        return match s.read(&mut byte) {
            Ok(0) => Answer::Dropped,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => Answer::Dropped,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Answer::Nothing(format!("left open for {ANSWER_WITHIN:?}"))
            }
            Err(e) => Answer::Nothing(format!("read: {e}")),
            Ok(_) => {
                let mut buf = byte.to_vec();
                match read_head(s, &mut buf, Instant::now() + ANSWER_WITHIN) {
                    Ok(head) => match status_of(&head) {
                        Some(status) => Answer::Status { status, after: Ok(()) },
                        None => Answer::Nothing(format!("garbled answer {:?}", String::from_utf8_lossy(&head))),
                    },
                    Err(why) => Answer::Nothing(format!("{} bytes of answer, then {why}", buf.len())),
                }
            }
        };
    }
}

/// Reads on (after the case's answer, part of which may be in `buf`) until the
/// sentinel's body has come, and checks it came with a 200.
fn sentinel_answered(s: &mut TcpStream, mut buf: Vec<u8>, deadline: Instant) -> Result<(), String> {
    let mut chunk = [0u8; 16 * 1024];
    let at = loop {
        if let Some(at) = buf.windows(SENTINEL_BODY.len()).position(|w| w == SENTINEL_BODY) {
            break at;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || buf.len() > MAX_DRAIN {
            return Err(format!("no answer to the sentinel request within {ANSWER_WITHIN:?}"));
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut chunk) {
            Ok(0) => return Err("the connection closed before the sentinel request was answered".into()),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) => return Err(format!("read before the sentinel's answer: {e}")),
        }
    };
    let head_at = buf[..at].windows(9).rposition(|w| w == b"HTTP/1.1 ").ok_or("a sentinel body without a head")?;
    match status_of(&buf[head_at..]) {
        Some(200) => Ok(()),
        other => Err(format!("the sentinel request answered {other:?}")),
    }
}

/// Reads until `buf` holds a whole response head; removes and returns it (what
/// follows, the body, stays in `buf`).
fn read_head(s: &mut TcpStream, buf: &mut Vec<u8>, deadline: Instant) -> Result<Vec<u8>, String> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(buf.drain(..end + 4).collect());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("nothing complete within {ANSWER_WITHIN:?}"));
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut chunk) {
            Ok(0) => return Err(format!("closed after {} bytes", buf.len())),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(format!("nothing complete within {ANSWER_WITHIN:?}"));
            }
            Err(e) => return Err(format!("read: {e}")),
        }
    }
}

/// The status code of `HTTP/1.x NNN ...`.
fn status_of(head: &[u8]) -> Option<u16> {
    let rest = head.strip_prefix(b"HTTP/1.")?;
    let code = rest.get(2..5)?;
    if rest.get(1) != Some(&b' ') || !code.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(code).ok()?.parse().ok()
}

/// Drains the rest of the response and checks that the server then closed the
/// connection cleanly (end of stream, not a reset, which can destroy the answer
/// before the client reads it) within `limit`.
fn closes_within(s: &mut TcpStream, limit: Duration) -> Result<(), String> {
    let deadline = Instant::now() + limit;
    let mut chunk = [0u8; 16 * 1024];
    let mut drained = 0;
    while drained < MAX_DRAIN {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut chunk) {
            Ok(0) => return Ok(()),
            Ok(n) => drained += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
            Err(e) => return Err(format!("the connection ended with an error: {e}")),
        }
    }
    Err(format!("the connection was left open ({limit:?})"))
}

/// The site every corpus runs against; `listen` replaces the plain listener.
fn corpus_site(listen: Option<&str>, http: &str) -> Site {
    let site = Site::new();
    site.write("htdocs/a b.txt", "spaced\n");
    site.write("htdocs/file.txt", "x".repeat(1000));
    site.write("htdocs/dir/index.html", "<h1>dir</h1>\n");
    site.write("htdocs/sentinel.txt", SENTINEL_BODY);
    site.config("", &format!("[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 4\n{http}"));
    if let Some(listen) = listen {
        let text = site.read("conf/pika.toml").replace("listen = [\"127.0.0.1:0\"]", listen);
        site.write("conf/pika.toml", text);
    }
    site
}

/// Replays the cases of `dirs` against `site`'s pika and fails with every mismatch;
/// then no worker may have died, and `probe` (a whole request) must be answered 200.
/// Returns the error log.
fn replay(site: &Site, dirs: &[&str], probe: &[u8]) -> String {
    let pika = Pika::start(site, "-F");
    let workers = children_of(pika.pid);
    assert!(!workers.is_empty(), "no workers under master {}", pika.pid);

    let cases = load_cases(dirs);
    let mut failures: Vec<String> = Vec::new();
    let mut tried = 0;
    for case in &cases {
        // A server broken for every case would make each one wait out its time:
        // enough mismatches say what is wrong.
        if failures.len() == MAX_MISMATCHES {
            break;
        }
        tried += 1;
        let answer = send(pika.addr, &case.request, &case.expect);
        if !case.expect.met_by(&answer) {
            failures.push(format!("{}: expected {}, got {answer}", case.name, case.expect));
        }
    }
    let mismatches = failures.len();
    println!("corpus {dirs:?}: {} cases, {tried} tried, {mismatches} mismatches", cases.len());

    // A case that crashed a worker would have been answered by its replacement.
    for w in workers {
        if !alive(w) || ppid_of(w) != Some(pika.pid) {
            failures.push(format!("worker {w} died during the corpus"));
        }
    }
    let after = raw(pika.addr, probe);
    if after.status != 200 {
        failures.push(format!("{:?} after the corpus answered {}", String::from_utf8_lossy(probe), after.status));
    }
    let log = site.error_log();
    assert!(
        failures.is_empty(),
        "{mismatches} of {tried} corpus cases tried (of {}) differ:\n  {}\nerror log warnings:\n{}",
        cases.len(),
        failures.join("\n  "),
        log.lines().filter(|l| l.contains("[warn]") || l.contains("[error]")).collect::<Vec<_>>().join("\n")
    );
    log
}

#[test]
fn corpus() {
    let site = corpus_site(None, "");
    replay(&site, &["valid", "invalid"], b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
}

/// `tests/requests/proxy/` against a listener that expects a PROXY header: every
/// header served or refused as its case says, a refused one with one `info` line.
/// header_timeout is short, for the cases that stop inside their header.
#[test]
fn proxy_protocol_corpus() {
    let site = corpus_site(
        Some("listen = [{ addr = \"127.0.0.1:0\", proxy_protocol = true }]"),
        "[http]\nheader_timeout = \"1s\"\n",
    );
    let probe = [&pika::http::proxy_protocol::V2_LOCAL[..], b"GET / HTTP/1.0\r\n\r\n"].concat();
    let log = replay(&site, &["proxy"], &probe);
    let dropped = load_cases(&["proxy"]).iter().filter(|c| matches!(c.expect, Expect::Dropped)).count();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("PROXY protocol")).collect();
    assert_eq!(lines.len(), dropped, "one line per refused header:\n{}", lines.join("\n"));
    assert!(lines.iter().all(|l| l.contains("[info]")), "{}", lines.join("\n"));
}
