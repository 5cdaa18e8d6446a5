//! The dataset card (`README.md`): HF front matter generated from typed structs, then a body
//! rendered by minijinja from the templates folder. License texts come from the same folder.

pub mod citation;
pub mod croissant;
mod front_matter;
pub mod location_plots;
pub mod markdown;
pub mod narrative;
pub mod plots;

use std::path::Path;

use minijinja::{path_loader, Environment};
use serde::Serialize;

pub use front_matter::{size_category, FrontMatter};

use crate::infer::ScorerIdentity;
use crate::release_spec::series::SeriesEntry;
use crate::release_spec::ReleaseSpec;
use crate::shard::{image_columns, pair_columns, ColumnSet, ShardFile};
use crate::signal::trace::{TraceStats, ANATOMY, CATEGORIES};
use crate::signal::SignalStats;
use crate::trial::TrialSample;

#[derive(Debug, thiserror::Error)]
pub enum CardError {
    #[error("card template {}: {message}", path.display())]
    Template { path: std::path::PathBuf, message: String },
    #[error("card front matter")]
    FrontMatter(#[source] serde_saphyr::ser::Error),
}

/// One table's files within a split.
#[derive(Debug, Clone, Serialize)]
pub struct TableFacts {
    pub rows: u64,
    pub bytes: u64,
    pub shards: Vec<ShardFile>,
}

impl TableFacts {
    /// Sizes are read back from the written files under `dir`.
    pub fn new(dir: &Path, rows: usize, shards: Vec<ShardFile>) -> Self {
        let bytes = shards.iter().map(|f| std::fs::metadata(dir.join(&f.path)).map(|m| m.len()).unwrap_or(0)).sum();
        TableFacts { rows: rows as u64, bytes, shards }
    }
}

/// One of the release's two tables as the Hub configures it (`default`: a row per (image, label)
/// pair; `images`: a row per image): where its shards are, its columns and its key.
pub(crate) struct TableConfig {
    pub name: &'static str,
    pub folder: &'static str,
    pub columns: Vec<crate::shard::ColumnDoc>,
    pub key: &'static [&'static str],
    pub description: &'static str,
    pub facts: fn(&SplitFacts) -> &TableFacts,
}

/// The pair table is the default config; the image table (error traces) is `images`.
pub(crate) fn table_configs(set: ColumnSet) -> [TableConfig; 2] {
    [
        TableConfig {
            name: "default",
            folder: "data",
            columns: pair_columns(set),
            key: &["image_index", "label"],
            description: "One row per (image, label) pair: NIH's label and the model's trust signal over it.",
            facts: |s| &s.pairs,
        },
        TableConfig {
            name: "images",
            folder: "data/images",
            columns: image_columns(set),
            key: &["image_index"],
            description: "One row per image: the findings NIH asserts, those the model sees, and the error trace between them.",
            facts: |s| &s.images,
        },
    ]
}

/// One split as the card describes it: its pair table and its image table.
#[derive(Debug, Clone, Serialize)]
pub struct SplitFacts {
    pub name: String,
    pub pairs: TableFacts,
    pub images: TableFacts,
    pub stats: SignalStats,
    pub trace: TraceStats,
}

/// Everything the card says, gathered by the build from the other stages' outputs.
#[derive(Debug, Clone, Serialize)]
pub struct CardInput<'a> {
    #[serde(skip)]
    pub spec: &'a ReleaseSpec,
    /// The spec as build.lock records it, with the files it names read (the calibration table):
    /// what the templates see as `spec`.
    #[serde(rename = "spec")]
    pub spec_json: serde_json::Value,
    pub demo_reasons: &'a [String],
    /// What demo weights are, when the model has them ("random weights", ...).
    pub demo_weights: Option<&'static str>,
    pub scorer: &'a ScorerIdentity,
    pub series: &'a [SeriesEntry],
    pub images: usize,
    pub candidates: usize,
    pub capped: bool,
    pub splits: Vec<SplitFacts>,
    pub trial: Option<&'a TrialSample>,
    /// The Markdown evaluation section, when the spec names a gold file.
    pub evaluation: Option<String>,
    /// The plots written into the release, in the order the card shows them.
    pub plots: Vec<plots::PlotFile>,
    /// S2's section: location and signs.
    pub diagnose: Option<DiagnoseCard>,
    /// S3's and S4's sections: the reasoning and the reports.
    pub narrative: Option<narrative::NarrativeCard>,
    /// How much of the curated set experts have looked at.
    pub coverage: Coverage,
    /// A two-family release: the second model and each family's figures.
    pub second_opinion: Option<SecondOpinionCard>,
    /// Confident learning's view, where the spec asks for it: per finding, the estimated noise and
    /// the issues named.
    pub confident_learning: Option<ConfidentLearningCard>,
}

/// The card's account of confident learning over every image the build scored.
#[derive(Debug, Clone, Serialize)]
pub struct ConfidentLearningCard {
    pub images: usize,
    /// What a feature vector is, and its length.
    pub features: &'static str,
    pub dims: usize,
    pub folds: usize,
    pub fold_seed: u64,
    pub grid: Vec<f64>,
    pub findings: Vec<ConfidentFindingCard>,
    /// The joint rule over the answers and confident learning, where the spec names one.
    pub rule: Option<JointRuleCard>,
}

/// One finding's row of the card's confident-learning table.
#[derive(Debug, Clone, Serialize)]
pub struct ConfidentFindingCard {
    pub finding: String,
    /// NIH's positives and negatives of the finding among the images (None where no probe was
    /// fitted).
    pub positives: Option<u64>,
    pub negatives: Option<u64>,
    /// The estimated shares of NIH's positives that are wrong and of its negatives that miss the
    /// finding (None where no probe was fitted).
    pub positives_wrong: Option<f64>,
    pub negatives_missed: Option<f64>,
    /// Issues named among NIH's positives and among its negatives.
    pub issues_positive: usize,
    pub issues_omitted: usize,
    /// Why no probe was fitted.
    pub skipped: Option<String>,
}

/// The card's account of a second opinion: who the two models are, and on the main split each
/// family's classes alone beside the joint ones.
#[derive(Debug, Clone, Serialize)]
pub struct SecondOpinionCard {
    pub primary_family: String,
    pub second: ScorerIdentity,
    pub second_family: String,
    pub second_weight_license: String,
    /// What the second model's weights are, when they are a demo's.
    pub second_demo_weights: Option<&'static str>,
    pub split: String,
    pub rows: usize,
    /// Per trust class (in [`crate::vocab::TrustClass::ALL`] order): (name, primary alone,
    /// second alone, joint).
    pub classes: Vec<(String, usize, usize, usize)>,
    /// Rows whose families give opposite answers (`families_disagree`).
    pub disagree: usize,
    /// The mean of `family_agreement` over the split's rows.
    pub mean_family_agreement: f64,
    /// The fitted joint rule the release combines its families by, if the spec names one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub joint_rule: Option<JointRuleCard>,
}

/// The card's account of a fitted joint rule: where it came from, how many labels have a fit of
/// their own, and each family alone beside the release on the build's gold.
#[derive(Debug, Clone, Serialize)]
pub struct JointRuleCard {
    /// The path as the spec wrote it.
    pub file: String,
    pub fitted_on: String,
    /// Labels fitted on their own reads, on the pooled reads, and left at the mean.
    pub own: usize,
    pub pooled: usize,
    pub mean: usize,
    pub min_each_class: usize,
    /// The pooled rule's weights, when it has any.
    pub pooled_weights: Option<crate::signal::joint_rule::Weights>,
    /// (view, AUROC, mislabel AP) for each family alone and the release, where the build
    /// evaluates, to three decimals ("n/a" where the gold cannot tell).
    pub figures: Vec<(String, String, String)>,
    /// Judged rows judged out-of-fold, and rows held out from the fit.
    pub cross_fitted_rows: usize,
    pub held_out_rows: usize,
}

fn three_decimals(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.3}"))
}

impl JointRuleCard {
    pub fn new(file: &str, rule: &crate::signal::joint_rule::JointRule, report: Option<&crate::eval::EvalReport>) -> Self {
        let [(_, own), (_, pooled), (_, mean)] = rule.sources();
        let row =
            |(name, m): (&str, &crate::eval::FamilyMetrics)| (name.to_string(), three_decimals(m.auroc), three_decimals(m.mislabel.ap));
        let figures = match rule.second_view {
            crate::signal::joint_rule::SecondView::Family => report.and_then(|r| r.families.as_ref()).map_or_else(Vec::new, |f| {
                [("primary model", &f.primary), ("second opinion", &f.second), ("both (the release)", &f.joint)]
                    .into_iter()
                    .map(row)
                    .collect()
            }),
            crate::signal::joint_rule::SecondView::ConfidentLearning => report.and_then(|r| r.views.as_ref()).map_or_else(Vec::new, |v| {
                [("the answers", &v.answers), ("confident learning", &v.confident_learning), ("both (the release)", &v.both)]
                    .into_iter()
                    .map(row)
                    .collect()
            }),
        };
        let fit = report.and_then(|r| r.joint_rule.as_ref());
        JointRuleCard {
            file: file.to_string(),
            fitted_on: rule.fitted_on.clone(),
            own,
            pooled,
            mean,
            min_each_class: crate::signal::joint_rule::MIN_EACH_CLASS,
            pooled_weights: rule.pooled.weights,
            figures,
            cross_fitted_rows: fit.map_or(0, |j| j.cross_fitted_rows),
            held_out_rows: fit.map_or(0, |j| j.held_out_rows),
        }
    }
}

/// Curated images with an expert reference: NIH's boxes, and the gold labels the build
/// evaluates against.
#[derive(Debug, Clone, Serialize)]
pub struct Coverage {
    pub with_boxes: usize,
    /// None when the build has no gold labels.
    pub with_gold: Option<usize>,
    /// What the gold is, as the card names it.
    pub gold: Option<String>,
}

/// The giving pledge as of the release date, for the card and the license text.
#[derive(Debug, Clone, Serialize)]
pub struct PledgeCard {
    /// The rate in force on the release date (0 before the schedule starts), as written ("1").
    pub percent: String,
    /// The date that rate took effect.
    pub since: Option<String>,
    pub goal_percent: Option<String>,
}

impl PledgeCard {
    fn new(spec: &ReleaseSpec) -> Option<PledgeCard> {
        let pledge = spec.pledge.as_ref()?;
        let step = pledge.step_on(&spec.release.date);
        Some(PledgeCard {
            percent: step.map_or(0.0, |s| s.percent).to_string(),
            since: step.map(|s| s.from.clone()),
            goal_percent: pledge.goal_percent.map(|g| g.to_string()),
        })
    }
}

/// What the card's S2 section shows.
#[derive(Debug, Clone, Serialize)]
pub struct DiagnoseCard {
    pub split: String,
    /// Rows of the split whose finding was asked for a box, and what the answers held.
    pub boxed_rows: usize,
    pub box_status: Vec<(String, usize)>,
    pub truncated: usize,
    /// Per finding with signs: its asserted rows and those where the model sees none.
    pub signs: Vec<SignSummary>,
    /// Location tuples (error category 3) over the split's images.
    pub location_tuples: u32,
    /// The location evaluation's Markdown table, when the source has reference boxes.
    pub location_eval: Option<String>,
    pub figures: Vec<plots::PlotFile>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SignSummary {
    pub finding: String,
    pub signs: Vec<String>,
    pub asserted_rows: usize,
    pub no_sign_seen: usize,
}

/// Renders the card and the license text for the spec's tier: (README.md, LICENSE.md).
pub fn render(input: &CardInput<'_>) -> Result<(String, String), CardError> {
    let dir = &input.spec.card.templates_dir;
    let mut env = Environment::new();
    env.set_loader(path_loader(dir));
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_keep_trailing_newline(true);
    // Every printed string is text (see `markdown`), unless the template marks it otherwise.
    env.set_formatter(|out, state, value| match value.as_str() {
        Some(s) if !value.is_safe() => out.write_str(&markdown::text(s)).map_err(minijinja::Error::from),
        _ => minijinja::escape_formatter(out, state, value),
    });
    env.add_filter("code", |value: minijinja::Value| minijinja::Value::from_safe_string(markdown::code(&value.to_string())));
    env.add_filter("unpinned_kernels", |scorer: minijinja::Value| minijinja::Value::from_safe_string(unpinned_kernels_note(&scorer)));
    let template_err = |name: &str, e: minijinja::Error| CardError::Template { path: dir.join(name), message: format!("{e:#}") };
    let pledge = PledgeCard::new(input.spec);
    let license_name = format!("licenses/{}.md", input.spec.release.tier.name());
    let license = env
        .get_template(&license_name)
        .and_then(|t| t.render(minijinja::context! { spec => input.spec_json, pledge => pledge }))
        .map_err(|e| template_err(&license_name, e))?;
    let extra: Vec<String> = input
        .spec
        .card
        .extra_sections
        .iter()
        .map(|name| {
            env.get_template(name)
                .and_then(|t| t.render(minijinja::context! { spec => input.spec_json, pledge => pledge }))
                .map_err(|e| template_err(name, e))
        })
        .collect::<Result<_, _>>()?;
    let front = FrontMatter::new(input).to_yaml().map_err(CardError::FrontMatter)?;
    let describe = |columns: &[crate::shard::schema::ColumnDoc]| -> Vec<minijinja::Value> {
        columns
            .iter()
            .map(|c| minijinja::context! { name => c.name, type => c.kind.display(), nullable => c.nullable, description => c.description })
            .collect()
    };
    let questions: Vec<_> = input.spec.prompts.questions();
    let template = &input.spec.card.template;
    let body = env
        .get_template(template)
        .and_then(|t| {
            t.render(minijinja::context! {
                card => input,
                front_matter => front,
                columns => describe(&pair_columns(ColumnSet::of(input.spec))),
                image_columns => describe(&image_columns(ColumnSet::of(input.spec))),
                anatomy => ANATOMY,
                categories => CATEGORIES,
                questions => questions,
                extra_sections => extra,
                pledge => pledge,
                tag => input.spec.publish.tag_for(&input.spec.release),
                citations => minijinja::context! {
                    release => citation::RELEASE,
                    release_bibtex => citation::RELEASE.bibtex(),
                    nih => citation::NIH,
                    nih_bibtex => citation::NIH.bibtex(),
                    nih_source => citation::NIH_SOURCE,
                },
            })
        })
        .map_err(|e| template_err(template, e))?;
    Ok((body, license))
}

/// The templates folder must exist before any work starts.
pub fn check_templates(dir: &Path, template: &str) -> Result<(), CardError> {
    let path = dir.join(template);
    if !path.is_file() {
        return Err(CardError::Template { path, message: "no such template".into() });
    }
    Ok(())
}

/// The sentence the card's reproducibility line adds where the model scored on the CPU under
/// other kernels than the engine pins (`bpals_vlm::cpu_kernels`), or nothing.
fn unpinned_kernels_note(scorer: &minijinja::Value) -> String {
    let scorer = serde_json::to_value(scorer).unwrap_or_default();
    let unpinned = bpals_vlm::cpu_kernels::unpinned(&scorer["preprocessing"]["cpu_kernels"]);
    if unpinned.is_empty() {
        return String::new();
    }
    let settings: Vec<String> = unpinned.iter().map(|s| markdown::code(s)).collect();
    format!(
        " The model scored on the CPU under other kernels than the engine pins ({}): a rebuild repeats its scores only under \
         the same settings, on a processor that takes the same branches.",
        settings.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CPU scorer under `MKL_CBWR=AUTO` gets the sentence, naming the setting; a pinned one and
    /// a scorer without CPU kernels (a GPU run, the fixture) get nothing, so their cards keep
    /// their bytes.
    #[test]
    fn the_reproducibility_line_names_kernels_off_their_pins() {
        let scorer =
            |kernels: serde_json::Value| minijinja::Value::from_serialize(serde_json::json!({"preprocessing": {"cpu_kernels": kernels}}));
        let pinned = serde_json::json!({"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2"});
        assert_eq!(unpinned_kernels_note(&scorer(pinned.clone())), "");
        assert_eq!(unpinned_kernels_note(&minijinja::Value::from_serialize(serde_json::json!({"preprocessing": null}))), "");
        let mut auto = pinned;
        auto["MKL_CBWR"] = "AUTO".into();
        let note = unpinned_kernels_note(&scorer(auto));
        assert!(note.starts_with(" The model scored on the CPU under other kernels") && note.contains("(`MKL_CBWR=AUTO`)"), "{note}");
    }
}
