//! The release series (roadmap) read from the specs folder: each spec's `release` section,
//! merged along its `extends` chain but not resolved, since later series are not buildable yet.

use std::path::Path;

use serde::Serialize;

use super::layer::{ReleaseLayer, Status};
use super::merge::{Merge, Nulls};
use super::{load_chain, SpecError};

#[derive(Debug, Clone, Serialize)]
pub struct SeriesEntry {
    pub id: String,
    pub name: String,
    pub adds: String,
    pub date: String,
    pub status: Status,
    /// Whether this tool builds every addition the spec lists (S3 and S4 are refused until
    /// their stages land).
    pub built: bool,
}

/// Every `*.yaml` directly in `dir` that has a complete release section, ordered by date.
pub fn load_series(dir: &Path) -> Result<Vec<SeriesEntry>, SpecError> {
    let entries = std::fs::read_dir(dir).map_err(|source| SpecError::Read { path: dir.to_path_buf(), source })?;
    // Regular files only (links followed): a FIFO named like a spec would block the build.
    let mut paths: Vec<_> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml") && std::fs::metadata(p).is_ok_and(|m| m.is_file()))
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for path in paths {
        let chain = load_chain(&path)?;
        let mut release = ReleaseLayer::default();
        let mut additions = Vec::new();
        for loaded in chain.iter().rev() {
            if let Some(r) = loaded.layer.release.clone() {
                release.merge(r, &Nulls::new(&loaded.nulls).section("release"));
            }
            if let Some(a) = &loaded.layer.additions {
                additions.clone_from(a);
            }
        }
        if let (Some(id), Some(name), Some(adds), Some(date), Some(status)) =
            (release.id, release.name, release.adds, release.date, release.status)
        {
            let built = additions.iter().all(|a: &super::Addition| a.implemented());
            out.push(SeriesEntry { id, name, adds, date, status, built });
        }
    }
    out.sort_by(|a, b| a.date.cmp(&b.date).then(a.id.cmp(&b.id)));
    Ok(out)
}
