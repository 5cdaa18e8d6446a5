//! The layering of `src/`: each top-level module imports only modules below it in the pipeline,
//! and no two files of one module import each other (directly or round a circle), in the tool and
//! in the engine's crate (`crates/vlm/`). The engine cannot import the tool at all (it does not
//! depend on it), and the tool names only the engine's public surface, listed below. The guide's
//! architecture notes (docs/src/maintainers/architecture.md) say why the order is what it is.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Lowest first. A module may import only modules that come before it.
const LAYERS: [&str; 28] = [
    "vocab",
    "files",
    "hashing",
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

/// The engine's crate's source.
fn engine_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/vlm/src")
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

/// Every file under `root` whose module path is not `root` itself, with that module path.
fn files_in_modules(root: &Path) -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    files.sort();
    files
        .into_iter()
        .filter_map(|path| {
            let dir = path.parent().unwrap().to_path_buf();
            let module = dir.strip_prefix(root).unwrap().to_string_lossy().replace('/', "::");
            (!module.is_empty()).then_some((path, module))
        })
        .collect()
}

/// Panics when a file among `files` reaches itself through imports of its siblings.
fn assert_no_sibling_circles(files: Vec<(PathBuf, String)>) {
    // Edges between sibling files (mod.rs, the module's front, is left out: it declares them all).
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for (path, module) in files {
        if path.file_name().unwrap() == "mod.rs" {
            continue;
        }
        let dir = path.parent().unwrap().to_path_buf();
        let text = code(&path);
        let mut siblings = names_after(&text, "super::");
        let from_root = if module.is_empty() { "crate::".to_string() } else { format!("crate::{module}::") };
        siblings.extend(names_after(&text, &from_root));
        let targets = siblings.into_iter().map(|name| dir.join(format!("{name}.rs"))).filter(|p| p.is_file() && *p != path);
        edges.entry(path.clone()).or_default().extend(targets);
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
fn no_two_files_of_a_module_import_each_other() {
    assert_no_sibling_circles(files_in_modules(&src()));
}

#[test]
fn no_two_files_of_an_engine_module_import_each_other() {
    // The crate's root files are siblings too: lib.rs declares them, as a mod.rs does.
    let mut files = Vec::new();
    rust_files(&engine_src(), &mut files);
    let files = files
        .into_iter()
        .filter(|p| p.file_name().unwrap() != "lib.rs")
        .map(|path| {
            let module = path.parent().unwrap().strip_prefix(engine_src()).unwrap().to_string_lossy().replace('/', "::");
            (path, module)
        })
        .collect();
    assert_no_sibling_circles(files);
}

#[test]
fn the_engine_families_stand_on_the_shared_config_types_and_point_nowhere_up() {
    // config.rs holds what every family reads config.json into; checkpoint.rs dispatches on the
    // family above both. A family folder may use config.rs, never what is built on the families.
    // config.rs carries a family's own settings without naming them (`FamilySettings`), so it
    // names no family.
    let config = code(&engine_src().join("config.rs"));
    for up in ["checkpoint", "model_dir", "engine", "families"] {
        assert!(!names_after(&config, "super::").contains(up) && !names_after(&config, "crate::").contains(up), "config.rs uses {up}");
    }
    let mut family_files = Vec::new();
    rust_files(&engine_src().join("families"), &mut family_files);
    for path in family_files {
        let text = code(&path);
        let used: BTreeSet<String> = names_after(&text, "crate::").into_iter().chain(names_after(&text, "super::super::")).collect();
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

/// The engine's public surface: what its crate root makes public, and so all the tool may name.
/// A change here is a change of the engine's API; say why in its commit.
const ENGINE_SURFACE: [&str; 25] = [
    // without libtorch: model directories, chat templates, image sizing, grounding, CPU pins
    "arithmetic",
    "chat_template",
    "config",
    "cpu_kernels",
    "grounding",
    "preprocess",
    "rope",
    "ChatTemplateSource",
    "Family",
    "GENERATION_CONFIG",
    "ModelConfig",
    "ModelDir",
    "MoeConfig",
    "PreprocessorConfig",
    "Thinking",
    "VlmError",
    "YesNo",
    // with libtorch: the model, its passes and generation
    "cuda_kernels",
    "engine",
    "generate",
    "model",
    "pixels",
    "real_tokens",
    "shared_prefix",
    "ImageFeatures",
];

/// The engine's parts that serve `bench`, not scoring, kept apart in the surface.
const ENGINE_BENCH_SURFACE: [&str; 2] = ["stage_clock", "throughput"];

/// The names `pub mod NAME;` and `pub use PATH::{A, B as C};` make public in a crate root.
fn public_names(root: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in root.lines().map(str::trim) {
        if let Some(module) = line.strip_prefix("pub mod ") {
            names.insert(module.trim_end_matches(';').to_string());
        } else if let Some(path) = line.strip_prefix("pub use ") {
            let path = path.trim_end_matches(';');
            let items = match path.find('{') {
                Some(at) => path[at + 1..path.len() - 1].split(',').map(str::trim).collect::<Vec<_>>(),
                None => vec![path.rsplit("::").next().unwrap()],
            };
            names.extend(items.into_iter().filter(|i| !i.is_empty()).map(|i| i.rsplit(" as ").next().unwrap().to_string()));
        }
    }
    names
}

#[test]
fn the_engine_shows_the_surface_listed_here() {
    let root = std::fs::read_to_string(engine_src().join("lib.rs")).unwrap();
    let shown = public_names(&root);
    let listed: BTreeSet<String> = ENGINE_SURFACE.iter().chain(&ENGINE_BENCH_SURFACE).map(|s| s.to_string()).collect();
    assert_eq!(shown, listed, "crates/vlm/src/lib.rs and ENGINE_SURFACE must name the same items");
}

#[test]
fn the_tool_names_the_engine_only_through_its_surface() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let surface: BTreeSet<&str> = ENGINE_SURFACE.iter().chain(&ENGINE_BENCH_SURFACE).copied().collect();
    let mut outside = Vec::new();
    for path in files {
        for name in names_after(&code(&path), "bpals_vlm::") {
            if !surface.contains(name.as_str()) {
                outside.push(format!("{} names bpals_vlm::{name}", path.strip_prefix(src()).unwrap().display()));
            }
        }
    }
    assert!(outside.is_empty(), "names outside the engine's surface:\n  {}", outside.join("\n  "));
}

/// Benchmark machinery is named only by `bench` and the command line (`src/bench/`, `src/cli/`).
#[test]
fn only_the_bench_names_the_engines_bench_parts() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut misplaced = Vec::new();
    for path in files {
        let rel = path.strip_prefix(src()).unwrap();
        if rel.starts_with("cli") || rel.starts_with("bench") {
            continue;
        }
        for name in names_after(&code(&path), "bpals_vlm::") {
            if ENGINE_BENCH_SURFACE.contains(&name.as_str()) {
                misplaced.push(format!("{} names bpals_vlm::{name}", rel.display()));
            }
        }
    }
    assert!(misplaced.is_empty(), "the engine's bench parts named outside the bench:\n  {}", misplaced.join("\n  "));
}
