//! Files the config read and the master watches: one that changes is a reason to
//! read the config again (the htpasswd files of Basic auth, `crate::rules`).

/// What tells that a file changed: its inode, size, and modification and change
/// times (a file replaced by `htpasswd`, which writes a new one and renames it,
/// has a new inode; one edited in place, new times).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    /// The file's stamp now; None if it cannot be looked at (gone, a folder on the
    /// way not searchable).
    pub fn of(path: &std::path::Path) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }
}

/// The master's watch on the htpasswd files of its config: it reads them with the
/// config (as root), and looks at them again at most once per `every`
/// (`http.file_check_interval`); one that changed is a reason to read the config
/// again. Each change is reported once: a file that is gone is not tried again
/// until it changes again.
#[derive(Debug, Clone, Default)]
pub struct Watch {
    files: Vec<(std::path::PathBuf, Option<Stamp>)>,
    every: std::time::Duration,
    next: Option<std::time::Instant>,
}

impl Watch {
    /// `files`: each with the stamp it had when it was read.
    pub fn new(files: Vec<(std::path::PathBuf, Option<Stamp>)>, every: std::time::Duration) -> Watch {
        Watch { files, every, next: None }
    }

    /// A file that changed since it was read or last reported, if it is time to
    /// look.
    pub fn changed(&mut self, now: std::time::Instant) -> Option<std::path::PathBuf> {
        if self.files.is_empty() || self.next.is_some_and(|n| now < n) {
            return None;
        }
        self.next = Some(now + self.every);
        for (path, seen) in &mut self.files {
            let stamp = Stamp::of(path);
            if stamp != *seen {
                *seen = stamp;
                return Some(path.clone());
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watch_reports_each_change_once_and_no_more_often_than_asked() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("htpasswd");
        std::fs::write(&p, "a:x\n").unwrap();
        let every = std::time::Duration::from_secs(5);
        let mut w = Watch::new(vec![(p.clone(), Stamp::of(&p))], every);
        let t0 = std::time::Instant::now();
        assert_eq!(w.changed(t0), None, "unchanged");
        std::fs::write(dir.path().join("new"), "a:y, longer\n").unwrap();
        std::fs::rename(dir.path().join("new"), &p).unwrap();
        assert_eq!(w.changed(t0 + std::time::Duration::from_secs(1)), None, "not yet time to look");
        assert_eq!(w.changed(t0 + every), Some(p.clone()), "replaced");
        assert_eq!(w.changed(t0 + every * 2), None, "said once");
        std::fs::remove_file(&p).unwrap();
        assert_eq!(w.changed(t0 + every * 3), Some(p.clone()), "gone");
        assert_eq!(w.changed(t0 + every * 4), None, "gone is said once");
        assert_eq!(Watch::default().changed(t0), None);
    }
}
