//! Prometheus metrics: the text format Prometheus scrapes (a location with
//! `metrics = true`, [`super::Metrics`]).
//!
//! Nothing is counted for the page: the workers and the master count in the
//! scoreboard as they go ([`crate::scoreboard::counters`]), and a scrape sums them.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;

use crate::kinds::status::page::View;
use crate::scoreboard::State;
use crate::scoreboard::counters::{BUCKETS_US, CLASSES, ExitCause, METHODS};

/// A metric's `# HELP` and `# TYPE` lines.
fn head(s: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// Seconds from microseconds, as Prometheus reads them.
fn seconds(us: u64) -> String {
    format!("{}", us as f64 / 1e6)
}

/// The metrics of the whole server, in Prometheus' text format (version 0.0.4).
/// The pool's limits are the serving worker's config's (`server`); the spare band
/// is the master's (TTIN and TTOU move it).
pub fn render(server: &View<'_>) -> String {
    let sb = server.scoreboard;
    let mut requests = [[0u64; CLASSES.len()]; METHODS.len()];
    let mut durations = [0u64; BUCKETS_US.len() + 1];
    let (mut duration_us, mut bytes, mut accepted, mut hits, mut misses, mut log_errors) = (0, 0, 0, 0, 0, 0);
    let (mut waiting, mut writing, mut closing, mut tunnels, mut full) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut states = [0u64; State::ALL.len()];
    for slot in sb.slots {
        let t = &slot.traffic;
        for (m, row) in t.requests.iter().enumerate() {
            for (c, n) in row.iter().enumerate() {
                requests[m][c] += n.load(Relaxed);
            }
        }
        for (b, n) in t.durations.iter().enumerate() {
            durations[b] += n.load(Relaxed);
        }
        duration_us += t.duration_us.load(Relaxed);
        bytes += slot.bytes.load(Relaxed) + t.refused_bytes.load(Relaxed);
        accepted += slot.connections.load(Relaxed);
        hits += t.cache_hits.load(Relaxed);
        misses += t.cache_misses.load(Relaxed);
        log_errors += t.log_write_errors.load(Relaxed);
        let state = slot.state();
        states[state as usize] += 1;
        if state != State::Dead {
            waiting += u64::from(slot.conns_keepalive.load(Relaxed));
            writing += u64::from(slot.conns_writing.load(Relaxed));
            closing += u64::from(slot.conns_closing.load(Relaxed));
            tunnels += u64::from(slot.conns_tunnels.load(Relaxed));
            full += u64::from(slot.full.load(Relaxed) != 0);
        }
    }
    let header = sb.header;
    let busy: u64 = State::ALL.iter().filter(|s| s.is_busy()).map(|&s| states[s as usize]).sum();
    let mut s = String::with_capacity(8192);

    head(&mut s, "pika_info", "gauge", "pika's version (the value is always 1).");
    let _ = writeln!(s, "pika_info{{version=\"{}\"}} 1", env!("CARGO_PKG_VERSION"));
    head(&mut s, "pika_start_time_seconds", "gauge", "When the master started, in seconds since the Unix epoch.");
    let _ = writeln!(s, "pika_start_time_seconds {}", header.started.load(Relaxed));
    head(&mut s, "pika_generation", "gauge", "The generation of workers now serving (one more at each reload).");
    let _ = writeln!(s, "pika_generation {}", sb.generation());

    head(
        &mut s,
        "pika_http_requests_total",
        "counter",
        "Requests answered, by method and status class (the master's internal requests left out).",
    );
    for (m, row) in requests.iter().enumerate() {
        for (c, n) in row.iter().enumerate() {
            let _ = writeln!(s, "pika_http_requests_total{{method=\"{}\",code=\"{}\"}} {n}", METHODS[m], CLASSES[c]);
        }
    }
    head(&mut s, "pika_http_response_bytes_total", "counter", "Bytes written in answers, heads and bodies.");
    let _ = writeln!(s, "pika_http_response_bytes_total {bytes}");
    head(
        &mut s,
        "pika_http_request_duration_seconds",
        "histogram",
        "Time from a request's whole head to the last byte of its answer handed to the kernel.",
    );
    let mut cumulative = 0;
    for (b, n) in durations.iter().enumerate() {
        cumulative += n;
        let le = BUCKETS_US.get(b).map_or_else(|| "+Inf".to_string(), |&us| seconds(us));
        let _ = writeln!(s, "pika_http_request_duration_seconds_bucket{{le=\"{le}\"}} {cumulative}");
    }
    let _ = writeln!(s, "pika_http_request_duration_seconds_sum {}", seconds(duration_us));
    let _ = writeln!(s, "pika_http_request_duration_seconds_count {cumulative}");

    head(&mut s, "pika_connections_accepted_total", "counter", "Connections accepted by the workers.");
    let _ = writeln!(s, "pika_connections_accepted_total {accepted}");
    head(
        &mut s,
        "pika_connections",
        "gauge",
        "Connections open: being answered by a worker (active), kept alive by a worker waiting for their next request (keepalive), an answer waiting for the client to read it (writing), closing (lingering), a tunnel relayed to an upstream after a 101 (tunnel).",
    );
    let _ = writeln!(s, "pika_connections{{state=\"active\"}} {busy}");
    let _ = writeln!(s, "pika_connections{{state=\"keepalive\"}} {waiting}");
    let _ = writeln!(s, "pika_connections{{state=\"writing\"}} {writing}");
    let _ = writeln!(s, "pika_connections{{state=\"closing\"}} {closing}");
    let _ = writeln!(s, "pika_connections{{state=\"tunnel\"}} {tunnels}");

    head(&mut s, "pika_workers", "gauge", "Worker processes by state (the status page's scoreboard).");
    for state in State::ALL.iter().filter(|&&st| st != State::Dead) {
        let _ = writeln!(s, "pika_workers{{state=\"{}\"}} {}", state.name(), states[*state as usize]);
    }
    head(
        &mut s,
        "pika_workers_full",
        "gauge",
        "Workers holding workers.max_connections connections, which take no new one.",
    );
    let _ = writeln!(s, "pika_workers_full {full}");
    head(&mut s, "pika_workers_max", "gauge", "workers.max: the most worker processes.");
    let _ = writeln!(s, "pika_workers_max {}", server.workers_max);
    head(
        &mut s,
        "pika_workers_min_spare",
        "gauge",
        "The fewest idle workers the master keeps (TTIN and TTOU move it).",
    );
    let _ = writeln!(s, "pika_workers_min_spare {}", header.min_spare.load(Relaxed));
    head(&mut s, "pika_workers_max_spare", "gauge", "The most idle workers the master keeps (TTIN and TTOU move it).");
    let _ = writeln!(s, "pika_workers_max_spare {}", header.max_spare.load(Relaxed));
    head(
        &mut s,
        "pika_worker_max_connections",
        "gauge",
        "workers.max_connections: the most connections one worker holds, busy or kept alive.",
    );
    let _ = writeln!(s, "pika_worker_max_connections {}", server.max_connections);

    let pool = &header.pool;
    head(&mut s, "pika_worker_starts_total", "counter", "Worker processes forked.");
    let _ = writeln!(s, "pika_worker_starts_total {}", pool.starts.load(Relaxed));
    head(&mut s, "pika_worker_exits_total", "counter", "Worker processes ended, by cause.");
    for cause in ExitCause::ALL {
        let _ = writeln!(s, "pika_worker_exits_total{{cause=\"{}\"}} {}", cause.name(), pool.exits(cause));
    }
    head(
        &mut s,
        "pika_reloads_total",
        "counter",
        "Reloads (HUP), by result: failed ones left the running configuration serving.",
    );
    let _ = writeln!(s, "pika_reloads_total{{result=\"success\"}} {}", pool.reloads.load(Relaxed));
    let _ = writeln!(s, "pika_reloads_total{{result=\"failure\"}} {}", pool.reloads_failed.load(Relaxed));

    head(
        &mut s,
        "pika_access_log_write_errors_total",
        "counter",
        "Writes to an access log that failed (disk full, permissions); their records are lost.",
    );
    let _ = writeln!(s, "pika_access_log_write_errors_total {log_errors}");
    head(
        &mut s,
        "pika_file_cache_requests_total",
        "counter",
        "Files sent from a worker's cache of mapped files (hit) or opened for the request (miss).",
    );
    let _ = writeln!(s, "pika_file_cache_requests_total{{result=\"hit\"}} {hits}");
    let _ = writeln!(s, "pika_file_cache_requests_total{{result=\"miss\"}} {misses}");
    certificates(&mut s, server);
    upstreams(&mut s, server);
    cluster(&mut s, server);
    s
}

/// A label's value as Prometheus' text format writes it: backslash, quote and
/// line feed escaped (a unix socket's path may hold them).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The proxy locations' upstream servers, as the whole pool counted them: answers by
/// status class, tries that got none, connections in use, up or down.
fn upstreams(s: &mut String, server: &View<'_>) {
    let shown = server.scoreboard.upstreams.shown(server.upstreams, crate::base::clock::now_ms());
    if shown.is_empty() {
        return;
    }
    head(
        s,
        "pika_upstream_requests_total",
        "counter",
        "Answers from each proxy upstream, by the class of its status (nginx's $upstream_status).",
    );
    for u in &shown {
        for (class, n) in CLASSES.iter().zip(u.answered) {
            let _ = writeln!(s, "pika_upstream_requests_total{{upstream=\"{}\",code=\"{class}\"}} {n}", label(&u.name));
        }
    }
    head(
        s,
        "pika_upstream_fails_total",
        "counter",
        "Tries of each proxy upstream that got no answer: refused, broken off, or silent past proxy_timeout.",
    );
    for u in &shown {
        let _ = writeln!(s, "pika_upstream_fails_total{{upstream=\"{}\"}} {}", label(&u.name), u.failed);
    }
    head(
        s,
        "pika_upstream_up",
        "gauge",
        "1 unless the proxy upstream is marked down for the pool (proxy_max_fails failed tries within proxy_fail_timeout).",
    );
    for u in &shown {
        let _ = writeln!(s, "pika_upstream_up{{upstream=\"{}\"}} {}", label(&u.name), u8::from(u.up));
    }
    head(s, "pika_upstream_connections", "gauge", "Connections to each proxy upstream in use by the workers now.");
    for u in &shown {
        let _ = writeln!(s, "pika_upstream_connections{{upstream=\"{}\"}} {}", label(&u.name), u.active);
    }
}

/// The fleet (`[cluster]`): whether Redis answers, and when the ticket keys last
/// agreed with the fleet's.
fn cluster(s: &mut String, server: &View<'_>) {
    let Some(c) = crate::cluster::status::lookup() else { return };
    head(
        s,
        "pika_cluster_up",
        "gauge",
        "1 while the fleet's Redis answers this node's master (0 while it does not, or not yet).",
    );
    let _ = writeln!(s, "pika_cluster_up {}", u8::from(c.link == crate::cluster::status::Link::Up));
    head(
        s,
        "pika_cluster_ticket_keys_timestamp_seconds",
        "gauge",
        "When this node's session-ticket keys last agreed with the fleet's (0: not yet).",
    );
    let _ = writeln!(s, "pika_cluster_ticket_keys_timestamp_seconds {}", c.tickets.max(0));
    head(
        s,
        "pika_cluster_ticket_key_period_start_timestamp_seconds",
        "gauge",
        "When the ticket key in use began sealing tickets (its age: now minus this).",
    );
    let _ = writeln!(s, "pika_cluster_ticket_key_period_start_timestamp_seconds {}", c.key_since.max(0));
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let acme: Vec<String> = (server.certificates)(now).into_iter().filter(|c| c.acme).map(|c| c.vhost).collect();
    if acme.is_empty() {
        return;
    }
    let shown: Vec<(String, crate::cluster::status::CertShown)> =
        acme.into_iter().filter_map(|n| Some((n.clone(), crate::cluster::status::cert(&n)?))).collect();
    head(
        s,
        "pika_cluster_certificate_expiry_timestamp_seconds",
        "gauge",
        "When the certificate the fleet stores for each ACME vhost expires.",
    );
    for (vhost, c) in shown.iter().filter(|(_, c)| c.stored_until > 0) {
        let _ =
            writeln!(s, "pika_cluster_certificate_expiry_timestamp_seconds{{vhost=\"{vhost}\"}} {}", c.stored_until);
    }
    head(s, "pika_cluster_ordering", "gauge", "1 for the node that holds each ACME vhost's order lock now.");
    for (vhost, c) in &shown {
        if let Some(node) = &c.holder {
            // A node's name is a host name and a pid: nothing to escape but quotes.
            let node = node.replace(['"', '\\', '\n'], "_");
            let _ = writeln!(s, "pika_cluster_ordering{{vhost=\"{vhost}\",node=\"{node}\"}} 1");
        }
    }
}

/// Each vhost's certificate: when it expires, and for ACME's when it is next asked
/// for, the failed tries in a row and whether a placeholder serves.
fn certificates(s: &mut String, server: &View<'_>) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let certs = (server.certificates)(now);
    if certs.is_empty() {
        return;
    }
    // A vhost name is a DNS name or an IP literal: nothing to escape in a label.
    head(s, "pika_tls_certificate_expiry_timestamp_seconds", "gauge", "When each vhost's certificate expires.");
    for c in &certs {
        let _ = writeln!(s, "pika_tls_certificate_expiry_timestamp_seconds{{vhost=\"{}\"}} {}", c.vhost, c.not_after);
    }
    let acme: Vec<_> = certs.iter().filter(|c| c.acme).collect();
    if acme.is_empty() {
        return;
    }
    head(s, "pika_acme_placeholder", "gauge", "1 while an ACME vhost is served with a self-signed placeholder.");
    for c in &acme {
        let _ = writeln!(s, "pika_acme_placeholder{{vhost=\"{}\"}} {}", c.vhost, u8::from(c.placeholder));
    }
    head(
        s,
        "pika_acme_next_order_timestamp_seconds",
        "gauge",
        "When each ACME certificate is next ordered (renewal, or the retry after a failure).",
    );
    for c in &acme {
        if let Some(r) = c.renewal {
            let _ = writeln!(s, "pika_acme_next_order_timestamp_seconds{{vhost=\"{}\"}} {}", c.vhost, r.next.max(0));
        }
    }
    head(s, "pika_acme_failures", "gauge", "Failed orders in a row for each ACME certificate (0 after a success).");
    for c in &acme {
        let _ = writeln!(s, "pika_acme_failures{{vhost=\"{}\"}} {}", c.vhost, c.renewal.map_or(0, |r| r.failures));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::scoreboard::Scoreboard;
    use crate::scoreboard::add;
    use crate::scoreboard::counters::Outcome;

    /// The value of the line that starts with `series ` in `text`.
    fn value(text: &str, series: &str) -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {series} in\n{text}"))
            .to_string()
    }

    #[test]
    fn the_page_sums_every_slot() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("htdocs")).unwrap();
        let text = "[server]\nlisten = [\"8080\"]\nmime_types = \"builtin\"\n[http]\nbody_temp_dir = \"bodies\"\n\
                    [workers]\nmax = 9\nmax_connections = 77\n\
                    [[vhost]]\nroot = \"htdocs\"\n[[vhost.location]]\nprefix = \"/app/\"\n\
                    proxy = [\"http://10.0.0.1:8000/x/\", \"http://10.0.0.2:8000\"]\nproxy_backup = \"unix:/run/a\\\"b.sock\"\n";
        let config = crate::config::parse(text, &dir.path().join("conf/pika.toml")).unwrap();
        let sb = Scoreboard::new(3).unwrap();
        let get = |status, us, cached| Outcome {
            method: b"GET",
            status,
            bytes: 100,
            duration: Duration::from_micros(us),
            cached,
            refused: false,
        };
        for (slot, o) in [
            (0, get(200, 50, Some(true))),
            (1, get(200, 300, Some(false))),
            (1, get(404, 20_000_000, None)),
            (2, Outcome { method: b"BREW", refused: true, ..get(400, 0, None) }),
        ] {
            sb.slots[slot].traffic.count(&o);
            if !o.refused {
                add(&sb.slots[slot].bytes, o.bytes);
            }
        }
        sb.slots[0].claim(0);
        sb.slots[0].set_state(State::Ready);
        sb.slots[1].claim(0);
        sb.slots[1].set_state(State::Writing);
        sb.slots[1].conns_keepalive.store(4, Relaxed);
        sb.slots[1].conns_writing.store(2, Relaxed);
        sb.slots[1].conns_tunnels.store(3, Relaxed);
        sb.header.max_spare.store(6, Relaxed);
        sb.header.pool.exited(ExitCause::Signal);
        sb.header.pool.exited(ExitCause::Signal);
        add(&sb.slots[2].traffic.log_write_errors, 3);
        let certs = |now| config.certificate_expiries(now);
        let list = config.upstreams();
        let server = View {
            scoreboard: &sb,
            master_pid: 1,
            workers_max: config.workers.max,
            max_connections: config.workers.max_connections,
            certificates: &certs,
            upstreams: &list,
        };
        let a = sb.upstreams.entry("http://10.0.0.1:8000").unwrap();
        a.answered(200);
        a.answered(503);
        let _held = sb.upstreams.in_use(a, Some(0));
        a.failed(crate::base::clock::now_ms(), 1, 10_000);
        let page = render(&server);
        assert_eq!(value(&page, "pika_upstream_requests_total{upstream=\"http://10.0.0.1:8000\",code=\"2xx\"}"), "1");
        assert_eq!(value(&page, "pika_upstream_requests_total{upstream=\"http://10.0.0.1:8000\",code=\"5xx\"}"), "1");
        assert_eq!(value(&page, "pika_upstream_requests_total{upstream=\"http://10.0.0.2:8000\",code=\"2xx\"}"), "0");
        assert_eq!(value(&page, "pika_upstream_fails_total{upstream=\"http://10.0.0.1:8000\"}"), "1");
        assert_eq!(value(&page, "pika_upstream_up{upstream=\"http://10.0.0.1:8000\"}"), "0");
        assert_eq!(value(&page, "pika_upstream_up{upstream=\"http://10.0.0.2:8000\"}"), "1");
        assert_eq!(value(&page, "pika_upstream_up{upstream=\"unix:/run/a\\\"b.sock\"}"), "1", "escaped");
        assert_eq!(value(&page, "pika_upstream_connections{upstream=\"http://10.0.0.1:8000\"}"), "1");
        assert_eq!(value(&page, "pika_http_requests_total{method=\"GET\",code=\"2xx\"}"), "2");
        assert_eq!(value(&page, "pika_http_requests_total{method=\"GET\",code=\"4xx\"}"), "1");
        assert_eq!(value(&page, "pika_http_requests_total{method=\"other\",code=\"4xx\"}"), "1", "a refused one too");
        assert_eq!(value(&page, "pika_http_response_bytes_total"), "400");
        assert_eq!(value(&page, "pika_http_request_duration_seconds_bucket{le=\"0.0001\"}"), "2");
        assert_eq!(value(&page, "pika_http_request_duration_seconds_bucket{le=\"0.0005\"}"), "3");
        assert_eq!(value(&page, "pika_http_request_duration_seconds_bucket{le=\"10\"}"), "3");
        assert_eq!(value(&page, "pika_http_request_duration_seconds_bucket{le=\"+Inf\"}"), "4");
        assert_eq!(value(&page, "pika_http_request_duration_seconds_count"), "4");
        assert_eq!(value(&page, "pika_http_request_duration_seconds_sum"), "20.00035");
        assert_eq!(value(&page, "pika_workers{state=\"ready\"}"), "1");
        assert_eq!(value(&page, "pika_workers{state=\"writing\"}"), "1");
        assert_eq!(value(&page, "pika_connections{state=\"active\"}"), "1");
        assert_eq!(value(&page, "pika_connections{state=\"keepalive\"}"), "4");
        assert_eq!(value(&page, "pika_connections{state=\"writing\"}"), "2");
        assert_eq!(value(&page, "pika_connections{state=\"tunnel\"}"), "3");
        assert_eq!(value(&page, "pika_workers_max"), "9");
        assert_eq!(value(&page, "pika_workers_max_spare"), "6");
        assert_eq!(value(&page, "pika_worker_max_connections"), "77");
        assert_eq!(value(&page, "pika_worker_exits_total{cause=\"signal\"}"), "2");
        assert_eq!(value(&page, "pika_worker_exits_total{cause=\"retired\"}"), "0");
        assert_eq!(value(&page, "pika_access_log_write_errors_total"), "3");
        assert_eq!(value(&page, "pika_file_cache_requests_total{result=\"hit\"}"), "1");
        assert_eq!(value(&page, "pika_file_cache_requests_total{result=\"miss\"}"), "1");
        // Every series has its HELP and TYPE before it, once.
        for line in page.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap();
            let base = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(name);
            let base = if page.contains(&format!("# TYPE {name} ")) { name } else { base };
            assert_eq!(page.matches(&format!("# TYPE {base} ")).count(), 1, "{line}");
            assert_eq!(page.matches(&format!("# HELP {base} ")).count(), 1, "{line}");
        }
    }
}
