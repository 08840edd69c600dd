//! Durations and sizes as an operator writes them: `"30s"`, `"500ms"`, `"8KiB"`, or a
//! bare integer (seconds, bytes).

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// A duration read from the config: an integer (seconds) or a string with a unit
/// (`ms`, `s`, `m`, `h`, `d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Secs(pub Duration);

/// A size in bytes read from the config: an integer or a string with a unit
/// (`k`/`KiB`, `m`/`MiB`, `g`/`GiB`; powers of 1024).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bytes(pub u64);

pub(crate) fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let ms = match unit.trim() {
        "ms" => n,
        "" | "s" => n.checked_mul(1000)?,
        "m" | "min" => n.checked_mul(60_000)?,
        "h" => n.checked_mul(3_600_000)?,
        "d" => n.checked_mul(86_400_000)?,
        _ => return None,
    };
    Some(Duration::from_millis(ms))
}

pub(crate) fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

struct UnitVisitor<F>(&'static str, F);

impl<T, F: Fn(&str) -> Option<T>> Visitor<'_> for UnitVisitor<F> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        if v < 0 {
            return Err(E::invalid_value(de::Unexpected::Signed(v), &self.0));
        }
        (self.1)(&v.to_string()).ok_or_else(|| E::invalid_value(de::Unexpected::Signed(v), &self.0))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        (self.1)(v).ok_or_else(|| E::invalid_value(de::Unexpected::Str(v), &self.0))
    }
}

impl<'de> Deserialize<'de> for Secs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UnitVisitor("a duration such as 30, \"30s\", \"500ms\", \"5m\"", |s: &str| {
            parse_duration(s).map(Secs)
        }))
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(UnitVisitor("a size such as 8192, \"8KiB\", \"1MiB\"", |s: &str| parse_size(s).map(Bytes)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("30s"), Some(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("5min"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7_200)));
        assert_eq!(parse_duration("1d"), Some(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("5 parsecs"), None);
        assert_eq!(parse_duration("-1s"), None);
        assert_eq!(parse_duration(""), None);
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8192"), Some(8192));
        assert_eq!(parse_size("8KiB"), Some(8192));
        assert_eq!(parse_size("1m"), Some(1 << 20));
        assert_eq!(parse_size("2 GiB"), Some(2 << 30));
        assert_eq!(parse_size("1x"), None);
        assert_eq!(parse_size("99999999999999999999g"), None);
    }

    /// What the config file says when a duration or a size is of the wrong kind or
    /// cannot be read: the expected forms, named.
    #[test]
    fn a_bad_value_names_what_was_expected() {
        #[derive(Debug, Deserialize)]
        struct T {
            t: Option<Secs>,
            b: Option<Bytes>,
        }
        let err = |text: &str| toml::from_str::<T>(text).unwrap_err().to_string();
        for (text, want) in [
            ("t = true", "invalid type: boolean `true`, expected a duration such as 30, \"30s\""),
            ("t = \"5 parsecs\"", "invalid value: string \"5 parsecs\", expected a duration such as 30"),
            ("t = -3", "invalid value: integer `-3`, expected a duration such as 30"),
            ("b = 1.5", "invalid type: floating point `1.5`, expected a size such as 8192, \"8KiB\""),
            ("b = \"1x\"", "invalid value: string \"1x\", expected a size such as 8192"),
        ] {
            assert!(err(text).contains(want), "{text}: {}", err(text));
        }
        let ok: T = toml::from_str("t = \"2h\"\nb = 4096").unwrap();
        assert_eq!((ok.t, ok.b), (Some(Secs(Duration::from_secs(7_200))), Some(Bytes(4096))));
    }
}
