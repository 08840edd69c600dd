//! What answers a request once it is read: static files and directories
//! (`static_file`), directory listings (`listing`).

pub mod listing;
pub mod static_file;
