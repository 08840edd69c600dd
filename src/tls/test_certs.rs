//! Certificates made for the unit tests (rcgen, ECDSA P-256 as pika is benched with).

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::sign::CertifiedKey;

pub fn now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64
}

fn days(d: i64) -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc() + time::Duration::days(d)
}

/// A certificate authority valid from `from` to `to` days from now.
pub struct Ca {
    pub params: rcgen::CertificateParams,
    pub key: rcgen::KeyPair,
    pub der: CertificateDer<'static>,
    pub pem: String,
}

pub fn ca(name: &str, from: i64, to: i64) -> Ca {
    let mut params = rcgen::CertificateParams::new(Vec::new()).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.not_before = days(from);
    params.not_after = days(to);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    Ca { der: cert.der().clone(), pem: cert.pem(), params, key }
}

/// A server certificate chain (the certificate, then its issuer if any) and its key.
pub struct Made {
    pub chain: Vec<CertificateDer<'static>>,
    pub pems: Vec<String>,
    pub key_der: Vec<u8>,
    pub key_pem: String,
}

/// A server certificate for `names`, valid from `from` to `to` days from now, issued
/// by `issuer` (self-signed without one).
pub fn leaf(names: &[&str], from: i64, to: i64, issuer: Option<&Ca>) -> Made {
    let mut params = rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, names.first().copied().unwrap_or("pika test"));
    params.not_before = days(from);
    params.not_after = days(to);
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = match issuer {
        Some(ca) => params.signed_by(&key, &rcgen::Issuer::from_params(&ca.params, &ca.key)).unwrap(),
        None => params.self_signed(&key).unwrap(),
    };
    let mut made = Made {
        chain: vec![cert.der().clone()],
        pems: vec![cert.pem()],
        key_der: key.serialize_der(),
        key_pem: key.serialize_pem(),
    };
    if let Some(ca) = issuer {
        made.chain.push(ca.der.clone());
        made.pems.push(ca.pem.clone());
    }
    made
}

impl Made {
    pub fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()))
    }

    pub fn certified_key(&self) -> CertifiedKey {
        let key = super::provider().key_provider.load_private_key(self.key()).unwrap();
        CertifiedKey::new(self.chain.clone(), key)
    }

    /// Writes the chain to `name.pem` and the key to `name.key` in `dir`.
    pub fn write(&self, dir: &std::path::Path, name: &str) {
        std::fs::write(dir.join(format!("{name}.pem")), self.pems.concat()).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), &self.key_pem).unwrap();
    }
}
