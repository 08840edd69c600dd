//! A request as the rules and the handlers see it once it is routed ([`Ask`]: the
//! parsed head, its clean path and query, its client, and what it needs of the
//! connection, [`Link`]), and the methods a handler answers ([`Methods`]).

mod ask;

pub use ask::{Ask, Link, Methods, not_allowed};
