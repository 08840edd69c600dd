//! What the master tells others about itself, all from here: the launching command
//! (the ready pipe, [`super::ready`]), systemd ([`crate::master::notify`]: `READY=1`,
//! `RELOADING=1`, `STOPPING=1`, `STATUS=`, `MAINPID=`), and the status file beside
//! the pid file ([`crate::master::statusfile`], for `pika -k status` and `-k reload`).
//!
//! A superseded master (an upgrade's new master serves) says nothing more to
//! systemd: the new master is the service.

use std::sync::atomic::Ordering::Relaxed;

use super::ready::Ready;
use super::state::{Awaited, Master};
use crate::master::notify;
use crate::scoreboard::State;
use crate::status::Snapshot;

impl Master {
    /// Ready when every first-generation worker has left `Starting` (or none was
    /// asked for); failed if one could not start.
    pub(super) fn report_ready(&mut self, ready: &mut Ready) {
        if self.life.failed() {
            ready.fail("a worker could not start (see the error log)");
            if self.report.awaited == Awaited::Start {
                self.report.awaited = Awaited::Nothing;
            }
        } else if self.children.values().all(|c| self.scoreboard.slots[c.slot].state() != State::Starting) {
            self.write_status_file();
            ready.ok();
            if self.report.awaited == Awaited::Start {
                self.report.awaited = Awaited::Nothing;
                notify::send(&format!("READY=1\nSTATUS={}", self.status_line()));
            }
        }
    }

    /// The tick's report: the status file, and `STATUS=` when the counts changed.
    pub(super) fn report_tick(&mut self) {
        self.write_status_file();
        if self.life.superseded() {
            return;
        }
        let line = self.status_line();
        if line != self.report.status {
            notify::send(&format!("STATUS={line}"));
            self.report.status = line;
        }
    }

    /// `READY=1` after `RELOADING=1`, once a worker of the new generation serves.
    pub(super) fn confirm_reload(&mut self) {
        if self.report.awaited != Awaited::Reload {
            return;
        }
        let serving = self.children.values().any(|c| {
            c.generation == self.generation
                && !matches!(self.scoreboard.slots[c.slot].state(), State::Starting | State::Dead)
        });
        if serving || self.config.workers.start == 0 {
            self.report.awaited = Awaited::Nothing;
            notify::send(&format!("READY=1\nSTATUS={}", self.status_line()));
        }
    }

    pub(super) fn report_stopping(&self) {
        if !self.life.superseded() {
            notify::send("STOPPING=1");
        }
    }

    pub(super) fn report_reload_begins(&self) {
        notify::send(&format!("RELOADING=1\nMONOTONIC_USEC={}", notify::monotonic_usec()));
    }

    pub(super) fn report_reload_failed(&self, why: &str) {
        log::error!("reload failed, still serving the previous configuration: {why}");
        notify::send(&format!("READY=1\nSTATUS=reload failed, serving the previous configuration: {why}"));
        self.scoreboard.header.pool.reloads_failed.fetch_add(1, Relaxed);
    }

    /// The new generation is forked: `READY=1` follows once it serves (the start's
    /// own, if that is still awaited, says it too).
    pub(super) fn report_reloaded(&mut self) {
        self.scoreboard.header.pool.reloads.fetch_add(1, Relaxed);
        log::info!("reloaded {}: generation {}", self.config.file.display(), self.generation);
        if self.report.awaited == Awaited::Nothing {
            self.report.awaited = Awaited::Reload;
        }
    }

    pub(super) fn report_upgraded(&self, new_master: nix::unistd::Pid) {
        log::info!(
            "upgrade: the new master (pid {new_master}) serves; retiring {} workers, then pika (pid {}) exits",
            self.children.len(),
            std::process::id()
        );
        notify::send(&format!("MAINPID={new_master}\nSTATUS=upgraded: the new master is pid {new_master}"));
    }

    pub(super) fn report_upgrade_failed(&self, why: &str) {
        self.write_status_file();
        log::error!("upgrade failed: {why}; pika (pid {}) goes on serving", std::process::id());
        notify::send(&format!("STATUS=upgrade failed: {why}"));
    }

    /// The scoreboard's counts in a line, for systemd's STATUS=.
    fn status_line(&self) -> String {
        let snap = Snapshot::take(&self.scoreboard, std::process::id() as i32);
        format!(
            "{} workers ({} idle), {} connections held, {} requests, generation {}",
            snap.busy() + snap.idle(),
            snap.idle(),
            snap.conns_total(),
            snap.total_requests,
            self.generation
        )
    }

    /// Rewrites the status file `pika -k status` and `-k reload` read.
    pub(super) fn write_status_file(&self) {
        let mut text = Snapshot::take(&self.scoreboard, std::process::id() as i32).summary();
        text.push_str(&format!("upgrades_failed: {}\n", self.upgrade.failed));
        let _ = crate::master::statusfile::write(&self.upgrade.pid_path, &text);
    }
}
