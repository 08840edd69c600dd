//! Certificates from ACME, against Debian's `pebble` (the ACME test CA) with real
//! validation: its DNS is a `pebble-challtestsrv` that points every name at
//! 127.0.0.1, and it validates HTTP-01 and TLS-ALPN-01 on pika's own ports. Each
//! test starts its own pebble on free ports and stops it by pid.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rustls::pki_types::CertificateDer;

use crate::https::{client_config, tls_connect, tls_request};
use crate::tls::test_certs::{ca, leaf};
use crate::util::*;

/// Issuance takes a few seconds; a renewal after a failure waits for the back-off.
const ISSUE: Duration = Duration::from_secs(60);

/// A pebble and its DNS, on free ports.
pub(crate) struct Pebble {
    pebble: Option<Child>,
    dns: Child,
    conf: PathBuf,
    listen: u16,
    mgmt: u16,
    dns_port: u16,
    env: Vec<(String, String)>,
    curl: PathBuf,
}

impl Pebble {
    /// Validating HTTP-01 on `http_port` and TLS-ALPN-01 on `tls_port`, with its own
    /// TLS certificate (for 127.0.0.1) issued by `conf/pebble-ca.pem`.
    pub(crate) fn start(site: &Site, http_port: u16, tls_port: u16, env: &[(&str, &str)]) -> Option<Pebble> {
        Pebble::start_eab(site, http_port, tls_port, env, None)
    }

    /// With `eab` (key id, base64url MAC key), pebble takes only accounts bound to it.
    fn start_eab(
        site: &Site,
        http_port: u16,
        tls_port: u16,
        env: &[(&str, &str)],
        eab: Option<(&str, &str)>,
    ) -> Option<Pebble> {
        let curl = need_tool("curl")?;
        let pebble = need_tool("pebble")?;
        let dns_tool = need_tool("pebble-challtestsrv")?;
        let _ = pebble;
        let root = ca("Pebble's own TLS", -1, 30);
        site.write("conf/pebble-ca.pem", &root.pem);
        leaf(&["localhost", "127.0.0.1"], -1, 30, Some(&root)).write(&site.path("conf"), "pebble");
        let (listen, mgmt, dns_port) = (free_port(), free_port(), free_port());
        let conf = site.path("conf/pebble.json");
        let mut json = serde_json::json!({ "pebble": {
            "listenAddress": format!("127.0.0.1:{listen}"),
            "managementListenAddress": format!("127.0.0.1:{mgmt}"),
            "certificate": site.path("conf/pebble.pem"),
            "privateKey": site.path("conf/pebble.key"),
            "httpPort": http_port,
            "tlsPort": tls_port,
            "ocspResponderURL": "",
            "externalAccountBindingRequired": false,
        }});
        if let Some((kid, key)) = eab {
            json["pebble"]["externalAccountBindingRequired"] = true.into();
            json["pebble"]["externalAccountMACKeys"] = serde_json::json!({ kid: key });
        }
        std::fs::write(&conf, json.to_string()).unwrap();
        let dns = Command::new(dns_tool)
            .args(["-dns01", &format!("127.0.0.1:{dns_port}"), "-http01", "", "-https01", "", "-tlsalpn01", ""])
            .args([
                "-management",
                &format!("127.0.0.1:{}", free_port()),
                "-defaultIPv4",
                "127.0.0.1",
                "-defaultIPv6",
                "",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pebble-challtestsrv");
        let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let mut p = Pebble { pebble: None, dns, conf, listen, mgmt, dns_port, env, curl };
        p.up();
        Some(p)
    }

    /// Starts pebble (again: a new CA, which knows no account) on the same ports.
    fn up(&mut self) {
        let child = Command::new("pebble")
            .arg("-config")
            .arg(&self.conf)
            .args(["-dnsserver", &format!("127.0.0.1:{}", self.dns_port)])
            .env("PEBBLE_VA_NOSLEEP", "1")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start pebble");
        self.pebble = Some(child);
        for port in [self.listen, self.mgmt] {
            wait_until(DEADLINE, "pebble to listen", || TcpStream::connect(("127.0.0.1", port)).ok());
        }
    }

    fn down(&mut self) {
        if let Some(mut c) = self.pebble.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub(crate) fn directory(&self) -> String {
        format!("https://127.0.0.1:{}/dir", self.listen)
    }

    /// The root its certificates chain to, from its management interface.
    pub(crate) fn root(&self, site: &Site) -> String {
        let out = Command::new(&self.curl)
            .args(["-sS", "--max-time", "10", "--cacert"])
            .arg(site.path("conf/pebble-ca.pem"))
            .arg(format!("https://127.0.0.1:{}/roots/0", self.mgmt))
            .output()
            .unwrap();
        let pem = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(pem.contains("BEGIN CERTIFICATE"), "pebble's root: {pem} {}", String::from_utf8_lossy(&out.stderr));
        pem
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        self.down();
        let _ = self.dns.kill();
        let _ = self.dns.wait();
    }
}

/// pika's config: `listen` entries, `[acme]` for the CA at `directory` (its TLS
/// certificate's root in conf/pebble-ca.pem) with `acme_extra`, vhosts.
fn config(site: &Site, listen: &str, directory: &str, acme_extra: &str, vhosts: &str) {
    // Workers (and the ACME child) run as nobody: the site must be readable.
    std::fs::set_permissions(site.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    site.write(
        "conf/pika.toml",
        format!(
            "[server]\nlisten = [{listen}]\nlog_level = \"trace\"\nuser = \"nobody\"\n\
             [workers]\nstart = 2\nmin_spare = 1\nmax_spare = 4\n\
             [acme]\ndirectory = \"{}\"\ncontact = [\"mailto:admin@pika.test\"]\nagree_terms = true\n\
             ca_roots = \"conf/pebble-ca.pem\"\n{acme_extra}\n{vhosts}\n\
             [[access_log]]\npath = \"logs/access.log\"\n",
            directory
        ),
    );
}

fn acme_vhost(names: &[&str], extra: &str) -> String {
    let names: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    format!("[[vhost]]\nserver_names = [{}]\nroot = \"htdocs\"\nacme = true\n{extra}\n", names.join(", "))
}

/// The certificate served for `name` at `addr` if it verifies against `root_pem`.
pub(crate) fn served(addr: SocketAddr, name: &str, root_pem: &str) -> Option<CertificateDer<'static>> {
    let mut s = tls_connect(addr, name, &client_config(root_pem));
    let r = tls_request(&mut s, name, "/", true).ok()?;
    (r.status == 200).then(|| s.conn.peer_certificates()?.first().cloned())?
}

/// curl, verifying the chain against `root`.
fn curl_ok(p: &Pebble, site: &Site, root_pem: &str, name: &str, port: u16) -> bool {
    site.write("conf/pebble-root.pem", root_pem);
    let out = Command::new(&p.curl)
        .args(["-sS", "--max-time", "10", "-o", "/dev/null", "-w", "%{http_code}", "--cacert"])
        .arg(site.path("conf/pebble-root.pem"))
        .args(["--resolve", &format!("{name}:{port}:127.0.0.1")])
        .arg(format!("https://{name}:{port}/"))
        .output()
        .unwrap();
    out.status.success() && out.stdout == b"200"
}

/// [`wait_until`], with the error log in the failure.
fn wait_for<T>(site: &Site, limit: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = std::time::Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if std::time::Instant::now() > end {
            let log = site.error_log();
            let lines: Vec<&str> = log.lines().filter(|l| !l.contains("TLS handshake with")).collect();
            panic!("timed out after {limit:?} waiting for {what}; error log:\n{}", lines.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// GET `path` on a.pika.test over plain HTTP.
fn ask(addr: SocketAddr, path: &str) -> Resp {
    raw(addr, format!("GET {path} HTTP/1.1\r\nHost: a.pika.test\r\nConnection: close\r\n\r\n").as_bytes())
}

pub(crate) fn count(log: &str, what: &str) -> usize {
    log.lines().filter(|l| l.contains(what)).count()
}

/// The state folder is root's and 0700, each key 0600; the ACME child ran as nobody;
/// no line of the error log holds key material.
fn assert_safe(site: &Site) {
    let dir = site.path("acme");
    let meta = std::fs::metadata(&dir).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o700), "the state folder");
    let log = site.error_log();
    assert!(!log.contains("PRIVATE KEY"), "a key in the error log");
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        let m = e.metadata().unwrap();
        assert_eq!((m.uid(), m.mode() & 0o777), (0, 0o600), "{}", e.path().display());
        if e.file_name().to_string_lossy().ends_with(".key") {
            for line in std::fs::read_to_string(e.path()).unwrap().lines().filter(|l| !l.starts_with("-----")) {
                assert!(
                    !log.contains(&line[..line.len().min(24)]),
                    "key material of {} in the error log",
                    e.path().display()
                );
            }
        }
    }
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap().uid.as_raw();
    let line = log.lines().find(|l| l.contains("the ACME child runs as uid")).expect("the child's user in the log");
    assert!(line.contains(&format!("uid {nobody} ")), "{line}");
}

#[test]
fn two_vhosts_get_certificates_over_http01_and_a_restart_reuses_them() {
    let site = Site::new();
    let (plain, tls) = (free_port(), free_port());
    let Some(pebble) = Pebble::start(&site, plain, tls, &[]) else { return };
    let listen = format!("\"127.0.0.1:{plain}\", {{ addr = \"127.0.0.1:{tls}\", tls = true }}");
    // b redirects plain requests to HTTPS: the challenge is answered before that.
    let metrics = "[[vhost.location]]\nexact = \"/metrics\"\nmetrics = true\n";
    let vhosts = acme_vhost(&["a.pika.test", "www.a.pika.test"], metrics)
        + &acme_vhost(&["b.pika.test"], "https_redirect = 301\n");
    config(&site, &listen, &pebble.directory(), "[status]\nenabled = true\n", &vhosts);
    let tls_addr: SocketAddr = format!("127.0.0.1:{tls}").parse().unwrap();
    let mut pika = Pika::start(&site, "-F");
    wait_until(DEADLINE, "the placeholder said", || {
        site.error_log()
            .contains("a.pika.test, www.a.pika.test has no certificate yet: served with a self-signed placeholder")
            .then_some(())
    });
    let root = pebble.root(&site);
    for name in ["a.pika.test", "www.a.pika.test", "b.pika.test"] {
        wait_for(&site, ISSUE, &format!("{name}'s certificate served"), || served(tls_addr, name, &root));
        wait_for(&site, DEADLINE, "curl to verify", || curl_ok(&pebble, &site, &root, name, tls).then_some(()));
    }
    let log = site.error_log();
    assert_eq!(count(&log, "answering the http-01 challenge for"), 3, "{log}");
    assert_eq!(count(&log, "registered account"), 1);
    assert_safe(&site);
    // The status page and the metrics say what ACME did and when it goes next.
    let plain_addr: SocketAddr = format!("127.0.0.1:{plain}").parse().unwrap();
    let auto = ask(plain_addr, "/server-status?auto").text();
    let line =
        auto.lines().find(|l| l.starts_with("ACMECertificate: a.pika.test ")).unwrap_or_else(|| panic!("{auto}"));
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!((fields[2], fields[4]), ("issued", "0"), "{line}");
    assert!(
        fields[3].starts_with("2029-") || fields[3].starts_with("2030-"),
        "a third of pebble's 5 years ahead: {line}"
    );
    let json: serde_json::Value = serde_json::from_str(&ask(plain_addr, "/server-status?json").text()).unwrap();
    let b = json["certificates"].as_array().unwrap().iter().find(|c| c["vhost"] == "b.pika.test").unwrap().clone();
    assert_eq!((b["acme"]["placeholder"].as_bool(), b["acme"]["failures"].as_u64()), (Some(false), Some(0)), "{b}");
    let html = ask(plain_addr, "/server-status").text();
    assert!(html.contains("<td>issued; next order 20"), "{html}");
    let metrics = ask(plain_addr, "/metrics").text();
    for series in ["pika_acme_placeholder{vhost=\"b.pika.test\"} 0", "pika_acme_failures{vhost=\"a.pika.test\"} 0"] {
        assert!(metrics.contains(series), "{series} in\n{metrics}");
    }
    assert!(metrics.contains("pika_acme_next_order_timestamp_seconds{vhost=\"a.pika.test\"} 1"), "{metrics}");
    let before = served(tls_addr, "b.pika.test", &root).unwrap();

    // A restart: the stored account and certificates, nothing asked of the CA.
    pika.signal(libc::SIGTERM);
    assert_eq!(pika.wait_exit(DEADLINE), Some(0));
    drop(pika);
    let orders = count(&site.error_log(), "ordering a certificate");
    let placeholders = count(&site.error_log(), "placeholder until");
    let pika = Pika::start(&site, "-F");
    assert_eq!(served(tls_addr, "b.pika.test", &root), Some(before), "the stored certificate");
    // Two ticks: time enough for an order, had one been due.
    std::thread::sleep(Duration::from_millis(2500));
    let log = site.error_log();
    assert_eq!(count(&log, "ordering a certificate"), orders, "{log}");
    assert_eq!(count(&log, "placeholder until"), placeholders, "no placeholder after the restart");
    assert!(!log.contains("expires in"), "{log}");
    drop(pika);
}

#[test]
fn tls_alpn01_alone_with_nonces_rejected_then_a_renewal_under_load() {
    let site = Site::new();
    let tls = free_port();
    // No plain listener: pebble's HTTP-01 port leads nowhere. Half the nonces refused.
    let Some(pebble) = Pebble::start(&site, free_port(), tls, &[("PEBBLE_WFE_NONCEREJECT", "50")]) else { return };
    let listen = format!("{{ addr = \"127.0.0.1:{tls}\", tls = true }}");
    config(&site, &listen, &pebble.directory(), "", &acme_vhost(&["c.pika.test"], ""));
    let tls_addr: SocketAddr = format!("127.0.0.1:{tls}").parse().unwrap();
    let pika = Pika::start(&site, "-F");
    let root = pebble.root(&site);
    let first = wait_for(&site, ISSUE, "c's certificate served", || served(tls_addr, "c.pika.test", &root));
    // Every worker of the new generation serves it (curl may reach one of the old).
    wait_for(&site, DEADLINE, "curl to verify c", || curl_ok(&pebble, &site, &root, "c.pika.test", tls).then_some(()));
    let log = site.error_log();
    // Once, unless a try failed (a validation can time out on a loaded machine): then
    // the back-off brought the next, and the reason is in the log.
    let tries = count(&log, "answering the tls-alpn-01 challenge for c.pika.test");
    assert!(tries >= 1, "{log}");
    if tries > 1 {
        let why: Vec<&str> = log.lines().filter(|l| l.contains("no certificate for")).collect();
        eprintln!("c.pika.test took {tries} tries: {why:?}");
    }
    assert!(log.contains("badNonce"), "pebble rejected no nonce? {log}");
    assert_safe(&site);

    // The renewal: renew_before longer than the lifetime, picked up by a reload,
    // while clients keep asking.
    config(&site, &listen, &pebble.directory(), "renew_before = \"100000d\"\n", &acme_vhost(&["c.pika.test"], ""));
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut loops = Vec::new();
    for _ in 0..2 {
        let (stop, ok, failures, root) = (stop.clone(), ok.clone(), failures.clone(), root.clone());
        loops.push(std::thread::spawn(move || {
            let config = client_config(&root);
            while !stop.load(Ordering::Relaxed) {
                let mut s = tls_connect(tls_addr, "c.pika.test", &config);
                match tls_request(&mut s, "c.pika.test", "/", true) {
                    Ok(r) if r.status == 200 => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    other => failures.lock().unwrap().push(format!("{other:?}")),
                }
            }
        }));
    }
    wait_until(DEADLINE, "the client loops to run", || (ok.load(Ordering::Relaxed) > 20).then_some(()));
    pika.signal(libc::SIGHUP);
    let second = wait_for(&site, ISSUE, "the renewed certificate served", || {
        served(tls_addr, "c.pika.test", &root).filter(|c| *c != first)
    });
    let before = ok.load(Ordering::Relaxed);
    wait_until(DEADLINE, "more requests", || (ok.load(Ordering::Relaxed) > before + 20).then_some(()));
    stop.store(true, Ordering::Relaxed);
    for l in loops {
        l.join().unwrap();
    }
    let failures = failures.lock().unwrap();
    assert!(failures.is_empty(), "{} failed, e.g. {:?}", failures.len(), &failures[..failures.len().min(3)]);
    // Renewed once: not again within the floor, though still "due".
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(served(tls_addr, "c.pika.test", &root), Some(second));
    assert_eq!(count(&site.error_log(), "obtained a certificate for c.pika.test"), 2);
}

#[test]
fn with_the_ca_down_the_old_certificate_serves_and_the_renewal_retries() {
    let site = Site::new();
    let (plain, tls) = (free_port(), free_port());
    let Some(mut pebble) = Pebble::start(&site, plain, tls, &[]) else { return };
    let listen = format!("\"127.0.0.1:{plain}\", {{ addr = \"127.0.0.1:{tls}\", tls = true }}");
    config(&site, &listen, &pebble.directory(), "", &acme_vhost(&["d.pika.test"], ""));
    let tls_addr: SocketAddr = format!("127.0.0.1:{tls}").parse().unwrap();
    let pika = Pika::start(&site, "-F");
    let old_root = pebble.root(&site);
    let first = wait_for(&site, ISSUE, "d's certificate served", || served(tls_addr, "d.pika.test", &old_root));

    // The CA goes away, then a renewal falls due.
    pebble.down();
    config(&site, &listen, &pebble.directory(), "renew_before = \"100000d\"\n", &acme_vhost(&["d.pika.test"], ""));
    pika.signal(libc::SIGHUP);
    let line = wait_for(&site, ISSUE, "the renewal to fail", || {
        site.error_log().lines().find(|l| l.contains("failure(s) in a row for d.pika.test")).map(str::to_string)
    });
    assert!(line.contains("1 failure(s) in a row"), "{line}");
    assert!(site.error_log().contains("Connection refused"), "{}", site.error_log());
    assert_eq!(served(tls_addr, "d.pika.test", &old_root), Some(first.clone()), "the old certificate serves");

    // Back (a new CA: it knows no account): the next try registers and succeeds.
    pebble.up();
    let new_root = pebble.root(&site);
    wait_for(&site, ISSUE, "the renewed certificate", || served(tls_addr, "d.pika.test", &new_root));
    let log = site.error_log();
    assert_eq!(count(&log, "registered account"), 2, "{log}");
    assert!(log.contains("obtained a certificate for d.pika.test"));
    drop(pika);
}

#[test]
fn pika_t_checks_the_acme_section() {
    let site = Site::new();
    site.write(
        "conf/pika.toml",
        "[server]\nlisten = [\"127.0.0.1:0\"]\nuser = \"nobody\"\n\
         [acme]\ndirectory = \"http://ca.example/dir\"\nagree_terms = true\n\
         [[vhost]]\nroot = \"htdocs\"\nserver_names = [\"a.example\"]\nacme = true\n",
    );
    let out = Command::new(BIN).arg("-t").arg("-f").arg(site.path("conf/pika.toml")).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("acme.directory must be the CA's https:// directory URL"), "{err}");
    // A state folder others may enter.
    std::fs::create_dir(site.path("acme")).unwrap();
    std::fs::set_permissions(site.path("acme"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let text = site.read("conf/pika.toml").replace("http://ca.example", "https://ca.example");
    site.write("conf/pika.toml", text);
    let out = Command::new(BIN).arg("-t").arg("-f").arg(site.path("conf/pika.toml")).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has mode 755: it holds private keys, make it 0700"), "{err}");
    std::fs::set_permissions(site.path("acme"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = Command::new(BIN).arg("-t").arg("-f").arg(site.path("conf/pika.toml")).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn a_ca_that_asks_for_an_external_account_binding_gets_one() {
    let site = Site::new();
    let (plain, tls) = (free_port(), free_port());
    // The key of pebble's own example.
    let key = "zWNDZM6eQGHWpSRTPal5eIUYFTu7EajVIoguysqZ9wG44nMEtx3MUAsUDkMTQ12W";
    let Some(pebble) = Pebble::start_eab(&site, plain, tls, &[], Some(("kid-1", key))) else { return };
    let listen = format!("\"127.0.0.1:{plain}\", {{ addr = \"127.0.0.1:{tls}\", tls = true }}");
    let eab = format!("eab_kid = \"kid-1\"\neab_hmac_key = \"{key}\"\n");
    config(&site, &listen, &pebble.directory(), &eab, &acme_vhost(&["e.pika.test"], ""));
    let tls_addr: SocketAddr = format!("127.0.0.1:{tls}").parse().unwrap();
    let _pika = Pika::start(&site, "-F");
    let root = pebble.root(&site);
    wait_for(&site, ISSUE, "e's certificate served", || served(tls_addr, "e.pika.test", &root));
    let log = site.error_log();
    assert_eq!(count(&log, "registered account"), 1, "{log}");
    assert!(!log.contains(key), "the MAC key in the error log");
}

/// A CA that never answers and never falls silent: each connection gets the first
/// bytes of a TLS record that is never finished, then one more byte a second, so
/// no read of the client ever times out. Stops with the test.
struct StallingCa {
    addr: SocketAddr,
    connections: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl StallingCa {
    fn start(site: &Site) -> StallingCa {
        // Its roots must be readable; it never gets as far as a certificate.
        site.write("conf/pebble-ca.pem", &ca("The stalling CA", -1, 30).pem);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (connections, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
        let (count, done) = (connections.clone(), stop.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((s, _)) => {
                        count.fetch_add(1, Ordering::Relaxed);
                        let done = done.clone();
                        std::thread::spawn(move || dribble(s, &done));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        StallingCa { addr, connections, stop }
    }

    fn directory(&self) -> String {
        format!("https://{}/dir", self.addr)
    }
}

impl Drop for StallingCa {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Reads the client's hello, then sends a handshake record's header (16 KiB to
/// come) and a byte of it a second, until the client goes or the test ends.
fn dribble(mut s: TcpStream, stop: &AtomicBool) {
    let _ = s.set_nonblocking(false);
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = s.read(&mut [0; 4096]);
    if s.write_all(&[0x16, 0x03, 0x03, 0x40, 0x00]).is_err() {
        return;
    }
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_secs(1));
        if s.write_all(&[0x02]).is_err() {
            return;
        }
    }
}

/// The pid of the `n`th ACME child the master started (1: the first).
fn acme_child(site: &Site, n: usize) -> i32 {
    wait_for(site, DEADLINE, &format!("ACME child {n}"), || {
        let log = site.error_log();
        let line = log.lines().filter(|l| l.contains("acme: child ") && l.contains(" started for ")).nth(n - 1)?;
        line.split("acme: child ").nth(1)?.split_whitespace().next()?.parse().ok()
    })
}

#[test]
fn a_ca_that_stalls_costs_a_failed_try_after_request_timeout_and_a_retry_after_the_backoff() {
    let site = Site::new();
    let ca = StallingCa::start(&site);
    let listen = format!("\"127.0.0.1:{}\"", free_port());
    config(&site, &listen, &ca.directory(), "request_timeout = \"2s\"\n", &acme_vhost(&["s.pika.test"], ""));
    let _pika = Pika::start(&site, "-F");
    let first = wait_for(&site, DEADLINE, "the first try to fail", || {
        site.error_log().lines().find(|l| l.contains("1 failure(s) in a row for s.pika.test")).map(str::to_string)
    });
    let failed_at = std::time::Instant::now();
    let log = site.error_log();
    assert!(log.contains("no whole answer within acme.request_timeout"), "{log}");
    assert!(first.contains("next try at"), "{first}");
    // The next try waits for the back-off (15 s), then stalls and fails the same way.
    wait_for(&site, ISSUE, "the second try to fail", || {
        site.error_log().contains("2 failure(s) in a row for s.pika.test").then_some(())
    });
    assert!(failed_at.elapsed() > Duration::from_secs(12), "retried after {:?}", failed_at.elapsed());
    assert_eq!(ca.connections.load(Ordering::Relaxed), 2);
}

#[test]
fn a_hup_replaces_an_acme_child_stuck_on_a_ca() {
    let site = Site::new();
    let ca = StallingCa::start(&site);
    let listen = format!("\"127.0.0.1:{}\"", free_port());
    // The defaults: the child would wait 45 s on its first request.
    config(&site, &listen, &ca.directory(), "", &acme_vhost(&["h.pika.test"], ""));
    let pika = Pika::start(&site, "-F");
    let stuck = acme_child(&site, 1);
    wait_until(DEADLINE, "the child to reach the CA", || (ca.connections.load(Ordering::Relaxed) == 1).then_some(()));
    pika.signal(libc::SIGHUP);
    let next = acme_child(&site, 2);
    assert_ne!(next, stuck);
    assert!(!alive(stuck), "the stuck child is gone");
    let log = site.error_log();
    assert!(log.contains(&format!("acme: the ACME child {stuck} is replaced (a reload)")), "{log}");
    assert!(!log.contains("failure(s) in a row"), "a replaced child's job is no failure: {log}");
    wait_until(DEADLINE, "the new child at the CA", || (ca.connections.load(Ordering::Relaxed) == 2).then_some(()));
}

#[test]
fn an_acme_child_that_reports_nothing_past_order_timeout_is_killed_and_its_job_retried_later() {
    let site = Site::new();
    let ca = StallingCa::start(&site);
    let listen = format!("\"127.0.0.1:{}\"", free_port());
    config(&site, &listen, &ca.directory(), "order_timeout = \"2s\"\n", &acme_vhost(&["k.pika.test"], ""));
    let _pika = Pika::start(&site, "-F");
    // Frozen before its own deadline can end its order: only the master can end it.
    let child = acme_child(&site, 1);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child), nix::sys::signal::Signal::SIGSTOP).unwrap();
    // Should the master not end it, it goes on (and dies with its master) after the test.
    struct Resume(i32);
    impl Drop for Resume {
        fn drop(&mut self) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.0), nix::sys::signal::Signal::SIGCONT);
        }
    }
    let _resume = Resume(child);
    let started = std::time::Instant::now();
    let line = wait_for(&site, DEADLINE, "the master to kill the child", || {
        site.error_log().lines().find(|l| l.contains("failure(s) in a row for k.pika.test")).map(str::to_string)
    });
    // order_timeout and the master's grace of 5 s, and a tick.
    assert!(started.elapsed() < Duration::from_secs(10), "killed after {:?}", started.elapsed());
    assert!(line.contains("1 failure(s) in a row"), "{line}");
    let log = site.error_log();
    assert!(
        log.contains(&format!("acme: the ACME child {child} reported nothing for 7s (acme.order_timeout): killed")),
        "{log}"
    );
    assert!(log.contains("the ACME child ended without an answer for k.pika.test"), "{log}");
    assert!(!alive(child));
    drop(ca);
}
