//! An answer kept while its client takes it (nginx's `fastcgi_buffering`): read
//! from its source as fast as the source gives it, into memory up to [`MEMORY`],
//! past that into an unnamed temporary file (`O_TMPFILE` in `http.body_temp_dir`),
//! so the source (a CGI script, a FastCGI application's child and the connection
//! to it, an upstream) is let go at the end of its answer, not at the end of the
//! client's download. A client that reads slowly, or never, then costs a socket
//! and a file, as a static file's does: the kept answer goes out as a file does
//! (`Body::Spooled`: `sendfile` on plain HTTP), with its `Content-Length`.
//!
//! Nothing here knows where the bytes come from: a [`Spool`] takes bytes, a
//! [`Kept`] gives them back, as a body or a reader.
//!
//! The bytes in temporary files are counted per worker in its scoreboard slot
//! ([`Disk`]: request bodies' apart from answers'), so the server's count is the
//! sum of the slots, and a worker that dies takes its count with it (the master
//! clears the slot; the kernel frees the files). Past a cap a body is refused
//! (`gateway::incoming`); an answer stops being kept, and what is left of it is
//! sent as the source gives it, holding the source meanwhile (as nginx does past
//! `fastcgi_max_temp_file_size`): the disk stays bounded, the answer whole.

use std::any::Any;
use std::cell::Cell;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::http::response::{Body, SpooledReader};
use crate::scoreboard::Slot;

/// The bytes of an answer kept in memory before a temporary file takes it: what a
/// page of a few dozen kilobytes needs, held in memory while its client takes it
/// (a worker holds up to `workers.max_connections` answers; nginx's 8 buffers of a
/// page each, 32 KiB, suit its few workers with thousands of connections each). An
/// answer within it goes out in one write, as a small file does.
pub const MEMORY: usize = 128 * 1024;

/// What a [`Disk`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Of {
    /// Request bodies read before a script runs (`body_spool_max_worker`, `body_spool_max`).
    Bodies,
    /// Answers kept for their clients (`answer_spool_max`).
    Answers,
}

impl Of {
    /// What the error log calls them, and the keys of the caps (a worker's, the server's).
    fn words(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Of::Bodies => ("request bodies", "body_spool_max_worker", "body_spool_max"),
            Of::Answers => ("answers", "answer_spool_max", "answer_spool_max"),
        }
    }
}

/// The bytes of bodies or answers in temporary files: this worker's count (in its
/// scoreboard slot, written by it alone), every worker's (summed for the server's),
/// and the caps. Two workers that check at the same moment may both pass a cap by
/// one write's bytes: the caps bound the disk, not the byte.
#[derive(Clone, Copy)]
pub struct Disk {
    mine: &'static Slot,
    all: &'static [Slot],
    of: Of,
    /// The caps: this worker's, the server's.
    pub max_worker: u64,
    pub max: u64,
}

/// Which cap more bytes would have passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskFull {
    pub of: Of,
    /// The server's cap (else the worker's).
    pub server: bool,
    pub cap: u64,
}

impl std::fmt::Display for DiskFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (what, worker_key, server_key) = self.of.words();
        let (whose, key) = if self.server { ("the server's", server_key) } else { ("this worker's", worker_key) };
        write!(f, "{whose} {what} in temporary files would pass {key} ({} bytes)", self.cap)
    }
}

impl std::fmt::Debug for Disk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mine = self.count(self.mine).load(Relaxed);
        write!(f, "Disk {{ of: {:?}, mine: {mine}, max_worker: {}, max: {} }}", self.of, self.max_worker, self.max)
    }
}

impl Disk {
    /// Request bodies, counted in `mine` (this worker's slot), the server's count
    /// summed over `all`; no caps until [`Disk::capped`].
    pub fn bodies(mine: &'static Slot, all: &'static [Slot]) -> Disk {
        Disk { mine, all, of: Of::Bodies, max_worker: u64::MAX, max: u64::MAX }
    }

    /// Answers, likewise.
    pub fn answers(mine: &'static Slot, all: &'static [Slot]) -> Disk {
        Disk { of: Of::Answers, ..Disk::bodies(mine, all) }
    }

    /// The same counts, with these caps.
    pub fn capped(self, max_worker: u64, max: u64) -> Disk {
        Disk { max_worker, max, ..self }
    }

    fn count(&self, slot: &'static Slot) -> &'static AtomicU64 {
        match self.of {
            Of::Bodies => &slot.body_spool,
            Of::Answers => &slot.answer_spool,
        }
    }

    /// This worker's count.
    pub fn mine(&self) -> u64 {
        self.count(self.mine).load(Relaxed)
    }

    /// Counts `n` more bytes in a temporary file, unless they would pass a cap.
    pub fn take(&self, n: u64) -> Result<(), DiskFull> {
        let mine = self.mine();
        if mine.saturating_add(n) > self.max_worker {
            return Err(DiskFull { of: self.of, server: false, cap: self.max_worker });
        }
        let all: u64 = self.all.iter().map(|s| self.count(s).load(Relaxed)).sum();
        if all.saturating_add(n) > self.max {
            return Err(DiskFull { of: self.of, server: true, cap: self.max });
        }
        self.count(self.mine).store(mine + n, Relaxed);
        Ok(())
    }

    /// Counts `n` bytes whatever the caps (a body another worker began, taken over).
    pub fn force(&self, n: u64) {
        crate::scoreboard::add(self.count(self.mine), n);
    }

    /// `n` bytes are no longer in a temporary file of this worker.
    pub fn give_back(&self, n: u64) {
        let c = self.count(self.mine);
        c.store(c.load(Relaxed).saturating_sub(n), Relaxed);
    }
}

/// An unnamed file in `dir`, read and written by this process only.
pub fn temp_file(dir: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new().read(true).write(true).mode(0o600).custom_flags(libc::O_TMPFILE).open(dir)
}

/// Makes `dir` the folder for temporary files: created with mode 0700 if missing;
/// an existing one must be a real directory (not a link), owned by this process's
/// user, and closed to everyone else.
pub fn prepare_dir(dir: &Path) -> io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(dir)?;
    let uid = nix::unistd::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} must be a directory of uid {uid} closed to others (mode 0700)", dir.display()),
        ));
    }
    Ok(())
}

/// Where a worker keeps answers: the folder, the bytes kept in memory, the count
/// of bytes in files and its cap.
pub struct Place {
    pub dir: PathBuf,
    pub memory: usize,
    pub disk: Disk,
    /// `dir` was made or checked (once per worker; tried again after a failure).
    ready: Cell<bool>,
}

impl Place {
    pub fn new(dir: PathBuf, memory: usize, disk: Disk) -> Place {
        Place { dir, memory, disk, ready: Cell::new(false) }
    }

    fn file(&self) -> io::Result<File> {
        if !self.ready.get() {
            prepare_dir(&self.dir)?;
            self.ready.set(true);
        }
        temp_file(&self.dir)
    }
}

/// Why an answer could not be kept on.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("{0}")]
    Full(DiskFull),
    #[error("keeping it in a temporary file failed: {0}")]
    Io(#[from] io::Error),
}

/// An answer being kept: in memory, then in a file.
pub struct Spool<'p> {
    place: &'p Place,
    memory: Vec<u8>,
    file: Option<File>,
    /// The bytes in the file (all of the answer once there is one), counted in the
    /// place's [`Disk`].
    in_file: u64,
}

impl<'p> Spool<'p> {
    pub fn new(place: &'p Place) -> Spool<'p> {
        Spool { place, memory: Vec::new(), file: None, in_file: 0 }
    }

    /// The bytes kept.
    pub fn len(&self) -> u64 {
        self.memory.len() as u64 + self.in_file
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps `bytes` after those kept. On an error none of them is kept (those
    /// kept before stay): the caller sends the rest another way.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), SpoolError> {
        if self.file.is_none() && self.memory.len() + bytes.len() <= self.place.memory {
            self.memory.extend_from_slice(bytes);
            return Ok(());
        }
        let disk = &self.place.disk;
        if self.file.is_none() {
            // What memory holds moves to the file with these bytes.
            let moved = self.memory.len() as u64;
            disk.take(moved + bytes.len() as u64).map_err(SpoolError::Full)?;
            let file = self.place.file().and_then(|f| f.write_all_at(&self.memory, 0).map(|()| f));
            match file {
                Ok(f) => {
                    self.file = Some(f);
                    self.in_file = moved;
                    self.memory = Vec::new();
                }
                Err(e) => {
                    disk.give_back(moved + bytes.len() as u64);
                    return Err(e.into());
                }
            }
        } else {
            disk.take(bytes.len() as u64).map_err(SpoolError::Full)?;
        }
        let file = self.file.as_ref().expect("a file");
        // Written at the end of what is kept: a failed write's bytes past it are
        // never read.
        if let Err(e) = file.write_all_at(bytes, self.in_file) {
            disk.give_back(bytes.len() as u64);
            return Err(e.into());
        }
        self.in_file += bytes.len() as u64;
        Ok(())
    }

    /// What was kept, counted until it is dropped.
    pub fn finish(mut self) -> Kept {
        match self.file.take() {
            None => Kept::Memory(std::mem::take(&mut self.memory)),
            Some(file) => {
                let len = std::mem::take(&mut self.in_file);
                let hold = Rc::new(Counted { disk: self.place.disk, n: len });
                Kept::File { file: Rc::new(file), len, hold }
            }
        }
    }
}

/// An answer given up before it was kept whole leaves the count with its file.
impl Drop for Spool<'_> {
    fn drop(&mut self) {
        if self.file.is_some() {
            self.place.disk.give_back(self.in_file);
        }
    }
}

/// Bytes in a temporary file, counted in a [`Disk`] as long as this lives.
struct Counted {
    disk: Disk,
    n: u64,
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.disk.give_back(self.n);
    }
}

/// An answer kept whole, or the part of one kept before the rest was sent another way.
pub enum Kept {
    Memory(Vec<u8>),
    /// The first `len` bytes of an unnamed file; its bytes are counted as long as
    /// `hold` lives (the body it becomes, a reader).
    File {
        file: Rc<File>,
        len: u64,
        hold: Rc<dyn Any>,
    },
}

impl Kept {
    pub fn len(&self) -> u64 {
        match self {
            Kept::Memory(v) => v.len() as u64,
            Kept::File { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps the first `n` bytes only.
    pub fn truncate(&mut self, n: u64) {
        match self {
            Kept::Memory(v) => v.truncate(usize::try_from(n).unwrap_or(usize::MAX)),
            Kept::File { len, .. } => *len = (*len).min(n),
        }
    }

    /// As a response body: bytes in memory, or a file's range sent as a file is.
    pub fn into_body(self) -> Body {
        match self {
            Kept::Memory(v) => Body::Owned(v),
            Kept::File { file, len, hold } => Body::Spooled { file, start: 0, end: len, hold },
        }
    }

    /// Its bytes as a reader.
    pub fn into_reader(self) -> Box<dyn Read> {
        match self {
            Kept::Memory(v) => Box::new(io::Cursor::new(v)),
            Kept::File { file, len, hold } => Box::new(SpooledReader::new(file, 0, len, hold)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A place in a fresh folder, counted in the first of two fresh slots, with
    /// `memory` bytes in memory and `max` for the server.
    fn a_place(memory: usize, max: u64) -> (tempfile::TempDir, Place, &'static [Slot]) {
        let dir = tempfile::tempdir().unwrap();
        let slots = crate::scoreboard::Scoreboard::new(2).unwrap().slots;
        let disk = Disk::answers(&slots[0], slots).capped(u64::MAX, max);
        let p = Place::new(dir.path().join("answers"), memory, disk);
        (dir, p, slots)
    }

    fn all(r: &mut dyn Read) -> Vec<u8> {
        let mut v = Vec::new();
        r.read_to_end(&mut v).unwrap();
        v
    }

    #[test]
    fn an_answer_stays_in_memory_up_to_its_bound_then_goes_to_a_counted_file() {
        let (_d, place, slots) = a_place(10, u64::MAX);
        let mut s = Spool::new(&place);
        s.write(b"0123456789").unwrap();
        assert!(matches!(s.finish(), Kept::Memory(v) if v == b"0123456789"));

        let mut s = Spool::new(&place);
        s.write(b"01234").unwrap();
        s.write(b"56789ab").unwrap();
        s.write(b"cd").unwrap();
        assert_eq!((s.len(), slots[0].answer_spool.load(Relaxed)), (14, 14), "counted as it is written");
        assert_eq!(slots[0].body_spool.load(Relaxed), 0, "apart from request bodies");
        let mut kept = s.finish();
        assert!(matches!(kept, Kept::File { len: 14, .. }));
        kept.truncate(12);
        let Kept::File { file, len, hold } = kept else { panic!() };
        let body = Body::Spooled { file: file.clone(), start: 0, end: len, hold: hold.clone() };
        assert_eq!(body.length(), Some(12));
        drop(body);
        let mut r = SpooledReader::new(file, 3, 12, hold);
        assert_eq!(slots[0].answer_spool.load(Relaxed), 14, "a reader of the file holds it");
        assert_eq!(all(&mut r), b"3456789ab");
        drop(r);
        assert_eq!(slots[0].answer_spool.load(Relaxed), 0, "given back with the last holder");
        assert!(std::fs::read_dir(place.dir.as_path()).unwrap().next().is_none(), "no name left behind");

        let mut s = Spool::new(&place);
        s.write(&[7; 30]).unwrap();
        let mut r = s.finish().into_reader();
        assert_eq!(slots[0].answer_spool.load(Relaxed), 30);
        assert_eq!(all(&mut r), [7; 30]);
        drop(r);
        assert_eq!(slots[0].answer_spool.load(Relaxed), 0);
    }

    #[test]
    fn past_the_cap_nothing_more_is_kept_and_what_was_stays() {
        let (_d, place, slots) = a_place(4, 20);
        slots[1].answer_spool.store(5, Relaxed);
        let mut s = Spool::new(&place);
        s.write(b"abc").unwrap();
        s.write(b"defghij").unwrap();
        let full = s.write(&[0; 6]).unwrap_err();
        assert!(matches!(full, SpoolError::Full(DiskFull { of: Of::Answers, server: true, cap: 20 })));
        assert_eq!(full.to_string(), "the server's answers in temporary files would pass answer_spool_max (20 bytes)");
        assert_eq!((s.len(), slots[0].answer_spool.load(Relaxed)), (10, 10));
        s.write(&[0; 5]).unwrap();
        drop(s);
        assert_eq!(slots[0].answer_spool.load(Relaxed), 0, "an answer given up leaves the count");

        // The folder cannot be made: nothing counted, memory kept.
        let (_d, mut place, slots) = a_place(4, u64::MAX);
        place.dir = PathBuf::from("/proc/no-such-folder");
        let mut s = Spool::new(&place);
        s.write(b"abc").unwrap();
        assert!(matches!(s.write(b"defg"), Err(SpoolError::Io(_))));
        assert_eq!(slots[0].answer_spool.load(Relaxed), 0);
        assert!(matches!(s.finish(), Kept::Memory(v) if v == b"abc"));
    }

    #[test]
    fn the_folder_must_be_ours_alone() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("temp");
        prepare_dir(&dir).unwrap();
        prepare_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        assert!(prepare_dir(&dir).is_err());
        let link = d.path().join("link");
        std::os::unix::fs::symlink(d.path(), &link).unwrap();
        assert!(prepare_dir(&link).is_err());
        let _ = std::fs::File::open(d.path()).unwrap().read(&mut []);
    }
}
