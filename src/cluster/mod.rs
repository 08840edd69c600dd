//! A fleet: pika nodes behind one load balancer that share, through Redis, what a
//! single node keeps to itself (`[cluster]`): the ACME account, the certificates and
//! their keys, the challenges being validated, a lock per order, and the session-ticket
//! keys. Only the master and the ACME child talk to Redis; no worker does, and no
//! request waits on it.
//!
//! This folder is the storage and knows nothing of ACME or TLS: [`client`] (one
//! connection with timeouts, Redis's health and the back-off), [`crypto`] (every value
//! sealed with a key derived from `key_file`), [`lock`] (a lease lock), and [`Fleet`]
//! here, which the master's ACME and ticket code call with their own key names.

pub mod cache;
pub mod client;
pub mod crypto;
pub mod lock;
pub mod status;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use client::{Health, Redis};
use crypto::Sealer;

/// The `[cluster]` section, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `redis://host:port/db` or `rediss://…` (the password, if in the URL, is never shown).
    pub redis: String,
    /// The roots trusted for `rediss://` (PEM); `None`: the system's.
    pub ca_file: Option<PathBuf>,
    /// A file holding Redis's password (root's, not readable by others).
    pub password_file: Option<PathBuf>,
    /// Put before every key, so fleets can share one Redis (`pika:` when unset).
    pub prefix: String,
    /// The fleet's secret, from which the sealing key is derived (root's, not
    /// readable by others).
    pub key_file: PathBuf,
    /// This node's copy of what it must serve with Redis down (the ticket keys; the
    /// certificates are kept in `acme.state_dir`): root's, 0700.
    pub cache_dir: PathBuf,
}

/// `prefix` when unset.
pub const DEFAULT_PREFIX: &str = "pika:";

/// Checks that a secret file is a regular file of the master's user that no one
/// else may read (the key file, the password file).
pub fn check_secret_file(what: &str, file: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(file).map_err(|e| format!("{what} {}: {e}", file.display()))?;
    if !meta.is_file() {
        return Err(format!("{what} {} is not a file", file.display()));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(format!("{what} {} belongs to uid {}, not to uid {me} (the master's)", file.display(), meta.uid()));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{what} {} has mode {:o}: it is a secret, make it 0600 or 0400",
            file.display(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// This node's name in the locks and on the status page: the host's name and the
/// master's pid.
pub fn node_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}[{}]", host.trim(), std::process::id())
}

/// The sealing key derived from the key file, whose bytes are wiped once read.
fn read_sealer(file: &Path) -> Result<Sealer, String> {
    let secret =
        zeroize::Zeroizing::new(std::fs::read(file).map_err(|e| format!("cluster.key_file {}: {e}", file.display()))?);
    Sealer::new(&secret).map_err(|e| format!("cluster.key_file {}: {e}", file.display()))
}

/// The fleet as one node sees it: its connection to Redis, where its secret is, the
/// prefix, and the token its locks carry.
///
/// The sealing key is derived from `key_file` for each command and dropped after
/// (the file's bytes wiped): the master holds no key between its ticks, so a worker
/// forked from it inherits none (no worker needs one).
pub struct Fleet {
    redis: Redis,
    key_file: PathBuf,
    /// The key file could not be read: said once.
    key_failed: bool,
    prefix: String,
    /// This node's lock token: its name and a random part (a restarted master with
    /// the same pid never renews its predecessor's locks).
    token: String,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Fleet {{ {:?}, prefix {:?} }}", self.redis, self.prefix)
    }
}

/// What a hash field is named by: a kind byte and a name.
pub type Field = (u8, Vec<u8>);

/// What `sealed` holds, if it opens under `key` (else said in the log).
fn unseal(sealer: &Sealer, key: &str, sealed: &[u8]) -> Option<Vec<u8>> {
    match sealer.open(key, sealed) {
        Ok(v) => Some(v),
        Err(e) => {
            log::error!("cluster: the value of {key} {e}: ignored");
            None
        }
    }
}

impl Fleet {
    /// Checks the key file, the password file and reads the CA file (as root, at
    /// start and on reload: never on the request path) and makes the client; no
    /// connection yet.
    pub fn open(s: &Settings) -> Result<Fleet, String> {
        read_sealer(&s.key_file)?;
        if let Some(f) = &s.password_file {
            check_secret_file("cluster.password_file", f)?;
        }
        let ca = match &s.ca_file {
            Some(f) => Some(std::fs::read(f).map_err(|e| format!("cluster.ca_file {}: {e}", f.display()))?),
            None => None,
        };
        let redis = Redis::new(&s.redis, s.password_file.clone(), ca)?;
        let mut rand = [0u8; 6];
        aws_lc_rs::rand::fill(&mut rand).map_err(|_| "no random bytes".to_string())?;
        let token = format!("{} {}", node_name(), rand.iter().map(|b| format!("{b:02x}")).collect::<String>());
        Ok(Fleet { redis, key_file: s.key_file.clone(), key_failed: false, prefix: s.prefix.clone(), token })
    }

    /// The sealing key, from the key file now; `None` (said once) when it cannot be read.
    fn sealer(&mut self) -> Option<Sealer> {
        match read_sealer(&self.key_file) {
            Ok(s) => {
                self.key_failed = false;
                Some(s)
            }
            Err(e) => {
                if !self.key_failed {
                    log::error!("cluster: {e}: nothing is read from or written to the fleet's store");
                    self.key_failed = true;
                }
                None
            }
        }
    }

    pub fn health(&self) -> Health {
        self.redis.health()
    }

    pub fn shown(&self) -> &str {
        self.redis.shown()
    }

    /// The Redis key for `name` (the prefix put before).
    pub fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The value under `name`, opened. `None`: Redis is down; `Some(None)`: nothing
    /// there, or a value that does not open (another fleet's key: said in the log).
    pub fn get(&mut self, name: &str) -> Option<Option<Vec<u8>>> {
        let key = self.key(name);
        let sealed: Option<Vec<u8>> = self.redis.run(|c| redis::cmd("GET").arg(&key).query(c))?;
        let Some(sealed) = sealed else { return Some(None) };
        let Some(sealer) = self.sealer() else { return Some(None) };
        Some(unseal(&sealer, &key, &sealed))
    }

    /// Stores `value` under `name`, sealed; `ttl`: it expires then. `None`: Redis is
    /// down (or the key file unreadable).
    pub fn put(&mut self, name: &str, value: &[u8], ttl: Option<Duration>) -> Option<()> {
        let key = self.key(name);
        let sealed = self.sealer()?.seal(&key, value);
        self.redis.run(|c| {
            let mut cmd = redis::cmd("SET");
            cmd.arg(&key).arg(&sealed);
            if let Some(t) = ttl {
                cmd.arg("PX").arg(t.as_millis() as u64);
            }
            cmd.query::<()>(c)
        })
    }

    /// Stores `value` under `name` only if nothing is there: true when it was stored.
    pub fn put_new(&mut self, name: &str, value: &[u8]) -> Option<bool> {
        let key = self.key(name);
        let sealed = self.sealer()?.seal(&key, value);
        let set: Option<Option<String>> =
            self.redis.run(|c| redis::cmd("SET").arg(&key).arg(&sealed).arg("NX").query(c));
        set.map(|s| s.is_some())
    }

    /// Adds one to the counter `name`; its new value.
    pub fn bump(&mut self, name: &str) -> Option<u64> {
        let key = self.key(name);
        self.redis.run(|c| redis::cmd("INCR").arg(&key).query(c))
    }

    /// The counter `name` (0 when unset).
    pub fn counter(&mut self, name: &str) -> Option<u64> {
        let key = self.key(name);
        let v: Option<Option<u64>> = self.redis.run(|c| redis::cmd("GET").arg(&key).query(c));
        v.map(Option::unwrap_or_default)
    }

    /// Every field of the hash `name`, opened (fields that do not open are left out).
    pub fn fields(&mut self, name: &str) -> Option<Vec<(Field, Vec<u8>)>> {
        let key = self.key(name);
        let all: Vec<(Vec<u8>, Vec<u8>)> = self.redis.run(|c| redis::cmd("HGETALL").arg(&key).query(c))?;
        if all.is_empty() {
            return Some(Vec::new());
        }
        let Some(sealer) = self.sealer() else { return Some(Vec::new()) };
        Some(
            all.into_iter()
                .filter_map(|(field, sealed)| {
                    let (&kind, name) = field.split_first()?;
                    let value = unseal(&sealer, &format!("{key} {}", String::from_utf8_lossy(&field)), &sealed)?;
                    Some(((kind, name.to_vec()), value))
                })
                .collect(),
        )
    }

    /// Sets one field of the hash `name`, sealed; the whole hash expires `ttl` after
    /// its last write (a node that dies leaves nothing for ever).
    pub fn put_field(&mut self, name: &str, field: &Field, value: &[u8], ttl: Duration) -> Option<()> {
        let key = self.key(name);
        let f = [&[field.0][..], &field.1].concat();
        let sealed = self.sealer()?.seal(&format!("{key} {}", String::from_utf8_lossy(&f)), value);
        self.redis.run(|c| {
            redis::pipe()
                .cmd("HSET")
                .arg(&key)
                .arg(&f)
                .arg(&sealed)
                .ignore()
                .cmd("PEXPIRE")
                .arg(&key)
                .arg(ttl.as_millis() as u64)
                .ignore()
                .query::<()>(c)
        })
    }

    pub fn remove_field(&mut self, name: &str, field: &Field) -> Option<()> {
        let key = self.key(name);
        let f = [&[field.0][..], &field.1].concat();
        self.redis.run(|c| redis::cmd("HDEL").arg(&key).arg(&f).query::<()>(c))
    }

    /// Takes the lock `name` for this node, or renews it if it is this node's
    /// already: true when this node holds it now.
    pub fn lock(&mut self, name: &str) -> Option<bool> {
        let (key, token) = (self.key(name), self.token.clone());
        self.redis
            .run(|c| Ok(lock::acquire(c, &key, &token, lock::LEASE)? || lock::renew(c, &key, &token, lock::LEASE)?))
    }

    /// Renews the lease of a lock this node holds; false when it lost it.
    pub fn renew(&mut self, name: &str) -> Option<bool> {
        let (key, token) = (self.key(name), self.token.clone());
        self.redis.run(|c| lock::renew(c, &key, &token, lock::LEASE))
    }

    /// Frees a lock this node holds.
    pub fn unlock(&mut self, name: &str) -> Option<bool> {
        let (key, token) = (self.key(name), self.token.clone());
        self.redis.run(|c| lock::release(c, &key, &token))
    }

    /// Who holds each lock of `names` (the node's name), in one round trip.
    pub fn holders(&mut self, names: &[String]) -> Option<Vec<Option<String>>> {
        if names.is_empty() {
            return Some(Vec::new());
        }
        let keys: Vec<String> = names.iter().map(|n| self.key(n)).collect();
        let tokens: Vec<Option<String>> = self.redis.run(|c| redis::cmd("MGET").arg(&keys).query(c))?;
        Some(tokens.into_iter().map(|t| t.map(|t| t.split(' ').next().unwrap_or("").to_string())).collect())
    }

    /// Who holds the lock `name` (the node's name), if anyone.
    pub fn holder(&mut self, name: &str) -> Option<Option<String>> {
        let key = self.key(name);
        let token = self.redis.run(|c| lock::holder(c, &key))?;
        Some(token.map(|t| t.split(' ').next().unwrap_or("").to_string()))
    }
}
