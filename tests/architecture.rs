//! The layering of `src/`: each top-level module imports only modules below it in the pipeline,
//! and no two files of one module import each other (directly or round a circle). The guide's
//! architecture notes (docs/src/maintainers/architecture.md) say why the order is what it is.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Lowest first. A module may import only modules that come before it.
const LAYERS: [&str; 30] = [
    "memory",
    "vocab",
    "files",
    "hashing",
    "vlm",
    "reports",
    "release_spec",
    "manifest",
    "signing",
    "hub",
    "source",
    "select",
    "infer",
    "signal",
    "diagnose",
    "reason",
    "paraphrase",
    "trial",
    "eval",
    "review",
    "shard",
    "card",
    "inputs",
    "pipeline",
    "publish",
    "access",
    "audit",
    "diff",
    "doctor",
    "bench",
];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a file without comments (a doc link is not an import) and without its
/// `#[cfg(test)]` module (tests may reach anywhere).
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    // Up to the test module, however visible (a `pub(super) mod tests` lends its helpers).
    let tests = text.match_indices("#[cfg(test)]\n").map(|(at, _)| at).find(|&at| {
        let next = text[at..].lines().nth(1).unwrap_or("");
        next.ends_with("mod tests {")
    });
    let code = &text[..tests.unwrap_or(text.len())];
    code.lines().filter(|line| !line.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// Every `NAME` in `prefix NAME` or `prefix{NAME, ...}` (one level of braces).
fn names_after(text: &str, prefix: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in text.match_indices(prefix) {
        let rest = &text[at + prefix.len()..];
        let ident = |s: &str| s.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>();
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            names.extend(group.split(',').map(|item| ident(item.trim())).filter(|n| !n.is_empty()));
        } else {
            names.insert(ident(rest));
        }
    }
    names
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// (file, top-level module) for every library file; `main.rs`, `lib.rs` and `cli/` are the binary.
fn library_files() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|path| {
            let rel = path.strip_prefix(src()).unwrap().to_path_buf();
            let top = rel.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
            (!["main", "lib", "cli"].contains(&top.as_str())).then_some((path, top))
        })
        .collect()
}

#[test]
fn every_module_is_placed_in_a_layer() {
    let modules: BTreeSet<String> = library_files().into_iter().map(|(_, top)| top).collect();
    let listed: BTreeSet<String> = LAYERS.iter().map(|s| s.to_string()).collect();
    assert_eq!(modules, listed, "src/ and LAYERS must name the same modules");
}

#[test]
fn no_module_imports_one_above_it() {
    let rank = |m: &str| LAYERS.iter().position(|l| *l == m);
    let mut upward = Vec::new();
    for (path, top) in library_files() {
        for used in names_after(&code(&path), "crate::") {
            if used == top || rank(&used).is_none() {
                continue;
            }
            if rank(&used) > rank(&top) {
                upward.push(format!("{} ({top}) imports {used}", path.strip_prefix(src()).unwrap().display()));
            }
        }
    }
    assert!(upward.is_empty(), "imports that go up the pipeline:\n  {}", upward.join("\n  "));
}

#[test]
fn no_two_files_of_a_module_import_each_other() {
    // Edges between sibling files (mod.rs, the module's front, is left out: it declares them all).
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for (path, top) in library_files() {
        let dir = path.parent().unwrap().to_path_buf();
        if path.file_name().unwrap() == "mod.rs" || dir == src() {
            continue;
        }
        let module = dir.strip_prefix(src()).unwrap().to_string_lossy().replace('/', "::");
        let text = code(&path);
        let mut siblings = names_after(&text, "super::");
        siblings.extend(names_after(&text, &format!("crate::{module}::")));
        let targets = siblings.into_iter().map(|name| dir.join(format!("{name}.rs"))).filter(|p| p.is_file() && *p != path);
        edges.entry(path.clone()).or_default().extend(targets);
        let _ = top;
    }
    // A circle exists when some file reaches itself.
    for start in edges.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&PathBuf> = edges[start].iter().collect();
        while let Some(next) = stack.pop() {
            assert!(next != start, "{} imports itself round a circle of sibling files", start.display());
            if seen.insert(next) {
                stack.extend(edges.get(next).into_iter().flatten());
            }
        }
    }
}

#[test]
fn the_engine_families_stand_on_the_shared_config_types_and_point_nowhere_up() {
    // config.rs holds what every family reads config.json into; checkpoint.rs dispatches on the
    // family above both. A family folder may use config.rs, never what is built on the families.
    let config = code(&src().join("vlm/config.rs"));
    for up in ["families", "checkpoint", "model_dir", "engine"] {
        assert!(!names_after(&config, "super::").contains(up) && !names_after(&config, "crate::vlm::").contains(up), "config.rs uses {up}");
    }
    let mut family_files = Vec::new();
    rust_files(&src().join("vlm/families"), &mut family_files);
    for path in family_files {
        let text = code(&path);
        let used: BTreeSet<String> = names_after(&text, "crate::vlm::").into_iter().chain(names_after(&text, "super::super::")).collect();
        for up in ["checkpoint", "model_dir", "engine", "chat_template", "prompt"] {
            assert!(!used.contains(up), "{} uses {up}", path.display());
        }
    }
}

/// The repository's tracked files travel with every run on a GPU node, where at most 64 MiB
/// arrive in all and the bundle (`scripts/gpu-bundle`) takes up to 32 MiB of them: the tracked
/// files stay under 25 MiB, 7 MiB to spare. Goldens hold the values their tests compare
/// (fixtures/vlm/gen_tiny_models.py, thin_goldens); larger references are made at test time.
#[test]
fn the_tracked_files_stay_under_25_mib() {
    const LIMIT: u64 = 25 << 20;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let listed = std::process::Command::new("git").args(["ls-files", "-z"]).current_dir(root).output();
    let Some(listed) = listed.ok().filter(|o| o.status.success()) else {
        eprintln!("not a git checkout: the size of the tracked files is not checked");
        return;
    };
    let mut sizes: Vec<(u64, String)> = listed
        .stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .filter_map(|p| std::fs::symlink_metadata(root.join(&p)).ok().map(|m| (m.len(), p)))
        .collect();
    let total: u64 = sizes.iter().map(|(n, _)| n).sum();
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let largest: Vec<String> = sizes.iter().take(8).map(|(n, p)| format!("  {n:>10} {p}")).collect();
    assert!(total <= LIMIT, "the tracked files hold {total} bytes, more than {LIMIT} (25 MiB); the largest:\n{}", largest.join("\n"));
}
