//! Files: what a location answers with unless another kind is chosen, and what a
//! vhost answers with at its root. Its keys: `root` or `alias` (the directory),
//! `index`, `autoindex` (with `autoindex_exact_size`, `autoindex_localtime`),
//! `max_ranges`; on a `[[vhost]]`, `index` and the `autoindex` keys are the vhost's
//! own files' and the default of its files locations. Read, checked, shown and built
//! into a [`StaticFiles`] handler here, which serves files, directories and their
//! listings ([`listing`]) from each worker's cache of open files ([`file_cache`]),
//! tries `try_files` ([`try_files`]) and never sends a file a script location runs
//! ([`reach`]).

pub mod file_cache;
pub mod listing;
pub mod reach;
pub mod static_file;
pub mod try_files;

use std::path::{Path, PathBuf};

use toml::Spanned;

use crate::http::pattern::Pattern;
use crate::keys::read::{ConfigError, Ctx, Keys};
use crate::keys::write::{Toml, int, path, strings};
use listing::Style;
use static_file::{Root, StaticFiles};

/// A location's table as it is read: its config file, its position there, the
/// folder relative paths start from, its vhost's files (what `root` and `alias`
/// default to), and whether it is a prefix (which an `alias` stands for). Every
/// kind reads its keys with it.
pub(crate) struct Reading<'a> {
    pub(crate) ctx: &'a Ctx<'a>,
    pub(crate) root: &'a Path,
    pub(crate) vhost_files: &'a Files,
    pub(crate) prefix: bool,
    pub(crate) at: std::ops::Range<usize>,
}

/// Its keys on a location.
pub const KEYS: &[&str] =
    &["root", "alias", "index", "autoindex", "autoindex_exact_size", "autoindex_localtime", "max_ranges"];
/// Its keys on a vhost (whose `root` is its own key).
pub const VHOST_KEYS: &[&str] = &["index", "autoindex", "autoindex_exact_size", "autoindex_localtime"];

/// The index files a vhost tries unless it says.
const DEFAULT_INDEX: &str = "index.html";

/// Where files are served from, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Files {
    /// The directory: the location's `root` or `alias`, else the vhost's root.
    pub dir: PathBuf,
    /// `alias`: the directory stands for the location's prefix (nginx's `alias`);
    /// else for `/`, and the whole path is looked up under it (`root`).
    pub alias: bool,
    /// Tried in order for a path that names a directory.
    pub index: Vec<String>,
    /// A directory without an index file is listed.
    pub autoindex: bool,
    /// How a listing shows sizes and times.
    pub listing: Style,
    /// The most ranges a `Range` header may ask for here (more: the whole file);
    /// `None`: `[http] max_ranges`.
    pub max_ranges: Option<usize>,
}

/// A vhost's own files at `dir` (its root), from its `index` and `autoindex`.
pub(crate) fn read_vhost(keys: &mut Keys, ctx: &Ctx, dir: PathBuf) -> Result<Files, ConfigError> {
    let index = read_index(keys, ctx)?.unwrap_or_else(|| vec![DEFAULT_INDEX.into()]);
    let autoindex = keys.take::<bool>(ctx, "autoindex")?.is_some_and(Spanned::into_inner);
    let listing = read_style(keys, ctx, Style::default())?;
    Ok(Files { dir, alias: false, index, autoindex, listing, max_ranges: None })
}

/// A files location's keys; `vhost`: its vhost's own files (the defaults), `root`:
/// the server's root (relative paths), `prefix`: the location is a prefix (which an
/// `alias` stands for).
pub(crate) fn read(keys: &mut Keys, ctx: &Ctx, vhost: &Files, root: &Path, prefix: bool) -> Result<Files, ConfigError> {
    let (dir, alias) = read_dir(keys, ctx, vhost, root, prefix)?;
    let index = read_index(keys, ctx)?.unwrap_or_else(|| vhost.index.clone());
    let autoindex = keys.take::<bool>(ctx, "autoindex")?.map_or(vhost.autoindex, Spanned::into_inner);
    let listing = read_style(keys, ctx, vhost.listing)?;
    let max_ranges = keys.take::<u32>(ctx, "max_ranges")?.map(|n| n.into_inner() as usize);
    Ok(Files { dir, alias, index, autoindex, listing, max_ranges })
}

/// `autoindex_exact_size` and `autoindex_localtime`, each `under`'s unless set.
fn read_style(keys: &mut Keys, ctx: &Ctx, under: Style) -> Result<Style, ConfigError> {
    Ok(Style {
        exact_size: keys.take::<bool>(ctx, "autoindex_exact_size")?.map_or(under.exact_size, Spanned::into_inner),
        local_time: keys.take::<bool>(ctx, "autoindex_localtime")?.map_or(under.local_time, Spanned::into_inner),
    })
}

/// A location's directory, from `root` or `alias` (the kinds that run scripts
/// have them too): the directory, and whether it stands for the prefix.
pub(crate) fn read_dir(
    keys: &mut Keys,
    ctx: &Ctx,
    vhost: &Files,
    root: &Path,
    prefix: bool,
) -> Result<(PathBuf, bool), ConfigError> {
    Ok(match (keys.take::<String>(ctx, "root")?, keys.take::<String>(ctx, "alias")?) {
        (Some(_), Some(a)) => return Err(ctx.spanned(&a, "a location has root or alias, not both")),
        (Some(r), None) => (ctx.dir(&r, root, "root")?, false),
        (None, Some(a)) if !prefix => {
            return Err(ctx.spanned(
                &a,
                "alias stands for a location's prefix: it goes with prefix (use root with exact or regex)",
            ));
        }
        (None, Some(a)) => (ctx.dir(&a, root, "alias")?, true),
        (None, None) => (vhost.dir.clone(), false),
    })
}

pub(crate) fn read_index(keys: &mut Keys, ctx: &Ctx) -> Result<Option<Vec<String>>, ConfigError> {
    let Some(list) = keys.take::<Vec<String>>(ctx, "index")? else { return Ok(None) };
    if let Some(bad) = list.get_ref().iter().find(|i| i.is_empty() || i.contains('/')) {
        return Err(ctx.spanned(&list, format!("index entry {bad:?} must be a plain file name")));
    }
    Ok(Some(list.into_inner()))
}

impl Files {
    /// A location's keys for `pika -T`, as in force (the vhost's defaults filled in).
    pub(crate) fn show(&self, t: &mut Toml) {
        t.key(if self.alias { "alias" } else { "root" }, path(&self.dir));
        self.show_vhost(t);
        if let Some(n) = self.max_ranges {
            t.key("max_ranges", int(n));
        }
    }

    /// A vhost's keys for `pika -T` (its root is its own key).
    pub(crate) fn show_vhost(&self, t: &mut Toml) {
        t.key("index", strings(&self.index));
        t.key("autoindex", toml::Value::Boolean(self.autoindex));
        t.key("autoindex_exact_size", toml::Value::Boolean(self.listing.exact_size));
        t.key("autoindex_localtime", toml::Value::Boolean(self.listing.local_time));
    }

    /// The handler; `at`: the location's pattern (a prefix an `alias` stands for),
    /// None for a vhost's own files.
    pub(crate) fn build<'c>(
        &'c self,
        at: Option<&'c Pattern>,
        root: std::rc::Rc<Root>,
        serve_hidden: bool,
        mime: &'c crate::http::mime::MimeTypes,
        max_ranges: usize,
    ) -> StaticFiles<'c> {
        StaticFiles {
            root,
            // An alias stands for the prefix: what follows it is looked up.
            strip: if self.alias { at.map_or(0, |p| p.text().len()) } else { 0 },
            index: &self.index,
            autoindex: self.autoindex,
            listing: self.listing,
            serve_hidden,
            mime,
            max_ranges: self.max_ranges.unwrap_or(max_ranges),
            // Set by the site, from the rules in force at the location and its
            // vhost's script locations.
            rules: Default::default(),
            index_runs: false,
        }
    }
}
