//! Compression on the fly: a file's bytes in gzip, brotli or zstd, made once per file
//! version and worker and kept beside the file's cache entry, so a hot page costs one
//! compression per worker, not one per request.
//!
//! What is kept is bounded per worker by [`MAX_KEPT`] (a copy that would go past it
//! is made for its request and dropped). Generated bodies (error pages, listings) are
//! small and made per request: they are compressed per request too, and so is a
//! script's answer, whole or as it streams ([`Compressing`]: each piece the script
//! prints is compressed and flushed, so a `flush()` in PHP still reaches the client).

use std::cell::Cell;
use std::io::{self, Read, Write};

use super::encoding::{self, Coding};
use crate::keys::read::{ConfigError, Ctx, Keys};
use crate::keys::units::Bytes;

/// Its keys.
pub const KEYS: [&str; 4] = ["precompressed", "compress", "compress_types", "compress_min_size"];

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum RawCodings {
    All(bool),
    List(Vec<String>),
}

/// `precompressed` or `compress` (`key`) of a table, if set: `true` for all three
/// codings in the default order, `false` for none, or a list in the server's order.
pub(crate) fn read_codings(keys: &mut Keys, ctx: &Ctx, key: &str) -> Result<Option<Vec<Coding>>, ConfigError> {
    let Some(c) = keys.take::<RawCodings>(ctx, key)? else { return Ok(None) };
    let list = match c.get_ref() {
        RawCodings::All(true) => encoding::ALL.to_vec(),
        RawCodings::All(false) => Vec::new(),
        RawCodings::List(names) => {
            let mut out = Vec::new();
            for name in names {
                let coding = Coding::parse(name).ok_or_else(|| {
                    ctx.spanned(&c, format!("{key} entry {name:?} is not one of \"br\", \"zstd\", \"gzip\""))
                })?;
                if !out.contains(&coding) {
                    out.push(coding);
                }
            }
            out
        }
    };
    Ok(Some(list))
}

/// `compress_types` of a table, if set.
pub(crate) fn read_types(keys: &mut Keys, ctx: &Ctx) -> Result<Option<Vec<String>>, ConfigError> {
    let Some(types) = keys.take::<Vec<String>>(ctx, "compress_types")? else { return Ok(None) };
    let valid = |t: &String| {
        t.split_once('/').is_some_and(|(a, b)| super::headers::is_token(a) && (b == "*" || super::headers::is_token(b)))
    };
    if let Some(bad) = types.get_ref().iter().find(|t| !valid(t)) {
        return Err(ctx.spanned(&types, format!("compress_types entry {bad:?} is not type/subtype or type/*")));
    }
    Ok(Some(types.into_inner()))
}

/// `compress_min_size` of a table, if set.
pub(crate) fn read_min_size(keys: &mut Keys, ctx: &Ctx) -> Result<Option<u64>, ConfigError> {
    Ok(keys.take::<Bytes>(ctx, "compress_min_size")?.map(|b| b.into_inner().0))
}

/// gzip's level: zlib's default, near its best ratio for text at a fraction of
/// level 9's time. Paid once per file version and worker.
pub const GZIP_LEVEL: u32 = 6;
/// brotli's quality: 5 gives smaller text than gzip -9 in about gzip -6's time;
/// 11 (the best) costs ~50x more, which belongs to precompressed siblings.
pub const BROTLI_QUALITY: u32 = 5;
/// zstd's level: 9 compresses text about as well as brotli 5 and decodes fastest.
pub const ZSTD_LEVEL: i32 = 9;

/// Largest file compressed on the fly; a bigger one goes out as it is (ship its
/// siblings: `precompressed`), its compression being worth more time than an answer
/// should wait.
pub const MAX_FLY_FILE: u64 = 256 * 1024;

/// Most bytes of compressed copies a worker keeps.
pub const MAX_KEPT: usize = 16 * 1024 * 1024;

/// Types compressed when `compress_types` is not set: text, and the textual
/// application types (images, audio, video and archives are compressed already).
pub const DEFAULT_TYPES: [&str; 11] = [
    "text/*",
    "application/javascript",
    "application/json",
    "application/xml",
    "application/rss+xml",
    "application/atom+xml",
    "application/manifest+json",
    "application/ld+json",
    "application/wasm",
    "image/svg+xml",
    "image/x-icon",
];

/// Smallest body compressed when `compress_min_size` is not set: below it the
/// coding's own framing and the `Content-Encoding` line eat what is saved.
pub const DEFAULT_MIN_SIZE: u64 = 256;

/// `data` in `coding`.
pub fn compress(coding: Coding, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() / 3 + 64);
    match coding {
        Coding::Gzip => {
            let mut e = flate2::write::GzEncoder::new(out, flate2::Compression::new(GZIP_LEVEL));
            e.write_all(data).expect("writing to memory");
            out = e.finish().expect("writing to memory");
        }
        Coding::Br => {
            let params = brotli::enc::BrotliEncoderParams { quality: BROTLI_QUALITY as i32, ..Default::default() };
            brotli::BrotliCompress(&mut &data[..], &mut out, &params).expect("writing to memory");
        }
        Coding::Zstd => {
            out = zstd::bulk::compress(data, ZSTD_LEVEL).expect("zstd compresses any input");
        }
    }
    out
}

/// A stream's bytes compressed as they are read: each piece read from the source
/// is compressed and flushed (gzip's sync flush, brotli's and zstd's flush), so what
/// a script flushed goes out whole; the coding's end is written at the source's end.
pub struct Compressing {
    from: Box<dyn Read>,
    enc: Option<Encoder>,
    out: Vec<u8>,
    at: usize,
}

enum Encoder {
    Gzip(flate2::write::GzEncoder<Vec<u8>>),
    Br(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd::stream::write::Encoder<'static, Vec<u8>>),
}

/// The bytes read from a stream's source at a time: a script's pieces are rarely
/// larger, and a larger one is read in a few turns.
const PIECE: usize = 16 * 1024;

/// brotli's window (log2 of bytes), its encoder's default.
const BROTLI_WINDOW: u32 = 22;

impl Compressing {
    pub fn new(coding: Coding, from: Box<dyn Read>) -> Compressing {
        let enc = match coding {
            Coding::Gzip => {
                Encoder::Gzip(flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(GZIP_LEVEL)))
            }
            Coding::Br => {
                Encoder::Br(Box::new(brotli::CompressorWriter::new(Vec::new(), PIECE, BROTLI_QUALITY, BROTLI_WINDOW)))
            }
            Coding::Zstd => {
                Encoder::Zstd(zstd::stream::write::Encoder::new(Vec::new(), ZSTD_LEVEL).expect("a zstd context"))
            }
        };
        Compressing { from, enc: Some(enc), out: Vec::new(), at: 0 }
    }

    /// Compresses and flushes `data` into `out` (or, with `data` None, ends the coding).
    fn code(&mut self, data: Option<&[u8]>) -> io::Result<()> {
        self.out.clear();
        self.at = 0;
        let Some(mut enc) = self.enc.take() else { return Ok(()) };
        let Some(data) = data else {
            self.out = match enc {
                Encoder::Gzip(e) => e.finish()?,
                Encoder::Br(e) => e.into_inner(),
                Encoder::Zstd(e) => e.finish()?,
            };
            return Ok(());
        };
        let written = match &mut enc {
            Encoder::Gzip(e) => e.write_all(data).and_then(|()| e.flush()).map(|()| e.get_mut()),
            Encoder::Br(e) => e.write_all(data).and_then(|()| e.flush()).map(|()| e.get_mut()),
            Encoder::Zstd(e) => e.write_all(data).and_then(|()| e.flush()).map(|()| e.get_mut()),
        };
        std::mem::swap(&mut self.out, written?);
        self.enc = Some(enc);
        Ok(())
    }
}

impl Read for Compressing {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.at < self.out.len() {
                let n = (self.out.len() - self.at).min(buf.len());
                buf[..n].copy_from_slice(&self.out[self.at..self.at + n]);
                self.at += n;
                return Ok(n);
            }
            if self.enc.is_none() {
                return Ok(0);
            }
            let mut piece = [0u8; PIECE];
            let n = loop {
                match self.from.read(&mut piece) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    other => break other?,
                }
            };
            self.code((n > 0).then_some(&piece[..n]))?;
        }
    }
}

/// Whether `content_type` (parameters ignored) matches one of `patterns`
/// (`type/subtype`, `type/*`).
pub fn compressible(content_type: &str, patterns: &[String]) -> bool {
    let ty = content_type.split(';').next().unwrap_or("").trim();
    let major = ty.split('/').next().unwrap_or("");
    patterns
        .iter()
        .any(|p| p.eq_ignore_ascii_case(ty) || p.strip_suffix("/*").is_some_and(|m| m.eq_ignore_ascii_case(major)))
}

/// The ETag of a file's copy in `coding`: the file's, with the coding inside its
/// quotes (`"5f-1a2b"` → `"5f-1a2b-br"`), so a cache never takes one for the other.
pub fn coded_etag(etag: &str, coding: Coding) -> String {
    match etag.strip_suffix('"') {
        Some(open) => format!("{open}-{}\"", coding.token()),
        None => format!("{etag}-{}", coding.token()),
    }
}

thread_local! {
    /// Bytes of the compressed copies this worker keeps.
    static KEPT: Cell<usize> = const { Cell::new(0) };
}

/// A compressed copy counted against [`MAX_KEPT`] while it lives.
pub struct Kept {
    pub bytes: Vec<u8>,
}

impl Kept {
    /// `bytes` if there is room for them, else None (the caller sends them once).
    pub fn new(bytes: Vec<u8>) -> Result<Kept, Vec<u8>> {
        let len = bytes.len();
        KEPT.with(|k| {
            if k.get() + len > MAX_KEPT {
                return Err(bytes);
            }
            k.set(k.get() + len);
            Ok(Kept { bytes })
        })
    }

    /// Bytes kept by this worker now.
    pub fn total() -> usize {
        KEPT.with(Cell::get)
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        KEPT.with(|k| k.set(k.get() - self.bytes.len()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn page() -> Vec<u8> {
        (0..2000).flat_map(|i| format!("<p class=\"row\">line {i} of a page</p>\n").into_bytes()).collect()
    }

    /// `z` decoded from `c`, whole.
    fn decode(c: Coding, z: &[u8]) -> Vec<u8> {
        let mut back = Vec::new();
        match c {
            Coding::Gzip => flate2::read::GzDecoder::new(z).read_to_end(&mut back).map(|_| ()).unwrap(),
            Coding::Br => brotli::BrotliDecompress(&mut &z[..], &mut back).unwrap(),
            Coding::Zstd => back = zstd::decode_all(z).unwrap(),
        }
        back
    }

    #[test]
    fn each_coding_round_trips_and_shrinks_text() {
        let data = page();
        for c in super::super::encoding::ALL {
            let z = compress(c, &data);
            assert!(z.len() * 5 < data.len(), "{c:?}: {} of {}", z.len(), data.len());
            assert_eq!(decode(c, &z), data, "{c:?}");
        }
        assert!(!compress(Coding::Gzip, b"").is_empty(), "an empty body still has a gzip frame");
    }

    #[test]
    fn types_and_etags() {
        let types: Vec<String> = DEFAULT_TYPES.iter().map(|s| s.to_string()).collect();
        assert!(compressible("text/html; charset=utf-8", &types));
        assert!(compressible("application/javascript", &types) && compressible("image/svg+xml", &types));
        assert!(!compressible("image/png", &types) && !compressible("application/gzip", &types));
        assert_eq!(coded_etag("\"5f-1a2b\"", Coding::Br), "\"5f-1a2b-br\"");
        assert_eq!(coded_etag("\"x\"", Coding::Gzip), "\"x-gzip\"");
    }

    #[test]
    fn kept_copies_are_counted_within_the_bound() {
        let before = Kept::total();
        let a = Kept::new(vec![0; 1000]).ok().unwrap();
        assert_eq!(Kept::total(), before + 1000);
        assert!(Kept::new(vec![0; MAX_KEPT]).is_err(), "past the bound: not kept");
        drop(a);
        assert_eq!(Kept::total(), before);
    }

    #[test]
    fn a_stream_is_compressed_piece_by_piece_and_each_piece_is_whole() {
        /// A source that gives its pieces one read at a time.
        struct Pieces(Vec<Vec<u8>>);
        impl Read for Pieces {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                if self.0.is_empty() {
                    return Ok(0);
                }
                let n = self.0[0].len().min(buf.len());
                buf[..n].copy_from_slice(&self.0[0][..n]);
                self.0[0].drain(..n);
                if self.0[0].is_empty() {
                    self.0.remove(0);
                }
                Ok(n)
            }
        }
        let data = page();
        let (first, second) = data.split_at(100);
        for c in super::super::encoding::ALL {
            let mut z = Compressing::new(c, Box::new(Pieces(vec![first.to_vec(), second.to_vec()])));
            // What the first read gives decodes to the first piece whole.
            let mut head = vec![0u8; 64 * 1024];
            let n = z.read(&mut head).unwrap();
            let mut early = Vec::new();
            match c {
                Coding::Gzip => {
                    let _ = flate2::read::GzDecoder::new(&head[..n]).read_to_end(&mut early);
                }
                Coding::Br => {
                    let _ = brotli::Decompressor::new(&head[..n], 4096).read_to_end(&mut early);
                }
                Coding::Zstd => {
                    let _ = zstd::stream::read::Decoder::new(&head[..n]).unwrap().read_to_end(&mut early);
                }
            }
            assert_eq!(early, first, "{c:?}: the first piece is out whole before the second is read");
            let mut all = head[..n].to_vec();
            z.read_to_end(&mut all).unwrap();
            assert_eq!(decode(c, &all), data, "{c:?}");
        }
    }
}
