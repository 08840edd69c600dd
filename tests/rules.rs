//! Per-location rules with real clients: `allow`/`deny` by the real client's address,
//! `return` (a status, a redirect with a regex's captures), `headers`, `expires`,
//! `charset`, and Basic auth from files Debian's `htpasswd` makes (each hash it
//! writes), with curl; what `pika -t` says about rules it cannot use.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::util::*;

fn start(site: &Site, server: &str, vhost: &str) -> Pika {
    site.config(server, &format!("[[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n{vhost}"));
    Pika::start(site, "-X")
}

fn curl(curl: &PathBuf, p: &Pika, path: &str, args: &[&str]) -> Output {
    Command::new(curl)
        .args(["-s", "--max-time", "20", "-H", "Host: localhost"])
        .args(args)
        .arg(format!("http://{}{path}", p.addr))
        .output()
        .expect("run curl")
}

/// `curl -w` with the status code (and whatever else `what` asks for) only.
fn curl_w(c: &PathBuf, p: &Pika, path: &str, what: &str, args: &[&str]) -> String {
    let mut all = vec!["-o", "/dev/null", "-w", what];
    all.extend_from_slice(args);
    String::from_utf8_lossy(&curl(c, p, path, &all).stdout).into_owned()
}

fn check(site: &Site) -> Output {
    Command::new(BIN).arg("-t").arg("-f").arg(site.path("conf/pika.toml")).output().unwrap()
}

#[test]
fn addresses_are_allowed_or_denied_and_the_real_client_counts() {
    let site = Site::new();
    site.write("htdocs/admin/a.txt", "admin\n");
    site.write("htdocs/open/a.txt", "open\n");
    site.write("htdocs/blocked/a.txt", "blocked\n");
    let p = start(
        &site,
        "trusted_proxies = [\"127.0.0.1\"]",
        "[[vhost.location]]\nprefix = \"/admin/\"\nallow = [\"127.0.0.1\", \"::1\"]\n\
         [[vhost.location]]\nprefix = \"/blocked/\"\ndeny = [\"127.0.0.0/8\"]\n\
         [[vhost.location]]\nprefix = \"/open/\"\ndeny = [\"192.0.2.0/24\"]\nallow = [\"all\"]\n",
    );
    assert_eq!(get(p.addr, "/admin/a.txt").status, 200, "allowed");
    assert_eq!(get(p.addr, "/blocked/a.txt").status, 403, "denied");
    assert_eq!(get(p.addr, "/open/a.txt").status, 200);
    // Through a trusted forwarder, the client it names is the one checked.
    let via = |path: &str, ip: &str| get_with(p.addr, path, &format!("X-Forwarded-For: {ip}\r\n")).status;
    assert_eq!(via("/admin/a.txt", "192.0.2.7"), 403, "an allow list shuts out the rest");
    assert_eq!(via("/open/a.txt", "192.0.2.7"), 403, "deny written first, matched first");
    assert_eq!(via("/open/a.txt", "198.51.100.1"), 200);
    assert_eq!(via("/blocked/a.txt", "198.51.100.1"), 200);
    drop(p);
    let log = site.read("logs/access.log");
    assert!(log.contains("192.0.2.7 - - ") && log.contains("\"GET /admin/a.txt HTTP/1.1\" 403"), "{log}");
}

#[test]
fn return_hides_paths_and_redirects_with_captures() {
    let Some(c) = need_tool("curl") else { return };
    let site = Site::new();
    site.write("htdocs/.git/config", "secret\n");
    site.write("htdocs/a.bak", "old\n");
    site.write("htdocs/new/post/hello world.html", "moved here\n");
    let p = start(
        &site,
        "",
        "serve_hidden = true\n\
         [[vhost.location]]\nregex = '^/\\.git(/|$)'\nreturn = 404\n\
         [[vhost.location]]\nregex = '\\.bak$'\nreturn = 410\n\
         [[vhost.location]]\nregex = '^/old/(\\w+)/(.*)$'\nreturn = { status = 301, to = \"/new/$1/$2$is_args$args\" }\n\
         [[vhost.location]]\nprefix = \"/elsewhere/\"\nreturn = { status = 308, to = \"https://example.com$request_uri\" }\n",
    );
    assert_eq!(get(p.addr, "/.git/config").status, 404);
    assert_eq!(get(p.addr, "/a.bak").status, 410);
    let r = get(p.addr, "/old/post/hello%20world.html?x=1");
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location").as_deref(), Some("/new/post/hello%20world.html?x=1"));
    // curl follows the redirect to the page.
    let o = curl(&c, &p, "/old/post/hello%20world.html", &["-L"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "moved here\n");
    let w = curl_w(&c, &p, "/elsewhere/a?b=c", "%{http_code} %{redirect_url}", &[]);
    assert_eq!(w, "308 https://example.com/elsewhere/a?b=c");
}

#[test]
fn headers_expires_and_charset_decorate_answers() {
    let Some(c) = need_tool("curl") else { return };
    let site = Site::new();
    site.write("htdocs/app/a.css", "body{}\n");
    site.write("htdocs/app/a.png", "png");
    site.write("htdocs/app/page.html", "<p>page</p>\n");
    let p = start(
        &site,
        "",
        "headers = { \"X-Content-Type-Options\" = \"nosniff\" }\n\
         [[vhost.location]]\nprefix = \"/app/\"\ncharset = \"utf-8\"\n\
         expires = { \"text/css\" = \"1h\", \"image/*\" = \"30d\" }\n\
         headers = { \"Content-Security-Policy\" = \"default-src 'self'\" }\n\
         [[vhost.location]]\nprefix = \"/always/\"\nheaders = { \"X-Always\" = \"yes\" }\nheaders_always = true\n",
    );
    let head =
        |path: &str| String::from_utf8_lossy(&curl(&c, &p, path, &["-D", "-", "-o", "/dev/null"]).stdout).into_owned();
    let css = head("/app/a.css");
    assert!(css.contains("Cache-Control: max-age=3600\r\n") && css.contains("Expires: "), "{css}");
    assert!(css.contains("Content-Type: text/css; charset=utf-8\r\n"), "{css}");
    assert!(css.contains("Content-Security-Policy: default-src 'self'\r\n"), "{css}");
    assert!(!css.contains("X-Content-Type-Options"), "a location's headers replace the vhost's: {css}");
    let png = head("/app/a.png");
    assert!(png.contains("Cache-Control: max-age=2592000\r\n") && png.contains("Content-Type: image/png\r\n"), "{png}");
    let html = head("/app/page.html");
    assert!(!html.contains("Cache-Control") && html.contains("charset=utf-8"), "{html}");
    let missing = head("/app/missing.css");
    assert!(missing.starts_with("HTTP/1.1 404") && !missing.contains("Content-Security-Policy"), "{missing}");
    assert!(!missing.contains("Cache-Control"), "{missing}");
    let root = head("/index.html");
    assert!(root.contains("X-Content-Type-Options: nosniff\r\n"), "the vhost's own: {root}");
    let always = head("/always/missing");
    assert!(always.starts_with("HTTP/1.1 404") && always.contains("X-Always: yes\r\n"), "{always}");
}

#[test]
fn expires_replaces_a_scripts_own_caching_lines() {
    let site = Site::new();
    site.write(
        "htdocs/cgi-bin/style.sh",
        "#!/bin/sh\nprintf 'Content-Type: text/css\\r\\nCache-Control: public, max-age=5\\r\\n\
         Expires: Thu, 01 Jan 1970 00:00:00 GMT\\r\\nX-Script: 1\\r\\n\\r\\nbody{}\\n'\n",
    );
    let script = site.path("htdocs/cgi-bin/style.sh");
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let p = start(
        &site,
        "",
        "[[vhost.location]]\nprefix = \"/cgi-bin/\"\ncgi = true\nexpires = { \"text/css\" = \"1h\" }\n",
    );
    let r = get(p.addr, "/cgi-bin/style.sh");
    assert_eq!((r.status, r.text().as_str()), (200, "body{}\n"), "{}", r.head);
    assert_eq!(r.head.matches("Cache-Control:").count(), 1, "{}", r.head);
    assert_eq!(r.head.matches("Expires:").count(), 1, "{}", r.head);
    assert!(r.head.contains("Cache-Control: max-age=3600\r\n") && !r.head.contains("1970"), "{}", r.head);
    assert!(r.head.contains("X-Script: 1\r\n"), "{}", r.head);
}

/// An htpasswd file with a user for each hash Debian's htpasswd writes, all with
/// the password `pa:ss wörd`.
fn htpasswd_file(site: &Site, htpasswd: &PathBuf) -> PathBuf {
    let file = site.path("conf/htpasswd");
    for (i, (user, flag)) in
        [("apr", "-m"), ("sha256", "-2"), ("sha512", "-5"), ("bcrypt", "-B"), ("sha1", "-s")].iter().enumerate()
    {
        let mut cmd = Command::new(htpasswd);
        cmd.arg("-b");
        if i == 0 {
            cmd.arg("-c");
        }
        let o = cmd.arg(flag).arg(&file).arg(user).arg("pa:ss wörd").output().unwrap();
        assert!(o.status.success(), "htpasswd {flag}: {}", String::from_utf8_lossy(&o.stderr));
    }
    file
}

#[test]
fn basic_auth_checks_every_hash_htpasswd_writes() {
    let (Some(c), Some(h)) = (need_tool("curl"), need_tool("htpasswd")) else { return };
    let site = Site::new();
    site.write("htdocs/staff/a.txt", "staff only\n");
    htpasswd_file(&site, &h);
    let p = start(
        &site,
        "",
        "[[vhost.location]]\nprefix = \"/staff/\"\nauth_realm = \"Staff\"\nauth_file = \"conf/htpasswd\"\n\
         [[vhost.location]]\nprefix = \"/either/\"\nauth_realm = \"Staff\"\nauth_file = \"conf/htpasswd\"\n\
         allow = [\"127.0.0.1\"]\nsatisfy = \"any\"\n\
         [[vhost.location]]\nprefix = \"/both/\"\nauth_file = \"conf/htpasswd\"\nauth_realm = \"Staff\"\n\
         allow = [\"127.0.0.1\"]\n",
    );
    let r = get(p.addr, "/staff/a.txt");
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate").as_deref(), Some("Basic realm=\"Staff\", charset=\"UTF-8\""));
    for user in ["apr", "sha256", "sha512", "bcrypt", "sha1"] {
        let o = curl(&c, &p, "/staff/a.txt", &["--user", &format!("{user}:pa:ss wörd")]);
        assert_eq!(String::from_utf8_lossy(&o.stdout), "staff only\n", "{user}");
        // Again: the worker's cache of verified credentials answers.
        let o = curl(&c, &p, "/staff/a.txt", &["--user", &format!("{user}:pa:ss wörd")]);
        assert_eq!(String::from_utf8_lossy(&o.stdout), "staff only\n", "{user}, cached");
    }
    assert_eq!(curl_w(&c, &p, "/staff/a.txt", "%{http_code}", &["--user", "bcrypt:wrong"]), "401");
    assert_eq!(curl_w(&c, &p, "/staff/a.txt", "%{http_code}", &["--user", "nobody:pa:ss wörd"]), "401");
    // Bad headers: clear answers, not a crash.
    let bad = |value: &str| get_with(p.addr, "/staff/a.txt", &format!("Authorization: {value}\r\n")).status;
    assert_eq!(bad("Basic !!!notbase64"), 400);
    assert_eq!(bad("Basic YWxpY2U="), 400, "no colon");
    assert_eq!(bad("Bearer abc"), 401);
    assert_eq!(bad(&format!("Basic {}", "QUFB".repeat(400))), 400, "too long");
    // satisfy = "any": the address is enough; "all" (the default): both are needed.
    assert_eq!(get(p.addr, "/either/x").status, 404, "let through to the files");
    assert_eq!(get(p.addr, "/both/x").status, 401);
    assert_eq!(curl_w(&c, &p, "/both/x", "%{http_code}", &["--user", "apr:pa:ss wörd"]), "404");
    assert!(alive(p.pid), "still serving");
    drop(p);
    // %u: the user, in the access log.
    let log = site.read("logs/access.log");
    assert!(log.lines().any(|l| l.contains(" - bcrypt [") && l.contains("\" 200 ")), "{log}");
    assert!(log.lines().any(|l| l.contains(" - - [") && l.contains("/staff/a.txt HTTP/1.1\" 401 ")), "{log}");
    assert!(site.error_log().contains("Basic auth as \"bcrypt\" failed (wrong password"), "{}", site.error_log());
}

#[test]
fn a_client_that_keeps_failing_is_turned_away_for_a_while() {
    let Some(h) = need_tool("htpasswd") else { return };
    let site = Site::new();
    htpasswd_file(&site, &h);
    let p = start(&site, "", "auth_file = \"conf/htpasswd\"\nauth_realm = \"All\"\n");
    // "apr:nope"
    let wrong = || get_with(p.addr, "/", "Authorization: Basic YXByOm5vcGU=\r\n");
    for i in 0..5 {
        assert_eq!(wrong().status, 401, "failure {i}");
    }
    let r = wrong();
    assert_eq!(r.status, 429);
    assert!(r.header("retry-after").is_some_and(|s| s.parse::<u64>().is_ok_and(|n| (1..=61).contains(&n))), "{r:?}");
    // Even the right password waits (no hash is checked meanwhile).
    let right = get_with(p.addr, "/", "Authorization: Basic YXByOnBhOnNzIHfDtnJk\r\n");
    assert_eq!(right.status, 429);
}

/// `satisfy = "any"` with a deny list alone: an address the list does not name is
/// not let in without a password (nginx answers 401 too); only an allow rule that
/// matches stands for the password.
#[test]
fn satisfy_any_takes_an_allow_rule_not_the_absence_of_a_deny() {
    let Some(h) = need_tool("htpasswd") else { return };
    let site = Site::new();
    site.write("htdocs/a/x.txt", "deny list\n");
    site.write("htdocs/b/x.txt", "allow list\n");
    htpasswd_file(&site, &h);
    let p = start(
        &site,
        "trusted_proxies = [\"127.0.0.1\"]",
        "[[vhost.location]]\nprefix = \"/a/\"\nauth_realm = \"S\"\nauth_file = \"conf/htpasswd\"\n\
         deny = [\"192.0.2.0/24\"]\nsatisfy = \"any\"\n\
         [[vhost.location]]\nprefix = \"/b/\"\nauth_realm = \"S\"\nauth_file = \"conf/htpasswd\"\n\
         allow = [\"198.51.100.0/24\"]\nsatisfy = \"any\"\n",
    );
    // "apr:pa:ss wörd"
    let login = "Authorization: Basic YXByOnBhOnNzIHfDtnJk\r\n";
    let from =
        |path: &str, ip: &str, extra: &str| get_with(p.addr, path, &format!("X-Forwarded-For: {ip}\r\n{extra}")).status;
    assert_eq!(from("/a/x.txt", "203.0.113.5", ""), 401, "not denied is not allowed");
    assert_eq!(from("/a/x.txt", "203.0.113.5", login), 200);
    assert_eq!(from("/a/x.txt", "192.0.2.7", ""), 401, "denied: the password may still let it in");
    assert_eq!(from("/a/x.txt", "192.0.2.7", login), 200);
    assert_eq!(from("/b/x.txt", "198.51.100.9", ""), 200, "an allow rule that matches is enough");
    assert_eq!(from("/b/x.txt", "203.0.113.5", ""), 401);
    assert_eq!(from("/b/x.txt", "203.0.113.5", login), 200);
}

/// A wrong password takes as long for a user the file does not name as for one it
/// does (a decoy hash of the file's cost is checked), so the time of a 401 does not
/// tell which names are real.
#[test]
fn an_unknown_user_takes_as_long_as_a_wrong_password() {
    let Some(h) = need_tool("htpasswd") else { return };
    let site = Site::new();
    let file = site.path("conf/htpasswd");
    let o = Command::new(&h).args(["-c", "-b", "-B", "-C", "9"]).arg(&file).args(["alice", "secret"]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let p = start(&site, "trusted_proxies = [\"127.0.0.1\"]", "auth_file = \"conf/htpasswd\"\nauth_realm = \"All\"\n");
    use base64::Engine;
    // Each try from its own address: the back-off is not what is measured.
    let mut n = 0;
    let mut took = |user: &str| {
        n += 1;
        let creds = base64::engine::general_purpose::STANDARD.encode(format!("{user}:wrong"));
        let headers = format!("X-Forwarded-For: 203.0.113.{n}\r\nAuthorization: Basic {creds}\r\n");
        let t = Instant::now();
        assert_eq!(get_with(p.addr, "/", &headers).status, 401);
        t.elapsed()
    };
    // Taken in turns, so a busy machine slows both alike; the fastest of each.
    // Without the decoy an unknown user is about 50 times faster (no hash at all):
    // a tenth is far from that and far from noise.
    let (mut known, mut unknown) = (Duration::MAX, Duration::MAX);
    for _ in 0..5 {
        known = known.min(took("alice"));
        unknown = unknown.min(took("mallory"));
    }
    assert!(unknown * 10 > known, "an unknown user {unknown:?}, a known one's wrong password {known:?}");
    assert!(site.error_log().contains("Basic auth as \"mallory\" failed (no such user"), "{}", site.error_log());
}

/// The failed logins are counted for the whole server: guesses spread over two
/// workers meet one count, and the addresses of one IPv6 /64 are one client.
#[test]
fn failed_logins_are_counted_once_for_the_server_and_an_ipv6_64_is_one_client() {
    let Some(h) = need_tool("htpasswd") else { return };
    let site = Site::new();
    htpasswd_file(&site, &h);
    let (started, go) = (site.path("started"), site.path("go"));
    site.write(
        "htdocs/cgi-bin/waits.sh",
        format!(
            "#!/bin/sh\ntouch {}; while [ ! -e {} ]; do sleep 0.05; done; printf 'Content-Type: text/plain\\r\\n\\r\\ndone'\n",
            started.display(),
            go.display()
        ),
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(site.path("htdocs/cgi-bin/waits.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    site.config(
        "trusted_proxies = [\"127.0.0.1\"]\n[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 2\nmax = 2\n",
        "[[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n\
         [[vhost.location]]\nprefix = \"/staff/\"\nauth_file = \"conf/htpasswd\"\nauth_realm = \"Staff\"\n\
         [[vhost.location]]\nprefix = \"/cgi-bin/\"\ncgi = true\nscript_timeout = \"60s\"\n",
    );
    let p = Pika::start(&site, "-F");
    // "apr:nope", from one client.
    let wrong = |ip: &str| {
        format!(
            "GET /staff/ HTTP/1.1\r\nHost: localhost\r\nX-Forwarded-For: {ip}\r\nAuthorization: Basic YXByOm5vcGU=\r\n\r\n"
        )
    };
    // Five failures on one kept-alive connection: all in the worker that holds it.
    let mut kept = connect(p.addr);
    for i in 0..5 {
        kept.write_all(wrong("192.0.2.9").as_bytes()).unwrap();
        assert_eq!(read_response(&mut kept, false).unwrap().status, 401, "failure {i}");
    }
    // That worker runs a script that waits: the next connection goes to the other.
    kept.write_all(b"GET /cgi-bin/waits.sh HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    wait_until(DEADLINE, "the waiting script to start", || started.exists().then_some(()));
    let r = raw(p.addr, wrong("192.0.2.9").replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n").as_bytes());
    assert_eq!(r.status, 429, "the other worker knows of the five failures");
    assert!(r.header("retry-after").is_some(), "{r:?}");
    std::fs::write(&go, "").unwrap();
    assert_eq!(read_response(&mut kept, false).unwrap().text(), "done");
    // IPv6: five addresses of one /64 are one client; the next /64 is another.
    let from = |ip: &str| raw(p.addr, wrong(ip).replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n").as_bytes()).status;
    for i in 1..=5 {
        assert_eq!(from(&format!("2001:db8:7:1::{i}")), 401, "failure {i}");
    }
    assert_eq!(from("2001:db8:7:1:ffff:ffff:ffff:ffff"), 429, "the same /64");
    assert_eq!(from("2001:db8:7:2::1"), 401, "another /64");
}

#[test]
fn json_logs_name_the_user() {
    let Some(h) = need_tool("htpasswd") else { return };
    let site = Site::new();
    htpasswd_file(&site, &h);
    site.config(
        "",
        "[[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\nauth_file = \"conf/htpasswd\"\nauth_realm = \"All\"\n\
         [[access_log]]\npath = \"logs/access.json\"\nformat = \"json\"\n",
    );
    let p = Pika::start(&site, "-X");
    assert_eq!(get_with(p.addr, "/", "Authorization: Basic YXByOnBhOnNzIHfDtnJk\r\n").status, 200);
    assert_eq!(get(p.addr, "/").status, 401);
    // Written within a second of going idle.
    let lines = wait_until(DEADLINE, "two records", || {
        let l = site.read("logs/access.json");
        (l.lines().count() == 2).then_some(l)
    });
    drop(p);
    let users: Vec<serde_json::Value> =
        lines.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["user"].clone()).collect();
    assert_eq!(users, [serde_json::json!("apr"), serde_json::Value::Null], "{lines}");
}

#[test]
fn dash_t_reports_rules_it_cannot_use() {
    let Some(h) = need_tool("htpasswd") else { return };
    let site = Site::new();
    let said = |vhost: &str| {
        site.config("", &format!("[[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n{vhost}"));
        let o = check(&site);
        (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr))
    };
    let (code, text) = said("auth_file = \"missing\"\nauth_realm = \"x\"\n");
    assert!(code == Some(1) && text.contains("auth_file") && text.contains("missing"), "{text}");
    let (code, text) = said("[[vhost.location]]\nregex = '^/a/(\\w+)$'\nreturn = { status = 301, to = \"/b/$3\" }\n");
    assert!(code == Some(1) && text.contains("$3: the location's regex has 1 capture group(s)"), "{text}");
    let (code, text) = said("[[vhost.location]]\nregex = '^/a/(\\w+$'\nreturn = 404\n");
    assert!(code == Some(1) && text.contains("bad regex"), "{text}");
    let (code, text) = said("headers = { \"Bad Name\" = \"x\" }\n");
    assert!(code == Some(1) && text.contains("\"Bad Name\" is not a token"), "{text}");
    let (code, text) = said("headers = { \"Content-Length\" = \"1\" }\n");
    assert!(code == Some(1) && text.contains("pika's own"), "{text}");
    htpasswd_file(&site, &h);
    let (code, text) = said("auth_file = \"conf/htpasswd\"\nauth_realm = \"x\"\n");
    assert!(code == Some(0) && text.contains("unsalted SHA-1"), "a weak hash is said: {text}");
    // A bcrypt cost a guess would pin a worker with: said above 12, refused above 17.
    let slow =
        Command::new(&h).args(["-b", "-B", "-C", "13"]).arg(site.path("conf/htpasswd")).args(["slow", "x"]).output();
    assert!(slow.unwrap().status.success());
    let text = std::fs::read_to_string(site.path("conf/htpasswd")).unwrap();
    site.write("conf/htpasswd", format!("{text}huge:$2y$31$7Is7CzbF9wp5XxlPjgXMfeo7XSfer0mDeZZ9ALiyvuKXBwqa7Zouy\n"));
    let (code, text) = said("auth_file = \"conf/htpasswd\"\nauth_realm = \"x\"\n");
    assert!(code == Some(0) && text.contains("\"slow\": bcrypt cost 13"), "{text}");
    assert!(text.contains("\"huge\": a bcrypt cost above 17") && text.contains("cannot log in"), "{text}");
    site.write("conf/htpasswd", "huge:$2y$31$7Is7CzbF9wp5XxlPjgXMfeo7XSfer0mDeZZ9ALiyvuKXBwqa7Zouy\n");
    let (code, text) = said("auth_file = \"conf/htpasswd\"\nauth_realm = \"x\"\n");
    assert!(code == Some(1) && text.contains("no user that can log in"), "{text}");
    site.write("conf/htpasswd", "des:IoaWFYkqlHC4w\n");
    let (code, text) = said("auth_file = \"conf/htpasswd\"\nauth_realm = \"x\"\n");
    assert!(code == Some(1) && text.contains("DES crypt") && text.contains("no user that can log in"), "{text}");
}

/// A page of text that compresses well (about 50 KB).
fn page() -> String {
    let mut s = String::from("<!DOCTYPE html>\n<html><head><title>t</title></head><body>\n");
    for i in 0..1200 {
        s.push_str(&format!("<p class=\"row\">Row {i} of the page.</p>\n"));
    }
    s + "</body></html>\n"
}

/// Makes `htdocs/NAME.SUFFIX` with `tool` (gzip, brotli, zstd), keeping the original.
fn sibling(site: &Site, tool: &PathBuf, name: &str) {
    let quiet: &[&str] = if tool.ends_with("zstd") { &["-q"] } else { &[] };
    let o =
        Command::new(tool).args(["-k", "-f"]).args(quiet).arg(site.path(&format!("htdocs/{name}"))).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn precompressed_siblings_by_q_values_with_their_own_etag_and_ranges() {
    let (Some(c), Some(gz), Some(br), Some(zst)) =
        (need_tool("curl"), need_tool("gzip"), need_tool("brotli"), need_tool("zstd"))
    else {
        return;
    };
    let site = Site::new();
    site.write("htdocs/app.js", page());
    for tool in [&gz, &br, &zst] {
        sibling(&site, tool, "app.js");
    }
    site.write("htdocs/old.css", page());
    site.write("htdocs/old.css.gz", "stale");
    // The sibling is older than the file it stands for: not served.
    let past = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
    std::fs::File::options().write(true).open(site.path("htdocs/old.css.gz")).unwrap().set_modified(past).unwrap();
    let p = start(&site, "", "precompressed = true\n");
    let ask = |path: &str, accept: &str| get_with(p.addr, path, &format!("Accept-Encoding: {accept}\r\n"));
    let plain = get(p.addr, "/app.js");
    assert_eq!((plain.header("content-encoding"), plain.body.len()), (None, page().len()));
    assert_eq!(plain.header("vary").as_deref(), Some("Accept-Encoding"));
    let mut etags = vec![plain.header("etag").unwrap()];
    for (accept, coding) in [("gzip, deflate, br, zstd", "br"), ("gzip, zstd", "zstd"), ("br;q=0.5, gzip", "gzip")] {
        let r = ask("/app.js", accept);
        assert_eq!(r.header("content-encoding").as_deref(), Some(coding), "{accept}");
        assert_eq!(r.header("content-type").as_deref(), Some("text/javascript"), "the original's type");
        assert_eq!(r.header("vary").as_deref(), Some("Accept-Encoding"));
        let file = site.path(&format!(
            "htdocs/app.js.{}",
            if coding == "zstd" {
                "zst"
            } else if coding == "gzip" {
                "gz"
            } else {
                "br"
            }
        ));
        assert_eq!(r.body, std::fs::read(file).unwrap(), "{coding}: the sibling's bytes");
        etags.push(r.header("etag").unwrap());
    }
    etags.sort();
    etags.dedup();
    assert_eq!(etags.len(), 4, "an ETag per encoding: {etags:?}");
    // A range is of the compressed bytes.
    let r = get_with(p.addr, "/app.js", "Accept-Encoding: gzip\r\nRange: bytes=0-9\r\n");
    assert_eq!(r.status, 206);
    assert_eq!(r.body, std::fs::read(site.path("htdocs/app.js.gz")).unwrap()[..10]);
    // The stale sibling is passed over.
    let r = ask("/old.css", "gzip");
    assert_eq!((r.header("content-encoding"), r.body.len()), (None, page().len()));
    // curl decodes what it asked for.
    for (flag, accept) in [("--compressed", None), ("-H", Some("Accept-Encoding: br"))] {
        let mut args = vec![flag];
        args.extend(accept);
        if flag == "-H" {
            args.push("--compressed");
        }
        let o = curl(&c, &p, "/app.js", &args);
        assert_eq!(String::from_utf8_lossy(&o.stdout), page(), "{args:?}");
    }
}

#[test]
fn compressed_on_the_fly_once_per_worker_with_error_pages_and_listings() {
    let Some(c) = need_tool("curl") else { return };
    let site = Site::new();
    site.write("htdocs/page.html", page());
    site.write("htdocs/tiny.html", "<p>a page shorter than compress_min_size</p>\n");
    site.write("htdocs/img.png", page());
    for i in 0..40 {
        site.write(&format!("htdocs/list/file-with-a-long-name-{i}.txt"), "x");
    }
    let p = start(&site, "", "compress = [\"gzip\", \"br\", \"zstd\"]\ncompress_min_size = 100\nautoindex = true\n");
    let ask = |path: &str, accept: &str| get_with(p.addr, path, &format!("Accept-Encoding: {accept}\r\n"));
    let r = ask("/page.html", "gzip, deflate, br, zstd");
    assert_eq!(r.header("content-encoding").as_deref(), Some("gzip"), "the server's order: gzip listed first");
    assert!(r.body.len() * 10 < page().len(), "{}", r.body.len());
    let etag = r.header("etag").unwrap();
    assert!(etag.ends_with("-gzip\""), "{etag}");
    let again = ask("/page.html", "gzip");
    assert_eq!((again.body == r.body, again.header("etag")), (true, Some(etag.clone())));
    let r304 = get_with(p.addr, "/page.html", &format!("Accept-Encoding: gzip\r\nIf-None-Match: {etag}\r\n"));
    assert_eq!(r304.status, 304);
    for coding in ["br", "zstd"] {
        assert_eq!(ask("/page.html", coding).header("content-encoding").as_deref(), Some(coding));
    }
    // Too small, not text, a range: as it is.
    assert_eq!(ask("/tiny.html", "gzip").header("content-encoding"), None);
    assert_eq!(ask("/img.png", "gzip").header("content-encoding"), None);
    let r = get_with(p.addr, "/page.html", "Accept-Encoding: gzip\r\nRange: bytes=0-9\r\n");
    assert_eq!((r.status, r.header("content-encoding"), r.text()), (206, None, page()[..10].to_string()));
    for path in ["/page.html", "/list/"] {
        let o = curl(&c, &p, path, &["--compressed", "-D", "-"]);
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(text.contains("Content-Encoding: gzip\r\n"), "{path}: {text}");
        assert!(text.contains("file-with-a-long-name-39.txt") || text.contains("Row 1199"), "{path}");
    }
    let missing = ask("/missing.html", "br");
    assert_eq!((missing.status, missing.header("content-encoding").as_deref()), (404, Some("br")));
}

#[test]
fn a_single_page_application_is_served_by_try_files() {
    let Some(c) = need_tool("curl") else { return };
    let site = Site::new();
    site.write("htdocs/app/index.html", "<div id=app></div>\n");
    site.write("htdocs/app/main.js", "console.log(1)\n");
    site.write("htdocs/app/docs/index.html", "docs\n");
    let p = start(
        &site,
        "",
        "[[vhost.location]]\nprefix = \"/app/\"\ntry_files = [\"$uri\", \"$uri/\", \"/app/index.html\"]\n\
         [[vhost.location]]\nprefix = \"/strict/\"\ntry_files = [\"$uri\", \"=404\"]\n",
    );
    let body = |path: &str| String::from_utf8_lossy(&curl(&c, &p, path, &[]).stdout).into_owned();
    assert_eq!(body("/app/main.js"), "console.log(1)\n", "a file that exists");
    assert_eq!(body("/app/docs/"), "docs\n", "a directory, by its index");
    assert_eq!(body("/app/users/42/settings"), "<div id=app></div>\n", "any other path: the app");
    assert_eq!(curl_w(&c, &p, "/strict/none", "%{http_code}", &[]), "404");
}

#[test]
fn a_changed_htpasswd_file_is_read_again_and_a_lost_one_keeps_the_old_users() {
    let Some(h) = need_tool("htpasswd") else { return };
    let site = Site::new();
    htpasswd_file(&site, &h);
    site.config(
        "",
        "[http]\nfile_check_interval = \"1s\"\n\
         [[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\nauth_file = \"conf/htpasswd\"\nauth_realm = \"All\"\n",
    );
    let p = Pika::start(&site, "-F");
    // "newbie:fresh" and "apr:pa:ss wörd".
    let (newbie, apr) = ("Authorization: Basic bmV3YmllOmZyZXNo\r\n", "Authorization: Basic YXByOnBhOnNzIHfDtnJk\r\n");
    assert_eq!(get_with(p.addr, "/", newbie).status, 401);
    let o =
        Command::new(&h).args(["-b", "-B"]).arg(site.path("conf/htpasswd")).args(["newbie", "fresh"]).output().unwrap();
    assert!(o.status.success());
    wait_until(DEADLINE, "the new user to be let in", || (get_with(p.addr, "/", newbie).status == 200).then_some(()));
    assert!(site.error_log().contains("conf/htpasswd changed: reading the config again"), "{}", site.error_log());
    // Gone: the config cannot be read again; the users read before still log in.
    std::fs::remove_file(site.path("conf/htpasswd")).unwrap();
    wait_until(DEADLINE, "the failed reload said", || site.error_log().contains("No such file").then_some(()));
    assert_eq!(get_with(p.addr, "/", apr).status, 200);
    assert_eq!(get_with(p.addr, "/", newbie).status, 200);
    assert!(alive(p.pid));
}

#[test]
fn rewrite_serves_the_request_again_and_internal_locations_answer_only_that() {
    let site = Site::new();
    site.write("htdocs/new/page.html", "new page\n");
    site.write("htdocs/private/secret.html", "only by a rewrite\n");
    let p = start(
        &site,
        "",
        "[[vhost.location]]\nregex = '^/old/(.*)\\.htm$'\nrewrite = \"/new/$1.html\"\n\
         [[vhost.location]]\nexact = \"/s\"\nrewrite = \"/private/secret.html\"\n\
         [[vhost.location]]\nprefix = \"/private/\"\ninternal = true\n\
         [[vhost.location]]\nregex = '^/spin'\nrewrite = \"/spin$is_args$args\"\n",
    );
    // Served at the target, the client none the wiser: no redirect, the same URL.
    let r = get(p.addr, "/old/page.htm");
    assert_eq!((r.status, r.text().as_str(), r.header("location")), (200, "new page\n", None));
    // An internal location: 404 to a client, its file by a rewrite.
    assert_eq!(get(p.addr, "/private/secret.html").status, 404);
    assert_eq!(get(p.addr, "/s").text(), "only by a rewrite\n");
    // A loop of rewrites ends in a 500, said once.
    assert_eq!(get(p.addr, "/spin?a=1").status, 500);
    wait_until(DEADLINE, "the loop to be logged", || {
        site.error_log().contains("more than 10 internal redirects").then_some(())
    });
    // Only on a location, only to a path of the vhost, never with return.
    for (rest, says) in [
        ("[[vhost]]\nroot = \"htdocs\"\nrewrite = \"/x\"\n", "rewrite goes on a [[vhost.location]]"),
        (
            "[[vhost]]\nroot = \"htdocs\"\n[[vhost.location]]\nprefix = \"/a/\"\nrewrite = \"https://x/\"\n",
            "a path of this vhost",
        ),
        (
            "[[vhost]]\nroot = \"htdocs\"\n[[vhost.location]]\nprefix = \"/a/\"\nrewrite = \"/b$1\"\n",
            "captures come from a regex",
        ),
        (
            "[[vhost]]\nroot = \"htdocs\"\n[[vhost.location]]\nprefix = \"/a/\"\nrewrite = \"/b\"\nreturn = 404\n",
            "return and rewrite",
        ),
    ] {
        let bad = Site::new();
        bad.config("", rest);
        let o = Command::new(BIN).args(["-t", "-f"]).arg(bad.path("conf/pika.toml")).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success() && err.contains(says), "{rest}: {err}");
    }
}

#[test]
fn a_prefixs_access_rules_hold_for_a_regex_location_below_it_and_prefix_only_stops_the_regexes() {
    let site = Site::new();
    for f in ["admin/panel.txt", "staff/panel.txt", "open/a.txt", "static/a.txt"] {
        site.write(&format!("htdocs/{f}"), format!("{f}\n"));
    }
    // "user:test" in {SHA}.
    site.write("conf/htpasswd", "user:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=\n");
    let p = start(
        &site,
        "",
        "[[vhost.location]]\nprefix = \"/admin/\"\nallow = [\"192.0.2.0/24\"]\n\
         [[vhost.location]]\nprefix = \"/staff/\"\nauth_file = \"conf/htpasswd\"\nauth_realm = \"Staff\"\n\
         [[vhost.location]]\nregex = '\\.txt$'\nheaders = { \"X-From\" = \"regex\" }\n",
    );
    // The regex answers below the protected prefixes, and their rules still hold.
    assert_eq!(get(p.addr, "/admin/panel.txt").status, 403, "the prefix's allow list");
    let r = get(p.addr, "/staff/panel.txt");
    assert_eq!(r.status, 401, "the prefix's password");
    let r = get_with(p.addr, "/staff/panel.txt", "Authorization: Basic dXNlcjp0ZXN0\r\n");
    assert_eq!((r.status, r.header("x-from").as_deref()), (200, Some("regex")), "{}", r.head);
    let r = get(p.addr, "/open/a.txt");
    assert_eq!((r.status, r.header("x-from").as_deref()), (200, Some("regex")));
    // prefix_only: the longest prefix stops the regexes (nginx's ^~).
    let site = Site::new();
    site.write("htdocs/static/a.txt", "static/a.txt\n");
    let p = start(
        &site,
        "",
        "[[vhost.location]]\nprefix = \"/static/\"\nprefix_only = true\nheaders = { \"X-From\" = \"static\" }\n\
         [[vhost.location]]\nregex = '\\.txt$'\nheaders = { \"X-From\" = \"regex\" }\n",
    );
    let r = get(p.addr, "/static/a.txt");
    assert_eq!((r.status, r.header("x-from").as_deref()), (200, Some("static")));
    // Only on a prefix.
    let bad = Site::new();
    bad.config("", "[[vhost]]\nroot = \"htdocs\"\n[[vhost.location]]\nregex = \"^/a\"\nprefix_only = true\n");
    let o = Command::new(BIN).args(["-t", "-f"]).arg(bad.path("conf/pika.toml")).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("prefix_only goes with prefix"), "{o:?}");
}
