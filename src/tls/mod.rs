//! HTTPS with rustls: the certificates the master loads for the virtual hosts, the one
//! chosen for each handshake by SNI, pika's protocol policy, the names the access log
//! gives protocols and ciphers, and the hook through which an ACME CA's TLS-ALPN-01
//! validation gets its certificate ([`Validation`]). The session on each connection
//! is the request cycle's (`crate::serve::tls`).
//!
//! The master reads every certificate and key when it loads a config: at start (as
//! root, before the first fork, before workers drop privileges or chroot) and on each
//! reload. Workers inherit them in memory and never open a key file, so a key may be
//! readable by root alone and a chroot holds none. Every certificate is checked when
//! it is loaded ([`check`]): a bad one fails `pika -t`, the start, or the reload (which
//! keeps the old config serving).
//!
//! The crypto provider is aws-lc-rs: on this machine its server side of a full
//! ECDSA P-256 handshake took 98-106 µs (TLS 1.3) and 65-73 µs (TLS 1.2) against
//! ring's 116-125 µs and 94-96 µs, and aws-lc-sys builds with cargo and the C compiler
//! alone (no cmake, no bindgen); it also offers the X25519MLKEM768 key exchange.

pub mod check;
#[cfg(test)]
pub(crate) mod test_certs;
pub mod tickets;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, NoServerSessionStorage, ResolvesServerCert, ServerConfig};
use rustls::sign::CertifiedKey;
use rustls::{CipherSuite, ProtocolVersion};

pub use check::{CertError, Validity};
use tickets::{TicketKeys, Ticketer};

/// The one ALPN protocol pika speaks.
pub const ALPN_HTTP11: &[u8] = b"http/1.1";

/// rustls over aws-lc-rs with its default suites, which are already the modern list:
/// TLS 1.3's three AEAD suites, and for TLS 1.2 only ECDHE key exchange with AES-GCM or
/// ChaCha20-Poly1305 (no CBC, no RSA key exchange, no SHA-1 MACs).
pub fn provider() -> CryptoProvider {
    rustls::crypto::aws_lc_rs::default_provider()
}

/// One vhost's certificate chain and key, as the master loaded and checked them.
#[derive(Debug)]
pub struct VhostCert {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
    pub key: Arc<CertifiedKey>,
    /// The server certificate's validity.
    pub validity: Validity,
    /// A self-signed stand-in served until ACME brings the real one
    /// ([`crate::acme::store::placeholder`]).
    pub placeholder: bool,
}

/// Reads a PEM chain (the server's certificate first) and its key, and checks them
/// against the vhost's `names` at time `now` (Unix seconds).
pub fn load(cert_file: &Path, key_file: &Path, names: &[String], now: i64) -> Result<VhostCert, CertError> {
    let read = |file: &Path| std::fs::read(file).map_err(|source| CertError::Read { file: file.to_path_buf(), source });
    let bad_pem = |file: &Path, e: rustls::pki_types::pem::Error| CertError::Unusable {
        file: file.to_path_buf(),
        reason: format!("not a readable PEM file: {e}"),
    };
    let pem = read(cert_file)?;
    let chain =
        CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>().map_err(|e| bad_pem(cert_file, e))?;
    if chain.is_empty() {
        return Err(CertError::NoCertificate { file: cert_file.to_path_buf() });
    }
    let pem = read(key_file)?;
    let key = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => CertError::NoKey { file: key_file.to_path_buf() },
        e => bad_pem(key_file, e),
    })?;
    let signer = provider().key_provider.load_private_key(key).map_err(|e| CertError::Unusable {
        file: key_file.to_path_buf(),
        reason: format!("unusable private key: {e}"),
    })?;
    let key = CertifiedKey::new(chain, signer);
    let validity = check::check(&key, cert_file, key_file, names, now)?;
    Ok(VhostCert {
        cert_file: cert_file.to_path_buf(),
        key_file: key_file.to_path_buf(),
        key: Arc::new(key),
        validity,
        placeholder: false,
    })
}

/// The certificate for each handshake: the one of the vhost the SNI name selects
/// (matched as the Host header is, [`crate::http::host`]); the default certificate (the
/// first vhost's that has one) for a client without SNI, for a name no vhost has, or
/// for a vhost without a certificate.
#[derive(Debug)]
pub struct Certificates {
    /// Per vhost, in config order: its server names and its certificate.
    names: Vec<Vec<String>>,
    keys: Vec<Option<Arc<CertifiedKey>>>,
    default: Arc<CertifiedKey>,
}

impl Certificates {
    /// From each vhost's server names and certificate, in config order; `None` when
    /// no vhost has a certificate.
    pub fn new<'a>(vhosts: impl IntoIterator<Item = (&'a [String], Option<&'a VhostCert>)>) -> Option<Certificates> {
        let (names, keys): (Vec<Vec<String>>, Vec<Option<Arc<CertifiedKey>>>) =
            vhosts.into_iter().map(|(names, cert)| (names.to_vec(), cert.map(|c| c.key.clone()))).unzip();
        let default = keys.iter().flatten().next()?.clone();
        Some(Certificates { names, keys, default })
    }

    /// The certificate for an SNI name.
    pub fn for_name(&self, sni: Option<&str>) -> &Arc<CertifiedKey> {
        let Some(name) = sni else { return &self.default };
        let i = crate::http::host::select(&self.names, |names| names, Some(name.as_bytes()));
        self.keys.get(i).and_then(Option::as_ref).unwrap_or(&self.default)
    }
}

/// The ALPN protocol of an ACME CA's TLS-ALPN-01 validation (RFC 8737).
pub const ACME_TLS_1: &[u8] = b"acme-tls/1";

/// Whether a ClientHello is a TLS-ALPN-01 validation: it offers `acme-tls/1` (and,
/// RFC 8737 §3, nothing else).
pub fn is_validation<'a>(mut offered: impl Iterator<Item = &'a [u8]>) -> bool {
    offered.any(|p| p == ACME_TLS_1)
}

/// The certificate an ACME validation handshake for a name gets, if a challenge for
/// it is under way (the workers read it from the master's shared table:
/// `crate::acme::alpn::certificate`).
pub type Validation = fn(Option<&str>) -> Option<Arc<CertifiedKey>>;

/// The vhosts' certificates by SNI, and the validation certificates of ACME's
/// TLS-ALPN-01 challenges.
#[derive(Debug)]
struct Resolver {
    certs: Arc<Certificates>,
    validation: Validation,
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if hello.alpn().is_some_and(is_validation) {
            // An ACME CA checking a TLS-ALPN-01 challenge: its validation certificate
            // or none (the handshake fails, as RFC 8737 wants for unknown names).
            return (self.validation)(hello.server_name());
        }
        Some(self.certs.for_name(hello.server_name()).clone())
    }
}

/// The rustls server setup a worker uses: TLS 1.3 and 1.2, ALPN `http/1.1`, the
/// certificate by SNI, session tickets sealed with the shared [`TicketKeys`], and no
/// per-process session cache (it would resume on one worker in N).
pub fn server_config(
    certs: Arc<Certificates>,
    tickets: TicketKeys,
    validation: Validation,
) -> Result<Arc<ServerConfig>, rustls::Error> {
    let mut c = ServerConfig::builder_with_provider(Arc::new(provider()))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(Resolver { certs, validation }));
    // `acme-tls/1` only ever goes with the validation certificate (see `resolve`).
    c.alpn_protocols = vec![ALPN_HTTP11.to_vec(), ACME_TLS_1.to_vec()];
    c.ticketer = Arc::new(Ticketer::new(tickets));
    c.session_storage = Arc::new(NoServerSessionStorage {});
    // One TLS 1.3 ticket a handshake (rustls sends two by default): a resumed
    // handshake replaces the ticket it used, as OpenSSL does after a resumption and
    // Go and h2o do always. The second cost each resumed connection a ticket sealed
    // here and taken in by the client (HTTPS with a resumed handshake a connection:
    // 3,900 / 3,936 requests a second with one, 3,733 / 3,815 with two; server CPU
    // 142-143 against 150-155 µs a request).
    c.send_tls13_tickets = 1;
    Ok(Arc::new(c))
}

/// A protocol as Apache's `%{SSL_PROTOCOL}x` names it.
pub fn protocol_name(v: ProtocolVersion) -> &'static str {
    match v {
        ProtocolVersion::TLSv1_3 => "TLSv1.3",
        ProtocolVersion::TLSv1_2 => "TLSv1.2",
        _ => "unknown",
    }
}

/// A cipher suite as Apache's `%{SSL_CIPHER}x` names it (OpenSSL's names), so log
/// analysers that read Apache's TLS fields read pika's.
pub fn cipher_name(s: CipherSuite) -> &'static str {
    match s {
        CipherSuite::TLS13_AES_128_GCM_SHA256 => "TLS_AES_128_GCM_SHA256",
        CipherSuite::TLS13_AES_256_GCM_SHA384 => "TLS_AES_256_GCM_SHA384",
        CipherSuite::TLS13_CHACHA20_POLY1305_SHA256 => "TLS_CHACHA20_POLY1305_SHA256",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 => "ECDHE-ECDSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 => "ECDHE-ECDSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 => "ECDHE-ECDSA-CHACHA20-POLY1305",
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 => "ECDHE-RSA-AES128-GCM-SHA256",
        CipherSuite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 => "ECDHE-RSA-AES256-GCM-SHA384",
        CipherSuite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 => "ECDHE-RSA-CHACHA20-POLY1305",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::client::{ClientConfig, ClientConnection};
    use rustls::{HandshakeKind, RootCertStore, ServerConnection};
    use test_certs::{Made, leaf, now};

    /// Runs a handshake (and the tickets sent after it) between two in-memory ends.
    fn handshake(c: &mut ClientConnection, s: &mut ServerConnection) -> Result<(), rustls::Error> {
        let mut buf = Vec::new();
        for _ in 0..10 {
            buf.clear();
            while c.wants_write() {
                c.write_tls(&mut buf).unwrap();
            }
            let mut r = &buf[..];
            while !r.is_empty() {
                s.read_tls(&mut r).unwrap();
            }
            s.process_new_packets()?;
            buf.clear();
            while s.wants_write() {
                s.write_tls(&mut buf).unwrap();
            }
            let mut r = &buf[..];
            while !r.is_empty() {
                c.read_tls(&mut r).unwrap();
            }
            c.process_new_packets()?;
            if !c.is_handshaking() && !s.is_handshaking() && !s.wants_write() && !c.wants_write() {
                return Ok(());
            }
        }
        panic!("the handshake did not end");
    }

    fn client(trust: &Made, version: &'static rustls::SupportedProtocolVersion, sni: bool) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots.add(trust.chain[0].clone()).unwrap();
        let mut c = ClientConfig::builder_with_provider(Arc::new(provider()))
            .with_protocol_versions(&[version])
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        c.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        c.enable_sni = sni;
        Arc::new(c)
    }

    /// Two vhosts with certificates (`a.example` first: the default) and one without.
    fn certificates(dir: &Path) -> (Made, Made, Arc<Certificates>) {
        let (a, b) = (leaf(&["a.example"], -1, 30, None), leaf(&["b.example"], -1, 30, None));
        a.write(dir, "a");
        b.write(dir, "b");
        let vhost = |names: &[&str], cert: Option<&str>| {
            let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
            let cert = cert
                .map(|n| load(&dir.join(format!("{n}.pem")), &dir.join(format!("{n}.key")), &names, now()).unwrap());
            (names, cert)
        };
        let vhosts =
            [vhost(&["plain.example"], None), vhost(&["a.example"], Some("a")), vhost(&["b.example"], Some("b"))];
        let certs = Certificates::new(vhosts.iter().map(|(names, cert)| (&names[..], cert.as_ref())));
        (a, b, Arc::new(certs.unwrap()))
    }

    #[test]
    fn sni_picks_the_certificate_and_alpn_says_http11_in_both_versions() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, certs) = certificates(dir.path());
        let server = server_config(certs, TicketKeys::new(now() as u64).unwrap(), |_| None).unwrap();
        for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
            for (trust, name) in [(&b, "b.example"), (&a, "a.example")] {
                let mut c = ClientConnection::new(client(trust, version, true), name.try_into().unwrap()).unwrap();
                let mut s = ServerConnection::new(server.clone()).unwrap();
                handshake(&mut c, &mut s).unwrap_or_else(|e| panic!("{name} {version:?}: {e}"));
                assert_eq!(s.server_name(), Some(name));
                assert_eq!(s.alpn_protocol(), Some(ALPN_HTTP11));
                assert_eq!(s.protocol_version(), Some(version.version));
            }
            // Without SNI: the default certificate (the first vhost's that has one).
            let mut c = ClientConnection::new(client(&a, version, false), "a.example".try_into().unwrap()).unwrap();
            let mut s = ServerConnection::new(server.clone()).unwrap();
            handshake(&mut c, &mut s).unwrap();
            assert_eq!(s.server_name(), None);
            let mut c = ClientConnection::new(client(&b, version, false), "b.example".try_into().unwrap()).unwrap();
            let mut s = ServerConnection::new(server.clone()).unwrap();
            assert!(handshake(&mut c, &mut s).is_err(), "b.example's certificate without SNI");
        }
    }

    #[test]
    fn a_session_resumes_on_another_worker_with_the_same_ticket_keys() {
        let dir = tempfile::tempdir().unwrap();
        let (a, _, certs) = certificates(dir.path());
        let keys = TicketKeys::new(now() as u64).unwrap();
        // Two workers: each builds its own setup from the master's keys.
        let one = server_config(certs.clone(), keys.clone(), |_| None).unwrap();
        let two = server_config(certs.clone(), keys, |_| None).unwrap();
        let stranger = server_config(certs, TicketKeys::new(now() as u64).unwrap(), |_| None).unwrap();
        for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
            let config = client(&a, version, true);
            let connect = |server: &Arc<ServerConfig>| {
                let mut c = ClientConnection::new(config.clone(), "a.example".try_into().unwrap()).unwrap();
                let mut s = ServerConnection::new(server.clone()).unwrap();
                handshake(&mut c, &mut s).unwrap();
                s.handshake_kind()
            };
            assert_eq!(connect(&one), Some(HandshakeKind::Full), "{version:?}");
            assert_eq!(connect(&two), Some(HandshakeKind::Resumed), "{version:?}");
            assert_eq!(connect(&stranger), Some(HandshakeKind::Full), "{version:?}: a foreign ticket");
        }
    }

    #[test]
    fn every_suite_offered_has_a_log_name_and_only_aead_suites_are_offered() {
        let p = provider();
        for s in &p.cipher_suites {
            let name = cipher_name(s.suite());
            assert_ne!(name, "unknown", "{:?}", s.suite());
            assert!(name.contains("GCM") || name.contains("CHACHA20"), "{name}");
            assert!(name.starts_with("TLS_") || name.starts_with("ECDHE-"), "{name}");
        }
        assert_eq!(protocol_name(ProtocolVersion::TLSv1_3), "TLSv1.3");
        assert_eq!(protocol_name(ProtocolVersion::TLSv1_2), "TLSv1.2");
    }

    #[test]
    fn load_reads_pem_files_and_names_the_file_at_fault() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        leaf(&["example.com"], -1, 90, None).write(d, "good");
        let names = ["example.com".to_string()];
        let c = load(&d.join("good.pem"), &d.join("good.key"), &names, now()).unwrap();
        assert_eq!(c.key.cert.len(), 1);

        let e = load(&d.join("missing.pem"), &d.join("good.key"), &names, now()).unwrap_err().to_string();
        assert!(e.ends_with("missing.pem: cannot read: No such file or directory (os error 2)"), "{e}");
        // A key file given as the certificate, and the other way round.
        let e = load(&d.join("good.key"), &d.join("good.key"), &names, now()).unwrap_err().to_string();
        assert!(e.contains("good.key: no certificate found"), "{e}");
        let e = load(&d.join("good.pem"), &d.join("good.pem"), &names, now()).unwrap_err().to_string();
        assert!(e.contains("good.pem: no private key found"), "{e}");
        std::fs::write(d.join("junk.key"), "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n").unwrap();
        let e = load(&d.join("good.pem"), &d.join("junk.key"), &names, now()).unwrap_err().to_string();
        assert!(e.contains("junk.key: unusable private key"), "{e}");
        std::fs::write(d.join("cut.pem"), "-----BEGIN CERTIFICATE-----\nMIIB\n").unwrap();
        let e = load(&d.join("cut.pem"), &d.join("good.key"), &names, now()).unwrap_err().to_string();
        assert!(e.contains("cut.pem: not a readable PEM file"), "{e}");
    }
}
