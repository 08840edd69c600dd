//! `allow` / `deny`: who may ask at a location, by the client's address (the real
//! client: a PROXY header's or a trusted forwarder's, else the peer).
//!
//! The two lists are one list of rules in the order the config writes them (the key
//! written first is tried first), and the first rule that matches the client decides,
//! as nginx's `allow`/`deny` do. When none matches, the client may ask unless the
//! location has an `allow` list: a list of who may ask shuts out everyone else
//! without a `deny = ["all"]` after it (as `[status] allow` does), while a `deny`
//! list alone shuts out only those it names. With a password asked too and
//! `satisfy = "any"`, only an `allow` rule that matches the client stands for the
//! password ([`Access::allows_by_rule`]): not being denied does not.

use std::net::IpAddr;

use crate::base::cidr::Cidr;
use crate::keys::read::{ConfigError, Ctx, Keys};
use crate::keys::write::{Toml, string};

/// What a rule matches: every client, or a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    All,
    Range(Cidr),
}

impl Who {
    /// An entry as the config writes it: `"all"`, `"10.0.0.0/8"`, `"::1"`.
    pub fn parse(s: &str) -> Option<Who> {
        if s.trim() == "all" { Some(Who::All) } else { Cidr::parse(s).map(Who::Range) }
    }

    fn matches(&self, ip: IpAddr) -> bool {
        match self {
            Who::All => true,
            Who::Range(c) => c.contains(ip),
        }
    }
}

impl std::fmt::Display for Who {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Who::All => f.write_str("all"),
            Who::Range(c) => c.fmt(f),
        }
    }
}

/// A location's address rules, in the order they are tried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// (allowed, who).
    rules: Vec<(bool, Who)>,
    /// What a client no rule matches gets: true unless there is an `allow` list.
    otherwise: bool,
}

/// No rule: every client may ask.
impl Default for Access {
    fn default() -> Access {
        Access { rules: Vec::new(), otherwise: true }
    }
}

impl Access {
    /// The rules from `allow` and `deny`; `allow_first`: the `allow` key is written
    /// before the `deny` key.
    pub fn new(allow: &[Who], deny: &[Who], allow_first: bool) -> Access {
        let allow = allow.iter().map(|w| (true, *w));
        let deny = deny.iter().map(|w| (false, *w));
        let rules: Vec<(bool, Who)> =
            if allow_first { allow.chain(deny).collect() } else { deny.chain(allow).collect() };
        let otherwise = !rules.iter().any(|(allowed, _)| *allowed);
        Access { rules, otherwise }
    }

    /// No rule: every client may ask (and nothing is checked).
    pub fn is_open(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether `ip` may ask.
    #[inline]
    pub fn allows(&self, ip: IpAddr) -> bool {
        self.rules.iter().find(|(_, w)| w.matches(ip)).map_or(self.otherwise, |(allowed, _)| *allowed)
    }

    /// Whether an `allow` rule lets `ip` ask: the first rule that matches it is one.
    /// What `satisfy = "any"` takes instead of a password (a client no rule names
    /// may ask when there is no `allow` list, but no rule let it in).
    pub fn allows_by_rule(&self, ip: IpAddr) -> bool {
        self.rules.iter().find(|(_, w)| w.matches(ip)).is_some_and(|(allowed, _)| *allowed)
    }

    /// The lists as `-T` shows them, in the order they are tried.
    pub fn rules(&self) -> impl Iterator<Item = (bool, &Who)> {
        self.rules.iter().map(|(a, w)| (*a, w))
    }
}

/// The key of the list of who may ask.
pub const ALLOW: &str = "allow";
/// The key of the list of who may not.
pub const DENY: &str = "deny";

/// The address rules of a location's or a vhost's table, if it sets any: `allow`
/// and `deny`, tried in the order they are written.
pub(crate) fn read(keys: &mut Keys, ctx: &Ctx) -> Result<Option<Access>, ConfigError> {
    let list = |keys: &mut Keys, key: &str| -> Result<Option<(usize, Vec<Who>)>, ConfigError> {
        let Some(list) = keys.take::<Vec<String>>(ctx, key)? else { return Ok(None) };
        let who = list
            .get_ref()
            .iter()
            .map(|a| {
                Who::parse(a).ok_or_else(|| {
                    ctx.spanned(&list, format!("{key}: {a:?} is not \"all\", an address or a CIDR range"))
                })
            })
            .collect::<Result<Vec<Who>, _>>()?;
        Ok(Some((list.span().start, who)))
    };
    match (list(keys, ALLOW)?, list(keys, DENY)?) {
        (None, None) => Ok(None),
        (allow, deny) => {
            let allow_first = match (&allow, &deny) {
                (Some((a, _)), Some((d, _))) => a < d,
                _ => true,
            };
            let (allow, deny) = (allow.map(|a| a.1).unwrap_or_default(), deny.map(|d| d.1).unwrap_or_default());
            Ok(Some(Access::new(&allow, &deny, allow_first)))
        }
    }
}

/// Its keys for `pika -T`, as written: the two lists in the order they are tried.
pub(crate) fn show(access: &Access, t: &mut Toml) {
    let mut order: Vec<bool> = Vec::new();
    for (allowed, _) in access.rules() {
        if !order.contains(&allowed) {
            order.push(allowed);
        }
    }
    for allowed in order {
        let list = access.rules().filter(|(a, _)| *a == allowed).map(|(_, w)| string(&w.to_string()));
        t.key(if allowed { ALLOW } else { DENY }, toml::Value::Array(list.collect()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(list: &[&str]) -> Vec<Who> {
        list.iter().map(|s| Who::parse(s).unwrap()).collect()
    }
    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_first_rule_that_matches_decides() {
        // nginx's classic: one host out of a network, the network in, the rest out
        // (an allow list shuts out whom it does not name).
        let a = Access::new(&who(&["10.0.0.0/8"]), &who(&["10.1.2.3"]), false);
        assert!(!a.allows(ip("10.1.2.3")), "denied first");
        assert!(a.allows(ip("10.9.9.9")));
        assert!(!a.allows(ip("192.0.2.1")), "not allowed");
        // A deny list with `all` first leaves nothing to the allow list.
        let a = Access::new(&who(&["10.0.0.0/8"]), &who(&["all"]), false);
        assert!(!a.allows(ip("10.9.9.9")));
        // Written the other way round, the allow list is tried first.
        let a = Access::new(&who(&["10.0.0.0/8"]), &who(&["10.1.2.3", "all"]), true);
        assert!(a.allows(ip("10.1.2.3")));
        assert!(!a.allows(ip("192.0.2.1")));
    }

    #[test]
    fn an_allow_list_shuts_out_the_rest_and_a_deny_list_only_whom_it_names() {
        let a = Access::new(&who(&["127.0.0.1", "::1"]), &[], true);
        assert!(a.allows(ip("127.0.0.1")) && a.allows(ip("::1")) && a.allows(ip("::ffff:127.0.0.1")));
        assert!(!a.allows(ip("127.0.0.2")));
        let d = Access::new(&[], &who(&["192.0.2.0/24"]), true);
        assert!(!d.allows(ip("192.0.2.7")) && d.allows(ip("198.51.100.1")));
        assert!(!Access::new(&[], &who(&["all"]), true).allows(ip("::1")));
        let open = Access::default();
        assert!(open.is_open() && open.allows(ip("192.0.2.1")));
    }

    #[test]
    fn only_an_allow_rule_that_matches_lets_a_client_in_by_rule() {
        let d = Access::new(&[], &who(&["192.0.2.0/24"]), true);
        assert!(d.allows(ip("198.51.100.1")) && !d.allows_by_rule(ip("198.51.100.1")), "not denied is not allowed");
        assert!(!d.allows_by_rule(ip("192.0.2.7")));
        let a = Access::new(&who(&["10.0.0.0/8", "all"]), &who(&["10.1.2.3"]), false);
        assert!(a.allows_by_rule(ip("10.9.9.9")) && a.allows_by_rule(ip("192.0.2.1")), "allow all is a rule");
        assert!(!a.allows_by_rule(ip("10.1.2.3")), "denied first");
        assert!(!Access::default().allows_by_rule(ip("192.0.2.1")));
    }

    #[test]
    fn entries_parse_and_show_as_written() {
        assert_eq!(Who::parse("all"), Some(Who::All));
        assert_eq!(Who::parse("10.0.0.0/33"), None);
        assert_eq!(Who::parse("everyone"), None);
        let a = Access::new(&who(&["10.0.0.0/8"]), &who(&["all"]), true);
        let shown: Vec<String> = a.rules().map(|(al, w)| format!("{al} {w}")).collect();
        assert_eq!(shown, ["true 10.0.0.0/8", "false all"]);
    }
}
