//! Milliseconds on the monotonic clock, the same in every process of the machine.
//!
//! The coarse clock (a few milliseconds' resolution) is read from memory without the
//! cycle counter: a worker stamps its scoreboard slot and its held connections several
//! times per request, and the master compares those stamps with its own.

/// Monotonic milliseconds (`CLOCK_MONOTONIC_COARSE`).
pub fn now_ms() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC_COARSE)
        .map(|t| t.tv_sec() as u64 * 1000 + t.tv_nsec() as u64 / 1_000_000)
        .unwrap_or(0)
}
