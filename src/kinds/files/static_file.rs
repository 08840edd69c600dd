//! Static files: a path served from a directory on disk, as files (with validators,
//! conditionals and ranges), directories (redirect, index file, listing), and the
//! refusals in between.
//!
//! Paths are opened with `openat2(RESOLVE_BENEATH)` relative to the directory's
//! descriptor ([`Root`]), so the kernel refuses anything that would leave it, links
//! included, with no gap between a check and the open.
//!
//! It stays one file past 500 lines: a request's walk from path to file, directory or
//! refusal shares the [`Root`], the validators and the reply, and reads in one place.

use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, UNIX_EPOCH};

use super::file_cache::{Entry, FileCache};
use super::reach::Reach;
use super::try_files::{self, Tried};
use crate::base::sys::{self, Symlinks};
use crate::exchange::{Ask, Methods};
use crate::http::conditional::{self, Conditions, Precondition};
use crate::http::mime::MimeTypes;
use crate::http::path::{CleanPath, encode_path};
use crate::http::range::{self, RangeOutcome};
use crate::http::request::{Method, Request};
use crate::http::response::{Body, Internal, Reply};
use crate::rules::FileRules;
use crate::rules::compress::{self, Kept};
use crate::rules::encoding::{self, Coding};

/// A directory files are served from: an open descriptor on it, and the files
/// recently served from it. One per directory in a worker, shared by every vhost and
/// location that serves from it.
pub struct Root {
    pub path: PathBuf,
    pub symlinks: Symlinks,
    dir: File,
    cache: RefCell<FileCache>,
    /// The files script locations run, which are never sent as they are.
    reach: Rc<Reach>,
}

impl Root {
    pub fn open(path: &Path, symlinks: Symlinks, check_interval: Duration, reach: Rc<Reach>) -> io::Result<Root> {
        let dir = File::open(path)?;
        let cache = RefCell::new(FileCache::new(check_interval));
        Ok(Root { path: path.to_path_buf(), dir, symlinks, cache, reach })
    }

    /// Sending a file failed because it shrank (see `connection`): look at every
    /// cached file again before its next use.
    pub fn files_changed(&self) {
        self.cache.borrow().distrust();
    }

    /// Lets go of the open files no request used for a while
    /// ([`super::file_cache::OPEN_IDLE`]).
    pub fn sweep(&self, now_ms: u64) {
        self.cache.borrow_mut().sweep(now_ms);
    }

    /// What `rel` names under the root: a file ready to send (from the cache when it
    /// is still the same file), a directory, or something not to serve.
    fn lookup(&self, rel: &Path) -> io::Result<Found> {
        if !rel.as_os_str().is_empty() {
            if let Some(entry) = self.cache.borrow_mut().fresh(self.dir.as_fd(), rel) {
                return Ok(Found::File(entry, true));
            }
        }
        let file = sys::open_beneath(self.dir.as_fd(), &self.path, rel, self.symlinks)?;
        crate::log::shortage::recovered(crate::log::shortage::Op::Open);
        let meta = file.metadata()?;
        if meta.is_dir() {
            return Ok(Found::Dir(file));
        }
        if !meta.is_file() {
            return Ok(Found::Other);
        }
        let mut entry = Entry::from_file(file, &meta)?;
        entry.script = self.reach.claims(&self.path, rel);
        let entry = Rc::new(entry);
        self.cache.borrow_mut().insert(rel, &entry);
        Ok(Found::File(entry, false))
    }

    /// The file a URL path names under the root, for an error page (no listing, no
    /// redirect).
    pub fn error_page(&self, url_path: &str) -> Option<Rc<Entry>> {
        let rel = Path::new(std::ffi::OsStr::from_bytes(url_path.trim_start_matches('/').as_bytes()));
        match self.lookup(rel) {
            Ok(Found::File(entry, _)) if !entry.script => Some(entry),
            _ => None,
        }
    }
}

enum Found {
    /// A regular file, and whether it came from the cache.
    File(Rc<Entry>, bool),
    /// The directory, opened: a listing reads it through this descriptor, never by
    /// its path again (which a docroot writer could have swapped for a link since).
    Dir(File),
    Other,
}

/// The static-file handler: where a vhost or a location serves files from, and how.
pub struct StaticFiles<'c> {
    pub root: Rc<Root>,
    /// Bytes of the URL path that the directory stands for (a location's `alias`
    /// replaces its prefix); 0: the whole path is looked up under the root.
    pub strip: usize,
    pub index: &'c [String],
    pub autoindex: bool,
    /// How a listing shows sizes and times.
    pub listing: super::listing::Style,
    pub serve_hidden: bool,
    pub mime: &'c MimeTypes,
    pub max_ranges: usize,
    /// The location's rules for its files: `try_files`, `precompressed`, `compress`.
    pub rules: FileRules,
    /// An index file here may name a script (`index.php` beside a `\.php` location):
    /// every method is let through, and bodies read, for the script it runs.
    pub index_runs: bool,
}

/// How a file goes out when a coding is chosen.
enum Coded {
    /// A precompressed sibling (`app.js.br`), no older than the file.
    Sibling(Coding, Rc<Entry>),
    /// Compressed on the fly: the worker's kept copy, or one made for this answer.
    Fly(Coding, Rc<Kept>),
    Once(Coding, Vec<u8>),
}

impl StaticFiles<'_> {
    /// Serves a GET or HEAD from the root (the gate answers the other methods,
    /// [`crate::kinds::Handler::methods`]; where a script may take the request, every
    /// method comes here and a file answers only GET and HEAD, [`Self::may_redirect`]).
    pub fn serve(&self, ask: &Ask<'_>, reply: &mut Reply<'_>) {
        let tried;
        // try_files applies to the request as the client sent it: its fallback,
        // served again here, is served as it is.
        let path = if self.rules.try_files.is_empty() || ask.redirected {
            ask.path
        } else {
            match try_files::try_files(&self.rules.try_files, ask.path, ask.query, |c, dir| self.names_here(c, dir)) {
                Tried::Found(p) => {
                    tried = p;
                    &tried
                }
                Tried::Fallback(target) => {
                    reply.internal = Some(Internal { target, as_get: false });
                    return;
                }
                Tried::Status(status) => {
                    reply.error(status, "The requested resource was not found.");
                    return;
                }
            }
        };
        if !self.serve_hidden && path.is_hidden() {
            reply.error(404, "The requested resource was not found.");
            return;
        }
        let Some(rel) = self.under_root(path) else {
            reply.error(404, "The requested resource was not found.");
            return;
        };
        match self.root.lookup(rel) {
            Ok(Found::File(entry, _)) if entry.script => {
                if !std::ptr::eq(path, ask.path) {
                    // A try_files candidate that a script location runs: it runs.
                    return redirect_to(path, ask.query, reply);
                }
                script_refused(ask, &self.root.path.join(rel), &entry, reply);
            }
            Ok(Found::File(..)) if !self.answers(ask, reply) => {}
            Ok(Found::File(entry, cached)) => {
                let name = path.bytes.rsplit(|&b| b == b'/').next().unwrap_or(b"");
                // A miss earlier in the request (its index, opened before the
                // internal redirect here) stays its miss.
                reply.cached = Some(cached && reply.cached != Some(false));
                self.answer_file(ask.req, &entry, rel, name, reply);
            }
            Ok(Found::Dir(dir)) => self.directory(ask, path, dir, rel, reply),
            Ok(Found::Other) => {
                reply.error(403, "This resource cannot be served.");
            }
            Err(e) => {
                if matches!(e.raw_os_error(), Some(libc::EXDEV | libc::ELOOP)) {
                    link_refused(&self.root, rel, path);
                }
                open_error(e, reply)
            }
        }
    }

    /// Whether this handler answers the request's method itself (a location that
    /// lets every method through for a script answers only GET and HEAD with
    /// files); when not, `reply` holds the answer.
    fn answers(&self, ask: &Ask<'_>, reply: &mut Reply<'_>) -> bool {
        !self.may_redirect() || Methods::ReadOnly.answers(ask.req.method, reply)
    }

    /// Whether a request may be sent elsewhere to a script: by `try_files` (its last
    /// entry is a path) or by an index that names one; then every method reaches
    /// this handler (the gate's method check is here).
    pub fn may_redirect(&self) -> bool {
        self.index_runs || self.rules.try_files.last().is_some_and(|l| l.starts_with('/'))
    }

    /// Whether a `try_files` candidate names a file here, or (`dir`: its entry ends
    /// in `/`) a directory that answers: one with an index file, or listed.
    fn names_here(&self, candidate: &CleanPath<'_>, dir: bool) -> bool {
        if !self.serve_hidden && candidate.is_hidden() {
            return false;
        }
        let Some(rel) = self.under_root(candidate) else { return false };
        match self.root.lookup(rel) {
            Ok(Found::File(..)) => !dir,
            Ok(Found::Dir(_)) => dir && (self.autoindex || self.index_of(rel).is_some()),
            _ => false,
        }
    }

    /// The first of the index files that the directory `rel` holds, and whether it
    /// came from the cache (false: it was opened now).
    fn index_of(&self, rel: &Path) -> Option<(&str, bool)> {
        self.index.iter().find_map(|i| match self.root.lookup(&rel.join(i)) {
            Ok(Found::File(_, cached)) => Some((i.as_str(), cached)),
            _ => None,
        })
    }

    /// Where `path` lies under the root: the whole path, or (with an alias) what
    /// follows the location's prefix. None: the path only looks like it continues
    /// the prefix (`/imgx` for the prefix `/img`).
    fn under_root<'p>(&self, path: &'p CleanPath<'_>) -> Option<&'p Path> {
        if self.strip == 0 {
            return Some(path.relative());
        }
        let rest = path.bytes.get(self.strip..)?;
        let prefix_ends_a_segment = path.bytes[self.strip - 1] == b'/';
        if !(rest.is_empty() || prefix_ends_a_segment || rest.starts_with(b"/")) {
            return None;
        }
        let rest = rest.strip_prefix(b"/").unwrap_or(rest);
        Some(Path::new(std::ffi::OsStr::from_bytes(rest)))
    }

    /// A directory: redirect to add the slash, else the first index file (served
    /// again at its path: an internal redirect), else a listing. `rel`: where it is
    /// under the root.
    fn directory(&self, ask: &Ask<'_>, path: &CleanPath<'_>, dir: File, rel: &Path, reply: &mut Reply<'_>) {
        let query = ask.query;
        if !path.ends_with_slash() {
            let mut location = encode_path(&path.bytes);
            location.push('/');
            if let Some(q) = query {
                location.push('?');
                location.push_str(&encode_query(q));
            }
            reply.error(301, "The resource has moved; follow the Location header.");
            reply.header("Location", location);
            return;
        }
        if let Some((index, cached)) = self.index_of(rel) {
            // Served at its own path through the vhost's locations, as nginx's
            // `index` does: `index.php` runs where `.php` runs, with the rules there.
            // A file opened for it now counts as this request's miss.
            reply.cached = Some(cached);
            let mut at = path.bytes.to_vec();
            at.extend_from_slice(index.as_bytes());
            return redirect_to(&CleanPath { bytes: at.into() }, query, reply);
        }
        if !self.answers(ask, reply) {
            return;
        }
        if self.autoindex {
            super::listing::render(dir, (self.serve_hidden, self.listing), ask.req, path, query, reply);
        } else {
            reply.error(403, "Directory listing is not allowed here.");
        }
    }

    /// A regular file (at `rel` under the root): in a coding the client accepts when
    /// the location has one for it, else as it is. `name` (the last segment of the
    /// path it was reached by) gives its content type.
    fn answer_file(&self, req: &Request<'_>, entry: &Entry, rel: &Path, name: &[u8], reply: &mut Reply<'_>) {
        let rules = &self.rules;
        if rules.precompressed.is_empty() && rules.compress.is_empty() {
            return self.answer_plain(req, entry, name, None, reply);
        }
        let content_type = self.mime.lookup(name);
        let fly = !rules.compress.is_empty()
            && entry.len >= rules.compress_min_size
            && entry.len <= compress::MAX_FLY_FILE
            && compress::compressible(content_type, &rules.compress_types);
        if !fly && rules.precompressed.is_empty() {
            return self.answer_plain(req, entry, name, None, reply);
        }
        match self.coded(req, entry, rel, fly) {
            Some(Coded::Sibling(c, sibling)) => self.answer_plain(req, &sibling, name, Some(c), reply),
            Some(Coded::Fly(c, kept)) => answer_coded(req, entry, content_type, c, &kept.bytes, reply),
            Some(Coded::Once(c, bytes)) => answer_coded(req, entry, content_type, c, &bytes, reply),
            None => {
                self.answer_plain(req, entry, name, None, reply);
                if reply.status != 412 && reply.status != 416 {
                    reply.header("Vary", "Accept-Encoding");
                }
            }
        }
    }

    /// The coding a file goes out in, if any: a precompressed sibling first (the
    /// client's preference among the siblings there), else a copy compressed on the
    /// fly (`fly`: the file may be; never for a range of it).
    fn coded(&self, req: &Request<'_>, entry: &Entry, rel: &Path, fly: bool) -> Option<Coded> {
        let accept = req.header("accept-encoding")?;
        let rules = &self.rules;
        if !rules.precompressed.is_empty() {
            // Only the siblings that exist (and are not older than the file) are offered.
            let mut there: Vec<(Coding, Rc<Entry>)> = Vec::new();
            for &c in &rules.precompressed {
                let mut name = rel.as_os_str().to_os_string();
                name.push(c.suffix());
                if let Ok(Found::File(sibling, _)) = self.root.lookup(Path::new(&name))
                    && sibling.mtime >= entry.mtime
                {
                    there.push((c, sibling));
                }
            }
            let offered: Vec<Coding> = there.iter().map(|(c, _)| *c).collect();
            if let Some(c) = encoding::choose(Some(accept), &offered) {
                let sibling = there.into_iter().find(|(s, _)| *s == c).map(|(_, e)| e)?;
                return Some(Coded::Sibling(c, sibling));
            }
        }
        if !fly || req.header("range").is_some() {
            return None;
        }
        let c = encoding::choose(Some(accept), &rules.compress)?;
        if let Some(kept) = &entry.coded.borrow()[c.index()] {
            return Some(Coded::Fly(c, kept.clone()));
        }
        // A file sent with sendfile has no mapping of its own: one is made for this
        // compression, once per file version (the copy is kept).
        let bytes = match entry.whole_mapping() {
            Ok(map) => compress::compress(c, &map[..]),
            Err(_) if entry.len == 0 => compress::compress(c, b""),
            Err(e) => {
                log::info!("a {}-byte file sent uncompressed: cannot map it ({e})", entry.len);
                return None;
            }
        };
        match Kept::new(bytes) {
            Ok(kept) => {
                let kept = Rc::new(kept);
                entry.coded.borrow_mut()[c.index()] = Some(kept.clone());
                Some(Coded::Fly(c, kept))
            }
            Err(bytes) => Some(Coded::Once(c, bytes)),
        }
    }

    /// A file's bytes as they are on disk: validators, preconditions, ranges, then
    /// the mapped body. `coding`: the file is a precompressed sibling in that coding
    /// (its own validators and ranges; the content type of `name`, the original).
    fn answer_plain(
        &self,
        req: &Request<'_>,
        entry: &Entry,
        name: &[u8],
        coding: Option<Coding>,
        reply: &mut Reply<'_>,
    ) {
        let (len, mtime, etag) = (entry.len, entry.mtime, &entry.etag);
        if answered_by_conditions(req, entry, coding, reply) {
            return;
        }

        // Range is defined for GET only (RFC 9110 §14.2): HEAD gets the 200 headers.
        let range = if req.method == Method::Get { req.header("range") } else { None };
        let ranges = match range {
            Some(r) if req.header("if-range").is_none_or(|v| conditional::if_range_allows(v, etag, mtime)) => {
                range::parse_range(r, len, self.max_ranges)
            }
            _ => RangeOutcome::Full,
        };
        if let RangeOutcome::Unsatisfiable = ranges {
            reply.error(416, "The requested range is not satisfiable.");
            reply.header("Content-Range", format!("bytes */{len}"));
            return;
        }

        let content_type = || self.mime.lookup(name);
        let rs = match ranges {
            RangeOutcome::Partial(rs) if len > 0 => rs,
            // The whole file (and an empty one): the entry's ready-made header lines.
            _ => return whole(entry, content_type, coding, reply),
        };
        match rs[..] {
            // One range: the same lines, and where the part sits.
            [r] => {
                reply.status = 206;
                whole_file_headers(entry, content_type, coding, reply);
                reply.header("Content-Range", range::content_range(&r, len));
                reply.body = entry.slice(r.start, r.end + 1);
            }
            _ => multipart(entry, &rs, content_type, coding, reply),
        }
    }
}

/// What the request's conditional headers say of the file version `etag`/`mtime`.
fn preconditions(req: &Request<'_>, etag: &str, mtime: u64) -> Precondition {
    let if_match = req.header_list("if-match");
    let if_none_match = req.header_list("if-none-match");
    let conds = Conditions {
        if_match: if_match.as_deref(),
        if_none_match: if_none_match.as_deref(),
        if_modified_since: req.header("if-modified-since"),
        if_unmodified_since: req.header("if-unmodified-since"),
    };
    conditional::evaluate(&conds, etag, mtime, true)
}

/// Answers a request whose conditions say not to send the file (304, 412); false when
/// the file is to be sent.
fn answered_by_conditions(req: &Request<'_>, entry: &Entry, coding: Option<Coding>, reply: &mut Reply<'_>) -> bool {
    let (mtime, etag, last_modified) = (entry.mtime, &entry.etag, &entry.last_modified);
    match preconditions(req, etag, mtime) {
        Precondition::Proceed => false,
        Precondition::NotModified => {
            reply.status = 304;
            reply.header("ETag", etag).header("Last-Modified", last_modified);
            if coding.is_some() {
                reply.header("Vary", "Accept-Encoding");
            }
            reply.body = Body::None;
            true
        }
        Precondition::Failed => {
            reply.error(412, "A precondition in the request did not hold.");
            true
        }
    }
}

/// Several ranges as `multipart/byteranges`, written from a mapping of the file.
fn multipart<'t>(
    entry: &Entry,
    rs: &[range::ByteRange],
    content_type: impl FnOnce() -> &'t str,
    coding: Option<Coding>,
    reply: &mut Reply<'_>,
) {
    let (len, etag, last_modified) = (entry.len, &entry.etag, &entry.last_modified);
    // Several ranges are written from a mapping; a file too large for
    // one under `workers.max_memory` is sent whole, which RFC 9110 §14.2
    // allows (a server may ignore Range).
    let map = match entry.whole_mapping() {
        Ok(map) => map,
        Err(e) => {
            log::info!("ranges of a {len}-byte file sent as the whole file: cannot map it ({e})");
            return whole(entry, content_type, coding, reply);
        }
    };
    reply.status = 206;
    let content_type = content_type();
    reply.header("Last-Modified", last_modified).header("ETag", etag).header("Accept-Ranges", "bytes");
    let boundary = boundary(etag);
    let parts = rs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let head = format!(
                "{}--{boundary}\r\nContent-Type: {content_type}\r\nContent-Range: {}\r\n\r\n",
                if i == 0 { "" } else { "\r\n" },
                range::content_range(r, len)
            );
            (head.into_bytes(), *r)
        })
        .collect();
    if let Some(c) = coding {
        reply.header("Content-Encoding", c.token()).header("Vary", "Accept-Encoding");
    }
    reply.header("Content-Type", format!("multipart/byteranges; boundary={boundary}"));
    reply.body = Body::Multipart { map, parts, tail: format!("\r\n--{boundary}--\r\n").into_bytes() };
}

/// The header lines of a whole file or one range of it: the entry's ready-made
/// ones, or for a precompressed sibling its validators with the original's type and
/// its coding (not cached on the entry: the sibling may be asked for by its own name).
fn whole_file_headers<'t>(
    entry: &Entry,
    content_type: impl FnOnce() -> &'t str,
    coding: Option<Coding>,
    reply: &mut Reply<'_>,
) {
    match coding {
        None => reply.headers.extend_from_slice(entry.file_headers(content_type)),
        Some(c) => {
            reply
                .header("Last-Modified", &entry.last_modified)
                .header("ETag", &entry.etag)
                .header("Accept-Ranges", "bytes")
                .header("Content-Type", content_type())
                .header("Content-Encoding", c.token())
                .header("Vary", "Accept-Encoding");
        }
    }
}

/// A file compressed on the fly: its own ETag per coding, preconditions, the whole
/// compressed body (a range is never asked of it: a Range request gets the file as
/// it is).
fn answer_coded(
    req: &Request<'_>,
    entry: &Entry,
    content_type: &str,
    coding: Coding,
    bytes: &[u8],
    reply: &mut Reply<'_>,
) {
    let etag = compress::coded_etag(&entry.etag, coding);
    match preconditions(req, &etag, entry.mtime) {
        Precondition::Proceed => {}
        Precondition::NotModified => {
            reply.status = 304;
            reply.header("ETag", &etag).header("Last-Modified", &entry.last_modified).header("Vary", "Accept-Encoding");
            reply.body = Body::None;
            return;
        }
        Precondition::Failed => {
            reply.error(412, "A precondition in the request did not hold.");
            return;
        }
    }
    reply
        .header("Last-Modified", &entry.last_modified)
        .header("ETag", &etag)
        .header("Content-Type", content_type)
        .header("Content-Encoding", coding.token())
        .header("Vary", "Accept-Encoding");
    // A copy per answer (a few KiB: the compressed size), which the transports send
    // like any body pika makes.
    reply.body = Body::Owned(bytes.to_vec());
}

/// Serves the request again at `path` (with the request's `query`) through the
/// vhost's locations.
fn redirect_to(path: &CleanPath<'_>, query: Option<&[u8]>, reply: &mut Reply<'_>) {
    let mut target = encode_path(&path.bytes).into_bytes();
    if let Some(q) = query {
        target.push(b'?');
        target.extend_from_slice(q);
    }
    reply.internal = Some(Internal { target, as_get: false });
}

/// A file that a script location runs, reached by its own path at a location that
/// serves files (another vhost's, or one that takes the path from the scripts'):
/// refused, said once per file version in this worker.
#[cold]
fn script_refused(ask: &Ask<'_>, file: &Path, entry: &Entry, reply: &mut Reply<'_>) {
    if !entry.said.replace(true) {
        let mut path = Vec::new();
        crate::log::format::escape_into(&mut path, &ask.path.bytes);
        log::warn!(
            "{}: {} is a script that a script location runs; refused as a file (403): \
             route its path to that location",
            String::from_utf8_lossy(&path),
            file.display()
        );
    }
    reply.error(403, "Access to this resource is forbidden.");
}

/// Paths whose refused link a worker has said, at most this many (then no more are
/// said: an operator has the first ones to go on).
const LINKS_SAID: usize = 64;

thread_local! {
    static SAID_LINKS: RefCell<std::collections::HashSet<PathBuf>> = RefCell::default();
}

/// A path refused (403) for a link the vhost's `symlinks` rule does not follow:
/// said once per path in this worker, with the link, where it points and the rule,
/// so an operator is not left with a bare 403 (a packaged application often links
/// a folder out of its root).
#[cold]
#[inline(never)]
fn link_refused(root: &Root, rel: &Path, path: &CleanPath<'_>) {
    let first = SAID_LINKS.with(|s| {
        let mut s = s.borrow_mut();
        s.len() < LINKS_SAID && s.insert(root.path.join(rel))
    });
    if !first {
        return;
    }
    let mut at = root.path.clone();
    for part in rel.components() {
        at.push(part);
        if std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink()) {
            let to = std::fs::read_link(&at).map_or_else(|e| format!("(unreadable: {e})"), |t| t.display().to_string());
            let (rule, fix) = match root.symlinks {
                Symlinks::Never => ("symlinks = \"never\" follows none", "symlinks = \"inside\" or \"follow\""),
                _ => ("symlinks = \"inside\" follows links that stay under the root", "symlinks = \"follow\""),
            };
            let mut url = Vec::new();
            crate::log::format::escape_into(&mut url, &path.bytes);
            log::warn!(
                "{}: refused (403): {} is a link to {to}, and {rule} ({}); {fix} on the vhost follows it",
                String::from_utf8_lossy(&url),
                at.display(),
                root.path.display()
            );
            return;
        }
    }
}

fn open_error(e: io::Error, reply: &mut Reply<'_>) {
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENOTDIR) | Some(libc::ENAMETOOLONG) => {
            reply.error(404, "The requested resource was not found.");
        }
        // EXDEV: resolution would leave the root; ELOOP: a link where none is allowed.
        Some(libc::EACCES) | Some(libc::EPERM) | Some(libc::EXDEV) | Some(libc::ELOOP) => {
            reply.error(403, "Access to this resource is forbidden.");
        }
        Some(libc::EMFILE) | Some(libc::ENFILE) => {
            crate::log::shortage::report(crate::log::shortage::Op::Open, &e);
            reply.error(503, "The server is out of resources; try again shortly.");
        }
        _ => {
            log::warn!("open failed: {e}");
            reply.error(500, "The resource could not be opened.");
        }
    }
}

/// A query string re-emitted in a Location: bytes outside the safe set are encoded.
fn encode_query(q: &[u8]) -> String {
    let mut s = String::with_capacity(q.len());
    for &b in q {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(&b) {
            s.push(b as char);
        } else {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

/// The whole file, with the entry's ready-made header lines.
fn whole<'t>(entry: &Entry, content_type: impl FnOnce() -> &'t str, coding: Option<Coding>, reply: &mut Reply<'_>) {
    whole_file_headers(entry, content_type, coding, reply);
    reply.body = entry.slice(0, entry.len);
}

/// A multipart boundary that cannot occur in the part heads: derived from the ETag's
/// hex digits and the time, which is all it needs (RFC 2046 only asks it not to appear
/// in the parts, and file bytes are not scanned).
fn boundary(etag: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let tag: String = etag.chars().filter(char::is_ascii_hexdigit).take(16).collect();
    format!("pika_{tag}_{nanos:08x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_reencoded() {
        assert_eq!(encode_query(b"a=1&b=<x>"), "a=1&b=%3Cx%3E");
        assert_eq!(encode_query(b"x\r\nSet-Cookie: y"), "x%0D%0ASet-Cookie:%20y");
    }

    #[test]
    fn boundary_is_token() {
        let b = boundary("\"12ab-34-56\"");
        assert!(b.starts_with("pika_12ab3456_"));
        assert!(b.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_'));
    }
}
