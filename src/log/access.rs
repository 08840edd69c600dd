//! Access logs: one line per request, written with a single `write()` of whole records
//! on an `O_APPEND` descriptor, so that lines from any number of workers never tear or
//! mix.
//!
//! The master opens the files before it forks (workers may have dropped the rights to
//! open them); a worker renders each record into one reused buffer. With `buffer` set
//! (the default), a worker holds records back and writes them together: when the next
//! one would not fit; once the oldest is `flush` old, at the next record or after the
//! next second the worker waits for work ([`AccessLogs::idle`]); before it exits
//! (also on a fast stop). Held records live in memory the master reads: the master
//! writes what a killed worker held ([`AccessLogs::write_leftovers`], `held.rs`).

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

use super::filter::{Facts, Filter};
use super::format::LogFormat;
use super::held::{self, Held, Shelf};
use super::record::Record;
use super::rotate::Rotate;

/// No record is longer than this: the client's fields are cut to fit (see
/// `LogFormat::render_within`), so one `write()` of at most `PIPE_BUF` bytes stays
/// atomic even if the log is later a pipe.
pub const MAX_RECORD: usize = 4096;

struct OpenLog {
    path: PathBuf,
    format: LogFormat,
    filter: Filter,
    vhost: Option<usize>,
    file: File,
    health: Health,
    /// Bytes of records to hold back (0: write each at once) and for how long.
    buffer: usize,
    flush_ms: u64,
    /// The held-back records, once [`AccessLogs::hold_back`] made room for them.
    held: Option<Held>,
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
            let file = super::files::open_append(&c.path)
                .map_err(|e| std::io::Error::new(e.kind(), format!("access log {}: {e}", c.path.display())))?;
            logs.push(OpenLog {
                path: c.path.clone(),
                format: c.format.clone(),
                filter: c.filter.clone(),
                vhost: c.vhost,
                file,
                health: Health::default(),
                buffer: c.buffer,
                flush_ms: c.flush.as_millis() as u64,
                held: None,
            });
        }
        Ok(AccessLogs { logs, buf: Vec::with_capacity(512), clf: ClfClock::default(), epoch: None })
    }

    /// The open files' descriptors (a worker keeps these and closes the master's others).
    pub fn fds(&self) -> Vec<i32> {
        self.logs.iter().map(|l| l.file.as_raw_fd()).collect()
    }

    /// No logs at all.
    pub fn none() -> AccessLogs {
        AccessLogs { logs: Vec::new(), buf: Vec::new(), clf: ClfClock::default(), epoch: None }
    }

    /// Counts every failed write in `counter` (the worker's scoreboard slot; the
    /// metrics page's `pika_access_log_write_errors_total`).
    pub fn count_errors(&mut self, counter: &'static AtomicU64) {
        for log in &mut self.logs {
            log.health.errors = Some(counter);
        }
    }

    /// Follows the master's log epoch: when it moves past `opened_at` (the epoch these
    /// files were opened under), every log and the error log are reopened by path
    /// before the next write.
    pub fn watch_epoch(&mut self, epoch: &'static AtomicU32, opened_at: u32) {
        self.epoch = Some((epoch, opened_at));
    }

    /// Reopens the logs if the epoch moved since the last look.
    pub fn sync_epoch(&mut self) {
        let Some((epoch, seen)) = self.epoch else { return };
        let now = epoch.load(Relaxed);
        if now != seen {
            self.epoch = Some((epoch, now));
            self.reopen();
            super::error::reopen_error_log();
        }
    }

    /// The `buffer` of each log, in order (0: written at once): what a shelf's
    /// layout is made from, by the worker and by the master alike.
    pub fn buffers(configs: &[AccessLog]) -> Vec<usize> {
        configs.iter().map(|c| c.buffer).collect()
    }

    /// From now on, hold records back in the logs configured with a `buffer`, on
    /// `shelf` (this worker's slot's, which the master reads if the worker dies; see
    /// `held.rs`). Called once, in a worker.
    pub fn hold_back(&mut self, shelf: Shelf) {
        let buffers: Vec<usize> = self.logs.iter().map(|l| l.buffer).collect();
        let areas = shelf.layout(&buffers);
        let mut wants = Vec::new();
        let mut which = Vec::new();
        for (i, (log, area)) in self.logs.iter().zip(&areas).enumerate() {
            let Some(area) = *area else { continue };
            // One write() of up to PIPE_BUF bytes is atomic on a pipe; on a regular
            // file a whole write() is.
            let cap = if log.file.metadata().is_ok_and(|m| m.is_file()) { area.cap } else { area.cap.min(MAX_RECORD) };
            wants.push(held::Want { area, cap, fd: log.file.as_raw_fd() });
            which.push(i);
        }
        if wants.is_empty() {
            return;
        }
        for (i, h) in which.into_iter().zip(held::install(shelf, &wants)) {
            self.logs[i].held = Some(h);
        }
    }

    /// In the master: writes what a dead worker left on `shelf` (`left`: each
    /// buffered log's path and area, as the worker was forked with them) to each
    /// log's current file, the master's own descriptor if it still has the log, and
    /// counts none. Returns the bytes written.
    pub fn write_leftovers(&self, shelf: Shelf, left: &[(PathBuf, held::Area)]) -> usize {
        let mut total = 0;
        for (path, area) in left {
            let len = shelf.leftover(*area);
            if len == 0 {
                continue;
            }
            let opened;
            let fd = match self.logs.iter().find(|l| l.path == *path) {
                Some(log) => log.file.as_raw_fd(),
                None => match super::files::open_append(path) {
                    Ok(f) => {
                        opened = f;
                        opened.as_raw_fd()
                    }
                    Err(e) => {
                        log::error!(
                            "access log {}: {e}; {len} bytes of records a worker held are lost",
                            path.display()
                        );
                        shelf.clear(&[Some(*area)]);
                        continue;
                    }
                },
            };
            match shelf.write_leftover(*area, fd) {
                Ok(n) => total += n,
                Err(e) => log::error!("access log {}: {e}; records a worker held are lost", path.display()),
            }
        }
        total
    }

    /// Writes one record to every log whose filter (and vhost) takes it.
    pub fn write(&mut self, r: &Record<'_>, internal: bool, vhost: usize) {
        if self.logs.is_empty() {
            return;
        }
        self.sync_epoch();
        let facts = Facts { internal, record: r };
        let stamp = self.clf.stamp(r.start);
        let mut now_ms = None;
        for log in &mut self.logs {
            if log.vhost.is_some_and(|v| v != vhost) || !log.filter.allows(&facts) {
                continue;
            }
            self.buf.clear();
            log.format.render_within(r, stamp, &mut self.buf, MAX_RECORD);
            let Some(held) = &mut log.held else {
                put(&mut log.file, &log.path, &mut log.health, &self.buf);
                continue;
            };
            let now = *now_ms.get_or_insert_with(crate::scoreboard::now_ms);
            if self.buf.len() > held.room() {
                drain(held, &log.file, &log.path, &mut log.health);
            }
            if self.buf.len() > held.capacity() {
                put(&mut log.file, &log.path, &mut log.health, &self.buf);
            } else {
                held.push(&self.buf, now);
            }
            if held.age_ms(now) >= log.flush_ms {
                drain(held, &log.file, &log.path, &mut log.health);
            }
        }
    }

    /// The worker waited a second for work: follow a rotation (so that records still
    /// held, even those a `TERM` writes, go to the new file), then write out the held
    /// records that are `flush` old.
    pub fn idle(&mut self) {
        self.sync_epoch();
        self.write_held(Some(crate::scoreboard::now_ms()));
    }

    /// The worker is about to wait on a client for a second or more (a slow head,
    /// a body, a slow reader): write every held record now, so none shows up late
    /// or is lost should the worker be killed meanwhile.
    pub fn waiting(&mut self) {
        self.write_held(None);
    }

    /// Writes out every held record (the worker ends).
    pub fn flush(&mut self) {
        self.write_held(None);
    }

    /// Writes the held records of each log (only those `flush` old, given `now_ms`).
    fn write_held(&mut self, now_ms: Option<u64>) {
        let due = |l: &OpenLog| {
            l.held.as_ref().is_some_and(|h| !h.is_empty() && now_ms.is_none_or(|now| h.age_ms(now) >= l.flush_ms))
        };
        if !self.logs.iter().any(due) {
            return;
        }
        // A rotation since: the records go to the new file (never to one that may
        // already be compressed).
        self.sync_epoch();
        for log in &mut self.logs {
            if due(log) {
                let OpenLog { held: Some(h), file, path, health, .. } = log else { continue };
                drain(h, file, path, health);
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
            match super::files::open_append(&log.path) {
                Ok(f) => {
                    if let Some(h) = &log.held {
                        h.set_fd(f.as_raw_fd());
                    }
                    log.file = f;
                }
                Err(e) => log::error!("cannot reopen access log {}: {e}", log.path.display()),
            }
        }
    }
}

impl Drop for AccessLogs {
    fn drop(&mut self) {
        self.flush();
    }
}

/// How writes to one log are going.
#[derive(Default)]
struct Health {
    /// A write failed (disk full, permissions): said once, until writes work again.
    failing: bool,
    /// Where failed writes are counted, if anywhere.
    errors: Option<&'static AtomicU64>,
}

/// One `write()` of whole records; a failure is counted each time, said once, and so
/// is the recovery.
fn put(file: &mut File, path: &std::path::Path, health: &mut Health, bytes: &[u8]) {
    // One write() on an O_APPEND descriptor: the records land whole at the end.
    account(path, health, bytes.len(), file.write(bytes));
}

/// Writes the records `held` holds (one `write()`, as [`put`]).
fn drain(held: &mut Held, file: &File, path: &std::path::Path, health: &mut Health) {
    if let Some((len, written)) = held.drain(file.as_raw_fd()) {
        account(path, health, len, written);
    }
}

/// What one write of `len` bytes of records did: a failure is counted each time,
/// said once, and so is the recovery.
fn account(path: &std::path::Path, health: &mut Health, len: usize, written: std::io::Result<usize>) {
    if !matches!(written, Ok(n) if n == len) {
        if let Some(errors) = health.errors {
            crate::scoreboard::add(errors, 1);
        }
    }
    let failing = &mut health.failing;
    match written {
        Ok(n) if n == len => {
            if *failing {
                *failing = false;
                log::warn!("access log {} is writable again", path.display());
            }
        }
        Ok(_) | Err(_) if *failing => {}
        Ok(n) => {
            *failing = true;
            log::error!(
                "access log {}: short write ({n} of {len}); records are lost until it recovers",
                path.display()
            );
        }
        Err(e) => {
            *failing = true;
            log::error!("access log {}: {e}; records are lost until it recovers", path.display());
        }
    }
}

/// The `[10/Oct/2000:13:55:36 -0700]` stamp, formatted at most once a second.
#[derive(Default)]
struct ClfClock {
    /// The second `text` shows, as the span `[from, to)` of the wall clock: a
    /// record of the same second is two comparisons (no subtraction from the epoch).
    span: Option<(SystemTime, SystemTime)>,
    text: String,
}

impl ClfClock {
    fn stamp(&mut self, t: SystemTime) -> &str {
        if self.span.is_none_or(|(from, to)| t < from || t >= to) {
            let secs = t.duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
            let from = std::time::UNIX_EPOCH + Duration::from_secs(secs);
            self.span = Some((from, from + Duration::from_secs(1)));
            let ts = jiff::Timestamp::from_second(secs as i64).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
            let z = ts.to_zoned_datetime(super::files::local_zone().clone());
            self.text = z.strftime("[%d/%b/%Y:%H:%M:%S %z]").to_string();
        }
        &self.text
    }
}

#[derive(Debug, Clone)]
pub struct AccessLog {
    pub path: PathBuf,
    pub format: LogFormat,
    pub filter: Filter,
    pub rotate: Option<Rotate>,
    /// Set for a log declared inside a `[[vhost]]`: only that vhost's requests.
    pub vhost: Option<usize>,
    /// Bytes of records a worker holds back for one write (0: each record at once),
    /// and the longest a record waits while the worker is busy.
    pub buffer: usize,
    pub flush: Duration,
    /// The included file that declares it (`None`: the main file).
    pub source: Option<PathBuf>,
}

/// `[[access_log]] buffer` unless set: lighttpd's 8 KiB, ~40 combined records.
pub const DEFAULT_LOG_BUFFER: usize = 8192;
/// `[[access_log]] flush` unless set.
pub const DEFAULT_LOG_FLUSH: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    /// The stamp is the record's own second, kept across a second's records, made
    /// again at the next second and for a clock set back.
    #[test]
    fn the_clf_stamp_follows_the_second() {
        let mut clock = ClfClock::default();
        let at = |secs: u64, ms: u64| std::time::UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(ms);
        let fresh = |secs: u64| {
            let z = jiff::Timestamp::from_second(secs as i64)
                .unwrap()
                .to_zoned_datetime(super::super::files::local_zone().clone());
            z.strftime("[%d/%b/%Y:%H:%M:%S %z]").to_string()
        };
        let day = 1_780_000_000;
        for (secs, ms) in
            [(day, 0), (day, 999), (day + 1, 0), (day + 1, 500), (day, 999), (day - 3600, 1), (day + 86_400, 0)]
        {
            assert_eq!(clock.stamp(at(secs, ms)), fresh(secs), "{secs}.{ms}");
        }
    }

    fn conf(path: &std::path::Path, format: &str, buffer: usize, flush: Duration) -> AccessLog {
        AccessLog {
            path: path.to_path_buf(),
            format: LogFormat::parse(format).unwrap(),
            filter: Filter::default(),
            rotate: None,
            vhost: None,
            buffer,
            flush,
            source: None,
        }
    }

    fn record<'a>(path: &'a [u8], headers: &'a dyn Fn(&str) -> Option<&'a [u8]>) -> Record<'a> {
        Record {
            client: "127.0.0.1".parse().unwrap(),
            peer: "127.0.0.1:40000".parse().unwrap(),
            user: None,
            local_port: 80,
            request_line: b"GET / HTTP/1.1",
            method: b"GET",
            path,
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
            headers_in: headers,
            response_head: b"",
            conn_status: '+',
            keepalive_count: 0,
            health: false,
            request_id: 0,
            tls: None,
            upstream: None,
        }
    }

    #[test]
    fn long_client_fields_are_cut_so_the_record_keeps_every_field() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let mut logs = AccessLogs::open(&[conf(&path, "combined", 0, Duration::ZERO)]).unwrap();
        let ua = vec![b'u'; 10_000];
        let headers = |n: &str| (n == "User-Agent").then_some(&ua[..]);
        let r = record(b"/", &headers);
        logs.write(&r, false, 0);
        logs.write(&r, true, 0); // internal: filtered out by default
        let text = std::fs::read(&path).unwrap();
        assert_eq!(text.len(), MAX_RECORD);
        assert!(text.ends_with(b"uuu\"\n"), "the User-Agent is cut, its closing quote kept");
        assert_eq!(text.iter().filter(|&&b| b == b'\n').count(), 1);
        // A long request line (of quotes: escaped, two bytes each) is cut, not the
        // fields after it, and never between a backslash and what it escapes.
        std::fs::remove_file(&path).unwrap();
        logs.reopen();
        let line = [&b"GET /"[..], &[b'"'; 5000], b" HTTP/1.1"].concat();
        let headers = |n: &str| (n == "User-Agent").then_some(&b"agent/1"[..]);
        let r = Record { request_line: &line, ..record(b"/", &headers) };
        logs.write(&r, false, 0);
        let text = String::from_utf8(std::fs::read(&path).unwrap()).unwrap();
        assert!(text.len() <= MAX_RECORD, "{}", text.len());
        assert!(text.ends_with("\\\"\" 200 1 \"-\" \"agent/1\"\n"), "{text}");
    }

    #[test]
    fn held_records_go_out_whole_when_the_next_does_not_fit_when_idle_and_at_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        // "%U" is the path: records of exactly 10 bytes ("/00000000" and a newline).
        let configs = [conf(&path, "%U", 35, Duration::from_secs(3600))];
        let mut logs = AccessLogs::open(&configs).unwrap();
        logs.hold_back(Shelf::private(&AccessLogs::buffers(&configs)).unwrap());
        let lines = |p: &std::path::Path| std::fs::read_to_string(p).unwrap().lines().count();
        for i in 0..3 {
            let p = format!("/{i:08}");
            logs.write(&record(p.as_bytes(), &|_: &str| None), false, 0);
        }
        let no_headers = |_: &str| None;
        assert_eq!(lines(&path), 0, "three records fit in 35 bytes: held");
        logs.write(&record(b"/00000003", &no_headers), false, 0);
        assert_eq!(lines(&path), 3, "the fourth did not fit: the first three went out");
        logs.flush();
        assert_eq!(lines(&path), 4);
        logs.flush();
        assert_eq!(lines(&path), 4, "nothing written twice");
        // A record larger than the whole buffer goes straight out, after those held.
        logs.write(&record(b"/00000004", &no_headers), false, 0);
        logs.write(&record(&[b'x'; 100], &no_headers), false, 0);
        logs.write(&record(b"/00000005", &no_headers), false, 0);
        drop(logs);
        let text = std::fs::read_to_string(&path).unwrap();
        let got: Vec<&str> = text.lines().map(|l| &l[..2]).collect();
        assert_eq!(got, ["/0", "/0", "/0", "/0", "/0", "xx", "/0"], "{text}");
    }

    #[test]
    fn the_master_writes_what_a_killed_worker_held_once_to_the_current_file() {
        let dir = tempfile::tempdir().unwrap();
        let (path, old) = (dir.path().join("access.log"), dir.path().join("access.log.1"));
        let no_headers = |_: &str| None;
        let configs = [conf(&path, "%U", 4096, Duration::from_secs(3600)), conf(&path, "%U", 0, Duration::ZERO)];
        let buffers = AccessLogs::buffers(&configs);
        let region = held::Region::map(&buffers, 2).unwrap();
        let mut master = AccessLogs::open(&configs).unwrap();
        let mut worker = AccessLogs::open(&configs).unwrap();
        worker.hold_back(region.shelf(1));
        worker.write(&record(b"/a", &no_headers), false, 0);
        worker.write(&record(b"/b", &no_headers), false, 0);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "/a\n/b\n", "the unbuffered twin's, at once");
        // A rotation, then the worker is killed: it writes nothing more.
        std::fs::rename(&path, &old).unwrap();
        master.reopen();
        std::mem::forget(worker);
        let shelf = region.shelf(1);
        let left: Vec<(PathBuf, held::Area)> =
            configs.iter().zip(shelf.layout(&buffers)).filter_map(|(c, a)| Some((c.path.clone(), a?))).collect();
        assert_eq!(master.write_leftovers(region.shelf(0), &left), 0, "another slot's");
        assert_eq!(master.write_leftovers(shelf, &left), 6);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "/a\n/b\n", "in the new file");
        assert_eq!(std::fs::read_to_string(&old).unwrap(), "/a\n/b\n", "the twin's only");
        assert_eq!(master.write_leftovers(shelf, &left), 0, "once");
    }

    #[test]
    fn a_held_record_goes_out_once_flush_old_when_idle_or_with_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.log");
        let no_headers = |_: &str| None;
        let configs = [conf(&path, "%U", 4096, Duration::from_millis(50))];
        let mut logs = AccessLogs::open(&configs).unwrap();
        logs.hold_back(Shelf::private(&AccessLogs::buffers(&configs)).unwrap());
        logs.write(&record(b"/a", &no_headers), false, 0);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
        logs.idle();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "", "younger than flush: held");
        std::thread::sleep(Duration::from_millis(80));
        logs.idle();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "/a\n");
        logs.write(&record(b"/b", &no_headers), false, 0);
        std::thread::sleep(Duration::from_millis(80));
        logs.write(&record(b"/c", &no_headers), false, 0);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "/a\n/b\n/c\n", "with the next record");
    }
}
