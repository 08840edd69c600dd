//! pika: a pre-forking HTTP/1.1 web server for Linux.
#![deny(unsafe_code)]

pub mod cli;
pub mod config;
pub mod ctl;
pub mod daemon;
pub mod handlers;
pub mod http;
pub mod listen;
pub mod log;
pub mod master;
pub mod pidfile;
pub mod pod;
pub mod scoreboard;
pub mod status;
pub mod sys;
pub mod vhost;
pub mod worker;
