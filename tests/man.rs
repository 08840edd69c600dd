//! The man pages, pika(8) and pika.toml(5), are made from what pika itself says: the
//! options from `pika -h`, every key from the comments of the shipped
//! `conf/pika.toml`, around the prose of `man/*.in`. This test makes them again and
//! fails if the pages in `man/` differ, so they cannot drift from the program or the
//! config; `PIKA_BLESS=1` writes them instead. Where groff is installed, both pages
//! must format without a warning.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::*;

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Text for a roff text line: backslashes escaped, a dash that starts an option
/// (`-t`, `--help`) made a minus, a leading `.` or `'` kept literal.
fn roff(text: &str) -> String {
    let mut out = String::new();
    let mut prev = ' ';
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\e"),
            '-' if prev == ' ' || prev == '(' || prev == '-' || prev == '[' => out.push_str("\\-"),
            _ => out.push(c),
        }
        prev = c;
    }
    if out.starts_with(['.', '\'']) { format!("\\&{out}") } else { out }
}

/// pika(8)'s synopsis and options, from `pika -h`.
fn usage_parts(usage: &str) -> (String, String) {
    let mut lines = usage.lines();
    let synopsis = lines.next().and_then(|l| l.strip_prefix("usage: pika ")).expect("usage: line");
    let synopsis = format!(".B pika\n{}", roff(synopsis));
    let mut options = String::new();
    let mut after = Vec::new();
    for line in lines {
        if let Some(opt) = line.strip_prefix("  -") {
            let (flag, text) = opt.split_once("  ").unwrap_or((opt, ""));
            let (flag, arg) = flag.trim().split_once(' ').unwrap_or((flag.trim(), ""));
            let tag = if arg.is_empty() { format!(".B \\-{flag}") } else { format!(".BI \\-{flag} \" {arg}\"") };
            options.push_str(&format!(".TP\n{tag}\n{}\n", roff(text.trim())));
        } else if line.starts_with("   ") {
            options.push_str(&roff(line.trim()));
            options.push('\n');
        } else if !line.trim().is_empty() {
            after.push(roff(line.trim()));
        }
    }
    // The lines after the options (the default mode, the signals in brief).
    options.push_str(&format!(".PP\n{}\n", after.join("\n")));
    (synopsis, options)
}

/// One block of the config: a comment paragraph, keys with their comment, or a table.
#[derive(Debug)]
enum Block {
    Prose(Vec<String>),
    Keys(Vec<String>, Vec<String>),
    Table(String, Vec<String>),
}

/// `key = value`, `# key = value`, `[table]`, `# [[table]]`: a line of TOML, maybe
/// commented out, as opposed to a line of commentary.
fn is_toml(line: &str) -> bool {
    let l = line.trim_start_matches('#').trim();
    let word = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    let table = l.trim_matches(|c| c == '[' || c == ']');
    (l.starts_with('[') && l.ends_with(']') && table.bytes().all(|b| b.is_ascii_lowercase() || b == b'_' || b == b'.'))
        || l.split_once(" = ").is_some_and(|(k, _)| word(k))
}

fn blocks(conf: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let (mut comments, mut keys): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    let flush = |out: &mut Vec<Block>, comments: &mut Vec<String>, keys: &mut Vec<String>| match (
        comments.is_empty(),
        keys.is_empty(),
    ) {
        (true, true) => {}
        (_, false) => out.push(Block::Keys(std::mem::take(keys), std::mem::take(comments))),
        (false, true) => out.push(Block::Prose(std::mem::take(comments))),
    };
    for line in conf.lines() {
        let commented = line.starts_with('#');
        if line.trim().is_empty() {
            flush(&mut out, &mut comments, &mut keys);
        } else if !commented && line.starts_with('[') {
            flush(&mut out, &mut Vec::new(), &mut keys);
            out.push(Block::Table(line.trim().to_string(), std::mem::take(&mut comments)));
        } else if is_toml(line) {
            keys.push(line.to_string());
        } else {
            if !keys.is_empty() {
                flush(&mut out, &mut comments, &mut keys);
            }
            comments.push(line.trim_start_matches('#').trim().to_string());
        }
    }
    flush(&mut out, &mut comments, &mut keys);
    out
}

/// Comment lines as roff: `#` alone ends a paragraph.
fn paragraphs(lines: &[String], out: &mut String) {
    for l in lines {
        if l.is_empty() {
            out.push_str(".sp\n");
        } else {
            out.push_str(&roff(l));
            out.push('\n');
        }
    }
}

/// pika.toml(5)'s body, from the shipped config.
fn keys_part(conf: &str) -> String {
    let mut out = String::new();
    let mut top = true;
    for block in blocks(conf) {
        match block {
            // The file's opening comment comes first: it continues the DESCRIPTION.
            Block::Prose(lines) => {
                out.push_str(".PP\n");
                paragraphs(&lines, &mut out);
            }
            Block::Keys(keys, comments) => {
                if top {
                    out.push_str(".SS \"The top level\"\n");
                    top = false;
                }
                out.push_str(".PP\n");
                for (i, k) in keys.iter().enumerate() {
                    if i > 0 {
                        out.push_str(".br\n");
                    }
                    out.push_str(&format!("\\fB{}\\fR\n", roff(k)));
                }
                if !comments.is_empty() {
                    out.push_str(".RS\n");
                    paragraphs(&comments, &mut out);
                    out.push_str(".RE\n");
                }
            }
            Block::Table(name, comments) => {
                top = false;
                out.push_str(&format!(".SS \"{name}\"\n"));
                if !comments.is_empty() {
                    out.push_str(".PP\n");
                    paragraphs(&comments, &mut out);
                }
            }
        }
    }
    out
}

fn fill(template: &str, parts: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for line in template.lines() {
        match parts.iter().find(|(mark, _)| line == *mark) {
            Some((_, text)) => out.push_str(text.trim_end_matches('\n')),
            None => out.push_str(&line.replace("@VERSION@", env!("CARGO_PKG_VERSION"))),
        }
        out.push('\n');
    }
    out
}

/// The two pages as they should be: (file name, text).
fn pages() -> Vec<(&'static str, String)> {
    let help = Command::new(BIN).arg("-h").output().expect("pika -h");
    let usage = String::from_utf8(help.stdout).unwrap();
    let (synopsis, options) = usage_parts(&usage);
    let template = std::fs::read_to_string(repo("man/pika.8.in")).unwrap();
    let pika8 = fill(&template, &[("@SYNOPSIS@", &synopsis), ("@OPTIONS@", &options)]);

    let conf = std::fs::read_to_string(repo("conf/pika.toml")).unwrap();
    let template = std::fs::read_to_string(repo("man/pika.toml.5.in")).unwrap();
    let pika_toml5 = fill(&template, &[("@KEYS@", &keys_part(&conf))]);
    vec![("pika.8", pika8), ("pika.toml.5", pika_toml5)]
}

#[test]
fn man_pages_are_made_from_pika_h_and_the_shipped_config() {
    let bless = std::env::var("PIKA_BLESS").is_ok_and(|v| !v.is_empty() && v != "0");
    for (name, want) in pages() {
        let path = repo("man").join(name);
        if bless {
            std::fs::write(&path, &want).unwrap();
            continue;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "man/{name} is not what pika -h, conf/pika.toml and man/{name}.in make: \
             run `PIKA_BLESS=1 cargo test --test integration man::` and commit the result"
        );
    }
}

/// Every option of `pika -h` and every key of the config has its place in the pages
/// (a check on the generator itself).
#[test]
fn man_pages_name_every_option_and_key() {
    let pages = pages();
    let usage = String::from_utf8(Command::new(BIN).arg("-h").output().unwrap().stdout).unwrap();
    for line in usage.lines().filter_map(|l| l.strip_prefix("  -")) {
        let flag = line.split_whitespace().next().unwrap();
        let tagged = |macro_: &str| pages[0].1.contains(&format!("\n.{macro_} \\-{flag}"));
        assert!(tagged("B") || tagged("BI"), "-{flag} missing from pika(8)");
    }
    for sig in ["TERM", "QUIT", "HUP", "USR1", "WINCH", "TTIN", "USR2"] {
        assert!(pages[0].1.contains(&format!(".B {sig}")), "{sig} missing from pika(8)'s SIGNALS");
    }
    let conf = std::fs::read_to_string(repo("conf/pika.toml")).unwrap();
    for line in conf.lines().filter(|l| is_toml(l)) {
        assert!(pages[1].1.contains(&roff(line)), "{line:?} missing from pika.toml(5)");
    }
}

/// groff formats both pages without a warning (lintian runs the same check).
#[test]
fn man_pages_format_cleanly() {
    let Some(groff) = need_tool("groff") else { return };
    for page in ["pika.8", "pika.toml.5"] {
        let o =
            Command::new(&groff).args(["-man", "-Tutf8", "-ww", "-z"]).arg(repo("man").join(page)).output().unwrap();
        assert!(
            o.status.success() && o.stderr.is_empty(),
            "groff on man/{page}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// GitHub's anchor for a heading: lower case, punctuation but `-` and `_` dropped,
/// spaces made `-`.
fn anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The README's contents line names every section and subsection, in order, and
/// nothing else: a section added without its entry fails here.
#[test]
fn the_readme_contents_names_every_section_in_order() {
    let readme = std::fs::read_to_string(repo("README.md")).unwrap();
    let mut fenced = false;
    let mut headings = Vec::new();
    for line in readme.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && let Some(h) = line.strip_prefix("## ").or_else(|| line.strip_prefix("### ")) {
            headings.push(anchor(h));
        }
    }
    let start = readme.find("\nContents: ").expect("the README has a `Contents:` paragraph");
    let contents = &readme[start..];
    let contents = &contents[..contents[1..].find("\n\n").map_or(contents.len(), |e| e + 1)];
    let listed: Vec<String> = contents.split("](#").skip(1).map(|s| s[..s.find(')').unwrap()].to_string()).collect();
    assert!(headings.len() > 10, "the README's headings were read: {headings:?}");
    assert_eq!(listed, headings, "README.md's Contents against its headings (## and ###), in order");
}
