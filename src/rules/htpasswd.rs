//! htpasswd files as Debian's `htpasswd` (apache2-utils) writes them: one `user:hash`
//! a line, the hash one of bcrypt (`-B`, `$2y$`), SHA-512 and SHA-256 crypt (`-5`,
//! `-2`: `$6$`, `$5$`), Apache's MD5 (the default, `$apr1$`) or unsalted SHA-1 (`-s`,
//! `{SHA}`: accepted, and said by `pika -t` as weak). DES crypt (`-d`) and plain text
//! (`-p`) are refused: a line with them is said and its user cannot log in.
//!
//! A bcrypt hash costs 2^cost rounds to check, and each wrong guess holds a worker
//! that long: a cost above [`BCRYPT_WARN_COST`] is said by `pika -t`, and one above
//! [`BCRYPT_MAX_COST`] (htpasswd's own maximum) refused like DES. A SHA crypt hash
//! costs its `rounds=` (5000 when it names none, `htpasswd -r`) the same way: above
//! [`SHA_ROUNDS_WARN`] said, above [`SHA_ROUNDS_MAX`] refused.
//!
//! Parsing is pure ([`Users::parse`]); who reads the file, and when again, is the
//! config's business (`rules::basic`).

use std::collections::HashMap;

use md5::{Digest, Md5};
use sha_crypt::PasswordVerifier;

/// Longest line read: a bcrypt line is about 70 bytes, a SHA-512 one about 120.
const MAX_LINE: usize = 1024;

/// The highest bcrypt cost `pika -t` takes without a word: 2^12 rounds, a quarter of
/// a second of a worker's time for each check (htpasswd's default, 5, takes about
/// 2 ms). Above, every wrong guess holds a worker that long or more.
pub const BCRYPT_WARN_COST: u32 = 12;

/// The highest bcrypt cost checked at all: htpasswd's own maximum (`-C 17`, about
/// 8 s a check). Above it a single guess holds a worker for minutes to days (cost
/// 31: 2^31 rounds) until the watchdog kills it, so the user cannot log in.
pub const BCRYPT_MAX_COST: u32 = 17;

/// The most rounds of a SHA crypt hash `pika -t` takes without a word: about a
/// quarter of a second of a worker for each check of a `$6$` hash, as
/// [`BCRYPT_WARN_COST`] (htpasswd's default, 5000, takes about a millisecond).
pub const SHA_ROUNDS_WARN: u64 = 1_000_000;

/// The most rounds of a SHA crypt hash checked at all: about as long a check of a
/// `$6$` hash as bcrypt's [`BCRYPT_MAX_COST`] (7 s). The format allows 999,999,999,
/// minutes of a worker for each guess.
pub const SHA_ROUNDS_MAX: u64 = 30_000_000;

/// Rounds checked in a millisecond: `$5$` (SHA-256, which the CPU's SHA
/// instructions speed up) and `$6$` (SHA-512); measured here (bcrypt at cost 12
/// took 235 ms on the same machine).
const SHA_ROUNDS_PER_MS: [u64; 2] = [15_000, 4_500];

/// Why a SHA crypt hash past [`SHA_ROUNDS_MAX`] is refused.
const SHA_ROUNDS_REFUSED: &str = "SHA crypt rounds above 30000000: each check would hold a worker for seconds or \
                                  more; make it again with htpasswd -5 -r 1000000 or less";

/// The rounds of a SHA crypt hash that names none.
const SHA_ROUNDS_DEFAULT: u64 = 5000;

/// The lowest cost bcrypt has.
const BCRYPT_MIN_COST: u32 = 4;

/// Salt and hash of a bcrypt hash of a random password nobody knows: with the cost of
/// a file's users in front, the decoy a user the file does not name is checked
/// against ([`Users::decoy`]).
const BCRYPT_DECOY: &str = "XhzrUx.UwiBVAUBwl1B/jOgdZdRIGL9v0XE8hKKKdLqo5ZKL84eT6";

/// The salt a decoy of the other crypt hashes has.
const DECOY_SALT: &str = "pikadecoy";

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
            let cost = text.get(4..6).and_then(|c| c.parse::<u32>().ok());
            if text.len() != 60 || text.as_bytes()[6] != b'$' || cost.is_none_or(|c| c < BCRYPT_MIN_COST) {
                return Err("a malformed bcrypt hash");
            }
            if cost.is_some_and(|c| c > BCRYPT_MAX_COST) {
                return Err(
                    "a bcrypt cost above 17 (htpasswd's maximum): each check would hold a worker for minutes or \
                     more; make it again with htpasswd -B -C 12 or less",
                );
            }
            return Ok(Hash::Bcrypt(text.into()));
        }
        if text.starts_with("$5$") || text.starts_with("$6$") {
            if text.split('$').count() < 4 {
                return Err("a malformed SHA crypt hash");
            }
            let hash = Hash::ShaCrypt(text.into());
            return match hash.sha_rounds() {
                None => Err("a malformed SHA crypt hash (its rounds= is not a number)"),
                Some(r) if r > SHA_ROUNDS_MAX => Err(SHA_ROUNDS_REFUSED),
                Some(_) => Ok(hash),
            };
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

    /// A bcrypt hash's cost (2^cost rounds a check).
    pub fn bcrypt_cost(&self) -> Option<u32> {
        match self {
            Hash::Bcrypt(h) => h.get(4..6)?.parse().ok(),
            _ => None,
        }
    }

    /// A SHA crypt hash's rounds (`rounds=N`, else 5000); `None` for another kind, or
    /// a `rounds=` that is not a number.
    pub fn sha_rounds(&self) -> Option<u64> {
        let Hash::ShaCrypt(h) = self else { return None };
        match h.split('$').nth(2).and_then(|f| f.strip_prefix("rounds=")) {
            Some(n) => n.parse().ok(),
            None => Some(SHA_ROUNDS_DEFAULT),
        }
    }

    /// What costs as much to check as this hash: its kind, cost and rounds with a
    /// salt of pika's own (a password nobody knows).
    fn decoy(&self) -> Hash {
        match self {
            Hash::Bcrypt(h) => Hash::Bcrypt(format!("{}{BCRYPT_DECOY}", &h[..7])),
            Hash::ShaCrypt(h) => {
                // `$6$[rounds=N$]salt$hash`: the salt is the next to last field.
                let mut fields: Vec<&str> = h.split('$').collect();
                let salt = fields.len() - 2;
                fields[salt] = DECOY_SALT;
                Hash::ShaCrypt(fields.join("$"))
            }
            Hash::Apr1 { hash, .. } => Hash::Apr1 { salt: DECOY_SALT[..8].into(), hash: hash.clone() },
            Hash::Sha1(_) => Hash::Sha1([0; 20]),
        }
    }

    /// What makes checks of hashes alike cost alike: the kind, and a cost or
    /// rounds if the hash has them.
    fn shape(&self) -> &str {
        match self {
            Hash::Bcrypt(h) => &h[4..6],
            Hash::ShaCrypt(h) => h.rsplitn(3, '$').nth(2).unwrap_or(h),
            Hash::Apr1 { .. } => "$apr1$",
            Hash::Sha1(_) => "{SHA}",
        }
    }
}

/// The users of one file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Users {
    users: HashMap<String, Hash>,
    /// What a user the file does not name is checked against.
    decoy: Option<Hash>,
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
        // The hashes' shapes in the order first seen, with how many have each.
        let mut shapes: Vec<(Hash, usize)> = Vec::new();
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
                    if let Some(cost) = h.bcrypt_cost().filter(|&c| c > BCRYPT_WARN_COST) {
                        let ms = 2u64 << (cost - 5);
                        problem(
                            format!(
                                "user {user:?}: bcrypt cost {cost}: every check, a wrong guess too, holds a worker \
                                 about {ms} ms; {BCRYPT_WARN_COST} or less is enough (htpasswd -B -C)"
                            ),
                            true,
                        );
                    }
                    if let Some(rounds) = h.sha_rounds().filter(|&r| r > SHA_ROUNDS_WARN) {
                        problem(
                            format!(
                                "user {user:?}: SHA crypt with {rounds} rounds: every check, a wrong guess too, holds a \
                                 worker about {} ms; {SHA_ROUNDS_WARN} or less is enough (htpasswd -r)",
                                rounds / SHA_ROUNDS_PER_MS[usize::from(hash.starts_with("$6$"))]
                            ),
                            true,
                        );
                    }
                    if users.contains_key(user) {
                        problem(format!("user {user:?} again: the first line counts"), true);
                    } else {
                        match shapes.iter_mut().find(|(s, _)| s.shape() == h.shape()) {
                            Some((_, n)) => *n += 1,
                            None => shapes.push((h.clone(), 1)),
                        }
                        users.insert(user.to_string(), h);
                    }
                }
                Err(why) => problem(format!("user {user:?}: {why}; this user cannot log in"), false),
            }
        }
        // The most common shape (the first of those as common).
        let typical = shapes.iter().rev().max_by_key(|(_, n)| *n).map(|(h, _)| h.decoy());
        (Users { users, decoy: typical }, problems)
    }

    pub fn get(&self, user: &str) -> Option<&Hash> {
        self.users.get(user)
    }

    /// A hash made like most of the file's (bcrypt of the same cost, say) with a
    /// password nobody knows: checked for a user the file does not name, so that a
    /// wrong password takes as long whether the user exists or not. `None` for a
    /// file with no user.
    pub fn decoy(&self) -> Option<&Hash> {
        self.decoy.as_ref()
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

    #[test]
    fn a_decoy_is_made_like_the_files_hashes_and_really_checked() {
        let (users, _) = Users::parse(FILE);
        for user in ["alice", "bob", "carol", "dave", "erin"] {
            let h = users.get(user).unwrap();
            let d = h.decoy();
            assert_eq!(d.shape(), h.shape(), "{user}");
            assert!(!d.verify("pa:ss wörd".as_bytes()), "{user}: nobody's password");
            // Checked in full: a malformed decoy would be refused before any work.
            match &d {
                Hash::Bcrypt(t) => assert_eq!(bcrypt::verify(b"x", t).ok(), Some(false)),
                Hash::ShaCrypt(t) => assert_eq!(
                    sha_crypt::ShaCrypt::default().verify_password(b"x", t.as_str()),
                    Err(sha_crypt::password_hash::Error::PasswordInvalid),
                    "{t}"
                ),
                _ => {}
            }
        }
        let rounds =
            Hash::ShaCrypt("$5$rounds=6000$G6PGBkzOVoamx.ZF$Kk2KrY5/WRqRVkmVm3KbgqWEC/iTvv0eJg..wJ/iq62".into());
        assert_eq!(
            rounds.decoy(),
            Hash::ShaCrypt(format!("$5$rounds=6000${DECOY_SALT}$Kk2KrY5/WRqRVkmVm3KbgqWEC/iTvv0eJg..wJ/iq62"))
        );
        // The file's most common kind and cost: bcrypt at cost 10 here.
        let text = "a:$2y$10$7Is7CzbF9wp5XxlPjgXMfeo7XSfer0mDeZZ9ALiyvuKXBwqa7Zouy\n\
                    b:$apr1$Thr.YsdQ$eJzB/UpeuFpmhIJBAJpcJ.\n\
                    c:$2y$10$7Is7CzbF9wp5XxlPjgXMfeo7XSfer0mDeZZ9ALiyvuKXBwqa7Zouy\n";
        let (users, _) = Users::parse(text);
        assert_eq!(users.decoy(), Some(&Hash::Bcrypt(format!("$2y$10${BCRYPT_DECOY}"))));
        assert_eq!(Users::parse("").0.decoy(), None);
    }

    #[test]
    fn a_costly_bcrypt_hash_is_said_and_one_past_htpasswds_maximum_refused() {
        let tail = "$7Is7CzbF9wp5XxlPjgXMfeo7XSfer0mDeZZ9ALiyvuKXBwqa7Zouy";
        let line = |user: &str, cost: u32| format!("{user}:$2y${cost:02}{tail}\n");
        let text = [line("fine", 12), line("slow", 13), line("max", 17), line("huge", 31), line("tiny", 3)].concat();
        let (users, problems) = Users::parse(&text);
        assert!(users.get("fine").is_some() && users.get("slow").is_some() && users.get("max").is_some());
        assert!(users.get("huge").is_none() && users.get("tiny").is_none());
        let said: Vec<(usize, bool)> = problems.iter().map(|p| (p.line, p.warning)).collect();
        assert_eq!(said, [(2, true), (3, true), (4, false), (5, false)], "{problems:?}");
        assert!(problems[0].what.contains("bcrypt cost 13") && problems[0].what.contains("512 ms"), "{problems:?}");
        assert!(problems[2].what.contains("above 17") && problems[2].what.contains("cannot log in"), "{problems:?}");
        assert!(problems[3].what.contains("malformed"), "{problems:?}");
    }

    #[test]
    fn a_costly_sha_crypt_hash_is_said_and_one_past_the_maximum_refused() {
        let tail = "$lVdAhOha9RHSr/dz$m9O24VtBxVOJ..z1bT07Ta8fG3tlUe7XSBPwHxBvli/";
        let line = |user: &str, rounds: &str| format!("{user}:$5${rounds}{tail}\n");
        let text = [
            line("default", ""),
            line("fine", "rounds=1000000$"),
            line("slow", "rounds=2000000$"),
            line("huge", "rounds=999999999$"),
            line("odd", "rounds=many$"),
        ]
        .concat();
        let (users, problems) = Users::parse(&text);
        assert_eq!(users.get("default").and_then(Hash::sha_rounds), Some(5000));
        assert_eq!(users.get("fine").and_then(Hash::sha_rounds), Some(1_000_000));
        assert!(users.get("slow").is_some() && users.get("huge").is_none() && users.get("odd").is_none());
        let said: Vec<(usize, bool)> = problems.iter().map(|p| (p.line, p.warning)).collect();
        assert_eq!(said, [(3, true), (4, false), (5, false)], "{problems:?}");
        assert!(problems[0].what.contains("2000000 rounds") && problems[0].what.contains("133 ms"), "{problems:?}");
        assert!(
            problems[1].what.contains("above 30000000") && problems[1].what.contains("cannot log in"),
            "{problems:?}"
        );
        assert!(problems[2].what.contains("malformed"), "{problems:?}");
        // Checked as a SHA crypt hash: the rounds it names.
        let h = Hash::parse("$5$rounds=100000$lVdAhOha9RHSr/dz$m9O24VtBxVOJ..z1bT07Ta8fG3tlUe7XSBPwHxBvli/").unwrap();
        assert!(h.verify(b"x") && !h.verify(b"y"));
    }
}
