//! The configuration read again (HUP) and the logs reopened (USR1), in the running
//! master: nothing changes until everything that can fail has succeeded.

use std::sync::atomic::Ordering::SeqCst;

use super::state::Master;
use crate::base::clock::unix_secs;
use crate::config::{self, Config};
use crate::fork::listen::Listeners;
use crate::log::access::AccessLogs;
use crate::log::rotate::Schedule;

impl Master {
    /// HUP: the new config is read and checked in full before anything changes; a
    /// broken one is logged and the old one keeps serving.
    pub(super) fn reload(&mut self) {
        if !self.life.takes_orders() {
            return;
        }
        if self.upgrade.under_way.is_some() {
            log::warn!("reload ignored: a binary upgrade is under way");
            return;
        }
        self.report_reload_begins();
        let (new, logs, listeners) = match self.prepare_reload() {
            Ok(ready) => ready,
            Err(e) => return self.report_reload_failed(&e),
        };
        if let Err(e) = crate::log::set_target(&new.error_log, new.log_level) {
            log::error!("cannot open the new error log, keeping the old one: {e}");
        }
        if new.workers.max as usize > self.scoreboard.slots.len() {
            log::warn!(
                "workers.max can only grow up to {} without a restart (the scoreboard is sized at start)",
                self.scoreboard.slots.len()
            );
        }
        let buffers = AccessLogs::buffers(&new.access_logs);
        for (i, want, got) in crate::log::held::cut(&buffers, self.held.room()) {
            let path = new.access_logs[i].path.display();
            let got =
                if got == 0 { "none: each record is written at once".to_string() } else { format!("{got} bytes") };
            log::warn!(
                "access log {path}: buffer of {want} bytes, held {got} (the memory for held records is sized at start: restart for more)"
            );
        }
        self.listeners = listeners;
        self.logs = logs;
        self.rotations = Schedule::new(new.rotated_logs(), &self.rotations, unix_secs());
        self.config = new;
        self.fleet_configure();
        prepare_log_files(&self.config);
        self.new_pool();
        self.resume();
        self.next_cert_check = 0;
        self.auth_files =
            crate::keys::watch::Watch::new(self.config.auth_files(), self.config.http.file_check_interval);
        self.new_generation();
        self.report_reloaded();
        self.say_notes();
        self.startup_children(self.config.workers.start);
        self.wake_retiring_workers();
        self.write_status_file();
    }

    /// What a reload needs that can fail: the config, its logs, its listeners. In
    /// this order, so that a failure leaves the running state as it was (`rebind`
    /// puts the old listeners back when it fails, and it comes last).
    pub(super) fn prepare_reload(&mut self) -> Result<(Config, AccessLogs, Listeners), String> {
        let new = config::load(&self.config.file).map_err(|e| e.to_string())?;
        new.make_body_dir()?;
        prepare_log_files(&new);
        let logs = AccessLogs::open(&new.access_logs).map_err(|e| e.to_string())?;
        let listeners = self.listeners.rebind(&new)?;
        Ok((new, logs, listeners))
    }

    /// USR1: reopen the logs by path (after logrotate renamed them).
    pub(super) fn reopen_logs(&mut self) {
        prepare_log_files(&self.config);
        crate::log::reopen_error_log();
        self.logs.reopen();
        self.scoreboard.header.log_epoch.fetch_add(1, SeqCst);
        log::info!("logs reopened");
    }
}

/// Creates every log file the workers write, owned by the workers' user.
pub(super) fn prepare_log_files(config: &Config) {
    let owner = config.run_as.as_ref().map(|r| (r.uid, r.gid));
    let error_log = match &config.error_log {
        config::ErrorLogTarget::File(p) => Some(p),
        _ => None,
    };
    for path in config.access_logs.iter().map(|a| &a.path).chain(error_log) {
        if let Err(e) = crate::log::prepare_for_workers(path, owner) {
            log::error!("cannot prepare log file {}: {e}", path.display());
        }
    }
}
