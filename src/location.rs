//! `[[vhost.location]]`: which part of a vhost's paths a location covers, what answers
//! there, and the table that picks the location for a request.
//!
//! A location is an exact path (`exact = "/robots.txt"`), a prefix (`prefix =
//! "/static/"`) or a regular expression (`regex = '^/(\w+)\.php$'`), matched against
//! the request's path once it is decoded and cleaned (no query string). The choice is
//! nginx's: an exact path wins; else the first regex in file order that matches; else
//! the longest prefix that matches; else no location (the vhost's own files answer).
//!
//! The [`Table`] is built once, when the config is loaded: exact paths sorted for a
//! binary search, prefixes longest first, regexes in file order. Picking a location
//! allocates nothing, and runs no regex when no location has one (a path that is not
//! UTF-8 is copied once if a regex must look at it). [`check`] finds what `pika -t`
//! reports: locations that can never be chosen, and locations that another takes
//! paths from.

use std::borrow::Cow;

use regex_lite::Regex;

pub use crate::http::pattern::Pattern;
use crate::kinds::Kind;
use crate::rules::Rules;

/// One `[[vhost.location]]` block.
#[derive(Debug, Clone)]
pub struct Location {
    pub pattern: Pattern,
    /// `prefix_only = true` (nginx's `^~`): when this prefix is the longest that
    /// matches, no regex is tried.
    pub prefix_only: bool,
    /// What answers there, with its settings.
    pub kind: Kind,
    /// Its own rules, as written (those in force add its kind's and its vhost's).
    pub rules: Rules,
    /// Where it was written (`conf/pika.toml:12`); None for the one that
    /// `[status] enabled` adds.
    pub at: Option<String>,
}

impl Location {
    /// What it matches, as written: `prefix = "/static/"`.
    pub fn what(&self) -> String {
        format!("{} = {:?}", self.pattern.key(), self.pattern.text())
    }

    /// How messages name it.
    pub fn name(&self) -> String {
        match &self.at {
            Some(at) => format!("the location at {at} ({})", self.what()),
            None => format!("the status page's location from [status] path ({})", self.what()),
        }
    }
}

/// A vhost's locations, in file order, and the table that picks one.
#[derive(Debug, Clone, Default)]
pub struct Locations {
    pub list: Vec<Location>,
    table: Table,
}

impl Locations {
    pub fn new(list: Vec<Location>) -> Locations {
        let table = Table::new(list.iter().map(|l| (&l.pattern, l.prefix_only)));
        Locations { list, table }
    }

    /// The index in `list` of the location that answers `path`, if any.
    #[inline]
    pub fn find(&self, path: &[u8]) -> Option<usize> {
        self.table.find(path)
    }

    /// Whether the location that answers `path` runs scripts.
    pub fn runs_script(&self, path: &[u8]) -> bool {
        self.find(path).is_some_and(|i| self.list[i].kind.runs_scripts())
    }

    /// What `f` makes of each location, picked by the same table.
    pub fn map<'a, T, E>(&'a self, f: impl FnMut(&'a Location) -> Result<T, E>) -> Result<Routes<'a, T>, E> {
        Ok(Routes { table: &self.table, at: self.list.iter().map(f).collect::<Result<_, _>>()? })
    }
}

/// Something for each of a vhost's locations (a worker's handlers), picked for a
/// path as the location is.
pub struct Routes<'a, T> {
    table: &'a Table,
    at: Vec<T>,
}

impl<T> Routes<'_, T> {
    /// What the location that answers `path` has, if a location does.
    #[inline]
    pub fn find(&self, path: &[u8]) -> Option<&T> {
        self.table.find(path).map(|i| &self.at[i])
    }

    /// The positions of the location that answers `path` and, when a regex took the
    /// path from the longest prefix that matches it, of that prefix ([`Table::pick`]).
    #[inline]
    pub fn pick(&self, path: &[u8]) -> (Option<usize>, Option<usize>) {
        self.table.pick(path)
    }

    /// What the location at position `i` has.
    #[inline]
    pub fn get(&self, i: usize) -> &T {
        &self.at[i]
    }
}

/// The patterns of a vhost's locations, sorted for picking.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// Sorted by path.
    exact: Vec<(Box<[u8]>, usize)>,
    /// Longest first; of two alike, the first in the file; whether it stops the
    /// regexes (`prefix_only`).
    prefixes: Vec<(Box<[u8]>, usize, bool)>,
    /// In file order.
    regexes: Vec<(Regex, usize)>,
}

impl Table {
    /// The table for `patterns` (each with its `prefix_only`); what it finds is a
    /// position in that sequence.
    pub fn new<'a>(patterns: impl IntoIterator<Item = (&'a Pattern, bool)>) -> Table {
        let mut t = Table::default();
        for (i, (p, only)) in patterns.into_iter().enumerate() {
            match p {
                Pattern::Exact(s) => t.exact.push((s.as_bytes().into(), i)),
                Pattern::Prefix(s) => t.prefixes.push((s.as_bytes().into(), i, only)),
                Pattern::Regex(r) => t.regexes.push((r.clone(), i)),
            }
        }
        // Stable sorts: of two equal entries the first in the file stays first.
        t.exact.sort_by(|a, b| a.0.cmp(&b.0));
        t.prefixes.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
        t
    }

    /// The location for `path`: exact, else the first regex, else the longest prefix.
    #[inline]
    pub fn find(&self, path: &[u8]) -> Option<usize> {
        self.pick(path).0
    }

    /// The location for `path`, nginx's way: an exact path; else the longest prefix
    /// if it is `prefix_only`; else the first regex that matches; else the longest
    /// prefix. With a regex, also the longest prefix it took the path from.
    #[inline]
    pub fn pick(&self, path: &[u8]) -> (Option<usize>, Option<usize>) {
        if !self.exact.is_empty() {
            // The first of equal paths: a duplicate is refused by `check` anyway.
            let at = self.exact.partition_point(|(p, _)| &p[..] < path);
            if let Some((p, i)) = self.exact.get(at)
                && &p[..] == path
            {
                return (Some(*i), None);
            }
        }
        let longest = self.prefixes.iter().find(|(p, _, _)| path.starts_with(p));
        if let Some((_, i, true)) = longest {
            return (Some(*i), None);
        }
        let prefix = longest.map(|(_, i, _)| *i);
        if !self.regexes.is_empty() {
            let text = String::from_utf8_lossy(path);
            if let Some((_, i)) = self.regexes.iter().find(|(r, _)| r.is_match(&text)) {
                return (Some(*i), prefix);
            }
        }
        (prefix, None)
    }
}

/// What `pika -t` says about a vhost's locations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// Location `at` can never be chosen (an error in the config).
    Unreachable { at: usize, why: String },
    /// Location `by` takes `example` (and paths like it) from location `at`.
    Overlap { at: usize, by: usize, example: String },
    /// Regex location `by` matches every path: `at` (a prefix, or a regex after it)
    /// is never chosen.
    Shadowed { at: usize, by: usize },
}

/// Paths tried against the regexes to tell one that matches every path.
const ANY_PATHS: [&str; 7] = ["/", "/a", "/a/", "/a/b.html", "/A1/b-c_d~e", "/.x/y.z", "/%25/\u{fc}/\u{1f980}"];

/// What is wrong or surprising with `locations` (in file order): the same pattern
/// twice, an exact path or prefix no cleaned path can have, a regex that takes paths
/// a prefix or a later regex was written for (tried on the locations' own paths),
/// one that matches every path.
pub fn check(locations: &[Location]) -> Vec<Finding> {
    let mut found = Vec::new();
    for (i, l) in locations.iter().enumerate() {
        if let Some(first) = locations[..i].iter().position(|o| same(&o.pattern, &l.pattern)) {
            let why = format!("{} is the same", locations[first].name());
            found.push(Finding::Unreachable { at: i, why });
            continue;
        }
        if let Pattern::Exact(p) | Pattern::Prefix(p) = &l.pattern
            && let Some(why) = not_clean(p)
        {
            found.push(Finding::Unreachable { at: i, why: format!("a cleaned request path never {why}") });
        }
    }
    let regexes: Vec<(usize, &Regex)> = locations
        .iter()
        .enumerate()
        .filter_map(|(i, l)| match &l.pattern {
            Pattern::Regex(r) => Some((i, r)),
            _ => None,
        })
        .collect();
    let every = regexes.iter().find(|(_, r)| ANY_PATHS.iter().all(|p| r.is_match(p))).map(|(i, _)| *i);
    if let Some(by) = every {
        for (at, l) in locations.iter().enumerate() {
            let after = matches!(l.pattern, Pattern::Regex(_)) && at > by;
            if matches!(l.pattern, Pattern::Prefix(_)) || after {
                found.push(Finding::Shadowed { at, by });
            }
        }
    }
    // Paths the locations were written for: a prefix's own path and one below it,
    // an exact path (which a later regex may have been meant for as well).
    for (at, l) in locations.iter().enumerate() {
        if l.prefix_only {
            // No regex takes its paths (its own longer prefixes may: they are prefixes).
            continue;
        }
        let samples: Vec<Cow<'_, str>> = match &l.pattern {
            Pattern::Prefix(p) if p.ends_with('/') => vec![p.as_str().into(), format!("{p}a").into()],
            Pattern::Prefix(p) => vec![p.as_str().into(), format!("{p}/a").into()],
            Pattern::Exact(p) => vec![p.as_str().into()],
            Pattern::Regex(_) => continue,
        };
        let Some(example) = samples.iter().find(|s| regexes.iter().any(|(_, r)| r.is_match(s))) else { continue };
        // The first regex that matches takes the path; after it, the others lose it.
        let mut matching = regexes.iter().filter(|(_, r)| r.is_match(example)).map(|(i, _)| *i);
        let Some(first) = matching.next() else { continue };
        if let Pattern::Prefix(_) = l.pattern
            && every != Some(first)
        {
            found.push(Finding::Overlap { at, by: first, example: example.to_string() });
        }
        for later in matching {
            if every != Some(first)
                && !found.contains(&Finding::Overlap { at: later, by: first, example: example.to_string() })
            {
                found.push(Finding::Overlap { at: later, by: first, example: example.to_string() });
            }
        }
    }
    found
}

fn same(a: &Pattern, b: &Pattern) -> bool {
    a.key() == b.key() && a.text() == b.text()
}

/// Why no cleaned path (one `/` between segments, no `.` or `..` segment) starts with
/// or equals `p`, if so.
fn not_clean(p: &str) -> Option<&'static str> {
    if !p.starts_with('/') {
        return Some("lacks its leading '/'");
    }
    if p.contains("//") {
        return Some("has '//'");
    }
    let segments: Vec<&str> = p.split('/').collect();
    // The last segment of a prefix may go on ("/.well" starts "/.well-known").
    let whole = if p.ends_with('/') { &segments[..] } else { &segments[..segments.len() - 1] };
    if whole.iter().any(|s| *s == "." || *s == "..") || segments.last().is_some_and(|s| *s == "..") {
        return Some("has a '.' or '..' segment");
    }
    None
}

/// A message for `pika -t` and the error log, from a finding about `locations`.
pub fn describe(f: &Finding, locations: &[Location]) -> String {
    match f {
        // Said as an error, at the location's own line.
        Finding::Unreachable { at, why } => {
            format!("this location ({}) can never be chosen: {why}", locations[*at].what())
        }
        Finding::Overlap { at, by, example } => format!(
            "{} does not answer {example:?}: {} is chosen there (the first regex that matches wins, and a regex beats a prefix; \
             prefix_only = true on a prefix stops the regexes)",
            locations[*at].name(),
            locations[*by].name()
        ),
        Finding::Shadowed { at, by } => {
            format!("{} is never chosen: {} matches every path", locations[*at].name(), locations[*by].name())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(pattern: Pattern) -> Location {
        Location { pattern, prefix_only: false, kind: Kind::Status, rules: Rules::default(), at: Some("t".into()) }
    }
    fn exact(s: &str) -> Location {
        loc(Pattern::Exact(s.into()))
    }
    fn prefix(s: &str) -> Location {
        loc(Pattern::Prefix(s.into()))
    }
    fn regex(s: &str) -> Location {
        loc(Pattern::Regex(Regex::new(s).unwrap()))
    }

    #[test]
    fn each_pattern_matches_as_its_key_says() {
        let (e, p, r) = (exact("/a").pattern, prefix("/a/").pattern, regex(r"\.css$").pattern);
        assert!(e.matches(b"/a") && !e.matches(b"/a/") && !e.matches(b"/ab"));
        assert!(p.matches(b"/a/") && p.matches(b"/a/b") && !p.matches(b"/a"));
        assert!(r.matches(b"/x.css") && !r.matches(b"/x.css.map"));
    }

    #[test]
    fn exact_beats_regex_beats_the_longest_prefix() {
        let l = Locations::new(vec![
            prefix("/"),
            prefix("/static/"),
            prefix("/static/img/"),
            exact("/static/app.css"),
            regex(r"\.css$"),
            regex(r"^/static/.*\.(css|js)$"),
            exact("/"),
        ]);
        assert_eq!(l.find(b"/"), Some(6), "exact");
        assert_eq!(l.find(b"/static/app.css"), Some(3), "exact beats the regexes");
        assert_eq!(l.find(b"/static/other.css"), Some(4), "the first regex in the file");
        assert_eq!(l.find(b"/static/app.js"), Some(5), "a regex beats a prefix");
        assert_eq!(l.find(b"/static/img/a.png"), Some(2), "the longest prefix");
        assert_eq!(l.find(b"/static/a.png"), Some(1));
        assert_eq!(l.find(b"/other"), Some(0));
        assert_eq!(Locations::new(vec![prefix("/a/")]).find(b"/b"), None, "nothing: the vhost answers");
        assert_eq!(Locations::default().find(b"/"), None);
    }

    #[test]
    fn a_prefix_only_prefix_stops_the_regexes_and_a_regex_names_the_prefix_it_took_from() {
        let only = |s: &str| Location { prefix_only: true, ..prefix(s) };
        let l = [prefix("/admin/"), only("/static/"), prefix("/static/x/"), regex(r"\.php$")];
        let t = Table::new(l.iter().map(|l| (&l.pattern, l.prefix_only)));
        assert_eq!(t.pick(b"/admin/panel.php"), (Some(3), Some(0)), "the regex, taken from /admin/");
        assert_eq!(t.pick(b"/static/a.php"), (Some(1), None), "prefix_only: no regex");
        assert_eq!(t.pick(b"/static/x/a.php"), (Some(3), Some(2)), "a longer prefix that is not prefix_only");
        assert_eq!(t.pick(b"/a.php"), (Some(3), None), "no prefix above it");
        assert_eq!(t.pick(b"/admin/a.html"), (Some(0), None));
    }

    #[test]
    fn paths_that_are_not_utf8_reach_regexes_and_prefixes() {
        let l = Locations::new(vec![prefix("/d/"), regex("^/r/")]);
        assert_eq!(l.find(b"/d/\xff"), Some(0));
        assert_eq!(l.find(b"/r/\xff"), Some(1));
    }

    #[test]
    fn duplicates_and_unclean_paths_are_unreachable() {
        let list = [exact("/a"), prefix("/p/"), exact("/a"), prefix("/p/"), regex("x"), regex("x"), prefix("/b//")];
        let unreachable: Vec<usize> = check(&list)
            .into_iter()
            .filter_map(|f| match f {
                Finding::Unreachable { at, .. } => Some(at),
                _ => None,
            })
            .collect();
        assert_eq!(unreachable, [2, 3, 5, 6]);
        for p in ["a", "/a/./b", "/a/../", "/..", "/x/.."] {
            assert!(not_clean(p).is_some(), "{p}");
        }
        // A prefix's last segment may go on: "/a/." starts "/a/.well-known".
        for p in ["/", "/a/", "/.well", "/a.b/", "/x/.y", "/a/."] {
            assert_eq!(not_clean(p), None, "{p}");
        }
    }

    #[test]
    fn regexes_that_take_a_prefix_or_a_later_regex_paths_are_said() {
        let list = [prefix("/static/"), regex("^/static/"), regex(r"^/static/a$"), exact("/static/a")];
        let f = check(&list);
        assert!(f.contains(&Finding::Overlap { at: 0, by: 1, example: "/static/".into() }), "{f:?}");
        assert!(f.contains(&Finding::Overlap { at: 2, by: 1, example: "/static/a".into() }), "{f:?}");
        let text = describe(&f[0], &list);
        assert!(text.contains("prefix = \"/static/\"") && text.contains("regex = \"^/static/\""), "{text}");
        // Regexes that look at other paths say nothing.
        assert!(check(&[prefix("/static/"), regex(r"\.php$"), exact("/robots.txt")]).is_empty());
    }

    #[test]
    fn a_prefix_is_tried_with_a_path_below_it_with_or_without_its_slash() {
        // "/static/" is tried as "/static/a", "/img" as "/img/a".
        let f = check(&[prefix("/static/"), regex("^/static/a$")]);
        assert_eq!(f, [Finding::Overlap { at: 0, by: 1, example: "/static/a".into() }]);
        let f = check(&[prefix("/img"), regex("^/img/a$")]);
        assert_eq!(f, [Finding::Overlap { at: 0, by: 1, example: "/img/a".into() }]);
    }

    #[test]
    fn a_regex_that_matches_every_path_shadows_prefixes_and_later_regexes() {
        let list = [prefix("/a/"), regex(r"\.x$"), regex("^/"), regex("b"), exact("/e"), exact("/b")];
        // Said once for each location it hides (not for itself, not as overlaps:
        // "/b" goes to regex 2 before regex 3, which the shadow already says).
        assert_eq!(check(&list), [Finding::Shadowed { at: 0, by: 2 }, Finding::Shadowed { at: 3, by: 2 }]);
    }
}
