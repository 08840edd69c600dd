//! The config reader on arbitrary UTF-8: `config::parse` must turn any text into a
//! `Config` or a `ConfigError` with a position, never a panic.
//!
//! The config names files, and `parse` reads some of them (`server.mime_types`,
//! `include`; texts with an `include` are skipped) and looks at others, so it runs against a fixed site under /tmp, made once per
//! process: `conf/mime.types` and `htdocs/`, as `conf/pika.toml` expects. Seed the
//! corpus with the repository's `conf/` (see README.md).
#![no_main]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use pika::config;

/// Where the site lives; the same for every run, so that nothing piles up in /tmp.
const SITE: &str = "/tmp/pika-fuzz-config-site";

/// Files larger than this are not handed to `parse` as a mime.types (see `readable`).
const MAX_MIME_FILE: u64 = 1 << 20;

fn site() -> &'static Path {
    static SITE_DIR: OnceLock<PathBuf> = OnceLock::new();
    SITE_DIR.get_or_init(|| {
        let root = PathBuf::from(SITE);
        fs::create_dir_all(root.join("conf")).expect("create the site's conf/");
        fs::create_dir_all(root.join("htdocs")).expect("create the site's htdocs/");
        fs::create_dir_all(root.join("logs")).expect("create the site's logs/");
        let mime = root.join("conf/mime.types");
        let types = "text/html html htm\ntext/plain txt\nimage/png png\n";
        // Write once; another fuzzing process may be reading it.
        if fs::read_to_string(&mime).ok().as_deref() != Some(types) {
            let tmp = root.join(format!("conf/.mime.types.{}", std::process::id()));
            fs::write(&tmp, types).expect("write mime.types");
            fs::rename(&tmp, &mime).expect("install mime.types");
        }
        root
    })
}

/// The mime.types file a config text would have `parse` read, if the text is TOML.
///
/// A harness guard, not a check on pika: a config may name any file, and reading
/// `/dev/zero`, a FIFO or `/proc/kcore` would hang or exhaust memory. An operator who
/// writes that gets what they asked for; the fuzzer must not.
fn mime_file(text: &str, conf: &Path) -> Option<PathBuf> {
    let table: toml::Table = text.parse().ok()?;
    let server = table.get("server")?.as_table()?;
    let conf_dir = conf.parent()?;
    let root = match server.get("root") {
        Some(r) => conf_dir.join(r.as_str()?),
        None => conf_dir.parent()?.to_path_buf(),
    };
    let mime = match server.get("mime_types") {
        Some(m) => m.as_str()?,
        None => "conf/mime.types",
    };
    Some(root.join(mime))
}

/// False for anything but a small regular file (or a folder, which fails at once)
/// outside the kernel's pseudo-filesystems.
fn readable(file: &Path) -> bool {
    let Ok(real) = fs::canonicalize(file) else { return true }; // missing: parse reports it
    let Ok(meta) = fs::metadata(&real) else { return true };
    let pseudo = ["/proc", "/sys", "/dev"].iter().any(|p| real.starts_with(p));
    !pseudo && (meta.is_dir() || (meta.is_file() && meta.len() <= MAX_MIME_FILE))
}

/// True if the text is TOML with an `include` key: `parse` would read the files it
/// names, which may be anything on this machine (see `readable`).
fn includes(text: &str) -> bool {
    text.parse::<toml::Table>().is_ok_and(|t| t.contains_key("include"))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let conf = site().join("conf/pika.toml");
    if mime_file(text, &conf).is_some_and(|f| !readable(&f)) || includes(text) {
        return;
    }
    match config::parse(text, &conf) {
        Ok(c) => {
            assert!(!c.listen.is_empty() && !c.vhosts.is_empty());
            assert!(c.workers.max >= 1 && c.workers.start <= c.workers.max);
            assert!(c.workers.min_spare < c.workers.max_spare);
            assert!(c.http.max_request_line >= 16 && c.http.max_header_size >= c.http.max_request_line);
            assert!((1..=pika::http::request::MAX_HEADERS).contains(&c.http.max_headers));
            assert!(c.status.path.starts_with('/'));
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
});
