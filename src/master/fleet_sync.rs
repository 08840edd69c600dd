//! The master's moves with its fleet (`[cluster]`): what the tick does to keep this
//! node in step with the others, and what ACME asks of the fleet (a lock per order,
//! the certificate stored for the others, the account shared). What the master keeps
//! of the fleet, and the records it writes, are `fleet.rs`.

use super::fleet::*;
use super::state::Master;
use crate::acme::challenges::Kind;
use crate::acme::schedule::{self, CertRetry};
use crate::acme::store;
use crate::base::clock::unix_secs;
use crate::cluster::client::Health;
use crate::cluster::status::{self, Link};
use crate::cluster::{self, Field};
use crate::tls::tickets::TicketKeys;
use std::collections::HashMap;

impl Master {
    /// At start and after a reload: the fleet of the config (a changed `[cluster]`
    /// opens a new link; a broken one is said and the old link kept).
    pub(super) fn fleet_configure(&mut self) {
        let wanted = self.config.cluster.clone();
        match (&wanted, &self.fleet) {
            (None, _) => {
                self.fleet = None;
                status::set_link(None, 0, unix_secs());
            }
            (Some(s), Some(f)) if f.settings == *s => {}
            (Some(s), _) => match Fleet::open(s) {
                Ok(f) => {
                    log::info!("cluster: sharing state through Redis at {}", f.link.shown());
                    self.fleet = Some(f);
                    status::set_link(Some(Link::Unknown), 0, unix_secs());
                }
                Err(e) => log::error!("cluster: {e}"),
            },
        }
    }

    /// At the start of the loop (the error log open): the fleet's link, and where
    /// the ticket keys came from.
    pub(super) fn fleet_start(&mut self) {
        self.fleet_configure();
        let Some(f) = &self.fleet else { return };
        let cached = cluster::cache::read(&f.settings.cache_dir, TICKETS_FILE);
        if cached
            .as_deref()
            .and_then(TicketKeys::from_bytes)
            .is_some_and(|c| c.same_chain(&self.tickets, unix_secs() as u64))
        {
            log::info!("cluster: the ticket keys from the cache (the fleet's as last seen)");
        }
    }

    /// On the tick: tickets, certificates, challenges, locks (see the module's text).
    pub(super) fn fleet_tick(&mut self) {
        let Some(f) = &mut self.fleet else { return };
        let now = unix_secs();
        let was = f.link.health();
        let version = f.link.counter(CERTS);
        let (link, tries) = match f.link.health() {
            Health::Up => (Link::Up, 0),
            Health::Down { failures, .. } => (Link::Down, failures),
            Health::Unknown => (Link::Unknown, 0),
        };
        status::set_link(Some(link), tries, now);
        self.fleet_cache_tickets();
        let Some(version) = version else { return };
        if !matches!(was, Health::Up) {
            // Back (or first): look at everything again.
            if let Some(f) = &mut self.fleet {
                f.certs_seen = None;
            }
        }
        self.fleet_tickets(now);
        self.fleet_certificates(version, now);
        self.fleet_challenges();
        self.fleet_renew_locks();
        self.fleet_holders();
    }

    /// Who orders each ACME certificate now, for the status page.
    fn fleet_holders(&mut self) {
        let Some(f) = &mut self.fleet else { return };
        let firsts: Vec<String> =
            self.config.vhosts.iter().filter(|v| v.acme).filter_map(|v| v.server_names.first().cloned()).collect();
        let locks: Vec<String> = firsts.iter().map(|n| order_lock(n)).collect();
        let Some(holders) = f.link.holders(&locks) else { return };
        for (name, holder) in firsts.iter().zip(&holders) {
            status::set_cert(name, None, Some(holder.as_deref()));
        }
    }

    /// The ticket keys' cache follows the chain (a new period overwrites the old secret).
    fn fleet_cache_tickets(&mut self) {
        let Some(f) = &mut self.fleet else { return };
        if f.cached_period != Some(self.tickets.period()) {
            match cluster::cache::write(&f.settings.cache_dir, TICKETS_FILE, &self.tickets.to_bytes()) {
                Ok(()) => f.cached_period = Some(self.tickets.period()),
                Err(e) => log::error!("cluster: cannot cache the ticket keys: {e}"),
            }
        }
    }

    fn fleet_tickets(&mut self, now: i64) {
        let Some(f) = &mut self.fleet else { return };
        let unix = now.max(0) as u64;
        let Some(stored) = f.link.get(TICKETS) else { return };
        let theirs = stored.as_deref().and_then(TicketKeys::from_bytes);
        let Some(mut theirs) = theirs else {
            // None in the fleet yet: offer this node's; if another node was first,
            // the next tick takes that one.
            if f.link.put_new(TICKETS, &self.tickets.to_bytes()) == Some(true) {
                log::info!("cluster: this node's ticket keys are the fleet's now");
                status::set_tickets(now, period_start(&self.tickets));
            }
            return;
        };
        let stored_period = theirs.period();
        theirs.advance(unix);
        if !self.tickets.same_chain(&theirs, unix) {
            log::info!("cluster: taking the fleet's ticket keys (a reload, so every worker seals with them)");
            self.tickets = theirs;
            f.cached_period = None;
            self.fleet_cache_tickets();
            self.reload();
        }
        self.tickets.advance(unix);
        status::set_tickets(now, period_start(&self.tickets));
        let Some(f) = &mut self.fleet else { return };
        if stored_period < self.tickets.period() && f.link.lock(TICKETS_LOCK) == Some(true) {
            // A new period: Redis gets the chain stepped forward (its older secret
            // overwritten), by one node.
            f.link.put(TICKETS, &self.tickets.to_bytes(), None);
            f.link.unlock(TICKETS_LOCK);
        }
    }

    /// Each ACME vhost's certificate as the fleet stores it, taken when it differs
    /// from this node's; a reload installs them.
    fn fleet_certificates(&mut self, version: u64, now: i64) {
        let Some(settings) = self.config.acme.clone() else { return };
        let Some(f) = &mut self.fleet else { return };
        if f.certs_seen == Some(version) {
            return;
        }
        let mut taken = Vec::new();
        for v in self.config.vhosts.iter().filter(|v| v.acme) {
            let Some(first) = v.server_names.first() else { continue };
            let Some(record) = f.link.get(&cert_key(first)) else { return };
            let Some(r) = record.and_then(|b| serde_json::from_slice::<CertRecord>(&b).ok()) else {
                // None in the fleet (a new Redis, or one that lost its data): this
                // node's, if it has one, unless another node was first.
                if v.tls.as_ref().is_some_and(|c| !c.placeholder) {
                    offer_cert(&mut f.link, &settings.state_dir, &v.server_names);
                }
                continue;
            };
            let until = store::chain_validity(&r.chain).map_or(0, |v| v.not_after);
            status::set_cert(first, Some(until), None);
            if take_cert(&settings.state_dir, &v.server_names, &r, now) {
                taken.push((v.server_names.clone(), r.stored_at));
            }
        }
        f.certs_seen = Some(version);
        for (names, at) in &taken {
            self.acme.obtained_elsewhere(names, *at);
            self.acme.install = true;
        }
    }

    /// The fleet's challenges into this node's table.
    fn fleet_challenges(&mut self) {
        let Some(f) = &mut self.fleet else { return };
        let Some(board) = crate::acme::challenges::shared() else { return };
        let Some(fields) = f.link.fields(CHALLENGES) else { return };
        let now: HashMap<Field, Vec<u8>> = fields.into_iter().collect();
        for (field, value) in &now {
            let Some(kind) = Kind::from_u8(field.0) else { continue };
            if f.mirrored.get(field) != Some(value) && !f.own.contains(field) {
                board.put(kind, &field.1, value);
                f.mirrored.insert(field.clone(), value.clone());
            }
        }
        let gone: Vec<Field> =
            f.mirrored.keys().filter(|k| !now.contains_key(*k) && !f.own.contains(*k)).cloned().collect();
        for field in gone {
            if let Some(kind) = Kind::from_u8(field.0) {
                board.remove(kind, &field.1);
            }
            f.mirrored.remove(&field);
        }
    }

    fn fleet_renew_locks(&mut self) {
        let Some(f) = &mut self.fleet else { return };
        let locks: Vec<(Vec<String>, String)> = f.held.iter().map(|(n, l)| (n.clone(), l.clone())).collect();
        for (names, lock) in locks {
            if f.link.renew(&lock) == Some(false) {
                log::error!(
                    "cluster: the lock for {} was lost (its lease ran out): another node may order it too",
                    names.join(", ")
                );
                f.held.remove(&names);
            }
        }
    }

    /// Of the certificates due, those this node orders for the fleet: the ones whose
    /// lock it takes and that no node stored meanwhile. Nothing while Redis is down.
    pub(super) fn fleet_claim(&mut self, jobs: Vec<Vec<String>>, settings: &crate::acme::Settings) -> Vec<Vec<String>> {
        let Some(f) = &mut self.fleet else { return jobs };
        let now = unix_secs();
        let mut mine = Vec::new();
        for names in jobs {
            let first = names.first().cloned().unwrap_or_default();
            let lock = order_lock(&first);
            match f.link.lock(&lock) {
                None => break,
                Some(false) => {
                    if f.waiting.insert(names.clone()) {
                        let who = f.link.holder(&lock).flatten().unwrap_or_else(|| "another node".into());
                        log::info!(
                            "acme: {} is being ordered by {who} for the fleet; waiting for it",
                            names.join(", ")
                        );
                    }
                }
                Some(true) => {
                    f.waiting.remove(&names);
                    let stored = f.link.get(&cert_key(&first)).flatten();
                    let record = stored.and_then(|b| serde_json::from_slice::<CertRecord>(&b).ok());
                    // Stored by another node since this node last looked, for these
                    // names, and not due (its floor counted from when that node
                    // stored it): take it.
                    if let Some(r) = record {
                        let life = CertRetry { obtained: r.stored_at, ..CertRetry::default() };
                        let not_due = r.names == names
                            && store::chain_validity(&r.chain).is_some_and(|v| {
                                schedule::due(Some((v.not_before, v.not_after)), settings.renew_before, &life) > now
                            });
                        if not_due {
                            let taken = take_cert(&settings.state_dir, &names, &r, now);
                            f.link.unlock(&lock);
                            self.acme.obtained_elsewhere(&names, r.stored_at);
                            self.acme.install |= taken;
                            continue;
                        }
                    }
                    f.held.insert(names.clone(), lock);
                    mine.push(names);
                }
            }
        }
        mine
    }

    /// The fleet's ACME account: its key (made and offered by this node if the fleet
    /// has none) and its URL at `directory`. `None` while Redis is down.
    pub(super) fn fleet_account(&mut self, settings: &crate::acme::Settings) -> Option<Result<Account, String>> {
        let f = self.fleet.as_mut()?;
        // The folder the child's certificate is stored in, as a node alone makes it.
        if let Err(e) = store::prepare(&settings.state_dir) {
            return Some(Err(e));
        }
        for _ in 0..2 {
            let stored = f.link.get(ACCOUNT)?;
            if let Some(r) = stored.and_then(|b| serde_json::from_slice::<AccountRecord>(&b).ok()) {
                let Some(key) = crate::acme::b64::decode(&r.key) else {
                    return Some(Err("the fleet's account key is unreadable".into()));
                };
                let url = r.url.filter(|_| r.directory.as_deref() == Some(settings.directory.as_str()));
                return Some(Ok((key, url)));
            }
            // The fleet has none: this node's (made now if it has none either).
            let key = match store::prepare(&settings.state_dir).and_then(|()| store::account_key(&settings.state_dir)) {
                Ok(k) => k,
                Err(e) => return Some(Err(e)),
            };
            let url = store::account_url(&settings.state_dir, &settings.directory);
            let record =
                AccountRecord { key: crate::acme::b64::url(&key), directory: Some(settings.directory.clone()), url };
            let bytes = serde_json::to_vec(&record).unwrap_or_default();
            if f.link.put_new(ACCOUNT, &bytes)? {
                log::info!("acme: this node's account key is the fleet's now");
            }
        }
        Some(Err("the fleet's account could not be read back".into()))
    }

    /// The child registered an account: the fleet's record gets its URL.
    pub(super) fn fleet_account_url(&mut self, settings: &crate::acme::Settings, url: &str) {
        let Some(f) = &mut self.fleet else { return };
        let Some(Some(b)) = f.link.get(ACCOUNT) else { return };
        let Ok(mut r) = serde_json::from_slice::<AccountRecord>(&b) else { return };
        r.directory = Some(settings.directory.clone());
        r.url = Some(url.to_string());
        f.link.put(ACCOUNT, &serde_json::to_vec(&r).unwrap_or_default(), None);
    }

    /// A certificate this node obtained and stored: the fleet gets it, and its lock is freed.
    pub(super) fn fleet_stored(&mut self, settings: &crate::acme::Settings, names: &[String]) {
        let Some(f) = &mut self.fleet else { return };
        let first = names.first().cloned().unwrap_or_default();
        let (crt, key) = store::cert_files(&settings.state_dir, &first);
        if let (Ok(chain), Ok(key)) = (std::fs::read_to_string(crt), std::fs::read_to_string(key)) {
            let record = CertRecord { names: names.to_vec(), chain, key, stored_at: unix_secs() };
            let until = store::chain_validity(&record.chain).map_or(0, |v| v.not_after);
            let stored = f.link.put(&cert_key(&first), &serde_json::to_vec(&record).unwrap_or_default(), None);
            if stored.is_some() {
                status::set_cert(&first, Some(until), None);
                f.link.bump(CERTS);
            } else {
                log::error!(
                    "cluster: the certificate for {} is not in the fleet's store (Redis is down)",
                    names.join(", ")
                );
            }
        }
        self.fleet_unlock(names);
    }

    /// An order ended (stored, failed, or its child gone): its lock is freed.
    pub(super) fn fleet_unlock(&mut self, names: &[String]) {
        let Some(f) = &mut self.fleet else { return };
        if let Some(lock) = f.held.remove(names) {
            f.link.unlock(&lock);
        }
    }

    /// The ACME child ended: every lock it worked under is freed, and what it
    /// published taken down.
    pub(super) fn fleet_child_gone(&mut self) {
        let Some(f) = &mut self.fleet else { return };
        for (_, lock) in f.held.drain() {
            f.link.unlock(&lock);
        }
        let own: Vec<Field> = f.own.iter().cloned().collect();
        for field in own {
            self.fleet_unpublish(field.0, &String::from_utf8_lossy(&field.1));
        }
    }

    /// The child publishes a challenge: in this node's table at once, and in the
    /// fleet's for the others.
    pub(super) fn fleet_publish(&mut self, kind: u8, name: &str, value: &str) {
        let (Some(f), Some(board), Some(k)) = (&mut self.fleet, crate::acme::challenges::shared(), Kind::from_u8(kind))
        else {
            return;
        };
        let Some(value) = crate::acme::b64::decode(value) else { return };
        if !board.put(k, name.as_bytes(), &value) {
            log::error!("acme: the table of challenges is full");
        }
        let field: Field = (kind, name.as_bytes().to_vec());
        if f.link.put_field(CHALLENGES, &field, &value, CHALLENGE_TTL).is_none() {
            log::warn!("acme: the {name} challenge is answered by this node only (Redis is down)");
        }
        f.mirrored.insert(field.clone(), value);
        f.own.insert(field);
    }

    pub(super) fn fleet_unpublish(&mut self, kind: u8, name: &str) {
        let (Some(f), Some(board), Some(k)) = (&mut self.fleet, crate::acme::challenges::shared(), Kind::from_u8(kind))
        else {
            return;
        };
        board.remove(k, name.as_bytes());
        let field: Field = (kind, name.as_bytes().to_vec());
        f.link.remove_field(CHALLENGES, &field);
        f.mirrored.remove(&field);
        f.own.remove(&field);
    }

    /// Whether a fleet is configured (ACME's challenges then go through the master).
    pub(super) fn in_fleet(&self) -> bool {
        self.fleet.is_some()
    }
}
