//! One request as the access logs see it: the fields a format, a filter or the JSON
//! writer may ask about, borrowed from the connection for the time of one write.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, SystemTime};

/// Everything a format may ask about one request. Byte fields are raw client input.
pub struct Record<'a> {
    /// The client: the socket's peer, or the one a PROXY protocol header or a
    /// trusted forwarder named (`%a`, `%h`, filters).
    pub client: IpAddr,
    /// The socket's peer (`%{c}a`, its port `%{remote}p`): the balancer when one
    /// named the client.
    pub peer: SocketAddr,
    /// The user a Basic `Authorization` header names, where the location asks for a
    /// password (`%u`; as Apache's, it may name a user who failed: see the status).
    pub user: Option<&'a str>,
    pub local_port: u16,
    pub request_line: &'a [u8],
    pub method: &'a [u8],
    pub path: &'a [u8],
    pub query: Option<&'a [u8]>,
    pub protocol: &'a str,
    pub status: u16,
    pub body_bytes: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub start: SystemTime,
    pub duration: Duration,
    pub vhost: &'a str,
    pub host: Option<&'a [u8]>,
    pub headers_in: &'a dyn Fn(&str) -> Option<&'a [u8]>,
    /// The response head as sent, for `%{NAME}o`.
    pub response_head: &'a [u8],
    /// `+` kept alive, `-` closed, `X` aborted.
    pub conn_status: char,
    pub keepalive_count: u64,
    /// Answered by a health-check location (left out of the logs by default).
    pub health: bool,
    pub request_id: u64,
    /// The TLS session of an HTTPS request (`None`: plain HTTP, logged as `-`).
    pub tls: Option<TlsFields<'a>>,
    /// The upstream a proxy location passed the request to (`None`: not proxied).
    pub upstream: Option<UpstreamFields<'a>>,
}

/// What the upstream did, for `%{upstream}x`, `%{upstream_status}x`,
/// `%{upstream_header_time}x` and `%{upstream_time}x` (nginx's `$upstream_*`).
#[derive(Debug, Clone, Copy)]
pub struct UpstreamFields<'a> {
    /// As the config names it (`http://127.0.0.1:8000`, `unix:/run/app.sock`).
    pub addr: &'a str,
    /// Its answer's status, if a head came.
    pub status: Option<u16>,
    /// Until its answer's head.
    pub header_time: Option<Duration>,
    /// Until its answer was read.
    pub time: Duration,
}

/// What a TLS session says of itself, named as Apache's mod_ssl names it.
#[derive(Debug, Clone, Copy)]
pub struct TlsFields<'a> {
    /// `TLSv1.3`, `TLSv1.2`.
    pub protocol: &'static str,
    /// OpenSSL's name of the cipher suite (`TLS_AES_128_GCM_SHA256`).
    pub cipher: &'static str,
    /// The server name the client sent (SNI), if any.
    pub sni: Option<&'a str>,
}
