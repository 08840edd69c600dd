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
///
/// The master does this as root every second, so the temporary file is made anew
/// each time (`O_CREAT|O_EXCL`, after removing any left by a crash: neither step
/// follows a link), and the rename replaces whatever has the status file's name
/// without following it: nothing planted beside the pid file is ever written
/// through. (The folder itself is checked like the pid file's, `safe_files`.)
pub fn write(pid_file: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let path = path(pid_file);
    let tmp = path.with_extension("status.tmp");
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)?;
    file.write_all(text.as_bytes())?;
    drop(file);
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

    #[test]
    fn links_planted_beside_the_pid_file_are_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pika.pid");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join("pika.status.tmp")).unwrap();
        std::os::unix::fs::symlink(&victim, dir.path().join("pika.status")).unwrap();
        write(&pid_file, "pid: 1\n").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(!std::fs::symlink_metadata(path(&pid_file)).unwrap().file_type().is_symlink(), "replaced");
        assert_eq!(read(&pid_file).as_deref(), Some("pid: 1\n"));
    }
}
