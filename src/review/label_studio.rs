//! Label Studio (tested with 1.23.2): the tasks `review export` writes for its JSON import, the
//! labeling configuration that shows them, and the reading of its JSON export.
//!
//! One task per image, holding every planned row of that image as a question; the labeling
//! configuration repeats one block per question (Label Studio's `Repeater` tag), so answers come
//! back as `answer_0`, `answer_1`, … in the order of the task's `questions`. Each task carries
//! the release, the plan's digest and the rows it asks about under `bpals`, which is how the
//! import knows what each answer is about.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Value};

use super::plan::{PlanRow, ReviewPlan};
use super::ReviewError;

/// The choices a reviewer has for each question.
pub const PRESENT: &str = "present";
pub const ABSENT: &str = "absent";
pub const UNCERTAIN: &str = "uncertain";

/// The labeling configuration: the image, then per question its prompt, a present / absent /
/// uncertain choice and an optional comment.
pub const LABELING_CONFIG: &str = r#"<View>
  <Header value="$image_index"/>
  <Image name="image" value="$image" zoom="true" zoomControl="true" contrastControl="true" brightnessControl="true"/>
  <Repeater on="$questions" indexFlag="{{idx}}">
    <Header value="$questions[{{idx}}].prompt" size="5"/>
    <Choices name="answer_{{idx}}" toName="image" choice="single-radio" showInline="true" required="true">
      <Choice value="present"/>
      <Choice value="absent"/>
      <Choice value="uncertain"/>
    </Choices>
    <TextArea name="comment_{{idx}}" toName="image" placeholder="Comment (optional)" maxSubmissions="1" editable="true"/>
  </Repeater>
</View>
"#;

/// Where Label Studio finds the images.
#[derive(Debug, Clone)]
pub enum ImageSource {
    /// Served by Label Studio itself from a folder (`LOCAL_FILES_SERVING_ENABLED`), as
    /// `/data/local-files/?d=` + the image's path under `document_root`.
    LocalFiles { dir: PathBuf, document_root: PathBuf },
    /// Served elsewhere: the prefix, then the image file name.
    UrlPrefix(String),
}

/// What `review export` writes: Label Studio's tasks and the labeling configuration.
pub struct Export {
    pub tasks: Vec<u8>,
    pub config: &'static str,
    pub images: usize,
    pub questions: usize,
}

/// The tasks of `plan` (whose file digest is `plan_sha256`) for Label Studio.
pub fn export(plan: &ReviewPlan, plan_sha256: &str, images: &ImageSource, show_model: bool) -> Result<Export, ReviewError> {
    let mut by_image: BTreeMap<&str, Vec<&PlanRow>> = BTreeMap::new();
    for row in &plan.rows {
        by_image.entry(&row.image_index).or_default().push(row);
    }
    let urls = image_urls(by_image.keys().copied(), images)?;
    let tasks: Vec<Value> = by_image
        .iter()
        .map(|(image, rows)| {
            let questions: Vec<Value> = rows.iter().map(|r| json!({ "label": r.label, "prompt": prompt(r, show_model) })).collect();
            json!({
                "data": {
                    "image": urls[image],
                    "image_index": image,
                    "questions": questions,
                    "bpals": {
                        "release_id": plan.release_id,
                        "release_manifest_sha256": plan.release_manifest_sha256,
                        "plan_sha256": plan_sha256,
                        "split": plan.split,
                        "labels": rows.iter().map(|r| r.label.as_str()).collect::<Vec<_>>(),
                    }
                }
            })
        })
        .collect();
    let mut bytes = serde_json::to_vec_pretty(&tasks).expect("in-memory JSON serialization cannot fail");
    bytes.push(b'\n');
    Ok(Export { tasks: bytes, config: LABELING_CONFIG, images: by_image.len(), questions: plan.rows.len() })
}

/// The question a reviewer answers about one row: the finding, what NIH's label says, and with
/// `show_model` what the model thinks (off by default, so reviewers are not anchored on it).
fn prompt(r: &PlanRow, show_model: bool) -> String {
    let finding = if r.label == crate::vocab::NO_FINDING { "no finding (a normal image)".to_string() } else { r.label.replace('_', " ") };
    let nih = if r.nih_label { "present" } else { "absent" };
    let mut text = format!("{}: NIH's label says {nih}. Is {finding} present on this image?", r.label);
    if show_model {
        text.push_str(&format!(" (The model's confidence that it is present: {:.2}; trust class {}.)", r.confidence, r.trust_class));
    }
    text
}

fn image_urls<'a>(images: impl Iterator<Item = &'a str>, source: &ImageSource) -> Result<BTreeMap<&'a str, String>, ReviewError> {
    let images: Vec<&str> = images.collect();
    match source {
        ImageSource::UrlPrefix(prefix) => {
            let sep = if prefix.ends_with('/') { "" } else { "/" };
            Ok(images.into_iter().map(|i| (i, format!("{prefix}{sep}{}", url_escape(i)))).collect())
        }
        ImageSource::LocalFiles { dir, document_root } => {
            let missing: Vec<&str> = images.iter().copied().filter(|i| !dir.join(i).is_file()).collect();
            if !missing.is_empty() {
                let mut examples = missing.iter().take(5).copied().collect::<Vec<_>>().join(", ");
                if missing.len() > 5 {
                    examples.push_str(", …");
                }
                return Err(ReviewError::MissingImages { dir: dir.clone(), missing: missing.len(), planned: images.len(), examples });
            }
            let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
            let (dir_abs, root_abs) = (abs(dir), abs(document_root));
            let under = dir_abs
                .strip_prefix(&root_abs)
                .map_err(|_| ReviewError::DocumentRoot { images: dir.clone(), root: document_root.clone() })?
                .to_path_buf();
            Ok(images
                .into_iter()
                .map(|i| {
                    let rel = under.join(i).to_string_lossy().replace('\\', "/");
                    (i, format!("/data/local-files/?d={}", url_escape(&rel)))
                })
                .collect())
        }
    }
}

/// Percent-encodes what a URL query value or path segment cannot hold as is.
fn url_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// One task of a Label Studio JSON export, as far as the import reads it.
#[derive(Debug, Deserialize)]
pub struct ExportedTask {
    pub id: Value,
    #[serde(default)]
    pub data: Value,
    #[serde(default)]
    pub annotations: Vec<ExportedAnnotation>,
}

#[derive(Debug, Deserialize)]
pub struct ExportedAnnotation {
    #[serde(default)]
    pub id: Value,
    /// A user id, or (in some exports) the user as an object.
    #[serde(default)]
    pub completed_by: Value,
    #[serde(default)]
    pub result: Vec<ExportedResult>,
    #[serde(default)]
    pub was_cancelled: bool,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct ExportedResult {
    #[serde(default)]
    pub from_name: String,
    #[serde(default, rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub value: Value,
}

impl ExportedAnnotation {
    /// Who answered: the user's email when the export names it, else `user <id>`.
    pub fn annotator(&self) -> String {
        match &self.completed_by {
            Value::Object(user) => user
                .get("email")
                .and_then(Value::as_str)
                .map(str::to_string)
                .or_else(|| user.get("id").map(|id| format!("user {id}")))
                .unwrap_or_else(|| "unknown".into()),
            Value::Null => "unknown".into(),
            id => format!("user {id}"),
        }
    }

    /// When the annotation was last changed (ISO 8601 strings compare in time order).
    pub fn changed_at(&self) -> &str {
        self.updated_at.as_deref().or(self.created_at.as_deref()).unwrap_or("")
    }
}

/// Reads a Label Studio JSON export; the other export formats get an error that names them.
pub fn read_export(path: &Path) -> Result<Vec<ExportedTask>, ReviewError> {
    let bytes = crate::files::regular::read(path, crate::files::regular::RELEASE_JSON)
        .map_err(|source| ReviewError::Io { path: path.into(), source })?;
    let bad = |message: String| ReviewError::Export { path: path.into(), message };
    let text = String::from_utf8_lossy(&bytes);
    let first = text.trim_start().chars().next();
    if !matches!(first, Some('[') | Some('{')) {
        let line = text.lines().next().unwrap_or("");
        let kind = if line.contains(',') || line.contains('\t') { "a CSV or TSV export" } else { "not JSON" };
        return Err(bad(format!("this is {kind}; export the project from Label Studio as JSON (Export > JSON)")));
    }
    let value: Value =
        serde_json::from_slice(&bytes).map_err(|e| bad(format!("line {}, column {}: not valid JSON: {e}", e.line(), e.column())))?;
    let tasks = match value {
        Value::Array(tasks) => tasks,
        Value::Object(map) if map.contains_key("images") && map.contains_key("categories") => {
            return Err(bad("this is a COCO export; export the project from Label Studio as JSON (Export > JSON)".into()));
        }
        Value::Object(_) => return Err(bad("expected a JSON list of tasks (Label Studio's JSON export), found an object".into())),
        _ => return Err(bad("expected a JSON list of tasks (Label Studio's JSON export)".into())),
    };
    if !tasks.is_empty() && tasks.iter().all(|t| t.get("id").is_none() && t.get("annotations").is_none()) {
        return Err(bad("this is the task list `review export` wrote (tasks with no id and no annotations), not Label Studio's export \
             of the answers: import it into Label Studio, and once reviewers have answered, export the project as JSON"
            .into()));
    }
    tasks
        .into_iter()
        .enumerate()
        .map(|(i, task)| {
            if task.get("annotations").is_none() && task.get("data").is_none() {
                return Err(bad(format!(
                    "task {} has neither `data` nor `annotations`: this looks like the JSON-MIN export; choose JSON",
                    i + 1
                )));
            }
            serde_json::from_value(task).map_err(|e| bad(format!("task {}: {e}", i + 1)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_escape_what_a_query_cannot_hold() {
        assert_eq!(url_escape("images/00000001_000.png"), "images/00000001_000.png");
        assert_eq!(url_escape("a b&c.png"), "a%20b%26c.png");
    }

    #[test]
    fn annotators_are_named_by_email_or_id() {
        let a: ExportedAnnotation = serde_json::from_value(json!({"completed_by": 3})).unwrap();
        assert_eq!(a.annotator(), "user 3");
        let a: ExportedAnnotation = serde_json::from_value(json!({"completed_by": {"id": 3, "email": "r@x.org"}})).unwrap();
        assert_eq!(a.annotator(), "r@x.org");
    }
}
