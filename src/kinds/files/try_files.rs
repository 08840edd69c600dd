//! `try_files` on a location with files under it (files, FastCGI): the first entry
//! that names something there answers, in this location; else the last entry does:
//! a status (`=404`), or a path the request is served again at through the vhost's
//! locations (an internal redirect, as nginx does), so that
//! `["$uri", "$uri/", "/index.php?$query_string"]` sends every path that is not a
//! file to a front controller, which sees the original `REQUEST_URI`.
//!
//! In the entries tried, `$uri` is the request's path (decoded, cleaned). In the
//! last one, `$uri` is that path encoded again (it is decoded once more when the
//! redirect is routed), `$query_string` and `$args` the query as sent, `$is_args`
//! `?` when there is one; the redirect's query is what the entry says (none if it
//! names none).

use std::borrow::Cow;

use crate::http::path::{CleanPath, encode_path};

/// What `try_files` found.
pub enum Tried {
    /// An entry that names something here (`exists` said so).
    Found(CleanPath<'static>),
    /// None did: served again at this target (path and query).
    Fallback(Vec<u8>),
    /// None did: this status.
    Status(u16),
}

/// Tries `list` (checked when the config was read: at least two entries, the last
/// a path or `=status`) for `path` with `query`; `exists` tells whether a candidate
/// names something here: a file, or a directory when its entry ends in `/` (the
/// entry decides, as nginx's does: `$uri` of `/` is no file).
pub fn try_files(
    list: &[String],
    path: &CleanPath<'_>,
    query: Option<&[u8]>,
    exists: impl Fn(&CleanPath<'_>, bool) -> bool,
) -> Tried {
    let (last, tried) = list.split_last().expect("checked when the config was read");
    for t in tried {
        let mut p = Vec::with_capacity(t.len() + path.bytes.len());
        let mut rest = t.as_bytes();
        while let Some(at) = rest.windows(4).position(|w| w == b"$uri") {
            p.extend_from_slice(&rest[..at]);
            p.extend_from_slice(&path.bytes);
            rest = &rest[at + 4..];
        }
        p.extend_from_slice(rest);
        // "$uri/" of "/a/" is "/a/", not "/a//".
        while let Some(at) = p.windows(2).position(|w| w == b"//") {
            p.remove(at);
        }
        let candidate = CleanPath { bytes: Cow::Owned(p) };
        if exists(&candidate, t.ends_with('/')) {
            return Tried::Found(candidate);
        }
    }
    if let Some(code) = last.strip_prefix('=') {
        return Tried::Status(code.parse().unwrap_or(404));
    }
    Tried::Fallback(fallback(last, &path.bytes, query))
}

/// The last entry with its variables replaced.
fn fallback(entry: &str, path: &[u8], query: Option<&[u8]>) -> Vec<u8> {
    let mut out = Vec::with_capacity(entry.len() + path.len() + query.map_or(0, <[u8]>::len));
    let mut rest = entry;
    while let Some(at) = rest.find('$') {
        out.extend_from_slice(&rest.as_bytes()[..at]);
        rest = &rest[at..];
        let (value, name_len): (&[u8], usize) = if rest.starts_with("$uri") {
            out.extend_from_slice(encode_path(path).as_bytes());
            (b"", 4)
        } else if rest.starts_with("$query_string") {
            (query.unwrap_or(b""), 13)
        } else if rest.starts_with("$args") {
            (query.unwrap_or(b""), 5)
        } else if rest.starts_with("$is_args") {
            (if query.is_some() { b"?" } else { b"" }, 8)
        } else {
            (b"$", 1)
        };
        out.extend_from_slice(value);
        rest = &rest[name_len..];
    }
    out.extend_from_slice(rest.as_bytes());
    // "/index.php?" with no query: no query at all.
    if out.ends_with(b"?") {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(l: &[&str]) -> Vec<String> {
        l.iter().map(|s| s.to_string()).collect()
    }

    fn path(p: &str) -> CleanPath<'static> {
        CleanPath { bytes: Cow::Owned(p.as_bytes().to_vec()) }
    }

    #[test]
    fn the_first_entry_that_exists_answers() {
        let l = list(&["$uri", "$uri/", "/index.php?$query_string"]);
        let only_dirs = |_: &CleanPath<'_>, dir: bool| dir;
        match try_files(&l, &path("/docs"), None, only_dirs) {
            Tried::Found(p) => assert_eq!(&p.bytes[..], b"/docs/"),
            _ => panic!("the directory"),
        }
        match try_files(&l, &path("/docs/"), None, only_dirs) {
            Tried::Found(p) => assert_eq!(&p.bytes[..], b"/docs/", "no double slash"),
            _ => panic!("the directory"),
        }
    }

    #[test]
    fn none_existing_sends_the_request_to_the_last_entry() {
        let l = list(&["$uri", "$uri/", "/index.php?$query_string"]);
        let nothing = |_: &CleanPath<'_>, _| false;
        let target = |q, l: &[String]| match try_files(l, &path("/users/7 x"), q, nothing) {
            Tried::Fallback(t) => String::from_utf8(t).unwrap(),
            _ => panic!("a fallback"),
        };
        assert_eq!(target(Some(&b"a=1&b=2"[..]), &l), "/index.php?a=1&b=2");
        assert_eq!(target(None, &l), "/index.php");
        let l = list(&["$uri", "/index.php$uri$is_args$args"]);
        assert_eq!(target(Some(&b"a=1"[..]), &l), "/index.php/users/7%20x?a=1", "the path encoded again");
        assert_eq!(target(None, &l), "/index.php/users/7%20x");
        let l = list(&["$uri", "=404"]);
        assert!(matches!(try_files(&l, &path("/x"), None, nothing), Tried::Status(404)));
    }
}
