//! README.md and docs/*.md point only to files in the repository (issue 24: they cited a
//! design document and a research file that a clone does not have). Every relative
//! Markdown link, and every path under a top-level folder of the repository written in
//! backticks or in a code block, must exist; nothing may point outside the clone.

use crate::support::repo_file;
use regex::Regex;
use std::path::{Path, PathBuf};

/// The repository's top-level folders: a token starting with one of them names a file.
const TOP_LEVEL: &[&str] = &[
    ".ci/",
    "benches/",
    "ci/",
    "crates/",
    "data/",
    "docs/",
    "examples/",
    "golden/",
    "schemas/",
    "scenarios/",
    "scripts/",
    "src/",
    "templates/",
    "tests/",
];

/// What the docs cited that a clone does not have.
const OUTSIDE: &[&str] = &[
    "/work/",
    "../shared",
    "shared/",
    "DESIGN.md",
    "STYLE.md",
    "research/",
];

/// README.md and every docs/*.md, with their text.
fn documents() -> Vec<(PathBuf, String)> {
    let root = PathBuf::from(repo_file(""));
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p, text)
        })
        .collect()
}

/// The paths `text` mentions, each with the folder it is relative to.
fn mentioned<'a>(doc: &'a Path, text: &'a str) -> Vec<(String, PathBuf)> {
    let root = PathBuf::from(repo_file(""));
    let mut found = Vec::new();
    let link = Regex::new(r"\[[^\]]*\]\(([^)\s]+)\)").unwrap();
    for c in link.captures_iter(text) {
        let target = &c[1];
        if !target.starts_with("http:")
            && !target.starts_with("https:")
            && !target.starts_with("mailto:")
            && !target.starts_with('#')
        {
            let file = target.split('#').next().unwrap_or(target);
            found.push((file.to_owned(), doc.parent().unwrap().to_path_buf()));
        }
    }
    // Backticked tokens, and the words of code blocks.
    let code = Regex::new(r"(?s)```[^\n]*\n(.*?)```|`([^`\n]+)`").unwrap();
    let separators = Regex::new(r#"[\s'"=\[\],()]+"#).unwrap();
    for c in code.captures_iter(text) {
        let span = c.get(1).or_else(|| c.get(2)).unwrap().as_str();
        for token in separators.split(span) {
            let placeholder = token.contains(['<', '>', '*', '{', '}', '$', '|', '…']);
            if placeholder || !TOP_LEVEL.iter().any(|top| token.starts_with(top)) {
                continue;
            }
            let path = token
                .split([':', '#'])
                .next()
                .unwrap()
                .trim_end_matches(['.', ';']);
            found.push((path.to_owned(), root.clone()));
        }
    }
    found
}

#[test]
fn every_file_the_readme_and_docs_mention_is_in_the_repository() {
    let mut missing = Vec::new();
    let mut checked = 0;
    for (doc, text) in documents() {
        for (path, base) in mentioned(&doc, &text) {
            checked += 1;
            if !base.join(&path).exists() {
                missing.push(format!("{}: {path}", doc.display()));
            }
        }
    }
    assert!(
        checked > 20,
        "only {checked} paths found: is the scan still reading the docs?"
    );
    assert!(
        missing.is_empty(),
        "mentioned but not in the repository:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_readme_and_docs_cite_nothing_outside_the_repository() {
    let mut outside = Vec::new();
    for (doc, text) in documents() {
        for (n, line) in text.lines().enumerate() {
            for needle in OUTSIDE.iter().filter(|needle| line.contains(**needle)) {
                outside.push(format!("{}:{}: `{needle}` in {line:?}", doc.display(), n + 1));
            }
        }
    }
    assert!(outside.is_empty(), "{}", outside.join("\n"));
}
