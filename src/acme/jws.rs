//! The account key and the signed requests of RFC 8555 §6.2: JWS in the flattened
//! JSON form, ES256 (ECDSA P-256 with SHA-256, the signature as `r || s`), the key as
//! a JWK on the first request and as the account URL (`kid`) after; and the JWK
//! thumbprint (RFC 7638) that key authorizations end with.

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use serde_json::{Value, json};

use super::b64;

/// An account key (ECDSA P-256).
pub struct AccountKey {
    pair: EcdsaKeyPair,
    rng: SystemRandom,
}

impl std::fmt::Debug for AccountKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AccountKey {{ thumbprint: {} }}", self.thumbprint())
    }
}

/// How a request names its signer.
pub enum Signer<'a> {
    /// The public key itself: new accounts (and revocations by the certificate key).
    Jwk,
    /// The account URL.
    Kid(&'a str),
}

impl AccountKey {
    /// A new key, as PKCS#8 DER (what the state folder keeps).
    pub fn generate() -> Result<Vec<u8>, String> {
        EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
            .map(|d| d.as_ref().to_vec())
            .map_err(|_| "cannot generate an ECDSA P-256 key".to_string())
    }

    pub fn from_pkcs8(der: &[u8]) -> Result<AccountKey, String> {
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der)
            .map_err(|e| format!("not an ECDSA P-256 key: {e}"))?;
        Ok(AccountKey { pair, rng: SystemRandom::new() })
    }

    /// The public key as a JWK, members in the order RFC 7638 hashes them.
    pub fn jwk(&self) -> Value {
        let (x, y) = self.coordinates();
        json!({ "crv": "P-256", "kty": "EC", "x": x, "y": y })
    }

    fn coordinates(&self) -> (String, String) {
        // The uncompressed point: 0x04, then x and y, 32 bytes each.
        let point = self.pair.public_key().as_ref();
        (b64::url(&point[1..33]), b64::url(&point[33..65]))
    }

    /// The JWK thumbprint (RFC 7638): SHA-256 of the required members, sorted, no
    /// spaces.
    pub fn thumbprint(&self) -> String {
        let (x, y) = self.coordinates();
        let canonical = format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#);
        b64::url(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, canonical.as_bytes()).as_ref())
    }

    /// The key authorization of a challenge token (RFC 8555 §8.1).
    pub fn key_authorization(&self, token: &str) -> String {
        format!("{token}.{}", self.thumbprint())
    }

    /// A signed request body. `payload`: `None` for POST-as-GET (an empty payload).
    pub fn sign(&self, url: &str, nonce: &str, signer: Signer<'_>, payload: Option<&Value>) -> Result<Value, String> {
        let mut protected = json!({ "alg": "ES256", "nonce": nonce, "url": url });
        match signer {
            Signer::Jwk => protected["jwk"] = self.jwk(),
            Signer::Kid(kid) => protected["kid"] = Value::from(kid),
        }
        let protected = b64::url(protected.to_string().as_bytes());
        let payload = payload.map_or(String::new(), |p| b64::url(p.to_string().as_bytes()));
        let signature = self
            .pair
            .sign(&self.rng, format!("{protected}.{payload}").as_bytes())
            .map_err(|_| "cannot sign the request".to_string())?;
        Ok(json!({ "protected": protected, "payload": payload, "signature": b64::url(signature.as_ref()) }))
    }

    /// The External Account Binding of a new-account request (RFC 8555 §7.3.4): this
    /// key's JWK, MACed (HS256) with the CA's key.
    pub fn external_binding(&self, eab: &super::settings::Eab, new_account_url: &str) -> Value {
        let protected = json!({ "alg": "HS256", "kid": eab.kid, "url": new_account_url });
        let protected = b64::url(protected.to_string().as_bytes());
        let payload = b64::url(self.jwk().to_string().as_bytes());
        let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, &eab.hmac_key);
        let tag = aws_lc_rs::hmac::sign(&key, format!("{protected}.{payload}").as_bytes());
        json!({ "protected": protected, "payload": payload, "signature": b64::url(tag.as_ref()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED, UnparsedPublicKey};

    #[test]
    fn a_signed_request_verifies_with_its_jwk() {
        let key = AccountKey::from_pkcs8(&AccountKey::generate().unwrap()).unwrap();
        let body = key.sign("https://ca/new-acct", "n0nce", Signer::Jwk, Some(&json!({"a": 1}))).unwrap();
        let protected = body["protected"].as_str().unwrap();
        let payload = body["payload"].as_str().unwrap();
        let header: Value = serde_json::from_slice(&b64::decode(protected).unwrap()).unwrap();
        assert_eq!(header["alg"], "ES256");
        assert_eq!(header["nonce"], "n0nce");
        assert_eq!(header["url"], "https://ca/new-acct");
        let jwk = &header["jwk"];
        let point = [
            vec![4u8],
            b64::decode(jwk["x"].as_str().unwrap()).unwrap(),
            b64::decode(jwk["y"].as_str().unwrap()).unwrap(),
        ]
        .concat();
        let signature = b64::decode(body["signature"].as_str().unwrap()).unwrap();
        assert_eq!(signature.len(), 64, "r || s, not DER");
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &point)
            .verify(format!("{protected}.{payload}").as_bytes(), &signature)
            .unwrap();
        // POST-as-GET: an empty payload, and the account URL instead of the key.
        let get = key.sign("https://ca/order/1", "n", Signer::Kid("https://ca/acct/7"), None).unwrap();
        assert_eq!(get["payload"], "");
        let header: Value = serde_json::from_slice(&b64::decode(get["protected"].as_str().unwrap()).unwrap()).unwrap();
        assert_eq!(header["kid"], "https://ca/acct/7");
        assert!(header.get("jwk").is_none());
    }

    #[test]
    fn thumbprint_follows_rfc7638() {
        let key = AccountKey::from_pkcs8(&AccountKey::generate().unwrap()).unwrap();
        // The thumbprint is the hash of the JWK as serde writes it (sorted members).
        let expected =
            b64::url(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, key.jwk().to_string().as_bytes()).as_ref());
        assert_eq!(key.thumbprint(), expected);
        assert_eq!(key.thumbprint().len(), 43);
        assert_eq!(key.key_authorization("tok"), format!("tok.{expected}"));
    }

    #[test]
    fn the_binding_is_macd_with_the_cas_key() {
        let key = AccountKey::from_pkcs8(&AccountKey::generate().unwrap()).unwrap();
        let eab = crate::acme::Eab { kid: "kid-1".into(), hmac_key: b"secret".to_vec() };
        let b = key.external_binding(&eab, "https://ca/new-acct");
        let signing = format!("{}.{}", b["protected"].as_str().unwrap(), b["payload"].as_str().unwrap());
        let k = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, b"secret");
        aws_lc_rs::hmac::verify(&k, signing.as_bytes(), &b64::decode(b["signature"].as_str().unwrap()).unwrap())
            .unwrap();
        assert!(!format!("{eab:?}").contains("secret"));
    }
}
