//! `fastcgi = "unix:/run/php/php8.2-fpm.sock"` or `"tcp:127.0.0.1:9000"`: scripts
//! a FastCGI application runs ([`crate::kinds::fastcgi::app`]), found under the
//! location's `root` or `alias`; `index` (`["index.php"]` unless given) for a
//! path that ends at a directory; `script_timeout`, `buffering`.

pub mod app;

use super::cgi;
use super::files::{self, Reading};
use crate::base::sys::Symlinks;
use crate::gateway::script::Policy;
use crate::gateway::{AppAddr, FastCgiConfig};
use crate::http::pattern::Pattern;
use crate::keys::read::{ConfigError, Keys};
use crate::keys::write::{Toml, duration, path, string, strings};
use crate::kinds::script::Scripts;
use app::FastCgi;

/// The key that chooses it.
pub const KEY: &str = "fastcgi";
/// Its keys (with `root`, `alias` and `index`, which are files').
pub const KEYS: &[&str] = &["fastcgi", "script_timeout", "buffering"];

pub(super) fn read(keys: &mut Keys, r: &Reading<'_>) -> Result<FastCgiConfig, ConfigError> {
    let (dir, alias) = files::read_dir(keys, r.ctx, r.vhost_files, r.root, r.prefix)?;
    let index = files::read_index(keys, r.ctx)?.unwrap_or_else(|| vec!["index.php".into()]);
    if keys.names().any(|k| k == "autoindex") {
        return Err(r.ctx.error(r.at.clone(), "a FastCGI location lists no directory: no autoindex"));
    }
    let Some(given) = keys.take::<String>(r.ctx, KEY)? else {
        return Err(r.ctx.error(r.at.clone(), "fastcgi: no address"));
    };
    let addr = AppAddr::parse(given.get_ref()).ok_or_else(|| {
        r.ctx
            .spanned(&given, format!("fastcgi {:?}: give \"unix:/path/to.sock\" or \"tcp:host:port\"", given.get_ref()))
    })?;
    let timeout = cgi::read_timeout(keys, r)?;
    let buffering = cgi::read_buffering(keys, r)?;
    Ok(FastCgiConfig { dir, alias, addr, index, timeout, buffering })
}

pub(super) fn show(f: &FastCgiConfig, t: &mut Toml) {
    t.key(if f.alias { "alias" } else { "root" }, path(&f.dir));
    t.key(KEY, string(&f.addr.to_string()));
    t.key("index", strings(&f.index));
    t.key("script_timeout", duration(f.timeout));
    t.key("buffering", toml::Value::Boolean(f.buffering));
}

pub(super) fn build<'c>(
    f: &'c FastCgiConfig,
    at: Option<&'c Pattern>,
    symlinks: Symlinks,
    server_name: &'c str,
) -> std::io::Result<FastCgi<'c>> {
    // The application runs the file; the index files are tried for a directory.
    let policy = Policy { executables: false, interpreters: Default::default(), fastcgi: true, index: f.index.clone() };
    let scripts = Scripts::open((&f.dir, f.alias), at, symlinks, server_name, policy)?;
    Ok(FastCgi::new(f, scripts))
}
