//! Where the caches keep their entries: a folder (local, or shared over NFS by sharded runs) or
//! an object store (`s3://`, `gs://`, `az://`) that workers on many machines share.
//!
//! An entry is a small file named by its key's digest and never changes meaning, so the only
//! races are two workers writing the same entry, and a reader meeting a half-written one. A
//! folder rules out the second with temp-then-rename; an object store with whole-object puts. The
//! store makes the first harmless with conditional puts: an entry is created only if absent, and
//! replaced (a corrupt one) only if it is still the object that was read.
//!
//! Every entry checks itself: it carries the digest of its key and of its content
//! ([`Sealed`]). An entry that fails either (edited, torn, written under another name, or by a
//! faulty writer on another machine) is never used: it is reported, set aside, and computed
//! again, so a release built from a damaged cache equals one built from an empty cache.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::de::DeserializeOwned;
use serde::Serialize;

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, UpdateVersion};

use super::InferError;
use crate::hashing::{open_sealed, Sealed};

/// `--cache-dir`: a folder, or an object-store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheLocation {
    Dir(PathBuf),
    /// `s3://bucket/prefix`, `gs://bucket/prefix` or `az://container/prefix`; credentials and
    /// endpoints come from the provider's usual environment variables (`AWS_*`, `GOOGLE_*`, `AZURE_*`).
    Object(String),
}

/// URL schemes read as object stores; anything else is a folder path.
const OBJECT_SCHEMES: &[&str] = &["s3", "s3a", "gs", "az", "azure", "abfs", "abfss"];

impl CacheLocation {
    /// A folder path, or a URL whose scheme is one of the object stores.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.split_once("://") {
            Some((scheme, rest)) if OBJECT_SCHEMES.contains(&scheme) => {
                if rest.split('/').next().is_none_or(str::is_empty) {
                    return Err(format!("{text}: expected {scheme}://BUCKET[/PREFIX]"));
                }
                Ok(CacheLocation::Object(text.trim_end_matches('/').to_string()))
            }
            Some((scheme, _)) if !scheme.contains('/') => {
                Err(format!("{text}: unsupported cache URL scheme `{scheme}` (expected a folder, s3://, gs:// or az://)"))
            }
            _ => Ok(CacheLocation::Dir(PathBuf::from(text))),
        }
    }

    /// `$XDG_CACHE_HOME/bpals-release`, else `~/.cache/bpals-release`.
    pub fn default_dir() -> PathBuf {
        std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
            .unwrap_or_else(|| PathBuf::from(".cache"))
            .join("bpals-release")
    }

    /// A folder on this machine for what only this machine needs (model-file digests): the cache
    /// folder itself, or the default folder when the cache is an object store.
    pub fn local_dir(&self) -> PathBuf {
        match self {
            CacheLocation::Dir(dir) => dir.clone(),
            CacheLocation::Object(_) => Self::default_dir(),
        }
    }

    /// The entries under `namespace` (`scores-v2`, `generations-v2`).
    pub(super) fn open(&self, namespace: &str) -> Result<EntryStore, InferError> {
        let place = match self {
            CacheLocation::Dir(dir) => Place::Dir(dir.join(namespace)),
            CacheLocation::Object(url) => Place::Object(ObjectEntries::open(url, namespace)?),
        };
        Ok(EntryStore { place, problems: Arc::default() })
    }
}

impl From<PathBuf> for CacheLocation {
    fn from(dir: PathBuf) -> Self {
        CacheLocation::Dir(dir)
    }
}

/// Serialized as written (reports print it; a folder's JSON stays a plain path).
impl serde::Serialize for CacheLocation {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl fmt::Display for CacheLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CacheLocation::Dir(dir) => write!(f, "{}", dir.display()),
            CacheLocation::Object(url) => f.write_str(url),
        }
    }
}

/// An entry that failed its check: where it is, what was expected and what was found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CacheProblem {
    pub entry: String,
    pub expected: String,
    pub found: String,
}

impl fmt::Display for CacheProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cache entry {} failed its check (expected {}, found {}): set aside and computed again",
            self.entry, self.expected, self.found
        )
    }
}

/// One cache's entries, each named `<digest[..2]>/<digest>.json`, and the problems met reading
/// them in this run (shared by the store's clones).
#[derive(Debug, Clone)]
pub(super) struct EntryStore {
    place: Place,
    problems: Arc<Mutex<Vec<CacheProblem>>>,
}

#[derive(Debug, Clone)]
enum Place {
    Dir(PathBuf),
    Object(ObjectEntries),
}

impl EntryStore {
    fn relative(digest: &str) -> String {
        format!("{}/{digest}.json", &digest[..2])
    }

    /// The entry under `digest`, checked: its key, its content digest, then `check` (what the
    /// caller knows the content must be). None on a miss, and for an entry that fails a check,
    /// which is recorded in [`Self::problems`] and set aside.
    pub fn get<T: Serialize + DeserializeOwned>(
        &self,
        digest: &str,
        check: impl Fn(&T) -> Result<(), (String, String)>,
    ) -> Result<Option<T>, InferError> {
        let Some(bytes) = self.read(digest)? else { return Ok(None) };
        match open_sealed::<T>(&bytes, digest).and_then(|content| check(&content).map(|()| content)) {
            Ok(content) => Ok(Some(content)),
            Err((expected, found)) => {
                let entry = self.set_aside(digest);
                self.problems.lock().expect("not poisoned").push(CacheProblem { entry, expected, found });
                Ok(None)
            }
        }
    }

    /// Stores `content` under `digest`, sealed.
    pub fn put<T: Serialize>(&self, digest: &str, content: &T) -> Result<(), InferError> {
        self.write(digest, Sealed::new(digest, content).to_bytes())
    }

    /// The entries that failed their checks since the last call.
    pub fn take_problems(&self) -> Vec<CacheProblem> {
        std::mem::take(&mut *self.problems.lock().expect("not poisoned"))
    }

    /// Moves a failed entry out of the way (a folder's to `set-aside/`, kept for a look); an
    /// object store's is replaced by the next write. Returns where it is now.
    fn set_aside(&self, digest: &str) -> String {
        match &self.place {
            Place::Dir(dir) => {
                let from = dir.join(Self::relative(digest));
                let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
                let to = dir.join("set-aside").join(format!("{digest}.{nanos}.json"));
                let moved = std::fs::create_dir_all(to.parent().expect("has a parent")).and_then(|_| std::fs::rename(&from, &to));
                match moved {
                    Ok(()) => to.display().to_string(),
                    Err(_) => from.display().to_string(),
                }
            }
            Place::Object(o) => format!("{}/{}", o.url, Self::relative(digest)),
        }
    }

    /// The entry's bytes, or None when there is none (a miss). A folder's unreadable file is a
    /// miss too (it is rewritten); an object store that cannot be reached is an error, so that
    /// an outage never turns into rescoring every image.
    fn read(&self, digest: &str) -> Result<Option<Vec<u8>>, InferError> {
        match &self.place {
            Place::Dir(dir) => {
                let path = dir.join(Self::relative(digest));
                Ok(crate::files::regular::read(&path, crate::files::regular::CACHE_ENTRY).ok())
            }
            Place::Object(o) => Ok(o.read(&Self::relative(digest))?.map(|(bytes, _)| bytes)),
        }
    }

    pub fn exists(&self, digest: &str) -> Result<bool, InferError> {
        match &self.place {
            Place::Dir(dir) => Ok(dir.join(Self::relative(digest)).is_file()),
            Place::Object(o) => o.exists(&Self::relative(digest)),
        }
    }

    /// Stores an entry. A folder writes a temp file and renames it over any old one; an object
    /// store puts it only if absent, and otherwise replaces what is there only if it differs and
    /// has not changed since it was read (a concurrent writer's entry is as good as this one).
    fn write(&self, digest: &str, bytes: Vec<u8>) -> Result<(), InferError> {
        match &self.place {
            Place::Dir(dir) => write_file_atomically(&dir.join(Self::relative(digest)), &bytes),
            Place::Object(o) => o.write(&Self::relative(digest), bytes),
        }
    }

    /// Removes temp files older than `max_age` that killed runs left in a folder (object stores
    /// never hold partial entries). Returns how many were removed.
    pub fn sweep_stale_temp_files(&self, max_age: std::time::Duration) -> usize {
        match &self.place {
            Place::Dir(dir) => sweep_stale_temp_files(dir, max_age),
            Place::Object(_) => 0,
        }
    }

    #[cfg(test)]
    pub fn file_path(&self, digest: &str) -> PathBuf {
        match &self.place {
            Place::Dir(dir) => dir.join(Self::relative(digest)),
            Place::Object(_) => unreachable!("test helper for folder caches"),
        }
    }
}

/// Writes a file atomically (a temp file in the same folder, then a rename), so a killed run or
/// a concurrent shard never leaves a half-written entry.
fn write_file_atomically(path: &Path, bytes: &[u8]) -> Result<(), InferError> {
    let dir = path.parent().expect("cache paths have a parent");
    let io = |source| InferError::Cache { location: path.display().to_string(), source: Box::new(source) };
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
    tmp.write_all(bytes).map_err(io)?;
    tmp.flush().map_err(io)?;
    tmp.persist(path).map_err(|e| io(e.error))?;
    Ok(())
}

/// Removes temp files older than `max_age` from a cache's folders. Younger ones may belong to a
/// run writing right now (sharded `infer` jobs share the cache), so they stay.
fn sweep_stale_temp_files(root: &Path, max_age: std::time::Duration) -> usize {
    let Ok(dirs) = std::fs::read_dir(root) else { return 0 };
    let now = std::time::SystemTime::now();
    let mut removed = 0;
    for dir in dirs.flatten().filter(|d| d.path().is_dir() && d.file_name() != "set-aside") {
        let Ok(files) = std::fs::read_dir(dir.path()) else { continue };
        for file in files.flatten() {
            let stale = file.file_name().to_string_lossy().starts_with(".tmp")
                && file.metadata().and_then(|m| m.modified()).is_ok_and(|t| now.duration_since(t).is_ok_and(|age| age > max_age));
            if stale && std::fs::remove_file(file.path()).is_ok() {
                removed += 1;
            }
        }
    }
    removed
}

/// A cache's entries on an object store. The store's client is async; the runners are rayon
/// threads, so calls go through a small runtime of the store's own.
#[derive(Clone)]
pub(super) struct ObjectEntries {
    url: String,
    store: Arc<dyn ObjectStore>,
    prefix: ObjectPath,
    runtime: Arc<tokio::runtime::Runtime>,
}

impl fmt::Debug for ObjectEntries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ObjectEntries({})", self.url)
    }
}

impl ObjectEntries {
    fn open(url: &str, namespace: &str) -> Result<Self, InferError> {
        let failed = |source: object_store::Error| InferError::Cache { location: url.to_string(), source: Box::new(source) };
        let parsed = reqwest::Url::parse(url).map_err(|e| InferError::Cache { location: url.to_string(), source: Box::new(e) })?;
        let store: Arc<dyn ObjectStore> = match parsed.scheme() {
            "s3" | "s3a" => Arc::new(object_store::aws::AmazonS3Builder::from_env().with_url(url).build().map_err(failed)?),
            "gs" => Arc::new(object_store::gcp::GoogleCloudStorageBuilder::from_env().with_url(url).build().map_err(failed)?),
            _ => Arc::new(object_store::azure::MicrosoftAzureBuilder::from_env().with_url(url).build().map_err(failed)?),
        };
        let prefix = ObjectPath::parse(parsed.path().trim_matches('/')).map_err(|e| failed(e.into()))?.join(namespace);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| InferError::Cache { location: url.to_string(), source: Box::new(e) })?;
        let entries = ObjectEntries { url: format!("{url}/{namespace}"), store, prefix, runtime: Arc::new(runtime) };
        // Fail here, before any scoring, when the bucket or the credentials are wrong.
        entries.runtime.block_on(entries.store.list_with_delimiter(Some(&entries.prefix))).map_err(|e| entries.error("", e))?;
        Ok(entries)
    }

    fn path(&self, relative: &str) -> ObjectPath {
        relative.split('/').fold(self.prefix.clone(), |p, part| p.join(part))
    }

    /// The store's error, flattened: its message already spells out the chain of causes.
    fn error(&self, relative: &str, source: object_store::Error) -> InferError {
        InferError::Cache { location: format!("{}/{relative}", self.url), source: Box::new(std::io::Error::other(source.to_string())) }
    }

    fn read(&self, relative: &str) -> Result<Option<(Vec<u8>, UpdateVersion)>, InferError> {
        let got = self.runtime.block_on(async {
            let got = self.store.get(&self.path(relative)).await?;
            let version = UpdateVersion { e_tag: got.meta.e_tag.clone(), version: got.meta.version.clone() };
            Ok((got.bytes().await?.to_vec(), version))
        });
        match got {
            Ok(found) => Ok(Some(found)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error(relative, e)),
        }
    }

    fn exists(&self, relative: &str) -> Result<bool, InferError> {
        match self.runtime.block_on(self.store.head(&self.path(relative))) {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.error(relative, e)),
        }
    }

    fn write(&self, relative: &str, bytes: Vec<u8>) -> Result<(), InferError> {
        let path = self.path(relative);
        let put = |mode: PutMode, bytes: Vec<u8>| {
            let options = PutOptions { mode, ..Default::default() };
            self.runtime.block_on(self.store.put_opts(&path, bytes.into(), options))
        };
        match put(PutMode::Create, bytes.clone()) {
            Ok(_) => Ok(()),
            Err(object_store::Error::AlreadyExists { .. }) => match self.read(relative)? {
                // Another worker wrote the same entry, or the one there is what we would write.
                None => Ok(()),
                Some((existing, _)) if existing == bytes => Ok(()),
                Some((_, version)) => match put(PutMode::Update(version), bytes) {
                    Ok(_) | Err(object_store::Error::Precondition { .. }) => Ok(()),
                    Err(e) => Err(self.error(relative, e)),
                },
            },
            Err(e) => Err(self.error(relative, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    #[test]
    fn locations_parse_as_folders_or_object_urls() {
        assert_eq!(CacheLocation::parse("/tmp/x").unwrap(), CacheLocation::Dir("/tmp/x".into()));
        assert_eq!(CacheLocation::parse("rel/dir").unwrap(), CacheLocation::Dir("rel/dir".into()));
        assert_eq!(CacheLocation::parse("s3://b/p/").unwrap(), CacheLocation::Object("s3://b/p".into()));
        assert_eq!(CacheLocation::parse("gs://b").unwrap(), CacheLocation::Object("gs://b".into()));
        let err = CacheLocation::parse("ftp://host/x").unwrap_err();
        assert!(err.contains("unsupported cache URL scheme `ftp`"), "{err}");
        assert!(CacheLocation::parse("s3://").unwrap_err().contains("expected s3://BUCKET"));
    }

    /// The conditional-put protocol, on object_store's in-memory store.
    #[test]
    fn object_entries_are_created_once_and_replaced_only_when_they_differ() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let store = Arc::new(object_store::memory::InMemory::new());
        let entries = ObjectEntries {
            url: "mem://test".into(),
            store: store.clone(),
            prefix: ObjectPath::from("p/scores-v1"),
            runtime: Arc::new(runtime),
        };
        let key = "ab/abcd.json";
        assert_eq!(entries.read(key).unwrap(), None);
        assert!(!entries.exists(key).unwrap());
        entries.write(key, b"one".to_vec()).unwrap();
        let (_, first) = entries.read(key).unwrap().unwrap();
        entries.write(key, b"one".to_vec()).unwrap();
        let (bytes, again) = entries.read(key).unwrap().unwrap();
        assert_eq!((bytes.as_slice(), &again.e_tag), (&b"one"[..], &first.e_tag), "an equal entry is left as it is");
        entries.write(key, b"two".to_vec()).unwrap();
        assert_eq!(entries.read(key).unwrap().unwrap().0, b"two", "a different (corrupt) entry is replaced");
        assert!(entries.runtime.block_on(store.head(&ObjectPath::from("p/scores-v1/ab/abcd.json"))).is_ok());
    }

    #[test]
    fn only_old_temp_files_are_swept() {
        let root = tempfile::tempdir().unwrap();
        let store = CacheLocation::Dir(root.path().into()).open("scores-v2").unwrap();
        let digest = "ab".repeat(32);
        store.put(&digest, &1).unwrap();
        let sub = store.file_path(&digest).parent().unwrap().to_path_buf();
        let old = sub.join(".tmpOLD");
        std::fs::write(&old, "partial").unwrap();
        std::fs::File::options().write(true).open(&old).unwrap().set_modified(SystemTime::now() - Duration::from_secs(7200)).unwrap();
        let fresh = sub.join(".tmpNEW");
        std::fs::write(&fresh, "being written").unwrap();
        assert_eq!(store.sweep_stale_temp_files(Duration::from_secs(3600)), 1);
        assert!(!old.exists() && fresh.exists());
        assert!(store.exists(&digest).unwrap(), "entries are never swept");
    }

    /// The entry's bytes, as an editor or a faulty writer might leave them.
    fn rewrite(store: &EntryStore, digest: &str, edit: impl Fn(&mut serde_json::Value)) {
        let path = store.file_path(digest);
        let mut value: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        edit(&mut value);
        std::fs::write(&path, serde_json::to_vec(&value).unwrap()).unwrap();
    }

    #[test]
    fn an_entry_that_fails_its_check_is_reported_set_aside_and_missed() {
        let root = tempfile::tempdir().unwrap();
        let store = CacheLocation::Dir(root.path().into()).open("scores-v2").unwrap();
        let digest = "cd".repeat(32);
        let ok = |_: &Vec<f32>| Ok(());
        store.put(&digest, &vec![1.5f32, -2.25]).unwrap();
        assert_eq!(store.get(&digest, ok).unwrap(), Some(vec![1.5, -2.25]));

        // Other valid JSON: the content's digest catches it.
        rewrite(&store, &digest, |v| v["content"][0] = serde_json::json!(9.0));
        assert_eq!(store.get(&digest, ok).unwrap(), None);
        let problems = store.take_problems();
        assert_eq!(problems.len(), 1);
        assert!(problems[0].entry.contains("set-aside"), "{:?}", problems[0]);
        assert!(!store.exists(&digest).unwrap(), "moved out of the way");
        assert_eq!(std::fs::read_dir(root.path().join("scores-v2/set-aside")).unwrap().count(), 1);

        // An entry copied under another key's name: its key digest catches it.
        let other = "ef".repeat(32);
        store.put(&other, &vec![0.5f32]).unwrap();
        std::fs::create_dir_all(store.file_path(&digest).parent().unwrap()).unwrap();
        std::fs::copy(store.file_path(&other), store.file_path(&digest)).unwrap();
        assert_eq!(store.get(&digest, ok).unwrap(), None);
        assert!(store.take_problems()[0].found.contains(&other));

        // What the caller checks: a well-sealed entry of the wrong shape.
        store.put(&digest, &vec![1.0f32]).unwrap();
        assert_eq!(
            store.get(&digest, |v: &Vec<f32>| if v.len() == 2 { Ok(()) } else { Err(("2 scores".into(), "1".into())) }).unwrap(),
            None
        );
        assert_eq!(store.take_problems().len(), 1);
    }
}
