//! What the ACME client is told: the `[acme]` section as the config resolved it
//! ([`Settings`], with an External Account Binding, [`Eab`]), the challenge types
//! pika answers ([`Challenge`]), and the defaults of its timeouts and roots.

use std::path::PathBuf;
use std::time::Duration;

/// `acme.order_timeout` when unset: how long one certificate may take, from the
/// first request of its order to the chain (the child's start to it for the first:
/// the directory and the account too). Let's Encrypt issues in seconds; each poll
/// gives up after two minutes, and two challenge types may be tried in turn.
pub const ORDER_TIMEOUT: Duration = Duration::from_secs(600);
/// `acme.request_timeout` when unset: one request to the CA, from the connect to
/// the last byte of its answer (certbot's ACME client waits 45 s). A CA that sends
/// a byte now and then never lets a read time out; this bounds the whole.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(45);

/// The `[acme]` section, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The CA's directory URL (`https://…`).
    pub directory: String,
    /// `mailto:` URLs for the account.
    pub contact: Vec<String>,
    /// Where the account key, the account URL and the certificates are kept
    /// (root's, 0700).
    pub state_dir: PathBuf,
    /// Renew this long before expiry; `None`: a third of the certificate's lifetime.
    pub renew_before: Option<u64>,
    /// The roots trusted for talking to the CA; `None`: the system's bundle.
    pub ca_roots: Option<PathBuf>,
    /// External Account Binding (RFC 8555 §7.3.4), for CAs that ask for one.
    pub eab: Option<Eab>,
    /// How long one certificate's order may take ([`ORDER_TIMEOUT`]); the master
    /// kills a child that reports nothing for longer.
    pub order_timeout: Duration,
    /// How long one request to the CA may take ([`REQUEST_TIMEOUT`]).
    pub request_timeout: Duration,
}

/// An External Account Binding: the key id and the MAC key the CA gave.
#[derive(Clone, PartialEq, Eq)]
pub struct Eab {
    pub kid: String,
    pub hmac_key: Vec<u8>,
}

impl std::fmt::Debug for Eab {
    /// The MAC key is a secret: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Eab {{ kid: {:?}, hmac_key: <{} bytes> }}", self.kid, self.hmac_key.len())
    }
}

/// The system's bundle of trusted roots (Debian's `ca-certificates`), used when
/// `ca_roots` is not set.
pub const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The challenge types pika answers, in the order it tries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Challenge {
    Http01,
    TlsAlpn01,
}

impl Challenge {
    /// The name in the protocol (`http-01`, `tls-alpn-01`).
    pub fn name(self) -> &'static str {
        match self {
            Challenge::Http01 => "http-01",
            Challenge::TlsAlpn01 => "tls-alpn-01",
        }
    }
}
