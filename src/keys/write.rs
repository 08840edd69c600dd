//! The writing half of a config's keys: a TOML document in the order the docs give
//! its keys ([`Toml`]), and each value as the config would say it (`"5m"`, `"8KiB"`),
//! so what `pika -T` prints reads back as the same config. Every kind and rule shows
//! its own keys through it.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use toml::Value;

pub(crate) fn string(s: &str) -> Value {
    Value::String(s.to_string())
}

pub(crate) fn strings(v: &[String]) -> Value {
    Value::Array(v.iter().map(|s| string(s)).collect())
}

pub(crate) fn path(p: &Path) -> Value {
    string(&p.display().to_string())
}

pub(crate) fn int(n: impl TryInto<i64>) -> Value {
    // TOML integers are i64: nothing larger can have come from a config.
    Value::Integer(n.try_into().unwrap_or(i64::MAX))
}

/// A duration in the largest unit that states it exactly: `"5m"`, `"30s"`, `"1500ms"`.
pub(crate) fn duration(d: Duration) -> Value {
    let ms = d.as_millis();
    let text = match ms {
        0 => "0s".to_string(),
        _ if ms % 3_600_000 == 0 => format!("{}h", ms / 3_600_000),
        _ if ms % 60_000 == 0 => format!("{}m", ms / 60_000),
        _ if ms % 1000 == 0 => format!("{}s", ms / 1000),
        _ => format!("{ms}ms"),
    };
    string(&text)
}

/// A size in the largest binary unit that states it exactly: `"8KiB"`, or bytes.
pub(crate) fn size(n: u64) -> Value {
    for (unit, shift) in [("GiB", 30), ("MiB", 20), ("KiB", 10)] {
        if n > 0 && n % (1 << shift) == 0 {
            return string(&format!("{}{unit}", n >> shift));
        }
    }
    int(n)
}

/// An inline table whose keys keep the order they were put in (the order the docs
/// give them), unlike `toml::Table`'s.
#[derive(Default)]
pub(crate) struct Inline(Vec<(&'static str, Value)>);

impl Inline {
    pub(crate) fn insert(&mut self, key: &'static str, value: Value) {
        self.0.push((key, value));
    }
}

impl std::fmt::Display for Inline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("{ ")?;
        for (i, (k, v)) in self.0.iter().enumerate() {
            write!(f, "{}{k} = {v}", if i == 0 { "" } else { ", " })?;
        }
        f.write_str(" }")
    }
}

/// A TOML document written in order.
#[derive(Default)]
pub(crate) struct Toml {
    out: String,
}

impl Toml {
    pub(crate) fn comment(&mut self, text: &str) {
        let _ = writeln!(self.out, "# {text}");
    }

    pub(crate) fn blank(&mut self) {
        self.out.push('\n');
    }

    pub(crate) fn table(&mut self, name: &str) {
        let _ = writeln!(self.out, "\n[{name}]");
    }

    pub(crate) fn array_table(&mut self, name: &str) {
        let _ = writeln!(self.out, "[[{name}]]");
    }

    /// The document written so far.
    pub(crate) fn text(self) -> String {
        self.out
    }

    pub(crate) fn key(&mut self, key: &str, value: impl std::fmt::Display) {
        let _ = writeln!(self.out, "{key} = {value}");
    }
}
