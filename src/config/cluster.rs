//! The `[cluster]` section, checked as `pika -t` checks the rest: a Redis URL the
//! client takes, and secret files that are the master's alone.

use std::path::Path;

use super::raw::RawConfig;
use crate::cluster::{DEFAULT_PREFIX, Settings, check_secret_file};
use crate::keys::read::{ConfigError, Ctx, absolute};

/// `cache_dir` when unset, under the server root.
const DEFAULT_CACHE_DIR: &str = "cluster";

impl Ctx<'_> {
    /// `[cluster]`, if present.
    pub(super) fn cluster(&self, raw: &RawConfig, root: &Path) -> Result<Option<Settings>, ConfigError> {
        let Some(section) = &raw.cluster else { return Ok(None) };
        let c = section.get_ref();
        let url = c.redis.get_ref().trim().to_string();
        if !(url.starts_with("redis://") || url.starts_with("rediss://"))
            || redis::IntoConnectionInfo::into_connection_info(url.as_str()).is_err()
        {
            return Err(
                self.spanned(&c.redis, "cluster.redis must be a URL as \"redis://10.0.0.5:6379/0\" or \"rediss://…\"")
            );
        }
        if redis::IntoConnectionInfo::into_connection_info(url.as_str())
            .is_ok_and(|i| i.redis_settings().password().is_some())
        {
            return Err(self.spanned(
                &c.redis,
                "cluster.redis: put Redis's password in cluster.password_file, not in the URL (which -T and the error log show)",
            ));
        }
        let secret = |f: &toml::Spanned<String>, what: &str| {
            let file = absolute(root, f.get_ref());
            check_secret_file(what, &file).map(|()| file).map_err(|e| self.spanned(f, e))
        };
        let key_file = secret(&c.key_file, "cluster.key_file")?;
        let bytes =
            std::fs::read(&key_file).map_err(|e| self.spanned(&c.key_file, format!("cluster.key_file: {e}")))?;
        crate::cluster::crypto::Sealer::new(&bytes)
            .map_err(|e| self.spanned(&c.key_file, format!("cluster.key_file: {e}")))?;
        let password_file = c.password_file.as_ref().map(|f| secret(f, "cluster.password_file")).transpose()?;
        let ca_file = match &c.ca_file {
            None => None,
            Some(f) => {
                if !url.starts_with("rediss://") {
                    return Err(self.spanned(f, "cluster.ca_file is for a rediss:// URL (TLS to Redis)"));
                }
                let file = absolute(root, f.get_ref());
                crate::acme::https::roots(&file).map_err(|e| self.spanned(f, format!("cluster.ca_file: {e}")))?;
                Some(file)
            }
        };
        let prefix = c.prefix.as_ref().map_or(DEFAULT_PREFIX.to_string(), |p| p.get_ref().clone());
        if prefix.chars().any(|ch| ch.is_whitespace() || ch.is_control()) {
            let at = c.prefix.as_ref().expect("given");
            return Err(self.spanned(at, "cluster.prefix is a word as \"shop:\" (no spaces)"));
        }
        let cache_dir = absolute(root, c.cache_dir.as_ref().map_or(DEFAULT_CACHE_DIR, |d| d.get_ref().as_str()));
        crate::cluster::cache::check_folder(&cache_dir).map_err(|e| match &c.cache_dir {
            Some(d) => self.spanned(d, e),
            None => self.spanned(section, e),
        })?;
        Ok(Some(Settings { redis: url, ca_file, password_file, prefix, key_file, cache_dir }))
    }
}
