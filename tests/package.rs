//! The Debian package (`debian/`, built by `debian/build`), used as an operator would:
//! lintian finds no error or warning in it; `dpkg -i` installs it; its SysV script
//! starts it; it serves the default site as the `pika` user and logs the request;
//! the script stops it; `dpkg --purge` removes it and leaves nothing behind.
//!
//! It needs the built package named by `PIKA_DEB` (`.ci/run` builds one), root, and
//! dpkg and lintian: a plain `cargo test` skips it and says why. This machine is
//! shared, so the test takes a lock, refuses to touch a pika package it did not
//! install, runs only where installing starts no service (Debian's `policy-rc.d`
//! denies it, as in containers: the package would listen on port 80), and starts pika
//! itself on a free port of its own.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::util::*;

/// Names the `.deb` to test; `.ci/run` sets it after `debian/build`.
const DEB_VAR: &str = "PIKA_DEB";

fn run(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd).args(args).output().unwrap_or_else(|e| panic!("run {cmd}: {e}"))
}

fn out(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// Skips the test (or, under `.ci/run`, fails it) with a reason.
fn skip(why: &str) -> Option<()> {
    if std::env::var(REQUIRE_TOOLS).is_ok_and(|v| !v.is_empty() && v != "0") {
        panic!("{why}, and {REQUIRE_TOOLS} is set");
    }
    use std::io::Write as _;
    let test = std::thread::current().name().unwrap_or("package").to_string();
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
    None
}

/// Everything the package puts on the machine, or makes there.
const INSTALLED: &[&str] = &[
    "/usr/sbin/pika",
    "/etc/pika/pika.toml",
    "/etc/pika/mime.types",
    "/etc/pika/conf.d",
    "/etc/init.d/pika",
    "/etc/logrotate.d/pika",
    "/lib/systemd/system/pika.service",
    "/usr/share/man/man8/pika.8.gz",
    "/usr/share/man/man5/pika.toml.5.gz",
    "/usr/share/doc/pika/copyright",
    "/usr/share/pika/htdocs/index.html",
    "/var/www/pika/index.html",
    "/var/log/pika",
    "/var/lib/pika",
];

/// Purges the package when dropped, after stopping a master it left running: a
/// failed test must not leave pika installed or serving on a shared machine.
struct Installed;

impl Drop for Installed {
    fn drop(&mut self) {
        if let Some(pid) = std::fs::read_to_string("/run/pika.pid").ok().and_then(|p| p.trim().parse().ok()) {
            let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap_or_default();
            if exe == Path::new("/usr/sbin/pika") {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
                let _ = std::panic::catch_unwind(|| {
                    wait_until(DEADLINE, "the master to stop", || (!alive(pid)).then_some(()))
                });
            }
        }
        let _ = run("dpkg", &["--purge", "pika"]);
    }
}

fn lines_with(o: &Output, prefix: &str) -> Vec<String> {
    out(o).lines().filter(|l| l.starts_with(prefix)).map(str::to_string).collect()
}

#[test]
fn deb_installs_starts_serves_stops_and_purges_clean() {
    let Some(deb) = std::env::var_os(DEB_VAR).map(PathBuf::from) else {
        skip(&format!("no package to test: build one with debian/build and name it in {DEB_VAR} (.ci/run does)"));
        return;
    };
    assert!(deb.is_file(), "{DEB_VAR}={} is not a file", deb.display());
    if !nix::unistd::geteuid().is_root() {
        skip("installing a package needs root");
        return;
    }
    let (Some(_dpkg), Some(lintian)) = (need_tool("dpkg"), need_tool("lintian")) else { return };
    let deb_arg = deb.to_str().unwrap();

    // lintian: no error, no warning (informational tags are allowed).
    let o = Command::new(&lintian).arg(deb_arg).output().unwrap();
    let bad: Vec<String> = [lines_with(&o, "E: "), lines_with(&o, "W: ")].concat();
    assert!(bad.is_empty(), "lintian:\n{}", bad.join("\n"));

    // One package test at a time on this machine.
    let lock = std::fs::File::create("/run/lock/pika-package-test.lock").expect("the test's lock file");
    let _lock = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive).map_err(|(_, e)| e).unwrap();
    assert!(
        !run("dpkg", &["-s", "pika"]).status.success(),
        "a pika package is already installed here; this test installs and purges its own only"
    );
    // invoke-rc.d asks policy-rc.d before it starts a service; 101 is "no".
    let policy = Command::new("policy-rc.d").args(["pika", "start"]).status();
    if policy.map_or(true, |s| s.code() != Some(101)) {
        skip("installing would start pika on port 80 here (no policy-rc.d that denies it)");
        return;
    }

    let guard = Installed;
    let o = run("dpkg", &["-i", deb_arg]);
    assert!(o.status.success(), "dpkg -i: {}", out(&o));
    for p in INSTALLED {
        assert!(Path::new(p).exists(), "{p} is not installed");
    }
    let conffiles = out(&run("dpkg-query", &["-W", "-f=${Conffiles}", "pika"]));
    for f in ["/etc/pika/pika.toml", "/etc/pika/mime.types", "/etc/init.d/pika", "/etc/logrotate.d/pika"] {
        assert!(conffiles.contains(f), "{f} is not a conffile: {conffiles}");
    }
    let logs = std::fs::metadata("/var/log/pika").unwrap();
    let adm = nix::unistd::Group::from_name("adm").unwrap().expect("group adm").gid;
    assert_eq!((logs.uid(), logs.gid(), logs.permissions().mode() & 0o7777), (0, adm.as_raw(), 0o750), "/var/log/pika");
    let user = nix::unistd::User::from_name("pika").unwrap().expect("the pika user, made by the postinst");
    assert!(user.uid.as_raw() < 1000, "a system user: {}", user.uid);
    assert!(!Path::new("/run/pika.pid").exists(), "installing started pika");

    // Its own port, then the SysV script, as an operator would start it.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let conf = std::fs::read_to_string("/etc/pika/pika.toml").unwrap();
    assert_eq!(conf.matches("\nlisten = [\"80\"]\n").count(), 1, "the package listens on port 80");
    let conf = conf.replace("\nlisten = [\"80\"]\n", &format!("\nlisten = [\"127.0.0.1:{port}\"]\n"));
    std::fs::write("/etc/pika/pika.toml", conf).unwrap();
    let o = run("/etc/init.d/pika", &["start"]);
    assert!(o.status.success(), "/etc/init.d/pika start: {}", out(&o));
    let pid: i32 = std::fs::read_to_string("/run/pika.pid").unwrap().trim().parse().unwrap();

    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let page = get(addr, "/");
    assert_eq!(page.status, 200);
    assert_eq!(page.body, std::fs::read("/usr/share/pika/htdocs/index.html").unwrap(), "the default site");
    let workers = children_of(pid);
    assert!(!workers.is_empty());
    for w in workers {
        let uid = std::fs::metadata(format!("/proc/{w}")).map(|m| m.uid()).unwrap_or(user.uid.as_raw());
        assert_eq!(uid, user.uid.as_raw(), "worker {w} runs as pika");
    }
    wait_until(DEADLINE, "the request in /var/log/pika/access.log", || {
        std::fs::read_to_string("/var/log/pika/access.log").ok()?.contains("\"GET / HTTP/1.1\" 200").then_some(())
    });
    let status = run("/etc/init.d/pika", &["status"]);
    assert!(status.status.success() && out(&status).contains(&format!("running (pid {pid})")), "{}", out(&status));

    let o = run("/etc/init.d/pika", &["stop"]);
    assert!(o.status.success(), "/etc/init.d/pika stop: {}", out(&o));
    assert!(!alive(pid), "the master is gone");

    drop(guard); // dpkg --purge pika
    assert!(!run("dpkg", &["-s", "pika"]).status.success(), "pika is still installed");
    let left: Vec<&&str> = INSTALLED
        .iter()
        .chain(&["/etc/pika", "/var/www/pika", "/run/pika.pid", "/run/pika.status"])
        .filter(|p| Path::new(p).exists())
        .collect();
    assert!(left.is_empty(), "left behind by the purge: {left:?}");
    assert!(nix::unistd::User::from_name("pika").unwrap().is_none(), "the pika user is left");
    assert!(nix::unistd::Group::from_name("pika").unwrap().is_none(), "the pika group is left");
    for dir in
        ["/etc/rc2.d", "/etc/systemd/system/multi-user.target.wants", "/var/lib/systemd/deb-systemd-helper-enabled"]
    {
        let names: Vec<String> = std::fs::read_dir(dir)
            .map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        assert!(!names.iter().any(|n| n.contains("pika")), "left in {dir}: {names:?}");
    }
}
