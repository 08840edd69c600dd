//! Starting the server: in the foreground (`-F`), or as a classic Unix daemon.
//!
//! Both paths run the same `boot`: limits, bind, pid file, error log, then the master
//! loop. A daemon start forks, `setsid`s and forks again, and the command that
//! launched it waits on a ready pipe: it exits 0 only once the listeners are bound
//! and the workers are up, and otherwise prints why the server did not start.

use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::process::ExitCode;

use crate::base::sys::{self, Forked};
use crate::config::Config;
use crate::master::Master;
use crate::master::pidfile::PidFile;
use crate::master::ready::{self, Ready};

/// Runs the master in this process until it stops.
pub fn run_foreground(config: Config) -> ExitCode {
    boot(config, None)
}

/// Serves in this one process (`-X`): no master, no fork; for debugging.
pub fn run_single(config: Config) -> ExitCode {
    raise_nofile(config.max_open_files);
    let mut listeners = Vec::new();
    for entry in &config.listen {
        match crate::fork::listen::bind(*entry, config.backlog, crate::fork::listen::defer(&config)) {
            Ok(l) => listeners.push(l),
            Err(e) => return crate::command::cli::fail(format!("cannot listen on {}: {e}", entry.addr)),
        }
    }
    let listeners = match crate::fork::listen::Listeners::new(listeners) {
        Ok(l) => l,
        Err(e) => return crate::command::cli::fail(e),
    };
    let setup = || -> Result<_, String> {
        config.make_body_dir()?;
        let sb = crate::scoreboard::Scoreboard::new(1).map_err(|e| e.to_string())?;
        // What the master would hold (the metrics show the band).
        sb.header.min_spare.store(config.workers.min_spare, std::sync::atomic::Ordering::Relaxed);
        sb.header.max_spare.store(config.workers.max_spare, std::sync::atomic::Ordering::Relaxed);
        let logs = crate::log::access::AccessLogs::open(&config.access_logs).map_err(|e| e.to_string())?;
        let token = crate::fork::pod::make_token().map_err(|e| e.to_string())?;
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let tickets = crate::tls::tickets::TicketKeys::new(now).map_err(|e| format!("ticket keys: {e}"))?;
        Ok((sb, logs, token, tickets))
    };
    let (scoreboard, logs, token, tickets) = match setup() {
        Ok(s) => s,
        Err(e) => return crate::command::cli::fail(e),
    };
    if let Err(e) = crate::log::set_target(&config.error_log, config.log_level) {
        return crate::command::cli::fail(format!("cannot open the error log: {e}"));
    }
    for l in &listeners.list {
        log::info!("listening on {} (single process)", l.bound);
    }
    if config.cluster.is_some() {
        // The fleet's state is kept in step by the master's tick.
        log::warn!("cluster: not in single-process mode (-X): this process keeps its own ticket keys and certificates");
    }
    if config.vhosts.iter().any(|v| v.acme) {
        // Obtaining a certificate takes the master and its ACME child.
        log::warn!(
            "acme: not in single-process mode (-X): vhosts with acme = true serve their stored certificate or a placeholder"
        );
    }
    let ctx = crate::worker::WorkerCtx {
        config: &config,
        listeners: &listeners,
        scoreboard: &scoreboard,
        slot: 0,
        generation: 0,
        pod: None,
        doorbell: None,
        handover: None,
        homes: &[],
        token: &token,
        tickets: &tickets,
        logs,
        log_epoch: scoreboard.header.log_epoch.load(std::sync::atomic::Ordering::SeqCst),
        master: None,
        held: None,
    };
    let code = crate::worker::run(ctx);
    if code == crate::worker::ChildExit::Retired { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// Starts a daemon and waits until it is serving, or says why not.
pub fn start_daemon(config: Config) -> ExitCode {
    let (read, write): (OwnedFd, OwnedFd) = match nix::unistd::pipe() {
        Ok(p) => p,
        Err(e) => return crate::command::cli::fail(format!("pipe: {e}")),
    };
    match sys::fork() {
        Err(e) => crate::command::cli::fail(format!("fork: {e}")),
        Ok(Forked::Parent(child)) => {
            drop(write);
            let _ = nix::sys::wait::waitpid(child, None);
            match ready::wait(File::from(read)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(why) => crate::command::cli::fail(why),
            }
        }
        Ok(Forked::Child) => {
            drop(read);
            // A new session without a controlling terminal, then a second fork so the
            // daemon is not a session leader and can never acquire one.
            let _ = nix::unistd::setsid();
            match sys::fork() {
                Ok(Forked::Child) => {}
                Ok(Forked::Parent(_)) => sys::exit_now(0),
                Err(e) => {
                    let _ = File::from(write).write_all(format!("fork: {e}\n").as_bytes());
                    sys::exit_now(1)
                }
            }
            let _ = nix::unistd::chdir("/");
            nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
            let code = boot(config, Some(File::from(write)));
            sys::exit_now(if code == ExitCode::SUCCESS { 0 } else { 1 })
        }
    }
}

fn boot(config: Config, ready: Option<File>) -> ExitCode {
    let daemon = ready.is_some();
    // Sockets from an old master (binary upgrade) or from systemd, and the pipe an
    // old master waits on.
    let mut inherited = crate::fork::inherit::take();
    let mut ready = Ready::new(ready.or(inherited.ready.take()));
    let fail = |ready: &mut Ready, msg: String| {
        ready.fail(&msg);
        if !daemon {
            eprintln!("pika: {msg}");
        }
        log::error!("{msg}");
        ExitCode::FAILURE
    };
    raise_nofile(config.max_open_files);
    let pid_file = match PidFile::acquire(&config.pid_file) {
        Ok(p) => p,
        Err(e) => return fail(&mut ready, e),
    };
    let master = match Master::new(config.clone(), &mut inherited) {
        Ok(m) => m,
        Err(e) => {
            pid_file.remove();
            return fail(&mut ready, e);
        }
    };
    if let Err(e) = crate::log::set_target(&config.error_log, config.log_level) {
        pid_file.remove();
        return fail(&mut ready, format!("cannot open the error log: {e}"));
    }
    if daemon {
        redirect_stdio(&config);
    }
    if config.run_as.is_none() && nix::unistd::geteuid().is_root() {
        log::warn!(
            "running as root with no server.user set: workers keep root's rights (set server.user, e.g. \"www-data\")"
        );
    }
    for note in &inherited.notes {
        log::warn!("{note}");
    }
    for used in &inherited.used {
        log::info!("inherited {used}");
    }
    for addr in master.bound() {
        log::info!("listening on {addr}");
    }
    if let Some(old) = inherited.old_master {
        log::info!("binary upgrade: taking over from pid {old}");
    }
    log::info!(
        "pika {} started (pid {}), config {}",
        env!("CARGO_PKG_VERSION"),
        std::process::id(),
        config.file.display()
    );
    let code = master.run(&mut ready);
    pid_file.remove();
    code
}

/// stdin and stdout to /dev/null; stderr to the error log file if it is one (so a
/// panic message is not lost), else /dev/null.
fn redirect_stdio(config: &Config) {
    let null = File::options().read(true).write(true).open("/dev/null");
    let err = match &config.error_log {
        crate::config::ErrorLogTarget::File(p) => crate::log::open_append(p).ok(),
        _ => None,
    };
    if let Ok(null) = null {
        let _ = nix::unistd::dup2_stdin(&null);
        let _ = nix::unistd::dup2_stdout(&null);
        match err {
            Some(e) => {
                let _ = nix::unistd::dup2_stderr(&e);
            }
            None => {
                let _ = nix::unistd::dup2_stderr(&null);
            }
        }
    }
}

/// Raises the descriptor limit as far as allowed: to `server.max_open_files`, or
/// without it to the hard limit (a worker holds its kept-alive connections, up to
/// `workers.max_connections`; the soft limit's usual 1024 would cap that).
fn raise_nofile(want: Option<u64>) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else { return };
    let want = want.unwrap_or(hard);
    let target = want.min(hard.max(want));
    if setrlimit(Resource::RLIMIT_NOFILE, target, hard.max(target)).is_err() {
        // Not root: only up to the hard limit.
        let target = want.min(hard);
        if target > soft && setrlimit(Resource::RLIMIT_NOFILE, target, hard).is_err() {
            log::warn!("cannot raise the open-file limit to {want}");
        }
    }
}
