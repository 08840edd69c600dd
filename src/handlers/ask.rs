//! What a handler is given (the request, as [`Ask`]) and what every handler that is
//! only read answers alike (the methods: [`read_only`]).

use std::net::IpAddr;

use crate::http::path::CleanPath;
use crate::http::request::{Method, Request};
use crate::http::response::{ALLOW, Body, Reply};

/// What one request asks of a handler.
pub struct Ask<'a> {
    pub req: &'a Request<'a>,
    /// The request's path, decoded and cleaned: what the locations were matched on.
    pub path: &'a CleanPath<'a>,
    /// The query string as sent (after `?`), if any.
    pub query: Option<&'a [u8]>,
    pub client: IpAddr,
    /// The connection it came on (what a script is told of it).
    pub link: Link<'a>,
}

/// What a handler that runs a script needs of the connection.
#[derive(Clone, Copy)]
pub struct Link<'a> {
    /// The client with its port (the port is 0 when a forwarder's header named it).
    pub peer: std::net::SocketAddr,
    pub local_port: u16,
    pub https: bool,
    /// The socket, watched for a client that hangs up while a script runs.
    pub socket: std::os::fd::BorrowedFd<'a>,
    /// The request body, read whole by the event loop for a location that reads
    /// bodies ([`crate::gateway::incoming`]); `None` elsewhere.
    pub body: Option<&'a crate::gateway::incoming::RequestBody>,
    /// Called once a script has kept the worker [`crate::gateway::WAITING`]: the
    /// worker lets the idle connections it holds be served elsewhere meanwhile, as
    /// for a write to a slow reader.
    pub waiting: &'a dyn Fn(),
}

/// The methods of a resource that is only read: true for GET and HEAD (serve them);
/// OPTIONS is answered here with `Allow`, any other method with 405.
pub fn read_only(req: &Request<'_>, reply: &mut Reply<'_>) -> bool {
    match req.method {
        Method::Get | Method::Head => true,
        Method::Options => {
            reply.header("Allow", ALLOW);
            reply.body = Body::Owned(Vec::new());
            false
        }
        Method::OtherKnown => {
            not_allowed(reply);
            false
        }
    }
}

/// 405 for a method no handler here answers.
pub fn not_allowed(reply: &mut Reply<'_>) {
    reply.error(405, "This resource only answers GET, HEAD and OPTIONS.");
}
