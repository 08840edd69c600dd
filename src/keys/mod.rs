//! A config's keys, read and written, for every module that owns some: errors with
//! a file, line and column and the keys of a table several modules share
//! ([`read`]), sizes and durations as the config writes them ([`units`]), and the
//! TOML `pika -T` prints ([`write`]). It knows no key of its own: the kinds, the
//! rules and the config above them each read, check and show theirs through it.

pub mod read;
pub mod units;
pub mod watch;
pub mod write;
