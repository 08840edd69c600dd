//! Base64 (RFC 4648): the URL-safe alphabet without padding that JWS uses, and the
//! standard one that PEM files use.

const URL: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
const STD: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn encode(bytes: &[u8], alphabet: &[u8; 64], pad: bool) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |acc, (i, &b)| acc | u32::from(b) << (16 - 8 * i));
        let chars = chunk.len() + 1;
        for i in 0..4 {
            if i < chars {
                out.push(alphabet[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else if pad {
                out.push('=');
            }
        }
    }
    out
}

/// URL-safe, unpadded (JWS, RFC 7515 §2).
pub fn url(bytes: &[u8]) -> String {
    encode(bytes, URL, false)
}

/// Standard, padded (PEM).
pub fn standard(bytes: &[u8]) -> String {
    encode(bytes, STD, true)
}

/// Decodes URL-safe or standard base64, padded or not (an EAB key as a CA hands it
/// out); `None` on any other character.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.trim_end_matches('=').bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return None,
        };
        acc = acc << 6 | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// A PEM block: `label` (`CERTIFICATE`, `PRIVATE KEY`), lines of 64 characters.
pub fn pem(label: &str, der: &[u8]) -> String {
    let body = standard(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in body.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc4648_vectors() {
        let cases =
            [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg=="), ("fooba", "Zm9vYmE=")];
        for (plain, coded) in cases {
            assert_eq!(standard(plain.as_bytes()), coded);
            assert_eq!(url(plain.as_bytes()), coded.trim_end_matches('='));
            assert_eq!(decode(coded).unwrap(), plain.as_bytes());
        }
        assert_eq!(url(&[0xfb, 0xff]), "-_8");
        assert_eq!(decode("-_8").unwrap(), [0xfb, 0xff]);
        assert_eq!(decode("a b"), None);
    }

    #[test]
    fn pem_wraps_at_64() {
        let p = pem("CERTIFICATE", &[7u8; 100]);
        let lines: Vec<&str> = p.lines().collect();
        assert_eq!(lines[0], "-----BEGIN CERTIFICATE-----");
        assert_eq!(lines[1].len(), 64);
        assert_eq!(lines.last(), Some(&"-----END CERTIFICATE-----"));
        use rustls::pki_types::pem::PemObject;
        let der = rustls::pki_types::CertificateDer::from_pem_slice(p.as_bytes()).unwrap();
        assert_eq!(der.as_ref(), &[7u8; 100]);
    }
}
