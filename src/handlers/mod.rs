//! What answers a request once it is read: static files and directories
//! (`static_file`), directory listings (`listing`), and each worker's cache of
//! mapped files (`file_cache`).

pub mod file_cache;
pub mod listing;
pub mod static_file;
