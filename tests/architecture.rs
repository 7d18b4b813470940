//! The layers (docs/architecture.md), read from the source: which top-level module of `src/`
//! may name which. A forbidden `crate::...` path (or `super::...` out of a top-level module)
//! fails here with the file and line that holds it.
//!
//! - `system` (the reference implementation) names no other module but the small neutral
//!   ones (`error`, `hint`, `util`).
//! - The drivers, the checker (`check` with its stateright `model` and the generic `search`),
//!   `replay` and `conform`, never name one another.
//! - `props`, `scope` and `search` name no driver; nothing but `main.rs` names `cli`.
//! - `report` renders data that lives with it: it does not name `check` (check names report).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The checker driver, replay, conformance: each a set of top-level modules.
const DRIVERS: &[&[&str]] = &[&["check", "model", "search"], &["replay"], &["conform"]];

/// Top-level modules the given module must not name (beyond the driver rule).
fn forbidden(module: &str) -> Vec<&'static str> {
    let drivers: Vec<&str> = DRIVERS.iter().flat_map(|d| d.iter().copied()).collect();
    let mut out: Vec<&'static str> = match module {
        "system" => vec!["check", "model", "search", "replay", "conform", "cli", "report", "props", "scope", "stop"],
        "props" | "scope" | "util" | "hint" | "error" | "stop" => {
            let mut v: Vec<&'static str> = DRIVERS.iter().flat_map(|d| d.iter().copied()).collect();
            v.extend(["cli", "report"]);
            v
        }
        "report" => vec!["check", "cli", "workload"],
        // The workload space: bounds and enumeration into scopes; the checker runs them.
        "workload" => {
            let mut v: Vec<&'static str> = DRIVERS.iter().flat_map(|d| d.iter().copied()).collect();
            v.push("cli");
            v
        }
        "cli" => vec![],
        _ => vec!["cli"],
    };
    // A driver names no other driver.
    if let Some(own) = DRIVERS.iter().find(|d| d.contains(&module)) {
        out.extend(drivers.iter().filter(|m| !own.contains(m)));
    }
    // `search` is the generic engine: it names no kvmc model either.
    if module == "search" {
        out.extend(["check", "model"]);
    }
    out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every (file, line, top-level module named) of the library's source files, by the module
/// the file belongs to.
fn imports() -> BTreeMap<String, Vec<(String, usize, String)>> {
    let root = src();
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    let mut out: BTreeMap<String, Vec<(String, usize, String)>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
        let parts: Vec<&str> = rel.split('/').collect();
        let module = parts[0].trim_end_matches(".rs").to_string();
        if module == "main" || module == "lib" || module == "alloc" {
            continue; // the binary and the crate root name everything they wire together
        }
        // `super::` leaves the top-level module from its own root file only.
        let root_file = parts.len() == 1 || (parts.len() == 2 && parts[1] == "mod.rs");
        let text = std::fs::read_to_string(&f).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            let mut named = Vec::new();
            for (prefix, applies) in [("crate::", true), ("super::", root_file)] {
                if !applies {
                    continue;
                }
                let mut rest = code;
                while let Some(at) = rest.find(prefix) {
                    let after = &rest[at + prefix.len()..];
                    if let Some(group) = after.strip_prefix('{') {
                        let group = group.split('}').next().unwrap_or("");
                        for item in group.split(',') {
                            named.push(ident(item.trim()));
                        }
                    } else {
                        named.push(ident(after));
                    }
                    rest = after;
                }
            }
            for n in named.into_iter().filter(|n| !n.is_empty() && *n != module && *n != "self") {
                out.entry(module.clone()).or_default().push((rel.clone(), i + 1, n));
            }
        }
    }
    out
}

fn ident(s: &str) -> String {
    s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

#[test]
fn no_forbidden_imports() {
    let mut bad = Vec::new();
    for (module, uses) in imports() {
        let no = forbidden(&module);
        for (file, line, named) in uses {
            if no.contains(&named.as_str()) {
                bad.push(format!("src/{file}:{line}: {module} must not name {named}"));
            }
        }
    }
    assert!(bad.is_empty(), "forbidden imports (docs/architecture.md, \"Layers\"):\n{}", bad.join("\n"));
}

/// No two top-level modules name each other, directly or around a circle.
#[test]
fn no_import_cycles_between_top_level_modules() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, uses) in imports() {
        for (_, _, named) in uses {
            edges.entry(module.clone()).or_default().insert(named);
        }
    }
    // Depth-first search for a back edge.
    fn visit(
        m: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match state.get(m) {
            Some(1) => {
                let from = path.iter().position(|x| x == m).unwrap();
                let mut c = path[from..].to_vec();
                c.push(m.to_string());
                return Some(c);
            }
            Some(_) => return None,
            None => {}
        }
        state.insert(m.to_string(), 1);
        path.push(m.to_string());
        for n in edges.get(m).into_iter().flatten() {
            if let Some(c) = visit(n, edges, state, path) {
                return Some(c);
            }
        }
        path.pop();
        state.insert(m.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in edges.keys() {
        if let Some(c) = visit(m, &edges, &mut state, &mut Vec::new()) {
            panic!("import cycle between top-level modules: {}", c.join(" -> "));
        }
    }
}

/// The reader sees imports at all (a reader that saw none would pass the tests above).
#[test]
fn the_reader_sees_the_layers() {
    let uses = imports();
    let names = |m: &str| uses.get(m).into_iter().flatten().map(|u| u.2.clone()).collect::<BTreeSet<_>>();
    assert!(names("model").contains("system"));
    assert!(names("replay").contains("props"));
    assert!(names("conform").contains("scope"));
    assert!(names("check").contains("report"));
    assert!(forbidden("replay").contains(&"model") && forbidden("conform").contains(&"check"));
}
