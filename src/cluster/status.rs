//! What the master knows of the fleet and the workers show (status page, metrics):
//! whether Redis answers, since when, when the ticket keys last agreed with the
//! fleet's and when their period began; and per ACME certificate, when the one the
//! fleet stores expires and which node holds its order's lock. Tables in shared
//! memory, mapped before the first fork, written by the master on its tick; a reader
//! may see an entry half old, half new: shown, never acted on.

use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

#[repr(C)]
pub struct Entry {
    /// [`Link`] as a number; 0: no `[cluster]`.
    link: AtomicU64,
    /// Unix seconds of the last change of `link`.
    since: AtomicU64,
    /// Unix seconds when this node last agreed with the fleet on the ticket keys.
    tickets: AtomicU64,
    /// Failed tries in a row while down.
    tries: AtomicU64,
    /// Unix seconds when the ticket key's period began.
    key_since: AtomicU64,
}

/// Certificates shown; more are shared, only not shown.
pub const CERTS: usize = 128;
/// Bytes of a holder's name shown (a host name and a pid).
const HOLDER_WORDS: usize = 8;

#[repr(C)]
pub struct CertEntry {
    /// A hash of the vhost's first name; 0: free.
    key: AtomicU64,
    /// When the fleet's stored certificate expires (Unix seconds); 0: none stored.
    stored_until: AtomicU64,
    /// The length of the holder's name; 0: no node orders it now.
    holder_len: AtomicU64,
    holder: [AtomicU64; HOLDER_WORDS],
}

// SAFETY: only atomics, `repr(C)`, all-zero is a valid (free) entry.
#[allow(unsafe_code)]
unsafe impl crate::base::sys::SharedAtomic for CertEntry {}

static CERT_TABLE: OnceLock<&'static [CertEntry]> = OnceLock::new();

/// FNV-1a of the name, never 0.
fn hash(name: &str) -> u64 {
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    h.max(1)
}

fn slot<'a>(table: &'a [CertEntry], name: &str) -> Option<&'a CertEntry> {
    let k = hash(name);
    let e =
        table.iter().find(|e| e.key.load(Relaxed) == k).or_else(|| table.iter().find(|e| e.key.load(Relaxed) == 0))?;
    e.key.store(k, Relaxed);
    Some(e)
}

fn put_cert(table: &[CertEntry], name: &str, stored_until: Option<i64>, holder: Option<Option<&str>>) {
    let Some(e) = slot(table, name) else { return };
    if let Some(until) = stored_until {
        e.stored_until.store(until.max(0) as u64, Relaxed);
    }
    if let Some(holder) = holder {
        let bytes = holder.unwrap_or("").as_bytes();
        let bytes = &bytes[..bytes.len().min(HOLDER_WORDS * 8)];
        for (word, chunk) in e.holder.iter().zip(bytes.chunks(8)) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            word.store(u64::from_le_bytes(w), Relaxed);
        }
        e.holder_len.store(bytes.len() as u64, Relaxed);
    }
}

fn get_cert(table: &[CertEntry], name: &str) -> Option<CertShown> {
    let k = hash(name);
    let e = table.iter().find(|e| e.key.load(Relaxed) == k)?;
    let len = (e.holder_len.load(Relaxed) as usize).min(HOLDER_WORDS * 8);
    let mut bytes: Vec<u8> = e.holder.iter().flat_map(|w| w.load(Relaxed).to_le_bytes()).collect();
    bytes.truncate(len);
    let holder = (len > 0).then(|| String::from_utf8_lossy(&bytes).into_owned());
    Some(CertShown { stored_until: e.stored_until.load(Relaxed) as i64, holder })
}

/// The fleet's view of one ACME certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertShown {
    /// When the stored one expires; 0: none stored.
    pub stored_until: i64,
    /// The node ordering it now, if any.
    pub holder: Option<String>,
}

/// The master: when the fleet's certificate of the vhost whose first name is `name`
/// expires (`Some`), and who orders it now (`Some(None)`: nobody); `None` leaves
/// either as it was.
pub fn set_cert(name: &str, stored_until: Option<i64>, holder: Option<Option<&str>>) {
    if let Some(t) = CERT_TABLE.get() {
        put_cert(t, name, stored_until, holder);
    }
}

/// The workers: what the master last said of `name`.
pub fn cert(name: &str) -> Option<CertShown> {
    get_cert(CERT_TABLE.get()?, name)
}

// SAFETY: only atomics, `repr(C)`, all-zero is a valid entry (no `[cluster]`).
#[allow(unsafe_code)]
unsafe impl crate::base::sys::SharedAtomic for Entry {}

static ENTRY: OnceLock<&'static Entry> = OnceLock::new();

/// The link to Redis as shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    /// Not tried yet.
    Unknown = 1,
    Up = 2,
    Down = 3,
}

/// Maps the entry (once, in the master, before any fork).
pub fn map() -> std::io::Result<()> {
    if ENTRY.get().is_none() {
        let _ = ENTRY.set(&crate::base::sys::map_shared::<Entry>(1)?[0]);
    }
    if CERT_TABLE.get().is_none() {
        let _ = CERT_TABLE.set(crate::base::sys::map_shared::<CertEntry>(CERTS)?);
    }
    Ok(())
}

/// The master: the link now (`None`: no `[cluster]`) and the failed tries in a row,
/// at `now`.
pub fn set_link(link: Option<Link>, tries: u32, now: i64) {
    if let Some(e) = ENTRY.get() {
        let n = link.map_or(0, |l| l as u64);
        if e.link.swap(n, Relaxed) != n {
            e.since.store(now.max(0) as u64, Relaxed);
        }
        e.tries.store(u64::from(tries), Relaxed);
    }
}

/// The master: the ticket keys agree with the fleet's at `now`; their period began
/// at `key_since`.
pub fn set_tickets(now: i64, key_since: i64) {
    if let Some(e) = ENTRY.get() {
        e.tickets.store(now.max(0) as u64, Relaxed);
        e.key_since.store(key_since.max(0) as u64, Relaxed);
    }
}

/// What the workers show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shown {
    pub link: Link,
    pub since: i64,
    /// 0: never yet.
    pub tickets: i64,
    /// Failed tries in a row while down.
    pub tries: u32,
    /// When the ticket key's period began (Unix seconds); 0: not agreed yet.
    pub key_since: i64,
}

/// The workers: what the master last said; `None` without `[cluster]`.
pub fn lookup() -> Option<Shown> {
    let e = ENTRY.get()?;
    let link = match e.link.load(Relaxed) {
        1 => Link::Unknown,
        2 => Link::Up,
        3 => Link::Down,
        _ => return None,
    };
    Some(Shown {
        link,
        since: e.since.load(Relaxed) as i64,
        tickets: e.tickets.load(Relaxed) as i64,
        tries: e.tries.load(Relaxed) as u32,
        key_since: e.key_since.load(Relaxed) as i64,
    })
}

impl Link {
    pub fn word(self) -> &'static str {
        match self {
            Link::Unknown => "unknown",
            Link::Up => "up",
            Link::Down => "down",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_certificate_keeps_its_stored_expiry_and_its_holder() {
        let table: Vec<CertEntry> = (0..3)
            .map(|_| CertEntry {
                key: AtomicU64::new(0),
                stored_until: AtomicU64::new(0),
                holder_len: AtomicU64::new(0),
                holder: [const { AtomicU64::new(0) }; HOLDER_WORDS],
            })
            .collect();
        put_cert(&table, "a.example", Some(100), None);
        put_cert(&table, "a.example", None, Some(Some("web2[4242]")));
        put_cert(&table, "b.example", None, Some(Some(&"x".repeat(100))));
        assert_eq!(
            get_cert(&table, "a.example"),
            Some(CertShown { stored_until: 100, holder: Some("web2[4242]".into()) })
        );
        assert_eq!(get_cert(&table, "b.example").unwrap().holder.unwrap().len(), 64, "cut to its room");
        put_cert(&table, "a.example", None, Some(None));
        assert_eq!(get_cert(&table, "a.example"), Some(CertShown { stored_until: 100, holder: None }));
        assert_eq!(get_cert(&table, "c.example"), None);
    }
}
