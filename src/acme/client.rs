//! The ACME protocol (RFC 8555) as the child speaks it: the directory, nonces (a
//! `badNonce` answer is retried with the fresh nonce it carries, §6.5), the account
//! (registered once, then named by its URL), and an order: authorizations, their
//! challenges published for the workers and answered, the CSR, the certificate.
//!
//! Blocking and sequential: the child does one order at a time and sleeps between
//! polls, the CA's `Retry-After` when it gives one. Every request is done within
//! `acme.request_timeout`, and every order within `acme.order_timeout`
//! ([`Client::order_by`]): a CA that stalls costs a failed try, not the child.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::b64;
use super::challenges::{Kind, Publish};
use super::https::{Deadline, Https, Response};
use super::jws::{AccountKey, Signer};
use super::settings::{Challenge, Settings};

/// How often a `badNonce` answer is retried before the request fails.
const NONCE_RETRIES: u32 = 10;
/// How long an authorization or an order may stay pending before the try fails.
const POLL_LIMIT: Duration = Duration::from_secs(120);
/// The first wait between polls, doubled up to `POLL_MAX` unless the CA says.
const POLL_FIRST: Duration = Duration::from_millis(250);
const POLL_MAX: Duration = Duration::from_secs(4);

/// Why a request or an order failed, and when the CA allows the next try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub text: String,
    /// Seconds, from `Retry-After`.
    pub retry_after: Option<i64>,
    /// The CA does not know the account (a test CA restarted, an account deleted):
    /// register again.
    pub account_gone: bool,
}

impl Failure {
    fn new(text: impl Into<String>) -> Failure {
        Failure { text: text.into(), retry_after: None, account_gone: false }
    }
}

impl From<String> for Failure {
    fn from(text: String) -> Failure {
        Failure::new(text)
    }
}

/// The directory's URLs (RFC 8555 §7.1.1).
#[derive(Debug)]
struct Directory {
    new_nonce: String,
    new_account: String,
    new_order: String,
}

pub struct Client<'a> {
    http: Https,
    key: AccountKey,
    settings: &'a Settings,
    dir: Directory,
    /// The account URL, once known.
    kid: Option<String>,
    nonce: Option<String>,
    /// When the current order must be done (`acme.order_timeout` after it began).
    order_by: Instant,
}

/// `Retry-After` in seconds (a number, or an HTTP date).
fn retry_after(r: &Response) -> Option<i64> {
    let v = r.header("Retry-After")?;
    if let Ok(s) = v.parse::<i64>() {
        return Some(s);
    }
    let when = httpdate::parse_http_date(v).ok()?;
    let left = when.duration_since(std::time::SystemTime::now()).unwrap_or_default();
    Some(left.as_secs() as i64)
}

fn json_of(r: &Response) -> Result<Value, Failure> {
    serde_json::from_slice(&r.body).map_err(|e| Failure::new(format!("the CA's answer is not JSON: {e}")))
}

/// A problem document (RFC 7807) as one line: its type and detail.
fn problem(r: &Response) -> Failure {
    let v: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    let kind = v["type"].as_str().unwrap_or("");
    let short = kind.rsplit(':').next().unwrap_or(kind);
    let detail = v["detail"].as_str().unwrap_or("");
    Failure {
        text: format!("HTTP {} {short}: {detail}", r.status),
        retry_after: retry_after(r),
        account_gone: short == "accountDoesNotExist",
    }
}

fn str_field<'v>(v: &'v Value, name: &str) -> Result<&'v str, Failure> {
    v[name].as_str().ok_or_else(|| Failure::new(format!("the CA's answer has no {name:?}")))
}

/// When a request begun now must be done: `request_timeout` from now, or the
/// order's end if that comes first.
fn deadline(request_timeout: Duration, order_by: Instant) -> Deadline {
    let own = Instant::now() + request_timeout;
    if own < order_by {
        Deadline { at: own, why: "acme.request_timeout" }
    } else {
        Deadline { at: order_by, why: "acme.order_timeout" }
    }
}

impl<'a> Client<'a> {
    /// Reads the directory, as part of an order that must be done by `order_by`.
    pub fn new(http: Https, key: AccountKey, settings: &'a Settings, order_by: Instant) -> Result<Client<'a>, Failure> {
        let r = http.request("GET", &settings.directory, None, deadline(settings.request_timeout, order_by))?;
        if r.status != 200 {
            return Err(problem(&r));
        }
        let d = json_of(&r)?;
        let dir = Directory {
            new_nonce: str_field(&d, "newNonce")?.to_string(),
            new_account: str_field(&d, "newAccount")?.to_string(),
            new_order: str_field(&d, "newOrder")?.to_string(),
        };
        Ok(Client { http, key, settings, dir, kid: None, nonce: None, order_by })
    }

    /// The next order must be done by `at`.
    pub fn order_by(&mut self, at: Instant) {
        self.order_by = at;
    }

    fn deadline(&self) -> Deadline {
        deadline(self.settings.request_timeout, self.order_by)
    }

    fn fresh_nonce(&mut self) -> Result<String, Failure> {
        if let Some(n) = self.nonce.take() {
            return Ok(n);
        }
        let r = self.http.request("HEAD", &self.dir.new_nonce.clone(), None, self.deadline())?;
        r.header("Replay-Nonce").map(str::to_string).ok_or_else(|| Failure::new("the CA gave no nonce"))
    }

    /// A signed POST (`payload` `None`: POST-as-GET), retried on `badNonce`.
    fn post(&mut self, url: &str, payload: Option<&Value>) -> Result<Response, Failure> {
        let mut last = None;
        for _ in 0..NONCE_RETRIES {
            let nonce = self.fresh_nonce()?;
            let signer = match &self.kid {
                Some(kid) => Signer::Kid(kid),
                None => Signer::Jwk,
            };
            let body = self.key.sign(url, &nonce, signer, payload)?.to_string();
            let r =
                self.http.request("POST", url, Some(("application/jose+json", body.as_bytes())), self.deadline())?;
            self.nonce = r.header("Replay-Nonce").map(str::to_string);
            if r.status < 400 {
                return Ok(r);
            }
            let p = problem(&r);
            if !p.text.contains(" badNonce:") {
                return Err(p);
            }
            log::debug!("acme: {url}: {} (trying again with the new nonce)", p.text);
            last = Some(p);
        }
        Err(last.unwrap_or_else(|| Failure::new("no answer")))
    }

    /// The account: `stored` (its URL, from an earlier run: nothing is asked), or a
    /// new one (terms agreed, contacts, the EAB if configured). Returns its URL.
    pub fn account(&mut self, stored: Option<String>) -> Result<String, Failure> {
        if let Some(url) = stored {
            self.kid = Some(url.clone());
            return Ok(url);
        }
        self.kid = None;
        let mut payload = json!({ "termsOfServiceAgreed": true, "contact": self.settings.contact });
        if let Some(eab) = &self.settings.eab {
            payload["externalAccountBinding"] = self.key.external_binding(eab, &self.dir.new_account);
        }
        let url = self.dir.new_account.clone();
        let r = self.post(&url, Some(&payload))?;
        let kid = r.header("Location").ok_or_else(|| Failure::new("the CA gave no account URL"))?.to_string();
        self.kid = Some(kid.clone());
        Ok(kid)
    }

    /// A certificate for `names`: each challenge type of `kinds` is tried in turn
    /// (a failed authorization fails its order, so the next type gets a new order).
    /// Returns the chain and its key, both PEM.
    pub fn obtain(
        &mut self,
        names: &[String],
        kinds: &[Challenge],
        board: &dyn Publish,
    ) -> Result<(String, String), Failure> {
        let mut failures = Vec::new();
        for &kind in kinds {
            match self.order(names, kind, board) {
                Ok(got) => return Ok(got),
                Err(f) => {
                    log::warn!("acme: {} for {}: {}", kind.name(), names.join(", "), f.text);
                    if f.account_gone || f.retry_after.is_some() {
                        return Err(f);
                    }
                    failures.push(format!("{}: {}", kind.name(), f.text));
                }
            }
        }
        if failures.is_empty() {
            return Err(Failure::new(
                "no challenge type to try: no plain listener (http-01) and no TLS listener (tls-alpn-01)",
            ));
        }
        Err(Failure::new(failures.join("; ")))
    }

    fn order(&mut self, names: &[String], kind: Challenge, board: &dyn Publish) -> Result<(String, String), Failure> {
        let ids: Vec<Value> = names.iter().map(|n| json!({ "type": "dns", "value": n })).collect();
        let url = self.dir.new_order.clone();
        let r = self.post(&url, Some(&json!({ "identifiers": ids })))?;
        let order_url = r.header("Location").ok_or_else(|| Failure::new("the CA gave no order URL"))?.to_string();
        let order = json_of(&r)?;
        let authorizations: Vec<String> = order["authorizations"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a.as_str().map(str::to_string))
            .collect();
        // Publish every challenge first, then answer them, then wait: the CA
        // validates the names in parallel.
        let mut published = Vec::new();
        let result = self.authorize(&authorizations, kind, board, &mut published);
        for (k, name) in &published {
            board.remove(*k, name.as_bytes());
        }
        result?;
        let order = self.poll(&order_url, &["ready", "valid"], "the order")?;
        let key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
        let order = if order["status"] == "valid" {
            order
        } else {
            let csr = rcgen::CertificateParams::new(names.to_vec())
                .and_then(|p| p.serialize_request(&key))
                .map_err(|e| format!("cannot make the CSR: {e}"))?;
            let finalize = str_field(&order, "finalize")?.to_string();
            self.post(&finalize, Some(&json!({ "csr": b64::url(csr.der()) })))?;
            self.poll(&order_url, &["valid"], "the order")?
        };
        let cert_url = str_field(&order, "certificate")?.to_string();
        let chain = self.post(&cert_url, None)?;
        let chain = String::from_utf8(chain.body).map_err(|_| "the certificate is not PEM".to_string())?;
        if !chain.contains("-----BEGIN CERTIFICATE-----") {
            return Err(Failure::new("the certificate is not PEM"));
        }
        Ok((chain, key.serialize_pem()))
    }

    /// Publishes and answers the challenges of the pending authorizations, then waits
    /// until each is valid. `published`: what to take down afterwards.
    fn authorize(
        &mut self,
        authorizations: &[String],
        kind: Challenge,
        board: &dyn Publish,
        published: &mut Vec<(Kind, String)>,
    ) -> Result<(), Failure> {
        let mut answered = Vec::new();
        for url in authorizations {
            let authz = json_of(&self.post(url, None)?)?;
            if authz["status"] == "valid" {
                continue;
            }
            let name = authz["identifier"]["value"].as_str().unwrap_or("").to_string();
            let challenge = authz["challenges"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == kind.name())
                .ok_or_else(|| Failure::new(format!("the CA offers no {} challenge for {name}", kind.name())))?;
            let token = str_field(challenge, "token")?;
            let key_authorization = self.key.key_authorization(token);
            match kind {
                Challenge::Http01 => {
                    if !board.put(Kind::Http01, token.as_bytes(), key_authorization.as_bytes()) {
                        return Err(Failure::new("the table of challenges is full"));
                    }
                    published.push((Kind::Http01, token.to_string()));
                }
                Challenge::TlsAlpn01 => {
                    super::alpn::publish(board, &name, &key_authorization)?;
                    published.push((Kind::TlsAlpn01, name.clone()));
                }
            }
            answered.push((url.clone(), str_field(challenge, "url")?.to_string(), name));
        }
        if !answered.is_empty() {
            board.settle();
        }
        for (_, challenge_url, name) in &answered {
            log::info!("acme: answering the {} challenge for {name}", kind.name());
            self.post(challenge_url, Some(&json!({})))?;
        }
        for (url, _, name) in &answered {
            self.poll(url, &["valid"], &format!("the authorization of {name}"))?;
        }
        Ok(())
    }

    /// Polls `url` (POST-as-GET) until its status is one of `want`; fails on
    /// `invalid` with the CA's reason, or after [`POLL_LIMIT`].
    fn poll(&mut self, url: &str, want: &[&str], what: &str) -> Result<Value, Failure> {
        let start = Instant::now();
        let mut wait = POLL_FIRST;
        loop {
            let r = self.post(url, None)?;
            let v = json_of(&r)?;
            let status = v["status"].as_str().unwrap_or("");
            if want.contains(&status) {
                return Ok(v);
            }
            if status == "invalid" {
                return Err(Failure::new(format!("{what} is invalid: {}", reason(&v))));
            }
            if start.elapsed() > POLL_LIMIT {
                return Err(Failure::new(format!("{what} is still {status} after {POLL_LIMIT:?}")));
            }
            let asked = retry_after(&r).map(|s| Duration::from_secs(s.clamp(1, 60) as u64));
            let nap = asked.unwrap_or(wait);
            if Instant::now() + nap >= self.order_by {
                return Err(Failure::new(format!("{what} is still {status} at the end of acme.order_timeout")));
            }
            std::thread::sleep(nap);
            wait = (wait * 2).min(POLL_MAX);
        }
    }
}

/// Why an authorization or order is invalid: its error, or its challenges' errors.
fn reason(v: &Value) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut say = |e: &Value| {
        if let Some(d) = e["detail"].as_str() {
            out.push(d.to_string());
        }
    };
    say(&v["error"]);
    for c in v["challenges"].as_array().into_iter().flatten() {
        say(&c["error"]);
    }
    if out.is_empty() { "the CA gave no reason".into() } else { out.join("; ") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_read_as_one_line() {
        let r = super::super::https::tests_response(
            429,
            &[("Retry-After", "120")],
            br#"{"type":"urn:ietf:params:acme:error:rateLimited","detail":"too many orders"}"#,
        );
        let p = problem(&r);
        assert_eq!(p.text, "HTTP 429 rateLimited: too many orders");
        assert_eq!(p.retry_after, Some(120));
        assert!(!p.account_gone);
        let r = super::super::https::tests_response(
            400,
            &[],
            br#"{"type":"urn:ietf:params:acme:error:accountDoesNotExist","detail":"no such account"}"#,
        );
        assert!(problem(&r).account_gone);
        let v = json!({"status":"invalid","challenges":[{"type":"http-01","error":{"detail":"connection refused"}}]});
        assert_eq!(reason(&v), "connection refused");
    }
}
