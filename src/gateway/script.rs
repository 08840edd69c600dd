//! Which file a URL path runs, and what is left of the path (`PATH_INFO`).
//!
//! The path is walked a segment at a time under the location's directory, each
//! step opened with the same confinement as a static file (`openat2` with
//! `RESOLVE_BENEATH`: no `..`, no absolute link, no link at all with
//! `symlinks = "never"`): the first regular file is the script, the segments after
//! it are `PATH_INFO` (`/cgi-bin/app.py/users/7` runs `app.py` with `/users/7`). A
//! path that ends at a directory runs its index file if the location names one
//! (`index.php`), else it is not found. No segment of the script's own path may be
//! hidden (start with a dot). What a file may run as is the location's [`Policy`].

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::base::sys::{self, Symlinks};

/// How a location runs the files it finds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// `cgi = true`: a file with an execute bit runs itself.
    pub executables: bool,
    /// `cgi_interpreters`: a file whose extension is named runs under its program.
    pub interpreters: BTreeMap<String, PathBuf>,
    /// FastCGI: the application runs the file (any regular file is passed on).
    pub fastcgi: bool,
    /// Files tried when the path ends at a directory.
    pub index: Vec<String>,
}

/// A script found.
#[derive(Debug)]
pub struct Script {
    /// Its path under the directory (no leading `/`).
    pub rel: PathBuf,
    /// Bytes of the URL path (the part given to [`find`]) that name the script: the
    /// rest is `PATH_INFO`.
    pub name_len: usize,
    /// The index file appended (the path ended at a directory).
    pub index: Option<String>,
    /// The program to run it with, for an interpreted script.
    pub interpreter: Option<PathBuf>,
}

/// Why no script answers.
#[derive(Debug, PartialEq, Eq)]
pub enum Missing {
    /// 404.
    NotFound,
    /// 403: a file is there but this location does not run it.
    NotRunnable,
}

/// Finds the script `path` names (decoded, cleaned, relative to `dir`, segments
/// separated by `/`) under the directory open as `dir`.
pub fn find(dir: &File, dir_path: &Path, links: Symlinks, path: &[u8], policy: &Policy) -> Result<Script, Missing> {
    let lead = usize::from(path.starts_with(b"/"));
    let path = &path[lead..];
    let mut end = 0;
    loop {
        // The next segment.
        let next = path[end..].iter().position(|&b| b == b'/').map_or(path.len(), |i| end + i);
        let seg = &path[end..next];
        if seg.starts_with(b".") {
            return Err(Missing::NotFound);
        }
        let rel = &path[..next];
        let file = open(dir, dir_path, links, rel)?;
        let meta = file.metadata().map_err(|_| Missing::NotFound)?;
        if meta.is_file() {
            return runnable(rel, &meta, policy).map(|interpreter| Script {
                rel: PathBuf::from(std::ffi::OsStr::from_bytes(rel)),
                name_len: lead + next,
                index: None,
                interpreter,
            });
        }
        if !meta.is_dir() {
            return Err(Missing::NotFound);
        }
        if next >= path.len() || next + 1 == path.len() {
            // The path ends at this directory: its index, if any.
            return index(dir, dir_path, links, &path[..next], policy).map(|(rel, name, interpreter)| Script {
                rel,
                name_len: lead + path.len(),
                index: Some(name),
                interpreter,
            });
        }
        end = next + 1;
    }
}

fn open(dir: &File, dir_path: &Path, links: Symlinks, rel: &[u8]) -> Result<File, Missing> {
    let rel = Path::new(std::ffi::OsStr::from_bytes(rel));
    sys::open_beneath(dir.as_fd(), dir_path, rel, links).map_err(|e| match e.kind() {
        io::ErrorKind::PermissionDenied => Missing::NotRunnable,
        _ => Missing::NotFound,
    })
}

fn index(
    dir: &File,
    dir_path: &Path,
    links: Symlinks,
    at: &[u8],
    policy: &Policy,
) -> Result<(PathBuf, String, Option<PathBuf>), Missing> {
    for name in &policy.index {
        let mut rel = at.to_vec();
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(name.as_bytes());
        let Ok(file) = open(dir, dir_path, links, &rel) else { continue };
        let Ok(meta) = file.metadata() else { continue };
        if meta.is_file() {
            let interpreter = runnable(&rel, &meta, policy)?;
            return Ok((PathBuf::from(std::ffi::OsStr::from_bytes(&rel)), name.clone(), interpreter));
        }
    }
    Err(Missing::NotFound)
}

/// Whether the policy runs this file, and with which program.
fn runnable(rel: &[u8], meta: &std::fs::Metadata, policy: &Policy) -> Result<Option<PathBuf>, Missing> {
    if policy.fastcgi {
        return Ok(None);
    }
    let name = rel.rsplit(|&b| b == b'/').next().unwrap_or(rel);
    let ext = name.iter().rposition(|&b| b == b'.').map(|i| &name[i + 1..]);
    if let Some(program) = ext.and_then(|e| std::str::from_utf8(e).ok()).and_then(|e| policy.interpreters.get(e)) {
        return Ok(Some(program.clone()));
    }
    if policy.executables && meta.permissions().mode() & 0o111 != 0 {
        return Ok(None);
    }
    Err(Missing::NotRunnable)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn tree() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        std::fs::create_dir_all(p.join("cgi-bin/sub")).unwrap();
        std::fs::create_dir_all(p.join("app")).unwrap();
        for (f, mode) in [("cgi-bin/run.sh", 0o755), ("cgi-bin/data.txt", 0o644), ("cgi-bin/app.py", 0o644)] {
            std::fs::write(p.join(f), "x").unwrap();
            std::fs::set_permissions(p.join(f), std::fs::Permissions::from_mode(mode)).unwrap();
        }
        std::fs::write(p.join("cgi-bin/.hidden.sh"), "x").unwrap();
        std::fs::write(p.join("app/index.php"), "x").unwrap();
        std::os::unix::fs::symlink("/bin/sh", p.join("cgi-bin/out.sh")).unwrap();
        d
    }

    fn policy() -> Policy {
        Policy {
            executables: true,
            interpreters: [("py".to_string(), PathBuf::from("/usr/bin/python3"))].into(),
            fastcgi: false,
            index: vec![],
        }
    }

    fn run(d: &tempfile::TempDir, path: &str, policy: &Policy) -> Result<Script, Missing> {
        let dir = File::open(d.path()).unwrap();
        find(&dir, d.path(), Symlinks::Inside, path.as_bytes(), policy)
    }

    #[test]
    fn the_first_file_is_the_script_and_the_rest_is_path_info() {
        let d = tree();
        let s = run(&d, "/cgi-bin/run.sh/a/b", &policy()).unwrap();
        assert_eq!((s.rel.to_str().unwrap(), s.name_len, s.interpreter), ("cgi-bin/run.sh", 15, None));
        let s = run(&d, "/cgi-bin/app.py", &policy()).unwrap();
        assert_eq!(s.interpreter.as_deref(), Some(Path::new("/usr/bin/python3")));
    }

    #[test]
    fn only_runnable_files_inside_run() {
        let d = tree();
        assert_eq!(run(&d, "/cgi-bin/data.txt", &policy()).unwrap_err(), Missing::NotRunnable);
        assert_eq!(run(&d, "/cgi-bin/nope.sh", &policy()).unwrap_err(), Missing::NotFound);
        assert_eq!(run(&d, "/cgi-bin/.hidden.sh", &policy()).unwrap_err(), Missing::NotFound);
        // A link out of the directory is never followed.
        assert_eq!(run(&d, "/cgi-bin/out.sh", &policy()).unwrap_err(), Missing::NotFound);
        assert_eq!(run(&d, "/cgi-bin/../../etc/passwd", &policy()).unwrap_err(), Missing::NotFound);
        // A directory without an index runs nothing.
        assert_eq!(run(&d, "/cgi-bin/sub/", &policy()).unwrap_err(), Missing::NotFound);
        let no_exec = Policy { executables: false, ..policy() };
        assert_eq!(run(&d, "/cgi-bin/run.sh", &no_exec).unwrap_err(), Missing::NotRunnable);
    }

    #[test]
    fn a_directory_runs_its_index_for_fastcgi() {
        let d = tree();
        let fcgi = Policy {
            executables: false,
            interpreters: BTreeMap::new(),
            fastcgi: true,
            index: vec!["index.php".into()],
        };
        let s = run(&d, "/app/", &fcgi).unwrap();
        assert_eq!((s.rel.to_str().unwrap(), s.index.as_deref()), ("app/index.php", Some("index.php")));
        let s = run(&d, "/", &fcgi);
        assert_eq!(s.unwrap_err(), Missing::NotFound);
        let s = run(&d, "/app/index.php/route/x", &fcgi).unwrap();
        assert_eq!(s.name_len, 14);
        // Any regular file goes to the application (which decides what it runs).
        assert!(run(&d, "/cgi-bin/data.txt", &fcgi).is_ok());
    }
}
