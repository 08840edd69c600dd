//! Access logs as the config resolves them: format, filter conditions, rotation,
//! buffering.

use std::path::Path;

use toml::Spanned;

use super::raw::{RawAccessLog, RawCondition, RawRotate, StatusSpec};
use crate::base::cidr::Cidr;
use crate::keys::read::{ConfigError, Ctx, absolute};
pub use crate::log::access::{AccessLog, DEFAULT_LOG_BUFFER, DEFAULT_LOG_FLUSH};
use crate::log::filter::{self, Condition, Filter};
use crate::log::format::LogFormat;
use crate::log::rotate::{Interval, Naming, Rotate};

/// The largest `buffer` accepted.
const MAX_LOG_BUFFER: u64 = 1 << 20;

impl Ctx<'_> {
    pub(super) fn access_log(
        &self,
        a: &RawAccessLog,
        root: &Path,
        vhost: Option<usize>,
        source: Option<&Path>,
    ) -> Result<AccessLog, ConfigError> {
        let format = match &a.format {
            None => LogFormat::parse("combined").map_err(|e| self.error(0..0, e))?,
            Some(f) => {
                LogFormat::parse(f.get_ref()).map_err(|e| self.spanned(f, format!("bad access log format: {e}")))?
            }
        };
        let conditions = |list: &Vec<Spanned<RawCondition>>| -> Result<Vec<Condition>, ConfigError> {
            list.iter().map(|c| self.condition(c)).collect()
        };
        let mut filter = Filter::default();
        if let Some(include) = &a.include {
            filter.include = conditions(include)?;
        }
        if let Some(exclude) = &a.exclude {
            filter.exclude = conditions(exclude)?;
        }
        let rotate = a.rotate.as_ref().map(|r| self.rotate(r)).transpose()?;
        let buffer = match &a.buffer {
            None => DEFAULT_LOG_BUFFER,
            Some(b) if b.get_ref().0 > MAX_LOG_BUFFER => {
                return Err(self.spanned(b, "access log buffer above 1MiB"));
            }
            Some(b) => b.get_ref().0 as usize,
        };
        let flush = a.flush.as_ref().map_or(DEFAULT_LOG_FLUSH, |f| f.0);
        Ok(AccessLog {
            path: absolute(root, &a.path),
            format,
            filter,
            rotate,
            vhost,
            buffer,
            flush,
            source: source.map(Path::to_path_buf),
        })
    }

    fn condition(&self, c: &Spanned<RawCondition>) -> Result<Condition, ConfigError> {
        let raw = c.get_ref();
        let bad = |what: &str| self.spanned(c, what.to_string());
        let regex = |p: &Option<String>| -> Result<Option<regex_lite::Regex>, ConfigError> {
            p.as_ref()
                .map(|p| regex_lite::Regex::new(p).map_err(|e| bad(&format!("bad pattern {p:?}: {e}"))))
                .transpose()
        };
        let cond = Condition {
            internal: raw.internal,
            health: raw.health,
            client: raw
                .client
                .as_ref()
                .map(|s| Cidr::parse(s).ok_or_else(|| bad(&format!("bad address range {s:?}"))))
                .transpose()?,
            method: raw.method.clone(),
            path: raw.path.clone(),
            path_pattern: regex(&raw.path_pattern)?,
            status: match &raw.status {
                None => None,
                Some(StatusSpec::Code(n)) => Some((*n, *n)),
                Some(StatusSpec::Text(t)) => Some(
                    filter::parse_status(t)
                        .ok_or_else(|| bad(&format!("bad status {t:?} (404, \"4xx\", \"400-499\")")))?,
                ),
            },
            user_agent: regex(&raw.user_agent)?,
            header: raw.header.clone(),
        };
        if cond.is_empty() {
            return Err(bad("an empty condition would match every request"));
        }
        Ok(cond)
    }

    pub(super) fn rotate(&self, r: &Spanned<RawRotate>) -> Result<Rotate, ConfigError> {
        let raw = r.get_ref();
        let interval = match &raw.interval {
            None => None,
            Some(i) => Some(Interval::parse(i).ok_or_else(|| {
                self.spanned(r, format!("bad rotate.interval {i:?} (hourly, daily, or a duration like \"30m\")"))
            })?),
        };
        let size = raw.size.map(|b| b.0);
        if interval.is_none() && size.is_none() {
            return Err(self.spanned(r, "rotate needs an interval, a size, or both"));
        }
        let naming = match raw.naming.as_deref() {
            None | Some("numbered") => Naming::Numbered,
            Some(p) if p.contains('%') => Naming::Pattern(p.to_string()),
            Some(p) => {
                return Err(self.spanned(r, format!("rotate.naming {p:?}: \"numbered\" or a pattern with % fields")));
            }
        };
        Ok(Rotate { interval, size, keep: raw.keep.max(1), naming, local_time: raw.local_time, compress: raw.compress })
    }
}
