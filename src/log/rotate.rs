//! Built-in log rotation, done by the master (DESIGN §4): rename the file (never copy
//! and truncate), create the new one for the workers, then bump the log epoch so each
//! worker reopens by path before its next write. A line written in between lands in
//! the renamed file: nothing is lost, nothing doubled.
//!
//! By time (`hourly`, `daily`, or a duration; periods aligned to the clock, as
//! Apache's rotatelogs does), by size, or both; old files numbered (`access.log.1` …)
//! or named from a time pattern (`access.log.%Y%m%d`); `keep` old files; optionally
//! compressed by a `gzip` child of the master, away from the request path.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How a log is rotated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotate {
    pub interval: Option<Interval>,
    pub size: Option<u64>,
    pub keep: u32,
    pub naming: Naming,
    /// Align periods and name files in local time (else UTC).
    pub local_time: bool,
    pub compress: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interval {
    Hourly,
    Daily,
    Every(Duration),
}

impl Interval {
    pub fn parse(s: &str) -> Option<Interval> {
        match s {
            "hourly" => Some(Interval::Hourly),
            "daily" => Some(Interval::Daily),
            other => crate::config::units::parse_duration(other).filter(|d| d.as_secs() >= 1).map(Interval::Every),
        }
    }

    fn seconds(self) -> i64 {
        match self {
            Interval::Hourly => 3600,
            Interval::Daily => 86_400,
            Interval::Every(d) => d.as_secs() as i64,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Naming {
    /// `access.log.1` is the newest old file.
    Numbered,
    /// A strftime pattern appended to the file name, from the period's start.
    Pattern(String),
}

/// The start of the period holding `now` (unix seconds), periods aligned to
/// multiples of the interval in the given UTC offset.
pub fn period_start(now: i64, interval: Interval, offset: i64) -> i64 {
    let len = interval.seconds().max(1);
    (now + offset).div_euclid(len) * len - offset
}

/// When the period holding `now` ends.
pub fn next_boundary(now: i64, interval: Interval, offset: i64) -> i64 {
    period_start(now, interval, offset) + interval.seconds().max(1)
}

/// The UTC offset in seconds to align to.
pub fn offset_at(now: i64, local: bool) -> i64 {
    if !local {
        return 0;
    }
    let ts = jiff::Timestamp::from_second(now).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    i64::from(super::local_zone().to_offset(ts).seconds())
}

/// Renames `path` to its rotated name and removes files beyond `keep`. Returns the
/// rotated file (for compression).
pub fn rotate(path: &Path, r: &Rotate, period: i64) -> std::io::Result<PathBuf> {
    match &r.naming {
        Naming::Numbered => rotate_numbered(path, r.keep),
        Naming::Pattern(p) => {
            let ts = jiff::Timestamp::from_second(period).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
            let tz = if r.local_time { super::local_zone().clone() } else { jiff::tz::TimeZone::UTC };
            let stamp = ts.to_zoned_datetime(tz).strftime(p).to_string();
            let mut target = PathBuf::from(format!("{}.{stamp}", path.display()));
            // Two rotations in one period (by size): keep both.
            let mut n = 1;
            while target.exists() || gz(&target).exists() {
                target = PathBuf::from(format!("{}.{stamp}.{n}", path.display()));
                n += 1;
            }
            std::fs::rename(path, &target)?;
            prune_patterned(path, r.keep);
            Ok(target)
        }
    }
}

fn gz(p: &Path) -> PathBuf {
    PathBuf::from(format!("{}.gz", p.display()))
}

fn numbered(path: &Path, n: u32) -> PathBuf {
    PathBuf::from(format!("{}.{n}", path.display()))
}

fn rotate_numbered(path: &Path, keep: u32) -> std::io::Result<PathBuf> {
    let keep = keep.max(1);
    for old in [numbered(path, keep), gz(&numbered(path, keep))] {
        let _ = std::fs::remove_file(old);
    }
    for n in (1..keep).rev() {
        let (from, to) = (numbered(path, n), numbered(path, n + 1));
        if from.exists() {
            std::fs::rename(&from, &to)?;
        }
        if gz(&from).exists() {
            std::fs::rename(gz(&from), gz(&to))?;
        }
    }
    let first = numbered(path, 1);
    std::fs::rename(path, &first)?;
    Ok(first)
}

/// Removes the oldest pattern-named files beyond `keep`.
fn prune_patterned(path: &Path, keep: u32) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else { return };
    let prefix = format!("{}.", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut old: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    old.sort();
    let excess = old.len().saturating_sub(keep as usize);
    for (_, p) in old.into_iter().take(excess) {
        let _ = std::fs::remove_file(p);
    }
}

/// Compresses a rotated file with `gzip` in a child process; the master does not
/// wait for it (its reaper collects the exit).
pub fn compress(file: &Path) {
    match std::process::Command::new("gzip").arg("-f").arg("--").arg(file).spawn() {
        Ok(child) => drop(child),
        Err(e) => log::error!("cannot start gzip for {}: {e}", file.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_are_aligned() {
        // 2023-11-14 22:13:20 UTC
        let t = 1_700_000_000;
        assert_eq!(period_start(t, Interval::Hourly, 0), 1_699_999_200);
        assert_eq!(next_boundary(t, Interval::Hourly, 0), 1_700_002_800);
        assert_eq!(period_start(t, Interval::Daily, 0), 1_699_920_000);
        // Daily in UTC+2: the local day starts at 22:00 UTC.
        assert_eq!(period_start(t, Interval::Daily, 7200), 1_699_999_200);
        assert_eq!(next_boundary(t, Interval::Every(Duration::from_secs(600)), 0), 1_700_000_400);
        assert_eq!(Interval::parse("daily"), Some(Interval::Daily));
        assert_eq!(Interval::parse("15m"), Some(Interval::Every(Duration::from_secs(900))));
        assert_eq!(Interval::parse("weekly-ish"), None);
    }

    #[test]
    fn numbered_rotation_shifts_and_prunes() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("access.log");
        let r = Rotate {
            interval: None,
            size: None,
            keep: 2,
            naming: Naming::Numbered,
            local_time: false,
            compress: false,
        };
        for content in ["a", "b", "c"] {
            std::fs::write(&log, content).unwrap();
            rotate(&log, &r, 0).unwrap();
        }
        assert_eq!(std::fs::read_to_string(dir.path().join("access.log.1")).unwrap(), "c");
        assert_eq!(std::fs::read_to_string(dir.path().join("access.log.2")).unwrap(), "b");
        assert!(!dir.path().join("access.log.3").exists());
        assert!(!log.exists());
    }

    #[test]
    fn patterned_rotation_names_by_period_and_keeps_both_in_one_period() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("access.log");
        let r = Rotate {
            interval: Some(Interval::Daily),
            size: None,
            keep: 10,
            naming: Naming::Pattern("%Y%m%d".into()),
            local_time: false,
            compress: false,
        };
        std::fs::write(&log, "1").unwrap();
        assert_eq!(rotate(&log, &r, 1_700_000_000).unwrap(), dir.path().join("access.log.20231114"));
        std::fs::write(&log, "2").unwrap();
        assert_eq!(rotate(&log, &r, 1_700_000_000).unwrap(), dir.path().join("access.log.20231114.1"));
    }
}
