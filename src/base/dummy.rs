//! The master's dummy request, as both sides know it: the master sends one to wake an
//! idle worker (`pod`: an `OPTIONS *` with its per-boot token in [`INTERNAL_HEADER`]),
//! and the request cycle recognises it ([`is_internal`]) to keep it out of the
//! metrics and, by default, the logs. Here so that neither side imports the other.

/// Header carrying the master's per-boot token on an internal dummy request.
pub const INTERNAL_HEADER: &str = "Pika-Internal";

/// Whether a request's [`INTERNAL_HEADER`] (`given`) carries the master's `token` (a
/// client cannot know it; none is set in single-process mode).
pub fn is_internal(given: Option<&[u8]>, token: &str) -> bool {
    !token.is_empty() && given.is_some_and(|t| same_secret(t, token.as_bytes()))
}

/// Compares a secret in time that does not depend on where the bytes differ (`==`
/// stops at the first difference, which a client timing many guesses could use to
/// find the token a byte at a time). The length is not secret: every token has 32.
fn same_secret(given: &[u8], secret: &[u8]) -> bool {
    if given.len() != secret.len() {
        return false;
    }
    let diff = given.iter().zip(secret).fold(0u8, |acc, (a, b)| acc | (a ^ b));
    // Keeps the compiler from turning the fold back into an early exit.
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_compared_whole() {
        let token = b"0123456789abcdef0123456789abcdef";
        assert!(same_secret(token, token));
        assert!(!same_secret(b"x123456789abcdef0123456789abcdef", token), "first byte differs");
        assert!(!same_secret(b"0123456789abcdef0123456789abcdex", token), "last byte differs");
        assert!(!same_secret(b"0123456789abcdef", token), "a prefix");
        assert!(!same_secret(b"", token));
        let token = "0123456789abcdef0123456789abcdef";
        assert!(is_internal(Some(token.as_bytes()), token));
        assert!(!is_internal(None, token), "no header");
        assert!(!is_internal(Some(b""), ""), "no token: single-process mode has none");
    }
}
