//! This node's copy, on its own disk, of what the fleet shares and a node needs to
//! serve with Redis down: `cluster.cache_dir`, root's and 0700, each file 0600,
//! written to a temporary name and renamed so a reader never sees half of one.

use std::path::Path;

use crate::base::safe_files;

/// What the cache folder is called in errors, and what it holds.
const FOLDER: (&str, &str) = ("cluster cache_dir", "secrets");

/// Checks the folder, if it exists: a directory of the master's user that no one
/// else may enter.
pub fn check_folder(dir: &Path) -> Result<(), String> {
    safe_files::check_private_folder(dir, FOLDER.0, FOLDER.1)
}

/// Creates the folder (0700) if it is missing, then checks it.
pub fn prepare(dir: &Path) -> Result<(), String> {
    safe_files::make_private_folder(dir, FOLDER.0, FOLDER.1)
}

/// Writes `bytes` to `dir/name`, 0600, by a temporary file and a rename.
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), String> {
    prepare(dir)?;
    safe_files::write_private(dir, name, bytes)
}

/// What `dir/name` holds, if it is there.
pub fn read(dir: &Path, name: &str) -> Option<Vec<u8>> {
    std::fs::read(dir.join(name)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

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
