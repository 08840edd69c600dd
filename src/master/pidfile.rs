//! The pid file: written once the listeners are bound, locked (`flock`) for as long as
//! the master lives, removed at exit only if it still holds our pid.
//!
//! The lock, not the file's existence, says whether a server is running: a pid file
//! left by a crash, or naming a pid the system has since reused, does not stop a start.

use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

pub struct PidFile {
    path: PathBuf,
    // Held (and locked) until the process exits; never unlocked by a destructor in a
    // forked worker, since workers leave through `_exit`.
    _lock: std::mem::ManuallyDrop<Flock<File>>,
}

impl PidFile {
    /// Locks the pid file and writes our pid into it.
    pub fn acquire(path: &Path) -> Result<PidFile, String> {
        // As root: not in a folder others may write, not through a link, not a file
        // with other names (it is truncated below).
        crate::base::safe_files::check_folder(path)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        let file = crate::base::safe_files::open_rewrite(path, 0o644)
            .map_err(|e| format!("cannot open pid file {}: {e}", path.display()))?;
        let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(l) => l,
            Err((_, _)) => {
                let pid = read(path).map(|p| format!(" (pid {p})")).unwrap_or_default();
                return Err(format!("already running{pid}: {} is locked", path.display()));
            }
        };
        lock.set_len(0).map_err(|e| e.to_string())?;
        lock.rewind().map_err(|e| e.to_string())?;
        writeln!(lock, "{}", std::process::id()).map_err(|e| format!("cannot write pid file: {e}"))?;
        Ok(PidFile { path: path.to_path_buf(), _lock: std::mem::ManuallyDrop::new(lock) })
    }

    /// Removes the file if it still names this process.
    pub fn remove(&self) {
        if read(&self.path) == Some(std::process::id() as i32) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The pid in a pid file, if it holds one.
pub fn read(path: &Path) -> Option<i32> {
    let mut s = String::new();
    File::open(path).ok()?.read_to_string(&mut s).ok()?;
    s.trim().parse().ok().filter(|p| *p > 0)
}

/// The pid of the running master: the file holds a pid and someone holds its lock.
pub fn running(path: &Path) -> Option<i32> {
    let pid = read(path)?;
    let file = File::open(path).ok()?;
    match Flock::lock(file, FlockArg::LockSharedNonblock) {
        // We could lock it: nobody holds it, the file is stale.
        Ok(_) => None,
        Err(_) => Some(pid),
    }
}
