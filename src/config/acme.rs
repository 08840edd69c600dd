//! The `[acme]` section and a vhost's `acme = true`, checked as `pika -t` checks the
//! rest: the directory URL's form, the contacts, the terms agreed, a state folder
//! that is root's alone, the CA roots readable, the EAB keys paired, and names a CA
//! can validate (no wildcard, no IP address).

use std::path::Path;

use toml::Spanned;

use super::raw::{RawAcme, RawConfig};
use super::server::RunAs;
use crate::acme::{Eab, Settings};
use crate::keys::read::{ConfigError, Ctx, absolute};

/// `state_dir` when unset, under the server root.
const DEFAULT_STATE_DIR: &str = "acme";

impl Ctx<'_> {
    /// `[acme]`, if present.
    pub(super) fn acme(
        &self,
        raw: &RawConfig,
        root: &Path,
        run_as: Option<&RunAs>,
    ) -> Result<Option<Settings>, ConfigError> {
        let Some(section) = &raw.acme else { return Ok(None) };
        let a: &RawAcme = section.get_ref();
        let directory = a.directory.get_ref().trim().to_string();
        if !crate::acme::https::valid_url(&directory) {
            return Err(self.spanned(&a.directory, "acme.directory must be the CA's https:// directory URL"));
        }
        // One address or a list of them, as certbot and Caddy take either.
        let given: Vec<&toml::Value> = match a.contact.as_ref().map(Spanned::get_ref) {
            None => Vec::new(),
            Some(toml::Value::Array(list)) => list.iter().collect(),
            Some(one) => vec![one],
        };
        let mut contact = Vec::new();
        for c in given {
            let bad = || {
                let at = a.contact.as_ref().expect("given");
                self.spanned(at, "an acme.contact is an address as \"mailto:admin@example.com\", or a list of them")
            };
            let text = c.as_str().ok_or_else(bad)?;
            let mail = text.strip_prefix("mailto:").unwrap_or("");
            if !mail.contains('@') || mail.contains(',') || mail.chars().any(char::is_whitespace) {
                return Err(bad());
            }
            contact.push(text.to_string());
        }
        if !a.agree_terms {
            return Err(self.spanned(
                section,
                "acme.agree_terms = true is needed: the CA issues certificates only to accounts that agreed to its terms",
            ));
        }
        let state_dir = absolute(root, a.state_dir.as_ref().map_or(DEFAULT_STATE_DIR, |d| d.get_ref().as_str()));
        crate::acme::store::check_folder(&state_dir).map_err(|e| match &a.state_dir {
            Some(d) => self.spanned(d, e),
            None => self.spanned(section, e),
        })?;
        let renew_before = match &a.renew_before {
            Some(r) if r.get_ref().0.is_zero() => {
                return Err(self.spanned(r, "acme.renew_before must be more than zero"));
            }
            Some(r) => Some(r.get_ref().0.as_secs()),
            None => None,
        };
        let ca_roots = match &a.ca_roots {
            None => None,
            Some(f) => {
                let file = absolute(root, f.get_ref());
                crate::acme::https::roots(&file).map_err(|e| self.spanned(f, format!("acme.ca_roots: {e}")))?;
                Some(file)
            }
        };
        let eab = match (&a.eab_kid, &a.eab_hmac_key) {
            (None, None) => None,
            (Some(kid), Some(key)) => {
                let hmac_key = crate::acme::b64::decode(key.get_ref().trim())
                    .filter(|k| !k.is_empty())
                    .ok_or_else(|| self.spanned(key, "acme.eab_hmac_key must be the base64url key the CA gave"))?;
                Some(Eab { kid: kid.get_ref().clone(), hmac_key })
            }
            (Some(k), None) => return Err(self.spanned(k, "acme.eab_kid needs acme.eab_hmac_key")),
            (None, Some(k)) => return Err(self.spanned(k, "acme.eab_hmac_key needs acme.eab_kid")),
        };
        let timeout = |key: &Option<Spanned<crate::keys::units::Secs>>, name: &str, default| match key {
            Some(t) if t.get_ref().0.is_zero() => Err(self.spanned(t, format!("acme.{name} must be more than zero"))),
            Some(t) => Ok(t.get_ref().0),
            None => Ok(default),
        };
        let order_timeout = timeout(&a.order_timeout, "order_timeout", crate::acme::ORDER_TIMEOUT)?;
        let request_timeout = timeout(&a.request_timeout, "request_timeout", crate::acme::REQUEST_TIMEOUT)?;
        if run_as.is_none() && nix::unistd::geteuid().is_root() {
            return Err(self.spanned(
                section,
                "[acme] needs server.user when pika starts as root: the ACME child talks to the CA as the workers' user, never as root",
            ));
        }
        Ok(Some(Settings {
            directory,
            contact,
            state_dir,
            renew_before,
            ca_roots,
            eab,
            order_timeout,
            request_timeout,
        }))
    }

    /// A vhost's `acme = true`: its names must be ones a CA validates by HTTP-01 or
    /// TLS-ALPN-01, and its certificate comes from the state folder (or is a
    /// placeholder). `Ok(None)` when the vhost does not ask.
    pub(super) fn acme_vhost(
        &self,
        flag: Option<&Spanned<bool>>,
        has_files: bool,
        names: &[String],
        acme: Option<&Settings>,
    ) -> Result<Option<crate::tls::VhostCert>, ConfigError> {
        let Some(flag) = flag.filter(|f| *f.get_ref()) else { return Ok(None) };
        if has_files {
            return Err(
                self.spanned(flag, "acme = true and tls_cert/tls_key: the certificate comes from one or the other")
            );
        }
        let Some(settings) = acme else {
            return Err(
                self.spanned(flag, "acme = true needs an [acme] section (the CA, the contact, the state folder)")
            );
        };
        if names.is_empty() {
            return Err(self.spanned(flag, "acme = true needs server_names: they become the certificate's names"));
        }
        for n in names {
            if n.starts_with("*.") {
                return Err(self.spanned(
                    flag,
                    format!("server name {n:?}: a wildcard needs the DNS-01 challenge, which pika does not answer"),
                ));
            }
            let bare = n.trim_start_matches('[').trim_end_matches(']');
            if bare.parse::<std::net::IpAddr>().is_ok() || !valid_dns_name(n) {
                return Err(self.spanned(flag, format!("server name {n:?} is not a DNS name a CA can validate")));
            }
        }
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
        crate::acme::store::vhost_cert(&settings.state_dir, names, now).map(Some).map_err(|e| self.spanned(flag, e))
    }
}

/// Letters, digits and hyphens in dot-separated labels of 1 to 63, at most 253 in all.
fn valid_dns_name(n: &str) -> bool {
    n.len() <= 253
        && n.contains('.')
        && n.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

#[cfg(test)]
mod tests {
    fn parse(acme: &str, vhost: &str) -> Result<crate::config::Config, String> {
        let dir = tempfile::tempdir().unwrap();
        for sub in ["conf", "htdocs"] {
            std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        }
        let text = format!(
            "[server]\nlisten = [\"8080\"]\nmime_types = \"builtin\"\nuser = \"nobody\"\n{acme}\n\
             [[vhost]]\nroot = \"htdocs\"\nserver_names = [\"a.example\", \"www.a.example\"]\n{vhost}"
        );
        crate::config::parse(&text, &dir.path().join("conf/pika.toml")).map_err(|e| e.to_string())
    }

    const GOOD: &str = "[acme]\ndirectory = \"https://acme-staging-v02.api.letsencrypt.org/directory\"\n\
                        contact = [\"mailto:admin@a.example\"]\nagree_terms = true\n";

    #[test]
    fn a_good_section_and_a_vhost_with_a_placeholder() {
        let c = parse(GOOD, "acme = true\n").unwrap();
        let s = c.acme.as_ref().unwrap();
        assert!(s.state_dir.ends_with("acme"));
        assert_eq!(s.renew_before, None);
        assert_eq!((s.order_timeout, s.request_timeout), (crate::acme::ORDER_TIMEOUT, crate::acme::REQUEST_TIMEOUT));
        let cert = c.vhosts[0].tls.as_ref().unwrap();
        assert!(cert.placeholder);
        assert!(c.vhosts[0].acme);
        assert!(c.tls.is_some());
        let shown = crate::command::show::show(&c);
        assert!(shown.contains("\n[acme]\ndirectory = \"https://acme-staging-v02"), "{shown}");
        assert!(shown.contains("\nacme = true\n") && !shown.contains("tls_cert"), "{shown}");
        let c = parse(
            &format!(
                "{GOOD}renew_before = \"30d\"\neab_kid = \"k1\"\neab_hmac_key = \"c2VjcmV0\"\n\
                 order_timeout = \"5m\"\nrequest_timeout = \"10s\"\n"
            ),
            "",
        )
        .unwrap();
        assert_eq!(c.acme.as_ref().unwrap().renew_before, Some(30 * 86400));
        // One address without a list, as certbot's and Caddy's configs write it.
        let one = parse(&GOOD.replace("[\"mailto:admin@a.example\"]", "\"mailto:admin@a.example\""), "").unwrap();
        assert_eq!(one.acme.as_ref().unwrap().contact, ["mailto:admin@a.example"]);
        let s = c.acme.as_ref().unwrap();
        assert_eq!((s.order_timeout.as_secs(), s.request_timeout.as_secs()), (300, 10));
        assert_eq!(c.acme.as_ref().unwrap().eab.as_ref().unwrap().hmac_key, b"secret");
        let shown = crate::command::show::show(&c);
        assert!(shown.contains("renew_before = \"720h\"") && !shown.contains("c2VjcmV0"), "{shown}");
        assert!(shown.contains("order_timeout = \"5m\"\nrequest_timeout = \"10s\""), "{shown}");
    }

    #[test]
    fn each_mistake_is_named() {
        let cases = [
            (GOOD.replace("https://acme", "http://acme"), "", "acme.directory must be the CA's https:// directory URL"),
            (GOOD.replace("mailto:admin@a.example", "admin@a.example"), "", "an acme.contact is an address"),
            (GOOD.replace("[\"mailto:admin@a.example\"]", "7"), "", "an acme.contact is an address"),
            (GOOD.replace("agree_terms = true", "agree_terms = false"), "", "acme.agree_terms = true is needed"),
            (format!("{GOOD}eab_kid = \"k\"\n"), "", "acme.eab_kid needs acme.eab_hmac_key"),
            (format!("{GOOD}eab_kid = \"k\"\neab_hmac_key = \"not base64!\"\n"), "", "must be the base64url key"),
            (format!("{GOOD}ca_roots = \"conf/none.pem\"\n"), "", "acme.ca_roots:"),
            (format!("{GOOD}renew_before = 0\n"), "", "acme.renew_before must be more than zero"),
            (format!("{GOOD}order_timeout = 0\n"), "", "acme.order_timeout must be more than zero"),
            (format!("{GOOD}request_timeout = \"0s\"\n"), "", "acme.request_timeout must be more than zero"),
            (
                GOOD.to_string(),
                "acme = true\ntls_cert = \"c.pem\"\ntls_key = \"k.pem\"\n",
                "the certificate comes from one or the other",
            ),
            (String::new(), "acme = true\n", "acme = true needs an [acme] section"),
        ];
        for (acme, vhost, want) in cases {
            let e = parse(&acme, vhost).unwrap_err();
            assert!(e.contains(want), "{want}: {e}");
        }
        let wild = "[[vhost]]\nroot = \"htdocs\"\nserver_names = [\"*.b.example\"]\nacme = true\n";
        assert!(parse(GOOD, wild).unwrap_err().contains("a wildcard needs the DNS-01 challenge"));
        let ip = "[[vhost]]\nroot = \"htdocs\"\nserver_names = [\"192.0.2.1\"]\nacme = true\n";
        assert!(parse(GOOD, ip).unwrap_err().contains("is not a DNS name a CA can validate"));
    }

    #[test]
    fn dns_names() {
        assert!(super::valid_dns_name("a.example"));
        assert!(super::valid_dns_name("x-1.a.example"));
        for bad in ["localhost", "a..example", "-a.example", "a_b.example", "a.example-"] {
            assert!(!super::valid_dns_name(bad), "{bad}");
        }
    }
}
