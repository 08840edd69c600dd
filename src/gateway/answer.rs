//! The header block a CGI script or a FastCGI application answers with (RFC 3875
//! §6), read strictly: what it says becomes the response's status and headers, and
//! anything that is not a well-formed header block is the script's fault (502, the
//! script named in the error log), never bytes passed to the client.
//!
//! Lines end with LF or CRLF; an empty line ends the block. Field names are tokens,
//! values hold no control character but tab, a line never continues the one before
//! (obsolete folding is how a value smuggles a header). One of `Status`,
//! `Content-Type` or `Location` must be there. `Status: NNN reason` sets the status
//! (a 1xx is refused: it would leave the client waiting for the real one);
//! `Location` with a path is served by the server itself (a local redirect), with an
//! absolute URL it is sent as a 302 unless a `Status` says otherwise. Headers about
//! the connection (`Connection`, `Keep-Alive`, `Transfer-Encoding`, ...) belong to
//! the server and are dropped; `Content-Length`, when given, must be a number and
//! frames the body.

/// What a script's header block says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    /// The headers to send, as the script wrote them (names as given; values as
    /// bytes: obs-text, 0x80-0xFF, is allowed, RFC 9110 §5.5).
    pub headers: Vec<(String, Vec<u8>)>,
    pub content_length: Option<u64>,
    /// `Location` with a local path: the server answers that path instead.
    pub local_redirect: Option<String>,
}

/// Why a script's output is not an answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error("its header block is longer than {0} bytes")]
    TooLong(usize),
    #[error("it ended before the end of its header block")]
    Cut,
    #[error("it sent a malformed header line: {0:?}")]
    BadLine(String),
    #[error("it sent a bad Status: {0:?}")]
    BadStatus(String),
    #[error("it sent a bad Content-Length: {0:?}")]
    BadLength(String),
    #[error("it sent no Status, Content-Type or Location header")]
    NothingSaid,
}

/// Headers the server owns: a script's are dropped.
const SERVER_OWNS: [&str; 7] =
    ["connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"];

/// Reads the header block at the start of `out`: `Ok(None)` while it is not all
/// there (and within `max` bytes), else the head and where the body starts. `ended`:
/// the script's output is over (a block still open then is cut).
pub fn parse(out: &[u8], max: usize, ended: bool) -> Result<Option<(Head, usize)>, AnswerError> {
    let Some((block_end, body_start)) = block_end(out) else {
        if out.len() > max {
            return Err(AnswerError::TooLong(max));
        }
        return if ended { Err(AnswerError::Cut) } else { Ok(None) };
    };
    if block_end > max {
        return Err(AnswerError::TooLong(max));
    }
    let mut head = Head { status: 200, headers: Vec::new(), content_length: None, local_redirect: None };
    let (mut status, mut typed, mut location) = (None, false, None);
    let lines = out[..block_end].split(|&b| b == b'\n').filter(|_| block_end > 0);
    for line in lines {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let (name, value) = field(line).ok_or_else(|| AnswerError::BadLine(lossy(line)))?;
        let lower = name.to_ascii_lowercase();
        // The values the server reads are text; the others pass as they came.
        let text = || String::from_utf8(value.clone()).map_err(|_| AnswerError::BadLine(lossy(line)));
        match lower.as_str() {
            "status" => {
                let value = text()?;
                status = Some(status_code(&value).ok_or(AnswerError::BadStatus(value))?);
            }
            "location" => location = Some(text()?),
            "content-length" => {
                let value = text()?;
                let n = value.parse().ok().filter(|_| value.bytes().all(|b| b.is_ascii_digit()));
                head.content_length = Some(n.ok_or(AnswerError::BadLength(value))?);
            }
            n if SERVER_OWNS.contains(&n) => {}
            n => {
                typed |= n == "content-type";
                head.headers.push((name, value));
            }
        }
    }
    match location {
        // A local path, and nothing else said about the answer: the server serves it.
        Some(l) if l.starts_with('/') && status.is_none() && !typed => {
            head.local_redirect = Some(l);
            head.status = 200;
        }
        Some(l) => {
            head.status = status.unwrap_or(302);
            head.headers.push(("Location".into(), l.into_bytes()));
        }
        None if status.is_none() && !typed => return Err(AnswerError::NothingSaid),
        None => head.status = status.unwrap_or(200),
    }
    Ok(Some((head, body_start)))
}

/// Where the block ends (its last line's LF excluded) and the body starts.
fn block_end(out: &[u8]) -> Option<(usize, usize)> {
    // An empty block: the output starts with the empty line.
    if out.starts_with(b"\n") {
        return Some((0, 1));
    }
    if out.starts_with(b"\r\n") {
        return Some((0, 2));
    }
    let mut from = 0;
    while let Some(i) = memchr::memchr(b'\n', &out[from..]) {
        let nl = from + i;
        let rest = &out[nl + 1..];
        if rest.starts_with(b"\n") {
            return Some((nl, nl + 2));
        }
        if rest.starts_with(b"\r\n") {
            return Some((nl, nl + 3));
        }
        from = nl + 1;
    }
    None
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(&b[..b.len().min(80)]).into_owned()
}

fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `Name: value`, the value trimmed of blanks; `None` if the line is not one.
fn field(line: &[u8]) -> Option<(String, Vec<u8>)> {
    let colon = memchr::memchr(b':', line)?;
    let (name, value) = (&line[..colon], &line[colon + 1..]);
    if name.is_empty() || !name.iter().all(|&b| is_token(b)) {
        return None;
    }
    if value.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return None;
    }
    let value = value.trim_ascii();
    // Names are tokens (ASCII); values may carry Latin-1 or UTF-8 bytes (obs-text),
    // passed as they came.
    Some((String::from_utf8(name.to_vec()).ok()?, value.to_vec()))
}

/// `NNN` or `NNN reason`, 200 to 599.
fn status_code(value: &str) -> Option<u16> {
    let code = value.split([' ', '\t']).next()?;
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    code.parse().ok().filter(|c| (200..600).contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(out: &[u8]) -> (Head, usize) {
        parse(out, 8192, true).unwrap().unwrap()
    }

    #[test]
    fn a_typed_answer_is_200_with_its_headers() {
        let out = b"Content-Type: text/html\r\nX-Powered-By: PHP\r\nSet-Cookie: a=1\r\n\r\n<p>hi";
        let (head, body) = ok(out);
        assert_eq!(head.status, 200);
        assert_eq!(&out[body..], b"<p>hi");
        assert_eq!(head.headers.len(), 3);
        assert_eq!(head.headers[1], ("X-Powered-By".into(), b"PHP".to_vec()));
    }

    #[test]
    fn bare_lf_lines_end_the_block_too() {
        let (head, body) = ok(b"Content-type: text/plain\n\nbody\n");
        assert_eq!((head.status, body), (200, 26));
    }

    #[test]
    fn status_sets_the_code_and_location_redirects() {
        assert_eq!(ok(b"Status: 404 Not Found\r\nContent-Type: text/html\r\n\r\n").0.status, 404);
        assert_eq!(ok(b"Status: 500\n\n").0.status, 500);
        let (head, _) = ok(b"Location: https://example.com/x\r\n\r\n");
        assert_eq!(head.status, 302);
        assert_eq!(head.headers, [("Location".into(), b"https://example.com/x".to_vec())]);
        let (head, _) = ok(b"Status: 301 Moved\r\nLocation: https://example.com/\r\n\r\n");
        assert_eq!(head.status, 301);
        let (head, _) = ok(b"Location: /other?x=1\r\n\r\n");
        assert_eq!(head.local_redirect.as_deref(), Some("/other?x=1"));
        // With a status, a local path is sent to the client as it is.
        let (head, _) = ok(b"Status: 303 See Other\r\nLocation: /done\r\n\r\n");
        assert_eq!((head.status, head.local_redirect), (303, None));
    }

    #[test]
    fn the_servers_headers_are_dropped_and_length_is_read() {
        let (head, _) =
            ok(b"Content-Type: a/b\r\nConnection: close\r\nTransfer-Encoding: chunked\r\nContent-Length: 12\r\n\r\n");
        assert_eq!(head.headers, [("Content-Type".into(), b"a/b".to_vec())]);
        assert_eq!(head.content_length, Some(12));
    }

    #[test]
    fn a_block_not_all_there_waits_unless_the_output_ended() {
        assert_eq!(parse(b"Content-Type: a/b\r\n", 8192, false), Ok(None));
        assert_eq!(parse(b"Content-Type: a/b\r\n", 8192, true), Err(AnswerError::Cut));
        assert_eq!(parse(b"", 8192, true), Err(AnswerError::Cut));
        assert_eq!(parse(&[b'a'; 100], 64, false), Err(AnswerError::TooLong(64)));
    }

    #[test]
    fn garbage_is_refused() {
        let bad: [&[u8]; 8] = [
            b"hello world\n\n",
            b"Content-Type: a\r\n folded: x\r\n\r\n",
            b"Bad Name: x\n\n",
            b"Content-Type: a\x01b\n\n",
            b"Status: 2000\n\n",
            b"Status: 100 Continue\n\n",
            b"Status: abc\n\n",
            b"Content-Type: a\nContent-Length: -1\n\n",
        ];
        for out in bad {
            assert!(parse(out, 8192, true).is_err(), "{:?}", String::from_utf8_lossy(out));
        }
        assert_eq!(parse(b"X-Only: 1\n\n", 8192, true), Err(AnswerError::NothingSaid));
        assert_eq!(parse(b"\r\nbody", 8192, true), Err(AnswerError::NothingSaid));
    }

    #[test]
    fn obs_text_in_a_value_is_passed_as_it_came() {
        let (head, _) =
            ok(b"Content-Type: text/plain\r\nContent-Disposition: attachment; filename=\"caf\xe9.txt\"\r\n\r\n");
        assert_eq!(head.headers[1].1, b"attachment; filename=\"caf\xe9.txt\"".to_vec());
        // The values pika reads must be text.
        assert!(matches!(parse(b"Status: 2\xe900\r\n\r\n", 8192, true), Err(AnswerError::BadLine(_))));
    }
}
