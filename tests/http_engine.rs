//! The request path, on the real binary: methods, persistence, validators,
//! conditionals, ranges, bodies, limits, paths, directories, vhosts, error pages.

use std::io::Write;
use std::net::Shutdown;
use std::time::{Duration, Instant};

use crate::util::*;

/// A site with a few files, served by `pika -X` (one process: fast to start).
fn serve(server_extra: &str, rest: &str) -> (Site, Pika) {
    serve_env(server_extra, rest, &[])
}

fn serve_env(server_extra: &str, rest: &str, env: &[(&str, &str)]) -> (Site, Pika) {
    let site = Site::new();
    site.write("htdocs/hello.txt", "hello, world\n");
    site.write("htdocs/a b.txt", "spaced\n");
    site.write("htdocs/digits.txt", "0123456789");
    site.write("htdocs/empty.css", "");
    site.write("htdocs/noext", "raw");
    site.write("htdocs/.secret", "hidden");
    site.write("htdocs/.git/config", "hidden too");
    site.write("htdocs/.well-known/security.txt", "Contact: mailto:security@example.com\n");
    site.write("htdocs/.well-known/.htpasswd", "still hidden");
    site.write("htdocs/dir/index.html", "dir index\n");
    site.write("htdocs/list/b.txt", "bb");
    site.write("htdocs/list/a.txt", "a");
    site.write("htdocs/list/<script>.txt", "x");
    site.config(server_extra, rest);
    let pika = Pika::start_env(&site, "-X", env);
    (site, pika)
}

fn basic() -> (Site, Pika) {
    serve("", "")
}

#[test]
fn get_and_head_have_the_same_headers() {
    let (_site, p) = basic();
    let g = get(p.addr, "/hello.txt");
    assert_eq!(g.status, 200);
    assert_eq!(g.text(), "hello, world\n");
    let h = raw(p.addr, b"HEAD /hello.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    assert_eq!(h.status, 200);
    let strip = |r: &Resp| r.head.lines().filter(|l| !l.starts_with("Date:")).collect::<Vec<_>>().join("\n");
    assert_eq!(strip(&g), strip(&h));
    for name in ["Date", "Server", "Content-Type", "Content-Length", "Last-Modified", "ETag"] {
        assert!(g.header(name).is_some(), "missing {name}");
    }
    assert_eq!(g.header("content-type").unwrap(), "text/plain");
    assert_eq!(g.header("content-length").unwrap(), "13");
    assert!(g.header("server").unwrap().starts_with("pika/"));
    assert!(g.header("etag").unwrap().starts_with('"'), "strong etag");
    // HEAD carries no body: the next bytes on the connection are the next response.
    let mut s = connect(p.addr);
    s.write_all(
        b"HEAD /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\nGET /digits.txt HTTP/1.1\r\nHost: localhost\r\n\r\n",
    )
    .unwrap();
    assert_eq!(read_response(&mut s, true).unwrap().status, 200);
    assert_eq!(read_response(&mut s, false).unwrap().text(), "0123456789");
}

#[test]
fn content_types_and_empty_files() {
    let (_site, p) = basic();
    assert_eq!(get(p.addr, "/").header("content-type").unwrap(), "text/html");
    let e = get(p.addr, "/empty.css");
    assert_eq!(
        (e.status, e.header("content-length").unwrap(), e.header("content-type").unwrap()),
        (200, "0".into(), "text/css".into())
    );
    assert_eq!(get(p.addr, "/noext").header("content-type").unwrap(), "application/octet-stream");
}

#[test]
fn options_methods_and_versions() {
    let (_site, p) = basic();
    let o = raw(p.addr, b"OPTIONS * HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    assert_eq!((o.status, o.header("allow").unwrap()), (200, "GET, HEAD, OPTIONS".into()));
    let o = raw(p.addr, b"OPTIONS /hello.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    assert_eq!((o.status, o.header("allow").unwrap()), (200, "GET, HEAD, OPTIONS".into()));
    for m in ["POST", "PUT", "DELETE", "PATCH"] {
        let r =
            raw(p.addr, format!("{m} /hello.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes());
        assert_eq!((r.status, r.header("allow")), (405, Some("GET, HEAD, OPTIONS".into())), "{m}");
    }
    assert_eq!(raw(p.addr, b"BREW /pot HTTP/1.1\r\nHost: localhost\r\n\r\n").status, 501);
    assert_eq!(raw(p.addr, b"GET / HTTP/2.0\r\nHost: localhost\r\n\r\n").status, 505);
    assert_eq!(raw(p.addr, b"GET / HTTP/3.1\r\nHost: localhost\r\n\r\n").status, 505);
}

#[test]
fn keep_alive_rules() {
    let (_site, p) = basic();
    // 1.1: persistent by default.
    let mut s = connect(p.addr);
    for _ in 0..3 {
        s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
        let r = read_response(&mut s, false).unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.header("connection"), None);
    }
    // Connection: close from the client: answered, then closed.
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().header("connection").unwrap(), "close");
    assert_closed(&mut s, "Connection: close");
    // 1.0: closed unless asked.
    let mut s = connect(p.addr);
    s.write_all(b"GET /hello.txt HTTP/1.0\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().header("connection").unwrap(), "close");
    assert_closed(&mut s, "HTTP/1.0 without keep-alive");
    let mut s = connect(p.addr);
    s.write_all(b"GET /hello.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().header("connection").unwrap(), "keep-alive");
    s.write_all(b"GET /digits.txt HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().text(), "0123456789");
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let (_site, p) = basic();
    let mut s = connect(p.addr);
    let mut batch = Vec::new();
    for f in ["hello.txt", "digits.txt", "a%20b.txt", "missing", "digits.txt"] {
        batch.extend_from_slice(format!("GET /{f} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes());
    }
    s.write_all(&batch).unwrap();
    let got: Vec<(u16, String)> =
        (0..5).map(|_| read_response(&mut s, false).unwrap()).map(|r| (r.status, r.text())).collect();
    assert_eq!(got[0], (200, "hello, world\n".into()));
    assert_eq!(got[1], (200, "0123456789".into()));
    assert_eq!(got[2], (200, "spaced\n".into()));
    assert_eq!(got[3].0, 404);
    assert_eq!(got[4], (200, "0123456789".into()));
}

#[test]
fn max_keepalive_requests_and_idle_timeout() {
    let (_site, p) = serve("", "[http]\nmax_keepalive_requests = 3\nkeepalive_timeout = \"1s\"\n");
    let mut s = connect(p.addr);
    for i in 1..=3 {
        s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
        let r = read_response(&mut s, false).unwrap();
        assert_eq!(r.header("connection").as_deref(), if i == 3 { Some("close") } else { None }, "request {i}");
    }
    assert_closed(&mut s, "after max_keepalive_requests");
    // Idle: closed cleanly (EOF, no bytes) after the keep-alive timeout.
    let mut s = connect(p.addr);
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    read_response(&mut s, false).unwrap();
    let t = Instant::now();
    assert!(read_until_closed(&mut s, Duration::from_secs(10)).is_empty(), "bytes on an idle connection");
    let waited = t.elapsed();
    assert!(waited >= Duration::from_millis(900) && waited < Duration::from_secs(10), "{waited:?}");
}

#[test]
fn conditional_requests() {
    let (_site, p) = basic();
    let r = get(p.addr, "/hello.txt");
    let etag = r.header("etag").unwrap();
    let lm = r.header("last-modified").unwrap();
    let weak = format!("W/{etag}");
    let c = |h: &str| get_with(p.addr, "/hello.txt", h).status;
    assert_eq!(c(&format!("If-None-Match: {etag}\r\n")), 304);
    assert_eq!(c(&format!("If-None-Match: \"other\", {weak}\r\n")), 304, "weak comparison");
    assert_eq!(c("If-None-Match: \"other\"\r\n"), 200);
    assert_eq!(c(&format!("If-Modified-Since: {lm}\r\n")), 304);
    assert_eq!(c("If-Modified-Since: Sat, 01 Jan 2000 00:00:00 GMT\r\n"), 200);
    assert_eq!(c(&format!("If-Match: {etag}\r\n")), 200);
    assert_eq!(c("If-Match: \"nope\"\r\n"), 412);
    assert_eq!(c(&format!("If-Match: {weak}\r\n")), 412, "If-Match is strong");
    assert_eq!(c("If-Unmodified-Since: Sat, 01 Jan 2000 00:00:00 GMT\r\n"), 412);
    // Precedence (RFC 9110 §13.2.2): If-Match before If-None-Match; If-None-Match
    // makes If-Modified-Since ignored.
    assert_eq!(c(&format!("If-Match: \"nope\"\r\nIf-None-Match: {etag}\r\n")), 412);
    assert_eq!(c(&format!("If-None-Match: \"other\"\r\nIf-Modified-Since: {lm}\r\n")), 200);
    let nm = get_with(p.addr, "/hello.txt", &format!("If-None-Match: {etag}\r\n"));
    assert_eq!((nm.header("etag"), nm.body.len()), (Some(etag.clone()), 0));
    // HEAD follows the same rules.
    let h = raw(
        p.addr,
        format!("HEAD /hello.txt HTTP/1.1\r\nHost: localhost\r\nIf-None-Match: {etag}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    );
    assert_eq!(h.status, 304);
}

#[test]
fn ranges() {
    let (_site, p) = basic();
    let r = |h: &str| get_with(p.addr, "/digits.txt", h);
    let one = r("Range: bytes=2-4\r\n");
    assert_eq!(
        (one.status, one.text(), one.header("content-range").unwrap()),
        (206, "234".into(), "bytes 2-4/10".into())
    );
    assert_eq!(one.header("content-type").as_deref(), Some("text/plain"));
    assert!(one.header("etag").is_some() && one.header("last-modified").is_some(), "{}", one.head);
    assert_eq!(r("Range: bytes=7-\r\n").text(), "789");
    assert_eq!(r("Range: bytes=-3\r\n").text(), "789");
    assert_eq!(r("Range: bytes=-30\r\n").text(), "0123456789");
    assert_eq!(r("Range: bytes=5-100\r\n").header("content-range").unwrap(), "bytes 5-9/10");
    let bad = r("Range: bytes=20-30\r\n");
    assert_eq!((bad.status, bad.header("content-range").unwrap()), (416, "bytes */10".into()));
    assert_eq!(r("Range: pages=1-2\r\n").status, 200, "unknown unit ignored");
    assert_eq!(r("Range: bytes=oops\r\n").status, 200, "bad syntax ignored");

    let multi = r("Range: bytes=0-1,5-6\r\n");
    assert_eq!(multi.status, 206);
    let ct = multi.header("content-type").unwrap();
    let boundary = ct.strip_prefix("multipart/byteranges; boundary=").expect(&ct);
    let body = multi.text();
    assert!(
        body.contains(&format!(
            "--{boundary}\r\nContent-Type: text/plain\r\nContent-Range: bytes 0-1/10\r\n\r\n01\r\n"
        )),
        "{body}"
    );
    assert!(body.contains("Content-Range: bytes 5-6/10\r\n\r\n56\r\n"), "{body}");
    assert!(body.ends_with(&format!("--{boundary}--\r\n")));
    assert_eq!(multi.header("content-length").unwrap(), body.len().to_string());

    // If-Range: honoured with the current validator, whole file otherwise.
    let etag = get(p.addr, "/digits.txt").header("etag").unwrap();
    assert_eq!(r(&format!("Range: bytes=0-0\r\nIf-Range: {etag}\r\n")).status, 206);
    assert_eq!(r("Range: bytes=0-0\r\nIf-Range: \"stale\"\r\n").status, 200);
    // More ranges than max_ranges: the header is ignored.
    let many: Vec<String> = (0..201).map(|i| format!("{}-{}", i % 10, i % 10)).collect();
    let lots = r(&format!("Range: bytes={}\r\n", many.join(",")));
    assert_eq!(lots.status, 200);
}

#[test]
fn range_cap_is_configurable() {
    let (_site, p) = serve("", "[http]\nmax_ranges = 2\n");
    assert_eq!(get_with(p.addr, "/digits.txt", "Range: bytes=0-0,2-2\r\n").status, 206);
    assert_eq!(get_with(p.addr, "/digits.txt", "Range: bytes=0-0,2-2,4-4\r\n").status, 200);
}

#[test]
fn request_bodies_are_discarded_and_framing_is_strict() {
    let (_site, p) = serve("", "[http]\nmax_body_size = 100\n");
    // A Content-Length body is skipped: the next request is read where it starts.
    let mut s = connect(p.addr);
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\nHELLOGET /digits.txt HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().status, 200);
    assert_eq!(read_response(&mut s, false).unwrap().text(), "0123456789");
    // -X serves one connection at a time: close each before the next.
    drop(s);
    // Chunked too, with extensions and trailers.
    let mut s = connect(p.addr);
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nHELLO\r\n3\r\nabc\r\n0\r\nX-Trailer: 1\r\n\r\nGET /digits.txt HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut s, false).unwrap().status, 200);
    assert_eq!(read_response(&mut s, false).unwrap().text(), "0123456789");
    drop(s);
    // Ambiguous framing: 400 and close.
    for req in [
        &b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"[..],
        b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: -3\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 3x\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ] {
        let mut s = connect(p.addr);
        s.write_all(req).unwrap();
        let r = read_response(&mut s, false).unwrap();
        assert_eq!(
            (r.status, r.header("connection").as_deref()),
            (400, Some("close")),
            "{}",
            String::from_utf8_lossy(req)
        );
        assert_closed(&mut s, "after a framing error");
    }
    // Over the limit: 413 and close, for both framings.
    let r = raw(p.addr, b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 101\r\n\r\n");
    assert_eq!(r.status, 413);
    let big = format!(
        "POST / HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n65\r\n{}\r\n0\r\n\r\n",
        "x".repeat(101)
    );
    assert_eq!(raw(p.addr, big.as_bytes()).status, 413);
    // Expect: 100-continue gets the final answer at once: no answer needs the body,
    // so none is asked for, and the connection closes after it (the body is not
    // read).
    let mut s = connect(p.addr);
    s.write_all(b"GET /hello.txt HTTP/1.1\r\nHost: localhost\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n")
        .unwrap();
    let r = read_response(&mut s, false).unwrap();
    assert_eq!((r.status, r.header("connection").as_deref()), (200, Some("close")));
}

/// Beyond the 100 header slots kept on the stack, a config allowing more uses a list
/// per request; a 6 KiB head also grows the 4 KiB input buffer.
#[test]
fn more_headers_than_the_stack_holds_when_allowed() {
    let (_site, p) = serve("", "[http]\nmax_headers = 150\n");
    let head = |n: usize| {
        let mut v = b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n".to_vec();
        for i in 0..n {
            v.extend_from_slice(format!("X-{i}: {}\r\n", "y".repeat(40)).as_bytes());
        }
        v.extend_from_slice(b"\r\n");
        v
    };
    // 2 + 120 = 122 headers, about 6 KiB.
    assert_eq!(raw(p.addr, &head(120)).status, 200);
    assert_eq!(raw(p.addr, &head(149)).status, 431);
}

#[test]
fn head_errors_have_their_statuses() {
    let (_site, p) = serve("", "[http]\nheader_timeout = \"1s\"\n");
    let cases: Vec<(Vec<u8>, u16)> = vec![
        (b"GET / HTTP/1.1\r\n\r\n".to_vec(), 400),
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n".to_vec(), 400),
        (format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(9000)).into_bytes(), 414),
        (format!("GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n", "b".repeat(17000)).into_bytes(), 431),
        (
            (0..101)
                .fold(b"GET / HTTP/1.1\r\nHost: a\r\n".to_vec(), |mut v, i| {
                    v.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
                    v
                })
                .into_iter()
                .chain(*b"\r\n")
                .collect(),
            431,
        ),
        (b"GET / HTTP/1.1\r\nHost: a\r\nBad Header: x\r\n\r\n".to_vec(), 400),
        (b"GET\r\n\r\n".to_vec(), 400),
    ];
    for (req, want) in cases {
        let mut s = connect(p.addr);
        s.write_all(&req).unwrap();
        let r = read_response(&mut s, false).unwrap();
        assert_eq!(r.status, want, "{}", String::from_utf8_lossy(&req[..req.len().min(60)]));
        assert_eq!(r.header("connection").as_deref(), Some("close"));
        assert!(r.text().contains(&want.to_string()), "a short body naming the error");
    }
    // A head that stops halfway: 408 after header_timeout, then close.
    let mut s = connect(p.addr);
    s.write_all(b"GET / HTTP/1.1\r\nHost: loc").unwrap();
    let t = Instant::now();
    let r = read_response(&mut s, false).unwrap();
    assert_eq!(r.status, 408);
    assert!(t.elapsed() < Duration::from_secs(10));
    assert_closed(&mut s, "after a 408");
}

#[test]
fn paths_are_decoded_normalised_and_confined() {
    let (site, p) = basic();
    confinement_battery(&site, &p);
}

/// The same battery where the kernel lacks openat2 (the fallback checks the opened
/// file's real path against the root).
#[test]
fn paths_are_confined_without_openat2() {
    let (site, p) = serve_env("", "", &[("PIKA_NO_OPENAT2", "1")]);
    confinement_battery(&site, &p);
}

fn confinement_battery(site: &Site, p: &Pika) {
    std::os::unix::fs::symlink("/etc", site.path("htdocs/etc-link")).unwrap();
    std::os::unix::fs::symlink("hello.txt", site.path("htdocs/inside-link")).unwrap();
    assert_eq!(get(p.addr, "/a%20b.txt").text(), "spaced\n");
    assert_eq!(get(p.addr, "/dir/../hello.txt").text(), "hello, world\n");
    assert_eq!(get(p.addr, "/./dir/./../hello.txt").text(), "hello, world\n");
    assert_eq!(get(p.addr, "//hello.txt").text(), "hello, world\n");
    assert_eq!(get(p.addr, "/inside-link").text(), "hello, world\n");
    for (path, want) in [
        ("/../etc/passwd", 400),
        ("/%2e%2e/etc/passwd", 400),
        ("/dir/%2E%2e/%2e%2e/etc/passwd", 400),
        ("/hello.txt%00.html", 400),
        ("/dir%2fhello.txt", 404),
        ("/bad%zzescape", 400),
        ("/etc-link/passwd", 403),
        ("/.secret", 404),
        ("/.git/config", 404),
        ("/.well-known/security.txt", 200),
        ("/.well-known/.htpasswd", 404),
        ("/missing.txt", 404),
    ] {
        let r = get(p.addr, path);
        assert_eq!(r.status, want, "{path}");
        assert!(!r.text().contains("root:"), "{path} leaked a file outside the root");
    }
}

#[test]
fn hidden_files_when_configured_and_symlink_policy() {
    let site = Site::new();
    site.write("htdocs/.well-known/x.txt", "ok");
    site.write("htdocs/real.txt", "real");
    std::os::unix::fs::symlink("real.txt", site.path("htdocs/link.txt")).unwrap();
    site.config("", "[[vhost]]\nroot = \"htdocs\"\nserve_hidden = true\nsymlinks = \"never\"\n");
    let p = Pika::start(&site, "-X");
    assert_eq!(get(p.addr, "/.well-known/x.txt").text(), "ok");
    assert_eq!(get(p.addr, "/real.txt").text(), "real");
    assert_eq!(get(p.addr, "/link.txt").status, 403);
}

#[test]
fn directories_redirect_index_list_or_refuse() {
    let (_site, p) = basic();
    let r = get(p.addr, "/dir");
    assert_eq!((r.status, r.header("location").unwrap()), (301, "/dir/".into()));
    let r = get(p.addr, "/dir?x=1&y=%3C");
    assert_eq!(r.header("location").unwrap(), "/dir/?x=1&y=%3C");
    assert_eq!(get(p.addr, "/dir/").text(), "dir index\n");
    assert_eq!(get(p.addr, "/list/").status, 403, "no index, no autoindex");
}

#[test]
fn directory_listing_html_and_json() {
    let (site, p) = serve("", "[[vhost]]\nroot = \"htdocs\"\nautoindex = true\n");
    site.write("htdocs/list/sub dir/x", "x");
    let r = get(p.addr, "/list/");
    assert_eq!(r.status, 200);
    let html = r.text();
    assert!(html.contains("&lt;script&gt;.txt") && !html.contains("<script>"), "{html}");
    assert!(html.contains("href=\"./%3Cscript%3E.txt\""), "{html}");
    assert!(html.contains("href=\"./sub%20dir/\""), "{html}");
    let pos = |s: &str, n: &str| s.find(n).unwrap_or_else(|| panic!("{n} missing"));
    assert!(pos(&html, ">a.txt<") < pos(&html, ">b.txt<"), "by name");
    let by_size = get(p.addr, "/list/?C=S;O=D").text();
    assert!(pos(&by_size, ">b.txt<") < pos(&by_size, ">a.txt<"), "by size, descending");
    let j = get_with(p.addr, "/list/", "Accept: application/json\r\n");
    assert_eq!(j.header("content-type").unwrap(), "application/json");
    let body = j.text();
    assert!(body.starts_with('[') && body.contains("{\"name\":\"a.txt\",\"type\":\"file\",\"size\":1,"), "{body}");
    assert!(body.contains("\"name\":\"sub dir\",\"type\":\"directory\""), "{body}");
}

#[test]
fn a_listing_leaves_out_dot_names_unless_serve_hidden_and_never_lists_dot_or_dot_dot() {
    let listing = |serve_hidden: bool| {
        let (site, p) =
            serve("", &format!("[[vhost]]\nroot = \"htdocs\"\nautoindex = true\nserve_hidden = {serve_hidden}\n"));
        site.write("htdocs/list/.hidden", "h");
        get_with(p.addr, "/list/", "Accept: application/json\r\n").text()
    };
    let shown = listing(false);
    assert!(shown.contains("\"name\":\"a.txt\"") && !shown.contains(".hidden"), "{shown}");
    let shown = listing(true);
    assert!(shown.contains("\"name\":\".hidden\""), "{shown}");
    assert!(!shown.contains("\"name\":\".\"") && !shown.contains("\"name\":\"..\""), "{shown}");
}

#[test]
fn a_listing_shows_the_directory_that_was_opened() {
    let (site, p) = serve("", "[[vhost]]\nroot = \"htdocs\"\nautoindex = true\n");
    // Served once: the worker has opened its docroot.
    assert!(get(p.addr, "/list/").text().contains(">a.txt<"));
    // The docroot's path now names another folder; the worker opened the old one
    // (and opens everything below its descriptor). A listing read by path again
    // would show the planted folder: a docroot writer could swap in a link there
    // between the open and the read.
    std::fs::rename(site.path("htdocs"), site.path("htdocs.moved")).unwrap();
    site.write("htdocs/list/planted.txt", "p");
    let html = get(p.addr, "/list/").text();
    assert!(html.contains(">a.txt<") && !html.contains("planted"), "{html}");
}

#[test]
fn virtual_hosts_by_host_header() {
    let site = Site::new();
    site.write("a/who", "a");
    site.write("b/who", "b");
    site.write("w/who", "wild");
    site.config(
        "",
        "[[vhost]]\nserver_names = [\"a.test\"]\nroot = \"a\"\n[[vhost]]\nserver_names = [\"b.test\", \"www.b.test\"]\nroot = \"b\"\n[[vhost]]\nserver_names = [\"*.w.test\"]\nroot = \"w\"\n",
    );
    let p = Pika::start(&site, "-X");
    let who = |host: &str| {
        raw(p.addr, format!("GET /who HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes()).text()
    };
    assert_eq!(who("a.test"), "a");
    assert_eq!(who("B.TEST"), "b");
    assert_eq!(who("www.b.test.:8080"), "b");
    assert_eq!(who("img.w.test"), "wild");
    assert_eq!(who("unknown.test"), "a", "first vhost is the default");
    let r = raw(p.addr, b"GET /who HTTP/1.0\r\n\r\n");
    assert_eq!(r.text(), "a");
    let r = raw(p.addr, b"GET http://b.test/who HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n");
    assert_eq!(r.text(), "b", "absolute-form wins over Host");
}

#[test]
fn custom_error_pages() {
    let site = Site::new();
    site.write("htdocs/errors/404.html", "<p>custom not found</p>");
    site.config("", "[[vhost]]\nroot = \"htdocs\"\n[vhost.error_pages]\n404 = \"/errors/404.html\"\n");
    let p = Pika::start(&site, "-X");
    let r = get(p.addr, "/nope");
    assert_eq!(
        (r.status, r.text(), r.header("content-type").unwrap()),
        (404, "<p>custom not found</p>".into(), "text/html".into())
    );
}

#[test]
fn large_files_come_whole() {
    let site = Site::new();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    site.write("htdocs/big.bin", &data);
    site.config("", "");
    let p = Pika::start(&site, "-X");
    let r = get(p.addr, "/big.bin");
    assert_eq!(r.body.len(), data.len());
    assert!(r.body == data, "bytes differ");
    let r = get_with(p.addr, "/big.bin", "Range: bytes=2999990-\r\n");
    assert_eq!(r.body, &data[2_999_990..]);
}

#[test]
fn files_sent_with_sendfile_keep_alive_take_ranges_and_survive_truncation() {
    let site = Site::new();
    // 100 KB: cached (mapped and kept open) and sent with sendfile (>= 32 KiB).
    let data: Vec<u8> = (0..100_000u32).map(|i| (i * 13 % 251) as u8).collect();
    site.write("htdocs/mid.bin", &data);
    site.config("", "[http]\nfile_check_interval = \"1h\"\n");
    let p = Pika::start(&site, "-X");
    // Two on one connection: the first head went out with MSG_MORE, the second
    // response must still start right after the first body.
    let mut s = connect(p.addr);
    for _ in 0..2 {
        s.write_all(b"GET /mid.bin HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
        let r = read_response(&mut s, false).expect("a response");
        assert_eq!(r.header("content-length").as_deref(), Some("100000"));
        assert!(r.body == data, "bytes differ");
    }
    s.write_all(b"HEAD /mid.bin HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let r = read_response(&mut s, true).expect("a HEAD response");
    assert_eq!(r.header("content-length").as_deref(), Some("100000"));
    s.write_all(b"GET /mid.bin HTTP/1.1\r\nHost: localhost\r\nRange: bytes=1000-80999\r\n\r\n").unwrap();
    let r = read_response(&mut s, false).expect("a 206");
    assert_eq!(r.status, 206);
    assert!(r.body == data[1000..81000], "range bytes differ");
    drop(s);
    // The file shrinks under the cached entry (checked again only in an hour): the
    // response cannot be finished, so the connection closes early; the server lives on.
    std::fs::OpenOptions::new().write(true).open(site.path("htdocs/mid.bin")).unwrap().set_len(10).unwrap();
    let mut s = connect(p.addr);
    s.write_all(b"GET /mid.bin HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let got = read_until_closed(&mut s, DEADLINE);
    let body_start = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert_eq!(got.len() - body_start, 10, "the ten bytes left, then the close");
    site.write("htdocs/other.txt", "still here");
    assert_eq!(get(p.addr, "/other.txt").text(), "still here");
}

#[test]
fn a_file_truncated_under_its_mapping_is_answered_anew_and_said_once() {
    let site = Site::new();
    // 20,000 bytes go out from the mapping (writev), 100,000 with sendfile; both are
    // cached and trusted for a minute.
    site.write("htdocs/small.bin", vec![b's'; 20_000]);
    site.write("htdocs/large.bin", vec![b'l'; 100_000]);
    site.config("", "[http]\nfile_check_interval = \"60s\"\n");
    let p = Pika::start(&site, "-X");
    for (name, len) in [("/small.bin", 20_000), ("/large.bin", 100_000)] {
        assert_eq!(get(p.addr, name).body.len(), len);
        std::fs::OpenOptions::new().write(true).open(site.path(&format!("htdocs{name}"))).unwrap().set_len(0).unwrap();
        // The first answer after the truncation was promised `len` bytes in its head
        // and is cut short (nothing else can be done once the head is out) ...
        let mut s = connect(p.addr);
        s.write_all(format!("GET {name} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes()).unwrap();
        let cut = read_response(&mut s, false);
        assert!(cut.as_ref().is_none_or(|r| r.body.len() < len), "{name}: {cut:?}");
        // ... and the next ones see the file as it is now, whole and ranged.
        let r = get(p.addr, name);
        assert_eq!((r.status, r.header("content-length").as_deref()), (200, Some("0")), "{name}");
        assert_eq!(get_with(p.addr, name, "Range: bytes=0-99\r\n").status, 416, "{name}");
        assert_eq!(get(p.addr, name).status, 200);
    }
    let log = site.error_log();
    for name in ["/small.bin", "/large.bin"] {
        let said = log.lines().filter(|l| l.contains("shrank while it was sent") && l.contains(name)).count();
        assert_eq!(said, 1, "{name}, once:\n{log}");
    }
}

#[test]
fn access_log_lines_are_common_or_combined() {
    let site = Site::new();
    site.write("htdocs/x.txt", "xyz");
    site.config("", "[[access_log]]\npath = \"logs/access.log\"\nformat = \"combined\"\n[[access_log]]\npath = \"logs/common.log\"\nformat = \"common\"\n");
    let p = Pika::start(&site, "-X");
    raw(p.addr, b"GET /x.txt?q=1 HTTP/1.1\r\nHost: localhost\r\nReferer: http://r/\r\nUser-Agent: t\"ua\r\nConnection: close\r\n\r\n");
    let combined = wait_until(DEADLINE, "access log line", || site.access_lines().pop());
    let re_ok = combined.starts_with("127.0.0.1 - - [")
        && combined.ends_with("] \"GET /x.txt?q=1 HTTP/1.1\" 200 3 \"http://r/\" \"t\\\"ua\"");
    assert!(re_ok, "{combined}");
    // Each log writes its held records with its own write(): wait for this one too.
    let common =
        wait_until(DEADLINE, "common log line", || Some(site.read("logs/common.log")).filter(|c| !c.is_empty()));
    assert!(common.trim_end().ends_with("] \"GET /x.txt?q=1 HTTP/1.1\" 200 3"), "{common}");
}

#[test]
fn a_forged_internal_request_is_logged() {
    let (site, p) = basic();
    raw(
        p.addr,
        b"OPTIONS * HTTP/1.0\r\nUser-Agent: pika/0.1.0 (internal dummy connection)\r\nPika-Internal: guess\r\n\r\n",
    );
    // A request after it: once its line is there, the forged one's must be (one
    // process, records in order), so a forged request taken for internal fails fast.
    assert_eq!(get(p.addr, "/hello.txt").status, 200);
    let lines = wait_until(DEADLINE, "the next request's line", || {
        let l = site.access_lines();
        l.iter().any(|l| l.contains("GET /hello.txt")).then_some(l)
    });
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].contains("\"OPTIONS * HTTP/1.0\" 200"), "{lines:?}");
}

#[test]
fn config_test_mode() {
    let site = Site::new();
    let conf = site.config("", "");
    let ok = std::process::Command::new(BIN).args(["-t", "-f"]).arg(&conf).output().unwrap();
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stderr));
    std::fs::write(&conf, "[server]\nlisten = [\"127.0.0.1:0\"]\nworkerz = 3\n[[vhost]]\nroot = \"htdocs\"\n").unwrap();
    let bad = std::process::Command::new(BIN).args(["-t", "-f"]).arg(&conf).output().unwrap();
    assert_eq!(bad.status.code(), Some(1));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("pika.toml:3:1: unknown field `workerz`"), "{err}");
}

#[test]
fn shipped_default_config_is_valid() {
    let conf = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/pika.toml");
    let out = std::process::Command::new(BIN).args(["-t", "-f"]).arg(&conf).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The connection closes with our response delivered even though the client still
/// has unread bytes in flight (lingering close).
#[test]
fn error_response_survives_unread_input() {
    let (_site, p) = basic();
    let mut s = connect(p.addr);
    let mut req = b"POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 99999999\r\n\r\n".to_vec();
    req.extend(std::iter::repeat_n(b'x', 200_000));
    let _ = s.write_all(&req);
    let _ = s.shutdown(Shutdown::Write);
    let r = read_response(&mut s, false).unwrap();
    assert_eq!(r.status, 413);
}
