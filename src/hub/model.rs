//! A model checkpoint in the Hugging Face cache: found there by its pinned revision, or fetched
//! into it with hf-hub (the same snapshot layout `hf download` writes), so that builds, `doctor`
//! and the spec resolver agree on where a model lives.
//!
//! The revision and the file listing are read by this tool's bounded client; hf-hub downloads
//! each file the engine reads, under a cap of the size the listing gave it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use hf_hub::progress::{DownloadEvent, Progress, ProgressEvent, ProgressHandler};
use indicatif::{ProgressBar, ProgressStyle};

use super::{guard, Hub, HubError, Patience, RepoKind, RepoRef};

/// The files the engine reads, all at the top of the repo. Everything else in a model repo
/// (other weight formats, images, READMEs, subfolders) is skipped.
pub const MODEL_FILES: [&str; 3] = ["*.json", "*.safetensors", "*.jinja"];

/// Whether the engine reads `path` (one of [`MODEL_FILES`], not in a subfolder).
fn is_model_file(path: &str) -> bool {
    !path.contains('/') && MODEL_FILES.iter().any(|pattern| path.ends_with(pattern.trim_start_matches('*')))
}

/// What one connection may bring back while downloading a file of `size` bytes: the file, and
/// room for TLS's records (a few bytes in 16 KiB) and its handshake.
fn download_cap(size: u64) -> u64 {
    size.saturating_add(size / 64).saturating_add(guard::ERROR_BODY_CAP)
}

/// A checkpoint's snapshot folder and the commit it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSnapshot {
    pub dir: PathBuf,
    pub commit: String,
}

/// The Hugging Face cache folder (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub).
pub fn cache_dir() -> PathBuf {
    hf_hub::resolve_cache_dir()
}

/// `id`@`revision` (a commit, or a branch or tag that refs/ maps to one) in the cache at `cache`,
/// if it is there. Never touches the network.
pub fn cached_snapshot(cache: &Path, id: &str, revision: &str) -> Option<ModelSnapshot> {
    let folder = cache_folder(cache, id);
    let commit =
        std::fs::read_to_string(folder.join("refs").join(revision)).map(|c| c.trim().to_string()).unwrap_or_else(|_| revision.to_string());
    let dir = folder.join("snapshots").join(&commit);
    is_complete(&dir).then_some(ModelSnapshot { dir, commit })
}

/// Whether a snapshot holds what the engine loads: config, tokenizer and every weight file. An
/// interrupted fetch leaves some of them out; the next online build fetches the rest.
fn is_complete(dir: &Path) -> bool {
    let present = |name: &str| dir.join(name).is_file();
    if !present("config.json") || !present("tokenizer.json") {
        return false;
    }
    let Ok(index) = std::fs::read(dir.join("model.safetensors.index.json")) else { return present("model.safetensors") };
    let Ok(index) = serde_json::from_slice::<serde_json::Value>(&index) else { return false };
    index["weight_map"].as_object().is_some_and(|m| m.values().all(|f| f.as_str().is_some_and(present)))
}

/// Where `id`@`revision` is on this machine: the cached snapshot, or (online) a fresh fetch into
/// the cache. Offline (`offline`, or HF_HUB_OFFLINE set) a missing model is an error naming the
/// way to get it. Errors never carry the token.
pub fn locate(id: &str, revision: &str, offline: bool, progress: bool) -> Result<ModelSnapshot, HubError> {
    let cache = cache_dir();
    if let Some(snapshot) = cached_snapshot(&cache, id, revision) {
        return Ok(snapshot);
    }
    if offline || std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| !v.is_empty() && v != "0") {
        return Err(HubError::ModelNotCached { id: id.into(), revision: revision.into(), cache });
    }
    eprintln!("model: {id}@{revision} is not in the Hugging Face cache; fetching it into {}", cache.display());
    Hub::connect_for_models(None, &cache)?.fetch_model(&cache, id, revision, progress)
}

impl Hub {
    /// A client that downloads into the Hugging Face cache at `cache`. `endpoint` as for
    /// [`Hub::connect`]; the token comes from the usual places (HF_TOKEN, the login file).
    pub fn connect_for_models(endpoint: Option<&str>, cache: &Path) -> Result<Hub, HubError> {
        Hub::build(&super::endpoint_or_default(endpoint), Patience::default(), |builder| builder.cache_enabled(true).cache_dir(cache))
    }

    /// Fetches the files the engine needs of `id`@`revision` into the cache at `cache` (the one
    /// this client was made for; files already there are kept) and returns the snapshot.
    /// `progress` draws a byte bar on stderr.
    pub fn fetch_model(&self, cache: &Path, id: &str, revision: &str, progress: bool) -> Result<ModelSnapshot, HubError> {
        let repo = RepoRef::parse(id).map_err(|_| HubError::BadRepo(format!("{id} (model.id must be ORG/NAME to fetch from the Hub)")))?;
        let action = format!("fetching model {id}@{revision} from {}", self.endpoint);
        let commit = self.commit_in(RepoKind::Model, &repo, revision, &action)?;
        let wanted: Vec<(String, u64)> = self
            .files_in(RepoKind::Model, &repo, &commit)?
            .into_iter()
            .filter(|(path, _)| is_model_file(path))
            .map(|(p, f)| (p, f.size))
            .collect();
        if !wanted.iter().any(|(path, _)| path == "config.json") {
            return Err(HubError::Protocol(format!("model {id}@{revision} has no config.json: not a Hugging Face model repo")));
        }
        let folder = cache_folder(cache, id);
        let snapshot = folder.join("snapshots").join(&commit);
        let missing: Vec<&(String, u64)> = wanted.iter().filter(|(path, _)| !snapshot.join(path).is_file()).collect();

        let bar = if progress { ProgressBar::new(missing.iter().map(|(_, size)| size).sum()) } else { ProgressBar::hidden() };
        bar.set_style(
            ProgressStyle::with_template("fetching model {bar:30} {bytes}/{total_bytes}  {bytes_per_sec}  eta {eta}")
                .expect("static template"),
        );
        let events = Progress::new(ByteBar { bar: bar.clone(), files: Mutex::new(HashMap::new()) });
        let model = self.client.model(&repo.owner, &repo.name);
        for (path, size) in missing {
            let file_action = format!("{action}: {path}");
            let budget = super::transfer_budget(self.deadline, *size);
            self.guard.run(&file_action, download_cap(*size), budget, || {
                let fetched = model.download_file().filename(path.clone()).revision(commit.clone()).progress(events.clone()).send();
                Hub::call(|| file_action.clone(), fetched)
            })?;
        }
        bar.finish_and_clear();
        if revision != commit {
            write_ref(&folder, revision, &commit)
                .map_err(|e| HubError::Protocol(format!("{action}: writing its ref in the cache: {e}")))?;
        }
        Ok(ModelSnapshot { dir: snapshot, commit })
    }
}

/// `models--ORG--NAME` in the cache at `cache`.
fn cache_folder(cache: &Path, id: &str) -> PathBuf {
    cache.join(format!("models--{}", id.replace('/', "--")))
}

/// `refs/REVISION` names `commit`, as `hf download` leaves it (written whole or not at all).
fn write_ref(folder: &Path, revision: &str, commit: &str) -> std::io::Result<()> {
    let path = folder.join("refs").join(revision);
    let parent = path.parent().expect("under refs/");
    std::fs::create_dir_all(parent)?;
    let mut file = tempfile::NamedTempFile::new_in(parent)?;
    std::io::Write::write_all(&mut file, commit.as_bytes())?;
    file.persist(&path).map_err(|e| e.error)?;
    Ok(())
}

/// hf-hub's download events, file by file, drawn as one byte bar over them all.
struct ByteBar {
    bar: ProgressBar,
    files: Mutex<HashMap<String, u64>>,
}

impl ProgressHandler for ByteBar {
    fn on_progress(&self, event: &ProgressEvent) {
        let ProgressEvent::Download(DownloadEvent::Progress { files }) = event else { return };
        let mut done = self.files.lock().unwrap_or_else(|e| e.into_inner());
        for f in files {
            done.insert(f.filename.clone(), f.bytes_completed);
        }
        self.bar.set_position(done.values().sum());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_snapshot_is_found_by_commit_or_by_ref() {
        let cache = tempfile::tempdir().unwrap();
        let commit = "ab".repeat(20);
        let folder = cache.path().join("models--org--tiny");
        std::fs::create_dir_all(folder.join("snapshots").join(&commit)).unwrap();
        std::fs::create_dir_all(folder.join("refs")).unwrap();
        std::fs::write(folder.join("refs/main"), format!("{commit}\n")).unwrap();
        let snapshot = folder.join("snapshots").join(&commit);
        assert_eq!(cached_snapshot(cache.path(), "org/tiny", "main"), None, "an empty snapshot is incomplete");
        for name in ["config.json", "tokenizer.json", "model.safetensors.index.json"] {
            std::fs::write(snapshot.join(name), "{}").unwrap();
        }
        assert_eq!(cached_snapshot(cache.path(), "org/tiny", "main"), None, "an index without a weight map");
        let index = r#"{"weight_map": {"a": "model-1.safetensors", "b": "model-2.safetensors"}}"#;
        std::fs::write(snapshot.join("model.safetensors.index.json"), index).unwrap();
        std::fs::write(snapshot.join("model-1.safetensors"), "").unwrap();
        assert_eq!(cached_snapshot(cache.path(), "org/tiny", "main"), None, "a shard is missing");
        std::fs::write(snapshot.join("model-2.safetensors"), "").unwrap();
        let found = cached_snapshot(cache.path(), "org/tiny", "main").unwrap();
        assert_eq!(found.commit, commit);
        assert_eq!(cached_snapshot(cache.path(), "org/tiny", &commit), Some(found));
        assert_eq!(cached_snapshot(cache.path(), "org/tiny", "other-branch"), None);
    }
}
