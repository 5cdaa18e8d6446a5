//! The Arrow schema of the pair table: the one place that defines the columns. The writer, the
//! card's schema section and the HF `dataset_info` features are all generated from [`PAIR_COLUMNS`].

use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef};

/// Bumped on any change to the columns, their types or their meaning.
pub const SCHEMA_VERSION: &str = "1";

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ColumnType {
    Utf8,
    UInt32,
    Bool,
    Float64,
    ListUtf8,
    ListFloat32,
    ListInt32,
}

impl ColumnType {
    fn arrow(self) -> DataType {
        let item = |t: DataType| DataType::List(Arc::new(Field::new("item", t, true)));
        match self {
            ColumnType::Utf8 => DataType::Utf8,
            ColumnType::UInt32 => DataType::UInt32,
            ColumnType::Bool => DataType::Boolean,
            ColumnType::Float64 => DataType::Float64,
            ColumnType::ListUtf8 => item(DataType::Utf8),
            ColumnType::ListFloat32 => item(DataType::Float32),
            ColumnType::ListInt32 => item(DataType::Int32),
        }
    }
    /// The type as the card documents it (Arrow's names).
    pub fn display(self) -> &'static str {
        match self {
            ColumnType::Utf8 => "string",
            ColumnType::UInt32 => "uint32",
            ColumnType::Bool => "bool",
            ColumnType::Float64 => "float64",
            ColumnType::ListUtf8 => "list<string>",
            ColumnType::ListFloat32 => "list<float32>",
            ColumnType::ListInt32 => "list<int32>",
        }
    }
    /// The feature as HF's `dataset_info` writes it: a dtype, or a sequence of one.
    pub fn hf_feature(self) -> (&'static str, &'static str) {
        match self {
            ColumnType::Utf8 => ("dtype", "string"),
            ColumnType::UInt32 => ("dtype", "uint32"),
            ColumnType::Bool => ("dtype", "bool"),
            ColumnType::Float64 => ("dtype", "float64"),
            ColumnType::ListUtf8 => ("sequence", "string"),
            ColumnType::ListFloat32 => ("sequence", "float32"),
            ColumnType::ListInt32 => ("sequence", "int32"),
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct ColumnDoc {
    pub name: &'static str,
    pub kind: ColumnType,
    pub nullable: bool,
    pub description: &'static str,
}

const fn column(name: &'static str, kind: ColumnType, description: &'static str) -> ColumnDoc {
    ColumnDoc { name, kind, nullable: false, description }
}

// The key columns both tables start with.
const IMAGE_INDEX: ColumnDoc = column(
    "image_index",
    ColumnType::Utf8,
    "NIH image file name (e.g. `00000013_005.png`): the key to join with the NIH images and metadata, and between the two tables.",
);
const PATIENT_ID: ColumnDoc = column("patient_id", ColumnType::UInt32, "NIH patient id.");
const VIEW_POSITION: ColumnDoc = column("view_position", ColumnType::Utf8, "`PA` or `AP`, from the NIH metadata.");
const OFFICIAL_SPLIT: ColumnDoc = ColumnDoc {
    name: "official_split",
    kind: ColumnType::Utf8,
    nullable: true,
    description: "NIH's official patient-disjoint split: `train_val` or `test` (null if the split lists were not used).",
};

pub const PAIR_COLUMNS: [ColumnDoc; 15] = [
    IMAGE_INDEX,
    PATIENT_ID,
    VIEW_POSITION,
    OFFICIAL_SPLIT,
    column("label", ColumnType::Utf8, "One of the 14 NIH findings or `No Finding`."),
    column("nih_label", ColumnType::Bool, "True when NIH's report-derived labels assert this label for the image."),
    column("confidence", ColumnType::Float64, "Model's probability that the finding is present: the mean of `p_yes` over the label's paraphrased questions (calibrated per label when the card says so)."),
    column("agreement", ColumnType::Float64, "Probability that the model agrees with NIH: `confidence` when `nih_label` is true, `1 - confidence` otherwise."),
    column("consistency", ColumnType::Float64, "Share of the label's questions whose yes/no vote matches the ensemble majority (1.0 = unanimous)."),
    column("trust_class", ColumnType::Utf8, "`trusted`, `review`, `suspect` or `likely_mislabeled`, from `agreement` and the thresholds below."),
    column("flags", ColumnType::ListUtf8, "Zero or more of `hard_case`, `low_consistency`, `support_device_confounder`."),
    column("support_devices", ColumnType::ListUtf8, "Support devices the model sees in the image (image-level, repeated on each of its rows; the device logits are in the `images` config)."),
    column("question_ids", ColumnType::ListUtf8, "Ids of the label's questions (`Label#k`, k-th paraphrase of the prompt set)."),
    column("question_logit_yes", ColumnType::ListFloat32, "Raw logit of the \"Yes\" answer token per question, aligned with `question_ids`."),
    column("question_logit_no", ColumnType::ListFloat32, "Raw logit of the \"No\" answer token per question; `p_yes = 1 / (1 + exp(logit_no - logit_yes))`."),
];

/// The image-level table: one row per image, with its chest2err-shaped error trace.
pub const IMAGE_COLUMNS: [ColumnDoc; 18] = [
    IMAGE_INDEX,
    PATIENT_ID,
    VIEW_POSITION,
    OFFICIAL_SPLIT,
    column("nih_findings", ColumnType::ListUtf8, "The findings NIH asserts (the reference list; `No Finding` is an empty list)."),
    column("model_findings", ColumnType::ListUtf8, "The findings whose `confidence` reaches the presence threshold (the candidate list)."),
    column(
        "support_devices",
        ColumnType::ListUtf8,
        "Support devices the model sees in the image: a device whose questions' mean p_yes reaches the threshold.",
    ),
    column(
        "device_question_ids",
        ColumnType::ListUtf8,
        "Ids of the support-device questions (`device#k`, k-th paraphrase of the prompt set).",
    ),
    column("device_logit_yes", ColumnType::ListFloat32, "Raw \"Yes\" logits of the device questions, aligned with `device_question_ids`."),
    column("device_logit_no", ColumnType::ListFloat32, "Raw \"No\" logits of the device questions."),
    column("error_score", ColumnType::Float64, "exp(-K / tau): 1.0 when the model and NIH agree on every finding."),
    column("k_total", ColumnType::UInt32, "K: the number of error tuples (at most 24)."),
    column(
        "error_category",
        ColumnType::ListInt32,
        "Per tuple: 1 = false prediction (NIH asserts, the model rejects), 2 = omission (the model finds, NIH left out), 3 = location (S2: the model places the finding where NIH's box of it cannot be).",
    ),
    column("error_anatomy", ColumnType::ListInt32, "Per tuple: anatomy region, 0-8 (see the anatomy table)."),
    column(
        "error_concept",
        ColumnType::ListInt32,
        "Per tuple: the finding, as its position in the 15-label vocabulary (0 = Atelectasis ... 13 = Hernia).",
    ),
    column("error_nih_item", ColumnType::ListInt32, "Per tuple: position of the finding in `nih_findings`, or -1."),
    column("error_model_item", ColumnType::ListInt32, "Per tuple: position of the finding in `model_findings`, or -1."),
    column(
        "per_category",
        ColumnType::ListInt32,
        "Tuple counts per category 1-5 (false prediction, omission, location, severity, comparison); location tuples come with S2.",
    ),
];

const fn nullable(name: &'static str, kind: ColumnType, description: &'static str) -> ColumnDoc {
    ColumnDoc { name, kind, nullable: true, description }
}

/// S2 (Diagnose): appended to the pair table after every S1 column, which keeps its name, type
/// and meaning, so an S1 reader reads an S2 release unchanged.
pub const DIAGNOSE_COLUMNS: [ColumnDoc; 19] = [
    nullable("location_side", ColumnType::Utf8, "`right` or `left`: the patient's side the model states, the one side it answers yes to (null when it says yes to both or to neither, and for findings asked no side: No Finding and the whole-chest findings)."),
    nullable("side_p_right", ColumnType::Float64, "p_yes of the question whether the finding is in the patient's right lung."),
    nullable("side_p_left", ColumnType::Float64, "p_yes of the question whether the finding is in the patient's left lung."),
    nullable("location_zone", ColumnType::Utf8, "`upper`, `middle` or `lower`: the lung zone the model states, the one zone it answers yes to (null when it says yes to several or to none, or no zone is asked)."),
    nullable("zone_p_upper", ColumnType::Float64, "p_yes of the upper-zone question."),
    nullable("zone_p_middle", ColumnType::Float64, "p_yes of the middle-zone question."),
    nullable("zone_p_lower", ColumnType::Float64, "p_yes of the lower-zone question."),
    nullable("box_status", ColumnType::Utf8, "What the grounding answer held: `ok`, `no_box`, `unparseable` or `outside_image` (clipped to the image). Null where no box was asked: NIH does not assert the finding, or the spec does not box it."),
    nullable("box_x1", ColumnType::Float64, "The model's box (its first, when it gave several), left edge, in the original image's pixels (NIH's frame)."),
    nullable("box_y1", ColumnType::Float64, "Top edge of the model's box, original pixels."),
    nullable("box_x2", ColumnType::Float64, "Right edge of the model's box, original pixels."),
    nullable("box_y2", ColumnType::Float64, "Bottom edge of the model's box, original pixels."),
    nullable("box_answer", ColumnType::Utf8, "The grounding answer as the model wrote it (greedy decoding, special tokens kept), for rereading every box."),
    nullable("box_truncated", ColumnType::Bool, "True when the answer hit the spec's `max_new_tokens` before its end."),
    column("signs", ColumnType::ListUtf8, "The finding's radiographic signs in the spec's vocabulary (empty when it has none)."),
    column("sign_logit_yes", ColumnType::ListFloat32, "Raw \"Yes\" logit per sign question, aligned with `signs`."),
    column("sign_logit_no", ColumnType::ListFloat32, "Raw \"No\" logit per sign question, aligned with `signs`."),
    column("signs_seen", ColumnType::ListUtf8, "The signs whose p_yes reaches the spec's `seen_min`."),
    nullable("no_sign_seen", ColumnType::Bool, "True when NIH asserts the finding and the model sees none of its signs; null where the finding has no signs or NIH does not assert it."),
];

/// S3 (Reason): appended to the pair table after S2's columns.
pub const REASON_COLUMNS: [ColumnDoc; 8] = [
    column("reasoning_text", ColumnType::Utf8, "The model's reasoning about this row's finding: the `<think>` part of its answer, or the whole answer when it did not follow the format. Generated text, not NIH's."),
    nullable("reasoning_answer", ColumnType::Utf8, "The `<answer>` part as the model wrote it: yes/no, or a list of findings (null when missing)."),
    column("reasoning_parsed", ColumnType::Bool, "True when the answer part was found and not empty."),
    nullable("reasoning_says", ColumnType::Bool, "What the answer says of this row's label: a bare yes or no, or whether a findings list asserts it (read by the report labeler); null when unparsed or hedged."),
    nullable("reasoning_agrees", ColumnType::Bool, "Whether `reasoning_says` matches the row's yes/no score (`confidence` at or above the finding presence threshold); null when `reasoning_says` is."),
    column("reasoning_disagrees", ColumnType::Bool, "The flag: true when the reasoning's answer contradicts the row's score."),
    column("reasoning_tokens", ColumnType::UInt32, "New tokens the model generated for this answer."),
    column("reasoning_truncated", ColumnType::Bool, "True when the answer hit `prompts.reasoning.max_new_tokens`."),
];

/// The seven columns of one consistency trace (S3, S4), named with a prefix.
macro_rules! trace_columns {
    ($prefix:literal, $what:literal) => {
        [
            column(concat!($prefix, "_score"), ColumnType::Float64, concat!("exp(-K / tau) of ", $what, ": 1.0 when nothing contradicts.")),
            column(concat!($prefix, "_k"), ColumnType::UInt32, concat!("K: the tuples of ", $what, " (at most 24).")),
            column(concat!($prefix, "_category"), ColumnType::ListInt32, "Per tuple: 1 = false finding (the text asserts what the reference lacks), 2 = omission (the reference holds what the text leaves out), 3 = location (the text's side contradicts S2's)."),
            column(concat!($prefix, "_anatomy"), ColumnType::ListInt32, "Per tuple: anatomy region, 0-8 (see the anatomy table)."),
            column(concat!($prefix, "_concept"), ColumnType::ListInt32, "Per tuple: the finding, as its position in the 15-label vocabulary."),
            column(concat!($prefix, "_reference_item"), ColumnType::ListInt32, "Per tuple: position of the finding in the reference list, or -1."),
            column(concat!($prefix, "_candidate_item"), ColumnType::ListInt32, "Per tuple: the sentence of the report (S4), or the image's row (S3), responsible; -1 for an omission."),
        ]
    };
}

/// S3 on the image table: the answers traced against the model's own yes/no findings.
pub const REASON_TRACE_COLUMNS: [ColumnDoc; 7] = trace_columns!("reasoning_error", "the image's S3 answers against its yes/no scores");

/// S4 on the image table: the report and its two traces.
pub const REPORT_COLUMNS: [ColumnDoc; 20] = {
    let head = [
        column("report_text", ColumnType::Utf8, "A report-style paragraph the model wrote from the image alone. The model's paraphrase: NIH does not release its reports, and none of this text is NIH's."),
        column("report_tokens", ColumnType::UInt32, "New tokens the model generated."),
        column("report_truncated", ColumnType::Bool, "True when the report hit `prompts.report.max_new_tokens`."),
        column("report_sentences", ColumnType::UInt32, "Sentences the labeler read in it."),
        column("report_findings", ColumnType::ListUtf8, "Findings the report asserts, as the rule-based labeler reads it (`label-report`)."),
        column("report_uncertain", ColumnType::ListUtf8, "Findings the report hedges (\"possible\", \"cannot be excluded\")."),
    ];
    let nih = trace_columns!("report_nih", "the report against NIH's findings");
    let model = trace_columns!("report_model", "the report against the model's yes/no findings");
    let mut out = [head[0]; 20];
    let mut i = 0;
    while i < 20 {
        out[i] = if i < 6 {
            head[i]
        } else if i < 13 {
            nih[i - 6]
        } else {
            model[i - 13]
        };
        i += 1;
    }
    out
};

/// A second opinion (`second_opinion:` in the spec): appended to the pair table after every other
/// column. The release's `confidence` ... `flags` are then the two families' joint row.
pub const SECOND_OPINION_COLUMNS: [ColumnDoc; 7] = [
    column(
        "primary_confidence",
        ColumnType::Float64,
        "The primary model's own confidence (the spec's `model`), as a release of it alone would give it.",
    ),
    column("primary_trust_class", ColumnType::Utf8, "The primary model's own trust class, from its own agreement and the thresholds."),
    column(
        "second_confidence",
        ColumnType::Float64,
        "The second model's confidence (`second_opinion`, another family): the mean of its `p_yes` over the same questions.",
    ),
    column("second_trust_class", ColumnType::Utf8, "The second model's own trust class, from its own agreement and the thresholds."),
    column(
        "second_question_logit_yes",
        ColumnType::ListFloat32,
        "The second model's raw \"Yes\" logit per question, aligned with `question_ids`.",
    ),
    column("second_question_logit_no", ColumnType::ListFloat32, "The second model's raw \"No\" logit per question."),
    column("family_agreement", ColumnType::Float64, "How far the two families agree: 1 - |primary_confidence - second_confidence|."),
];

/// Confident learning (`signal.confident_learning` in the spec): appended to the pair table after
/// every other column. A second view of the row, from NIH's own labels, beside the zero-shot one.
pub const CONFIDENT_LEARNING_COLUMNS: [ColumnDoc; 2] = [
    nullable(
        "cl_confidence",
        ColumnType::Float64,
        "The probability that NIH's label is right by a probe trained on NIH's labels over the model's image features, out of fold (folds split by patient): the probe's p for a positive label, 1 - p for a negative one. Null where the finding has too few positives for a probe.",
    ),
    nullable(
        "cl_label_issue",
        ColumnType::Bool,
        "True when confident learning names this label an issue: the probe confidently contradicts NIH, counted and pruned by the finding's estimated noise rate. Null where `cl_confidence` is.",
    ),
];

/// Confident learning's verdicts per image (`signal.confident_learning`): appended to the image
/// table after every other column, beside the answers' error trace.
pub const CONFIDENT_LEARNING_IMAGE_COLUMNS: [ColumnDoc; 2] = [
    column(
        "cl_false_labels",
        ColumnType::ListUtf8,
        "The findings NIH lists for the image that confident learning names label issues: the probe, trained on NIH's labels out of fold, confidently says absent. In vocabulary order; \"No Finding\" is left out, as in the error trace.",
    ),
    column(
        "cl_omissions",
        ColumnType::ListUtf8,
        "The findings NIH left out that confident learning names label issues: the probe confidently says present. In vocabulary order; \"No Finding\" is left out.",
    ),
];

/// Which later series' columns a release carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ColumnSet {
    pub diagnose: bool,
    pub reason: bool,
    pub report: bool,
    pub second_opinion: bool,
    pub confident_learning: bool,
}

impl ColumnSet {
    pub fn of(spec: &crate::release_spec::ReleaseSpec) -> ColumnSet {
        let prompts = &spec.prompts;
        ColumnSet {
            diagnose: prompts.diagnoses(),
            reason: prompts.reasoning.is_some(),
            report: prompts.report.is_some(),
            second_opinion: spec.second_opinion.is_some(),
            confident_learning: spec.signal.confident_learning.is_some(),
        }
    }
}

/// The pair table's columns: S1's, then S2's when the release diagnoses (and in every S3 release,
/// null where it does not), then S3's, then a second opinion's, then confident learning's.
pub fn pair_columns(set: ColumnSet) -> Vec<ColumnDoc> {
    let diagnose: &[ColumnDoc] = if set.diagnose || set.reason { &DIAGNOSE_COLUMNS } else { &[] };
    let reason: &[ColumnDoc] = if set.reason { &REASON_COLUMNS } else { &[] };
    let second: &[ColumnDoc] = if set.second_opinion { &SECOND_OPINION_COLUMNS } else { &[] };
    let confident: &[ColumnDoc] = if set.confident_learning { &CONFIDENT_LEARNING_COLUMNS } else { &[] };
    PAIR_COLUMNS.iter().chain(diagnose).chain(reason).chain(second).chain(confident).copied().collect()
}

/// The image table's columns: S1's, then S3's trace, then S4's report, then confident learning's.
pub fn image_columns(set: ColumnSet) -> Vec<ColumnDoc> {
    let reason: &[ColumnDoc] = if set.reason { &REASON_TRACE_COLUMNS } else { &[] };
    let report: &[ColumnDoc] = if set.report { &REPORT_COLUMNS } else { &[] };
    let confident: &[ColumnDoc] = if set.confident_learning { &CONFIDENT_LEARNING_IMAGE_COLUMNS } else { &[] };
    IMAGE_COLUMNS.iter().chain(reason).chain(report).chain(confident).copied().collect()
}

/// Whether a table's schema holds a column (the batch builders add the columns it names).
pub fn has_column(schema: &SchemaRef, name: &str) -> bool {
    schema.column_with_name(name).is_some()
}

pub fn schema_of(columns: &[ColumnDoc]) -> SchemaRef {
    Arc::new(Schema::new(columns.iter().map(|c| Field::new(c.name, c.kind.arrow(), c.nullable)).collect::<Vec<_>>()))
}

pub fn pair_schema() -> SchemaRef {
    schema_of(&PAIR_COLUMNS)
}

pub fn image_schema() -> SchemaRef {
    schema_of(&IMAGE_COLUMNS)
}
