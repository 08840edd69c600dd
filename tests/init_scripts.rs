//! The files in `init/` that install pika on a system, run for real: the SysV script
//! drives a daemon through its life, the logrotate snippet rotates a server's logs
//! while clients keep it busy, and the systemd unit is read and verified by
//! `systemd-analyze`. Tests whose tool is missing are skipped (see `util::need_tool`).
//!
//! Each test reads the shipped file and only swaps its installed paths (/usr/sbin/pika,
//! /etc/pika/pika.toml, /var/log/pika) for the temp site's, so what ships is what runs.

use std::collections::{BTreeSet, HashSet};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread::JoinHandle;

use crate::util::*;

/// The installed paths the shipped files name, each swapped for a test path.
const INSTALLED_BIN: &str = "/usr/sbin/pika";
const INSTALLED_CONF: &str = "/etc/pika/pika.toml";
/// The logrotate snippet's log glob and its pika command (each must appear once).
const ROTATE_GLOB: &str = "/var/log/pika/*.log";
const ROTATE_PIKA: &str = "/usr/sbin/pika -f /etc/pika/pika.toml";

fn shipped(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("init").join(name)
}

fn shipped_text(name: &str) -> String {
    std::fs::read_to_string(shipped(name)).unwrap_or_else(|e| panic!("init/{name}: {e}"))
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Stops the daemon named by the site's pid file when dropped (a test that fails
/// midway must not leave a server behind). Only a pika running this site's config is
/// signalled: the pid in a stale file may belong to someone else by now.
struct DaemonGuard<'a> {
    site: &'a Site,
}

impl DaemonGuard<'_> {
    fn pid(&self) -> Option<i32> {
        self.site.read("logs/pika.pid").trim().parse().ok()
    }
}

impl Drop for DaemonGuard<'_> {
    fn drop(&mut self) {
        let Some(pid) = self.pid() else { return };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let conf = self.site.path("conf/pika.toml");
        if !alive(pid) || !String::from_utf8_lossy(&cmdline).contains(conf.to_str().unwrap()) {
            return;
        }
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
        let _ = std::panic::catch_unwind(|| wait_until(DEADLINE, "daemon exit", || (!alive(pid)).then_some(())));
    }
}

/// Runs the init script with `shell`, pointed at the test binary and the site's config.
fn init_with(shell: &str, site: &Site, action: &str) -> Output {
    Command::new(shell)
        .arg(shipped("pika.init"))
        .args((!action.is_empty()).then_some(action))
        .env("PIKA_BIN", BIN)
        .env("PIKA_CONF", site.path("conf/pika.toml"))
        .env("PIKA_DEFAULTS", "/nonexistent")
        .env("PIKA_LSB_FUNCTIONS", "/nonexistent")
        .stdin(Stdio::null())
        .output()
        .expect("run the init script")
}

fn init(site: &Site, action: &str) -> Output {
    init_with("bash", site, action)
}

fn assert_code(o: &Output, code: i32, what: &str) {
    assert_eq!(o.status.code(), Some(code), "{what}: {}", text(o));
}

fn serving_addr(site: &Site) -> SocketAddr {
    listening_addr(&site.error_log()).expect("a listening line in the error log")
}

#[test]
fn sysv_script_drives_the_daemon_with_lsb_exit_codes() {
    let site = Site::new();
    site.config("", "[workers]\nstart = 1\nmin_spare = 1\n");
    let guard = DaemonGuard { site: &site };

    assert_code(&init(&site, "start"), 0, "start");
    let pid = guard.pid().expect("pid file written");
    assert!(alive(pid));
    assert_eq!(get(serving_addr(&site), "/").status, 200);
    let again = init(&site, "start");
    assert_code(&again, 0, "start when running");
    assert!(text(&again).contains(&format!("already running (pid {pid})")), "{}", text(&again));

    let status = init(&site, "status");
    assert_code(&status, 0, "status when running");
    assert!(text(&status).contains(&format!("pika is running (pid {pid})")), "{}", text(&status));

    // The defaults file is read (PIKA_BIN comes from it) and the environment wins over
    // it (its PIKA_CONF is wrong, the environment's is right).
    site.write("default-pika", format!("PIKA_BIN={BIN}\nPIKA_CONF=/nonexistent/pika.toml\n"));
    let o = Command::new("bash")
        .arg(shipped("pika.init"))
        .arg("status")
        .env_remove("PIKA_BIN")
        .env("PIKA_CONF", site.path("conf/pika.toml"))
        .env("PIKA_DEFAULTS", site.path("default-pika"))
        .env("PIKA_LSB_FUNCTIONS", "/nonexistent")
        .output()
        .unwrap();
    assert_code(&o, 0, "status with PIKA_BIN from the defaults file");

    assert_code(&init(&site, "reload"), 0, "reload");
    let s = site.status();
    assert!(s.contains("generation: 1\n"), "{s}");
    assert_eq!(guard.pid(), Some(pid), "a reload keeps the master");
    assert_eq!(get(serving_addr(&site), "/").status, 200);

    assert_code(&init(&site, "restart"), 0, "restart");
    let second = guard.pid().expect("pid file after restart");
    assert_ne!(second, pid, "restart starts a new master");
    assert!(!alive(pid) && alive(second));
    assert_eq!(get(serving_addr(&site), "/").status, 200);

    assert_code(&init(&site, "stop"), 0, "stop");
    assert!(!alive(second), "the master is gone");
    assert!(!site.path("logs/pika.pid").exists(), "pid file removed");
    assert_code(&init(&site, "status"), 3, "status when stopped");
    let o = init(&site, "stop");
    assert_code(&o, 0, "stop when stopped");
    assert!(text(&o).contains("not running"), "{}", text(&o));
    assert_code(&init(&site, "reload"), 7, "reload when stopped");
    assert_code(&init(&site, "force-reload"), 0, "force-reload when stopped");
    assert_code(&init(&site, "frobnicate"), 2, "unknown action");
    assert_code(&init(&site, ""), 2, "no action");
    // The shebang's shell (dash on Debian) runs it too.
    assert_code(&init_with("sh", &site, "status"), 3, "status under sh");
    assert_code(&init_with("sh", &site, "stop"), 0, "stop under sh");
}

/// Clients that request the site until told to stop, each request on its own
/// connection read to the close. pika logs a request before it closes the connection,
/// so once a client has its answer, that request's line is written.
struct Load {
    handles: Vec<JoinHandle<usize>>,
    done: Arc<AtomicUsize>,
    finish: Arc<AtomicBool>,
    abort: Arc<AtomicBool>,
}

/// Concurrent clients; the access-log lines name them (`/?c=CLIENT&n=N`).
const CLIENTS: usize = 4;
/// Requests in all, at least. The three rotations start once a quarter, a half and
/// three quarters of them are done; the clients keep going while pika reopens.
const REQUESTS: usize = 300;
const AGENT: &str = "pika-init-test";

impl Load {
    fn start(addr: SocketAddr) -> Load {
        let done = Arc::new(AtomicUsize::new(0));
        let finish = Arc::new(AtomicBool::new(false));
        let abort = Arc::new(AtomicBool::new(false));
        let handles = (0..CLIENTS)
            .map(|c| {
                let (done, finish, abort) = (done.clone(), finish.clone(), abort.clone());
                std::thread::spawn(move || {
                    let mut n = 0;
                    loop {
                        let enough = finish.load(Ordering::SeqCst) && done.load(Ordering::SeqCst) >= REQUESTS;
                        if enough || abort.load(Ordering::SeqCst) {
                            return n;
                        }
                        n += 1;
                        let mut s = connect(addr);
                        let req = format!(
                            "GET /?c={c}&n={n} HTTP/1.1\r\nHost: localhost\r\nUser-Agent: {AGENT}\r\nConnection: close\r\n\r\n"
                        );
                        s.write_all(req.as_bytes()).unwrap();
                        let resp = read_until_closed(&mut s, DEADLINE);
                        assert!(resp.starts_with(b"HTTP/1.1 200 "), "client {c} request {n}: {resp:?}");
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        Load { handles, done, finish, abort }
    }

    fn done(&self) -> usize {
        self.done.load(Ordering::SeqCst)
    }

    fn assert_running(&self) {
        assert!(!self.handles.iter().any(|h| h.is_finished()), "a client stopped early (see its panic above)");
    }

    /// Lets the clients finish once `REQUESTS` are done; returns each one's count.
    fn join(mut self) -> Vec<usize> {
        self.finish.store(true, Ordering::SeqCst);
        self.handles.drain(..).map(|h| h.join().expect("client thread")).collect()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        // A failed test must not leave clients looping.
        self.abort.store(true, Ordering::SeqCst);
    }
}

/// The client and request number of one access-log line, if it is whole and well formed.
fn request_of(line: &str) -> Option<(usize, usize)> {
    let rest = line.strip_prefix("127.0.0.1 - - [")?;
    let (_, rest) = rest.split_once("] \"GET /?c=")?;
    let (query, rest) = rest.split_once(" HTTP/1.1\" 200 ")?;
    let (c, n) = query.split_once("&n=")?;
    rest.ends_with(&format!("\"{AGENT}\"")).then_some(())?;
    Some((c.parse().ok()?, n.parse().ok()?))
}

#[test]
fn logrotate_snippet_rotates_under_load_without_losing_a_line() {
    let Some(logrotate) = need_tool("logrotate") else { return };
    // The snippet compresses with gzip, and so does this test's reading.
    let Some(gzip) = need_tool("gzip") else { return };
    let snippet = shipped_text("pika.logrotate");
    for needle in [ROTATE_GLOB, ROTATE_PIKA] {
        assert_eq!(snippet.matches(needle).count(), 1, "init/pika.logrotate names {needle} once");
    }
    let directives: Vec<&str> = snippet.lines().map(str::trim).filter(|l| !l.starts_with('#')).collect();
    for d in ["daily", "rotate 14", "compress", "delaycompress", "missingok", "notifempty", "sharedscripts"] {
        assert!(directives.contains(&d), "init/pika.logrotate lacks {d}");
    }
    assert!(!directives.contains(&"copytruncate"), "rotation must rename, never copytruncate");
    assert!(directives.iter().any(|d| d.starts_with("create 0640 ")), "init/pika.logrotate creates 0640 files");

    let site = Site::new();
    let conf = site.config("", "[workers]\nstart = 2\nmin_spare = 2\nmax_spare = 4\n");
    let logs = site.path("logs");
    let mut rotate_conf = snippet
        .replace(ROTATE_GLOB, &format!("{}/*.log", logs.display()))
        .replace(ROTATE_PIKA, &format!("{BIN} -f {}", conf.display()));
    if !nix::unistd::geteuid().is_root() {
        // Only root may hand a file to root:adm; keep the mode, take our own owner.
        rotate_conf = rotate_conf.replace("create 0640 root adm", "create 0640");
    }
    site.write("logrotate.conf", rotate_conf);
    let state = site.path("logrotate.state");

    let mut p = Pika::start(&site, "-F");
    let load = Load::start(p.addr);
    for round in 1..=3 {
        // Records are held in the workers (8 KiB each by default): wait until some
        // reached the file too, or `notifempty` would skip it.
        wait_until(DEADLINE, "requests before the rotation", || {
            load.assert_running();
            (load.done() >= round * REQUESTS / 4 && !site.read("logs/access.log").is_empty()).then_some(())
        });
        let o = Command::new(&logrotate)
            .arg("-f")
            .arg("-s")
            .arg(&state)
            .arg(site.path("logrotate.conf"))
            .output()
            .expect("run logrotate");
        assert!(o.status.success() && o.stderr.is_empty(), "logrotate round {round}: {}", text(&o));
        // The rotation is over once the master has reopened (it says so in the new
        // error log) and every client has a line in the new access log: that request
        // came after the reopen, and each earlier one was logged before its answer
        // was read. Only then may the next round compress the file before last.
        wait_until(DEADLINE, "every client logging into the new access log", || {
            load.assert_running();
            let access = site.read("logs/access.log");
            (site.error_log().contains("logs reopened")
                && (0..CLIENTS).all(|c| access.contains(&format!("GET /?c={c}&"))))
            .then_some(())
        });
    }
    let made = load.join();
    let total: usize = made.iter().sum();
    assert!(total >= REQUESTS);

    // Idle workers write their held records (buffered by default) a second or two
    // after the load; a graceful stop writes them all now.
    p.signal(3); // SIGQUIT
    assert!(p.wait_exit(DEADLINE).is_some(), "pika did not stop");
    let mut names: Vec<String> = std::fs::read_dir(&logs)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("access.log"))
        .collect();
    names.sort();
    assert_eq!(names, ["access.log", "access.log.1", "access.log.2.gz", "access.log.3.gz"], "delaycompress, compress");
    let meta = std::fs::metadata(logs.join("access.log")).unwrap();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777, 0o640, "created by `create`");

    let mut seen = HashSet::new();
    let mut lines = 0;
    for name in &names {
        let path = logs.join(name);
        let body = if name.ends_with(".gz") {
            let o = Command::new(&gzip).arg("-dc").arg(&path).output().expect("run gzip");
            assert!(o.status.success(), "gzip -dc {name}: {}", text(&o));
            String::from_utf8(o.stdout).unwrap()
        } else {
            std::fs::read_to_string(&path).unwrap()
        };
        assert!(body.is_empty() || body.ends_with('\n'), "{name} ends mid-line");
        for line in body.lines() {
            let req = request_of(line).unwrap_or_else(|| panic!("torn or malformed line in {name}: {line:?}"));
            assert!(seen.insert(req), "line logged twice: {line:?}");
            lines += 1;
        }
    }
    assert_eq!(lines, total, "one access-log line per request, across the rotations");
    let expected: BTreeSet<(usize, usize)> =
        made.iter().enumerate().flat_map(|(c, &n)| (1..=n).map(move |i| (c, i))).collect();
    assert_eq!(seen.into_iter().collect::<BTreeSet<_>>(), expected);
}

/// `Section.Key=value` lines of a unit file, in order.
fn unit_entries(unit: &str) -> Vec<(String, String, String)> {
    let mut section = String::new();
    let mut out = Vec::new();
    for line in unit.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
            continue;
        }
        let (k, v) = line.split_once('=').unwrap_or_else(|| panic!("not a unit line: {line:?}"));
        out.push((section.clone(), k.trim().to_string(), v.trim().to_string()));
    }
    out
}

/// "30s", "40", "1min 10s" (the forms used here) in seconds.
fn seconds(v: &str) -> u64 {
    v.split_whitespace()
        .map(|part| {
            let digits = part.trim_end_matches(|c: char| c.is_ascii_alphabetic());
            let n: u64 = digits.parse().unwrap_or_else(|_| panic!("a duration: {v:?}"));
            match &part[digits.len()..] {
                "" | "s" | "sec" => n,
                "m" | "min" => n * 60,
                other => panic!("unit {other:?} in {v:?}"),
            }
        })
        .sum()
}

/// What the unit says, read as systemd reads it (this does not run systemd; the
/// unit's syntax is verified by `systemd_analyze_verifies_the_unit`).
#[test]
fn systemd_unit_declares_a_checked_hup_reload_and_a_graceful_stop() {
    let unit = shipped_text("pika.service");
    let entries = unit_entries(&unit);
    let all = |section: &str, key: &str| -> Vec<String> {
        entries.iter().filter(|(s, k, _)| s == section && k == key).map(|(_, _, v)| v.clone()).collect()
    };
    let one = |section: &str, key: &str| -> String {
        let v = all(section, key);
        assert_eq!(v.len(), 1, "exactly one {section}.{key} in init/pika.service: {v:?}");
        v[0].clone()
    };

    let exec_start = one("Service", "ExecStart");
    assert!(exec_start.starts_with(INSTALLED_BIN) && exec_start.contains(&format!("-f {INSTALLED_CONF}")));
    match one("Service", "Type").as_str() {
        // The launching pika exits once serving; systemd then reads the pid file.
        "forking" => {
            assert_eq!(one("Service", "PIDFile"), "/run/pika.pid");
            assert!(!exec_start.contains("-F"), "Type=forking runs the daemon, not -F");
        }
        "simple" | "exec" => assert!(exec_start.contains("-F"), "Type=simple needs pika -F"),
        other => panic!("Type={other}"),
    }
    assert_eq!(one("Service", "ExecStartPre"), format!("{INSTALLED_BIN} -t -f {INSTALLED_CONF}"));
    assert!(all("Service", "ExecReload").iter().any(|c| c == "/bin/kill -HUP $MAINPID"), "reload is HUP");

    // `systemctl stop` is a graceful stop, as the README says: QUIT to the master, and
    // time for graceful_timeout before systemd's SIGKILL. No ExecStop=: systemd sends
    // KillSignal as soon as an ExecStop= command returns.
    assert_eq!(one("Service", "KillSignal"), "SIGQUIT");
    assert!(all("Service", "ExecStop").is_empty(), "ExecStop= would be followed at once by KillSignal");
    let shipped_conf = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/pika.toml")).unwrap();
    let graceful = shipped_conf
        .lines()
        .find_map(|l| l.strip_prefix("graceful_timeout = "))
        .map(|v| seconds(v.trim_matches('"')))
        .expect("graceful_timeout in conf/pika.toml");
    let stop_timeout = seconds(&one("Service", "TimeoutStopSec"));
    assert!(stop_timeout > graceful, "TimeoutStopSec {stop_timeout}s must exceed graceful_timeout {graceful}s");
    assert!(["mixed", "process"].contains(&one("Service", "KillMode").as_str()));
    assert_eq!(one("Service", "Restart"), "on-failure");
    assert!(one("Unit", "After").split_whitespace().any(|u| u == "network-online.target"));
    assert!(one("Service", "LimitNOFILE").parse::<u64>().unwrap() >= 4096);
    // The hardening leaves the master what it needs to drop the workers' privileges
    // and still manage them.
    let caps = one("Service", "CapabilityBoundingSet");
    for cap in ["CAP_NET_BIND_SERVICE", "CAP_SETUID", "CAP_SETGID", "CAP_CHOWN", "CAP_KILL"] {
        assert!(caps.split_whitespace().any(|c| c == cap), "CapabilityBoundingSet lacks {cap}");
    }
    assert_eq!(one("Install", "WantedBy"), "multi-user.target");
}

/// systemd's own checker accepts the unit: every key known, every command there.
#[test]
fn systemd_analyze_verifies_the_unit() {
    let Some(analyze) = need_tool("systemd-analyze") else { return };
    // verify checks that each command exists: point them at the test binary. The
    // socket is verified beside the service it activates (the same name).
    for (service, socket) in [("pika.service", true), ("pika-notify.service", false)] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pika.service");
        std::fs::write(&path, shipped_text(service).replace(INSTALLED_BIN, BIN)).unwrap();
        let mut units = vec![path];
        if socket {
            let path = dir.path().join("pika.socket");
            std::fs::write(&path, shipped_text("pika.socket")).unwrap();
            units.push(path);
        }
        // --man=no: the Documentation= pages exist once the package installs them.
        let o = Command::new(&analyze).args(["verify", "--man=no"]).args(&units).output().unwrap();
        // It exits 0 on unknown keys too, with a warning naming the file.
        let complaints: Vec<&str> =
            std::str::from_utf8(&o.stderr).unwrap().lines().filter(|l| l.contains("pika.s")).collect();
        assert!(o.status.success() && complaints.is_empty(), "systemd-analyze verify {service}: {}", text(&o));
    }
    let notify = shipped_text("pika-notify.service");
    assert!(notify.contains("Type=notify") && notify.contains("ExecStart=/usr/sbin/pika -F -f"), "{notify}");
}
