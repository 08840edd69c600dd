//! The FastCGI protocol's bytes: the records pika writes to an application (one
//! request at a time per connection, with `FCGI_KEEP_CONN` so the connection serves
//! the next one too) and the reading of the records it answers with.
//!
//! A record is an 8-byte header (version 1, type, request id, content length,
//! padding length) and its content; parameters are name-value pairs whose lengths
//! take one byte below 128, else four with the high bit set. Nothing here touches a
//! socket: [`Request`] builds the bytes to send, [`Reader`] turns what arrived into
//! [`Event`]s, so both are tested on bytes in memory.

/// The one version of the protocol.
const VERSION: u8 = 1;
const BEGIN_REQUEST: u8 = 1;
const ABORT_REQUEST: u8 = 2;
const END_REQUEST: u8 = 3;
const PARAMS: u8 = 4;
const STDIN: u8 = 5;
const STDOUT: u8 = 6;
const STDERR: u8 = 7;
/// The responder role: the application answers a request.
const RESPONDER: u16 = 1;
/// The application keeps the connection open after the request.
const KEEP_CONN: u8 = 1;
/// The most content one record carries.
const MAX_CONTENT: usize = 65535;
/// The request id pika uses: one request at a time on each connection.
pub const REQUEST_ID: u16 = 1;

fn header(out: &mut Vec<u8>, kind: u8, len: usize) {
    // Content padded to a multiple of 8, as the specification recommends.
    let padding = (8 - len % 8) % 8;
    let id = REQUEST_ID.to_be_bytes();
    let n = (len as u16).to_be_bytes();
    out.extend_from_slice(&[VERSION, kind, id[0], id[1], n[0], n[1], padding as u8, 0]);
}

fn record(out: &mut Vec<u8>, kind: u8, content: &[u8]) {
    debug_assert!(content.len() <= MAX_CONTENT);
    header(out, kind, content.len());
    out.extend_from_slice(content);
    out.resize(out.len() + (8 - content.len() % 8) % 8, 0);
}

/// Appends `data` to `out` as records of `kind`, each at most [`MAX_CONTENT`] bytes;
/// nothing for empty `data` (an empty record ends a stream: [`Request::end_stdin`]).
fn stream(out: &mut Vec<u8>, kind: u8, data: &[u8]) {
    for part in data.chunks(MAX_CONTENT) {
        record(out, kind, part);
    }
}

fn pair_len(out: &mut Vec<u8>, len: usize) {
    if len < 128 {
        out.push(len as u8);
    } else {
        out.extend_from_slice(&(len as u32 | 0x8000_0000).to_be_bytes());
    }
}

/// Encodes one name-value pair.
pub fn pair(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    pair_len(out, name.len());
    pair_len(out, value.len());
    out.extend_from_slice(name);
    out.extend_from_slice(value);
}

/// The bytes that open a request: `FCGI_BEGIN_REQUEST` (responder, keep the
/// connection) and the parameters, ended by an empty `FCGI_PARAMS` record.
pub struct Request {
    pub bytes: Vec<u8>,
}

impl Request {
    pub fn begin(params: &[(Vec<u8>, Vec<u8>)]) -> Request {
        let mut bytes = Vec::with_capacity(2048);
        let role = RESPONDER.to_be_bytes();
        record(&mut bytes, BEGIN_REQUEST, &[role[0], role[1], KEEP_CONN, 0, 0, 0, 0, 0]);
        let mut encoded = Vec::with_capacity(1024);
        for (name, value) in params {
            pair(&mut encoded, name, value);
        }
        stream(&mut bytes, PARAMS, &encoded);
        record(&mut bytes, PARAMS, &[]);
        Request { bytes }
    }

    /// Appends body bytes as `FCGI_STDIN` records.
    pub fn stdin(out: &mut Vec<u8>, data: &[u8]) {
        stream(out, STDIN, data);
    }

    /// The empty `FCGI_STDIN` record that ends the body.
    pub fn end_stdin(out: &mut Vec<u8>) {
        record(out, STDIN, &[]);
    }

    /// `FCGI_ABORT_REQUEST`: the client went away.
    pub fn abort(out: &mut Vec<u8>) {
        record(out, ABORT_REQUEST, &[]);
    }
}

/// What one record from the application says.
#[derive(Debug, PartialEq, Eq)]
pub enum Event<'a> {
    /// Bytes of the answer (its header block, then its body).
    Stdout(&'a [u8]),
    /// A line or more for the error log.
    Stderr(&'a [u8]),
    /// The request is over. `complete`: the application served it (else it
    /// refused: overloaded, cannot multiplex, unknown role).
    End { app_status: u32, complete: bool },
    /// A record for another request id, or of a type a responder never sends to
    /// us (skipped).
    Other,
}

/// Why the application's bytes are not FastCGI.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FcgiError {
    #[error("not a FastCGI record (version {0})")]
    Version(u8),
    #[error("a malformed FCGI_END_REQUEST record")]
    BadEnd,
}

/// Splits the application's bytes into records.
#[derive(Default)]
pub struct Reader {
    buf: Vec<u8>,
    start: usize,
}

impl Reader {
    /// Room to read into: the caller reads into it and calls [`Reader::filled`].
    pub fn space(&mut self, want: usize) -> &mut [u8] {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start > 64 * 1024 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let len = self.buf.len();
        self.buf.resize(len + want, 0);
        &mut self.buf[len..]
    }

    /// After reading `n` bytes into [`Reader::space`] of size `want`.
    pub fn filled(&mut self, want: usize, n: usize) {
        let len = self.buf.len();
        self.buf.truncate(len - want + n);
    }

    /// Adds bytes (tests, or a caller reading elsewhere).
    pub fn push(&mut self, bytes: &[u8]) {
        let space = self.space(bytes.len());
        space.copy_from_slice(bytes);
    }

    /// The next whole record, or `None` until more bytes come.
    pub fn record(&mut self) -> Result<Option<Event<'_>>, FcgiError> {
        let rest = &self.buf[self.start..];
        if rest.len() < 8 {
            return Ok(None);
        }
        if rest[0] != VERSION {
            return Err(FcgiError::Version(rest[0]));
        }
        let kind = rest[1];
        let id = u16::from_be_bytes([rest[2], rest[3]]);
        let len = usize::from(u16::from_be_bytes([rest[4], rest[5]]));
        let total = 8 + len + usize::from(rest[6]);
        if rest.len() < total {
            return Ok(None);
        }
        let start = self.start + 8;
        self.start += total;
        let content = &self.buf[start..start + len];
        if id != REQUEST_ID {
            return Ok(Some(Event::Other));
        }
        Ok(Some(match kind {
            STDOUT => Event::Stdout(content),
            STDERR => Event::Stderr(content),
            END_REQUEST => {
                if content.len() < 8 {
                    return Err(FcgiError::BadEnd);
                }
                let app_status = u32::from_be_bytes([content[0], content[1], content[2], content[3]]);
                Event::End { app_status, complete: content[4] == 0 }
            }
            _ => Event::Other,
        }))
    }

    /// Bytes received and not yet made into records (a connection that ends with
    /// some is cut mid-record).
    pub fn has_partial(&self) -> bool {
        self.start < self.buf.len()
    }

    /// Forgets everything (the connection is gone).
    pub fn clear(&mut self) {
        self.buf.clear();
        self.start = 0;
    }
}

/// Decodes name-value pairs (what an application's `FCGI_GET_VALUES_RESULT` holds,
/// and what [`Request::begin`] sends): `None` when they are cut short.
pub fn pairs(mut bytes: &[u8]) -> Option<Vec<(&[u8], &[u8])>> {
    fn len(bytes: &mut &[u8]) -> Option<usize> {
        let first = *bytes.first()?;
        if first < 128 {
            *bytes = &bytes[1..];
            return Some(usize::from(first));
        }
        let four: [u8; 4] = bytes.get(..4)?.try_into().ok()?;
        *bytes = &bytes[4..];
        Some((u32::from_be_bytes(four) & 0x7fff_ffff) as usize)
    }
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let n = len(&mut bytes)?;
        let v = len(&mut bytes)?;
        let name = bytes.get(..n)?;
        let value = bytes.get(n..n + v)?;
        out.push((name, value));
        bytes = &bytes[n + v..];
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads back the records `bytes` holds: (type, content).
    fn records(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
        let mut out = Vec::new();
        while !bytes.is_empty() {
            assert_eq!(bytes[0], VERSION);
            assert_eq!(u16::from_be_bytes([bytes[2], bytes[3]]), REQUEST_ID);
            let len = usize::from(u16::from_be_bytes([bytes[4], bytes[5]]));
            let pad = usize::from(bytes[6]);
            assert_eq!((len + pad) % 8, 0, "records are padded to 8");
            out.push((bytes[1], bytes[8..8 + len].to_vec()));
            bytes = &bytes[8 + len + pad..];
        }
        out
    }

    #[test]
    fn a_request_begins_keeps_the_connection_and_ends_its_params() {
        let params = vec![(b"SCRIPT_FILENAME".to_vec(), b"/srv/a.php".to_vec()), (b"X".to_vec(), vec![b'v'; 300])];
        let r = Request::begin(&params);
        let recs = records(&r.bytes);
        assert_eq!(recs[0], (BEGIN_REQUEST, vec![0, 1, KEEP_CONN, 0, 0, 0, 0, 0]));
        assert_eq!(recs[1].0, PARAMS);
        let got = pairs(&recs[1].1).unwrap();
        assert_eq!(got[0], (&b"SCRIPT_FILENAME"[..], &b"/srv/a.php"[..]));
        assert_eq!(got[1].1.len(), 300, "a long value takes a four-byte length");
        assert_eq!(recs[2], (PARAMS, vec![]));
    }

    #[test]
    fn long_streams_are_cut_into_records() {
        let mut out = Vec::new();
        Request::stdin(&mut out, &vec![7u8; 150_000]);
        Request::end_stdin(&mut out);
        let recs = records(&out);
        let lens: Vec<usize> = recs.iter().map(|r| r.1.len()).collect();
        assert_eq!(lens, [65535, 65535, 150_000 - 131_070, 0]);
        assert!(recs.iter().all(|r| r.0 == STDIN));
    }

    fn from_app(kind: u8, id: u16, content: &[u8]) -> Vec<u8> {
        let mut v = vec![VERSION, kind];
        v.extend_from_slice(&id.to_be_bytes());
        v.extend_from_slice(&(content.len() as u16).to_be_bytes());
        v.extend_from_slice(&[3, 0]);
        v.extend_from_slice(content);
        v.extend_from_slice(&[0, 0, 0]);
        v
    }

    #[test]
    fn the_answer_is_read_record_by_record_however_it_arrives() {
        let mut bytes = from_app(STDOUT, 1, b"Status: 200\r\n\r\nhi");
        bytes.extend(from_app(STDERR, 1, b"PHP Notice: x"));
        bytes.extend(from_app(STDOUT, 2, b"someone else's"));
        bytes.extend(from_app(END_REQUEST, 1, &[0, 0, 0, 5, 0, 0, 0, 0]));
        let mut seen = Vec::new();
        let mut r = Reader::default();
        // One byte at a time: every record still comes whole.
        for b in &bytes {
            r.push(&[*b]);
            while let Some(e) = r.record().unwrap() {
                seen.push(format!("{e:?}"));
            }
        }
        assert_eq!(seen.len(), 4);
        assert!(seen[0].starts_with("Stdout"));
        assert!(seen[1].starts_with("Stderr"));
        assert_eq!(seen[2], "Other");
        assert_eq!(seen[3], "End { app_status: 5, complete: true }");
        assert!(!r.has_partial());
    }

    #[test]
    fn refusals_and_garbage_are_told() {
        let mut r = Reader::default();
        r.push(&from_app(END_REQUEST, 1, &[0, 0, 0, 0, 2, 0, 0, 0]));
        assert_eq!(r.record(), Ok(Some(Event::End { app_status: 0, complete: false })));
        let mut r = Reader::default();
        r.push(b"HTTP/1.1 200 OK\r\n");
        assert_eq!(r.record(), Err(FcgiError::Version(b'H')));
        let mut r = Reader::default();
        r.push(&from_app(END_REQUEST, 1, &[0, 0]));
        assert_eq!(r.record(), Err(FcgiError::BadEnd));
    }

    #[test]
    fn cut_pairs_are_refused() {
        let mut v = Vec::new();
        pair(&mut v, b"NAME", b"value");
        assert!(pairs(&v).is_some());
        assert!(pairs(&v[..v.len() - 1]).is_none());
        assert!(pairs(&[0x80, 0]).is_none());
    }
}
