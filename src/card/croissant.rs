//! `croissant.json`: the release in MLCommons Croissant 1.1 with the Responsible-AI (RAI 1.0)
//! vocabulary, rendered from the same facts as the card ([`CardInput`]) so the two never
//! disagree. The publisher's words come from the spec's `croissant` section; everything the
//! build knows (counts, the model, every shard and its sha256, the columns) is filled in here.
//!
//! Only the spec's date is written (no clock), and maps keep their insertion order, so the bytes
//! are the same on every rebuild.

use serde_json::{json, Value};

use super::citation::{self, NIH_SOURCE, PUBLISHER};
use super::{table_configs, CardInput, TableConfig};
use crate::manifest::ManifestFile;
use crate::release_spec::croissant::CroissantSpec;
use crate::release_spec::Tier;
use crate::shard::schema::{ColumnDoc, ColumnType};
use crate::shard::ColumnSet;

pub const CROISSANT_FILE: &str = "croissant.json";

/// The file's JSON-LD context: Croissant 1.1's (as mlcroissant writes it), plus W3C PROV for
/// the lineage to NIH ChestX-ray14.
fn context() -> Value {
    const TERMS: [(&str, &str); 42] = [
        ("@language", "en"),
        ("@vocab", "https://schema.org/"),
        ("arrayShape", "cr:arrayShape"),
        ("citeAs", "cr:citeAs"),
        ("column", "cr:column"),
        ("conformsTo", "dct:conformsTo"),
        ("containedIn", "cr:containedIn"),
        ("cr", "http://mlcommons.org/croissant/"),
        ("rai", "http://mlcommons.org/croissant/RAI/"),
        ("data", "@json cr:data"),
        ("dataType", "@vocab cr:dataType"),
        ("dct", "http://purl.org/dc/terms/"),
        ("description", "@language"),
        ("equivalentProperty", "cr:equivalentProperty"),
        ("examples", "@json cr:examples"),
        ("extract", "cr:extract"),
        ("field", "cr:field"),
        ("fileProperty", "cr:fileProperty"),
        ("fileObject", "cr:fileObject"),
        ("fileSet", "cr:fileSet"),
        ("format", "cr:format"),
        ("includes", "cr:includes"),
        ("isArray", "cr:isArray"),
        ("isLiveDataset", "cr:isLiveDataset"),
        ("jsonPath", "cr:jsonPath"),
        ("key", "cr:key"),
        ("md5", "cr:md5"),
        ("name", "@language"),
        ("parentField", "cr:parentField"),
        ("path", "cr:path"),
        ("prov", "http://www.w3.org/ns/prov#"),
        ("recordSet", "cr:recordSet"),
        ("references", "cr:references"),
        ("regex", "cr:regex"),
        ("repeated", "cr:repeated"),
        ("replace", "cr:replace"),
        ("samplingRate", "cr:samplingRate"),
        ("sc", "https://schema.org/"),
        ("separator", "cr:separator"),
        ("source", "cr:source"),
        ("subField", "cr:subField"),
        ("transform", "cr:transform"),
    ];
    let mut map = serde_json::Map::new();
    for (term, meaning) in TERMS {
        // "@json cr:data": a typed term; "@language": a language container; else an IRI.
        let value = match meaning.split_once(' ') {
            Some((kind, id)) => json!({ "@id": id, "@type": kind }),
            None if meaning == "@language" && !term.starts_with('@') => json!({ "@container": "@language" }),
            None => Value::from(meaning),
        };
        map.insert(term.to_string(), value);
    }
    Value::Object(map)
}

/// What a demo build says where the publisher has not written its words yet.
const UNSET: &str = "Not written by the publisher yet: this is a demo build (a publishable build is refused without it).";

/// The file's bytes: pretty JSON with a trailing newline. `files` are the release's files as the
/// manifest lists them (the shards and `images.sha256` among them), with their digests.
pub fn render(input: &CardInput<'_>, files: &[ManifestFile], images_sha256_file: &str) -> Vec<u8> {
    let spec = input.spec;
    let digest = |path: &str| {
        let f = files.iter().find(|f| f.path == path).expect("every shard and images.sha256 are hashed before croissant.json");
        (f.sha256.as_str(), f.bytes)
    };
    let set = ColumnSet::of(spec);
    let tables = table_configs(set);
    let mut distribution = Vec::new();
    for table in &tables {
        for split in &input.splits {
            for shard in &(table.facts)(split).shards {
                let (sha256, bytes) = digest(&shard.path);
                distribution.push(json!({
                    "@type": "cr:FileObject",
                    "@id": shard.path,
                    "name": shard.path,
                    "description": format!("{} rows of the `{}` config's {} split.", shard.rows, table.name, split.name),
                    "contentUrl": shard.path,
                    "contentSize": format!("{bytes} B"),
                    "encodingFormat": "application/x-parquet",
                    "sha256": sha256,
                }));
            }
        }
    }
    for table in &tables {
        for split in &input.splits {
            distribution.push(json!({
                "@type": "cr:FileSet",
                "@id": file_set_id(table, &split.name),
                "name": file_set_id(table, &split.name),
                "description": format!("The Parquet shards of the `{}` config's {} split.", table.name, split.name),
                "encodingFormat": "application/x-parquet",
                "includes": format!("{}/{}-*.parquet", table.folder, split.name),
            }));
        }
    }
    let (images_sha256, images_bytes) = digest(images_sha256_file);
    distribution.push(json!({
        "@type": "cr:FileObject",
        "@id": images_sha256_file,
        "name": images_sha256_file,
        "description": format!(
            "The sha256 of each of the {} NIH images the release scored, as `sha256sum` writes them. The images themselves are not distributed: download them from NIH ({NIH_SOURCE}) and check them with `sha256sum -c`.",
            input.images
        ),
        "contentUrl": images_sha256_file,
        "contentSize": format!("{images_bytes} B"),
        "encodingFormat": "text/plain",
        "sha256": images_sha256,
    }));
    let record_sets: Vec<Value> =
        tables.iter().flat_map(|table| input.splits.iter().map(move |split| record_set(table, &split.name))).collect();

    let mut doc = json!({
        "@context": context(),
        "@type": "sc:Dataset",
        "conformsTo": ["http://mlcommons.org/croissant/1.1", "http://mlcommons.org/croissant/RAI/1.0"],
        "name": format!("cxr14-bpals-{}", spec.release.id),
        "alternateName": spec.release.title,
        "description": description(input),
        "version": spec.release.version,
        "datePublished": spec.release.date,
        "license": license(spec.release.tier, &spec.publish.repo),
        "url": format!("https://huggingface.co/datasets/{}", spec.publish.repo),
        "citeAs": format!("{}\n\n{}", citation::RELEASE.bibtex(), citation::NIH.bibtex()),
        "creator": { "@type": "sc:Organization", "name": PUBLISHER },
        "publisher": { "@type": "sc:Organization", "name": PUBLISHER },
        "keywords": ["medical", "chest x-ray", "NIH ChestX-ray14", "label noise", "data quality", "vision-language model"],
        "isAccessibleForFree": spec.release.tier == Tier::Trial,
        // Lineage: NIH ChestX-ray14 as NIH shares it (its citation is in citeAs).
        "prov:wasDerivedFrom": { "@id": NIH_SOURCE },
    });
    let map = doc.as_object_mut().expect("an object");
    for (key, value) in rai(input, &spec.croissant) {
        map.insert(key.to_string(), value);
    }
    map.insert("distribution".into(), Value::Array(distribution));
    map.insert("recordSet".into(), Value::Array(record_sets));
    crate::manifest::to_json_bytes(&doc)
}

fn file_set_id(table: &TableConfig, split: &str) -> String {
    format!("{}-{split}-shards", table.name)
}

/// One record set per (config, split): its columns as typed fields read from the split's shards.
fn record_set(table: &TableConfig, split: &str) -> Value {
    let id = format!("{}_{split}", table.name);
    let files = file_set_id(table, split);
    let fields: Vec<Value> = table.columns.iter().map(|c| field(&id, &files, c)).collect();
    let key: Vec<Value> = table.key.iter().map(|k| json!({ "@id": format!("{id}/{k}") })).collect();
    json!({
        "@type": "cr:RecordSet",
        "@id": id,
        "name": id,
        "description": format!("{} The `{}` config's {split} split.", table.description, table.name),
        "key": key,
        "field": fields,
    })
}

fn field(record_set: &str, files: &str, column: &ColumnDoc) -> Value {
    let (data_type, repeated) = match column.kind {
        ColumnType::Utf8 => ("sc:Text", false),
        ColumnType::UInt32 => ("sc:Integer", false),
        ColumnType::Bool => ("sc:Boolean", false),
        ColumnType::Float64 => ("sc:Float", false),
        ColumnType::ListUtf8 => ("sc:Text", true),
        ColumnType::ListFloat32 => ("sc:Float", true),
        ColumnType::ListInt32 => ("sc:Integer", true),
    };
    let mut field = json!({
        "@type": "cr:Field",
        "@id": format!("{record_set}/{}", column.name),
        "name": column.name,
        "description": column.description,
        "dataType": data_type,
    });
    if repeated {
        let map = field.as_object_mut().expect("an object");
        map.insert("isArray".into(), true.into());
        map.insert("arrayShape".into(), "-1".into());
    }
    field
        .as_object_mut()
        .expect("an object")
        .insert("source".into(), json!({ "fileSet": { "@id": files }, "extract": { "column": column.name } }));
    field
}

/// The license: the trial tier's SPDX license, else the release's own commercial license text.
fn license(tier: Tier, repo: &str) -> String {
    match tier {
        Tier::Trial => "https://spdx.org/licenses/CC-BY-NC-4.0.html".into(),
        Tier::Standard | Tier::Enterprise => format!("https://huggingface.co/datasets/{repo}/blob/main/LICENSE.md"),
    }
}

/// What the release is, with the build's own figures.
fn description(input: &CardInput<'_>) -> String {
    let spec = input.spec;
    let rows: u64 = input.splits.iter().map(|s| s.pairs.rows).max().unwrap_or(0);
    let mut text = format!(
        "{}: a trust signal over the report-derived labels of NIH ChestX-ray14. For each of {rows} (image, label) pairs over {} images, the open vision-language model {} says how far to trust NIH's label (confidence, agreement, consistency, a trust class and flags). It holds no images: rows are keyed to NIH's image file names.",
        spec.release.title, input.images, spec.model.id
    );
    if !input.demo_reasons.is_empty() {
        text.push_str(&format!(" DEMO BUILD, not a release: {}.", input.demo_reasons.join("; ")));
    }
    text
}

/// The Responsible-AI fields: the publisher's words where only the publisher can say them, the
/// build's facts where it knows them.
fn rai(input: &CardInput<'_>, words: &CroissantSpec) -> Vec<(&'static str, Value)> {
    let spec = input.spec;
    let said = |value: &Option<String>| Value::from(value.clone().unwrap_or_else(|| UNSET.to_string()));
    let questions = spec.prompts.questions();
    let per_label: std::collections::BTreeMap<&str, usize> = questions.iter().fold(Default::default(), |mut m, q| {
        *m.entry(q.target.as_str()).or_default() += 1;
        m
    });
    let (fewest, most) = (per_label.values().min().copied().unwrap_or(0), per_label.values().max().copied().unwrap_or(0));
    let asked = if fewest == most { format!("{most}") } else { format!("{fewest} to {most}") };
    let mut out = vec![
        ("rai:dataCollection", said(&words.data_collection)),
        (
            "rai:dataCollectionType",
            words.data_collection_type.as_ref().map_or_else(|| Value::from(UNSET), |types| Value::from(types.clone())),
        ),
        ("rai:dataLimitations", said(&words.data_limitations)),
        ("rai:dataBiases", said(&words.data_biases)),
        ("rai:dataUseCases", said(&words.data_use_cases)),
        ("rai:dataSocialImpact", said(&words.data_social_impact)),
        ("rai:personalSensitiveInformation", said(&words.personal_sensitive_information)),
        (
            "rai:annotationsPerItem",
            Value::from(format!(
                "Each (image, label) pair carries one label from NIH (mined from the radiology report by an NLP labeler) and one machine judgement: the model's answers to {asked} paraphrased yes/no questions about the finding, combined into the pair's confidence, agreement and trust class."
            )),
        ),
        ("rai:dataAnnotationProtocol", Value::from(annotation_protocol(input))),
        ("rai:machineAnnotationTools", Value::from(vec![machine_annotation(input)])),
    ];
    if let Some(demographics) = &words.annotator_demographics {
        out.push(("rai:annotatorDemographics", Value::from(demographics.clone())));
    }
    out
}

/// How the machine labels were made, from the spec's thresholds and the review plan if any.
fn annotation_protocol(input: &CardInput<'_>) -> String {
    let s = &input.spec.signal;
    let mut text = format!(
        "The model answers each question with the logits of \"Yes\" and \"No\"; confidence is the mean p(yes) over the label's questions, agreement is confidence where NIH asserts the label and 1 - confidence otherwise. Trust classes by agreement: trusted from {}, review from {}, suspect from {}, likely mislabeled below. The prompts, thresholds and model are recorded in build.lock.",
        s.trusted_min_agreement, s.review_min_agreement, s.suspect_min_agreement
    );
    if let Some(plan) = input.spec.evaluation.as_ref().and_then(|e| e.review_plan.as_ref()) {
        text.push_str(&format!(" Expert review: the rows of the review plan {plan} were sent to reviewers; their answers are the gold labels the card evaluates against."));
    }
    text
}

/// The model, its revision and weight license, and the engine that ran it.
fn machine_annotation(input: &CardInput<'_>) -> String {
    let (model, scorer) = (&input.spec.model, input.scorer);
    let revision = scorer.commit.as_deref().unwrap_or(&scorer.revision);
    format!(
        "{} at revision {revision} ({} weights), run by bpals-release {} ({} backend)",
        scorer.model_id,
        model.weight_license,
        env!("CARGO_PKG_VERSION"),
        scorer.backend.name()
    )
}
