//! Content types by file extension, read from an Apache/nginx-style `mime.types` file
//! (`type ext ext …` per line, `#` comments), so operators can use the file they know.

use std::collections::HashMap;

#[derive(Debug, Clone)]
pub struct MimeTypes {
    by_ext: HashMap<String, String>,
    default: String,
}

impl MimeTypes {
    /// Parses the text of a `mime.types` file. Later lines win for a repeated extension.
    pub fn parse(text: &str, default: &str) -> MimeTypes {
        let mut by_ext = HashMap::new();
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("");
            // nginx's `types { … }` syntax ends each entry with ';': accept both.
            let mut words = line.split(|c: char| c.is_whitespace() || c == ';').filter(|w| !w.is_empty());
            let Some(ty) = words.next() else { continue };
            if !ty.contains('/') {
                continue;
            }
            for ext in words {
                by_ext.insert(ext.to_ascii_lowercase(), ty.to_string());
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
        let Ok(ext) = std::str::from_utf8(ext) else { return &self.default };
        if ext.bytes().any(|b| b.is_ascii_uppercase()) {
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
