//! The NIH ChestX-ray14 label vocabulary and the support devices the signal watches for.
//!
//! Labels are stored by name everywhere outside this module: the vocabulary is small and fixed,
//! and names are what a reader of a Parquet shard or a spec expects to see.

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
