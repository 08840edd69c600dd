//! Built-in log rotation, done by the master: rename the file (never copy
//! and truncate), create the new one for the workers, then bump the log epoch so each
//! worker reopens by path before its next write. A line written in between lands in
//! the renamed file: nothing is lost, nothing doubled.
//!
//! By time (`hourly`, `daily`, or a duration; periods aligned to the clock, as
//! Apache's rotatelogs does), by size, or both; old files numbered (`access.log.1` …)
//! or named from a time pattern (`access.log.%Y%m%d`); `keep` old files; optionally
//! gzip-compressed by an unprivileged child of the master, away from the request path.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::unistd::{Gid, Uid};

use crate::base::sys::{self, Forked};

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
            other => crate::keys::units::parse_duration(other).filter(|d| d.as_secs() >= 1).map(Interval::Every),
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
    i64::from(super::files::local_zone().to_offset(ts).seconds())
}

/// Renames `path` to its rotated name and removes files beyond `keep`. Returns the
/// rotated file (for compression).
pub fn rotate(path: &Path, r: &Rotate, period: i64) -> std::io::Result<PathBuf> {
    match &r.naming {
        Naming::Numbered => rotate_numbered(path, r.keep),
        Naming::Pattern(p) => {
            let ts = jiff::Timestamp::from_second(period).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
            let tz = if r.local_time { super::files::local_zone().clone() } else { jiff::tz::TimeZone::UTC };
            let stamp = ts.to_zoned_datetime(tz).strftime(p).to_string();
            let mut target = PathBuf::from(format!("{}.{stamp}", path.display()));
            // Two rotations in one period (by size): keep both.
            let mut n = 1;
            while target.exists() || gz(&target).exists() {
                target = PathBuf::from(format!("{}.{stamp}.{n}", path.display()));
                n += 1;
            }
            std::fs::rename(path, &target)?;
            prune_patterned(path, p, r.keep);
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

/// Removes the oldest pattern-named files beyond `keep`: only this log's own old
/// files, those whose name is the log's, a dot and what `pattern` writes (then
/// perhaps a `.N` for a second rotation in one period, and `.gz`). Another log whose
/// name starts with this one's (`access.log.json` beside `access.log`) and files an
/// operator put there are neither removed nor counted.
fn prune_patterned(path: &Path, pattern: &str, keep: u32) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else { return };
    let prefix = format!("{}.", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    let mut old: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter(|e| {
            let file = e.file_name();
            let file = file.to_string_lossy();
            file.strip_prefix(&prefix).is_some_and(|suffix| is_rotated_suffix(suffix, pattern))
        })
        .filter_map(|e| {
            // Only regular files: a folder or a link of that name is not a log of ours.
            let meta = e.metadata().ok().filter(|m| m.file_type().is_file())?;
            Some((meta.modified().ok()?, e.path()))
        })
        .collect();
    old.sort();
    let excess = old.len().saturating_sub(keep as usize);
    for (_, p) in old.into_iter().take(excess) {
        let _ = std::fs::remove_file(p);
    }
}

/// Whether `suffix` (a file name after the log's name and a dot) is what a rotation
/// with `pattern` names an old file: the stamp, perhaps `.N`, perhaps `.gz`.
fn is_rotated_suffix(suffix: &str, pattern: &str) -> bool {
    let suffix = suffix.strip_suffix(".gz").unwrap_or(suffix);
    let stamp = match suffix.rsplit_once('.') {
        Some((stamp, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && parses(pattern, stamp) => stamp,
        _ => suffix,
    };
    parses(pattern, stamp)
}

fn parses(pattern: &str, stamp: &str) -> bool {
    !stamp.is_empty() && jiff::fmt::strtime::parse(pattern, stamp).is_ok()
}

/// Who compresses when the workers have no user of their own: the kernel's overflow
/// uid and gid (`nobody` and `nogroup` on Debian). The compressor needs no file.
const NOBODY: u32 = 65534;

/// Compresses a rotated file to `FILE.gz` in a child process, so the master's loop
/// never waits on it (its reaper collects the exit); `owner` is the workers' user.
///
/// Log lines are the clients' bytes, so the compressor runs without root's rights:
/// the child, still root (the log folder is root's), opens the file (`O_NOFOLLOW`)
/// and creates the `.gz` (`O_EXCL`, so nothing planted there is followed or
/// overwritten); a grandchild that has switched to `owner` (or the overflow uid)
/// compresses from one descriptor to the other, in this process with `flate2`
/// (no `gzip` found through `PATH`); the child then removes the original, or
/// the partial `.gz` if compression failed.
pub fn compress(file: &Path, owner: Option<(Uid, Gid)>) {
    let old_mask = sys::block_all_signals();
    match sys::fork() {
        Ok(Forked::Parent(_)) => sys::restore_signals(&old_mask),
        Err(e) => {
            sys::restore_signals(&old_mask);
            log::error!("cannot fork to compress {}: {e}", file.display());
        }
        Ok(Forked::Child) => {
            // The master's handlers would write into its self-pipe.
            sys::reset_signals_in_child();
            let done = compress_as(file, owner.unwrap_or((Uid::from_raw(NOBODY), Gid::from_raw(NOBODY))));
            if let Err(e) = &done {
                log::error!("cannot compress {}: {e}", file.display());
            }
            sys::exit_now(i32::from(done.is_err()))
        }
    }
}

/// In the compressing child (root): open, fork the unprivileged compressor, wait,
/// then keep exactly one of the two files.
fn compress_as(file: &Path, (uid, gid): (Uid, Gid)) -> std::io::Result<()> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let target = gz(file);
    let src = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW).open(file)?;
    let meta = src.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let dst = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(meta.mode() & 0o640)
        .open(&target)?;
    // As gzip run by root does: the compressed file keeps the original's owner.
    nix::unistd::fchown(&dst, Some(Uid::from_raw(meta.uid())), Some(Gid::from_raw(meta.gid())))?;
    let compressed = match sys::fork()? {
        Forked::Child => {
            // Of the master's descriptors the compressor keeps its two files and the
            // error log.
            use std::os::fd::AsRawFd;
            let mut keep = vec![src.as_raw_fd(), dst.as_raw_fd()];
            keep.extend(super::error::error_log_fd());
            if let Err(e) = sys::close_descriptors_except(&keep) {
                log::error!("compressing {}: {e}", file.display());
                sys::exit_now(1)
            }
            let code = match gzip_unprivileged(src, dst, uid, gid) {
                Ok(()) => 0,
                Err(e) => {
                    log::error!("compressing {}: {e}", file.display());
                    1
                }
            };
            sys::exit_now(code)
        }
        Forked::Parent(pid) => {
            drop((src, dst));
            matches!(nix::sys::wait::waitpid(pid, None), Ok(nix::sys::wait::WaitStatus::Exited(_, 0)))
        }
    };
    if compressed {
        // Unless a rotation since gave the name to another file.
        match std::fs::symlink_metadata(file) {
            Ok(now) if (now.dev(), now.ino()) == (meta.dev(), meta.ino()) => std::fs::remove_file(file),
            _ => Ok(()),
        }
    } else {
        let _ = std::fs::remove_file(&target);
        Err(std::io::Error::other("the compressor failed; the file is kept as it was"))
    }
}

/// In the grandchild: give up root for good, then compress `src` into `dst`.
fn gzip_unprivileged(mut src: std::fs::File, dst: std::fs::File, uid: Uid, gid: Gid) -> std::io::Result<()> {
    if nix::unistd::geteuid().is_root() {
        nix::unistd::setgroups(&[gid])?;
        nix::unistd::setgid(gid)?;
        nix::unistd::setuid(uid)?;
    }
    log::debug!("compressing a rotated log as uid {} gid {}", nix::unistd::getuid(), nix::unistd::getgid());
    let mut gz = flate2::write::GzEncoder::new(dst, flate2::Compression::default());
    std::io::copy(&mut src, &mut gz)?;
    gz.finish()?.sync_all()
}

/// The logs the master rotates by itself, each with when its current period ends.
#[derive(Debug, Default)]
pub struct Schedule {
    logs: Vec<Scheduled>,
}

#[derive(Debug)]
struct Scheduled {
    path: PathBuf,
    rotate: Rotate,
    /// When the current time period ends (time-based rotation).
    next_at: Option<i64>,
}

impl Schedule {
    /// The schedule for `logs` at `now` (Unix seconds), keeping the period of every
    /// log `old` already had with the same interval: a reload does not move a
    /// rotation.
    pub fn new<'a>(logs: impl Iterator<Item = (&'a Path, &'a Rotate)>, old: &Schedule, now: i64) -> Schedule {
        let logs = logs
            .map(|(path, rotate)| {
                let next_at = match old.logs.iter().find(|o| o.path == path && o.rotate.interval == rotate.interval) {
                    Some(o) => o.next_at,
                    None => rotate.interval.map(|i| next_boundary(now, i, offset_at(now, rotate.local_time))),
                };
                Scheduled { path: path.to_path_buf(), rotate: rotate.clone(), next_at }
            })
            .collect();
        Schedule { logs }
    }

    /// Rotates every log that is due at `now` (its period ended, or it reached its
    /// size): rename, create its successor for the workers (owned by `owner`),
    /// compress the old file if asked. True if any was rotated: the caller then has
    /// every process reopen its logs.
    pub fn rotate_due(&mut self, now: i64, owner: Option<(Uid, Gid)>) -> bool {
        let mut rotated = false;
        for r in &mut self.logs {
            let time_due = r.next_at.is_some_and(|t| now >= t);
            let size_due =
                r.rotate.size.is_some_and(|limit| std::fs::metadata(&r.path).is_ok_and(|m| m.len() >= limit));
            if !time_due && !size_due {
                continue;
            }
            let offset = offset_at(now, r.rotate.local_time);
            // The old file is named for the period it holds.
            let period = match (r.next_at, r.rotate.interval) {
                (Some(t), Some(i)) if time_due => period_start(t - 1, i, offset),
                (_, Some(i)) => period_start(now, i, offset),
                (_, None) => now,
            };
            match rotate(&r.path, &r.rotate, period) {
                Ok(old) => {
                    if let Err(e) = super::files::prepare_for_workers(&r.path, owner) {
                        log::error!("cannot create {} after rotation: {e}", r.path.display());
                    }
                    if r.rotate.compress {
                        compress(&old, owner);
                    }
                    rotated = true;
                }
                Err(e) => log::error!("cannot rotate {}: {e}", r.path.display()),
            }
            if let Some(i) = r.rotate.interval {
                r.next_at = Some(next_boundary(now, i, offset));
            }
        }
        rotated
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

    #[test]
    fn pruning_removes_only_this_logs_own_old_files() {
        let dir = tempfile::tempdir().unwrap();
        let (log, json) = (dir.path().join("access.log"), dir.path().join("access.log.json"));
        let r = Rotate {
            interval: Some(Interval::Daily),
            size: None,
            keep: 2,
            naming: Naming::Pattern("%Y%m%d".into()),
            local_time: false,
            compress: false,
        };
        // A second live log whose name starts with the first's, its own old file,
        // and files an operator left there.
        std::fs::write(&json, "live").unwrap();
        std::fs::write(dir.path().join("access.log.json.20231101"), "json's").unwrap();
        std::fs::write(dir.path().join("access.log.bak"), "kept").unwrap();
        std::fs::write(dir.path().join("access.log.20231101.txt"), "kept").unwrap();
        for day in 0..4 {
            std::fs::write(&log, format!("{day}")).unwrap();
            rotate(&log, &r, 1_700_000_000 + day * 86_400).unwrap();
        }
        let mut names: Vec<String> =
            std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "access.log.20231101.txt",
                "access.log.20231116",
                "access.log.20231117",
                "access.log.bak",
                "access.log.json",
                "access.log.json.20231101",
            ],
            "keep = 2 of its own; nothing else removed or counted"
        );
        assert!(is_rotated_suffix("20231114.1.gz", "%Y%m%d") && is_rotated_suffix("20231114.gz", "%Y%m%d"));
        assert!(!is_rotated_suffix("json", "%Y%m%d") && !is_rotated_suffix("json.20231114", "%Y%m%d"));
    }

    #[test]
    fn the_schedule_rotates_what_is_due_and_a_reload_keeps_its_periods() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.log"), dir.path().join("b.log"));
        let timed = Rotate {
            interval: Some(Interval::Every(Duration::from_secs(60))),
            size: None,
            keep: 5,
            naming: Naming::Numbered,
            local_time: false,
            compress: false,
        };
        let sized = Rotate { interval: None, size: Some(3), ..timed.clone() };
        let t = 1_699_999_990; // 10 s into a minute
        let mut s = Schedule::new([(a.as_path(), &timed), (b.as_path(), &sized)].into_iter(), &Schedule::default(), t);
        std::fs::write(&a, "a").unwrap();
        std::fs::write(&b, "bb").unwrap();
        assert!(!s.rotate_due(t + 5, None), "nothing due");
        std::fs::write(&b, "bbb").unwrap();
        assert!(s.rotate_due(t + 5, None), "b reached its size");
        assert!(dir.path().join("b.log.1").exists() && !dir.path().join("a.log.1").exists());
        assert_eq!(std::fs::read(&b).unwrap(), b"", "a new, empty b.log for the workers");
        // A reload 30 s later keeps a.log's period (it ends at t + 50), a new
        // interval starts a new one.
        let s2 = Schedule::new([(a.as_path(), &timed)].into_iter(), &s, t + 30);
        assert_eq!(s2.logs[0].next_at, Some(t + 50));
        let hourly = Rotate { interval: Some(Interval::Hourly), ..timed.clone() };
        let s3 = Schedule::new([(a.as_path(), &hourly)].into_iter(), &s, t + 30);
        assert_eq!(s3.logs[0].next_at, Some(1_700_002_800));
        assert!(s.rotate_due(t + 50, None), "a's minute is over");
        assert!(dir.path().join("a.log.1").exists());
    }
}
