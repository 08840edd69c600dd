//! The request cycle: one connection from its first byte to its close, a request at
//! a time. What a worker holds of a connection between requests ([`held`]), the read
//! side that never waits ([`input`]), the one place a connection meets its socket or
//! TLS session ([`transport`]), the turns the worker gives a connection
//! ([`connection`]), the stages that serve one request (`cycle`: read, route,
//! gate, answer, decorate (`decorate`), deliver, finish), the answer's delivery
//! and its access-log record (`output`), an answer the socket did not take whole,
//! written as it drains (`unsent`), the TLS handshakes under way ([`handshakes`],
//! which the worker's scheduling policy follows), a connection that switched protocols, its
//! bytes relayed to an upstream (`relay`; its state is `held::tunnel`), and the worker's view into all of it
//! ([`observer`]).
//!
//! The protocol's own rules (parsing, paths, ranges, preconditions, the response
//! head) live in [`crate::http`], which knows nothing of connections; what answers a
//! request lives in [`crate::kinds`]. This code knows nothing about processes:
//! what the worker needs to see goes through the [`observer::Observer`] it is given.

mod body;
pub mod connection;
mod cycle;
mod decorate;
pub mod handshakes;
pub mod held;
pub mod input;
pub mod observer;
mod output;
mod relay;
pub mod tls;
pub mod transport;
mod unsent;
