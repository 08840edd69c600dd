//! Turning a raw request-target into a path that is safe to join under the
//! document root, and encoding paths back for `Location` headers and HTML.
//!
//! This is the one gate between bytes from the network and the filesystem,
//! so it is strict and pure: it decodes percent-escapes once, refuses
//! anything that could smuggle a separator or a NUL past that step, removes
//! dot segments *after* decoding (so `%2e%2e` is `..`), and treats a climb
//! above `/` as an error rather than clamping it, as Apache httpd does. The
//! result never contains `.`/`..` or empty segments, so joining it under the
//! root cannot leave the root by name (symlinks are the caller's business).

use std::borrow::Cow;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Why a request-target was refused; each is a client error (400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("request target is not origin-form")]
    NotOriginForm,
    #[error("bad percent-encoding")]
    BadEscape,
    #[error("encoded slash")]
    EncodedSlash,
    #[error("NUL byte")]
    Nul,
    #[error("backslash")]
    Backslash,
    #[error("path escapes the root")]
    Escapes,
}

/// A normalised path: decoded bytes (not necessarily UTF-8), always starts
/// with '/', no '.' or '..' segments, no empty segments ('//' collapses to
/// '/'), trailing '/' kept if the target had one (after dot removal:
/// '/a/b/..' → '/a/'). A target that is already clean is borrowed, not copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanPath<'a> {
    pub bytes: Cow<'a, [u8]>,
}

impl CleanPath<'_> {
    /// True for `/` and for directory-style paths such as `/a/`.
    pub fn ends_with_slash(&self) -> bool {
        self.bytes.ends_with(b"/")
    }

    /// Segments, for hidden-file checks (any segment starting with '.').
    pub fn segments(&self) -> impl Iterator<Item = &[u8]> {
        self.bytes.split(|&b| b == b'/').filter(|s| !s.is_empty())
    }

    /// True if any segment is a dot-file or dot-directory (`.git`, `.env`,
    /// `.htpasswd`), except a first segment `.well-known`: RFC 8615's folder for
    /// what a site must publish (ACME challenges, `security.txt`). A dot-name below
    /// it is hidden again.
    pub fn is_hidden(&self) -> bool {
        let mut segments = self.segments();
        let first = segments.next().is_some_and(|s| s.starts_with(b".") && s != b".well-known");
        first || segments.any(|s| s.starts_with(b"."))
    }

    /// Relative form (no leading '/'), built from the raw bytes with
    /// `OsStrExt`, for joining under the document root.
    ///
    /// For `/` this is the empty path; `root.join("")` is `root/`.
    pub fn relative(&self) -> &Path {
        let rel = self.bytes.strip_prefix(b"/").unwrap_or(&self.bytes);
        Path::new(OsStr::from_bytes(rel))
    }
}

/// Decodes and normalises a request-target. `target` is the raw
/// request-target (path + optional '?query'); the query is split off at the
/// first '?' and returned raw, neither decoded nor checked.
pub fn clean(target: &[u8]) -> Result<(CleanPath<'_>, Option<&[u8]>), PathError> {
    let (path, query) = match target.iter().position(|&b| b == b'?') {
        Some(i) => (&target[..i], Some(&target[i + 1..])),
        None => (target, None),
    };
    // why: only origin-form reaches a static file server; `*` (OPTIONS) and
    // absolute-form (proxies) are answered elsewhere or refused.
    if !path.starts_with(b"/") {
        return Err(PathError::NotOriginForm);
    }
    let decoded = percent_decode(path)?;
    Ok((remove_dot_segments(decoded)?, query))
}

/// Percent-encodes a decoded path for a `Location` header or an HTML href.
///
/// Left as they are: unreserved chars (A-Z a-z 0-9 - . _ ~), '/', and the
/// path-safe sub-delims ! $ ( ) * + , ; = : @. Everything else is encoded,
/// including '&' and '\'' (so the result can go straight into an HTML
/// attribute), '%', '?', '#', space, controls and bytes >= 0x80.
pub fn encode_path(decoded: &[u8]) -> String {
    let mut out = String::with_capacity(decoded.len());
    for &b in decoded {
        if keep_unencoded(b) {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
    out
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

/// Bytes [`encode_path`] may emit as themselves.
///
/// why: this is the RFC 3986 `pchar` set plus `/`, minus `&` and `'` which
/// are special in HTML; `"`, `<` and `>` are not pchars to begin with. The
/// result is then safe both as a URI path and inside a quoted attribute.
fn keep_unencoded(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'.'
                | b'_'
                | b'~'
                | b'/'
                | b'!'
                | b'$'
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
        )
}

/// Decodes `%XX` escapes once, refusing the bytes that must never appear
/// in a decoded path.
///
/// why: an encoded `/` or `\` would let a single segment act as two after
/// decoding (and `\` is a separator to some tools and to Windows clients'
/// expectations); a NUL would truncate the name at the C boundary. Apache
/// refuses `%2F` by default (`AllowEncodedSlashes Off`), and so do we.
fn percent_decode(path: &[u8]) -> Result<Cow<'_, [u8]>, PathError> {
    // Nearly every path has nothing to decode or refuse: it is used as it came.
    // (`fold`, not `any`: no early exit, so the compiler can test many bytes at once.)
    if !path.iter().fold(false, |special, &b| special | matches!(b, b'%' | b'\\' | 0)) {
        return Ok(Cow::Borrowed(path));
    }
    let mut out = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        let b = match path[i] {
            b'%' => {
                let hi = path.get(i + 1).and_then(|&h| hex_value(h));
                let lo = path.get(i + 2).and_then(|&l| hex_value(l));
                let (Some(hi), Some(lo)) = (hi, lo) else {
                    return Err(PathError::BadEscape);
                };
                i += 3;
                match (hi << 4) | lo {
                    b'/' | b'\\' => return Err(PathError::EncodedSlash),
                    0 => return Err(PathError::Nul),
                    b => b,
                }
            }
            b'\\' => return Err(PathError::Backslash),
            0 => return Err(PathError::Nul),
            b => {
                i += 1;
                b
            }
        };
        out.push(b);
    }
    Ok(Cow::Owned(out))
}

fn hex_value(b: u8) -> Option<u8> {
    char::from(b).to_digit(16).map(|d| d as u8)
}

/// RFC 3986 §5.2.4 dot-segment removal on an already decoded path that starts
/// with `/`, also collapsing empty segments; climbing above the root fails.
///
/// A path with nothing to remove comes back as it came (borrowed from the request
/// when nothing was decoded). Otherwise the work is in place: each kept segment is
/// written as `/name` at or before the place it was read from, so the decoded
/// buffer (or one copy of the borrowed path) becomes the result.
fn remove_dot_segments(buf: Cow<'_, [u8]>) -> Result<CleanPath<'_>, PathError> {
    // Without a "//" or a "/." no segment is empty, "." or "..": the path is clean
    // as it came.
    if !buf.windows(2).fold(false, |found, w| found | (w[0] == b'/' && matches!(w[1], b'/' | b'.'))) {
        return Ok(CleanPath { bytes: buf });
    }
    let mut buf = buf.into_owned();
    let n = buf.len();
    // `w`: length of the result so far, always <= `sep`, the '/' that opens the
    // segment being read, so writing never overtakes reading.
    let mut w = 0;
    // why: `/a/b/..` names the directory `/a/`, so a path ending in a dot
    // segment keeps a trailing slash, just as one ending in `/` does.
    let mut trailing_slash = false;
    let mut sep = 0;
    while sep < n {
        let start = sep + 1;
        let end = buf[start..].iter().position(|&b| b == b'/').map_or(n, |i| start + i);
        trailing_slash = true;
        match &buf[start..end] {
            b"" | b"." => {}
            b".." => {
                // Back to the '/' that opened the last kept segment.
                w = buf[..w].iter().rposition(|&b| b == b'/').ok_or(PathError::Escapes)?;
            }
            _ => {
                buf[w] = b'/';
                buf.copy_within(start..end, w + 1);
                w += 1 + (end - start);
                trailing_slash = false;
            }
        }
        sep = end;
    }
    buf.truncate(w);
    if w == 0 || trailing_slash {
        // Within the capacity: a dropped last segment left `w` before its '/'.
        buf.push(b'/');
    }
    Ok(CleanPath { bytes: Cow::Owned(buf) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(target: &[u8]) -> Vec<u8> {
        clean(target).expect("clean").0.bytes.into_owned()
    }

    fn err(target: &[u8]) -> PathError {
        clean(target).expect_err("should be refused")
    }

    #[test]
    fn plain_paths() {
        assert_eq!(ok(b"/"), b"/");
        assert_eq!(ok(b"/index.html"), b"/index.html");
        assert_eq!(ok(b"/a/b/c.txt"), b"/a/b/c.txt");
        assert_eq!(ok(b"/dir/"), b"/dir/");
    }

    #[test]
    fn not_origin_form() {
        for t in [&b""[..], b"*", b"http://x/", b"a/b", b"?x=1", b"%2Fa"] {
            assert_eq!(err(t), PathError::NotOriginForm, "{t:?}");
        }
    }

    #[test]
    fn dot_segments_are_removed() {
        assert_eq!(ok(b"/a/./b/../c"), b"/a/c");
        assert_eq!(ok(b"/a/b/.."), b"/a/");
        assert_eq!(ok(b"/a/b/../"), b"/a/");
        assert_eq!(ok(b"/a/."), b"/a/");
        assert_eq!(ok(b"/a/.."), b"/");
        assert_eq!(ok(b"/."), b"/");
        assert_eq!(ok(b"/./"), b"/");
        assert_eq!(ok(b"/a/b/../../c"), b"/c");
    }

    #[test]
    fn dots_inside_names_are_ordinary() {
        assert_eq!(ok(b"/..."), b"/...");
        assert_eq!(ok(b"/..a"), b"/..a");
        assert_eq!(ok(b"/a.."), b"/a..");
        assert_eq!(ok(b"/.well-known/x"), b"/.well-known/x");
    }

    #[test]
    fn empty_segments_collapse() {
        assert_eq!(ok(b"//a//b"), b"/a/b");
        assert_eq!(ok(b"//"), b"/");
        assert_eq!(ok(b"/a//"), b"/a/");
        assert_eq!(ok(b"///a/.//b///"), b"/a/b/");
    }

    #[test]
    fn climbing_above_root_is_an_error() {
        for t in [&b"/.."[..], b"/../", b"/../a", b"/a/../../b", b"/a/b/../../..", b"//..", b"/./.."] {
            assert_eq!(err(t), PathError::Escapes, "{t:?}");
        }
    }

    #[test]
    fn encoded_dot_dot_is_dot_dot() {
        for t in [&b"/%2e%2e"[..], b"/%2E%2e", b"/%2E%2E/", b"/.%2e", b"/%2e.", b"/a/%2e%2e/%2e%2e/etc/passwd"] {
            assert_eq!(err(t), PathError::Escapes, "{t:?}");
        }
        assert_eq!(ok(b"/a/%2e%2e/b"), b"/b");
        assert_eq!(ok(b"/a/%2e/b"), b"/a/b");
    }

    #[test]
    fn double_encoding_decodes_once() {
        assert_eq!(ok(b"/%252e%252e"), b"/%2e%2e");
        assert_eq!(ok(b"/a/%252e%252e/b"), b"/a/%2e%2e/b");
        assert_eq!(ok(b"/%252F"), b"/%2F");
    }

    #[test]
    fn nul_is_refused() {
        assert_eq!(err(b"/a%00b"), PathError::Nul);
        assert_eq!(err(b"/a\0b"), PathError::Nul);
    }

    #[test]
    fn encoded_separators_are_refused() {
        for t in [&b"/a%2fb"[..], b"/a%2Fb", b"/%2f", b"/a%5cb", b"/a%5C..%5Cb"] {
            assert_eq!(err(t), PathError::EncodedSlash, "{t:?}");
        }
    }

    #[test]
    fn raw_backslash_is_refused() {
        assert_eq!(err(b"/a\\b"), PathError::Backslash);
        assert_eq!(err(b"/..\\..\\windows"), PathError::Backslash);
    }

    #[test]
    fn bad_escapes() {
        for t in [&b"/%"[..], b"/a%", b"/%g0", b"/%0g", b"/%2", b"/%2/", b"/% 20", b"/%+1"] {
            assert_eq!(err(t), PathError::BadEscape, "{t:?}");
        }
    }

    #[test]
    fn escapes_decode_either_case() {
        assert_eq!(ok(b"/a%20b"), b"/a b");
        assert_eq!(ok(b"/%41%6a%6A"), b"/Ajj");
        assert_eq!(ok(b"/100%25"), b"/100%");
    }

    #[test]
    fn a_clean_target_is_borrowed_not_copied() {
        assert!(matches!(clean(b"/a/b.html?x=1").unwrap().0.bytes, Cow::Borrowed(b"/a/b.html")));
        assert!(matches!(clean(b"/a%20b").unwrap().0.bytes, Cow::Owned(_)));
        assert!(matches!(clean(b"/a/./b").unwrap().0.bytes, Cow::Owned(_)));
    }

    #[test]
    fn query_is_split_off_raw() {
        let (p, q) = clean(b"/a?x=1").unwrap();
        assert_eq!(*p.bytes, *b"/a");
        assert_eq!(q, Some(&b"x=1"[..]));

        let (p, q) = clean(b"/a?").unwrap();
        assert_eq!(*p.bytes, *b"/a");
        assert_eq!(q, Some(&b""[..]));

        let (_, q) = clean(b"/a").unwrap();
        assert_eq!(q, None);

        // The query is neither decoded nor validated, and only the first '?' splits.
        let (p, q) = clean(b"/?a=%zz/../..&b=?c").unwrap();
        assert_eq!(*p.bytes, *b"/");
        assert_eq!(q, Some(&b"a=%zz/../..&b=?c"[..]));
    }

    #[test]
    fn encoded_question_mark_is_part_of_the_name() {
        let (p, q) = clean(b"/what%3F.txt?x").unwrap();
        assert_eq!(*p.bytes, *b"/what?.txt");
        assert_eq!(q, Some(&b"x"[..]));
    }

    #[test]
    fn utf8_and_non_utf8_bytes_pass_through() {
        assert_eq!(ok("/caf\u{e9}".as_bytes()), "/caf\u{e9}".as_bytes());
        assert_eq!(ok(b"/caf%C3%A9"), "/caf\u{e9}".as_bytes());
        assert_eq!(ok(b"/x%FFy"), b"/x\xffy");
        assert_eq!(ok(b"/raw\xfe"), b"/raw\xfe");
    }

    #[test]
    fn clean_path_accessors() {
        let p = clean(b"/a/.git/config").unwrap().0;
        assert!(!p.ends_with_slash());
        assert_eq!(p.segments().collect::<Vec<_>>(), [&b"a"[..], b".git", b"config"]);
        assert!(p.is_hidden());
        assert_eq!(p.relative(), Path::new("a/.git/config"));
        for shown in [&b"/.well-known/acme-challenge/tok"[..], b"/.well-known/security.txt", b"/.well-known/"] {
            assert!(!clean(shown).unwrap().0.is_hidden(), "{}", String::from_utf8_lossy(shown));
        }
        for hidden in [&b"/.well-known/.git/config"[..], b"/a/.well-known/x", b"/.env", b"/.htpasswd", b"/.well-knownx"]
        {
            assert!(clean(hidden).unwrap().0.is_hidden(), "{}", String::from_utf8_lossy(hidden));
        }

        let root = clean(b"/").unwrap().0;
        assert!(root.ends_with_slash());
        assert_eq!(root.segments().count(), 0);
        assert!(!root.is_hidden());
        assert_eq!(root.relative(), Path::new(""));
        assert_eq!(Path::new("/srv").join(root.relative()), Path::new("/srv/"));

        let dir = clean(b"/a/b/").unwrap().0;
        assert!(dir.ends_with_slash());
        assert!(!dir.is_hidden());
        assert_eq!(dir.relative(), Path::new("a/b/"));
        assert_eq!(clean(b"/%2egit").unwrap().0.relative(), Path::new(".git"));
    }

    #[test]
    fn relative_keeps_non_utf8_bytes() {
        let p = clean(b"/d/%FF").unwrap().0;
        assert_eq!(p.relative().as_os_str().as_bytes(), b"d/\xff");
    }

    #[test]
    fn encode_path_keeps_safe_bytes() {
        assert_eq!(encode_path(b"/a/B-9._~/"), "/a/B-9._~/");
        assert_eq!(encode_path(b"!$()*+,;=:@"), "!$()*+,;=:@");
    }

    #[test]
    fn encode_path_encodes_the_rest() {
        assert_eq!(encode_path(b"a b"), "a%20b");
        assert_eq!(encode_path(b"%?#"), "%25%3F%23");
        assert_eq!(encode_path(b"&'\"<>"), "%26%27%22%3C%3E");
        assert_eq!(encode_path(b"\x00\x1f\x7f"), "%00%1F%7F");
        assert_eq!(encode_path("é".as_bytes()), "%C3%A9");
        assert_eq!(encode_path(b"\xff"), "%FF");
        assert_eq!(encode_path(b"[]{}|\\^`"), "%5B%5D%7B%7D%7C%5C%5E%60");
    }

    #[test]
    fn encode_path_output_is_html_attribute_safe() {
        let all: Vec<u8> = (0..=255).collect();
        let encoded = encode_path(&all);
        assert!(encoded.is_ascii());
        assert!(!encoded.contains(['&', '\'', '"', '<', '>', ' ', '?', '#']));
        assert_eq!(crate::base::text::html_escape(&encoded), encoded);
    }

    /// A tiny LCG (no proptest): random targets must never panic, and
    /// anything accepted must be normalised and survive an encode round trip.
    #[test]
    fn random_targets_are_safe() {
        const ALPHABET: &[u8] = b"/././%%2e2E5cCfF0a?\\\x00\xff";
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) as usize
        };
        for _ in 0..50_000 {
            let len = next() % 24;
            let mut target = vec![b'/'];
            target.extend((0..len).map(|_| {
                let r = next();
                if r % 8 == 0 { (r >> 3) as u8 } else { ALPHABET[r % ALPHABET.len()] }
            }));
            let Ok((path, _)) = clean(&target) else {
                continue;
            };
            let b = &path.bytes;
            assert!(b.starts_with(b"/"), "{target:?}");
            assert!(!b.windows(2).any(|w| w == b"//"), "{target:?}");
            assert!(!b.contains(&0) && !b.contains(&b'\\'), "{target:?}");
            assert!(path.segments().all(|s| s != b"." && s != b".."), "{target:?}");
            let encoded = encode_path(b);
            let again = clean(encoded.as_bytes()).expect("re-clean").0;
            assert_eq!(again, path, "{target:?}");
        }
    }

    /// RFC 3986 dot removal as a list of kept segments: the plain statement of
    /// what the in-place [`remove_dot_segments`] computes.
    fn by_segment_list(decoded: &[u8]) -> Result<Vec<u8>, PathError> {
        let mut kept: Vec<&[u8]> = Vec::new();
        let mut trailing_slash = false;
        for seg in decoded.split(|&b| b == b'/') {
            trailing_slash = true;
            match seg {
                b"" | b"." => {}
                b".." => {
                    kept.pop().ok_or(PathError::Escapes)?;
                }
                name => {
                    kept.push(name);
                    trailing_slash = false;
                }
            }
        }
        let mut out: Vec<u8> = kept.iter().flat_map(|s| [&b"/"[..], s]).flatten().copied().collect();
        if out.is_empty() || trailing_slash {
            out.push(b'/');
        }
        Ok(out)
    }

    #[test]
    fn in_place_dot_removal_matches_the_segment_list() {
        const PIECES: [&[u8]; 6] = [b"/", b".", b"..", b"a", b"bc", b"..."];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) as usize
        };
        for _ in 0..50_000 {
            let mut path = vec![b'/'];
            for _ in 0..next() % 12 {
                path.extend_from_slice(PIECES[next() % PIECES.len()]);
            }
            let got = remove_dot_segments(Cow::Borrowed(&path)).map(|c| c.bytes.into_owned());
            assert_eq!(got, by_segment_list(&path), "{:?}", String::from_utf8_lossy(&path));
        }
    }
}
