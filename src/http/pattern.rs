//! What a `[[vhost.location]]` matches of a request's path (decoded and cleaned):
//! an exact path, a prefix, or a regular expression. Pure: the table that picks a
//! location among several is `crate::location`'s; the handlers ask a pattern alone
//! whether a script's own path is one its location runs.

use regex_lite::Regex;

/// What a location matches.
#[derive(Debug, Clone)]
pub enum Pattern {
    Exact(String),
    Prefix(String),
    Regex(Regex),
}

impl Pattern {
    /// The config key that sets it.
    pub fn key(&self) -> &'static str {
        match self {
            Pattern::Exact(_) => "exact",
            Pattern::Prefix(_) => "prefix",
            Pattern::Regex(_) => "regex",
        }
    }

    /// As written in the config.
    pub fn text(&self) -> &str {
        match self {
            Pattern::Exact(s) | Pattern::Prefix(s) => s,
            Pattern::Regex(r) => r.as_str(),
        }
    }

    pub fn matches(&self, path: &[u8]) -> bool {
        match self {
            Pattern::Exact(s) => path == s.as_bytes(),
            Pattern::Prefix(s) => path.starts_with(s.as_bytes()),
            Pattern::Regex(r) => r.is_match(&String::from_utf8_lossy(path)),
        }
    }
}
