//! The path gate on arbitrary bytes: `clean` (request-target → path under the root)
//! and `encode_path` (path → `Location` / href).
//!
//! The input is used twice. As a request-target: whatever `clean` accepts starts with
//! '/', has no NUL, no '\', no `.`/`..` or empty segments, cannot leave the root when
//! joined under it, and survives `encode_path` then `clean` unchanged. As a decoded
//! path: `clean(encode_path(p))` decodes back to `p`'s own dot-segment removal, so
//! encoding loses nothing and `clean` decodes exactly once.
#![no_main]

use std::path::{Component, Path};

use libfuzzer_sys::fuzz_target;
use pika::http::path::{PathError, clean, encode_path};

fuzz_target!(|data: &[u8]| {
    as_target(data);
    as_decoded_path(data);
});

fn as_target(target: &[u8]) {
    let Ok((path, query)) = clean(target) else { return };
    let bytes = &path.bytes;
    assert!(bytes.starts_with(b"/"), "{bytes:?}");
    assert!(!bytes.contains(&0), "{bytes:?}");
    assert!(!bytes.contains(&b'\\'), "{bytes:?}");
    assert!(!bytes.windows(2).any(|w| w == b"//"), "{bytes:?}");
    assert!(path.segments().all(|s| s != b"." && s != b".."), "{bytes:?}");

    let expected_query = target.iter().position(|&b| b == b'?').map(|i| &target[i + 1..]);
    assert_eq!(query, expected_query);

    let rel = path.relative();
    assert!(rel.components().all(|c| matches!(c, Component::Normal(_))), "{rel:?}");
    let root = Path::new("/srv/root");
    assert!(root.join(rel).starts_with(root), "{rel:?}");

    let encoded = encode_path(bytes);
    let again = clean(encoded.as_bytes()).expect("an encoded clean path is clean");
    assert_eq!(again, (path.clone(), None));
}

fn as_decoded_path(p: &[u8]) {
    let encoded = encode_path(p);
    assert!(encoded.is_ascii());
    let result = clean(encoded.as_bytes());
    if !p.starts_with(b"/") {
        assert_eq!(result, Err(PathError::NotOriginForm));
        return;
    }
    // NUL and '\' are encoded, and `clean` refuses them encoded too.
    if p.contains(&0) || p.contains(&b'\\') {
        assert!(result.is_err(), "{p:?}");
        return;
    }
    match (result, remove_dot_segments(p)) {
        (Ok((path, None)), Some(want)) => assert_eq!(path.bytes, want, "{p:?}"),
        (Err(PathError::Escapes), None) => {}
        (got, want) => panic!("{p:?}: clean gave {got:?}, dot-segment removal {want:?}"),
    }
}

/// RFC 3986 §5.2.4 on a decoded path, written independently of pika's: `None` when
/// it climbs above the root. Empty segments collapse, and a path ending in a dot
/// segment names a directory.
fn remove_dot_segments(p: &[u8]) -> Option<Vec<u8>> {
    let mut stack: Vec<&[u8]> = Vec::new();
    let segments: Vec<&[u8]> = p[1..].split(|&b| b == b'/').collect();
    let last = segments.last().copied().unwrap_or_default();
    for seg in &segments {
        match *seg {
            b"" | b"." => {}
            b".." => {
                stack.pop()?;
            }
            name => stack.push(name),
        }
    }
    let mut out = Vec::new();
    for seg in &stack {
        out.push(b'/');
        out.extend_from_slice(seg);
    }
    // A trailing '/', '/.' or '/..' leaves a directory; so does the root itself.
    if out.is_empty() || matches!(last, b"" | b"." | b"..") {
        out.push(b'/');
    }
    Some(out)
}
