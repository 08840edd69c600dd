//! The files the master writes as root (logs, the pid file), opened so that no one
//! else can make it write, truncate or hand over a file of their choosing.
//!
//! The danger is a link planted where the master is about to open, create or `chown`
//! a file: in a log folder the workers' user may write (Debian's nginx,
//! CVE-2016-1247), a symbolic link named `error.log` pointing at `/etc/shadow` gives
//! that user the file at the next rotation. So, when the master runs as root:
//! - a folder that users other than root may write, there or anywhere above it, is
//!   refused, with a message that names it, its owner, why, and how to fix it
//!   ([`check_folder`], also run by `pika -t`);
//! - the last component is never followed (`O_NOFOLLOW`), new files are created with
//!   `O_EXCL` (`0640`: logs hold addresses and query strings);
//! - a file is handed to the workers' user only if this process just created it
//!   ([`hand_over`]); an existing file keeps its owner and group (logrotate's
//!   `create 0640 www-data adm` gives it to the workers already);
//! - `/dev/stdout`, `/dev/stderr` and the `/dev/fd/N` names (containers log there) are
//!   followed as the standard links they are and never handed over, and a pipe or a
//!   FIFO is written as it is.
//!
//! A folder the master makes for the workers (`body_temp_dir`: their request bodies)
//! is held to the same rule about the folders above it, since whoever may write one
//! could make the folder first and keep it ([`check_workers_folder`], run by `pika -t`
//! too); it is made 0700 and given to the workers' user only when just made
//! ([`make_workers_folder`]), and an existing one must already be theirs.
//!
//! A folder of the master's secrets (ACME's `state_dir`, the fleet's `cache_dir`) is
//! the master's user's alone, 0700 ([`check_private_folder`], [`make_private_folder`]),
//! and each file in it is written 0600 under a temporary name, then renamed, so a
//! reader never sees half of one ([`write_private`]).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
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

/// When this process is root: refuses `file` if a user other than root could put a
/// link of their choosing where it is opened, because they may write the folder it
/// lies in (or, while that does not exist yet, the nearest one above that does), or
/// any folder above it: whoever may write `/home/u` can swap the root-owned folder
/// `/home/u/logs` for a link to `/etc`. Every folder up the path is looked at
/// without following links (`lstat`); a folder above that everyone may write but
/// is sticky (`/tmp`) is safe for a child that root owns, which no one else may
/// rename. A link on the way (`/var/log/pika` to `/srv/logs`) is the operator's and
/// is safe if the folder it lies in is; the folders of where it leads are looked at
/// the same way.
pub fn check_folder(file: &Path) -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() || is_standard_stream(file) {
        return Ok(());
    }
    let file = std::path::absolute(file).map_err(|e| format!("{}: {e}", file.display()))?;
    check_path_up(&file, file.parent(), 0, &WRITTEN)
}

/// What a folder others may write lets them do, and how to close it, as a refusal
/// says it.
struct Risk {
    harm: &'static str,
    fix: &'static str,
}

/// For a file the master writes.
const WRITTEN: Risk = Risk {
    harm: "a link planted there, or put in place of a folder below it, would make pika, as root, write or give away a file of their choosing",
    fix: "put the file elsewhere",
};

/// For a folder the master makes for the workers.
const MADE_FOR_WORKERS: Risk = Risk {
    harm: "another user could make the folder there first (and read or refuse every file the workers keep in it), or put a link in its place for pika, as root, to give away",
    fix: "put the folder under one that is (as the default, /var/lib/pika/bodies)",
};

/// Most links followed on the way to one file, as the kernel's `ELOOP` limit.
const MAX_LINKS: usize = 40;

/// Checks `start` (the file's folder) and every folder above it with `lstat`, and
/// where each link met on the way leads, the same way.
fn check_path_up(file: &Path, start: Option<&Path>, links: usize, risk: &Risk) -> Result<(), String> {
    let mut found = false;
    // The owner of the entry just below the folder looked at: with the sticky bit,
    // only that owner (and the folder's) may rename it.
    let mut child_owner = None;
    let mut dir = start;
    while let Some(d) = dir {
        dir = d.parent();
        let meta = match std::fs::symlink_metadata(d) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !found => continue,
            Err(e) => return Err(format!("{}: cannot look at the folder {}: {e}", file.display(), d.display())),
        };
        if meta.file_type().is_symlink() {
            // A link's own mode means nothing: the folder it lies in decides who may
            // replace it (the next turn); where it leads is looked at as a path.
            if links >= MAX_LINKS {
                return Err(format!("{}: too many links on the way to it", file.display()));
            }
            let target = std::fs::read_link(d)
                .map_err(|e| format!("{}: cannot read the link {}: {e}", file.display(), d.display()))?;
            let target = d.parent().unwrap_or(Path::new("/")).join(target);
            check_path_up(file, Some(&target), links + 1, risk)?;
        } else {
            let sticky_and_ours = found && meta.mode() & 0o1000 != 0 && child_owner == Some(0);
            if let Some(why) = unsafe_folder(meta.uid(), meta.gid(), meta.mode()).filter(|_| !sticky_and_ours) {
                return Err(unsafe_folder_message(file, d, &meta, why, risk));
            }
        }
        found = true;
        child_owner = Some(meta.uid());
    }
    Ok(())
}

fn unsafe_folder_message(file: &Path, d: &Path, meta: &std::fs::Metadata, why: &str, risk: &Risk) -> String {
    format!(
        "{}: refused, because users other than root may write the folder {} ({why}; owner {}, group gid {}, mode {:04o}): \
         {}. Make every folder on the way root's and writable by root only (chown root:root, chmod 755) or {}",
        file.display(),
        d.display(),
        user_name(meta.uid()),
        meta.gid(),
        meta.mode() & 0o7777,
        risk.harm,
        risk.fix
    )
}

/// `www-data (uid 33)`, or `uid 1234` for a uid with no name.
fn user_name(uid: u32) -> String {
    nix::unistd::User::from_uid(Uid::from_raw(uid))
        .ok()
        .flatten()
        .map_or_else(|| format!("uid {uid}"), |u| format!("{} (uid {uid})", u.name))
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

/// Gives a log file just created by [`open_append`] to the workers' user, so they
/// can reopen it after a rotation. An existing file keeps its owner and group: root
/// did not make it, so root does not give it away (whoever could swap a link in for
/// it before the open would otherwise be handed a file of their choosing). One the
/// workers' user does not own is said in the error log, since the workers could not
/// reopen it. A standard stream, a pipe or a device is left alone; a regular file
/// with more than one link is refused.
pub fn hand_over(path: &Path, opened: &Opened, (uid, gid): (Uid, Gid)) -> io::Result<()> {
    let meta = opened.file.metadata()?;
    if is_standard_stream(path) || !meta.is_file() {
        return Ok(());
    }
    single_regular(path, &opened.file)?;
    if opened.created {
        nix::unistd::fchown(&opened.file, Some(uid), Some(gid))?;
    } else if meta.uid() != uid.as_raw() {
        log::warn!(
            "{} belongs to uid {}, not to the workers' user (uid {uid}): pika does not give away a file it did not create, \
             so the workers can write it only until they reopen their logs (a rotation, pika -k reopen-logs). \
             chown it to the workers' user, or remove it and let pika create it",
            path.display(),
            meta.uid()
        );
    }
    Ok(())
}

/// Who the workers are, for a folder made for them: their user and groups.
#[derive(Debug, Clone, Copy)]
pub struct Workers<'a> {
    pub uid: Uid,
    pub gid: Gid,
    /// Their supplementary groups.
    pub groups: &'a [Gid],
}

impl Workers<'_> {
    /// Whether they may pass through a folder with this owner, group and mode.
    fn may_enter(&self, owner: u32, group: u32, mode: u32) -> bool {
        if self.uid.is_root() {
            return true;
        }
        if owner == self.uid.as_raw() {
            mode & 0o100 != 0
        } else if group == self.gid.as_raw() || self.groups.iter().any(|g| g.as_raw() == group) {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        }
    }
}

/// Checks `dir` as the folder the workers keep their files in (request bodies),
/// without changing anything: an existing one must be a real directory of the
/// workers' user, closed to everyone else (0700); a missing one must be one the
/// master can make (as root: no folder above it that others may write, which
/// would let them make it first; else the nearest folder above must be writable by
/// this user). Either way the workers must be able to reach it. `what` names the
/// setting in messages (`body_temp_dir`).
pub fn check_workers_folder(what: &str, dir: &Path, workers: Workers<'_>) -> Result<(), String> {
    let dir = std::path::absolute(dir).map_err(|e| format!("{what} {}: {e}", dir.display()))?;
    let root = nix::unistd::geteuid().is_root();
    if root {
        check_path_up(&dir, dir.parent(), 0, &MADE_FOR_WORKERS).map_err(|e| format!("{what} {e}"))?;
    }
    let (user, uid) = (user_name(workers.uid.as_raw()), workers.uid.as_raw());
    match std::fs::symlink_metadata(&dir) {
        Ok(meta) => {
            if !meta.is_dir() {
                return Err(format!(
                    "{what} {} is not a directory (a link or a file): remove it, and pika makes the folder for the workers' user",
                    dir.display()
                ));
            }
            if meta.uid() != uid {
                return Err(format!(
                    "{what} {} belongs to {}, not to the workers' user {user}: another user may have made it first, and the \
                     workers could not keep files there (every request body past client_body_buffer would be a 500). \
                     Remove it, and pika makes it again for the workers' user (mode 0700), or set {what} elsewhere",
                    dir.display(),
                    user_name(meta.uid())
                ));
            }
            if meta.mode() & 0o777 != 0o700 {
                return Err(format!(
                    "{what} {} has mode {:04o}: the workers' user alone must read and write it (request bodies are kept \
                     there): chmod 700 {}",
                    dir.display(),
                    meta.mode() & 0o7777,
                    dir.display()
                ));
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            if !root {
                let above = dir.ancestors().skip(1).find(|a| a.exists()).unwrap_or(Path::new("/"));
                let flags = nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK;
                if nix::unistd::access(above, flags).is_err() {
                    return Err(format!(
                        "{what} {} does not exist, and {} may not make it in {}: make it (mode 0700), or set {what} to a \
                         folder this user may make",
                        dir.display(),
                        user_name(nix::unistd::geteuid().as_raw()),
                        above.display()
                    ));
                }
            }
        }
        Err(e) => return Err(format!("{what} {}: {e}", dir.display())),
    }
    // The folders above, as the workers pass through them (links followed, as
    // their path lookups do).
    for above in dir.ancestors().skip(1) {
        let Ok(meta) = std::fs::metadata(above) else { continue };
        if !workers.may_enter(meta.uid(), meta.gid(), meta.mode()) {
            return Err(format!(
                "{what} {}: the workers' user {user} may not pass through {} (owner {}, group gid {}, mode {:04o}), so \
                 they could not keep files there. Let them (chmod o+x {}) or set {what} elsewhere",
                dir.display(),
                above.display(),
                user_name(meta.uid()),
                meta.gid(),
                meta.mode() & 0o7777,
                above.display()
            ));
        }
    }
    Ok(())
}

/// Makes `dir` for the workers if it is missing (the folders above it too, as this
/// process's user), mode 0700, and gives it to the workers' user: only a folder this
/// call made (an existing one is never given away, [`hand_over`]'s rule). Checked
/// before and after by [`check_workers_folder`].
pub fn make_workers_folder(what: &str, dir: &Path, workers: Workers<'_>) -> Result<(), String> {
    check_workers_folder(what, dir, workers)?;
    if std::fs::symlink_metadata(dir).is_err() {
        let fail = |e: io::Error| format!("{what} {}: cannot make it: {e}", dir.display());
        if let Some(parent) = dir.parent() {
            std::fs::DirBuilder::new().recursive(true).mode(0o755).create(parent).map_err(fail)?;
        }
        match std::fs::DirBuilder::new().mode(0o700).create(dir) {
            Ok(()) => {
                // The folder just made, opened without following a link: what is
                // given away is what this call made.
                let made = OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
                    .open(dir)
                    .map_err(fail)?;
                if workers.uid != nix::unistd::geteuid() {
                    nix::unistd::fchown(&made, Some(workers.uid), Some(workers.gid)).map_err(|e| fail(e.into()))?;
                }
            }
            // Made meanwhile by someone else: looked at below like any other.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(fail(e)),
        }
    }
    check_workers_folder(what, dir, workers)
}

/// Checks a folder of secrets, if it exists: a directory of the master's user that
/// no one else may enter. `what` names it in the error (`acme state_dir`), `holds`
/// says what it holds (`private keys`).
pub fn check_private_folder(dir: &Path, what: &str, holds: &str) -> Result<(), String> {
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("{what} {}: {e}", dir.display())),
    };
    if !meta.is_dir() {
        return Err(format!("{what} {} is not a directory", dir.display()));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(format!("{what} {} belongs to uid {}, not to uid {me} (the master's)", dir.display(), meta.uid()));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{what} {} has mode {:o}: it holds {holds}, make it 0700",
            dir.display(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Creates a folder of secrets (0700) if it is missing, then checks it
/// ([`check_private_folder`]).
pub fn make_private_folder(dir: &Path, what: &str, holds: &str) -> Result<(), String> {
    if !dir.exists() {
        if let Some(parent) = dir.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        std::fs::DirBuilder::new().mode(0o700).create(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    check_private_folder(dir, what, holds)
}

/// Writes `bytes` to `dir/name`, 0600, by a temporary file ([`write_private_temp`])
/// and a rename.
pub fn write_private(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), String> {
    let tmp = write_private_temp(dir, name, bytes)?;
    std::fs::rename(&tmp, dir.join(name)).map_err(|e| format!("{}: {e}", dir.join(name).display()))
}

/// Writes `bytes` to a temporary file for `dir/name` (`.NAME.tmp`, 0600, no link
/// followed, synced); returns its path, for a caller that renames it when the rest
/// is written too.
pub fn write_private_temp(dir: &Path, name: &str, bytes: &[u8]) -> Result<std::path::PathBuf, String> {
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;
    let tmp = dir.join(format!(".{name}.tmp"));
    let _ = std::fs::remove_file(&tmp);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600)).map_err(|e| format!("{}: {e}", tmp.display()))?;
    f.write_all(bytes).and_then(|()| f.sync_all()).map_err(|e| format!("{}: {e}", tmp.display()))?;
    Ok(tmp)
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
    fn an_existing_file_keeps_its_owner_a_new_one_gets_the_workers() {
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("old.log");
        std::fs::write(&old, "").unwrap();
        nix::unistd::chown(&old, None, Some(Gid::from_raw(4))).unwrap();
        let workers = (Uid::from_raw(65534), Gid::from_raw(65534));
        hand_over(&old, &open_append(&old).unwrap(), workers).unwrap();
        let meta = std::fs::metadata(&old).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (0, 4), "not given away");
        let new = dir.path().join("new.log");
        hand_over(&new, &open_append(&new).unwrap(), workers).unwrap();
        let meta = std::fs::metadata(&new).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (65534, 65534));
    }

    #[test]
    fn every_folder_up_the_path_is_looked_at_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        // A user's folder, and below it a log folder root owns: the user may swap
        // the log folder for a link at any time.
        let home = dir.path().join("home");
        std::fs::create_dir_all(home.join("logs")).unwrap();
        nix::unistd::chown(&home, Some(Uid::from_raw(65534)), None).unwrap();
        let e = check_folder(&home.join("logs/access.log")).unwrap_err();
        assert!(e.contains(&format!("the folder {} (", home.display())) && e.contains("uid 65534"), "{e}");
        // The link swapped in: refused all the same, for the same folder.
        let root_only = dir.path().join("etc");
        std::fs::create_dir(&root_only).unwrap();
        std::fs::remove_dir(home.join("logs")).unwrap();
        std::os::unix::fs::symlink(&root_only, home.join("logs")).unwrap();
        let e = check_folder(&home.join("logs/access.log")).unwrap_err();
        assert!(e.contains(&format!("the folder {} (", home.display())), "{e}");
        // A link that root's folder holds is the operator's; where it leads counts.
        let var = dir.path().join("var");
        std::fs::create_dir(&var).unwrap();
        std::os::unix::fs::symlink(&root_only, var.join("logs")).unwrap();
        assert_eq!(check_folder(&var.join("logs/access.log")), Ok(()));
        std::os::unix::fs::symlink(home.join("logs"), var.join("theirs")).unwrap();
        let e = check_folder(&var.join("theirs/access.log")).unwrap_err();
        assert!(e.contains(&format!("the folder {} (", home.display())), "{e}");
        // A sticky folder everyone may write (/tmp) is safe above a folder root owns.
        let tmp = dir.path().join("tmp");
        std::fs::create_dir_all(tmp.join("pika")).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(check_folder(&tmp.join("pika/a.log")), Ok(()));
        nix::unistd::chown(&tmp.join("pika"), Some(Uid::from_raw(65534)), None).unwrap();
        assert!(check_folder(&tmp.join("pika/a.log")).is_err());
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

    /// A folder only root may write, that everyone may pass through (temp dirs are
    /// 0700).
    fn open_folder() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    const NOBODY: Workers<'static> = Workers { uid: Uid::from_raw(65534), gid: Gid::from_raw(65534), groups: &[] };

    #[test]
    fn a_workers_folder_is_made_for_them_where_only_root_may_write() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let dir = open_folder();
        let bodies = dir.path().join("lib/pika/bodies");
        check_workers_folder("body_temp_dir", &bodies, NOBODY).expect("to be made");
        make_workers_folder("body_temp_dir", &bodies, NOBODY).unwrap();
        let meta = std::fs::symlink_metadata(&bodies).unwrap();
        assert_eq!((meta.uid(), meta.gid(), meta.mode() & 0o7777), (65534, 65534, 0o700));
        assert_eq!(std::fs::metadata(dir.path().join("lib/pika")).unwrap().uid(), 0, "the folders above stay root's");
        make_workers_folder("body_temp_dir", &bodies, NOBODY).expect("made already: theirs");
        // Someone else's is not theirs, and is never given away.
        let root_workers = Workers { uid: Uid::from_raw(0), gid: Gid::from_raw(0), groups: &[] };
        let e = make_workers_folder("body_temp_dir", &bodies, root_workers).unwrap_err();
        assert!(e.contains("belongs to") && e.contains("uid 65534") && e.contains("Remove it"), "{e}");
        assert_eq!(std::fs::metadata(&bodies).unwrap().uid(), 65534);
    }

    #[test]
    fn a_workers_folder_others_could_take_or_the_workers_not_reach_is_refused() {
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let dir = open_folder();
        // Under a folder everyone may write (/var/tmp): another user may make it first.
        let tmp = dir.path().join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let e = check_workers_folder("body_temp_dir", &tmp.join("bodies"), NOBODY).unwrap_err();
        assert!(e.starts_with("body_temp_dir ") && e.contains(&format!("the folder {} (", tmp.display())), "{e}");
        assert!(e.contains("everyone may write it") && e.contains("make the folder there first"), "{e}");
        // Behind a folder the workers may not pass through.
        let private = dir.path().join("private");
        std::fs::create_dir(&private).unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        let e = make_workers_folder("body_temp_dir", &private.join("bodies"), NOBODY).unwrap_err();
        assert!(e.contains(&format!("may not pass through {} ", private.display())), "{e}");
        assert!(!private.join("bodies").exists(), "not made");
        // Open to others, or not a folder.
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        let e = check_workers_folder("body_temp_dir", &open, Workers { uid: Uid::from_raw(0), ..NOBODY }).unwrap_err();
        assert!(e.contains("has mode 0755") && e.contains("chmod 700"), "{e}");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&open, &link).unwrap();
        let e = check_workers_folder("body_temp_dir", &link, NOBODY).unwrap_err();
        assert!(e.contains("is not a directory"), "{e}");
    }

    #[test]
    fn the_workers_pass_through_a_folder_by_owner_group_or_others() {
        let w = Workers { uid: Uid::from_raw(33), gid: Gid::from_raw(33), groups: &[Gid::from_raw(4)] };
        assert!(w.may_enter(0, 0, 0o40755));
        assert!(!w.may_enter(0, 0, 0o40750));
        assert!(w.may_enter(0, 4, 0o40750), "a supplementary group");
        assert!(w.may_enter(33, 0, 0o40700));
        assert!(!w.may_enter(33, 0, 0o40077), "the owner's bits count for the owner");
        assert!(Workers { uid: Uid::from_raw(0), ..w }.may_enter(1, 1, 0o40700), "root passes");
    }
}
