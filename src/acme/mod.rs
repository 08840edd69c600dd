//! ACME (RFC 8555): certificates that pika obtains and renews by itself, for the
//! vhosts with `acme = true`.
//!
//! Who does what:
//! - The master ([`crate::master`]'s `acme.rs`) decides when (pure functions in
//!   [`schedule`]), keeps the state folder ([`store`]: the account key and every
//!   certificate key, written by root alone, 0600, in a folder only root enters), and
//!   installs a new certificate by reloading, the path a `HUP` takes: the new
//!   generation of workers serves it, the old one finishes its connections.
//! - The master never talks to the network. When something is due it forks the ACME
//!   child ([`child`]), which drops to the workers' user, talks to the CA with our
//!   own small client ([`client`] over [`https`], requests signed by [`jws`]), and
//!   hands back what it got (account URL, certificate chain and key) over a pipe.
//! - The challenges the CA checks are answered by the workers from a table in shared
//!   memory ([`challenges`]) that the child writes: HTTP-01 before any location or
//!   redirect ([`http01`]), TLS-ALPN-01 in the handshake ([`alpn`]).
//! - Until a vhost has a certificate it is served with a self-signed placeholder
//!   ([`store::vhost_cert`]), and the error log and the status page say so.

pub mod alpn;
pub mod b64;
pub mod challenges;
pub mod child;
pub mod client;
pub mod expiry;
pub mod http01;
pub mod https;
pub mod jws;
pub mod schedule;
pub mod settings;
pub mod status;
pub mod store;

pub use settings::{Challenge, Eab, ORDER_TIMEOUT, REQUEST_TIMEOUT, SYSTEM_ROOTS, Settings};
