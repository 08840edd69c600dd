//! The files the master writes as root (logs, the pid file), opened so that no one
//! else can make it write, truncate or hand over a file of their choosing.
//!
//! The danger is a link planted where the master is about to open, create or `chown`
//! a file: in a log folder the workers' user may write (Debian's nginx,
//! CVE-2016-1247), a symbolic link named `error.log` pointing at `/etc/shadow` gives
//! that user the file at the next rotation. So, when the master runs as root:
//! - a folder that users other than root may write is refused, with a message that
//!   says why and how to fix it ([`check_folder`], also run by `pika -t`);
//! - the last component is never followed (`O_NOFOLLOW`), new files are created with
//!   `O_EXCL` (`0640`: logs hold addresses and query strings);
//! - a file is handed to the workers' user only if it is a regular file with one link
//!   that was just opened ([`hand_over`]), and an existing file keeps its group (the
//!   one logrotate's `create` gave it);
//! - `/dev/stdout`, `/dev/stderr` and the `/dev/fd/N` names (containers log there) are
//!   followed as the standard links they are and never handed over, and a pipe or a
//!   FIFO is written as it is.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

use nix::unistd::{Gid, Uid};

/// The mode of a log file pika creates: the workers' user writes it, its group reads.
pub const LOG_MODE: u32 = 0o640;

/// Names that are links by design and always name one of this process's descriptors.
fn is_standard_stream(path: &Path) -> bool {
    path == Path::new("/dev/stdout")
        || path == Path::new("/dev/stderr")
        || path.starts_with("/dev/fd/")
        || path.starts_with("/proc/self/fd/")
}

/// Why a folder is not safe for files root writes, if it is not: another user owns
/// it, or a group other than root's or everyone may write it.
pub fn unsafe_folder(owner: u32, group: u32, mode: u32) -> Option<&'static str> {
    if owner != 0 {
        Some("it belongs to a user other than root")
    } else if mode & 0o002 != 0 {
        Some("everyone may write it")
    } else if mode & 0o020 != 0 && group != 0 {
        Some("a group other than root's may write it")
    } else {
        None
    }
}

/// When this process is root: refuses `file` if the folder it lies in (or, while
/// that does not exist yet, the nearest folder above that does) may be written by
/// users other than root. Links in the folder's own path are followed: they are
/// the operator's.
pub fn check_folder(file: &Path) -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() || is_standard_stream(file) {
        return Ok(());
    }
    let mut dir = file.parent();
    while let Some(d) = dir {
        match std::fs::metadata(d) {
            Ok(meta) => {
                return match unsafe_folder(meta.uid(), meta.gid(), meta.mode()) {
                    None => Ok(()),
                    Some(why) => Err(format!(
                        "{}: refused, because users other than root may write the folder {} ({why}; owner uid {}, group gid {}, mode {:04o}): \
                         a link planted there would make pika, as root, write or give away a file of their choosing. \
                         Make the folder root's and writable by root only (chown root:root, chmod 755) or put the file elsewhere",
                        file.display(),
                        d.display(),
                        meta.uid(),
                        meta.gid(),
                        meta.mode() & 0o7777
                    )),
                };
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => dir = d.parent(),
            Err(e) => return Err(format!("{}: cannot look at the folder {}: {e}", file.display(), d.display())),
        }
    }
    Ok(())
}

/// An opened file for appending, and whether this call created it.
pub struct Opened {
    pub file: File,
    pub created: bool,
}

/// Opens `path` for appending, creating it (and its folder) if needed, without
/// following a link at its last component; refused in an unsafe folder (see
/// [`check_folder`]) or if it is a regular file with more than one link. A standard
/// stream name is opened as it is.
pub fn open_append(path: &Path) -> io::Result<Opened> {
    if is_standard_stream(path) {
        let file = OpenOptions::new().append(true).open(path)?;
        return Ok(Opened { file, created: false });
    }
    check_folder(path).map_err(io::Error::other)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let new = OpenOptions::new().append(true).create_new(true).mode(LOG_MODE).custom_flags(libc::O_NOFOLLOW).open(path);
    let (file, created) = match new {
        Ok(f) => (f, true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => (
            OpenOptions::new().append(true).custom_flags(libc::O_NOFOLLOW).open(path).map_err(|e| no_link(path, e))?,
            false,
        ),
        Err(e) => return Err(e),
    };
    // A FIFO is written as it is; a regular file only if it has no other name.
    if file.metadata()?.is_file() {
        single_regular(path, &file)?;
    }
    Ok(Opened { file, created })
}

/// Opens `path` to read and write (the pid file), creating it if needed, not
/// following a link; refused in an unsafe folder, or if it is not a regular file
/// with one link (the caller truncates it).
pub fn open_rewrite(path: &Path, mode: u32) -> io::Result<File> {
    check_folder(path).map_err(io::Error::other)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| no_link(path, e))?;
    single_regular(path, &file)?;
    Ok(file)
}

/// `ELOOP` from `O_NOFOLLOW` means the name is a symbolic link: say so.
fn no_link(path: &Path, e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        io::Error::other(format!(
            "{} is a symbolic link: pika does not follow links to files it writes as root",
            path.display()
        ))
    } else {
        e
    }
}

/// Refuses anything but a regular file with exactly one link.
fn single_regular(path: &Path, file: &File) -> io::Result<()> {
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other(format!("{} is not a regular file", path.display())));
    }
    if meta.nlink() != 1 {
        return Err(io::Error::other(format!(
            "{} has {} hard links: pika does not write as root to a file that is also elsewhere",
            path.display(),
            meta.nlink()
        )));
    }
    Ok(())
}

/// Gives a log file just opened by [`open_append`] to the workers' user, so they can
/// reopen it after a rotation: a new file entirely, an existing one keeping its
/// group. A standard stream, a pipe or a device is left alone; a regular file with
/// more than one link is refused.
pub fn hand_over(path: &Path, opened: &Opened, (uid, gid): (Uid, Gid)) -> io::Result<()> {
    let meta = opened.file.metadata()?;
    if is_standard_stream(path) || !meta.is_file() {
        return Ok(());
    }
    single_regular(path, &opened.file)?;
    let group = opened.created.then_some(gid);
    nix::unistd::fchown(&opened.file, Some(uid), group)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_folder_is_safe_when_only_root_may_write_it() {
        assert_eq!(unsafe_folder(0, 0, 0o40755), None);
        assert_eq!(unsafe_folder(0, 4, 0o40750), None, "root:adm 0750, as Debian's /var/log/pika");
        assert_eq!(unsafe_folder(0, 0, 0o40775), None, "group root may write");
        assert!(unsafe_folder(33, 33, 0o40755).is_some(), "www-data's own folder");
        assert!(unsafe_folder(0, 33, 0o40775).is_some(), "group www-data may write");
        assert!(unsafe_folder(0, 0, 0o41777).is_some(), "/tmp");
    }

    #[test]
    fn links_are_not_followed_and_hard_links_not_written() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let log = dir.path().join("logs/a.log");
        let made = open_append(&log).unwrap();
        assert!(made.created);
        assert_eq!(std::fs::metadata(&log).unwrap().permissions().mode() & 0o777, LOG_MODE);
        assert!(!open_append(&log).unwrap().created);

        let link = dir.path().join("logs/link.log");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = open_append(&link).err().expect("a link is refused");
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        assert!(open_rewrite(&link, 0o644).is_err());

        let hard = dir.path().join("logs/hard.log");
        std::fs::hard_link(&victim, &hard).unwrap();
        let e = open_append(&hard).err().expect("a hard link is refused");
        assert!(e.to_string().contains("2 hard links"), "{e}");
        assert!(open_rewrite(&hard, 0o644).is_err(), "the pid file is never a hard link");
        assert_eq!(std::fs::metadata(&victim).unwrap().uid(), 0, "not handed over");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    }

    #[test]
    fn an_existing_file_keeps_its_group_a_new_one_gets_the_workers() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("old.log");
        std::fs::write(&old, "").unwrap();
        nix::unistd::chown(&old, None, Some(Gid::from_raw(4))).unwrap();
        let workers = (Uid::from_raw(65534), Gid::from_raw(65534));
        hand_over(&old, &open_append(&old).unwrap(), workers).unwrap();
        let meta = std::fs::metadata(&old).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (65534, 4));
        let new = dir.path().join("new.log");
        hand_over(&new, &open_append(&new).unwrap(), workers).unwrap();
        let meta = std::fs::metadata(&new).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (65534, 65534));
    }

    #[test]
    fn an_unsafe_folder_is_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let e = check_folder(&open.join("sub/access.log")).unwrap_err();
        assert!(e.contains("everyone may write it") && e.contains("chmod 755"), "{e}");
        assert!(open_append(&open.join("a.log")).is_err());
        assert!(check_folder(Path::new("/dev/stdout")).is_ok());
        assert!(check_folder(&dir.path().join("fine/a.log")).is_ok());
    }
}
