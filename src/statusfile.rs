//! The status file: what the master says of itself, rewritten every tick beside the
//! pid file (`logs/pika.pid` → `logs/pika.status`), for `pika -k status` to print
//! and `pika -k reload` to watch (the generation moves, its workers turn ready).
//!
//! One `key: value` line a fact, as [`crate::status::Snapshot::summary`] writes them.
//! The master writes it whole and renames it into place, so a reader never sees half
//! of one; the master's side ([`write()`], [`remove`]), `ctl`'s and the tests' ([`read`],
//! [`field`]) all go through here.

use std::path::{Path, PathBuf};

/// The status file that goes with `pid_file`.
pub fn path(pid_file: &Path) -> PathBuf {
    pid_file.with_extension("status")
}

/// Replaces the status file with `text`: written beside it, then renamed over it.
pub fn write(pid_file: &Path, text: &str) -> std::io::Result<()> {
    let path = path(pid_file);
    let tmp = path.with_extension("status.tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, &path)
}

/// The status file's text, if there is one.
pub fn read(pid_file: &Path) -> Option<String> {
    std::fs::read_to_string(path(pid_file)).ok()
}

/// Removes the status file (the master stops).
pub fn remove(pid_file: &Path) {
    let _ = std::fs::remove_file(path(pid_file));
}

/// A `key: number` field of a status file's text.
pub fn field(status: &str, key: &str) -> Option<u64> {
    status.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix(": ")?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_whole_beside_the_pid_file_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pika.pid");
        assert_eq!(read(&pid_file), None);
        write(&pid_file, "pid: 12\ngeneration: 3\nstates: ready 2\n").unwrap();
        assert_eq!(path(&pid_file), dir.path().join("pika.status"));
        let text = read(&pid_file).unwrap();
        assert_eq!((field(&text, "generation"), field(&text, "pid")), (Some(3), Some(12)));
        assert_eq!(field(&text, "states"), None, "not a number");
        assert_eq!(field(&text, "gen"), None, "a whole key");
        assert!(!dir.path().join("pika.status.tmp").exists());
        remove(&pid_file);
        assert_eq!(read(&pid_file), None);
    }
}
