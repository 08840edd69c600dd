//! Running pika as a daemon and controlling it: `pika`, `pika -k …`, the pid file,
//! failure paths, privilege drop, limits, and the server-status page.

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};

use crate::util::*;

fn pika(site: &Site, args: &[&str]) -> Output {
    Command::new(BIN).arg("-f").arg(site.path("conf/pika.toml")).args(args).output().expect("run pika")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Stops a daemon started by a test (by the pid in its pid file) when dropped.
struct Daemon<'a> {
    site: &'a Site,
}

impl Daemon<'_> {
    fn pid(&self) -> Option<i32> {
        self.site.read("logs/pika.pid").trim().parse().ok()
    }
}

impl Drop for Daemon<'_> {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            if alive(pid) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
                let _ =
                    std::panic::catch_unwind(|| wait_until(DEADLINE, "daemon exit", || (!alive(pid)).then_some(())));
            }
        }
    }
}

fn start(site: &Site) -> Daemon<'_> {
    let out = pika(site, &[]);
    assert_eq!(out.status.code(), Some(0), "start failed: {}\n{}", text(&out), site.error_log());
    Daemon { site }
}

fn addr(site: &Site) -> std::net::SocketAddr {
    listening_addr(&site.error_log()).expect("listening line")
}

#[test]
fn daemon_lifecycle_through_the_control_command() {
    let site = Site::new();
    site.config("", "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 3\n");
    let d = start(&site);
    let pid = d.pid().expect("pid file written");
    assert!(alive(pid));
    assert_ne!(ppid_of(pid), Some(std::process::id() as i32), "the daemon is detached");
    let sid = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = sid[sid.rfind(')').unwrap() + 2..].split_whitespace().collect();
    assert_ne!(fields[3], pid.to_string(), "not a session leader (double fork)");
    assert_eq!(std::fs::read_link(format!("/proc/{pid}/fd/0")).unwrap().to_str(), Some("/dev/null"));
    assert_eq!(std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap().to_str(), Some("/"));
    assert_eq!(get(addr(&site), "/").status, 200);

    wait_until(DEADLINE, "the status file to count the request", || {
        site.status().contains("requests: 1\n").then_some(())
    });
    let st = pika(&site, &["-k", "status"]);
    assert_eq!(st.status.code(), Some(0));
    let s = text(&st);
    assert!(
        s.contains(&format!("pika is running (pid {pid})")) && s.contains("workers: 2") && s.contains("requests: 1"),
        "{s}"
    );

    let r = pika(&site, &["-k", "reload"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    assert!(text(&pika(&site, &["-k", "status"])).contains("generation: 1"));
    assert_eq!(pika(&site, &["-k", "reopen-logs"]).status.code(), Some(0));
    wait_until(DEADLINE, "logs reopened", || site.error_log().contains("logs reopened").then_some(()));

    let stop = pika(&site, &["-k", "graceful-stop"]);
    assert_eq!(stop.status.code(), Some(0), "{}", text(&stop));
    assert!(!alive(pid));
    assert!(!site.path("logs/pika.pid").exists(), "pid file removed");
    assert_eq!(pika(&site, &["-k", "status"]).status.code(), Some(3));
    let again = pika(&site, &["-k", "stop"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(text(&again).contains("not running"));
}

#[test]
fn restart_and_fast_stop() {
    let site = Site::new();
    site.config("", "[workers]\nstart = 1\nmin_spare = 1\n");
    let d = start(&site);
    let first = d.pid().unwrap();
    let r = pika(&site, &["-k", "restart"]);
    assert_eq!(r.status.code(), Some(0), "{}", text(&r));
    let second = d.pid().unwrap();
    assert_ne!(first, second);
    assert!(!alive(first) && alive(second));
    assert_eq!(get(addr(&site), "/").status, 200);
    // A config broken while running still lets the operator look and stop.
    let good = site.read("conf/pika.toml");
    std::fs::write(site.path("conf/pika.toml"), format!("{good}\n[workers]\nbogus = 1\n")).unwrap();
    assert_eq!(pika(&site, &["-k", "reload"]).status.code(), Some(1), "reload refuses a broken config");
    assert_eq!(pika(&site, &["-k", "status"]).status.code(), Some(0));
    let stop = pika(&site, &["-k", "stop"]);
    assert_eq!(stop.status.code(), Some(0), "{}", text(&stop));
    assert!(text(&stop).contains("warning"), "{}", text(&stop));
    assert!(!alive(second));
}

#[test]
fn double_start_and_stale_pid_file() {
    let site = Site::new();
    site.config("", "[workers]\nstart = 1\nmin_spare = 1\n");
    // A pid file left by a crash (a pid that is not ours) does not stop a start.
    site.write("logs/pika.pid", "999999\n");
    let d = start(&site);
    let pid = d.pid().unwrap();
    assert_ne!(pid, 999999);
    let again = pika(&site, &[]);
    assert_eq!(again.status.code(), Some(0));
    assert!(text(&again).contains(&format!("already running (pid {pid})")), "{}", text(&again));
    assert_eq!(d.pid(), Some(pid));
    // A pid file naming a live process that is not pika (our own test process) does
    // not stop a start either: the lock decides.
    drop(d);
    site.write("logs/pika.pid", format!("{}\n", std::process::id()));
    let d = start(&site);
    assert_ne!(d.pid(), Some(std::process::id() as i32));
}

#[test]
fn start_failures_say_why() {
    let site = Site::new();
    // Bad config.
    std::fs::write(site.path("conf/pika.toml"), "[server]\nlisten = [\"127.0.0.1:0\"]\nnope = 1\n").unwrap();
    let o = pika(&site, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("pika.toml:3:1: unknown field `nope`"), "{}", text(&o));
    // Port in use.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    site.config("", "");
    let conf = site.read("conf/pika.toml").replace("127.0.0.1:0", &format!("127.0.0.1:{port}"));
    std::fs::write(site.path("conf/pika.toml"), conf).unwrap();
    let o = pika(&site, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains(&format!("cannot listen on 127.0.0.1:{port}")), "{}", text(&o));
    assert!(!site.path("logs/pika.pid").exists());
    // Missing docroot.
    site.config("", "[[vhost]]\nroot = \"nowhere\"\n");
    let o = pika(&site, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("vhost root"), "{}", text(&o));
    // A docroot the workers' user cannot open: the workers cannot start, and the
    // start fails instead of forking forever.
    site.write("private/index.html", "x");
    std::fs::set_permissions(site.path("private"), std::fs::Permissions::from_mode(0o700)).unwrap();
    open_up(&site);
    std::fs::set_permissions(site.path("private"), std::fs::Permissions::from_mode(0o700)).unwrap();
    site.config("user = \"nobody\"", "[[vhost]]\nroot = \"private\"\n");
    let o = pika(&site, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("worker could not start"), "{}", text(&o));
}

fn ids(pid: i32) -> (u32, u32) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let get = |key: &str| -> u32 {
        let line = status.lines().find(|l| l.starts_with(key)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    (get("Uid:"), get("Gid:"))
}

#[test]
fn workers_drop_privileges() {
    let site = Site::new();
    site.write("htdocs/public.txt", "public");
    site.write("htdocs/secret.txt", "root only");
    site.config("user = \"nobody\"\ngroup = \"nogroup\"", "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 3\n");
    open_up(&site);
    std::fs::set_permissions(site.path("htdocs/secret.txt"), std::fs::Permissions::from_mode(0o600)).unwrap();
    let p = Pika::start(&site, "-F");
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    let nogroup = nix::unistd::Group::from_name("nogroup").unwrap().unwrap();
    assert_eq!(ids(p.pid), (0, 0), "the master keeps root");
    let workers = n_children(p.pid, 2);
    for w in &workers {
        assert_eq!(ids(*w), (nobody.uid.as_raw(), nogroup.gid.as_raw()), "worker {w}");
        let groups = std::fs::read_to_string(format!("/proc/{w}/status")).unwrap();
        let line = groups.lines().find(|l| l.starts_with("Groups:")).unwrap().to_string();
        assert!(!line.split_whitespace().any(|g| g == "0"), "no root group left: {line}");
    }
    assert_eq!(get(p.addr, "/public.txt").text(), "public");
    let r = get(p.addr, "/secret.txt");
    assert_eq!(r.status, 403);
    assert!(!r.text().contains("root only"));
    // Logs stay writable, also after a reopen (the master hands the new files over).
    p.signal(10); // SIGUSR1
    wait_until(DEADLINE, "logs reopened", || site.error_log().contains("logs reopened").then_some(()));
    std::fs::rename(site.path("logs/access.log"), site.path("logs/access.log.1")).unwrap();
    p.signal(10);
    wait_until(DEADLINE, "new access log", || site.path("logs/access.log").exists().then_some(()));
    for _ in 0..6 {
        assert_eq!(get(p.addr, "/public.txt").status, 200);
    }
    // Records a worker still held at the rotation go to the new file (access logs
    // are buffered by default), in the order each worker wrote its batch: 2 before
    // the rotation, 6 after, each in one of the two files.
    let new = wait_until(DEADLINE, "every line in the old or the new access log", || {
        let new = site.access_lines();
        (site.read("logs/access.log.1").lines().count() + new.len() == 8).then_some(new)
    });
    assert!(new.iter().filter(|l| l.contains("GET /public.txt")).count() >= 6, "{new:?}");
}

#[test]
fn max_open_files_raises_the_limit() {
    let site = Site::new();
    site.config("max_open_files = 4321", "[workers]\nstart = 1\nmin_spare = 1\n");
    let p = Pika::start(&site, "-F");
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", p.pid)).unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap().to_string();
    assert_eq!(line.split_whitespace().nth(3), Some("4321"), "{line}");
}

#[test]
fn server_status_auto_json_and_html() {
    let site = Site::new();
    site.config("", "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 4\n[status]\nenabled = true\n");
    let p = Pika::start(&site, "-F");
    // One kept-alive connection: its worker counts a request before it reads the
    // next, so each status page sees every request before it. (Over a new connection
    // per request, another worker could answer while the last one's count is on its
    // way.)
    let mut conn = connect(p.addr);
    let mut ask = |path: &str| {
        conn.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes()).unwrap();
        read_response(&mut conn, false).unwrap_or_else(|| panic!("no response to {path}"))
    };
    for _ in 0..7 {
        assert_eq!(ask("/").status, 200);
    }
    assert_eq!(ask("/missing").status, 404);
    let auto = ask("/server-status?auto");
    assert_eq!(auto.header("content-type").unwrap(), "text/plain; charset=utf-8");
    let text = auto.text();
    let value = |k: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}: ")))
            .unwrap_or_else(|| panic!("no {k} in {text}"))
            .to_string()
    };
    for key in [
        "ServerVersion",
        "ServerMPM",
        "Uptime",
        "Total Accesses",
        "Total kBytes",
        "ReqPerSec",
        "BytesPerSec",
        "BytesPerReq",
        "BusyWorkers",
        "IdleWorkers",
        "Scoreboard",
    ] {
        value(key);
    }
    assert_eq!(value("Total Accesses"), "8", "{text}");
    assert_eq!(value("BusyWorkers"), "1", "the worker answering this request");
    assert_eq!(value("IdleWorkers"), "1");
    let board = value("Scoreboard");
    assert!(board.chars().all(|c| "_SRWKLCG.".contains(c)) && board.contains('R'), "{board}");

    let json = ask("/server-status?json");
    assert_eq!(json.header("content-type").unwrap(), "application/json");
    let j = json.text();
    assert!(j.contains("\"total_accesses\":9") && j.contains("\"workers\":[{\"slot\":0"), "{j}");
    let page = get(p.addr, "/server-status");
    let html = page.text();
    assert!(html.contains("<table") && html.contains("GET /server-status HTTP/1.1"), "{html}");
    // The live view's script and stylesheet, at the page's own path, and the policy
    // that allows them and nothing else.
    let csp = page.header("content-security-policy").unwrap();
    assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'self'"), "{csp}");
    assert!(html.contains("<script src=\"?js\" defer>") && !html.contains("<script>"), "{html}");
    assert!(!html.contains("style="), "no inline style: {html}");
    let js = get(p.addr, "/server-status?js");
    assert_eq!(js.header("content-type").unwrap(), "text/javascript; charset=utf-8");
    assert!(js.text().contains("?json"), "{}", js.text());
    let css = get(p.addr, "/server-status?css");
    assert_eq!(css.header("content-type").unwrap(), "text/css; charset=utf-8");
    assert_eq!(get(p.addr, "/server-status?json").header("content-security-policy"), None);
}

#[test]
fn server_status_is_refused_outside_its_allow_list() {
    let site = Site::new();
    site.config("", "[workers]\nstart = 1\nmin_spare = 1\n[status]\nenabled = true\nallow = [\"10.0.0.0/8\"]\n");
    let p = Pika::start(&site, "-F");
    assert_eq!(get(p.addr, "/server-status?auto").status, 403);
}

#[test]
fn server_status_and_metrics_answer_only_names_of_their_vhost_addresses_and_localhost() {
    let site = Site::new();
    site.config(
        "",
        "[workers]\nstart = 1\nmin_spare = 1\n[status]\nenabled = true\n\
         [[vhost]]\nserver_names = [\"status.example\", \"*.ops.example\"]\nroot = \"htdocs\"\n\
         [[vhost.location]]\nexact = \"/metrics\"\nmetrics = true\n",
    );
    let p = Pika::start(&site, "-F");
    let ask = |host: &str, path: &str| {
        raw(p.addr, format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes()).status
    };
    let port = p.addr.port();
    for path in ["/server-status?json", "/metrics"] {
        // A page of an attacker's, in a browser on an allowed address, reaches this
        // server through a name their DNS points at 127.0.0.1 (DNS rebinding).
        for host in ["rebind.attacker.example", "localhost.attacker.example:8080", "ops.example"] {
            assert_eq!(ask(host, path), 421, "{host} {path}");
        }
        for host in ["status.example", "a.ops.example", &format!("127.0.0.1:{port}"), "127.0.0.1", "[::1]", "localhost"]
        {
            assert_eq!(ask(host, path), 200, "{host} {path}");
        }
    }
    assert_eq!(ask("rebind.attacker.example", "/"), 200, "the site's own files answer any Host");
}

#[test]
fn help_and_version() {
    let o = Command::new(BIN).arg("-h").output().unwrap();
    let h = String::from_utf8_lossy(&o.stdout);
    for flag in ["-f FILE", "-F", "-X", "-t", "-k COMMAND", "-V", "graceful-stop", "reopen-logs"] {
        assert!(h.contains(flag), "help lacks {flag}");
    }
    let v = Command::new(BIN).arg("-V").output().unwrap();
    assert_eq!(String::from_utf8_lossy(&v.stdout).trim(), format!("pika {}", env!("CARGO_PKG_VERSION")));
    assert_eq!(Command::new(BIN).arg("--bogus").output().unwrap().status.code(), Some(2));
}

#[test]
fn workers_get_an_address_space_limit() {
    let site = Site::new();
    site.config("", "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 3\nmax_memory = \"768MiB\"\n");
    let p = Pika::start(&site, "-F");
    for w in n_children(p.pid, 2) {
        let limits = std::fs::read_to_string(format!("/proc/{w}/limits")).unwrap();
        let line = limits.lines().find(|l| l.starts_with("Max address space")).unwrap().to_string();
        assert_eq!(line.split_whitespace().nth(3), Some((768u64 << 20).to_string().as_str()), "{line}");
    }
    let master = std::fs::read_to_string(format!("/proc/{}/limits", p.pid)).unwrap();
    assert!(master.lines().any(|l| l.starts_with("Max address space") && l.contains("unlimited")));
    assert_eq!(get(p.addr, "/").status, 200);
}

#[test]
fn a_file_larger_than_max_memory_is_served() {
    // A sparse 400 MB file: no disk, the page cache's zero pages.
    let site = Site::new();
    let big = std::fs::File::create(site.path("htdocs/big.bin")).unwrap();
    big.set_len(400 << 20).unwrap();
    drop(big);
    site.write("htdocs/small.txt", "0123456789");
    site.config("", "[workers]\nstart = 1\nmin_spare = 1\nmax_spare = 2\nmax_memory = \"256MiB\"\n");
    let p = Pika::start(&site, "-F");
    let head = raw(p.addr, b"HEAD /big.bin HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    assert_eq!((head.status, head.header("content-length")), (200, Some((400u64 << 20).to_string())));
    let part = get_with(p.addr, "/big.bin", "Range: bytes=300000000-300000099\r\n");
    assert_eq!((part.status, part.body.len()), (206, 100));
    // Several ranges need a mapping, which does not fit: the file is sent whole (RFC
    // 9110 §14.2 lets a server ignore Range); counted here, not kept.
    let mut s = connect(p.addr);
    s.write_all(b"GET /big.bin HTTP/1.1\r\nHost: localhost\r\nRange: bytes=0-0,-1\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut got = 0u64;
    let mut buf = vec![0; 1 << 16];
    let started = std::time::Instant::now();
    let mut head = Vec::new();
    while started.elapsed() < std::time::Duration::from_secs(120) {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) if head.windows(4).any(|w| w == b"\r\n\r\n") => got += n as u64,
            Ok(n) => {
                head.extend_from_slice(&buf[..n]);
                if let Some(at) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                    got += (head.len() - at - 4) as u64;
                }
            }
        }
    }
    assert!(head.starts_with(b"HTTP/1.1 200 "), "{}", String::from_utf8_lossy(&head));
    assert_eq!(got, 400 << 20);
    assert_eq!(
        get_with(p.addr, "/small.txt", "Range: bytes=0-0,-1\r\n").status,
        206,
        "a small file's ranges as before"
    );
    assert!(
        site.error_log().contains("ranges of a 419430400-byte file sent as the whole file"),
        "{}",
        site.error_log()
    );
}

#[test]
fn workers_chroot_and_keep_logging_across_a_rotation() {
    let site = Site::new();
    site.write("htdocs/page.txt", "jailed");
    site.write("htdocs/list/a.txt", "a");
    site.config(
        "user = \"nobody\"\nchroot = \".\"",
        "[workers]\nstart = 1\nmin_spare = 1\nmax_spare = 2\n[[vhost]]\nroot = \"htdocs\"\nautoindex = true\n",
    );
    open_up(&site);
    let p = Pika::start(&site, "-F");
    let jail = std::fs::canonicalize(site.dir.path()).unwrap();
    for w in n_children(p.pid, 1) {
        assert_eq!(std::fs::read_link(format!("/proc/{w}/root")).unwrap(), jail, "worker {w}");
        assert_eq!(ids(w).0, nix::unistd::User::from_name("nobody").unwrap().unwrap().uid.as_raw());
    }
    assert_eq!(get(p.addr, "/page.txt").text(), "jailed");
    assert!(get(p.addr, "/list/").text().contains("a.txt"), "listings read the jailed path");
    std::fs::rename(site.path("logs/access.log"), site.path("logs/access.log.1")).unwrap();
    p.signal(10); // SIGUSR1
    wait_until(DEADLINE, "logs reopened", || site.error_log().contains("logs reopened").then_some(()));
    assert_eq!(get(p.addr, "/page.txt").status, 200);
    // Held records may go to the new file: 2 before the rotation, 1 after, in all.
    let new = wait_until(DEADLINE, "every line in the old or the new log", || {
        let new = site.access_lines();
        (site.read("logs/access.log.1").lines().count() + new.len() == 3).then_some(new)
    });
    assert!(new.iter().any(|l| l.contains("GET /page.txt")), "{new:?}");
    // A docroot outside the jail is refused up front.
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(
        site.path("conf/pika.toml"),
        format!(
            "[server]\nlisten = [\"127.0.0.1:0\"]\nchroot = \"htdocs\"\n[[vhost]]\nroot = \"{}\"\n",
            outside.path().display()
        ),
    )
    .unwrap();
    let out = pika(&site, &["-t"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("is outside the chroot"), "{}", text(&out));
}

/// Kills the master with KILL: every worker must be gone within 2 s (they would
/// otherwise keep serving the old config, holding the port and the pid file's lock),
/// and `pika -k start` must then start a new server.
fn workers_follow_a_killed_master(server_extra: &str) {
    let site = Site::new();
    site.config(server_extra, "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 3\n");
    open_up(&site);
    let d = start(&site);
    let master = d.pid().expect("pid file");
    let workers = wait_until(DEADLINE, "two workers", || Some(children_of(master)).filter(|w| w.len() == 2));
    // If they outlive the master (the bug), they must not outlive the test.
    struct Reap(Vec<i32>);
    impl Drop for Reap {
        fn drop(&mut self) {
            for &w in self.0.iter().filter(|&&w| alive(w)) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(w), nix::sys::signal::Signal::SIGKILL);
            }
        }
    }
    let _reap = Reap(workers.clone());
    assert_eq!(get(addr(&site), "/").status, 200);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(master), nix::sys::signal::Signal::SIGKILL).unwrap();
    wait_until(std::time::Duration::from_secs(2), "every worker to follow the killed master", || {
        workers.iter().all(|&w| !alive(w)).then_some(())
    });
    let again = pika(&site, &[]);
    assert_eq!(again.status.code(), Some(0), "{}\n{}", text(&again), site.error_log());
    assert!(!text(&again).contains("already running"), "{}", text(&again));
    let new = d.pid().expect("new pid file");
    assert_ne!(new, master);
    assert_eq!(get(addr(&site), "/").status, 200);
}

#[test]
fn workers_follow_a_killed_master_as_root() {
    workers_follow_a_killed_master("");
}

#[test]
fn workers_follow_a_killed_master_after_a_privilege_drop() {
    workers_follow_a_killed_master("user = \"nobody\"");
}

#[test]
fn workers_follow_a_killed_master_in_a_chroot() {
    workers_follow_a_killed_master("user = \"nobody\"\nchroot = \".\"");
}

/// The inode of the TCP socket listening on `port` (from /proc/net/tcp).
fn listener_inode(port: u16) -> String {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let local = format!(":{port:04X}");
    table
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f[1].ends_with(&local) && f[3] == "0A")
        .map(|f| f[9].to_string())
        .unwrap_or_else(|| panic!("no listener on port {port}"))
}

/// What each descriptor of `pid` points at.
fn descriptors(pid: i32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .flatten()
        .filter_map(|e| Some(std::fs::read_link(e.path()).ok()?.display().to_string()))
        .collect()
}

#[test]
fn a_worker_holds_only_its_own_descriptors_and_cannot_be_attached_to() {
    let site = Site::new();
    site.config("user = \"nobody\"", "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 3\n");
    open_up(&site);
    // As a daemon: the master then also holds the pid file and the ready pipe.
    let d = start(&site);
    let master = d.pid().unwrap();
    let workers = wait_until(DEADLINE, "two workers", || Some(children_of(master)).filter(|w| w.len() == 2));
    let listener = format!("socket:[{}]", listener_inode(addr(&site).port()));
    let listener_fd = listener.clone();
    let real = |rel: &str| std::fs::canonicalize(site.path(rel)).unwrap().display().to_string();
    let master_fds = descriptors(master);
    let mut want = vec![
        "/dev/null".to_string(), // stdin
        "/dev/null".to_string(), // stdout
        real("logs/error.log"),  // stderr
        real("logs/error.log"),
        real("logs/access.log"),
        listener,
        "the pipe of death".to_string(),
        "anon_inode:[eventfd]".to_string(), // the doorbell
        // Both ends of the handover socket (kept-alive connections of leaving workers).
        "a handover socket".to_string(),
        "a handover socket".to_string(),
        // What the worker opens itself: its docroot, its epoll instance and the bell
        // TERM rings in it.
        real("htdocs"),
        "anon_inode:[eventpoll]".to_string(),
        "anon_inode:[eventfd]".to_string(),
    ];
    // Both ends of each event loop's pair (kept-alive connections sent to the loop
    // of their CPU), one loop per CPU pika may use.
    let ours = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
    let loops = (0..nix::sched::CpuSet::count()).filter(|&c| ours.is_set(c).unwrap()).count();
    want.extend(std::iter::repeat_n("a handover socket".to_string(), 2 * loops));
    want.sort();
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap().uid.as_raw();
    for w in workers {
        let mut got: Vec<String> = descriptors(w)
            .into_iter()
            .map(|d| {
                // The master holds both ends of the pipe of death and of the handover
                // socket pair.
                if d.starts_with("pipe:") && master_fds.contains(&d) {
                    "the pipe of death".to_string()
                } else if d.starts_with("socket:") && d != listener_fd && master_fds.contains(&d) {
                    "a handover socket".to_string()
                } else {
                    d
                }
            })
            .collect();
        got.sort();
        assert_eq!(got, want, "worker {w}");
        // Not dumpable: /proc shows the worker as root's, so its own user cannot
        // attach to it (ptrace, pidfd_getfd) or read its memory.
        assert_eq!(ids(w).0, nobody);
        let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(format!("/proc/{w}/stat")).unwrap());
        assert_eq!(owner, 0, "worker {w} is not dumpable");
    }
}

#[test]
fn coredump_dir_makes_workers_dumpable_there() {
    let site = Site::new();
    std::fs::create_dir(site.path("cores")).unwrap();
    site.config("user = \"nobody\"\ncoredump_dir = \"cores\"", "[workers]\nstart = 1\nmin_spare = 1\n");
    open_up(&site);
    std::fs::set_permissions(site.path("cores"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    let p = Pika::start(&site, "-F");
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap().uid.as_raw();
    let workers = children_of(p.pid);
    assert_eq!(workers.len(), 1);
    for w in workers {
        let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(format!("/proc/{w}/stat")).unwrap());
        assert_eq!(owner, nobody, "worker {w} is dumpable");
        let cwd = std::fs::read_link(format!("/proc/{w}/cwd")).unwrap();
        assert_eq!(cwd, std::fs::canonicalize(site.path("cores")).unwrap());
    }
    // A folder that does not exist is refused up front.
    site.config("coredump_dir = \"nowhere\"", "");
    let out = pika(&site, &["-t"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).contains("coredump_dir \"nowhere\""), "{}", text(&out));
}

/// A file root cares about, planted as the target of links in the log folder.
fn victim(site: &Site) -> std::path::PathBuf {
    let v = site.path("victim");
    std::fs::write(&v, "precious\n").unwrap();
    std::fs::set_permissions(&v, std::fs::Permissions::from_mode(0o600)).unwrap();
    v
}

fn untouched(v: &std::path::Path) {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(v).unwrap();
    assert_eq!(std::fs::read_to_string(v).unwrap(), "precious\n");
    assert_eq!((meta.uid(), meta.gid(), meta.mode() & 0o777), (0, 0, 0o600), "owner and mode unchanged");
}

#[test]
fn the_master_follows_no_link_it_writes_through() {
    let site = Site::new();
    site.config("user = \"nobody\"", "");
    open_up(&site);
    let v = victim(&site);
    // Should a start succeed after all (the bug), the daemon must not outlive the test.
    let _guard = Daemon { site: &site };
    // A link where the access log goes: pika must neither write to nor hand over
    // the file it points at.
    std::os::unix::fs::symlink(&v, site.path("logs/access.log")).unwrap();
    let o = pika(&site, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("logs/access.log is a symbolic link"), "{}", text(&o));
    untouched(&v);
    // A hard link there, the same.
    std::fs::remove_file(site.path("logs/access.log")).unwrap();
    std::fs::hard_link(&v, site.path("logs/access.log")).unwrap();
    let o = pika(&site, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("2 hard links"), "{}", text(&o));
    untouched(&v);
    std::fs::remove_file(site.path("logs/access.log")).unwrap();
    // And a link where the pid file goes: not truncated, not written.
    std::os::unix::fs::symlink(&v, site.path("logs/pika.pid")).unwrap();
    let o = pika(&site, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("pika.pid is a symbolic link"), "{}", text(&o));
    untouched(&v);
}

#[test]
fn a_log_folder_others_may_write_is_refused_and_said_why() {
    let site = Site::new();
    site.config("user = \"nobody\"", "");
    open_up(&site);
    // The workers' user owns the log folder: it could plant a link there at any time.
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    nix::unistd::chown(&site.path("logs"), Some(nobody.uid), None).unwrap();
    let _guard = Daemon { site: &site };
    for args in [&["-t"][..], &[]] {
        let o = pika(&site, args);
        assert_eq!(o.status.code(), Some(1), "pika {args:?}: {}", text(&o));
        let t = text(&o);
        assert!(
            t.contains("users other than root may write the folder") && t.contains("belongs to a user other than root"),
            "pika {args:?}: {t}"
        );
    }
}

#[test]
fn a_link_swapped_in_above_the_log_folder_is_refused_and_nothing_is_given_away() {
    let site = Site::new();
    open_up(&site);
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    // A folder of the workers' user holds a log folder root owns; then the user swaps
    // that folder for a link to a folder of root's holding a file root cares about.
    std::fs::create_dir_all(site.path("home/logs")).unwrap();
    nix::unistd::chown(&site.path("home"), Some(nobody.uid), None).unwrap();
    let precious = site.path("rootonly");
    std::fs::create_dir(&precious).unwrap();
    let v = precious.join("access.log");
    std::fs::write(&v, "precious\n").unwrap();
    std::fs::set_permissions(&v, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::remove_dir(site.path("home/logs")).unwrap();
    std::os::unix::fs::symlink(&precious, site.path("home/logs")).unwrap();
    site.config("user = \"nobody\"", "[[access_log]]\npath = \"home/logs/access.log\"\n");
    let _guard = Daemon { site: &site };
    let home = std::fs::canonicalize(site.path("home")).unwrap();
    for args in [&["-t"][..], &[]] {
        let o = pika(&site, args);
        assert_eq!(o.status.code(), Some(1), "pika {args:?}: {}", text(&o));
        let t = text(&o);
        assert!(
            t.contains(&format!("may write the folder {} (", home.display())) && t.contains("owner nobody"),
            "pika {args:?}: {t}"
        );
    }
    untouched(&v);
}

#[test]
fn an_existing_log_keeps_its_owner_a_new_one_is_the_workers_and_stdout_still_works() {
    use std::os::unix::fs::MetadataExt;
    let site = Site::new();
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap().uid;
    // logrotate's `create 0640 www-data adm` made the access log; a second one is
    // root's; the error log is new.
    site.write("logs/access.log", "");
    std::fs::set_permissions(site.path("logs/access.log"), std::fs::Permissions::from_mode(0o640)).unwrap();
    nix::unistd::chown(&site.path("logs/access.log"), Some(nobody), Some(nix::unistd::Gid::from_raw(4))).unwrap();
    site.write("logs/root.log", "");
    std::fs::set_permissions(site.path("logs/root.log"), std::fs::Permissions::from_mode(0o640)).unwrap();
    site.config(
        "user = \"nobody\"\ngroup = \"nogroup\"",
        "[[access_log]]\npath = \"logs/access.log\"\n[[access_log]]\npath = \"logs/root.log\"\n\
         [[access_log]]\npath = \"/dev/stdout\"\nformat = \"%r %>s\"\nbuffer = 0\n",
    );
    open_up(&site);
    for log in ["logs/access.log", "logs/root.log"] {
        std::fs::set_permissions(site.path(log), std::fs::Permissions::from_mode(0o640)).unwrap();
    }
    // A container's way: the master's standard output is a pipe.
    let mut child = std::process::Command::new(BIN)
        .args(["-F", "-f"])
        .arg(site.path("conf/pika.toml"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let addr = wait_until(DEADLINE, "pika to listen", || listening_addr(&site.error_log()));
    assert_eq!(get(addr, "/").status, 200);
    let mut out = child.stdout.take().unwrap();
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while !line.ends_with(b"\n") && std::io::Read::read(&mut out, &mut byte).unwrap_or(0) == 1 {
        line.push(byte[0]);
    }
    assert_eq!(String::from_utf8_lossy(&line), "GET / HTTP/1.1 200\n");
    let nobody = nobody.as_raw();
    let nogroup = nix::unistd::Group::from_name("nogroup").unwrap().unwrap().gid.as_raw();
    let access = std::fs::metadata(site.path("logs/access.log")).unwrap();
    assert_eq!((access.uid(), access.gid(), access.mode() & 0o777), (nobody, 4, 0o640), "owner and group kept");
    let root = std::fs::metadata(site.path("logs/root.log")).unwrap();
    assert_eq!((root.uid(), root.gid()), (0, 0), "a file root did not create is not given away");
    let said = site.error_log();
    assert!(said.contains("logs/root.log belongs to uid 0, not to the workers' user"), "{said}");
    let error = std::fs::metadata(site.path("logs/error.log")).unwrap();
    assert_eq!((error.uid(), error.gid(), error.mode() & 0o777), (nobody, nogroup, 0o640), "made for the workers");
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM);
    let _ = child.wait();
}

/// The text of an HTML page's `<td>` cells, with the entities pika writes decoded.
fn html_cells(html: &str) -> Vec<String> {
    html.split("<td>")
        .skip(1)
        .filter_map(|c| c.split_once("</td>").map(|(cell, _)| cell))
        .map(|c| {
            c.replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&quot;", "\"")
                .replace("&#39;", "'")
                .replace("&amp;", "&")
        })
        .collect()
}

/// Every string value of `"key":` in a JSON text, decoded; panics on a string that
/// does not end where JSON says it ends.
fn json_values(json: &str, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    for rest in json.split(&format!("\"{key}\":\"")).skip(1) {
        let mut value = String::new();
        let mut chars = rest.chars();
        loop {
            match chars.next().unwrap_or_else(|| panic!("an unterminated string in {json}")) {
                '"' => break,
                '\\' => match chars.next() {
                    Some('"') => value.push('"'),
                    Some('\\') => value.push('\\'),
                    Some('/') => value.push('/'),
                    Some('n') => value.push('\n'),
                    Some('r') => value.push('\r'),
                    Some('t') => value.push('\t'),
                    Some('u') => {
                        let hex: String = chars.by_ref().take(4).collect();
                        value.push(char::from_u32(u32::from_str_radix(&hex, 16).unwrap()).unwrap());
                    }
                    other => panic!("escape \\{other:?} in {json}"),
                },
                c if (c as u32) < 0x20 => panic!("a raw control character in a string: {json}"),
                c => value.push(c),
            }
        }
        // The string ends where the value does: a comma or the object's end follows.
        assert!(matches!(chars.next(), Some(',' | '}')), "{key} does not end its value: {json}");
        out.push(value);
    }
    out
}

#[test]
fn server_status_escapes_what_clients_sent_in_html_and_json() {
    let site = Site::new();
    // One connection per worker: the worker holding the kept-alive connection takes
    // no other, so the status page is asked of another and the row keeps the line.
    site.config(
        "",
        "[workers]\nstart = 2\nmin_spare = 2\nmax_spare = 4\nmax_connections = 1\n[status]\nenabled = true\n",
    );
    let p = Pika::start(&site, "-F");
    // Markup, quotes, an entity, a backslash and non-ASCII in the request line: kept
    // alive, the worker shows it in its row while the status page is asked of another.
    let line = "GET /<b>\"x'&amp;</b>\\é?q=<i>\"</i> HTTP/1.1";
    let mut held = connect(p.addr);
    held.write_all(format!("{line}\r\nHost: localhost\r\n\r\n").as_bytes()).unwrap();
    let r = read_response(&mut held, false).expect("an answer");
    assert_eq!(r.header("connection"), None, "kept alive");

    let html = get(p.addr, "/server-status").text();
    assert!(!html.contains("<b>") && !html.contains("<i>") && !html.contains("\"x'"), "{html}");
    assert!(html_cells(&html).iter().any(|c| c == line), "no cell reads {line:?}:\n{html}");
    let json = get(p.addr, "/server-status?json").text();
    assert!(json_values(&json, "request").iter().any(|v| v == line), "no request reads {line:?}:\n{json}");
    for client in json_values(&json, "client") {
        assert!(client.is_empty() || client.parse::<std::net::SocketAddr>().is_ok(), "{client:?}");
    }
    drop(held);
}
