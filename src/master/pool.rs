//! The pool as the master keeps it: count the idle workers, ask
//! [`maintenance`](super::maintenance) what to do, fork into free slots, and tell
//! the workers when idle ones are scarce. Only while the master's life keeps a pool
//! ([`Life::forks`](super::life::Life::forks)): paused or stopping, it forks none.

use std::sync::atomic::Ordering::Relaxed;

use super::maintenance::{self, Band, Counts, Decision};
use super::state::{Master, Pool};

impl Master {
    /// A pool anew (start, reload): the config's band, told to the workers through
    /// the scoreboard.
    pub(super) fn new_pool(&mut self) {
        self.pool = Pool::new(Band::of(&self.config));
        self.publish_band();
    }

    fn publish_band(&self) {
        self.scoreboard.header.min_spare.store(self.pool.band.min_spare, Relaxed);
        self.scoreboard.header.max_spare.store(self.pool.band.max_spare, Relaxed);
    }

    /// A worker ran short of a resource, or a fork failed: fork slowly again.
    pub(super) fn slow_down(&mut self) {
        self.pool.spawn_rate = 1;
    }

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
            queued: if self.scoreboard.takes_connections(self.generation) { 0 } else { self.listeners.queued() },
        }
    }

    /// Between ticks, while short of idle workers: fork for the connections waiting.
    pub(super) fn quick_look(&mut self) {
        self.pool.short = false;
        if !self.life.forks() {
            return;
        }
        let counts = self.counts();
        self.pool.short = maintenance::short(counts, self.pool.band);
        if let Decision::Spawn(n) = maintenance::quick(counts, self.pool.band) {
            log::debug!(
                "maintenance: spawning {n} workers now ({} idle, {} total, {} connections waiting)",
                counts.idle,
                counts.used_slots,
                counts.queued
            );
            self.startup_children(n);
        }
    }

    /// The tick's look (Apache's name for it).
    pub(super) fn perform_idle_server_maintenance(&mut self) {
        self.pool.short = false;
        if !self.life.forks() {
            return;
        }
        let counts = self.counts();
        self.pool.short = maintenance::short(counts, self.pool.band);
        let before = self.pool.spawn_rate;
        match maintenance::decide(counts, self.pool.band, &mut self.pool.spawn_rate) {
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
                if !self.pool.full_reported {
                    log::error!("server reached workers.max ({}); consider raising it", self.pool.band.max);
                    self.pool.full_reported = true;
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
                self.slow_down();
                break;
            }
        }
    }

    pub(super) fn free_slot(&self) -> Option<usize> {
        let limit = (self.pool.band.max as usize).min(self.scoreboard.slots.len());
        let mut used = vec![false; limit];
        for c in self.children.values() {
            if c.slot < limit {
                used[c.slot] = true;
            }
        }
        used.iter().position(|u| !u)
    }

    pub(super) fn adjust_band(&mut self, delta: i32) {
        let band = &mut self.pool.band;
        let min = (band.min_spare as i32 + delta).max(0) as u32;
        let max = (band.max_spare as i32 + delta).max(min as i32 + 1) as u32;
        band.min_spare = min;
        band.max_spare = max;
        self.publish_band();
        log::info!("spare workers: min_spare {min}, max_spare {max}");
    }
}
