//! What must hold of a certificate before pika serves it: the key matches, the chain
//! is in order, the names cover the vhost's `server_names`, and no certificate of the
//! chain is expired or not yet valid.
//!
//! The same checks run for `pika -t`, at start and on every reload, so a renewal gone
//! wrong is caught by the reload (which keeps the old config serving) and not by
//! clients. Each failure names the file and says what is wrong in words.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rustls::pki_types::{CertificateDer, ServerName};
use rustls::sign::CertifiedKey;

/// A certificate or key that cannot be served, and why.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("{}: cannot read: {source}", file.display())]
    Read { file: PathBuf, source: std::io::Error },
    #[error("{}: no certificate found (want PEM \"BEGIN CERTIFICATE\" blocks, the server's first)", file.display())]
    NoCertificate { file: PathBuf },
    #[error("{}: no private key found (want a PEM \"PRIVATE KEY\", \"EC PRIVATE KEY\" or \"RSA PRIVATE KEY\" block)", file.display())]
    NoKey { file: PathBuf },
    #[error("{}: {reason}", file.display())]
    Unusable { file: PathBuf, reason: String },
    #[error("{}: the key does not match the certificate in {}", key.display(), cert.display())]
    KeyMismatch { cert: PathBuf, key: PathBuf },
    #[error(
        "{}: the key matches certificate {} of the chain: the server's certificate must come first, then its issuers",
        file.display(), index + 1
    )]
    ServerNotFirst { file: PathBuf, index: usize },
    #[error(
        "{}: certificate {} of the chain was not issued by certificate {} (the chain must start with the server's certificate, each followed by its issuer)",
        file.display(), index + 1, index + 2
    )]
    ChainOrder { file: PathBuf, index: usize },
    #[error("{}: {} expired on {}", file.display(), which(*index), date(*when))]
    Expired { file: PathBuf, index: usize, when: i64 },
    #[error("{}: {} is not valid before {}", file.display(), which(*index), date(*when))]
    NotYetValid { file: PathBuf, index: usize, when: i64 },
    #[error("{}: the certificate does not cover the server name {name:?} (it covers {covers})", file.display())]
    NameNotCovered { file: PathBuf, name: String, covers: String },
}

impl CertError {
    /// The file at fault (for a key that does not match: the key).
    pub fn file(&self) -> &Path {
        match self {
            CertError::Read { file, .. }
            | CertError::NoCertificate { file }
            | CertError::NoKey { file }
            | CertError::Unusable { file, .. }
            | CertError::ServerNotFirst { file, .. }
            | CertError::ChainOrder { file, .. }
            | CertError::Expired { file, .. }
            | CertError::NotYetValid { file, .. }
            | CertError::NameNotCovered { file, .. } => file,
            CertError::KeyMismatch { key, .. } => key,
        }
    }
}

fn which(index: usize) -> String {
    if index == 0 { "the certificate".to_string() } else { format!("certificate {} of the chain", index + 1) }
}

/// A Unix time as `2027-03-01 12:00:00 UTC`.
pub fn date(unix: i64) -> String {
    match jiff::Timestamp::from_second(unix) {
        Ok(t) => t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string(),
        Err(_) => unix.to_string(),
    }
}

/// The validity period of one certificate, in Unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub not_before: i64,
    pub not_after: i64,
}

/// Checks a loaded chain and key; returns the server certificate's validity.
pub fn check(
    key: &CertifiedKey,
    cert_file: &Path,
    key_file: &Path,
    names: &[String],
    now: i64,
) -> Result<Validity, CertError> {
    let unusable = |reason: String| CertError::Unusable { file: cert_file.to_path_buf(), reason };
    let parsed = key
        .cert
        .iter()
        .enumerate()
        .map(|(i, der)| {
            webpki::EndEntityCert::try_from(der)
                .map_err(|e| unusable(format!("certificate {} of the chain cannot be parsed: {e}", i + 1)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    match key.keys_match() {
        Ok(()) => {}
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            // The usual mistake: the issuer's certificate pasted first.
            let spki = key.key.public_key();
            let at = parsed.iter().position(|c| spki.as_ref().is_some_and(|k| c.subject_public_key_info() == *k));
            return Err(match at {
                Some(index) => CertError::ServerNotFirst { file: cert_file.to_path_buf(), index },
                None => CertError::KeyMismatch { cert: cert_file.to_path_buf(), key: key_file.to_path_buf() },
            });
        }
        Err(e) => return Err(unusable(format!("cannot compare the key with the certificate: {e}"))),
    }
    for (index, pair) in parsed.windows(2).enumerate() {
        if pair[0].issuer() != pair[1].subject() {
            return Err(CertError::ChainOrder { file: cert_file.to_path_buf(), index });
        }
    }
    let mut server = None;
    for (index, der) in key.cert.iter().enumerate() {
        let v = validity(der)
            .ok_or_else(|| unusable(format!("certificate {} of the chain has no readable validity", index + 1)))?;
        if now > v.not_after {
            return Err(CertError::Expired { file: cert_file.to_path_buf(), index, when: v.not_after });
        }
        if now < v.not_before {
            return Err(CertError::NotYetValid { file: cert_file.to_path_buf(), index, when: v.not_before });
        }
        server.get_or_insert(v);
    }
    let leaf = &parsed[0];
    for name in names {
        if !covers(leaf, name) {
            let mut covered: Vec<&str> = leaf.valid_dns_names().collect();
            covered.dedup();
            let covers = if covered.is_empty() { "no DNS name".to_string() } else { covered.join(", ") };
            return Err(CertError::NameNotCovered { file: cert_file.to_path_buf(), name: name.clone(), covers });
        }
    }
    server.ok_or_else(|| unusable("the chain is empty".to_string()))
}

/// Whether the certificate is valid for a configured server name: an exact name as a
/// client would check it (a wildcard in the certificate covers one label), an IP
/// literal against the IP addresses it names, and a wildcard server name
/// (`*.example.com`) only by the same wildcard in the certificate.
fn covers(cert: &webpki::EndEntityCert<'_>, name: &str) -> bool {
    if name.starts_with("*.") {
        return cert.valid_dns_names().any(|n| n.eq_ignore_ascii_case(name));
    }
    let bare = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')).unwrap_or(name);
    let server_name = match bare.parse::<IpAddr>() {
        Ok(ip) => ServerName::IpAddress(ip.into()),
        Err(_) => match ServerName::try_from(bare) {
            Ok(n) => n,
            Err(_) => return false,
        },
    };
    cert.verify_is_valid_for_subject_name(&server_name).is_ok()
}

/// Reads `notBefore` and `notAfter` from a DER certificate (RFC 5280 §4.1):
/// Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { \[0\] version OPTIONAL,
/// serialNumber, signature, issuer, validity SEQUENCE { notBefore, notAfter } … } … }.
pub fn validity(der: &CertificateDer<'_>) -> Option<Validity> {
    let (tag, cert, _) = der_item(der)?;
    if tag != 0x30 {
        return None;
    }
    let (tag, mut tbs, _) = der_item(cert)?;
    if tag != 0x30 {
        return None;
    }
    if tbs.first() == Some(&0xa0) {
        tbs = der_item(tbs)?.2; // the version
    }
    for _ in 0..3 {
        tbs = der_item(tbs)?.2; // serial, signature algorithm, issuer
    }
    let (tag, mut validity, _) = der_item(tbs)?;
    if tag != 0x30 {
        return None;
    }
    let mut times = [0i64; 2];
    for t in &mut times {
        let (tag, value, rest) = der_item(validity)?;
        *t = der_time(tag, value)?;
        validity = rest;
    }
    Some(Validity { not_before: times[0], not_after: times[1] })
}

/// One DER item: (tag, contents, what follows).
fn der_item(bytes: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = bytes.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |acc, &b| (acc << 8) | b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((tag, &rest[..len], &rest[len..]))
}

/// UTCTime (`YYMMDDHHMMSSZ`, years 1950-2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`)
/// as Unix seconds.
fn der_time(tag: u8, value: &[u8]) -> Option<i64> {
    let digits = value.strip_suffix(b"Z")?;
    if !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let num = |s: &[u8]| s.iter().fold(0i64, |acc, &b| acc * 10 + i64::from(b - b'0'));
    let (year, rest) = match (tag, digits.len()) {
        (0x17, 12) => {
            let yy = num(&digits[..2]);
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, &digits[2..])
        }
        (0x18, 14) => (num(&digits[..4]), &digits[4..]),
        _ => return None,
    };
    let [month, day, hour, min, sec] = [0, 2, 4, 6, 8].map(|i| num(&rest[i..i + 2]));
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86400 + hour * 3600 + min * 60 + sec)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::test_certs::{Made, ca, leaf, now};

    fn run(m: &Made, names: &[&str]) -> Result<Validity, CertError> {
        let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        check(&m.certified_key(), Path::new("cert.pem"), Path::new("key.pem"), &names, now())
    }

    #[test]
    fn a_good_chain_passes_and_reports_its_validity() {
        let root = ca("Test Root", 0, 3650);
        let m = leaf(&["example.com", "*.example.org"], -1, 90, Some(&root));
        let v = run(&m, &["example.com", "www.example.org", "*.example.org"]).unwrap();
        assert_eq!(v.not_after - v.not_before, 91 * 86400);
        assert!((v.not_before - (now() - 86400)).abs() < 5, "{v:?}");
    }

    #[test]
    fn each_kind_of_bad_certificate_is_named() {
        let root = ca("Test Root", 0, 3650);
        let other = leaf(&["example.com"], -1, 90, None);
        let mut mismatched = leaf(&["example.com"], -1, 90, Some(&root));
        mismatched.key_der.clone_from(&other.key_der);
        let e = run(&mismatched, &["example.com"]).unwrap_err().to_string();
        assert_eq!(e, "key.pem: the key does not match the certificate in cert.pem");

        let mut reversed = leaf(&["example.com"], -1, 90, Some(&root));
        reversed.chain.reverse();
        let e = run(&reversed, &["example.com"]).unwrap_err().to_string();
        assert_eq!(
            e,
            "cert.pem: the key matches certificate 2 of the chain: the server's certificate must come first, then its issuers"
        );

        let mut wrong_issuer = leaf(&["example.com"], -1, 90, Some(&root));
        wrong_issuer.chain[1] = ca("Another Root", 0, 3650).der;
        let e = run(&wrong_issuer, &["example.com"]).unwrap_err().to_string();
        assert!(
            e.starts_with("cert.pem: certificate 1 of the chain was not issued by certificate 2 (the chain"),
            "{e}"
        );

        let expired = leaf(&["example.com"], -100, -10, Some(&root));
        let e = run(&expired, &["example.com"]).unwrap_err().to_string();
        assert!(e.starts_with("cert.pem: the certificate expired on 20") && e.ends_with(" UTC"), "{e}");

        let future = leaf(&["example.com"], 10, 100, Some(&root));
        let e = run(&future, &["example.com"]).unwrap_err().to_string();
        assert!(e.starts_with("cert.pem: the certificate is not valid before 20"), "{e}");

        let old_root = ca("Old Root", -3650, -1);
        let e = run(&leaf(&["example.com"], -1, 90, Some(&old_root)), &["example.com"]).unwrap_err().to_string();
        assert!(e.starts_with("cert.pem: certificate 2 of the chain expired on"), "{e}");

        let m = leaf(&["example.com", "www.example.com"], -1, 90, Some(&root));
        let e = run(&m, &["example.com", "example.net"]).unwrap_err().to_string();
        assert_eq!(
            e,
            "cert.pem: the certificate does not cover the server name \"example.net\" (it covers example.com, www.example.com)"
        );
        // A wildcard server name needs the same wildcard, not just a name under it.
        assert!(run(&m, &["*.example.com"]).is_err());
    }

    #[test]
    fn ip_server_names_are_checked_against_ip_sans() {
        let m = leaf(&["127.0.0.1", "::1", "localhost"], -1, 30, None);
        run(&m, &["127.0.0.1", "[::1]", "localhost"]).unwrap();
        assert!(run(&m, &["10.0.0.1"]).is_err());
    }

    #[test]
    fn der_times() {
        assert_eq!(der_time(0x17, b"700101000000Z"), Some(0));
        assert_eq!(der_time(0x17, b"491231235959Z"), Some(2_524_607_999));
        assert_eq!(der_time(0x18, b"20380119031408Z"), Some(2_147_483_648));
        assert_eq!(der_time(0x18, b"99991231235959Z"), Some(253_402_300_799));
        for bad in [&b"7001010000Z"[..], b"700101000000", b"701301000000Z", b"70010100000aZ"] {
            assert_eq!(der_time(0x17, bad), None, "{bad:?}");
        }
        assert_eq!(der_time(0x04, b"700101000000Z"), None);
        assert_eq!(date(1_700_000_000), "2023-11-14 22:13:20 UTC");
    }

    #[test]
    fn truncated_der_is_no_validity() {
        let m = leaf(&["example.com"], -1, 90, None);
        let der = m.chain[0].as_ref();
        for len in 0..der.len().min(300) {
            let _ = validity(&CertificateDer::from(&der[..len]));
        }
        assert!(validity(&CertificateDer::from(&der[..40])).is_none());
        assert!(validity(&m.chain[0]).is_some());
    }
}
