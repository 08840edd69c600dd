//! HTTP-01 (RFC 8555 §8.3): the CA asks `http://NAME/.well-known/acme-challenge/TOKEN`
//! and wants the key authorization. Answered from the shared table
//! ([`super::challenges`]) before any location, redirect or vhost rule, so a vhost
//! with `https_redirect` or one whose root has no such folder validates as well. A
//! token pika is not validating goes on to the vhost as any request does (a site
//! that publishes tokens by other means keeps working).

use super::challenges::Kind;

/// Where the CA looks.
pub const PREFIX: &[u8] = b"/.well-known/acme-challenge/";

/// The key authorization for a request target, if it names a token under way.
pub fn answer(target: &[u8]) -> Option<Vec<u8>> {
    let token = target.strip_prefix(PREFIX)?;
    // Tokens are base64url: no query, no slash, no escape.
    if token.is_empty() || !token.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return None;
    }
    super::challenges::shared()?.find(Kind::Http01, token)
}
