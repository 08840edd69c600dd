//! The request-head reader on arbitrary bytes: finding the end of a head (whole and
//! as it trickles in), the limits on a partial head, and `parse` with small limits.
//!
//! The input is the byte stream a client sent. Beyond "never panics", it checks what
//! the connection code relies on: the head end found incrementally is the one found
//! in one go, and a head that parses is exactly the bytes httparse read (nothing left
//! over to be taken as the next request). The request corpus in `tests/requests/`
//! makes good seeds.
#![no_main]

use std::mem::MaybeUninit;

use libfuzzer_sys::fuzz_target;
use pika::http::request::{self, Framing, Limits, MAX_HEADERS, Method};

/// Small limits, so that the 414 and 431 edges are within the fuzzer's input sizes.
const LIMITS: Limits = Limits { max_request_line: 64, max_header_size: 512, max_headers: 8 };

/// How many places an earlier read is assumed to have stopped at, per input.
const CUTS: usize = 16;

fuzz_target!(|buf: &[u8]| {
    let _ = request::check_partial(buf, &LIMITS);

    let end = request::find_head_end(buf, 0);
    if let Some(end) = end {
        assert!(end <= buf.len() && end > 0);
        assert_eq!(buf[end - 1], b'\n');
    }
    // The connection scans again from where the last read ended, when that read held
    // no whole head; it must find the same end as a scan from the start. Reads are
    // assumed to stop at even steps through the input and just after CRs and LFs,
    // where a line ending may be split.
    let evenly = (0..=CUTS).map(|k| buf.len() * k / CUTS);
    let at_eol = buf.iter().enumerate().filter(|(_, b)| matches!(b, b'\r' | b'\n')).map(|(i, _)| i + 1).take(CUTS);
    for cut in evenly.chain(at_eol) {
        if request::find_head_end(&buf[..cut], 0).is_none() {
            assert_eq!(request::find_head_end(buf, cut), end, "scan resumed at {cut}");
        }
    }

    let Some(end) = end else { return };
    let head = &buf[..end];
    let mut headers = [const { MaybeUninit::uninit() }; MAX_HEADERS];
    let Ok(req) = request::parse(head, &mut headers, &LIMITS) else { return };

    assert!(req.head_len <= head.len());
    // The connection takes `end` as the head's length; httparse must agree, or the
    // bytes between its end and ours would vanish unread.
    assert_eq!(req.head_len, head.len(), "httparse ended the head early");
    assert!(head.len() <= LIMITS.max_header_size + 2);
    assert!(req.headers.len() <= LIMITS.max_headers);
    assert!(req.target.len() <= LIMITS.max_request_line);
    assert_eq!(req.line, request::request_line(head));
    assert!(!req.target.is_empty());
    let target_ok = if req.target == b"*" {
        req.method == Method::Options
    } else {
        // Origin-form, a query left of absolute-form, or authority-form, which only the
        // methods refused with 405 may carry.
        matches!(req.target[0], b'/' | b'?') || req.method == Method::OtherKnown
    };
    assert!(target_ok, "target {:?} for {:?}", req.target, req.method);
    if req.http11 {
        assert!(req.host.is_some(), "HTTP/1.1 without a host");
    }
    if req.framing == Framing::Chunked {
        assert!(req.http11, "chunked HTTP/1.0 request");
    }
    if req.expect_continue {
        assert!(req.http11 && req.framing != Framing::None);
    }
    let _ = req.header_list("connection");
});
