//! What `build` and `infer` did, each rendering itself for the terminal (and as JSON).

use std::fmt;
use std::path::PathBuf;

use serde::Serialize;

use crate::infer::ShardSpec;
use crate::manifest::ManifestFile;

/// What the build did.
#[derive(Debug, Clone, Serialize)]
pub struct BuildReport {
    pub out: PathBuf,
    pub release_id: String,
    pub demo_reasons: Vec<String>,
    pub scorer: String,
    pub images: usize,
    pub rows: usize,
    pub cached_images: usize,
    pub scored_images: usize,
    pub files: Vec<ManifestFile>,
    pub notes: Vec<String>,
}

impl fmt::Display for BuildReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "built release {} in {}", self.release_id, self.out.display())?;
        writeln!(f, "  scorer: {}", self.scorer)?;
        writeln!(
            f,
            "  {} images, {} rows; {} images scored, {} from the cache",
            self.images, self.rows, self.scored_images, self.cached_images
        )?;
        for file in &self.files {
            match file.rows {
                Some(rows) => writeln!(f, "  {:<44} {:>10} bytes {:>8} rows  {}", file.path, file.bytes, rows, &file.sha256[..16])?,
                None => writeln!(f, "  {:<44} {:>10} bytes {:>14}  {}", file.path, file.bytes, "", &file.sha256[..16])?,
            }
        }
        for note in &self.notes {
            writeln!(f, "  note: {note}")?;
        }
        if !self.demo_reasons.is_empty() {
            f.write_str(&demo_banner(&self.demo_reasons))?;
        }
        Ok(())
    }
}

/// Why a build is a demo, said before the build starts and again at its end.
pub fn demo_banner(reasons: &[String]) -> String {
    let mut s = String::from("DEMO BUILD: not publishable, `publish` will refuse it, because\n");
    for r in reasons {
        s.push_str(&format!("  - {r}\n"));
    }
    s
}

/// What `bpals-release infer [--shard K/N]` added to the score cache.
#[derive(Debug, Clone, Serialize)]
pub struct InferShardReport {
    pub release_id: String,
    #[serde(skip)]
    pub shard: Option<ShardSpec>,
    /// Where the shard's index came from, when a scheduler gave it (`JOB_COMPLETION_INDEX=2`).
    pub shard_source: Option<String>,
    /// Images in this run's shard.
    pub images: usize,
    pub computed: usize,
    pub cached: usize,
    /// S2: images whose grounding answers were decoded, and those already cached.
    pub generated: usize,
    pub generated_cached: usize,
    /// S3 and S4: (stage, images decoded, images already cached) per generated text.
    pub narrated: Vec<(&'static str, usize, usize)>,
    pub cache_dir: crate::infer::CacheLocation,
    /// Cache entries that failed their check: each set aside and computed again.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cache_problems: Vec<String>,
}

impl fmt::Display for InferShardReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let from = self.shard_source.as_ref().map(|s| format!(" (index from {s})")).unwrap_or_default();
        let shard = self.shard.map(|s| format!(" shard {}/{}{from}", s.index, s.count)).unwrap_or_default();
        writeln!(
            f,
            "infer {}{shard}: {} images, {} scored, {} already cached (cache: {})",
            self.release_id, self.images, self.computed, self.cached, self.cache_dir
        )?;
        if self.generated + self.generated_cached > 0 {
            writeln!(f, "  grounding answers: {} images decoded, {} already cached", self.generated, self.generated_cached)?;
        }
        for (stage, computed, cached) in &self.narrated {
            let what = if *stage == "reason" { "reasoning" } else { "reports" };
            writeln!(f, "  {what}: {computed} images decoded, {cached} already cached")?;
        }
        for problem in &self.cache_problems {
            writeln!(f, "  {problem}")?;
        }
        Ok(())
    }
}
