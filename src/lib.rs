//! pika: a pre-forking HTTP/1.1 web server for Linux.
//!
//! The design in prose (the process model, the master's life, the worker's event
//! loop, TLS, the hand-over, the binary upgrade, logs) is `docs/design.md`; its
//! section 11 follows a process, a request and a signal through these modules one
//! by one. This map names the module for each part.
//!
//! # The map
//!
//! | module | what it is for | layer |
//! |---|---|---|
//! | [`base`] | every `unsafe` call ([`base::sys`]), formatting without `core::fmt`, the clock, address ranges, files opened safely as root, the master's dummy connection | 1 |
//! | [`http`] | the protocol's pure rules: parsing, paths, ranges, preconditions, the response head, forwarded clients, the PROXY header, which vhost a name picks | 2 |
//! | [`scoreboard`] | the shared memory master and workers count in: slots, counters, the failing logins, the proxy upstreams' state | 3 |
//! | [`keys`] | a config's keys read and written (`Ctx`, `Keys`, units, the TOML of `-T`), and the files it read, watched | 3 |
//! | [`tls`] | certificates by SNI, the rustls setup, the session-ticket keys, `-t`'s checks | 3 |
//! | [`log`] | the error log, access logs (formats, filters, held records), rotation | 3 |
//! | [`cluster`] | a fleet's shared storage (`[cluster]`): Redis with timeouts and a back-off, every value sealed under a key from `key_file`, lease locks, the node's root-only cache, what the workers show of it | 3 |
//! | [`acme`] | certificates from an ACME CA: schedule, state, the child that talks to the CA, challenges, expiry | 3 |
//! | [`status`] | the scoreboard as people read it: `?auto`, `?json`, the HTML page, the status file's lines | 3 |
//! | [`gateway`] | running programs: CGI meta-variables and children, FastCGI records, HTTP to an upstream and which upstream a try goes to, request bodies read by the event loop, the answer spool | 4 |
//! | [`exchange`] | a request as the rules and handlers see it ([`exchange::Ask`]), the methods a handler answers | 4 |
//! | [`rules`] | per-location rules: access, Basic auth, `return`, `rewrite`, headers, compression; the gate and the decor | 4 |
//! | [`kinds`] | what answers at a location, one room per kind (files, status, health, metrics, CGI, FastCGI, proxy, echo): keys, checks, `-T`, handler | 4 |
//! | [`location`] | what a `[[vhost.location]]` matches, and the table that picks one | 4 |
//! | [`config`] | the config file read whole and checked: `[server]`, `[workers]`, `[http]`, vhosts and their locations, logs, ACME | 5 |
//! | [`fork`] | what crosses the fork: listeners (bound or inherited), the pipe of death and doorbell, the hand-over socket | 5 |
//! | [`site`] | a vhost as a worker serves it: each location's gate, handler and decor, and the route to them | 6 |
//! | [`serve`] | the request cycle: a connection between requests, its transport (plain or [`serve::tls`]), one request's stages, delivery, the log record, and the tunnel a switched 101 becomes (`serve::relay`) | 6 |
//! | [`worker`] | a worker process: its start, its event loop, what it holds, which loop a client's connections belong to (`home`) | 7 |
//! | [`master`] | the master process: its life, the pool, signals, reloads, upgrades, reports, the pid and status files, bound workers' application processes bound beside them (`pairs`) | 7 |
//! | [`command`] | the `pika` command: its line, `-k` control, the start (foreground, daemon, `-X`), `-T` | 8 |
//!
//! # How a request travels
//!
//! A connection is accepted by one of its generation's event loops (the workers in
//! the lowest scoreboard slots, one per CPU; a spare above them stands by off the
//! listeners while they are free, listens while one waits on a program, and hands
//! back through them what it was lent meanwhile; a loop in a long round looks at the
//! listeners between its turns once programs have kept it 300 µs; a loop ahead of
//! its siblings by more than one client leaves new ones to them; a listener's event
//! takes the worker's share of the accept queue at once) →
//! [`worker`]'s event loop (each round's ready connections oldest turn first; after
//! its first answer a kept-alive connection goes to the loop of the CPU its packets
//! come in on, `worker::home`, and the loop runs on that CPU while it holds one) → [`serve::connection::Server::serve_ready`] (input over
//! a [`serve::transport::Transport`]) → `serve::cycle`: **read** ([`http::request`]) →
//! **route** ([`site::Site::pick`]: the vhost, the location, once) → **gate**
//! ([`rules::Gate`], the handler's [`exchange::Methods`]) → **answer**
//! ([`kinds::Handler`]; an internal redirect is a new route of the same request) →
//! **decorate** ([`rules::Decor`], error pages, HSTS) → **deliver**
//! ([`serve::transport`], what waits written as the client reads) → **finish** (the
//! scoreboard through [`serve::observer::Observer`], one access-log record,
//! [`log::access`]).
//!
//! # How a signal travels
//!
//! A signal sets a flag and writes to the self-pipe ([`master::signals`]) → the
//! master's loop acts: stop, reload (a new generation, old idle workers woken by
//! [`base::dummy`] connections), reopen logs (the epoch), or move the spare band.
//! Workers ignore the master's signals and die with TERM.
//!
//! # The layers
//!
//! From the bottom up. A module imports from its own layer and the layers below it,
//! but for the arrows listed after; `tests/modules.rs` reads these lists and checks
//! them against the code: no loop among the imports between modules (a parent that
//! declares a child and the child that uses its parent's items are a loop too), no
//! arrow between top-level modules up the layers but these, and no master-side
//! module importing the request side but to fork a worker.
//!
//! 1. foundations: `base`
//! 2. the protocol: `http`
//! 3. records and keys: `scoreboard`, `keys`, `tls`, `log`, `cluster`, `acme`, `status`
//! 4. what answers at a location: `gateway`, `exchange`, `rules`, `kinds`, `location`
//! 5. made before the first fork, used by both sides: `config`, `fork`
//! 6. serving: `site`, `serve`
//! 7. processes: `worker`, `master`
//! 8. the command: `command`
//!
//! Arrows that run back up: none.
//!
//! The sides: the master side is `master`, `command`; the request side is `worker`,
//! `serve`, `site`, `kinds`, `location`, `exchange`, `rules`, `gateway`; shared by
//! both: `base`, `http`, `scoreboard`, `keys`, `tls`, `log`, `cluster`, `acme`,
//! `status`, `config`, `fork`.
#![deny(unsafe_code)]

pub mod acme;
pub mod base;
pub mod cluster;
pub mod command;
pub mod config;
pub mod exchange;
pub mod fork;
pub mod gateway;
pub mod http;
pub mod keys;
pub mod kinds;
pub mod location;
pub mod log;
pub mod master;
pub mod rules;
pub mod scoreboard;
pub mod serve;
pub mod site;
pub mod status;
pub mod tls;
pub mod worker;
