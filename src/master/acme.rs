//! The master's side of ACME ([`crate::acme`]): on the tick, fork the ACME child when
//! a certificate is due; read its reports; store what it got in the state folder as
//! root; install new certificates by a reload once the child is done.
//!
//! The child runs as the workers' user and talks to the network: the master takes
//! from it only what it asked for (a certificate for a job it sent that child, stored
//! under the master's own names in its own `state_dir`: [`take_report`]), and does not
//! wait on it forever: a child that reports nothing for `acme.order_timeout` (and
//! [`LATE_GRACE`]) is killed and its jobs fail (tried again after the back-off), and
//! an operator's reload (HUP) replaces a running child with one of the new config.

use std::io::Read;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::maintenance::Exit;
use super::state::{Ending, Master, Running};
use crate::acme::child::{self, Plan, Report};
use crate::acme::schedule::{self, CertRetry};
use crate::acme::store;
use crate::acme::{Challenge, Settings};
use crate::base::clock::unix_secs;

/// Past `acme.order_timeout` with no word of a job, how long the master still waits
/// before it kills the child. The child gives up an order at its deadline by itself
/// (every request to the CA ends by then) and reports at once; this covers what it
/// cannot bound itself (a name lookup that hangs) on a loaded machine.
pub(super) const LATE_GRACE: Duration = Duration::from_secs(5);

impl Master {
    /// On the tick: install what came, stop the child when the server stops, start
    /// one when something is due.
    pub(super) fn acme_tick(&mut self) {
        if self.life.ends_with_the_workers() {
            if let Some(r) = &mut self.acme.running
                && r.ending.is_none()
            {
                let _ = nix::sys::signal::kill(r.pid, Signal::SIGTERM);
                r.ending = Some(Ending::Stopping);
            }
            return;
        }
        if let Some(r) = &mut self.acme.running {
            let limit = self.config.acme.as_ref().map_or(crate::acme::ORDER_TIMEOUT, |a| a.order_timeout) + LATE_GRACE;
            if r.ending.is_none() && r.since.elapsed() > limit {
                log::error!(
                    "acme: the ACME child {} reported nothing for {}s (acme.order_timeout): killed",
                    r.pid,
                    limit.as_secs()
                );
                let _ = nix::sys::signal::kill(r.pid, Signal::SIGKILL);
                r.ending = Some(Ending::Late);
            }
            return;
        }
        // Installed by a reload, which would also end a WINCH pause: while paused
        // the certificates wait on disk for the operator's next reload or resume.
        if self.acme.install && self.life.forks() && self.life.takes_orders() {
            self.acme.install = false;
            log::info!("acme: installing the new certificates (a reload)");
            self.reload();
        }
        let Some(settings) = self.config.acme.clone() else { return };
        let now = unix_secs();
        let jobs = self.acme_due(&settings, now);
        if jobs.is_empty() {
            return;
        }
        // In a fleet: only the certificates whose lock this node takes.
        let jobs = self.fleet_claim(jobs, &settings);
        if jobs.is_empty() {
            return;
        }
        let start = if self.in_fleet() {
            match self.fleet_account(&settings) {
                Some(got) => got,
                None => {
                    // Redis went down between the locks and the account: later.
                    self.fleet_child_gone();
                    return;
                }
            }
        } else {
            store::prepare(&settings.state_dir)
                .and_then(|()| store::account_key(&settings.state_dir))
                .map(|k| (k, store::account_url(&settings.state_dir, &settings.directory)))
        };
        let (account_key, account_url) = match start {
            Ok(k) => k,
            Err(e) => {
                log::error!("acme: {e}");
                for names in &jobs {
                    self.acme_failed(names, None, now);
                }
                self.fleet_child_gone();
                return;
            }
        };
        let run_as = self.config.run_as.clone();
        let plan = Plan {
            settings: &settings,
            account_url,
            jobs: jobs.clone(),
            account_key,
            challenges: challenges(&self.config.listen),
            fleet: self.in_fleet(),
            drop_privileges: &|| match &run_as {
                Some(r) => crate::worker::drop_privileges(r),
                None => Ok(()),
            },
            user: run_as.as_ref().map_or("(pika's own)", |r| r.user.as_str()),
        };
        match child::spawn(plan) {
            Ok((pid, pipe)) => {
                log::debug!("acme: child {pid} started for {} certificate(s)", jobs.len());
                self.acme.running = Some(Running {
                    pid,
                    pipe: Some(pipe.into()),
                    buf: Vec::new(),
                    waiting: jobs,
                    since: Instant::now(),
                    ending: None,
                });
            }
            Err(e) => {
                log::error!("acme: cannot fork the ACME child: {e}");
                for names in &jobs {
                    self.acme_failed(names, None, now);
                }
                self.fleet_child_gone();
            }
        }
    }

    /// The names of each ACME vhost whose certificate is due at `now` (a placeholder
    /// is due at once); each vhost's next date goes to the status page.
    fn acme_due(&self, settings: &crate::acme::Settings, now: i64) -> Vec<Vec<String>> {
        let mut jobs = Vec::new();
        for v in self.config.vhosts.iter().filter(|v| v.acme) {
            let Some(cert) = &v.tls else { continue };
            let current = (!cert.placeholder).then_some((cert.validity.not_before, cert.validity.not_after));
            let life = self.acme.life(&v.server_names);
            let due = schedule::due(current, settings.renew_before, &life);
            if let Some(first) = v.server_names.first() {
                crate::acme::status::set(first, crate::acme::status::Shown { next: due, failures: life.failures });
            }
            if now >= due {
                if cert.placeholder {
                    log::warn!(
                        "acme: {} has no certificate yet: served with a self-signed placeholder until one comes",
                        v.server_names.join(", ")
                    );
                }
                jobs.push(v.server_names.clone());
            }
        }
        jobs
    }

    /// An operator's reload (HUP): the back-off and the one-hour floor are
    /// forgotten, so what the new config makes due is asked for at once (a renewal
    /// after a fix, or a changed `renew_before`), and a running child (of the old
    /// config, perhaps stuck on a CA that stalls) is killed: once it is reaped, the
    /// next tick starts one for what is due. The reloads that install certificates
    /// keep both.
    pub(super) fn acme_forget(&mut self) {
        self.acme.lives.clear();
        if let Some(r) = &mut self.acme.running
            && r.ending.is_none()
        {
            log::info!("acme: the ACME child {} is replaced (a reload)", r.pid);
            let _ = nix::sys::signal::kill(r.pid, Signal::SIGKILL);
            r.ending = Some(Ending::Replaced);
        }
    }

    /// After each wake-up: reads what the child reported.
    pub(super) fn acme_read(&mut self) {
        let Some(r) = &mut self.acme.running else { return };
        let mut chunk = [0u8; 16 * 1024];
        while let Some(mut pipe) = r.pipe.as_ref() {
            match pipe.read(&mut chunk) {
                Ok(0) => {
                    r.pipe = None;
                    break;
                }
                Ok(n) => r.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break, // EAGAIN: nothing more now
            }
        }
        let reports = child::read_reports(&mut r.buf);
        for report in reports {
            self.acme_report(report);
        }
    }

    fn acme_report(&mut self, report: Report) {
        let Some(settings) = self.config.acme.clone() else { return };
        if self.acme.running.is_none() {
            return;
        }
        let account_url = match report {
            Report::Publish { kind, name, value } => return self.fleet_publish(kind, &name, &value),
            Report::Unpublish { kind, name } => return self.fleet_unpublish(kind, &name),
            Report::Account { ref url } => Some(url.clone()),
            _ => None,
        };
        let Some(r) = &mut self.acme.running else { return };
        let taken = take_report(&settings, &mut r.waiting, report, unix_secs());
        if matches!(taken, Taken::Stored(_) | Taken::Failed(..)) {
            r.since = Instant::now();
        }
        let now = unix_secs();
        match taken {
            Taken::Stored(names) => {
                self.fleet_stored(&settings, &names);
                self.acme.lives.insert(names, CertRetry { failures: 0, not_before_try: 0, obtained: now });
                self.acme.install = true;
            }
            Taken::Failed(names, retry_after) => {
                self.fleet_unlock(&names);
                self.acme_failed(&names, retry_after, now);
            }
            Taken::Account => {
                if let Some(url) = account_url {
                    self.fleet_account_url(&settings, &url);
                }
            }
            Taken::Refused => {}
        }
    }

    fn acme_failed(&mut self, names: &[String], retry_after: Option<i64>, now: i64) {
        let life = self.acme.lives.entry(names.to_vec()).or_default();
        life.failures += 1;
        life.not_before_try = schedule::next_try(now, life.failures, retry_after);
        log::warn!(
            "acme: {} failure(s) in a row for {}; next try at {}",
            life.failures,
            names.join(", "),
            crate::tls::check::date(life.not_before_try)
        );
    }

    /// From the reap: whether `pid` was the ACME child (then it is forgotten, and
    /// what it did not report on counts as failed).
    pub(super) fn acme_child_exited(&mut self, pid: Pid, exit: Exit) -> bool {
        if self.acme.running.as_ref().is_none_or(|r| r.pid != pid) {
            return false;
        }
        self.acme_read();
        self.fleet_child_gone();
        let Some(r) = self.acme.running.take() else { return true };
        if !matches!(exit, Exit::Code(0)) && r.ending.is_none() {
            log::error!("acme: the ACME child {pid} ended badly ({exit:?})");
        }
        if r.ending == Some(Ending::Replaced) {
            // Its jobs are asked for again at once, by the next child.
            return true;
        }
        let now = unix_secs();
        for names in r.waiting {
            if r.ending != Some(Ending::Stopping) {
                log::warn!("acme: the ACME child ended without an answer for {}", names.join(", "));
            }
            self.acme_failed(&names, None, now);
        }
        true
    }
}

/// What one report of the child came to.
#[derive(Debug, PartialEq, Eq)]
enum Taken {
    /// Not the master's to take (said in the error log; nothing written).
    Refused,
    /// An account URL, stored.
    Account,
    /// A certificate for these names (the master's own copy), stored.
    Stored(Vec<String>),
    /// No certificate for these names: tried again after the back-off.
    Failed(Vec<String>, Option<i64>),
}

/// Takes one report of the child, trusting it no further than what the master asked:
/// a certificate or a failure only for names still in `waiting` (the jobs this child
/// was sent, each reported on once), and a certificate stored in the master's own
/// `settings.state_dir` under the master's own copy of the names (the child's words
/// name nothing on disk), checked to load and cover them at `now`; an account URL
/// only if it is one.
fn take_report(settings: &Settings, waiting: &mut Vec<Vec<String>>, report: Report, now: i64) -> Taken {
    let dir = &settings.state_dir;
    let (names, outcome) = match report {
        Report::Account { url } => {
            if !crate::acme::https::valid_url(&url) || url.len() > 2048 {
                log::error!("acme: the ACME child reported an account URL that is not one: ignored");
                return Taken::Refused;
            }
            if let Err(e) = store::save_account(dir, &settings.directory, &url) {
                log::error!("acme: cannot store the account URL: {e}");
            }
            return Taken::Account;
        }
        Report::Issued { names, chain, key } => (names, Ok((chain, key))),
        Report::Failed { names, error, retry_after } => (names, Err((error, retry_after))),
        // The master takes these before (a fleet's challenges).
        Report::Publish { .. } | Report::Unpublish { .. } => return Taken::Refused,
    };
    let Some(at) = waiting.iter().position(|w| *w == names) else {
        log::error!(
            "acme: the ACME child reported on {:?}, which it was not asked for (or twice): ignored",
            names.join(", ")
        );
        return Taken::Refused;
    };
    let names = waiting.remove(at);
    match outcome {
        Ok((chain, key)) => {
            let until = store::chain_validity(&chain).map_or("?".into(), |v| crate::tls::check::date(v.not_after));
            match store::save_cert(dir, &names, &chain, &key, now) {
                Ok(()) => {
                    log::info!("acme: obtained a certificate for {} (valid until {until})", names.join(", "));
                    Taken::Stored(names)
                }
                Err(e) => {
                    log::error!("acme: cannot store the certificate for {}: {e}", names.join(", "));
                    Taken::Failed(names, None)
                }
            }
        }
        Err((error, retry_after)) => {
            log::warn!("acme: no certificate for {}: {error}", names.join(", "));
            Taken::Failed(names, retry_after)
        }
    }
}

/// The challenges this server can answer: HTTP-01 if a plain listener is there (on
/// port 80 for a public CA; a test CA validates on the port it is told), TLS-ALPN-01
/// if a TLS listener is; HTTP-01 first (it also works behind a balancer that
/// terminates TLS). Listeners behind a PROXY-protocol balancer are left out: a CA
/// does not speak that protocol.
fn challenges(listen: &[crate::config::Listen]) -> Vec<Challenge> {
    let mut out = Vec::new();
    if listen.iter().any(|l| !l.tls && !l.proxy_protocol) {
        out.push(Challenge::Http01);
    }
    if listen.iter().any(|l| l.tls && !l.proxy_protocol) {
        out.push(Challenge::TlsAlpn01);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(state_dir: &std::path::Path) -> Settings {
        Settings {
            directory: "https://ca.example/dir".into(),
            contact: Vec::new(),
            state_dir: state_dir.to_path_buf(),
            renew_before: None,
            ca_roots: None,
            eab: None,
            order_timeout: crate::acme::ORDER_TIMEOUT,
            request_timeout: crate::acme::REQUEST_TIMEOUT,
        }
    }

    /// Every file under `dir`, and every empty folder.
    fn files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).collect();
        if entries.is_empty() {
            return vec![dir.to_path_buf()];
        }
        entries.into_iter().flat_map(|p| if p.is_dir() { files(&p) } else { vec![p] }).collect()
    }

    #[test]
    fn a_forged_report_writes_nothing_anywhere() {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("a/b/acme");
        store::prepare(&state).unwrap();
        let s = settings(&state);
        let now = crate::tls::test_certs::now();
        let asked = vec!["a.example".to_string()];
        let mut waiting = vec![asked.clone()];
        // A chain and key that would load, for names the master did not ask for
        // (a path among them), and a failure for those: refused, the job kept.
        for names in [vec!["../../x".to_string()], vec!["/../../x".into()], vec!["b.example".into()]] {
            let made = crate::tls::test_certs::leaf(&[names[0].as_str()], -1, 90, None);
            let forged = Report::Issued { names: names.clone(), chain: made.pems.concat(), key: made.key_pem };
            assert_eq!(take_report(&s, &mut waiting, forged, now), Taken::Refused, "{names:?}");
            let failed = Report::Failed { names, error: "x".into(), retry_after: None };
            assert_eq!(take_report(&s, &mut waiting, failed, now), Taken::Refused);
        }
        let bad_url = Report::Account { url: "/../../x".into() };
        assert_eq!(take_report(&s, &mut waiting, bad_url, now), Taken::Refused);
        assert_eq!(files(tmp.path()), std::slice::from_ref(&state), "nothing written anywhere");
        assert_eq!(waiting, std::slice::from_ref(&asked));
        // What was asked: stored under the master's names, once.
        let made = crate::tls::test_certs::leaf(&["a.example"], -1, 90, None);
        let good = Report::Issued { names: asked.clone(), chain: made.pems.concat(), key: made.key_pem };
        assert_eq!(take_report(&s, &mut waiting, good.clone(), now), Taken::Stored(asked.clone()));
        assert_eq!(take_report(&s, &mut waiting, good, now), Taken::Refused, "reported twice");
        let mut written = files(tmp.path());
        written.sort();
        assert_eq!(written, [state.join("a.example.crt"), state.join("a.example.key")]);
    }
}
