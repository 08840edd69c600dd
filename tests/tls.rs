//! HTTPS certificates: checked by `pika -t` and on reload, and shown on the status
//! page (HTTPS served to real clients: `https`).

use std::process::Command;

use crate::util::*;

// The unit tests' certificate maker, shared rather than copied.
#[path = "../src/tls/test_certs.rs"]
#[allow(dead_code)]
pub(crate) mod test_certs;
use test_certs::{ca, leaf};

fn provider() -> rustls::crypto::CryptoProvider {
    pika::tls::provider()
}

/// Points the site's vhost `a.example` at the certificate files `cert` and `key`
/// (under conf/); no TLS listener.
fn site_with<'s>(site: &'s Site, cert: &str, key: &str) -> &'s Site {
    site_with_extra(site, cert, key, "")
}

fn site_with_extra<'s>(site: &'s Site, cert: &str, key: &str, extra: &str) -> &'s Site {
    site.config(
        "",
        &format!(
            "{extra}\n[[vhost]]\nserver_names = [\"a.example\"]\nroot = \"htdocs\"\ntls_cert = \"conf/{cert}\"\ntls_key = \"conf/{key}\"\n"
        ),
    );
    site
}

fn config_test(site: &Site) -> (Option<i32>, String) {
    let out = Command::new(BIN).args(["-t", "-f"]).arg(site.path("conf/pika.toml")).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn config_test_names_the_file_and_the_reason_for_each_bad_certificate() {
    let site = Site::new();
    let conf = site.path("conf");
    let root = ca("Test Root", -10, 3650);
    leaf(&["a.example"], -1, 90, Some(&root)).write(&conf, "good");
    leaf(&["a.example"], -1, 90, None).write(&conf, "other");
    leaf(&["a.example"], -90, -1, None).write(&conf, "expired");
    leaf(&["a.example"], 1, 90, None).write(&conf, "future");
    leaf(&["b.example"], -1, 90, None).write(&conf, "b");
    leaf(&["a.example"], -1, 10, None).write(&conf, "soon");
    let good = site.read("conf/good.pem");
    let (server, issuer) = good.split_at(good.find("-----END CERTIFICATE-----").unwrap() + 26);
    site.write("conf/reversed.pem", format!("{issuer}{server}"));
    site.write("conf/wrong-issuer.pem", format!("{server}{}", ca("Another Root", -10, 3650).pem));
    let d = conf.display();
    let cases = [
        ("good.pem", "other.key", format!("{d}/other.key: the key does not match the certificate in {d}/good.pem")),
        ("reversed.pem", "good.key", format!("{d}/reversed.pem: the key matches certificate 2 of the chain")),
        (
            "wrong-issuer.pem",
            "good.key",
            format!("{d}/wrong-issuer.pem: certificate 1 of the chain was not issued by certificate 2"),
        ),
        ("expired.pem", "expired.key", format!("{d}/expired.pem: the certificate expired on ")),
        ("future.pem", "future.key", format!("{d}/future.pem: the certificate is not valid before ")),
        (
            "b.pem",
            "b.key",
            format!("{d}/b.pem: the certificate does not cover the server name \"a.example\" (it covers b.example)"),
        ),
        ("missing.pem", "good.key", format!("{d}/missing.pem: cannot read: No such file or directory")),
        ("good.key", "good.key", format!("{d}/good.key: no certificate found")),
        ("good.pem", "good.pem", format!("{d}/good.pem: no private key found")),
    ];
    for (cert, key, want) in cases {
        let (code, stderr) = config_test(site_with(&site, cert, key));
        assert_eq!(code, Some(1), "{cert} {key}: {stderr}");
        assert!(stderr.contains("pika.toml:") && stderr.contains(&want), "{cert} {key}: want {want:?} in {stderr}");
    }
    // Close to expiry: a warning, and the config is good.
    let (code, stderr) = config_test(site_with(&site, "soon.pem", "soon.key"));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("pika: warning: certificate ") && stderr.contains("soon.pem of a.example"), "{stderr}");
    // 10 days from its making, to the second: 9 or 10 whole days left when checked.
    assert!(stderr.contains("expires in 9 days (") || stderr.contains("expires in 10 days ("), "{stderr}");
}

#[test]
fn reload_reads_certificates_again_and_keeps_the_old_config_on_a_bad_one() {
    let site = Site::new();
    site_with(&site, "a.pem", "a.key");
    let conf = site.path("conf");
    leaf(&["a.example"], -1, 90, None).write(&conf, "a");
    let pika = Pika::start(&site, "-F");
    assert_eq!(get(pika.addr, "/").status, 200);
    // A renewal gone wrong: the new certificate does not go with the key.
    let key = site.read("conf/a.key");
    leaf(&["a.example"], -1, 90, None).write(&conf, "a");
    site.write("conf/a.key", key);
    pika.signal(libc::SIGHUP);
    let line = wait_until(DEADLINE, "the reload to fail", || {
        site.error_log().lines().find(|l| l.contains("reload failed")).map(str::to_string)
    });
    let d = conf.display();
    assert!(line.contains("still serving the previous configuration: "), "{line}");
    assert!(line.contains(&format!("{d}/a.key: the key does not match the certificate in {d}/a.pem")), "{line}");
    assert_eq!(get(pika.addr, "/").status, 200, "the old config serves");
    // Each other kind of bad renewal fails its reload the same way, naming the file.
    let good = |site: &Site| leaf(&["a.example"], -1, 90, None).write(&site.path("conf"), "a");
    for (i, (what, want)) in [
        ("an expired certificate", format!("{d}/a.pem: the certificate expired on ")),
        ("a missing key", format!("{d}/a.key: cannot read: No such file or directory")),
        (
            "a certificate for another name",
            format!("{d}/a.pem: the certificate does not cover the server name \"a.example\""),
        ),
        ("a chain in the wrong order", format!("{d}/a.pem: the key matches certificate 2 of the chain")),
    ]
    .into_iter()
    .enumerate()
    {
        match what {
            "an expired certificate" => leaf(&["a.example"], -90, -1, None).write(&conf, "a"),
            "a missing key" => {
                good(&site);
                std::fs::remove_file(site.path("conf/a.key")).unwrap();
            }
            "a certificate for another name" => leaf(&["b.example"], -1, 90, None).write(&conf, "a"),
            _ => {
                leaf(&["a.example"], -1, 90, Some(&ca("Renewal Root", -10, 3650))).write(&conf, "a");
                let pem = site.read("conf/a.pem");
                let (server, issuer) = pem.split_at(pem.find("-----END CERTIFICATE-----").unwrap() + 26);
                site.write("conf/a.pem", format!("{issuer}{server}"));
            }
        }
        pika.signal(libc::SIGHUP);
        let line = wait_until(DEADLINE, "the reload to fail", || {
            site.error_log().lines().filter(|l| l.contains("reload failed")).nth(i + 1).map(str::to_string)
        });
        assert!(line.contains(&want), "{what}: want {want:?} in {line}");
        assert_eq!(get(pika.addr, "/").status, 200, "{what}: the old config serves");
        assert_eq!(field(&site.status(), "generation"), Some(0), "{what}");
    }
    // The renewal done right: both files; the reload takes them.
    good(&site);
    pika.signal(libc::SIGHUP);
    wait_until(DEADLINE, "the reload", || site.error_log().contains("generation 1").then_some(()));
    assert_eq!(get(pika.addr, "/").status, 200);
}

#[test]
fn a_certificate_close_to_expiry_is_warned_about_at_start_and_after_a_reload_not_every_tick() {
    let site = Site::new();
    site_with(&site, "a.pem", "a.key");
    leaf(&["a.example"], -1, 10, None).write(&site.path("conf"), "a");
    let pika = Pika::start(&site, "-F");
    let warnings = |site: &Site| -> Vec<String> {
        site.error_log().lines().filter(|l| l.contains("a.pem of a.example expires in ")).map(str::to_string).collect()
    };
    let first = wait_until(DEADLINE, "the warning", || Some(warnings(&site)).filter(|w| !w.is_empty()));
    assert!(first[0].contains("[warn]") && first[0].contains("days ("), "{first:?}");
    assert!(first[0].contains("); renew it and reload"), "{first:?}");
    // The master ticks every second; the warning waits a day.
    wait_until(DEADLINE, "three more ticks", || (field(&site.status(), "uptime")? >= 4).then_some(()));
    assert_eq!(warnings(&site).len(), 1, "{}", site.error_log());
    // A reload looks again (a renewal may not have been the one expected).
    pika.signal(libc::SIGHUP);
    wait_until(DEADLINE, "the reload", || site.error_log().contains("generation 1").then_some(()));
    wait_until(DEADLINE, "the warning again", || (warnings(&site).len() == 2).then_some(()));
}

#[test]
fn server_status_shows_days_left_in_each_format() {
    let site = Site::new();
    site_with_extra(&site, "a.pem", "a.key", "[status]\nenabled = true\n");
    leaf(&["a.example"], -1, 30, None).write(&site.path("conf"), "a");
    let pika = Pika::start(&site, "-F");
    let file = site.path("conf/a.pem").display().to_string();
    // 30 days from its making, to the second: 29 or 30 whole days left.
    let days = |text: &str, before: &str| [29, 30].into_iter().find(|d| text.contains(&format!("{before}{d}")));
    let auto = get(pika.addr, "/server-status?auto").text();
    assert!(auto.contains("TLSCertificates: 1\n"), "{auto}");
    let d = days(&auto, "TLSMinDaysLeft: ").unwrap_or_else(|| panic!("{auto}"));
    assert!(auto.contains(&format!("TLSCertificate: {d} a.example 20")) && auto.contains(&file), "{auto}");
    let json = get(pika.addr, "/server-status?json").text();
    assert!(json.contains("\"certificates\":[{\"vhost\":\"a.example\",\"file\":"), "{json}");
    assert!(days(&json, "\"days_left\":").is_some(), "{json}");
    let html = get(pika.addr, "/server-status").text();
    assert!(html.contains("<h2>TLS certificates</h2>") && html.contains("<td>a.example</td>"), "{html}");
    assert!(days(&html, "<td>a.example</td><td>").is_some(), "{html}");
}
