//! What a handler is given: the request, as [`Ask`], with what it needs of the
//! connection ([`Link`]: the request body among it), and the methods a handler
//! answers ([`Methods`], checked before it is asked).

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
    /// Served again after an internal redirect (`try_files` is not tried again:
    /// the fallback it names is served as it is).
    pub redirected: bool,
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
    /// Told every [`crate::gateway::GLANCE`] a script keeps the worker, with how
    /// long so far: the worker lets the connections whose request came meanwhile be
    /// served elsewhere, and after [`crate::gateway::WAITING`] its idle ones too.
    pub waiting: &'a dyn Fn(std::time::Duration),
    /// Where the worker keeps a script's answer for its client.
    pub answers: &'a crate::gateway::spool::Place,
}

/// The methods a handler answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Methods {
    /// GET and HEAD; OPTIONS is answered with `Allow`, any other method 405.
    ReadOnly,
    /// Every method reaches the handler.
    Any,
}

impl Methods {
    /// Whether a request with `method` reaches the handler; when not, `reply` holds
    /// the answer.
    #[inline]
    pub fn answers(self, method: Method, reply: &mut Reply<'_>) -> bool {
        match (self, method) {
            (Methods::Any, _) | (Methods::ReadOnly, Method::Get | Method::Head) => true,
            (Methods::ReadOnly, Method::Options) => {
                reply.header("Allow", ALLOW);
                reply.body = Body::Owned(Vec::new());
                false
            }
            (Methods::ReadOnly, Method::OtherKnown) => {
                not_allowed(reply);
                false
            }
        }
    }
}

/// 405 for a method no handler here answers.
pub fn not_allowed(reply: &mut Reply<'_>) {
    reply.error(405, "This resource only answers GET, HEAD and OPTIONS.");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_only_resource_answers_options_and_refuses_other_methods() {
        let mut extra = Vec::new();
        let says = |methods: Methods, method: Method, extra: &mut Vec<u8>| {
            let mut reply = Reply::new(extra);
            if methods.answers(method, &mut reply) { None } else { Some(reply.status) }
        };
        assert_eq!(says(Methods::ReadOnly, Method::Get, &mut extra), None);
        assert_eq!(says(Methods::ReadOnly, Method::Head, &mut extra), None);
        assert_eq!(says(Methods::ReadOnly, Method::Options, &mut extra), Some(200), "answered with Allow");
        assert!(String::from_utf8_lossy(&extra).contains("Allow: GET, HEAD, OPTIONS"));
        assert_eq!(says(Methods::ReadOnly, Method::OtherKnown, &mut extra), Some(405));
        assert_eq!(says(Methods::Any, Method::OtherKnown, &mut extra), None, "every method reaches the handler");
    }
}
