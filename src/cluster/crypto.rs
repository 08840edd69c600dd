//! What the fleet stores in Redis is sealed: AES-256-GCM under a key derived with
//! HKDF-SHA256 from `cluster.key_file`, a secret every node has and Redis never sees.
//! Redis alone (a dump, a replica, a stolen backup) then holds no usable private key,
//! and a value moved to another Redis key does not open there: the key's name is the
//! associated data.
//!
//! A sealed value: a version byte, the 12-byte nonce (random per value), the
//! ciphertext, the 16-byte tag.

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use aws_lc_rs::hkdf;

/// The first byte of every sealed value: the format, so a later one can be told apart.
const VERSION: u8 = 1;
const TAG_LEN: usize = 16;
/// The HKDF salt and info: fixed, so every node derives the same key from the same file.
const SALT: &[u8] = b"pika cluster";
const INFO: &[u8] = b"pika cluster storage key v1";
/// The shortest secret taken: 32 bytes (`head -c 32 /dev/urandom`, or
/// `openssl rand -base64 32`, whose 44 characters carry as much).
pub const MIN_SECRET: usize = 32;

/// Why a value did not open.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OpenError {
    #[error("not a sealed value")]
    Format,
    #[error("does not open with this key_file (another fleet's, or altered)")]
    Key,
}

/// The fleet's sealing key.
pub struct Sealer {
    key: LessSafeKey,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer")
    }
}

impl Sealer {
    /// The key derived from the secret (the key file's bytes, surrounding white space
    /// left out, so a file written with a final newline derives the same key).
    pub fn new(secret: &[u8]) -> Result<Sealer, String> {
        let secret = secret.trim_ascii();
        if secret.len() < MIN_SECRET {
            return Err(format!("the key file holds {} bytes; at least {MIN_SECRET} are needed", secret.len()));
        }
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, SALT).extract(secret);
        let okm = prk.expand(&[INFO], &AES_256_GCM).map_err(|_| "HKDF failed".to_string())?;
        Ok(Sealer { key: LessSafeKey::new(UnboundKey::from(okm)) })
    }

    /// `plain` sealed for the Redis key `name`.
    pub fn seal(&self, name: &str, plain: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; NONCE_LEN];
        // aws-lc's random source does not fail on Linux; a nonce of zeros would
        // still be refused below by nothing, so fail loudly instead.
        aws_lc_rs::rand::fill(&mut nonce).expect("random bytes");
        let mut out = Vec::with_capacity(1 + NONCE_LEN + plain.len() + TAG_LEN);
        out.push(VERSION);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plain);
        let tag = self
            .key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(name.as_bytes()),
                &mut out[1 + NONCE_LEN..],
            )
            .expect("AES-GCM seals any length Redis holds");
        out.extend_from_slice(tag.as_ref());
        out
    }

    /// What `sealed` holds, if it was sealed for `name` with this key.
    pub fn open(&self, name: &str, sealed: &[u8]) -> Result<Vec<u8>, OpenError> {
        if sealed.len() < 1 + NONCE_LEN + TAG_LEN || sealed[0] != VERSION {
            return Err(OpenError::Format);
        }
        let nonce = Nonce::try_assume_unique_for_key(&sealed[1..1 + NONCE_LEN]).map_err(|_| OpenError::Format)?;
        let mut buf = sealed[1 + NONCE_LEN..].to_vec();
        let len =
            self.key.open_in_place(nonce, Aad::from(name.as_bytes()), &mut buf).map_err(|_| OpenError::Key)?.len();
        buf.truncate(len);
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn sealed_values_open_only_with_the_key_and_under_their_name() {
        let a = Sealer::new(SECRET).unwrap();
        let same = Sealer::new(&[SECRET, b"\n"].concat()).unwrap();
        let other = Sealer::new(b"another secret of thirty-two bytes!!").unwrap();
        let v = a.seal("pika:cert:a.example", b"-----BEGIN PRIVATE KEY-----");
        assert!(!v.windows(7).any(|w| w == b"PRIVATE"), "nothing in the clear");
        assert_eq!(same.open("pika:cert:a.example", &v).unwrap(), b"-----BEGIN PRIVATE KEY-----");
        assert_eq!(other.open("pika:cert:a.example", &v), Err(OpenError::Key));
        assert_eq!(a.open("pika:cert:b.example", &v), Err(OpenError::Key), "moved to another key");
        assert_ne!(a.seal("n", b"x"), a.seal("n", b"x"), "a fresh nonce each time");
        for i in 0..v.len() {
            let mut bad = v.clone();
            bad[i] ^= 1;
            assert!(a.open("pika:cert:a.example", &bad).is_err(), "flipped byte {i}");
        }
        assert_eq!(a.open("n", b"short"), Err(OpenError::Format));
        assert!(Sealer::new(b"too short").unwrap_err().contains("at least 32"));
    }
}
