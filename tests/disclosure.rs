//! No config pika accepts ever sends a script's source. Every example config of the
//! README and of `conf/pika.toml` that runs scripts is started as written (only its
//! addresses, folders and sockets moved into a temp dir), with PHP files in every
//! folder it serves and error pages that name them, and walked over the paths that
//! have disclosed source in web servers: the directory (its index), the file's name
//! bent by case, a trailing dot or slash, NUL, an encoded slash, doubled slashes,
//! `try_files` candidates, error pages, ranges, another vhost on the same folder. No
//! answer's body may start with `<?php`.
//!
//! No application server runs: a request that reaches the FastCGI location gets a
//! 502, which is the point (it went to the scripts, not to the files).

use std::path::Path;

use crate::util::*;

/// What each PHP file holds: a secret no client may read.
const SOURCE: &str = "<?php $db_password = 'hunter2'; echo 'ran';\n";

/// Paths that name a script, or reach it through a directory, a fallback or a
/// spelling that some server once took for a file.
const PATHS: &[&str] = &[
    "/",
    "/index.php",
    "/index.php.",
    "/INDEX.PHP",
    "/index.php%00",
    "/index.php%2f",
    "/index.php%2F",
    "/index.php/",
    "/index.php/x",
    "//index.php",
    "/./index.php",
    "/x/../index.php",
    "/%69ndex.php",
    "/index.p%68p",
    "/index.php%20",
    "/index.php::$DATA",
    "/app",
    "/app/",
    "/app//",
    "/app/index.php",
    "/app/?a=1",
    "/wp-config.php",
    "/no-such-file",
    "/no/such/dir/",
    "/uploads/evil.jpg/x.php",
    "/cgi-bin/",
    "/cgi-bin/index.php",
    "/cgi-bin/report.py",
];

/// The example configs that run scripts: each ```toml block of the README with a
/// `fastcgi` or `cgi` key, and the shipped config with its commented locations.
fn examples() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let mut out = Vec::new();
    let mut rest = readme.as_str();
    while let Some(at) = rest.find("```toml\n") {
        let line = readme[..readme.len() - rest.len() + at].lines().count() + 1;
        rest = &rest[at + 8..];
        let end = rest.find("```").unwrap();
        let block = &rest[..end];
        rest = &rest[end + 3..];
        let runs_scripts = block.lines().any(|l| {
            let k = l.split('=').next().unwrap_or("").trim();
            k == "fastcgi" || k == "cgi" || k == "cgi_interpreters"
        });
        if runs_scripts {
            out.push((format!("README.md:{line}"), block.to_string()));
        }
    }
    out.push(("conf/pika.toml".into(), shipped_with_its_locations(&root.join("conf/pika.toml"))));
    assert!(out.len() >= 3, "the README's script examples were not found: {out:?}");
    out
}

/// The shipped config with the commented `[[vhost.location]]` examples written in.
fn shipped_with_its_locations(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let mut out = String::new();
    let mut locations = String::new();
    let mut in_example = false;
    for line in text.lines() {
        if line == "# [[vhost.location]]" {
            in_example = true;
        }
        if in_example {
            match line.strip_prefix("# ") {
                Some(l) if !l.starts_with(' ') && (l.starts_with('[') || l.contains(" = ")) => {
                    locations.push_str(l);
                    locations.push('\n');
                    continue;
                }
                _ => in_example = false,
            }
        }
        out.push_str(line);
        out.push('\n');
    }
    assert!(locations.contains("fastcgi"), "conf/pika.toml's location examples were not found");
    // The locations go after the vhost they belong to, the last [[vhost]] block's
    // keys ending where the next table starts.
    let at = out.find("\n[[access_log]]").expect("conf/pika.toml has an [[access_log]]");
    out.insert_str(at + 1, &locations);
    out
}

/// `text` moved into `site`: the server on a free loopback port with its logs in
/// the site, every absolute folder under the site's `srv/` (made, with PHP files
/// in it), sockets under it too, no user to drop to, no TLS; every vhost with error
/// pages that name a script; and a vhost `files.test` that serves the first vhost's
/// folder as files.
fn localize(text: &str, site: &Site) -> String {
    let mut doc: toml::Table = toml::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let server = doc.entry("server").or_insert_with(|| toml::Table::new().into()).as_table_mut().unwrap();
    for key in ["user", "group", "chroot", "root", "pid_file", "error_log", "listen"] {
        server.remove(key);
    }
    server.insert("listen".into(), toml::Value::Array(vec!["127.0.0.1:0".into()]));
    server.insert("root".into(), site.dir.path().to_str().unwrap().into());
    server.insert("pid_file".into(), "logs/pika.pid".into());
    server.insert("error_log".into(), "logs/error.log".into());
    server.insert("log_level".into(), "debug".into());
    doc.remove("acme");
    doc.remove("include");
    if let Some(http) = doc.get_mut("http").and_then(toml::Value::as_table_mut) {
        http.remove("body_temp_dir");
    }
    let http = doc.entry("http").or_insert_with(|| toml::Table::new().into()).as_table_mut().unwrap();
    http.insert("body_temp_dir".into(), site.path("bodies").to_str().unwrap().into());
    let mut first_root = None;
    for v in doc.get_mut("vhost").and_then(toml::Value::as_array_mut).into_iter().flatten() {
        let v = v.as_table_mut().unwrap();
        for key in ["tls_cert", "tls_key", "acme", "https_redirect", "hsts"] {
            v.remove(key);
        }
        move_paths(v, site);
        let root = v.get("root").and_then(toml::Value::as_str).unwrap_or("htdocs").to_string();
        plant(&site.dir.path().join(&root));
        first_root.get_or_insert(root);
        let pages = v.entry("error_pages").or_insert_with(|| toml::Table::new().into()).as_table_mut().unwrap();
        pages.insert("404".into(), "/index.php".into());
        pages.insert("403".into(), "/app/index.php".into());
        for l in v.get_mut("location").and_then(toml::Value::as_array_mut).into_iter().flatten() {
            let l = l.as_table_mut().unwrap();
            move_paths(l, site);
            for key in ["root", "alias"] {
                if let Some(dir) = l.get(key).and_then(toml::Value::as_str) {
                    plant(&site.dir.path().join(dir));
                }
            }
            if l.contains_key("fastcgi") {
                let sock = site.path("srv/run/php-fpm.sock");
                l.insert("fastcgi".into(), format!("unix:{}", sock.display()).into());
            }
        }
    }
    let mut files = toml::Table::new();
    files.insert("server_names".into(), toml::Value::Array(vec!["files.test".into()]));
    files.insert("root".into(), first_root.unwrap_or_else(|| "htdocs".into()).into());
    files.insert("index".into(), toml::Value::Array(vec!["index.php".into(), "index.html".into()]));
    let vhosts = doc.entry("vhost").or_insert_with(|| toml::Value::Array(Vec::new()));
    vhosts.as_array_mut().unwrap().push(files.into());
    doc.remove("access_log");
    toml::to_string(&doc).unwrap()
}

/// Absolute paths of folders (`root`, `alias`) and files (`auth_file`) moved under
/// the site's `srv/`, made there.
fn move_paths(t: &mut toml::Table, site: &Site) {
    for (key, value) in t.iter_mut() {
        let Some(s) = value.as_str() else { continue };
        let names_a_path = key == "root" || key == "alias" || key.ends_with("_file");
        if !names_a_path || !s.starts_with('/') {
            continue;
        }
        let moved = site.path(&format!("srv{s}"));
        if key == "root" || key == "alias" {
            std::fs::create_dir_all(&moved).unwrap();
        } else {
            std::fs::create_dir_all(moved.parent().unwrap()).unwrap();
            // An htpasswd file with one user (password "test").
            std::fs::write(&moved, "user:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=\n").unwrap();
        }
        *value = moved.to_str().unwrap().into();
    }
}

/// PHP files where a site keeps them: its index, a folder's, a config, an upload
/// that names a script.
fn plant(dir: &Path) {
    for f in ["index.php", "app/index.php", "wp-config.php", "uploads/evil.jpg", "cgi-bin/index.php"] {
        let p = dir.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, SOURCE).unwrap();
    }
}

#[test]
fn no_example_config_sends_a_scripts_source_by_any_path() {
    for (name, text) in examples() {
        let site = Site::new();
        let config = localize(&text, &site);
        std::fs::write(site.path("conf/pika.toml"), &config).unwrap();
        let checked = std::process::Command::new(BIN).arg("-t").arg("-f").arg(site.path("conf/pika.toml")).output();
        let checked = checked.unwrap();
        assert!(checked.status.success(), "{name}: pika -t: {}\n{config}", String::from_utf8_lossy(&checked.stderr));
        let p = Pika::start(&site, "-X");
        let hosts: Vec<String> = toml::from_str::<toml::Table>(&config).unwrap()["vhost"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v.get("server_names")?.as_array()?.first()?.as_str().map(str::to_string))
            .collect();
        let mut answers = Vec::new();
        for host in &hosts {
            for path in PATHS {
                for extra in ["", "Range: bytes=0-20\r\n", "Accept-Encoding: gzip\r\n"] {
                    let r = raw(
                        p.addr,
                        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n").as_bytes(),
                    );
                    let body = String::from_utf8_lossy(&r.body).to_string();
                    assert!(
                        !body.contains("<?php") && !body.contains("hunter2"),
                        "{name}: GET {path} (Host: {host}, {extra:?}) answered {} with a script's source:\n{body}\n\
                         config:\n{config}",
                        r.status
                    );
                    answers.push(format!("{host}{path} {}", r.status));
                }
            }
        }
        // The walk reached what it meant to: the first vhost's script went to the
        // scripts (502: no application runs), not to the files or a refusal.
        let first = &hosts[0];
        assert!(answers.contains(&format!("{first}/index.php 502")), "{name}: index.php did not run: {answers:?}");
        drop(p);
    }
}
