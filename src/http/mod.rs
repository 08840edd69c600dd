//! HTTP/1.1 for a static-file origin (RFC 9110, RFC 9112): reading requests, writing
//! responses, and the pure rules in between (paths, ranges, preconditions, types).
//! Nothing here knows about processes.

pub mod body;
pub mod conditional;
pub mod connection;
pub mod date;
pub mod forwarded;
pub mod held;
pub mod https;
pub mod input;
pub mod mime;
pub mod observer;
mod output;
pub mod path;
pub mod proxy_protocol;
pub mod range;
pub mod request;
pub mod response;
pub mod transport;
