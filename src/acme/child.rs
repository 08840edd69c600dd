//! The ACME child: a process the master forks when a certificate is due, which
//! drops to the workers' user, talks to the CA, and hands back over a pipe what it
//! got, one JSON line per [`Report`]. It exits when its jobs are done.
//!
//! Why the workers' user: the child needs no privilege (it writes no file and binds
//! no port: the workers answer the challenges from shared memory), and that user
//! exists on every pika host. It is made undumpable after the switch, so a worker
//! of the same user cannot attach to it and read the account key. Why not the
//! master: the master must never wait on the network, and a bug in parsing a CA's
//! answers must not run as root. Why a fresh process per run: it holds nothing
//! between renewals (most of the time no ACME process exists at all).

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Instant;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use super::challenges::{Kind, Publish};
use super::client::{Client, Failure};
use super::https::Https;
use super::jws::AccountKey;
use super::settings::{Challenge, Settings};
use crate::base::sys::{self, Forked};

/// What the child tells the master.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Report {
    /// A new account was registered at the directory: its URL.
    Account { url: String },
    /// A certificate for `names`: the chain and its key (PEM).
    Issued { names: Vec<String>, chain: String, key: String },
    /// Obtaining one for `names` failed.
    Failed { names: Vec<String>, error: String, retry_after: Option<i64> },
    /// In a fleet: a challenge to answer on every node (the kind as
    /// [`Kind`]` as u8`, the name, the value in base64url), which the master puts in
    /// its table and shares.
    Publish { kind: u8, name: String, value: String },
    /// In a fleet: the challenge is done with.
    Unpublish { kind: u8, name: String },
}

/// How long the child waits, in a fleet, between publishing its challenges and
/// asking the CA to validate them: every master copies the fleet's challenges on its
/// one-second tick, so two seconds lets each node's tick pass once whichever node
/// the CA reaches.
pub const FLEET_SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

/// The challenges of a child in a fleet: reported to the master on the pipe (the
/// master, the table's one writer then, puts them in the table and in Redis).
struct ToMaster<'a> {
    pipe: &'a std::fs::File,
}

impl Publish for ToMaster<'_> {
    fn put(&self, kind: Kind, name: &[u8], value: &[u8]) -> bool {
        let name = String::from_utf8_lossy(name).into_owned();
        let line = Report::Publish { kind: kind as u8, name, value: super::b64::url(value) }.line();
        let mut pipe = self.pipe;
        pipe.write_all(&line).is_ok()
    }

    fn remove(&self, kind: Kind, name: &[u8]) {
        let name = String::from_utf8_lossy(name).into_owned();
        let mut pipe = self.pipe;
        let _ = pipe.write_all(&Report::Unpublish { kind: kind as u8, name }.line());
    }

    fn settle(&self) {
        std::thread::sleep(FLEET_SETTLE);
    }
}

impl Report {
    pub fn line(&self) -> Vec<u8> {
        let mut v = serde_json::to_vec(self).unwrap_or_default();
        v.push(b'\n');
        v
    }
}

/// Everything the child needs, taken from the master's memory at the fork.
pub struct Plan<'a> {
    pub settings: &'a Settings,
    /// The names of each certificate to obtain, in turn.
    pub jobs: Vec<Vec<String>>,
    pub account_key: Vec<u8>,
    pub account_url: Option<String>,
    pub challenges: Vec<Challenge>,
    /// In a fleet (`[cluster]`): the challenges go to the master, which shares them,
    /// instead of into this node's table.
    pub fleet: bool,
    /// Switches to the workers' user (the master's `worker::drop_privileges`);
    /// `user` names it in the error log.
    pub drop_privileges: &'a dyn Fn() -> std::io::Result<()>,
    pub user: &'a str,
}

/// Forks the child; returns its pid and the pipe its reports come on (non-blocking).
pub fn spawn(plan: Plan<'_>) -> std::io::Result<(Pid, OwnedFd)> {
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    nix::fcntl::fcntl(&read, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK))?;
    let master = nix::unistd::getpid();
    let old_mask = sys::block_all_signals();
    match sys::fork() {
        Ok(Forked::Child) => {
            drop(read);
            sys::reset_signals_in_child();
            let code = child_main(plan, write, master);
            sys::exit_now(code)
        }
        Ok(Forked::Parent(pid)) => {
            sys::restore_signals(&old_mask);
            Ok((pid, read))
        }
        Err(e) => {
            sys::restore_signals(&old_mask);
            Err(e)
        }
    }
}

/// The child's life; returns its exit code.
fn child_main(plan: Plan<'_>, pipe: OwnedFd, master: Pid) -> i32 {
    // The roots are read before the switch: `ca_roots` may be root's alone.
    let roots_file = plan.settings.ca_roots.as_deref().unwrap_or(std::path::Path::new(super::settings::SYSTEM_ROOTS));
    let http = super::https::roots(roots_file).and_then(Https::new);
    if !confine(&plan, &pipe, master) {
        return 1;
    }
    let out = std::fs::File::from(pipe);
    let mut say = |r: Report| {
        let _ = (&out).write_all(&r.line());
    };
    let fail_all = |say: &mut dyn FnMut(Report), f: &Failure, jobs: &[Vec<String>]| {
        for names in jobs {
            say(Report::Failed { names: names.clone(), error: f.text.clone(), retry_after: f.retry_after });
        }
    };
    let Some(table) = super::challenges::shared() else {
        log::error!("acme: no table of challenges");
        return 1;
    };
    let to_master = ToMaster { pipe: &out };
    let board: &dyn Publish = if plan.fleet {
        &to_master
    } else {
        // A node alone: the table is the child's to write; a child killed mid-order
        // left its entries.
        table.clear();
        table
    };
    let http = match http {
        Ok(h) => h,
        Err(e) => {
            fail_all(&mut say, &Failure { text: e, retry_after: None, account_gone: false }, &plan.jobs);
            return 0;
        }
    };
    let key = match AccountKey::from_pkcs8(&plan.account_key) {
        Ok(k) => k,
        Err(e) => {
            fail_all(
                &mut say,
                &Failure { text: format!("the account key: {e}"), retry_after: None, account_gone: false },
                &plan.jobs,
            );
            return 0;
        }
    };
    // The directory and the account count in the first order's time.
    let mut client = match Client::new(http, key, plan.settings, Instant::now() + plan.settings.order_timeout) {
        Ok(c) => c,
        Err(f) => {
            let f = Failure { text: format!("{}: {}", plan.settings.directory, f.text), ..f };
            fail_all(&mut say, &f, &plan.jobs);
            return 0;
        }
    };
    let mut registered = plan.account_url.is_none();
    if let Err(f) = register(&mut client, plan.account_url.clone(), &mut say) {
        fail_all(&mut say, &f, &plan.jobs);
        return 0;
    }
    for (i, names) in plan.jobs.iter().enumerate() {
        if i > 0 {
            client.order_by(Instant::now() + plan.settings.order_timeout);
        }
        log::info!("acme: ordering a certificate for {} from {}", names.join(", "), plan.settings.directory);
        let mut got = client.obtain(names, &plan.challenges, board);
        if let Err(f) = &got
            && f.account_gone
            && !registered
        {
            // The CA forgot the stored account: register again, once.
            log::warn!("acme: the CA does not know the stored account ({}); registering a new one", f.text);
            registered = true;
            got = register(&mut client, None, &mut say).and_then(|()| client.obtain(names, &plan.challenges, board));
        }
        match got {
            Ok((chain, key)) => say(Report::Issued { names: names.clone(), chain, key }),
            Err(f) => say(Report::Failed { names: names.clone(), error: f.text, retry_after: f.retry_after }),
        }
    }
    0
}

/// Confines the child before it talks to the CA: only the pipe and the error log kept
/// open, the workers' user, no core dumps, death with the master. False when it
/// cannot (the reason is logged) or the master is gone.
fn confine(plan: &Plan<'_>, pipe: &OwnedFd, master: Pid) -> bool {
    let mut keep: Vec<i32> = vec![pipe.as_raw_fd()];
    keep.extend(crate::log::error_log_fd());
    if let Err(e) = sys::close_descriptors_except(&keep) {
        log::error!("acme: cannot close the master's descriptors: {e}");
        return false;
    }
    if let Err(e) = (plan.drop_privileges)() {
        log::error!("acme: cannot switch to user {}: {e}", plan.user);
        return false;
    }
    // Set after the switch, which resets both.
    let _ = sys::set_dumpable(false);
    log::info!("acme: the ACME child runs as uid {} gid {}", nix::unistd::getuid(), nix::unistd::getgid());
    let _ = sys::die_with_parent(Signal::SIGTERM);
    if nix::unistd::getppid() != master {
        return false;
    }
    true
}

fn register(client: &mut Client<'_>, stored: Option<String>, say: &mut dyn FnMut(Report)) -> Result<(), Failure> {
    let new = stored.is_none();
    let url = client.account(stored)?;
    if new {
        log::info!("acme: registered account {url}");
        say(Report::Account { url });
    }
    Ok(())
}

/// Splits what came on the pipe into reports; keeps a partial last line in `buf`.
pub fn read_reports(buf: &mut Vec<u8>) -> Vec<Report> {
    let mut out = Vec::new();
    while let Some(end) = buf.iter().position(|&b| b == b'\n') {
        let line: Vec<u8> = buf.drain(..=end).collect();
        match serde_json::from_slice(&line) {
            Ok(r) => out.push(r),
            Err(e) => log::error!("acme: an unreadable report from the ACME child: {e}"),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_cross_the_pipe_whole() {
        let a = Report::Issued { names: vec!["a.example".into()], chain: "C\nD\n".into(), key: "K\n".into() };
        let b = Report::Failed { names: vec!["b.example".into()], error: "refused".into(), retry_after: Some(3) };
        let mut buf = [a.line(), b.line()].concat();
        let tail = buf.split_off(buf.len() - 5);
        assert_eq!(read_reports(&mut buf), [a]);
        buf.extend_from_slice(&tail);
        assert_eq!(read_reports(&mut buf), [b]);
        assert!(buf.is_empty());
    }
}
