//! `bpals-release rebuild DIR --audit`: rebuild a release from its build.lock in a scratch
//! directory and compare every byte, with the numeric drift of the raw scores when inference
//! was rerun.
//!
//! The verdict: the spec must resolve to the locked one; LICENSE.md and build.lock never depend
//! on scores and must match exactly; with no score drift every file must match; with drift, the
//! largest logit difference must stay within the spec's `audit.logit_tolerance` and no row may
//! change trust class (the score-dependent files then differ only by that drift).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::eval::{read_release_rows, ReleaseRow};
use crate::manifest::{self, BuildLock, LOCK_FILE};
use crate::pipeline::{self, BuildOptions};

/// Files that do not depend on the scores.
const SCORE_FREE: [&str; 2] = ["LICENSE.md", LOCK_FILE];

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(transparent)]
    Release(#[from] manifest::ManifestError),
    #[error(transparent)]
    Rows(#[from] crate::eval::EvalError),
    #[error("cannot find the spec {spec_file} the release was built from (looked for {}); pass --spec PATH", looked.display())]
    SpecNotFound { spec_file: String, looked: PathBuf },
    #[error(transparent)]
    Spec(Box<crate::inputs::InputsError>),
    #[error("rebuilding")]
    Build(#[from] pipeline::BuildError),
    #[error("{} records {what} {value}, which no build makes: {problem}", LOCK_FILE)]
    Lock { what: &'static str, value: String, problem: String },
}

impl From<crate::inputs::InputsError> for AuditError {
    fn from(e: crate::inputs::InputsError) -> Self {
        AuditError::Spec(Box::new(e))
    }
}

#[derive(Debug, Clone, Default)]
pub struct RebuildOptions {
    /// The spec to rebuild from [default: specs/<the lock's spec file>].
    pub spec: Option<PathBuf>,
    /// Reuse this score cache instead of rerunning inference in a fresh one.
    pub cache_dir: Option<PathBuf>,
    /// Where to rebuild [default: a temporary directory, removed when the audit passes].
    pub scratch: Option<PathBuf>,
    pub jobs: usize,
    pub progress: bool,
    /// Never download the model (see `BuildOptions::offline`).
    pub offline: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FileStatus {
    Identical,
    Differs,
    /// In the original release, not in the rebuild.
    Missing,
    /// In the rebuild only.
    Extra,
}

#[derive(Debug, Clone, Serialize)]
pub struct FileComparison {
    pub path: String,
    pub status: FileStatus,
    /// False for the files that depend on scores (they may differ by tolerated drift).
    pub score_free: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Drift {
    pub rows_compared: usize,
    pub logits_compared: usize,
    pub max_abs: f64,
    pub mean_abs: f64,
    pub tolerance: f64,
    /// Rows of one release without a counterpart in the other.
    pub unmatched_rows: usize,
    /// A two-model release: the second model's raw logits, compared the same way (`max_abs`
    /// and `mean_abs` above are the primary model's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub second: Option<ModelDrift>,
}

/// One model's raw logits, the release's against the rebuild's.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ModelDrift {
    pub logits_compared: usize,
    pub max_abs: f64,
    pub mean_abs: f64,
}

impl ModelDrift {
    /// Adds the differences of one row's logits; false where the rows hold different counts.
    fn add(&mut self, sum: &mut f64, a: (&[f32], &[f32]), b: (&[f32], &[f32])) -> bool {
        if a.0.len() != b.0.len() || a.1.len() != b.1.len() {
            return false;
        }
        for (x, y) in a.0.iter().zip(b.0).chain(a.1.iter().zip(b.1)) {
            let d = (f64::from(*x) - f64::from(*y)).abs();
            // A NaN on either side is as far as can be (max() would pass over it).
            self.max_abs = self.max_abs.max(if d.is_nan() { f64::INFINITY } else { d });
            *sum += d;
            self.logits_compared += 1;
        }
        true
    }

    fn finish(mut self, sum: f64) -> ModelDrift {
        self.mean_abs = if self.logits_compared > 0 { sum / self.logits_compared as f64 } else { 0.0 };
        self
    }
}

impl Drift {
    /// The largest difference of any model's logits.
    fn max_any(&self) -> f64 {
        self.second.as_ref().map_or(self.max_abs, |s| self.max_abs.max(s.max_abs))
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ClassChange {
    pub image_index: String,
    pub label: String,
    pub was: String,
    pub now: String,
    pub confidence_was: f64,
    pub confidence_now: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct AuditReport {
    pub release_id: String,
    pub original: PathBuf,
    pub rebuilt: PathBuf,
    pub spec: PathBuf,
    /// Paths in the resolved spec whose value differs from the lock's.
    pub spec_differences: Vec<String>,
    pub tool_locked: String,
    pub tool_now: String,
    /// The native engine's arithmetic revision the release's scores were made with (null where
    /// the lock predates the revisions), beside this tool's for the same device; both absent for
    /// another backend. Where they differ, a rebuild's logits may differ in their last bits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arithmetic: Option<ArithmeticRevisions>,
    /// The CPU kernel settings the release was scored under, where they differ from this run's
    /// (absent where they agree, or for a GPU run or another backend).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_pins: Option<KernelPins>,
    /// "reused" (a given cache) or "rerun" (a fresh cache).
    pub inference: String,
    pub files: Vec<FileComparison>,
    pub drift: Option<Drift>,
    pub class_changes: Vec<ClassChange>,
    pub pass: bool,
    pub reasons: Vec<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ArithmeticRevisions {
    pub locked: Option<String>,
    pub now: String,
}

impl ArithmeticRevisions {
    /// From a lock's scorer: the native engine's records its device (`cpu`, `cuda`).
    pub fn of(scorer: &serde_json::Value) -> Option<ArithmeticRevisions> {
        let preprocessing = &scorer["preprocessing"];
        let device = preprocessing["device"].as_str()?;
        let locked = preprocessing["scoring"]["arithmetic"].as_str().map(str::to_string);
        Some(ArithmeticRevisions { locked, now: bpals_vlm::arithmetic::revision(device == "cuda") })
    }

    fn differ(&self) -> bool {
        self.locked.as_deref() != Some(self.now.as_str())
    }

    /// What a reader is told where the two differ.
    fn explain(&self) -> String {
        let locked = match &self.locked {
            Some(locked) => format!("the release was scored by the engine's arithmetic {locked}"),
            None => "the release was scored before the engine recorded its arithmetic".to_string(),
        };
        format!("{locked}; this tool's is {}: the logits may differ in their last bits, which the logit tolerance judges", self.now)
    }
}

/// The CPU kernel settings (`bpals_vlm::cpu_kernels`) a release's scorer recorded and this process's,
/// where they differ: each `VARIABLE=value` ("unset" where it was), and how to repeat the
/// release's.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct KernelPins {
    pub locked: Vec<String>,
    pub now: Vec<String>,
    /// The command's environment that repeats the release's settings (`MKL_CBWR=AUTO`).
    pub repeat: String,
}

impl KernelPins {
    /// From a lock's scorer, against `now` (`cpu_kernels::identity()` of this process).
    pub fn of(scorer: &serde_json::Value, now: &serde_json::Value) -> Option<KernelPins> {
        use bpals_vlm::cpu_kernels::shown;
        let locked = scorer["preprocessing"]["cpu_kernels"].as_object()?;
        let mut pins = KernelPins { locked: Vec::new(), now: Vec::new(), repeat: String::new() };
        let mut repeat = Vec::new();
        for (variable, value) in locked {
            let current = &now[variable.as_str()];
            if value != current {
                pins.locked.push(shown(variable, value.as_str()));
                pins.now.push(shown(variable, current.as_str()));
                // `env` repeats a value as it is shown, and an unset variable with -u.
                repeat.push(if value.is_string() { shown(variable, value.as_str()) } else { format!("-u {variable}") });
            }
        }
        pins.repeat = format!("env {}", repeat.join(" "));
        (!pins.locked.is_empty()).then_some(pins)
    }

    /// What a reader is told.
    fn explain(&self) -> String {
        format!(
            "the release was scored under CPU kernels {}; this run's are {}: its scores will differ in their last bits. Repeat \
             the release's with `{} bpals-release rebuild ... --audit`",
            self.locked.join(", "),
            self.now.join(", "),
            self.repeat
        )
    }
}

pub fn rebuild_audit(dir: &Path, options: &RebuildOptions, log: &dyn Fn(&str)) -> Result<AuditReport, AuditError> {
    let lock = BuildLock::read(dir)?;
    let original_manifest = manifest::Manifest::read(dir)?;
    let spec_path = options.spec.clone().unwrap_or_else(|| Path::new("specs").join(&lock.spec_file));
    if !spec_path.is_file() {
        return Err(AuditError::SpecNotFound { spec_file: lock.spec_file.clone(), looked: spec_path });
    }
    let mut spec = crate::inputs::load(&spec_path)?;
    // The images a pass the release was scored with (a build may set them on the command line):
    // the pass's shapes shape the last bits, so the rebuild repeats them.
    // A lock is the release's word, not ours: a pass size no build makes is a FAIL, never a
    // pass of that many images.
    let per_pass = |scorer: Option<&serde_json::Value>| -> Result<Option<usize>, AuditError> {
        let Some(value) = scorer.map(|s| &s["preprocessing"]["scoring"]["images_per_pass"]).filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let refuse = |problem: String| AuditError::Lock { what: "images_per_pass", value: value.to_string(), problem };
        let n = value.as_u64().ok_or_else(|| refuse("not a whole number".into()))?;
        let n = usize::try_from(n).map_err(|_| refuse("too large".into()))?;
        match crate::release_spec::images_per_pass_problem(n) {
            Some(problem) => Err(refuse(problem)),
            None => Ok(Some(n)),
        }
    };
    spec.repeat_images_per_pass(per_pass(Some(&lock.scorer))?, per_pass(lock.second_scorer.as_ref())?);
    let now = spec.to_json();
    let mut spec_differences = Vec::new();
    json_differences("", &lock.spec, &now, &mut spec_differences);
    let tool_now = manifest::ToolInfo::current();
    let mut report = AuditReport {
        release_id: original_manifest.release_id.clone(),
        original: dir.to_path_buf(),
        rebuilt: PathBuf::new(),
        spec: spec_path.clone(),
        spec_differences,
        tool_locked: format!("{} {} ({})", lock.tool.name, lock.tool.version, lock.tool.commit),
        tool_now: format!("{} {} ({})", tool_now.name, tool_now.version, tool_now.commit),
        arithmetic: ArithmeticRevisions::of(&lock.scorer),
        kernel_pins: KernelPins::of(&lock.scorer, &bpals_vlm::cpu_kernels::identity()),
        inference: if options.cache_dir.is_some() { "reused".into() } else { "rerun".into() },
        files: Vec::new(),
        drift: None,
        class_changes: Vec::new(),
        pass: false,
        reasons: Vec::new(),
    };
    if !report.spec_differences.is_empty() {
        report.reasons.push(format!(
            "{} resolves to a different spec than the lock records ({} differences): the release cannot be rebuilt from it",
            spec_path.display(),
            report.spec_differences.len()
        ));
        return Ok(report);
    }

    if let Some(arithmetic) = report.arithmetic.as_ref().filter(|a| a.differ()) {
        log(&arithmetic.explain());
    }
    if let Some(pins) = &report.kernel_pins {
        log(&pins.explain());
    }
    let scratch = match &options.scratch {
        Some(s) => s.clone(),
        None => std::env::temp_dir().join(format!("bpals-audit-{}-{}", original_manifest.release_id, std::process::id())),
    };
    let rebuilt = scratch.join("release");
    let cache_dir = options.cache_dir.clone().unwrap_or_else(|| scratch.join("cache")).into();
    log(&format!("rebuilding {} from {} into {}", original_manifest.release_id, spec_path.display(), rebuilt.display()));
    let build_options = BuildOptions {
        out: rebuilt.clone(),
        jobs: options.jobs,
        cache_dir,
        publishable: false,
        progress: options.progress,
        offline: options.offline,
        // A rebuild is compared with the release, not published: the signature files are not
        // part of what it reproduces.
        signer: None,
        // An audit trusts no cache of the machine it runs on.
        verify_cache: true,
    };
    pipeline::build(&spec, &build_options, &|line| log(&format!("  {line}")))?;
    report.rebuilt = rebuilt.clone();

    report.files = compare_trees(dir, &rebuilt)?;
    let (original_rows, rebuilt_rows) = (read_release_rows(dir)?, read_release_rows(&rebuilt)?);
    let (drift, changes) = score_drift(&original_rows.1, &rebuilt_rows.1, spec.audit.logit_tolerance);
    report.class_changes = changes;
    judge(&mut report, &drift);
    report.drift = Some(drift);
    if report.pass && options.scratch.is_none() {
        let _ = std::fs::remove_dir_all(&scratch);
        report.rebuilt = PathBuf::from("(removed: the audit passed)");
    }
    Ok(report)
}

fn judge(report: &mut AuditReport, drift: &Drift) {
    let mut reasons = Vec::new();
    for f in &report.files {
        match f.status {
            FileStatus::Identical => {}
            FileStatus::Missing => reasons.push(format!("{}: in the release, not produced by the rebuild", f.path)),
            FileStatus::Extra => reasons.push(format!("{}: produced by the rebuild, not in the release", f.path)),
            // The lock records the scorer's kernel settings: under others it differs for that.
            FileStatus::Differs if f.path == LOCK_FILE && report.kernel_pins.is_some() => {
                let pins = report.kernel_pins.as_ref().expect("checked");
                reasons.push(format!("{}: differs: {}", f.path, pins.explain()))
            }
            FileStatus::Differs if f.score_free => reasons.push(format!("{}: differs, and it does not depend on scores", f.path)),
            FileStatus::Differs if drift.max_any() == 0.0 => {
                reasons.push(format!("{}: differs although every raw score is identical", f.path))
            }
            FileStatus::Differs => {}
        }
    }
    if drift.max_abs > drift.tolerance {
        let whose = if drift.second.is_some() { "the primary model's" } else { "" };
        let text = format!("{whose} raw logits drift by up to {:.3e}, above the tolerance {:.3e}", drift.max_abs, drift.tolerance);
        reasons.push(text.trim_start().to_string());
    }
    if let Some(second) = drift.second.as_ref().filter(|s| s.max_abs > drift.tolerance) {
        reasons.push(format!(
            "the second model's raw logits drift by up to {:.3e}, above the tolerance {:.3e}",
            second.max_abs, drift.tolerance
        ));
    }
    if !report.class_changes.is_empty() {
        reasons.push(format!("{} rows changed trust class", report.class_changes.len()));
    }
    if drift.unmatched_rows > 0 {
        reasons.push(format!("{} rows exist in only one of the two releases", drift.unmatched_rows));
    }
    report.pass = reasons.is_empty();
    report.reasons = reasons;
}

/// Every file of both trees, manifest.json included, compared byte for byte. The signature files
/// are the publisher's, not the build's: `verify --public-key` checks them.
fn compare_trees(original: &Path, rebuilt: &Path) -> Result<Vec<FileComparison>, manifest::ManifestError> {
    let list = |dir: &Path| {
        manifest::list_files(dir)
            .map(|files| files.into_iter().filter(|p| !manifest::is_signature_file(p)).collect::<Vec<_>>())
            .map_err(|source| manifest::ManifestError::List { dir: dir.to_path_buf(), source })
    };
    let (a, b) = (list(original)?, list(rebuilt)?);
    let mut paths: Vec<&String> = a.iter().chain(&b).collect();
    paths.sort();
    paths.dedup();
    let mut files = Vec::new();
    for path in paths {
        let status = match (a.contains(path), b.contains(path)) {
            (true, false) => FileStatus::Missing,
            (false, true) => FileStatus::Extra,
            _ => {
                let read = |dir: &Path| {
                    let file = dir.join(path);
                    std::fs::read(&file).map_err(|source| manifest::ManifestError::Read { path: file, source })
                };
                if read(original)? == read(rebuilt)? {
                    FileStatus::Identical
                } else {
                    FileStatus::Differs
                }
            }
        };
        files.push(FileComparison { path: path.clone(), status, score_free: SCORE_FREE.contains(&path.as_str()) });
    }
    Ok(files)
}

/// Logit drift and trust-class changes between two releases' pair rows, joined on (image, label).
pub fn score_drift(original: &[ReleaseRow], rebuilt: &[ReleaseRow], tolerance: f64) -> (Drift, Vec<ClassChange>) {
    let by_key: BTreeMap<(&str, &str), &ReleaseRow> = rebuilt.iter().map(|r| ((r.image_index.as_str(), r.label.as_str()), r)).collect();
    let (mut primary, mut primary_sum) = (ModelDrift::default(), 0f64);
    let (mut second, mut second_sum, mut two_models) = (ModelDrift::default(), 0f64, false);
    let (mut rows, mut unmatched) = (0usize, 0usize);
    let mut changes = Vec::new();
    for a in original {
        let Some(b) = by_key.get(&(a.image_index.as_str(), a.label.as_str())) else {
            unmatched += 1;
            continue;
        };
        rows += 1;
        if !primary.add(&mut primary_sum, (&a.logit_yes, &a.logit_no), (&b.logit_yes, &b.logit_no)) {
            unmatched += 1;
            continue;
        }
        match (&a.families, &b.families) {
            (Some(x), Some(y)) => {
                two_models = true;
                if !second.add(&mut second_sum, (&x.second_logit_yes, &x.second_logit_no), (&y.second_logit_yes, &y.second_logit_no)) {
                    unmatched += 1;
                }
            }
            (None, None) => {}
            _ => unmatched += 1,
        }
        if a.trust_class != b.trust_class {
            changes.push(ClassChange {
                image_index: a.image_index.clone(),
                label: a.label.clone(),
                was: a.trust_class.clone(),
                now: b.trust_class.clone(),
                confidence_was: a.confidence,
                confidence_now: b.confidence,
            });
        }
    }
    unmatched += rebuilt.len().saturating_sub(rows);
    let primary = primary.finish(primary_sum);
    let drift = Drift {
        rows_compared: rows,
        logits_compared: primary.logits_compared,
        max_abs: primary.max_abs,
        mean_abs: primary.mean_abs,
        tolerance,
        unmatched_rows: unmatched,
        second: two_models.then(|| second.finish(second_sum)),
    };
    (drift, changes)
}

/// Dotted paths where two JSON values differ, leaves only, at most 50.
fn json_differences(path: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    if out.len() >= 50 || a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let child = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                json_differences(&child, x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null), out);
            }
        }
        _ => out.push(if path.is_empty() { "(the whole spec)".into() } else { path.to_string() }),
    }
}

/// The report as a person reads it.
impl std::fmt::Display for AuditReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = format!("audit of release {} in {}\n", self.release_id, self.original.display());
        out.push_str(&format!("  spec: {}\n", self.spec.display()));
        for d in &self.spec_differences {
            out.push_str(&format!("    differs from the lock: {d}\n"));
        }
        out.push_str(&format!("  tool: locked {}; now {}\n", self.tool_locked, self.tool_now));
        if let Some(arithmetic) = self.arithmetic.as_ref().filter(|a| a.differ()) {
            out.push_str(&format!("  {}\n", arithmetic.explain()));
        }
        if let Some(pins) = &self.kernel_pins {
            out.push_str(&format!("  {}\n", pins.explain()));
        }
        if !self.files.is_empty() {
            out.push_str(&format!(
                "  inference: {}\n  rebuilt into: {}\n",
                if self.inference == "rerun" { "rerun in a fresh cache" } else { "scores reused from the given cache" },
                self.rebuilt.display()
            ));
            let identical = self.files.iter().filter(|f| f.status == FileStatus::Identical).count();
            out.push_str(&format!("  files: {identical} of {} identical\n", self.files.len()));
            for file in self.files.iter().filter(|f| f.status != FileStatus::Identical) {
                let status = match file.status {
                    FileStatus::Differs => "differs",
                    FileStatus::Missing => "missing from the rebuild",
                    FileStatus::Extra => "only in the rebuild",
                    FileStatus::Identical => unreachable!(),
                };
                out.push_str(&format!("    {status}: {}\n", file.path));
            }
        }
        if let Some(d) = &self.drift {
            out.push_str(&format!(
                "  raw logits: {} rows, {} logits compared; max |diff| {:.3e}, mean |diff| {:.3e} (tolerance {:.3e})\n",
                d.rows_compared, d.logits_compared, d.max_abs, d.mean_abs, d.tolerance
            ));
            if let Some(s) = &d.second {
                out.push_str(&format!(
                    "  the second model's raw logits: {} compared; max |diff| {:.3e}, mean |diff| {:.3e} (tolerance {:.3e})\n",
                    s.logits_compared, s.max_abs, s.mean_abs, d.tolerance
                ));
            }
        }
        if !self.class_changes.is_empty() {
            out.push_str(&format!("  trust class changed on {} rows:\n", self.class_changes.len()));
            for c in &self.class_changes {
                out.push_str(&format!(
                    "    {} {}: {} -> {} (confidence {:.4} -> {:.4})\n",
                    c.image_index, c.label, c.was, c.now, c.confidence_was, c.confidence_now
                ));
            }
        }
        if self.pass {
            let drifted = self.drift.as_ref().is_some_and(|d| d.max_any() > 0.0);
            out.push_str(if drifted {
                "PASS: deterministic files identical; scores drift within tolerance and no row changed class\n"
            } else {
                "PASS: every file is identical, byte for byte\n"
            });
        } else {
            out.push_str("FAIL:\n");
            for r in &self.reasons {
                out.push_str(&format!("  - {r}\n"));
            }
        }
        f.write_str(&out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::FamilyViews;

    fn row(primary: f32, second: f32) -> ReleaseRow {
        ReleaseRow {
            image_index: "00000001_000.png".into(),
            label: "Effusion".into(),
            nih_label: true,
            confidence: 0.9,
            agreement: 0.9,
            view_position: "PA".into(),
            devices_present: false,
            trust_class: "trusted".into(),
            flags: Vec::new(),
            logit_yes: vec![primary, 1.0],
            logit_no: vec![0.0, 0.0],
            families: Some(FamilyViews {
                primary_confidence: 0.9,
                primary_trust_class: "trusted".into(),
                second_confidence: 0.9,
                second_trust_class: "trusted".into(),
                second_logit_yes: vec![second, 1.0],
                second_logit_no: vec![0.0, 0.0],
            }),
            confident: None,
        }
    }

    /// A report of release s1a before `judge`: nothing compared, nothing said.
    fn unjudged() -> AuditReport {
        AuditReport {
            release_id: "s1a".into(),
            original: "a".into(),
            rebuilt: "b".into(),
            spec: "s.yaml".into(),
            spec_differences: Vec::new(),
            tool_locked: String::new(),
            tool_now: String::new(),
            arithmetic: None,
            kernel_pins: None,
            inference: "rerun".into(),
            files: Vec::new(),
            drift: None,
            class_changes: Vec::new(),
            pass: true,
            reasons: Vec::new(),
        }
    }

    /// A two-model release whose second model's scores moved: the primary's logits are equal,
    /// and the audit still sees the drift and names the second model (it used to say max 0).
    #[test]
    fn the_second_models_logits_are_compared_too() {
        let (drift, changes) = score_drift(&[row(2.0, 3.0)], &[row(2.0, 3.5)], 1e-3);
        assert!(changes.is_empty());
        assert_eq!(drift.max_abs, 0.0);
        let second = drift.second.as_ref().expect("a two-model release");
        assert_eq!((second.logits_compared, second.max_abs), (4, 0.5));
        let mut report = AuditReport { class_changes: changes, ..unjudged() };
        judge(&mut report, &drift);
        assert!(!report.pass);
        assert_eq!(report.reasons, ["the second model's raw logits drift by up to 5.000e-1, above the tolerance 1.000e-3"]);
        // A one-model release's drift says nothing of a second model.
        let one = |r: ReleaseRow| ReleaseRow { families: None, ..r };
        assert!(score_drift(&[one(row(2.0, 3.0))], &[one(row(2.0, 3.5))], 1e-3).0.second.is_none());
    }

    /// A lock scored under `MKL_CBWR=AUTO`, audited under the pins: the setting is named on both
    /// sides with the command that repeats it, and build.lock's difference says so (it used to
    /// say the lock "does not depend on scores"). A lock under the pins, or without CPU kernels
    /// (a GPU run, another backend), names nothing.
    #[test]
    fn kernel_pins_that_differ_are_named_with_how_to_repeat_them() {
        let pinned = serde_json::json!({"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2"});
        let scorer = |kernels: serde_json::Value| serde_json::json!({"preprocessing": {"device": "cpu", "cpu_kernels": kernels}});
        assert_eq!(KernelPins::of(&scorer(pinned.clone()), &pinned), None);
        assert_eq!(KernelPins::of(&serde_json::json!({"preprocessing": {"device": "cuda"}}), &pinned), None);
        let mut auto = pinned.clone();
        auto["MKL_CBWR"] = "AUTO".into();
        let pins = KernelPins::of(&scorer(auto), &pinned).unwrap();
        assert_eq!(
            (pins.locked.as_slice(), pins.now.as_slice()),
            (&["MKL_CBWR=AUTO".to_string()][..], &["MKL_CBWR=COMPATIBLE".to_string()][..])
        );
        assert_eq!(pins.repeat, "env MKL_CBWR=AUTO");
        let files = vec![FileComparison { path: LOCK_FILE.into(), status: FileStatus::Differs, score_free: true }];
        let mut report = AuditReport { kernel_pins: Some(pins), files, ..unjudged() };
        let (drift, _) = score_drift(&[row(2.0, 3.0)], &[row(2.0, 3.0)], 1e-3);
        judge(&mut report, &drift);
        assert_eq!(report.reasons.len(), 1, "{:?}", report.reasons);
        assert!(report.reasons[0].contains("MKL_CBWR=AUTO") && report.reasons[0].contains("`env MKL_CBWR=AUTO bpals-release rebuild"));
        assert!(!report.reasons[0].contains("does not depend on scores"));
    }

    /// A native scorer's lock names its arithmetic; an older lock's absence is told apart from
    /// another backend's.
    #[test]
    fn the_arithmetic_revisions_come_from_the_locks_scorer() {
        let now = bpals_vlm::arithmetic::revision(false);
        let same = serde_json::json!({"preprocessing": {"device": "cpu", "scoring": {"arithmetic": now}}});
        let a = ArithmeticRevisions::of(&same).unwrap();
        assert!(!a.differ());
        let older = serde_json::json!({"preprocessing": {"device": "cpu", "scoring": {"prefix": "shared"}}});
        let b = ArithmeticRevisions::of(&older).unwrap();
        assert!(b.differ() && b.explain().contains("before the engine recorded its arithmetic"), "{}", b.explain());
        let gpu = serde_json::json!({"preprocessing": {"device": "cuda", "scoring": {"arithmetic": "cuda-0"}}});
        assert_eq!(ArithmeticRevisions::of(&gpu).unwrap().now, bpals_vlm::arithmetic::revision(true));
        assert!(ArithmeticRevisions::of(&serde_json::json!({"preprocessing": {"model": "served"}})).is_none());
    }
}
