//! The shape of the source: the modules' imports have no loops, and the master never
//! reaches the HTTP code by itself (the crate map in `src/lib.rs` promises both).
//!
//! A module's imports are the `crate::…` and `super::…` paths its code names (tests
//! left out), each resolved to the longest module it names. A module naming its own
//! parent or child is not a loop: a parent declares its children.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Module = Vec<String>;

fn name(m: &Module) -> String {
    if m.is_empty() { "crate".into() } else { m.join("/") }
}

/// Every module of the library, with its code (without its test module).
fn modules() -> BTreeMap<Module, String> {
    fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    let mut mods = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap().with_extension("");
        let mut parts: Module = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
        match parts.last().map(String::as_str) {
            Some("main") => continue, // the binary: it uses the library as `pika::`
            Some("lib") | Some("mod") => {
                parts.pop();
            }
            _ => {}
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        let code: String = code.lines().map(|l| l.split("//").next().unwrap()).collect::<Vec<_>>().join("\n");
        mods.insert(parts, code);
    }
    mods
}

/// Who imports whom, between modules that are not each other's ancestors.
fn imports() -> BTreeMap<Module, BTreeSet<Module>> {
    let mods = modules();
    let path = regex_lite::Regex::new(r"\b(crate|super)((?:::\w+)+)(::\{([^}]*)\})?").unwrap();
    let resolve = |p: &[String]| (1..=p.len()).rev().map(|k| p[..k].to_vec()).find(|m| mods.contains_key(m));
    let related = |a: &Module, b: &Module| a.starts_with(b) || b.starts_with(a);
    let mut graph = BTreeMap::new();
    for (m, code) in &mods {
        let mut to = BTreeSet::new();
        for c in path.captures_iter(code) {
            // `super` in a/b.rs and in a/mod.rs alike is module `a`'s parent's view:
            // the module path without its last part.
            let mut base: Module = if &c[1] == "super" { m[..m.len().saturating_sub(1)].to_vec() } else { vec![] };
            base.extend(c[2].split("::").filter(|s| !s.is_empty()).map(String::from));
            let mut targets = vec![base.clone()];
            if let Some(list) = c.get(4) {
                targets = list
                    .as_str()
                    .split(',')
                    .map(|x| x.trim().split("::").next().unwrap_or(""))
                    .filter(|x| !x.is_empty())
                    .map(|x| [base.clone(), vec![x.to_string()]].concat())
                    .collect();
            }
            for t in targets {
                if let Some(r) = resolve(&t)
                    && !r.is_empty()
                    && !related(m, &r)
                {
                    to.insert(r);
                }
            }
        }
        graph.insert(m.clone(), to);
    }
    graph
}

/// A loop in the graph, as the modules along it, if there is one.
fn find_loop(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    fn visit(
        m: &Module,
        graph: &BTreeMap<Module, BTreeSet<Module>>,
        marks: &mut BTreeMap<Module, Mark>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        marks.insert(m.clone(), Mark::Open);
        stack.push(m.clone());
        for n in graph.get(m).into_iter().flatten() {
            match marks.get(n).copied().unwrap_or(Mark::New) {
                Mark::Open => {
                    let from = stack.iter().position(|s| s == n).unwrap();
                    return Some([&stack[from..], std::slice::from_ref(n)].concat());
                }
                Mark::New => {
                    if let Some(l) = visit(n, graph, marks, stack) {
                        return Some(l);
                    }
                }
                Mark::Done => {}
            }
        }
        stack.pop();
        marks.insert(m.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for m in graph.keys() {
        if marks.get(m).copied().unwrap_or(Mark::New) == Mark::New
            && let Some(l) = visit(m, graph, &mut marks, &mut Vec::new())
        {
            return Some(l);
        }
    }
    None
}

#[test]
fn the_imports_have_no_loop() {
    let graph = imports();
    assert!(graph.len() > 40, "the walk found the modules: {}", graph.len());
    assert!(
        graph[&vec!["worker".to_string()]].contains(&vec!["serve".to_string(), "connection".to_string()]),
        "the parse sees a known import (worker -> serve/connection)"
    );
    if let Some(l) = find_loop(&graph) {
        panic!("the imports loop: {}", l.iter().map(name).collect::<Vec<_>>().join(" -> "));
    }
}

#[test]
fn a_loop_is_found_when_there_is_one() {
    let m = |s: &str| s.split('/').map(String::from).collect::<Module>();
    let mut graph: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    graph.insert(m("a"), [m("b")].into());
    graph.insert(m("b"), [m("c")].into());
    graph.insert(m("c"), [m("a")].into());
    let l = find_loop(&graph).expect("a -> b -> c -> a");
    assert_eq!(l.first(), l.last());
    assert_eq!(l.len(), 4);
    graph.insert(m("c"), BTreeSet::new());
    assert_eq!(find_loop(&graph), None);
}

#[test]
fn the_master_does_not_import_the_http_code() {
    for (m, to) in imports() {
        if m.first().is_some_and(|p| p == "master") {
            for t in to {
                assert!(
                    !matches!(t[0].as_str(), "http" | "serve" | "handlers" | "site" | "location"),
                    "{} imports {}: the master never serves a request (src/lib.rs)",
                    name(&m),
                    name(&t)
                );
            }
        }
    }
}
