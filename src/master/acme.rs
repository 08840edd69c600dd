//! The master's side of ACME ([`crate::acme`]): on the tick, fork the ACME child when
//! a certificate is due; read its reports; store what it got in the state folder as
//! root; install new certificates by a reload once the child is done.

use std::collections::HashMap;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd};

use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::maintenance::Exit;
use super::{Master, unix_now};
use crate::acme::Challenge;
use crate::acme::child::{self, Plan, Report};
use crate::acme::schedule::{self, Life};
use crate::acme::store;

/// The ACME side of the master's state.
#[derive(Default)]
pub(super) struct Acme {
    running: Option<Running>,
    /// Per certificate (its names): failures, back-off, when obtained.
    lives: HashMap<Vec<String>, Life>,
    /// New certificates are stored: reload once the child is done.
    install: bool,
}

struct Running {
    pid: Pid,
    /// `None` once it read end of file.
    pipe: Option<std::fs::File>,
    buf: Vec<u8>,
    /// The certificates it was sent for, and not yet reported on.
    waiting: Vec<Vec<String>>,
    told_to_stop: bool,
}

impl Acme {
    /// The pipe the master polls while the child runs.
    pub(super) fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.running.as_ref()?.pipe.as_ref().map(|p| p.as_fd())
    }

    /// When each certificate is next tried and how many tries failed in a row.
    pub(super) fn life(&self, names: &[String]) -> Life {
        self.lives.get(names).copied().unwrap_or_default()
    }
}

impl Master {
    /// On the tick: install what came, stop the child when the server stops, start
    /// one when something is due.
    pub(super) fn acme_tick(&mut self) {
        if self.life.ends_with_the_workers() {
            if let Some(r) = &mut self.acme.running
                && !r.told_to_stop
            {
                let _ = nix::sys::signal::kill(r.pid, Signal::SIGTERM);
                r.told_to_stop = true;
            }
            return;
        }
        if self.acme.running.is_some() {
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
        let now = unix_now();
        let jobs = self.acme_due(&settings, now);
        if jobs.is_empty() {
            return;
        }
        let start = store::prepare(&settings.state_dir).and_then(|()| store::account_key(&settings.state_dir));
        let account_key = match start {
            Ok(k) => k,
            Err(e) => {
                log::error!("acme: {e}");
                for names in &jobs {
                    self.acme_failed(names, None, now);
                }
                return;
            }
        };
        let run_as = self.config.run_as.clone();
        let plan = Plan {
            settings: &settings,
            account_url: store::account_url(&settings.state_dir, &settings.directory),
            jobs: jobs.clone(),
            account_key,
            challenges: challenges(&self.config.listen),
            drop_privileges: &|| match &run_as {
                Some(r) => crate::worker::drop_privileges(r),
                None => Ok(()),
            },
            user: run_as.as_ref().map_or("(pika's own)", |r| r.user.as_str()),
        };
        match child::spawn(plan) {
            Ok((pid, pipe)) => {
                log::debug!("acme: child {pid} started for {} certificate(s)", jobs.len());
                self.acme.running =
                    Some(Running { pid, pipe: Some(pipe.into()), buf: Vec::new(), waiting: jobs, told_to_stop: false });
            }
            Err(e) => {
                log::error!("acme: cannot fork the ACME child: {e}");
                for names in &jobs {
                    self.acme_failed(names, None, now);
                }
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
    /// after a fix, or a changed `renew_before`). The reloads that install
    /// certificates keep them.
    pub(super) fn acme_forget(&mut self) {
        self.acme.lives.clear();
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
        let dir = &settings.state_dir;
        let now = unix_now();
        if let Some(r) = &mut self.acme.running {
            let names = match &report {
                Report::Issued { names, .. } | Report::Failed { names, .. } => Some(names),
                Report::Account { .. } => None,
            };
            r.waiting.retain(|w| Some(w) != names);
        }
        match report {
            Report::Account { url } => {
                if let Err(e) = store::save_account(dir, &settings.directory, &url) {
                    log::error!("acme: cannot store the account URL: {e}");
                }
            }
            Report::Issued { names, chain, key } => {
                let first = names.first().map_or("", String::as_str);
                let until = store::chain_validity(&chain).map_or("?".into(), |v| crate::tls::check::date(v.not_after));
                match store::save_cert(dir, first, &chain, &key) {
                    Ok(()) => {
                        log::info!("acme: obtained a certificate for {} (valid until {until})", names.join(", "));
                        self.acme.lives.insert(names, Life { failures: 0, not_before_try: 0, obtained: now });
                        self.acme.install = true;
                    }
                    Err(e) => {
                        log::error!("acme: cannot store the certificate for {}: {e}", names.join(", "));
                        self.acme_failed(&names, None, now);
                    }
                }
            }
            Report::Failed { names, error, retry_after } => {
                log::warn!("acme: no certificate for {}: {error}", names.join(", "));
                self.acme_failed(&names, retry_after, now);
            }
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
        let Some(r) = self.acme.running.take() else { return true };
        if !matches!(exit, Exit::Code(0)) && !r.told_to_stop {
            log::error!("acme: the ACME child {pid} ended badly ({exit:?})");
        }
        let now = unix_now();
        for names in r.waiting {
            if !r.told_to_stop {
                log::warn!("acme: the ACME child ended without an answer for {}", names.join(", "));
            }
            self.acme_failed(&names, None, now);
        }
        true
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
