//! The config file exactly as serde reads it: every table, every key, every default.
//!
//! Unknown keys are errors (`deny_unknown_fields` everywhere): a typo in a daemon's
//! config must fail `pika -t`, not be silently ignored. `Config` (in `mod.rs`) is built
//! from this once paths are resolved and names looked up.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use crate::keys::read::{Keys, Split};
use crate::keys::units::{Bytes, Secs};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    /// Files (wildcards in the file name) with more `[[vhost]]` and `[[access_log]]`.
    #[serde(default)]
    pub(crate) include: Vec<Spanned<String>>,
    pub(crate) server: RawServer,
    #[serde(default)]
    pub(crate) workers: RawWorkers,
    #[serde(default)]
    pub(crate) http: RawHttp,
    #[serde(default)]
    pub(crate) status: RawStatus,
    #[serde(default)]
    pub(crate) vhost: Vec<Split<RawVhost>>,
    #[serde(default)]
    pub(crate) access_log: Vec<RawAccessLog>,
    /// Certificates from an ACME CA (`config/acme.rs`).
    pub(crate) acme: Option<Spanned<RawAcme>>,
    /// A fleet sharing its ACME state and ticket keys through Redis (`config/cluster.rs`).
    pub(crate) cluster: Option<Spanned<RawCluster>>,
}

/// `[cluster]`: the fleet's Redis and its secret.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCluster {
    pub(crate) redis: Spanned<String>,
    pub(crate) password_file: Option<Spanned<String>>,
    pub(crate) ca_file: Option<Spanned<String>>,
    pub(crate) prefix: Option<Spanned<String>>,
    pub(crate) key_file: Spanned<String>,
    pub(crate) cache_dir: Option<Spanned<String>>,
}

/// `[acme]`: the CA, the account, where the state is kept, when to renew.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAcme {
    pub(crate) directory: Spanned<String>,
    /// One address, or a list of them (`config/acme.rs` reads either).
    pub(crate) contact: Option<Spanned<toml::Value>>,
    #[serde(default)]
    pub(crate) agree_terms: bool,
    pub(crate) state_dir: Option<Spanned<String>>,
    pub(crate) renew_before: Option<Spanned<Secs>>,
    pub(crate) ca_roots: Option<Spanned<String>>,
    /// How long one certificate's order, and one request to the CA, may take.
    pub(crate) order_timeout: Option<Spanned<Secs>>,
    pub(crate) request_timeout: Option<Spanned<Secs>>,
    /// External Account Binding: the key id and the base64url MAC key the CA gave.
    pub(crate) eab_kid: Option<Spanned<String>>,
    pub(crate) eab_hmac_key: Option<Spanned<String>>,
}

/// An included file: vhosts and access logs only (the server, its pool and its
/// limits are the main file's).
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawInclude {
    #[serde(default)]
    pub(crate) vhost: Vec<Split<RawVhost>>,
    #[serde(default)]
    pub(crate) access_log: Vec<RawAccessLog>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawServer {
    pub(crate) listen: Vec<Spanned<RawListen>>,
    pub(crate) root: Option<String>,
    #[serde(default = "default_pid_file")]
    pub(crate) pid_file: String,
    #[serde(default = "default_error_log")]
    pub(crate) error_log: String,
    pub(crate) error_log_rotate: Option<Spanned<RawRotate>>,
    pub(crate) syslog_socket: Option<String>,
    pub(crate) log_level: Option<Spanned<String>>,
    pub(crate) mime_types: Option<Spanned<String>>,
    #[serde(default = "default_mime_type")]
    pub(crate) default_type: String,
    #[serde(default = "default_backlog")]
    pub(crate) backlog: u32,
    pub(crate) user: Option<Spanned<String>>,
    pub(crate) chroot: Option<Spanned<String>>,
    pub(crate) coredump_dir: Option<Spanned<String>>,
    pub(crate) group: Option<Spanned<String>>,
    #[serde(default = "default_graceful_timeout")]
    pub(crate) graceful_timeout: Secs,
    pub(crate) max_open_files: Option<u64>,
    pub(crate) server_tokens: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) drain_time: Secs,
    #[serde(default)]
    pub(crate) trusted_proxies: Vec<Spanned<String>>,
    pub(crate) forwarded_header: Option<Spanned<String>>,
}

/// One `listen` entry: `"0.0.0.0:80"`, or a table with the address and its flags,
/// `{ addr = "0.0.0.0:443", tls = true }`.
#[derive(Debug)]
pub(crate) enum RawListen {
    Addr(String),
    Table(RawListenTable),
}

/// The table form of a `listen` entry. A new flag is one more field here (and its
/// meaning in `config::Listen`); unknown keys are errors.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawListenTable {
    pub(crate) addr: String,
    #[serde(default)]
    pub(crate) tls: bool,
    #[serde(default)]
    pub(crate) proxy_protocol: bool,
}

// By hand rather than `#[serde(untagged)]`: a table with a typo then gets serde's
// "unknown field `tsl`, expected `addr` or `tls`", not "did not match any variant".
impl<'de> Deserialize<'de> for RawListen {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RawListen;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an address (\"127.0.0.1:8080\") or a table ({ addr = \"0.0.0.0:443\", tls = true })")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<RawListen, E> {
                Ok(RawListen::Addr(s.to_string()))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<RawListen, A::Error> {
                RawListenTable::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(RawListen::Table)
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawWorkers {
    pub(crate) start: u32,
    pub(crate) min_spare: u32,
    pub(crate) max_spare: u32,
    pub(crate) max: u32,
    pub(crate) max_requests: u64,
    pub(crate) max_connections: u32,
    pub(crate) max_memory: Option<Bytes>,
    pub(crate) sched_batch: bool,
    pub(crate) cpu_affinity: RawAffinity,
}

/// `workers.cpu_affinity`: `"home"`, `"off"`, `"auto"`, or the CPUs the workers take
/// in turn.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub(crate) enum RawAffinity {
    Word(String),
    Cpus(Vec<u32>),
}

impl Default for RawWorkers {
    fn default() -> Self {
        // A smaller spare band than Apache prefork's (StartServers 5, MinSpare 5,
        // MaxSpare 10): spares exist to meet a burst without waiting for a fork, and
        // the master forks within milliseconds of a shortage (a worker rings it).
        // Idle spares cost memory, and on a CPU-bound load each extra worker is one
        // more process taking turns on the cores (measured in the commit that set
        // these: ab -c20 5-10% faster, keep-alive no slower). The ceiling is lower
        // than Apache's MaxRequestWorkers 256: on a static load a few workers per
        // core saturate the CPUs, and a worker is busy only while it answers: the
        // kept-alive connections between requests wait in its epoll set, not in a
        // worker of their own. At 500 keep-alive clients 64 workers took 8.6 MiB PSS
        // where 256 take ~30.
        RawWorkers {
            start: 2,
            min_spare: 1,
            max_spare: 3,
            max: 64,
            max_requests: 0,
            // nginx's worker_connections is 512 (768 in Debian's config); a pika
            // worker holds its idle connections the way an nginx worker does.
            max_connections: 1024,
            max_memory: None,
            sched_batch: true,
            // Off as in nginx and Apache: a machine shared with other services (a
            // database, php-fpm) is better left to the scheduler.
            cpu_affinity: RawAffinity::Word("home".into()),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawHttp {
    pub(crate) header_timeout: Secs,
    /// A request body a location reads (CGI, FastCGI): the time it may take, and
    /// the rate that earns more (`gateway::incoming`).
    pub(crate) body_timeout: Secs,
    pub(crate) body_min_rate: Bytes,
    pub(crate) body_timeout_max: Secs,
    pub(crate) body_idle_timeout: Secs,
    pub(crate) body_spool_max_worker: Bytes,
    pub(crate) body_spool_max: Bytes,
    pub(crate) client_body_buffer: Bytes,
    pub(crate) body_temp_dir: String,
    /// Answers kept for their clients (`gateway::spool`).
    pub(crate) answer_spool_max: Bytes,
    pub(crate) keepalive_timeout: Secs,
    pub(crate) send_timeout: Secs,
    pub(crate) request_timeout: Secs,
    pub(crate) file_check_interval: Secs,
    pub(crate) keepalive: bool,
    pub(crate) defer_accept: bool,
    pub(crate) max_keepalive_requests: u64,
    pub(crate) max_request_line: Bytes,
    pub(crate) max_header_size: Bytes,
    pub(crate) max_header_line: Bytes,
    pub(crate) max_headers: u32,
    pub(crate) max_body_size: Bytes,
    pub(crate) max_ranges: u32,
}

impl Default for RawHttp {
    fn default() -> Self {
        RawHttp {
            // mod_reqtimeout's default: the head within 20 s.
            header_timeout: Secs(std::time::Duration::from_secs(20)),
            // Apache's mod_reqtimeout: body=20,MinRate=500 (20 s, and a second more
            // for every 500 bytes received).
            body_timeout: Secs(std::time::Duration::from_secs(20)),
            body_min_rate: Bytes(500),
            // Apache's body=20-600: what MinRate earns stops at 10 minutes, time
            // for 64 MiB at 1 Mbit/s; a larger upload over a slower link raises it.
            body_timeout_max: Secs(std::time::Duration::from_secs(600)),
            // nginx's client_body_timeout (60 s there): no longer than a body may
            // take to begin (body_timeout), as a pause in the middle is no more
            // innocent than one at the start.
            body_idle_timeout: Secs(std::time::Duration::from_secs(20)),
            // What the bodies in temporary files may take of body_temp_dir's disk:
            // 4 uploads of 64 MiB per worker, 16 for the server; a single body
            // (max_body_size) must fit under each.
            body_spool_max_worker: Bytes(256 << 20),
            body_spool_max: Bytes(1 << 30),
            // nginx's client_body_buffer_size is 16 KiB on 64-bit; a form post fits in 64.
            client_body_buffer: Bytes(64 * 1024),
            // Under a folder only root may write (as nginx's /var/lib/nginx): in a
            // folder everyone may write (/var/tmp), another user could make it first.
            body_temp_dir: "/var/lib/pika/bodies".into(),
            // nginx's fastcgi_max_temp_file_size (1 GiB) bounds one answer and not
            // the disk; this bounds them all: 300 clients that never read a 3 MB
            // page fit, and a runaway download through a script takes the rest
            // from the script as it goes rather than filling body_temp_dir's disk.
            answer_spool_max: Bytes(1 << 30),
            // nginx's is 75 s. An idle connection holds no worker (it waits in its
            // worker's epoll set), so a browser may keep it while its user reads;
            // Apache's 5 s is short because there an idle connection holds a worker.
            keepalive_timeout: Secs(std::time::Duration::from_secs(60)),
            send_timeout: Secs(std::time::Duration::from_secs(60)),
            request_timeout: Secs(std::time::Duration::from_secs(300)),
            // lighttpd's stat cache holds for a second too.
            file_check_interval: Secs(std::time::Duration::from_secs(1)),
            keepalive: true,
            defer_accept: true,
            max_keepalive_requests: 1000,
            // Apache's LimitRequestLine / LimitRequestFieldSize / LimitRequestFields.
            max_request_line: Bytes(8190),
            max_header_size: Bytes(16384),
            // nginx's large_client_header_buffers line; Apache's LimitRequestFieldSize
            // is 8190.
            max_header_line: Bytes(8192),
            max_headers: 100,
            max_body_size: Bytes(1 << 20),
            // Apache's MaxRanges default.
            max_ranges: 200,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(crate) struct RawStatus {
    pub(crate) enabled: bool,
    pub(crate) path: String,
    pub(crate) allow: Vec<Spanned<String>>,
}

impl Default for RawStatus {
    fn default() -> Self {
        RawStatus { enabled: false, path: "/server-status".into(), allow: Vec::new() }
    }
}

/// A `[[vhost]]`'s own keys. It also holds (read as a [`Split`]) the keys of the
/// files it serves at its root (`index`, `autoindex`: `crate::kinds::files`), and the
/// rules of its locations (`crate::rules`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawVhost {
    #[serde(default)]
    pub(crate) server_names: Vec<String>,
    pub(crate) root: Spanned<String>,
    #[serde(default)]
    pub(crate) serve_hidden: bool,
    pub(crate) symlinks: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) error_pages: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    pub(crate) access_log: Vec<RawAccessLog>,
    /// The certificate chain (PEM, the server's certificate first) and its key.
    pub(crate) tls_cert: Option<Spanned<String>>,
    pub(crate) tls_key: Option<Spanned<String>>,
    /// 301 or 308: requests on plain listeners are sent to `https://`.
    pub(crate) https_redirect: Option<Spanned<u16>>,
    /// The `Strict-Transport-Security` value sent with HTTPS answers.
    pub(crate) hsts: Option<Spanned<String>>,
    /// The certificate comes from the `[acme]` CA, for `server_names`.
    pub(crate) acme: Option<Spanned<bool>>,
    /// `[[vhost.location]]`: one of `exact`, `prefix`, `regex` (`config/vhost.rs`),
    /// the keys of its kind (`crate::kinds`) and its rules (`crate::rules`).
    #[serde(default)]
    pub(crate) location: Vec<Spanned<Keys>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAccessLog {
    pub(crate) path: String,
    pub(crate) format: Option<Spanned<String>>,
    pub(crate) include: Option<Vec<Spanned<RawCondition>>>,
    pub(crate) exclude: Option<Vec<Spanned<RawCondition>>>,
    pub(crate) rotate: Option<Spanned<RawRotate>>,
    pub(crate) buffer: Option<Spanned<Bytes>>,
    pub(crate) flush: Option<Secs>,
}

/// One filter condition: every key given must match.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCondition {
    pub(crate) internal: Option<bool>,
    pub(crate) health: Option<bool>,
    pub(crate) client: Option<String>,
    pub(crate) method: Option<String>,
    pub(crate) path: Option<String>,
    pub(crate) path_pattern: Option<String>,
    pub(crate) status: Option<StatusSpec>,
    pub(crate) user_agent: Option<String>,
    pub(crate) header: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum StatusSpec {
    Code(u16),
    Text(String),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawRotate {
    pub(crate) interval: Option<String>,
    pub(crate) size: Option<Bytes>,
    #[serde(default = "default_keep")]
    pub(crate) keep: u32,
    pub(crate) naming: Option<String>,
    #[serde(default = "default_true")]
    pub(crate) local_time: bool,
    #[serde(default)]
    pub(crate) compress: bool,
}

fn default_keep() -> u32 {
    7
}
fn default_true() -> bool {
    true
}

fn default_pid_file() -> String {
    "logs/pika.pid".into()
}
fn default_error_log() -> String {
    "logs/error.log".into()
}
fn default_mime_type() -> String {
    "application/octet-stream".into()
}
fn default_backlog() -> u32 {
    // Apache's ListenBacklog and nginx's default; the kernel clamps to somaxconn.
    511
}
fn default_graceful_timeout() -> Secs {
    Secs(std::time::Duration::from_secs(30))
}
