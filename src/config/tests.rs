//! The config's tests: defaults, errors with positions, includes, listen forms, TLS,
//! units.

use super::*;
use crate::log::rotate::Naming;
use server::parse_listen;

fn setup() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("conf")).unwrap();
    std::fs::create_dir_all(dir.path().join("htdocs")).unwrap();
    std::fs::write(dir.path().join("conf/mime.types"), "text/html html\n").unwrap();
    dir
}

fn try_parse(dir: &tempfile::TempDir, text: &str) -> Result<Config, ConfigError> {
    parse(text, &dir.path().join("conf/pika.toml"))
}

const MINIMAL: &str = "[server]\nlisten = [\"127.0.0.1:8080\"]\n[[vhost]]\nroot = \"htdocs\"\n";

#[test]
fn minimal_config_gets_defaults() {
    let dir = setup();
    let c = try_parse(&dir, MINIMAL).unwrap();
    assert_eq!(c.root, dir.path());
    assert_eq!(c.listen, vec![Listen { addr: "127.0.0.1:8080".parse().unwrap(), tls: false, proxy_protocol: false }]);
    assert_eq!(
        c.workers,
        Workers {
            start: 2,
            min_spare: 1,
            max_spare: 3,
            max: 64,
            max_requests: 0,
            max_connections: 1024,
            max_memory: None,
            sched_batch: true,
            cpu_affinity: crate::config::Affinity::Home,
        }
    );
    assert_eq!(c.pid_file, dir.path().join("logs/pika.pid"));
    assert!(matches!(&c.error_log, ErrorLogTarget::File(p) if *p == dir.path().join("logs/error.log")));
    assert_eq!(c.vhosts[0].files.index, vec!["index.html".to_string()]);
    assert_eq!(c.http.keepalive_timeout, Duration::from_secs(60));
    assert_eq!(c.backlog, 511);
}

#[test]
fn unknown_key_is_an_error_with_position() {
    let dir = setup();
    let text = "[server]\nlisten = [\"127.0.0.1:8080\"]\nlisen = 1\n[[vhost]]\nroot = \"htdocs\"\n";
    match try_parse(&dir, text) {
        Err(ConfigError::Invalid { line, column, message, .. }) => {
            assert_eq!((line, column), (3, 1));
            assert!(message.contains("unknown field"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn semantic_errors_point_at_the_value() {
    let dir = setup();
    let text = "[server]\nlisten = [\"127.0.0.1:8080\", \"nope\"]\n[[vhost]]\nroot = \"htdocs\"\n";
    let err = try_parse(&dir, text).unwrap_err().to_string();
    assert!(err.contains("pika.toml:2:29: bad listen address"), "{err}");

    let text = "[server]\nlisten = [\"8080\"]\n[[vhost]]\nroot = \"missing\"\n";
    let err = try_parse(&dir, text).unwrap_err().to_string();
    assert!(err.contains(":4:8: vhost root"), "{err}");

    let text = "[server]\nlisten = [\"8080\"]\nuser = \"no-such-user-here\"\n[[vhost]]\nroot = \"htdocs\"\n";
    let err = try_parse(&dir, text).unwrap_err().to_string();
    assert!(err.contains(":3:8: no such user"), "{err}");
}

#[test]
fn mime_types_file_default_or_builtin() {
    let dir = setup();
    // No key: conf/mime.types under root when it exists (setup writes a one-line one).
    let c = try_parse(&dir, MINIMAL).unwrap();
    assert_eq!(c.mime_types, Some(dir.path().join("conf/mime.types")));
    assert_eq!((c.mime.len(), c.mime.lookup(b"a.css")), (1, "application/octet-stream"));
    // No key and no file: the built-in table, so a config written anywhere starts.
    std::fs::remove_file(dir.path().join("conf/mime.types")).unwrap();
    let c = try_parse(&dir, MINIMAL).unwrap();
    assert_eq!((c.mime_types.as_deref(), c.mime.lookup(b"a.css")), (None, "text/css"));
    // Asked for by name.
    let text = MINIMAL.replace("listen", "mime_types = \"builtin\"\nlisten");
    assert_eq!(try_parse(&dir, &text).unwrap().mime.lookup(b"x.epub"), "application/epub+zip");
    // A file that is named must be there: the error points at the key's value.
    let text = MINIMAL.replace("listen", "mime_types = \"conf/mime.types\"\nlisten");
    let err = try_parse(&dir, &text).unwrap_err().to_string();
    assert!(err.contains("pika.toml:2:14: cannot read mime_types"), "{err}");
}

#[test]
fn includes_add_vhosts_and_logs_in_order() {
    let dir = setup();
    let d = dir.path();
    std::fs::create_dir_all(d.join("conf/conf.d")).unwrap();
    std::fs::create_dir_all(d.join("www/b")).unwrap();
    std::fs::create_dir_all(d.join("www/a")).unwrap();
    let write = |name: &str, text: &str| std::fs::write(d.join("conf/conf.d").join(name), text).unwrap();
    write(
        "20-b.toml",
        "[[vhost]]\nserver_names = [\"b.test\"]\nroot = \"www/b\"\n\
         [[vhost.access_log]]\npath = \"logs/b.log\"\n",
    );
    write("10-a.toml", "[[vhost]]\nserver_names = [\"a.test\"]\nroot = \"www/a\"\n");
    write("30-logs.toml", "[[access_log]]\npath = \"logs/all.json\"\n");
    write("notes.txt", "not toml");
    let text = format!("include = [\"conf.d/*.toml\"]\n{MINIMAL}[[access_log]]\npath = \"logs/main.log\"\n");
    let c = try_parse(&dir, &text).unwrap();
    let names: Vec<&str> = c.vhosts.iter().map(|v| v.server_names.first().map_or("", |n| n)).collect();
    assert_eq!(names, ["", "a.test", "b.test"], "the main file's vhost stays the default");
    assert_eq!(c.vhosts[2].source, Some(d.join("conf/conf.d/20-b.toml")));
    assert_eq!(c.vhosts[0].source, None);
    let logs: Vec<(String, Option<usize>)> =
        c.access_logs.iter().map(|a| (a.path.strip_prefix(d).unwrap().display().to_string(), a.vhost)).collect();
    assert_eq!(logs, [("logs/main.log".into(), None), ("logs/all.json".into(), None), ("logs/b.log".into(), Some(2))]);
    assert_eq!(c.includes.len(), 3);

    // A main file with no vhost of its own: the first included one is the default.
    let text = "include = [\"conf.d/10-a.toml\"]\n[server]\nlisten = [\"8080\"]\n";
    assert_eq!(try_parse(&dir, text).unwrap().vhosts[0].server_names, ["a.test"]);
}

#[test]
fn include_errors_name_the_included_file() {
    let dir = setup();
    let d = dir.path();
    std::fs::create_dir_all(d.join("conf/conf.d")).unwrap();
    let text = format!("include = [\"conf.d/*.toml\"]\n{MINIMAL}");
    let err_with = |name: &str, body: &str| {
        let f = d.join("conf/conf.d").join(name);
        std::fs::write(&f, body).unwrap();
        let e = try_parse(&dir, &text).unwrap_err().to_string();
        std::fs::remove_file(&f).unwrap();
        e
    };
    let e = err_with("x.toml", "[[vhost]]\nroot = \"htdocs\"\nautoindex = yes\n");
    assert!(e.contains("conf.d/x.toml:3:13:"), "{e}");
    let e = err_with("x.toml", "\n[server]\nlisten = [\"1\"]\n");
    assert!(e.contains("conf.d/x.toml:2:2: unknown field `server`"), "{e}");
    let e = err_with("x.toml", "include = [\"y.toml\"]\n");
    assert!(e.contains("conf.d/x.toml:1:1: unknown field `include`"), "{e}");
    let e = err_with("x.toml", "[[vhost]]\nserver_names = [\"x\"]\nroot = \"missing\"\n");
    assert!(e.contains("conf.d/x.toml:3:8: vhost root"), "{e}");
    let e = err_with("x.toml", "[[access_log]]\npath = \"a.log\"\nformat = \"%Z\"\n");
    assert!(e.contains("conf.d/x.toml:3:10: bad access log format"), "{e}");

    // Errors in the pattern itself point at the main file.
    let e = try_parse(&dir, &format!("include = [\"conf.d/none.toml\"]\n{MINIMAL}")).unwrap_err().to_string();
    assert!(e.contains("pika.toml:1:12: include \"conf.d/none.toml\"") && e.contains("No such file"), "{e}");
    let text = format!("include = [\"*.toml\"]\n{MINIMAL}");
    std::fs::write(d.join("conf/pika.toml"), &text).unwrap();
    let e = try_parse(&dir, &text).unwrap_err().to_string();
    assert!(e.contains("names this file"), "{e}");
    std::fs::write(d.join("conf/conf.d/a.toml"), "").unwrap();
    let e = try_parse(&dir, &format!("include = [\"conf.d/*.toml\", \"conf.d/a.toml\"]\n{MINIMAL}"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("pika.toml:1:29:") && e.contains("included twice"), "{e}");
    // A folder with nothing in it, or none at all, includes nothing.
    let text = format!("include = [\"conf.d/*.conf\", \"sites-enabled/*\"]\n{MINIMAL}");
    assert!(try_parse(&dir, &text).unwrap().includes.is_empty());
}

#[test]
fn cpu_affinity_is_home_off_auto_or_cpus_pika_may_use() {
    use crate::config::Affinity;
    let dir = setup();
    let read = |v: &str| try_parse(&dir, &format!("{MINIMAL}[workers]\ncpu_affinity = {v}\n"));
    assert_eq!(try_parse(&dir, MINIMAL).unwrap().workers.cpu_affinity, Affinity::Home);
    assert_eq!(read("\"home\"").unwrap().workers.cpu_affinity, Affinity::Home);
    assert_eq!(read("\"auto\"").unwrap().workers.cpu_affinity, Affinity::Auto);
    assert_eq!(read("\"off\"").unwrap().workers.cpu_affinity, Affinity::Off);
    let first = crate::base::sys::allowed_cpus()[0];
    assert_eq!(read(&format!("[{first}]")).unwrap().workers.cpu_affinity, Affinity::Cpus(vec![first]));
    for (bad, says) in
        [("\"sometimes\"", "not \"sometimes\""), ("[]", "an empty list"), ("[100000]", "CPU 100000 is not one")]
    {
        let e = read(bad).unwrap_err().to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
    // A worker's CPU by its slot, in turn.
    assert_eq!(Affinity::Auto.cpu_for(3, &[0, 1]), Some(1));
    assert_eq!(Affinity::Cpus(vec![2, 5, 7]).cpu_for(4, &[0, 1]), Some(5));
    assert_eq!(Affinity::Off.cpu_for(0, &[0, 1]), None);
    assert_eq!(Affinity::Home.cpu_for(0, &[0, 1]), None, "a loop binds itself while it serves");
    assert_eq!(Affinity::Home.loops(&[0, 1, 2]), 3);
    assert_eq!(Affinity::Auto.cpu_for(0, &[]), None);
    assert_eq!(Affinity::Auto.loops(&[0, 1, 2]), 3);
    assert_eq!(Affinity::Off.loops(&[0, 1]), 2);
    assert_eq!(Affinity::Cpus(vec![3, 1, 3]).loops(&[0, 1, 2, 3]), 2, "distinct CPUs of the list");
    assert_eq!(Affinity::Off.loops(&[]), 1);
}

#[test]
fn sched_batch_can_be_turned_off() {
    let dir = setup();
    let text = format!("{MINIMAL}[workers]\nsched_batch = false\n");
    assert!(!try_parse(&dir, &text).unwrap().workers.sched_batch);
}

#[test]
fn workers_band_is_checked_and_widened() {
    let dir = setup();
    let text = format!("{MINIMAL}[workers]\nmin_spare = 4\nmax_spare = 2\n");
    assert!(try_parse(&dir, &text).unwrap_err().to_string().contains("min_spare"));
    let text = format!("{MINIMAL}[workers]\nmin_spare = 3\nmax_spare = 3\nstart = 900\nmax = 8\n");
    let w = try_parse(&dir, &text).unwrap().workers;
    assert_eq!((w.start, w.min_spare, w.max_spare, w.max), (8, 3, 4, 8));
    // Found by the config fuzzer: this once overflowed computing max_spare.
    let text = format!("{MINIMAL}[workers]\nmin_spare = 4294967295\nmax_spare = 4294967295\n");
    let w = try_parse(&dir, &text).unwrap().workers;
    assert_eq!((w.min_spare, w.max_spare), (64, 4294967295));
    let text = format!("{MINIMAL}[workers]\nmax = 1\nmin_spare = 2\n");
    let w = try_parse(&dir, &text).unwrap().workers;
    assert_eq!((w.start, w.min_spare, w.max_spare, w.max), (1, 1, 3, 1));
}

#[test]
fn access_log_buffer_and_flush() {
    let dir = setup();
    let log = |extra: &str| format!("{MINIMAL}[[access_log]]\npath = \"a.log\"\n{extra}");
    let a = &try_parse(&dir, &log("")).unwrap().access_logs[0];
    assert_eq!((a.buffer, a.flush), (DEFAULT_LOG_BUFFER, DEFAULT_LOG_FLUSH));
    let a = &try_parse(&dir, &log("buffer = 0\nflush = \"250ms\"\n")).unwrap().access_logs[0];
    assert_eq!((a.buffer, a.flush), (0, Duration::from_millis(250)));
    let a = &try_parse(&dir, &log("buffer = \"64KiB\"\n")).unwrap().access_logs[0];
    assert_eq!(a.buffer, 65536);
    let e = try_parse(&dir, &log("buffer = \"2MiB\"\n")).unwrap_err().to_string();
    assert!(e.contains("buffer above") && e.contains(":7:10:"), "{e}");
}

#[test]
fn listen_forms() {
    assert_eq!(parse_listen("8080"), Some("0.0.0.0:8080".parse().unwrap()));
    assert_eq!(parse_listen("*:81"), Some("0.0.0.0:81".parse().unwrap()));
    assert_eq!(parse_listen("[::1]:8080"), Some("[::1]:8080".parse().unwrap()));
    assert_eq!(parse_listen("localhost:8080"), None);
}

#[test]
fn listen_entries_are_strings_or_tables() {
    let dir = setup();
    let text = "[server]\nlisten = [\"127.0.0.1:8080\", { addr = \"127.0.0.1:8443\", tls = true }, { addr = \"[::1]:8081\" }]\n[[vhost]]\nroot = \"htdocs\"\ntls_cert = \"c.pem\"\ntls_key = \"c.key\"\n";
    crate::tls::test_certs::leaf(&["localhost"], -1, 30, None).write(dir.path(), "c");
    let c = try_parse(&dir, text).unwrap();
    let got: Vec<(String, bool)> = c.listen.iter().map(|l| (l.addr.to_string(), l.tls)).collect();
    assert_eq!(got, [("127.0.0.1:8080".into(), false), ("127.0.0.1:8443".into(), true), ("[::1]:8081".into(), false)]);
    // A typo in a table is an error at its place, naming the keys there are.
    let text = "[server]\nlisten = [{ addr = \"127.0.0.1:8443\", tsl = true }]\n[[vhost]]\nroot = \"htdocs\"\n";
    let e = try_parse(&dir, text).unwrap_err().to_string();
    assert!(
        e.contains(":2:") && e.contains("unknown field `tsl`, expected one of `addr`, `tls`, `proxy_protocol`"),
        "{e}"
    );
    let text = "[server]\nlisten = [{ tls = true }]\n[[vhost]]\nroot = \"htdocs\"\n";
    let e = try_parse(&dir, text).unwrap_err().to_string();
    assert!(e.contains("missing field `addr`"), "{e}");
    let text = "[server]\nlisten = [8080]\n[[vhost]]\nroot = \"htdocs\"\n";
    let e = try_parse(&dir, text).unwrap_err().to_string();
    assert!(e.contains("an address (\"127.0.0.1:8080\") or a table"), "{e}");
    let text =
        "[server]\nlisten = [\"127.0.0.1:1\", { addr = \"127.0.0.1:1\", tls = true }]\n[[vhost]]\nroot = \"htdocs\"\n";
    let e = try_parse(&dir, text).unwrap_err().to_string();
    assert!(e.contains("given twice"), "{e}");
    let text = "[server]\nlisten = [\"127.0.0.1:0\", \"127.0.0.1:0\"]\n[[vhost]]\nroot = \"htdocs\"\n";
    assert_eq!(try_parse(&dir, text).unwrap().listen.len(), 2, "port 0: two free ports");
}

/// A config with a TLS listener and the given `[[vhost]]` blocks.
fn tls_config(vhosts: &str) -> String {
    format!("[server]\nlisten = [\"127.0.0.1:8080\", {{ addr = \"127.0.0.1:8443\", tls = true }}]\n{vhosts}")
}

#[test]
fn certificates_per_vhost_and_the_default() {
    use crate::tls::test_certs::leaf;
    let dir = setup();
    leaf(&["a.example"], -1, 30, None).write(dir.path(), "a");
    leaf(&["b.example", "*.b.example"], -1, 30, None).write(dir.path(), "b");
    let text = tls_config(
        "[[vhost]]\nroot = \"htdocs\"\n\
         [[vhost]]\nserver_names = [\"a.example\"]\nroot = \"htdocs\"\ntls_cert = \"a.pem\"\ntls_key = \"a.key\"\n\
         [[vhost]]\nserver_names = [\"b.example\", \"*.b.example\"]\nroot = \"htdocs\"\ntls_cert = \"b.pem\"\ntls_key = \"b.key\"\nhttps_redirect = 308\nhsts = \"max-age=31536000; includeSubDomains\"\n",
    );
    let c = try_parse(&dir, &text).unwrap();
    let certs = c.tls.as_ref().unwrap();
    let a = c.vhosts[1].tls.as_ref().unwrap();
    let b = c.vhosts[2].tls.as_ref().unwrap();
    assert!(std::sync::Arc::ptr_eq(certs.for_name(Some("a.example")), &a.key));
    assert!(std::sync::Arc::ptr_eq(certs.for_name(Some("B.Example")), &b.key));
    assert!(std::sync::Arc::ptr_eq(certs.for_name(Some("www.b.example")), &b.key));
    // No SNI, an unknown name, a vhost without a certificate: the first certificate.
    assert!(std::sync::Arc::ptr_eq(certs.for_name(None), &a.key));
    assert!(std::sync::Arc::ptr_eq(certs.for_name(Some("c.example")), &a.key));
    assert_eq!(a.cert_file, dir.path().join("a.pem"));
    assert_eq!(
        (c.vhosts[2].https_redirect, c.vhosts[2].hsts.as_deref()),
        (Some(308), Some("max-age=31536000; includeSubDomains"))
    );
    assert_eq!((c.vhosts[1].https_redirect, c.vhosts[1].hsts.as_deref()), (None, None));
}

#[test]
fn tls_mistakes_point_at_the_key_and_name_the_file() {
    use crate::tls::test_certs::leaf;
    let dir = setup();
    leaf(&["a.example"], -1, 30, None).write(dir.path(), "a");
    leaf(&["b.example"], -1, 30, None).write(dir.path(), "b");
    leaf(&["a.example"], -30, -1, None).write(dir.path(), "old");
    let vhost =
        |extra: &str| tls_config(&format!("[[vhost]]\nserver_names = [\"a.example\"]\nroot = \"htdocs\"\n{extra}"));
    let err = |extra: &str| try_parse(&dir, &vhost(extra)).unwrap_err().to_string();
    let d = dir.path().display();

    let e = try_parse(&dir, &vhost("")).unwrap_err().to_string();
    assert!(e.contains("pika.toml:2:29: a tls listener needs a certificate"), "{e}");
    let e = err("tls_cert = \"a.pem\"\n");
    assert!(e.contains(":6:12: tls_cert needs tls_key"), "{e}");
    let e = err("tls_cert = \"a.pem\"\ntls_key = \"b.key\"\n");
    assert!(e.ends_with(&format!(":7:11: {d}/b.key: the key does not match the certificate in {d}/a.pem")), "{e}");
    let e = err("tls_cert = \"a.pem\"\ntls_key = \"nope.key\"\n");
    assert!(e.contains(&format!(":7:11: {d}/nope.key: cannot read: No such file")), "{e}");
    let e = err("tls_cert = \"b.pem\"\ntls_key = \"b.key\"\n");
    assert!(
        e.contains(&format!(":6:12: {d}/b.pem: the certificate does not cover the server name \"a.example\"")),
        "{e}"
    );
    let e = err("tls_cert = \"old.pem\"\ntls_key = \"old.key\"\n");
    assert!(e.contains(&format!(":6:12: {d}/old.pem: the certificate expired on ")), "{e}");
    let certs = "tls_cert = \"a.pem\"\ntls_key = \"a.key\"\n";
    let e = err(&format!("{certs}https_redirect = 302\n"));
    assert!(e.contains(":8:18: https_redirect must be 301 or 308"), "{e}");
    for bad in ["max-age=", "maxage=1", "max-age=1; preload; nope", "max-age=-1"] {
        let e = err(&format!("{certs}hsts = \"{bad}\"\n"));
        assert!(e.contains(":8:8: hsts must be a Strict-Transport-Security value"), "{bad}: {e}");
    }
    let plain_only = "[server]\nlisten = [\"127.0.0.1:8080\"]\n[[vhost]]\nroot = \"htdocs\"\nhttps_redirect = 301\n";
    let e = try_parse(&dir, plain_only).unwrap_err().to_string();
    assert!(e.contains(":5:18: https_redirect needs a listen entry with tls = true"), "{e}");
}

#[test]
fn units_in_http_section() {
    let dir = setup();
    let text = format!("{MINIMAL}[http]\nkeepalive_timeout = \"1500ms\"\nmax_body_size = \"2MiB\"\n");
    let c = try_parse(&dir, &text).unwrap();
    assert_eq!(c.http.keepalive_timeout, Duration::from_millis(1500));
    assert_eq!(c.http.max_body_size, 2 << 20);
    let text = format!("{MINIMAL}[http]\nkeepalive_timeout = \"soon\"\n");
    assert!(try_parse(&dir, &text).unwrap_err().to_string().contains("a duration"));
}

/// Each `[http]` limit at its bound and one past it.
#[test]
fn http_limits_are_checked_at_their_bounds() {
    let dir = setup();
    let http = |keys: &str| try_parse(&dir, &format!("{MINIMAL}[http]\n{keys}\n"));
    let max = crate::http::request::MAX_HEADERS;
    for ok in [
        "max_request_line = 16".to_string(),
        "max_request_line = 4096\nmax_header_size = 4096".into(),
        "max_headers = 1".into(),
        format!("max_headers = {max}"),
    ] {
        assert!(http(&ok).is_ok(), "{ok}: {:?}", http(&ok).err());
    }
    for bad in [
        "max_request_line = 15".to_string(),
        "max_request_line = 4096\nmax_header_size = 4095".into(),
        "max_headers = 0".into(),
        format!("max_headers = {}", max + 1),
    ] {
        let e = http(&bad).unwrap_err().to_string();
        assert!(e.contains("http limits"), "{bad}: {e}");
    }
}

#[test]
fn workers_max_has_a_ceiling() {
    let dir = setup();
    let max = |n: u32| try_parse(&dir, &format!("{MINIMAL}[workers]\nmax = {n}\n"));
    assert_eq!(max(20_000).unwrap().workers.max, 20_000);
    assert!(max(20_001).unwrap_err().to_string().contains("above 20000"));
}

#[test]
fn access_log_buffer_may_be_one_mebibyte_and_no_more() {
    let dir = setup();
    let buffer = |b: u64| try_parse(&dir, &format!("{MINIMAL}[[access_log]]\npath = \"a.log\"\nbuffer = {b}\n"));
    assert_eq!(buffer(1 << 20).unwrap().access_logs[0].buffer, 1 << 20);
    assert!(buffer((1 << 20) + 1).unwrap_err().to_string().contains("buffer above 1MiB"));
}

#[test]
fn rotate_naming_is_numbered_or_a_pattern() {
    let dir = setup();
    let naming = |n: &str| {
        let text = format!("{MINIMAL}[[access_log]]\npath = \"a.log\"\nrotate = {{ size = \"1MiB\"{n} }}\n");
        try_parse(&dir, &text).map(|c| c.access_logs[0].rotate.clone().unwrap().naming)
    };
    assert_eq!(naming("").unwrap(), Naming::Numbered);
    assert_eq!(naming(", naming = \"numbered\"").unwrap(), Naming::Numbered);
    assert_eq!(naming(", naming = \"%Y%m%d\"").unwrap(), Naming::Pattern("%Y%m%d".into()));
    assert!(naming(", naming = \"daily\"").unwrap_err().to_string().contains("rotate.naming \"daily\""));
}

#[test]
fn index_entries_are_plain_file_names() {
    let dir = setup();
    let index = |i: &str| try_parse(&dir, &format!("{MINIMAL}index = [{i}]\n"));
    assert_eq!(index("\"home.html\"").unwrap().vhosts[0].files.index, ["home.html"]);
    for bad in ["\"\"", "\"a/b.html\"", "\"/index.html\""] {
        assert!(index(bad).unwrap_err().to_string().contains("must be a plain file name"), "{bad}");
    }
}

/// The logs the master rotates: access logs with `rotate`, then a file error log
/// with `error_log_rotate` (a syslog error log has none to rotate).
#[test]
fn rotated_logs_are_the_access_logs_with_rotate_then_the_error_log() {
    let dir = setup();
    let logs = |server: &str| {
        let text = format!(
            "[server]\nlisten = [\"127.0.0.1:8080\"]\n{server}\n[[vhost]]\nroot = \"htdocs\"\n\
             [[access_log]]\npath = \"kept.log\"\n\
             [[access_log]]\npath = \"rotated.log\"\nrotate = {{ size = \"1MiB\" }}\n"
        );
        let c = try_parse(&dir, &text).unwrap();
        c.rotated_logs().map(|(p, _)| p.strip_prefix(dir.path()).unwrap().to_path_buf()).collect::<Vec<_>>()
    };
    let p = |s: &str| PathBuf::from(s);
    assert_eq!(logs(""), [p("rotated.log")]);
    assert_eq!(logs("error_log_rotate = { size = \"1MiB\" }"), [p("rotated.log"), p("logs/error.log")]);
    assert_eq!(logs("error_log = \"syslog\"\nerror_log_rotate = { size = \"1MiB\" }"), [p("rotated.log")]);
}

#[test]
fn an_error_log_outside_the_chroot_is_refused() {
    let dir = setup();
    let outside = tempfile::tempdir().unwrap();
    let text = format!(
        "[server]\nlisten = [\"127.0.0.1:8080\"]\nchroot = \".\"\nerror_log = \"{}\"\n[[vhost]]\nroot = \"htdocs\"\n",
        outside.path().join("error.log").display()
    );
    let e = try_parse(&dir, &text).unwrap_err().to_string();
    assert!(e.contains("error.log is outside the chroot"), "{e}");
}

/// The request-body keys mean what they say again (CGI and FastCGI read bodies).
#[test]
fn the_body_keys_apply() {
    let dir = setup();
    let c = try_parse(
        &dir,
        &format!("{MINIMAL}[http]\nbody_timeout = \"5s\"\nbody_min_rate = 100\nclient_body_buffer = \"8KiB\"\n"),
    )
    .unwrap();
    assert!(c.notes.is_empty());
    assert_eq!((c.http.body_timeout.as_secs(), c.http.body_min_rate, c.http.client_body_buffer), (5, 100, 8192));
    let d = try_parse(&dir, MINIMAL).unwrap();
    assert_eq!((d.http.body_timeout.as_secs(), d.http.body_min_rate), (20, 500));
    assert_eq!((d.http.body_timeout_max.as_secs(), d.http.body_idle_timeout.as_secs()), (600, 20));
    assert_eq!((d.http.body_spool_max_worker, d.http.body_spool_max), (256 << 20, 1 << 30));
    assert_eq!(d.http.body_temp_dir, std::path::Path::new("/var/lib/pika/bodies"));
    assert_eq!(d.http.answer_spool_max, 1 << 30);
    for (bad, says) in [
        ("body_idle_timeout = \"0s\"", "http.body_idle_timeout must be more than zero"),
        ("body_timeout_max = \"10s\"", "http.body_timeout_max must be at least body_timeout"),
        ("body_spool_max = \"1MiB\"\nmax_body_size = \"2MiB\"", "must be at least max_body_size"),
    ] {
        let e = try_parse(&dir, &format!("{MINIMAL}[http]\n{bad}\n")).unwrap_err().to_string();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

/// A config read from text, in a folder with `conf/` and `htdocs/` (for other
/// modules' tests).
pub(crate) fn load_str(text: &str) -> Result<Config, ConfigError> {
    let dir = setup();
    try_parse(&dir, &format!("[server]\nlisten = [\"127.0.0.1:8080\"]\n{BODIES_HERE}{text}"))
}

/// Request bodies in the test's folder: the default folder is the machine's
/// (`/var/lib/pika/bodies`), which a server run there as another user owns.
const BODIES_HERE: &str = "[http]\nbody_temp_dir = \"bodies\"\n";

#[test]
fn an_unreadable_default_mime_types_is_an_error_not_the_builtin() {
    let dir = setup();
    std::fs::remove_file(dir.path().join("conf/mime.types")).unwrap();
    std::fs::create_dir(dir.path().join("conf/mime.types")).unwrap();
    let e = try_parse(&dir, MINIMAL).unwrap_err().to_string();
    assert!(e.contains("cannot read the default mime_types"), "{e}");
}

/// A note about a location names the file and line it was written at.
#[test]
fn location_notes_name_their_line() {
    let dir = setup();
    let text = format!("{MINIMAL}\n[[vhost.location]]\nregex = '.'\n\n[[vhost.location]]\nprefix = \"/static/\"\n");
    let c = try_parse(&dir, &text).unwrap();
    let file = dir.path().join("conf/pika.toml");
    let (shadowed, by) = (format!("{}:9", file.display()), format!("{}:6", file.display()));
    let want = format!("the location at {shadowed} (prefix = \"/static/\") is never chosen: the location at {by}");
    assert!(c.notes.iter().any(|n| n.contains(&want)), "{want}\nnot in {:?}", c.notes);
}

/// A location's kind, read from the keys of one prefix location.
fn kind(location: &str) -> Result<crate::kinds::Kind, String> {
    let text = format!("[[vhost]]\nroot = \".\"\n[[vhost.location]]\nprefix = \"/x/\"\n{location}\n");
    load_str(&text).map(|c| c.vhosts[0].locations.list[0].kind.clone()).map_err(|e| e.to_string())
}

#[test]
fn cgi_and_fastcgi_locations_are_read() {
    use crate::kinds::Kind;
    let Kind::Cgi(c) =
        kind("cgi = true\ncgi_interpreters = { py = \"/usr/bin/python3\" }\nscript_timeout = \"5s\"").unwrap()
    else {
        panic!("cgi expected")
    };
    assert!(c.policy.executables && c.policy.interpreters.contains_key("py"));
    assert_eq!((c.timeout.as_secs(), c.limits.cpu_secs), (5, 6));
    let Kind::FastCgi(f) = kind("fastcgi = \"tcp:127.0.0.1:9000\"").unwrap() else { panic!("fastcgi expected") };
    assert_eq!((f.index.as_slice(), f.timeout.as_secs()), (&["index.php".to_string()][..], 60));
}

#[test]
fn bad_script_locations_are_refused() {
    for (bad, says) in [
        ("cgi = true\nfastcgi = \"tcp:h:1\"", "not both"),
        ("fastcgi = \"localhost:9000\"", "unix:/path"),
        ("cgi_interpreters = { py = \"python3\" }", "absolute path"),
        ("cgi_interpreters = { \".py\" = \"/usr/bin/python3\" }", "not a file extension"),
        ("cgi = true\nautoindex = true", "no index or autoindex"),
        ("cgi = true\nindex = [\"a.cgi\"]", "no index"),
        ("fastcgi = \"unix:/x.sock\"\nautoindex = true", "no autoindex"),
        ("cgi = true\nscript_timeout = 0", "more than zero"),
        ("status = true\ncgi = true", "not scripts"),
        ("script_timeout = 5", "script_timeout"),
    ] {
        let e = kind(bad).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn proxy_locations_are_read_and_checked() {
    use crate::kinds::Kind;
    let Kind::Proxy(p) = kind("proxy = \"http://127.0.0.1:8000/v2/\"\nproxy_timeout = \"5s\"").unwrap() else {
        panic!("proxy expected")
    };
    assert_eq!(
        (p.upstreams[0].path.as_deref(), p.timeout.as_secs(), p.buffering, p.host),
        (Some("/v2/"), 5, true, None)
    );
    assert_eq!((p.upstreams.len(), p.backups.len(), p.balance.name()), (1, 0, "round_robin"));
    assert_eq!((p.health.max_fails, p.health.fail_timeout.as_secs()), (1, 10), "nginx's defaults");
    let Kind::Proxy(p) = kind(
        "proxy = [\"http://10.0.0.1:8000\", \"unix:/run/app.sock\"]\nproxy_backup = [\"http://10.0.0.3:8000\"]\n\
         proxy_balance = \"least_conn\"\nproxy_max_fails = 3\nproxy_fail_timeout = \"30s\"",
    )
    .unwrap() else {
        panic!("proxy expected")
    };
    let servers: Vec<String> = p.upstreams.iter().chain(&p.backups).map(|u| u.server()).collect();
    assert_eq!(servers, ["http://10.0.0.1:8000", "unix:/run/app.sock", "http://10.0.0.3:8000"]);
    assert_eq!((p.balance.name(), p.health.max_fails, p.health.fail_timeout.as_secs()), ("least_conn", 3, 30));
    let Kind::Proxy(p) =
        kind("proxy = \"unix:/run/app.sock\"\nproxy_buffering = false\nproxy_host = \"a.example\"").unwrap()
    else {
        panic!("proxy expected")
    };
    assert_eq!((p.buffering, p.host.as_deref()), (false, Some("a.example")));
    for (bad, says) in [
        ("proxy = \"127.0.0.1:8000\"", "http://host:port"),
        ("proxy = \"https://a\"", "http://host:port"),
        ("proxy = \"http://a\"\nroot = \"htdocs\"", "no root"),
        ("proxy = \"http://a\"\nfastcgi = \"unix:/x.sock\"", "no fastcgi"),
        ("proxy = \"http://a\"\nstatus = true", "no status"),
        ("proxy = \"http://a\"\nproxy_timeout = 0", "more than zero"),
        ("proxy = \"http://a\"\nproxy_host = \"a b\"", "host name"),
        ("proxy_timeout = 5", "proxy_timeout"),
        ("proxy = []", "an empty list"),
        ("proxy = [\"http://a:1\", \"http://a:1/x/\"]", "listed twice"),
        ("proxy = [\"http://a:1\", \"a:2\"]", "http://host:port"),
        ("proxy = \"http://a:1\"\nproxy_backup = \"http://a:1\"", "in proxy too"),
        ("proxy = \"http://a:1\"\nproxy_balance = \"random\"", "least_conn"),
        ("proxy = \"http://a:1\"\nproxy_fail_timeout = \"0s\"", "a second or more"),
        ("proxy = \"http://a:1\"\nproxy_max_fails = -1", "proxy_max_fails"),
    ] {
        let e = kind(bad).unwrap_err();
        assert!(e.contains(says), "{bad}: {e}");
    }
}

#[test]
fn cluster_takes_a_redis_url_and_secrets_only_the_master_reads() {
    use std::os::unix::fs::PermissionsExt;
    let dir = setup();
    let key = dir.path().join("conf/fleet.key");
    std::fs::write(&key, "a fleet's secret of 32 bytes or more\n").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let with = |cluster: &str| format!("{MINIMAL}[cluster]\n{cluster}\n");
    let c = try_parse(&dir, &with("redis = \"redis://10.0.0.5:6379/0\"\nkey_file = \"conf/fleet.key\"")).unwrap();
    let s = c.cluster.unwrap();
    assert_eq!((s.redis.as_str(), s.prefix.as_str()), ("redis://10.0.0.5:6379/0", "pika:"));
    assert_eq!((s.key_file, s.cache_dir), (key.clone(), dir.path().join("cluster")));
    assert!(try_parse(&dir, MINIMAL).unwrap().cluster.is_none(), "alone without [cluster]");
    let err = |cluster: &str| try_parse(&dir, &with(cluster)).unwrap_err().to_string();
    for (cluster, want) in [
        ("redis = \"http://10.0.0.5\"\nkey_file = \"conf/fleet.key\"", "cluster.redis must be a URL"),
        ("redis = \"redis://r\"\nkey_file = \"conf/none.key\"", "cluster.key_file"),
        ("redis = \"redis://r\"\nkey_file = \"conf/fleet.key\"\nca_file = \"conf/fleet.key\"", "for a rediss:// URL"),
        ("redis = \"redis://r\"\nkey_file = \"conf/fleet.key\"\nprefix = \"a b\"", "no spaces"),
        ("redis = \"redis://r\"", "missing field `key_file`"),
        ("redis = \"redis://:pw@r\"\nkey_file = \"conf/fleet.key\"", "put Redis's password in cluster.password_file"),
    ] {
        let e = err(cluster);
        assert!(e.contains(want), "{cluster}: {e}");
    }
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = err("redis = \"redis://r\"\nkey_file = \"conf/fleet.key\"");
    assert!(e.contains("has mode 644: it is a secret, make it 0600 or 0400"), "{e}");
    std::fs::write(&key, "short\n").unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let e = err("redis = \"redis://r\"\nkey_file = \"conf/fleet.key\"");
    assert!(e.contains("at least 32 are needed"), "{e}");
}
