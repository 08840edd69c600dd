//! What the master makes before the first fork and its workers use: the listeners
//! ([`listen`], or those given by an old master or systemd, [`inherit`]), the pipe
//! of death and the doorbell ([`pod`]), and the hand-over socket through which a
//! leaving worker gives its connections to one that stays ([`handover`]).

pub mod handover;
pub mod inherit;
pub mod listen;
pub mod pod;
