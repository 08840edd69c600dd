//! HTTPS served by the workers, tested with real clients: curl and `openssl s_client`
//! (and rustls, in this process, where a test needs many connections quickly or
//! must see how a session ended). Certificates are made in the tests (rcgen).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

use crate::hostile::FLOODED_BOUND;
use crate::tls::test_certs::{Ca, ca, leaf};
use crate::util::*;

/// A site with a plain and a TLS listener, and a CA whose certificates its vhosts use.
struct Https {
    site: Site,
    root: Ca,
    /// Started with `start`.
    pika: Option<Pika>,
    plain: SocketAddr,
    tls: SocketAddr,
}

/// The access-log format of these tests: the TLS fields, and the worker's pid.
const FORMAT: &str = "%h \\\"%r\\\" %>s %{SSL_PROTOCOL}x %{SSL_CIPHER}x %{SSL_TLS_SNI}x pid=%P";

impl Https {
    /// `listen` is the `listen` array's inside; `rest` the tables after `[server]`
    /// (vhosts, workers, http). Certificates `NAME.pem`/`NAME.key` under conf/ are
    /// made with `cert`.
    fn new() -> Https {
        let site = Site::new();
        let root = ca("Test Root", -10, 3650);
        site.write("conf/ca.pem", &root.pem);
        Https { site, root, pika: None, plain: "127.0.0.1:0".parse().unwrap(), tls: "127.0.0.1:0".parse().unwrap() }
    }

    /// Issues a certificate for `names` into conf/`file`.pem and .key.
    fn cert(&self, file: &str, names: &[&str]) -> crate::tls::test_certs::Made {
        let made = leaf(names, -1, 90, Some(&self.root));
        made.write(&self.site.path("conf"), file);
        made
    }

    fn config(&self, listen: &str, rest: &str) {
        let text = format!(
            "[server]\nlisten = [{listen}]\nlog_level = \"debug\"\n{rest}\n\
             [[access_log]]\npath = \"logs/access.log\"\nformat = \"{FORMAT}\"\nbuffer = 0\n"
        );
        self.site.write("conf/pika.toml", with_body_dir(&text));
    }

    /// Starts pika (`-F`) and reads which listener got which port: the error log
    /// says "listening on" for each, in the config's order.
    fn start(&mut self, mode: &str) -> &Pika {
        let p = Pika::start(&self.site, mode);
        let log = self.site.error_log();
        let addrs: Vec<SocketAddr> = log
            .lines()
            .filter_map(|l| l.split("listening on ").nth(1)?.split_whitespace().next()?.parse().ok())
            .collect();
        let listens = self.site.read("conf/pika.toml");
        let tls_only = !listens.contains("listen = [\"");
        (self.plain, self.tls) = match addrs[..] {
            [tls] if tls_only => (tls, tls),
            [plain, tls] => (plain, tls),
            _ => panic!("unexpected listeners: {addrs:?}"),
        };
        self.pika = Some(p);
        self.pika.as_ref().unwrap()
    }

    fn pika(&self) -> &Pika {
        self.pika.as_ref().expect("started")
    }

    fn ca_file(&self) -> PathBuf {
        self.site.path("conf/ca.pem")
    }

    /// curl for `https://NAME:PORT/PATH` against the TLS listener.
    fn curl(&self, curl: &PathBuf, name: &str, path: &str, args: &[&str]) -> Output {
        let port = self.tls.port();
        Command::new(curl)
            .args(["-sS", "--max-time", "20", "--cacert"])
            .arg(self.ca_file())
            .args(["--resolve", &format!("{name}:{port}:127.0.0.1")])
            .args(args)
            .arg(format!("https://{name}:{port}{path}"))
            .output()
            .expect("run curl")
    }

    /// `openssl s_client` to the TLS listener with `args`: the handshake, then
    /// `input` if any (and it waits for the server to close), else it leaves.
    fn s_client(&self, openssl: &PathBuf, args: &[&str], input: &[u8]) -> String {
        let wait = if input.is_empty() { &[][..] } else { &["-ign_eof"][..] };
        let mut child = Command::new(openssl)
            .args(["s_client", "-connect", &self.tls.to_string(), "-CAfile"])
            .arg(self.ca_file())
            .args(wait)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run openssl");
        child.stdin.take().unwrap().write_all(input).unwrap();
        let out = wait_output(child, DEADLINE);
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr)
    }

    /// The access-log lines so far.
    fn access(&self) -> Vec<String> {
        self.site.access_lines()
    }
}

/// Waits for `child` to end (killing it after `limit`) and returns its output.
fn wait_output(child: std::process::Child, limit: Duration) -> Output {
    let pid = child.id() as i32;
    let done = Arc::new(AtomicBool::new(false));
    let watch = {
        let done = done.clone();
        std::thread::spawn(move || {
            let end = Instant::now() + limit;
            while !done.load(Ordering::Relaxed) && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(20));
            }
            if !done.load(Ordering::Relaxed) {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            }
        })
    };
    let out = child.wait_with_output().unwrap();
    done.store(true, Ordering::Relaxed);
    watch.join().unwrap();
    out
}

/// What `s_client` printed of the server's certificate: its subject, spaces removed.
fn subject(s_client: &str) -> String {
    s_client
        .lines()
        .find_map(|l| l.strip_prefix("subject="))
        .unwrap_or_else(|| panic!("no certificate in: {s_client}"))
        .replace(' ', "")
}

/// The first certificate in `text` (what `s_client` received; a chain file's
/// server certificate), as PEM.
fn first_pem(text: &str) -> String {
    let start = text.find("-----BEGIN CERTIFICATE-----").unwrap_or_else(|| panic!("no certificate: {text}"));
    let end = text[start..].find("-----END CERTIFICATE-----").unwrap() + start + 25;
    text[start..end].to_string()
}

/// A rustls client trusting `ca_pem`, offering ALPN http/1.1 (as browsers do, with
/// h2 first).
pub(crate) fn client_config(ca_pem: &str) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let mut c = ClientConfig::builder_with_provider(Arc::new(pika::tls::provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Arc::new(c)
}

pub(crate) type TlsConn = StreamOwned<ClientConnection, TcpStream>;

/// A TLS connection to `addr` for `name` (the handshake happens with the first write).
pub(crate) fn tls_connect(addr: SocketAddr, name: &str, config: &Arc<ClientConfig>) -> TlsConn {
    let c = ClientConnection::new(config.clone(), ServerName::try_from(name.to_string()).unwrap()).unwrap();
    StreamOwned::new(c, connect(addr))
}

/// One request on `s` for `path` on `name`, and its answer.
pub(crate) fn tls_request(s: &mut TlsConn, name: &str, path: &str, close: bool) -> std::io::Result<Resp> {
    let close = if close { "Connection: close\r\n" } else { "" };
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {name}\r\n{close}\r\n").as_bytes())?;
    read_response(s, false).ok_or_else(|| std::io::Error::other("no response"))
}

fn vhost(name: &str, cert: Option<&str>, extra: &str) -> String {
    let tls = cert.map_or(String::new(), |c| format!("tls_cert = \"conf/{c}.pem\"\ntls_key = \"conf/{c}.key\"\n"));
    format!("[[vhost]]\nserver_names = [\"{name}\"]\nroot = \"htdocs\"\n{tls}{extra}\n")
}

const BOTH: &str = "\"127.0.0.1:0\", { addr = \"127.0.0.1:0\", tls = true }";

impl Https {
    /// A site with a plain and a TLS listener, `rest` (workers, http), and a vhost
    /// for each (name, extra lines) with a certificate of its own (conf/NAME.pem),
    /// started with `mode`.
    fn serving(mode: &str, rest: &str, vhosts: &[(&str, &str)]) -> Https {
        let mut h = Https::new();
        let mut tables = rest.to_string();
        for (name, extra) in vhosts {
            h.cert(name, &[name]);
            tables += &vhost(name, Some(name), extra);
        }
        h.config(BOTH, &tables);
        h.start(mode);
        h
    }
}

#[test]
fn curl_is_served_over_tls_1_2_and_1_3_with_alpn_hsts_and_the_session_in_the_log() {
    let Some(curl) = need_tool("curl") else { return };
    let hsts = "hsts = \"max-age=31536000; includeSubDomains\"";
    let h = Https::serving("-F", "", &[("a.example", hsts), ("b.example", "")]);
    let index = h.site.read("htdocs/index.html");
    for (version, flags) in
        [("TLSv1.2", ["--tlsv1.2", "--tls-max", "1.2"]), ("TLSv1.3", ["--tlsv1.3", "--tls-max", "1.3"])]
    {
        for name in ["a.example", "b.example"] {
            let out = h.curl(&curl, name, "/", &[&flags[..], &["-v", "-D", "-"]].concat());
            let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success(), "{version} {name}: {stderr}");
            assert!(stdout.starts_with("HTTP/1.1 200 OK\r\n") && stdout.ends_with(&index), "{stdout}");
            assert!(stderr.contains(&format!("SSL connection using {version} / ")), "{stderr}");
            assert!(stderr.contains("ALPN: server accepted http/1.1"), "{stderr}");
            let hsts = stdout.lines().find(|l| l.starts_with("Strict-Transport-Security:"));
            if name == "a.example" {
                assert_eq!(hsts, Some("Strict-Transport-Security: max-age=31536000; includeSubDomains"));
            } else {
                assert_eq!(hsts, None, "b.example has no hsts");
            }
        }
    }
    // HSTS only over HTTPS.
    let plain = raw(h.plain, b"GET / HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n");
    assert_eq!((plain.status, plain.header("strict-transport-security")), (200, None));
    let lines = wait_until(DEADLINE, "five records", || {
        let l = h.access();
        (l.len() == 5).then_some(l)
    });
    // Apache's names (OpenSSL's cipher names), the SNI name; "-" for plain HTTP. Each
    // worker holds its records a moment (a buffered log), so the file's order need not
    // be the requests': each record is looked for by what it says.
    let count = |want: &[&str]| lines.iter().filter(|l| want.iter().all(|w| l.contains(w))).count();
    for want in [
        &["200 TLSv1.2 ECDHE-ECDSA-AES", "-GCM-SHA", " a.example pid="][..],
        &["200 TLSv1.2 ECDHE-ECDSA-AES", "-GCM-SHA", " b.example pid="],
        &["200 TLSv1.3 TLS_AES_", "_GCM_SHA", " a.example pid="],
        &["200 TLSv1.3 TLS_AES_", "_GCM_SHA", " b.example pid="],
        &["200 - - - pid="],
    ] {
        assert_eq!(count(want), 1, "one record with {want:?} in {lines:#?}");
    }
}

#[test]
fn sni_picks_each_vhosts_certificate_and_other_clients_get_the_default() {
    let Some(openssl) = need_tool("openssl") else { return };
    // The first vhost has no certificate: the default is a.example's, the first that has one.
    let h = Https::serving("-F", &vhost("plain.example", None, ""), &[("a.example", ""), ("b.example", "")]);
    for (args, want) in [
        (&["-servername", "b.example"][..], "CN=b.example"),
        (&["-servername", "a.example"], "CN=a.example"),
        (&["-servername", "plain.example"], "CN=a.example"),
        (&["-servername", "unknown.example"], "CN=a.example"),
        (&["-noservername"], "CN=a.example"),
    ] {
        let out = h.s_client(&openssl, args, b"");
        assert_eq!(subject(&out), want, "{args:?}: {out}");
        // Trusted through the test CA: the chain is whole and in order.
        assert!(out.contains("Verify return code: 0 (ok)"), "{args:?}: {out}");
    }
    // ALPN: http/1.1 is chosen when offered; a client without ALPN is served too.
    let out = h.s_client(&openssl, &["-servername", "a.example", "-alpn", "h2,http/1.1"], b"");
    assert!(out.contains("ALPN protocol: http/1.1"), "{out}");
    let out = h.s_client(
        &openssl,
        &["-servername", "a.example"],
        b"GET / HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n",
    );
    assert!(out.contains("No ALPN negotiated") && out.contains("HTTP/1.1 200 OK"), "{out}");
}

#[test]
fn a_host_for_another_vhost_than_the_tls_name_is_misdirected() {
    let h = Https::serving("-F", "", &[("a.example", ""), ("b.example", "")]);
    let config = client_config(&std::fs::read_to_string(h.ca_file()).unwrap());
    let addr = h.tls;
    let mut s = tls_connect(addr, "a.example", &config);
    assert_eq!(tls_request(&mut s, "a.example", "/", false).unwrap().status, 200);
    // The connection was made (and its certificate checked) for a.example: b.example's
    // content is not served over it, whichever Host comes.
    for host in ["b.example", "B.EXAMPLE:443"] {
        let r = tls_request(&mut s, host, "/", false).unwrap();
        assert_eq!(r.status, 421, "{host}");
    }
    assert_eq!(tls_request(&mut s, "a.example:443", "/", false).unwrap().status, 200, "the connection goes on");
}

#[test]
fn a_session_resumes_on_another_worker() {
    let Some(openssl) = need_tool("openssl") else { return };
    // A worker holding one connection takes no other: the second goes to the other worker.
    let workers = "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 2\nmax = 2\nmax_connections = 1\n";
    let h = Https::serving("-F", workers, &[("a.example", "")]);
    let request = |close: bool| {
        format!("GET / HTTP/1.1\r\nHost: a.example\r\n{}\r\n", if close { "Connection: close\r\n" } else { "" })
    };
    for version in ["-tls1_2", "-tls1_3"] {
        let sess = h.site.path(&format!("conf/session{version}.pem"));
        let _ = std::fs::remove_file(&sess);
        let before = h.access().len();
        // The first connection: served, its session saved, then held open.
        let mut first = Command::new(&openssl)
            .args(["s_client", "-connect", &h.tls.to_string(), "-servername", "a.example", version, "-sess_out"])
            .arg(&sess)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut stdin = first.stdin.take().unwrap();
        stdin.write_all(request(false).as_bytes()).unwrap();
        let held_pid = wait_until(DEADLINE, "the first request's record", || {
            let lines = h.access();
            let line = lines.get(before)?;
            line.split("pid=").nth(1).map(str::to_string)
        });
        wait_until(DEADLINE, "the saved session", || std::fs::metadata(&sess).is_ok_and(|m| m.len() > 0).then_some(()));
        // The second connection, while the first holds its worker.
        let out = h.s_client(
            &openssl,
            &["-servername", "a.example", version, "-msg", "-sess_in", sess.to_str().unwrap()],
            request(true).as_bytes(),
        );
        let want = if version == "-tls1_2" { "Reused, TLSv1.2" } else { "Reused, TLSv1.3" };
        assert!(out.contains(want) && out.contains("HTTP/1.1 200 OK"), "{version}: not resumed: {out}");
        if version == "-tls1_3" {
            // One ticket replaces the one used.
            let tickets = out.lines().filter(|l| l.starts_with("<<<") && l.ends_with("NewSessionTicket")).count();
            assert_eq!(tickets, 1, "{out}");
        }
        let lines = h.access();
        let resumed_pid = lines[before + 1].split("pid=").nth(1).unwrap();
        assert_ne!(resumed_pid, held_pid, "{version}: resumed on the worker that issued the ticket: {lines:?}");
        drop(stdin);
        let _ = first.kill();
        let _ = first.wait();
    }
}

#[test]
fn plain_requests_are_redirected_to_https_keeping_path_and_query() {
    let Some(curl) = need_tool("curl") else { return };
    let h = Https::serving("-F", "", &[("a.example", "https_redirect = 301"), ("b.example", "https_redirect = 308")]);
    let port = h.tls.port();
    for (name, code) in [("a.example", 301), ("b.example", 308)] {
        let r = raw(
            h.plain,
            format!("GET /x/y%20z?q=1&r HTTP/1.1\r\nHost: {name}:8080\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        assert_eq!(r.status, code);
        assert_eq!(r.header("location"), Some(format!("https://{name}:{port}/x/y%20z?q=1&r")));
        assert_eq!(r.header("strict-transport-security"), None);
    }
    // The master's `OPTIONS *` (and a client's) is answered, not redirected.
    let r = raw(h.plain, b"OPTIONS * HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n");
    assert_eq!(r.status, 200);
    // curl follows the redirect to the page, over HTTPS.
    let out = Command::new(&curl)
        .args(["-sS", "-L", "--max-time", "20", "--cacert"])
        .arg(h.ca_file())
        .args(["--resolve", &format!("a.example:{}:127.0.0.1", h.plain.port())])
        .args(["--resolve", &format!("a.example:{port}:127.0.0.1")])
        .args(["-w", "%{http_code} %{url_effective} %{num_redirects}"])
        .arg(format!("http://a.example:{}/index.html?v=2", h.plain.port()))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.ends_with(&format!("200 https://a.example:{port}/index.html?v=2 1")),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn plain_http_to_the_tls_port_gets_a_readable_400() {
    let Some(curl) = need_tool("curl") else { return };
    let h = Https::serving("-F", "", &[("a.example", "")]);
    let r = raw(h.tls, b"GET /page HTTP/1.1\r\nHost: a.example\r\n\r\n");
    assert_eq!((r.status, r.header("connection").as_deref()), (400, Some("close")));
    assert!(r.text().contains("The plain HTTP request was sent to HTTPS port."), "{}", r.text());
    let out = Command::new(&curl)
        .args(["-sS", "--max-time", "20"])
        .arg(format!("http://127.0.0.1:{}/", h.tls.port()))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("400 Bad Request"), "{out:?}");
    // Each logged as a refused request.
    let lines = wait_until(DEADLINE, "two records", || {
        let l = h.access();
        (l.len() == 2).then_some(l)
    });
    assert!(lines[0].contains("\"GET /page HTTP/1.1\" 400 - - -"), "{lines:?}");
}

#[test]
fn sessions_end_with_close_notify() {
    let h = Https::serving("-F", "[http]\nkeepalive_timeout = \"1s\"\n", &[("a.example", "")]);
    let config = client_config(&h.site.read("conf/ca.pem"));
    // After an answer that says Connection: close.
    let mut s = tls_connect(h.tls, "a.example", &config);
    let r = tls_request(&mut s, "a.example", "/", true).unwrap();
    assert_eq!(r.status, 200);
    let mut rest = Vec::new();
    // rustls reads Ok(0) only after a close_notify; a bare TCP close is an error.
    s.read_to_end(&mut rest).expect("a close_notify, then the end");
    assert!(rest.is_empty());
    // At the keep-alive timeout.
    let mut s = tls_connect(h.tls, "a.example", &config);
    assert_eq!(tls_request(&mut s, "a.example", "/", false).unwrap().status, 200);
    let t = Instant::now();
    s.read_to_end(&mut rest).expect("a close_notify at the keep-alive timeout");
    assert!(t.elapsed() < CLOSE_WITHIN, "closed after {:?}", t.elapsed());
}

/// A worker under `SCHED_BATCH` takes the normal policy when a TLS handshake
/// begins, keeps it while handshakes come (a second after the last), and goes back
/// once none came for a second, its connections still open.
#[test]
fn a_worker_leaves_sched_batch_while_handshakes_come() {
    const SCHED_OTHER: u32 = 0;
    const SCHED_BATCH: u32 = 3;
    let h = Https::serving("-F", "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 3\n", &[("a.example", "")]);
    let workers = n_children(h.pika().pid, 2);
    let policies = || workers.iter().map(|&w| sched_policy(w)).collect::<Vec<_>>();
    let all_batch = || (policies() == [SCHED_BATCH; 2]).then_some(());
    wait_until(DEADLINE, "both workers under SCHED_BATCH", all_batch);
    // A handshake begun (its first byte, for which the accept waits) and left there.
    let mut c = TcpStream::connect(h.tls).unwrap();
    c.write_all(&[0x16]).unwrap();
    wait_until(DEADLINE, "the worker with the handshake under the normal policy", || {
        (policies().iter().filter(|&&p| p == SCHED_OTHER).count() == 1).then_some(())
    });
    drop(c);
    wait_until(DEADLINE, "SCHED_BATCH again a second after the connection closed", all_batch);
    // Whole handshakes: right after one the worker is still under the normal policy
    // (it goes back no sooner than a second after its last handshake ended; a look
    // that came later than that, the machine busy, is tried afresh).
    let config = client_config(&h.site.read("conf/ca.pem"));
    let mut open = Vec::new();
    let normal_right_after = (0..5).any(|_| {
        let t = Instant::now();
        let mut s = tls_connect(h.tls, "a.example", &config);
        assert_eq!(tls_request(&mut s, "a.example", "/", false).unwrap().status, 200);
        let normal = policies().contains(&SCHED_OTHER);
        open.push(s);
        if t.elapsed() < Duration::from_millis(900) {
            assert!(normal, "the worker back under SCHED_BATCH as its handshake ended: {:?}", policies());
            return true;
        }
        false
    });
    assert!(normal_right_after, "no handshake and look within 900 ms in five tries");
    wait_until(DEADLINE, "SCHED_BATCH again a second after the last handshake, its connections open", all_batch);
    drop(open);
}

/// A ClientHello as a real client sends it.
fn client_hello(config: &Arc<ClientConfig>) -> Vec<u8> {
    let mut c = ClientConnection::new(config.clone(), ServerName::try_from("a.example").unwrap()).unwrap();
    let mut hello = Vec::new();
    c.write_tls(&mut hello).unwrap();
    hello
}

#[test]
fn hostile_handshakes_leave_the_pool_serving() {
    let Some(curl) = need_tool("curl") else { return };
    let pool = "[workers]\nstart = 4\nmin_spare = 1\nmax_spare = 4\nmax = 4\n[http]\nheader_timeout = \"4s\"\n";
    let h = Https::serving("-F", pool, &[("a.example", "")]);
    let config = client_config(&h.site.read("conf/ca.pem"));
    let hello = client_hello(&config);
    let tls = h.tls;
    let stop = Arc::new(AtomicBool::new(false));
    // 2 x workers.max slowloris handshakes: a ClientHello, a byte every 1.5 s.
    let trickle: Vec<_> = (0..8)
        .map(|_| {
            let (stop, hello) = (stop.clone(), hello.clone());
            std::thread::spawn(move || {
                let Ok(mut s) = TcpStream::connect(tls) else { return };
                for b in hello {
                    if stop.load(Ordering::Relaxed) || s.write_all(&[b]).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(1500));
                }
            })
        })
        .collect();
    // As many that connect and say nothing.
    let silent: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(tls).unwrap()).collect();
    // Garbage instead of a ClientHello: closed at once.
    for i in 0..8u8 {
        let mut s = connect(tls);
        s.write_all(&[i, 0xff, 0x13, 0x37, b'\n']).unwrap();
        let t = Instant::now();
        let mut buf = [0u8; 64];
        match s.read(&mut buf) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("garbage was answered: {other:?}"),
        }
        assert!(t.elapsed() < CLOSE_WITHIN, "garbage held for {:?}", t.elapsed());
    }
    // Plain HTTP on the TLS port: 400.
    for _ in 0..4 {
        assert_eq!(raw(tls, b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n").status, 400);
    }
    std::thread::sleep(Duration::from_millis(1500));
    let mut waits = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        let mut s = tls_connect(tls, "a.example", &config);
        assert_eq!(tls_request(&mut s, "a.example", "/", true).unwrap().status, 200);
        let waited = t.elapsed();
        assert!(waited < FLOODED_BOUND, "a real client waited {waited:?}");
        waits.push(waited);
    }
    eprintln!("flooded TLS pool: a client's request (handshake included) took {waits:?}");
    let out = h.curl(&curl, "a.example", "/", &[]);
    assert!(out.status.success(), "curl: {}", String::from_utf8_lossy(&out.stderr));
    let log = h.site.error_log();
    assert!(!log.contains("reached workers.max"), "hostile handshakes took workers:\n{log}");
    // One info line per failure, none an error.
    assert_eq!(log.matches("failed: not TLS (first byte 0x").count(), 8, "{log}");
    let slow = wait_until(DEADLINE, "the slow handshakes cut at header_timeout", || {
        let log = h.site.error_log();
        (log.matches("failed: not done within header_timeout (4s)").count() >= 8).then_some(log)
    });
    for l in slow.lines().filter(|l| l.contains("TLS handshake")) {
        assert!(l.contains("[info]"), "{l}");
    }
    stop.store(true, Ordering::Relaxed);
    drop(silent);
    for t in trickle {
        t.join().unwrap();
    }
}

#[test]
fn a_renewed_certificate_is_served_after_reload_with_no_failed_request() {
    let Some(curl) = need_tool("curl") else { return };
    let Some(openssl) = need_tool("openssl") else { return };
    let h = Https::serving("-F", "[workers]\nstart = 3\nmin_spare = 2\nmax_spare = 6\n", &[("a.example", "")]);
    let served = |h: &Https| first_pem(&h.s_client(&openssl, &["-servername", "a.example"], b""));
    assert_eq!(served(&h), first_pem(&h.site.read("conf/a.example.pem")));
    let stop = Arc::new(AtomicBool::new(false));
    let ok = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let h = Arc::new(h);
    let mut loops = Vec::new();
    // curl: three requests over one kept-alive connection, again and again.
    {
        let (stop, ok, failures, h, curl) = (stop.clone(), ok.clone(), failures.clone(), h.clone(), curl.clone());
        loops.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let port = h.tls.port();
                let url = format!("https://a.example:{port}/");
                let out = h.curl(
                    &curl,
                    "a.example",
                    "/",
                    &["-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null", "-w", "%{http_code}\\n", &url, &url],
                );
                let codes = String::from_utf8_lossy(&out.stdout).into_owned();
                if out.status.success() && codes == "200\n200\n200\n" {
                    ok.fetch_add(3, Ordering::Relaxed);
                } else {
                    failures.lock().unwrap().push(format!("curl: {codes:?} {}", String::from_utf8_lossy(&out.stderr)));
                }
            }
        }));
    }
    // A new TLS connection per request, from this process.
    for _ in 0..2 {
        let (stop, ok, failures, tls) = (stop.clone(), ok.clone(), failures.clone(), h.tls);
        let config = client_config(&h.site.read("conf/ca.pem"));
        loops.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mut s = tls_connect(tls, "a.example", &config);
                match tls_request(&mut s, "a.example", "/", true) {
                    Ok(r) if r.status == 200 => {
                        ok.fetch_add(1, Ordering::Relaxed);
                    }
                    other => failures.lock().unwrap().push(format!("rustls: {other:?}")),
                }
            }
        }));
    }
    wait_until(DEADLINE, "the client loops to run", || (ok.load(Ordering::Relaxed) > 20).then_some(()));
    // The renewal: a new certificate and key, then a reload.
    let new = h.cert("a.example", &["a.example"]);
    h.pika().signal(libc::SIGHUP);
    wait_until(DEADLINE, "the new certificate to be served", || (served(&h) == new.pems[0].trim()).then_some(()));
    let status = |site: &Site| site.status();
    wait_until(DEADLINE, "the old generation gone", || (field(&status(&h.site), "old_generation")? == 0).then_some(()));
    assert_eq!(served(&h), new.pems[0].trim(), "every worker serves the renewed certificate");
    // A renewal gone wrong: a certificate without its key. The reload fails and the
    // renewed certificate keeps being served.
    let key = h.site.read("conf/a.example.key");
    h.cert("a.example", &["a.example"]);
    h.site.write("conf/a.example.key", key);
    h.pika().signal(libc::SIGHUP);
    let line = wait_until(DEADLINE, "the reload to fail", || {
        h.site.error_log().lines().find(|l| l.contains("reload failed")).map(str::to_string)
    });
    assert!(line.contains("a.example.key: the key does not match the certificate in "), "{line}");
    let before = ok.load(Ordering::Relaxed);
    wait_until(DEADLINE, "more requests", || (ok.load(Ordering::Relaxed) > before + 20).then_some(()));
    assert_eq!(served(&h), new.pems[0].trim(), "the old config serves");
    stop.store(true, Ordering::Relaxed);
    for l in loops {
        l.join().unwrap();
    }
    let failures = failures.lock().unwrap();
    assert!(failures.is_empty(), "{} failed, e.g. {:?}", failures.len(), &failures[..failures.len().min(3)]);
    eprintln!("{} requests over the reloads, none failed", ok.load(Ordering::Relaxed));
}

#[test]
fn a_retiring_worker_keeps_its_tls_connections_and_ends_them_cleanly() {
    let rest = "[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 4\n[http]\nkeepalive_timeout = \"60s\"\n";
    let h = Https::serving("-F", rest, &[("a.example", "")]);
    let config = client_config(&h.site.read("conf/ca.pem"));
    let mut tls = tls_connect(h.tls, "a.example", &config);
    assert_eq!(tls_request(&mut tls, "a.example", "/", false).unwrap().status, 200);
    let mut plain = connect(h.plain);
    plain.write_all(b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n").unwrap();
    assert_eq!(read_response(&mut plain, false).unwrap().status, 200);
    h.pika().signal(libc::SIGHUP);
    // The TLS connection stays with its worker, which ends it with close_notify
    // between requests; the plain one is handed over and keeps being served.
    let mut rest = Vec::new();
    tls.get_mut().set_read_timeout(Some(DEADLINE)).unwrap();
    tls.read_to_end(&mut rest).expect("a clean end of the TLS session");
    wait_until(DEADLINE, "the old generation gone", || (field(&h.site.status(), "old_generation")? == 0).then_some(()));
    plain.write_all(b"GET / HTTP/1.1\r\nHost: a.example\r\n\r\n").unwrap();
    let r = read_response(&mut plain, false).expect("the plain connection, handed over");
    assert_eq!((r.status, r.header("connection")), (200, None));
    let log = h.site.error_log();
    assert!(!log.contains("handover: "), "{log}");
    // The master's dummy connections went to the plain listener: no handshake failed.
    assert!(!log.contains("TLS handshake"), "{log}");
}

#[test]
fn with_tls_listeners_only_workers_retire_and_reload_with_no_handshake_in_the_log() {
    let mut h = Https::new();
    h.cert("a", &["a.example"]);
    // Four workers where at most two idle are wanted: the master retires the others,
    // one a tick, through the pipe of death.
    let workers = "[workers]\nstart = 4\nmin_spare = 1\nmax_spare = 2\n";
    h.config("{ addr = \"127.0.0.1:0\", tls = true }", &format!("{workers}{}", vhost("a.example", Some("a"), "")));
    let pid = h.start("-F").pid;
    wait_until(DEADLINE, "the pool to shrink to two", || (field(&h.site.status(), "workers")? == 2).then_some(()));
    let before = children_of(pid);
    h.pika().signal(libc::SIGHUP);
    wait_until(DEADLINE, "the new generation alone", || {
        let s = h.site.status();
        (field(&s, "generation")? == 1 && field(&s, "old_generation")? == 0 && field(&s, "workers")? >= 1).then_some(())
    });
    assert!(children_of(pid).iter().all(|c| !before.contains(c)), "the old worker left");
    let config = client_config(&h.site.read("conf/ca.pem"));
    let mut s = tls_connect(h.tls, "a.example", &config);
    assert_eq!(tls_request(&mut s, "a.example", "/", true).unwrap().status, 200);
    // No dummy connection reached a TLS port: no handshake failed, nothing was refused.
    let log = h.site.error_log();
    assert!(!log.contains("TLS handshake"), "{log}");
    let lines = wait_until(DEADLINE, "the request's record", || {
        let l = h.access();
        (!l.is_empty()).then_some(l)
    });
    // (A dummy connection refused on the TLS port would have been logged before it.)
    assert_eq!(lines.len(), 1, "{lines:?}");
}

#[test]
fn single_process_mode_serves_tls() {
    let Some(curl) = need_tool("curl") else { return };
    let h = Https::serving("-X", "", &[("a.example", "")]);
    let out = h.curl(&curl, "a.example", "/", &["-o", "/dev/null", "-w", "%{http_code}"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200", "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn behind_a_balancer_the_proxy_header_comes_first_then_the_handshake() {
    let mut h = Https::new();
    h.cert("a", &["a.example"]);
    h.config("{ addr = \"127.0.0.1:0\", tls = true, proxy_protocol = true }", &vhost("a.example", Some("a"), ""));
    h.start("-F");
    let config = client_config(&h.site.read("conf/ca.pem"));
    // The header and the ClientHello in one write (what a worker reads past the header
    // is the handshake's start), then the header alone before the handshake.
    for (i, one_write) in [(1, true), (2, false)] {
        let mut c = ClientConnection::new(config.clone(), ServerName::try_from("a.example").unwrap()).unwrap();
        let mut first = format!("PROXY TCP4 192.0.2.{i} 127.0.0.1 40000 443\r\n").into_bytes();
        let mut tcp = connect(h.tls);
        if !one_write {
            tcp.write_all(&first).unwrap();
            first.clear();
        }
        c.write_tls(&mut first).unwrap();
        tcp.write_all(&first).unwrap();
        let mut s = StreamOwned::new(c, tcp);
        let r = tls_request(&mut s, "a.example", "/", true).unwrap();
        assert_eq!(r.status, 200);
    }
    let lines = wait_until(DEADLINE, "two records", || {
        let l = h.access();
        (l.len() == 2).then_some(l)
    });
    for (i, line) in lines.iter().enumerate() {
        assert!(line.starts_with(&format!("192.0.2.{} \"GET / HTTP/1.1\" 200 TLSv1.3 ", i + 1)), "{lines:?}");
    }
}

#[test]
fn a_head_that_comes_in_pieces_waits_decrypted_for_the_rest() {
    let h = Https::serving("-F", "", &[("a.example", "")]);
    let config = client_config(&h.site.read("conf/ca.pem"));
    let mut s = tls_connect(h.tls, "a.example", &config);
    assert_eq!(tls_request(&mut s, "a.example", "/", false).unwrap().status, 200);
    // Half a head, in its own record: the worker keeps it (decrypted) and waits.
    s.write_all(b"GET /index.html HTTP/1.1\r\nHo").unwrap();
    s.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    s.write_all(b"st: a.example\r\n\r\n").unwrap();
    let r = read_response(&mut s, false).expect("the answer to the whole head");
    assert_eq!((r.status, r.text()), (200, h.site.read("htdocs/index.html")));
}

#[test]
fn workers_that_are_nobody_in_a_chroot_serve_with_keys_only_root_can_read() {
    use std::os::unix::fs::PermissionsExt;
    let Some(openssl) = need_tool("openssl") else { return };
    let mut h = Https::new();
    // The certificate and key outside the site (the workers' chroot), in a folder
    // only root may enter, the key root's alone.
    let keys = tempfile::tempdir().unwrap();
    let issue = |h: &Https| {
        let made = crate::tls::test_certs::leaf(&["a.example"], -1, 90, Some(&h.root));
        made.write(keys.path(), "a");
        std::fs::set_permissions(keys.path().join("a.key"), std::fs::Permissions::from_mode(0o600)).unwrap();
        made
    };
    let first = issue(&h);
    std::fs::set_permissions(keys.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(h.site.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let k = keys.path().display();
    let server = "user = \"nobody\"\nchroot = \".\"\n[workers]\nstart = 2\nmin_spare = 1\nmax_spare = 3\n";
    let tls = format!("tls_cert = \"{k}/a.pem\"\ntls_key = \"{k}/a.key\"\n");
    h.config(BOTH, &format!("{server}{}", vhost("a.example", None, &tls)));
    let pid = h.start("-F").pid;
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap().uid.as_raw().to_string();
    let jail = std::fs::canonicalize(h.site.dir.path()).unwrap();
    for w in n_children(pid, 2) {
        let status = std::fs::read_to_string(format!("/proc/{w}/status")).unwrap();
        let uid = status.lines().find_map(|l| l.strip_prefix("Uid:")).unwrap();
        assert_eq!(uid.split_whitespace().next(), Some(nobody.as_str()), "worker {w}: {uid}");
        assert_eq!(std::fs::read_link(format!("/proc/{w}/root")).unwrap(), jail, "worker {w}");
    }
    let served = |h: &Https| {
        let out = h.s_client(
            &openssl,
            &["-servername", "a.example"],
            b"GET / HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n",
        );
        assert!(out.contains("HTTP/1.1 200 OK") && out.contains("Verify return code: 0 (ok)"), "{out}");
        first_pem(&out)
    };
    assert_eq!(served(&h), first.pems[0].trim());
    // A renewal, root's alone again: the master reads it on reload, as root.
    let new = issue(&h);
    h.pika().signal(libc::SIGHUP);
    wait_until(DEADLINE, "the new generation alone", || {
        let s = h.site.status();
        (field(&s, "generation")? == 1 && field(&s, "old_generation")? == 0).then_some(())
    });
    assert_eq!(served(&h), new.pems[0].trim());
    assert!(!h.site.error_log().contains("reload failed"), "{}", h.site.error_log());
}

#[test]
fn a_file_truncated_under_an_https_answer_cuts_it_and_the_worker_lives_on() {
    // Over TLS a worker reads the file's bytes itself (to seal them): from the mapping
    // of a small cached file (copied by the kernel, so a page past the new end is an
    // error, not SIGBUS), with pread for a large one. Both cached and trusted for a
    // minute, so the truncation is seen only when the bytes are read. -X: one process,
    // so a signal would end the server.
    let mut h = Https::new();
    h.cert("a.example", &["a.example"]);
    h.site.write("htdocs/small.bin", vec![b's'; 20_000]);
    h.site.write("htdocs/large.bin", vec![b'l'; 100_000]);
    h.config(BOTH, &format!("[http]\nfile_check_interval = \"60s\"\n{}", vhost("a.example", Some("a.example"), "")));
    h.start("-X");
    let client = client_config(&h.site.read("conf/ca.pem"));
    let fetch = |path: &str, extra: &str| -> std::io::Result<Resp> {
        let mut s = tls_connect(h.tls, "a.example", &client);
        let req = format!("GET {path} HTTP/1.1\r\nHost: a.example\r\n{extra}Connection: close\r\n\r\n");
        s.write_all(req.as_bytes())?;
        read_response(&mut s, false).ok_or_else(|| std::io::Error::other("no answer"))
    };
    for (name, len) in [("/small.bin", 20_000), ("/large.bin", 100_000)] {
        assert_eq!(fetch(name, "").unwrap().body.len(), len, "{name} whole first");
        std::fs::OpenOptions::new()
            .write(true)
            .open(h.site.path(&format!("htdocs{name}")))
            .unwrap()
            .set_len(0)
            .unwrap();
        // The head promised `len` bytes: the answer is cut short ...
        let cut = fetch(name, "");
        assert!(cut.as_ref().is_err() || cut.as_ref().unwrap().body.len() < len, "{name}: {cut:?}");
        // ... the process lives on, and the next answers see the file as it is now.
        let r = fetch(name, "").unwrap();
        assert_eq!((r.status, r.header("content-length").as_deref()), (200, Some("0")), "{name}");
        assert_eq!(fetch(name, "Range: bytes=0-99\r\n").unwrap().status, 416, "{name}");
    }
    assert!(alive(h.pika().pid), "one process served it all");
    let log = h.site.error_log();
    for name in ["/small.bin", "/large.bin"] {
        let said = log.lines().filter(|l| l.contains("shrank while it was sent") && l.contains(name)).count();
        assert_eq!(said, 1, "{name}, once:\n{log}");
    }
}

#[test]
fn an_echo_location_sends_request_bodies_back_chunked_over_tls() {
    use crate::locations::{assert_echoed_twice, echo_twice, varied};
    let h = Https::serving("-F", "", &[("a.example", "[[vhost.location]]\nexact = \"/echo\"\necho = true\n")]);
    let config = client_config(&h.site.read("conf/ca.pem"));
    let mut s = tls_connect(h.tls, "a.example", &config);
    // More than one TLS record each way.
    let first = varied(40_000);
    echo_twice(&mut s, "a.example", &first);
    let mut answers = Vec::new();
    // rustls reads to the end only after the server's close_notify.
    s.read_to_end(&mut answers).expect("the answers, then a close_notify");
    assert_echoed_twice(&answers, &first);
}
