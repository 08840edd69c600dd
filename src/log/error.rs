//! The error log: a `log` facade backend that reads the pid at every line and
//! writes each line with one `write()`, to stderr, a file or syslog
//! ([`ErrorLogTarget`]); reopened when the logs rotate.

use super::files::{local_zone, open_append};
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};

use log::{Level, LevelFilter, Log, Metadata, Record};

/// Where the error log goes.
#[derive(Debug, Clone)]
pub enum ErrorLogTarget {
    File(PathBuf),
    Stderr,
    /// `syslog` or `syslog:FACILITY`, sent to `server.syslog_socket` (or the usual
    /// `/dev/log`).
    Syslog(syslog::Facility, Option<PathBuf>),
}

/// The scoreboard slot of this process, shown in every error-log line (-1: the master).
static SLOT: AtomicI32 = AtomicI32::new(-1);

/// Where error-log lines go right now.
enum Sink {
    Stderr,
    File(File, PathBuf),
    Syslog(Box<syslog::Logger<syslog::LoggerBackend, syslog::Formatter3164>>),
}

struct ErrorLog {
    sink: Mutex<Sink>,
}

static ERROR_LOG: ErrorLog = ErrorLog { sink: Mutex::new(Sink::Stderr) };

/// Installs the error log on stderr; call once, first thing in `main`.
pub fn init_stderr(level: LevelFilter) {
    let _ = log::set_logger(&ERROR_LOG);
    log::set_max_level(level);
    let _ = local_zone();
}

/// Points the error log at its configured target. Files are created (with their
/// folder) if missing. On failure the old target stays.
pub fn set_target(target: &ErrorLogTarget, level: LevelFilter) -> std::io::Result<()> {
    let sink = match target {
        ErrorLogTarget::Stderr => Sink::Stderr,
        ErrorLogTarget::File(path) => Sink::File(open_append(path)?, path.clone()),
        ErrorLogTarget::Syslog(facility, socket) => {
            let formatter = syslog::Formatter3164 {
                facility: *facility,
                hostname: None,
                process: "pika".into(),
                pid: std::process::id(),
            };
            let logger = match socket {
                Some(path) => syslog::unix_custom(formatter, path),
                None => syslog::unix(formatter),
            }
            .map_err(|e| std::io::Error::other(e.to_string()))?;
            Sink::Syslog(Box::new(logger))
        }
    };
    *ERROR_LOG.sink.lock().unwrap_or_else(|p| p.into_inner()) = sink;
    log::set_max_level(level);
    Ok(())
}

/// Reopens the error log file by its path (after a rotation renamed it).
pub fn reopen_error_log() {
    let mut sink = ERROR_LOG.sink.lock().unwrap_or_else(|p| p.into_inner());
    if let Sink::File(f, path) = &mut *sink {
        if let Ok(new) = open_append(path) {
            *f = new;
        }
    }
}

/// The error log's descriptor (a file or the syslog socket), which a worker keeps.
pub fn error_log_fd() -> Option<i32> {
    use std::os::fd::AsRawFd;
    let sink = ERROR_LOG.sink.lock().unwrap_or_else(|p| p.into_inner());
    match &*sink {
        Sink::Stderr => None,
        Sink::File(f, _) => Some(f.as_raw_fd()),
        Sink::Syslog(logger) => match &logger.backend {
            syslog::LoggerBackend::Unix(s) => Some(s.as_raw_fd()),
            syslog::LoggerBackend::UnixStream(s) => Some(s.get_ref().as_raw_fd()),
            syslog::LoggerBackend::Udp(s, _) => Some(s.as_raw_fd()),
            syslog::LoggerBackend::Tcp(s) => Some(s.get_ref().as_raw_fd()),
        },
    }
}

/// After a `chroot` to `jail`: the error log file's path as seen from inside, so that
/// reopening after a rotation still finds it.
pub fn enter_jail(jail: &Path) {
    let mut sink = ERROR_LOG.sink.lock().unwrap_or_else(|p| p.into_inner());
    if let Sink::File(_, path) = &mut *sink {
        if let Ok(rest) = path.strip_prefix(jail) {
            *path = Path::new("/").join(rest);
        }
    }
}

/// Records this process's scoreboard slot for its log lines (workers call it after fork).
pub fn set_slot(slot: usize) {
    SLOT.store(slot as i32, Ordering::Relaxed);
}

impl Log for ErrorLog {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        // Filtering is left to `log::set_max_level`.
        true
    }

    fn log(&self, record: &Record<'_>) {
        let mut sink = self.sink.lock().unwrap_or_else(|p| p.into_inner());
        if let Sink::Syslog(logger) = &mut *sink {
            // The syslog crate fixes the pid when the logger is made; a worker must
            // report its own.
            logger.formatter.pid = std::process::id();
            let msg = record.args().to_string();
            let _ = match record.level() {
                Level::Error => logger.err(msg),
                Level::Warn => logger.warning(msg),
                Level::Info => logger.info(msg),
                Level::Debug | Level::Trace => logger.debug(msg),
            };
            return;
        }
        let now = jiff::Timestamp::now().to_zoned_datetime(local_zone().clone());
        let slot = SLOT.load(Ordering::Relaxed);
        let who = if slot < 0 { String::from("master") } else { format!("slot {slot}") };
        let line = format!(
            "[{}] [{}] [pid {} {}] {}\n",
            now.strftime("%Y-%m-%d %H:%M:%S%.3f %z"),
            record.level().as_str().to_ascii_lowercase(),
            std::process::id(),
            who,
            record.args()
        );
        // One write per line: O_APPEND keeps lines from many processes whole.
        let _ = match &mut *sink {
            Sink::File(f, _) => f.write(line.as_bytes()),
            _ => std::io::stderr().write(line.as_bytes()),
        };
    }

    fn flush(&self) {}
}
