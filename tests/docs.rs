//! The docs stand alone: docs/configuration.md's settings table is what the binary accepts,
//! nothing cites a document outside this repository, and every relative link resolves.

use std::path::{Path, PathBuf};

const BLESS_ENV: &str = "GATEWAY_LEADER_BLESS";
const BEGIN: &str = "<!-- BEGIN GENERATED: settings table";
const END: &str = "<!-- END GENERATED -->";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn configuration_md_is_generated_from_the_cli() {
    let path = root().join("docs/configuration.md");
    let doc = std::fs::read_to_string(&path).expect("docs/configuration.md");
    let start = doc.find(BEGIN).expect("the generated block's start marker");
    let body = start + doc[start..].find('\n').expect("a line after the marker") + 1;
    let end = doc.find(END).expect("the generated block's end marker");
    let table = gateway_leader::config::reference::settings_table();
    if doc[body..end] == table {
        return;
    }
    if std::env::var_os(BLESS_ENV).is_some_and(|v| v == "1") {
        std::fs::write(&path, format!("{}{table}{}", &doc[..body], &doc[end..]))
            .expect("writing docs/configuration.md");
        return;
    }
    panic!(
        "docs/configuration.md is stale: the flags or settings changed. Regenerate it with\n  \
         {BLESS_ENV}=1 cargo test --test docs\nand commit it. Expected table:\n{table}"
    );
}

#[test]
fn the_readme_lists_the_conformance_tests_that_pass() {
    const BEGIN: &str = "<!-- BEGIN GENERATED: conformance tests passed";
    const END: &str = "<!-- END GENERATED: conformance -->";
    let path = root().join("README.md");
    let readme = std::fs::read_to_string(&path).expect("README.md");
    let passed = std::fs::read_to_string(root().join("docs/conformance/passed-tests.txt"))
        .expect("docs/conformance/passed-tests.txt (tests/conformance.rs writes it)");
    let list: String = passed
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|name| format!("- `{name}`\n"))
        .collect();
    let start = readme
        .find(BEGIN)
        .expect("the conformance list's start marker");
    let body = start + readme[start..].find('\n').expect("a line after the marker") + 1;
    let end = readme.find(END).expect("the conformance list's end marker");
    if readme[body..end] == list {
        return;
    }
    if std::env::var_os(BLESS_ENV).is_some_and(|v| v == "1") {
        std::fs::write(
            &path,
            format!("{}{list}{}", &readme[..body], &readme[end..]),
        )
        .expect("writing README.md");
        return;
    }
    panic!(
        "README.md's list of conformance tests that pass is not docs/conformance/passed-tests.txt. \
         Regenerate it with\n  {BLESS_ENV}=1 cargo test --test docs\nExpected:\n{list}"
    );
}

/// Every file under `dir` whose name ends with one of `exts`, skipping build output.
fn files(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("readable dir").flatten() {
        let p = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if p.is_dir() {
            if !matches!(name.as_str(), "target" | ".git") {
                files(&p, exts, out);
            }
        } else if exts.iter().any(|x| name.ends_with(x)) {
            out.push(p);
        }
    }
}

#[test]
fn nothing_cites_a_design_document_outside_the_repository() {
    let mut all = Vec::new();
    files(root(), &[".md", ".rs", ".sh", ".yaml", ".toml"], &mut all);
    let mut found = Vec::new();
    for f in all {
        // This very test spells out what it looks for.
        if f.ends_with("tests/docs.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            let l = line.to_lowercase();
            // Spelled in two pieces so that this check does not find itself.
            let (a, b) = (
                concat!("design", " section"),
                concat!("design", ", section"),
            );
            if l.contains(a) || l.contains(b) {
                found.push(format!("{}:{}: {line}", f.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "cite docs/leader-election.md (or another doc in this repository) instead:\n{}",
        found.join("\n")
    );
}

#[test]
fn relative_links_in_the_docs_resolve() {
    let mut docs = vec![root().join("README.md")];
    files(&root().join("docs"), &[".md"], &mut docs);
    let mut broken = Vec::new();
    for doc in docs {
        let text = std::fs::read_to_string(&doc).expect("readable");
        for (i, _) in text.match_indices("](") {
            let rest = &text[i + 2..];
            let Some(close) = rest.find(')') else {
                continue;
            };
            let target = &rest[..close];
            if target.contains("://") || target.starts_with('#') || target.starts_with("mailto:") {
                continue;
            }
            let file = target.split('#').next().unwrap_or_default();
            let at = doc.parent().expect("a dir").join(file);
            if !at.exists() {
                broken.push(format!("{}: {target}", doc.display()));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The binary refuses a `GATEWAY_LEADER_*` variable that names no setting, except the few it
/// knows (`NOT_SETTINGS`). A tool of this repository that reads a new one of its own would have
/// every test or demo replica it starts refused at startup: this names the variable first.
#[test]
fn every_variable_the_tooling_reads_is_a_setting_or_known_not_to_be() {
    use gateway_leader::config::{env_var, NOT_SETTINGS, SETTINGS};
    let mut all = Vec::new();
    for dir in ["scripts", ".ci", "testkit", "benches", "examples"] {
        files(&root().join(dir), &[".rs", ".sh", "run"], &mut all);
    }
    let known: Vec<String> = SETTINGS
        .iter()
        .map(|s| env_var(s.key))
        .chain(NOT_SETTINGS.iter().map(|s| s.to_string()))
        .chain([env_var("config")])
        .collect();
    let mut unknown = Vec::new();
    for f in all {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for (at, _) in text.match_indices("GATEWAY_LEADER_") {
            let name: String = text[at..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            // A prefix that code completes (`format!("GATEWAY_LEADER_{}")`) is no variable.
            if name.ends_with('_') || known.contains(&name) {
                continue;
            }
            unknown.push(format!("{}: {name}", f.display()));
        }
    }
    unknown.sort();
    unknown.dedup();
    assert!(
        unknown.is_empty(),
        "variables the tooling uses that the binary would refuse; add them to NOT_SETTINGS \
         (src/config/names.rs) or rename them:\n{}",
        unknown.join("\n")
    );
}
