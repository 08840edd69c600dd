//! The config as an operator meets it: a minimal file written anywhere starts (the
//! content types are built in), `conf.d` includes, and `pika -T` printing the
//! effective config.

use crate::util::*;

#[test]
fn a_config_without_mime_types_starts_with_the_builtin_table() {
    let site = Site::new();
    std::fs::remove_file(site.path("conf/mime.types")).unwrap();
    site.config("", "");
    site.write("htdocs/site.webmanifest", "{}");
    site.write("htdocs/book.epub", "x");
    site.write("htdocs/a.css", "x");
    let p = Pika::start(&site, "-F");
    for (path, ty) in [
        ("/site.webmanifest", "application/manifest+json"),
        ("/book.epub", "application/epub+zip"),
        ("/a.css", "text/css"),
    ] {
        assert_eq!(get(p.addr, path).header("content-type").as_deref(), Some(ty), "{path}");
    }
}

/// A site whose main file includes `conf.d/*.toml`, with one included vhost.
fn site_with_conf_d() -> Site {
    let site = Site::new();
    site.write(
        "conf/pika.toml",
        "include = [\"conf.d/*.toml\"]\n\
         [server]\nlisten = [\"127.0.0.1:0\"]\nlog_level = \"debug\"\n\
         [[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n",
    );
    site.write("www/a/index.html", "site a\n");
    site.write("www/b/index.html", "site b\n");
    site.write(
        "conf/conf.d/10-a.toml",
        "# site a\n[[vhost]]\nserver_names = [\"a.test\"]\nroot = \"www/a\"\n\
         [[vhost.access_log]]\npath = \"logs/a.log\"\nbuffer = 0\n",
    );
    site
}

fn page(addr: std::net::SocketAddr, host: &str) -> String {
    raw(addr, format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes()).text()
}

#[test]
fn included_vhosts_serve_and_a_reload_reads_a_new_file() {
    let site = site_with_conf_d();
    let p = Pika::start(&site, "-F");
    assert_eq!(page(p.addr, "a.test"), "site a\n");
    assert_eq!(page(p.addr, "b.test"), "<h1>hello</h1>\n", "no b.test yet: the default vhost answers");
    wait_until(DEADLINE, "a.test's own log", || {
        site.read("logs/a.log").contains("\"GET / HTTP/1.1\" 200").then_some(())
    });

    // The Debian habit: drop a file in conf.d, reload.
    site.write("conf/conf.d/20-b.toml", "[[vhost]]\nserver_names = [\"b.test\"]\nroot = \"www/b\"\n");
    // The two workers of the default pool (start 2, min_spare 1) read the old
    // config: an idle one may still take a connection until it has seen the reload,
    // so each request below waits for them to be gone.
    let old = n_children(p.pid, 2);
    p.signal(libc::SIGHUP);
    wait_until(DEADLINE, "the old generation to exit", || old.iter().all(|&w| !alive(w)).then_some(()));
    assert_eq!(page(p.addr, "b.test"), "site b\n", "b.test served after the reload");
    assert_eq!(page(p.addr, "a.test"), "site a\n");

    // A broken included file is reported with its name and position, and the running
    // config stays.
    site.write("conf/conf.d/30-bad.toml", "[[vhost]]\nroot = \"www/a\"\nautoindex = maybe\n");
    p.signal(libc::SIGHUP);
    wait_until(DEADLINE, "the reload error in the error log", || {
        site.error_log().contains("conf.d/30-bad.toml:3:13:").then_some(())
    });
    assert_eq!(page(p.addr, "b.test"), "site b\n");
}

#[test]
fn dash_t_names_the_included_file_and_dash_big_t_prints_the_whole_config() {
    let site = site_with_conf_d();
    let conf = site.path("conf/pika.toml");
    let run = |flag: &str, file: &std::path::Path| {
        std::process::Command::new(BIN).args([flag, "-f"]).arg(file).output().expect("run pika")
    };
    site.write("conf/conf.d/20-b.toml", "[[vhost]]\nserver_names = [\"b.test\"]\nroot = \"www/b\"\nlisten = 1\n");
    let o = run("-t", &conf);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("conf/conf.d/20-b.toml:4:1: unknown field `listen`"), "{err}");

    site.write("conf/conf.d/20-b.toml", "[[vhost]]\nserver_names = [\"b.test\"]\nroot = \"www/b\"\n");
    let o = run("-T", &conf);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let shown = String::from_utf8(o.stdout).unwrap();
    let from_a =
        format!("# from {}\n[[vhost]]\nserver_names = [\"a.test\"]\n", site.path("conf/conf.d/10-a.toml").display());
    assert!(shown.contains(&from_a), "{shown}");
    assert!(shown.contains(&format!("root = \"{}\"", site.path("www/b").display())), "{shown}");
    assert!(shown.contains("[[vhost.access_log]]\npath = "), "{shown}");
    assert!(shown.contains("max_keepalive_requests = 1000"), "defaults are shown: {shown}");
    assert!(!shown.contains("include = [\"conf.d"), "includes are in place: {shown}");

    // What -T prints is a config: -t accepts it, and -T on it prints the same keys.
    site.write("shown.toml", &shown);
    assert_eq!(run("-t", &site.path("shown.toml")).status.code(), Some(0));
    let again = String::from_utf8(run("-T", &site.path("shown.toml")).stdout).unwrap();
    let keys = |s: &str| s.lines().filter(|l| !l.starts_with('#')).map(str::to_string).collect::<Vec<_>>();
    assert_eq!(keys(&again), keys(&shown));
}

fn check(site: &Site) -> (Option<i32>, String) {
    let o = std::process::Command::new(BIN).arg("-t").arg("-f").arg(site.path("conf/pika.toml")).output().unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr))
}

/// A site whose `/echo` reads bodies, kept past 16 KiB in `bodies` (relative to
/// the site), with `server` lines.
fn body_site(server: &str, bodies: &str) -> Site {
    let site = Site::new();
    site.config(
        server,
        &format!(
            "[http]\nclient_body_buffer = \"16KiB\"\nbody_temp_dir = \"{bodies}\"\n\
             [[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n\
             [[vhost.location]]\nexact = \"/echo\"\necho = true\n"
        ),
    );
    site
}

/// `body_temp_dir` in a folder only root may write (as `/var/lib/pika`), for
/// workers that run as `nobody`: the master makes it and gives it to them, and a
/// body past `client_body_buffer` is kept there.
#[test]
fn the_master_makes_body_temp_dir_for_the_workers_user() {
    let site = body_site("user = \"nobody\"", "var/lib/pika/bodies");
    std::fs::create_dir_all(site.path("var/lib/pika")).unwrap();
    open_up(&site);
    let (code, text) = check(&site);
    assert_eq!(code, Some(0), "{text}");
    assert!(!site.path("var/lib/pika/bodies").exists(), "pika -t makes nothing");
    let p = Pika::start(&site, "-F");
    let body = vec![b'x'; 100_000];
    let mut s = connect(p.addr);
    let head = format!(
        "POST /echo HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    std::io::Write::write_all(&mut s, head.as_bytes()).unwrap();
    std::io::Write::write_all(&mut s, &body).unwrap();
    let r = read_response(&mut s, false).unwrap();
    assert_eq!((r.status, r.body.len()), (200, body.len()), "{}", site.error_log());
    let meta = std::fs::symlink_metadata(site.path("var/lib/pika/bodies")).unwrap();
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (nobody.uid.as_raw(), 0o700));
}

/// `pika -t`, and the start, refuse a `body_temp_dir` the workers could not keep
/// bodies in: under a folder everyone may write (another user may make it first),
/// made by another user, or behind a folder the workers' user may not pass; each
/// named with its fix.
#[test]
fn pika_t_refuses_a_body_temp_dir_others_could_take_or_the_workers_not_reach() {
    // Under a folder everyone may write, as /var/tmp.
    let site = body_site("", "tmp/bodies");
    std::fs::create_dir(site.path("tmp")).unwrap();
    std::fs::set_permissions(site.path("tmp"), std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
    let (code, text) = check(&site);
    assert_eq!(code, Some(1), "{text}");
    let tmp = site.path("tmp").display().to_string();
    assert!(
        text.contains("body_temp_dir") && text.contains(&format!("the folder {tmp} (everyone may write it")),
        "{text}"
    );
    // Made first by another user.
    std::fs::create_dir(site.path("tmp/bodies")).unwrap();
    std::fs::set_permissions(site.path("tmp"), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(site.path("tmp/bodies"), Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(site.path("tmp/bodies"), std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let (code, text) = check(&site);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("belongs to") && text.contains("uid 65534") && text.contains("Remove it"), "{text}");
    // The start says the same and does not serve.
    let o = std::process::Command::new(BIN).arg("-F").arg("-f").arg(site.path("conf/pika.toml")).output().unwrap();
    let said = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.code() == Some(1) && said.contains("uid 65534"), "{said}");
    // Behind a folder the workers' user may not pass.
    let site = body_site("user = \"nobody\"", "bodies");
    std::fs::set_permissions(site.dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let (code, text) = check(&site);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains(&format!("may not pass through {} ", site.dir.path().display())), "{text}");
    // Without a location that reads bodies, the folder is not looked at.
    site.config("user = \"nobody\"", "[http]\nbody_temp_dir = \"bodies\"\n");
    let (code, text) = check(&site);
    assert_eq!(code, Some(0), "{text}");
}
