//! Access and error logs on the real binary: formats, filters, hostile input,
//! per-vhost logs, rotation under load (built-in, by signal, across reloads), a write
//! failure and its recovery, and a real log analyser reading the result.

use std::collections::HashSet;
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::util::*;

const SIGHUP: i32 = 1;
const SIGUSR1: i32 = 10;

/// Does a line look like a whole combined-format record?
fn is_combined(line: &str) -> bool {
    let Some(rest) = line.strip_prefix("127.0.0.1 - - [") else { return false };
    let Some((stamp, rest)) = rest.split_once("] \"") else { return false };
    stamp.len() == 26 && rest.ends_with('"') && rest.matches('"').count() - rest.matches("\\\"").count() == 5
}

#[test]
fn custom_formats_and_per_vhost_logs() {
    let site = Site::new();
    site.write("b/x.txt", "bee");
    site.config(
        "",
        "[[vhost]]\nserver_names = [\"a.test\"]\nroot = \"htdocs\"\n\
         [[vhost]]\nserver_names = [\"b.test\"]\nroot = \"b\"\n\
         [[vhost.access_log]]\npath = \"logs/b.log\"\nformat = \"%v %>s %B %m %U %q %H %{X-Id}i %{Content-Type}o %D\"\n\
         [[access_log]]\npath = \"logs/access.log\"\nformat = \"vhost_combined\"\n",
    );
    let p = Pika::start(&site, "-X");
    raw(p.addr, b"GET /x.txt?k=v HTTP/1.1\r\nHost: b.test\r\nX-Id: 42\r\nConnection: close\r\n\r\n");
    raw(p.addr, b"GET / HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n");
    let all = wait_until(DEADLINE, "two lines", || {
        let l = site.access_lines();
        (l.len() == 2).then_some(l)
    });
    assert!(all[0].starts_with("b.test:") && all[1].starts_with("a.test:"), "{all:?}");
    let b = site.read("logs/b.log");
    let fields: Vec<&str> = b.trim_end().split(' ').collect();
    assert_eq!(&fields[..9], &["b.test", "200", "3", "GET", "/x.txt", "?k=v", "HTTP/1.1", "42", "text/plain"], "{b}");
    let micros: u64 = fields[9].parse().unwrap();
    assert!(micros > 0 && micros < 10_000_000, "%D in microseconds: {micros}");
    assert_eq!(b.lines().count(), 1, "only b.test's request");
}

#[test]
fn filters_include_and_exclude() {
    let site = Site::new();
    site.write("htdocs/health", "ok");
    site.config(
        "",
        "[[access_log]]\npath = \"logs/access.log\"\nexclude = [{ internal = true }, { path = \"/health\" }, { user_agent = \"(?i)bot\" }]\n\
         [[access_log]]\npath = \"logs/errors.log\"\ninclude = [{ status = \"4xx\" }, { method = \"OPTIONS\", header = \"X-Debug\" }]\n\
         [[access_log]]\npath = \"logs/debug.log\"\nexclude = []\ninclude = [{ internal = true }]\n[workers]\nstart = 1\nmin_spare = 1\nmax_spare = 2\n",
    );
    let p = Pika::start(&site, "-F");
    get(p.addr, "/");
    get(p.addr, "/health");
    get_with(p.addr, "/", "User-Agent: FriendlyBot/1.0\r\n");
    get(p.addr, "/missing");
    raw(p.addr, b"OPTIONS * HTTP/1.1\r\nHost: localhost\r\nX-Debug: 1\r\nConnection: close\r\n\r\n");
    // A TTIN/TTOU pair makes the master retire a worker through a dummy connection.
    p.signal(21);
    wait_until(DEADLINE, "a spare worker", || (children_of(p.pid).len() >= 2).then_some(()));
    // Signals of one kind merge while pending: wait for each to be seen.
    p.signal(22);
    wait_until(DEADLINE, "one TTOU", || site.error_log().contains("min_spare 1, max_spare 2").then_some(()));
    p.signal(22);
    wait_until(DEADLINE, "an internal request in the debug log", || {
        site.read("logs/debug.log").contains("(internal dummy connection)").then_some(())
    });
    // The first worker holds its records until a quiet second (flush = "1s") or its
    // exit, and the worker retired may be the other one (any idle worker may take
    // the dummy connection): wait for them.
    let (main, errors) = wait_until(DEADLINE, "the first worker's records", || {
        let (main, errors) = (site.read("logs/access.log"), site.read("logs/errors.log"));
        (main.lines().count() >= 3 && errors.lines().count() >= 2).then_some((main, errors))
    });
    assert_eq!(main.lines().count(), 3, "/, /missing and OPTIONS: {main}");
    assert!(!main.contains("/health") && !main.contains("FriendlyBot") && !main.contains("internal dummy"));
    assert_eq!(errors.lines().count(), 2, "{errors}");
    assert!(errors.contains("GET /missing") && errors.contains("OPTIONS *"));
    assert!(site.read("logs/debug.log").lines().all(|l| l.contains("internal dummy connection")));
}

#[test]
fn hostile_bytes_cannot_break_or_forge_a_line() {
    let site = Site::new();
    site.config("", "");
    let p = Pika::start(&site, "-X");
    let evil: Vec<Vec<u8>> = vec![
        b"GET /a\"b HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".to_vec(),
        b"GET / HTTP/1.1\r\nHost: localhost\r\nUser-Agent: x\" 200 1 \"-\" \"forged\r\nConnection: close\r\n\r\n"
            .to_vec(),
        b"GET / HTTP/1.1\r\nHost: localhost\r\nReferer: \xff\xfe\\\" \r\nConnection: close\r\n\r\n".to_vec(),
        b"GET /\x1b[31mred HTTP/1.1\r\nHost: localhost\r\n\r\n".to_vec(),
        b"GET /x\n127.0.0.1 - - [01/Jan/2000:00:00:00 +0000] \"GET /forged HTTP/1.1\" 200 1\r\n\r\n".to_vec(),
        b"GET /\x00nul HTTP/1.1\r\nHost: localhost\r\n\r\n".to_vec(),
    ];
    for req in &evil {
        let mut s = connect(p.addr);
        s.write_all(req).unwrap();
        read_response(&mut s, false);
    }
    let lines = wait_until(DEADLINE, "a line per request", || {
        let l = site.access_lines();
        (l.len() == evil.len()).then_some(l)
    });
    for l in &lines {
        assert!(is_combined(l), "not a whole record: {l:?}");
        assert!(!l.contains('\x1b') && !l.contains('\0'));
    }
    assert!(lines.iter().all(|l| !l.starts_with("127.0.0.1 - - [01/Jan/2000")));
    assert!(lines[1].ends_with("\"x\\\" 200 1 \\\"-\\\" \\\"forged\""), "{}", lines[1]);
    assert!(lines[2].contains("\\xff\\xfe\\\\\\\""), "{}", lines[2]);
}

/// A log that cannot be written: `/dev/full`'s device (every write fails with
/// ENOSPC) made at `path`. Not a link to it: pika follows no link to a log.
fn full_disk(path: &std::path::Path) {
    use nix::sys::stat::{Mode, SFlag, makedev, mknod};
    mknod(path, SFlag::S_IFCHR, Mode::from_bits_truncate(0o666), makedev(1, 7)).unwrap();
}

#[test]
fn a_failing_log_is_reported_once_and_recovers() {
    let site = Site::new();
    // One worker (max 1) writing each record at once (buffer 0): every request below
    // is a failed write by the same process.
    site.config(
        "",
        "[workers]\nstart = 1\nmin_spare = 0\nmax_spare = 1\nmax = 1\n\
         [[access_log]]\npath = \"logs/access.log\"\nbuffer = 0\n",
    );
    full_disk(&site.path("logs/access.log"));
    let p = Pika::start(&site, "-F");
    let worker = children_of(p.pid);
    assert_eq!(worker.len(), 1);
    // Spread over more than a master tick: a report per tick would show as well as
    // one per record.
    for _ in 0..6 {
        assert_eq!(get(p.addr, "/").status, 200, "serving goes on while the log fails");
        std::thread::sleep(Duration::from_millis(250));
    }
    wait_until(DEADLINE, "the failure reported", || site.error_log().contains("records are lost").then_some(()));
    assert_eq!(children_of(p.pid), worker, "one worker failed all six writes");
    assert_eq!(site.error_log().matches("records are lost").count(), 1, "said once");
    // The disk has room again (here: the path becomes a real file) and logrotate says so.
    std::fs::remove_file(site.path("logs/access.log")).unwrap();
    p.signal(SIGUSR1);
    wait_until(DEADLINE, "logs reopened", || site.error_log().contains("logs reopened").then_some(()));
    for _ in 0..3 {
        assert_eq!(get(p.addr, "/").status, 200);
    }
    wait_until(DEADLINE, "writing again", || (site.access_lines().len() == 3).then_some(()));
    wait_until(DEADLINE, "the recovery reported", || site.error_log().contains("writable again").then_some(()));
    assert_eq!(site.error_log().matches("writable again").count(), 1, "said once");
    assert_eq!(site.error_log().matches("records are lost").count(), 1, "nothing lost since");
}

/// Many clients, keep-alive, each request unique, until told to stop or `per_client`
/// is reached. Returns the paths of every request answered 200.
fn load(
    addr: SocketAddr,
    clients: usize,
    per_client: usize,
    stop: Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<Vec<String>>> {
    (0..clients)
        .map(|c| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut done = Vec::with_capacity(per_client.min(100_000));
                let mut conn: Option<TcpStream> = None;
                let mut i = 0;
                while i < per_client && !stop.load(Ordering::Relaxed) {
                    let mut s = conn.take().unwrap_or_else(|| connect(addr));
                    let path = format!("/index.html?c={c}&i={i}");
                    if s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes()).is_err() {
                        continue;
                    }
                    match read_response(&mut s, false) {
                        Some(r) if r.status == 200 => {
                            done.push(path);
                            i += 1;
                            if r.header("connection").is_none() {
                                conn = Some(s);
                            }
                        }
                        // A kept-alive connection closed by a retiring worker between
                        // requests: the request was never read; send it again.
                        _ => {}
                    }
                }
                done
            })
        })
        .collect()
}

/// Waits until the files `prefix*` in logs/ hold one line for each request of
/// `expected` and nothing else (`request_of` names a line's request), and returns
/// the lines. The master may rename or compress a file while it is read, so one
/// reading can miss or double a file's lines: it is read again until it agrees, and
/// after the deadline the failure names what is missing, doubled or unexpected.
fn wait_for_lines(
    site: &Site,
    prefix: &str,
    expected: &HashSet<String>,
    request_of: impl Fn(&str) -> String,
) -> Vec<String> {
    let end = std::time::Instant::now() + DEADLINE;
    loop {
        let lines = read_lines(site, prefix);
        let mut seen = HashSet::new();
        let doubled: Vec<&String> = lines.iter().filter(|l| !seen.insert(request_of(l))).collect();
        if doubled.is_empty() && seen == *expected {
            return lines;
        }
        if std::time::Instant::now() > end {
            let missing: Vec<&String> = expected.difference(&seen).take(5).collect();
            let extra: Vec<&String> = seen.difference(expected).take(5).collect();
            panic!(
                "{} lines for {} requests: missing {missing:?}, not requested {extra:?}, doubled {:?}",
                lines.len(),
                expected.len(),
                &doubled[..doubled.len().min(5)]
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every line of every file `prefix*` in logs/, as far as it could be read (a file
/// renamed or still being compressed reads short).
fn read_lines(site: &Site, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(site.path("logs")).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.starts_with(prefix) {
            continue;
        }
        let bytes = if name.ends_with(".gz") {
            std::fs::File::open(e.path()).and_then(|f| {
                let mut out = Vec::new();
                std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(f), &mut out).map(|_| out)
            })
        } else {
            std::fs::read(e.path())
        };
        out.extend(String::from_utf8_lossy(&bytes.unwrap_or_default()).lines().map(str::to_string));
    }
    out
}

/// The request path of a combined-format line (`/index.html?c=1&i=2`).
fn path_of(line: &str) -> String {
    line.split('"').nth(1).and_then(|r| r.split(' ').nth(1)).unwrap_or("").to_string()
}

#[test]
fn rotation_under_load_loses_and_doubles_nothing() {
    let site = Site::new();
    let conf = |tag: &str| {
        format!(
            "[workers]\nstart = 4\nmin_spare = 2\nmax_spare = 6\n# {tag}\n\
             [[access_log]]\npath = \"logs/access.log\"\nformat = \"combined\"\n\
             rotate = {{ size = \"128KiB\", keep = 1000, naming = \"numbered\" }}\n"
        )
    };
    site.config("", &conf("start"));
    let p = Pika::start(&site, "-F");
    let stop = Arc::new(AtomicBool::new(false));
    let clients = load(p.addr, 8, usize::MAX, stop.clone());
    // Meanwhile: rotations by signal (an external rename, then USR1), reloads, and
    // (once a second, by the master) rotations by size. The load runs until all of
    // them happened, however fast this machine serves it.
    let built_in = || {
        std::fs::read_dir(site.path("logs"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().trim_start_matches("access.log.").parse::<u32>().is_ok())
            .count()
    };
    let mut external = 0;
    let mut reloads = 0;
    let mut round = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while external < 15 || reloads < 5 || built_in() < 5 {
        assert!(std::time::Instant::now() < deadline, "{external} external, {reloads} reloads, {} by size", built_in());
        assert!(clients.iter().all(|c| !c.is_finished()), "a client gave up");
        std::thread::sleep(Duration::from_millis(250));
        round += 1;
        if round % 4 == 0 && reloads < 5 {
            site.config("", &conf(&format!("reload {reloads}")));
            p.signal(SIGHUP);
            reloads += 1;
        } else if external < 15 {
            let to = site.path(&format!("logs/access.log.ext{external}"));
            if std::fs::rename(site.path("logs/access.log"), to).is_ok() {
                p.signal(SIGUSR1);
                external += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let made: Vec<String> = clients.into_iter().flat_map(|c| c.join().unwrap()).collect();
    assert!(made.len() >= 5_000, "only {} requests", made.len());
    let expected: HashSet<String> = made.iter().cloned().collect();
    assert_eq!(expected.len(), made.len(), "each request is unique");
    // Exactly one line per request: none lost, none doubled, none for a request not
    // made (an internal one).
    let lines = wait_for_lines(&site, "access.log", &expected, path_of);
    for l in &lines {
        assert!(is_combined(l), "torn or malformed: {l:?}");
    }
}

#[test]
fn goaccess_reads_the_combined_log() {
    let Some(goaccess) = need_tool("goaccess") else { return };
    let site = Site::new();
    site.write("htdocs/style.css", "body{}");
    site.config("", "");
    let p = Pika::start(&site, "-X");
    for path in ["/", "/style.css", "/missing", "/?q=1"] {
        get_with(p.addr, path, "Referer: http://example.com/\r\nUser-Agent: Mozilla/5.0 (X11; Linux x86_64)\r\n");
    }
    wait_until(DEADLINE, "4 lines", || (site.access_lines().len() == 4).then_some(()));
    let out = std::process::Command::new(goaccess)
        .arg(site.path("logs/access.log"))
        .args(["--log-format=COMBINED", "--no-global-config", "-o"])
        .arg(site.path("report.json"))
        .output()
        .unwrap();
    assert!(out.status.success(), "goaccess failed: {}", String::from_utf8_lossy(&out.stderr));
    let report = site.read("report.json");
    let total =
        report.split("\"total_requests\":").nth(1).and_then(|r| r.trim_start().split([',', '}']).next()).map(str::trim);
    assert_eq!(total, Some("4"), "{}", &report[..report.len().min(600)]);
    let invalid = report
        .split("\"failed_requests\":")
        .nth(1)
        .and_then(|r| r.trim_start().split([',', '}']).next())
        .map(str::trim);
    assert_eq!(invalid, Some("0"));
}

#[test]
fn time_rotation_with_patterns_compression_and_the_error_log() {
    let site = Site::new();
    site.config(
        "error_log_rotate = { size = \"1\", keep = 2 }",
        "[workers]\nstart = 1\nmin_spare = 1\nmax_spare = 2\n\
         [[access_log]]\npath = \"logs/access.log\"\n\
         rotate = { interval = \"2s\", naming = \"%Y%m%d-%H%M%S\", local_time = false, compress = true, keep = 50 }\n",
    );
    let p = Pika::start(&site, "-F");
    let mut made = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let gz = || {
        std::fs::read_dir(site.path("logs"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().to_string())
            .filter(|n| n.starts_with("access.log.") && n.ends_with(".gz"))
            .collect::<Vec<_>>()
    };
    while gz().len() < 2 {
        assert!(std::time::Instant::now() < deadline, "no compressed rotations: {:?}", gz());
        made += 1;
        assert_eq!(get(p.addr, &format!("/?n={made}")).status, 200);
        std::thread::sleep(Duration::from_millis(100));
    }
    // Names come from the period (UTC, aligned to 2 s: an even second).
    for name in gz() {
        let stamp = name.trim_start_matches("access.log.").trim_end_matches(".gz");
        let secs: u32 = stamp.split('.').next().unwrap()[13..15].parse().unwrap();
        assert_eq!(secs % 2, 0, "{name}");
    }
    // One line per request across the rotated files (rotations go on meanwhile).
    let expected: HashSet<String> = (1..=made).map(|n| format!("/?n={n}")).collect();
    wait_for_lines(&site, "access.log", &expected, path_of);
    // The error log rotates too (1-byte limit: every tick with a new line), keeping 2.
    wait_until(DEADLINE, "a rotated error log", || site.path("logs/error.log.1").exists().then_some(()));
    assert!(!site.path("logs/error.log.3").exists());
    assert!(site.path("logs/error.log").exists());
}

#[test]
fn syslog_lines_carry_each_processes_own_pid() {
    use std::os::unix::net::UnixDatagram;
    let site = Site::new();
    let sock_path = site.path("syslog.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    site.config(
        &format!("error_log = \"syslog:local3\"\nsyslog_socket = \"{}\"", sock_path.display()),
        "[workers]\nstart = 1\nmin_spare = 1\nmax_spare = 2\n",
    );
    full_disk(&site.path("logs/access.log"));
    let mut child = std::process::Command::new(BIN)
        .args(["-F", "-f"])
        .arg(site.path("conf/pika.toml"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let master = child.id() as i32;
    let mut messages: Vec<String> = Vec::new();
    let recv = |messages: &mut Vec<String>| {
        let mut buf = [0u8; 2048];
        while let Ok(n) = sock.recv(&mut buf) {
            messages.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
    };
    let addr = wait_until(DEADLINE, "the listening line over syslog", || {
        recv(&mut messages);
        listening_addr(&messages.join("\n"))
    });
    // local3 = 19, info = 6: <158>
    let listening = messages.iter().find(|m| m.contains("listening on")).unwrap().clone();
    assert!(listening.starts_with("<158>") && listening.contains(&format!("pika[{master}]:")), "{listening}");
    // A worker's own complaint (its access log cannot be written) names the worker.
    wait_until(DEADLINE, "pika to serve", || (get(addr, "/").status == 200).then_some(()));
    let line = wait_until(DEADLINE, "a worker's message", || {
        recv(&mut messages);
        messages.iter().find(|m| m.contains("records are lost")).cloned()
    });
    let pid: i32 = line.split("pika[").nth(1).unwrap().split(']').next().unwrap().parse().unwrap();
    assert_ne!(pid, master);
    assert_eq!(ppid_of(pid), Some(master), "{line}");
    assert!(line.starts_with("<155>"), "error severity (3) at local3: {line}");
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(master), nix::sys::signal::Signal::SIGTERM);
    let _ = child.wait();
}

/// The numbers `n` of the `GET /?n=N` lines in `logs/NAME`.
fn numbers_in(site: &Site, name: &str) -> Vec<u32> {
    let text = std::fs::read_to_string(site.path(&format!("logs/{name}"))).unwrap_or_default();
    let mut n: Vec<u32> =
        text.lines().filter_map(|l| l.split("GET /?n=").nth(1)?.split(' ').next()?.parse().ok()).collect();
    n.sort();
    n
}

/// Requests `/?n=N` for each N in `range` on a kept-alive connection, then one more
/// (`/?sync`) on the same: its answer means that worker has taken the last counted
/// record (a record is made after its response is sent). A worker retiring after a
/// reload closes the connection (and writes its records as it exits): then the next
/// request goes on a new one.
fn numbered_requests(addr: SocketAddr, range: std::ops::RangeInclusive<u32>) {
    let mut conn: Option<TcpStream> = None;
    let mut ask = |path: &str| {
        let s = conn.get_or_insert_with(|| connect(addr));
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes()).unwrap();
        let r = read_response(s, false).expect("a response");
        assert_eq!(r.status, 200);
        if r.header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close")) {
            conn = None;
        }
    };
    for n in range {
        ask(&format!("/?n={n}"));
    }
    ask("/?sync");
}

#[test]
fn held_records_are_written_on_reload_after_a_rotation_and_on_a_fast_stop() {
    let site = Site::new();
    // Nothing is written for age (an hour) or for want of room (64 KiB): only the
    // events under test write the held records.
    let conf = |tag: &str| {
        format!(
            "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 2\n# {tag}\n\
             [[access_log]]\npath = \"logs/access.log\"\nformat = \"combined\"\n\
             buffer = \"64KiB\"\nflush = \"1h\"\n"
        )
    };
    site.config("", &conf("first"));
    let mut p = Pika::start(&site, "-F");
    numbered_requests(p.addr, 1..=5);
    assert_eq!(numbers_in(&site, "access.log"), [0u32; 0], "held, not written");
    // A reload retires the workers: each writes what it holds before it exits.
    site.config("", &conf("second"));
    p.signal(SIGHUP);
    wait_until(DEADLINE, "the retired workers' records", || {
        (numbers_in(&site, "access.log") == [1, 2, 3, 4, 5]).then_some(())
    });
    // (A worker of the old generation may still serve some of these, and write them
    // when it retires, before the rotation below.)
    numbered_requests(p.addr, 6..=10);
    // A rotation: records held across it go to the new file, never to the old one
    // (which logrotate or the built-in rotation may compress at once).
    std::fs::rename(site.path("logs/access.log"), site.path("logs/access.log.1")).unwrap();
    p.signal(SIGUSR1);
    wait_until(DEADLINE, "logs reopened", || site.error_log().contains("logs reopened").then_some(()));
    numbered_requests(p.addr, 11..=15);
    assert!(numbers_in(&site, "access.log").iter().all(|&n| n < 11), "11 to 15 are still held");
    // A fast stop: TERM ends the workers at once, and their handler writes the records.
    p.signal(15);
    assert!(p.wait_exit(DEADLINE).is_some(), "pika did not stop");
    let old = numbers_in(&site, "access.log.1");
    let new = numbers_in(&site, "access.log");
    assert!(old.starts_with(&[1, 2, 3, 4, 5]), "written at the reload: {old:?}");
    assert!(new.ends_with(&[11, 12, 13, 14, 15]), "after the rotation, in the new file: {new:?}");
    let mut all = [old, new].concat();
    all.sort();
    assert_eq!(all, (1..=15).collect::<Vec<_>>(), "each record once");
}

#[test]
fn single_process_mode_writes_held_records_when_terminated() {
    let site = Site::new();
    site.config("", "[[access_log]]\npath = \"logs/access.log\"\nbuffer = \"64KiB\"\nflush = \"1h\"\n");
    let mut p = Pika::start(&site, "-X");
    numbered_requests(p.addr, 1..=3);
    assert_eq!(numbers_in(&site, "access.log"), [0u32; 0], "held, not written");
    p.signal(15);
    let status = wait_until(DEADLINE, "pika -X to end", || p.child.try_wait().ok().flatten());
    // The handler ends the process the way TERM would have.
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(15), "{status}");
    assert_eq!(numbers_in(&site, "access.log"), [1, 2, 3]);
}

#[test]
fn rotated_logs_are_compressed_in_process_by_an_unprivileged_child() {
    let site = Site::new();
    site.config(
        "",
        "[workers]\nstart = 1\nmin_spare = 1\nmax_spare = 2\n\
         [[access_log]]\npath = \"logs/access.log\"\nbuffer = 0\n\
         rotate = { size = \"1\", keep = 3, compress = true }\n",
    );
    // No gzip to be found: none is needed, and none found through PATH is run as root.
    let p = Pika::start_env(&site, "-F", &[("PATH", "/nonexistent")]);
    assert_eq!(get(p.addr, "/index.html").status, 200);
    let gz = site.path("logs/access.log.1.gz");
    wait_until(DEADLINE, "access.log.1.gz in place of access.log.1", || {
        (gz.exists() && !site.path("logs/access.log.1").exists()).then_some(())
    });
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(std::fs::File::open(&gz).unwrap()), &mut text)
        .unwrap();
    assert!(text.contains("\"GET /index.html HTTP/1.1\" 200"), "{text}");
    // With no server.user the compressor runs as the overflow uid, not root.
    let log = site.error_log();
    assert!(log.contains("compressing a rotated log as uid 65534 gid 65534"), "{log}");
    assert!(!log.contains("cannot compress"), "{log}");
}

/// `format = "json"` read by a real consumer, jq: every line of every file (rotated
/// by size mid-run) parses, one object per request, client bytes decode back, and a
/// filter applies as it does to the text formats.
#[test]
fn json_logs_are_read_by_jq_across_rotations_and_filters() {
    let Some(jq) = need_tool("jq") else { return };
    let site = Site::new();
    site.config(
        "",
        "[[access_log]]\npath = \"logs/access.json\"\nformat = \"json\"\nbuffer = 0\nrotate = { size = 2000, keep = 50 }\n\
         [[access_log]]\npath = \"logs/errors.json\"\nformat = \"json\"\nbuffer = 0\ninclude = [{ status = \"4xx\" }]\n",
    );
    let p = Pika::start(&site, "-F");
    // Quotes, a backslash, a byte that is not UTF-8 (obs-text, allowed in a header
    // value), UTF-8, and text that looks like JSON.
    let ua = b"evil \"agent\" \\ \xff caf\xc3\xa9 \"}{\"forged\":1}";
    let mut hostile = b"GET /hostile?q=%22 HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nUser-Agent: ".to_vec();
    hostile.extend_from_slice(ua);
    hostile.extend_from_slice(b"\r\nReferer: http://ref.example/\r\n\r\n");
    assert_eq!(raw(p.addr, &hostile).status, 404);
    // A control byte in a header: refused (400), and still one record of JSON.
    assert_eq!(raw(p.addr, b"GET /bad HTTP/1.1\r\nHost: localhost\r\nX: a\x01\"b\r\n\r\n").status, 400);
    let mut made = Vec::new();
    for i in 0..60 {
        let path = if i % 10 == 9 { format!("/missing-{i}") } else { format!("/?n={i}") };
        get(p.addr, &path);
        made.push(path);
        if i == 29 {
            wait_until(DEADLINE, "a size rotation", || site.path("logs/access.json.1").exists().then_some(()));
        }
    }
    p.signal(3); // SIGQUIT: a graceful stop
    let mut p = p;
    assert!(p.wait_exit(DEADLINE).is_some());

    let files: Vec<std::path::PathBuf> = std::fs::read_dir(site.path("logs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("access.json"))
        .collect();
    assert!(files.len() >= 2, "rotated: {files:?}");
    let jq_lines = |filter: &str, files: &[std::path::PathBuf]| -> Vec<String> {
        let o = std::process::Command::new(&jq).args(["-r", filter]).args(files).output().unwrap();
        assert!(o.status.success(), "jq {filter}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap().lines().map(str::to_string).collect()
    };
    // One object per line, every line an object with every key.
    let text: String = files.iter().map(|f| std::fs::read_to_string(f).unwrap()).collect();
    let keys = jq_lines("keys_unsorted | join(\",\")", &files);
    assert_eq!(keys.len(), text.lines().count(), "one object per line");
    let want = "time,client,user,request,method,path,query,protocol,status,bytes,bytes_sent,referer,user_agent,\
                duration_us,vhost,host,request_id,tls,upstream";
    assert!(keys.iter().all(|k| k == want), "{keys:?}");
    let mut paths = jq_lines(
        "select(.status != 400 and .path != \"/hostile\") | if .query then \"\\(.path)?\\(.query)\" else .path end",
        &files,
    );
    paths.sort();
    made.sort();
    assert_eq!(paths, made, "every request once, across the rotated files");
    let hostile = jq_lines("select(.path == \"/hostile\") | [.status, .query, .referer, .user_agent] | @json", &files);
    assert_eq!(hostile.len(), 1, "the hostile request is one record");
    let fields: serde_json::Value = serde_json::from_str(&hostile[0]).unwrap();
    // The User-Agent as sent, its byte 0xff as U+00FF.
    let want_ua = "evil \"agent\" \\ \u{ff} café \"}{\"forged\":1}";
    assert_eq!(fields, serde_json::json!([404, "q=%22", "http://ref.example/", want_ua]));
    assert_eq!(jq_lines("select(.status == 400) | .request", &files), ["GET /bad HTTP/1.1"]);
    let times =
        jq_lines(".time | test(\"^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\\\.[0-9]{3}Z$\")", &files);
    assert!(times.iter().all(|t| t == "true"), "{times:?}");
    // Sorted: a record is written after its response, so two workers may swap two.
    let mut errors = jq_lines(".status", &[site.path("logs/errors.json")]);
    errors.sort();
    assert_eq!(errors, [&["400"][..], &["404"; 7]].concat(), "the 4xx filter");
}

/// The rotated files of `logs/NAME` (not the live one), by name.
fn rotated(site: &Site, name: &str) -> Vec<String> {
    let prefix = format!("{name}.");
    let mut out: Vec<String> = std::fs::read_dir(site.path("logs"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    out.sort();
    out
}

/// `keep` bounds the old files of every kind of rotation, compressed or not: numbered
/// (rotated by size) and named from a time pattern (rotated every second).
#[test]
fn keep_bounds_the_rotated_files_of_every_naming_compressed_or_not() {
    const KEEP: usize = 2;
    let logs = [
        ("num.log", "size = \"1\", naming = \"numbered\""),
        ("numgz.log", "size = \"1\", naming = \"numbered\", compress = true"),
        ("pat.log", "interval = \"1s\", naming = \"%H%M%S\", local_time = false"),
        ("patgz.log", "interval = \"1s\", naming = \"%H%M%S\", local_time = false, compress = true"),
    ];
    let site = Site::new();
    let tables: String = logs
        .iter()
        .map(|(name, rotate)| {
            format!("[[access_log]]\npath = \"logs/{name}\"\nbuffer = 0\nrotate = {{ {rotate}, keep = {KEEP} }}\n")
        })
        .collect();
    site.config("", &format!("[workers]\nstart = 1\nmin_spare = 1\nmax_spare = 2\n{tables}"));
    let p = Pika::start(&site, "-F");
    // A request every 200 ms: each log has a line in every one-second period, and
    // is over its one-byte size at every tick, so each rotates once a tick.
    let mut made = 0;
    let enough = |site: &Site| site.error_log().matches("logs rotated").count() >= 2 * KEEP + 2;
    let deadline = std::time::Instant::now() + DEADLINE;
    while !enough(&site) {
        assert!(
            std::time::Instant::now() < deadline,
            "rotations: {}",
            site.error_log().matches("logs rotated").count()
        );
        made += 1;
        assert_eq!(get(p.addr, &format!("/?n={made}")).status, 200);
        for (name, _) in &logs {
            // An old file being compressed is there twice for a moment (FILE and
            // FILE.gz); counted once, old files never exceed keep.
            let old: HashSet<String> =
                rotated(&site, name).into_iter().map(|n| n.trim_end_matches(".gz").to_string()).collect();
            assert!(old.len() <= KEEP, "{name}: {old:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // Once the last compression is done, exactly `keep` old files, compressed where
    // asked and only there.
    for (name, rotate) in &logs {
        let compress = rotate.contains("compress");
        let old = wait_until(DEADLINE, &format!("{KEEP} old {name} files"), || {
            let old = rotated(&site, name);
            (old.len() == KEEP && old.iter().all(|n| n.ends_with(".gz") == compress)).then_some(old)
        });
        if rotate.contains("numbered") {
            let want: Vec<String> =
                (1..=KEEP).map(|i| format!("{name}.{i}{}", if compress { ".gz" } else { "" })).collect();
            assert_eq!(old, want);
        }
    }
}

/// `%I` is every byte the request took: its head and its body, framing included,
/// also when the body came in later turns while the connection waited in the set.
/// (`%{remote}p` is each client's own port.)
#[test]
fn bytes_in_count_a_body_that_came_after_its_head() {
    let site = Site::new();
    site.config(
        "",
        "[[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n\
         [[vhost.location]]\nexact = \"/echo\"\necho = true\n\
         [[access_log]]\npath = \"logs/in.log\"\nformat = \"%r %I %{remote}p\"\nbuffer = 0\n",
    );
    let p = Pika::start(&site, "-X");
    let head = "POST /echo HTTP/1.1\r\nHost: localhost\r\nContent-Length: 700\r\nConnection: close\r\n\r\n";
    let mut s = connect(p.addr);
    let first_port = s.local_addr().unwrap().port();
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(&[b'a'; 100]).unwrap();
    // The rest after a pause: the connection waits for it in the worker's set.
    std::thread::sleep(Duration::from_millis(300));
    s.write_all(&[b'b'; 600]).unwrap();
    assert_eq!(read_response(&mut s, false).expect("the echo").body.len(), 700);
    // And a chunked one, its framing counted.
    let chunked = "POST /echo HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    let mut s = connect(p.addr);
    let second_port = s.local_addr().unwrap().port();
    s.write_all(chunked.as_bytes()).unwrap();
    s.write_all(b"5\r\nhello\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    s.write_all(b"6\r\n world\r\n0\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s, false).expect("the echo").text(), "hello world");
    let want = [
        format!("POST /echo HTTP/1.1 {} {first_port}", head.len() + 700),
        format!("POST /echo HTTP/1.1 {} {second_port}", chunked.len() + "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n".len()),
    ];
    let lines = wait_until(DEADLINE, "both records", || {
        let l: Vec<String> = site.read("logs/in.log").lines().map(str::to_string).collect();
        (l.len() == 2).then_some(l)
    });
    assert_eq!(lines, want);
}

#[test]
fn a_killed_workers_held_records_are_written_by_the_master() {
    let site = Site::new();
    // One worker, holding every record (nothing is old enough or too many to write):
    // only its death can bring them out.
    site.config(
        "",
        "[workers]\nstart = 1\nmin_spare = 1\nmax_spare = 2\nmax = 1\n\
         [[access_log]]\npath = \"logs/access.log\"\nformat = \"combined\"\nbuffer = \"64KiB\"\nflush = \"1h\"\n",
    );
    let mut p = Pika::start(&site, "-F");
    numbered_requests(p.addr, 1..=40);
    assert_eq!(numbers_in(&site, "access.log"), [0u32; 0], "held, not written");
    let worker = n_children(p.pid, 1)[0];
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker), nix::sys::signal::Signal::SIGKILL).unwrap();
    wait_until(DEADLINE, "the killed worker's records", || {
        (numbers_in(&site, "access.log") == (1..=40).collect::<Vec<_>>()).then_some(())
    });
    assert!(site.error_log().contains(&format!("access-log records worker {worker} (slot 0) held")));
    // The slot's next worker holds its own records, and the master writes none of
    // the first one's again.
    wait_until(DEADLINE, "a new worker", || children_of(p.pid).iter().any(|&w| w != worker).then_some(()));
    numbered_requests(p.addr, 41..=45);
    p.signal(15);
    assert!(p.wait_exit(DEADLINE).is_some(), "pika did not stop");
    assert_eq!(numbers_in(&site, "access.log"), (1..=45).collect::<Vec<_>>(), "each record once");
}

#[test]
fn a_fast_stop_logs_the_answers_being_written_with_the_bytes_that_went() {
    let site = Site::new();
    const SIZE: usize = 32 << 20;
    site.write("htdocs/big.bin", vec![b'x'; SIZE]);
    site.config(
        "",
        "[workers]\nstart = 1\nmin_spare = 1\nmax_spare = 2\nmax = 1\n\
         [[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n\
         [[vhost.location]]\nexact = \"/st\"\nstatus = true\n\
         [[access_log]]\npath = \"logs/access.log\"\nformat = \"%U %>s %X %O\"\nbuffer = \"64KiB\"\nflush = \"1h\"\n",
    );
    let mut p = Pika::start(&site, "-F");
    // A client that asks for 32 MiB and reads none of it: the answer waits in the
    // worker for room that never comes.
    let mut stuck = connect(p.addr);
    stuck.write_all(b"GET /big.bin HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    wait_until(DEADLINE, "an answer waiting for room", || {
        get(p.addr, "/st?auto").text().contains("ConnsAsyncWriting: 1").then_some(())
    });
    assert_eq!(get(p.addr, "/index.html").status, 200);
    assert!(site.access_lines().is_empty(), "held, not written");
    p.signal(15);
    assert!(p.wait_exit(DEADLINE).is_some(), "pika did not stop");
    let lines = site.access_lines();
    assert!(lines.iter().any(|l| l.starts_with("/index.html 200 - ")), "{lines:?}");
    let cut: Vec<&String> = lines.iter().filter(|l| l.starts_with("/big.bin 200 X ")).collect();
    assert_eq!(cut.len(), 1, "the cut answer, once: {lines:?}");
    let sent: usize = cut[0].rsplit(' ').next().unwrap().parse().unwrap();
    assert!(sent > 0 && sent < SIZE, "the bytes that went: {sent}");
    drop(stuck);
}

#[test]
fn a_worker_a_script_holds_at_a_fast_stop_writes_its_records_from_its_alarm() {
    use std::os::unix::fs::PermissionsExt;
    let site = Site::new();
    site.write("htdocs/cgi-bin/sleep.sh", "#!/bin/sh\nsleep 30\n");
    std::fs::set_permissions(site.path("htdocs/cgi-bin/sleep.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    site.config(
        "",
        "[workers]\nstart = 1\nmin_spare = 1\nmax_spare = 2\nmax = 1\n\
         [[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n\
         [[vhost.location]]\nprefix = \"/cgi-bin/\"\ncgi = true\nscript_timeout = \"20s\"\n\
         [[access_log]]\npath = \"logs/access.log\"\nformat = \"%U %>s\"\nbuffer = \"64KiB\"\nflush = \"1h\"\n",
    );
    let mut p = Pika::start(&site, "-F");
    assert_eq!(get(p.addr, "/index.html").status, 200);
    let worker = n_children(p.pid, 1)[0];
    let addr = p.addr;
    let _waiting = std::thread::spawn(move || raw(addr, b"GET /cgi-bin/sleep.sh HTTP/1.1\r\nHost: localhost\r\n\r\n"));
    wait_until(DEADLINE, "the script running", || (!children_of(worker).is_empty()).then_some(()));
    let stop = std::time::Instant::now();
    p.signal(15);
    assert!(p.wait_exit(DEADLINE).is_some(), "pika did not stop");
    // The worker's loop never came back from the script: its alarm wrote the record
    // and ended it, a second after TERM, before the master's KILL (3 s) would have.
    assert!(stop.elapsed() < Duration::from_millis(2900), "{:?}", stop.elapsed());
    assert_eq!(site.access_lines(), ["/index.html 200"]);
    assert!(!site.error_log().contains("bytes of access-log records worker"), "{}", site.error_log());
}
