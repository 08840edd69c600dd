//! Byte-range requests (RFC 9110 §14): turning a `Range` header into the
//! list of byte spans to send.
//!
//! This is pure arithmetic kept apart from the response writer so that every
//! edge of it (suffix ranges, clamping, overflow, empty files, abusive
//! many-range requests) can be unit-tested without a socket. The policy
//! follows Apache httpd: anything we cannot or will not honour is treated as
//! if the header were absent, and a 416 is reserved for a well-formed header
//! none of whose ranges touches the file.

/// One satisfiable span of the representation; both ends inclusive, as in
/// `Content-Range`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    pub start: u64,
    pub end: u64,
}

impl ByteRange {
    /// Number of bytes in the span (never zero: `end >= start`).
    pub fn len(&self) -> u64 {
        self.end - self.start + 1
    }

    /// A range always holds at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// What the response should be, given the `Range` header and the file length.
#[derive(Debug, PartialEq, Eq)]
pub enum RangeOutcome {
    /// No usable Range header (absent-equivalent: unknown unit, syntax
    /// error, too many ranges): serve 200 full.
    Full,
    /// One or more satisfiable ranges, in request order (206).
    Partial(Vec<ByteRange>),
    /// Syntactically valid but none satisfiable (416 with Content-Range: bytes */LEN).
    Unsatisfiable,
}

/// One `range-spec` after parsing, before the list is judged as a whole.
enum Spec {
    Satisfiable(ByteRange),
    Unsatisfiable,
}

/// Parses a `Range` field value against a representation of `len` bytes.
///
/// `max_ranges` bounds how many range specs we are willing to look at; a
/// header with more is ignored outright (Apache's `MaxRanges`), since a
/// legitimate client never needs hundreds of pieces of one file.
pub fn parse_range(value: &[u8], len: u64, max_ranges: usize) -> RangeOutcome {
    let Some(eq) = value.iter().position(|&b| b == b'=') else {
        return RangeOutcome::Full;
    };
    let (unit, set) = (trim_ows(&value[..eq]), &value[eq + 1..]);
    // why: the only unit we know is `bytes`; RFC 9110 §14.2 says a server
    // MUST ignore a Range header with a unit it does not understand.
    if !unit.eq_ignore_ascii_case(b"bytes") {
        return RangeOutcome::Full;
    }

    // why: the list rule (RFC 9110 §5.6.1) lets a recipient accept empty
    // elements and whitespace around commas, so `bytes=0-1, ,2-3` is valid.
    let specs: Vec<&[u8]> = set.split(|&b| b == b',').map(trim_ows).filter(|s| !s.is_empty()).collect();
    if specs.is_empty() || specs.len() > max_ranges {
        return RangeOutcome::Full;
    }

    let mut ranges = Vec::with_capacity(specs.len());
    for spec in specs {
        match parse_spec(spec, len) {
            Some(Spec::Satisfiable(r)) => ranges.push(r),
            Some(Spec::Unsatisfiable) => {}
            // why: one malformed spec invalidates the whole header, and an
            // invalid Range header is ignored (served as 200), not a 400.
            None => return RangeOutcome::Full,
        }
    }
    if ranges.is_empty() {
        return RangeOutcome::Unsatisfiable;
    }
    RangeOutcome::Partial(coalesce(ranges))
}

/// `Content-Range` value for one part of a 206 response.
pub fn content_range(r: &ByteRange, len: u64) -> String {
    format!("bytes {}-{}/{}", r.start, r.end, len)
}

/// Parses one `range-spec`; `None` is a syntax error.
fn parse_spec(spec: &[u8], len: u64) -> Option<Spec> {
    let dash = spec.iter().position(|&b| b == b'-')?;
    let (first, last) = (&spec[..dash], &spec[dash + 1..]);

    if first.is_empty() {
        // Suffix form `-n`: the last n bytes.
        // why: saturate rather than reject a huge n; RFC 9110 §14.1.3 says a
        // suffix longer than the representation selects all of it, and an
        // overflowing n is just a very long suffix.
        let n = parse_digits_saturating(last)?;
        if n == 0 || len == 0 {
            return Some(Spec::Unsatisfiable);
        }
        let start = len.saturating_sub(n);
        return Some(Spec::Satisfiable(ByteRange { start, end: len - 1 }));
    }

    // why: an overflowing first-byte-pos is rejected as a syntax error rather
    // than saturated: no real file is that long, so it is garbage, not a request.
    let start = parse_digits(first)?;
    let end = if last.is_empty() {
        None
    } else {
        // why: a huge last-byte-pos is a common way to say "to the end" and
        // RFC 9110 §14.1.2 says to clamp it, so overflow saturates here.
        let end = parse_digits_saturating(last)?;
        if start > end {
            return None;
        }
        Some(end)
    };
    if start >= len {
        return Some(Spec::Unsatisfiable);
    }
    let end = end.map_or(len - 1, |e| e.min(len - 1));
    Some(Spec::Satisfiable(ByteRange { start, end }))
}

/// Merges overlapping or adjacent ranges.
///
/// why: `bytes=0-,0-,0-,...` asks for the file many times over at the cost of
/// one request line (CVE-2011-3192 against Apache). If the ranges are already
/// disjoint and non-adjacent we keep the client's order, as RFC 9110 asks;
/// if any two touch, we sort by start and coalesce. Sorting in that case is
/// the simplest rule with no surprises, and a client that sent overlapping
/// ranges has no claim on the order of a response it cannot reassemble anyway.
fn coalesce(mut ranges: Vec<ByteRange>) -> Vec<ByteRange> {
    let mut sorted = ranges.clone();
    sorted.sort_by_key(|r| r.start);
    let touches = |a: &ByteRange, b: &ByteRange| b.start <= a.end.saturating_add(1);
    if !sorted.windows(2).any(|w| touches(&w[0], &w[1])) {
        return ranges;
    }
    ranges.clear();
    for r in sorted {
        match ranges.last_mut() {
            Some(prev) if touches(prev, &r) => prev.end = prev.end.max(r.end),
            _ => ranges.push(r),
        }
    }
    ranges
}

/// Strips optional whitespace (SP / HTAB) from both ends.
fn trim_ows(s: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = s.iter().position(|b| !is_ows(b)).unwrap_or(s.len());
    let end = s.iter().rposition(|b| !is_ows(b)).map_or(start, |i| i + 1);
    &s[start..end]
}

/// A non-empty run of ASCII digits as a `u64`; `None` if empty, not all
/// digits, or overflowing.
fn parse_digits(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    s.iter().try_fold(0u64, |n, &d| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
}

/// Like [`parse_digits`], but a value too large for `u64` becomes `u64::MAX`.
fn parse_digits_saturating(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(parse_digits(s).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 100;

    fn r(start: u64, end: u64) -> ByteRange {
        ByteRange { start, end }
    }

    fn parse(v: &str, len: u64) -> RangeOutcome {
        parse_range(v.as_bytes(), len, MAX)
    }

    fn partial(ranges: &[(u64, u64)]) -> RangeOutcome {
        RangeOutcome::Partial(ranges.iter().map(|&(s, e)| r(s, e)).collect())
    }

    #[test]
    fn len_is_inclusive() {
        assert_eq!(r(0, 0).len(), 1);
        assert_eq!(r(10, 19).len(), 10);
        assert_eq!(r(0, u64::MAX - 1).len(), u64::MAX);
    }

    #[test]
    fn simple_closed_range() {
        assert_eq!(parse("bytes=0-499", 1000), partial(&[(0, 499)]));
        assert_eq!(parse("bytes=500-999", 1000), partial(&[(500, 999)]));
        assert_eq!(parse("bytes=5-5", 10), partial(&[(5, 5)]));
    }

    #[test]
    fn last_byte_pos_is_clamped() {
        assert_eq!(parse("bytes=0-5000", 1000), partial(&[(0, 999)]));
        assert_eq!(parse("bytes=0-99999999999999999999999", 10), partial(&[(0, 9)]));
        assert_eq!(parse("bytes=3-18446744073709551615", 10), partial(&[(3, 9)]));
    }

    #[test]
    fn open_ended_range() {
        assert_eq!(parse("bytes=9500-", 10000), partial(&[(9500, 9999)]));
        assert_eq!(parse("bytes=0-", 1), partial(&[(0, 0)]));
    }

    #[test]
    fn suffix_range() {
        assert_eq!(parse("bytes=-500", 10000), partial(&[(9500, 9999)]));
        assert_eq!(parse("bytes=-1", 10), partial(&[(9, 9)]));
        assert_eq!(parse("bytes=-10", 10), partial(&[(0, 9)]));
    }

    #[test]
    fn suffix_longer_than_file_is_whole_file() {
        assert_eq!(parse("bytes=-11", 10), partial(&[(0, 9)]));
        assert_eq!(parse("bytes=-99999999999999999999999", 10), partial(&[(0, 9)]));
    }

    #[test]
    fn zero_suffix_is_unsatisfiable() {
        assert_eq!(parse("bytes=-0", 10), RangeOutcome::Unsatisfiable);
        assert_eq!(parse("bytes=-0,0-1", 10), partial(&[(0, 1)]));
    }

    #[test]
    fn start_past_end_is_unsatisfiable() {
        assert_eq!(parse("bytes=10-", 10), RangeOutcome::Unsatisfiable);
        assert_eq!(parse("bytes=10-20", 10), RangeOutcome::Unsatisfiable);
        assert_eq!(parse("bytes=100-200,300-", 10), RangeOutcome::Unsatisfiable);
    }

    #[test]
    fn unsatisfiable_ranges_are_dropped_when_others_remain() {
        assert_eq!(parse("bytes=50-60,0-1", 10), partial(&[(0, 1)]));
        assert_eq!(parse("bytes=0-1,50-", 10), partial(&[(0, 1)]));
    }

    #[test]
    fn empty_file_makes_every_range_unsatisfiable() {
        for v in ["bytes=0-", "bytes=0-0", "bytes=-1", "bytes=-5", "bytes=0-10,-3"] {
            assert_eq!(parse(v, 0), RangeOutcome::Unsatisfiable, "{v}");
        }
    }

    #[test]
    fn unit_is_case_insensitive() {
        assert_eq!(parse("BYTES=0-1", 10), partial(&[(0, 1)]));
        assert_eq!(parse("Bytes=0-1", 10), partial(&[(0, 1)]));
    }

    #[test]
    fn unknown_unit_is_ignored() {
        assert_eq!(parse("items=0-1", 10), RangeOutcome::Full);
        assert_eq!(parse("bytesx=0-1", 10), RangeOutcome::Full);
        assert_eq!(parse("=0-1", 10), RangeOutcome::Full);
        assert_eq!(parse("0-1", 10), RangeOutcome::Full);
    }

    #[test]
    fn list_tolerates_whitespace_and_empty_elements() {
        assert_eq!(parse("bytes=0-1, ,4-5", 10), partial(&[(0, 1), (4, 5)]));
        assert_eq!(parse("bytes= 0-1 ,\t4-5 ", 10), partial(&[(0, 1), (4, 5)]));
        assert_eq!(parse("bytes=,,0-1,", 10), partial(&[(0, 1)]));
    }

    #[test]
    fn syntax_errors_mean_full() {
        for v in [
            "bytes=",
            "bytes=,",
            "bytes= , ",
            "bytes=-",
            "bytes=5-4",
            "bytes=a-b",
            "bytes=1-2x",
            "bytes=+1-2",
            "bytes=1 - 2",
            "bytes=1--2",
            "bytes=--1",
            "bytes=0-1,junk",
            "bytes=0x10-",
            "bytes=１-2",
        ] {
            assert_eq!(parse(v, 10), RangeOutcome::Full, "{v}");
        }
    }

    #[test]
    fn inverted_range_is_syntax_error_even_when_out_of_bounds() {
        assert_eq!(parse("bytes=50-40", 10), RangeOutcome::Full);
        assert_eq!(parse("bytes=0-1,9-8", 10), RangeOutcome::Full);
    }

    #[test]
    fn overflowing_first_pos_is_syntax_error() {
        assert_eq!(parse("bytes=99999999999999999999999-", 10), RangeOutcome::Full);
        assert_eq!(parse("bytes=18446744073709551616-18446744073709551617", 10), RangeOutcome::Full);
        // The largest u64 itself is fine, just unsatisfiable.
        assert_eq!(parse("bytes=18446744073709551615-", 10), RangeOutcome::Unsatisfiable);
    }

    #[test]
    fn too_many_ranges_means_full() {
        assert_eq!(parse_range(b"bytes=0-0,2-2,4-4", 10, 3), partial(&[(0, 0), (2, 2), (4, 4)]));
        assert_eq!(parse_range(b"bytes=0-0,2-2,4-4,6-6", 10, 3), RangeOutcome::Full);
        // Empty list elements are not ranges and do not count.
        assert_eq!(parse_range(b"bytes=0-0,,,,2-2", 10, 2), partial(&[(0, 0), (2, 2)]));
        assert_eq!(parse_range(b"bytes=0-0", 10, 0), RangeOutcome::Full);
    }

    #[test]
    fn disjoint_ranges_keep_request_order() {
        assert_eq!(parse("bytes=6-7,0-1,3-4", 10), partial(&[(6, 7), (0, 1), (3, 4)]));
    }

    #[test]
    fn overlapping_ranges_are_sorted_and_merged() {
        assert_eq!(parse("bytes=0-5,3-8", 10), partial(&[(0, 8)]));
        assert_eq!(parse("bytes=0-,0-,0-,0-", 10), partial(&[(0, 9)]));
        assert_eq!(parse("bytes=7-8,0-1,1-3", 10), partial(&[(0, 3), (7, 8)]));
        assert_eq!(parse("bytes=2-3,0-9", 10), partial(&[(0, 9)]));
        assert_eq!(parse("bytes=-3,0-", 10), partial(&[(0, 9)]));
    }

    #[test]
    fn adjacent_ranges_are_merged() {
        assert_eq!(parse("bytes=0-1,2-3", 10), partial(&[(0, 3)]));
        assert_eq!(parse("bytes=4-5,0-1,2-3", 10), partial(&[(0, 5)]));
    }

    #[test]
    fn merge_handles_range_ending_at_u64_max() {
        let len = u64::MAX;
        assert_eq!(parse_range(b"bytes=-1,-2", len, MAX), partial(&[(u64::MAX - 2, u64::MAX - 1)]));
        let ranges = vec![r(5, u64::MAX), r(u64::MAX, u64::MAX)];
        assert_eq!(coalesce(ranges), vec![r(5, u64::MAX)]);
    }

    #[test]
    fn content_range_format() {
        assert_eq!(content_range(&r(0, 499), 1234), "bytes 0-499/1234");
        assert_eq!(content_range(&r(9, 9), 10), "bytes 9-9/10");
    }

    #[test]
    fn trim_ows_edges() {
        assert_eq!(trim_ows(b""), b"");
        assert_eq!(trim_ows(b" \t "), b"");
        assert_eq!(trim_ows(b" a b\t"), b"a b");
    }

    #[test]
    fn parse_digits_rules() {
        assert_eq!(parse_digits(b"0"), Some(0));
        assert_eq!(parse_digits(b"007"), Some(7));
        assert_eq!(parse_digits(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_digits(b"18446744073709551616"), None);
        assert_eq!(parse_digits(b""), None);
        assert_eq!(parse_digits(b"1a"), None);
        assert_eq!(parse_digits_saturating(b"18446744073709551616"), Some(u64::MAX));
        assert_eq!(parse_digits_saturating(b""), None);
        assert_eq!(parse_digits_saturating(b"9x"), None);
    }

    #[test]
    fn a_range_holds_at_least_one_byte() {
        for (start, end) in [(0, 0), (5, 9)] {
            let range = r(start, end);
            assert!(!range.is_empty() && range.len() == end - start + 1, "{range:?}");
        }
    }
}
