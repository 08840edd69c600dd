//! Where a request body ends, in the bytes already read.
//!
//! No answer pika gives today needs a request's body (a `POST` gets 405, a `GET`
//! that carries a body is answered from its head), and a worker never waits for a
//! body it does not need: a client sending one slowly would hold the worker. So the
//! connection only asks where the body ends in what it has: a body that is all there
//! is dropped and the next request follows; one that is not is never read, the
//! answer says `Connection: close`, and the connection lingers for a moment so the
//! client reads the answer rather than a reset (`worker::events`).
//!
//! Chunk-size lines must end in CRLF; the trailer section is read by the same rules
//! as a head ([`request::trailer_end`]), so a front end that ends the message at an
//! empty line ends it where pika does.

use super::request::{self, Framing, HttpError};

/// Longest chunk-size line (with extensions) accepted.
const MAX_CHUNK_LINE: usize = 1024;
/// Largest trailer section.
pub const MAX_TRAILER: usize = 8192;

/// The length of the body that starts at `buf[0]`, if all of it (trailers included)
/// is in `buf`; `Ok(None)` if more would have to be read. A body declared (or
/// chunked) past `max` is refused whatever has arrived.
pub fn buffered_len(buf: &[u8], framing: Framing, max: u64) -> Result<Option<usize>, HttpError> {
    match framing {
        Framing::None => Ok(Some(0)),
        Framing::Length(n) if n > max => Err(HttpError::BodyTooLarge),
        Framing::Length(n) => Ok((buf.len() as u64 >= n).then_some(n as usize)),
        Framing::Chunked => chunked_len(buf, max),
    }
}

fn chunked_len(buf: &[u8], max: u64) -> Result<Option<usize>, HttpError> {
    let mut pos = 0;
    let mut total: u64 = 0;
    loop {
        let Some(nl) = memchr::memchr(b'\n', &buf[pos..]) else {
            if buf.len() - pos > MAX_CHUNK_LINE {
                return Err(HttpError::BadRequest("chunk line too long"));
            }
            return Ok(None);
        };
        let line = &buf[pos..=pos + nl];
        if line.len() > MAX_CHUNK_LINE {
            return Err(HttpError::BadRequest("chunk line too long"));
        }
        // httparse reads an empty size as 0, which would end the body early and
        // smuggle the rest in as a request: a size has at least one digit. It also
        // refuses more than 16 digits, leading zeros included, which the grammar
        // (1*HEXDIG) allows and nginx and Apache accept: they are skipped first.
        let zeros = line.iter().take_while(|&&b| b == b'0').count();
        let digits = &line[zeros.min(line.iter().take_while(|b| b.is_ascii_hexdigit()).count().saturating_sub(1))..];
        let size = match httparse::parse_chunk_size(digits) {
            Ok(httparse::Status::Complete((_, size))) if line.ends_with(b"\r\n") && line[0].is_ascii_hexdigit() => size,
            _ => return Err(HttpError::BadRequest("bad chunk size line")),
        };
        pos += line.len();
        if size == 0 {
            break;
        }
        total = total.saturating_add(size);
        if total > max {
            return Err(HttpError::BodyTooLarge);
        }
        let Some(data_end) = usize::try_from(size).ok().and_then(|s| pos.checked_add(s)) else {
            return Err(HttpError::BodyTooLarge);
        };
        if buf.len() < data_end + 2 {
            return Ok(None);
        }
        if &buf[data_end..data_end + 2] != b"\r\n" {
            return Err(HttpError::BadRequest("chunk data longer than its size"));
        }
        pos = data_end + 2;
    }
    // The trailer section: fields by a head's rules, then the empty line.
    Ok(request::trailer_end(&buf[pos..], MAX_TRAILER)?.map(|n| pos + n))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u64 = 1 << 20;

    fn chunked(b: &[u8]) -> Result<Option<usize>, HttpError> {
        buffered_len(b, Framing::Chunked, MAX)
    }

    #[test]
    fn a_length_body_is_there_or_not() {
        assert_eq!(buffered_len(b"", Framing::None, MAX), Ok(Some(0)));
        assert_eq!(buffered_len(b"hello GET /", Framing::Length(5), MAX), Ok(Some(5)));
        assert_eq!(buffered_len(b"hell", Framing::Length(5), MAX), Ok(None));
        assert_eq!(buffered_len(b"", Framing::Length(MAX + 1), MAX), Err(HttpError::BodyTooLarge));
    }

    #[test]
    fn chunked_bodies_end_after_their_trailers() {
        let body = b"5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\n";
        assert_eq!(chunked(body), Ok(Some(15)));
        let with_trailer = b"1;ext=1\r\na\r\n0\r\nX-T: 1\r\n\r\n";
        assert_eq!(chunked(with_trailer), Ok(Some(with_trailer.len())));
        // Every prefix is "not yet".
        for cut in 0..body.len() - 16 {
            assert_eq!(chunked(&body[..cut]), Ok(None), "cut at {cut}");
        }
    }

    #[test]
    fn trailers_follow_the_heads_rules() {
        // A bare-LF empty line ends the trailers, as it ends a head.
        assert_eq!(chunked(b"0\r\n\n"), Ok(Some(4)));
        assert_eq!(chunked(b"0\r\nX: 1\n\n"), Ok(Some(9)));
        // A line without a colon, or with a bare CR, is not a field.
        assert!(matches!(chunked(b"0\r\nnot a field\r\n\r\n"), Err(HttpError::BadRequest(_))));
        assert!(matches!(chunked(b"0\r\nX: a\rb\r\n\r\n"), Err(HttpError::BadRequest(_))));
        let flood: Vec<u8> = [&b"0\r\n"[..], &b"X: y\r\n".repeat(2000)].concat();
        assert_eq!(chunked(&flood), Err(HttpError::HeadersTooLarge));
    }

    #[test]
    fn malformed_chunks_are_refused() {
        for bad in [&b"\r\nhello\r\n"[..], b"x\r\n", b"5\nhello\r\n", b"5\r\nhelloX\r\n0\r\n\r\n", b"-1\r\n"] {
            assert!(matches!(chunked(bad), Err(HttpError::BadRequest(_))), "{:?}", String::from_utf8_lossy(bad));
        }
        assert!(matches!(chunked(&[b'1'; 2000]), Err(HttpError::BadRequest(_))));
        assert_eq!(buffered_len(b"10\r\n", Framing::Chunked, 8), Err(HttpError::BodyTooLarge));
        assert_eq!(chunked(b"ffffffffffffffff\r\n"), Err(HttpError::BodyTooLarge));
        assert!(matches!(chunked(b"10000000000000000\r\n"), Err(HttpError::BadRequest(_))), "17 digits overflow");
    }

    #[test]
    fn leading_zeros_do_not_count_as_digits() {
        let zeros = b"0".repeat(40);
        let body = [&zeros[..], b"5\r\nhello\r\n", &zeros[..], b"\r\n\r\n"].concat();
        assert_eq!(chunked(&body), Ok(Some(body.len())));
        let ext = [&zeros[..], b"1;a=0\r\nx\r\n0\r\n\r\n"].concat();
        assert_eq!(chunked(&ext), Ok(Some(ext.len())));
    }
}
