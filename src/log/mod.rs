//! Logs: the error log (pika's own messages, through the `log` facade) and the access
//! logs (one line per request, see `access.rs` and `format.rs`).
//!
//! The error-log backend is written for a forking server: it reads the pid at every
//! message (a logger installed in the master is inherited by every worker), writes each
//! line with one `write()` on an `O_APPEND` descriptor so lines from many processes never
//! tear, and holds no lock across a `fork` (the master is single-threaded).

pub mod access;
pub mod filter;
pub mod format;
pub mod held;
mod json;
pub mod record;
pub mod rotate;

/// Running out of file descriptors: said once when it starts, once when it ends.
pub mod shortage {
    use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

    /// Which operation could not get a descriptor.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[repr(u8)]
    pub enum Op {
        Accept = 1,
        Open = 2,
    }

    /// 0 while descriptors are to be had, else the `Op` that first went short.
    static SHORT: AtomicU8 = AtomicU8::new(0);

    /// `op` could not get a descriptor (`EMFILE`/`ENFILE`).
    pub fn report(op: Op, e: &std::io::Error) {
        if SHORT.compare_exchange(0, op as u8, Relaxed, Relaxed).is_ok() {
            log::error!("out of file descriptors ({e}); answering 503 or waiting until some free up");
        }
    }

    /// `op` got its descriptor: the shortage that began with it is over.
    pub fn recovered(op: Op) {
        if SHORT.load(Relaxed) == op as u8 && SHORT.compare_exchange(op as u8, 0, Relaxed, Relaxed).is_ok() {
            log::warn!("file descriptors available again");
        }
    }
}

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock};

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

/// The time zone for log stamps, resolved once at start (before any chroot).
pub fn local_zone() -> &'static jiff::tz::TimeZone {
    static ZONE: OnceLock<jiff::tz::TimeZone> = OnceLock::new();
    ZONE.get_or_init(|| jiff::tz::TimeZone::try_system().unwrap_or(jiff::tz::TimeZone::UTC))
}

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

/// Makes sure a log file exists and that the workers' user owns it, so a worker that
/// dropped root can reopen it after a rotation (the master calls this before it
/// opens the logs, and before it bumps the log epoch). See [`crate::safe_files`]:
/// no link is followed, a hard-linked file or an unsafe folder is refused, and an
/// existing file keeps its group.
pub fn prepare_for_workers(path: &Path, owner: Option<(nix::unistd::Uid, nix::unistd::Gid)>) -> std::io::Result<()> {
    let opened = crate::safe_files::open_append(path)?;
    if let Some(owner) = owner {
        crate::safe_files::hand_over(path, &opened, owner)?;
    }
    Ok(())
}

/// Opens a log file for appending, creating it (`0640`) and its folder if needed,
/// never through a link at its name (see [`crate::safe_files::open_append`]).
pub fn open_append(path: &Path) -> std::io::Result<File> {
    crate::safe_files::open_append(path).map(|o| o.file)
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
