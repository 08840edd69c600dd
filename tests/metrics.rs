//! The Prometheus metrics on the real binary: a location with `metrics = true`, who may
//! read it, what it counts, and its text as Prometheus' own checker reads it.

use std::collections::HashMap;
use std::io::Write;
use std::process::{Command, Stdio};

use crate::util::*;

const SIGHUP: i32 = 1;
const SIGKILL: i32 = 9;
const SIGTTIN: i32 = 21;

/// One vhost with the metrics at `/metrics`.
const VHOST: &str = "[[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n[[vhost.location]]\nexact = \"/metrics\"\nmetrics = true\n";

/// The samples of a metrics page: `name{labels}` → value.
fn samples(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {l:?}"));
            (series.to_string(), value.parse().unwrap_or_else(|_| panic!("not a number: {l:?}")))
        })
        .collect()
}

/// Reads the metrics on a new connection.
fn scrape(p: &Pika) -> (String, HashMap<String, f64>) {
    let r = get(p.addr, "/metrics");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type").as_deref(), Some("text/plain; version=0.0.4; charset=utf-8"));
    let text = r.text();
    let s = samples(&text);
    (text, s)
}

fn value(s: &HashMap<String, f64>, series: &str) -> f64 {
    *s.get(series).unwrap_or_else(|| panic!("no {series}"))
}

/// `promtool check metrics` on `text`: Prometheus' own parser and linter, silent when
/// all is well.
pub(crate) fn promtool_check(text: &str) {
    let Some(promtool) = need_tool("promtool") else { return };
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.trim().is_empty(), "promtool check metrics: {}\n{said}\n{text}", out.status);
}

#[test]
fn requests_are_counted_by_method_class_and_duration_and_promtool_reads_them() {
    let site = Site::new();
    // One worker: each request is counted before the next one is read.
    site.config("", &format!("[workers]\nstart = 1\nmin_spare = 1\nmax_spare = 1\nmax = 1\n{VHOST}"));
    let p = Pika::start(&site, "-F");
    let mut sent_back = 0;
    let mut conn = connect(p.addr);
    let mut ask = |line: &str, head: bool| {
        conn.write_all(format!("{line}\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n").as_bytes()).unwrap();
        let r = read_response(&mut conn, head).unwrap_or_else(|| panic!("no answer to {line}"));
        sent_back += r.head.len() + r.body.len();
        r.status
    };
    let statuses: Vec<u16> = [
        ("GET / HTTP/1.1", false),
        ("GET / HTTP/1.1", false),
        ("GET / HTTP/1.1", false),
        ("GET /missing HTTP/1.1", false),
        ("HEAD / HTTP/1.1", true),
        ("POST / HTTP/1.1", false),
        ("DELETE / HTTP/1.1", false),
    ]
    .into_iter()
    .map(|(line, head)| ask(line, head))
    .collect();
    assert_eq!(statuses, [200, 200, 200, 404, 200, 405, 405]);
    drop(conn);
    // Refused before they are read whole: no Host, an unknown method.
    for req in ["GET / HTTP/1.1\r\n\r\n", "BREW / HTTP/1.1\r\nHost: localhost\r\n\r\n"] {
        let r = raw(p.addr, req.as_bytes());
        assert!(matches!(r.status, 400 | 501), "{}", r.status);
        sent_back += r.head.len() + r.body.len();
    }

    let (text, s) = scrape(&p);
    let requests = |method: &str, code: &str| {
        value(&s, &format!("pika_http_requests_total{{method=\"{method}\",code=\"{code}\"}}"))
    };
    assert_eq!(requests("GET", "2xx"), 3.0);
    assert_eq!(requests("GET", "4xx"), 2.0, "the 404 and the head without Host");
    assert_eq!(requests("HEAD", "2xx"), 1.0);
    assert_eq!(requests("POST", "4xx"), 1.0);
    assert_eq!(requests("DELETE", "4xx"), 1.0);
    assert_eq!(requests("other", "5xx"), 1.0, "BREW: 501");
    let all: f64 = s.iter().filter(|(k, _)| k.starts_with("pika_http_requests_total{")).map(|(_, v)| v).sum();
    assert_eq!(all, 9.0, "{text}");
    assert_eq!(value(&s, "pika_http_response_bytes_total"), sent_back as f64, "every byte the client read");
    assert_eq!(value(&s, "pika_http_request_duration_seconds_count"), 9.0);
    assert_eq!(value(&s, "pika_http_request_duration_seconds_bucket{le=\"+Inf\"}"), 9.0);
    let sum = value(&s, "pika_http_request_duration_seconds_sum");
    assert!(sum > 0.0 && sum < 9.0 * 2.0, "{sum}");
    assert_eq!(value(&s, "pika_file_cache_requests_total{result=\"miss\"}"), 1.0, "index.html opened once");
    assert_eq!(value(&s, "pika_file_cache_requests_total{result=\"hit\"}"), 3.0, "then sent from the cache");
    assert_eq!(value(&s, "pika_connections_accepted_total"), 4.0, "this one counts as it is accepted");
    assert_eq!(value(&s, "pika_workers{state=\"reading\"}"), 1.0, "the worker making this page");
    assert_eq!(value(&s, "pika_connections{state=\"active\"}"), 1.0);
    assert_eq!(value(&s, "pika_workers{state=\"ready\"}"), 0.0);
    assert_eq!(value(&s, "pika_workers_max"), 1.0);
    assert_eq!(value(&s, "pika_workers_min_spare"), 1.0);
    assert_eq!(value(&s, "pika_workers_max_spare"), 2.0, "at least one above min_spare");
    assert_eq!(value(&s, "pika_worker_max_connections"), 1024.0);
    assert_eq!(value(&s, "pika_worker_starts_total"), 1.0);
    assert_eq!(value(&s, "pika_generation"), 0.0);
    assert_eq!(value(&s, "pika_access_log_write_errors_total"), 0.0);
    promtool_check(&text);

    // The page's own request is counted once it is answered.
    let (_, s) = scrape(&p);
    assert_eq!(value(&s, "pika_http_requests_total{method=\"GET\",code=\"2xx\"}"), 4.0);
}

#[test]
fn the_pool_reloads_and_worker_exits_are_counted_by_cause() {
    let site = Site::new();
    let workers = "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 3\n";
    site.config("", &format!("{workers}{VHOST}"));
    let p = Pika::start(&site, "-F");
    let wait = |what: &str, ok: &dyn Fn(&HashMap<String, f64>) -> bool| {
        wait_until(DEADLINE, what, || {
            let (_, s) = scrape(&p);
            ok(&s).then_some(s)
        })
    };
    let s = wait("two workers started", &|s| value(s, "pika_worker_starts_total") == 2.0);
    let served_before = value(&s, "pika_http_requests_total{method=\"GET\",code=\"2xx\"}");

    let victim = n_children(p.pid, 2)[0];
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(victim), nix::sys::signal::Signal::try_from(SIGKILL).unwrap())
        .unwrap();
    // A worker that dies in its first second is not replaced at once, and one idle
    // worker is min_spare's count: the pool stays at one until TTIN asks for two.
    wait("the killed worker counted", &|s| value(s, "pika_worker_exits_total{cause=\"signal\"}") == 1.0);

    p.signal(SIGTTIN);
    wait("TTIN's spare band, and a worker started for it", &|s| {
        value(s, "pika_workers_min_spare") == 2.0
            && value(s, "pika_workers_max_spare") == 4.0
            && value(s, "pika_worker_starts_total") >= 3.0
    });

    // A reload to a config whose workers retire after two requests.
    site.config("", &format!("{workers}max_requests = 2\n{VHOST}"));
    p.signal(SIGHUP);
    wait("the reload and the old generation's retirement", &|s| {
        value(s, "pika_reloads_total{result=\"success\"}") == 1.0
            && value(s, "pika_generation") == 1.0
            && value(s, "pika_worker_exits_total{cause=\"retired\"}") >= 2.0
    });
    let s = wait("workers that serve two requests and go", &|s| {
        value(s, "pika_worker_exits_total{cause=\"max_requests\"}") >= 1.0
    });
    assert!(
        value(&s, "pika_http_requests_total{method=\"GET\",code=\"2xx\"}") > served_before,
        "the counts go on across workers and generations"
    );

    std::fs::write(site.path("conf/pika.toml"), "[server\n").unwrap();
    p.signal(SIGHUP);
    wait("the failed reload", &|s| value(s, "pika_reloads_total{result=\"failure\"}") == 1.0);
}

#[test]
fn failed_access_log_writes_are_counted() {
    let site = Site::new();
    let log = "[[access_log]]\npath = \"/dev/full\"\nbuffer = 0\n";
    site.config("", &format!("[workers]\nstart = 1\nmin_spare = 1\nmax_spare = 1\nmax = 1\n{VHOST}{log}"));
    let p = Pika::start(&site, "-F");
    for _ in 0..3 {
        assert_eq!(get(p.addr, "/").status, 200);
    }
    let (_, s) = scrape(&p);
    assert_eq!(value(&s, "pika_access_log_write_errors_total"), 3.0);
}

#[test]
fn the_metrics_answer_only_the_status_page_allow_list_and_reads() {
    let site = Site::new();
    site.config("", &format!("[status]\nallow = [\"10.0.0.0/8\"]\n{VHOST}"));
    let p = Pika::start(&site, "-F");
    let r = get(p.addr, "/metrics");
    assert_eq!(r.status, 403);
    assert!(!r.text().contains("pika_"), "{}", r.text());

    let site = Site::new();
    site.config("", VHOST);
    let p = Pika::start(&site, "-F");
    let r = raw(p.addr, b"OPTIONS /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    assert_eq!((r.status, r.header("allow").as_deref()), (200, Some("GET, HEAD, OPTIONS")));
    let r = raw(p.addr, b"POST /metrics HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 405);
}
