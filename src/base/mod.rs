//! The foundations every other module stands on, knowing nothing of HTTP or of the
//! server: every `unsafe` call ([`sys`]), numbers and addresses formatted without
//! `core::fmt` ([`text`]), a cheap clock ([`clock`]), address ranges ([`cidr`]),
//! files opened safely as root ([`safe_files`]), and the master's dummy connection
//! that wakes an idle worker ([`dummy`]).

pub mod cidr;
pub mod clock;
pub mod dummy;
pub mod safe_files;
pub mod sys;
pub mod text;
