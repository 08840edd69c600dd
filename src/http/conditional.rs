//! Conditional requests (RFC 9110 §13) for a static file: deciding between
//! 200, 304 and 412 from the request's precondition headers, whether an
//! `If-Range` lets a `Range` through, and how we mint the file's `ETag`.
//!
//! The precedence rules of §13.2.2 are subtle enough (which header is looked
//! at when another is present, weak versus strong comparison, invalid dates
//! being ignored) that they live here as pure functions over raw header bytes,
//! tested case by case, instead of being spread through the response path.

use std::time::UNIX_EPOCH;

/// Result of evaluating the preconditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Precondition {
    /// Serve the request as usual.
    Proceed,
    /// 304 Not Modified.
    NotModified,
    /// 412 Precondition Failed.
    Failed,
}

/// The raw values of the four precondition headers, `None` when absent.
pub struct Conditions<'a> {
    pub if_match: Option<&'a [u8]>,
    pub if_none_match: Option<&'a [u8]>,
    pub if_modified_since: Option<&'a [u8]>,
    pub if_unmodified_since: Option<&'a [u8]>,
}

/// Applies the precondition headers in the order of RFC 9110 §13.2.2:
/// If-Match (else If-Unmodified-Since), then If-None-Match (else
/// If-Modified-Since, GET/HEAD only). Invalid dates are ignored.
///
/// `etag` is our strong tag including quotes, e.g. `"5f3a-1d2"`; `mtime` is
/// the file's modification time in whole seconds since the epoch.
/// `is_get_or_head` selects 304 vs 412 for If-None-Match.
pub fn evaluate(c: &Conditions<'_>, etag: &str, mtime: u64, is_get_or_head: bool) -> Precondition {
    // Steps 1-2: is the client's copy still the current one? If-Match is the
    // precise form; If-Unmodified-Since only counts when it is absent.
    let still_current = match c.if_match {
        Some(value) => list_matches(value, etag, strong_eq),
        None => c.if_unmodified_since.and_then(parse_date).is_none_or(|date| mtime <= date),
    };
    if !still_current {
        return Precondition::Failed;
    }

    // Steps 3-4: does the client already have this version?
    let already_has = match c.if_none_match {
        Some(value) => list_matches(value, etag, weak_eq),
        // why: §13.1.3 says If-Modified-Since is ignored when If-None-Match is
        // present (the tag is the more precise validator) and for methods
        // other than GET and HEAD.
        None => is_get_or_head && c.if_modified_since.and_then(parse_date).is_some_and(|date| mtime <= date),
    };
    match (already_has, is_get_or_head) {
        (false, _) => Precondition::Proceed,
        (true, true) => Precondition::NotModified,
        (true, false) => Precondition::Failed,
    }
}

/// If-Range: true if the Range header should be honoured. A strong etag
/// compare (weak tags never match), or an HTTP-date that equals mtime exactly.
pub fn if_range_allows(value: &[u8], etag: &str, mtime: u64) -> bool {
    let value = trim_ows(value);
    // why: an entity-tag always begins with `"` or `W/`, and no HTTP-date
    // does, so the first bytes tell the two forms apart (§13.1.5).
    if value.starts_with(b"\"") || value.starts_with(b"W/") {
        return match next_tag(value) {
            Some((tag, rest)) if trim_ows(rest).is_empty() => strong_eq(tag, etag.as_bytes()),
            _ => false,
        };
    }
    // why: anything we cannot validate must fall back to sending the whole
    // file, never a piece of what may be a different version of it.
    parse_date(value) == Some(mtime)
}

/// Our `ETag` for a file: strong, quoted, lower-case hex `"inode-size-mtime"`.
///
/// why: the size and modification time catch ordinary edits; the nanoseconds
/// catch two same-size writes within one second; the inode catches a file
/// replaced by `rename` (the usual atomic deploy) with an old mtime preserved.
/// The tag is therefore specific to this host's filesystem, which is fine for
/// a single server and would need rethinking behind a load balancer.
pub fn make_etag(len: u64, mtime_secs: u64, mtime_nanos: u32, inode: u64) -> String {
    let mtime_ns = u128::from(mtime_secs) * 1_000_000_000 + u128::from(mtime_nanos);
    format!("\"{inode:x}-{len:x}-{mtime_ns:x}\"")
}

/// One entity-tag in a header, as raw bytes, e.g. `W/"x"` or `"x"`.
type Tag<'a> = &'a [u8];

/// Strong comparison (§8.8.3.2): both strong and byte-identical.
fn strong_eq(theirs: Tag<'_>, ours: &[u8]) -> bool {
    !is_weak(theirs) && !is_weak(ours) && theirs == ours
}

/// Weak comparison (§8.8.3.2): opaque tags equal, whatever their weakness.
fn weak_eq(theirs: Tag<'_>, ours: &[u8]) -> bool {
    opaque(theirs) == opaque(ours)
}

fn is_weak(tag: &[u8]) -> bool {
    tag.starts_with(b"W/")
}

fn opaque(tag: &[u8]) -> &[u8] {
    tag.strip_prefix(b"W/").unwrap_or(tag)
}

/// Whether `*` or any entity-tag in the comma-separated `value` matches
/// `etag` under `eq`.
///
/// why: `*` means "any current representation" and a static file that we are
/// about to serve always has one, so it always matches (§13.1.1, §13.1.2).
/// Malformed list members are skipped up to the next comma rather than
/// failing the whole header: a client sending an unquoted tag has simply
/// named no tag of ours.
fn list_matches(value: &[u8], etag: &str, eq: fn(Tag<'_>, &[u8]) -> bool) -> bool {
    let mut rest = value;
    loop {
        rest = trim_ows_and_commas(rest);
        if rest.is_empty() {
            return false;
        }
        if rest.strip_prefix(b"*").is_some_and(at_member_end) {
            return true;
        }
        match next_tag(rest) {
            Some((tag, after)) if at_member_end(after) => {
                if eq(tag, etag.as_bytes()) {
                    return true;
                }
                rest = after;
            }
            _ => rest = skip_past_comma(rest),
        }
    }
}

/// Splits one `entity-tag` off the front of `s`: `[W/] DQUOTE *etagc DQUOTE`.
fn next_tag(s: &[u8]) -> Option<(Tag<'_>, &[u8])> {
    let prefix = if s.starts_with(b"W/") { 2 } else { 0 };
    let body = s[prefix..].strip_prefix(b"\"")?;
    let close = body.iter().position(|&b| b == b'"')?;
    // why: etagc excludes controls, space and DEL; rejecting them stops
    // a stray `"` elsewhere in garbage from being read as a tag.
    if !body[..close].iter().all(|&b| b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80) {
        return None;
    }
    let end = prefix + 1 + close + 1;
    Some((&s[..end], &s[end..]))
}

/// True if only whitespace stands between here and the next comma or the end.
fn at_member_end(s: &[u8]) -> bool {
    matches!(trim_ows(s).first(), None | Some(b','))
}

fn skip_past_comma(s: &[u8]) -> &[u8] {
    match s.iter().position(|&b| b == b',') {
        Some(i) => &s[i + 1..],
        None => &[],
    }
}

fn trim_ows_and_commas(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&b| !matches!(b, b' ' | b'\t' | b',')).unwrap_or(s.len());
    &s[start..]
}

fn trim_ows(s: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = s.iter().position(|b| !is_ows(b)).unwrap_or(s.len());
    let end = s.iter().rposition(|b| !is_ows(b)).map_or(start, |i| i + 1);
    &s[start..end]
}

/// An HTTP-date (any of the three formats of §5.6.7) as seconds since the
/// epoch; `None` for anything invalid, which the callers then ignore.
fn parse_date(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(trim_ows(value)).ok()?;
    let time = httpdate::parse_http_date(text).ok()?;
    Some(time.duration_since(UNIX_EPOCH).ok()?.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ETAG: &str = "\"5f3a-1d2\"";
    // Sun, 06 Nov 1994 08:49:37 GMT
    const T: u64 = 784_111_777;
    const IMF: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
    const IMF_BEFORE: &str = "Sun, 06 Nov 1994 08:49:36 GMT";
    const IMF_AFTER: &str = "Sun, 06 Nov 1994 08:49:38 GMT";

    fn none() -> Conditions<'static> {
        Conditions { if_match: None, if_none_match: None, if_modified_since: None, if_unmodified_since: None }
    }

    fn get(c: &Conditions<'_>) -> Precondition {
        evaluate(c, ETAG, T, true)
    }

    fn put(c: &Conditions<'_>) -> Precondition {
        evaluate(c, ETAG, T, false)
    }

    fn im(v: &'static str) -> Conditions<'static> {
        Conditions { if_match: Some(v.as_bytes()), ..none() }
    }

    fn inm(v: &'static str) -> Conditions<'static> {
        Conditions { if_none_match: Some(v.as_bytes()), ..none() }
    }

    fn ims(v: &'static str) -> Conditions<'static> {
        Conditions { if_modified_since: Some(v.as_bytes()), ..none() }
    }

    fn ius(v: &'static str) -> Conditions<'static> {
        Conditions { if_unmodified_since: Some(v.as_bytes()), ..none() }
    }

    use Precondition::{Failed, NotModified, Proceed};

    #[test]
    fn no_conditions_proceed() {
        assert_eq!(get(&none()), Proceed);
        assert_eq!(put(&none()), Proceed);
    }

    #[test]
    fn if_match_strong() {
        assert_eq!(get(&im("\"5f3a-1d2\"")), Proceed);
        assert_eq!(get(&im("\"other\"")), Failed);
        assert_eq!(get(&im("\"a\", \"5f3a-1d2\"")), Proceed);
        assert_eq!(get(&im("*")), Proceed);
        assert_eq!(get(&im(" * ")), Proceed);
    }

    #[test]
    fn if_match_weak_tag_never_matches() {
        assert_eq!(get(&im("W/\"5f3a-1d2\"")), Failed);
        assert_eq!(put(&im("W/\"5f3a-1d2\"")), Failed);
    }

    #[test]
    fn if_match_garbage_fails() {
        for v in ["", ",", "5f3a-1d2", "\"5f3a-1d2", "\"5f3a-1d2\"x", "**", "\"5f3a 1d2\""] {
            assert_eq!(get(&im(v)), Failed, "{v:?}");
        }
    }

    #[test]
    fn if_match_skips_garbage_members() {
        assert_eq!(get(&im("junk, \"5f3a-1d2\"")), Proceed);
        assert_eq!(get(&im("\"x\"junk,,\t\"5f3a-1d2\" ,")), Proceed);
    }

    #[test]
    fn tag_may_contain_comma() {
        let tag = "\"a,b\"";
        let c = Conditions { if_match: Some(b"\"a,b\""), ..none() };
        assert_eq!(evaluate(&c, tag, T, true), Proceed);
        let c = Conditions { if_match: Some(b"\"a\", \"b\""), ..none() };
        assert_eq!(evaluate(&c, tag, T, true), Failed);
    }

    #[test]
    fn if_unmodified_since() {
        assert_eq!(get(&ius(IMF)), Proceed);
        assert_eq!(get(&ius(IMF_AFTER)), Proceed);
        assert_eq!(get(&ius(IMF_BEFORE)), Failed);
        assert_eq!(put(&ius(IMF_BEFORE)), Failed);
    }

    #[test]
    fn if_unmodified_since_invalid_is_ignored() {
        assert_eq!(get(&ius("yesterday")), Proceed);
        assert_eq!(get(&ius("")), Proceed);
    }

    #[test]
    fn if_match_takes_precedence_over_if_unmodified_since() {
        let c = Conditions { if_unmodified_since: Some(IMF_BEFORE.as_bytes()), ..im(ETAG) };
        assert_eq!(get(&c), Proceed);
    }

    #[test]
    fn if_none_match_weak_comparison() {
        assert_eq!(get(&inm("\"5f3a-1d2\"")), NotModified);
        assert_eq!(get(&inm("W/\"5f3a-1d2\"")), NotModified);
        assert_eq!(get(&inm("\"x\", W/\"5f3a-1d2\"")), NotModified);
        assert_eq!(get(&inm("*")), NotModified);
        assert_eq!(get(&inm("\"x\"")), Proceed);
        assert_eq!(get(&inm("garbage")), Proceed);
    }

    #[test]
    fn if_none_match_on_other_methods_fails() {
        assert_eq!(put(&inm(ETAG)), Failed);
        assert_eq!(put(&inm("*")), Failed);
        assert_eq!(put(&inm("\"x\"")), Proceed);
    }

    #[test]
    fn if_modified_since() {
        assert_eq!(get(&ims(IMF)), NotModified);
        assert_eq!(get(&ims(IMF_AFTER)), NotModified);
        assert_eq!(get(&ims(IMF_BEFORE)), Proceed);
    }

    #[test]
    fn if_modified_since_accepts_obsolete_formats() {
        assert_eq!(get(&ims("Sunday, 06-Nov-94 08:49:37 GMT")), NotModified);
        assert_eq!(get(&ims("Sun Nov  6 08:49:37 1994")), NotModified);
    }

    #[test]
    fn if_modified_since_ignored_when_invalid_or_not_get() {
        assert_eq!(get(&ims("not a date")), Proceed);
        assert_eq!(get(&ims("Sun, 06 Nov 1994 08:49:37 GMT, extra")), Proceed);
        assert_eq!(put(&ims(IMF)), Proceed);
    }

    #[test]
    fn if_none_match_overrides_if_modified_since() {
        // A non-matching tag wins over a date that says "unchanged".
        let c = Conditions { if_modified_since: Some(IMF.as_bytes()), ..inm("\"x\"") };
        assert_eq!(get(&c), Proceed);
        // A matching tag wins over a date that says "changed".
        let c = Conditions { if_modified_since: Some(IMF_BEFORE.as_bytes()), ..inm(ETAG) };
        assert_eq!(get(&c), NotModified);
    }

    #[test]
    fn failed_if_match_beats_matching_if_none_match() {
        let c = Conditions { if_none_match: Some(ETAG.as_bytes()), ..im("\"x\"") };
        assert_eq!(get(&c), Failed);
    }

    #[test]
    fn passing_if_match_then_if_none_match() {
        let c = Conditions { if_none_match: Some(ETAG.as_bytes()), ..im(ETAG) };
        assert_eq!(get(&c), NotModified);
        assert_eq!(put(&c), Failed);
    }

    #[test]
    fn failed_if_unmodified_since_beats_if_modified_since() {
        let c = Conditions { if_modified_since: Some(IMF.as_bytes()), ..ius(IMF_BEFORE) };
        assert_eq!(get(&c), Failed);
    }

    #[test]
    fn if_range_with_etag() {
        assert!(if_range_allows(ETAG.as_bytes(), ETAG, T));
        assert!(if_range_allows(b" \"5f3a-1d2\"\t", ETAG, T));
        assert!(!if_range_allows(b"W/\"5f3a-1d2\"", ETAG, T));
        assert!(!if_range_allows(b"\"other\"", ETAG, T));
        assert!(!if_range_allows(b"\"5f3a-1d2\", \"x\"", ETAG, T));
        assert!(!if_range_allows(b"\"5f3a-1d2", ETAG, T));
    }

    #[test]
    fn if_range_with_date_needs_exact_match() {
        assert!(if_range_allows(IMF.as_bytes(), ETAG, T));
        assert!(!if_range_allows(IMF_AFTER.as_bytes(), ETAG, T));
        assert!(!if_range_allows(IMF_BEFORE.as_bytes(), ETAG, T));
    }

    #[test]
    fn if_range_garbage_is_refused() {
        for v in [&b""[..], b"*", b"junk", b"\xff\xfe", b"5f3a-1d2"] {
            assert!(!if_range_allows(v, ETAG, T), "{v:?}");
        }
    }

    #[test]
    fn weak_own_etag_never_matches_strongly() {
        let weak = "W/\"abc\"";
        assert!(!if_range_allows(b"W/\"abc\"", weak, T));
        let c = Conditions { if_match: Some(b"W/\"abc\""), ..none() };
        assert_eq!(evaluate(&c, weak, T, true), Failed);
        let c = Conditions { if_none_match: Some(b"\"abc\""), ..none() };
        assert_eq!(evaluate(&c, weak, T, true), NotModified);
    }

    #[test]
    fn make_etag_is_strong_quoted_hex() {
        assert_eq!(make_etag(0x1d2, 0, 0x5, 0xab), "\"ab-1d2-5\"");
        assert_eq!(make_etag(10, 1, 0, 1), "\"1-a-3b9aca00\"");
        let max = make_etag(u64::MAX, u64::MAX, 999_999_999, u64::MAX);
        assert!(max.starts_with('"') && max.ends_with('"'));
        assert!(next_tag(max.as_bytes()).is_some_and(|(t, rest)| t == max.as_bytes() && rest.is_empty()));
    }

    #[test]
    fn make_etag_changes_with_each_input() {
        let base = make_etag(1, 2, 3, 4);
        assert_ne!(base, make_etag(9, 2, 3, 4));
        assert_ne!(base, make_etag(1, 9, 3, 4));
        assert_ne!(base, make_etag(1, 2, 9, 4));
        assert_ne!(base, make_etag(1, 2, 3, 9));
    }

    #[test]
    fn next_tag_parses_and_rejects() {
        assert_eq!(next_tag(b"\"a\" rest"), Some((&b"\"a\""[..], &b" rest"[..])));
        assert_eq!(next_tag(b"W/\"\""), Some((&b"W/\"\""[..], &b""[..])));
        assert_eq!(next_tag(b"W/"), None);
        assert_eq!(next_tag(b"w/\"a\""), None);
        assert_eq!(next_tag(b"\""), None);
        assert_eq!(next_tag(b"\"a\tb\""), None);
    }

    #[test]
    fn list_parsing_never_panics_on_noise() {
        // A tiny LCG over an alphabet of the bytes the parser cares about.
        let alphabet = b"\"W/*, \tx5\xff";
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            let len = (seed >> 59) as usize;
            let value: Vec<u8> =
                (0..len).map(|i| alphabet[((seed >> (i * 3 % 56)) as usize) % alphabet.len()]).collect();
            let c = Conditions {
                if_match: Some(&value),
                if_none_match: Some(&value),
                if_modified_since: Some(&value),
                if_unmodified_since: Some(&value),
            };
            let _ = evaluate(&c, ETAG, T, true);
            let _ = if_range_allows(&value, ETAG, T);
        }
    }
}
