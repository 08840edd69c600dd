//! `include = ["conf.d/*.toml"]`: more vhosts and access logs from other files, the
//! Debian habit of one file per site (`sites-available/`, linked into
//! `sites-enabled/`), and nginx's `include`.
//!
//! A pattern is a path, relative to the folder of the file that names it, whose last
//! component may hold the wildcards `*` and `?` (as in a shell, they do not match a
//! leading `.`, so editors' hidden files stay out). The files a pattern matches are
//! read in byte order of their names; a pattern with a wildcard may match nothing
//! (an empty or missing `conf.d/`), one without names a file that must exist.

use std::io;
use std::path::{Path, PathBuf};

/// Why a pattern could not be expanded.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum IncludeError {
    /// A wildcard outside the file name.
    WildFolder,
    /// The folder of a wildcard pattern could not be listed, or the file of a plain
    /// pattern is not there.
    Io(String),
}

impl std::fmt::Display for IncludeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IncludeError::WildFolder => f.write_str("wildcards (* ?) may only appear in the file name"),
            IncludeError::Io(e) => f.write_str(e),
        }
    }
}

/// The files `pattern` names, sorted; relative patterns start at `base`.
pub(crate) fn expand(base: &Path, pattern: &str) -> Result<Vec<PathBuf>, IncludeError> {
    let path = base.join(pattern);
    let wild = |s: &str| s.contains(['*', '?']);
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Err(IncludeError::Io(format!("{}: not a file name", path.display())));
    };
    if wild(&dir.to_string_lossy()) {
        return Err(IncludeError::WildFolder);
    }
    if !wild(name) {
        return match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => Ok(vec![path]),
            Ok(_) => Err(IncludeError::Io(format!("{}: not a regular file", path.display()))),
            Err(e) => Err(IncludeError::Io(format!("{}: {e}", path.display()))),
        };
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        // nginx's and Apache's IncludeOptional way: no folder, no files.
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(IncludeError::Io(format!("{}: {e}", dir.display()))),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| IncludeError::Io(format!("{}: {e}", dir.display())))?;
        let file_name = entry.file_name();
        let Some(n) = file_name.to_str() else { continue };
        // Folders and other non-files that match are left out (`conf.d/old.toml/`).
        if matches(name.as_bytes(), n.as_bytes()) && std::fs::metadata(entry.path()).is_ok_and(|m| m.is_file()) {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

/// Shell-style matching of one file name: `*` any run, `?` any one byte; a leading
/// `.` in `name` must be matched by a literal `.`.
fn matches(pattern: &[u8], name: &[u8]) -> bool {
    if name.first() == Some(&b'.') && pattern.first() != Some(&b'.') {
        return false;
    }
    // The classic backtracking over the last `*`: linear in practice.
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == b'?' || c == name[n] => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    star = Some((sp, sn + 1));
                    p = sp + 1;
                    n = sn + 1;
                }
                None => return false,
            },
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_like_a_shell() {
        for (pattern, name, want) in [
            ("*.toml", "site.toml", true),
            ("*.toml", "site.toml.dpkg-old", false),
            ("*.toml", ".site.toml", false),
            (".*.toml", ".site.toml", true),
            ("*", "x", true),
            ("*", "", true),
            ("a?c.toml", "abc.toml", true),
            ("a?c.toml", "ac.toml", false),
            ("*-*.toml", "10-a-b.toml", true),
            ("*b*b", "abab", true),
            ("*b*b", "abba", false),
            ("site.toml", "site.toml", true),
        ] {
            assert_eq!(matches(pattern.as_bytes(), name.as_bytes()), want, "{pattern} {name}");
        }
    }

    #[test]
    fn expand_sorts_skips_and_checks() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("conf.d/folder.toml")).unwrap();
        for f in ["b.toml", "a.toml", "10-c.toml", "x.conf", ".hidden.toml"] {
            std::fs::write(d.join("conf.d").join(f), "").unwrap();
        }
        let names = |v: Vec<PathBuf>| -> Vec<String> {
            v.iter().map(|p| p.strip_prefix(d).unwrap().display().to_string()).collect()
        };
        assert_eq!(names(expand(d, "conf.d/*.toml").unwrap()), ["conf.d/10-c.toml", "conf.d/a.toml", "conf.d/b.toml"]);
        assert_eq!(names(expand(d, "conf.d/x.conf").unwrap()), ["conf.d/x.conf"]);
        assert_eq!(expand(d, "missing.d/*.toml"), Ok(vec![]));
        // Only a missing folder is no files: one that cannot be read is an error.
        assert!(matches!(expand(d, "conf.d/x.conf/*.toml"), Err(IncludeError::Io(e)) if e.contains("Not a directory")));
        assert!(matches!(expand(d, "conf.d/missing.toml"), Err(IncludeError::Io(e)) if e.contains("No such file")));
        assert!(matches!(expand(d, "conf.d/folder.toml"), Err(IncludeError::Io(e)) if e.contains("not a regular")));
        assert_eq!(expand(d, "*/a.toml"), Err(IncludeError::WildFolder));
        let abs = d.join("conf.d/a.toml");
        assert_eq!(expand(Path::new("/elsewhere"), abs.to_str().unwrap()), Ok(vec![abs]));
    }
}
