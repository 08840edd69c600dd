//! A worker's cache of open, mapped files with their validators.
//!
//! Without it every request for a small file costs `openat2`, `fstat` (twice: once
//! for us, once inside memmap2), `mmap`, `munmap` and `close`. With it a hit costs at
//! most one `fstatat`, which revalidates: the entry is used only if the path still
//! names the same inode with the same size, modification and change times and mode (so a
//! `chmod` that takes a file away is seen like an edit). An entry checked
//! less than `http.file_check_interval` ago is used without looking (lighttpd's stat
//! cache and nginx's `open_file_cache_valid` do the same; 0 looks every time), so an
//! edited file is seen within that interval. Entries are made only from a file opened
//! through `openat2(RESOLVE_BENEATH)`, so a cached inode was proven inside the root.
//!
//! Files of any size are kept: a small one mapped, a large one as its open
//! descriptor (sent with `sendfile`), so a 1.7 MB file costs no `openat2`, `statx`
//! or `close` a request either. A kept descriptor holds its file's disk space even
//! once the file is deleted, so an entry with one that no request used for
//! [`OPEN_IDLE`] is let go (nginx's `open_file_cache … inactive`), and a deleted or
//! replaced file's entry goes at the next look at its path.

use std::cell::{Cell, OnceCell};
use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::rc::Rc;
use std::time::{Duration, UNIX_EPOCH};

use crate::base::clock::now_ms;

use memmap2::Mmap;
use nix::sys::stat::{FileStat, SFlag};

use crate::http::conditional;
use crate::http::response::Body;

/// How long an entry holding a descriptor stays unused before it is let go: the
/// longest a deleted file's space stays held by a worker that no longer serves it
/// (nginx's `open_file_cache` takes 60 s unless told; a third of that is plenty for
/// a file asked for again and again).
pub const OPEN_IDLE: Duration = Duration::from_secs(20);

/// Files this large or larger are sent with `sendfile` from an open descriptor, which
/// spares the copy from the mapping into the socket (the kernel hands the page-cache
/// pages on); smaller ones go out with the head in one `writev`, one syscall instead
/// of two. Measured (wrk -c50 close, server CPU per request): 200 KB 45 -> 41 us
/// with sendfile, 1.7 MB 480 -> 140 us; ab on a 50 KB page 3-7% faster with it.
pub const SENDFILE_MIN: u64 = 32 * 1024;

/// Most cached entries per vhost and worker that hold a descriptor open (files of at
/// least [`SENDFILE_MIN`]), so the cache never takes much of the descriptor limit.
pub const MAX_OPEN_ENTRIES: usize = 64;

/// Most entries per vhost and worker; when full, the cache starts over (simple, and
/// a working set larger than this is served from the page cache anyway).
pub const MAX_ENTRIES: usize = 256;

/// A regular file ready to send.
pub struct Entry {
    pub len: u64,
    pub mtime: u64,
    pub etag: String,
    pub last_modified: String,
    /// The mapping of a file shorter than [`SENDFILE_MIN`] (None for an empty one).
    map: Option<Rc<Mmap>>,
    /// The open file of one at least [`SENDFILE_MIN`] long, sent with `sendfile`.
    file: Option<Rc<File>>,
    ino: u64,
    dev: u64,
    mtime_nsec: i64,
    /// The inode's change time and mode: a `chmod`, `chown` or new link changes the
    /// first, so a permission taken away is seen at the next check.
    ctime: (i64, i64),
    mode: u32,
    /// When the file was last confirmed unchanged, in [`now_ms`]'s milliseconds (None:
    /// look before the next use).
    checked: Cell<Option<u64>>,
    /// When a request last used it (an entry holding a descriptor goes after
    /// [`OPEN_IDLE`] without one), in [`now_ms`]'s milliseconds.
    used: Cell<u64>,
    /// The header lines of a whole-file (or one-range) answer, made on the first one.
    file_headers: OnceCell<Box<[u8]>>,
    /// The file compressed on the fly, by coding (`rules::encoding::Coding::index`),
    /// made on the first request that asks: one compression per file version and
    /// worker, within the worker's bound (`rules::compress::MAX_KEPT`).
    pub coded: std::cell::RefCell<[Option<Rc<crate::rules::compress::Kept>>; 3]>,
    /// A script location runs this file ([`super::reach`]): never sent as it is.
    pub script: bool,
    /// That a request for it was refused is said in the error log (once).
    pub said: Cell<bool>,
}

impl Entry {
    /// Computes an open regular file's validators; keeps the file if it is large
    /// enough for `sendfile`, else maps it. A file sent with `sendfile` is not
    /// mapped: its whole length would count against the worker's address-space limit
    /// (`workers.max_memory`), and a file larger than that could not be served. So
    /// what the cache maps is at most [`MAX_ENTRIES`] files under [`SENDFILE_MIN`].
    pub fn from_file(file: File, meta: &Metadata) -> io::Result<Entry> {
        let len = meta.len();
        let mtime = meta.mtime().max(0) as u64;
        let (map, file) = match len {
            0 => (None, None),
            n if n < SENDFILE_MIN => (Some(Rc::new(crate::base::sys::map_file(&file, len)?)), None),
            _ => (None, Some(Rc::new(file))),
        };
        Ok(Entry {
            len,
            mtime,
            etag: conditional::make_etag(len, mtime, meta.mtime_nsec().clamp(0, 999_999_999) as u32, meta.ino()),
            last_modified: httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(mtime)),
            map,
            file,
            ino: meta.ino(),
            dev: meta.dev(),
            mtime_nsec: meta.mtime_nsec(),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            mode: meta.mode(),
            checked: Cell::new(Some(now_ms())),
            used: Cell::new(now_ms()),
            file_headers: OnceCell::new(),
            coded: Default::default(),
            script: false,
            said: Cell::new(false),
        })
    }

    /// `Last-Modified`, `ETag`, `Accept-Ranges` and `Content-Type` lines for a whole-file
    /// or one-range answer, made once per entry: a hit then costs one copy instead of
    /// four header writes and a MIME lookup (callgrind, keep-alive 1.4 KB file: 7,467
    /// -> 6,884 instructions per request). The content type is asked for on the first
    /// call only; an entry is always reached by the same name (the cache key is the
    /// path), so it cannot change.
    pub fn file_headers<'t>(&self, content_type: impl FnOnce() -> &'t str) -> &[u8] {
        self.file_headers.get_or_init(|| {
            let mut reply_headers = Vec::new();
            crate::http::response::Reply::new(&mut reply_headers)
                .header("Last-Modified", &self.last_modified)
                .header("ETag", &self.etag)
                .header("Accept-Ranges", "bytes")
                .header("Content-Type", content_type());
            reply_headers.into_boxed_slice()
        })
    }

    /// Bytes `start..end` of the file as a body: by `sendfile` (or, over TLS, `pread`)
    /// from the open file, or from the mapping of a small one.
    pub fn slice(&self, start: u64, end: u64) -> Body {
        match (&self.file, &self.map) {
            (Some(file), _) => Body::File { file: file.clone(), start, end },
            (None, Some(map)) => Body::Mapped { map: map.clone(), start: start as usize, end: end as usize },
            (None, None) => Body::Owned(Vec::new()),
        }
    }

    /// A mapping of the whole file, for an answer made of several of its ranges: the
    /// entry's own, or one made for this answer (dropped with it). Fails for a file
    /// the address-space limit leaves no room for; the caller then sends it whole.
    pub fn whole_mapping(&self) -> io::Result<Rc<Mmap>> {
        match (&self.map, &self.file) {
            (Some(map), _) => Ok(map.clone()),
            (None, Some(file)) => Ok(Rc::new(crate::base::sys::map_file(file, self.len)?)),
            (None, None) => Err(io::Error::other("an empty file has no ranges")),
        }
    }

    fn matches(&self, st: &FileStat) -> bool {
        st.st_ino == self.ino
            && st.st_dev == self.dev
            && st.st_size as u64 == self.len
            && st.st_mtime.max(0) as u64 == self.mtime
            && st.st_mtime_nsec == self.mtime_nsec
            && (st.st_ctime, st.st_ctime_nsec) == self.ctime
            && st.st_mode == self.mode
    }
}

/// The cache's hash of a path: rustc's FxHash (a multiply and a rotate per 8 bytes).
/// std's SipHash, keyed so that a client cannot fill a table with colliding keys, took
/// about 220 instructions of every cached request (callgrind, `/index.html`); a table
/// here holds only files that exist under a root, at most [`MAX_ENTRIES`], so names
/// made to collide cost at most a scan of those.
#[derive(Default, Clone, Copy)]
struct PathHash;

impl BuildHasher for PathHash {
    type Hasher = FxHasher;
    fn build_hasher(&self) -> FxHasher {
        FxHasher(0)
    }
}

struct FxHasher(u64);

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.add(u64::from_le_bytes(w.try_into().expect("8 bytes")));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // The table picks a bucket by the low bits, which the multiply mixes least.
        self.0.rotate_left(26)
    }
}

#[derive(Default)]
pub struct FileCache {
    entries: HashMap<Vec<u8>, Rc<Entry>, PathHash>,
    /// How long a confirmation holds (`http.file_check_interval`).
    pub check_interval: Duration,
}

impl FileCache {
    pub fn new(check_interval: Duration) -> FileCache {
        FileCache { entries: HashMap::with_hasher(PathHash), check_interval }
    }

    /// The cached entry for `rel` under `root`, if the file there is still the same.
    pub fn fresh(&mut self, root: BorrowedFd<'_>, rel: &Path) -> Option<Rc<Entry>> {
        use std::os::unix::ffi::OsStrExt;
        let key = rel.as_os_str().as_bytes();
        let entry = self.entries.get(key)?;
        // The coarse clock (a read of memory): every cached answer asks it.
        let now = now_ms();
        entry.used.set(now);
        if entry.checked.get().is_some_and(|t| u128::from(now.saturating_sub(t)) < self.check_interval.as_millis()) {
            return Some(entry.clone());
        }
        let st = nix::sys::stat::fstatat(root, rel, nix::fcntl::AtFlags::empty()).ok();
        match st {
            Some(st)
                if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFREG
                    && entry.matches(&st) =>
            {
                entry.checked.set(Some(now));
                Some(entry.clone())
            }
            _ => {
                self.entries.remove(key);
                None
            }
        }
    }

    /// A file shrank under a mapping while it was sent: every entry is looked at
    /// before its next use, whatever `check_interval` says.
    pub fn distrust(&self) {
        for e in self.entries.values() {
            e.checked.set(None);
        }
    }

    /// Lets go of the entries holding a descriptor that no request used for
    /// [`OPEN_IDLE`] (the worker's once-a-second look).
    pub fn sweep(&mut self, now_ms: u64) {
        let idle = OPEN_IDLE.as_millis() as u64;
        self.entries.retain(|_, e| e.file.is_none() || now_ms.saturating_sub(e.used.get()) < idle);
    }

    /// Keeps `entry` for later requests.
    pub fn insert(&mut self, rel: &Path, entry: &Rc<Entry>) {
        use std::os::unix::ffi::OsStrExt;
        let key = rel.as_os_str().as_bytes();
        self.entries.remove(key);
        if self.entries.len() >= MAX_ENTRIES {
            self.entries.clear();
        }
        // Counted only on a miss (an insert), never on a hit: the descriptor used
        // least lately makes room (a site of many large files would otherwise empty
        // the whole cache, its small files with it, at every new one).
        if entry.file.is_some() && self.open() >= MAX_OPEN_ENTRIES {
            let oldest = self.entries.iter().filter(|(_, e)| e.file.is_some()).min_by_key(|(_, e)| e.used.get());
            if let Some(k) = oldest.map(|(k, _)| k.clone()) {
                self.entries.remove(&k);
            }
        }
        self.entries.insert(key.to_vec(), entry.clone());
    }

    /// Entries holding a descriptor.
    fn open(&self) -> usize {
        self.entries.values().filter(|e| e.file.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn paths_hash_apart() {
        let hash = |k: &[u8]| PathHash.hash_one(k);
        let keys: [&[u8]; 7] = [b"", b"a", b"a\0", b"index.html", b"index.htm", b"img/a.png", b"img/b.png"];
        let hashes: std::collections::HashSet<u64> = keys.iter().map(|k| hash(k)).collect();
        assert_eq!(hashes.len(), keys.len(), "a trailing zero or a changed byte changes the hash");
        assert_eq!(hash(b"index.html"), PathHash.hash_one(b"index.html".to_vec()), "a Vec and its slice agree");
    }

    #[test]
    fn whole_file_headers_are_made_once() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.txt");
        std::fs::write(&p, "one").unwrap();
        let f = File::open(&p).unwrap();
        let e = Entry::from_file(f, &std::fs::metadata(&p).unwrap()).unwrap();
        let asked = Cell::new(0);
        let ty = || {
            asked.set(asked.get() + 1);
            "text/plain"
        };
        let want = format!(
            "Last-Modified: {}\r\nETag: {}\r\nAccept-Ranges: bytes\r\nContent-Type: text/plain\r\n",
            e.last_modified, e.etag
        );
        assert_eq!(e.file_headers(ty), want.as_bytes());
        assert_eq!(e.file_headers(|| "other/type"), want.as_bytes(), "made on the first call only");
        assert_eq!(asked.get(), 1);
    }

    #[test]
    fn entries_are_revalidated() {
        let dir = tempfile::tempdir().unwrap();
        let root = File::open(dir.path()).unwrap();
        let p = dir.path().join("a.txt");
        std::fs::write(&p, "one").unwrap();
        let f = File::open(&p).unwrap();
        let meta = f.metadata().unwrap();
        let e = Rc::new(Entry::from_file(f, &meta).unwrap());
        let mut c = FileCache::default();
        c.insert(Path::new("a.txt"), &e);
        assert!(c.fresh(root.as_fd(), Path::new("a.txt")).is_some());
        // Within the check interval the entry is trusted without a look...
        c.check_interval = Duration::from_secs(3600);
        std::fs::write(&p, "changed").unwrap();
        assert!(c.fresh(root.as_fd(), Path::new("a.txt")).is_some());
        // ... and with none, every use looks.
        c.check_interval = Duration::ZERO;
        assert!(c.fresh(root.as_fd(), Path::new("a.txt")).is_none());
        c.insert(Path::new("a.txt"), &e);
        assert!(c.fresh(root.as_fd(), Path::new("b.txt")).is_none());
        // Permissions taken away (same inode, size and contents): stale, so the next
        // open is refused if the workers' user may no longer read it.
        let f = File::open(&p).unwrap();
        let now = Rc::new(Entry::from_file(f, &std::fs::metadata(&p).unwrap()).unwrap());
        c.insert(Path::new("a.txt"), &now);
        assert!(c.fresh(root.as_fd(), Path::new("a.txt")).is_some());
        let mut perms = std::fs::metadata(&p).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o000);
        std::fs::set_permissions(&p, perms).unwrap();
        assert!(c.fresh(root.as_fd(), Path::new("a.txt")).is_none(), "chmod 000 is seen");
        c.insert(Path::new("a.txt"), &e);
        // Replaced (new inode, other size): stale.
        std::fs::remove_file(&p).unwrap();
        std::fs::write(&p, "three").unwrap();
        assert!(c.fresh(root.as_fd(), Path::new("a.txt")).is_none());
        assert!(c.entries.is_empty());
    }

    #[test]
    fn big_files_keep_their_descriptor_until_no_request_used_it_for_open_idle() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("big");
        std::fs::write(&p, vec![0u8; 2 << 20]).unwrap();
        let f = File::open(&p).unwrap();
        let meta = f.metadata().unwrap();
        let e = Rc::new(Entry::from_file(f, &meta).unwrap());
        let mut c = FileCache::new(Duration::from_secs(1));
        c.insert(Path::new("big"), &e);
        assert_eq!(c.open(), 1, "a 2 MiB file is kept, as its descriptor");
        let root = File::open(dir.path()).unwrap();
        assert!(c.fresh(root.as_fd(), Path::new("big")).is_some());
        let used = e.used.get();
        let idle = OPEN_IDLE.as_millis() as u64;
        c.sweep(used + idle - 1);
        assert_eq!(c.open(), 1, "used lately: kept");
        c.sweep(used + idle);
        assert!(c.entries.is_empty(), "unused for OPEN_IDLE: let go");
    }

    #[test]
    fn large_files_keep_their_descriptor_within_a_bound() {
        let dir = tempfile::tempdir().unwrap();
        let entry = |name: &str, len: u64| {
            let p = dir.path().join(name);
            std::fs::write(&p, vec![b'x'; len as usize]).unwrap();
            let f = File::open(&p).unwrap();
            let meta = f.metadata().unwrap();
            Rc::new(Entry::from_file(f, &meta).unwrap())
        };
        assert!(entry("small", SENDFILE_MIN - 1).file.is_none(), "small files go out with writev");
        assert!(entry("large", SENDFILE_MIN).file.is_some(), "large ones with sendfile");
        let mut c = FileCache::default();
        let small = entry("small", 10);
        c.insert(Path::new("small"), &small);
        for i in 0..MAX_OPEN_ENTRIES {
            c.insert(Path::new(&format!("l{i}")), &entry(&format!("l{i}"), SENDFILE_MIN));
        }
        assert_eq!((c.open(), c.entries.len()), (MAX_OPEN_ENTRIES, MAX_OPEN_ENTRIES + 1));
        // The same name again replaces its entry: still as many descriptors.
        c.insert(Path::new("l0"), &entry("l0", SENDFILE_MIN));
        assert_eq!(c.open(), MAX_OPEN_ENTRIES);
        // One more open file than allowed: the one used least lately makes room,
        // the small files stay.
        let l1 = c.entries[&b"l1"[..]].clone();
        l1.used.set(l1.used.get() - 1000);
        c.insert(Path::new("one-more"), &entry("one-more", SENDFILE_MIN));
        assert_eq!((c.open(), c.entries.len()), (MAX_OPEN_ENTRIES, MAX_OPEN_ENTRIES + 1));
        assert!(!c.entries.contains_key(&b"l1"[..]) && c.entries.contains_key(&b"small"[..]));
    }
}
