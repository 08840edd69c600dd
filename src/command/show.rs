//! `pika -T`: the effective config, written back as TOML (nginx's `-T`).
//!
//! What an operator reads here is what pika runs: every key with its value after
//! the defaults, the included files' vhosts and logs in place (each under a comment
//! naming its file), paths absolute, values as resolved (`max_spare` raised above
//! `min_spare`, the loopback `allow` of the status page). The text is itself a
//! config: `pika -t` accepts it and `pika -T` on it prints the same keys, which the
//! tests check.

use std::path::Path;
use std::time::Duration;

use toml::Value;

use crate::config::{AccessLog, Config, ErrorLogTarget, MIME_BUILTIN, ServerTokens, Symlinks};
use crate::keys::write::{Inline, Toml, duration, int, path, size, string, strings};
use crate::log::filter::Condition;
use crate::log::rotate::{Interval, Naming, Rotate};

/// The config as TOML, with a heading comment naming its files.
pub fn show(c: &Config) -> String {
    let mut t = Toml::default();
    t.comment(&format!("The configuration pika runs from {}, every default filled in (pika -T).", c.file.display()));
    if !c.includes.is_empty() {
        t.comment("The vhosts and logs of the files it includes are in place below:");
        for f in &c.includes {
            t.comment(&format!("  {}", f.display()));
        }
    }
    server(&mut t, c);
    workers(&mut t, c);
    http(&mut t, c);
    status(&mut t, c);
    acme(&mut t, c);
    cluster(&mut t, c);
    for (i, v) in c.vhosts.iter().enumerate() {
        vhost(&mut t, c, i, v);
    }
    for log in c.access_logs.iter().filter(|a| a.vhost.is_none()) {
        t.blank();
        from(&mut t, log.source.as_deref());
        t.array_table("access_log");
        access_log(&mut t, log);
    }
    t.text()
}

/// `[workers]`: the pool's sizes and limits.
fn workers(t: &mut Toml, c: &Config) {
    let w = &c.workers;
    t.table("workers");
    t.key("start", int(w.start));
    t.key("min_spare", int(w.min_spare));
    t.key("max_spare", int(w.max_spare));
    t.key("max", int(w.max));
    t.key("max_requests", int(w.max_requests));
    t.key("max_connections", int(w.max_connections));
    if let Some(m) = w.max_memory {
        t.key("max_memory", size(m));
    }
    t.key("sched_batch", Value::Boolean(w.sched_batch));
    match &w.cpu_affinity {
        crate::config::Affinity::Home => t.key("cpu_affinity", string("home")),
        crate::config::Affinity::Off => t.key("cpu_affinity", string("off")),
        crate::config::Affinity::Auto => t.key("cpu_affinity", string("auto")),
        crate::config::Affinity::Cpus(cpus) => {
            t.key("cpu_affinity", Value::Array(cpus.iter().map(|&c| int(c)).collect()))
        }
    }
}

/// `[http]`: timeouts and the limits on a request.
fn http(t: &mut Toml, c: &Config) {
    let h = &c.http;
    t.table("http");
    t.key("header_timeout", duration(h.header_timeout));
    t.key("keepalive_timeout", duration(h.keepalive_timeout));
    t.key("send_timeout", duration(h.send_timeout));
    t.key("request_timeout", duration(h.request_timeout));
    t.key("file_check_interval", duration(h.file_check_interval));
    t.key("keepalive", Value::Boolean(h.keepalive));
    t.key("defer_accept", Value::Boolean(h.defer_accept));
    t.key("max_keepalive_requests", int(h.max_keepalive_requests));
    t.key("max_request_line", size(h.max_request_line as u64));
    t.key("max_header_size", size(h.max_header_size as u64));
    t.key("max_header_line", size(h.max_header_line as u64));
    t.key("max_headers", int(h.max_headers));
    t.key("max_body_size", size(h.max_body_size));
    t.key("max_ranges", int(h.max_ranges));
    t.key("body_timeout", duration(h.body_timeout));
    t.key("body_min_rate", size(h.body_min_rate));
    t.key("body_timeout_max", duration(h.body_timeout_max));
    t.key("body_idle_timeout", duration(h.body_idle_timeout));
    t.key("body_spool_max_worker", size(h.body_spool_max_worker));
    t.key("body_spool_max", size(h.body_spool_max));
    t.key("client_body_buffer", size(h.client_body_buffer as u64));
    t.key("body_temp_dir", path(&h.body_temp_dir));
    t.key("answer_spool_max", size(h.answer_spool_max));
}

/// `[status]`: the status page's switch, path and `allow`.
fn status(t: &mut Toml, c: &Config) {
    t.table("status");
    t.key("enabled", Value::Boolean(c.status.enabled));
    t.key("path", string(&c.status.path));
    t.key("allow", Value::Array(c.status.allow.iter().map(|a| string(&a.to_string())).collect()));
}

/// `[acme]`, when configured (the EAB MAC key is never shown).
fn acme(t: &mut Toml, c: &Config) {
    if let Some(a) = &c.acme {
        t.table("acme");
        t.key("directory", string(&a.directory));
        t.key("contact", strings(&a.contact));
        t.key("agree_terms", Value::Boolean(true));
        t.key("state_dir", path(&a.state_dir));
        match a.renew_before {
            Some(s) => t.key("renew_before", duration(Duration::from_secs(s))),
            None => t.comment("renew_before: a third of each certificate's lifetime"),
        }
        if let Some(r) = &a.ca_roots {
            t.key("ca_roots", path(r));
        }
        t.key("order_timeout", duration(a.order_timeout));
        t.key("request_timeout", duration(a.request_timeout));
        if let Some(eab) = &a.eab {
            t.key("eab_kid", string(&eab.kid));
            // The MAC key is a secret: -T output goes to terminals and tickets.
            t.comment("eab_hmac_key is set (not shown)");
        }
    }
}

/// `[cluster]`, when configured (a password in the URL is never shown).
fn cluster(t: &mut Toml, c: &Config) {
    if let Some(k) = &c.cluster {
        t.table("cluster");
        t.key("redis", string(&crate::cluster::client::shown_url(&k.redis)));
        if let Some(f) = &k.password_file {
            t.key("password_file", path(f));
        }
        if let Some(f) = &k.ca_file {
            t.key("ca_file", path(f));
        }
        t.key("prefix", string(&k.prefix));
        t.key("key_file", path(&k.key_file));
        t.key("cache_dir", path(&k.cache_dir));
    }
}

/// One `[[vhost]]`: its keys, error pages, access logs and locations.
fn vhost(t: &mut Toml, c: &Config, i: usize, v: &crate::config::Vhost) {
    t.blank();
    from(t, v.source.as_deref());
    t.array_table("vhost");
    t.key("server_names", strings(&v.server_names));
    t.key("root", path(&v.root));
    v.files.show_vhost(t);
    t.key("serve_hidden", Value::Boolean(v.serve_hidden));
    let symlinks = match v.symlinks {
        Symlinks::Inside => "inside",
        Symlinks::Never => "never",
        Symlinks::Follow => "follow",
    };
    t.key("symlinks", string(symlinks));
    if v.acme {
        t.key("acme", Value::Boolean(true));
    } else if let Some(cert) = &v.tls {
        t.key("tls_cert", path(&cert.cert_file));
        t.key("tls_key", path(&cert.key_file));
    }
    if let Some(code) = v.https_redirect {
        t.key("https_redirect", int(code));
    }
    if let Some(hsts) = &v.hsts {
        t.key("hsts", string(hsts));
    }
    v.rules.show(t);
    if !v.error_pages.is_empty() {
        t.table("vhost.error_pages");
        for (code, page) in &v.error_pages {
            t.key(&format!("\"{code}\""), string(page));
        }
    }
    for log in c.access_logs.iter().filter(|a| a.vhost == Some(i)) {
        t.array_table("vhost.access_log");
        access_log(t, log);
    }
    // The status page's location that `[status] enabled` adds is said there.
    for l in v.locations.list.iter().filter(|l| l.at.is_some()) {
        t.array_table("vhost.location");
        t.key(l.pattern.key(), string(l.pattern.text()));
        if l.prefix_only {
            t.key("prefix_only", toml::Value::Boolean(true));
        }
        l.kind.show(t);
        l.rules.show(t);
    }
}

fn server(t: &mut Toml, c: &Config) {
    t.table("server");
    let listen = c.listen.iter().map(|l| {
        if !l.tls && !l.proxy_protocol {
            return string(&l.addr.to_string());
        }
        let mut entry = toml::Table::new();
        entry.insert("addr".into(), string(&l.addr.to_string()));
        if l.tls {
            entry.insert("tls".into(), Value::Boolean(true));
        }
        if l.proxy_protocol {
            entry.insert("proxy_protocol".into(), Value::Boolean(true));
        }
        Value::Table(entry)
    });
    t.key("listen", Value::Array(listen.collect()));
    t.key("root", path(&c.root));
    t.key("pid_file", path(&c.pid_file));
    match &c.error_log {
        ErrorLogTarget::File(p) => t.key("error_log", path(p)),
        ErrorLogTarget::Stderr => t.key("error_log", string("stderr")),
        ErrorLogTarget::Syslog(facility, socket) => {
            let name =
                crate::config::FACILITIES.iter().find(|(_, f)| *f as u32 == *facility as u32).map_or("daemon", |f| f.0);
            t.key("error_log", string(&format!("syslog:{name}")));
            if let Some(s) = socket {
                t.key("syslog_socket", path(s));
            }
        }
    }
    if let Some(r) = &c.error_log_rotate {
        t.key("error_log_rotate", rotate(r));
    }
    t.key("log_level", string(&c.log_level.to_string().to_ascii_lowercase()));
    match &c.mime_types {
        Some(p) => t.key("mime_types", path(p)),
        None => t.key("mime_types", string(MIME_BUILTIN)),
    }
    t.key("default_type", string(c.mime.default_type()));
    t.key("backlog", int(c.backlog));
    if let Some(run_as) = &c.run_as {
        t.key("user", string(&run_as.user));
        if let Ok(Some(g)) = nix::unistd::Group::from_gid(run_as.gid) {
            t.key("group", string(&g.name));
        }
    }
    if let Some(dir) = &c.chroot {
        t.key("chroot", path(dir));
    }
    if let Some(dir) = &c.coredump_dir {
        t.key("coredump_dir", path(dir));
    }
    t.key("graceful_timeout", duration(c.graceful_timeout));
    t.key("drain_time", duration(c.drain_time));
    if let Some(n) = c.max_open_files {
        t.key("max_open_files", int(n));
    }
    let tokens = match c.server_tokens {
        ServerTokens::Full => "full",
        ServerTokens::Product => "product",
    };
    t.key("server_tokens", string(tokens));
    let trusted: Vec<Value> = c.trusted_proxies.iter().map(|c| string(&c.to_string())).collect();
    t.key("trusted_proxies", Value::Array(trusted));
    t.key("forwarded_header", string(c.forwarded_header.name()));
}

fn access_log(t: &mut Toml, log: &AccessLog) {
    t.key("path", path(&log.path));
    t.key("format", string(log.format.spec()));
    t.key("buffer", size(log.buffer as u64));
    t.key("flush", duration(log.flush));
    for (key, list) in [("include", &log.filter.include), ("exclude", &log.filter.exclude)] {
        let items: Vec<String> = list.iter().map(|c| condition(c).to_string()).collect();
        t.key(key, format_args!("[{}]", items.join(", ")));
    }
    if let Some(r) = &log.rotate {
        t.key("rotate", rotate(r));
    }
}

fn condition(c: &Condition) -> Inline {
    let mut t = Inline::default();
    if let Some(i) = c.internal {
        t.insert("internal", Value::Boolean(i));
    }
    if let Some(h) = c.health {
        t.insert("health", Value::Boolean(h));
    }
    if let Some(cidr) = &c.client {
        t.insert("client", string(&cidr.to_string()));
    }
    for (key, v) in [("method", &c.method), ("path", &c.path), ("header", &c.header)] {
        if let Some(v) = v {
            t.insert(key, string(v));
        }
    }
    for (key, re) in [("path_pattern", &c.path_pattern), ("user_agent", &c.user_agent)] {
        if let Some(re) = re {
            t.insert(key, string(re.as_str()));
        }
    }
    if let Some((lo, hi)) = c.status {
        let v = if lo == hi {
            int(lo)
        } else if lo % 100 == 0 && hi == lo + 99 {
            string(&format!("{}xx", lo / 100))
        } else {
            string(&format!("{lo}-{hi}"))
        };
        t.insert("status", v);
    }
    t
}

fn rotate(r: &Rotate) -> Inline {
    let mut t = Inline::default();
    let interval = r.interval.map(|i| match i {
        Interval::Hourly => string("hourly"),
        Interval::Daily => string("daily"),
        Interval::Every(d) => duration(d),
    });
    if let Some(i) = interval {
        t.insert("interval", i);
    }
    if let Some(s) = r.size {
        t.insert("size", size(s));
    }
    t.insert("keep", int(r.keep));
    let naming = match &r.naming {
        Naming::Numbered => "numbered",
        Naming::Pattern(p) => p,
    };
    t.insert("naming", string(naming));
    t.insert("local_time", Value::Boolean(r.local_time));
    t.insert("compress", Value::Boolean(r.compress));
    t
}

/// A comment naming the included file an entry comes from.
fn from(t: &mut Toml, source: Option<&Path>) {
    if let Some(f) = source {
        t.comment(&format!("from {}", f.display()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config with every key away from its default: what `show` prints reads back
    /// as the same config, and the shipped `conf/pika.toml` does too.
    #[test]
    fn shown_config_reads_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for sub in ["conf", "htdocs", "site2", "jail/www"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        std::fs::write(d.join("conf/types"), "text/x-a a\n").unwrap();
        crate::tls::test_certs::leaf(&["a.example", "*.b.example"], -1, 30, None).write(&d.join("conf"), "a");
        let text = r#"
[server]
listen = ["127.0.0.1:8081", "[::1]:8082", "9000", { addr = "127.0.0.1:8443", tls = true }, { addr = "127.0.0.1:8444", proxy_protocol = true }]
trusted_proxies = ["10.0.0.0/8", "::1"]
forwarded_header = "forwarded"
pid_file = "run/p.pid"
error_log = "syslog:local3"
syslog_socket = "/dev/log2"
error_log_rotate = { size = "10MiB", keep = 3 }
log_level = "debug"
mime_types = "conf/types"
default_type = "text/plain"
backlog = 128
user = "root"
graceful_timeout = "1500ms"
drain_time = "1500ms"
max_open_files = 4096
server_tokens = "product"
[workers]
start = 3
min_spare = 2
max_spare = 2
max = 9
max_requests = 100
max_memory = "512MiB"
sched_batch = false
cpu_affinity = [0]
[http]
header_timeout = 7
keepalive_timeout = "90m"
keepalive = false
defer_accept = false
max_header_size = 20000
max_ranges = 5
[status]
enabled = true
path = "/st"
allow = ["10.0.0.0/8", "::1", "192.168.1.7"]
[[vhost]]
server_names = ["A.example", "*.b.example."]
root = "htdocs"
index = ["i.html"]
autoindex = true
serve_hidden = true
symlinks = "follow"
tls_cert = "conf/a.pem"
tls_key = "conf/a.key"
https_redirect = 308
hsts = "max-age=600; includeSubDomains"
allow = ["192.0.2.0/24", "::1"]
[vhost.error_pages]
404 = "/e/404.html"
500 = "/e/500.html"
[[vhost.access_log]]
path = "logs/a.log"
format = "%h \"%r\" %>s %{X-Id}i"
buffer = 0
flush = "250ms"
include = [{ status = "4xx" }, { status = 418 }, { status = "300-302", method = "GET" }]
exclude = [{ client = "10.1.0.0/16", path = "/health", path_pattern = "^/x", user_agent = "bot", header = "X-Skip", internal = false }]
rotate = { interval = "hourly", naming = "%Y%m%d%H", local_time = false, compress = true }
[[vhost.location]]
exact = "/robots.txt"
root = "site2"
[[vhost.location]]
prefix = "/files/"
alias = "site2"
index = []
autoindex = false
[[vhost.location]]
regex = '^/(\w+)\.st$'
status = true
allow = ["10.1.0.0/16"]
[[vhost.location]]
exact = "/healthz"
health = true
[[vhost.location]]
exact = "/metrics"
metrics = true
[[vhost]]
root = "site2"
symlinks = "never"
[[access_log]]
path = "/var/log/x.log"
format = "vhost_combined"
exclude = []
rotate = { interval = "30m", size = 1000, keep = 2 }
"#;
        let file = d.join("conf/pika.toml");
        let first = show(&crate::config::parse(text, &file).unwrap());
        let again = show(&crate::config::parse(&first, &file).unwrap());
        assert_eq!(first, again);
        for want in [
            "error_log = \"syslog:local3\"\nsyslog_socket = \"/dev/log2\"",
            "max_spare = 3",
            "keepalive_timeout = \"90m\"",
            "graceful_timeout = \"1500ms\"",
            "max_header_size = 20000",
            "max_memory = \"512MiB\"",
            "cpu_affinity = [0]",
            "allow = [\"10.0.0.0/8\", \"::1\", \"192.168.1.7\"]",
            "server_names = [\"a.example\", \"*.b.example\"]",
            "\"404\" = \"/e/404.html\"",
            "include = [{ status = \"4xx\" }, { status = 418 }, { method = \"GET\", status = \"300-302\" }]",
            "exclude = [{ internal = false, client = \"10.1.0.0/16\", path = \"/health\", header = \"X-Skip\", \
             path_pattern = \"^/x\", user_agent = \"bot\" }]",
            "rotate = { interval = \"30m\", size = 1000, keep = 2, naming = \"numbered\", local_time = true, \
             compress = false }",
            "mime_types = \"",
            "listen = [\"127.0.0.1:8081\", \"[::1]:8082\", \"0.0.0.0:9000\", { addr = \"127.0.0.1:8443\", tls = true }, \
             { addr = \"127.0.0.1:8444\", proxy_protocol = true }]",
            "trusted_proxies = [\"10.0.0.0/8\", \"::1\"]\nforwarded_header = \"Forwarded\"",
            "https_redirect = 308\nhsts = \"max-age=600; includeSubDomains\"",
            "[[vhost.location]]\nprefix = \"/files/\"\nalias = \"",
            "[[vhost.location]]\nregex = '^/(\\w+)\\.st$'\nstatus = true\nallow = [\"10.1.0.0/16\"]",
            "hsts = \"max-age=600; includeSubDomains\"\nallow = [\"192.0.2.0/24\", \"::1\"]\n",
            "[[vhost.location]]\nexact = \"/healthz\"\nhealth = true",
            "[[vhost.location]]\nexact = \"/metrics\"\nmetrics = true",
            "drain_time = \"1500ms\"",
            "[[vhost.location]]\nexact = \"/robots.txt\"\nroot = \"",
        ] {
            assert!(first.contains(want), "{want} not in\n{first}");
        }

        let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/pika.toml");
        let text = std::fs::read_to_string(&shipped).unwrap();
        let first = show(&crate::config::parse(&text, &shipped).unwrap());
        assert_eq!(first, show(&crate::config::parse(&first, &shipped).unwrap()));
    }

    /// `(table, key)` of every `key = value` line of a TOML text, commented out or not.
    fn keys(text: &str) -> std::collections::BTreeSet<(String, String)> {
        let mut table = String::new();
        let mut out = std::collections::BTreeSet::new();
        for line in text.lines() {
            let line = line.trim_start_matches('#').trim();
            let name = line.trim_matches(|c| c == '[' || c == ']');
            if line.starts_with('[') && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_' || b == b'.') {
                table = name.to_string();
            } else if let Some((key, _)) = line.split_once(" = ") {
                if key.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                    out.insert((table.clone(), key.to_string()));
                }
            }
        }
        out
    }

    /// Every key `conf/pika.toml` documents is printed by `-T` when set: a key added
    /// to the config and its comments but not here fails this test.
    #[test]
    fn shows_every_key_the_shipped_config_documents() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for sub in ["conf", "htdocs", "core"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        crate::tls::test_certs::leaf(&["localhost"], -1, 30, None).write(&d.join("conf"), "c");
        std::fs::write(d.join("conf/htpasswd"), "a:$apr1$Thr.YsdQ$eJzB/UpeuFpmhIJBAJpcJ.\n").unwrap();
        for (secret, text) in [("conf/redis.pw", "pw\n"), ("conf/fleet.key", "a fleet's secret of 32 bytes or more\n")]
        {
            std::fs::write(d.join(secret), text).unwrap();
            std::fs::set_permissions(d.join(secret), std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        }
        let text = r#"
include = []
[server]
listen = ["8080", { addr = "8443", tls = true }]
error_log_rotate = { size = "1MiB" }
user = "root"
group = "root"
chroot = "."
coredump_dir = "core"
max_open_files = 100
[workers]
max_memory = "1GiB"
[http]
body_temp_dir = "bodies"
[[vhost]]
root = "htdocs"
tls_cert = "conf/c.pem"
tls_key = "conf/c.key"
https_redirect = 301
hsts = "max-age=1"
allow = ["10.0.0.0/8"]
return = 410
deny = ["192.0.2.0/24"]
auth_file = "conf/htpasswd"
auth_realm = "Staff"
satisfy = "any"
try_files = ["$uri", "$uri/", "/b/index.html"]
headers = { "X-A" = "1" }
headers_always = true
expires = { "image/*" = "30d", "*" = "1h" }
charset = "utf-8"
precompressed = ["br", "gzip"]
compress = true
compress_types = ["text/*"]
compress_min_size = 100
[vhost.error_pages]
404 = "/404.html"
[[vhost.access_log]]
path = "v.log"
rotate = { interval = "daily" }
[[vhost.location]]
exact = "/a"
root = "core"
[[vhost.location]]
prefix = "/b/"
alias = "core"
index = ["x.html"]
autoindex = true
max_ranges = 0
deny = ["192.0.2.0/24"]
auth_file = "conf/htpasswd"
auth_realm = "Staff"
satisfy = "any"
try_files = ["$uri", "$uri/", "/b/index.html"]
headers = { "X-A" = "1" }
headers_always = true
expires = { "image/*" = "30d", "*" = "1h" }
charset = "utf-8"
precompressed = ["br", "gzip"]
compress = true
compress_types = ["text/*"]
compress_min_size = 100
[[vhost.location]]
regex = '^/o/(\w+)$'
return = { status = 301, to = "/n/$1" }
[[vhost.location]]
regex = '^/_media/(.*)'
rewrite = "/fetch.php?media=$1&$args"
[[vhost.location]]
prefix = "/private/"
internal = true
[[vhost.location]]
prefix = "/static/"
prefix_only = true
[[vhost.location]]
regex = "^/c"
status = true
allow = ["::1"]
[[vhost.location]]
exact = "/healthz"
health = true
[[vhost.location]]
exact = "/m"
metrics = true
[[vhost.location]]
prefix = "/cgi-bin/"
cgi = true
cgi_interpreters = { py = "/usr/bin/python3" }
script_timeout = "30s"
cgi_memory = "512MiB"
[[vhost.location]]
regex = "[.]php$"
fastcgi = "unix:/run/php/fpm.sock"
[[vhost.location]]
exact = "/echo"
echo = true
[[vhost.location]]
prefix = "/api/"
proxy = "http://127.0.0.1:8000/v2/"
proxy_host = "api.internal"
proxy_timeout = "5s"
proxy_buffering = false
proxy_via = true
[[access_log]]
path = "a.log"
rotate = { size = 1000 }
"#;
        let file = d.join("conf/pika.toml");
        let syslog = "[server]\nlisten = [\"8080\"]\nerror_log = \"syslog\"\nsyslog_socket = \"/dev/log\"\n";
        let acme = "[server]\nlisten = [\"8080\"]\nuser = \"root\"\n[acme]\ndirectory = \"https://ca.example/dir\"\n\
                    contact = [\"mailto:a@b.example\"]\nagree_terms = true\nstate_dir = \"acme\"\nrenew_before = \"30d\"\n\
                    ca_roots = \"conf/c.pem\"\neab_kid = \"k\"\neab_hmac_key = \"c2VjcmV0\"\n\
                    [cluster]\nredis = \"rediss://r.example:6380/1\"\npassword_file = \"conf/redis.pw\"\n\
                    ca_file = \"conf/c.pem\"\nprefix = \"shop:\"\nkey_file = \"conf/fleet.key\"\ncache_dir = \"cluster\"\n\
                    [[vhost]]\nroot = \"htdocs\"\nserver_names = [\"a.example\"]\nacme = true\n";
        let shown = [text, &format!("{syslog}[[vhost]]\nroot = \"htdocs\"\n"), acme]
            .map(|t| show(&crate::config::parse(t, &file).unwrap()))
            .join("\n");
        let shipped = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/pika.toml"));
        let missing: Vec<_> = keys(&shipped.unwrap())
            .difference(&keys(&shown))
            .filter(|(table, key)| !(table.is_empty() && key == "include")) // in place, not named
            .filter(|(table, key)| !(table == "acme" && key == "eab_hmac_key")) // a secret: said to be set
            .cloned()
            .collect();
        assert!(missing.is_empty(), "documented in conf/pika.toml, not printed by -T: {missing:?}\n{shown}");
    }

    /// Every key the config accepts, by table (`""`: the top level): the serde
    /// structs' fields, and the keys the location kinds and the rules take from the
    /// tables they share.
    fn accepted() -> Vec<(&'static str, Vec<&'static str>)> {
        use crate::config::raw::{RawAccessLog, RawCluster, RawHttp, RawServer, RawStatus, RawVhost, RawWorkers};
        use crate::keys::read::fields;
        use crate::kinds::{self, files};
        let rules = crate::rules::KEYS.iter().copied();
        // Read so that old configs load, and said to be removable (`Ctx::notes`).
        let retired = ["body_timeout", "body_min_rate"];
        let http = fields::<RawHttp>().iter().copied().filter(|k| !retired.contains(k)).collect();
        let vhost = fields::<RawVhost>().iter().chain(files::VHOST_KEYS).copied().chain(rules.clone()).collect();
        let location = crate::config::vhost::PATTERN_KEYS
            .into_iter()
            .chain(crate::rules::LOCATION_KEYS.iter().copied())
            .chain(kinds::keys())
            .chain(rules)
            .collect();
        vec![
            ("", vec!["include"]),
            ("server", fields::<RawServer>().to_vec()),
            ("workers", fields::<RawWorkers>().to_vec()),
            ("http", http),
            ("status", fields::<RawStatus>().to_vec()),
            ("vhost", vhost),
            ("vhost.location", location),
            ("access_log", fields::<RawAccessLog>().to_vec()),
            ("cluster", fields::<RawCluster>().to_vec()),
        ]
    }

    /// Whether `text` documents `key` of `table`: as a key, or for a sub-table
    /// (`[vhost.error_pages]`, `[[vhost.location]]`) as its header, commented out or not.
    fn documented(text: &str, table: &str, key: &str) -> bool {
        let sub = if table.is_empty() { key.to_string() } else { format!("{table}.{key}") };
        keys(text).contains(&(table.to_string(), key.to_string()))
            || text.lines().any(|l| l.trim_start_matches('#').trim().trim_matches(|c| c == '[' || c == ']') == sub)
    }

    /// A key the config accepts is documented in the shipped `conf/pika.toml`, whose
    /// comments make the man page (`tests/man.rs`) and whose keys `-T` must print
    /// (`shows_every_key_the_shipped_config_documents`), and in the README's table of
    /// keys. A key added to a kind, a rule or a table and not to both fails here.
    #[test]
    fn every_accepted_key_is_in_the_shipped_config_and_the_readme() {
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let shipped = std::fs::read_to_string(repo.join("conf/pika.toml")).unwrap();
        let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
        // The reference table: `| `[server]` | `listen` (…), `root`, … |`.
        let word = regex_lite::Regex::new(r"`\[*([a-z_.]+)\]*(?: = [^`]*)?`").unwrap();
        let mut table = std::collections::BTreeSet::new();
        for row in readme.lines().filter(|l| l.starts_with("| ")) {
            let mut cells = row.split(" | ");
            let (Some(first), Some(rest)) = (cells.next(), cells.next()) else { continue };
            let section = match word.captures(first) {
                Some(c) => c[1].to_string(),
                None if first == "| top level" => String::new(),
                None => continue,
            };
            for c in word.captures_iter(rest) {
                let key = c[1].rsplit('.').next().unwrap_or("").to_string();
                table.insert((section.clone(), key));
            }
        }
        assert!(table.len() > 50, "the README's table of keys was found: {table:?}");
        let mut missing = Vec::new();
        for (section, keys) in accepted() {
            for key in keys {
                if !documented(&shipped, section, key) {
                    missing.push(format!("{key} of [{section}] is not in conf/pika.toml"));
                }
                if !table.contains(&(section.to_string(), key.to_string())) {
                    missing.push(format!("{key} of [{section}] is not in the README's table of keys"));
                }
            }
        }
        assert!(missing.is_empty(), "{}", missing.join("\n"));
    }

    #[test]
    fn durations_and_sizes_in_their_largest_exact_unit() {
        let d = |ms: u64| duration(Duration::from_millis(ms));
        for (ms, text) in [(0, "0s"), (7_200_000, "2h"), (5_400_000, "90m"), (30_000, "30s"), (1_500, "1500ms")] {
            assert_eq!(d(ms), string(text), "{ms} ms");
        }
        for (n, want) in [(0, int(0)), (3 << 30, string("3GiB")), (1536 << 10, string("1536KiB")), (1000, int(1000))] {
            assert_eq!(size(n), want, "{n} bytes");
        }
    }

    /// A config made of several files says which: the heading lists them, and each
    /// vhost or log that came from one is preceded by a comment naming it.
    #[test]
    fn included_entries_name_their_file() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        for sub in ["conf/conf.d", "htdocs", "www"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        let included = d.join("conf/conf.d/site.toml");
        std::fs::write(
            &included,
            "[[vhost]]\nserver_names = [\"a.test\"]\nroot = \"www\"\n[[access_log]]\npath = \"a.log\"\n",
        )
        .unwrap();
        let main = d.join("conf/pika.toml");
        let base = "[server]\nlisten = [\"127.0.0.1:8080\"]\nmime_types = \"builtin\"\n[[vhost]]\nroot = \"htdocs\"\n";
        let plain = show(&crate::config::parse(base, &main).unwrap());
        assert!(!plain.contains("files it includes") && !plain.contains("# from "), "{plain}");
        let text = format!("include = [\"conf.d/*.toml\"]\n{base}");
        let shown = show(&crate::config::parse(&text, &main).unwrap());
        let file = included.display();
        assert!(shown.contains(&format!("includes are in place below:\n#   {file}\n")), "{shown}");
        // Each right above its table, after a blank line.
        for table in ["[[vhost]]", "[[access_log]]"] {
            assert!(shown.contains(&format!("\n\n# from {file}\n{table}\n")), "{table}:\n{shown}");
        }
    }
}
