//! `[[vhost.location]]`: which location answers (exact, then the first regex, then
//! the longest prefix), files from a location's own root or alias, the status page
//! as a location (and the old `[status] path`), and what `pika -t` says about
//! locations that overlap or can never be chosen.

use std::io::Write;
use std::process::Command;

use crate::util::*;

/// A site where each folder's `f.txt` says which folder it is.
fn site_with_folders(folders: &[&str]) -> Site {
    let site = Site::new();
    for f in folders {
        site.write(&format!("{f}/f.txt"), format!("{f}\n"));
        site.write(&format!("{f}/static/f.txt"), format!("{f}/static\n"));
        site.write(&format!("{f}/static/img/f.txt"), format!("{f}/static/img\n"));
    }
    site
}

fn start(site: &Site, locations: &str) -> Pika {
    site.config("", &format!("[[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n{locations}"));
    Pika::start(site, "-X")
}

fn body(p: &Pika, path: &str) -> String {
    let r = get(p.addr, path);
    assert_eq!(r.status, 200, "{path}: {}", r.text());
    r.text()
}

#[test]
fn exact_beats_prefix_and_the_longest_prefix_wins() {
    let site = site_with_folders(&["htdocs", "a", "b", "c"]);
    let p = start(
        &site,
        "[[vhost.location]]\nprefix = \"/static/\"\nroot = \"a\"\n\
         [[vhost.location]]\nexact = \"/static/f.txt\"\nroot = \"b\"\n\
         [[vhost.location]]\nprefix = \"/static/img/\"\nroot = \"c\"\n",
    );
    assert_eq!(body(&p, "/static/f.txt"), "b/static\n", "exact beats the prefix written before it");
    assert_eq!(body(&p, "/static/img/f.txt"), "c/static/img\n", "the longest prefix");
    assert_eq!(get(p.addr, "/static/missing").status, 404, "the prefix's root, not the vhost's");
    assert_eq!(body(&p, "/f.txt"), "htdocs\n", "no location: the vhost's root");
    // Matched on the cleaned path: what a client spells differently lands alike.
    assert_eq!(body(&p, "/static/x/../f.txt"), "b/static\n");
    assert_eq!(get(p.addr, "/static%2Fimg/f.txt").status, 404, "an encoded slash is refused before any location");
}

#[test]
fn the_first_regex_in_the_file_wins_and_beats_a_prefix() {
    let site = site_with_folders(&["htdocs", "a", "b", "c"]);
    site.write("a/static/x.css", "a css\n");
    site.write("b/static/x.css", "b css\n");
    site.write("c/static/x.css", "c css\n");
    let p = start(
        &site,
        "[[vhost.location]]\nprefix = \"/static/\"\nroot = \"c\"\n\
         [[vhost.location]]\nregex = '\\.css$'\nroot = \"a\"\n\
         [[vhost.location]]\nregex = '^/static/'\nroot = \"b\"\n",
    );
    assert_eq!(body(&p, "/static/x.css"), "a css\n", "both regexes match: the first in the file");
    assert_eq!(body(&p, "/static/f.txt"), "b/static\n", "a regex beats a prefix");
    assert_eq!(body(&p, "/f.txt"), "htdocs\n");
}

#[test]
fn a_location_serves_from_its_own_root_or_alias_with_its_own_index() {
    let site = site_with_folders(&["htdocs"]);
    site.write("shared/robots.txt", "shared robots\n");
    site.write("files/doc/readme.txt", "readme\n");
    site.write("files/doc/start.html", "start page\n");
    site.write("files/list/one.txt", "1\n");
    let p = start(
        &site,
        "[[vhost.location]]\nexact = \"/robots.txt\"\nroot = \"shared\"\n\
         [[vhost.location]]\nprefix = \"/docs/\"\nalias = \"files/doc\"\nindex = [\"start.html\"]\n\
         [[vhost.location]]\nprefix = \"/list\"\nalias = \"files/list\"\nautoindex = true\n",
    );
    assert_eq!(body(&p, "/robots.txt"), "shared robots\n", "root: the whole path under the location's root");
    assert_eq!(body(&p, "/docs/readme.txt"), "readme\n", "alias: what follows the prefix, under the alias");
    assert_eq!(body(&p, "/docs/"), "start page\n", "the location's own index");
    let listing = get(p.addr, "/list/");
    assert_eq!(listing.status, 200);
    assert!(listing.text().contains("one.txt"), "the location's own autoindex: {}", listing.text());
    let r = get(p.addr, "/list");
    assert_eq!((r.status, r.header("location").as_deref()), (301, Some("/list/")), "a directory gets its slash");
    assert_eq!(get(p.addr, "/listing").status, 404, "only looks like it continues the prefix");
    assert_eq!(get(p.addr, "/docs/../f.txt").status, 200, "cleaned first: /f.txt, the vhost's");
    assert_eq!(get(p.addr, "/docs/%2e%2e/%2e%2e/etc/passwd").status, 400, "no way above the root");
}

#[test]
fn a_location_may_have_its_own_max_ranges() {
    let site = site_with_folders(&["htdocs"]);
    let p = start(&site, "[[vhost.location]]\nprefix = \"/static/\"\nmax_ranges = 0\n");
    let range = |path: &str| {
        let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nRange: bytes=0-1\r\nConnection: close\r\n\r\n");
        raw(p.addr, req.as_bytes())
    };
    let r = range("/f.txt");
    assert_eq!((r.status, r.text().as_str()), (206, "ht"), "[http] max_ranges outside the location");
    let r = range("/static/f.txt");
    assert_eq!((r.status, r.text().as_str()), (200, "htdocs/static\n"), "none at all in it: the whole file");
}

#[test]
fn the_status_page_is_a_location_and_the_old_key_still_works() {
    let site = Site::new();
    let p = start(&site, "[[vhost.location]]\nexact = \"/st\"\nstatus = true\n");
    let r = get(p.addr, "/st?auto");
    assert_eq!(r.status, 200);
    assert!(r.text().contains("Scoreboard: "), "{}", r.text());
    assert_eq!(get(p.addr, "/server-status").status, 404, "not at the old path unless [status] says so");

    // The old way: [status] enabled and path, read as an exact location in every vhost.
    let site = Site::new();
    site.config(
        "",
        "[status]\nenabled = true\npath = \"/old-status\"\n\
         [[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n\
         [[vhost]]\nserver_names = [\"other\"]\nroot = \"htdocs\"\n",
    );
    let p = Pika::start(&site, "-X");
    for host in ["localhost", "other"] {
        let r = raw(
            p.addr,
            format!("GET /old-status?auto HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        assert_eq!(r.status, 200, "{host}");
        assert!(r.text().contains("Scoreboard: "), "{host}: {}", r.text());
    }
    let r = raw(p.addr, b"POST /old-status HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n");
    assert_eq!(r.status, 405, "the status page is only read");
}

/// `allow` is a rule of any location whatever answers there, and of a vhost as the
/// default of its locations and its own files; the status page's default
/// (`[status] allow`, loopback) comes before the vhost's. The tests' client is
/// 127.0.0.1.
#[test]
fn allow_is_a_rule_of_any_location_and_a_vhost_sets_its_default() {
    let site = site_with_folders(&["htdocs"]);
    site.config(
        "",
        "[[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\nallow = [\"10.0.0.0/8\"]\n\
         [[vhost.location]]\nprefix = \"/static/\"\nallow = [\"127.0.0.0/8\", \"::1\"]\n\
         [[vhost.location]]\nprefix = \"/static/img/\"\nallow = [\"192.0.2.0/24\"]\n\
         [[vhost.location]]\nexact = \"/st\"\nstatus = true\n\
         [[vhost.location]]\nexact = \"/st-closed\"\nstatus = true\nallow = [\"192.0.2.1\"]\n\
         [[vhost.location]]\nexact = \"/healthz\"\nhealth = true\n",
    );
    let p = Pika::start(&site, "-X");
    assert_eq!(body(&p, "/static/f.txt"), "htdocs/static\n", "the location's own allow");
    assert_eq!(get(p.addr, "/static/img/f.txt").status, 403, "the location's own allow");
    assert_eq!(get(p.addr, "/st?auto").status, 200, "the status page's default before the vhost's");
    assert_eq!(get(p.addr, "/st-closed?auto").status, 403, "the location's own before the status page's default");
    assert_eq!(get(p.addr, "/healthz").status, 403, "the vhost's");
    let r = get(p.addr, "/f.txt");
    assert_eq!(r.status, 403, "the vhost's own files");
    assert!(!r.text().contains("htdocs"), "{}", r.text());
}

fn check(site: &Site, locations: &str) -> (Option<i32>, String) {
    site.config("", &format!("[[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n{locations}"));
    let o = Command::new(BIN).args(["-t", "-f"]).arg(site.path("conf/pika.toml")).output().expect("run pika -t");
    (o.status.code(), format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr)))
}

#[test]
fn dash_t_reports_overlapping_and_unreachable_locations() {
    let site = Site::new();
    site.write("a/x", "");
    // A regex that takes paths written for a prefix: said, and the config is fine.
    let (code, out) = check(
        &site,
        "[[vhost.location]]\nprefix = \"/static/\"\nroot = \"a\"\n\
         [[vhost.location]]\nregex = '^/static/'\nstatus = true\n",
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("warning: the location at ")
            && out.contains("(prefix = \"/static/\") does not answer \"/static/\"")
            && out.contains("(regex = \"^/static/\") is chosen there"),
        "{out}"
    );
    assert!(out.contains("syntax is ok"), "{out}");
    // A regex that matches every path shadows every prefix.
    let (code, out) = check(
        &site,
        "[[vhost.location]]\nregex = '.'\nroot = \"a\"\n[[vhost.location]]\nprefix = \"/p/\"\nroot = \"a\"\n",
    );
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("(prefix = \"/p/\") is never chosen") && out.contains("matches every path"), "{out}");
    // The same exact path twice: the second can never be chosen, an error with its line.
    let (code, out) = check(
        &site,
        "[[vhost.location]]\nexact = \"/a\"\nroot = \"a\"\n[[vhost.location]]\nexact = \"/a\"\nstatus = true\n",
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("pika.toml:11:1: this location (exact = \"/a\") can never be chosen"), "{out}");
    assert!(out.contains("pika.toml:8 (exact = \"/a\") is the same"), "{out}");
    // A path no cleaned request path has.
    let (code, out) = check(&site, "[[vhost.location]]\nprefix = \"/a/../b/\"\nroot = \"a\"\n");
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("can never be chosen") && out.contains("'..'"), "{out}");
    // And the mistakes that are not about matching.
    for (block, says) in [
        ("exact = \"/a\"\nprefix = \"/b\"\n", "exactly one of exact, prefix or regex"),
        ("exact = \"/a\"\nalias = \"a\"\n", "alias stands for a location's prefix"),
        ("prefix = \"/a\"\nstatus = true\nroot = \"a\"\n", "serves the status page, not files"),
        ("regex = '('\n", "bad regex"),
        ("prefix = \"/a\"\nroot = \"missing\"\n", "root"),
    ] {
        let (code, out) = check(&site, &format!("[[vhost.location]]\n{block}"));
        assert_eq!(code, Some(1), "{block}: {out}");
        assert!(out.contains(says), "{block}: {out}");
    }
}

/// Two requests on one connection to an `echo = true` location (the first kept
/// alive, the second closing): the answers as read until the close.
pub fn echo_twice(s: &mut impl Write, host: &str, first_body: &[u8]) {
    let mut req =
        format!("POST /echo HTTP/1.1\r\nHost: {host}\r\nContent-Length: {}\r\n\r\n", first_body.len()).into_bytes();
    req.extend_from_slice(first_body);
    req.extend_from_slice(
        format!(
            "PUT /echo HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
             5\r\nhello\r\n7;x=1\r\n, world\r\n0\r\n\r\n"
        )
        .as_bytes(),
    );
    s.write_all(&req).unwrap();
}

/// Checks the two answers [`echo_twice`] asked for: each the body sent, chunked,
/// the connection in step between them.
pub fn assert_echoed_twice(answers: &[u8], first_body: &[u8]) {
    let (head, rest) = split_head(answers);
    assert!(head.starts_with("HTTP/1.1 200 ") && head.contains("Transfer-Encoding: chunked\r\n"), "{head}");
    assert!(!head.contains("Content-Length") && !head.contains("Connection: close"), "{head}");
    let (body, rest) = dechunk(rest);
    assert!(body == first_body, "the first body back, {} bytes of {}", body.len(), first_body.len());
    let (head, rest) = split_head(rest);
    assert!(head.starts_with("HTTP/1.1 200 ") && head.contains("Connection: close\r\n"), "{head}");
    let (body, rest) = dechunk(rest);
    assert_eq!(body, b"hello, world", "the chunked body, decoded");
    assert!(rest.is_empty(), "nothing after the last answer: {:?}", String::from_utf8_lossy(rest));
}

/// A body of `n` bytes that is not the same all along.
pub fn varied(n: usize) -> Vec<u8> {
    (0..n).map(|i| b'a' + (i % 23) as u8).collect()
}

#[test]
fn an_echo_location_sends_request_bodies_back_chunked_or_until_the_close() {
    let site = site_with_folders(&["htdocs"]);
    let p = start(&site, "[[vhost.location]]\nexact = \"/echo\"\necho = true\n");
    // 40 KB: more than one piece of the answer (16 KiB each), all come with the head.
    let first = varied(40_000);
    let mut s = connect(p.addr);
    echo_twice(&mut s, "localhost", &first);
    assert_echoed_twice(&read_until_closed(&mut s, DEADLINE), &first);

    // HTTP/1.0 cannot read chunks: the body ends with the connection.
    let mut s = connect(p.addr);
    s.write_all(b"POST /echo HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc").unwrap();
    let (head, body) = {
        let all = read_until_closed(&mut s, DEADLINE);
        let (head, body) = split_head(&all);
        (head, body.to_vec())
    };
    assert!(head.contains("Connection: close") && !head.contains("Transfer-Encoding"), "{head}");
    assert!(!head.contains("Content-Length"), "{head}");
    assert_eq!(body, b"abc");
    assert_eq!(get(p.addr, "/f.txt").text(), "htdocs\n", "the other paths are files as before");
}

/// A path refused for a link that `symlinks` does not follow is a 403 said once
/// in the error log, with the link, its target and the rule (a packaged
/// application's layout often links a folder out of its root).
#[test]
fn a_link_refused_by_the_symlinks_rule_is_said_once() {
    let site = site_with_folders(&["htdocs", "outside/tpl"]);
    site.write("outside/tpl/page.html", "outside\n");
    std::os::unix::fs::symlink(site.path("outside/tpl"), site.path("htdocs/tpl")).unwrap();
    let p = start(&site, "");
    for _ in 0..3 {
        assert_eq!(get(p.addr, "/tpl/page.html").status, 403);
    }
    let said: Vec<String> =
        site.error_log().lines().filter(|l| l.contains("is a link to")).map(str::to_string).collect();
    assert_eq!(said.len(), 1, "once: {said:?}");
    let want = format!(
        "/tpl/page.html: refused (403): {} is a link to {}",
        site.path("htdocs/tpl").display(),
        site.path("outside/tpl").display()
    );
    assert!(said[0].contains(&want) && said[0].contains("symlinks = \"follow\""), "{}", said[0]);
}

/// nginx's listing keys: sizes rounded, times in the server's zone (the JSON form
/// keeps bytes), each a location's own or its vhost's.
#[test]
fn a_listing_rounds_sizes_and_shows_local_times_when_asked() {
    let site = site_with_folders(&["htdocs"]);
    site.write("htdocs/files/big.iso", vec![0u8; 1536 * 1024]);
    site.write("htdocs/exact/big.iso", vec![0u8; 1536 * 1024]);
    let p = start(
        &site,
        "[[vhost.location]]\nprefix = \"/files/\"\nautoindex = true\nautoindex_exact_size = false\nautoindex_localtime = true\n\
         [[vhost.location]]\nprefix = \"/exact/\"\nautoindex = true\n",
    );
    let page = get(p.addr, "/files/").text();
    assert!(page.contains("big.iso</a></td><td>1.5M</td>"), "{page}");
    let json = get_with(p.addr, "/files/", "Accept: application/json\r\n").text();
    assert!(json.contains("\"size\":1572864"), "{json}");
    let page = get(p.addr, "/exact/").text();
    assert!(page.contains("big.iso</a></td><td>1572864</td>"), "{page}");
}
