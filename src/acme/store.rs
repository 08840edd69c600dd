//! The state folder (`acme.state_dir`): the account key and URL, and each vhost's
//! certificate chain and key. Only the master reads or writes it, as root: the
//! folder is root's and 0700, every file 0600, written to a temporary name and
//! renamed so a reader never sees half a key. The ACME child never opens it; it is
//! given the account key in memory and hands back what it got over a pipe.
//!
//! Files: `account.key` (PKCS#8 PEM), `account.json` (the CA's directory URL and the
//! account URL there), `NAME.crt` and `NAME.key` for the vhost whose first server
//! name is NAME. What comes from the ACME child is not trusted further than that:
//! NAME is one of the master's own server names, and must read as a DNS name (no
//! `/`, no leading dot), and a chain is stored only if it loads with its key and
//! covers the vhost's names now.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject;
use rustls::sign::CertifiedKey;

use crate::base::safe_files;
use crate::tls::{Validity, VhostCert};

/// What the state folder is called in errors, and what it holds.
const FOLDER: (&str, &str) = ("acme state_dir", "private keys");

/// Checks the folder, if it exists: a directory, the master's user's (root's), that
/// no one else may enter.
pub fn check_folder(dir: &Path) -> Result<(), String> {
    safe_files::check_private_folder(dir, FOLDER.0, FOLDER.1)
}

/// Creates the folder (0700) if it is missing, then checks it.
pub fn prepare(dir: &Path) -> Result<(), String> {
    safe_files::make_private_folder(dir, FOLDER.0, FOLDER.1)
}

/// The account key (PKCS#8 DER): read, or made and written on first use.
pub fn account_key(dir: &Path) -> Result<Vec<u8>, String> {
    let file = dir.join("account.key");
    match std::fs::read(&file) {
        Ok(pem) => match PrivateKeyDer::from_pem_slice(&pem) {
            Ok(PrivateKeyDer::Pkcs8(k)) => Ok(k.secret_pkcs8_der().to_vec()),
            _ => Err(format!("{}: not a PKCS#8 private key", file.display())),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let der = super::jws::AccountKey::generate()?;
            safe_files::write_private(dir, "account.key", super::b64::pem("PRIVATE KEY", &der).as_bytes())?;
            log::info!("acme: a new account key in {}", file.display());
            Ok(der)
        }
        Err(e) => Err(format!("{}: {e}", file.display())),
    }
}

/// The account URL registered at `directory`, if one is stored.
pub fn account_url(dir: &Path, directory: &str) -> Option<String> {
    let text = std::fs::read(dir.join("account.json")).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&text).ok()?;
    (v["directory"] == directory).then(|| v["url"].as_str().map(str::to_string))?
}

pub fn save_account(dir: &Path, directory: &str, url: &str) -> Result<(), String> {
    let v = serde_json::json!({ "directory": directory, "url": url });
    safe_files::write_private(dir, "account.json", v.to_string().as_bytes())
}

/// The files of the vhost whose first server name is `name`.
pub fn cert_files(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")))
}

/// Whether `name` can name files in the state folder: a DNS name as the config
/// takes them (letters, digits, hyphens and inner dots), so never a path.
fn file_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && !name.starts_with('.')
        && !name.ends_with('.')
        && !name.contains("..")
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
}

/// Stores a certificate chain and its key for the vhost whose server names are
/// `names` (files named by the first), if they load together and cover every name
/// at `now`: written under temporary names, checked, then renamed (the key first:
/// a chain is never there without its key).
pub fn save_cert(dir: &Path, names: &[String], chain_pem: &str, key_pem: &str, now: i64) -> Result<(), String> {
    let name = names.first().map_or("", String::as_str);
    if !file_name_ok(name) {
        return Err(format!("{name:?} cannot name a file in the state folder"));
    }
    let (key_name, crt_name) = (format!("{name}.key"), format!("{name}.crt"));
    let key_tmp = safe_files::write_private_temp(dir, &key_name, key_pem.as_bytes())?;
    let checked = safe_files::write_private_temp(dir, &crt_name, chain_pem.as_bytes()).and_then(|crt_tmp| {
        crate::tls::load(&crt_tmp, &key_tmp, names, now).map(|_| crt_tmp).map_err(|e| e.to_string())
    });
    let crt_tmp = match checked {
        Ok(t) => t,
        Err(e) => {
            let _ = std::fs::remove_file(&key_tmp);
            let _ = std::fs::remove_file(dir.join(format!(".{crt_name}.tmp")));
            return Err(format!("not stored: {e}"));
        }
    };
    let (crt, key) = cert_files(dir, name);
    std::fs::rename(&key_tmp, &key).map_err(|e| format!("{}: {e}", key.display()))?;
    std::fs::rename(&crt_tmp, &crt).map_err(|e| format!("{}: {e}", crt.display()))
}

/// The certificate an `acme = true` vhost is served with: the stored one if it is
/// valid now and covers every name, else a self-signed placeholder (its
/// [`VhostCert::placeholder`] set) until the ACME child brings one.
pub fn vhost_cert(dir: &Path, names: &[String], now: i64) -> Result<VhostCert, String> {
    let (cert, key) = cert_files(dir, names.first().map_or("", String::as_str));
    if cert.exists() {
        match crate::tls::load(&cert, &key, names, now) {
            Ok(c) => return Ok(c),
            Err(e) => {
                log::warn!("acme: the stored certificate cannot be served ({e}); a placeholder until a new one comes")
            }
        }
    }
    placeholder(names, cert, key)
}

/// How long a placeholder claims to be valid: it is replaced long before.
const PLACEHOLDER_DAYS: i64 = 7;

/// A self-signed certificate for `names`: browsers warn, but the vhost's name is
/// served (and other vhosts' certificates work) while the real one is obtained.
pub fn placeholder(names: &[String], cert_file: PathBuf, key_file: PathBuf) -> Result<VhostCert, String> {
    let mut params = rcgen::CertificateParams::new(names.to_vec()).map_err(|e| e.to_string())?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "pika placeholder: ACME has not obtained this certificate yet");
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(PLACEHOLDER_DAYS);
    let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
    let cert = params.self_signed(&key).map_err(|e| e.to_string())?;
    let der = PrivateKeyDer::try_from(key.serialize_der()).map_err(|e| e.to_string())?;
    let signer = crate::tls::provider().key_provider.load_private_key(der).map_err(|e| e.to_string())?;
    let validity = crate::tls::check::validity(cert.der()).ok_or("placeholder without validity")?;
    Ok(VhostCert {
        cert_file,
        key_file,
        key: Arc::new(CertifiedKey::new(vec![cert.der().clone()], signer)),
        validity,
        placeholder: true,
    })
}

/// The validity of a PEM chain's first certificate.
pub fn chain_validity(chain_pem: &str) -> Option<Validity> {
    let first = rustls::pki_types::CertificateDer::pem_slice_iter(chain_pem.as_bytes()).next()?.ok()?;
    crate::tls::check::validity(&first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    #[test]
    fn the_folder_is_made_private_and_keys_are_0600() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("state/acme");
        prepare(&dir).unwrap();
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        let der = account_key(&dir).unwrap();
        assert_eq!(account_key(&dir).unwrap(), der, "read back, not made again");
        assert_eq!(std::fs::metadata(dir.join("account.key")).unwrap().mode() & 0o777, 0o600);
        save_account(&dir, "https://ca/dir", "https://ca/acct/1").unwrap();
        assert_eq!(account_url(&dir, "https://ca/dir").as_deref(), Some("https://ca/acct/1"));
        assert_eq!(account_url(&dir, "https://other/dir"), None);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = check_folder(&dir).unwrap_err();
        assert!(e.contains("has mode 755: it holds private keys, make it 0700"), "{e}");
    }

    #[test]
    fn a_vhost_without_a_stored_certificate_gets_a_placeholder() {
        let tmp = tempfile::tempdir().unwrap();
        let names = vec!["a.example".to_string(), "www.a.example".to_string()];
        let now = crate::tls::test_certs::now();
        let c = vhost_cert(tmp.path(), &names, now).unwrap();
        assert!(c.placeholder);
        crate::tls::check::check(&c.key, &c.cert_file, &c.key_file, &names, now).unwrap();
        // Stored: served, no longer a placeholder.
        let made = crate::tls::test_certs::leaf(&["a.example", "www.a.example"], -1, 90, None);
        save_cert(tmp.path(), &names, &made.pems.concat(), &made.key_pem, now).unwrap();
        let c = vhost_cert(tmp.path(), &names, now).unwrap();
        assert!(!c.placeholder);
        assert_eq!(chain_validity(&made.pems.concat()), Some(c.validity));
        assert_eq!(std::fs::metadata(tmp.path().join("a.example.key")).unwrap().mode() & 0o777, 0o600);
        // A name added to the vhost: the stored one no longer covers it.
        let more = vec!["a.example".to_string(), "b.example".to_string()];
        assert!(vhost_cert(tmp.path(), &more, now).unwrap().placeholder);
    }

    #[test]
    fn only_a_chain_that_loads_and_covers_the_names_is_stored_and_only_under_a_name() {
        let tmp = tempfile::tempdir().unwrap();
        let state = tmp.path().join("a/b/acme");
        prepare(&state).unwrap();
        let now = crate::tls::test_certs::now();
        let names = vec!["a.example".to_string()];
        let good = crate::tls::test_certs::leaf(&["a.example"], -1, 90, None);
        let other = crate::tls::test_certs::leaf(&["b.example"], -1, 90, None);
        for bad in ["../../x", "/../../x", ".x", "a/b.example", "", "a..example"] {
            let e = save_cert(&state, &[bad.to_string()], &good.pems.concat(), &good.key_pem, now).unwrap_err();
            assert!(e.contains("cannot name a file in the state folder"), "{bad}: {e}");
        }
        let cases = [
            (other.pems.concat(), good.key_pem.clone()), // not for these names
            (good.pems.concat(), other.key_pem.clone()), // not its key
            ("garbage".into(), good.key_pem.clone()),
        ];
        for (chain, key) in cases {
            assert!(save_cert(&state, &names, &chain, &key, now).unwrap_err().starts_with("not stored: "));
        }
        let left: Vec<_> = walkdir(tmp.path());
        assert_eq!(left, std::slice::from_ref(&state), "nothing written, not even a temporary file");
        save_cert(&state, &names, &good.pems.concat(), &good.key_pem, now).unwrap();
        assert_eq!(walkdir(&state).len(), 2, "a.example.crt and a.example.key");
    }

    /// Every file under `dir`, and every empty folder.
    fn walkdir(dir: &Path) -> Vec<PathBuf> {
        let entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).collect();
        if entries.is_empty() {
            return vec![dir.to_path_buf()];
        }
        entries.into_iter().flat_map(|p| if p.is_dir() { walkdir(&p) } else { vec![p] }).collect()
    }
}
