//! Serving a path under a vhost's root: files (with validators, conditionals and
//! ranges), directories (redirect, index file, listing), and the refusals in between.
//!
//! Paths are opened with `openat2(RESOLVE_BENEATH)` relative to the root directory's
//! descriptor, so the kernel refuses anything that would leave the root, links
//! included (DESIGN §3).

use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::rc::Rc;
use std::time::UNIX_EPOCH;

use memmap2::Mmap;

use super::file_cache::{Entry, FileCache, SENDFILE_MIN};
use crate::config::Vhost;
use crate::http::conditional::{self, Conditions, Precondition};
use crate::http::mime::MimeTypes;
use crate::http::path::{CleanPath, encode_path};
use crate::http::range::{self, RangeOutcome};
use crate::http::request::{Method, Request};
use crate::http::response::{ALLOW, Body, Reply};
use crate::sys;

/// One vhost as a worker serves it: its config, an open descriptor on its root, and
/// the files it recently served.
pub struct Site<'c> {
    pub vhost: &'c Vhost,
    pub root: File,
    cache: RefCell<FileCache>,
}

impl<'c> Site<'c> {
    pub fn open(vhost: &'c Vhost, check_interval: std::time::Duration) -> io::Result<Site<'c>> {
        let root = File::open(&vhost.root)?;
        let cache = FileCache::new(check_interval);
        Ok(Site { vhost, root, cache: RefCell::new(cache) })
    }

    /// Sending a file failed because it shrank (see `connection`): look at every
    /// cached file again before its next use.
    pub fn files_changed(&self) {
        self.cache.borrow().distrust();
    }

    /// What `rel` names under the root: a file ready to send (from the cache when it
    /// is still the same file), a directory, or something not to serve.
    fn lookup(&self, rel: &Path) -> io::Result<Found> {
        if !rel.as_os_str().is_empty() {
            if let Some(entry) = self.cache.borrow_mut().fresh(self.root.as_fd(), rel) {
                return Ok(Found::File(entry));
            }
        }
        let file = sys::open_beneath(self.root.as_fd(), &self.vhost.root, rel, self.vhost.symlinks)?;
        crate::log::shortage::recovered(crate::log::shortage::Op::Open);
        let meta = file.metadata()?;
        if meta.is_dir() {
            return Ok(Found::Dir(file));
        }
        if !meta.is_file() {
            return Ok(Found::Other);
        }
        let entry = Rc::new(Entry::from_file(file, &meta)?);
        self.cache.borrow_mut().insert(rel, &entry);
        Ok(Found::File(entry))
    }
}

enum Found {
    File(Rc<Entry>),
    /// The directory, opened: a listing reads it through this descriptor, never by
    /// its path again (which a docroot writer could have swapped for a link since).
    Dir(File),
    Other,
}

/// What the handler needs besides the request.
pub struct Env<'a> {
    pub mime: &'a MimeTypes,
    pub max_ranges: usize,
}

/// Serves `path` (already cleaned) for a GET or HEAD.
pub fn serve(
    site: &Site<'_>,
    env: &Env<'_>,
    req: &Request<'_>,
    path: &CleanPath<'_>,
    query: Option<&[u8]>,
    reply: &mut Reply<'_>,
) {
    match req.method {
        Method::Get | Method::Head => {}
        Method::Options => {
            reply.header("Allow", ALLOW);
            reply.body = Body::Owned(Vec::new());
            return;
        }
        Method::OtherKnown => {
            reply.error(405, "This resource only answers GET, HEAD and OPTIONS.");
            return;
        }
    }
    if !site.vhost.serve_hidden && path.is_hidden() {
        reply.error(404, "The requested resource was not found.");
        return;
    }
    match site.lookup(path.relative()) {
        Ok(Found::File(entry)) => {
            let name = path.bytes.rsplit(|&b| b == b'/').next().unwrap_or(b"");
            send_file(env, req, &entry, name, reply);
        }
        Ok(Found::Dir(dir)) => directory(site, env, req, dir, path, query, reply),
        Ok(Found::Other) => {
            reply.error(403, "This resource cannot be served.");
        }
        Err(e) => open_error(e, reply),
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

/// A directory: redirect to add the slash, else the first index file, else a listing.
fn directory(
    site: &Site<'_>,
    env: &Env<'_>,
    req: &Request<'_>,
    dir: File,
    path: &CleanPath<'_>,
    query: Option<&[u8]>,
    reply: &mut Reply<'_>,
) {
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
    for index in &site.vhost.index {
        if let Ok(Found::File(entry)) = site.lookup(&path.relative().join(index)) {
            return send_file(env, req, &entry, index.as_bytes(), reply);
        }
    }
    if site.vhost.autoindex {
        super::listing::render(site, dir, req, path, query, reply);
    } else {
        reply.error(403, "Directory listing is not allowed here.");
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

/// Bytes `start..end` of a file: by `sendfile` when there are at least
/// [`SENDFILE_MIN`] of them and the entry kept its descriptor, else from the mapping.
fn slice(entry: &Entry, map: Rc<Mmap>, start: u64, end: u64) -> Body {
    match &entry.file {
        Some(file) if end - start >= SENDFILE_MIN => Body::File { file: file.clone(), start, end },
        _ => Body::Mapped { map, start: start as usize, end: end as usize },
    }
}

/// A regular file: validators, preconditions, ranges, then the mapped body. `name`
/// (the last segment of the path it was reached by) gives its content type.
fn send_file(env: &Env<'_>, req: &Request<'_>, entry: &Entry, name: &[u8], reply: &mut Reply<'_>) {
    let (len, mtime, etag, last_modified) = (entry.len, entry.mtime, &entry.etag, &entry.last_modified);
    let if_match = req.header_list("if-match");
    let if_none_match = req.header_list("if-none-match");
    let conds = Conditions {
        if_match: if_match.as_deref(),
        if_none_match: if_none_match.as_deref(),
        if_modified_since: req.header("if-modified-since"),
        if_unmodified_since: req.header("if-unmodified-since"),
    };
    match conditional::evaluate(&conds, etag, mtime, true) {
        Precondition::Proceed => {}
        Precondition::NotModified => {
            reply.status = 304;
            reply.header("ETag", etag).header("Last-Modified", last_modified);
            reply.body = Body::None;
            return;
        }
        Precondition::Failed => {
            reply.error(412, "A precondition in the request did not hold.");
            return;
        }
    }

    // Range is defined for GET only (RFC 9110 §14.2): HEAD gets the 200 headers.
    let range = if req.method == Method::Get { req.header("range") } else { None };
    let ranges = match range {
        Some(r) if req.header("if-range").is_none_or(|v| conditional::if_range_allows(v, etag, mtime)) => {
            range::parse_range(r, len, env.max_ranges)
        }
        _ => RangeOutcome::Full,
    };
    if let RangeOutcome::Unsatisfiable = ranges {
        reply.error(416, "The requested range is not satisfiable.");
        reply.header("Content-Range", format!("bytes */{len}"));
        return;
    }

    let content_type = || env.mime.lookup(name);
    // The whole file (and an empty one): the entry's ready-made header lines.
    let (map, rs) = match (entry.map.clone(), ranges) {
        (Some(map), RangeOutcome::Partial(rs)) => (map, rs),
        (map, _) => {
            reply.headers.extend_from_slice(entry.file_headers(content_type));
            reply.body = match map {
                Some(map) => slice(entry, map, 0, len),
                None => Body::Owned(Vec::new()),
            };
            return;
        }
    };
    reply.status = 206;
    match rs[..] {
        // One range: the same lines, and where the part sits.
        [r] => {
            reply.headers.extend_from_slice(entry.file_headers(content_type));
            reply.header("Content-Range", range::content_range(&r, len));
            reply.body = slice(entry, map, r.start, r.end + 1);
        }
        _ => {
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
            reply.header("Content-Type", format!("multipart/byteranges; boundary={boundary}"));
            reply.body = Body::Multipart { map, parts, tail: format!("\r\n--{boundary}--\r\n").into_bytes() };
        }
    }
}

/// A multipart boundary that cannot occur in the part heads: derived from the ETag's
/// hex digits and the time, which is all it needs (RFC 2046 only asks it not to appear
/// in the parts, and file bytes are not scanned).
fn boundary(etag: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    let tag: String = etag.chars().filter(char::is_ascii_hexdigit).take(16).collect();
    format!("pika_{tag}_{nanos:08x}")
}

/// Opens a vhost-relative URL path for an error page (no listing, no redirect).
pub fn open_error_page(site: &Site<'_>, url_path: &str) -> Option<Rc<Entry>> {
    let rel = Path::new(std::ffi::OsStr::from_bytes(url_path.trim_start_matches('/').as_bytes()));
    match site.lookup(rel) {
        Ok(Found::File(entry)) => Some(entry),
        _ => None,
    }
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
