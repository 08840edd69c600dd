//! htpasswd files as Debian's `htpasswd` (apache2-utils) writes them: one `user:hash`
//! a line, the hash one of bcrypt (`-B`, `$2y$`), SHA-512 and SHA-256 crypt (`-5`,
//! `-2`: `$6$`, `$5$`), Apache's MD5 (the default, `$apr1$`) or unsalted SHA-1 (`-s`,
//! `{SHA}`: accepted, and said by `pika -t` as weak). DES crypt (`-d`) and plain text
//! (`-p`) are refused: a line with them is said and its user cannot log in.
//!
//! Parsing is pure ([`Users::parse`]); who reads the file, and when again, is the
//! config's business (`rules::basic`).

use std::collections::HashMap;

use md5::{Digest, Md5};
use sha_crypt::PasswordVerifier;

/// Longest line read: a bcrypt line is about 70 bytes, a SHA-512 one about 120.
const MAX_LINE: usize = 1024;

/// A password hash from the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hash {
    /// `$2y$` (or `$2a$`, `$2b$`).
    Bcrypt(String),
    /// `$5$` or `$6$`, with an optional `rounds=`.
    ShaCrypt(String),
    /// `$apr1$salt$hash`.
    Apr1 { salt: String, hash: String },
    /// `{SHA}` and the base64 of the password's SHA-1.
    Sha1([u8; 20]),
}

impl Hash {
    /// The hash on a line, or why it is not one pika checks.
    pub fn parse(text: &str) -> Result<Hash, &'static str> {
        if let Some(rest) = text.strip_prefix("$apr1$") {
            let (salt, hash) = rest.split_once('$').ok_or("an $apr1$ hash without its salt")?;
            if salt.is_empty() || salt.len() > 8 || hash.len() != 22 || !hash.bytes().all(is_crypt64) {
                return Err("a malformed $apr1$ hash");
            }
            return Ok(Hash::Apr1 { salt: salt.into(), hash: hash.into() });
        }
        if ["$2y$", "$2a$", "$2b$"].iter().any(|p| text.starts_with(p)) {
            // `$2y$05$` then 53 characters of salt and hash.
            if text.len() != 60 {
                return Err("a malformed bcrypt hash");
            }
            return Ok(Hash::Bcrypt(text.into()));
        }
        if text.starts_with("$5$") || text.starts_with("$6$") {
            if text.split('$').count() < 4 {
                return Err("a malformed SHA crypt hash");
            }
            return Ok(Hash::ShaCrypt(text.into()));
        }
        if let Some(b64) = text.strip_prefix("{SHA}") {
            use base64::Engine;
            let bytes = base64::engine::general_purpose::STANDARD.decode(b64).map_err(|_| "a malformed {SHA} hash")?;
            let digest: [u8; 20] = bytes.try_into().map_err(|_| "a malformed {SHA} hash")?;
            return Ok(Hash::Sha1(digest));
        }
        if text.len() == 13 && text.bytes().all(is_crypt64) {
            return Err("DES crypt (htpasswd -d), which pika does not check: use -B");
        }
        Err("not a hash pika checks (bcrypt, $5$, $6$, $apr1$ or {SHA}): plain text, or a typing error?")
    }

    /// Whether `password` is the one hashed. Costs what the hash was made to cost
    /// (bcrypt at `-C 5`: about 2 ms).
    pub fn verify(&self, password: &[u8]) -> bool {
        match self {
            Hash::Bcrypt(h) => bcrypt::verify(password, h).unwrap_or(false),
            Hash::ShaCrypt(h) => sha_crypt::ShaCrypt::default().verify_password(password, h.as_str()).is_ok(),
            Hash::Apr1 { salt, hash } => same(apr1(password, salt.as_bytes()).as_bytes(), hash.as_bytes()),
            Hash::Sha1(d) => {
                let got = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY, password);
                same(got.as_ref(), d)
            }
        }
    }

    /// Unsalted SHA-1: a stolen file gives its passwords away to a lookup table.
    pub fn weak(&self) -> bool {
        matches!(self, Hash::Sha1(_))
    }
}

/// The users of one file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Users {
    users: HashMap<String, Hash>,
}

/// A line of the file that gives no user, or one that cannot log in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 1-based.
    pub line: usize,
    pub what: String,
    /// Only said (a weak hash); the others leave a user out.
    pub warning: bool,
}

impl Users {
    /// The users of a file's text (blank lines and `#` comments skipped; of a user
    /// named twice, the first line counts, as Apache reads it), and what is wrong
    /// with its other lines.
    pub fn parse(text: &str) -> (Users, Vec<Problem>) {
        let mut users = HashMap::new();
        let mut problems = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim_end_matches('\r');
            let mut problem = |what: String, warning| problems.push(Problem { line: n + 1, what, warning });
            if line.trim().is_empty() || line.starts_with('#') {
                continue;
            }
            if line.len() > MAX_LINE {
                problem(format!("longer than {MAX_LINE} bytes"), false);
                continue;
            }
            let Some((user, hash)) = line.split_once(':') else {
                problem("not user:hash".into(), false);
                continue;
            };
            if user.is_empty() {
                problem("no user name".into(), false);
                continue;
            }
            match Hash::parse(hash) {
                Ok(h) => {
                    if h.weak() {
                        problem(format!("user {user:?}: unsalted SHA-1 ({{SHA}}, htpasswd -s) is weak: use -B"), true);
                    }
                    if users.contains_key(user) {
                        problem(format!("user {user:?} again: the first line counts"), true);
                    } else {
                        users.insert(user.to_string(), h);
                    }
                }
                Err(why) => problem(format!("user {user:?}: {why}; this user cannot log in"), false),
            }
        }
        (Users { users }, problems)
    }

    pub fn get(&self, user: &str) -> Option<&Hash> {
        self.users.get(user)
    }

    pub fn len(&self) -> usize {
        self.users.len()
    }

    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }
}

/// The characters of crypt's base64.
fn is_crypt64(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'.' || b == b'/'
}

const ITOA64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Apache's `$apr1$`: FreeBSD's MD5 crypt with another magic string (what `htpasswd
/// -m` writes, and its default). Returns the 22 characters after the salt.
fn apr1(password: &[u8], salt: &[u8]) -> String {
    const MAGIC: &[u8] = b"$apr1$";
    let salt = &salt[..salt.len().min(8)];
    let mut ctx = Md5::new();
    ctx.update(password);
    ctx.update(MAGIC);
    ctx.update(salt);
    let alt = Md5::new().chain_update(password).chain_update(salt).chain_update(password).finalize();
    let mut left = password.len();
    while left > 0 {
        let n = left.min(16);
        ctx.update(&alt[..n]);
        left -= n;
    }
    let mut i = password.len();
    while i > 0 {
        if i & 1 == 1 {
            ctx.update([0u8]);
        } else {
            ctx.update(&password[..1]);
        }
        i >>= 1;
    }
    let mut fin: [u8; 16] = ctx.finalize().into();
    for round in 0..1000 {
        let mut c = Md5::new();
        if round & 1 == 1 {
            c.update(password);
        } else {
            c.update(fin);
        }
        if round % 3 != 0 {
            c.update(salt);
        }
        if round % 7 != 0 {
            c.update(password);
        }
        if round & 1 == 1 {
            c.update(fin);
        } else {
            c.update(password);
        }
        fin = c.finalize().into();
    }
    let mut out = String::with_capacity(22);
    let mut put = |v: u32, n: usize| {
        let mut v = v;
        for _ in 0..n {
            out.push(ITOA64[(v & 0x3f) as usize] as char);
            v >>= 6;
        }
    };
    let t = |a: usize, b: usize, c: usize| (u32::from(fin[a]) << 16) | (u32::from(fin[b]) << 8) | u32::from(fin[c]);
    put(t(0, 6, 12), 4);
    put(t(1, 7, 13), 4);
    put(t(2, 8, 14), 4);
    put(t(3, 9, 15), 4);
    put(t(4, 10, 5), 4);
    put(u32::from(fin[11]), 2);
    out
}

/// Compares in time that does not tell where the bytes differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    // Made by Debian's `htpasswd -nb -m|-2|-5|-B|-s alice 'pa:ss wörd'`.
    const FILE: &str = "\
alice:$apr1$Thr.YsdQ$eJzB/UpeuFpmhIJBAJpcJ.
bob:$5$G6PGBkzOVoamx.ZF$Kk2KrY5/WRqRVkmVm3KbgqWEC/iTvv0eJg..wJ/iq62
carol:$6$PnGhAuHX0MiNYtQy$HJNhkENjD5n46HUyIB4vrFhCOTpdsDEPoWDJDhQm.4jjp1OLIihAGI1x81l.mGJ6mDRRcXEfEy79mOFUjTGkG.
dave:$2y$05$7Is7CzbF9wp5XxlPjgXMfeo7XSfer0mDeZZ9ALiyvuKXBwqa7Zouy
# a comment, and a blank line

erin:{SHA}cRQ3iPZN/cUFUyAxdC91S5hcXvA=
";

    #[test]
    fn every_hash_htpasswd_writes_checks() {
        let (users, problems) = Users::parse(FILE);
        assert_eq!(users.len(), 5);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].warning && problems[0].line == 7 && problems[0].what.contains("weak"));
        for user in ["alice", "bob", "carol", "dave", "erin"] {
            let h = users.get(user).unwrap();
            assert!(h.verify("pa:ss wörd".as_bytes()), "{user}");
            assert!(!h.verify(b"pa:ss word"), "{user}: a wrong password");
            assert!(!h.verify(b""), "{user}: none");
        }
        assert!(users.get("mallory").is_none());
    }

    #[test]
    fn apr1_matches_apache() {
        // `htpasswd -nbm user secret` with its salt.
        assert_eq!(apr1(b"pa:ss w\xc3\xb6rd", b"Thr.YsdQ"), "eJzB/UpeuFpmhIJBAJpcJ.");
    }

    #[test]
    fn lines_pika_cannot_check_are_said_and_leave_their_user_out() {
        let text = "des:IoaWFYkqlHC4w\nplain:pa:ss\nnocolon\n:$apr1$x$y\nshort:$apr1$Thr.YsdQ$eJzB\n\
                    bc:$2y$05$short\nalice:$apr1$Thr.YsdQ$eJzB/UpeuFpmhIJBAJpcJ.\nalice:{SHA}cRQ3iPZN/cUFUyAxdC91S5hcXvA=\n";
        let (users, problems) = Users::parse(text);
        assert_eq!(users.len(), 1);
        let lines: Vec<(usize, bool)> = problems.iter().map(|p| (p.line, p.warning)).collect();
        assert_eq!(
            lines,
            [(1, false), (2, false), (3, false), (4, false), (5, false), (6, false), (8, true), (8, true)]
        );
        assert!(problems[0].what.contains("DES crypt"), "{:?}", problems[0]);
        assert!(problems[1].what.contains("plain text"), "{:?}", problems[1]);
        assert!(problems[7].what.contains("the first line counts"), "{:?}", problems[7]);
        assert!(users.get("alice").unwrap().verify("pa:ss wörd".as_bytes()), "the first alice");
        let (_, p) = Users::parse(&format!("long:{}\n", "x".repeat(MAX_LINE)));
        assert!(p[0].what.contains("longer than"));
    }
}
