//! The files a release spec names, read and checked: the embedded sample's pins, the model
//! directory (or its snapshot in the Hugging Face cache), the calibration table, the joint rule
//! and the gold labels.
//!
//! The spec ([`crate::release_spec`]) is plain data; this is the first stage that looks at what
//! it points to. Its errors still name the spec file, line and key that named the file.

mod lock_json;

use std::collections::BTreeMap;
use std::ops::Deref;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::eval::{GoldError, GoldSet};
use crate::hashing::sha256_hex;
use crate::release_spec::{self, Backend, EvaluationSpec, GoldFormat, KeyLocation, ReleaseSpec, SpecError};
use crate::signal::calibration::{Calibration, CalibrationError};
use crate::signal::joint_rule::{JointRule, JointRuleError, SecondView};

/// A release spec with the files it names read: what every stage after it works from.
///
/// It dereferences to the [`ReleaseSpec`], whose sections the stages read directly.
#[derive(Debug, Clone)]
pub struct ResolvedSpec {
    spec: ReleaseSpec,
    /// The table `signal.calibration` names, if any.
    pub calibration: Option<CalibrationRef>,
    /// The joint rule `signal.joint_rule` names, if any.
    pub joint_rule: Option<JointRuleRef>,
    /// The gold labels `evaluation.gold` names, if any. (Not `evaluation`: that is the spec's
    /// own section, which this struct dereferences to.)
    pub gold: Option<Evaluation>,
    /// The curated image list `selection.images` names, read when the source is real NIH data
    /// (the embedded sample takes the seeded sample).
    pub curated: Option<Vec<String>>,
    /// The public key `publish.public_key` names, if any.
    pub publisher_key: Option<PublisherKey>,
}

/// The publisher's public key named by the spec: the release carries it as
/// `publisher-key.pub.pem`, build.lock and the card its fingerprint.
#[derive(Debug, Clone, Serialize)]
pub struct PublisherKey {
    /// The path as the spec wrote it.
    pub file: String,
    pub fingerprint: String,
    pub curve: &'static str,
    #[serde(skip)]
    pub pem: String,
}

impl Deref for ResolvedSpec {
    type Target = ReleaseSpec;
    fn deref(&self) -> &ReleaseSpec {
        &self.spec
    }
}

/// A calibration file named by the spec. Its content and digest are part of the resolved spec,
/// so the spec hash and build.lock change whenever the calibration does.
#[derive(Debug, Clone, Serialize)]
pub struct CalibrationRef {
    /// The path as the spec wrote it.
    pub file: String,
    pub sha256: String,
    pub table: Calibration,
}

/// A joint rule named by the spec; like the calibration table, its content and digest are part
/// of the resolved spec.
#[derive(Debug, Clone, Serialize)]
pub struct JointRuleRef {
    /// The path as the spec wrote it.
    pub file: String,
    pub sha256: String,
    pub rule: JointRule,
}

/// A gold file the build evaluates against; its digest is part of the resolved spec.
#[derive(Debug, Clone, Serialize)]
pub struct Evaluation {
    /// The path as the spec wrote it.
    pub gold_file: String,
    pub format: GoldFormat,
    /// What the gold is, as the card names it.
    pub against: String,
    pub sha256: String,
    #[serde(skip)]
    pub gold: GoldSet,
    /// The review plan whose answers the gold holds (`evaluation.review_plan`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub review_plan: Option<ReviewPlanRef>,
}

/// A review plan the spec names, read and digested.
#[derive(Debug, Clone, Serialize)]
pub struct ReviewPlanRef {
    /// The path as the spec wrote it.
    pub file: String,
    pub sha256: String,
    #[serde(skip)]
    pub plan: crate::review::ReviewPlan,
}

#[derive(Debug, thiserror::Error)]
pub enum InputsError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error("{at}: cannot read {}", path.display())]
    Read {
        at: KeyLocation,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{at}: cannot use the calibration file")]
    Calibration {
        at: KeyLocation,
        #[source]
        source: CalibrationError,
    },
    #[error("{at}: cannot use the joint rule")]
    JointRule {
        at: KeyLocation,
        #[source]
        source: JointRuleError,
    },
    #[error("{at}: {}: {message}", path.display())]
    Invalid { at: KeyLocation, path: PathBuf, message: String },
    #[error("{at}: {} is not a sample marker", path.display())]
    SampleMarker {
        at: KeyLocation,
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{at}: cannot use the review plan")]
    ReviewPlan {
        at: KeyLocation,
        #[source]
        source: Box<crate::review::ReviewError>,
    },
    #[error("{at}: cannot use the gold labels")]
    Gold {
        at: KeyLocation,
        #[source]
        source: GoldError,
    },
    #[error("{at}: {message}")]
    Option { at: KeyLocation, message: String },
    /// A command-line value wrong whatever the spec says: the flag names itself.
    #[error("{0}")]
    Flag(String),
    #[error("{at}: {} is not a directory (expected a Hugging Face model directory)", dir.display())]
    ModelDir { at: KeyLocation, dir: PathBuf },
}

/// Loads a spec and reads the files it names: what the commands that build call.
pub fn load(path: &Path) -> Result<ResolvedSpec, InputsError> {
    resolve(release_spec::load(path)?)
}

/// Reads the files `spec` names. Nothing is fetched: a Hub model missing from the Hugging Face
/// cache keeps `model.dir` empty, and the build fetches it (`infer::locate_model`).
pub fn resolve(mut spec: ReleaseSpec) -> Result<ResolvedSpec, InputsError> {
    let marker_path = spec.source.root.join("sample.json");
    let mut sample_truth = None;
    if marker_path.is_file() {
        spec.source.embedded_sample = true;
        let marker = read_sample_marker(&spec, &marker_path)?;
        for (name, digest) in marker.sha256 {
            spec.source.expected_sha256.entry(name).or_insert(digest);
        }
        sample_truth = marker.truth;
    }
    locate_local_model(&mut spec)?;
    let calibration = spec.signal.calibration.as_deref().map(|file| read_calibration(&spec, file)).transpose()?;
    let joint_rule = spec.signal.joint_rule.as_deref().map(|file| read_joint_rule(&spec, file)).transpose()?;
    let gold = match (&spec.evaluation, sample_truth) {
        (Some(e), _) => Some(read_gold(&spec, e)?),
        (None, Some(truth)) => Some(read_sample_truth(&spec, &truth)?),
        (None, None) => None,
    };
    let curated = match &spec.selection.images {
        Some(list) if !spec.source.embedded_sample => Some(read_image_list(&spec, &list.file, &list.sha256)?),
        _ => None,
    };
    let publisher_key = spec.publish.public_key.as_deref().map(|file| read_publisher_key(&spec, file)).transpose()?;
    Ok(ResolvedSpec { spec, calibration, joint_rule, gold, curated, publisher_key })
}

fn read_publisher_key(spec: &ReleaseSpec, file: &str) -> Result<PublisherKey, InputsError> {
    let key = "publish.public_key";
    let path = spec.base_dir(key).join(file);
    let text = crate::files::regular::read_to_string(&path, crate::files::regular::SIGNATURE).map_err(|source| InputsError::Read {
        at: spec.locate(key),
        path: path.clone(),
        source,
    })?;
    let public =
        crate::signing::PublicKey::from_pem(&text).map_err(|message| InputsError::Invalid { at: spec.locate(key), path, message })?;
    Ok(PublisherKey { file: file.to_string(), fingerprint: public.fingerprint(), curve: public.curve().name(), pem: public.to_pem() })
}

/// Reads the curated list `selection.images` names: its sha256 must be the pinned one, then one
/// image name per line (`#` comments and blank lines aside), each once.
fn read_image_list(spec: &ReleaseSpec, file: &str, pinned: &str) -> Result<Vec<String>, InputsError> {
    let key = "selection.images";
    let path = spec.base_dir(key).join(file);
    let bytes = crate::files::regular::read(&path, crate::files::regular::TABLE).map_err(|source| InputsError::Read {
        at: spec.locate(key),
        path: path.clone(),
        source,
    })?;
    let invalid = |message: String| InputsError::Invalid { at: spec.locate(key), path: path.clone(), message };
    let actual = sha256_hex(&bytes);
    if actual != pinned {
        return Err(invalid(format!("sha256 mismatch: selection.images_sha256 pins {pinned}, the file has {actual}")));
    }
    let text = String::from_utf8(bytes).map_err(|_| invalid("not UTF-8 text".into()))?;
    let mut seen = std::collections::HashMap::new();
    let mut images = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let name = line.trim();
        if name.is_empty() || name.starts_with('#') {
            continue;
        }
        if !name.ends_with(".png") || name.contains(['/', '\\', ' ']) {
            return Err(invalid(format!("line {}: {name:?} is not an NIH image name (expected like 00000001_000.png)", i + 1)));
        }
        if let Some(first) = seen.insert(name.to_string(), i + 1) {
            return Err(invalid(format!("line {}: {name} is already on line {first}", i + 1)));
        }
        images.push(name.to_string());
    }
    Ok(images)
}

impl ResolvedSpec {
    /// `--concurrency`: how many requests a served model gets at once (not part of the spec's hash).
    pub fn set_request_concurrency(&mut self, n: usize) -> Result<(), InputsError> {
        let at = self.spec.locate("model.backend");
        match &mut self.spec.model.served {
            Some(served) if n > 0 => {
                served.concurrency = n;
                Ok(())
            }
            Some(_) => Err(InputsError::Option { at, message: "--concurrency must be at least 1".into() }),
            None => Err(InputsError::Option { at, message: "--concurrency is for model.backend openai only".into() }),
        }
    }

    /// `--images-per-pass N`: the images a pass of every native model the spec names (the model
    /// and a second opinion), over their `images_per_pass` keys.
    pub fn set_images_per_pass(&mut self, n: usize) -> Result<(), InputsError> {
        if let Some(problem) = crate::release_spec::images_per_pass_problem(n) {
            return Err(InputsError::Flag(format!("--images-per-pass {problem}")));
        }
        let second = self.spec.second_opinion.as_mut().filter(|s| s.backend.is_native());
        let primary = self.spec.model.backend.is_native();
        if !primary && second.is_none() {
            let at = self.spec.locate("model.backend");
            return Err(InputsError::Option {
                at,
                message: "--images-per-pass is for the native engine; no model of this spec is native".into(),
            });
        }
        if let Some(second) = second {
            second.images_per_pass = n;
        }
        if primary {
            self.spec.model.images_per_pass = n;
        }
        Ok(())
    }

    /// The images a pass each native model was scored with, where a lock records them: a
    /// rebuild repeats them.
    pub fn repeat_images_per_pass(&mut self, model: Option<usize>, second_opinion: Option<usize>) {
        if let Some(n) = model {
            self.spec.model.images_per_pass = n;
        }
        if let (Some(second), Some(n)) = (self.spec.second_opinion.as_mut(), second_opinion) {
            second.images_per_pass = n;
        }
    }

    /// The calibration table, if the spec names one.
    pub fn calibration_table(&self) -> Option<&Calibration> {
        self.calibration.as_ref().map(|c| &c.table)
    }

    /// The joint rule `signal.joint_rule` names, if any.
    pub fn joint_rule_table(&self) -> Option<&JointRule> {
        self.joint_rule.as_ref().map(|r| &r.rule)
    }

    /// The joint rule, where it combines the release's `confidence` with `second_view`.
    pub fn joint_rule_of(&self, second_view: SecondView) -> Option<&JointRuleRef> {
        self.joint_rule.as_ref().filter(|r| r.rule.second_view == second_view)
    }
}

/// The model directory a spec names (`model.path`) must exist; a Hub model is looked up in the
/// Hugging Face cache, which is read but never written here.
fn locate_local_model(spec: &mut ReleaseSpec) -> Result<(), InputsError> {
    let at = spec.locate("model.path");
    locate_one(&mut spec.model, at)?;
    let at = spec.locate("second_opinion.path");
    if let Some(second) = spec.second_opinion.as_mut() {
        locate_one(second, at)?;
    }
    Ok(())
}

/// One model of the spec (`model` or `second_opinion`, whose `path` is at `at`).
fn locate_one(model: &mut crate::release_spec::ModelSpec, at: crate::release_spec::KeyLocation) -> Result<(), InputsError> {
    if model.backend == Backend::Fixture {
        return Ok(());
    }
    match &model.dir {
        Some(dir) if !dir.is_dir() => Err(InputsError::ModelDir { at, dir: dir.clone() }),
        Some(_) => Ok(()),
        None => {
            let cache = crate::hub::model::cache_dir();
            if let Some(snapshot) = crate::hub::model::cached_snapshot(&cache, &model.id, &model.revision) {
                model.dir = Some(snapshot.dir);
                model.commit = Some(snapshot.commit);
            }
            Ok(())
        }
    }
}

/// Reads the gold file named by `evaluation.gold`, relative to the spec that names it.
fn read_gold(spec: &ReleaseSpec, e: &EvaluationSpec) -> Result<Evaluation, InputsError> {
    let key = "evaluation.gold";
    let path = spec.base_dir(key).join(&e.gold_file);
    read_evaluation(spec, key, &path, e.clone())
}

/// What the embedded sample draws (its marker's `truth`): a build on the sample evaluates
/// against it unless the spec names gold labels of its own.
fn read_sample_truth(spec: &ReleaseSpec, file: &str) -> Result<Evaluation, InputsError> {
    let path = spec.source.root.join(file);
    let truth =
        EvaluationSpec { gold_file: file.to_string(), format: GoldFormat::Generic, against: SAMPLE_TRUTH.to_string(), review_plan: None };
    read_evaluation(spec, "source.root", &path, truth)
}

/// Reads and digests the gold file at `path`, which `key` of the spec names; errors point there.
fn read_evaluation(spec: &ReleaseSpec, key: &str, path: &Path, e: EvaluationSpec) -> Result<Evaluation, InputsError> {
    let bytes = crate::files::regular::read(path, crate::files::regular::TABLE).map_err(|source| InputsError::Read {
        at: spec.locate(key),
        path: path.to_path_buf(),
        source,
    })?;
    let gold = crate::eval::gold::read(path, e.format).map_err(|source| InputsError::Gold { at: spec.locate(key), source })?;
    let review_plan = match &e.review_plan {
        None => None,
        Some(file) => {
            let key = "evaluation.review_plan";
            let path = spec.base_dir(key).join(file);
            let (plan, sha256) = crate::review::ReviewPlan::read(&path)
                .map_err(|source| InputsError::ReviewPlan { at: spec.locate(key), source: Box::new(source) })?;
            Some(ReviewPlanRef { file: file.clone(), sha256, plan })
        }
    };
    Ok(Evaluation { gold_file: e.gold_file, format: e.format, against: e.against, sha256: sha256_hex(&bytes), gold, review_plan })
}

/// How a card names the embedded sample's truth.
pub const SAMPLE_TRUTH: &str = "the synthetic sample's planted truth";

/// Reads a calibration file written by `bpals-release calibrate`, relative to the spec that names it.
fn read_calibration(spec: &ReleaseSpec, file: &str) -> Result<CalibrationRef, InputsError> {
    let key = "signal.calibration";
    let path = spec.base_dir(key).join(file);
    let (table, bytes) = Calibration::read_with_bytes(&path).map_err(|source| InputsError::Calibration { at: spec.locate(key), source })?;
    Ok(CalibrationRef { file: file.to_string(), sha256: sha256_hex(&bytes), table })
}

fn read_joint_rule(spec: &ReleaseSpec, file: &str) -> Result<JointRuleRef, InputsError> {
    let key = "signal.joint_rule";
    let path = spec.base_dir(key).join(file);
    let (rule, bytes) = JointRule::read_with_bytes(&path).map_err(|source| InputsError::JointRule { at: spec.locate(key), source })?;
    let invalid = |message: &str| InputsError::Invalid { at: spec.locate(key), path: path.clone(), message: message.to_string() };
    match rule.second_view {
        SecondView::Family if spec.second_opinion.is_none() => {
            return Err(invalid("combines two families (fitted on a two-family release), but the spec asks no second_opinion"))
        }
        SecondView::ConfidentLearning if spec.signal.confident_learning.is_none() => {
            return Err(invalid("combines the answers with confident learning, but the spec does not name signal.confident_learning"))
        }
        _ => {}
    }
    Ok(JointRuleRef { file: file.to_string(), sha256: sha256_hex(&bytes), rule })
}

/// The embedded sample's marker, `sample.json`.
#[derive(serde::Deserialize)]
struct SampleMarker {
    embedded_sample: bool,
    /// Pins of the metadata files.
    sha256: BTreeMap<String, String>,
    /// The file of what each image draws (`truth.csv`), when the sample has one.
    #[serde(default)]
    truth: Option<String>,
}

/// Reads the embedded sample's marker: `{"embedded_sample": true, "sha256": {file: digest}, "truth": file}`.
fn read_sample_marker(spec: &ReleaseSpec, path: &Path) -> Result<SampleMarker, InputsError> {
    let key = "source.root";
    let invalid = |message: String| InputsError::Invalid { at: spec.locate(key), path: path.to_path_buf(), message };
    let text = crate::files::regular::read_to_string(path, crate::files::regular::RELEASE_JSON).map_err(|source| InputsError::Read {
        at: spec.locate(key),
        path: path.to_path_buf(),
        source,
    })?;
    let marker: SampleMarker = serde_json::from_str(&text).map_err(|source| InputsError::SampleMarker {
        at: spec.locate(key),
        path: path.to_path_buf(),
        source,
    })?;
    if !marker.embedded_sample {
        return Err(invalid("`embedded_sample` must be true".into()));
    }
    Ok(marker)
}
