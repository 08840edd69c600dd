//! When to ask the CA: the renewal time of a certificate, the back-off after a
//! failure, and what `Retry-After` allows. Pure functions of the times involved, so
//! the master's part is a comparison on its tick.

/// The first retry after a failure. A network blip heals in seconds; doubling from
/// here reaches an hour after 8 failures in a row.
pub const BACKOFF_FIRST: i64 = 15;
/// The longest wait between tries: a CA that is down for days is asked four times a
/// day, well under any CA's limit on failed orders.
pub const BACKOFF_MAX: i64 = 6 * 3600;
/// A `Retry-After` longer than this is read as this (a CA's mistake must not stop
/// renewals for a month).
pub const RETRY_AFTER_MAX: i64 = 86400;
/// A certificate obtained by this process is not renewed again sooner than this, even
/// when `renew_before` is longer than its lifetime: at most one order an hour per
/// certificate, whatever the settings.
pub const RENEW_FLOOR: i64 = 3600;

/// When a certificate valid from `not_before` to `not_after` is due for renewal:
/// `renew_before` ahead of its expiry, or with it unset a third of its lifetime ahead
/// (day 60 of Let's Encrypt's 90, as certbot does).
pub fn renew_at(not_before: i64, not_after: i64, renew_before: Option<u64>) -> i64 {
    let ahead = match renew_before {
        Some(s) => i64::try_from(s).unwrap_or(i64::MAX),
        None => (not_after - not_before).max(0) / 3,
    };
    not_after.saturating_sub(ahead)
}

/// The wait after `failures` failures in a row (1 or more).
pub fn backoff(failures: u32) -> i64 {
    let doublings = failures.saturating_sub(1).min(20);
    (BACKOFF_FIRST << doublings).min(BACKOFF_MAX)
}

/// When to try again after a failure at `now`: the back-off, or the CA's
/// `Retry-After` if it asks for longer.
pub fn next_try(now: i64, failures: u32, retry_after: Option<i64>) -> i64 {
    let wait = backoff(failures).max(retry_after.unwrap_or(0).clamp(0, RETRY_AFTER_MAX));
    now + wait
}

/// One certificate's state as the master tracks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CertRetry {
    /// Failures in a row since the last success.
    pub failures: u32,
    /// No try before this (after a failure).
    pub not_before_try: i64,
    /// When this process last obtained it (0: never).
    pub obtained: i64,
}

/// When the certificate is next asked for. `current`: the validity of the served
/// certificate, `None` for a placeholder (or one that no longer covers the names).
pub fn due(current: Option<(i64, i64)>, renew_before: Option<u64>, life: &CertRetry) -> i64 {
    let planned = current.map_or(0, |(from, to)| renew_at(from, to, renew_before));
    // Not again within the floor of one this process obtained (installed or not: a
    // reload that failed must not turn into an order a tick).
    let floor = if life.obtained > 0 { life.obtained + RENEW_FLOOR } else { 0 };
    planned.max(floor).max(life.not_before_try)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86400;

    #[test]
    fn renewal_is_a_third_of_the_lifetime_ahead_unless_told() {
        assert_eq!(renew_at(0, 90 * DAY, None), 60 * DAY);
        assert_eq!(renew_at(0, 6 * DAY, None), 4 * DAY);
        assert_eq!(renew_at(0, 90 * DAY, Some(30 * DAY as u64)), 60 * DAY);
        assert_eq!(renew_at(0, 90 * DAY, Some(u64::MAX)), 90 * DAY - i64::MAX);
    }

    #[test]
    fn backoff_doubles_to_a_ceiling_and_retry_after_can_only_lengthen_it() {
        let waits: Vec<i64> = (1..=6).map(backoff).collect();
        assert_eq!(waits, [15, 30, 60, 120, 240, 480]);
        assert_eq!(backoff(40), BACKOFF_MAX);
        assert_eq!(next_try(1000, 1, None), 1015);
        assert_eq!(next_try(1000, 1, Some(600)), 1600);
        assert_eq!(next_try(1000, 3, Some(5)), 1060);
        assert_eq!(next_try(1000, 1, Some(10 * RETRY_AFTER_MAX)), 1000 + RETRY_AFTER_MAX);
        assert_eq!(next_try(1000, 1, Some(-5)), 1015);
    }

    #[test]
    fn due_times() {
        let fresh = CertRetry::default();
        // No certificate yet: now.
        assert_eq!(due(None, None, &fresh), 0);
        // A failure pushes it back.
        let failed = CertRetry { failures: 1, not_before_try: 500, obtained: 0 };
        assert_eq!(due(None, None, &failed), 500);
        // A stored certificate: a third of its life ahead.
        assert_eq!(due(Some((0, 90 * DAY)), None, &fresh), 60 * DAY);
        // renew_before longer than the lifetime: due at once after a start, but not
        // again within the floor once this process got one.
        let long = Some(100 * 365 * DAY as u64);
        assert_eq!(due(Some((0, 90 * DAY)), long, &fresh), 0);
        let got = CertRetry { failures: 0, not_before_try: 0, obtained: 5000 };
        assert_eq!(due(Some((5000, 5000 + 90 * DAY)), long, &got), 5000 + RENEW_FLOOR);
        assert_eq!(due(None, None, &got), 5000 + RENEW_FLOOR, "obtained, but not installed");
    }
}
