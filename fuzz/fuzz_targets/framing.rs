//! Body framing as the head decides it (`Content-Length` and `Transfer-Encoding`),
//! and the reader that acts on it.
//!
//! Heads are built from fragments that matter to framing (spellings of the two
//! fields, lists, huge and zero-padded numbers, codings in every order) plus raw
//! bytes, and every head `parse` accepts is checked against the fields httparse
//! actually saw: never both a length and chunked, a length is exactly what each
//! Content-Length said, chunked only when it is the final coding.
//!
//! Then the connection's read side runs on the head and a body, delivered in pieces
//! of a size the input picks ([`Input`] over a [`Memory`] transport): either a body
//! encoded as the head says (chunk sizes with leading zeros and extensions,
//! trailers) followed by the next request, which must be exactly what is left
//! unread once the body is dropped; or raw bytes, which must never make the reader
//! panic, hang, or take more than it was given.
#![no_main]

use std::mem::MaybeUninit;

use libfuzzer_sys::arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use pika::serve::input::{Buffer, DROP_MAX, Input};
use pika::http::request::{self, Framing, Limits, MAX_HEADERS, Request};
use pika::serve::transport::Memory;

/// The server's defaults, so that only framing decides what is refused.
const LIMITS: Limits = Limits { max_request_line: 8190, max_header_size: 16384, max_headers: 100 };

const LINES: &[&[u8]] = &[
    b"POST / HTTP/1.1",
    b"GET / HTTP/1.1",
    b"PUT /a HTTP/1.1",
    b"POST / HTTP/1.0",
    b"GET / HTTP/1.0",
    b"OPTIONS * HTTP/1.1",
    b"POST http://h/ HTTP/1.1",
];

const NAMES: &[&[u8]] = &[
    b"Content-Length",
    b"content-length",
    b"CONTENT-LENGTH",
    b"Transfer-Encoding",
    b"transfer-encoding",
    b"TRANSFER-ENCODING",
    b"Host",
    b"Connection",
    b"Expect",
    b"TE",
    b"Content-Length ",
    b" Transfer-Encoding",
    b"X-Pad",
];

const VALUES: &[&[u8]] = &[
    b"chunked",
    b"Chunked",
    b"chunked;q=1",
    b"gzip",
    b"x-gzip",
    b"deflate",
    b"identity",
    b"0",
    b"00",
    b"5",
    b"05",
    b"18446744073709551615",
    b"18446744073709551616",
    b"00000000000000000000000000001",
    b"-1",
    b"+5",
    b"0x5",
    b"localhost",
    b"close",
    b"keep-alive",
    b"100-continue",
    b"",
];

const SEPARATORS: &[&[u8]] = &[b": ", b":", b":\t", b" : ", b"::"];
const LIST_SEPARATORS: &[&[u8]] = &[b", ", b",", b" ,", b",,", b"\t,\t", b" "];
const EOLS: &[&[u8]] = &[b"\r\n", b"\r\n", b"\r\n", b"\n", b"\r"];

fn pick<'a>(u: &mut Unstructured<'_>, from: &[&'a [u8]]) -> Result<&'a [u8]> {
    Ok(from[u.choose_index(from.len())?])
}

/// Raw bytes (one time in eight) or one of `from`.
fn fragment(u: &mut Unstructured<'_>, from: &[&[u8]], out: &mut Vec<u8>) -> Result<()> {
    if u.ratio(1, 8)? {
        let len = u.int_in_range(0..=16)?;
        out.extend_from_slice(u.bytes(len)?);
    } else {
        out.extend_from_slice(pick(u, from)?);
    }
    Ok(())
}

fn build(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    let mut head = Vec::new();
    fragment(u, LINES, &mut head)?;
    head.extend_from_slice(pick(u, EOLS)?);
    if u.ratio(7, 8)? {
        head.extend_from_slice(b"Host: h\r\n");
    }
    for _ in 0..u.int_in_range(0..=8)? {
        fragment(u, NAMES, &mut head)?;
        head.extend_from_slice(pick(u, SEPARATORS)?);
        // A value is a list of one or more elements.
        for i in 0..u.int_in_range(1..=4)? {
            if i > 0 {
                head.extend_from_slice(pick(u, LIST_SEPARATORS)?);
            }
            fragment(u, VALUES, &mut head)?;
        }
        head.extend_from_slice(pick(u, EOLS)?);
    }
    head.extend_from_slice(pick(u, EOLS)?);
    Ok(head)
}

/// Every element of every Content-Length field, as an exact number (`None` for an
/// element that is not 1*DIGIT, or too long for any `u64`).
fn content_lengths(req: &Request<'_>) -> Vec<Option<u128>> {
    let fields = req.headers.iter().filter(|h| h.name.eq_ignore_ascii_case("content-length"));
    fields
        .flat_map(|h| h.value.split(|&b| b == b','))
        .map(|part| {
            let digits = part.trim_ascii();
            if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let significant = &digits[digits.iter().position(|&b| b != b'0').unwrap_or(digits.len())..];
            if significant.len() > 20 {
                return None;
            }
            Some(significant.iter().fold(0u128, |n, &d| n * 10 + u128::from(d - b'0')))
        })
        .collect()
}

/// The transfer-codings in order, across every Transfer-Encoding field.
fn codings<'a>(req: &Request<'a>) -> Vec<&'a [u8]> {
    let fields = req.headers.iter().filter(|h| h.name.eq_ignore_ascii_case("transfer-encoding"));
    fields.flat_map(|h| h.value.split(|&b| b == b',')).map(<[u8]>::trim_ascii).filter(|c| !c.is_empty()).collect()
}

fn check(req: &Request<'_>) {
    let lengths = content_lengths(req);
    let te_seen = req.headers.iter().any(|h| h.name.eq_ignore_ascii_case("transfer-encoding"));
    assert!(lengths.iter().all(Option::is_some), "accepted a malformed Content-Length: {lengths:?}");
    assert!(!te_seen || lengths.is_empty(), "accepted both Content-Length and Transfer-Encoding");
    match req.framing {
        Framing::Length(n) => {
            assert!(n > 0, "Length(0) should be no body");
            assert!(!lengths.is_empty(), "a length with no Content-Length");
            for l in &lengths {
                assert_eq!(*l, Some(u128::from(n)), "Length({n}) is not what the field said");
            }
        }
        Framing::Chunked => {
            assert!(req.http11, "chunked in HTTP/1.0");
            let codings = codings(req);
            let last = codings.last().copied().unwrap_or_default();
            assert!(last.eq_ignore_ascii_case(b"chunked"), "chunked is not the final coding: {codings:?}");
            let chunked_count = codings.iter().filter(|c| c.eq_ignore_ascii_case(b"chunked")).count();
            assert_eq!(chunked_count, 1, "chunked more than once: {codings:?}");
        }
        Framing::None => {
            assert!(!te_seen, "Transfer-Encoding but no body framing");
            assert!(lengths.iter().all(|l| *l == Some(0)), "a Content-Length but no body: {lengths:?}");
        }
    }
}

/// What follows a body that was read to its end.
const NEXT: &[u8] = b"GET /next HTTP/1.1\r\n";
/// The largest body the reader accepts here.
const MAX_BODY: u64 = 1 << 16;

/// A body encoded as `framing` says, then [`NEXT`]; None when the framing has no
/// body or one too long to build.
fn encoded_body(u: &mut Unstructured<'_>, framing: Framing) -> Result<Option<Vec<u8>>> {
    let mut body = Vec::new();
    match framing {
        Framing::None => return Ok(None),
        Framing::Length(n) if n > 4096 => return Ok(None),
        Framing::Length(n) => body.extend_from_slice(u.bytes(n as usize)?),
        Framing::Chunked => {
            for _ in 0..u.int_in_range(0..=4)? {
                let size = u.int_in_range(1..=64)?;
                let zeros = u.int_in_range(0..=3)?;
                body.extend(std::iter::repeat_n(b'0', zeros));
                body.extend_from_slice(format!("{size:x}").as_bytes());
                if u.ratio(1, 4)? {
                    body.extend_from_slice(b";ext=\"v\"");
                }
                body.extend_from_slice(b"\r\n");
                body.extend_from_slice(u.bytes(size)?);
                body.extend_from_slice(b"\r\n");
            }
            body.extend_from_slice(b"0\r\n");
            for _ in 0..u.int_in_range(0..=2)? {
                body.extend_from_slice(b"X-Trailer: 1\r\n");
            }
            body.extend_from_slice(b"\r\n");
        }
    }
    body.extend_from_slice(NEXT);
    Ok(Some(body))
}

/// Reads `head` and `body` through the connection's read side in pieces of `piece`
/// bytes. A body built by [`encoded_body`] must be dropped to exactly its end (the
/// whole stream has arrived, so nothing is "not there yet").
fn read(head: &[u8], body: &[u8], piece: usize, encoded: bool) {
    let stream = [head, body].concat();
    let mut t = Memory::new(&stream, piece);
    let mut input = Input::new(LIMITS);
    input.begin(Buffer::default());
    let Ok(Some(end)) = input.try_head(&mut t) else {
        panic!("the head find_head_end found was not read");
    };
    let head = input.take_head(end).to_vec();
    let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let req = request::parse(&head, &mut headers, &LIMITS).expect("parsed once already");
    let result = input.drop_body(&mut t, &req, MAX_BODY);
    assert!(input.bytes_in() <= stream.len() as u64, "counted more bytes than were sent");
    if encoded {
        assert!(result.is_ok(), "a well-formed body was refused: {result:?}");
        if result == Ok(false) {
            // Not waited for: only a body larger than what is read to drop one.
            assert!(body.len() - NEXT.len() > DROP_MAX, "a body all there was not dropped");
            return;
        }
        let mut rest = input.unread().to_vec();
        rest.extend(t.pieces.iter().flatten());
        assert_eq!(rest, NEXT, "the body was not dropped to exactly its end");
        assert_eq!(input.bytes_in(), (stream.len() - NEXT.len()) as u64, "bytes in are the head and the body");
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(buf) = build(&mut u) else { return };
    // The connection parses exactly up to the end `find_head_end` finds.
    let Some(end) = request::find_head_end(&buf, 0) else { return };
    let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let Ok(req) = request::parse(&buf[..end], &mut headers, &LIMITS) else { return };
    check(&req);
    let Ok(piece) = u.int_in_range(1..=64) else { return };
    match encoded_body(&mut u, req.framing) {
        Ok(Some(body)) => read(&buf[..end], &body, piece, true),
        _ => read(&buf[..end], u.take_rest(), piece, false),
    }
});
