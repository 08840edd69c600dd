//! The `Date` header value, formatted at most once a second (as hyper and nginx do):
//! formatting an HTTP date costs more than the rest of a small response's head.

use std::time::{SystemTime, UNIX_EPOCH};

/// A per-process cache of the current HTTP date.
#[derive(Default)]
pub struct DateCache {
    second: u64,
    text: String,
}

impl DateCache {
    /// `now` as an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`). The caller passes
    /// the time it already read for the request (one clock read fewer).
    pub fn at(&mut self, now: SystemTime) -> &str {
        let secs = now.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        if secs != self.second || self.text.is_empty() {
            self.second = secs;
            self.text = httpdate::fmt_http_date(now);
        }
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::Duration;

    #[test]
    fn formats_an_imf_fixdate() {
        let mut d = DateCache::default();
        // RFC 9110 §5.6.7's example.
        let t = UNIX_EPOCH + Duration::from_secs(784_111_777);
        assert_eq!(d.at(t), "Sun, 06 Nov 1994 08:49:37 GMT");
        // The cache starts at second 0 with no text: the epoch itself is formatted.
        assert_eq!(DateCache::default().at(UNIX_EPOCH), "Thu, 01 Jan 1970 00:00:00 GMT");
    }

    #[test]
    fn formats_once_a_second() {
        let mut d = DateCache::default();
        let t = UNIX_EPOCH + Duration::from_secs(784_111_777);
        let first = d.at(t).as_ptr();
        // Later in the same second: the text made for that second, not made again (a
        // new format would be a new allocation, made while the old one is still held).
        assert_eq!(d.at(t + Duration::from_millis(999)), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(d.at(t + Duration::from_millis(500)).as_ptr(), first, "formatted again within its second");
        // The next second is formatted anew.
        assert_eq!(d.at(t + Duration::from_secs(1)), "Sun, 06 Nov 1994 08:49:38 GMT");
        assert_eq!(d.at(t), "Sun, 06 Nov 1994 08:49:37 GMT", "and going back too");
    }
}
