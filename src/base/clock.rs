//! Milliseconds on the monotonic clock, the same in every process of the machine.
//!
//! The coarse clock (a few milliseconds' resolution) is read from memory without the
//! cycle counter: a worker stamps its scoreboard slot and its held connections several
//! times per request, and the master compares those stamps with its own.

/// Monotonic milliseconds (`CLOCK_MONOTONIC_COARSE`).
pub fn now_ms() -> u64 {
    super::sys::coarse_ms()
}

/// How far [`now_ms`] may lag the fine clock (`std::time::Instant`): the coarse
/// clock's resolution, a tick of the kernel's (10 ms at `HZ=100`, the slowest).
pub const COARSE_MS: u64 = 10;

/// The moment on this clock by which `wait` from now has surely passed on the fine
/// clock too: rounded up, and later by what the coarse clock may lag (a deadline
/// kept in coarse milliseconds for an `Instant` the code behind it checks).
pub fn ms_after(wait: std::time::Duration) -> u64 {
    let ms = u64::try_from(wait.as_micros().div_ceil(1000)).unwrap_or(u64::MAX);
    now_ms().saturating_add(ms).saturating_add(COARSE_MS)
}

/// The wall clock in Unix seconds (0 before 1970): what the master's schedules
/// (rotation, ACME, the fleet's records) count in.
pub fn unix_secs() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coarse_deadline_is_never_before_the_fine_one() {
        let wait = std::time::Duration::from_micros(1500);
        let fine = std::time::Instant::now() + wait;
        let until = ms_after(wait);
        while now_ms() < until {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert!(std::time::Instant::now() >= fine);
    }
}
