//! Which of a proxy location's upstream servers a request goes to (`proxy = [...]`,
//! `proxy_backup`, `proxy_balance`), and what a failed try does to that server
//! (`proxy_max_fails` in `proxy_fail_timeout`: nginx's passive health checks). The
//! counts it decides by are the whole pool's ([`crate::scoreboard::upstreams`]): the
//! turn of round robin is one for all workers, least connections sees the
//! connections every worker holds, and an upstream marked down is down for all.
//!
//! The choice itself is a pure function of the upstreams' states ([`pick`]): the
//! primaries that are up, by turn or by fewest connections; the backups only while
//! no primary is up; and when every one is down, the first try of a request goes to
//! the one back soonest (a probe, as a single upstream is always tried: refusing
//! without a try helps no one), while a retry never goes to one marked down.

use std::time::Duration;

use crate::scoreboard::upstreams::{Entry, Failure, InUse, UpstreamTable};

/// How a request's upstream is chosen among those that are up (`proxy_balance`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Balance {
    /// In turn (nginx's default, its `round_robin` module).
    #[default]
    RoundRobin,
    /// The one with the fewest connections in use, in turn among equals (nginx's
    /// `least_conn`): for answers of uneven length, such as a sync worker's.
    LeastConn,
}

impl Balance {
    pub const NAMES: [&str; 2] = ["round_robin", "least_conn"];

    pub fn parse(s: &str) -> Option<Balance> {
        match s {
            "round_robin" => Some(Balance::RoundRobin),
            "least_conn" => Some(Balance::LeastConn),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Balance::RoundRobin => "round_robin",
            Balance::LeastConn => "least_conn",
        }
    }
}

/// One upstream as [`pick`] sees it.
#[derive(Debug, Clone, Copy, Default)]
pub struct Candidate {
    pub backup: bool,
    /// 0: up; else down until this monotonic millisecond (on probation once past).
    pub down_until: u64,
    /// Connections the pool uses to it now.
    pub active: u64,
    /// This request tried it already.
    pub tried: bool,
}

/// The upstream the next try of a request goes to, at `now_ms`, on the pool's
/// `turn`; `None` when no untried one may be tried (see the module's words).
pub fn pick(balance: Balance, turn: u64, now_ms: u64, all: &[Candidate]) -> Option<usize> {
    let live = |backup: bool| -> Vec<usize> {
        (0..all.len()).filter(|&i| all[i].backup == backup && !all[i].tried && all[i].down_until <= now_ms).collect()
    };
    let mut set = live(false);
    if set.is_empty() {
        set = live(true);
    }
    if set.is_empty() {
        // All down: only a request's first try probes, the one back soonest.
        if all.iter().any(|c| c.tried) {
            return None;
        }
        return (0..all.len()).min_by_key(|&i| (all[i].down_until, all[i].backup));
    }
    if balance == Balance::LeastConn {
        let fewest = set.iter().map(|&i| all[i].active).min().unwrap_or(0);
        set.retain(|&i| all[i].active == fewest);
    }
    Some(set[(turn % set.len() as u64) as usize])
}

/// `proxy_max_fails` failed tries within `proxy_fail_timeout` mark an upstream down
/// for `proxy_fail_timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Health {
    /// 0: never marked down.
    pub max_fails: u32,
    pub fail_timeout: Duration,
}

/// `proxy_max_fails` when unset: nginx's 1.
pub const MAX_FAILS: u32 = 1;

/// `proxy_fail_timeout` when unset: nginx's 10 seconds.
pub const FAIL_TIMEOUT: Duration = Duration::from_secs(10);

/// A location's upstreams in one worker: their entries in the pool's table
/// (primaries, then backups) and the list's turn.
pub struct Chooser {
    table: UpstreamTable,
    balance: Balance,
    health: Health,
    entries: Vec<&'static Entry>,
    /// Where the backups start in `entries`.
    backups: usize,
    turn: &'static Entry,
}

impl Chooser {
    /// For the upstreams named `primaries` and `backups`.
    pub fn new(
        table: &UpstreamTable,
        primaries: &[String],
        backups: &[String],
        balance: Balance,
        health: Health,
    ) -> Chooser {
        let entries: Vec<&'static Entry> = primaries.iter().chain(backups).map(|n| table.entry_or_own(n)).collect();
        // The list's turn, one for the pool (two locations with the same list share
        // it); a lone upstream takes no turn, and no entry for one.
        let turn = match &entries[..] {
            [one] => one,
            _ => table.entry_or_own(&format!("turn of {}", primaries.join(" "))),
        };
        Chooser { table: *table, balance, health, entries, backups: primaries.len(), turn }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The upstream a request's next try goes to, `tried` being those it tried.
    pub fn choose(&self, tried: &[bool]) -> Option<usize> {
        let all: Vec<Candidate> = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, e)| Candidate {
                backup: i >= self.backups,
                down_until: e.down_until(),
                active: e.active(),
                tried: tried.get(i).copied().unwrap_or(false),
            })
            .collect();
        // One upstream: no turn to take (a write to shared memory saved).
        let turn = if all.len() > 1 { self.turn.next_turn() } else { 0 };
        pick(self.balance, turn, crate::base::clock::now_ms(), &all)
    }

    /// Upstream `i`'s entry: its connections and answers are counted there.
    pub fn entry(&self, i: usize) -> &'static Entry {
        self.entries[i]
    }

    /// A connection to upstream `i` in use by this worker, counted for the pool
    /// while the value lives.
    pub fn in_use(&self, i: usize) -> InUse {
        self.table.in_use_here(self.entries[i])
    }

    /// A try of upstream `i` failed.
    pub fn failed(&self, i: usize) -> Failure {
        let window = u64::try_from(self.health.fail_timeout.as_millis()).unwrap_or(u64::MAX);
        self.entries[i].failed(crate::base::clock::now_ms(), self.health.max_fails, window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(active: u64) -> Candidate {
        Candidate { active, ..Candidate::default() }
    }

    #[test]
    fn round_robin_takes_turns_among_those_up() {
        let all = [up(0), up(0), up(0)];
        let picks: Vec<_> = (0..6).map(|t| pick(Balance::RoundRobin, t, 100, &all).unwrap()).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
        let mut all = all;
        all[1].down_until = 200;
        let picks: Vec<_> = (0..4).map(|t| pick(Balance::RoundRobin, t, 100, &all).unwrap()).collect();
        assert_eq!(picks, [0, 2, 0, 2], "one down is skipped");
        assert_eq!(pick(Balance::RoundRobin, 1, 300, &all), Some(1), "on probation once its time is past");
    }

    #[test]
    fn least_conn_prefers_the_idlest_in_turn_among_equals() {
        let all = [up(3), up(1), up(1), up(2)];
        let picks: Vec<_> = (0..4).map(|t| pick(Balance::LeastConn, t, 0, &all).unwrap()).collect();
        assert_eq!(picks, [1, 2, 1, 2]);
        let mut all = all;
        all[1].down_until = 50;
        all[2].tried = true;
        assert_eq!(pick(Balance::LeastConn, 0, 0, &all), Some(3), "neither down nor tried");
    }

    #[test]
    fn backups_only_while_no_primary_is_up() {
        let backup = Candidate { backup: true, ..Candidate::default() };
        let mut all = [up(5), up(5), backup];
        assert_eq!(pick(Balance::LeastConn, 0, 0, &all), Some(0), "busier, but a primary");
        all[0].down_until = 100;
        assert_eq!(pick(Balance::RoundRobin, 0, 0, &all), Some(1));
        all[1].tried = true;
        assert_eq!(pick(Balance::RoundRobin, 0, 0, &all), Some(2), "the other primary down, this one failed");
        all[1].tried = false;
        all[1].down_until = 100;
        assert_eq!(pick(Balance::RoundRobin, 7, 0, &all), Some(2));
        all[1].down_until = 900;
        assert_eq!(pick(Balance::RoundRobin, 7, 100, &all), Some(0), "a primary back: the backup left");
    }

    #[test]
    fn all_down_the_first_try_probes_the_one_back_soonest_and_retries_stop() {
        let mut all = [up(0), up(0), Candidate { backup: true, ..Candidate::default() }];
        all[0].down_until = 300;
        all[1].down_until = 200;
        all[2].down_until = 200;
        assert_eq!(pick(Balance::RoundRobin, 0, 100, &all), Some(1), "a primary before a backup");
        all[1].tried = true;
        assert_eq!(pick(Balance::RoundRobin, 0, 100, &all), None);
        let one = [Candidate { down_until: 500, ..up(0) }];
        assert_eq!(pick(Balance::RoundRobin, 0, 100, &one), Some(0), "a single upstream is always tried");
    }

    #[test]
    fn a_chooser_counts_in_the_shared_table() {
        let table = UpstreamTable::map(1).unwrap();
        let names = ["http://a:1".to_string(), "http://b:1".to_string()];
        let health = Health { max_fails: 2, fail_timeout: Duration::from_secs(60) };
        let rr = Chooser::new(&table, &names, &[], Balance::RoundRobin, health);
        let again = Chooser::new(&table, &names, &[], Balance::RoundRobin, health);
        // Two choosers of one list (two workers) take one turn between them.
        let picks = [rr.choose(&[]), again.choose(&[]), rr.choose(&[]), again.choose(&[])];
        assert_eq!(picks, [Some(0), Some(1), Some(0), Some(1)]);
        let lc = Chooser::new(&table, &names, &[], Balance::LeastConn, health);
        let busy = rr.in_use(0);
        assert_eq!((lc.choose(&[]), lc.choose(&[])), (Some(1), Some(1)), "another chooser sees the connection");
        drop(busy);
        assert_eq!(table.find("http://a:1").unwrap().active(), 0);
        assert_eq!(again.failed(1), Failure::Counted(1));
        assert!(matches!(rr.failed(1), Failure::MarkedDown(2)), "the failures of every worker count");
        assert_eq!((lc.choose(&[]), rr.choose(&[]), rr.choose(&[true, false])), (Some(0), Some(0), None));
        let lone = Chooser::new(&table, &names[1..], &[], Balance::RoundRobin, health);
        assert_eq!(lone.choose(&[]), Some(0), "a lone upstream is tried though down");
    }

    #[test]
    fn balance_names() {
        for name in Balance::NAMES {
            assert_eq!(Balance::parse(name).unwrap().name(), name);
        }
        assert_eq!(Balance::parse("random"), None);
    }
}
