//! The release spec: a strict YAML file, composed with `extends:`, resolved into [`ReleaseSpec`].
//!
//! Loading happens in three steps, each with its own error surface:
//! 1. parse every file of the `extends` chain into a [`layer::SpecLayer`] (serde reports the line,
//!    column and key of unknown keys and wrong types);
//! 2. merge the layers child-over-parent;
//! 3. resolve: fill defaults, expand `${VAR}` where allowed, validate values and run the gates.
//!    Errors here name the file and line that set the offending key.

pub mod croissant;
pub mod diagnose;
mod expand;
pub mod gates;
pub mod layer;
mod merge;
pub mod narrative;
mod pledge;
mod resolve;
pub mod series;
mod text;
mod types;

use std::fmt;
use std::path::{Path, PathBuf};

pub use layer::{
    Addition, Backend, Compression, DemoWeights, DevicePolicy, Dtype, FeatureDefinition, GoldFormat, RowPolicy, Split, Status, Tier,
    Visibility,
};
pub use pledge::{PledgeLayer, PledgeSpec, PledgeStep};
pub use text::is_bidi_control;
pub use types::*;

/// Where a problem sits: a file, the line if known, and the dotted key.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyLocation {
    pub file: PathBuf,
    pub line: Option<usize>,
    pub key: String,
}

impl KeyLocation {
    /// The folder of the file: relative paths set there resolve against it.
    pub fn dir(&self) -> PathBuf {
        self.file.parent().map(Path::to_path_buf).unwrap_or_default()
    }
}

impl fmt::Display for KeyLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{}: key `{}`", self.file.display(), line, self.key),
            None => write!(f, "{}: key `{}`", self.file.display(), self.key),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("cannot read spec {}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("invalid spec {}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("{}: `extends` forms a cycle: {}", path.display(), chain)]
    ExtendsCycle { path: PathBuf, chain: String },
    #[error("{at}: required but not set here or in any spec it extends (chain: {chain})")]
    Missing { at: KeyLocation, chain: String },
    #[error("{at}: {message}")]
    Invalid { at: KeyLocation, message: String },
    #[error("gate `{gate}` refused the spec {}: {message}", path.display())]
    Gate { path: PathBuf, gate: &'static str, message: String },
}

/// One parsed file of an `extends` chain, kept with its text so errors can point at lines.
#[derive(Debug, Clone)]
pub struct LoadedLayer {
    pub path: PathBuf,
    pub text: String,
    pub layer: layer::SpecLayer,
    /// The dotted keys this file sets to null: what it unsets of its parents' values.
    pub nulls: std::collections::BTreeSet<String>,
}

/// Reads the chain of spec files starting at `path`, child first.
pub fn load_chain(path: &Path) -> Result<Vec<LoadedLayer>, SpecError> {
    let mut chain: Vec<LoadedLayer> = Vec::new();
    let mut next = Some(path.to_path_buf());
    while let Some(path) = next.take() {
        let path = std::path::absolute(&path).map_err(|source| SpecError::Read { path: path.clone(), source })?;
        let path = path.canonicalize().map_err(|source| SpecError::Read { path: path.clone(), source })?;
        if chain.iter().any(|l| l.path == path) {
            let names: Vec<String> = chain.iter().map(|l| l.path.display().to_string()).collect();
            return Err(SpecError::ExtendsCycle { path: path.clone(), chain: format!("{} -> {}", names.join(" -> "), path.display()) });
        }
        let text = crate::files::regular::read_to_string(&path, crate::files::regular::SPEC)
            .map_err(|source| SpecError::Read { path: path.clone(), source })?;
        let layer = parse_layer(&path, &text)?;
        if let Some(parent) = &layer.extends {
            // Only a spec file: a parse error quotes lines of the file it names, and `extends:
            // /etc/passwd` must not print that file's lines.
            if !is_spec_file_name(Path::new(parent)) {
                let at = KeyLocation { line: key_line(&text, "extends"), file: path.clone(), key: "extends".into() };
                return Err(SpecError::Invalid {
                    at,
                    message: format!("{parent:?} is not a spec file: expected a path ending in .yaml or .yml"),
                });
            }
            let dir = path.parent().unwrap_or(Path::new("."));
            next = Some(dir.join(parent));
        }
        let nulls = merge::null_keys(&text);
        chain.push(LoadedLayer { path, text, layer, nulls });
    }
    Ok(chain)
}

/// A name a spec file may have: `*.yaml` or `*.yml`.
pub fn is_spec_file_name(path: &Path) -> bool {
    path.extension().is_some_and(|x| x == "yaml" || x == "yml")
}

pub fn parse_layer(path: &Path, text: &str) -> Result<layer::SpecLayer, SpecError> {
    if text.trim().is_empty() {
        return Err(SpecError::Parse { path: path.to_path_buf(), message: "the file is empty".into() });
    }
    let name = path.display().to_string();
    serde_saphyr::from_str::<layer::SpecLayer>(text).map_err(|e| SpecError::Parse {
        path: path.to_path_buf(),
        message: e.render_with_options(serde_saphyr::render_options! { source_name: Some(name.as_str()) }),
    })
}

/// Loads, merges and resolves a spec. Gates that need no inputs run here too.
pub fn load(path: &Path) -> Result<ReleaseSpec, SpecError> {
    load_with_env(path, |name| std::env::var(name).ok())
}

pub fn load_with_env(path: &Path, env: impl Fn(&str) -> Option<String>) -> Result<ReleaseSpec, SpecError> {
    let chain = load_chain(path)?;
    let spec = resolve::resolve(&chain, &env)?;
    text::check(&spec)?;
    gates::check_static(&spec)?;
    Ok(spec)
}

/// Line of a dotted key (`signal.tau`) in block-style YAML, for error messages.
/// A heuristic over indentation, not a parser: it only has to find keys the parser accepted.
pub fn key_line(text: &str, dotted: &str) -> Option<usize> {
    let want: Vec<&str> = dotted.split('.').collect();
    let mut stack: Vec<(usize, String)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with('-') {
            continue;
        }
        let indent = line.len() - trimmed.len();
        let Some((key, _)) = trimmed.split_once(':') else { continue };
        let key = key.trim().trim_matches('"').trim_matches('\'');
        while stack.last().is_some_and(|(depth, _)| *depth >= indent) {
            stack.pop();
        }
        stack.push((indent, key.to_string()));
        if stack.len() == want.len() && stack.iter().zip(&want).all(|((_, k), w)| k == w) {
            return Some(i + 1);
        }
    }
    None
}

/// The file (and line) that set `key`: the first file of the chain, child first, that has it.
pub fn locate(chain: &[LoadedLayer], key: &str) -> KeyLocation {
    for loaded in chain {
        if let Some(line) = key_line(&loaded.text, key) {
            return KeyLocation { file: loaded.path.clone(), line: Some(line), key: key.to_string() };
        }
    }
    KeyLocation { file: chain[0].path.clone(), line: None, key: key.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_line_finds_nested_keys() {
        let text = "release:\n  id: s1a\n  # note\nsignal:\n  tau: 3.0\n  other:\n    deep: 1\n";
        assert_eq!(key_line(text, "release.id"), Some(2));
        assert_eq!(key_line(text, "signal.tau"), Some(5));
        assert_eq!(key_line(text, "signal.other.deep"), Some(7));
        assert_eq!(key_line(text, "release.tau"), None);
    }
}
