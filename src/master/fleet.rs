//! The master's side of a fleet (`[cluster]`, [`crate::cluster`]): on its tick it
//! keeps this node in step with the others through Redis, and between ticks it never
//! waits on Redis for long (every command is bounded, and a Redis that is down is
//! left alone for its back-off).
//!
//! What the tick does, in order:
//! - the ticket keys: the fleet's chain is taken (and installed by a reload, so every
//!   worker seals with it) if this node's differs; none in Redis: this node's is
//!   offered; a new period: one node, under a lock, writes the chain stepped forward,
//!   so Redis never holds a secret older than the previous period. Cached on disk
//!   (`cache_dir/tickets`), so a node that starts with Redis down keeps the fleet's.
//! - the certificates: when the fleet's counter moved, each ACME vhost's stored
//!   certificate that differs from this node's is written to `acme.state_dir` (checked
//!   as one from the ACME child) and installed by a reload, as today.
//! - the challenges: the fleet's are copied into this node's table, from which the
//!   workers answer (the master is the table's only writer in a fleet).
//! - the locks this node holds for its orders are renewed.
//!
//! ACME in a fleet (`acme.rs` calls `Master::fleet_claim` and the report hooks in
//! `fleet_sync.rs`): a due certificate is ordered by the node that takes its lock; the others
//! wait for the one it stores. The account key is the fleet's, sealed in Redis.

use std::collections::{HashMap, HashSet};

use crate::acme::store;
use crate::base::clock::unix_secs;
use crate::cluster::{self, Field, Settings};
use crate::tls::tickets::TicketKeys;

/// The keys the fleet stores under (after `cluster.prefix`).
pub(super) const ACCOUNT: &str = "acme:account";
/// A counter every node adds one to when it stores a certificate.
pub(super) const CERTS: &str = "acme:certs";
pub(super) const CHALLENGES: &str = "acme:challenges";
pub(super) const TICKETS: &str = "tls:tickets";
pub(super) const TICKETS_LOCK: &str = "lock:tls:tickets";
/// The cache file of the ticket keys (in `cluster.cache_dir`).
pub(super) const TICKETS_FILE: &str = "tickets";

pub(super) fn cert_key(first: &str) -> String {
    format!("acme:cert:{first}")
}

/// When the chain's current period began (Unix seconds).
pub(super) fn period_start(keys: &TicketKeys) -> i64 {
    (keys.period() * crate::tls::tickets::PERIOD.as_secs()) as i64
}

pub(super) fn order_lock(first: &str) -> String {
    format!("lock:acme:{first}")
}

/// How long the fleet's challenges stay in Redis after their last write: past any
/// order's time, so a node that dies mid-order leaves nothing behind for long.
pub(super) const CHALLENGE_TTL: std::time::Duration = std::time::Duration::from_secs(3600);

/// A certificate as the fleet stores it (sealed).
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct CertRecord {
    pub(super) names: Vec<String>,
    pub(super) chain: String,
    pub(super) key: String,
    /// When the node that obtained it stored it (Unix seconds): the fleet's one-hour
    /// floor between orders of a name counts from here.
    #[serde(default)]
    pub(super) stored_at: i64,
}

/// The ACME account as the fleet stores it (sealed): the key (PKCS#8, base64url) and
/// the account's URL at a directory.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct AccountRecord {
    pub(super) key: String,
    pub(super) directory: Option<String>,
    pub(super) url: Option<String>,
}

/// The account key (PKCS#8 DER) and its URL at the configured directory, if known.
pub(super) type Account = (Vec<u8>, Option<String>);

/// The fleet as the master keeps it.
pub(super) struct Fleet {
    pub(super) link: cluster::Fleet,
    pub(super) settings: Settings,
    /// The certificates' counter last seen; `None`: not yet (look at every one).
    pub(super) certs_seen: Option<u64>,
    /// The fleet's challenges as this node's table has them.
    pub(super) mirrored: HashMap<Field, Vec<u8>>,
    /// Those this node's ACME child published (kept while it runs, whatever Redis says).
    pub(super) own: HashSet<Field>,
    /// The order locks this node holds, by the names of their certificate.
    pub(super) held: HashMap<Vec<String>, String>,
    /// The certificates another node was ordering, said once in the log.
    pub(super) waiting: HashSet<Vec<String>>,
    /// The ticket keys' period last written to the cache.
    pub(super) cached_period: Option<u64>,
}

impl Fleet {
    pub(super) fn open(settings: &Settings) -> Result<Fleet, String> {
        cluster::cache::prepare(&settings.cache_dir)?;
        Ok(Fleet {
            link: cluster::Fleet::open(settings)?,
            settings: settings.clone(),
            certs_seen: None,
            mirrored: HashMap::new(),
            own: HashSet::new(),
            held: HashMap::new(),
            waiting: HashSet::new(),
            cached_period: None,
        })
    }
}

/// The ticket keys a node starts with: the cached chain if there is one (the fleet's,
/// as last seen), else a fresh one.
pub(super) fn start_tickets(settings: Option<&Settings>, now: u64) -> std::io::Result<TicketKeys> {
    let cached = settings.and_then(|s| cluster::cache::read(&s.cache_dir, TICKETS_FILE));
    match cached.as_deref().and_then(TicketKeys::from_bytes) {
        Some(mut keys) => {
            keys.advance(now);
            Ok(keys)
        }
        None => TicketKeys::new(now),
    }
}

/// Offers this node's certificate for `names` to a fleet that has none.
pub(super) fn offer_cert(link: &mut cluster::Fleet, dir: &std::path::Path, names: &[String]) {
    let first = names.first().map_or("", String::as_str);
    let (crt, key) = store::cert_files(dir, first);
    let (Ok(chain), Ok(key)) = (std::fs::read_to_string(crt), std::fs::read_to_string(key)) else { return };
    let record = CertRecord { names: names.to_vec(), chain, key, stored_at: unix_secs() };
    if link.put_new(&cert_key(first), &serde_json::to_vec(&record).unwrap_or_default()) == Some(true) {
        log::info!("cluster: this node's certificate for {} is the fleet's now", names.join(", "));
        link.bump(CERTS);
    }
}

/// Writes the fleet's certificate for `names` to the state folder if it is for these
/// names and differs from the one there; true when written. Checked as one from the
/// ACME child ([`store::save_cert`]: it loads with its key and covers the names now).
pub(super) fn take_cert(dir: &std::path::Path, names: &[String], r: &CertRecord, now: i64) -> bool {
    if r.names != names {
        return false;
    }
    let (crt, _) = store::cert_files(dir, names.first().map_or("", String::as_str));
    let ours = std::fs::read_to_string(&crt).ok();
    if ours.as_deref() == Some(r.chain.as_str()) {
        return false;
    }
    // Never an older one over a newer (this node's, obtained while Redis was down).
    let until = |chain: &str| store::chain_validity(chain).map_or(0, |v| v.not_after);
    if ours.as_deref().is_some_and(|c| until(c) >= until(&r.chain)) {
        return false;
    }
    if let Err(e) = store::prepare(dir) {
        log::error!("acme: {e}");
        return false;
    }
    match store::save_cert(dir, names, &r.chain, &r.key, now) {
        Ok(()) => {
            log::info!("cluster: the certificate for {} from the fleet (installed by a reload)", names.join(", "));
            true
        }
        Err(e) => {
            log::error!("cluster: the fleet's certificate for {} is not taken: {e}", names.join(", "));
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn record(names: &[&str], days: i64) -> CertRecord {
        let made = crate::tls::test_certs::leaf(names, -1, days, None);
        CertRecord {
            names: names.iter().map(|n| n.to_string()).collect(),
            chain: made.pems.concat(),
            key: made.key_pem,
            stored_at: 0,
        }
    }

    #[test]
    pub(super) fn the_fleets_certificate_is_taken_when_new_and_never_over_a_newer_one() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("acme");
        let now = crate::tls::test_certs::now();
        let names = vec!["a.example".to_string()];
        let (short, long) = (record(&["a.example"], 30), record(&["a.example"], 90));
        assert!(take_cert(&dir, &names, &short, now), "none here: taken");
        assert!(!take_cert(&dir, &names, &short, now), "the same: not again");
        assert!(take_cert(&dir, &names, &long, now), "a newer one: taken");
        assert!(!take_cert(&dir, &names, &short, now), "an older one never replaces it");
        let served = store::vhost_cert(&dir, &names, now).unwrap();
        assert_eq!(Some(served.validity), store::chain_validity(&long.chain));
        // For other names, or not covering these: left alone.
        assert!(!take_cert(&dir, &["b.example".to_string()], &long, now));
        let other = record(&["b.example"], 120);
        let forged = CertRecord { names: names.clone(), ..other };
        assert!(!take_cert(&dir, &names, &forged, now), "a chain that does not cover the names");
        assert_eq!(store::vhost_cert(&dir, &names, now).unwrap().validity, served.validity);
    }
}
