//! The architecture, written once, in code (issue 19): which top-level module of the library
//! may import which. Stages import only downward, along the pipeline
//! `ingress → lower → schedule → execute → validate → release`, over the floors every stage
//! stands on (`domain`, `files`, `stats`, `sim`), with `app` (and the top-level `error` and
//! `schema` that aggregate every stage) on top. A `use crate::…` (or any `crate::…` path)
//! that is not listed fails this test; so does a cycle between two modules of one stage.
//!
//! Changing the picture is allowed, on purpose: edit [`ALLOWED`] in the same change, and say
//! why in `docs/architecture.md`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module and the modules it may import. The order is the layering, floor
/// first; every arrow points to an earlier entry, which a test below checks too.
const ALLOWED: &[(&str, &[&str])] = &[
    // Floors: vocabulary, files, statistics, the accelerator model.
    ("domain", &[]),
    ("files", &[]),
    ("stats", &["domain"]),
    // sim reads preset files through the one bounded reader (issue 23).
    ("sim", &["domain", "files", "stats"]),
    // The pipeline.
    ("ingress", &["domain", "files", "stats", "sim"]),
    ("lower", &["domain", "sim", "ingress"]),
    ("schedule", &["domain", "ingress", "lower"]),
    (
        "execute",
        &["domain", "files", "stats", "sim", "ingress", "lower", "schedule"],
    ),
    (
        "validate",
        &[
            "domain", "files", "stats", "sim", "ingress", "lower", "schedule", "execute",
        ],
    ),
    (
        "release",
        &[
            "domain", "files", "stats", "sim", "ingress", "lower", "schedule", "execute", "validate",
        ],
    ),
    // On top: what aggregates every stage.
    (
        "error",
        &[
            "domain", "files", "stats", "sim", "ingress", "lower", "schedule", "execute", "validate",
            "release",
        ],
    ),
    (
        "schema",
        &[
            "domain", "files", "stats", "sim", "ingress", "lower", "schedule", "execute", "validate",
            "release",
        ],
    ),
    (
        "app",
        &[
            "domain", "files", "stats", "sim", "ingress", "lower", "schedule", "execute", "validate",
            "release", "error", "schema",
        ],
    ),
];

/// Paths the crate root re-exports for callers outside the crate; inside it they are spelled
/// through their home, so a reference to them here would hide an edge.
const ROOT_ALIASES: &[(&str, &str)] = &[
    ("metric", "domain"),
    ("stage", "domain"),
    ("verdict", "domain"),
    ("digest", "domain"),
    ("Error", "error"),
    ("Result", "error"),
];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).expect("read src").flatten().collect();
    entries.sort_by_key(|e| e.path());
    for e in entries {
        let path = e.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a library file: `src/validate/rules/regression.rs` → `validate::rules::regression`.
fn module_of(file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src_dir()).expect("under src");
    let mut parts: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The code of a file without its comments (line comments and doc comments), so prose that
/// names a path is not an import.
fn code_of(text: &str) -> String {
    text.lines()
        .map(|line| {
            if line.trim_start().starts_with("//") {
                ""
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every module path a file names: `crate::a::b…` and `super::…` paths, resolved to absolute
/// module paths.
fn referenced_paths(module: &[String], code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        let at_word = i == 0 || !ident(bytes[i - 1]);
        let rest = &code[i..];
        let (base, after): (Vec<String>, &str) = if at_word && rest.starts_with("crate::") {
            (Vec::new(), &rest["crate::".len()..])
        } else if at_word && rest.starts_with("super::") {
            let mut r = rest;
            // `a/b.rs` and `a/b/mod.rs` are both module `a::b`; `super` is `a` from either.
            let mut base = module.to_vec();
            while let Some(tail) = r.strip_prefix("super::") {
                base.pop();
                r = tail;
            }
            (base, r)
        } else {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        let mut path = base;
        let mut r = after;
        loop {
            let len = r.bytes().take_while(|&b| ident(b)).count();
            if len == 0 {
                break;
            }
            path.push(r[..len].to_owned());
            r = &r[len..];
            match r.strip_prefix("::") {
                Some(t) if t.bytes().next().is_some_and(ident) => r = t,
                _ => break,
            }
        }
        if !path.is_empty() {
            out.push(path);
        }
        i += (rest.len() - r.len()).max(1);
    }
    out
}

struct Graph {
    /// (from file's module, to module path) for every reference.
    edges: Vec<(Vec<String>, Vec<String>, PathBuf)>,
    modules: BTreeSet<Vec<String>>,
}

fn graph() -> Graph {
    let mut files = Vec::new();
    rust_files(&src_dir(), &mut files);
    let files: Vec<PathBuf> = files
        .into_iter()
        .filter(|f| !f.strip_prefix(src_dir()).unwrap().starts_with("bin"))
        .collect();
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(f)).collect();
    let mut edges = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read source");
        let module = module_of(f);
        for mut target in referenced_paths(&module, &code_of(&text)) {
            if let Some((_, home)) = ROOT_ALIASES
                .iter()
                .find(|(a, _)| Some(*a) == target.first().map(String::as_str))
            {
                target.insert(0, (*home).to_owned());
            }
            edges.push((module.clone(), target, f.clone()));
        }
    }
    Graph { edges, modules }
}

/// The longest prefix of `path` that is a module of the crate.
fn owning_module(modules: &BTreeSet<Vec<String>>, path: &[String]) -> Option<Vec<String>> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains(p))
}

#[test]
fn the_allowed_edges_are_a_layering_with_every_arrow_pointing_down() {
    for (i, (module, deps)) in ALLOWED.iter().enumerate() {
        for dep in *deps {
            let pos = ALLOWED.iter().position(|(m, _)| m == dep);
            assert!(
                pos.is_some_and(|p| p < i),
                "`{module}` may import `{dep}`, which is not listed before it: the picture has a cycle"
            );
        }
    }
}

#[test]
fn every_top_level_module_is_placed_in_the_architecture() {
    let g = graph();
    let tops: BTreeSet<&str> = g
        .modules
        .iter()
        .filter_map(|m| m.first().map(String::as_str))
        .collect();
    for top in tops {
        assert!(
            ALLOWED.iter().any(|(m, _)| *m == top),
            "src/{top} is not in tests/architecture.rs ALLOWED: say where it stands"
        );
    }
}

#[test]
fn no_module_imports_against_the_one_way_flow() {
    let g = graph();
    let mut breaches = BTreeSet::new();
    for (from, to, file) in &g.edges {
        let (Some(a), Some(b)) = (from.first(), to.first()) else {
            continue;
        };
        if a == b || !g.modules.iter().any(|m| m.first() == Some(b)) {
            continue;
        }
        let allowed = ALLOWED
            .iter()
            .find(|(m, _)| m == a)
            .is_some_and(|(_, deps)| deps.contains(&b.as_str()));
        if !allowed {
            let rel = file.strip_prefix(src_dir()).unwrap().display().to_string();
            breaches.insert(format!("src/{rel}: {a} -> {b} (crate::{})", to.join("::")));
        }
    }
    assert!(
        breaches.is_empty(),
        "imports against the architecture (tests/architecture.rs ALLOWED):\n  {}",
        breaches.into_iter().collect::<Vec<_>>().join("\n  ")
    );
}

#[test]
fn no_two_modules_of_a_stage_import_each_other() {
    let g = graph();
    // Module → modules it imports, between siblings and cousins inside one top-level module.
    let mut deps: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (from, to, _) in &g.edges {
        let Some(target) = owning_module(&g.modules, to) else {
            continue;
        };
        // Ancestors and descendants (a parent declaring its children) are not cycles.
        if target.starts_with(from) || from.starts_with(&target) {
            continue;
        }
        deps.entry(from.clone()).or_default().insert(target);
    }
    let mut cycles = Vec::new();
    for depth in 1..=3 {
        let cut = |m: &Vec<String>| m[..m.len().min(depth)].to_vec();
        let mut g2: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
        for (a, bs) in &deps {
            for b in bs {
                let (ca, cb) = (cut(a), cut(b));
                if ca != cb && !ca.starts_with(&cb) && !cb.starts_with(&ca) {
                    g2.entry(ca).or_default().insert(cb);
                }
            }
        }
        for (a, bs) in &g2 {
            for b in bs {
                if reaches(&g2, b, a) {
                    cycles.push(format!("{} <-> {} (depth {depth})", a.join("::"), b.join("::")));
                }
            }
        }
    }
    cycles.sort();
    cycles.dedup();
    assert!(
        cycles.is_empty(),
        "import cycles between modules:\n  {}",
        cycles.join("\n  ")
    );
}

fn reaches(g: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>, from: &[String], to: &[String]) -> bool {
    let mut seen = BTreeSet::new();
    let mut stack = vec![from.to_vec()];
    while let Some(m) = stack.pop() {
        if m == to {
            return true;
        }
        if seen.insert(m.clone())
            && let Some(next) = g.get(&m)
        {
            stack.extend(next.iter().cloned());
        }
    }
    false
}

#[test]
fn the_edge_reader_sees_use_lines_super_paths_and_ignores_comments() {
    // The checker is itself checked: a test that cannot fail guards nothing.
    let code = code_of(
        "use crate::ingress::{Slice, GemmOp};\n/// see crate::release::Memo\nlet x = super::super::golden::Baseline::new();\n",
    );
    let module = vec!["validate".to_owned(), "rules".to_owned(), "absolute".to_owned()];
    let paths = referenced_paths(&module, &code);
    assert_eq!(
        paths,
        vec![
            vec!["ingress".to_owned()],
            vec![
                "validate".to_owned(),
                "golden".to_owned(),
                "Baseline".to_owned(),
                "new".to_owned()
            ],
        ]
    );
}
