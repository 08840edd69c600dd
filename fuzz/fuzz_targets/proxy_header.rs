//! The PROXY protocol header (v1 and v2) on arbitrary bytes, whole and in pieces.
//!
//! Beyond "never panics": a header that parses has a length within the stream and
//! within the protocol's limits (107 bytes for v1, 16 + 4096 for v2); every prefix of
//! it is "not yet" (a worker never acts on half a header); the bytes after it do not
//! change what it says; and a v2 stream is also fed with its length field pointed at
//! the rest of the input, so TLVs of every length and every truncation are walked.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pika::proxy_protocol::{MAX_HEADER, V1_MAX, V2_SIGNATURE, parse};

fn check(data: &[u8]) {
    let Ok(Some((len, header))) = parse(data) else { return };
    assert!(len <= data.len() && len <= MAX_HEADER, "{len} of {}", data.len());
    if header.version == 1 {
        assert!(len <= V1_MAX);
    }
    for cut in 0..len {
        assert_eq!(parse(&data[..cut]), Ok(None), "a prefix of {cut} bytes decided early");
    }
    let mut more = data[..len].to_vec();
    more.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
    assert_eq!(parse(&more), Ok(Some((len, header))));
}

fuzz_target!(|data: &[u8]| {
    check(data);
    // A v2 header around the input: command and family from its first two bytes,
    // the length set to what follows, so addresses and TLVs are the fuzzer's.
    if let Some((&[command, family], rest)) = data.split_first_chunk::<2>() {
        let mut h = V2_SIGNATURE.to_vec();
        h.extend_from_slice(&[0x20 | (command & 1), family]);
        h.extend_from_slice(&(rest.len().min(u16::MAX as usize) as u16).to_be_bytes());
        h.extend_from_slice(rest);
        check(&h);
    }
});
