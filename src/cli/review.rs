//! `bpals-release review`: plan an expert review of a release's doubted rows, export it to Label
//! Studio, and import the reviewers' answers as gold labels.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};

use super::JsonArg;
use bpals_release::files::{check_file, Claim, OutDir, Protected};
use bpals_release::review::{self, label_studio, plan, Budget, PlanOptions, ReviewPlan};

#[derive(Args)]
pub struct ReviewArgs {
    #[command(subcommand)]
    command: ReviewCommand,
}

#[derive(Subcommand)]
enum ReviewCommand {
    /// Choose the rows to review: the signal's most doubted rows, labels taking turns, and a
    /// seeded random control share to measure the lift against. Writes PLAN.json and PLAN.csv.
    Plan(PlanArgs),
    /// Write a plan's rows as Label Studio tasks (one per image) and its labeling configuration.
    Export(ExportArgs),
    /// Read Label Studio's JSON export: one gold value per row (majority of definite answers),
    /// in the gold format `eval` and `calibrate` read, and a report with reviewer agreement.
    Import(ImportArgs),
}

#[derive(Args)]
struct PlanArgs {
    /// The release directory.
    release: PathBuf,
    /// Rows to review: a number, or a share of the split such as 10%.
    #[arg(long, value_parser = Budget::parse)]
    budget: Budget,
    /// The split to plan over [default: full if the release has one, else trial].
    #[arg(long)]
    split: Option<String>,
    /// Seed of the random control draw.
    #[arg(long, default_value_t = 20260526)]
    seed: u64,
    /// Share of the budget drawn at random as the control.
    #[arg(long, default_value_t = plan::DEFAULT_CONTROL_SHARE)]
    control_share: f64,
    /// Which view ranks the rows: both (the release's trust classes), the model's answers
    /// alone, or confident learning alone (a release built with it).
    #[arg(long, value_enum, default_value_t = RankView::Both)]
    rank_by: RankView,
    /// Where to write the plan (JSON); the CSV goes beside it with the extension .csv.
    #[arg(long, default_value = "review-plan.json")]
    out: PathBuf,
}

#[derive(Clone, Copy, ValueEnum)]
enum RankView {
    Both,
    Answers,
    ConfidentLearning,
}

#[derive(Clone, Copy, ValueEnum)]
enum Tool {
    /// Label Studio's JSON task import and a labeling configuration (tested with 1.23.2).
    LabelStudio,
}

#[derive(Args)]
struct ExportArgs {
    /// The release directory the plan was made for.
    release: PathBuf,
    /// The plan written by `review plan`.
    #[arg(long)]
    plan: PathBuf,
    #[arg(long, value_enum, default_value_t = Tool::LabelStudio)]
    to: Tool,
    /// The folder holding the images, served by Label Studio's local-files serving.
    #[arg(long, required_unless_present = "image_url_prefix", conflicts_with = "image_url_prefix")]
    images: Option<PathBuf>,
    /// The folder Label Studio's LOCAL_FILES_DOCUMENT_ROOT names [default: --images itself].
    #[arg(long, requires = "images")]
    document_root: Option<PathBuf>,
    /// Images served elsewhere: this URL prefix, then each image's file name.
    #[arg(long, value_name = "URL")]
    image_url_prefix: Option<String>,
    /// Show reviewers the model's confidence and trust class beside each question. Off by
    /// default: reviewers who see the model's opinion tend to agree with it.
    #[arg(long)]
    show_model: bool,
    /// The folder to write tasks.json and labeling-config.xml into.
    #[arg(long)]
    out: PathBuf,
}

#[derive(Args)]
struct ImportArgs {
    /// Label Studio's JSON export of the project.
    export: PathBuf,
    /// The plan the tasks were exported from: every task must come from it.
    #[arg(long)]
    plan: Option<PathBuf>,
    /// The gold labels to write (image_index,label,value); the report goes beside it as .report.json.
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    json: JsonArg,
}

pub fn run(args: ReviewArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        ReviewCommand::Plan(a) => run_plan(a),
        ReviewCommand::Export(a) => run_export(a),
        ReviewCommand::Import(a) => run_import(a),
    }
}

fn run_plan(a: PlanArgs) -> anyhow::Result<ExitCode> {
    // Before any work: the plan and its CSV overwrite only an earlier plan's.
    check_file(&a.out, "--out", "a review plan", &|head| head.contains(plan::PLAN_FORMAT))?;
    check_file(&plan::csv_path(&a.out), "--out", "a review plan's CSV", &|head| head.starts_with("image_index,label,nih_label,arm,"))?;
    let rank_by = match a.rank_by {
        RankView::Both => plan::RankBy::Both,
        RankView::Answers => plan::RankBy::Answers,
        RankView::ConfidentLearning => plan::RankBy::ConfidentLearning,
    };
    let options = PlanOptions { budget: a.budget, split: a.split, seed: a.seed, control_share: a.control_share, rank_by };
    let plan = review::plan_release(&a.release, &options)?;
    let (json, csv) = plan.to_files()?;
    let csv_path = plan::csv_path(&a.out);
    review::write_all(&[(&a.out, &json), (&csv_path, &csv)])?;
    let s = &plan.summary;
    println!(
        "{} rows of {} in the `{}` split of release {}: {} chosen by the signal, {} random control; {} images",
        plan.budget, plan.split_rows, plan.split, plan.release_id, s.targeted, s.control, s.images
    );
    for (tier, n) in &s.by_tier {
        println!("  {tier}: {n}");
    }
    println!("wrote {} and {}", a.out.display(), csv_path.display());
    Ok(ExitCode::SUCCESS)
}

const EXPORT_TASKS: &str = "tasks.json";
const EXPORT_CONFIG: &str = "labeling-config.xml";

/// A folder's contents are ours when they are among `names` (what the command writes there).
fn only_files(names: &'static [&'static str]) -> impl Fn(&Path) -> Result<(), String> {
    move |dir: &Path| {
        let foreign: Vec<String> = std::fs::read_dir(dir)
            .map_err(|e| format!("cannot be listed: {e}"))?
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .filter(|n| !names.contains(&n.as_str()))
            .collect();
        if foreign.is_empty() {
            return Ok(());
        }
        Err(format!("holds files this command did not write ({}); it writes only {}", foreign.join(", "), names.join(" and ")))
    }
}

fn run_export(a: ExportArgs) -> anyhow::Result<ExitCode> {
    let Tool::LabelStudio = a.to;
    let (plan, plan_sha256) = ReviewPlan::read(&a.plan)?;
    plan.check_release(&a.plan, &a.release, &review::manifest_bytes(&a.release)?)?;
    let images = match (&a.images, &a.image_url_prefix) {
        (Some(dir), _) => {
            label_studio::ImageSource::LocalFiles { dir: dir.clone(), document_root: a.document_root.clone().unwrap_or(dir.clone()) }
        }
        (None, Some(prefix)) => label_studio::ImageSource::UrlPrefix(prefix.clone()),
        (None, None) => unreachable!("clap requires --images or --image-url-prefix"),
    };
    // Before any work: the export folder holds nothing but an earlier export, and is clear of
    // the release and the images it points at.
    let mut protected = vec![Protected { what: "the release", path: &a.release }];
    if let Some(dir) = &a.images {
        protected.push(Protected { what: "the images", path: dir });
    }
    let is_ours = only_files(&[EXPORT_TASKS, EXPORT_CONFIG]);
    let _claimed = OutDir::claim(&a.out, &Claim { option: "--out", replaces: false, is_ours: &is_ours, protected: &protected })?;
    let export = label_studio::export(&plan, &plan_sha256, &images, a.show_model)?;
    let (tasks, config) = (a.out.join(EXPORT_TASKS), a.out.join(EXPORT_CONFIG));
    review::write_all(&[(&tasks, &export.tasks), (&config, export.config.as_bytes())])?;
    println!(
        "{} tasks ({} images, {} questions; the model's opinion {}) in {}; labeling configuration in {}",
        export.images,
        export.images,
        export.questions,
        if a.show_model { "shown" } else { "hidden" },
        tasks.display(),
        config.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn run_import(a: ImportArgs) -> anyhow::Result<ExitCode> {
    let plan = a.plan.as_deref().map(ReviewPlan::read).transpose()?;
    let plan_ref = match (&a.plan, &plan) {
        (Some(path), Some((plan, digest))) => Some((path.as_path(), plan, digest.as_str())),
        _ => None,
    };
    // The gold file and its report overwrite only an earlier import's (the report says so).
    let report_path = a.out.with_extension("report.json");
    let earlier_import = |head: &str| head.contains("\"export_file\"") && head.contains("\"gold_rows\"");
    check_file(&report_path, "--out", "an import report", &earlier_import)?;
    let gold_is_ours = |head: &str| head.starts_with("image_index,label,value") && report_path.is_file();
    check_file(&a.out, "--out", "a gold file", &gold_is_ours)?;
    let (gold, report) = review::answers::import(&a.export, plan_ref)?;
    let mut report_json = serde_json::to_vec_pretty(&report)?;
    report_json.push(b'\n');
    review::write_all(&[(&a.out, &gold), (&report_path, &report_json)])?;
    a.json.print(&report)?;
    eprintln!("wrote {} ({} gold rows) and {}", a.out.display(), report.gold_rows, report_path.display());
    Ok(ExitCode::SUCCESS)
}
