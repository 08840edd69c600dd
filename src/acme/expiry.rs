//! Certificates close to expiry: said in the error log once a day, and shown with
//! their days left on the status page.
//!
//! ACME clients (certbot, lego, acme.sh) renew at 30 days left, and a renewed
//! certificate is served after the next reload. Fewer than [`WARN_DAYS`] left means
//! renewals have failed (or nobody reloaded) for over two weeks: time to say so.

use std::path::PathBuf;

use crate::tls::VhostCert;

/// Warn when fewer days than this are left.
pub const WARN_DAYS: i64 = 14;

const DAY: i64 = 86400;

/// One certificate's expiry, for the log and the status page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expiry {
    /// The vhost's first server name (`(default)` for a vhost without names).
    pub vhost: String,
    pub file: PathBuf,
    pub not_after: i64,
    /// Whole days left (negative once expired).
    pub days_left: i64,
    /// From ACME (`acme = true`): renewed by pika itself.
    pub acme: bool,
    /// ACME's self-signed stand-in, served until the real certificate comes.
    pub placeholder: bool,
    /// ACME: when it is next asked for (Unix seconds) and the failed tries in a row,
    /// as the master last said ([`crate::acme::status`]).
    pub renewal: Option<crate::acme::status::Shown>,
}

/// Every certificate, each with its vhost's server names, at `now` (Unix seconds).
/// `acme`: whether the vhost gets it from ACME.
pub fn list<'a>(certs: impl IntoIterator<Item = (&'a [String], &'a VhostCert, bool)>, now: i64) -> Vec<Expiry> {
    certs
        .into_iter()
        .map(|(names, c, acme)| Expiry {
            vhost: names.first().cloned().unwrap_or_else(|| "(default)".into()),
            file: c.cert_file.clone(),
            not_after: c.validity.not_after,
            days_left: (c.validity.not_after - now).div_euclid(DAY),
            acme,
            placeholder: c.placeholder,
            renewal: if acme { names.first().and_then(|n| crate::acme::status::lookup(n)) } else { None },
        })
        .collect()
}

/// The error-log line for a certificate, if it needs one: a warning under
/// [`WARN_DAYS`], an error once expired (a reload would now refuse it). ACME's
/// placeholders are said by ACME itself.
pub fn warning(e: &Expiry, now: i64) -> Option<(log::Level, String)> {
    let when = crate::tls::check::date(e.not_after);
    let file = e.file.display();
    let what_to_do =
        if e.acme { "ACME has not renewed it yet: see the acme lines above" } else { "renew it and reload" };
    if e.placeholder {
        None
    } else if e.not_after < now {
        let text = format!("certificate {file} of {} expired on {when}; clients refuse it", e.vhost);
        Some((log::Level::Error, text))
    } else if e.days_left < WARN_DAYS {
        let text = format!("certificate {file} of {} expires in {} days ({when}); {what_to_do}", e.vhost, e.days_left);
        Some((log::Level::Warn, text))
    } else {
        None
    }
}

/// Logs the warnings due for these certificates ([`list`]'s).
pub fn log_warnings(certs: &[Expiry], now: i64) {
    for e in certs {
        if let Some((level, text)) = warning(e, now) {
            log::log!(level, "{text}");
        }
    }
}

/// When the master looks again: once a day.
pub const CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(DAY as u64);

#[cfg(test)]
mod tests {
    use super::*;

    fn expiry(not_after: i64, now: i64) -> Expiry {
        Expiry {
            vhost: "example.com".into(),
            file: "/c.pem".into(),
            not_after,
            days_left: (not_after - now).div_euclid(DAY),
            acme: false,
            placeholder: false,
            renewal: None,
        }
    }

    #[test]
    fn warnings_start_under_fourteen_days() {
        let now = 1_800_000_000;
        assert_eq!(warning(&expiry(now + 14 * DAY, now), now), None);
        let (level, text) = warning(&expiry(now + 14 * DAY - 1, now), now).unwrap();
        assert_eq!(level, log::Level::Warn);
        assert_eq!(
            text,
            "certificate /c.pem of example.com expires in 13 days (2027-01-29 07:59:59 UTC); renew it and reload"
        );
        let (_, text) = warning(&expiry(now + 3600, now), now).unwrap();
        assert!(text.contains("expires in 0 days"), "{text}");
        let (level, text) = warning(&expiry(now - 1, now), now).unwrap();
        assert_eq!(level, log::Level::Error);
        assert!(text.contains("expired on 2027-01-15 07:59:59 UTC"), "{text}");
        assert_eq!(expiry(now - 1, now).days_left, -1);
        let acme = Expiry { acme: true, ..expiry(now + 3 * DAY, now) };
        assert!(warning(&acme, now).unwrap().1.ends_with("ACME has not renewed it yet: see the acme lines above"));
        assert_eq!(warning(&Expiry { placeholder: true, ..acme }, now), None);
    }
}
