//! pika's integration tests: one test binary (one link on a small CI machine), with
//! modules by theme. Every test starts the real `pika` binary on 127.0.0.1 with a temp
//! config and speaks raw HTTP to it.

// Tests use threads freely: only the server process must stay single-threaded.
#![allow(clippy::disallowed_methods)]

mod acme;
mod apps;
mod balancer;
mod browser;
mod config;
mod control;
mod corpus;
mod disclosure;
mod dynamic;
mod fleet;
mod hostile;
mod http_engine;
mod https;
mod init_scripts;
mod keepalive;
mod locations;
mod logs;
mod man;
mod metrics;
mod modules;
mod package;
mod path_props;
mod prefork;
mod proxy;
mod rules;
mod slowreaders;
mod systemd;
mod tls;
mod tunnels;
mod upgrade;
mod util;
