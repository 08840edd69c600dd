//! The pages pika writes, in a real browser: Debian's headless Chromium, driven over
//! the DevTools protocol (`--remote-debugging-pipe`: JSON messages ended by a NUL on
//! its descriptors 3 and 4), against a running pika. It looks at the rendered DOM
//! (the status page's live charts and table, the listing's sorting, the pages at phone
//! width) and keeps screenshots under `target/screenshots/`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use crate::util::*;

/// A headless Chromium and one page (tab) in it.
struct Browser {
    child: Child,
    to: ChildStdin,
    from: Receiver<Value>,
    next_id: u64,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn start(chromium: &Path) -> Browser {
        let profile = tempfile::tempdir().unwrap();
        // The protocol pipe is the browser's descriptors 3 (commands in) and 4
        // (answers out): the shell puts this end's stdin and stdout there.
        let mut child = Command::new("sh")
            .arg("-c")
            .arg("exec \"$0\" \"$@\" 3<&0 4>&1 </dev/null >/dev/null 2>/dev/null")
            .arg(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                // Containers often have a small /dev/shm: keep shared memory in /tmp.
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--disable-extensions",
                "--hide-scrollbars",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start chromium");
        let to = child.stdin.take().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, from) = channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(out);
            let mut buf = Vec::new();
            while r.read_until(0, &mut buf).is_ok_and(|n| n > 0) {
                if buf.last() == Some(&0) {
                    buf.pop();
                }
                if let Ok(v) = serde_json::from_slice::<Value>(&buf)
                    && tx.send(v).is_err()
                {
                    return;
                }
                buf.clear();
            }
        });
        let mut b = Browser { child, to, from, next_id: 0, session: String::new(), _profile: profile };
        let target = b.call("Target.createTarget", json!({"url": "about:blank"}));
        let target = target["targetId"].as_str().unwrap().to_string();
        let attached = b.call("Target.attachToTarget", json!({"targetId": target, "flatten": true}));
        b.session = attached["sessionId"].as_str().unwrap().to_string();
        b.call("Page.enable", json!({}));
        // Content-Security-Policy violations, kept where the test reads them.
        b.call(
            "Page.addScriptToEvaluateOnNewDocument",
            json!({"source": "window.__csp = []; document.addEventListener('securitypolicyviolation', e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"}),
        );
        b
    }

    /// Sends a command (to the page, once attached) and waits for its answer.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.try_call(method, params).unwrap_or_else(|e| panic!("{method}: {e}"))
    }

    fn try_call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if !self.session.is_empty() {
            msg["sessionId"] = json!(self.session);
        }
        let mut bytes = serde_json::to_vec(&msg).unwrap();
        bytes.push(0);
        self.to.write_all(&bytes).map_err(|e| format!("write to chromium: {e}"))?;
        loop {
            let v = self.from.recv_timeout(DEADLINE).map_err(|e| format!("no answer from chromium: {e}"))?;
            if v["id"].as_u64() != Some(id) {
                continue; // an event
            }
            if let Some(err) = v.get("error") {
                return Err(err.to_string());
            }
            return Ok(v["result"].clone());
        }
    }

    /// The value of a JavaScript expression in the page (promises awaited); `Err`
    /// while the page is between documents or the expression throws.
    fn eval(&mut self, expr: &str) -> Result<Value, String> {
        let r = self
            .try_call("Runtime.evaluate", json!({"expression": expr, "returnByValue": true, "awaitPromise": true}))?;
        if let Some(e) = r.get("exceptionDetails") {
            return Err(e.to_string());
        }
        Ok(r["result"]["value"].clone())
    }

    /// Waits until `expr` is true in the page.
    fn wait_for(&mut self, what: &str, expr: &str) {
        wait_until(DEADLINE, what, || (self.eval(expr) == Ok(Value::Bool(true))).then_some(()));
    }

    /// Opens `url` and waits for its load.
    fn open(&mut self, url: &str) {
        self.eval("window.__left = true").unwrap();
        self.call("Page.navigate", json!({"url": url}));
        self.wait_for(&format!("{url} to load"), "!window.__left && document.readyState === 'complete'");
    }

    /// Clicks the element `selector` names (a link) and waits for the page it opens.
    fn click_through(&mut self, selector: &str) {
        self.eval("window.__left = true").unwrap();
        self.eval(&format!("document.querySelector({}).click()", json!(selector))).unwrap();
        self.wait_for(&format!("the page {selector} opens"), "!window.__left && document.readyState === 'complete'");
    }

    /// A viewport of `width` × `height` CSS pixels; `phone`: a mobile one (the page's
    /// viewport meta tag is honoured, as on a phone).
    fn viewport(&mut self, width: u32, height: u32, phone: bool) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": if phone { 2 } else { 1 }, "mobile": phone}),
        );
    }

    /// Saves a PNG of the viewport as `target/screenshots/NAME.png`.
    fn screenshot(&mut self, name: &str) -> PathBuf {
        let shot = self.call("Page.captureScreenshot", json!({"format": "png"}));
        let png = base64_decode(shot["data"].as_str().unwrap());
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().unwrap().join("screenshots");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).unwrap();
        path
    }

    /// The page's Content-Security-Policy violations so far.
    fn violations(&mut self) -> Value {
        self.eval("window.__csp").unwrap()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    for chunk in text.as_bytes().chunks(4) {
        let digits: Vec<u8> = chunk.iter().filter(|&&c| c != b'=').map(|&c| value(c)).collect();
        let n = digits.iter().enumerate().fold(0u32, |n, (i, &d)| n | (u32::from(d) << (18 - 6 * i)));
        out.extend_from_slice(&n.to_be_bytes()[1..digits.len()]);
    }
    out
}

/// A site with a status page at /server-status and a listing at /files/: three
/// files whose name, size and age orders all differ, and a folder.
fn site() -> Site {
    let site = Site::new();
    // An upstream that refuses (a port just let go): the status page's upstreams
    // table has a row that a request through `/app/` changes.
    let refusing = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    site.config(
        "",
        &format!(
            "[workers]\nstart = 3\nmin_spare = 1\nmax_spare = 4\n\
             [[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n\
             [[vhost.location]]\nexact = \"/server-status\"\nstatus = true\n\
             [[vhost.location]]\nprefix = \"/files/\"\nautoindex = true\n\
             [[vhost.location]]\nprefix = \"/app/\"\nproxy = \"http://127.0.0.1:{refusing}\"\n\
             proxy_fail_timeout = \"300s\"\n"
        ),
    );
    std::fs::create_dir_all(site.path("htdocs/files/folder")).unwrap();
    let now = SystemTime::now();
    for (name, size, age) in [("apple.txt", 300, 100), ("banana.txt", 100, 300), ("cherry.txt", 200, 400)] {
        let f = std::fs::File::create(site.path(&format!("htdocs/files/{name}"))).unwrap();
        f.set_len(size).unwrap();
        f.set_modified(now - Duration::from_secs(age)).unwrap();
    }
    site
}

/// The listing's names, in the order shown.
const NAMES: &str = "[...document.querySelectorAll('td:first-child a')].map(a => a.textContent)";

#[test]
fn status_page_listing_and_error_page_in_chromium() {
    let Some(chromium) = need_tool("chromium") else { return };
    let site = site();
    let p = Pika::start(&site, "-F");
    let base = format!("http://localhost:{}", p.addr.port());
    let mut b = Browser::start(&chromium);

    // The status page: the live view draws from ?json under the page's own policy.
    b.viewport(1280, 900, false);
    b.open(&format!("{base}/server-status"));
    b.wait_for(
        "three samples on the charts",
        "Number(document.getElementById('chart-rps').dataset.samples) >= 3 && \
         Number(document.getElementById('chart-workers').dataset.samples) >= 3",
    );
    assert_eq!(b.eval("document.getElementById('live').hidden"), Ok(json!(false)));
    let points = |b: &mut Browser, line: &str| {
        b.eval(&format!("document.querySelector('polyline.{line}').points.numberOfItems")).unwrap().as_u64().unwrap()
    };
    // Requests per second start with the second sample (a rate needs two).
    assert!(points(&mut b, "rps") >= 2, "the requests chart has points");
    assert!(points(&mut b, "busy") >= 3 && points(&mut b, "idle") >= 3, "the workers chart has points");
    let workers = children_of(p.pid).len();
    assert_eq!(workers, 3);
    let rows = "document.getElementById('workers').rows.length - 1";
    b.wait_for("one row per worker", &format!("{rows} === {workers}"));
    let pids = b
        .eval("[...document.getElementById('workers').rows].slice(1).map(r => Number(r.cells[1].textContent))")
        .unwrap();
    let mut pids: Vec<i32> = pids.as_array().unwrap().iter().map(|v| v.as_i64().unwrap() as i32).collect();
    pids.sort();
    assert_eq!(pids, children_of(p.pid), "the table's rows are the worker processes");
    // The upstreams' table is redrawn too: a request through the proxy fails, and
    // the row says so without a reload.
    let cell = |n: usize| format!("document.getElementById('upstreams').rows[1].cells[{n}].textContent");
    assert_eq!(b.eval(&cell(1)), Ok(json!("up")));
    assert_eq!(get(p.addr, "/app/x").status, 502);
    b.wait_for("the upstream's row redrawn", &format!("{} === '1' && {}.startsWith('down')", cell(9), cell(1)));
    assert_eq!(b.violations(), json!([]), "nothing the page's Content-Security-Policy refuses");
    b.screenshot("status-desktop");

    // The listing: each column's link sorts by it, and again the other way.
    b.open(&format!("{base}/files/"));
    let by_name = json!(["../", "folder/", "apple.txt", "banana.txt", "cherry.txt"]);
    assert_eq!(b.eval(NAMES), Ok(by_name.clone()));
    for (column, ascending) in [
        (1, json!(["../", "folder/", "apple.txt", "banana.txt", "cherry.txt"])),
        (2, json!(["../", "folder/", "banana.txt", "cherry.txt", "apple.txt"])),
        (3, json!(["../", "folder/", "cherry.txt", "banana.txt", "apple.txt"])),
    ] {
        let link = format!("th:nth-child({column}) a");
        // From the name order, a first click on name flips it; on another column it
        // sorts ascending.
        if column != 1 {
            b.click_through(&link);
            assert_eq!(b.eval(NAMES), Ok(ascending.clone()), "column {column} ascending");
        }
        b.click_through(&link);
        let mut descending = ascending.as_array().unwrap()[2..].to_vec();
        descending.reverse();
        let descending: Vec<Value> = [json!("../"), json!("folder/")].into_iter().chain(descending).collect();
        assert_eq!(b.eval(NAMES), Ok(Value::Array(descending)), "column {column} descending");
        b.click_through(&link);
        assert_eq!(b.eval(NAMES), Ok(ascending), "column {column} ascending again");
    }
    b.screenshot("listing-desktop");

    b.open(&format!("{base}/no-such-page"));
    assert_eq!(b.eval("document.querySelector('h1').textContent"), Ok(json!("404 Not Found")));
    b.screenshot("error-desktop");

    // At phone width: each page lays out to the phone's width (its viewport meta tag)
    // and nothing makes the page scroll sideways (the workers' table scrolls in its box).
    b.viewport(390, 844, true);
    for (path, name) in [("/server-status", "status"), ("/files/", "listing"), ("/no-such-page", "error")] {
        b.open(&format!("{base}{path}"));
        if name == "status" {
            b.wait_for("a sample at phone width", "Number(document.getElementById('chart-rps').dataset.samples) >= 2");
        }
        let widths = b.eval("[window.innerWidth, document.documentElement.scrollWidth]").unwrap();
        assert_eq!(widths[0], json!(390), "{path}: laid out for the phone's width");
        assert!(widths[1].as_u64().unwrap() <= 390, "{path}: wider than the phone: {widths}");
        b.screenshot(&format!("{name}-phone"));
    }
    assert_eq!(b.violations(), json!([]));
}

/// A page whose Content-Security-Policy comes from a `headers` rule and whose
/// script and stylesheet come compressed (on the fly, and a precompressed sibling):
/// Chromium runs the script from the page's origin, applies the stylesheet, refuses
/// the inline script the policy forbids, and decodes what it was sent.
#[test]
fn a_page_with_a_csp_from_headers_and_compressed_assets_in_chromium() {
    let (Some(chromium), Some(gzip)) = (need_tool("chromium"), need_tool("gzip")) else { return };
    let site = Site::new();
    site.config(
        "",
        "[[vhost]]\nserver_names = [\"localhost\"]\nroot = \"htdocs\"\n\
         [[vhost.location]]\nprefix = \"/app/\"\ncompress = true\nprecompressed = [\"gzip\"]\n\
         headers = { \"Content-Security-Policy\" = \"default-src 'self'\", \"X-Content-Type-Options\" = \"nosniff\" }\n",
    );
    let filler: String = (0..400).map(|i| format!("/* line {i} of a script that compresses well */\n")).collect();
    site.write(
        "htdocs/app/index.html",
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><link rel=\"stylesheet\" href=\"app.css\">\n\
         <script src=\"app.js\"></script></head>\n<body><h1 id=\"title\">waiting</h1>\n\
         <script>window.inlineRan = true;</script></body></html>\n",
    );
    site.write("htdocs/app/app.js", format!("{filler}document.addEventListener('DOMContentLoaded', () => {{ document.getElementById('title').textContent = 'ran'; }});\n"));
    let css: String = (0..300).map(|i| format!(".unused-{i} {{ color: #123456; }}\n")).collect();
    site.write("htdocs/app/app.css", format!("{css}h1 {{ color: rgb(0, 128, 0); }}\n"));
    let o = std::process::Command::new(gzip).args(["-k", "-f"]).arg(site.path("htdocs/app/app.css")).output().unwrap();
    assert!(o.status.success());
    let p = Pika::start(&site, "-X");
    let mut b = Browser::start(&chromium);
    b.open(&format!("http://localhost:{}/app/", p.addr.port()));
    b.wait_for("the script to run", "document.getElementById('title').textContent === 'ran'");
    assert_eq!(b.eval("getComputedStyle(document.getElementById('title')).color"), Ok(json!("rgb(0, 128, 0)")));
    assert_eq!(b.eval("window.inlineRan === undefined"), Ok(json!(true)), "the policy refuses inline scripts");
    let violations = b.violations().to_string();
    assert!(violations.contains("script-src"), "{violations}");
    // Both assets came compressed (fewer bytes on the wire than decoded).
    let sizes = "performance.getEntriesByType('resource').filter(e => e.name.includes('/app/app.')).map(e => [e.name.split('/').pop(), e.encodedBodySize < e.decodedBodySize])";
    let got = b.eval(&format!("JSON.stringify({sizes}.sort())")).unwrap();
    assert_eq!(got, json!("[[\"app.css\",true],[\"app.js\",true]]"), "compressed on the wire");
    b.screenshot("rules-csp-compressed");
}
