//! A `[[vhost]]` as the config resolves it: names, root, files, TLS, and its
//! `[[vhost.location]]` blocks (see [`crate::location`]), checked so that a location
//! that can never be chosen is an error and one that takes another's paths is said
//! by `pika -t` and in the error log.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use toml::Spanned;

use super::raw::RawVhost;
use super::server::Status;
use crate::base::sys::Symlinks;
use crate::keys::read::{ConfigError, Ctx};
use crate::keys::read::{Keys, Split, absolute};
use crate::kinds::Kind;
use crate::kinds::files::Reading;
use crate::kinds::files::{self, Files};
use crate::location::{self, Finding, Location, Locations, Pattern};
use crate::rules::{self, Rules};

#[derive(Debug, Clone)]
pub struct Vhost {
    /// Lower-case names; `*.example.com` entries are kept with their `*.`.
    pub server_names: Vec<String>,
    pub root: PathBuf,
    /// The files it serves at its root (`files.dir` is `root`) when no location
    /// matches; the default of its files locations.
    pub files: Files,
    pub serve_hidden: bool,
    pub symlinks: Symlinks,
    /// Status code → path of the page (URL path under this vhost's root).
    pub error_pages: Vec<(u16, String)>,
    /// The included file that declares it (`None`: the main file).
    pub source: Option<PathBuf>,
    /// The certificate served to clients that name this vhost (SNI).
    pub tls: Option<Arc<crate::tls::VhostCert>>,
    /// `acme = true`: `tls` comes from the `[acme]` CA (or is a placeholder).
    pub acme: bool,
    /// 301 or 308: a request on a plain listener is redirected to `https://`.
    pub https_redirect: Option<u16>,
    /// The `Strict-Transport-Security` value of this vhost's HTTPS answers.
    pub hsts: Option<String>,
    /// The rules it sets for its locations (and its own files), as written.
    pub rules: Rules,
    /// Its `[[vhost.location]]` blocks (and the status page's, from `[status]`).
    pub locations: Locations,
}

impl Vhost {
    /// Every directory it serves files from: its root, then its locations' own.
    pub fn dirs(&self) -> impl Iterator<Item = &PathBuf> {
        let own = self.locations.list.iter().filter_map(|l| l.kind.dir());
        std::iter::once(&self.root).chain(own)
    }

    /// Whether a location here reads request bodies ([`crate::kinds::Kind::reads_bodies`]).
    pub fn reads_bodies(&self) -> bool {
        self.locations.list.iter().any(|l| l.kind.reads_bodies())
    }
}

impl Ctx<'_> {
    /// One `[[vhost]]`: its own keys, then from the others those of its own files
    /// and its rules; `tls_listener`: some listener speaks TLS (a redirect to HTTPS
    /// needs one). Its locations come from [`Ctx::locations`].
    pub(super) fn vhost(
        &self,
        v: &Split<RawVhost>,
        root: &Path,
        tls_listener: bool,
        acme: Option<&crate::acme::Settings>,
    ) -> Result<Vhost, ConfigError> {
        let doc_root = absolute(root, v.root.get_ref());
        let meta = std::fs::metadata(&doc_root)
            .map_err(|e| self.spanned(&v.root, format!("vhost root {}: {e}", doc_root.display())))?;
        if !meta.is_dir() {
            return Err(self.spanned(&v.root, format!("vhost root {} is not a directory", doc_root.display())));
        }
        let error_pages = self.error_pages(v)?;
        let symlinks = self.symlinks(v)?;
        let server_names: Vec<String> =
            v.server_names.iter().map(|n| n.trim_end_matches('.').to_ascii_lowercase()).collect();
        let has_files = v.tls_cert.is_some() || v.tls_key.is_some();
        let acme_cert = self.acme_vhost(v.acme.as_ref(), has_files, &server_names, acme)?;
        let acme = acme_cert.is_some();
        let tls = if acme { acme_cert.map(Arc::new) } else { self.vhost_tls(v, root, &server_names)? };
        let https_redirect = self.https_redirect(v, tls_listener)?;
        let hsts = self.hsts(v)?;
        // Canonical, so that containment checks compare like with like.
        let doc_root = std::fs::canonicalize(&doc_root).unwrap_or(doc_root);
        let mut rest = v.rest.clone();
        let files = files::read_vhost(&mut rest, self, doc_root.clone())?;
        let rules = Rules::read(&mut rest, self, &rules::Reading { root, regex: None, location: false })?;
        let known: Vec<&str> = crate::keys::read::fields::<RawVhost>()
            .iter()
            .chain(files::VHOST_KEYS)
            .chain(rules::KEYS)
            .copied()
            .collect();
        rest.finish(self, &known)?;
        Ok(Vhost {
            symlinks,
            tls,
            acme,
            https_redirect,
            hsts,
            server_names,
            root: doc_root,
            files,
            serve_hidden: v.serve_hidden,
            error_pages,
            source: None,
            rules,
            locations: Locations::default(),
        })
    }

    /// `error_pages`: each a status from 400 to 599 and a path under the vhost root.
    fn error_pages(&self, v: &Split<RawVhost>) -> Result<Vec<(u16, String)>, ConfigError> {
        let mut error_pages = Vec::new();
        for (code, page) in &v.error_pages {
            let code: u16 = code.parse().ok().filter(|c| (400..600).contains(c)).ok_or_else(|| {
                self.spanned(page, format!("error_pages key {code:?} is not a status from 400 to 599"))
            })?;
            if !page.get_ref().starts_with('/') {
                return Err(self.spanned(page, "an error page is a path under the vhost root, starting with '/'"));
            }
            error_pages.push((code, page.get_ref().clone()));
        }
        Ok(error_pages)
    }

    /// `symlinks`: inside (the default), never or follow.
    fn symlinks(&self, v: &Split<RawVhost>) -> Result<Symlinks, ConfigError> {
        Ok(match &v.symlinks {
            None => Symlinks::Inside,
            Some(s) => match s.get_ref().as_str() {
                "inside" => Symlinks::Inside,
                "never" => Symlinks::Never,
                "follow" => Symlinks::Follow,
                _ => return Err(self.spanned(s, "symlinks must be \"inside\", \"never\" or \"follow\"")),
            },
        })
    }

    /// The certificate from `tls_cert` and `tls_key` (both or neither), loaded now.
    fn vhost_tls(
        &self,
        v: &Split<RawVhost>,
        root: &Path,
        server_names: &[String],
    ) -> Result<Option<Arc<crate::tls::VhostCert>>, ConfigError> {
        Ok(match (&v.tls_cert, &v.tls_key) {
            (None, None) => None,
            (Some(c), None) => return Err(self.spanned(c, "tls_cert needs tls_key (the certificate's private key)")),
            (None, Some(k)) => return Err(self.spanned(k, "tls_key needs tls_cert (the certificate chain)")),
            (Some(c), Some(k)) => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64);
                let key_file = absolute(root, k.get_ref());
                let cert = crate::tls::load(&absolute(root, c.get_ref()), &key_file, server_names, now)
                    // The error points at the line of the file at fault.
                    .map_err(|e| self.spanned(if e.file() == key_file { k } else { c }, e.to_string()))?;
                Some(Arc::new(cert))
            }
        })
    }

    /// `https_redirect`: 301 or 308, and only where some listener speaks TLS.
    fn https_redirect(&self, v: &Split<RawVhost>, tls_listener: bool) -> Result<Option<u16>, ConfigError> {
        Ok(match &v.https_redirect {
            None => None,
            Some(r) if !tls_listener => {
                return Err(self.spanned(r, "https_redirect needs a listen entry with tls = true"));
            }
            Some(r) if matches!(*r.get_ref(), 301 | 308) => Some(*r.get_ref()),
            Some(r) => return Err(self.spanned(r, "https_redirect must be 301 or 308")),
        })
    }

    /// `hsts`: a Strict-Transport-Security value.
    fn hsts(&self, v: &Split<RawVhost>) -> Result<Option<String>, ConfigError> {
        Ok(match &v.hsts {
            None => None,
            Some(h) if valid_hsts(h.get_ref()) => Some(h.get_ref().clone()),
            Some(h) => {
                return Err(self.spanned(
                    h,
                    "hsts must be a Strict-Transport-Security value: \"max-age=SECONDS\", then optionally \"; includeSubDomains\" and \"; preload\"",
                ));
            }
        })
    }

    /// The locations of a vhost resolved by [`Ctx::vhost`], and the status page's
    /// from the old `[status] enabled`/`path` keys unless a location has that exact
    /// path already. What `check` finds either fails the config (a location that can
    /// never be chosen) or goes to `notes`.
    pub(super) fn locations(
        &self,
        raw: &[Spanned<Keys>],
        vhost: &mut Vhost,
        root: &Path,
        status: &Status,
        notes: &mut Vec<String>,
    ) -> Result<(), ConfigError> {
        let mut list = Vec::with_capacity(raw.len() + 1);
        for l in raw {
            list.push(self.location(l, vhost, root)?);
        }
        if status.enabled {
            let taken = list.iter().any(|l| matches!(&l.pattern, Pattern::Exact(p) if *p == status.path));
            if taken {
                notes.push(format!(
                    "{}: [status] path {:?} is also an exact location of vhost {}: that location answers there",
                    self.file.display(),
                    status.path,
                    vhost.server_names.first().map_or("(no name)", String::as_str)
                ));
            } else {
                let pattern = Pattern::Exact(status.path.clone());
                list.push(Location {
                    pattern,
                    prefix_only: false,
                    kind: Kind::Status,
                    rules: Rules::default(),
                    at: None,
                });
            }
        }
        for f in location::check(&list) {
            let text = location::describe(&f, &list);
            match f {
                Finding::Unreachable { at, .. } => {
                    return Err(self.spanned(&raw[at], text));
                }
                Finding::Overlap { .. } | Finding::Shadowed { .. } => notes.push(text),
            }
        }
        vhost.locations = Locations::new(list);
        Ok(())
    }

    /// One `[[vhost.location]]`: what it matches, then its kind's keys and its rules,
    /// each read by its own module; a key none of them takes is an error.
    fn location(&self, l: &Spanned<Keys>, vhost: &Vhost, root: &Path) -> Result<Location, ConfigError> {
        let mut keys = l.get_ref().clone();
        let at = Some(self.position(l.span()));
        let (exact, prefix, regex) = (
            keys.take::<String>(self, "exact")?,
            keys.take::<String>(self, "prefix")?,
            keys.take::<String>(self, "regex")?,
        );
        let pattern = match (exact, prefix, regex) {
            (Some(p), None, None) => Pattern::Exact(self.location_path(&p)?),
            (None, Some(p), None) => Pattern::Prefix(self.location_path(&p)?),
            (None, None, Some(r)) => Pattern::Regex(
                regex_lite::Regex::new(r.get_ref())
                    .map_err(|e| self.spanned(&r, format!("bad regex {:?}: {e}", r.get_ref())))?,
            ),
            _ => return Err(self.spanned(l, "a location needs exactly one of exact, prefix or regex")),
        };
        let prefix_only = match keys.take::<bool>(self, "prefix_only")? {
            Some(on) if !matches!(pattern, Pattern::Prefix(_)) => {
                return Err(self.spanned(&on, "prefix_only goes with prefix (it stops the regexes below a prefix)"));
            }
            Some(on) => on.into_inner(),
            None => false,
        };
        let reading = Reading {
            ctx: self,
            root,
            vhost_files: &vhost.files,
            prefix: matches!(pattern, Pattern::Prefix(_)),
            at: l.span(),
        };
        let kind = Kind::read(&mut keys, &reading)?;
        let regex = match &pattern {
            Pattern::Regex(r) => Some(r),
            _ => None,
        };
        let rules = Rules::read(&mut keys, self, &rules::Reading { root, regex, location: true })?;
        if let Some(key) = rules.files_only(kind.tries_files_itself())
            && !kind.serves_files()
        {
            return Err(self.spanned(l, format!("{key} needs a location that serves files")));
        }
        let known: Vec<&str> = PATTERN_KEYS
            .iter()
            .chain(rules::LOCATION_KEYS)
            .copied()
            .chain(crate::kinds::keys())
            .chain(rules::KEYS.iter().copied())
            .collect();
        keys.finish(self, &known)?;
        Ok(Location { pattern, prefix_only, kind, rules, at })
    }

    fn location_path(&self, p: &Spanned<String>) -> Result<String, ConfigError> {
        if !p.get_ref().starts_with('/') {
            return Err(self.spanned(p, "a location's path starts with '/'"));
        }
        Ok(p.get_ref().clone())
    }
}

/// The keys that say what a location matches.
pub(crate) const PATTERN_KEYS: [&str; 4] = ["exact", "prefix", "regex", "prefix_only"];

/// A `Strict-Transport-Security` value (RFC 6797 §6.1): `max-age` and the two
/// directives browsers know.
fn valid_hsts(v: &str) -> bool {
    let mut parts = v.split(';').map(str::trim);
    let max_age = parts.next().and_then(|p| p.strip_prefix("max-age="));
    max_age.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        && parts.all(|p| p.eq_ignore_ascii_case("includeSubDomains") || p.eq_ignore_ascii_case("preload"))
}

#[cfg(test)]
mod tests {
    use crate::http::pattern::Pattern;
    use crate::kinds::Kind;
    use crate::rules::Rules;
    use crate::rules::access::{Access, Who};

    fn parse(vhosts: &str, extra: &str) -> Result<crate::config::Config, String> {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["conf", "htdocs", "other"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let text = format!("[server]\nlisten = [\"8080\"]\nmime_types = \"builtin\"\n{extra}\n{vhosts}");
        crate::config::parse(&text, &dir.path().join("conf/pika.toml")).map_err(|e| e.to_string())
    }

    #[test]
    fn the_old_status_keys_add_an_exact_location_to_every_vhost() {
        let two = "[[vhost]]\nroot = \"htdocs\"\n[[vhost]]\nroot = \"other\"\n";
        let c = parse(two, "[status]\nenabled = true\npath = \"/st\"\n").unwrap();
        for v in &c.vhosts {
            let l = &v.locations.list[0];
            assert!(matches!(&l.pattern, Pattern::Exact(p) if p == "/st") && l.kind == Kind::Status);
            assert_eq!(v.locations.find(b"/st"), Some(0));
        }
        assert!(parse(two, "").unwrap().vhosts.iter().all(|v| v.locations.list.is_empty()), "off by default");
        // A vhost with its own exact location there keeps it, and hears of it.
        let own = "[[vhost]]\nroot = \"htdocs\"\n[[vhost.location]]\nexact = \"/st\"\nroot = \"other\"\n";
        let c = parse(own, "[status]\nenabled = true\npath = \"/st\"\n").unwrap();
        assert_eq!(c.vhosts[0].locations.list.len(), 1);
        assert!(matches!(c.vhosts[0].locations.list[0].kind, Kind::Files(_)));
        assert!(c.notes.iter().any(|n| n.contains("[status] path \"/st\" is also an exact location")), "{:?}", c.notes);
    }

    #[test]
    fn a_health_location_answers_checks_and_serves_no_files() {
        let v =
            |extra: &str| format!("[[vhost]]\nroot = \"htdocs\"\n[[vhost.location]]\nexact = \"/healthz\"\n{extra}");
        let c = parse(&v("health = true\n"), "").unwrap();
        assert_eq!(c.vhosts[0].locations.list[0].kind, Kind::Health);
        let e = parse(&v("health = true\nstatus = true\n"), "").unwrap_err();
        assert!(e.contains("the metrics (metrics = true) or the echo (echo = true), not two"), "{e}");
        let e = parse(&v("health = true\nroot = \"htdocs\"\n"), "").unwrap_err();
        assert!(e.contains("health = true answers health checks, not files"), "{e}");
    }

    #[test]
    fn files_inherit_the_vhost_unless_the_location_says() {
        let v = "[[vhost]]\nroot = \"htdocs\"\nindex = [\"a.html\"]\nautoindex = true\n\
                 [[vhost.location]]\nprefix = \"/p/\"\n\
                 [[vhost.location]]\nprefix = \"/q/\"\nalias = \"other\"\nindex = []\nautoindex = false\n";
        let c = parse(v, "").unwrap();
        let files = |i: usize| match &c.vhosts[0].locations.list[i].kind {
            Kind::Files(f) => f.clone(),
            _ => panic!("files expected"),
        };
        let (p, q) = (files(0), files(1));
        assert_eq!(
            (p.dir == c.vhosts[0].root, p.alias, p.index.as_slice(), p.autoindex),
            (true, false, &["a.html".to_string()][..], true)
        );
        assert!(q.dir.ends_with("other") && q.alias && q.index.is_empty() && !q.autoindex);
        let dirs: Vec<_> = c.vhosts[0].dirs().collect();
        assert_eq!(dirs.len(), 3);
        // A chroot must hold a location's directory too (`extra` lands in [server]).
        let outside = "[[vhost]]\nroot = \"htdocs\"\n[[vhost.location]]\nprefix = \"/x/\"\nroot = \"/\"\n";
        assert!(parse(outside, "").is_ok());
        let e = parse(outside, "chroot = \".\"").unwrap_err();
        assert!(e.contains("is outside the chroot"), "{e}");
        let jailed = parse(&outside.replace("root = \"/\"", "root = \"other\""), "chroot = \".\"").unwrap();
        let inside = jailed.jailed(jailed.chroot.as_deref().unwrap());
        assert!(
            matches!(&inside.vhosts[0].locations.list[0].kind, Kind::Files(f) if f.dir == std::path::Path::new("/other"))
        );
    }

    #[test]
    fn rules_are_read_on_a_vhost_and_on_any_location_as_written() {
        let v = "[[vhost]]\nroot = \"htdocs\"\nallow = [\"10.0.0.0/8\"]\n\
                 [[vhost.location]]\nexact = \"/s\"\nstatus = true\nallow = [\"::1\", \"192.0.2.0/24\"]\n\
                 [[vhost.location]]\nprefix = \"/p/\"\n";
        let c = parse(v, "").unwrap();
        let cidrs = |list: &[&str]| {
            let who: Vec<Who> = list.iter().map(|a| Who::parse(a).unwrap()).collect();
            Some(Access::new(&who, &[], true))
        };
        assert_eq!(c.vhosts[0].rules.access, cidrs(&["10.0.0.0/8"]));
        let l = &c.vhosts[0].locations.list;
        assert_eq!(l[0].rules.access, cidrs(&["::1", "192.0.2.0/24"]));
        assert_eq!(l[1].rules.access, None, "as written: the vhost's is its default when a worker builds it");
        // In force: its own, else its kind's default, else the vhost's.
        let status = l[0].kind.rules(&c.status.allow);
        assert_eq!(Rules::default().over(&status).over(&c.vhosts[0].rules).access, cidrs(&["127.0.0.0/8", "::1"]));
        assert_eq!(
            l[1].rules.over(&l[1].kind.rules(&c.status.allow)).over(&c.vhosts[0].rules).access,
            cidrs(&["10.0.0.0/8"])
        );
        let e = parse(&v.replace("192.0.2.0/24", "192.0.2.0/33"), "").unwrap_err();
        assert!(e.contains("allow: \"192.0.2.0/33\" is not \"all\", an address or a CIDR range"), "{e}");
        let e = parse(&v.replace("allow = [\"10", "allow = 1\nx = [\"10"), "").unwrap_err();
        assert!(e.contains(":9: allow: invalid type: integer `1`, expected a sequence"), "{e}");
    }

    #[test]
    fn a_location_serves_the_metrics() {
        let v = "[[vhost]]\nroot = \"htdocs\"\n[[vhost.location]]\nexact = \"/metrics\"\nmetrics = true\n";
        let c = parse(v, "").unwrap();
        assert_eq!(c.vhosts[0].locations.list[0].kind, Kind::Metrics);
        assert_eq!(c.vhosts[0].dirs().count(), 1, "no directory of its own");
        let both = parse(&format!("{v}status = true\n"), "").unwrap_err();
        assert!(both.contains("the metrics (metrics = true) or the echo (echo = true), not two"), "{both}");
        let files = parse(&format!("{v}root = \"other\"\n"), "").unwrap_err();
        assert!(files.contains("with metrics = true serves the metrics, not files"), "{files}");
        let health = parse(&format!("{v}health = true\n"), "").unwrap_err();
        assert!(health.contains("not two"), "{health}");
    }
}
