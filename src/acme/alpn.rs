//! TLS-ALPN-01 (RFC 8737): the CA opens a TLS connection offering only the
//! `acme-tls/1` protocol, and the server answers with a self-signed certificate for
//! the name that carries the key authorization's digest in a critical
//! `acmeIdentifier` extension. The ACME child makes the certificate and puts it in
//! the shared table ([`super::challenges`]); the worker's certificate resolver
//! ([`crate::tls::Certificates`]) picks it during the handshake.

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;

use super::challenges::{Kind, Publish};

/// The ALPN protocol of the validation handshake.
pub const PROTOCOL: &[u8] = crate::tls::ACME_TLS_1;

/// The validation certificate and its key for `name`, as the table holds them: the
/// certificate's length (2 bytes), the certificate (DER), the key (PKCS#8 DER).
pub fn validation_entry(name: &str, key_authorization: &str) -> Result<Vec<u8>, String> {
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, key_authorization.as_bytes());
    let mut params = rcgen::CertificateParams::new(vec![name.to_string()]).map_err(|e| e.to_string())?;
    params.custom_extensions.push(rcgen::CustomExtension::new_acme_identifier(digest.as_ref()));
    let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
    let der = cert.der();
    let len = u16::try_from(der.len()).map_err(|_| "validation certificate too large".to_string())?;
    Ok([&len.to_be_bytes()[..], der.as_ref(), &key.serialize_der()].concat())
}

/// Publishes the validation certificate for `name`.
pub fn publish(board: &dyn Publish, name: &str, key_authorization: &str) -> Result<(), String> {
    let entry = validation_entry(name, key_authorization)?;
    if board.put(Kind::TlsAlpn01, name.as_bytes(), &entry) {
        Ok(())
    } else {
        Err("the table of challenges is full".into())
    }
}

/// The validation certificate for a handshake that offered `acme-tls/1` for `sni`,
/// if a challenge for that name is under way.
pub fn certificate(sni: Option<&str>) -> Option<Arc<CertifiedKey>> {
    let entry = super::challenges::shared()?.find(Kind::TlsAlpn01, sni?.as_bytes())?;
    parse(&entry)
}

fn parse(entry: &[u8]) -> Option<Arc<CertifiedKey>> {
    let len = u16::from_be_bytes([*entry.first()?, *entry.get(1)?]) as usize;
    let cert = CertificateDer::from(entry.get(2..2 + len)?.to_vec());
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(entry.get(2 + len..)?.to_vec()));
    let signer = rustls::crypto::aws_lc_rs::sign::any_supported_type(&key).ok()?;
    Some(Arc::new(CertifiedKey::new(vec![cert], signer)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::is_validation;

    #[test]
    fn the_certificate_names_the_host_and_carries_the_digest() {
        let entry = validation_entry("a.example", "tok.thumb").unwrap();
        let key = parse(&entry).unwrap();
        let der = key.cert[0].as_ref();
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, b"tok.thumb");
        // id-pe-acmeIdentifier (1.3.6.1.5.5.7.1.31), critical, OCTET STRING of the digest.
        let oid = [0x06, 0x08, 0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x01, 0x1f];
        let at = der.windows(oid.len()).position(|w| w == oid).expect("acmeIdentifier");
        let rest = &der[at + oid.len()..];
        assert_eq!(&rest[..3], &[0x01, 0x01, 0xff], "critical");
        assert!(rest.windows(32).any(|w| w == digest.as_ref()));
        // The name as a dNSName in the subjectAltName ([2] IA5String).
        assert!(der.windows(11).any(|w| w == b"\x82\x09a.example"));
        assert!(parse(&entry[..10]).is_none());
        assert!(is_validation([&b"acme-tls/1"[..]].into_iter()));
        assert!(!is_validation([&b"http/1.1"[..]].into_iter()));
    }
}
