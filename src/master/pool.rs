//! The pool as the master keeps it: count the idle workers, ask
//! [`maintenance`](super::maintenance) what to do, fork into free slots, and tell
//! the workers when idle ones are scarce.

use std::sync::atomic::Ordering::Relaxed;

use super::Master;
use super::maintenance::{self, Counts, Decision};

impl Master {
    /// Counts the pool for a look; workers may ring the doorbell again from here on.
    pub(super) fn counts(&self) -> Counts {
        self.doorbell.rearm(self.scoreboard.header);
        Counts {
            idle: self
                .children
                .values()
                .filter(|c| c.generation == self.generation && self.scoreboard.slots[c.slot].is_spare())
                .count() as u32,
            used_slots: self.children.len() as u32,
            queued: self.listeners.queued(),
        }
    }

    /// Between ticks, while short of idle workers: fork for the connections waiting.
    pub(super) fn quick_look(&mut self) {
        self.short = false;
        if self.winding_down() || self.workers_paused {
            return;
        }
        let counts = self.counts();
        self.short = maintenance::short(counts, self.band);
        if let Decision::Spawn(n) = maintenance::quick(counts, self.band) {
            log::debug!(
                "maintenance: spawning {n} workers now ({} idle, {} total, {} connections waiting)",
                counts.idle,
                counts.used_slots,
                counts.queued
            );
            self.startup_children(n);
        }
    }

    pub(super) fn perform_idle_server_maintenance(&mut self) {
        let counts = self.counts();
        self.short = maintenance::short(counts, self.band);
        let before = self.spawn_rate;
        match maintenance::decide(counts, self.band, &mut self.spawn_rate) {
            Decision::Nothing => {}
            Decision::Spawn(n) => {
                log::debug!(
                    "maintenance: spawning {n} workers ({} idle, {} total, {} connections waiting)",
                    counts.idle,
                    counts.used_slots,
                    counts.queued
                );
                if before >= 8 {
                    log::info!(
                        "server seems busy (you may need to increase workers.start or min_spare/max_spare): spawning {n} workers, there are {} idle and {} total",
                        counts.idle,
                        counts.used_slots
                    );
                }
                self.startup_children(n);
            }
            Decision::RetireOne => {
                log::debug!("maintenance: retiring one idle worker ({} idle)", counts.idle);
                self.retire_one();
            }
            Decision::Full => {
                if !self.full_reported {
                    log::error!("server reached workers.max ({}); consider raising it", self.band.max);
                    self.full_reported = true;
                }
            }
        }
    }

    /// Forks up to `n` workers into free slots, lowest first.
    pub(super) fn startup_children(&mut self, n: u32) {
        for _ in 0..n {
            let Some(slot) = self.free_slot() else { break };
            if let Err(e) = self.make_child(slot) {
                log::error!("fork failed: {e}");
                self.spawn_rate = 1;
                break;
            }
        }
    }

    pub(super) fn free_slot(&self) -> Option<usize> {
        let limit = (self.band.max as usize).min(self.scoreboard.slots.len());
        let mut used = vec![false; limit];
        for c in self.children.values() {
            if c.slot < limit {
                used[c.slot] = true;
            }
        }
        used.iter().position(|u| !u)
    }

    pub(super) fn adjust_band(&mut self, delta: i32) {
        let min = (self.band.min_spare as i32 + delta).max(0) as u32;
        let max = (self.band.max_spare as i32 + delta).max(min as i32 + 1) as u32;
        self.band.min_spare = min;
        self.band.max_spare = max;
        self.scoreboard.header.min_spare.store(min, Relaxed);
        self.scoreboard.header.max_spare.store(max, Relaxed);
        log::info!("spare workers: min_spare {min}, max_spare {max}");
    }
}
