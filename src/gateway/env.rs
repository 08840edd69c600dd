//! The meta-variables a CGI script gets as its environment and a FastCGI
//! application as its parameters (RFC 3875 §4.1), built from nothing: the request,
//! the client, the script found, and no variable of the server's own environment.
//!
//! Request headers become `HTTP_*` (upper case, `-` as `_`), except `Content-Type`
//! and `Content-Length` (they are `CONTENT_TYPE`, `CONTENT_LENGTH`), `Proxy` (a
//! client's `Proxy:` would become `HTTP_PROXY`, which many HTTP libraries take as
//! their outgoing proxy: "httpoxy"), and any name with a character other than a
//! letter, digit or `-` (`X_Real_IP` would pass for `X-Real-IP`, as Apache and
//! nginx also refuse). A header sent more than once is joined with `, ` (`; ` for
//! `Cookie`). `REDIRECT_STATUS=200` tells `php-cgi` the server ran it (it refuses
//! to run without, so a URL cannot make it run any file).

use std::net::SocketAddr;

use crate::http::request::Request;

/// The search path a script gets: its environment has no other.
pub const PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// What the server knows of one request to a script, beyond its head.
pub struct Meta<'a> {
    pub req: &'a Request<'a>,
    /// The query string, as sent (without `?`).
    pub query: &'a [u8],
    /// The script's URL path (`/cgi-bin/env.sh`).
    pub script_name: &'a [u8],
    /// The script's file (`/srv/www/cgi-bin/env.sh`).
    pub script_filename: &'a [u8],
    /// What followed the script in the path (`/a/b`), decoded; empty for none.
    pub path_info: &'a [u8],
    /// The directory the URL paths map to.
    pub document_root: &'a [u8],
    /// The client (after a trusted forwarder's header or a PROXY header).
    pub client: SocketAddr,
    pub server_name: &'a [u8],
    pub server_port: u16,
    pub https: bool,
    /// The request body's length (it is read whole before the script runs).
    pub content_length: Option<u64>,
    /// The address the client connected to (`SERVER_ADDR`).
    pub server_addr: Option<std::net::IpAddr>,
}

/// The variables, in a stable order; names are ASCII.
pub fn variables(m: &Meta<'_>) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut v: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(32 + m.req.headers.len());
    let mut put = |name: &str, value: &[u8]| v.push((name.as_bytes().to_vec(), value.to_vec()));
    put("GATEWAY_INTERFACE", b"CGI/1.1");
    put("SERVER_SOFTWARE", b"pika");
    put("SERVER_PROTOCOL", m.req.protocol().as_bytes());
    put("SERVER_NAME", m.server_name);
    put("SERVER_PORT", m.server_port.to_string().as_bytes());
    put("REQUEST_METHOD", m.req.method_str.as_bytes());
    put("REQUEST_URI", m.req.target);
    put("QUERY_STRING", m.query);
    put("SCRIPT_NAME", m.script_name);
    put("SCRIPT_FILENAME", m.script_filename);
    put("DOCUMENT_ROOT", m.document_root);
    if !m.path_info.is_empty() {
        put("PATH_INFO", m.path_info);
        let mut translated = m.document_root.strip_suffix(b"/").unwrap_or(m.document_root).to_vec();
        translated.extend_from_slice(m.path_info);
        put("PATH_TRANSLATED", &translated);
    }
    put("REMOTE_ADDR", m.client.ip().to_string().as_bytes());
    if m.client.port() != 0 {
        put("REMOTE_PORT", m.client.port().to_string().as_bytes());
    }
    if m.https {
        put("HTTPS", b"on");
        put("REQUEST_SCHEME", b"https");
    } else {
        put("REQUEST_SCHEME", b"http");
    }
    match m.content_length {
        Some(n) => put("CONTENT_LENGTH", n.to_string().as_bytes()),
        // A body of length 0 is a body (RFC 3875 §4.1.2).
        None if m.req.header("content-length").is_some() => put("CONTENT_LENGTH", b"0"),
        None => {}
    }
    if let Some(a) = m.server_addr {
        put("SERVER_ADDR", a.to_string().as_bytes());
    }
    if let Some(t) = m.req.header("content-type") {
        put("CONTENT_TYPE", t);
    }
    put("REDIRECT_STATUS", b"200");
    put("PATH", PATH.as_bytes());
    for h in m.req.headers {
        let Some(name) = http_name(h.name) else { continue };
        match v.iter_mut().find(|(n, _)| *n == name) {
            Some((_, value)) => {
                value.extend_from_slice(if name == b"HTTP_COOKIE" { b"; " } else { b", " });
                value.extend_from_slice(h.value);
            }
            None => v.push((name, h.value.to_vec())),
        }
    }
    v
}

/// `HTTP_NAME` for a header passed to scripts, `None` for one that is not.
fn http_name(header: &str) -> Option<Vec<u8>> {
    if header.eq_ignore_ascii_case("proxy")
        || header.eq_ignore_ascii_case("content-type")
        || header.eq_ignore_ascii_case("content-length")
        || !header.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return None;
    }
    let mut name = b"HTTP_".to_vec();
    name.extend(header.bytes().map(|b| if b == b'-' { b'_' } else { b.to_ascii_uppercase() }));
    Some(name)
}

#[cfg(test)]
mod tests {
    use std::mem::MaybeUninit;

    use super::*;
    use crate::http::request::{Limits, parse};

    fn with_request(head: &[u8], f: impl FnOnce(&Request<'_>)) {
        let mut headers = [const { MaybeUninit::uninit() }; 32];
        let limits = Limits { max_request_line: 8192, max_header_size: 8192, max_header_line: 8192, max_headers: 32 };
        let req = parse(head, &mut headers, &limits).unwrap();
        f(&req);
    }

    fn get<'v>(v: &'v [(Vec<u8>, Vec<u8>)], name: &str) -> Option<&'v str> {
        v.iter().find(|(n, _)| n == name.as_bytes()).map(|(_, val)| std::str::from_utf8(val).unwrap())
    }

    fn meta<'a>(req: &'a Request<'a>) -> Meta<'a> {
        Meta {
            req,
            query: b"a=1&b=2",
            script_name: b"/cgi-bin/env.sh",
            script_filename: b"/srv/www/cgi-bin/env.sh",
            path_info: b"/x/y",
            document_root: b"/srv/www",
            client: "192.0.2.7:40000".parse().unwrap(),
            server_name: b"example.com",
            server_port: 8080,
            https: false,
            content_length: Some(5),
            server_addr: Some([192, 0, 2, 1].into()),
        }
    }

    #[test]
    fn the_rfc_variables_are_all_there() {
        let head = b"POST /cgi-bin/env.sh/x/y?a=1&b=2 HTTP/1.1\r\nHost: example.com:8080\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\n";
        with_request(head, |req| {
            let v = variables(&meta(req));
            assert_eq!(get(&v, "GATEWAY_INTERFACE"), Some("CGI/1.1"));
            assert_eq!(get(&v, "SERVER_PROTOCOL"), Some("HTTP/1.1"));
            assert_eq!(get(&v, "REQUEST_METHOD"), Some("POST"));
            assert_eq!(get(&v, "QUERY_STRING"), Some("a=1&b=2"));
            assert_eq!(get(&v, "REQUEST_URI"), Some("/cgi-bin/env.sh/x/y?a=1&b=2"));
            assert_eq!(get(&v, "PATH_INFO"), Some("/x/y"));
            assert_eq!(get(&v, "PATH_TRANSLATED"), Some("/srv/www/x/y"));
            assert_eq!(get(&v, "REMOTE_ADDR"), Some("192.0.2.7"));
            assert_eq!(get(&v, "REMOTE_PORT"), Some("40000"));
            assert_eq!(get(&v, "SERVER_PORT"), Some("8080"));
            assert_eq!(get(&v, "CONTENT_LENGTH"), Some("5"));
            assert_eq!(get(&v, "SERVER_ADDR"), Some("192.0.2.1"));
            assert_eq!(get(&v, "CONTENT_TYPE"), Some("text/plain"));
            assert_eq!(get(&v, "HTTP_HOST"), Some("example.com:8080"));
            assert_eq!(get(&v, "HTTP_CONTENT_TYPE"), None);
            assert_eq!(get(&v, "HTTPS"), None);
        });
    }

    #[test]
    fn proxy_and_odd_names_are_dropped_and_repeats_joined() {
        let head = b"GET / HTTP/1.0\r\nProxy: http://evil/\r\nX_Real_IP: 1.2.3.4\r\nCookie: a=1\r\nCookie: b=2\r\nAccept: a\r\nAccept: b\r\n\r\n";
        with_request(head, |req| {
            let mut m = meta(req);
            m.path_info = b"";
            let v = variables(&m);
            assert_eq!(get(&v, "HTTP_PROXY"), None);
            assert!(v.iter().all(|(n, _)| !n.starts_with(b"HTTP_X_REAL")));
            assert_eq!(get(&v, "HTTP_COOKIE"), Some("a=1; b=2"));
            assert_eq!(get(&v, "HTTP_ACCEPT"), Some("a, b"));
            assert_eq!(get(&v, "PATH_INFO"), None);
            assert_eq!(get(&v, "SERVER_PROTOCOL"), Some("HTTP/1.0"));
            // Nothing of the server's own environment.
            assert_eq!(get(&v, "HOME"), None);
        });
    }
}
