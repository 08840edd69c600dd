//! The `pika` command: its command line ([`cli`]), the control of a running server
//! (`-k`, [`ctl`]), and the start in the foreground, as a daemon or in one process
//! ([`daemon`]); the effective config as `pika -T` prints it ([`show`]).

pub mod cli;
pub mod ctl;
pub mod daemon;
pub mod show;
