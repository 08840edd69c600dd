//! The connection to Redis, as the master and the ACME child hold it: one blocking
//! connection, every command bounded by a timeout, and the link's health as one
//! value. A command that fails marks Redis down (said once in the error log), and
//! no command is sent again until the back-off has passed, so a Redis that is gone
//! costs the master one bounded try per back-off, never a wait per tick.

use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long a connect may take. Redis beside the nodes answers in a millisecond;
/// half a second keeps the master's one-second tick whole when Redis hangs.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// How long one command may wait for its answer (as the connect, and for the same reason).
pub const IO_TIMEOUT: Duration = Duration::from_millis(500);
/// The first wait after a failure, doubled at each failure in a row up to
/// [`RETRY_MAX`]: a restart of Redis is seen within seconds, and a Redis that is gone
/// for an hour is tried twice a minute.
pub const RETRY_FIRST: Duration = Duration::from_secs(1);
pub const RETRY_MAX: Duration = Duration::from_secs(30);

/// The wait before the next try after `failures` failures in a row (at least one).
pub fn backoff(failures: u32) -> Duration {
    let doubled = RETRY_FIRST.saturating_mul(1u32 << failures.saturating_sub(1).min(16));
    doubled.min(RETRY_MAX)
}

/// Whether Redis answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    /// Not tried yet.
    Unknown,
    Up,
    /// Failed `failures` times in a row; not tried again before `retry_at`.
    Down {
        failures: u32,
        retry_at: Instant,
    },
}

/// One connection to the fleet's Redis.
///
/// The password is not kept: it is read from its file at each connect and wiped once
/// sent (`AUTH`, then `SELECT` of the URL's database), so the memory a worker inherits
/// from the master holds none.
pub struct Redis {
    client: redis::Client,
    conn: Option<redis::Connection>,
    health: Health,
    /// The URL without its password, for the error log.
    shown: String,
    password_file: Option<PathBuf>,
    /// The URL's database, selected after `AUTH`.
    db: i64,
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Redis {{ {}, {:?} }}", self.shown, self.health)
    }
}

/// `url` without the password it may carry (`redis://:secret@host` → `redis://host`).
pub fn shown_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}{}", &url[..s + 3], &url[at + 1..]),
        _ => url.to_string(),
    }
}

impl Redis {
    /// A client for `url` (no connection yet): the password in `password_file`, and
    /// `ca` (PEM roots for `rediss://`), as the config gave them.
    pub fn new(url: &str, password_file: Option<PathBuf>, ca: Option<Vec<u8>>) -> Result<Redis, String> {
        let shown = shown_url(url);
        let info: redis::ConnectionInfo =
            redis::IntoConnectionInfo::into_connection_info(url).map_err(|e| format!("{shown}: {e}"))?;
        // The database is selected after AUTH (the client would select it before);
        // no CLIENT SETINFO, which a Redis with a password refuses before AUTH.
        let db = info.redis_settings().db();
        let settings = info.redis_settings().clone().set_db(0).set_skip_set_lib_name();
        let info = info.set_redis_settings(settings);
        let client = match ca {
            Some(root_cert) => redis::Client::build_with_tls(
                info,
                redis::TlsCertificates { client_tls: None, root_cert: Some(root_cert) },
            ),
            None => redis::Client::open(info),
        }
        .map_err(|e| format!("{shown}: {e}"))?;
        Ok(Redis { client, conn: None, health: Health::Unknown, shown, password_file, db })
    }

    pub fn health(&self) -> Health {
        self.health
    }

    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Runs `f` on the connection (made first if needed), unless the back-off says
    /// wait. `None`: Redis is down (now, or still in its back-off).
    ///
    /// A command a signal to the master cut short (a socket with a timeout is not
    /// restarted after a signal: a child's exit, a reload) is run once more, on a
    /// new connection (the old one's state is unknown). The fleet's commands bear
    /// it: a lock taken twice by its holder is renewed, a counter bumped twice only
    /// makes the others look again.
    pub fn run<T>(&mut self, mut f: impl FnMut(&mut redis::Connection) -> redis::RedisResult<T>) -> Option<T> {
        if let Health::Down { retry_at, .. } = self.health
            && Instant::now() < retry_at
        {
            return None;
        }
        let mut result = self.connect().and_then(&mut f);
        if result.as_ref().is_err_and(interrupted) {
            self.conn = None;
            result = self.connect().and_then(&mut f);
        }
        match result {
            Ok(v) => {
                if let Health::Down { failures, .. } = self.health {
                    log::warn!("cluster: Redis at {} answers again (after {failures} failed tries)", self.shown);
                }
                self.health = Health::Up;
                Some(v)
            }
            Err(e) => {
                self.conn = None;
                let failures = match self.health {
                    Health::Down { failures, .. } => failures.saturating_add(1),
                    Health::Unknown | Health::Up => {
                        log::error!(
                            "cluster: Redis at {} does not answer ({e}): serving with what this node has, trying again",
                            self.shown
                        );
                        1
                    }
                };
                self.health = Health::Down { failures, retry_at: Instant::now() + backoff(failures) };
                None
            }
        }
    }

    fn connect(&mut self) -> redis::RedisResult<&mut redis::Connection> {
        if self.conn.is_none() {
            let mut c = self.client.get_connection_with_timeout(CONNECT_TIMEOUT)?;
            c.set_read_timeout(Some(IO_TIMEOUT))?;
            c.set_write_timeout(Some(IO_TIMEOUT))?;
            if let Some(file) = &self.password_file {
                let password = zeroize::Zeroizing::new(std::fs::read_to_string(file).map_err(|e| {
                    redis::RedisError::from((redis::ErrorKind::Io, "password_file", format!("{}: {e}", file.display())))
                })?);
                redis::cmd("AUTH").arg(password.trim()).query::<()>(&mut c)?;
            }
            if self.db != 0 {
                redis::cmd("SELECT").arg(self.db).query::<()>(&mut c)?;
            }
            self.conn = Some(c);
        }
        Ok(self.conn.as_mut().expect("just made"))
    }
}

/// Whether a command failed because a signal interrupted its socket's wait (EINTR).
fn interrupted(e: &redis::RedisError) -> bool {
    let io = std::error::Error::source(e).and_then(|s| s.downcast_ref::<std::io::Error>());
    io.map_or_else(
        || e.is_io_error() && e.to_string().contains("(os error 4)"),
        |io| io.kind() == std::io::ErrorKind::Interrupted,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_up_to_its_ceiling() {
        let waits: Vec<u64> = (1..=8).map(|f| backoff(f).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30, 30]);
        assert_eq!(backoff(u32::MAX), RETRY_MAX);
        assert_eq!(backoff(0), RETRY_FIRST);
    }

    #[test]
    fn a_password_in_the_url_is_never_shown() {
        assert_eq!(shown_url("redis://:s3cret@10.0.0.5:6379/0"), "redis://10.0.0.5:6379/0");
        assert_eq!(shown_url("rediss://user:pw@r.example/1"), "rediss://r.example/1");
        assert_eq!(shown_url("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }

    #[test]
    fn a_redis_that_refuses_is_down_and_left_alone_for_the_backoff() {
        // A port nothing listens on (bound, then closed).
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut r = Redis::new(&format!("redis://127.0.0.1:{port}/0"), None, None).unwrap();
        assert_eq!(r.run(|c| redis::cmd("PING").query::<String>(c)), None);
        assert!(matches!(r.health(), Health::Down { failures: 1, .. }));
        assert_eq!(r.run(|c| redis::cmd("PING").query::<String>(c)), None);
        assert!(matches!(r.health(), Health::Down { failures: 1, .. }), "not tried again within the back-off");
    }
}
