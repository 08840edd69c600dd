//! HTTP/1.1 for a static-file origin (RFC 9110, RFC 9112): reading requests, writing
//! responses, and the pure rules in between (paths, ranges, preconditions, types).
//! Nothing here knows about processes.

pub mod body;
pub mod conditional;
pub mod date;
pub mod forwarded;
pub mod host;
pub mod https;
pub mod mime;
pub mod path;
pub mod pattern;
pub mod proxy_protocol;
pub mod range;
pub mod request;
pub mod response;
