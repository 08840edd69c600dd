//! A lock for the fleet with a lease: one node at a time orders a name's certificate
//! or rotates the ticket keys. Taken with `SET key token NX PX lease`; renewed while
//! the work runs and released at its end, each only by its holder (a script compares
//! the token first, so a node whose lease ran out never renews or frees the lock
//! another node took since); a holder that dies stops renewing, and the lease runs
//! out for another node to take it.

use std::time::Duration;

/// How long a lock is held without renewal. The holder renews it on its one-second
/// tick; fifteen seconds rides out a slow tick or a Redis restart, and a node that
/// dies mid-order hands its name to another node within that.
pub const LEASE: Duration = Duration::from_secs(15);

/// Renews the lease if the lock is still the caller's: 1, else 0.
const RENEW: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
                     return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";
/// Frees the lock if it is still the caller's: 1, else 0.
const RELEASE: &str = "if redis.call('get', KEYS[1]) == ARGV[1] then \
                       return redis.call('del', KEYS[1]) else return 0 end";

fn ms(d: Duration) -> u64 {
    d.as_millis().try_into().unwrap_or(u64::MAX)
}

/// `SET key token NX PX lease`: true when the caller holds it now.
pub fn acquire(c: &mut redis::Connection, key: &str, token: &str, lease: Duration) -> redis::RedisResult<bool> {
    let set: Option<String> = redis::cmd("SET").arg(key).arg(token).arg("NX").arg("PX").arg(ms(lease)).query(c)?;
    Ok(set.is_some())
}

/// Extends the lease; false when the lock is no longer the caller's.
pub fn renew(c: &mut redis::Connection, key: &str, token: &str, lease: Duration) -> redis::RedisResult<bool> {
    let n: i64 = redis::Script::new(RENEW).key(key).arg(token).arg(ms(lease)).invoke(c)?;
    Ok(n == 1)
}

/// Frees the lock if it is the caller's.
pub fn release(c: &mut redis::Connection, key: &str, token: &str) -> redis::RedisResult<bool> {
    let n: i64 = redis::Script::new(RELEASE).key(key).arg(token).invoke(c)?;
    Ok(n == 1)
}

/// Who holds the lock (its token), if anyone.
pub fn holder(c: &mut redis::Connection, key: &str) -> redis::RedisResult<Option<String>> {
    redis::cmd("GET").arg(key).query(c)
}
