//! This node's copy, on its own disk, of what the fleet shares and a node needs to
//! serve with Redis down: `cluster.cache_dir`, root's and 0700, each file 0600,
//! written to a temporary name and renamed so a reader never sees half of one.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

/// Checks the folder, if it exists: a directory of the master's user that no one
/// else may enter.
pub fn check_folder(dir: &Path) -> Result<(), String> {
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("cluster cache_dir {}: {e}", dir.display())),
    };
    if !meta.is_dir() {
        return Err(format!("cluster cache_dir {} is not a directory", dir.display()));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(format!(
            "cluster cache_dir {} belongs to uid {}, not to uid {me} (the master's)",
            dir.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "cluster cache_dir {} has mode {:o}: it holds secrets, make it 0700",
            dir.display(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Creates the folder (0700) if it is missing, then checks it.
pub fn prepare(dir: &Path) -> Result<(), String> {
    if !dir.exists() {
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::DirBuilder::new().mode(0o700).create(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    check_folder(dir)
}

/// Writes `bytes` to `dir/name`, 0600, by a temporary file and a rename.
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), String> {
    prepare(dir)?;
    let tmp = dir.join(format!(".{name}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    f.write_all(bytes).and_then(|()| f.sync_all()).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, dir.join(name)).map_err(|e| format!("{}: {e}", dir.join(name).display()))
}

/// What `dir/name` holds, if it is there.
pub fn read(dir: &Path, name: &str) -> Option<Vec<u8>> {
    std::fs::read(dir.join(name)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_cache_is_private() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/cluster");
        write(&dir, "tickets", b"x").unwrap();
        assert_eq!(read(&dir, "tickets").unwrap(), b"x");
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        assert_eq!(std::fs::metadata(dir.join("tickets")).unwrap().mode() & 0o777, 0o600);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(check_folder(&dir).unwrap_err().contains("make it 0700"));
    }
}
