//! One vhost as a worker serves it: what answers where, and its error pages.
//!
//! Made once per worker from the config ([`Site::open`]): a [`Handler`] for each of
//! the vhost's locations, picked by the table built when the config was loaded
//! ([`crate::location`]), and the vhost's own files (what answers when no location
//! matches, and where its error pages are found). Directories are opened once per
//! worker and shared ([`Root`]), so vhosts and locations serving the same folder share
//! its descriptor and its cache of files.

use std::io;
use std::path::Path;
use std::rc::Rc;

use crate::config::{Config, Vhost};
use crate::handlers::Handler;
use crate::handlers::health::HealthCheck;
use crate::handlers::metrics::Metrics;
use crate::handlers::static_file::{Root, StaticFiles};
use crate::handlers::status_page::StatusPage;
use crate::http::response::{Body, Reply};
use crate::location::Serve;

/// One vhost, ready to serve.
pub struct Site<'c> {
    pub vhost: &'c Vhost,
    /// The vhost's own files.
    files: Handler<'c>,
    /// What answers at each of `vhost.locations`, in the same order.
    at: Vec<Handler<'c>>,
    /// Every directory this site serves from (to tell each of a change).
    roots: Vec<Rc<Root>>,
}

/// The directories already opened in this worker, so each is opened once.
#[derive(Default)]
pub struct Roots(Vec<Rc<Root>>);

impl Roots {
    /// `dir` as `vhost` serves it (its links rule), opened once.
    fn get(&mut self, dir: &Path, vhost: &Vhost, config: &Config) -> io::Result<Rc<Root>> {
        if let Some(r) = self.0.iter().find(|r| r.path == dir && r.symlinks == vhost.symlinks) {
            return Ok(r.clone());
        }
        let root = Rc::new(Root::open(dir, vhost.symlinks, config.http.file_check_interval)?);
        self.0.push(root.clone());
        Ok(root)
    }
}

impl<'c> Site<'c> {
    /// Every vhost of `config`, in order, with its directories opened.
    pub fn open_all(config: &'c Config, status: StatusPage<'c>) -> io::Result<Vec<Site<'c>>> {
        let mut roots = Roots::default();
        config.vhosts.iter().map(|v| Site::open(v, config, status, &mut roots)).collect()
    }

    pub fn open(
        vhost: &'c Vhost,
        config: &'c Config,
        status: StatusPage<'c>,
        roots: &mut Roots,
    ) -> io::Result<Site<'c>> {
        let files = |root, strip, index: &'c [String], autoindex| {
            Handler::Files(StaticFiles {
                root,
                strip,
                index,
                autoindex,
                serve_hidden: vhost.serve_hidden,
                mime: &config.mime,
                max_ranges: config.http.max_ranges,
            })
        };
        let root = roots.get(&vhost.root, vhost, config)?;
        let mut site_roots = vec![root.clone()];
        let mut at = Vec::with_capacity(vhost.locations.list.len());
        for l in &vhost.locations.list {
            at.push(match &l.serve {
                Serve::Status => Handler::Status(status),
                Serve::Health => Handler::Health(HealthCheck { header: status.scoreboard.header }),
                Serve::Metrics => Handler::Metrics(Metrics { scoreboard: status.scoreboard, config }),
                Serve::Files(f) => {
                    let root = roots.get(&f.dir, vhost, config)?;
                    if !site_roots.iter().any(|r| Rc::ptr_eq(r, &root)) {
                        site_roots.push(root.clone());
                    }
                    // An alias stands for the prefix: what follows it is looked up.
                    let strip = if f.alias { l.pattern.text().len() } else { 0 };
                    files(root, strip, &f.index, f.autoindex)
                }
            });
        }
        let files = files(root, 0, &vhost.index, vhost.autoindex);
        Ok(Site { vhost, files, at, roots: site_roots })
    }

    /// What answers `path` (decoded and cleaned): its location's handler, or the
    /// vhost's own files.
    #[inline]
    pub fn handler(&self, path: &[u8]) -> &Handler<'c> {
        match self.vhost.locations.find(path) {
            Some(i) => &self.at[i],
            None => &self.files,
        }
    }

    /// Sending a file failed because it shrank: every directory of this site has its
    /// cached files looked at again.
    pub fn files_changed(&self) {
        for r in &self.roots {
            r.files_changed();
        }
    }

    /// Replaces a generated error body with the vhost's own page for that status, if
    /// it has one that can be opened.
    pub fn error_page(&self, reply: &mut Reply<'_>) {
        let Handler::Files(files) = &self.files else { return };
        let Some((_, page)) = self.vhost.error_pages.iter().find(|(code, _)| *code == reply.status) else { return };
        let Some(entry) = files.root.error_page(page) else { return };
        let body = match &entry.map {
            None => Body::Owned(Vec::new()),
            Some(map) => Body::Mapped { map: map.clone(), start: 0, end: entry.len as usize },
        };
        // Keep headers that still apply (Allow, Location, Content-Range); swap the type.
        let kept: Vec<u8> = reply
            .headers
            .split_inclusive(|&b| b == b'\n')
            .filter(|l| !l.to_ascii_lowercase().starts_with(b"content-type:"))
            .flatten()
            .copied()
            .collect();
        *reply.headers = kept;
        reply.header("Content-Type", files.mime.lookup(page.as_bytes()));
        reply.body = body;
    }
}
