//! The binary upgrade (USR2, `pika -k upgrade`): a new master takes the listening
//! sockets over with no request failed; a new binary that cannot serve leaves the
//! old master serving, with its pid file back.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::util::*;

fn pid_in(site: &Site) -> Option<i32> {
    site.read("logs/pika.pid").trim().parse().ok()
}

/// Waits until a master other than `old` serves (pid file and status file say so).
fn new_master_serves(site: &Site, old: i32) -> i32 {
    wait_until(DEADLINE, "the new master to serve", || {
        let pid = pika::master::pidfile::running(&site.path("logs/pika.pid")).filter(|p| *p != old)?;
        (field(&site.status(), "current_generation_ready")? > 0).then_some(pid)
    })
}

const CONFIG: &str = "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 4\n[http]\nkeepalive_timeout = \"30s\"\n";

#[test]
fn usr2_upgrades_to_the_same_binary_under_load_with_no_request_failed() {
    let site = Site::new();
    site.config("", CONFIG);
    let _stop = StopAtEnd(&site);
    let mut p = Pika::start(&site, "-F");
    let load = Load::start(p.addr, &[None, None, None, None], "/");
    std::thread::sleep(Duration::from_millis(500));
    p.signal(libc::SIGUSR2);
    let new = new_master_serves(&site, p.pid);
    assert_ne!(new, p.pid);
    // The old master retires its workers and exits by itself.
    assert_eq!(p.wait_exit(DEADLINE), Some(0), "the old master exits cleanly");
    assert!(!site.path("logs/pika.pid.oldbin").exists(), "the old pid file is gone with it");
    std::thread::sleep(Duration::from_millis(500));
    let r = load.finish();
    eprintln!("load through the upgrade: {r:?}");
    assert_eq!(r.failed, 0, "{r:?}");
    assert!(r.ok > 100, "{r:?}");
    let log = site.error_log();
    assert!(log.contains(&format!("upgrade: the new master (pid {new}) serves")), "{log}");
    assert!(log.contains(&format!("pika (pid {}) exits: the new master serves", p.pid)), "{log}");
    // The new master answers, and owns the pid file.
    assert_eq!(get(p.addr, "/").status, 200);
    assert_eq!(pid_in(&site), Some(new));
}

/// A copy of the binary in the site, so a test can replace it under the master.
fn own_binary(site: &Site) -> PathBuf {
    let bin = site.path("pika");
    std::fs::copy(BIN, &bin).unwrap();
    bin
}

/// Replaces the file at `bin` (a new inode, as a package does: the running one is busy).
fn replace_with_script(bin: &Path, script: &str) {
    use std::os::unix::fs::PermissionsExt;
    let tmp = bin.with_extension("new");
    std::fs::write(&tmp, script).unwrap();
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::rename(&tmp, bin).unwrap();
}

fn ctl(bin: &Path, site: &Site, cmd: &str) -> (i32, String) {
    let out = Command::new(bin).args(["-k", cmd, "-f"]).arg(site.path("conf/pika.toml")).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

/// Starts `site` with `-k start` from its own copy of the binary (which the test may
/// then replace): the copy, the master's pid and its address.
fn start_own_binary(site: &Site) -> (PathBuf, i32, std::net::SocketAddr) {
    let bin = own_binary(site);
    let (code, text) = ctl(&bin, site, "start");
    assert_eq!(code, 0, "{text}");
    let pid = pid_in(site).unwrap();
    (bin, pid, wait_until(DEADLINE, "the address", || listening_addr(&site.error_log())))
}

#[test]
fn k_upgrade_exits_0_only_when_a_new_master_serves() {
    let site = Site::new();
    site.config("", CONFIG);
    let _stop = StopAtEnd(&site);
    let (bin, first, addr) = start_own_binary(&site);

    // The same binary: a new master, the old one gone.
    let (code, text) = ctl(&bin, &site, "upgrade");
    assert_eq!(code, 0, "{text}");
    let second = pid_in(&site).unwrap();
    assert_ne!(second, first);
    assert!(text.contains(&format!("pid {second} serves")), "{text}");
    assert!(!alive(first), "-k upgrade waited for the old master to go");
    assert_eq!(get(addr, "/").status, 200);

    // A binary that exits at once: the old master stays, with its pid file.
    replace_with_script(&bin, "#!/bin/sh\nexit 3\n");
    let (code, text) = ctl(&std::path::PathBuf::from(BIN), &site, "upgrade");
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("the upgrade failed"), "{text}");
    assert_eq!(pid_in(&site), Some(second));
    assert!(!site.path("logs/pika.pid.oldbin").exists());
    let log = site.error_log();
    assert!(log.contains("upgrade failed: the new master") && log.contains("exited"), "{log}");
    assert_eq!(get(addr, "/").status, 200);

    // The new binary (the real one again) with a config that does not load: the
    // reason reaches the old master's log, and it serves on.
    std::fs::copy(BIN, site.path("pika.new")).unwrap();
    std::fs::rename(site.path("pika.new"), &bin).unwrap();
    let good = site.read("conf/pika.toml");
    site.write("conf/pika.toml", format!("{good}\n[bogus]\n"));
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(second), nix::sys::signal::Signal::SIGUSR2);
    let log = wait_until(DEADLINE, "the failure in the log", || {
        let log = site.error_log();
        (log.matches("upgrade failed").count() >= 2).then_some(log)
    });
    assert!(log.contains("could not start") && log.contains("unknown field `bogus`"), "{log}");
    assert_eq!(pid_in(&site), Some(second));
    assert_eq!(get(addr, "/").status, 200);
    site.write("conf/pika.toml", good);
    let (code, text) = ctl(&bin, &site, "stop");
    assert_eq!(code, 0, "{text}");
}

/// A new binary that never serves (here a script that only sleeps): while the old
/// master waits for it, its pid file is `<pid_file>.oldbin` and it serves on; at the
/// master's limit (30 s) it stops the new one, takes its pid file back and says why,
/// and `-k upgrade` exits 1.
#[test]
fn an_upgrade_to_a_binary_that_never_serves_is_given_up_at_the_limit() {
    let site = Site::new();
    site.config("", CONFIG);
    let _stop = StopAtEnd(&site);
    let (bin, old, addr) = start_own_binary(&site);
    replace_with_script(&bin, "#!/bin/sh\nexec sleep 90\n");

    // Driven by the test's own binary (the site's is the script now).
    let driver = {
        let conf = site.path("conf/pika.toml");
        std::thread::spawn(move || {
            let out = Command::new(BIN).args(["-k", "upgrade", "-f"]).arg(conf).output().unwrap();
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            (out.status.code().unwrap_or(-1), text)
        })
    };
    // The dance has begun: the pid file moved aside, the new binary running.
    let child: i32 = wait_until(DEADLINE, "the new binary to start", || {
        let log = site.error_log();
        let line = log.lines().find(|l| l.contains("upgrade: started"))?;
        line.split("as pid ").nth(1)?.split(';').next()?.parse().ok()
    });
    assert!(alive(child));
    assert_eq!(site.read("logs/pika.pid.oldbin").trim(), old.to_string());
    assert!(!site.path("logs/pika.pid").exists(), "the pid file is the new master's to write");
    assert_eq!(get(addr, "/").status, 200, "the old master serves meanwhile");

    let (code, text) = driver.join().unwrap();
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("the upgrade failed"), "{text}");
    let log = site.error_log();
    assert!(log.contains(&format!("upgrade failed: the new master (pid {child}) did not serve within 30s")), "{log}");
    assert_eq!(pid_in(&site), Some(old), "the pid file taken back");
    assert!(!site.path("logs/pika.pid.oldbin").exists());
    wait_until(DEADLINE, "the new binary to be stopped", || (!alive(child)).then_some(()));
    assert_eq!(get(addr, "/").status, 200);
    std::fs::copy(BIN, site.path("pika.new")).unwrap();
    std::fs::rename(site.path("pika.new"), &bin).unwrap();
    let (code, text) = ctl(&bin, &site, "stop");
    assert_eq!(code, 0, "{text}");
}

/// The health location during an upgrade: the old generation's workers answer 503
/// from the moment the new master serves (a request they still hold), the new
/// master's 200.
#[test]
fn the_old_generation_answers_health_checks_503_once_the_new_master_serves() {
    let site = Site::new();
    site.config(
        "",
        "[workers]\nstart = 1\nmin_spare = 1\nmax_spare = 2\n[http]\nkeepalive_timeout = \"30s\"\n\
         [[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n\
         [[vhost.location]]\nexact = \"/healthz\"\nhealth = true\n",
    );
    // Larger than loopback's socket buffers: its worker is still writing it, and has
    // the health check behind it, when the upgrade happens.
    let big = 48 << 20;
    site.write("htdocs/big.bin", vec![b'x'; big]);
    let _stop = StopAtEnd(&site);
    let mut p = Pika::start(&site, "-F");
    assert_eq!(get(p.addr, "/healthz").status, 200);
    let mut held = connect(p.addr);
    held.write_all(b"GET /big.bin HTTP/1.1\r\nHost: localhost\r\n\r\nGET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut first = [0u8; 4096];
    held.read_exact(&mut first).unwrap();

    p.signal(libc::SIGUSR2);
    let new = new_master_serves(&site, p.pid);
    wait_until(DEADLINE, "the old generation to retire", || {
        site.error_log().contains(&format!("upgrade: the new master (pid {new}) serves")).then_some(())
    });
    // The new master's workers answer 200. A fresh connection can still land on an
    // old worker that has not yet seen the new generation (its wake-up is on its
    // way): it answers 503 like the rest of the old generation, so the check asks
    // until the new master's answer comes.
    wait_until(DEADLINE, "the new master's workers to answer the health check", || {
        (get(p.addr, "/healthz").status == 200).then_some(())
    });

    // The rest of the file, then the old worker's answer to the health check.
    let head_end = first.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let mut body_left = big - (first.len() - head_end);
    let mut chunk = vec![0u8; 1 << 16];
    while body_left > 0 {
        let n = held.read(&mut chunk[..body_left.min(1 << 16)]).unwrap();
        assert!(n > 0, "closed with {body_left} bytes of the file left");
        body_left -= n;
    }
    let r = read_response(&mut held, false).expect("an answer to the held health check");
    assert_eq!((r.status, r.text().as_str()), (503, "draining\n"));
    assert_eq!(p.wait_exit(DEADLINE), Some(0), "the old master exits once its worker is done");
}

/// Every descriptor of `pid` that names `path`.
fn fds_naming(pid: i32, path: &Path) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.flatten().filter(|e| std::fs::read_link(e.path()).is_ok_and(|l| l == path)).collect::<Vec<_>>())
        .unwrap_or_default()
        .iter()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn the_new_master_keeps_none_of_the_descriptors_the_first_was_started_with() {
    let site = Site::new();
    site.config("", CONFIG);
    let _stop = StopAtEnd(&site);
    // A supervisor's descriptor the first master was started with (as a shell's
    // `7>>file` leaves it): the old master keeps it open, and passed it on.
    let stray = std::fs::canonicalize(site.dir.path()).unwrap().join("stray");
    std::fs::write(&stray, "").unwrap();
    let mut first = Command::new("sh")
        .arg("-c")
        .arg(format!("exec \"$0\" -F -f \"$1\" 7>>'{}'", stray.display()))
        .arg(BIN)
        .arg(site.path("conf/pika.toml"))
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let old = first.id() as i32;
    wait_until(DEADLINE, "the first master to serve", || {
        (pid_in(&site) == Some(old) && field(&site.status(), "current_generation_ready")? > 0).then_some(())
    });
    assert_eq!(fds_naming(old, &stray), ["7"], "the test's premise: the first master holds it");
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(old), nix::sys::signal::Signal::SIGUSR2);
    let new = new_master_serves(&site, old);
    assert_eq!(fds_naming(new, &stray), Vec::<String>::new(), "the new master closed it");
    for w in children_of(new) {
        assert_eq!(fds_naming(w, &stray), Vec::<String>::new(), "worker {w}");
    }
    let addr = wait_until(DEADLINE, "the address", || listening_addr(&site.error_log()));
    assert_eq!(get(addr, "/").status, 200);
    let _ = first.wait();
}
