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

    #[test]
    fn formats_and_caches() {
        let mut d = DateCache::default();
        let a = d.at(SystemTime::now()).to_string();
        assert_eq!(a.len(), 29);
        assert!(a.ends_with(" GMT"));
        assert!(httpdate::parse_http_date(&a).is_ok());
    }
}
