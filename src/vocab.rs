//! The vocabulary every stage shares: NIH ChestX-ray14's labels, the support devices the signal
//! watches for, and the trust classes. It imports nothing, so any module may use it.
//!
//! Labels are stored by name everywhere outside this module: the vocabulary is small and fixed,
//! and names are what a reader of a Parquet shard or a spec expects to see.

use serde::Serialize;

/// The 14 findings in NIH's own order, then "No Finding".
pub const LABELS: [&str; 15] = [
    "Atelectasis",
    "Cardiomegaly",
    "Effusion",
    "Infiltration",
    "Mass",
    "Nodule",
    "Pneumonia",
    "Pneumothorax",
    "Consolidation",
    "Edema",
    "Emphysema",
    "Fibrosis",
    "Pleural_Thickening",
    "Hernia",
    "No Finding",
];

pub const NO_FINDING: &str = "No Finding";

/// Support devices: a named confounder, since a chest tube or line is easily read as a finding.
pub const SUPPORT_DEVICES: [&str; 6] =
    ["chest_tube", "central_venous_line", "endotracheal_tube", "nasogastric_tube", "sternotomy_wires", "pacemaker_or_icd"];

/// Whether `name` follows NIH's image naming rule: the patient's eight digits, an underscore,
/// the follow-up's three digits, `.png` (`00000013_005.png`).
pub fn is_nih_image_name(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() == 16
        && b[..8].iter().all(u8::is_ascii_digit)
        && b[8] == b'_'
        && b[9..12].iter().all(u8::is_ascii_digit)
        && &name[12..] == ".png"
}

/// Position of a label in [`LABELS`], which is also the row order within an image.
pub fn label_index(name: &str) -> Option<usize> {
    LABELS.iter().position(|l| *l == name)
}

/// BBox_List_2017.csv spells one finding differently from Data_Entry_2017.csv.
pub fn normalize_bbox_label(name: &str) -> &str {
    match name {
        "Infiltrate" => "Infiltration",
        other => other,
    }
}

/// The trust classes of a (image, label) pair, from most to least trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TrustClass {
    Trusted,
    Review,
    Suspect,
    LikelyMislabeled,
}

impl TrustClass {
    pub const NAMES: [&'static str; 4] = ["trusted", "review", "suspect", "likely_mislabeled"];
    pub const ALL: [TrustClass; 4] = [TrustClass::Trusted, TrustClass::Review, TrustClass::Suspect, TrustClass::LikelyMislabeled];

    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
    pub fn parse(s: &str) -> Option<Self> {
        Self::NAMES.iter().position(|n| *n == s).map(|i| Self::ALL[i])
    }
}
