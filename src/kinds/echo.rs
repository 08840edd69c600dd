//! `echo = true`: a diagnostic location that answers a request with its own body,
//! as a stream of unknown length (chunked to an HTTP/1.1 client, until the close to
//! an HTTP/1.0 one). It shows what reached the server after every proxy on the way,
//! and it is how the tests prove the seams a program's answer uses (a request body
//! read by the event loop that a handler reads, a response body sent as it comes,
//! over plain HTTP and TLS). No other key; every method reaches it; anyone may ask
//! unless its location or vhost sets `allow`.

use std::io::{Cursor, Seek, SeekFrom};

use crate::exchange::Ask;
use crate::gateway::incoming::RequestBody;
use crate::http::response::{Reply, Streamed};
use crate::keys::write::Toml;

/// The key that chooses it.
pub const KEY: &str = "echo";

pub(super) fn show(t: &mut Toml) {
    t.key(KEY, toml::Value::Boolean(true));
}

/// The echo handler.
#[derive(Clone, Copy)]
pub struct Echo;

impl Echo {
    pub fn serve(&self, ask: &Ask<'_>, reply: &mut Reply<'_>) {
        // Sent as a program's output is: a stream whose length is not told.
        let from: Box<dyn std::io::Read> = match ask.link.body {
            None => Box::new(std::io::empty()),
            Some(RequestBody::Memory(v)) => Box::new(Cursor::new(v.clone())),
            Some(RequestBody::File(f, _)) => {
                match f.try_clone().and_then(|mut f| f.seek(SeekFrom::Start(0)).map(|_| f)) {
                    Ok(f) => Box::new(f),
                    Err(e) => {
                        log::error!("echo: cannot read the request body back: {e}");
                        reply.error(500, "The request body could not be read back.");
                        return;
                    }
                }
            }
        };
        reply.header("Content-Type", "application/octet-stream").header("Cache-Control", "no-store");
        reply.body = Streamed::body(from, None);
    }
}
