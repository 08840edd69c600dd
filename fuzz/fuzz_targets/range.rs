//! `Range` header parsing against a file length, on arbitrary bytes.
//!
//! Whatever the header says, what comes back must be safe to send: every span lies
//! inside the file (`start <= end < len`), there are at most `max_ranges` of them, and
//! no two overlap or touch (so a many-range request cannot ask for more bytes than
//! the file has). An empty file has nothing to send.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pika::http::range::{RangeOutcome, content_range, parse_range};

fuzz_target!(|data: &[u8]| {
    let Some((&[mode, max_ranges], rest)) = data.split_first_chunk::<2>() else { return };
    // Small lengths most of the time (where clamping and empty files are), the edges
    // of u64 otherwise.
    let (len, value) = match mode % 4 {
        0 => (u64::from(mode >> 2), rest),
        1 => (u64::MAX - u64::from(mode >> 2), rest),
        _ => match rest.split_first_chunk::<8>() {
            Some((bytes, value)) => (u64::from_le_bytes(*bytes), value),
            None => return,
        },
    };
    let max_ranges = usize::from(max_ranges);

    let RangeOutcome::Partial(ranges) = parse_range(value, len, max_ranges) else { return };
    assert!(len > 0, "a range of an empty file");
    assert!(!ranges.is_empty(), "206 with no ranges");
    assert!(ranges.len() <= max_ranges, "{} ranges, max {max_ranges}", ranges.len());
    let mut total: u128 = 0;
    for r in &ranges {
        assert!(r.start <= r.end && r.end < len, "{r:?} of {len}");
        assert_eq!(u128::from(r.len()), u128::from(r.end - r.start) + 1);
        total += u128::from(r.len());
        let _ = content_range(r, len);
    }
    assert!(total <= u128::from(len), "{total} bytes of a {len}-byte file");
    let mut sorted = ranges.clone();
    sorted.sort_by_key(|r| r.start);
    for w in sorted.windows(2) {
        assert!(u128::from(w[0].end) + 1 < u128::from(w[1].start), "{:?} and {:?} touch", w[0], w[1]);
    }
});
