//! Content types by file extension, read from an Apache/nginx-style `mime.types` file
//! (`type ext ext …` per line, `#` comments), so operators can use the file they know.
//! The shipped `conf/mime.types` (Debian's media-types list, public domain, plus a few
//! additions) is also compiled in, so a config that names no file still starts with
//! every type a browser expects.

/// The shipped `conf/mime.types`, built in.
pub const BUILTIN: &str = include_str!("../../conf/mime.types");

/// The extension table, packed: every extension and type named lies in two strings,
/// and an open-addressing index of `u32`s points at the entries. Built from Debian's
/// list (1,530 extensions) it added 48 KiB to the anonymous PSS of each of a master
/// and two workers (the pages are shared after `fork`); as a `HashMap` of owned
/// strings it added 133 KiB each.
#[derive(Debug, Clone)]
pub struct MimeTypes {
    /// Lower-case extensions, back to back.
    exts: String,
    /// Types, back to back, each once per line of the file.
    types: String,
    entries: Vec<Entry>,
    /// `entries` index + 1 (0: empty), at the slot of the extension's hash; the
    /// length is a power of two at least twice the number of entries.
    slots: Box<[u32]>,
    default: String,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    ext: (u32, u32),
    ty: (u32, u32),
}

/// FNV-1a over the lower-cased bytes, for the extension table: a file's type is
/// looked up when a worker first maps it, and with std's SipHash a lookup took ~380
/// instructions (~270 with FNV over a `HashMap` of byte keys; callgrind, five names).
/// This packed table, lower-casing as it hashes (no copy for `.JPG`), takes about 250
/// with Debian's 1,530 extensions.
/// SipHash guards a table that clients can fill with colliding keys; this one is
/// filled from the config, and a client's extension only looks.
fn fnv(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h = (h ^ u64::from(b.to_ascii_lowercase())).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The lines of a `mime.types` text that give a type extensions: `(type, extensions)`.
fn entries(text: &str) -> impl Iterator<Item = (&str, impl Iterator<Item = &str>)> {
    text.lines().filter_map(|line| {
        let line = line.split('#').next().unwrap_or("");
        // nginx's `types { … }` syntax ends each entry with ';': accept both.
        let mut words = line.split(|c: char| c.is_whitespace() || c == ';').filter(|w| !w.is_empty());
        let ty = words.next().filter(|ty| ty.contains('/'))?;
        // A type with no extension adds nothing.
        words.clone().next()?;
        Some((ty, words))
    })
}

impl MimeTypes {
    /// Parses the text of a `mime.types` file. Later lines win for a repeated extension.
    pub fn parse(text: &str, default: &str) -> MimeTypes {
        // Two passes: the first sizes every part, so that building the table leaves
        // no freed garbage behind in the heap that every worker inherits.
        let (mut ext_count, mut ext_bytes, mut type_bytes) = (0, 0, 0);
        for (ty, exts) in entries(text) {
            type_bytes += ty.len();
            for ext in exts {
                ext_count += 1;
                ext_bytes += ext.len();
            }
        }
        let mut m = MimeTypes {
            exts: String::with_capacity(ext_bytes),
            types: String::with_capacity(type_bytes),
            entries: Vec::with_capacity(ext_count),
            slots: vec![0; (ext_count * 2).next_power_of_two().max(2)].into_boxed_slice(),
            default: default.to_string(),
        };
        for (ty, exts) in entries(text) {
            let ty = m.push_type(ty);
            for ext in exts {
                m.insert(ext, ty);
            }
        }
        m
    }

    /// The built-in table ([`BUILTIN`]).
    pub fn builtin(default: &str) -> MimeTypes {
        MimeTypes::parse(BUILTIN, default)
    }

    fn push_type(&mut self, ty: &str) -> (u32, u32) {
        let at = (self.types.len() as u32, ty.len() as u32);
        self.types.push_str(ty);
        at
    }

    fn insert(&mut self, ext: &str, ty: (u32, u32)) {
        match self.slot(ext.as_bytes()) {
            Ok(i) => self.entries[self.slots[i] as usize - 1].ty = ty,
            Err(i) => {
                let at = (self.exts.len() as u32, ext.len() as u32);
                self.exts.extend(ext.chars().map(|c| c.to_ascii_lowercase()));
                self.entries.push(Entry { ext: at, ty });
                self.slots[i] = self.entries.len() as u32;
            }
        }
    }

    /// The slot holding `ext` (any case), or the empty slot where it would go.
    fn slot(&self, ext: &[u8]) -> Result<usize, usize> {
        let mask = self.slots.len() - 1;
        let mut i = fnv(ext) as usize & mask;
        loop {
            let Some(e) = self.slots[i].checked_sub(1).map(|e| self.entries[e as usize]) else { return Err(i) };
            let (at, len) = (e.ext.0 as usize, e.ext.1 as usize);
            if self.exts.as_bytes()[at..at + len].eq_ignore_ascii_case(ext) {
                return Ok(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// The type for a file name (by its last extension, case-insensitively), or the default.
    pub fn lookup(&self, file_name: &[u8]) -> &str {
        let Some(dot) = file_name.iter().rposition(|&b| b == b'.') else { return &self.default };
        match self.slot(&file_name[dot + 1..]) {
            Ok(i) => {
                let (at, len) = self.entries[self.slots[i] as usize - 1].ty;
                &self.types[at as usize..(at + len) as usize]
            }
            Err(_) => &self.default,
        }
    }

    /// The type of a file whose extension is not listed.
    pub fn default_type(&self) -> &str {
        &self.default
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
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

    #[test]
    fn later_lines_win_and_case_is_ignored() {
        let m = MimeTypes::parse("a/x one TWO\nb/y two\n", "d/d");
        assert_eq!((m.lookup(b"f.ONE"), m.lookup(b"f.two"), m.lookup(b"f.Two")), ("a/x", "b/y", "b/y"));
        assert_eq!((m.len(), m.lookup(b"f."), m.lookup(b".two")), (2, "d/d", "b/y"));
        assert_eq!(MimeTypes::parse("", "d/d").lookup(b"a.b"), "d/d");
    }

    /// The packed table answers as a map filled line by line would, for every
    /// extension of the built-in list (with repeats and mixed case).
    #[test]
    fn builtin_table_matches_a_plain_map() {
        let mut want = std::collections::HashMap::new();
        for line in BUILTIN.lines() {
            let mut w = line.split('#').next().unwrap().split_whitespace();
            let Some(ty) = w.next() else { continue };
            for ext in w {
                want.insert(ext.to_ascii_lowercase(), ty);
            }
        }
        let m = MimeTypes::builtin("none/none");
        assert_eq!(m.len(), want.len());
        for (ext, ty) in want {
            if ext.contains('.') {
                continue; // `spdx.json`: a lookup goes by the last extension only
            }
            assert_eq!(m.lookup(format!("f.{ext}").as_bytes()), ty, "{ext}");
            assert_eq!(m.lookup(format!("F.{}", ext.to_ascii_uppercase()).as_bytes()), ty, "{ext}");
        }
    }

    #[test]
    fn builtin_table_has_what_browsers_ask_for() {
        let m = MimeTypes::builtin("application/octet-stream");
        assert!(m.len() > 1500, "{}", m.len());
        for (name, ty) in [
            ("a.html", "text/html"),
            ("a.css", "text/css"),
            ("a.js", "text/javascript"),
            ("a.mjs", "text/javascript"),
            ("a.json", "application/json"),
            ("a.svg", "image/svg+xml"),
            ("a.webp", "image/webp"),
            ("a.avif", "image/avif"),
            ("a.woff2", "font/woff2"),
            ("a.wasm", "application/wasm"),
            ("a.swf", "application/vnd.adobe.flash.movie"),
            ("site.webmanifest", "application/manifest+json"),
            ("a.ics", "text/calendar"),
            ("a.epub", "application/epub+zip"),
            ("a.apk", "application/vnd.android.package-archive"),
            ("a.mp4", "video/mp4"),
            // pika's additions at the end win over Debian's lines.
            ("seg.ts", "video/mp2t"),
            ("app.js.map", "application/json"),
            ("a.tar.bz2", "application/x-bzip2"),
        ] {
            assert_eq!(m.lookup(name.as_bytes()), ty, "{name}");
        }
    }

    /// The index hashes with FNV-1a (its published test vectors), lower-casing as it
    /// goes. Any hash would give the same answers; this one was measured fastest
    /// (see `fnv`), and a change to it should be a decision, not an accident.
    #[test]
    fn the_index_hash_is_fnv_1a_of_the_lower_cased_bytes() {
        assert_eq!(fnv(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv(b"foobar"), 0x8594_4171_f739_67e8);
        assert_eq!(fnv(b"FooBar"), fnv(b"foobar"));
    }

    /// The first pass sizes every part: building the table grows nothing, so it
    /// leaves no freed memory behind in the heap every worker inherits. (With no
    /// extension repeated, the sizes are exact; grown, they would have doubled.)
    #[test]
    fn the_table_is_built_in_parts_sized_once() {
        let m = MimeTypes::parse("text/html html htm shtml\nimage/jpeg jpeg jpg\ntext/css css\n", "d/d");
        assert_eq!((m.exts.capacity(), m.exts.len()), (22, 22));
        assert_eq!((m.types.capacity(), m.types.len()), (27, 27));
        assert_eq!((m.entries.capacity(), m.entries.len()), (6, 6));
        assert_eq!(m.slots.len(), 16, "twice the entries, to a power of two");
    }

    #[test]
    fn default_type_and_emptiness() {
        let empty = MimeTypes::parse("# nothing\ntext/plain\n", "d/d");
        assert!(empty.is_empty(), "a type with no extension adds none");
        assert_eq!((empty.default_type(), empty.lookup(b"a.txt")), ("d/d", "d/d"));
        let one = MimeTypes::parse("text/plain txt\n", "application/octet-stream");
        assert!(!one.is_empty());
        assert_eq!(one.default_type(), "application/octet-stream");
    }
}
