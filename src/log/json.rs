//! `format = "json"`: one JSON object per line, for log pipelines (jq, Loki, Vector,
//! Elasticsearch) that would otherwise parse Apache's text with a regular expression.
//!
//! The object has the fields of `combined` (without `%l`, always `-` here: no identd;
//! `%u` is `user`, the Basic auth user or `null`) plus what an operator asks a JSON log for: the time
//! taken, the vhost, the bytes sent in all, the request id, the TLS details, the
//! upstream of a proxied request. Every
//! key is always there, `null` when the request had no such thing (no query, no
//! Referer). Client bytes are escaped per JSON: UTF-8 passes through, `"` `\` and
//! control characters get their escapes, and bytes that are not UTF-8 appear as
//! `\u00XX` (their value), so every record is valid JSON and a client can neither
//! end a line nor forge a key. The record is rendered like the others (one buffer,
//! one `write()`), and its client fields are cut to fit the record limit the same
//! way ([`super::format::LogFormat::render_within`]), never inside an escape or a
//! UTF-8 character.

use std::time::SystemTime;

use super::record::Record;
use crate::base::text;

/// Appends the record's JSON object (no newline). `escape` writes a client field's
/// escaped text (capped by the caller).
pub(crate) fn render(r: &Record<'_>, out: &mut Vec<u8>, escape: &dyn Fn(&mut Vec<u8>, &[u8])) {
    let string = |out: &mut Vec<u8>, key: &str, value: Option<&[u8]>| {
        out.extend_from_slice(key.as_bytes());
        match value {
            Some(v) => {
                out.push(b'"');
                escape(out, v);
                out.push(b'"');
            }
            None => out.extend_from_slice(b"null"),
        }
    };
    out.extend_from_slice(b"{\"time\":\"");
    push_time(out, r.start);
    out.extend_from_slice(b"\",\"client\":\"");
    text::push_ip(out, r.client);
    out.push(b'"');
    string(out, ",\"user\":", r.user.map(str::as_bytes));
    string(out, ",\"request\":", Some(r.request_line));
    string(out, ",\"method\":", Some(r.method));
    string(out, ",\"path\":", Some(r.path));
    string(out, ",\"query\":", r.query);
    string(out, ",\"protocol\":", Some(r.protocol.as_bytes()));
    out.extend_from_slice(b",\"status\":");
    text::push_int(out, r.status);
    out.extend_from_slice(b",\"bytes\":");
    text::push_int(out, r.body_bytes);
    out.extend_from_slice(b",\"bytes_sent\":");
    text::push_int(out, r.bytes_out);
    string(out, ",\"referer\":", (r.headers_in)("Referer"));
    string(out, ",\"user_agent\":", (r.headers_in)("User-Agent"));
    out.extend_from_slice(b",\"duration_us\":");
    text::push_int(out, r.duration.as_micros());
    string(out, ",\"vhost\":", Some(r.vhost.as_bytes()));
    string(out, ",\"host\":", r.host);
    out.extend_from_slice(b",\"request_id\":\"");
    text::push_hex(out, r.request_id, 16);
    out.push(b'"');
    match r.tls {
        Some(t) => {
            string(out, ",\"tls\":{\"protocol\":", Some(t.protocol.as_bytes()));
            string(out, ",\"cipher\":", Some(t.cipher.as_bytes()));
            string(out, ",\"sni\":", t.sni.map(str::as_bytes));
            out.push(b'}');
        }
        None => out.extend_from_slice(b",\"tls\":null"),
    }
    match r.upstream {
        Some(u) => {
            string(out, ",\"upstream\":{\"addr\":", Some(u.addr.as_bytes()));
            out.extend_from_slice(b",\"status\":");
            match u.status {
                Some(s) => text::push_int(out, s),
                None => out.extend_from_slice(b"null"),
            }
            out.extend_from_slice(b",\"header_time_us\":");
            match u.header_time {
                Some(t) => text::push_int(out, t.as_micros()),
                None => out.extend_from_slice(b"null"),
            }
            out.extend_from_slice(b",\"time_us\":");
            text::push_int(out, u.time.as_micros());
            out.push(b'}');
        }
        None => out.extend_from_slice(b",\"upstream\":null"),
    }
    out.push(b'}');
}

/// The JSON string escape of `bytes` (without the quotes), at most `cap` bytes of it:
/// an escape or a UTF-8 character is written whole or not at all.
pub(crate) fn escape_capped(out: &mut Vec<u8>, bytes: &[u8], cap: usize) {
    // Nearly every field is printable ASCII with no quote or backslash: one check,
    // one copy.
    let plain = |b: u8| (0x20..0x7f).contains(&b) & (b != b'"') & (b != b'\\');
    if bytes.len() <= cap && bytes.iter().fold(true, |all, &b| all & plain(b)) {
        out.extend_from_slice(bytes);
        return;
    }
    let end = out.len().saturating_add(cap);
    let put = |out: &mut Vec<u8>, piece: &[u8]| -> bool {
        if out.len() + piece.len() > end {
            return false;
        }
        out.extend_from_slice(piece);
        true
    };
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            let mut utf8 = [0; 4];
            let ok = match c {
                '"' => put(out, b"\\\""),
                '\\' => put(out, b"\\\\"),
                '\n' => put(out, b"\\n"),
                '\r' => put(out, b"\\r"),
                '\t' => put(out, b"\\t"),
                '\u{8}' => put(out, b"\\b"),
                '\u{c}' => put(out, b"\\f"),
                // The other controls, and DEL, which a terminal would act on.
                '\0'..='\u{1f}' | '\u{7f}' => put(out, &unicode_escape(c as u8)),
                c => put(out, c.encode_utf8(&mut utf8).as_bytes()),
            };
            if !ok {
                return;
            }
        }
        for &b in chunk.invalid() {
            if !put(out, &unicode_escape(b)) {
                return;
            }
        }
    }
}

/// `\u00XX`.
fn unicode_escape(b: u8) -> [u8; 6] {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    [b'\\', b'u', b'0', b'0', HEX[(b >> 4) as usize], HEX[(b & 15) as usize]]
}

/// `2026-12-01T14:37:17.123Z`: UTC, milliseconds, the form log pipelines parse
/// without a time-zone database (computed, not formatted through `core::fmt`).
fn push_time(out: &mut Vec<u8>, t: SystemTime) {
    let since = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let rest = secs % 86_400;
    let two = |out: &mut Vec<u8>, n: u64| out.extend_from_slice(&[b'0' + (n / 10 % 10) as u8, b'0' + (n % 10) as u8]);
    text::push_int(out, y);
    out.push(b'-');
    two(out, m);
    out.push(b'-');
    two(out, d);
    out.push(b'T');
    two(out, rest / 3600);
    out.push(b':');
    two(out, rest / 60 % 60);
    out.push(b':');
    two(out, rest % 60);
    out.push(b'.');
    let ms = u64::from(since.subsec_millis());
    out.push(b'0' + (ms / 100) as u8);
    two(out, ms % 100);
    out.push(b'Z');
}

/// Year, month, day of a count of days since 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, exact over the proleptic Gregorian calendar).
fn civil_from_days(days: i64) -> (i64, u64, u64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u64;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u64;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::format::LogFormat;
    use crate::log::format::tests::record;
    use crate::log::record::TlsFields;
    use std::time::Duration;

    fn time(t: SystemTime) -> String {
        let mut out = Vec::new();
        push_time(&mut out, t);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn times_are_utc_with_milliseconds() {
        let at = |s: u64, ms: u64| SystemTime::UNIX_EPOCH + Duration::from_millis(s * 1000 + ms);
        assert_eq!(time(at(0, 0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(time(at(1_700_000_000, 123)), "2023-11-14T22:13:20.123Z");
        assert_eq!(time(at(951_782_400, 7)), "2000-02-29T00:00:00.007Z");
        assert_eq!(time(at(4_102_444_799, 999)), "2099-12-31T23:59:59.999Z");
        // Against jiff, a day at a time over four centuries.
        for day in (0..146_097).step_by(7) {
            let secs = day * 86_400 + 3_723;
            let want = jiff::Timestamp::from_second(secs).unwrap().strftime("%Y-%m-%dT%H:%M:%S.000Z").to_string();
            assert_eq!(time(at(secs as u64, 0)), want);
        }
    }

    fn escaped(bytes: &[u8], cap: usize) -> Vec<u8> {
        let mut out = Vec::new();
        escape_capped(&mut out, bytes, cap);
        out
    }

    #[test]
    fn escapes_per_json() {
        assert_eq!(escaped(b"plain /path?x=1", 100), b"plain /path?x=1");
        assert_eq!(
            escaped("a\"b\\c\r\n\t\x08\x0c\x00\x1b\x7f é €".as_bytes(), 100),
            "a\\\"b\\\\c\\r\\n\\t\\b\\f\\u0000\\u001b\\u007f é €".as_bytes()
        );
        assert_eq!(escaped(b"\xff\xc3(", 100), b"\\u00ff\\u00c3(");
        // Cut whole: never half an escape or half a character.
        assert_eq!(escaped(b"ab\"cd", 3), b"ab");
        assert_eq!(escaped("aé".as_bytes(), 2), b"a");
        assert_eq!(escaped(b"a\xff", 6), b"a");
    }

    fn line(r: &Record<'_>, limit: usize) -> String {
        let mut out = Vec::new();
        LogFormat::parse("json").unwrap().render_within(r, "[unused]", &mut out, limit);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_record_is_one_object_on_one_line() {
        let h = |n: &str| (n == "User-Agent").then_some(&b"curl/8 \"x\"\n"[..]);
        assert_eq!(
            line(&record(&h), 4096),
            "{\"time\":\"2023-11-14T22:13:20.123Z\",\"client\":\"127.0.0.1\",\"user\":null,\"request\":\"GET /a%20b?x=1 HTTP/1.1\",\
             \"method\":\"GET\",\"path\":\"/a b\",\"query\":\"x=1\",\"protocol\":\"HTTP/1.1\",\"status\":200,\
             \"bytes\":1234,\"bytes_sent\":1400,\"referer\":null,\"user_agent\":\"curl/8 \\\"x\\\"\\n\",\
             \"duration_us\":1500,\"vhost\":\"example.com\",\"host\":\"Example.com:8080\",\
             \"request_id\":\"0000000000000abc\",\"tls\":null,\"upstream\":null}\n"
        );
        let upstream = crate::log::record::UpstreamFields {
            addr: "unix:/run/app.sock",
            status: Some(502),
            header_time: None,
            time: std::time::Duration::from_micros(2500),
        };
        let v: serde_json::Value =
            serde_json::from_str(&line(&Record { upstream: Some(upstream), ..record(&h) }, 4096)).unwrap();
        assert_eq!(
            v["upstream"],
            serde_json::json!({"addr": "unix:/run/app.sock", "status": 502, "header_time_us": null, "time_us": 2500})
        );
        let tls = TlsFields { protocol: "TLSv1.3", cipher: "TLS_AES_128_GCM_SHA256", sni: None };
        let r = Record { tls: Some(tls), query: None, host: None, ..record(&h) };
        let v: serde_json::Value = serde_json::from_str(&line(&r, 4096)).unwrap();
        assert_eq!(
            v["tls"],
            serde_json::json!({"protocol": "TLSv1.3", "cipher": "TLS_AES_128_GCM_SHA256", "sni": null})
        );
        assert_eq!((v["query"].is_null(), v["host"].is_null()), (true, true));
    }

    #[test]
    fn long_hostile_fields_are_cut_and_the_record_stays_json() {
        let ua: Vec<u8> = (0..6000u32).map(|i| [b'"', 0xff, b'\\', 0x01, b'a'][i as usize % 5]).collect();
        let h = |n: &str| (n == "User-Agent" || n == "Referer").then_some(&ua[..]);
        let request_line: Vec<u8> = [&b"GET /"[..], &"é".repeat(3000).into_bytes(), b" HTTP/1.1"].concat();
        let r = Record { request_line: &request_line, path: &request_line[4..], ..record(&h) };
        let text = line(&r, 4096);
        assert!(text.len() <= 4096 && text.len() > 3800 && text.ends_with("}\n"), "{}", text.len());
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!((v["status"].as_u64(), v["bytes"].as_u64()), (Some(200), Some(1234)), "every field kept");
        assert!(v["user_agent"].as_str().unwrap().starts_with("\"\u{ff}\\\u{1}a"));
        assert!(v["request"].as_str().unwrap().starts_with("GET /éé"));
    }

    proptest::proptest! {
        /// Any bytes become a JSON string that a real parser reads back, and a capped
        /// escape is a prefix of the whole one, within the cap, that parses too.
        #[test]
        fn escape_is_valid_json_and_cuts_whole(bytes: Vec<u8>, cap in 0usize..80) {
            let whole = escaped(&bytes, usize::MAX);
            let quoted = [&b"\""[..], &whole, b"\""].concat();
            let back: String = serde_json::from_slice(&quoted).unwrap();
            let want: String = bytes
                .utf8_chunks()
                .flat_map(|c| c.valid().chars().chain(c.invalid().iter().map(|&b| char::from(b))))
                .collect();
            proptest::prop_assert_eq!(back, want);
            let cut = escaped(&bytes, cap);
            proptest::prop_assert!(cut.len() <= cap && whole.starts_with(&cut));
            let quoted = [&b"\""[..], &cut, b"\""].concat();
            proptest::prop_assert!(serde_json::from_slice::<String>(&quoted).is_ok());
        }
    }
}
