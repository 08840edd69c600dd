//! One vhost as a worker serves it: what answers where, and its error pages.
//!
//! Made once per worker from the config ([`Site::open`]): a [`Handler`] for each of
//! the vhost's locations, picked by the table built when the config was loaded
//! ([`crate::location`]), and the vhost's own files (what answers when no location
//! matches, and where its error pages are found). Directories are opened once per
//! worker and shared ([`Root`]), so vhosts and locations serving the same folder share
//! its descriptor and its cache of files.

use std::cell::RefCell;
use std::io;
use std::path::Path;
use std::rc::Rc;

use crate::config::{Config, Vhost};
use crate::http::response::Reply;
use crate::kinds::Build;
use crate::kinds::Handler;
use crate::kinds::files::reach::Reach;
use crate::kinds::files::static_file::Root;
use crate::kinds::status::page::StatusPage;
use crate::location::{Locations, Routes};
use crate::rules::{Decor, Gate, Rules};

/// A path's route in a vhost, as positions in its locations: the location that
/// answers (`None`: the vhost's own files) and the prefix a regex location took the
/// path from. Plain numbers, so a request whose body the event loop reads keeps its
/// route in its connection while it waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Picked {
    // Positions as u32, which keeps a connection that holds a route small.
    at: Option<u32>,
    under: Option<u32>,
}

#[cfg(test)]
thread_local! {
    /// Routes picked in this thread: the request cycle's tests count them.
    pub static PICKS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// One vhost, ready to serve.
pub struct Site<'c> {
    pub vhost: &'c Vhost,
    /// The vhost's own files.
    files: Place<'c>,
    /// What answers at each of `vhost.locations`.
    at: Routes<'c, Place<'c>>,
    /// Every directory this site serves from (to tell each of a change).
    roots: Vec<Rc<Root>>,
}

/// What answers at one location (or at the vhost's own files): the rules in force
/// there, then its kind's handler.
pub struct Place<'c> {
    pub gate: Gate,
    pub handler: Handler<'c>,
    /// What the rules add to its answers.
    pub decor: Decor,
    /// A prefix location's own access rules, which hold too for a request that a
    /// regex location takes from it (Apache's `<Location>` holds whatever answers).
    pub guards: Option<Gate>,
}

impl<'c> Place<'c> {
    /// Whether a request's body is read before it is answered here: its handler
    /// answers from it, or its `rewrite` may send it to one that does.
    pub fn reads_body(&self) -> bool {
        self.gate.rewrite.is_some() || self.handler.reads_body()
    }

    /// A place answered by `handler` under the rules in force `rules`, among the
    /// vhost's `locations`.
    fn new(rules: &Rules, mut handler: Handler<'c>, locations: &Locations) -> Place<'c> {
        if let Some(files) = handler.files_mut() {
            files.rules = rules.files();
            files.index_runs = files.index.iter().any(|i| locations.runs_script(format!("/{i}").as_bytes()));
        }
        Place { gate: rules.gate(), handler, decor: rules.decor(), guards: None }
    }
}

/// The directories already opened in this worker, so each is opened once, and the
/// files that scripts run, which none of them sends as they are.
pub struct Roots {
    open: Vec<Rc<Root>>,
    reach: Rc<Reach>,
}

impl Roots {
    pub fn new(config: &Config) -> Roots {
        let locations = config.vhosts.iter().flat_map(|v| &v.locations.list);
        let scripts = locations.filter_map(|l| l.kind.scripts_dir().map(|(dir, alias)| (dir, alias, &l.pattern)));
        Roots { open: Vec::new(), reach: Rc::new(Reach::new(scripts)) }
    }

    /// `dir` as `vhost` serves it (its links rule), opened once.
    fn get(&mut self, dir: &Path, vhost: &Vhost, config: &Config) -> io::Result<Rc<Root>> {
        if let Some(r) = self.open.iter().find(|r| r.path == dir && r.symlinks == vhost.symlinks) {
            return Ok(r.clone());
        }
        let interval = config.http.file_check_interval;
        let root = Rc::new(Root::open(dir, vhost.symlinks, interval, self.reach.clone())?);
        self.open.push(root.clone());
        Ok(root)
    }
}

impl<'c> Site<'c> {
    /// Every vhost of `config`, in order, with its directories opened.
    pub fn open_all(config: &'c Config, status: StatusPage<'c>) -> io::Result<Vec<Site<'c>>> {
        let mut roots = Roots::new(config);
        config.vhosts.iter().map(|v| Site::open(v, config, status, &mut roots)).collect()
    }

    /// Builds each location's kind with the rules in force there: its own, else its
    /// kind's default, else the vhost's.
    pub fn open(
        vhost: &'c Vhost,
        config: &'c Config,
        status: StatusPage<'c>,
        roots: &mut Roots,
    ) -> io::Result<Site<'c>> {
        let site_roots = RefCell::new(Vec::new());
        let mut open = |dir: &Path| {
            let root = roots.get(dir, vhost, config)?;
            let mut site_roots = site_roots.borrow_mut();
            if !site_roots.iter().any(|r| Rc::ptr_eq(r, &root)) {
                site_roots.push(root.clone());
            }
            Ok(root)
        };
        let mut b = Build {
            status,
            serve_hidden: vhost.serve_hidden,
            symlinks: vhost.symlinks,
            server_name: vhost.server_names.first().map_or("localhost", String::as_str),
            mime: &config.mime,
            max_ranges: config.http.max_ranges,
            open: &mut open,
        };
        let files = Place::new(
            &vhost.rules,
            Handler::Files(vhost.files.build(None, (b.open)(&vhost.files.dir)?, b.serve_hidden, b.mime, b.max_ranges)),
            &vhost.locations,
        );
        let at = vhost.locations.map(|l| {
            let rules = l.rules.over(&l.kind.rules(&config.status.allow)).over(&vhost.rules);
            let mut place = Place::new(&rules, l.kind.build(Some(&l.pattern), &mut b)?, &vhost.locations);
            if let Some(app) = place.handler.fastcgi_mut() {
                // Its own only: a vhost's try_files is for its files.
                app.try_files = l.rules.try_files.clone().unwrap_or_default();
            }
            if l.kind.by_name_only() {
                place.gate = place.gate.only_for_names(&vhost.server_names);
            }
            if matches!(l.pattern, crate::http::pattern::Pattern::Prefix(_)) {
                place.guards = l.rules.over(&l.kind.rules(&config.status.allow)).access_gate();
            }
            Ok::<_, io::Error>(place)
        })?;
        Ok(Site { vhost, files, at, roots: site_roots.into_inner() })
    }

    /// Where `path` goes: the location that answers it (or the vhost's own files)
    /// and the prefix a regex location took it from, as positions, which
    /// [`Site::place`] turns into what answers. A request is routed once: what this
    /// finds is kept with a request whose body the event loop reads, for its second
    /// turn.
    #[inline(always)]
    pub fn pick(&self, path: &[u8]) -> Picked {
        #[cfg(test)]
        PICKS.with(|n| n.set(n.get() + 1));
        let (at, under) = self.at.pick(path);
        Picked { at: at.map(|i| i as u32), under: under.map(|i| i as u32) }
    }

    /// The place a [`Picked`] route names, and the access rules of the prefix a
    /// regex location took its path from.
    #[inline(always)]
    pub fn place(&self, p: Picked) -> (&Place<'c>, Option<&Gate>) {
        let at = p.at.map_or(&self.files, |i| self.at.get(i as usize));
        (at, p.under.and_then(|u| self.at.get(u as usize).guards.as_ref()))
    }

    /// Sending a file failed because it shrank: every directory of this site has its
    /// cached files looked at again.
    pub fn files_changed(&self) {
        for r in &self.roots {
            r.files_changed();
        }
    }

    /// Lets go of the open files no request used for a while, in each directory.
    pub fn sweep_files(&self, now_ms: u64) {
        for r in &self.roots {
            r.sweep(now_ms);
        }
    }

    /// Replaces a generated error body with the vhost's own page for that status, if
    /// it has one that can be opened.
    pub fn error_page(&self, reply: &mut Reply<'_>) {
        let Some(files) = self.files.handler.files() else { return };
        let Some((_, page)) = self.vhost.error_pages.iter().find(|(code, _)| *code == reply.status) else { return };
        let Some(entry) = files.root.error_page(page) else { return };
        let body = entry.slice(0, entry.len);
        // Keep headers that still apply (Allow, Location, Content-Range); swap the type.
        reply.set_content_type(files.mime.lookup(page.as_bytes()));
        reply.body = body;
    }
}
