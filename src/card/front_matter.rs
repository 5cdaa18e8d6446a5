//! HF dataset-card YAML front matter, serialized from a struct so it is always valid YAML.

use serde::Serialize;

use super::CardInput;
use crate::release_spec::{Tier, Visibility};
use crate::shard::ColumnSet;

#[derive(Debug, Serialize)]
pub struct FrontMatter {
    pub pretty_name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub license_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub license_link: Option<String>,
    pub language: Vec<String>,
    pub task_categories: Vec<String>,
    pub tags: Vec<String>,
    pub size_categories: Vec<String>,
    pub configs: Vec<Config>,
    pub dataset_info: Vec<DatasetInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra_gated_prompt: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra_gated_fields: Option<GatedFields>,
}

#[derive(Debug, Serialize)]
pub struct Config {
    pub config_name: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
    pub data_files: Vec<DataFiles>,
}

#[derive(Debug, Serialize)]
pub struct DataFiles {
    pub split: String,
    pub path: String,
}

#[derive(Debug, Serialize)]
pub struct DatasetInfo {
    pub config_name: String,
    pub features: Vec<serde_json::Value>,
    pub splits: Vec<SplitInfo>,
    pub download_size: u64,
    pub dataset_size: u64,
}

#[derive(Debug, Serialize)]
pub struct SplitInfo {
    pub name: String,
    pub num_bytes: u64,
    pub num_examples: u64,
}

#[derive(Debug, Serialize)]
pub struct GatedFields {
    #[serde(rename = "Company")]
    pub company: String,
    #[serde(rename = "Country")]
    pub country: String,
    #[serde(rename = "I accept the CXR14-BPALS commercial license")]
    pub accept: String,
}

/// HF's size buckets, by row count.
pub fn size_category(rows: u64) -> &'static str {
    match rows {
        0..1_000 => "n<1K",
        1_000..10_000 => "1K<n<10K",
        10_000..100_000 => "10K<n<100K",
        100_000..1_000_000 => "100K<n<1M",
        1_000_000..10_000_000 => "1M<n<10M",
        _ => "10M<n<100M",
    }
}

impl FrontMatter {
    pub fn new(input: &CardInput<'_>) -> Self {
        let spec = input.spec;
        let (license, license_name, license_link) = match spec.release.tier {
            Tier::Trial => (Some("cc-by-nc-4.0".to_string()), None, None),
            Tier::Standard => (Some("other".into()), Some("cxr14-bpals-standard".into()), Some("LICENSE.md".into())),
            Tier::Enterprise => (Some("other".into()), Some("cxr14-bpals-enterprise".into()), Some("LICENSE.md".into())),
        };
        let total_rows: u64 = input.splits.iter().map(|s| s.pairs.rows).max().unwrap_or(0);
        let gated = spec.publish.visibility == Visibility::Gated;
        let tables = super::table_configs(ColumnSet::of(spec));
        FrontMatter {
            pretty_name: spec.release.title.clone(),
            license,
            license_name,
            license_link,
            language: vec!["en".into()],
            task_categories: vec!["image-classification".into()],
            tags: ["medical", "chest-x-ray", "nih-chestxray14", "label-noise", "data-quality", "vision-language-model"]
                .map(String::from)
                .to_vec(),
            size_categories: vec![size_category(total_rows).into()],
            configs: tables
                .iter()
                .map(|t| Config {
                    config_name: t.name.to_string(),
                    default: t.name == "default",
                    data_files: input
                        .splits
                        .iter()
                        .map(|s| DataFiles { split: s.name.clone(), path: format!("{}/{}-*.parquet", t.folder, s.name) })
                        .collect(),
                })
                .collect(),
            dataset_info: tables
                .iter()
                .map(|t| {
                    let table = t.facts;
                    let bytes: u64 = input.splits.iter().map(|s| table(s).bytes).sum();
                    DatasetInfo {
                        config_name: t.name.to_string(),
                        features: t
                            .columns
                            .iter()
                            .map(|c| {
                                let (key, value) = c.kind.hf_feature();
                                serde_json::json!({ "name": c.name, key: value })
                            })
                            .collect(),
                        splits: input
                            .splits
                            .iter()
                            .map(|s| SplitInfo { name: s.name.clone(), num_bytes: table(s).bytes, num_examples: table(s).rows })
                            .collect(),
                        download_size: bytes,
                        dataset_size: bytes,
                    }
                })
                .collect(),
            extra_gated_prompt: gated.then(|| {
                "Access to this release comes with a CXR14-BPALS commercial license (see LICENSE.md). \
                 Request it with the Hugging Face username you gave when you bought the license; \
                 the request is accepted once the payment is recorded."
                    .to_string()
            }),
            extra_gated_fields: gated.then(|| GatedFields { company: "text".into(), country: "country".into(), accept: "checkbox".into() }),
        }
    }

    pub fn to_yaml(&self) -> Result<String, serde_saphyr::ser::Error> {
        serde_saphyr::to_string(self)
    }
}
