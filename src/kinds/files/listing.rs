//! Directory listings (`autoindex = true`): an HTML table, or JSON for clients that
//! ask for `application/json`.
//!
//! How the HTML table shows sizes and times is the location's `autoindex_exact_size`
//! and `autoindex_localtime` ([`Style`], nginx's keys of the same names); the JSON
//! form always gives bytes and UTC, for programs.
//!
//! Names come from the file system, which an uploader may control, so every name is
//! HTML-escaped in text and percent-encoded in links. Sorting follows Apache's query
//! keys: `?C=N|S|M` (name, size, modified) and `;O=A|D` (ascending, descending).

use std::fmt::Write as _;
use std::fs::File;

use nix::fcntl::AtFlags;
use nix::sys::stat::{SFlag, fstatat};

use crate::base::text::{html_escape, json_string};
use crate::http::path::{CleanPath, encode_path};
use crate::http::request::Request;
use crate::http::response::{Body, Reply};

/// How a listing's HTML shows sizes and times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    /// Sizes in bytes (`true`, the default), or rounded to K, M, G (`1.5M`).
    pub exact_size: bool,
    /// Times in the server's local time zone with its offset, or in UTC (the
    /// default).
    pub local_time: bool,
}

impl Default for Style {
    fn default() -> Style {
        Style { exact_size: true, local_time: false }
    }
}

struct Entry {
    name: Vec<u8>,
    is_dir: bool,
    size: u64,
    mtime: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    Name,
    Size,
    Modified,
}

/// Sort key and direction from Apache's `C=` and `O=` query keys.
fn sort_order(query: Option<&[u8]>) -> (Key, bool) {
    let (mut key, mut desc) = (Key::Name, false);
    for pair in query.unwrap_or(b"").split(|&b| b == b';' || b == b'&') {
        match pair {
            b"C=N" => key = Key::Name,
            b"C=S" => key = Key::Size,
            b"C=M" => key = Key::Modified,
            b"O=A" => desc = false,
            b"O=D" => desc = true,
            _ => {}
        }
    }
    (key, desc)
}

fn sort(entries: &mut [Entry], key: Key, desc: bool) {
    // Directories first, as most listings show them; then the chosen key, name as tie-break.
    entries.sort_by(|a, b| {
        let ord = match key {
            Key::Name => a.name.cmp(&b.name),
            Key::Size => a.size.cmp(&b.size).then_with(|| a.name.cmp(&b.name)),
            Key::Modified => a.mtime.cmp(&b.mtime).then_with(|| a.name.cmp(&b.name)),
        };
        b.is_dir.cmp(&a.is_dir).then(if desc { ord.reverse() } else { ord })
    });
}

/// Lists `dir`, the directory `path` names, already opened under the root: its
/// entries are read through that descriptor and looked at relative to it (links not
/// followed), so what is listed is what was opened. Names starting with `.` are left
/// out unless `serve_hidden`.
pub fn render(
    dir: File,
    (serve_hidden, style): (bool, Style),
    req: &Request<'_>,
    path: &CleanPath<'_>,
    query: Option<&[u8]>,
    reply: &mut Reply<'_>,
) {
    // The stream of names reads a second descriptor of the same open directory; the
    // first one anchors each entry's fstatat.
    let stream = dir.try_clone().ok().and_then(|d| nix::dir::Dir::from_fd(d.into()).ok());
    let mut stream = match stream {
        Some(d) => d,
        None => {
            reply.error(403, "This directory cannot be listed.");
            return;
        }
    };
    let mut entries: Vec<Entry> = stream
        .iter()
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name();
            let bytes = name.to_bytes();
            if bytes == b"." || bytes == b".." || (!serve_hidden && bytes.starts_with(b".")) {
                return None;
            }
            let st = fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
            let is_dir = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR;
            Some(Entry { name: bytes.to_vec(), is_dir, size: st.st_size.max(0) as u64, mtime: st.st_mtime })
        })
        .collect();
    let (key, desc) = sort_order(query);
    sort(&mut entries, key, desc);

    let wants_json =
        req.header("accept").is_some_and(|a| a.windows(16).any(|w| w.eq_ignore_ascii_case(b"application/json")));
    if wants_json {
        reply.header("Content-Type", "application/json");
        reply.body = Body::Owned(json(&entries).into_bytes());
    } else {
        reply.header("Content-Type", "text/html; charset=utf-8");
        reply.body = Body::Owned(html(&path.bytes, &entries, (key, desc), style).into_bytes());
    }
    // Variants by Accept: caches must keep them apart.
    reply.header("Vary", "Accept");
}

fn rfc3339(secs: i64) -> String {
    jiff::Timestamp::from_second(secs).map(|t| t.to_string()).unwrap_or_default()
}

/// A time for the HTML table: RFC 3339 in UTC, or in the server's time zone with
/// its offset (`2026-12-05T23:10:00+01:00`).
fn shown_time(secs: i64, local: bool) -> String {
    if !local {
        return rfc3339(secs);
    }
    let Ok(t) = jiff::Timestamp::from_second(secs) else { return String::new() };
    // The zone read at start, before any chroot (which may lack /etc/localtime).
    let zoned = t.to_zoned_datetime(crate::log::local_zone().clone());
    zoned.strftime("%Y-%m-%dT%H:%M:%S%:z").to_string()
}

/// A size as nginx's `autoindex_exact_size off` shows it: bytes below a KiB, then
/// K, M, G with one decimal below ten (`987`, `1.5K`, `23M`).
fn rounded_size(n: u64) -> String {
    const UNITS: [(u64, &str); 4] = [(1 << 40, "T"), (1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")];
    let Some((unit, suffix)) = UNITS.iter().find(|(u, _)| n >= *u) else { return n.to_string() };
    let tenths = n * 10 / unit;
    if tenths < 100 { format!("{}.{}{suffix}", tenths / 10, tenths % 10) } else { format!("{}{suffix}", n / unit) }
}

fn html(dir: &[u8], entries: &[Entry], (key, desc): (Key, bool), style: Style) -> String {
    let title = html_escape(&String::from_utf8_lossy(dir));
    let mut s = String::with_capacity(512 + entries.len() * 160);
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>Index of {title}</title></head>\n<body><h1>Index of {title}</h1>\n<table>\n<tr>"
    );
    for (k, label, c) in [(Key::Name, "Name", 'N'), (Key::Size, "Size", 'S'), (Key::Modified, "Last modified", 'M')] {
        // Clicking the current column flips its order, as in Apache.
        let order = if k == key && !desc { 'D' } else { 'A' };
        let _ = write!(s, "<th><a href=\"?C={c};O={order}\">{label}</a></th>");
    }
    s.push_str("</tr>\n");
    if dir != b"/" {
        s.push_str("<tr><td><a href=\"../\">../</a></td><td>-</td><td></td></tr>\n");
    }
    for e in entries {
        let slash = if e.is_dir { "/" } else { "" };
        let href = encode_path(&e.name);
        let name = html_escape(&String::from_utf8_lossy(&e.name));
        let size = match (e.is_dir, style.exact_size) {
            (true, _) => "-".to_string(),
            (false, true) => e.size.to_string(),
            (false, false) => rounded_size(e.size),
        };
        let _ = writeln!(
            s,
            "<tr><td><a href=\"./{href}{slash}\">{name}{slash}</a></td><td>{size}</td><td>{}</td></tr>",
            shown_time(e.mtime, style.local_time)
        );
    }
    s.push_str("</table>\n</body></html>\n");
    s
}

fn json(entries: &[Entry]) -> String {
    let mut s = String::from("[");
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(
            s,
            "{{\"name\":{},\"type\":\"{}\",\"size\":{},\"mtime\":\"{}\"}}",
            json_string(&String::from_utf8_lossy(&e.name)),
            if e.is_dir { "directory" } else { "file" },
            e.size,
            rfc3339(e.mtime)
        );
    }
    s.push_str("]\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(name: &str, is_dir: bool, size: u64, mtime: i64) -> Entry {
        Entry { name: name.as_bytes().to_vec(), is_dir, size, mtime }
    }

    #[test]
    fn sorting() {
        let mut v = vec![e("b", false, 1, 30), e("a", false, 3, 10), e("d", true, 0, 0), e("c", false, 2, 20)];
        let names = |v: &[Entry]| v.iter().map(|e| String::from_utf8(e.name.clone()).unwrap()).collect::<Vec<_>>();
        sort(&mut v, Key::Name, false);
        assert_eq!(names(&v), ["d", "a", "b", "c"]);
        sort(&mut v, Key::Size, true);
        assert_eq!(names(&v), ["d", "a", "c", "b"]);
        sort(&mut v, Key::Modified, false);
        assert_eq!(names(&v), ["d", "a", "c", "b"]);
        assert_eq!(sort_order(Some(b"C=S;O=D")), (Key::Size, true));
        assert_eq!(sort_order(Some(b"C=M&O=A")), (Key::Modified, false));
        assert_eq!(sort_order(None), (Key::Name, false));
        // The last of each key wins, back to the defaults too.
        assert_eq!(sort_order(Some(b"C=S;O=D;C=N;O=A")), (Key::Name, false));
    }

    #[test]
    fn names_are_escaped_and_encoded() {
        let page = html(
            b"/d/",
            &[e("<img src=x onerror=alert(1)>.txt", false, 1, 0), e("a b\"c", false, 1, 0)],
            (Key::Name, false),
            Style::default(),
        );
        assert!(page.contains("&lt;img src=x onerror=alert(1)&gt;.txt"));
        assert!(page.contains("href=\"./%3Cimg%20src=x%20onerror=alert(1)%3E.txt\""));
        assert!(page.contains("href=\"./a%20b%22c\""));
        assert!(!page.contains("<img"));
        let j = json(&[e("q\"<", false, 5, 0)]);
        assert_eq!(
            j,
            "[{\"name\":\"q\\\"\\u003c\",\"type\":\"file\",\"size\":5,\"mtime\":\"1970-01-01T00:00:00Z\"}]\n"
        );
    }

    #[test]
    fn sizes_rounded_and_times_local_when_asked() {
        for (n, want) in
            [(0, "0"), (1023, "1023"), (1024, "1.0K"), (1536, "1.5K"), (10 << 10, "10K"), (23 << 20, "23M")]
        {
            assert_eq!(rounded_size(n), want, "{n}");
        }
        assert_eq!(rounded_size((5 << 30) + (1 << 29)), "5.5G");
        let entries = [e("big.iso", false, 1_610_612_736, 0)];
        let exact = html(b"/", &entries, (Key::Name, false), Style::default());
        assert!(exact.contains("<td>1610612736</td><td>1970-01-01T00:00:00Z</td>"), "{exact}");
        let rounded = html(b"/", &entries, (Key::Name, false), Style { exact_size: false, local_time: false });
        assert!(rounded.contains("<td>1.5G</td>"), "{rounded}");
        // Local time: the same instant with the zone's offset (UTC here: +00:00).
        let local = shown_time(0, true);
        let back = jiff::Timestamp::strptime("%Y-%m-%dT%H:%M:%S%:z", &local).unwrap();
        assert_eq!(back.as_second(), 0, "{local}");
    }
}
