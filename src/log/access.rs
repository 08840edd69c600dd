//! Access logs: one line per request, each written with a single `write()` on an
//! `O_APPEND` descriptor, so that lines from any number of workers never tear or mix.
//!
//! The master opens the files before it forks (workers may have dropped the rights to
//! open them); a worker renders each record into one reused buffer.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

use super::format::{LogFormat, Record};
use crate::config::AccessLog;

/// A record longer than this is cut (and still ends in a newline): one `write()` of at
/// most `PIPE_BUF` bytes stays atomic even if the log is later a pipe.
pub const MAX_RECORD: usize = 4096;

struct OpenLog {
    path: PathBuf,
    format: LogFormat,
    file: File,
}

/// The open access logs of one process.
pub struct AccessLogs {
    logs: Vec<OpenLog>,
    buf: Vec<u8>,
    clf: ClfClock,
}

impl AccessLogs {
    /// Opens (creating) every configured log.
    pub fn open(configs: &[AccessLog]) -> std::io::Result<AccessLogs> {
        let mut logs = Vec::new();
        for c in configs {
            let file = super::open_append(&c.path)
                .map_err(|e| std::io::Error::new(e.kind(), format!("access log {}: {e}", c.path.display())))?;
            logs.push(OpenLog { path: c.path.clone(), format: c.format.clone(), file });
        }
        Ok(AccessLogs { logs, buf: Vec::with_capacity(512), clf: ClfClock::default() })
    }

    /// No logs at all.
    pub fn none() -> AccessLogs {
        AccessLogs { logs: Vec::new(), buf: Vec::new(), clf: ClfClock::default() }
    }

    pub fn is_empty(&self) -> bool {
        self.logs.is_empty()
    }

    /// Writes one record to every log.
    pub fn write(&mut self, r: &Record<'_>) {
        let stamp = self.clf.stamp(r.start);
        for log in &mut self.logs {
            self.buf.clear();
            log.format.render(r, stamp, &mut self.buf);
            if self.buf.len() > MAX_RECORD {
                self.buf.truncate(MAX_RECORD - 1);
                self.buf.push(b'\n');
            }
            // One write() on an O_APPEND descriptor: the record lands whole at the end.
            match log.file.write(&self.buf) {
                Ok(n) if n == self.buf.len() => {}
                Ok(n) => log::error!("access log {}: short write ({n} of {})", log.path.display(), self.buf.len()),
                Err(e) => log::error!("access log {}: {e}", log.path.display()),
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

    pub fn flush(&mut self) {
        for log in &mut self.logs {
            let _ = log.file.flush();
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
