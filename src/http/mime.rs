//! Content types by file extension, read from an Apache/nginx-style `mime.types` file
//! (`type ext ext …` per line, `#` comments), so operators can use the file they know.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

#[derive(Debug, Clone)]
pub struct MimeTypes {
    by_ext: HashMap<Vec<u8>, String, BuildHasherDefault<Fnv>>,
    default: String,
}

/// FNV-1a, for the extension table: every response looks a type up, and with
/// std's SipHash a lookup took ~380 instructions (~260 with this and byte keys,
/// callgrind). SipHash guards a table that clients can fill with colliding keys;
/// this one is filled from the config, and a client's extension only looks.
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Hasher for Fnv {
    fn write(&mut self, bytes: &[u8]) {
        let mut h = self.0;
        for &b in bytes {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl MimeTypes {
    /// Parses the text of a `mime.types` file. Later lines win for a repeated extension.
    pub fn parse(text: &str, default: &str) -> MimeTypes {
        let mut by_ext = HashMap::default();
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("");
            // nginx's `types { … }` syntax ends each entry with ';': accept both.
            let mut words = line.split(|c: char| c.is_whitespace() || c == ';').filter(|w| !w.is_empty());
            let Some(ty) = words.next() else { continue };
            if !ty.contains('/') {
                continue;
            }
            for ext in words {
                by_ext.insert(ext.to_ascii_lowercase().into_bytes(), ty.to_string());
            }
        }
        MimeTypes { by_ext, default: default.to_string() }
    }

    /// The type for a file name (by its last extension, case-insensitively), or the default.
    pub fn lookup(&self, file_name: &[u8]) -> &str {
        let ext = match file_name.iter().rposition(|&b| b == b'.') {
            Some(dot) => &file_name[dot + 1..],
            None => return &self.default,
        };
        // Keys are bytes: an extension that is not UTF-8 simply matches none.
        if ext.iter().any(|b| b.is_ascii_uppercase()) {
            return self.by_ext.get(&ext.to_ascii_lowercase()).unwrap_or(&self.default);
        }
        self.by_ext.get(ext).unwrap_or(&self.default)
    }

    pub fn len(&self) -> usize {
        self.by_ext.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_ext.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_by_extension() {
        let m = MimeTypes::parse(
            "# comment\ntext/html html htm\nimage/jpeg jpeg jpg\n  \ntext/css css; # nginx style\nbogus line\n",
            "application/octet-stream",
        );
        assert_eq!(m.lookup(b"index.html"), "text/html");
        assert_eq!(m.lookup(b"a.b.HTM"), "text/html");
        assert_eq!(m.lookup(b"photo.jpg"), "image/jpeg");
        assert_eq!(m.lookup(b"style.css"), "text/css");
        assert_eq!(m.lookup(b"README"), "application/octet-stream");
        assert_eq!(m.lookup(b"x.unknown"), "application/octet-stream");
        assert_eq!(m.lookup(b"bad.\xff"), "application/octet-stream");
        assert_eq!(m.len(), 5);
    }
}
