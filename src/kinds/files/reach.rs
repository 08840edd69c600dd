//! The files that a location running scripts (CGI, FastCGI) would run: what a
//! static files handler never sends as they are, whatever path reached them.
//!
//! A PHP file holds code and often a database password. Serving it as a static file
//! is the one mistake a web server in front of an application must never make, and
//! a config gives it many ways: a vhost's `index` naming `index.php`, a `try_files`
//! candidate, an error page, another vhost serving the same folder as files, a
//! prefix location that takes the path from the scripts' regex. So the rule is
//! about the file, not the path: a file under a script location's directory whose
//! own URL path there the location matches is that location's, and the files
//! handler answers it by an internal redirect to that path (an index, a `try_files`
//! candidate: the script runs) or refuses it (403, said once in the error log).
//!
//! Made once per worker from every vhost's script locations ([`Reach::new`]: one
//! vhost's scripts are never another's files either), and asked once per file
//! version, when a file enters a worker's cache ([`Reach::claims`]).

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::http::pattern::Pattern;

/// Every script location's claim on the files under its directory.
#[derive(Debug, Default)]
pub struct Reach {
    claims: Vec<Claim>,
}

/// One script location: its directory, the URL path that directory stands for,
/// and what the location matches.
#[derive(Debug)]
struct Claim {
    dir: PathBuf,
    /// The URL path the directory stands for: `/` (its `root`), or the location's
    /// prefix (its `alias`).
    base: Vec<u8>,
    pattern: Pattern,
}

impl Reach {
    /// The script locations: for each, its directory, whether the directory
    /// stands for its prefix (`alias`) or for `/`, and what it matches.
    pub fn new<'a>(scripts: impl IntoIterator<Item = (&'a Path, bool, &'a Pattern)>) -> Reach {
        let claims = scripts
            .into_iter()
            .map(|(dir, alias, pattern)| {
                let base = if alias { pattern.text().as_bytes().to_vec() } else { b"/".to_vec() };
                Claim { dir: dir.to_path_buf(), base, pattern: pattern.clone() }
            })
            .collect();
        Reach { claims }
    }

    /// Whether the file `rel` under the directory `dir` (canonical, as the config
    /// holds its directories) is one a script location runs.
    pub fn claims(&self, dir: &Path, rel: &Path) -> bool {
        if self.claims.is_empty() {
            return false;
        }
        let file = dir.join(rel);
        self.claims.iter().any(|c| {
            let Ok(under) = file.strip_prefix(&c.dir) else { return false };
            c.pattern.matches(&url_path(&c.base, under.as_os_str().as_bytes()))
        })
    }
}

/// The URL path of the file `under` a directory that stands for `base`.
fn url_path(base: &[u8], under: &[u8]) -> Vec<u8> {
    let mut url = base.to_vec();
    if !url.ends_with(b"/") && !under.is_empty() {
        url.push(b'/');
    }
    url.extend_from_slice(under);
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reach(claims: &[(&str, &str, Pattern)]) -> Reach {
        let claims = claims
            .iter()
            .map(|(dir, base, pattern)| Claim {
                dir: PathBuf::from(dir),
                base: base.as_bytes().to_vec(),
                pattern: pattern.clone(),
            })
            .collect();
        Reach { claims }
    }

    fn regex(r: &str) -> Pattern {
        Pattern::Regex(regex_lite::Regex::new(r).unwrap())
    }

    #[test]
    fn a_php_file_under_the_scripts_folder_is_theirs_by_any_root_that_reaches_it() {
        let r = reach(&[("/srv/www", "/", regex(r"\.php(/|$)"))]);
        assert!(r.claims(Path::new("/srv/www"), Path::new("index.php")));
        assert!(r.claims(Path::new("/srv/www"), Path::new("app/index.php")));
        // The same file through another directory (a location's alias above it).
        assert!(r.claims(Path::new("/srv"), Path::new("www/wp/wp-config.php")));
        assert!(!r.claims(Path::new("/srv/www"), Path::new("css/app.css")));
        assert!(!r.claims(Path::new("/srv/www"), Path::new("index.php.txt")));
        // Outside the scripts' folder: not theirs.
        assert!(!r.claims(Path::new("/srv/other"), Path::new("index.php")));
        assert!(!r.claims(Path::new("/srv"), Path::new("wwwx/index.php")));
    }

    #[test]
    fn an_alias_maps_the_folder_to_its_prefix() {
        let r = reach(&[("/srv/cgi-bin", "/cgi-bin/", Pattern::Prefix("/cgi-bin/".into()))]);
        assert!(r.claims(Path::new("/srv/cgi-bin"), Path::new("report.py")));
        assert!(r.claims(Path::new("/srv"), Path::new("cgi-bin/sub/x.sh")));
        let r = reach(&[("/srv/app", "/app", regex(r"^/app/[^/]+\.php$"))]);
        assert!(r.claims(Path::new("/srv/app"), Path::new("index.php")));
        assert!(!r.claims(Path::new("/srv/app"), Path::new("lib/inner.php")), "the regex says one level");
        let r = reach(&[("/srv/www", "/", Pattern::Exact("/admin.php".into()))]);
        assert!(r.claims(Path::new("/srv/www"), Path::new("admin.php")));
        assert!(!r.claims(Path::new("/srv/www"), Path::new("other.php")));
    }

    #[test]
    fn no_script_location_claims_nothing() {
        assert!(!Reach::default().claims(Path::new("/srv/www"), Path::new("index.php")));
    }
}
