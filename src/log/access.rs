//! Access logs: one line per request, each written with a single `write()` on an
//! `O_APPEND` descriptor, so that lines from any number of workers never tear or mix.
//!
//! The master opens the files before it forks (workers may have dropped the rights to
//! open them); a worker renders each record into one reused buffer.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use super::filter::{Facts, Filter};
use super::format::{LogFormat, Record};
use crate::config::AccessLog;

/// A record longer than this is cut (and still ends in a newline): one `write()` of at
/// most `PIPE_BUF` bytes stays atomic even if the log is later a pipe.
pub const MAX_RECORD: usize = 4096;

struct OpenLog {
    path: PathBuf,
    format: LogFormat,
    filter: Filter,
    vhost: Option<usize>,
    file: File,
    /// A write failed (disk full, permissions): said once, until writes work again.
    failing: bool,
}

/// The open access logs of one process.
pub struct AccessLogs {
    logs: Vec<OpenLog>,
    buf: Vec<u8>,
    clf: ClfClock,
    /// The scoreboard's log epoch and the value this process last saw.
    epoch: Option<(&'static AtomicU32, u32)>,
}

impl AccessLogs {
    /// Opens (creating) every configured log.
    pub fn open(configs: &[AccessLog]) -> std::io::Result<AccessLogs> {
        let mut logs = Vec::new();
        for c in configs {
            let file = super::open_append(&c.path)
                .map_err(|e| std::io::Error::new(e.kind(), format!("access log {}: {e}", c.path.display())))?;
            logs.push(OpenLog {
                path: c.path.clone(),
                format: c.format.clone(),
                filter: c.filter.clone(),
                vhost: c.vhost,
                file,
                failing: false,
            });
        }
        Ok(AccessLogs { logs, buf: Vec::with_capacity(512), clf: ClfClock::default(), epoch: None })
    }

    /// No logs at all.
    pub fn none() -> AccessLogs {
        AccessLogs { logs: Vec::new(), buf: Vec::new(), clf: ClfClock::default(), epoch: None }
    }

    /// Follows the master's log epoch: when it moves (a rotation), every log and the
    /// error log are reopened by path before the next write.
    pub fn watch_epoch(&mut self, epoch: &'static AtomicU32) {
        self.epoch = Some((epoch, epoch.load(Relaxed)));
    }

    /// Reopens the logs if the epoch moved since the last look.
    pub fn sync_epoch(&mut self) {
        let Some((epoch, seen)) = self.epoch else { return };
        let now = epoch.load(Relaxed);
        if now != seen {
            self.epoch = Some((epoch, now));
            self.reopen();
            super::reopen_error_log();
        }
    }

    /// Writes one record to every log whose filter (and vhost) takes it.
    pub fn write(&mut self, r: &Record<'_>, internal: bool, vhost: usize) {
        if self.logs.is_empty() {
            return;
        }
        self.sync_epoch();
        let facts = Facts { internal, record: r };
        let stamp = self.clf.stamp(r.start);
        for log in &mut self.logs {
            if log.vhost.is_some_and(|v| v != vhost) || !log.filter.allows(&facts) {
                continue;
            }
            self.buf.clear();
            log.format.render(r, stamp, &mut self.buf);
            if self.buf.len() > MAX_RECORD {
                self.buf.truncate(MAX_RECORD - 1);
                self.buf.push(b'\n');
            }
            // One write() on an O_APPEND descriptor: the record lands whole at the end.
            let result = log.file.write(&self.buf);
            match result {
                Ok(n) if n == self.buf.len() => {
                    if log.failing {
                        log.failing = false;
                        log::warn!("access log {} is writable again", log.path.display());
                    }
                }
                Ok(_) | Err(_) if log.failing => {}
                Ok(n) => {
                    log.failing = true;
                    log::error!(
                        "access log {}: short write ({n} of {}); records are lost until it recovers",
                        log.path.display(),
                        self.buf.len()
                    );
                }
                Err(e) => {
                    log.failing = true;
                    log::error!("access log {}: {e}; records are lost until it recovers", log.path.display());
                }
            }
        }
    }

    /// After a `chroot` to `jail`: the paths as seen from inside.
    pub fn enter_jail(&mut self, jail: &std::path::Path) {
        for log in &mut self.logs {
            if let Ok(rest) = log.path.strip_prefix(jail) {
                log.path = std::path::Path::new("/").join(rest);
            }
        }
    }

    /// Reopens every log by its path (after a rotation renamed the old files).
    pub fn reopen(&mut self) {
        for log in &mut self.logs {
            match super::open_append(&log.path) {
                Ok(f) => log.file = f,
                Err(e) => log::error!("cannot reopen access log {}: {e}", log.path.display()),
            }
        }
    }
}

/// The `[10/Oct/2000:13:55:36 -0700]` stamp, formatted at most once a second.
#[derive(Default)]
struct ClfClock {
    second: u64,
    text: String,
}

impl ClfClock {
    fn stamp(&mut self, t: std::time::SystemTime) -> &str {
        let secs = t.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        if secs != self.second || self.text.is_empty() {
            self.second = secs;
            let ts = jiff::Timestamp::from_second(secs as i64).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
            let z = ts.to_zoned_datetime(super::local_zone().clone());
            self.text = z.strftime("[%d/%b/%Y:%H:%M:%S %z]").to_string();
        }
        &self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    #[test]
    fn a_long_record_is_cut_not_split() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let conf = AccessLog {
            path: path.clone(),
            format: LogFormat::parse("combined").unwrap(),
            filter: Filter::default(),
            rotate: None,
            vhost: None,
        };
        let mut logs = AccessLogs::open(&[conf]).unwrap();
        let ua = vec![b'u'; 10_000];
        let headers = |n: &str| (n == "User-Agent").then_some(&ua[..]);
        let record = Record {
            client: "127.0.0.1".parse().unwrap(),
            local_port: 80,
            request_line: b"GET / HTTP/1.1",
            method: b"GET",
            path: b"/",
            query: None,
            protocol: "HTTP/1.1",
            status: 200,
            body_bytes: 1,
            bytes_in: 1,
            bytes_out: 1,
            start: SystemTime::now(),
            duration: Duration::ZERO,
            vhost: "v",
            host: None,
            headers_in: &headers,
            response_head: b"",
            conn_status: '+',
            keepalive_count: 0,
            request_id: 0,
        };
        logs.write(&record, false, 0);
        logs.write(&record, true, 0); // internal: filtered out by default
        let text = std::fs::read(&path).unwrap();
        assert_eq!(text.len(), MAX_RECORD);
        assert!(text.ends_with(b"uuu\n"));
        assert_eq!(text.iter().filter(|&&b| b == b'\n').count(), 1);
    }
}
