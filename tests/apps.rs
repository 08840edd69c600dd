//! Real PHP applications from Debian's packages, each served under the README's
//! config for it ("PHP applications": the ```toml block is read from README.md, so
//! the two cannot drift) with only its addresses, sockets, logs and writable folders
//! moved into a temp dir: WordPress (`wordpress`, with a MariaDB of its own) installed
//! through its web installer, a post published through its REST API and read at its
//! pretty permalink, a picture uploaded as the admin; MediaWiki (`mediawiki`, SQLite)
//! installed, a page edited through its API and read at its short URL; a front
//! controller of the test's own answering `/`, `/users/7` and a POST. Each runs its own
//! php-fpm pool (Debian's `php.ini` and modules, as the distribution's pool) started
//! and stopped by pid. Every answer is checked: none starts with `<?php`; a page asked
//! for with `Accept-Encoding: gzip` comes gzipped.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// How long a database server may take to start or stop, and an installer to run:
/// seconds on an idle machine, more on a small shared CI one.
const SLOW: Duration = Duration::from_secs(60);

/// The README's fenced block in `lang` whose first line is `first`.
fn readme_block(lang: &str, first: &str) -> String {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = format!("```{lang}\n{first}");
    let at = readme.find(&start).unwrap_or_else(|| panic!("README.md has no {start:?} block"));
    let block = &readme[at + 4 + lang.len()..];
    block[..block.find("```").unwrap()].to_string()
}

/// The README's config moved into `site`: the server on a free loopback port with
/// its pid file and logs in the site, no user to drop to (the test's own user runs
/// php-fpm too), every `fastcgi` on the test's pool at `socket`, and each folder that
/// starts with a `moves` prefix under its new place. Everything else as written.
fn localize(text: &str, site: &Site, socket: &Path, moves: &[(&str, PathBuf)]) -> String {
    let mut doc: toml::Table = toml::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let server = doc.entry("server").or_insert_with(|| toml::Table::new().into()).as_table_mut().unwrap();
    for key in ["user", "group"] {
        server.remove(key);
    }
    server.insert("listen".into(), toml::Value::Array(vec!["127.0.0.1:0".into()]));
    server.insert("root".into(), site.dir.path().to_str().unwrap().into());
    server.insert("pid_file".into(), "logs/pika.pid".into());
    server.insert("error_log".into(), "logs/error.log".into());
    let http = doc.entry("http").or_insert_with(|| toml::Table::new().into()).as_table_mut().unwrap();
    http.insert("body_temp_dir".into(), site.path("bodies").to_str().unwrap().into());
    let moved = |v: &mut toml::Value| {
        let Some(s) = v.as_str() else { return };
        if let Some((from, to)) = moves.iter().find(|(from, _)| s.starts_with(from)) {
            *v = format!("{}{}", to.display(), &s[from.len()..]).into();
        }
    };
    for v in doc.get_mut("vhost").and_then(toml::Value::as_array_mut).into_iter().flatten() {
        let v = v.as_table_mut().unwrap();
        v.get_mut("root").map(moved);
        for l in v.get_mut("location").and_then(toml::Value::as_array_mut).into_iter().flatten() {
            let l = l.as_table_mut().unwrap();
            l.get_mut("root").map(moved);
            l.get_mut("alias").map(moved);
            if l.contains_key("fastcgi") {
                l.insert("fastcgi".into(), format!("unix:{}", socket.display()).into());
            }
        }
    }
    let mut log = toml::Table::new();
    log.insert("path".into(), "logs/access.log".into());
    doc.insert("access_log".into(), toml::Value::Array(vec![log.into()]));
    toml::to_string(&doc).unwrap()
}

/// The config's `workers.max` (the pool's `pm.max_children` must be at least that)
/// and whether its first vhost compresses.
fn workers_max_and_compress(config: &str) -> (i64, bool) {
    let doc: toml::Table = toml::from_str(config).unwrap();
    let max = doc["workers"]["max"].as_integer().expect("the README's config sets workers.max");
    let compress = doc["vhost"][0].get("compress").and_then(toml::Value::as_bool) == Some(true);
    (max, compress)
}

/// Writes the config, checks it with `pika -t`, and starts pika (master and workers).
fn serve(site: &Site, config: &str) -> Pika {
    let (_, compress) = workers_max_and_compress(config);
    assert!(compress, "the README's config compresses: compress = true on its vhost\n{config}");
    // The master makes it for the workers (0700); -t checks what is there.
    std::fs::write(site.path("conf/pika.toml"), config).unwrap();
    let checked = Command::new(BIN).arg("-t").arg("-f").arg(site.path("conf/pika.toml")).output().unwrap();
    assert!(checked.status.success(), "pika -t: {}\n{config}", String::from_utf8_lossy(&checked.stderr));
    Pika::start(site, "-F")
}

/// A test that cannot run here for a reason other than a missing program: skipped
/// with a line saying why, or failed under `PIKA_TEST_REQUIRE_TOOLS` (as `.ci/run`).
fn cannot_run(why: &str) {
    if std::env::var(REQUIRE_TOOLS).is_ok_and(|v| !v.is_empty() && v != "0") {
        panic!("{why}, and {REQUIRE_TOOLS} is set");
    }
    let test = std::thread::current().name().unwrap_or("a test").to_string();
    let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("SKIPPED {test}: {why}\n").as_bytes());
}

/// A php-fpm pool of the test's own, as Debian's pool runs (its `php.ini` and the
/// modules the packages enabled), on a socket in the site; stopped by pid.
struct Fpm {
    child: Child,
    socket: PathBuf,
}

impl Fpm {
    /// `children`: `pm.max_children`, at least pika's `workers.max` (each pika worker
    /// keeps a connection, and a child serves one at a time); `env`: `env[…]` lines.
    fn start(php_fpm: &Path, site: &Site, children: i64, env: &[(&str, &str)]) -> Fpm {
        let socket = site.path("run/fpm.sock");
        std::fs::create_dir_all(socket.parent().unwrap()).unwrap();
        let mut conf = format!(
            "[global]\nerror_log = {log}\ndaemonize = no\n\
             [app]\nlisten = {sock}\npm = ondemand\npm.max_children = {children}\n\
             catch_workers_output = yes\nphp_admin_flag[display_errors] = off\nphp_admin_flag[log_errors] = on\n",
            log = site.path("logs/fpm.log").display(),
            sock = socket.display(),
        );
        for (k, v) in env {
            conf.push_str(&format!("env[{k}] = {v}\n"));
        }
        site.write("conf/fpm.conf", conf);
        let mut cmd = Command::new(php_fpm);
        cmd.arg("-y").arg(site.path("conf/fpm.conf")).arg("-F");
        if nix::unistd::geteuid().is_root() {
            cmd.arg("-R");
        }
        let child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        wait_until(DEADLINE, "php-fpm to listen", || socket.exists().then_some(()));
        Fpm { child, socket }
    }
}

impl Drop for Fpm {
    fn drop(&mut self) {
        stop(&mut self.child, nix::sys::signal::Signal::SIGQUIT);
    }
}

/// Signals `child` by its pid, waits for it (`SLOW`), then kills it.
fn stop(child: &mut Child, sig: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig);
    let end = Instant::now() + SLOW;
    while Instant::now() < end {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A MariaDB server of the test's own: its data in the site, a socket there, no TCP.
struct MariaDb {
    child: Child,
    socket: PathBuf,
    client: PathBuf,
}

impl MariaDb {
    fn start(site: &Site, install_db: &Path, mariadbd: &Path, client: &Path) -> MariaDb {
        let data = site.path("db/data");
        std::fs::create_dir_all(&data).unwrap();
        let root = nix::unistd::geteuid().is_root();
        let user: &[&str] = if root { &["--user=root"] } else { &[] };
        let out = Command::new(install_db)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .args(["--auth-root-authentication-method=socket", "--skip-test-db"])
            .args(user)
            .output()
            .unwrap();
        assert!(out.status.success(), "mariadb-install-db: {}", String::from_utf8_lossy(&out.stderr));
        let socket = site.path("db/mysqld.sock");
        let child = Command::new(mariadbd)
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", socket.display()))
            .arg(format!("--pid-file={}", site.path("db/mysqld.pid").display()))
            .arg(format!("--log-error={}", site.path("logs/mysqld.log").display()))
            .args(["--skip-networking", "--innodb-buffer-pool-size=32M"])
            .args(user)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut db = MariaDb { child, socket, client: client.to_path_buf() };
        wait_until(SLOW, "mariadbd to take queries", || db.try_sql("SELECT 1").then_some(()));
        db
    }

    fn try_sql(&mut self, sql: &str) -> bool {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("mariadbd exited ({status})");
        }
        let out = Command::new(&self.client)
            .arg("--no-defaults")
            .arg(format!("--socket={}", self.socket.display()))
            .args(["-u", "root", "-e", sql])
            .output()
            .unwrap();
        out.status.success()
    }
}

impl Drop for MariaDb {
    fn drop(&mut self) {
        stop(&mut self.child, nix::sys::signal::Signal::SIGTERM);
    }
}

/// Removes a file when dropped (a config the test put where a package reads it).
struct RemoveAtEnd(PathBuf);

impl Drop for RemoveAtEnd {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A client that keeps cookies, as a browser does for one site, and checks every
/// answer: no body is a script's source.
struct Browser {
    addr: SocketAddr,
    host: String,
    cookies: BTreeMap<String, String>,
}

impl Browser {
    fn new(addr: SocketAddr, host: &str) -> Browser {
        Browser { addr, host: host.to_string(), cookies: BTreeMap::new() }
    }

    /// One request on a connection of its own; `extra` are header lines (each
    /// ending in \r\n).
    fn ask(&mut self, method: &str, path: &str, extra: &str, body: &[u8]) -> Resp {
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n{extra}", self.host);
        if !self.cookies.is_empty() {
            let jar: Vec<String> = self.cookies.iter().map(|(k, v)| format!("{k}={v}")).collect();
            req.push_str(&format!("Cookie: {}\r\n", jar.join("; ")));
        }
        if method == "POST" {
            req.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        bytes.extend_from_slice(body);
        let r = raw(self.addr, &bytes);
        for line in r.head.lines().skip(1) {
            let Some((name, value)) = line.split_once(':') else { continue };
            if !name.eq_ignore_ascii_case("set-cookie") {
                continue;
            }
            let pair = value.trim().split(';').next().unwrap_or("");
            if let Some((k, v)) = pair.split_once('=') {
                let gone = v.is_empty() || v == "deleted" || value.to_ascii_lowercase().contains("max-age=0");
                if gone {
                    self.cookies.remove(k);
                } else {
                    self.cookies.insert(k.to_string(), v.to_string());
                }
            }
        }
        let text = body_text(&r);
        assert!(
            !text.trim_start().starts_with("<?php"),
            "{method} {path} answered {} with a script's source:\n{}",
            r.status,
            &text[..text.len().min(400)]
        );
        r
    }

    fn get(&mut self, path: &str) -> Resp {
        self.ask("GET", path, "", b"")
    }

    fn post_form(&mut self, path: &str, fields: &[(&str, &str)]) -> Resp {
        let body = form(fields);
        self.ask("POST", path, "Content-Type: application/x-www-form-urlencoded\r\n", body.as_bytes())
    }

    /// GET asking for gzip: the answer must come gzipped; its text, unzipped.
    fn get_gzipped(&mut self, path: &str) -> String {
        let r = self.ask("GET", path, "Accept-Encoding: gzip\r\n", b"");
        assert_eq!(r.status, 200, "{path}: {}", r.head);
        assert_eq!(r.header("content-encoding").as_deref(), Some("gzip"), "{path}: {}", r.head);
        assert!(r.header("vary").is_some_and(|v| v.contains("Accept-Encoding")), "{path}: {}", r.head);
        body_text(&r)
    }
}

/// A body as text, unzipped if it came gzipped.
fn body_text(r: &Resp) -> String {
    if r.header("content-encoding").as_deref() == Some("gzip") {
        let mut out = String::new();
        flate2::read::GzDecoder::new(&r.body[..]).read_to_string(&mut out).expect("a gzip body");
        return out;
    }
    String::from_utf8_lossy(&r.body).into_owned()
}

/// `application/x-www-form-urlencoded`.
fn form(fields: &[(&str, &str)]) -> String {
    let enc = |s: &str| -> String {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect()
    };
    fields.iter().map(|(k, v)| format!("{}={}", enc(k), enc(v))).collect::<Vec<_>>().join("&")
}

/// What lies between `start` and the next `end` in `hay`.
fn between<'a>(hay: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = hay.find(start)? + start.len();
    Some(&hay[from..from + hay[from..].find(end)?])
}

/// The path and query of a URL (`http://host:port/p?q` → `/p?q`).
fn path_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    rest.find('/').map_or("/", |at| &rest[at..])
}

/// A 1×1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52, 0x00, 0x00, 0x00,
    0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00, 0x0d, 0x49,
    0x44, 0x41, 0x54, 0x78, 0xda, 0x63, 0xfc, 0xcf, 0xc0, 0x50, 0x0f, 0x00, 0x04, 0x85, 0x01, 0x80, 0x84, 0xa9, 0x8c,
    0x21, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

#[test]
fn a_front_controller_routes_every_path_that_is_not_a_file() {
    let Some(php_fpm) = need_tool("php-fpm8.2") else { return };
    let site = Site::new();
    let public = site.path("srv/app/public");
    site.write(
        "srv/app/public/index.php",
        "<?php\n$path = parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH);\n\
         if ($_SERVER['REQUEST_METHOD'] === 'POST' && $path === '/users') {\n\
         \x20   http_response_code(201); echo 'created ', $_POST['name'], ' by ', $_SERVER['SCRIPT_NAME']; exit;\n}\n\
         if (preg_match('#^/users/(\\d+)$#', $path, $m)) { echo 'user ', $m[1], ' tab ', $_GET['tab'] ?? '-'; exit; }\n\
         if ($path === '/') { echo str_repeat('<p>home</p>', 100); exit; }\n\
         http_response_code(404); echo 'no route to ', $path;\n",
    );
    site.write("srv/app/public/build/app-1234.css", "body { color: black; }\n".repeat(20));
    site.write("srv/app/public/.env", "<?php APP_KEY=secret\n");
    let (max, _) = workers_max_and_compress(&readme_block("toml", "# A PHP front controller"));
    let fpm = Fpm::start(&php_fpm, &site, max, &[]);
    let config = localize(
        &readme_block("toml", "# A PHP front controller"),
        &site,
        &fpm.socket,
        &[("/srv/app/public", public.clone())],
    );
    let p = serve(&site, &config);
    let mut b = Browser::new(p.addr, "app.example.com");
    let home = b.get("/");
    assert_eq!((home.status, home.text().starts_with("<p>home</p>")), (200, true), "{}", home.head);
    assert_eq!(home.header("x-frame-options").as_deref(), Some("SAMEORIGIN"), "{}", home.head);
    assert!(b.get_gzipped("/").starts_with("<p>home</p>"));
    let user = b.get("/users/7?tab=2");
    assert_eq!((user.status, user.text().as_str()), (200, "user 7 tab 2"), "{}", user.head);
    let created = b.post_form("/users", &[("name", "pika")]);
    assert_eq!((created.status, created.text().as_str()), (201, "created pika by /index.php"), "{}", created.head);
    let missing = b.get("/no/such/page");
    assert_eq!((missing.status, missing.text().as_str()), (404, "no route to /no/such/page"));
    let css = b.get("/build/app-1234.css");
    assert_eq!(css.status, 200);
    assert!(css.header("cache-control").is_some_and(|v| v == "max-age=31536000"), "{}", css.head);
    assert_eq!(b.get_gzipped("/build/app-1234.css"), "body { color: black; }\n".repeat(20));
    assert_eq!(b.get("/.env").status, 404, "a dot-file is never served");
    assert_eq!(b.get("/index.php").status, 404, "index.php runs (and routes its own path)");
}

#[test]
fn wordpress_installs_publishes_at_a_pretty_permalink_and_takes_an_upload() {
    let Some(php_fpm) = need_tool("php-fpm8.2") else { return };
    let Some(_) = need_tool("/usr/share/wordpress/wp-login.php") else { return };
    let Some(_) = need_tool("/etc/php/8.2/mods-available/mysqli.ini") else { return };
    let Some(install_db) = need_tool("mariadb-install-db") else { return };
    let Some(mariadbd) = need_tool("mariadbd") else { return };
    let Some(client) = need_tool("mariadb") else { return };
    // Debian's wp-config.php reads a site's settings from /etc/wordpress only.
    let host = format!("wp{}.pika.test", std::process::id());
    let settings = PathBuf::from(format!("/etc/wordpress/config-{host}.php"));
    if std::fs::write(&settings, "").is_err() {
        return cannot_run(&format!(
            "{} cannot be written (Debian's WordPress reads it only there)",
            settings.display()
        ));
    }
    let _settings = RemoveAtEnd(settings.clone());
    let site = Site::new();
    let mut db = MariaDb::start(&site, &install_db, &mariadbd, &client);
    let made = db.try_sql(
        "CREATE DATABASE wordpress; CREATE USER 'wordpress'@'localhost' IDENTIFIED BY 'wp-pw'; \
         GRANT ALL ON wordpress.* TO 'wordpress'@'localhost';",
    );
    assert!(made, "the database and its user; log:\n{}", site.read("logs/mysqld.log"));
    // WP_CONTENT_DIR as Debian's /var/lib/wordpress/wp-content is made: the packaged
    // themes and plugins linked in, uploads written there.
    let var_lib = site.path("var/lib/wordpress");
    let content = var_lib.join("wp-content");
    std::fs::create_dir_all(content.join("uploads")).unwrap();
    for d in ["themes", "plugins", "languages"] {
        std::os::unix::fs::symlink(format!("/usr/share/wordpress/wp-content/{d}"), content.join(d)).unwrap();
    }
    std::fs::write(content.join("uploads/evil.php"), "<?php echo 'ran';\n").unwrap();
    let salt: String = format!("{:x}", std::process::id()).repeat(8);
    std::fs::write(
        &settings,
        format!(
            "<?php\ndefine('DB_NAME', 'wordpress');\ndefine('DB_USER', 'wordpress');\ndefine('DB_PASSWORD', 'wp-pw');\n\
             define('DB_HOST', 'localhost:{sock}');\ndefine('WP_CONTENT_DIR', '{content}');\n\
             define('FS_METHOD', 'direct');\ndefine('DISABLE_WP_CRON', true);\ndefine('WP_HTTP_BLOCK_EXTERNAL', true);\n\
             define('AUTH_KEY', 'a{salt}');\ndefine('SECURE_AUTH_KEY', 'b{salt}');\ndefine('LOGGED_IN_KEY', 'c{salt}');\n\
             define('NONCE_KEY', 'd{salt}');\ndefine('AUTH_SALT', 'e{salt}');\ndefine('SECURE_AUTH_SALT', 'f{salt}');\n\
             define('LOGGED_IN_SALT', 'g{salt}');\ndefine('NONCE_SALT', 'h{salt}');\n",
            sock = db.socket.display(),
            content = content.display(),
        ),
    )
    .unwrap();
    let readme = readme_block("toml", "# WordPress");
    let (max, _) = workers_max_and_compress(&readme);
    let fpm = Fpm::start(&php_fpm, &site, max, &[]);
    let config = localize(&readme, &site, &fpm.socket, &[("/var/lib/wordpress", var_lib.clone())]);
    let p = serve(&site, &config);
    let mut b = Browser::new(p.addr, &format!("{host}:{}", p.addr.port()));

    // The web installer.
    let first = b.get("/");
    assert_eq!(first.status, 302, "{}", first.head);
    assert!(first.header("location").is_some_and(|l| l.ends_with("/wp-admin/install.php")), "{}", first.head);
    let page = b.get("/wp-admin/install.php");
    assert!(page.status == 200 && page.text().contains("install.php?step=2"), "{}\n{}", page.head, page.text());
    let password = "Pika-test-pw-2026";
    let installed = b.post_form(
        "/wp-admin/install.php?step=2",
        &[
            ("weblog_title", "Pika Blog"),
            ("user_name", "admin"),
            ("admin_password", password),
            ("admin_password2", password),
            ("pw_weak", "on"),
            ("admin_email", "admin@pika.test"),
            ("blog_public", "0"),
            ("language", ""),
        ],
    );
    assert!(installed.text().contains("Success!"), "{}\n{}", installed.head, installed.text());

    // Logged in: its cookies.
    b.get("/wp-login.php");
    let login = b.post_form(
        "/wp-login.php",
        &[("log", "admin"), ("pwd", password), ("wp-submit", "Log In"), ("testcookie", "1")],
    );
    assert_eq!(login.status, 302, "{}\n{}", login.head, login.text());
    assert!(b.cookies.keys().any(|k| k.starts_with("wordpress_logged_in_")), "{}", login.head);
    let nonce = b.get("/wp-admin/admin-ajax.php?action=rest-nonce").text();
    assert!(nonce.len() >= 8 && nonce.bytes().all(|c| c.is_ascii_alphanumeric()), "rest nonce: {nonce:?}");
    let rest = |b: &mut Browser, route: &str, extra: &str, body: &[u8]| {
        b.ask("POST", &format!("/?rest_route={route}"), &format!("X-WP-Nonce: {nonce}\r\n{extra}"), body)
    };

    // A post, published, then read at its pretty permalink.
    let post = serde_json::json!({
        "title": "Hello from pika", "content": "Served by pika through php-fpm.", "status": "publish",
        "slug": "hello-from-pika",
    });
    let made = rest(&mut b, "/wp/v2/posts", "Content-Type: application/json\r\n", post.to_string().as_bytes());
    assert_eq!(made.status, 201, "{}\n{}", made.head, made.text());
    let id = serde_json::from_slice::<serde_json::Value>(&made.body).unwrap()["id"].as_i64().expect("the post's id");
    let settings_page = b.get("/wp-admin/options-permalink.php").text();
    let wpnonce = between(&settings_page, "name=\"_wpnonce\" value=\"", "\"").expect("the permalink form's nonce");
    let saved = b.post_form(
        "/wp-admin/options-permalink.php",
        &[
            ("_wpnonce", wpnonce),
            ("_wp_http_referer", "/wp-admin/options-permalink.php"),
            ("selection", "custom"),
            ("permalink_structure", "/%postname%/"),
            ("category_base", ""),
            ("tag_base", ""),
        ],
    );
    assert_eq!(saved.status, 302, "{}\n{}", saved.head, saved.text());
    let read = b.get("/hello-from-pika/");
    assert_eq!(read.status, 200, "{}", read.head);
    assert!(read.text().contains("Served by pika through php-fpm."), "{}", read.text());
    assert!(b.get_gzipped("/hello-from-pika/").contains("<title>Hello from pika"));
    let link =
        serde_json::from_slice::<serde_json::Value>(&b.get(&format!("/?rest_route=/wp/v2/posts/{id}")).body).ok();
    let link = link.and_then(|j| j["link"].as_str().map(str::to_string)).unwrap_or_default();
    assert!(link.ends_with("/hello-from-pika/"), "the post's link is its pretty permalink: {link:?}");

    // A picture uploaded as the admin, then served from wp-content by the alias.
    let media = rest(
        &mut b,
        "/wp/v2/media",
        "Content-Type: image/png\r\nContent-Disposition: attachment; filename=\"pika.png\"\r\n",
        PNG,
    );
    assert_eq!(media.status, 201, "{}\n{}", media.head, media.text());
    let json: serde_json::Value = serde_json::from_slice(&media.body).unwrap();
    let url = json["source_url"].as_str().expect("source_url").to_string();
    assert!(url.contains("/wp-content/uploads/"), "{url}");
    let png = b.get(path_of(&url));
    assert_eq!((png.status, png.body.as_slice()), (200, PNG), "{}", png.head);
    assert_eq!(png.header("content-type").as_deref(), Some("image/png"));
    assert_eq!(png.header("cache-control").as_deref(), Some("max-age=2592000"), "{}", png.head);

    // wp-admin's own stylesheet, made by a script with its own caching lines: the
    // config's expires for text/css replaces them, compressed.
    let styles = "/wp-admin/load-styles.php?c=0&dir=ltr&load%5Bchunk_0%5D=dashicons,admin-bar";
    let css = b.ask("GET", styles, "Accept-Encoding: gzip\r\n", b"");
    assert_eq!(css.header("content-encoding").as_deref(), Some("gzip"), "{}", css.head);
    assert_eq!(css.head.matches("Cache-Control:").count(), 1, "{}", css.head);
    assert!(css.head.contains("Cache-Control: max-age=2592000\r\n"), "{}", css.head);
    assert!(body_text(&css).contains("dashicons"));

    // What must never be sent: an upload that names a script, the config.
    assert_eq!(b.get("/wp-content/uploads/evil.php").status, 403);
    let config_php = b.get("/wp-config.php");
    assert!(!config_php.text().contains("DB_PASSWORD"), "{}", config_php.text());
    let theme_css = b.get("/wp-content/themes/twentytwentythree/style.css");
    assert!(theme_css.status == 200 && theme_css.text().contains("Twenty Twenty-Three"), "{}", theme_css.head);
    drop(p);
    drop(fpm);
}

#[test]
fn mediawiki_installs_and_a_page_is_edited_and_read_at_its_short_url() {
    let Some(php_fpm) = need_tool("php-fpm8.2") else { return };
    let Some(php) = need_tool("php8.2") else { return };
    let Some(installer) = need_tool("/usr/share/mediawiki/maintenance/install.php") else { return };
    let Some(_) = need_tool("/etc/php/8.2/mods-available/pdo_sqlite.ini") else { return };
    let site = Site::new();
    let wiki = site.path("wiki");
    std::fs::create_dir_all(wiki.join("data")).unwrap();
    // MediaWiki reads its settings from where MW_CONFIG_FILE says (else Debian's
    // /etc/mediawiki/LocalSettings.php).
    let settings = wiki.join("LocalSettings.php");
    let env = [("MW_CONFIG_FILE", settings.to_str().unwrap())];
    let readme = readme_block("toml", "# MediaWiki");
    let (max, _) = workers_max_and_compress(&readme);
    let fpm = Fpm::start(&php_fpm, &site, max, &env);
    let config = localize(&readme, &site, &fpm.socket, &[]);
    let p = serve(&site, &config);
    let server = format!("http://127.0.0.1:{}", p.addr.port());
    let out = Command::new(&php)
        .arg(&installer)
        .args(["--dbtype", "sqlite", "--dbname", "pikawiki", "--dbpath"])
        .arg(wiki.join("data"))
        .args(["--server", &server, "--scriptpath", "", "--lang", "en", "--pass", "Pika-test-pw-2026"])
        .arg("--confpath")
        .arg(&wiki)
        .args(["Pika Wiki", "Admin"])
        .envs(env)
        .output()
        .unwrap();
    assert!(
        out.status.success() && settings.exists(),
        "install.php: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut local = std::fs::read_to_string(&settings).unwrap();
    local.push_str(&readme_block("php", "# Short URLs"));
    std::fs::write(&settings, local).unwrap();

    let mut b = Browser::new(p.addr, &format!("127.0.0.1:{}", p.addr.port()));
    let root = b.get("/");
    assert_eq!((root.status, root.header("location").as_deref()), (301, Some("/wiki/Main_Page")), "{}", root.head);
    let main = b.get("/wiki/Main_Page");
    assert!(
        main.status == 200 && main.text().contains("MediaWiki has been installed"),
        "{}\n{}",
        main.head,
        main.text()
    );

    // An edit through the API, with its token.
    let tokens = b.get("/api.php?action=query&meta=tokens&format=json");
    let tokens: serde_json::Value = serde_json::from_slice(&tokens.body).expect("the tokens' JSON");
    let token = tokens["query"]["tokens"]["csrftoken"].as_str().expect("a csrf token").to_string();
    let text = "Served by [[pika]] through php-fpm.";
    let edit = b.post_form(
        "/api.php",
        &[
            ("action", "edit"),
            ("title", "Pika Test"),
            ("text", text),
            ("summary", "a test"),
            ("format", "json"),
            ("token", &token),
        ],
    );
    assert!(edit.text().contains("\"result\":\"Success\""), "{}\n{}", edit.head, edit.text());

    // Read at its short URL; the arguments go through the rewrite.
    let page = b.get("/wiki/Pika_Test");
    assert_eq!(page.status, 200, "{}", page.head);
    assert!(page.text().contains("Served by <a href=\"/index.php?title=Pika&amp;action=edit&amp;redlink=1\""));
    assert!(b.get_gzipped("/wiki/Pika_Test").contains("<span class=\"mw-page-title-main\">Pika Test</span>"));
    let source = b.get("/wiki/Pika_Test?action=raw");
    assert_eq!((source.status, source.text().as_str()), (200, text), "{}", source.head);
    let styles = b.get_gzipped("/load.php?lang=en&modules=skins.vector.styles.legacy&only=styles&skin=vector");
    assert!(styles.contains("vector"), "{styles}");
    let logo = b.get("/resources/assets/poweredby_mediawiki_88x31.png");
    assert_eq!((logo.status, logo.header("content-type").as_deref()), (200, Some("image/png")), "{}", logo.head);

    // What the package's .htaccess files deny, and the settings, are never sent.
    assert_eq!(b.get("/includes/WebStart.php").status, 404);
    assert_eq!(b.get("/maintenance/install.php").status, 404);
    assert!(!b.get("/LocalSettings.php").text().contains("wgDBname"));
    drop(p);
    drop(fpm);
}
