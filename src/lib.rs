//! pika: a pre-forking HTTP/1.1 web server for Linux.
//!
//! The design as a whole (the process model, the master's life, the worker's event
//! loop, TLS, the hand-over, the binary upgrade, logs) is `docs/design.md`; this map
//! names the module for each part.
//!
//! # The map
//!
//! Processes and their modules:
//!
//! - `main.rs` → [`cli`] parses the command line, then one of: [`config`] (`-t`; `-T`
//!   prints the effective config through [`config::show`]; `include` files are read by
//!   the config too),
//!   [`ctl`] (`-k …`: signals the master found through [`pidfile`], waits on the
//!   status file, [`statusfile`]), [`daemon`] (start in the foreground `-F`, as a
//!   daemon that reports its start on a pipe ([`master::ready`]), or in one process
//!   `-X`).
//! - [`master`] is the master process: binds the listeners ([`listen`]), maps the
//!   [`scoreboard`], installs the signal handlers ([`master::signals`]), forks workers,
//!   and runs one loop: wait for a signal, the doorbell or the one-second tick → act on
//!   signals → reap (what an exit means, and whether the slot gets a new worker at
//!   once: [`master::maintenance::on_exit`], [`master::maintenance::respawn_at_once`])
//!   → on the tick, move the master's life on (`master::life`) → spare-worker
//!   maintenance (`master::pool`, deciding with [`master::maintenance`], pure
//!   functions of the idle count and the listen queue) → wake the idle workers that
//!   must go and stop stuck ones (TERM, then KILL; `master::retire`) → rotate logs
//!   ([`log::rotate::Schedule`]) → report (`master::report`: the status file,
//!   [`statusfile`], and systemd's `STATUS=`). Between ticks it looks at the pool
//!   every 50 ms while short of idle workers, and at once when a worker rings its
//!   [`pod::Doorbell`]. Its life is one value (`master::life::Life`): serving,
//!   paused (WINCH), draining (QUIT with `server.drain_time`: health locations answer
//!   503 while all else is served, so a balancer takes the node out before it stops
//!   accepting), stopping gracefully or fast, or superseded by an upgrade; the stops
//!   and every other move between phases are in `master::life`, and all it tells
//!   systemd ([`notify`]: start, reloads, stops, the pool's counts, a new main pid),
//!   the status file and the launching command ([`master::ready`]) is said from
//!   `master::report`. Listeners given to it ([`inherit`]: by the old master of a
//!   binary upgrade, or by systemd's socket activation; read once at the start of
//!   `main`) are used instead of bound. USR2 runs the binary upgrade
//!   (`master::upgrade`: a new master on the same sockets; the old one is superseded
//!   once it serves, or takes its pid file back if it fails); HUP and USR1 are
//!   `master::reload` (the new config checked in full before anything changes). It
//!   never serves a request, and no master-side module imports the request side
//!   (below, The layers), but for the fork itself (`master` → [`worker`], and
//!   `daemon` → `worker` for `-X`).
//! - [`worker`] is a worker process after `fork`: resets signals, closes the master's
//!   descriptors it does not use, moves to `SCHED_BATCH`, drops privileges, turns
//!   itself undumpable (unless `coredump_dir`), then asks to die with the master (after the drop,
//!   which would clear that request; an idle worker also retires when the pipe of
//!   death reads end of file), then runs its event loop (`worker::events`; what it holds between requests:
//!   `worker::parked`; design and measurements in `docs/keepalive.md`): one `epoll` set holds the listeners
//!   (`EPOLLEXCLUSIVE`: a new connection wakes one sleeping worker), the
//!   [`handover`] socket and every connection the worker holds between requests; it
//!   serves whichever has a whole request head, one request at a time, then parks the
//!   connection again. No write waits on a client: sockets are non-blocking from the
//!   accept, and an answer the socket does not take whole waits in the set too, watched
//!   for room, and is written as the client reads, between the worker's other turns
//!   (`serve::unsent`). An idle kept-alive connection or a client that stops reading
//!   costs no worker; a worker holding `workers.max_connections` (answers being
//!   written among them) takes no new ones. After an
//!   accept it rings the master's doorbell if fewer than `min_spare` others stay
//!   idle. Once a second it also accepts whatever waits on the listeners (a wake-up
//!   may have gone to a worker that was just killed). It looks at the pipe of death
//!   ([`pod`]) and the generation on every turn;
//!   when it must leave it stops accepting, hands its idle plain connections (and
//!   those in the middle of a request body) to a worker that stays ([`handover`],
//!   `SCM_RIGHTS`; the same before it runs a script with a body, and after a
//!   script has kept it a second), finishes the rest (TLS sessions
//!   and answers being written among them) with `Connection: close`, and exits. Its scoreboard slot is updated through the
//!   [`serve::observer::Observer`] it hands to the request cycle ([`serve`]), which knows nothing
//!   about processes.
//! - A worker serves through three layers, each importing only the ones after it:
//!   [`serve`] is the request cycle (a connection between requests, its buffer, its
//!   transport, the stages of one request, the delivery and the log record);
//!   [`handlers`] answer a request once its vhost and location are known; [`http`] is
//!   the protocol's pure rules (parsing, paths, ranges, preconditions, the response
//!   head), which know nothing of connections.
//! - Shared by several of these: [`cidr`] (address ranges), [`location`] (what a
//!   `[[vhost.location]]` matches, and the table that picks one), [`kinds`] (what
//!   answers at a location: files, the status page, the health check, the metrics;
//!   each kind's module reads, checks, shows (`-T`) and builds its own keys),
//!   [`site`] (a vhost as a worker serves it: each location's gate and handler),
//!   [`statusfile`], [`clock`]. A `[[vhost.location]]` table is split between its
//!   kind and its rules by `config::read`'s `Keys`. The config reads its
//!   locations through the kinds and the rules (`config::vhost` → [`kinds`],
//!   [`rules`]), which use its reading and `-T` writing (`config::read`,
//!   `config::show`) and build handlers, which read the [`config::Config`]: the
//!   arrow from the config up to the kinds is that dispatch.
//! - [`rules`] holds the per-location rules (address lists, Basic auth, `return`,
//!   headers and caching, compressed answers): the keys any location may have
//!   whatever its kind, and a `[[vhost]]` as their default, each resolved when the
//!   config is read; what a request must pass is its location's [`rules::Gate`],
//!   what its answer gets added its [`rules::Decor`] ([`rules::apply`]), and what a
//!   files location does with its files its [`rules::FileRules`] (`try_files`,
//!   precompressed siblings, compression on the fly kept per file version). The
//!   master reads the htpasswd files with the config and reads it again when one
//!   changes ([`config::watch::Watch`]); the clients whose logins keep failing are
//!   counted for the whole server in a table the master maps with the scoreboard
//!   ([`scoreboard::failures`]).
//! - [`tls`] is HTTPS: the certificates the master loads and checks for each vhost
//!   (at start as root, before any fork, and on reload; [`tls::check`]), the one a
//!   handshake gets by SNI, the rustls setup (aws-lc-rs) each worker builds, the
//!   session-ticket key chain the master makes before the first fork and every
//!   worker steps by itself ([`tls::tickets`]), expiry warnings ([`tls::expiry`]),
//!   and the connection itself ([`tls::stream`]): a rustls session in the
//!   connection's `Held`, driven by the worker's event loop (handshake without
//!   waiting, first byte peeked to answer plain HTTP with a 400), and a
//!   [`serve::transport::Transport`] that decrypts input and sends responses as
//!   sealed records (file bytes by `pread`, never read from a mapping).
//! - [`gateway`] is dynamic content: the CGI meta-variables ([`gateway::env`]),
//!   which file a path runs ([`gateway::script`], confined like static files), the
//!   strict reading of a script's header block ([`gateway::answer`]), the answer
//!   read as it comes, kept whole for its client or streamed as `Body::Stream`
//!   ([`gateway::output`]); an answer kept, as fast as its source gives it, in memory
//!   and then in an unnamed temporary file, sent as `Body::Spooled` at the client's
//!   pace with the source let go, the bytes in files counted per worker and capped
//!   for the server ([`gateway::spool`], which knows nothing of scripts; request
//!   bodies' files are counted by its `Disk` too); a CGI
//!   script's process (spawned from a worker with an environment built from
//!   nothing, its own process group, no descriptor of the worker, rlimits, killed
//!   with its group and always reaped: [`gateway::child`]), the FastCGI
//!   protocol's records ([`gateway::fcgi`]), and HTTP/1.1 to an upstream server
//!   a proxy location passes requests to ([`gateway::upstream`]: the upstream's
//!   address and path mapping, the request head with the forwarding headers, the
//!   answer's head read as a script's header block, chunks undone); both reach
//!   their server over a [`gateway::backend`] (a unix socket or TCP, and the test a
//!   kept connection passes before it is used again).
//! - [`acme`] gets certificates from an ACME CA for the vhosts with `acme = true`:
//!   the master decides when ([`acme::schedule`]), keeps the state folder as root
//!   ([`acme::store`]) and installs by a reload; a short-lived child it forks
//!   ([`acme::child`], the workers' user) talks to the CA ([`acme::client`]); the
//!   workers answer the challenges from shared memory ([`acme::challenges`]):
//!   HTTP-01 first thing in a request ([`acme::http01`]), TLS-ALPN-01 in the
//!   handshake ([`acme::alpn`]).
//! - [`cluster`] is a fleet's shared storage (`[cluster]`): Redis through one
//!   blocking connection with timeouts and a back-off ([`cluster::client`]), every
//!   value sealed under a key derived from `key_file` ([`cluster::crypto`]), lease
//!   locks ([`cluster::lock`]), the node's root-only cache ([`cluster::cache`]) and
//!   what the workers show of it ([`cluster::status`]). It knows nothing of ACME or
//!   TLS: the master (`master::fleet`) keeps the ACME state, the challenges and the
//!   ticket keys in step with the fleet through it on its tick; no worker talks to
//!   Redis.
//! - [`metrics`] renders what the scoreboard counts ([`scoreboard::counters`]) for
//!   Prometheus: each worker adds to counters in its own slot as it answers
//!   (`Traffic`: requests by method and status class, a duration histogram,
//!   file-cache hits, access-log write errors), the master to the header's
//!   (`PoolEvents`: forks, exits by cause, reloads), and a location with
//!   `metrics = true` ([`handlers::metrics`]) sums them into Prometheus' text format.
//! - [`status`] is the scoreboard as people read it: Apache's `?auto`, `?json`, the
//!   status file's lines, and the HTML page, whose live view (charts of the last five
//!   minutes, redrawn from `?json` every second) is a script and a stylesheet served
//!   at the page's own path (`?js`, `?css`: `handlers/status_live.js` and `.css`), so
//!   the strict `Content-Security-Policy` the page is sent with allows them.
//! - [`text`] formats numbers and addresses into byte buffers for the per-request
//!   path (the head, the log record, the scoreboard) without `core::fmt`.
//! - [`sys`] holds every `unsafe` call (fork, `_exit`, shared memory, signal reset,
//!   `prctl`, `sched_setscheduler`, `openat2`, `mmap`, `close_range`, what a CGI
//!   child does between `fork` and `exec`, `pidfd_open`); the rest of the
//!   crate denies `unsafe`.
//! - [`safe_files`] opens what the master writes as root (logs, the pid file): no
//!   link followed, no hard-linked file written, no folder others may write there
//!   or above, a log handed to the workers' user only as a file just created.
//!
//! # How a request travels
//!
//! The worker's event loop accepts a socket (non-blocking, other options inherited
//! from the listener) or finds input on one it holds ([`serve::held::Held`]: the
//! socket, the client, what it speaks, and its phase: a PROXY header, a TLS
//! handshake, a head, a request body, an answer being written, idle, lingering) and
//! gives it a turn, [`serve::connection::Server::serve_ready`]: its buffer moves into
//! the worker's [`serve::input::Input`], which takes what has arrived without waiting
//! over a [`serve::transport::Transport`] (the socket, or on a TLS listener the rustls
//! session of [`tls::stream`], which first advances the handshake with what came); on
//! a `proxy_protocol` listener first the PROXY header ([`proxy_protocol`]; its
//! client becomes the connection's, anything else closes it); no whole head yet → its
//! bytes go back with the connection, into the set (a head not whole within
//! `header_timeout` gets a 408). Each whole head is served by the stages of
//! `serve::cycle` (docs/request-cycle.md): **read** ([`http::request::parse`]:
//! httparse plus our own checks: Host, framing, limits; every failure an
//! [`http::request::HttpError`] mapped to its status in one place; the request's
//! client: a trusted forwarder's `X-Forwarded-For` ([`http::forwarded`]) or the
//! connection's; for a location that reads bodies (scripts, the echo) the body read
//! whole by the event loop first, the connection waiting in the set meanwhile
//! ([`gateway::incoming`]); for the others a body dropped if all of it is there,
//! [`http::body`], else the answer says `Connection: close` and the connection
//! lingers) → **route** (the vhost by Host,
//! [`config::Config::vhost_for`], [`vhost::select`]; a plain request to a vhost with
//! `https_redirect` is redirected, [`http::https`]; [`http::path::clean`]: decode,
//! remove dot segments, refuse NUL and escapes; the vhost's [`site::Site`] picks the
//! location: an exact path, else the first regex, else the longest prefix,
//! [`location::Table`], built when the config is read) → **admit** (the gate: the
//! location's rules, [`rules::Gate`], then the methods its handler answers) →
//! **answer** (a [`handlers::Handler`]: the status page ([`handlers::status_page`]),
//! the health check ([`handlers::health`]), the metrics ([`handlers::metrics`]), CGI
//! scripts ([`handlers::cgi`]), FastCGI applications ([`handlers::fastcgi`]), an
//! upstream HTTP server ([`handlers::proxy`], its idle connections kept per worker), the
//! echo ([`handlers::echo`]) or static files ([`handlers::static_file::StaticFiles`]: a
//! cached mapping ([`handlers::file_cache`], revalidated by one `fstatat`, with its
//! whole-file header lines ready) or `openat2(RESOLVE_BENEATH)` under the location's
//! or the vhost's directory → file, index, listing ([`handlers::listing`]), redirect or
//! error → [`http::conditional`] and [`http::range`]; a file a script location runs is
//! never sent, [`handlers::reach`]); an answer that is an internal
//! redirect (a script's local `Location`, `try_files`' last entry,
//! [`handlers::try_files`], an index file) is served again at its path through the locations, at
//! most 10 times) → **decorate** (the vhost's
//! error pages, the location's [`rules::Decor`]: headers, `expires`, `charset`, pika's own
//! pages compressed; HTTPS answers its `hsts`) → **deliver** (the head built from
//! [`http::response::Reply`] and sent with the body in one `writev`; files of 32 KiB
//! and more: the head with `MSG_MORE`, the body with `sendfile`; a body of unknown
//! length in chunks; [`serve::transport::send`]; over TLS, sealed records; never
//! waiting: what the socket does not take now, [`serve::transport::Rest`], waits with
//! the connection in the set, `Phase::Writing`, with the pipelined requests behind
//! it, and is written as the socket drains, `serve::unsent`) →
//! **account**, when the last byte is out (or the write failed or `send_timeout`
//! passed with nothing taken, with the bytes sent by then) (counted in the worker's scoreboard slot,
//! [`serve::observer::Observer::served`], [`scoreboard::counters::Traffic`]; one
//! access-log record, made in one place, `serve::output`, per log ([`log::access`],
//! formatted by [`log::format`] (`format = "json"` by `log/json.rs`), chosen by
//! [`log::filter`])). A head refused before it is routed takes the deliver and account
//! stages too. Then keep alive (the next pipelined request, or idle in the set until
//! the next one or `keepalive_timeout`) or close (lingering in the set when the client
//! may still be sending).
//!
//! # How a signal travels
//!
//! A signal sets a flag and writes a byte to the master's self-pipe
//! ([`master::signals`]); the master's `poll` wakes, turns the flags into
//! [`master::signals::Control`]s and acts: stop (TERM to workers, or a graceful stop
//! that lets them finish), reload (check the new config, bump the generation in the
//! scoreboard, fork the new generation, wake the old idle workers with dummy
//! connections so they see it and exit), reopen logs (bump the log epoch; workers
//! reopen before their next record), or move the spare band. Workers never act on the
//! master's signals: they ignore them, and die with TERM (after writing the access-log
//! records they hold).
//!
//! # Logs
//!
//! The error log ([`log`]) is a `log` facade backend that reads the pid at every line
//! and writes each line with one `write()`; access logs are opened by the master,
//! inherited by the workers, and rotated by the master ([`log::rotate`]): rename,
//! create for the workers, bump the epoch. A worker holds its access-log records back
//! in a fixed buffer per log and writes them together: when full, when `flush` old,
//! once a script has kept it waiting a second, when it retires, and when `TERM` tells
//! it to stop at once ([`sys::catch_stop`]: its loop logs the answers it was writing
//! as cut, then writes; the stuck-worker watchdog sends `TERM` first, `KILL` only
//! after a grace). The buffers live in memory the master shares with each slot
//! ([`log::held`]): the master writes what a worker killed by `KILL` held.
//!
//! # The layers
//!
//! From the bottom up. A module imports from its own layer and the layers below it,
//! but for the arrows listed after; `tests/modules.rs` reads these lists and checks
//! them against the code: no loop among the imports between modules that are not
//! each other's ancestor (an import between a parent and a module below it is left
//! out of that graph, so a loop that runs through one is not seen there), no arrow
//! between top-level modules up the layers but these, and no master-side module
//! importing the request side but to fork a worker.
//!
//! 1. foundations: `sys`, `text`, `clock`, `cidr`, `safe_files`, `dummy`
//! 2. the protocols' rules: `http`, `proxy_protocol`, `vhost`
//! 3. records and keys: `scoreboard`, `log`, `statusfile`, `pidfile`, `notify`, `tls`,
//!    `cluster`, `acme`
//! 4. made before the first fork, used by both sides: `config`, `listen`, `inherit`,
//!    `handover`, `pod`
//! 5. serving: `serve`, `handlers`, `site`, `status`, `metrics`, `gateway`, `location`,
//!    `kinds`, `rules`
//! 6. processes: `worker`, `master`
//! 7. the command: `daemon`, `ctl`, `cli`
//!
//! Arrows that run back up:
//!
//! - `log` → `config`: an access log is opened from its config entry
//!   (`config::AccessLog`), while the config reads a log's format, filters and
//!   rotation with `log`'s parsers.
//! - `config` → `location`: the config reads each `[[vhost.location]]` into what
//!   answers there, which a worker serves from: the location's table (`location`),
//!   its kind (`kinds`: each kind's module reads, checks, shows and builds its own
//!   keys) and its rules (`rules`, likewise); the next two arrows are the same one.
//! - `config` → `kinds`: as above.
//! - `config` → `rules`: as above.
//! - `tls` → `serve`: `tls::stream` is the request cycle's `Transport` for a TLS
//!   connection, its session riding in the connection's `Held`.
//!
//! The sides: the master side is `master`, `daemon`, `ctl`, `cli`, `pod`, `notify`,
//! `statusfile`, `pidfile`, `inherit`, `listen`, `handover`; the request side is
//! `worker`, `serve`, `http`, `handlers`, `site`, `location`, `kinds`, `vhost`, `rules`,
//! `gateway`, `metrics`; shared by both: `sys`, `text`, `clock`, `cidr`,
//! `safe_files`, `scoreboard`, `log`, `config`, `tls`, `cluster`, `acme`, `status`, `proxy_protocol`, `dummy`.
#![deny(unsafe_code)]

pub mod acme;
pub mod cidr;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod ctl;
pub mod daemon;
pub mod dummy;
pub mod gateway;
pub mod handlers;
pub mod handover;
pub mod http;
pub mod inherit;
pub mod kinds;
pub mod listen;
pub mod location;
pub mod log;
pub mod master;
pub mod metrics;
pub mod notify;
pub mod pidfile;
pub mod pod;
pub mod proxy_protocol;
pub mod rules;
pub mod safe_files;
pub mod scoreboard;
pub mod serve;
pub mod site;
pub mod status;
pub mod statusfile;
pub mod sys;
pub mod text;
pub mod tls;
pub mod vhost;
pub mod worker;
