//! What every log shares: a log file opened for appending, a file the master
//! makes for the workers' user, and the local time zone read once.

use std::fs::File;
use std::path::Path;
use std::sync::OnceLock;

/// The time zone for log stamps, resolved once at start (before any chroot).
pub fn local_zone() -> &'static jiff::tz::TimeZone {
    static ZONE: OnceLock<jiff::tz::TimeZone> = OnceLock::new();
    ZONE.get_or_init(|| jiff::tz::TimeZone::try_system().unwrap_or(jiff::tz::TimeZone::UTC))
}

/// Makes sure a log file exists and that the workers' user owns it, so a worker that
/// dropped root can reopen it after a rotation (the master calls this before it
/// opens the logs, and before it bumps the log epoch). See [`crate::base::safe_files`]:
/// no link is followed, a hard-linked file or an unsafe folder is refused, and an
/// existing file keeps its group.
pub fn prepare_for_workers(path: &Path, owner: Option<(nix::unistd::Uid, nix::unistd::Gid)>) -> std::io::Result<()> {
    let opened = crate::base::safe_files::open_append(path)?;
    if let Some(owner) = owner {
        crate::base::safe_files::hand_over(path, &opened, owner)?;
    }
    Ok(())
}

/// Opens a log file for appending, creating it (`0640`) and its folder if needed,
/// never through a link at its name (see [`crate::base::safe_files::open_append`]).
pub fn open_append(path: &Path) -> std::io::Result<File> {
    crate::base::safe_files::open_append(path).map(|o| o.file)
}
