//! The modules of `src/` import one another without a cycle, in the layers the crate docs
//! name: error → store → deadline → claim → processor / idempotency → lambda.
//!
//! Read from the source, not the compiler: every `crate::…` path in a module's code (comments
//! and unit tests left out) is an edge to the module it names, a name re-exported at the crate
//! root (`crate::Error`) counting as the module it comes from (`error`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level modules: `src/x.rs` and `src/x/`.
fn modules() -> BTreeSet<String> {
    fs::read_dir(src())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_stem()?.to_str()?.to_owned();
            (p.is_dir() || (p.extension()? == "rs" && name != "lib")).then_some(name)
        })
        .collect()
}

fn files(dir_or_file: &Path, out: &mut Vec<PathBuf>) {
    if dir_or_file.is_dir() {
        for entry in fs::read_dir(dir_or_file).unwrap() {
            files(&entry.unwrap().path(), out);
        }
    } else if dir_or_file.extension().is_some_and(|e| e == "rs") {
        out.push(dir_or_file.to_owned());
    }
}

/// A file's code: comments dropped, and its unit tests (`#[cfg(test)] mod tests`, last in
/// every file of this crate) left out.
fn code(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => &text[..],
    };
    text.lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first segment of every path after `crate::` in `code`, through `crate::{a::b, c}`
/// groups (nested ones included).
fn crate_paths(code: &str) -> Vec<String> {
    fn first_segments(group: &str, out: &mut Vec<String>) {
        // Split at the group's top-level commas.
        let mut depth = 0;
        let mut start = 0;
        let bytes = group.as_bytes();
        for (i, &b) in bytes.iter().enumerate() {
            match b {
                b'{' => depth += 1,
                b'}' => depth -= 1,
                b',' if depth == 0 => {
                    push_first(&group[start..i], out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        push_first(&group[start..], out);
    }
    fn push_first(item: &str, out: &mut Vec<String>) {
        let name: String = item
            .trim()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !name.is_empty() {
            out.push(name);
        }
    }
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    depth == 0
                })
                .map_or(group.len(), |(i, _)| i);
            first_segments(&group[..end], &mut out);
        } else {
            push_first(rest, &mut out);
        }
    }
    out
}

/// What the crate root re-exports: name → the module it comes from.
fn root_names() -> BTreeMap<String, String> {
    let lib = code(&src().join("lib.rs"));
    let mut names = BTreeMap::new();
    for stmt in lib.split(';') {
        let Some(at) = stmt.find("pub use ") else {
            continue;
        };
        let path = stmt[at + "pub use ".len()..].trim();
        let Some((module, items)) = path.split_once("::") else {
            continue;
        };
        for item in items.trim_matches(|c| c == '{' || c == '}').split(',') {
            if let Some(name) = item.trim().rsplit("::").next().filter(|n| !n.is_empty()) {
                names.insert(name.to_owned(), module.to_owned());
            }
        }
    }
    names
}

fn graph() -> Graph {
    let modules = modules();
    let root = root_names();
    let mut graph = Graph::new();
    for module in &modules {
        let mut paths = Vec::new();
        let dir = src().join(module);
        if dir.is_dir() {
            files(&dir, &mut paths);
        } else {
            paths.push(src().join(format!("{module}.rs")));
        }
        let edges = graph.entry(module.clone()).or_default();
        for path in paths {
            for name in crate_paths(&code(&path)) {
                let target = if modules.contains(&name) {
                    Some(&name)
                } else {
                    root.get(&name)
                };
                if let Some(target) = target.filter(|t| *t != module) {
                    edges.insert(target.clone());
                }
            }
        }
    }
    graph
}

/// A cycle of `graph`, if it has one.
fn cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, done, path) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut done, &mut Vec::new()))
}

/// Whether `from` reaches `to` through `graph`.
fn reaches(graph: &Graph, from: &str, to: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut todo = vec![from.to_owned()];
    while let Some(node) = todo.pop() {
        if node == to {
            return true;
        }
        if seen.insert(node.clone()) {
            todo.extend(graph.get(&node).into_iter().flatten().cloned());
        }
    }
    false
}

#[test]
fn the_modules_import_one_another_without_a_cycle() {
    let graph = graph();
    assert!(graph.contains_key("claim"), "{graph:?}");
    assert_eq!(cycle(&graph), None, "{graph:#?}");
}

#[test]
fn the_layers_run_one_way() {
    let graph = graph();
    // Each layer may use the ones before it, never one after.
    let layers = [
        &["error"][..],
        &["store"],
        &["deadline"],
        &["claim"],
        &["processor", "idempotency"],
        &["lambda"],
    ];
    for (i, lower) in layers.iter().enumerate() {
        for higher in layers[i + 1..].iter().copied().flatten() {
            for module in lower.iter() {
                assert!(
                    !reaches(&graph, module, higher),
                    "{module} uses {higher}, a layer above it: {graph:#?}"
                );
            }
        }
    }
    // The two front doors hang from the claim, not from each other.
    assert!(!reaches(&graph, "processor", "idempotency"), "{graph:#?}");
    assert!(!reaches(&graph, "idempotency", "processor"), "{graph:#?}");
    assert!(graph["processor"].contains("claim") && graph["idempotency"].contains("claim"));
}

#[test]
fn the_reader_follows_groups_and_root_names() {
    let paths = crate_paths("use crate::{a::{b, c}, d};\nlet x = crate::e::f;");
    assert_eq!(paths, ["a", "d", "e"]);
    assert_eq!(root_names().get("Error").map(String::as_str), Some("error"));
}
