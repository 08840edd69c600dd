//! The shape of the source, as the crate map in `src/lib.rs` promises it: the imports
//! between modules have no loop, a parent and its children included; the top-level
//! modules' imports follow the map's layers (a module imports from its own layer and
//! those below) but for the arrows up that the map says, no more and no fewer; and no
//! master-side module imports the request side but to fork a worker.
//!
//! A module's imports are the `crate::…` and `super::…` paths its code names and the
//! paths through its own children (`child::Item`, `self::child`), and the children it
//! declares (`mod child;`), tests left out, each resolved to the longest module it
//! names: a child that uses its parent's items closes a loop like any other. Layers and sides are of
//! the top-level modules (`http`, `master`, …), read from the map's `# The layers`.

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
        let tests =
            regex_lite::Regex::new(r"(?m)^#\[cfg\(test\)\]\s*\n\s*(?:pub(?:\([^)]*\))?\s+)?mod tests\b").unwrap();
        let code = tests.split(&text).next().unwrap();
        let code: String = code.lines().map(|l| l.split("//").next().unwrap()).collect::<Vec<_>>().join("\n");
        mods.insert(parts, code);
    }
    mods
}

/// Who imports whom, between modules that are not each other's ancestors.
fn imports() -> BTreeMap<Module, BTreeSet<Module>> {
    let mods = modules();
    // `crate::a::b`, `super::a`, `super::{a, b}` (not `pub(super)`).
    let path = regex_lite::Regex::new(r"\b(crate|super)((?:::\w+)*)(::\{([^}]*)\})?").unwrap();
    // A module's own children named by their names (`child::X`, `self::child`).
    let children = |m: &Module| -> Vec<String> {
        mods.keys().filter(|k| k.len() == m.len() + 1 && k.starts_with(m)).map(|k| k[m.len()].clone()).collect()
    };
    let resolve = |p: &[String]| (1..=p.len()).rev().map(|k| p[..k].to_vec()).find(|m| mods.contains_key(m));
    let mut graph = BTreeMap::new();
    for (m, code) in &mods {
        let mut to = BTreeSet::new();
        for c in path.captures_iter(code) {
            if c.get(2).is_none_or(|p| p.as_str().is_empty()) && c.get(3).is_none() {
                continue; // `pub(super)`, `crate` as a word
            }
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
                    && r != *m
                {
                    to.insert(r);
                }
            }
        }
        // A parent declares its children (`mod child;`): an arrow to each, so a child
        // that uses its parent's items closes a loop.
        // (A child only the tests build, `#[cfg(test)] mod x;`, is not.)
        let declared =
            regex_lite::Regex::new(r"(?m)(#\[cfg\(test\)\]\s*)?^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;").unwrap();
        for c in declared.captures_iter(code) {
            if c.get(1).is_some() {
                continue;
            }
            if let Some(r) = resolve(&[m.clone(), vec![c[2].to_string()]].concat()) {
                to.insert(r);
            }
        }
        for child in children(m) {
            let named = regex_lite::Regex::new(&format!(r"(?:^|[^\w:])(?:self::)?{child}::(\w+|\{{)")).unwrap();
            for c in named.captures_iter(code) {
                let item = if &c[1] == "{" { vec![child.clone()] } else { vec![child.clone(), c[1].to_string()] };
                let target = [m.clone(), item].concat();
                if let Some(r) = resolve(&target) {
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

/// The map's layers, arrows up and sides, read from `src/lib.rs`.
struct Map {
    /// Top-level module → its layer (1 at the bottom).
    layer: BTreeMap<String, usize>,
    /// The arrows up the map says, `(from, to)`.
    up: BTreeSet<(String, String)>,
    master_side: BTreeSet<String>,
    request_side: BTreeSet<String>,
    shared: BTreeSet<String>,
}

fn the_map() -> Map {
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let section = lib.split("//! # The layers").nth(1).expect("src/lib.rs has `# The layers`");
    let section = section.split("#![").next().unwrap();
    let names = |s: &str| -> Vec<String> {
        regex_lite::Regex::new(r"`(\w+)`").unwrap().captures_iter(s).map(|c| c[1].to_string()).collect()
    };
    let item = regex_lite::Regex::new(r"^//! (\d+)\. ").unwrap();
    let arrow = regex_lite::Regex::new(r"^//! - `(\w+)` → `(\w+)`:").unwrap();
    let mut layer = BTreeMap::new();
    let mut up = BTreeSet::new();
    let mut current = None;
    for line in section.lines() {
        if let Some(c) = item.captures(line) {
            current = Some(c[1].parse::<usize>().unwrap());
        } else if !line.starts_with("//!    ") {
            current = None;
        }
        if let Some(n) = current {
            let listed = line.split_once(':').map_or(line, |(_, rest)| rest);
            let listed = if item.is_match(line) { listed } else { line };
            for m in names(listed) {
                assert!(layer.insert(m.clone(), n).is_none(), "{m} is in two layers of src/lib.rs");
            }
        }
        if let Some(c) = arrow.captures(line) {
            up.insert((c[1].to_string(), c[2].to_string()));
        }
    }
    let sides = section.split("//! The sides:").nth(1).expect("src/lib.rs says the sides");
    let parts: Vec<&str> = sides.split(';').collect();
    assert_eq!(parts.len(), 3, "the sides: master side; request side; shared by both");
    let set = |s: &str| names(s).into_iter().collect::<BTreeSet<_>>();
    Map { layer, up, master_side: set(parts[0]), request_side: set(parts[1]), shared: set(parts[2]) }
}

/// The imports between top-level modules, each with one module-level import that makes it.
fn top_level_arrows() -> BTreeMap<(String, String), (Module, Module)> {
    let mut arrows = BTreeMap::new();
    for (m, to) in imports() {
        for t in to {
            if let (Some(a), Some(b)) = (m.first(), t.first())
                && a != b
            {
                arrows.entry((a.clone(), b.clone())).or_insert((m.clone(), t.clone()));
            }
        }
    }
    arrows
}

fn top_level_modules() -> BTreeSet<String> {
    modules().keys().filter_map(|m| m.first().cloned()).collect()
}

#[test]
fn every_module_has_a_layer_and_a_side() {
    let map = the_map();
    assert!(map.layer.len() >= 15, "the map's layers were read: {:?}", map.layer);
    for m in top_level_modules() {
        assert!(
            map.layer.contains_key(&m),
            "src/{m} has no layer: put it in the crate map's `# The layers` (src/lib.rs)"
        );
        let sides = [&map.master_side, &map.request_side, &map.shared].iter().filter(|s| s.contains(&m)).count();
        assert_eq!(sides, 1, "src/{m} must be on exactly one side in the crate map's `The sides` (src/lib.rs)");
    }
    for m in map.layer.keys() {
        assert!(top_level_modules().contains(m), "the crate map's layers name `{m}`, which is no module");
    }
}

#[test]
fn the_imports_follow_the_layers_but_for_the_arrows_said() {
    let map = the_map();
    let mut found = BTreeSet::new();
    for ((a, b), (via_from, via_to)) in top_level_arrows() {
        let (Some(la), Some(lb)) = (map.layer.get(&a), map.layer.get(&b)) else { continue };
        if lb > la {
            assert!(
                map.up.contains(&(a.clone(), b.clone())),
                "{a} (layer {la}) imports {b} (layer {lb}), through {} -> {}: import otherwise, or say the arrow and why in src/lib.rs",
                name(&via_from),
                name(&via_to)
            );
            found.insert((a, b));
        }
    }
    for (a, b) in &map.up {
        assert!(
            found.contains(&(a.clone(), b.clone())),
            "src/lib.rs says {a} -> {b} runs up, but no such import is left: say no more"
        );
    }
}

#[test]
fn no_master_side_module_imports_the_request_side() {
    let map = the_map();
    // The one door: the master forks a worker (and `daemon` runs one in-process for -X).
    let fork = [("master", "worker"), ("command", "worker")];
    let mut checked = BTreeSet::new();
    for (m, to) in imports() {
        let Some(side) = m.first().filter(|s| map.master_side.contains(*s)) else { continue };
        checked.insert(side.clone());
        for t in to {
            let top = &t[0];
            if map.request_side.contains(top) {
                assert!(
                    fork.contains(&(side.as_str(), top.as_str())),
                    "{} imports {}: the master side never serves a request (src/lib.rs, The layers)",
                    name(&m),
                    name(&t)
                );
            }
        }
    }
    assert_eq!(checked, map.master_side, "every master-side module was looked at");
}

#[test]
fn a_wrong_layer_is_caught() {
    // The checks above rely on the map's parse; a layer list it misread would pass
    // anything. Here the parse is checked on what it must find.
    let map = the_map();
    assert_eq!(map.layer.get("base"), Some(&1));
    assert!(map.layer["master"] > map.layer["serve"] && map.layer["serve"] > map.layer["config"]);
    assert!(map.layer["http"] < map.layer["config"]);
    assert!(map.master_side.contains("master") && map.request_side.contains("serve") && map.shared.contains("config"));
}
