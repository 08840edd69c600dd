//! What the scoreboard says, in the forms people read it: Apache's `?auto` text (so
//! existing monitoring works), an HTML page, JSON, and the status file that
//! `pika -k status` reads.

use std::fmt::Write as _;
use std::sync::atomic::Ordering::Relaxed;

use crate::acme::expiry::Expiry;
use crate::base::text::{html_escape, json_string};
use crate::scoreboard::counters::CLASSES;
use crate::scoreboard::upstreams::Shown;
use crate::scoreboard::{Scoreboard, State, now_ms};

/// A Unix time as `2027-03-01T12:00:00Z`.
fn iso_date(unix: i64) -> String {
    jiff::Timestamp::from_second(unix).map_or_else(|_| unix.to_string(), |t| t.to_string())
}

/// The live view's place on the page: two charts (SVG, drawn by the page's `?js`), hidden
/// until the script shows them.
const LIVE_HTML: &str = "<section id=\"live\" hidden>\n<div class=\"charts\">\n\
<figure><figcaption><span class=\"rps\">&#9632;</span> Requests per second: <b data-k=\"rps-now\">&hellip;</b><span class=\"axis\" id=\"chart-rps-top\"></span></figcaption>\
<svg id=\"chart-rps\" viewBox=\"0 0 600 150\" preserveAspectRatio=\"none\" role=\"img\" aria-label=\"requests per second, last five minutes\">\
<polyline class=\"rps\" fill=\"none\" stroke=\"#1565c0\" stroke-width=\"2\" vector-effect=\"non-scaling-stroke\" points=\"\"/></svg></figure>\n\
<figure><figcaption><span class=\"busy\">&#9632;</span> Busy <b data-k=\"busy_workers\"></b> &middot; <span class=\"idle\">&#9632;</span> Idle <b data-k=\"idle_workers\"></b> workers<span class=\"axis\" id=\"chart-workers-top\"></span></figcaption>\
<svg id=\"chart-workers\" viewBox=\"0 0 600 150\" preserveAspectRatio=\"none\" role=\"img\" aria-label=\"busy and idle workers, last five minutes\">\
<polyline class=\"busy\" fill=\"none\" stroke=\"#c62828\" stroke-width=\"2\" vector-effect=\"non-scaling-stroke\" points=\"\"/>\
<polyline class=\"idle\" fill=\"none\" stroke=\"#2e7d32\" stroke-width=\"2\" vector-effect=\"non-scaling-stroke\" points=\"\"/></svg></figure>\n\
</div>\n<p class=\"note\">The last five minutes, read from ?json every second (this page's own reads count as requests); updated <span data-k=\"updated\"></span>.</p>\n</section>\n";

/// One worker's row.
pub struct Row {
    pub slot: usize,
    pub pid: i32,
    pub generation: u32,
    pub state: State,
    pub requests: u64,
    pub worker_requests: u64,
    pub bytes: u64,
    pub request: String,
    pub client: String,
    pub seconds_in_state: f64,
    /// Connections the worker holds between requests, and those closing.
    pub conns_keepalive: u32,
    pub conns_writing: u32,
    pub conns_closing: u32,
    /// Tunnels it relays (connections that switched protocols: WebSockets).
    pub conns_tunnels: u32,
    /// The CPU it is bound to, if it is (`workers.cpu_affinity`).
    pub cpu: Option<usize>,
}

/// The scoreboard at one moment.
pub struct Snapshot {
    pub master_pid: i32,
    pub generation: u32,
    pub uptime: u64,
    pub total_requests: u64,
    pub total_bytes: u64,
    pub rows: Vec<Row>,
    /// One letter per slot, Apache style.
    pub letters: String,
    /// The vhosts' certificates and their days left.
    pub certificates: Vec<Expiry>,
    /// The proxy locations' upstream servers, as the pool counted them.
    pub upstreams: Vec<Shown>,
}

impl Snapshot {
    pub fn take(sb: &Scoreboard, master_pid: i32) -> Snapshot {
        let now = now_ms();
        let wall = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let mut rows = Vec::new();
        let mut letters = String::with_capacity(sb.slots.len());
        let (mut total_requests, mut total_bytes) = (0, 0);
        for (i, s) in sb.slots.iter().enumerate() {
            let state = s.state();
            letters.push(state.letter());
            total_requests += s.requests.load(Relaxed);
            total_bytes += s.bytes.load(Relaxed);
            if state == State::Dead {
                continue;
            }
            rows.push(Row {
                slot: i,
                pid: s.pid.load(Relaxed),
                generation: s.generation.load(Relaxed),
                state,
                requests: s.requests.load(Relaxed),
                worker_requests: s.worker_requests.load(Relaxed),
                bytes: s.bytes.load(Relaxed),
                request: s.request_line(),
                client: s.client(),
                seconds_in_state: now.saturating_sub(s.since_ms.load(Relaxed)) as f64 / 1000.0,
                conns_keepalive: s.conns_keepalive.load(Relaxed),
                conns_writing: s.conns_writing.load(Relaxed),
                conns_closing: s.conns_closing.load(Relaxed),
                conns_tunnels: s.conns_tunnels.load(Relaxed),
                cpu: s.cpu(),
            });
        }
        // Trailing open slots say nothing; Apache prints the whole board, which for
        // 256 slots is mostly dots. Keep up to the last used slot, at least 16.
        let keep = letters.rfind(|c| c != '.').map_or(0, |i| i + 1).max(16.min(letters.len()));
        letters.truncate(keep);
        Snapshot {
            master_pid,
            generation: sb.generation(),
            uptime: wall.saturating_sub(sb.header.started.load(Relaxed)),
            total_requests,
            total_bytes,
            rows,
            letters,
            certificates: Vec::new(),
            upstreams: Vec::new(),
        }
    }

    /// Adds the certificates (with their days left) to what the page shows.
    pub fn with_certificates(mut self, certificates: Vec<Expiry>) -> Snapshot {
        self.certificates = certificates;
        self
    }

    /// Adds the proxy locations' upstreams to what the page shows.
    pub fn with_upstreams(mut self, upstreams: Vec<Shown>) -> Snapshot {
        self.upstreams = upstreams;
        self
    }

    pub fn busy(&self) -> usize {
        self.rows.iter().filter(|r| r.state.is_busy()).count()
    }

    pub fn idle(&self) -> usize {
        self.rows.iter().filter(|r| r.state.is_idle()).count()
    }

    /// Kept-alive connections held by workers, waiting for their next request
    /// (Apache event's "async connections: keep-alive"): no worker is busy with them.
    pub fn conns_keepalive(&self) -> u32 {
        self.rows.iter().map(|r| r.conns_keepalive).sum()
    }

    /// Answers waiting for room in their client's socket, held by workers that serve
    /// others meanwhile (Apache event's "async connections: writing").
    pub fn conns_writing(&self) -> u32 {
        self.rows.iter().map(|r| r.conns_writing).sum()
    }

    /// Connections in a lingering close.
    pub fn conns_closing(&self) -> u32 {
        self.rows.iter().map(|r| r.conns_closing).sum()
    }

    /// Tunnels relayed by workers that serve others meanwhile (connections that
    /// switched protocols through a proxy location: WebSockets).
    pub fn conns_tunnels(&self) -> u32 {
        self.rows.iter().map(|r| r.conns_tunnels).sum()
    }

    /// Every connection open: those being served and those held.
    pub fn conns_total(&self) -> u32 {
        self.busy() as u32 + self.conns_keepalive() + self.conns_writing() + self.conns_closing() + self.conns_tunnels()
    }

    fn req_per_sec(&self) -> f64 {
        if self.uptime == 0 { 0.0 } else { self.total_requests as f64 / self.uptime as f64 }
    }

    /// Apache mod_status `?auto`.
    pub fn auto(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "ServerVersion: pika/{}", env!("CARGO_PKG_VERSION"));
        let _ = writeln!(s, "ServerMPM: prefork");
        let _ = writeln!(s, "Uptime: {}", self.uptime);
        let _ = writeln!(s, "Total Accesses: {}", self.total_requests);
        let _ = writeln!(s, "Total kBytes: {}", self.total_bytes / 1024);
        let _ = writeln!(s, "ReqPerSec: {:.6}", self.req_per_sec());
        let bps = if self.uptime == 0 { 0.0 } else { self.total_bytes as f64 / self.uptime as f64 };
        let _ = writeln!(s, "BytesPerSec: {bps:.6}");
        let bpr = if self.total_requests == 0 { 0.0 } else { self.total_bytes as f64 / self.total_requests as f64 };
        let _ = writeln!(s, "BytesPerReq: {bpr:.6}");
        let _ = writeln!(s, "BusyWorkers: {}", self.busy());
        let _ = writeln!(s, "IdleWorkers: {}", self.idle());
        // Apache event's names, so its monitoring templates read these too.
        let _ = writeln!(s, "ConnsTotal: {}", self.conns_total());
        let _ = writeln!(s, "ConnsAsyncWriting: {}", self.conns_writing());
        let _ = writeln!(s, "ConnsAsyncKeepAlive: {}", self.conns_keepalive());
        let _ = writeln!(s, "ConnsAsyncClosing: {}", self.conns_closing());
        // pika's own (Apache's tunnels hold a worker each).
        let _ = writeln!(s, "ConnsTunnels: {}", self.conns_tunnels());
        let _ = writeln!(s, "Generation: {}", self.generation);
        let _ = writeln!(s, "Scoreboard: {}", self.letters);
        if let Some(min) = self.certificates.iter().map(|c| c.days_left).min() {
            let _ = writeln!(s, "TLSCertificates: {}", self.certificates.len());
            let _ = writeln!(s, "TLSMinDaysLeft: {min}");
        }
        for c in &self.certificates {
            // One line per certificate: days left, vhost, expiry, file.
            let _ = writeln!(
                s,
                "TLSCertificate: {} {} {} {}",
                c.days_left,
                c.vhost,
                iso_date(c.not_after),
                c.file.display()
            );
        }
        for c in self.certificates.iter().filter(|c| c.acme) {
            // One line per ACME certificate: vhost, issued or placeholder, when it is
            // next asked for, the failed tries in a row.
            let (next, failures) = c.renewal.map_or(("-".to_string(), 0), |r| (next_order(r.next), r.failures));
            let what = if c.placeholder { "placeholder" } else { "issued" };
            let _ = writeln!(s, "ACMECertificate: {} {what} {next} {failures}", c.vhost);
        }
        for u in &self.upstreams {
            // One line per upstream: its name, up or down, primary or backup,
            // connections in use, answers, tries that got none.
            let answers: u64 = u.answered.iter().sum();
            let _ = writeln!(
                s,
                "Upstream: {} {} {} {} {answers} {}",
                u.name,
                up_word(u),
                if u.backup { "backup" } else { "primary" },
                u.active,
                u.failed
            );
        }
        if let Some(line) = cluster_line() {
            let _ = writeln!(s, "Cluster: {line}");
            for c in self.certificates.iter().filter(|c| c.acme) {
                // One line per ACME certificate: vhost, when the fleet's stored one
                // expires, which node orders it now ("-": none).
                let f = crate::cluster::status::cert(&c.vhost);
                let until = f.as_ref().filter(|f| f.stored_until > 0).map_or("-".into(), |f| iso_date(f.stored_until));
                let holder = f.and_then(|f| f.holder).unwrap_or_else(|| "-".into());
                let _ = writeln!(s, "ClusterCertificate: {} {until} {holder}", c.vhost);
            }
        }
        s
    }

    pub fn json(&self) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "{{\"version\":\"{}\",\"pid\":{},\"generation\":{},\"uptime\":{},\"total_accesses\":{},\"total_bytes\":{},\"req_per_sec\":{:.6},\"busy_workers\":{},\"idle_workers\":{},\"conns_total\":{},\"conns_keepalive\":{},\"conns_writing\":{},\"conns_closing\":{},\"conns_tunnels\":{},\"scoreboard\":{},\"workers\":[",
            env!("CARGO_PKG_VERSION"),
            self.master_pid,
            self.generation,
            self.uptime,
            self.total_requests,
            self.total_bytes,
            self.req_per_sec(),
            self.busy(),
            self.idle(),
            self.conns_total(),
            self.conns_keepalive(),
            self.conns_writing(),
            self.conns_closing(),
            self.conns_tunnels(),
            json_string(&self.letters)
        );
        for (i, r) in self.rows.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(
                s,
                "{{\"slot\":{},\"pid\":{},\"generation\":{},\"state\":\"{}\",\"requests\":{},\"worker_requests\":{},\"bytes\":{},\"request\":{},\"client\":{},\"seconds\":{:.3},\"conns_keepalive\":{},\"conns_writing\":{},\"conns_closing\":{},\"conns_tunnels\":{},\"cpu\":{}}}",
                r.slot,
                r.pid,
                r.generation,
                r.state.name(),
                r.requests,
                r.worker_requests,
                r.bytes,
                json_string(&r.request),
                json_string(&r.client),
                r.seconds_in_state,
                r.conns_keepalive,
                r.conns_writing,
                r.conns_closing,
                r.conns_tunnels,
                r.cpu.map_or("null".to_string(), |c| c.to_string())
            );
        }
        s.push_str("],\"certificates\":[");
        for (i, c) in self.certificates.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(
                s,
                "{{\"vhost\":{},\"file\":{},\"not_after\":\"{}\",\"days_left\":{}",
                json_string(&c.vhost),
                json_string(&c.file.display().to_string()),
                iso_date(c.not_after),
                c.days_left
            );
            if c.acme {
                let _ = write!(s, ",\"acme\":{{\"placeholder\":{}", c.placeholder);
                if let Some(r) = c.renewal {
                    let _ = write!(s, ",\"next_renewal\":\"{}\",\"failures\":{}", next_order(r.next), r.failures);
                }
                s.push('}');
            }
            s.push('}');
        }
        s.push_str("],\"upstreams\":[");
        for (i, u) in self.upstreams.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(
                s,
                "{{\"name\":{},\"up\":{},\"down_for\":{},\"backup\":{},\"active\":{},\"failed\":{},\"answered\":{{",
                json_string(&u.name),
                u.up,
                u.down_for,
                u.backup,
                u.active,
                u.failed
            );
            for (j, (class, n)) in CLASSES.iter().zip(u.answered).enumerate() {
                let _ = write!(s, "{}\"{class}\":{n}", if j > 0 { "," } else { "" });
            }
            s.push_str("}}");
        }
        s.push_str("]}\n");
        s
    }

    /// The HTML page: Apache's figures and table, and above them a live view (two
    /// charts that `?js`, `?js` draws from `?json` every second; hidden until
    /// the script runs, so a browser without scripts shows the page as it was).
    /// Styled by `?css` (`?css`); nothing inline, so the page's strict
    /// `Content-Security-Policy` holds.
    pub fn html(&self) -> String {
        let mut s = String::from(
            "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>pika status</title><link rel=\"stylesheet\" href=\"?css\"><script src=\"?js\" defer></script></head><body>\n<h1>pika server status</h1>\n",
        );
        s.push_str(LIVE_HTML);
        // The figures the script refreshes are marked with data-k (their ?json keys).
        let _ = writeln!(
            s,
            "<p>Master pid <span data-k=\"pid\">{}</span> &middot; generation <span data-k=\"generation\">{}</span> &middot; uptime <span data-k=\"uptime\">{}</span> s &middot; <span data-k=\"total_accesses\">{}</span> requests &middot; <span data-k=\"total_kb\">{}</span> kB &middot; <span data-k=\"req_per_sec\">{:.2}</span> requests/s &middot; <span data-k=\"busy_workers\">{}</span> busy, <span data-k=\"idle_workers\">{}</span> idle workers</p>\n<p>Connections: <span data-k=\"conns_total\">{}</span> in all, <span data-k=\"conns_keepalive\">{}</span> keepalive (held by a worker between requests, which serves others meanwhile), <span data-k=\"conns_writing\">{}</span> writing (an answer waiting for the client to read, likewise), <span data-k=\"conns_closing\">{}</span> closing, <span data-k=\"conns_tunnels\">{}</span> tunnels (a WebSocket relayed to its upstream, likewise)</p>",
            self.master_pid,
            self.generation,
            self.uptime,
            self.total_requests,
            self.total_bytes / 1024,
            self.req_per_sec(),
            self.busy(),
            self.idle(),
            self.conns_total(),
            self.conns_keepalive(),
            self.conns_writing(),
            self.conns_closing(),
            self.conns_tunnels()
        );
        let _ = writeln!(s, "<pre data-k=\"scoreboard\">{}</pre>", html_escape(&self.letters));
        s.push_str(
            "<p>_ ready, S starting, R reading, W writing, L logging, C closing, G finishing, . open slot</p>\n",
        );
        s.push_str("<div class=\"scroll\">");
        s.push_str("<table id=\"workers\" border=\"1\"><tr><th>Slot</th><th>PID</th><th>Gen</th><th>State</th><th>Requests (slot)</th><th>Requests (worker)</th><th>Bytes</th><th>Seconds in state</th><th>Keepalive</th><th>Closing</th><th>CPU</th><th>Client</th><th>Request</th></tr>\n");
        for r in &self.rows {
            let _ = writeln!(
                s,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                r.slot,
                r.pid,
                r.generation,
                r.state.name(),
                r.requests,
                r.worker_requests,
                r.bytes,
                r.seconds_in_state,
                r.conns_keepalive,
                r.conns_closing,
                r.cpu.map_or(String::new(), |c| c.to_string()),
                html_escape(&r.client),
                html_escape(&r.request)
            );
        }
        s.push_str("</table></div>\n");
        if !self.certificates.is_empty() {
            s.push_str("<h2>TLS certificates</h2>\n<div class=\"scroll\"><table border=\"1\"><tr><th>Vhost</th><th>Days left</th><th>Expires</th><th>File</th><th>ACME</th></tr>\n");
            for c in &self.certificates {
                let _ = writeln!(
                    s,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    html_escape(&c.vhost),
                    c.days_left,
                    iso_date(c.not_after),
                    html_escape(&c.file.display().to_string()),
                    acme_cell(c)
                );
            }
            s.push_str("</table></div>\n");
        }
        if !self.upstreams.is_empty() {
            s.push_str("<h2>Upstreams</h2>\n<div class=\"scroll\"><table id=\"upstreams\" border=\"1\"><tr><th>Upstream</th><th>State</th><th>Role</th><th>Connections</th><th>1xx</th><th>2xx</th><th>3xx</th><th>4xx</th><th>5xx</th><th>Failed tries</th></tr>\n");
            for u in &self.upstreams {
                let [a, b, c, d, e] = u.answered;
                let _ = writeln!(
                    s,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{a}</td><td>{b}</td><td>{c}</td><td>{d}</td><td>{e}</td><td>{}</td></tr>",
                    html_escape(&u.name),
                    up_cell(u),
                    if u.backup { "backup" } else { "primary" },
                    u.active,
                    u.failed
                );
            }
            s.push_str("</table></div>\n");
        }
        if let Some(line) = cluster_line() {
            let _ = writeln!(s, "<p>Cluster: {}</p>", html_escape(&line));
        }
        s.push_str("</body></html>\n");
        s
    }

    /// Human-readable lines for `pika -k status` (also what the status file holds).
    pub fn summary(&self) -> String {
        let mut by_state: Vec<(State, usize)> = Vec::new();
        for r in &self.rows {
            match by_state.iter_mut().find(|(s, _)| *s == r.state) {
                Some((_, n)) => *n += 1,
                None => by_state.push((r.state, 1)),
            }
        }
        let states: Vec<String> = by_state.iter().map(|(s, n)| format!("{} {n}", s.name())).collect();
        let mut s = String::new();
        let _ = writeln!(s, "pid: {}", self.master_pid);
        let _ = writeln!(s, "uptime: {}", self.uptime);
        let _ = writeln!(s, "generation: {}", self.generation);
        let _ = writeln!(s, "workers: {}", self.rows.len());
        let _ = writeln!(
            s,
            "current_generation_ready: {}",
            self.rows.iter().filter(|r| r.generation == self.generation && r.state != State::Starting).count()
        );
        let _ = writeln!(s, "old_generation: {}", self.rows.iter().filter(|r| r.generation != self.generation).count());
        let _ = writeln!(s, "states: {}", states.join(", "));
        let _ = writeln!(s, "requests: {}", self.total_requests);
        let _ = writeln!(s, "bytes: {}", self.total_bytes);
        let _ = writeln!(s, "scoreboard: {}", self.letters);
        s
    }
}

/// `up`, or `down` while marked so.
fn up_word(u: &Shown) -> &'static str {
    if u.up { "up" } else { "down" }
}

/// The status page's state of an upstream: up, or down and for how long yet.
fn up_cell(u: &Shown) -> String {
    if u.up { "up".into() } else { format!("down ({} s more)", u.down_for) }
}

/// The fleet as this node's master sees it: Redis up or down since when, and when
/// the ticket keys last agreed with the fleet's; `None` without `[cluster]`.
fn cluster_line() -> Option<String> {
    let c = crate::cluster::status::lookup()?;
    let tickets = if c.tickets > 0 { iso_date(c.tickets) } else { "not yet".into() };
    let tries = if c.tries > 0 { format!(" ({} tries)", c.tries) } else { String::new() };
    let key = if c.key_since > 0 { format!(" (the key of {})", iso_date(c.key_since)) } else { String::new() };
    Some(format!("redis {} since {}{tries}, ticket keys agreed {tickets}{key}", c.link.word(), iso_date(c.since)))
}

/// When an ACME certificate is next asked for: a date, or `now` when it is due (an
/// order under way, or about to be).
fn next_order(next: i64) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    if next <= now { "now".to_string() } else { iso_date(next) }
}

/// The status page's ACME column: nothing for a certificate from files; else a
/// placeholder or issued, when it is next asked for, and the failures in a row.
fn acme_cell(c: &Expiry) -> String {
    if !c.acme {
        return String::new();
    }
    let mut out = String::from(if c.placeholder { "placeholder, waiting for the CA" } else { "issued" });
    if let Some(f) = crate::cluster::status::cert(&c.vhost) {
        if f.stored_until > 0 {
            out.push_str(&format!("; the fleet's expires {}", iso_date(f.stored_until)));
        }
        if let Some(h) = f.holder {
            out.push_str(&format!("; ordered by {h}"));
        }
    }
    if let Some(r) = c.renewal {
        out.push_str(&format!("; next order {}", next_order(r.next)));
        if r.failures > 0 {
            out.push_str(&format!(" ({} failed in a row: see the error log)", r.failures));
        }
    }
    out
}
