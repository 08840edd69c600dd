//! `return`: a location that answers with a status of its own (`return = 404` to hide
//! `/.git/`), or a redirect (`return = { status = 301, to = "https://example.com/$1" }`).
//! `rewrite`: the request served again at another path of the vhost, through its
//! locations, the client none the wiser (nginx's `rewrite … last`:
//! `rewrite = "/lib/exe/fetch.php?media=$1"` on `regex = '^/_media/(.*)'`); the
//! target's query is what it names (`$args` or `$is_args$args` keeps the client's).
//! `internal = true`: a location only an internal redirect reaches (a rewrite, an
//! index, `try_files`, a script's local `Location`); a client asking for it gets 404.
//!
//! The target is a template, parsed when the config is read: `$1` … `$9` are the
//! captures of the location's regex (checked then: a capture the regex lacks is an
//! error), and a small set of variables, as nginx names them:
//!
//! | variable | value |
//! |---|---|
//! | `$request_uri` | the target as the client sent it (path and query, still encoded) |
//! | `$uri` | the path, decoded and cleaned (what the locations match), encoded again |
//! | `$args` | the query string, without its `?` (empty when there is none) |
//! | `$is_args` | `?` when there is a query string, else empty |
//! | `$host` | the request's host name (from `Host`, without a port) |
//! | `$scheme` | `http` or `https` |
//!
//! `$$` is a `$`. Captures and `$uri` are percent-encoded where a URL needs it, so a
//! decoded path cannot smuggle a line break or a space into the `Location` header.

use regex_lite::Regex;

use crate::keys::read::{ConfigError, Ctx, Keys};
use crate::keys::write::{Toml, string, strings};

/// Its keys: `return`, `try_files` (the fallbacks of a files location), `rewrite`
/// and `internal` (on a location only).
pub const KEYS: [&str; 4] = ["return", "try_files", "rewrite", "internal"];

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum RawReturn {
    Status(u16),
    Redirect { status: u16, to: String },
}

/// `return` of a table, if set; `regex`: the location's, whose captures the target
/// may name.
pub(crate) fn read(keys: &mut Keys, ctx: &Ctx, regex: Option<&Regex>) -> Result<Option<Return>, ConfigError> {
    let Some(ret) = keys.take::<RawReturn>(ctx, "return")? else { return Ok(None) };
    Ok(Some(match ret.get_ref() {
        RawReturn::Status(s) if plain_status(*s) => Return::Status(*s),
        RawReturn::Status(s) => {
            return Err(ctx.spanned(
                &ret,
                format!("return = {s}: a status is 204 or 400 to 599; a redirect is return = {{ status = 301, to = \"...\" }}"),
            ));
        }
        RawReturn::Redirect { status, to } => {
            if !REDIRECTS.contains(status) {
                return Err(ctx
                    .spanned(&ret, format!("return: a redirect's status is 301, 302, 303, 307 or 308, not {status}")));
            }
            let to = Template::parse(to, regex).map_err(|e| ctx.spanned(&ret, format!("return to {to:?}: {e}")))?;
            Return::Redirect { status: *status, to }
        }
    }))
}

/// `rewrite` of a location, if set: a local path, with the captures of its
/// `regex` and the request's variables. `location`: the table is a location's (a
/// vhost's rewrite would send each request round its locations again).
pub(crate) fn read_rewrite(
    keys: &mut Keys,
    ctx: &Ctx,
    regex: Option<&Regex>,
    location: bool,
) -> Result<Option<Template>, ConfigError> {
    let Some(to) = keys.take::<String>(ctx, "rewrite")? else { return Ok(None) };
    if !location {
        return Err(ctx.spanned(&to, "rewrite goes on a [[vhost.location]] (a regex one for $1..$9)"));
    }
    if !to.get_ref().starts_with('/') || to.get_ref().starts_with("//") {
        return Err(ctx.spanned(
            &to,
            format!(
                "rewrite {:?}: a path of this vhost starting with '/' (a redirect to a URL is return = {{ status, to }})",
                to.get_ref()
            ),
        ));
    }
    let t = Template::parse(to.get_ref(), regex)
        .map_err(|e| ctx.spanned(&to, format!("rewrite {:?}: {e}", to.get_ref())))?;
    Ok(Some(t))
}

/// `internal` of a location, if set.
pub(crate) fn read_internal(keys: &mut Keys, ctx: &Ctx, location: bool) -> Result<Option<bool>, ConfigError> {
    let Some(on) = keys.take::<bool>(ctx, "internal")? else { return Ok(None) };
    if !location {
        return Err(ctx.spanned(&on, "internal goes on a [[vhost.location]]"));
    }
    Ok(Some(on.into_inner()))
}

/// `try_files` of a table, if set, checked: paths to try (`$uri`, `$uri/`, a path),
/// then what answers when none exists (a path, or a status `=404`).
pub(crate) fn read_try_files(keys: &mut Keys, ctx: &Ctx) -> Result<Option<Vec<String>>, ConfigError> {
    let Some(list) = keys.take::<Vec<String>>(ctx, "try_files")? else { return Ok(None) };
    check_try_files(list.get_ref()).map_err(|e| ctx.spanned(&list, e))?;
    Ok(Some(list.into_inner()))
}

fn check_try_files(list: &[String]) -> Result<(), String> {
    let Some((last, tried)) = list.split_last() else {
        return Err("try_files needs at least one entry".into());
    };
    if tried.is_empty() {
        return Err(
            "try_files needs paths to try and, last, what answers when none exists (\"/index.html\" or \"=404\")"
                .into(),
        );
    }
    for t in tried {
        if !t.starts_with('/') && !t.starts_with("$uri") {
            return Err(format!("try_files entry {t:?} is a path: \"$uri\", \"$uri/\", or one starting with '/'"));
        }
        if t.contains("..") || t.replace("$uri", "").contains('$') {
            return Err(format!("try_files entry {t:?}: no '..', and $uri is its only variable"));
        }
    }
    match last.strip_prefix('=') {
        Some(code) => match code.parse::<u16>() {
            Ok(c) if (400..600).contains(&c) => Ok(()),
            _ => Err(format!("try_files' last entry {last:?}: a status is =400 to =599")),
        },
        None if last.starts_with('/') && !last.contains("..") && only_fallback_variables(last) => Ok(()),
        None if last.starts_with('/') && !last.contains("..") => {
            Err(format!("try_files' last entry {last:?}: its variables are $uri, $query_string, $args and $is_args"))
        }
        None => Err(format!("try_files' last entry {last:?} is a path starting with '/' or a status (=404)")),
    }
}

/// Whether the only `$` in a fallback start the variables it may name.
fn only_fallback_variables(entry: &str) -> bool {
    let names = ["$uri", "$query_string", "$args", "$is_args"];
    entry.match_indices('$').all(|(at, _)| names.iter().any(|n| entry[at..].starts_with(n)))
}

/// The keys for `pika -T`, as written.
pub(crate) fn show(
    ret: Option<&Return>,
    try_files: Option<&Vec<String>>,
    rewrite: Option<&Template>,
    internal: Option<bool>,
    t: &mut Toml,
) {
    match ret {
        None => {}
        Some(Return::Status(s)) => t.key("return", s),
        Some(Return::Redirect { status, to }) => {
            t.key("return", format!("{{ status = {status}, to = {} }}", string(to.text())));
        }
    }
    if let Some(list) = try_files {
        t.key("try_files", strings(list));
    }
    if let Some(to) = rewrite {
        t.key("rewrite", string(to.text()));
    }
    if let Some(on) = internal {
        t.key("internal", toml::Value::Boolean(on));
    }
}

/// The statuses a redirect may have.
pub const REDIRECTS: [u16; 5] = [301, 302, 303, 307, 308];

/// What `return` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Return {
    /// A status with the server's page for it.
    Status(u16),
    Redirect {
        status: u16,
        to: Template,
    },
}

/// Whether `return = N` may name this status: a success without content, or an error.
pub fn plain_status(status: u16) -> bool {
    status == 204 || (400..600).contains(&status)
}

/// A redirect target: literal text, captures and variables.
#[derive(Debug, Clone)]
pub struct Template {
    parts: Vec<Part>,
    /// As written, for `-T`.
    text: String,
    /// The location's regex, when the template names a capture.
    regex: Option<Regex>,
}

impl PartialEq for Template {
    fn eq(&self, other: &Template) -> bool {
        self.parts == other.parts && self.text == other.text
    }
}

impl Eq for Template {}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Capture(usize),
    Var(Var),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Var {
    RequestUri,
    Uri,
    Args,
    IsArgs,
    Host,
    Scheme,
}

const VARS: [(&str, Var); 6] = [
    ("request_uri", Var::RequestUri),
    ("is_args", Var::IsArgs),
    ("scheme", Var::Scheme),
    ("args", Var::Args),
    ("host", Var::Host),
    ("uri", Var::Uri),
];

/// Why a template cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("${0}: the location's regex has {1} capture group(s)")]
    NoSuchCapture(usize, usize),
    #[error("${0}: captures come from a regex location (this one is not)")]
    NotRegex(usize),
    #[error("unknown variable ${0} (known: $1..$9, $request_uri, $uri, $args, $is_args, $host, $scheme; $$ is a $)")]
    UnknownVar(String),
    #[error("a redirect target is an absolute URL (https://...) or a path starting with '/'")]
    NotAUrl,
    #[error("a redirect target has no spaces or control characters")]
    BadCharacter,
}

impl Template {
    /// Parses `text`; `regex`: the location's, whose captures `$N` may name.
    pub fn parse(text: &str, regex: Option<&Regex>) -> Result<Template, TemplateError> {
        if text.chars().any(|c| c.is_control() || c == ' ') {
            return Err(TemplateError::BadCharacter);
        }
        let starts_ok =
            ["/", "http://", "https://", "$scheme://", "$request_uri", "$uri"].iter().any(|p| text.starts_with(p));
        if !starts_ok {
            return Err(TemplateError::NotAUrl);
        }
        let groups = regex.map(|r| r.captures_len() - 1);
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('$') {
            lit.push_str(&rest[..at]);
            rest = &rest[at + 1..];
            if let Some(r) = rest.strip_prefix('$') {
                lit.push('$');
                rest = r;
                continue;
            }
            if let Some(d) = rest.chars().next().and_then(|c| c.to_digit(10)) {
                let n = d as usize;
                match groups {
                    None => return Err(TemplateError::NotRegex(n)),
                    Some(g) if n > g => return Err(TemplateError::NoSuchCapture(n, g)),
                    Some(_) => {}
                }
                flush(&mut parts, &mut lit);
                parts.push(Part::Capture(n));
                rest = &rest[1..];
                continue;
            }
            let Some((name, var)) = VARS.iter().find(|(n, _)| rest.starts_with(n)) else {
                let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                return Err(TemplateError::UnknownVar(name));
            };
            // `$uri_x` is not `$uri` and `_x`.
            if rest[name.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
                let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                return Err(TemplateError::UnknownVar(name));
            }
            flush(&mut parts, &mut lit);
            parts.push(Part::Var(*var));
            rest = &rest[name.len()..];
        }
        lit.push_str(rest);
        flush(&mut parts, &mut lit);
        let regex = parts.iter().any(|p| matches!(p, Part::Capture(_))).then(|| regex.cloned()).flatten();
        Ok(Template { parts, text: text.to_string(), regex })
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// The target for one request: the location's regex runs on its path again
    /// when the template names a capture.
    pub fn expand(&self, req: &Vars<'_>) -> String {
        let path = String::from_utf8_lossy(req.path);
        let caps = self.regex.as_ref().and_then(|r| r.captures(&path));
        let captures: Vec<Option<&str>> =
            caps.as_ref().map(|c| c.iter().map(|m| m.map(|m| m.as_str())).collect()).unwrap_or_default();
        self.fill(req, &captures)
    }

    /// The target with `captures` (group 0 the whole match).
    fn fill(&self, req: &Vars<'_>, captures: &[Option<&str>]) -> String {
        let mut out = String::with_capacity(self.text.len() + req.target.len());
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Capture(n) => encode_into(&mut out, captures.get(*n).copied().flatten().unwrap_or("").as_bytes()),
                Part::Var(Var::RequestUri) => encode_into(&mut out, req.target),
                Part::Var(Var::Uri) => encode_into(&mut out, req.path),
                Part::Var(Var::Args) => encode_into(&mut out, req.query.unwrap_or(b"")),
                Part::Var(Var::IsArgs) => out.push_str(if req.query.is_some() { "?" } else { "" }),
                Part::Var(Var::Host) => encode_into(&mut out, req.host),
                Part::Var(Var::Scheme) => out.push_str(if req.https { "https" } else { "http" }),
            }
        }
        out
    }

    /// Whether it names a capture (the regex must then run on the path).
    pub fn uses_captures(&self) -> bool {
        self.regex.is_some()
    }
}

fn flush(parts: &mut Vec<Part>, lit: &mut String) {
    if !lit.is_empty() {
        parts.push(Part::Text(std::mem::take(lit)));
    }
}

/// What a template's variables are made of.
pub struct Vars<'a> {
    /// The request target as sent.
    pub target: &'a [u8],
    /// The cleaned, decoded path.
    pub path: &'a [u8],
    pub query: Option<&'a [u8]>,
    /// The host, without its port.
    pub host: &'a [u8],
    pub https: bool,
}

/// Appends `bytes`, percent-encoding what a URL must not carry as is (controls,
/// spaces, quotes, `<>`, non-ASCII); `%` and the URL's own delimiters stay, so an
/// already encoded target passes unchanged.
fn encode_into(out: &mut String, bytes: &[u8]) {
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%#[]".contains(&b) {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(char::from_digit(u32::from(b >> 4), 16).unwrap().to_ascii_uppercase());
            out.push(char::from_digit(u32::from(b & 15), 16).unwrap().to_ascii_uppercase());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars<'a>(target: &'a str, path: &'a str, query: Option<&'a str>) -> Vars<'a> {
        Vars {
            target: target.as_bytes(),
            path: path.as_bytes(),
            query: query.map(str::as_bytes),
            host: b"example.com",
            https: true,
        }
    }

    #[test]
    fn try_files_fallbacks_name_a_path_with_the_query_they_want() {
        let ok = |l: &[&str]| check_try_files(&l.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert!(ok(&["$uri", "$uri/", "/index.php?$query_string"]).is_ok());
        assert!(ok(&["$uri", "/index.php$is_args$args"]).is_ok());
        assert!(ok(&["$uri", "/index.php$uri"]).is_ok());
        assert!(ok(&["$uri", "=404"]).is_ok());
        assert!(ok(&["$uri", "/index.php?$host"]).is_err(), "an unknown variable");
        assert!(ok(&["$uri", "/../index.php"]).is_err());
        assert!(ok(&["$uri?$args", "/index.php"]).is_err(), "tried entries name files");
    }

    #[test]
    fn captures_and_variables_fill_the_target() {
        let re = Regex::new(r"^/old/(\w+)/(.*)$").unwrap();
        let t = Template::parse("https://$host/new/$2/$1$is_args$args", Some(&re)).unwrap();
        let v = vars("/old/blog/a%20b.html?x=1", "/old/blog/a b.html", Some("x=1"));
        assert_eq!(t.expand(&v), "https://example.com/new/a%20b.html/blog?x=1");
        assert!(t.uses_captures());
        let t = Template::parse("$scheme://other.example$request_uri", None).unwrap();
        assert_eq!(t.expand(&v), "https://other.example/old/blog/a%20b.html?x=1");
        let t = Template::parse("/moved$uri$is_args$args", None).unwrap();
        assert_eq!(t.expand(&vars("/a", "/a", None)), "/moved/a");
        assert!(!t.uses_captures());
        assert_eq!(Template::parse("/a$$b", None).unwrap().expand(&v), "/a$b");
    }

    #[test]
    fn a_decoded_path_cannot_break_the_header() {
        let re = Regex::new("^/(.*)$").unwrap();
        let t = Template::parse("/x/$1", Some(&re)).unwrap();
        let caps = [Some("/a\r\nSet-Cookie: x"), Some("a\r\nSet-Cookie: x")];
        assert_eq!(t.fill(&vars("/", "/", None), &caps), "/x/a%0D%0ASet-Cookie:%20x");
        assert_eq!(t.expand(&vars("/", "/a b<c>", None)), "/x/a%20b%3Cc%3E");
    }

    #[test]
    fn templates_the_config_cannot_use_are_refused() {
        let re = Regex::new(r"^/(a)(b)$").unwrap();
        assert_eq!(Template::parse("/$3", Some(&re)), Err(TemplateError::NoSuchCapture(3, 2)));
        assert!(Template::parse("/$2$1$0", Some(&re)).is_ok());
        assert_eq!(Template::parse("/$1", None), Err(TemplateError::NotRegex(1)));
        assert_eq!(Template::parse("/$foo", None), Err(TemplateError::UnknownVar("foo".into())));
        assert_eq!(Template::parse("/$uri_x", None), Err(TemplateError::UnknownVar("uri_x".into())));
        assert_eq!(Template::parse("example.com/x", None), Err(TemplateError::NotAUrl));
        assert_eq!(Template::parse("/a b", None), Err(TemplateError::BadCharacter));
        assert!(Template::parse("$request_uri", None).is_ok());
        let e = TemplateError::NoSuchCapture(3, 2).to_string();
        assert_eq!(e, "$3: the location's regex has 2 capture group(s)");
    }

    #[test]
    fn plain_statuses() {
        assert!(plain_status(404) && plain_status(410) && plain_status(403) && plain_status(204));
        assert!(!plain_status(200) && !plain_status(301) && !plain_status(600));
    }
}
