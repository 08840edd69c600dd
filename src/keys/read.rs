//! How a config text is read: errors with a file, line and column ([`Ctx`]), paths
//! made absolute, and the keys of a table that several modules share ([`Keys`]).
//!
//! A `[[vhost.location]]` holds the keys of its kind (files, status, …, each kind's
//! module in `crate::kinds`) and the rules any location may have (`crate::rules`); a
//! `[[vhost]]` holds its own keys and those rules, as the default of its locations.
//! serde cannot split one table between several structs and still give positions and
//! refuse unknown keys, so such a table is read whole into [`Keys`]: each module
//! takes its own keys out, typed, with their positions, and whatever is left is an
//! unknown key, said at its line.

use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use toml::Spanned;

use crate::base::cidr::Cidr;

/// A config that cannot be used, with where and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: cannot read the config: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}:{line}:{column}: {message}")]
    Invalid { path: String, line: usize, column: usize, message: String },
}

/// A config text and its file, for errors with a position.
#[derive(Clone, Copy)]
pub(crate) struct Ctx<'a> {
    pub(crate) text: &'a str,
    pub(crate) file: &'a Path,
}

impl Ctx<'_> {
    pub(crate) fn toml<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        toml::from_str(self.text).map_err(|e| self.error(e.span().unwrap_or(0..0), e.message().to_string()))
    }

    /// `file:line` of a span, for messages that are not errors.
    pub(crate) fn position(&self, span: Range<usize>) -> String {
        let line = self.text[..span.start.min(self.text.len())].matches('\n').count() + 1;
        format!("{}:{line}", self.file.display())
    }

    pub(crate) fn error(&self, span: Range<usize>, message: impl Into<String>) -> ConfigError {
        let before = &self.text[..span.start.min(self.text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
        ConfigError::Invalid { path: self.file.display().to_string(), line, column, message: message.into() }
    }

    pub(crate) fn spanned<T>(&self, v: &Spanned<T>, message: impl Into<String>) -> ConfigError {
        self.error(v.span(), message)
    }

    /// Position of a table header, for errors about keys that may have been defaulted.
    pub(crate) fn table(&self, name: &str) -> Range<usize> {
        let header = format!("[{name}]");
        let at = self.text.find(&header).unwrap_or(0);
        at..at
    }

    /// A directory a key names (`root`, `alias`, …): made absolute under `root`,
    /// checked, and canonical, so that containment checks compare like with like.
    pub(crate) fn dir(&self, d: &Spanned<String>, root: &Path, key: &str) -> Result<PathBuf, ConfigError> {
        let dir = absolute(root, d.get_ref());
        let meta = std::fs::metadata(&dir).map_err(|e| self.spanned(d, format!("{key} {}: {e}", dir.display())))?;
        if !meta.is_dir() {
            return Err(self.spanned(d, format!("{key} {} is not a directory", dir.display())));
        }
        Ok(std::fs::canonicalize(&dir).unwrap_or(dir))
    }
}

impl Ctx<'_> {
    /// A list of address ranges (`"10.0.0.0/8"`, `"::1"`, `"192.0.2.7"`); a bad one is
    /// an error at its place.
    pub(crate) fn cidrs(&self, list: &[Spanned<String>]) -> Result<Vec<Cidr>, ConfigError> {
        list.iter()
            .map(|a| {
                Cidr::parse(a.get_ref()).ok_or_else(|| self.spanned(a, format!("bad address range {:?}", a.get_ref())))
            })
            .collect()
    }
}

/// `p` under `base` unless it is absolute.
pub(crate) fn absolute(base: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() { p.to_path_buf() } else { base.join(p) }
}

/// The keys of one table, in file order, each value with its position, for the
/// modules that share the table to take their own ([`Keys::take`]); what no module
/// takes is an unknown key ([`Keys::finish`]).
#[derive(Debug, Default, Clone)]
pub(crate) struct Keys {
    /// Each key with its position, and its value with its own.
    entries: Vec<(Spanned<String>, Spanned<toml::Value>)>,
}

impl Keys {
    /// Keeps `key` for a module to take.
    pub(crate) fn push(&mut self, key: Spanned<String>, value: Spanned<toml::Value>) {
        self.entries.push((key, value));
    }

    /// The keys not taken yet, in file order.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.get_ref().as_str())
    }

    /// Takes `key` out as a `T`, with its value's position; a value of the wrong type
    /// is an error there.
    pub(crate) fn take<T: DeserializeOwned>(
        &mut self,
        ctx: &Ctx,
        key: &str,
    ) -> Result<Option<Spanned<T>>, ConfigError> {
        let Some(i) = self.entries.iter().position(|(k, _)| k.get_ref() == key) else { return Ok(None) };
        let (_, value) = self.entries.remove(i);
        let span = value.span();
        let typed = T::deserialize(value.into_inner())
            .map_err(|e| ctx.error(span.clone(), format!("{key}: {}", e.message())))?;
        Ok(Some(Spanned::new(span, typed)))
    }

    /// A key that no module took is an error at its line: `known` are the table's
    /// keys, for the message.
    pub(crate) fn finish(self, ctx: &Ctx, known: &[&str]) -> Result<(), ConfigError> {
        match self.entries.into_iter().next() {
            None => Ok(()),
            Some((key, _)) => {
                let expected = known.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ");
                Err(ctx.spanned(&key, format!("unknown field `{}`, expected one of {expected}", key.get_ref())))
            }
        }
    }
}

/// A table read by `T`'s own derived struct for the keys it names, the other keys
/// kept in `rest` for the modules that share the table (a `[[vhost]]`: its own keys,
/// then the rules its locations inherit). `T`'s values keep their positions.
#[derive(Debug)]
pub(crate) struct Split<T> {
    pub(crate) own: T,
    pub(crate) rest: Keys,
}

impl<T> std::ops::Deref for Split<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.own
    }
}

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Split<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: serde::Deserialize<'de>> serde::de::Visitor<'de> for V<T> {
            type Value = Split<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a table")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Split<T>, A::Error> {
                let mut rest = Keys::default();
                let own = T::deserialize(Own { map: &mut map, rest: &mut rest, fields: &[] })?;
                Ok(Split { own, rest })
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

/// The table as `T` sees it: only the keys `T` names (`fields`), the others put in
/// `rest` as they go by.
struct Own<'m, A> {
    map: &'m mut A,
    rest: &'m mut Keys,
    fields: &'static [&'static str],
}

impl<'de, A: serde::de::MapAccess<'de>> serde::Deserializer<'de> for Own<'_, A> {
    type Error = A::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, A::Error> {
        visitor.visit_map(self)
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, A::Error> {
        visitor.visit_map(Own { fields, ..self })
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
        unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

impl<'de, A: serde::de::MapAccess<'de>> serde::de::MapAccess<'de> for Own<'_, A> {
    type Error = A::Error;

    fn next_key_seed<K: serde::de::DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, A::Error> {
        use serde::de::IntoDeserializer;
        while let Some(key) = self.map.next_key::<Spanned<String>>()? {
            if self.fields.contains(&key.get_ref().as_str()) {
                return seed.deserialize(key.into_inner().into_deserializer()).map(Some);
            }
            let value = self.map.next_value::<Spanned<toml::Value>>()?;
            self.rest.push(key, value);
        }
        Ok(None)
    }

    fn next_value_seed<S: serde::de::DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, A::Error> {
        self.map.next_value_seed(seed)
    }
}

/// The keys of a struct that serde derives `Deserialize` for, as the config writes
/// them (for messages that list a table's keys, and the tests that check the
/// documentation has every key).
pub(crate) fn fields<T: DeserializeOwned>() -> &'static [&'static str] {
    struct Ask;
    #[derive(Debug)]
    struct Got(&'static [&'static str]);
    impl std::fmt::Display for Got {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("fields")
        }
    }
    impl std::error::Error for Got {}
    impl serde::de::Error for Got {
        fn custom<M: std::fmt::Display>(_: M) -> Self {
            Got(&[])
        }
    }
    impl<'de> serde::Deserializer<'de> for Ask {
        type Error = Got;
        fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Got> {
            Err(Got(&[]))
        }
        fn deserialize_struct<V: serde::de::Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Got> {
            Err(Got(fields))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    match T::deserialize(Ask) {
        Err(Got(fields)) => fields,
        Ok(_) => &[],
    }
}

impl<'de> serde::Deserialize<'de> for Keys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Keys;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a table")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Keys, A::Error> {
                let mut keys = Keys::default();
                while let Some(key) = map.next_key::<Spanned<String>>()? {
                    let value = map.next_value::<Spanned<toml::Value>>()?;
                    keys.push(key, value);
                }
                Ok(keys)
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    struct Table {
        t: Spanned<Keys>,
    }

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    struct Own {
        a: Spanned<bool>,
        #[serde(default)]
        z: u8,
    }

    #[test]
    fn a_split_table_gives_its_struct_its_own_keys_with_positions_and_keeps_the_rest() {
        let text = "[[t]]\nx = 1\na = true\ny = \"s\"\n";
        let ctx = Ctx { text, file: Path::new("f.toml") };
        #[derive(serde::Deserialize)]
        struct Doc {
            t: Vec<Split<Own>>,
        }
        let doc: Doc = toml::from_str(text).unwrap();
        let t = &doc.t[0];
        assert!(*t.a.get_ref() && t.z == 0);
        assert_eq!(ctx.position(t.a.span()), "f.toml:3");
        assert_eq!(t.rest.names().collect::<Vec<_>>(), ["x", "y"]);
        // The struct's own errors keep theirs.
        let e = toml::from_str::<Doc>("[[t]]\nx = 1\na = 2\n").err().unwrap();
        assert_eq!(e.span(), Some(16..17), "at the value");
        assert!(toml::from_str::<Doc>("[[t]]\nx = 1\n").err().unwrap().message().contains("missing field `a`"));
        assert_eq!(fields::<Own>(), ["a", "z"]);
    }

    #[test]
    fn each_key_is_taken_typed_with_its_position_and_the_rest_is_unknown() {
        let text = "[t]\na = true\nb = [\"x\", \"y\"]\nc = 3\n";
        let ctx = Ctx { text, file: Path::new("f.toml") };
        let mut keys = toml::from_str::<Table>(text).unwrap().t.into_inner();
        let b = keys.take::<Vec<String>>(&ctx, "b").unwrap().unwrap();
        assert_eq!(b.get_ref(), &["x", "y"]);
        assert_eq!(ctx.position(b.span()), "f.toml:3");
        assert!(keys.take::<bool>(&ctx, "b").unwrap().is_none(), "taken once");
        let e = keys.take::<bool>(&ctx, "c").unwrap_err().to_string();
        assert!(e.starts_with("f.toml:4:5: c: invalid type: integer `3`, expected a boolean"), "{e}");
        assert_eq!(keys.names().collect::<Vec<_>>(), ["a"]);
        let e = keys.finish(&ctx, &["b", "c"]).unwrap_err().to_string();
        assert_eq!(e, "f.toml:2:1: unknown field `a`, expected one of `b`, `c`");
    }
}
