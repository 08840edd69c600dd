//! Logs: the error log (pika's own messages, through the `log` facade) and the access
//! logs (one line per request, see `access.rs` and `format.rs`).
//!
//! The error-log backend is written for a forking server: it reads the pid at every
//! message (a logger installed in the master is inherited by every worker), writes each
//! line with one `write()` on an `O_APPEND` descriptor so lines from many processes never
//! tear, and holds no lock across a `fork` (the master is single-threaded).

pub mod access;
pub mod error;
pub mod files;
pub mod filter;
pub mod format;
pub mod held;
mod json;
pub mod record;
pub mod rotate;

/// Running out of file descriptors: said once when it starts, once when it ends.
pub mod shortage {
    use std::sync::atomic::{AtomicU8, Ordering::Relaxed};

    /// Which operation could not get a descriptor.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[repr(u8)]
    pub enum Op {
        Accept = 1,
        Open = 2,
    }

    /// 0 while descriptors are to be had, else the `Op` that first went short.
    static SHORT: AtomicU8 = AtomicU8::new(0);

    /// `op` could not get a descriptor (`EMFILE`/`ENFILE`).
    pub fn report(op: Op, e: &std::io::Error) {
        if SHORT.compare_exchange(0, op as u8, Relaxed, Relaxed).is_ok() {
            log::error!("out of file descriptors ({e}); answering 503 or waiting until some free up");
        }
    }

    /// `op` got its descriptor: the shortage that began with it is over.
    pub fn recovered(op: Op) {
        if SHORT.load(Relaxed) == op as u8 && SHORT.compare_exchange(op as u8, 0, Relaxed, Relaxed).is_ok() {
            log::warn!("file descriptors available again");
        }
    }
}

pub use error::{ErrorLogTarget, enter_jail, error_log_fd, init_stderr, reopen_error_log, set_slot, set_target};
pub use files::{local_zone, open_append, prepare_for_workers};
