//! The challenges being validated, in memory the master maps before the first fork:
//! the ACME child writes them, every worker reads them (HTTP-01 at
//! `/.well-known/acme-challenge/`, TLS-ALPN-01 in the handshake). Nothing touches the
//! disk, so a worker in a chroot answers as well as one outside.
//!
//! Each entry is a sequence lock: one writer (the child) makes the count odd, writes,
//! makes it even; a reader copies the entry and keeps the copy only if the count was
//! even and unchanged around it.

use std::sync::OnceLock;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU64, fence};

/// Challenges validated at once: one per name of the orders under way. Orders are
/// taken one at a time; a CA limits an order to 100 names, and a server with more
/// names than this in one vhost has its authorizations answered in turns.
pub const ENTRIES: usize = 64;
/// Bytes of name and value per entry: a TLS-ALPN-01 certificate (about 500 bytes of
/// DER) and its key (138) with room to spare.
const WORDS: usize = 254;
const CAPACITY: usize = WORDS * 8;

/// What an entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// name: the token; value: the key authorization.
    Http01 = 1,
    /// name: the DNS name; value: the validation certificate and its key
    /// ([`super::alpn`]).
    TlsAlpn01 = 2,
}

#[repr(C)]
pub struct Entry {
    seq: AtomicU64,
    /// 0: free; else the kind, the name's length and the value's, packed.
    meta: AtomicU64,
    data: [AtomicU64; WORDS],
}

// SAFETY: only atomics, `repr(C)`, all-zero is a valid (free) entry.
#[allow(unsafe_code)]
unsafe impl crate::base::sys::SharedAtomic for Entry {}

/// Where the ACME client puts the challenges it answers: this node's table (a node
/// alone), or the master, which shares them with the fleet ([`super::child`]).
pub trait Publish {
    /// Publishes `value` under `name`; false when it cannot be.
    fn put(&self, kind: Kind, name: &[u8], value: &[u8]) -> bool;
    /// Takes down what `name` had.
    fn remove(&self, kind: Kind, name: &[u8]);
    /// Waits until what was put can be answered wherever the CA asks (at once for
    /// this node's table).
    fn settle(&self) {}
}

impl Publish for Board {
    fn put(&self, kind: Kind, name: &[u8], value: &[u8]) -> bool {
        Board::put(self, kind, name, value)
    }

    fn remove(&self, kind: Kind, name: &[u8]) {
        Board::remove(self, kind, name);
    }
}

impl Kind {
    /// The kind a number names ([`Kind`] `as u8`), as the fleet stores it.
    pub fn from_u8(n: u8) -> Option<Kind> {
        match n {
            1 => Some(Kind::Http01),
            2 => Some(Kind::TlsAlpn01),
            _ => None,
        }
    }
}

pub struct Board {
    entries: &'static [Entry],
}

static BOARD: OnceLock<Board> = OnceLock::new();

/// Maps the table (once, in the master, before any fork).
pub fn map() -> std::io::Result<()> {
    if BOARD.get().is_none() {
        let entries = crate::base::sys::map_shared::<Entry>(ENTRIES)?;
        let _ = BOARD.set(Board { entries });
    }
    Ok(())
}

/// The table, in the processes forked after [`map`].
pub fn shared() -> Option<&'static Board> {
    BOARD.get()
}

fn pack(kind: Kind, name: usize, value: usize) -> u64 {
    (kind as u64) << 56 | (name as u64) << 32 | value as u64
}

impl Board {
    /// A table in this process only (tests).
    #[cfg(test)]
    fn private() -> Board {
        let entries: Vec<Entry> = (0..ENTRIES)
            .map(|_| Entry {
                seq: AtomicU64::new(0),
                meta: AtomicU64::new(0),
                data: [const { AtomicU64::new(0) }; WORDS],
            })
            .collect();
        Board { entries: Vec::leak(entries) }
    }

    /// Publishes `value` under `name`; false when the table is full or they do not fit.
    pub fn put(&self, kind: Kind, name: &[u8], value: &[u8]) -> bool {
        if name.len() + value.len() > CAPACITY || name.len() > u16::MAX as usize {
            return false;
        }
        self.remove(kind, name);
        let Some(e) = self.entries.iter().find(|e| e.meta.load(Relaxed) == 0) else { return false };
        let bytes: Vec<u8> = [name, value].concat();
        write(e, || {
            for (word, chunk) in e.data.iter().zip(bytes.chunks(8)) {
                let mut w = [0u8; 8];
                w[..chunk.len()].copy_from_slice(chunk);
                word.store(u64::from_le_bytes(w), Relaxed);
            }
            e.meta.store(pack(kind, name.len(), value.len()), Relaxed);
        });
        true
    }

    /// Takes down what `name` had.
    pub fn remove(&self, kind: Kind, name: &[u8]) {
        let mut scratch = Vec::new();
        for e in self.entries {
            if read(e, &mut scratch).is_some_and(|(k, n)| k == kind as u64 && &scratch[..n] == name) {
                write(e, || e.meta.store(0, Relaxed));
            }
        }
    }

    /// Takes down everything (the child at its start: a child killed mid-order left
    /// its entries).
    pub fn clear(&self) {
        for e in self.entries {
            if e.meta.load(Relaxed) != 0 {
                write(e, || e.meta.store(0, Relaxed));
            }
        }
    }

    /// The value under `name`, if any.
    pub fn find(&self, kind: Kind, name: &[u8]) -> Option<Vec<u8>> {
        let mut scratch = Vec::new();
        self.entries.iter().find_map(|e| {
            let (k, n) = read(e, &mut scratch)?;
            // Tokens are case-sensitive; DNS names are not.
            let same = match kind {
                Kind::Http01 => &scratch[..n] == name,
                Kind::TlsAlpn01 => scratch[..n].eq_ignore_ascii_case(name),
            };
            (k == kind as u64 && same).then(|| scratch[n..].to_vec())
        })
    }
}

fn write(e: &Entry, f: impl FnOnce()) {
    let seq = e.seq.load(Relaxed);
    e.seq.store(seq + 1, Relaxed);
    fence(Release);
    f();
    e.seq.store(seq + 2, Release);
}

/// Copies an entry's bytes into `out`; returns (kind, name length), or `None` for a
/// free entry or one being written.
fn read(e: &Entry, out: &mut Vec<u8>) -> Option<(u64, usize)> {
    for _ in 0..4 {
        let before = e.seq.load(Acquire);
        if before % 2 == 1 {
            std::hint::spin_loop();
            continue;
        }
        let meta = e.meta.load(Relaxed);
        if meta == 0 {
            return None;
        }
        let (kind, name, value) = (meta >> 56, (meta >> 32 & 0xffff) as usize, (meta & 0xffff_ffff) as usize);
        let len = (name + value).min(CAPACITY);
        out.clear();
        for word in &e.data[..len.div_ceil(8)] {
            out.extend_from_slice(&word.load(Relaxed).to_le_bytes());
        }
        out.truncate(len);
        fence(Acquire);
        if e.seq.load(Relaxed) == before {
            return Some((kind, name.min(len)));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_find_remove() {
        let b = Board::private();
        assert!(b.put(Kind::Http01, b"tok1", b"tok1.thumb"));
        assert!(b.put(Kind::TlsAlpn01, b"a.example", &[9u8; 700]));
        assert_eq!(b.find(Kind::Http01, b"tok1").unwrap(), b"tok1.thumb");
        assert_eq!(b.find(Kind::TlsAlpn01, b"A.Example").unwrap(), vec![9u8; 700]);
        assert_eq!(b.find(Kind::TlsAlpn01, b"tok1"), None, "kinds are apart");
        assert_eq!(b.find(Kind::Http01, b"TOK1"), None, "tokens keep their case");
        // Put again: replaced, not doubled.
        assert!(b.put(Kind::Http01, b"tok1", b"other"));
        assert_eq!(b.find(Kind::Http01, b"tok1").unwrap(), b"other");
        assert_eq!(b.entries.iter().filter(|e| e.meta.load(Relaxed) != 0).count(), 2);
        b.remove(Kind::Http01, b"tok1");
        assert_eq!(b.find(Kind::Http01, b"tok1"), None);
        assert!(!b.put(Kind::Http01, b"big", &[0u8; CAPACITY]), "too big");
        for i in 0..ENTRIES - 1 {
            assert!(b.put(Kind::Http01, format!("t{i}").as_bytes(), b"v"), "{i}");
        }
        assert!(!b.put(Kind::Http01, b"one more", b"v"), "full");
        b.clear();
        assert_eq!(b.find(Kind::TlsAlpn01, b"a.example"), None);
        assert!(b.put(Kind::Http01, b"one more", b"v"));
    }
}
