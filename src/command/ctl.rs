//! `pika -k COMMAND`: control a running server through its pid file, and wait until
//! the command's effect is visible (the master gone, a new generation serving).
//!
//! Exit codes: 0 done; 1 failed or not running; for `status`, 3 when not running
//! (the LSB code, so init scripts can pass it through).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::command::cli::fail;
use crate::config::{self, Config};
use crate::master::{pidfile, statusfile};

/// How long `stop` waits beyond the graceful timeout before giving up.
const STOP_SLACK: Duration = Duration::from_secs(10);
/// How long `reload` waits for the new generation.
const RELOAD_WAIT: Duration = Duration::from_secs(30);
/// How long `upgrade` waits for the new master to serve: the master's own limit,
/// and a margin.
const UPGRADE_WAIT: Duration = Duration::from_secs(40);

pub fn run(command: &str, config_path: &Path) -> ExitCode {
    let config = match config::load(config_path) {
        Ok(c) => c,
        // A broken config must not keep an operator from stopping or inspecting the
        // running server: those commands only need the pid file, found leniently.
        Err(e) => match (command, lenient_target(config_path)) {
            ("stop" | "graceful-stop" | "status" | "reopen-logs", Some(t)) => {
                eprintln!("pika: warning: {e}");
                return act(command, &t);
            }
            _ => return fail(e),
        },
    };
    let target =
        Target { pid_file: config.pid_file.clone(), graceful_timeout: config.drain_time + config.graceful_timeout };
    match command {
        "start" => start(config),
        "reload" | "graceful" => reload(&target),
        "upgrade" => upgrade(&target),
        "restart" => {
            if pidfile::running(&target.pid_file).is_some() {
                let code = stop(&target, Signal::SIGTERM, "stopped");
                if code != ExitCode::SUCCESS {
                    return code;
                }
            }
            start(config)
        }
        other => act(other, &target),
    }
}

/// What the commands that only signal need to know.
struct Target {
    pid_file: PathBuf,
    /// A graceful stop's longest: its drain, then its wait for the workers.
    graceful_timeout: Duration,
}

fn act(command: &str, t: &Target) -> ExitCode {
    match command {
        "stop" => stop(t, Signal::SIGTERM, "stopped"),
        "graceful-stop" => stop(t, Signal::SIGQUIT, "stopped gracefully"),
        "reopen-logs" => signal(t, Signal::SIGUSR1, "asked to reopen its logs"),
        "status" => status(t),
        other => fail(format!("unknown command {other:?} (see pika -h)")),
    }
}

/// The pid file named by a config that does not validate: `server.pid_file` and
/// `server.root` read from whatever TOML parses, with the usual defaults.
fn lenient_target(config_path: &Path) -> Option<Target> {
    let text = std::fs::read_to_string(config_path).ok()?;
    let table: toml::Table = toml::from_str(&text).ok().unwrap_or_default();
    let server = table.get("server").and_then(|s| s.as_table());
    let get = |k: &str| server.and_then(|s| s.get(k)).and_then(|v| v.as_str());
    let abs = std::path::absolute(config_path).ok()?;
    let conf_dir = abs.parent()?;
    let root = match get("root") {
        Some(r) => conf_dir.join(r),
        None => conf_dir.parent().unwrap_or(conf_dir).to_path_buf(),
    };
    let pid_file = root.join(get("pid_file").unwrap_or("logs/pika.pid"));
    Some(Target { pid_file, graceful_timeout: Duration::from_secs(30) })
}

fn start(config: Config) -> ExitCode {
    if let Some(pid) = pidfile::running(&config.pid_file) {
        println!("pika is already running (pid {pid})");
        return ExitCode::SUCCESS;
    }
    crate::command::daemon::start_daemon(config)
}

fn master_pid(t: &Target) -> Option<Pid> {
    pidfile::running(&t.pid_file).map(Pid::from_raw)
}

fn signal(config: &Target, sig: Signal, what: &str) -> ExitCode {
    let Some(pid) = master_pid(config) else { return fail("not running") };
    if let Err(e) = kill(pid, sig) {
        return fail(format!("cannot signal pid {pid}: {e}"));
    }
    println!("pika (pid {pid}) {what}");
    ExitCode::SUCCESS
}

fn stop(config: &Target, sig: Signal, what: &str) -> ExitCode {
    let Some(pid) = master_pid(config) else { return fail("not running") };
    if let Err(e) = kill(pid, sig) {
        return fail(format!("cannot signal pid {pid}: {e}"));
    }
    let limit = if sig == Signal::SIGQUIT { config.graceful_timeout + STOP_SLACK } else { STOP_SLACK };
    if wait_for(limit, || pidfile::running(&config.pid_file).is_none() && kill(pid, None).is_err()) {
        println!("pika (pid {pid}) {what}");
        ExitCode::SUCCESS
    } else {
        fail(format!("pid {pid} still running after {limit:?}"))
    }
}

fn reload(config: &Target) -> ExitCode {
    let Some(pid) = master_pid(config) else { return fail("not running") };
    let before = statusfile::read(&config.pid_file).and_then(|s| statusfile::field(&s, "generation"));
    if let Err(e) = kill(pid, Signal::SIGHUP) {
        return fail(format!("cannot signal pid {pid}: {e}"));
    }
    let ok = wait_for(RELOAD_WAIT, || {
        let Some(s) = statusfile::read(&config.pid_file) else { return false };
        let generation = statusfile::field(&s, "generation");
        generation.is_some()
            && generation != before
            && statusfile::field(&s, "current_generation_ready").unwrap_or(0) > 0
    });
    if ok {
        println!("pika (pid {pid}) reloaded");
        ExitCode::SUCCESS
    } else {
        fail(format!("pid {pid} did not start a new generation within {RELOAD_WAIT:?} (see the error log)"))
    }
}

/// USR2, then waits until a new master serves (exit 0) or the old one says the
/// upgrade failed (exit 1); then until the old master is gone.
fn upgrade(t: &Target) -> ExitCode {
    let Some(old) = master_pid(t) else { return fail("not running") };
    let failed = |s: Option<String>| s.and_then(|s| statusfile::field(&s, "upgrades_failed")).unwrap_or(0);
    let failed_before = failed(statusfile::read(&t.pid_file));
    if let Err(e) = kill(old, Signal::SIGUSR2) {
        return fail(format!("cannot signal pid {old}: {e}"));
    }
    let mut new = None;
    let done = wait_for(UPGRADE_WAIT, || {
        if let Some(pid) = pidfile::running(&t.pid_file).filter(|p| *p != old.as_raw()) {
            let s = statusfile::read(&t.pid_file);
            if s.as_deref().and_then(|s| statusfile::field(s, "current_generation_ready")).unwrap_or(0) > 0 {
                new = Some(pid);
                return true;
            }
        }
        // The old master took its pid file back and counted a failure.
        pidfile::running(&t.pid_file) == Some(old.as_raw()) && failed(statusfile::read(&t.pid_file)) > failed_before
    });
    let Some(new) = new else {
        return fail(if done {
            format!("the upgrade failed; pid {old} goes on serving (its error log says why)")
        } else {
            format!("no new master served within {UPGRADE_WAIT:?}; see the error log")
        });
    };
    println!("pika upgraded: pid {new} serves; pid {old} retires its workers and exits");
    let limit = t.graceful_timeout + STOP_SLACK;
    if !wait_for(limit, || kill(old, None).is_err()) {
        eprintln!("pika: warning: the old master (pid {old}) is still there after {limit:?}");
    }
    ExitCode::SUCCESS
}

fn status(config: &Target) -> ExitCode {
    let Some(pid) = master_pid(config) else {
        println!("pika is not running");
        return ExitCode::from(3);
    };
    println!("pika is running (pid {pid})");
    if let Some(s) = statusfile::read(&config.pid_file) {
        print!("{s}");
    }
    ExitCode::SUCCESS
}

fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    done()
}
