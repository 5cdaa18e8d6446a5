//! `provenance.intoto.jsonl`: SLSA Provenance v1 (slsa.dev/provenance/v1) of the release, an
//! in-toto statement in a DSSE envelope signed with the release key, one envelope per line as
//! SLSA's own generators write it. Everything in it comes from `build.lock` and the release's
//! files, plus the run: the builder's id and, for `build --sign-key`, when it ran. Times live
//! here only, never in the data files, so signing leaves the data bytes as they are.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::dsse::Envelope;
use super::keys::{PublicKey, SigningKey};
use super::statement::{Statement, Subject};
use crate::manifest::{BuildLock, ToolInfo};

pub const PREDICATE_TYPE: &str = "https://slsa.dev/provenance/v1";

/// What kind of build this is: the meaning of every parameter below. Documented in the guide's
/// provenance reference (`docs/signing.md`).
pub const BUILD_TYPE: &str = "https://o5i.github.io/bpals-release/provenance/release-build/v1";

/// The builder id when none is configured: a build on someone's own machine, which no CI vouches
/// for. Set `--builder-id` (or `BPALS_BUILDER_ID`) to a CI workflow's URI on a CI runner.
pub const LOCAL_BUILDER: &str = "https://o5i.github.io/bpals-release/provenance/builders/local-unattested/v1";

/// How the release was made, as far as the signer knows.
#[derive(Debug, Clone, Default)]
pub struct RunDetails {
    pub builder_id: Option<String>,
    /// RFC 3339 UTC times of the build; absent when a finished release is signed afterwards.
    pub started_on: Option<String>,
    pub finished_on: Option<String>,
    /// The command-line arguments that shaped the release (not paths of caches or thread counts).
    pub arguments: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Predicate {
    pub build_definition: BuildDefinition,
    pub run_details: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BuildDefinition {
    pub build_type: String,
    pub external_parameters: Value,
    pub internal_parameters: Value,
    pub resolved_dependencies: Vec<Value>,
}

/// A resource descriptor with a sha256 (in-toto ResourceDescriptor).
fn dependency(name: &str, sha256: &str, annotations: Value) -> Value {
    json!({ "name": name, "digest": { "sha256": sha256 }, "annotations": annotations })
}

/// Every input the lock pins, with its digest: the NIH metadata files, the image hashes file
/// (which pins each image), the curated list, the model and its tokenizer and template, the
/// calibration table, the joint rule and the gold labels.
pub fn dependencies(lock: &BuildLock) -> Vec<Value> {
    let mut out = Vec::new();
    let root = lock.spec["source"]["root_as_written"].as_str().unwrap_or("");
    if let Some(inputs) = lock.inputs.as_object() {
        for (name, input) in inputs {
            let sha256 = input["sha256"].as_str().unwrap_or("");
            out.push(dependency(name, sha256, json!({ "role": "nih-metadata", "bytes": input["bytes"], "source_root": root })));
        }
    }
    out.push(dependency(
        &lock.images.path,
        &lock.images.sha256,
        json!({ "role": "nih-images", "images": lock.images.images, "format": "sha256sum lines, one per image file", "source_root": root }),
    ));
    let selection = &lock.spec["selection"]["images"];
    if let (Some(file), Some(sha256)) = (selection["file"].as_str(), selection["sha256"].as_str()) {
        out.push(dependency(file, sha256, json!({ "role": "curated-image-list" })));
    }
    let scorer = &lock.scorer;
    let model_id = scorer["model_id"].as_str().unwrap_or("");
    let mut model = json!({
        "name": model_id,
        "annotations": {
            "role": "model",
            "backend": scorer["backend"],
            "revision": scorer["revision"],
            "fixture": scorer["fixture"],
            "scorer_sha256": lock.scorer_sha256,
        },
    });
    let mut digest = serde_json::Map::new();
    if let Some(weights) = scorer["weights_sha256"].as_str() {
        digest.insert("sha256".into(), weights.into());
    }
    if let Some(commit) = scorer["commit"].as_str() {
        digest.insert("gitCommit".into(), commit.into());
        model["uri"] = format!("https://huggingface.co/{model_id}").into();
    }
    if !digest.is_empty() {
        model["digest"] = Value::Object(digest);
    }
    out.push(model);
    for (key, role) in [("tokenizer_sha256", "tokenizer"), ("chat_template_sha256", "chat-template")] {
        if let Some(sha256) = scorer["preprocessing"][key].as_str() {
            let mut annotations = json!({ "role": role });
            // The variables the template was rendered with, where it reads any (enable_thinking).
            let variables = &scorer["preprocessing"]["chat_template_variables"];
            if role == "chat-template" && variables.is_object() {
                annotations["variables"] = variables.clone();
            }
            out.push(dependency(&format!("{model_id}/{role}"), sha256, annotations));
        }
    }
    let calibration = &lock.spec["signal"]["calibration"];
    if let (Some(file), Some(sha256)) = (calibration["file"].as_str(), calibration["sha256"].as_str()) {
        out.push(dependency(file, sha256, json!({ "role": "calibration" })));
    }
    let joint_rule = &lock.spec["signal"]["joint_rule"];
    if let (Some(file), Some(sha256)) = (joint_rule["file"].as_str(), joint_rule["sha256"].as_str()) {
        out.push(dependency(file, sha256, json!({ "role": "joint-rule" })));
    }
    let gold = &lock.spec["evaluation"];
    if let (Some(file), Some(sha256)) = (gold["gold_file"].as_str(), gold["sha256"].as_str()) {
        out.push(dependency(file, sha256, json!({ "role": "gold-labels", "format": gold["format"] })));
    }
    out
}

/// The statement's bytes for the release described by `lock`, whose files (every one but the
/// two signature files) are `files`.
pub fn statement(lock: &BuildLock, files: &BTreeMap<String, String>, run: &RunDetails) -> Vec<u8> {
    let subject = files.iter().map(|(path, sha256)| Subject::sha256(path, sha256)).collect();
    let signer = ToolInfo::current();
    let mut metadata = serde_json::Map::new();
    if let Some(t) = &run.started_on {
        metadata.insert("startedOn".into(), t.clone().into());
    }
    if let Some(t) = &run.finished_on {
        metadata.insert("finishedOn".into(), t.clone().into());
    }
    let preprocessing = &lock.scorer["preprocessing"];
    let predicate = Predicate {
        build_definition: BuildDefinition {
            build_type: BUILD_TYPE.into(),
            external_parameters: json!({
                "spec": { "path": lock.spec_file, "sha256": lock.spec_sha256, "resolved": lock.spec },
                "arguments": run.arguments,
            }),
            internal_parameters: json!({
                "tool": lock.tool,
                "seed": lock.seed,
                "prompt_set_sha256": lock.prompt_set_sha256,
                "stage_keys": lock.stage_keys,
            }),
            resolved_dependencies: dependencies(lock),
        },
        run_details: json!({
            "builder": {
                "id": run.builder_id.as_deref().unwrap_or(LOCAL_BUILDER),
                "version": { signer.name.as_str(): format!("{} ({})", signer.version, signer.commit) },
            },
            "metadata": metadata,
            "byproducts": [{
                "name": "scorer-runtime",
                "annotations": {
                    "backend": lock.scorer["backend"],
                    "device": preprocessing.get("device").cloned().unwrap_or(Value::Null),
                    "dtype": preprocessing.get("dtype").cloned().unwrap_or(Value::Null),
                    "signed_after_build": run.started_on.is_none(),
                },
            }],
        }),
    };
    Statement::new(subject, PREDICATE_TYPE, predicate).to_bytes()
}

/// The file's bytes: the signed envelope on one line.
pub fn sign(statement: &[u8], key: &SigningKey) -> Vec<u8> {
    let envelope = Envelope::sign(statement, key, &key.public_key().fingerprint());
    let mut line = serde_json::to_vec(&envelope).expect("in-memory JSON serialization cannot fail");
    line.push(b'\n');
    line
}

/// What a checked provenance claims, for the verify report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Claims {
    pub builder_id: String,
    pub build_type: String,
    pub spec_path: String,
    pub spec_sha256: String,
    pub model: String,
    pub dependencies: usize,
    pub started_on: Option<String>,
    pub finished_on: Option<String>,
}

/// Checks the provenance file's bytes with `key`: the envelope's signature, its subject against
/// `files` (every release file but the two signature files), and its dependencies against what
/// `lock` pins. The error says what does not hold.
pub fn check(bytes: &[u8], key: &PublicKey, files: &BTreeMap<String, String>, lock: &BuildLock) -> Result<Claims, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "is not UTF-8 text".to_string())?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let [line] = lines.as_slice() else {
        return Err(format!("holds {} envelopes, expected one", lines.len()));
    };
    let envelope: Envelope = serde_json::from_str(line).map_err(|e| format!("is not a DSSE envelope ({e})"))?;
    let payload = envelope.open(key)?;
    let statement: Statement<Predicate> = Statement::parse(&payload, PREDICATE_TYPE)?;
    let subject: BTreeMap<&str, Option<&String>> = statement.subject.iter().map(|s| (s.name.as_str(), s.digest.get("sha256"))).collect();
    for (path, sha256) in files {
        match subject.get(path.as_str()) {
            None => return Err(format!("does not name the release file {path} among its subjects")),
            Some(Some(d)) if *d == sha256 => {}
            Some(_) => return Err(format!("names {path} with another sha256 than the file has")),
        }
    }
    if let Some(extra) = subject.keys().find(|p| !files.contains_key(**p)) {
        return Err(format!("names a subject {extra} that is not in the release"));
    }
    let definition = &statement.predicate.build_definition;
    if definition.build_type != BUILD_TYPE {
        return Err(format!("build type {:?}, expected {BUILD_TYPE:?}", definition.build_type));
    }
    if definition.resolved_dependencies != dependencies(lock) {
        return Err("lists other dependencies than build.lock pins (inputs, images, model, calibration, joint rule, gold)".into());
    }
    let spec = &definition.external_parameters["spec"];
    if spec["sha256"].as_str() != Some(lock.spec_sha256.as_str()) {
        return Err("names another spec than build.lock".into());
    }
    let run = &statement.predicate.run_details;
    let text = |v: &Value| v.as_str().map(str::to_string);
    Ok(Claims {
        builder_id: text(&run["builder"]["id"]).unwrap_or_default(),
        build_type: definition.build_type.clone(),
        spec_path: text(&spec["path"]).unwrap_or_default(),
        spec_sha256: text(&spec["sha256"]).unwrap_or_default(),
        model: format!(
            "{} {}@{}",
            lock.scorer["backend"].as_str().unwrap_or("?"),
            lock.scorer["model_id"].as_str().unwrap_or("?"),
            lock.scorer["revision"].as_str().unwrap_or("?")
        ),
        dependencies: definition.resolved_dependencies.len(),
        started_on: text(&run["metadata"]["startedOn"]),
        finished_on: text(&run["metadata"]["finishedOn"]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(preprocessing: Value) -> BuildLock {
        serde_json::from_value(json!({
            "format": "bpals-build-lock/1",
            "tool": { "name": "bpals-release", "version": "0", "commit": "x" },
            "spec_file": "s.yaml", "spec_sha256": "0", "spec": {}, "inputs": {},
            "images": { "path": "images.sha256", "sha256": "1", "images": 0 },
            "scorer": { "model_id": "org/model", "backend": "native", "revision": "r", "fixture": false, "preprocessing": preprocessing },
            "scorer_sha256": "2", "prompt_set_sha256": "3", "seed": 0, "stage_keys": {},
        }))
        .unwrap()
    }

    #[test]
    fn the_chat_template_dependency_carries_the_variables_it_was_rendered_with() {
        let template = |deps: Vec<Value>| deps.into_iter().find(|d| d["annotations"]["role"] == "chat-template").unwrap();
        let with =
            template(dependencies(&lock(json!({ "chat_template_sha256": "ab", "chat_template_variables": { "enable_thinking": false } }))));
        assert_eq!(with["annotations"]["variables"], json!({ "enable_thinking": false }));
        let without = template(dependencies(&lock(json!({ "chat_template_sha256": "ab" }))));
        assert_eq!(without["annotations"], json!({ "role": "chat-template" }), "a template without a switch: as before");
    }
}
