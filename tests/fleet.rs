//! A fleet (`[cluster]`): three pika nodes on 127.0.0.2-4 behind Debian's `haproxy`
//! (round-robin, TCP, so TLS-ALPN-01 reaches the nodes whole), sharing their state
//! through Debian's `redis-server`, started here on a free port with nothing saved to
//! disk, and Debian's `pebble` validating through haproxy, so each challenge lands on
//! whichever node the balancer picks.

use std::io::Write;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::acme::{Pebble, count, served};
use crate::util::*;

/// Issuance through the balancer takes a few seconds (a two-second settle for the
/// fleet's challenges among them); a retry after a failed validation waits longer.
const ISSUE: Duration = Duration::from_secs(90);
/// The fleet's secret, every node's copy of `conf/fleet.key`.
const SECRET: &str = "a secret the three nodes share, 32 bytes or more\n";
/// Redis's password (`requirepass`), every node's `conf/redis.password`.
const REDIS_PASSWORD: &str = "the fleet's redis password";

/// A redis-server on a free loopback port, nothing kept on disk.
struct Redis {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

impl Redis {
    fn start() -> Option<Redis> {
        need_tool("redis-server")?;
        let mut r = Redis { child: None, port: free_port(), dir: tempfile::tempdir().unwrap() };
        r.up();
        Some(r)
    }

    /// Starts it (again, empty) on its port.
    fn up(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--protected-mode", "no", "--requirepass", REDIS_PASSWORD, "--dir"])
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        wait_until(DEADLINE, "redis to answer", || self.connection());
    }

    fn down(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// The nodes' URL: database 1, the password in their `password_file`.
    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/1", self.port)
    }

    fn connection(&self) -> Option<redis::Connection> {
        let url = format!("redis://:{REDIS_PASSWORD}@127.0.0.1:{}/1", self.port);
        let mut c = redis::Client::open(url).ok()?.get_connection().ok()?;
        redis::cmd("PING").query::<String>(&mut c).ok()?;
        Some(c)
    }

    /// Every value Redis holds (each field of a hash is one), by key.
    fn values(&self) -> Vec<(String, Vec<u8>)> {
        let mut c = self.connection().expect("redis");
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
        let mut out = Vec::new();
        for k in keys {
            let kind: String = redis::cmd("TYPE").arg(&k).query(&mut c).unwrap();
            match kind.as_str() {
                "string" => out.push((k.clone(), redis::cmd("GET").arg(&k).query(&mut c).unwrap())),
                "hash" => {
                    let all: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL").arg(&k).query(&mut c).unwrap();
                    out.extend(all.into_iter().flat_map(|(f, v)| [(k.clone(), f), (k.clone(), v)]));
                }
                other => panic!("{k}: a {other} in Redis"),
            }
        }
        out
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.down();
    }
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// One node: its own site (config, state, cache, logs) on 127.0.0.N.
struct Node {
    site: Site,
    plain: SocketAddr,
    tls: SocketAddr,
    pika: Option<Pika>,
}

/// The fleet: Redis, pebble, three nodes, haproxy's two frontends.
struct Fleet {
    redis: Redis,
    pebble: Pebble,
    lb_site: Site,
    nodes: Vec<Node>,
    front_tls: u16,
    _lb: KillOnDrop,
}

impl Fleet {
    /// `plain`: the nodes have plain listeners (HTTP-01 first); else TLS only
    /// (TLS-ALPN-01). `pebble_env`: pebble's environment. `redis_up`: Redis runs when
    /// the nodes start (else it is stopped before). `acme_extra`: more `[acme]` keys.
    fn start(plain: bool, pebble_env: &[(&str, &str)], redis_up: bool, acme_extra: &str) -> Option<Fleet> {
        let haproxy = need_tool("haproxy")?;
        let mut redis = Redis::start()?;
        if !redis_up {
            redis.down();
        }
        let lb_site = Site::new();
        let (front_plain, front_tls) = (free_port(), free_port());
        let pebble = Pebble::start(&lb_site, front_plain, front_tls, pebble_env)?;
        let mut nodes = Vec::new();
        for n in 2..=4 {
            let ip = format!("127.0.0.{n}");
            let node = Node {
                site: Site::new(),
                plain: format!("{ip}:{}", free_port()).parse().unwrap(),
                tls: format!("{ip}:{}", free_port()).parse().unwrap(),
                pika: None,
            };
            node.configure(&redis, &pebble, &lb_site, plain, acme_extra);
            nodes.push(node);
        }
        let servers = |f: &dyn Fn(&Node) -> SocketAddr| {
            nodes.iter().enumerate().map(|(i, n)| format!("  server n{i} {}\n", f(n))).collect::<String>()
        };
        let cfg = lb_site.path("haproxy.cfg");
        std::fs::write(
            &cfg,
            format!(
                "global\n  maxconn 1000\n\
                 defaults\n  mode tcp\n  balance roundrobin\n  option redispatch\n  retries 2\n\
                 \x20 timeout connect 2s\n  timeout client 30s\n  timeout server 30s\n\
                 \x20 default-server check inter 200ms fall 2 rise 1\n\
                 frontend plain\n  bind 127.0.0.1:{front_plain}\n  default_backend plain\n\
                 frontend tls\n  bind 127.0.0.1:{front_tls}\n  default_backend tls\n\
                 backend plain\n{}\
                 backend tls\n{}",
                servers(&|n| n.plain),
                servers(&|n| n.tls)
            ),
        )
        .unwrap();
        let lb = Command::new(haproxy)
            .args(["-db", "-f"])
            .arg(&cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut fleet = Fleet { redis, pebble, lb_site, nodes, front_tls, _lb: KillOnDrop(lb) };
        for node in &mut fleet.nodes {
            node.pika = Some(Pika::start(&node.site, "-F"));
        }
        Some(fleet)
    }

    fn front(&self) -> SocketAddr {
        format!("127.0.0.1:{}", self.front_tls).parse().unwrap()
    }

    /// The error logs of every node, one after the other.
    fn logs(&self) -> String {
        self.nodes.iter().map(|n| n.site.error_log()).collect::<Vec<_>>().join("\n")
    }

    /// [`wait_for`] with every node's log in the failure.
    fn wait<T>(&self, limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let end = std::time::Instant::now() + limit;
        loop {
            if let Some(v) = f() {
                return v;
            }
            if std::time::Instant::now() > end {
                let logs: Vec<String> = self
                    .nodes
                    .iter()
                    .map(|n| {
                        let log = n.site.error_log();
                        let lines: Vec<&str> = log.lines().filter(|l| !l.contains("TLS handshake with")).collect();
                        format!("--- node {}:\n{}", n.tls, lines.join("\n"))
                    })
                    .collect();
                panic!("timed out after {limit:?} waiting for {what}; error logs:\n{}", logs.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until every node serves `name`'s issued certificate (one and the same).
    fn issued(&self, name: &str) -> rustls::pki_types::CertificateDer<'static> {
        let root = self.pebble.root(&self.lb_site);
        let first =
            self.wait(ISSUE, &format!("{name}'s certificate on node 1"), || served(self.nodes[0].tls, name, &root));
        for n in &self.nodes[1..] {
            let got = self.wait(DEADLINE, &format!("{name}'s certificate on {}", n.tls), || served(n.tls, name, &root));
            assert_eq!(got, first, "{}: another certificate than node 1's", n.tls);
        }
        first
    }
}

impl Node {
    fn configure(&self, redis: &Redis, pebble: &Pebble, lb_site: &Site, plain: bool, acme_extra: &str) {
        use std::os::unix::fs::PermissionsExt;
        let site = &self.site;
        std::fs::set_permissions(site.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::copy(lb_site.path("conf/pebble-ca.pem"), site.path("conf/pebble-ca.pem")).unwrap();
        for (file, text) in [("conf/fleet.key", SECRET), ("conf/redis.password", &format!("{REDIS_PASSWORD}\n"))] {
            site.write(file, text);
            std::fs::set_permissions(site.path(file), std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        let listen = if plain {
            format!("\"{}\", {{ addr = \"{}\", tls = true }}", self.plain, self.tls)
        } else {
            format!("{{ addr = \"{}\", tls = true }}", self.tls)
        };
        site.write(
            "conf/pika.toml",
            format!(
                "[server]\nlisten = [{listen}]\nlog_level = \"debug\"\nuser = \"nobody\"\n\
                 [workers]\nstart = 2\nmin_spare = 1\nmax_spare = 4\n\
                 [status]\nenabled = true\n\
                 [acme]\ndirectory = \"{}\"\ncontact = [\"mailto:admin@fleet.test\"]\nagree_terms = true\n\
                 ca_roots = \"conf/pebble-ca.pem\"\n{acme_extra}\n\
                 [cluster]\nredis = \"{}\"\nkey_file = \"conf/fleet.key\"\nprefix = \"t:\"\n\
                 password_file = \"conf/redis.password\"\n\
                 [[vhost]]\nserver_names = [\"a.fleet.test\"]\nroot = \"htdocs\"\nacme = true\n\
                 [[vhost.location]]\nexact = \"/metrics\"\nmetrics = true\n\
                 [[access_log]]\npath = \"logs/access.log\"\n",
                pebble.directory(),
                redis.url()
            ),
        );
    }

    /// The status page's line that starts with `prefix` (`?auto`, on the plain listener).
    fn status_line(&self, prefix: &str) -> String {
        let request = b"GET /server-status?auto HTTP/1.1\r\nHost: a.fleet.test\r\nConnection: close\r\n\r\n";
        let text = raw(self.plain, request).text();
        text.lines().find_map(|l| l.strip_prefix(prefix)).unwrap_or_default().to_string()
    }

    /// The status page's `Cluster:` line.
    fn cluster_line(&self) -> String {
        self.status_line("Cluster: ")
    }

    /// The failed tries in a row the status page says, over TLS (a TLS-only node).
    fn tls_cluster_tries(&self) -> Option<u32> {
        let out = Command::new("curl")
            .args([
                "-sSk",
                "--max-time",
                "5",
                "--resolve",
                &format!("a.fleet.test:{}:{}", self.tls.port(), self.tls.ip()),
            ])
            .arg(format!("https://a.fleet.test:{}/server-status?auto", self.tls.port()))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let line = text.lines().find_map(|l| l.strip_prefix("Cluster: "))?;
        line.split(" (").nth(1)?.split(' ').next()?.parse().ok()
    }

    /// The value of a metric without labels, over TLS (0 when absent).
    fn tls_metric(&self, name: &str) -> i64 {
        let text = self.metrics();
        text.lines().find_map(|l| l.strip_prefix(&format!("{name} "))?.trim().parse().ok()).unwrap_or(0)
    }

    /// `/metrics` over TLS (the node's own certificate is not checked here).
    fn metrics(&self) -> String {
        let out = Command::new("curl")
            .args([
                "-sSk",
                "--max-time",
                "5",
                "--resolve",
                &format!("a.fleet.test:{}:{}", self.tls.port(), self.tls.ip()),
            ])
            .arg(format!("https://a.fleet.test:{}/metrics", self.tls.port()))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// `openssl s_client` to `addr` for a.fleet.test, saving (`-sess_out`) or offering
/// (`-sess_in`) the session in `sess`; its output.
fn s_client(addr: SocketAddr, flag: &str, sess: &std::path::Path) -> String {
    let openssl = need_tool("openssl").expect("openssl");
    let mut c = Command::new(openssl)
        .args(["s_client", "-connect", &addr.to_string(), "-servername", "a.fleet.test", "-tls1_3", flag])
        .arg(sess)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = c.stdin.take().unwrap();
    let _ = stdin.write_all(b"GET / HTTP/1.1\r\nHost: a.fleet.test\r\nConnection: close\r\n\r\n");
    let out = c.wait_with_output().unwrap();
    drop(stdin);
    String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
}

/// A ticket from `from` resumes on `to` (TLS 1.3).
fn resumes(from: SocketAddr, to: SocketAddr, sess: &std::path::Path) -> bool {
    let _ = std::fs::remove_file(sess);
    let first = s_client(from, "-sess_out", sess);
    if !first.contains("HTTP/1.1 200 OK") || !std::fs::metadata(sess).is_ok_and(|m| m.len() > 0) {
        return false;
    }
    let second = s_client(to, "-sess_in", sess);
    second.contains("Reused, TLSv1.3") && second.contains("HTTP/1.1 200 OK")
}

/// `count` over every node's log.
fn said(fleet: &Fleet, what: &str) -> usize {
    count(&fleet.logs(), what)
}

#[test]
fn three_nodes_behind_haproxy_one_certificate_shared_sessions_and_redis_down() {
    let Some(mut fleet) = Fleet::start(true, &[], true, "") else { return };
    let cert = fleet.issued("a.fleet.test");
    let logs = fleet.logs();
    assert_eq!(count(&logs, "obtained a certificate for a.fleet.test"), 1, "one certificate for the fleet:\n{logs}");
    assert!(count(&logs, "answering the http-01 challenge for a.fleet.test") >= 1, "{logs}");
    assert_eq!(count(&logs, "registered account"), 1, "one account for the fleet");
    // The others waited for the holder and took its certificate.
    assert_eq!(count(&logs, "the certificate for a.fleet.test from the fleet"), 2, "{logs}");

    // Every node shows the fleet's view: the stored certificate's expiry (pebble's
    // last five years), nobody ordering now, the ticket key's period.
    for n in &fleet.nodes {
        let line = fleet.wait(DEADLINE, "the fleet's view", || {
            Some(n.status_line("ClusterCertificate: a.fleet.test "))
                .filter(|l| l.ends_with(" -") && l.starts_with("20"))
        });
        assert!(line.starts_with("2031-") || line.starts_with("2030-"), "{line}");
        assert!(n.cluster_line().contains("(the key of "), "{}", n.cluster_line());
        assert!(n.metrics().contains("pika_cluster_certificate_expiry_timestamp_seconds{vhost=\"a.fleet.test\"} "));
    }
    crate::metrics::promtool_check(&fleet.nodes[0].metrics());

    // A ticket from one node resumes on every other.
    let sess = fleet.lb_site.path("conf/session.pem");
    let (n1, n2, n3) = (fleet.nodes[0].tls, fleet.nodes[1].tls, fleet.nodes[2].tls);
    fleet.wait(DEADLINE, "a session from node 1 resumed on node 2", || resumes(n1, n2, &sess).then_some(()));
    fleet.wait(DEADLINE, "a session from node 3 resumed on node 1", || resumes(n3, n1, &sess).then_some(()));
    for n in &fleet.nodes {
        fleet.wait(DEADLINE, "pika_cluster_up 1", || n.metrics().contains("pika_cluster_up 1").then_some(()));
    }

    // Redis stops: every node keeps serving HTTPS, through the balancer, not one
    // request failed; each says so once.
    let _ = s_client(n2, "-sess_out", &sess);
    fleet.redis.down();
    for n in &fleet.nodes {
        fleet.wait(DEADLINE, "Redis down said", || n.site.error_log().contains("does not answer").then_some(()));
    }
    let root = fleet.pebble.root(&fleet.lb_site);
    for i in 0..30 {
        assert_eq!(served(fleet.front(), "a.fleet.test", &root).as_ref(), Some(&cert), "request {i} with Redis down");
    }
    for n in &fleet.nodes {
        // Tried again with a back-off (1 s, 2 s, 4 s, ...): said once all the same. At
        // least three tries (a slow run may find a node past its third: the status
        // line says the count so far).
        let tries = |line: &str| line.split(" (").nth(1)?.split(" tries)").next()?.parse::<u32>().ok();
        fleet.wait(DEADLINE, "three tries", || (tries(&n.cluster_line())? >= 3).then_some(()));
        assert_eq!(count(&n.site.error_log(), "does not answer"), 1, "said once: {}", n.site.error_log());
        assert!(n.metrics().contains("pika_cluster_up 0"));
        assert!(n.cluster_line().starts_with("redis down since "), "{}", n.cluster_line());
    }

    // A node restarted with Redis still down serves from its cache: the certificate,
    // and the fleet's ticket keys (a ticket node 2 issued before resumes on it).
    let node = &mut fleet.nodes[0];
    drop(node.pika.take());
    node.pika = Some(Pika::start(&node.site, "-F"));
    assert_eq!(served(n1, "a.fleet.test", &root), Some(cert.clone()), "the cached certificate after a restart");
    let again = s_client(n1, "-sess_in", &sess);
    assert!(again.contains("Reused, TLSv1.3"), "node 2's ticket on the restarted node 1: {again}");
    assert!(fleet.nodes[0].site.error_log().contains("the ticket keys from the cache"));

    // Redis back: every node sees it again (the restarted one may not have
    // tried it while it was down).
    fleet.redis.up();
    for n in &fleet.nodes {
        if n.tls != n1 {
            fleet.wait(Duration::from_secs(45), "Redis back said", || {
                n.site.error_log().contains("answers again").then_some(())
            });
        }
        fleet.wait(DEADLINE, "pika_cluster_up 1 again", || n.metrics().contains("pika_cluster_up 1").then_some(()));
    }
    assert_eq!(said(&fleet, "obtained a certificate"), 1, "no order meanwhile");
}

#[test]
fn started_with_redis_down_then_tls_alpn01_through_the_balancer_and_no_private_key_in_redis() {
    // The nodes start with Redis down: they serve (a placeholder), say so, and order
    // nothing, for no lock can be taken. Their certificate is due as soon as it is
    // served (renew_before past pebble's five years): only the one-hour floor between
    // two orders of a name holds the next one back, and it holds for the fleet.
    let Some(mut fleet) = Fleet::start(false, &[], false, "renew_before = \"1830d\"") else { return };
    for n in &fleet.nodes {
        fleet.wait(DEADLINE, "Redis down said", || n.site.error_log().contains("does not answer").then_some(()));
        // Ticks went by with the certificate due: a second try, a second later.
        fleet.wait(DEADLINE, "two tries", || n.tls_cluster_tries().filter(|&t| t >= 2));
    }
    assert_eq!(said(&fleet, "ordering a certificate"), 0, "an order with Redis down: {}", fleet.logs());
    // Redis comes: the orders resume, one for the fleet.
    fleet.redis.up();
    fleet.issued("a.fleet.test");
    // Three more ticks on every node after each installed it: no second order.
    let installed = fleet.nodes.iter().map(|n| n.tls_metric("pika_cluster_ticket_keys_timestamp_seconds")).max();
    for n in &fleet.nodes {
        fleet.wait(DEADLINE, "three ticks", || {
            let t = n.tls_metric("pika_cluster_ticket_keys_timestamp_seconds");
            (t >= installed.unwrap_or(0) + 3).then_some(())
        });
    }
    let logs = fleet.logs();
    assert_eq!(count(&logs, "ordering a certificate for a.fleet.test"), 1, "one order for the fleet:\n{logs}");
    assert_eq!(count(&logs, "obtained a certificate for a.fleet.test"), 1, "{logs}");
    assert!(count(&logs, "answering the tls-alpn-01 challenge for a.fleet.test") >= 1, "{logs}");

    // Every value in Redis: no PEM, no key's DER, no key's base64 line.
    let mut secrets: Vec<Vec<u8>> = Vec::new();
    for n in &fleet.nodes {
        for e in std::fs::read_dir(n.site.path("acme")).unwrap().flatten() {
            if e.file_name().to_string_lossy().ends_with(".key") {
                let pem = std::fs::read_to_string(e.path()).unwrap();
                for line in pem.lines().filter(|l| !l.starts_with("-----") && l.len() >= 24) {
                    secrets.push(line.as_bytes()[..24].to_vec());
                }
                let der = rustls::pki_types::pem::PemObject::from_pem_slice(pem.as_bytes())
                    .map(|k: rustls::pki_types::PrivateKeyDer<'static>| k.secret_der().to_vec())
                    .unwrap();
                // The private scalar of a P-256 PKCS#8 key (bytes 36 to 68).
                secrets.push(der[36..60].to_vec());
            }
        }
    }
    assert!(secrets.len() >= 4, "the account key and the certificate's key, in PEM and DER");
    let values = fleet.redis.values();
    assert!(values.len() >= 3, "the account, the certificate, the ticket keys: {values:?}");
    for (key, v) in &values {
        assert!(!v.windows(11).any(|w| w == b"PRIVATE KEY"), "{key}: a PEM key in the clear");
        assert!(!v.windows(5).any(|w| w == b"BEGIN"), "{key}: PEM in the clear");
        for s in &secrets {
            assert!(!v.windows(s.len()).any(|w| w == &s[..]), "{key}: key material in the clear");
        }
    }
}

#[test]
fn the_lock_holder_killed_mid_order_another_node_finishes_it() {
    // Pebble waits before each validation (up to 15 s without PEBBLE_VA_NOSLEEP):
    // time to kill the node that holds the lock.
    let Some(mut fleet) = Fleet::start(true, &[("PEBBLE_VA_NOSLEEP", "0")], true, "") else { return };
    let holder = fleet.wait(ISSUE, "a node answering the challenge", || {
        fleet.nodes.iter().position(|n| n.site.error_log().contains("answering the http-01 challenge"))
    });
    if said(&fleet, "obtained a certificate") > 0 {
        eprintln!("the order ended before the kill: nothing to take over");
        return;
    }
    // The others show who orders it.
    let holder_pid = fleet.nodes[holder].pika.as_ref().unwrap().pid;
    let other = &fleet.nodes[(holder + 1) % 3];
    fleet.wait(DEADLINE, "the holder on another node's status page", || {
        other.status_line("ClusterCertificate: a.fleet.test ").contains(&format!("[{holder_pid}]")).then_some(())
    });
    let pika = fleet.nodes[holder].pika.take().unwrap();
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pika.pid), nix::sys::signal::Signal::SIGKILL).unwrap();
    let others: Vec<usize> = (0..3).filter(|&i| i != holder).collect();
    let root = fleet.pebble.root(&fleet.lb_site);
    for &i in &others {
        let tls = fleet.nodes[i].tls;
        fleet.wait(ISSUE, "a certificate on the nodes left", || served(tls, "a.fleet.test", &root));
    }
    let obtained: usize =
        others.iter().map(|&i| count(&fleet.nodes[i].site.error_log(), "obtained a certificate")).sum();
    assert_eq!(obtained, 1, "one of the others finished it: {}", fleet.logs());
    drop(pika);
}

#[test]
fn a_node_talks_to_redis_over_tls_with_its_own_roots() {
    use crate::tls::test_certs::{ca, leaf};
    use std::os::unix::fs::PermissionsExt;
    if need_tool("redis-server").is_none() {
        return;
    }
    let site = Site::new();
    let root = ca("the fleet's Redis CA", -1, 30);
    site.write("conf/redis-ca.pem", &root.pem);
    leaf(&["localhost", "127.0.0.1"], -1, 30, Some(&root)).write(&site.path("conf"), "redis");
    let port = free_port();
    let redis = Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--tls-auth-clients", "no", "--tls-cert-file"])
        .arg(site.path("conf/redis.pem"))
        .arg("--tls-key-file")
        .arg(site.path("conf/redis.key"))
        .arg("--tls-ca-cert-file")
        .arg(site.path("conf/redis-ca.pem"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _redis = KillOnDrop(redis);
    wait_until(DEADLINE, "redis to listen", || std::net::TcpStream::connect(("127.0.0.1", port)).ok());
    site.write("conf/fleet.key", SECRET);
    std::fs::set_permissions(site.path("conf/fleet.key"), std::fs::Permissions::from_mode(0o600)).unwrap();
    site.config(
        "",
        &format!(
            "[cluster]\nredis = \"rediss://127.0.0.1:{port}/0\"\nca_file = \"conf/redis-ca.pem\"\n\
             key_file = \"conf/fleet.key\"\n"
        ),
    );
    let _pika = Pika::start(&site, "-F");
    wait_until(DEADLINE, "the ticket keys offered over TLS", || {
        site.error_log().contains("this node's ticket keys are the fleet's now").then_some(())
    });
    assert!(!site.error_log().contains("does not answer"), "{}", site.error_log());
}
