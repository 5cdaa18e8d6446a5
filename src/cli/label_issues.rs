//! `bpals-release label-issues`: confident learning over NIH's labels, from image features (a
//! probe per finding, out of fold, folds split by patient) or from out-of-fold probabilities
//! made elsewhere. Writes `label_issues.json`, and with features `out_of_fold.parquet`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use bpals_release::signal::confident_learning::report::{self, LabelIssues};
use bpals_release::signal::confident_learning::{self, table, ProbeSettings};
use bpals_release::vocab::LABELS;

#[derive(Args)]
#[command(group = clap::ArgGroup::new("input").required(true).args(["features", "probabilities"]))]
pub struct LabelIssuesArgs {
    /// Data_Entry_2017.csv (or its 2020 revision): each image's patient and NIH labels.
    #[arg(long)]
    data_entry: PathBuf,
    /// Parquet of image features: `image_index` and `features` (a list of floats per image).
    /// A probe per finding is fitted on them, out of fold.
    #[arg(long)]
    features: Option<PathBuf>,
    /// Parquet of out-of-fold probabilities made elsewhere: `image_index`, `finding`, `p`.
    #[arg(long, conflicts_with_all = ["folds", "fold_seed", "grid"])]
    probabilities: Option<PathBuf>,
    /// The findings to judge, comma-separated [default: all 15 NIH labels].
    #[arg(long, value_delimiter = ',')]
    findings: Vec<String>,
    /// Folds, split by patient [default: 5].
    #[arg(long)]
    folds: Option<usize>,
    /// Seeds the patients' order before they are dealt into folds [default: 0].
    #[arg(long)]
    fold_seed: Option<u64>,
    /// Inverse regularisation strengths to choose from, ascending [default: 0.001,0.01,0.1,1,10].
    #[arg(long, value_delimiter = ',')]
    grid: Vec<f64>,
    /// Folder for label_issues.json (and out_of_fold.parquet); created if missing.
    #[arg(long)]
    out: PathBuf,
}

pub fn run(args: LabelIssuesArgs) -> anyhow::Result<ExitCode> {
    let findings: Vec<String> = if args.findings.is_empty() { LABELS.map(String::from).to_vec() } else { args.findings.clone() };
    if let Some(unknown) = findings.iter().find(|f| bpals_release::vocab::label_index(f).is_none()) {
        anyhow::bail!("--findings: unknown finding {unknown:?}: expected one of {}", LABELS.join(", "));
    }
    let defaults = ProbeSettings::default();
    // The file's vectors are what they are; the probes' settings record no definition of theirs.
    let settings = ProbeSettings {
        features: defaults.features,
        folds: args.folds.unwrap_or(defaults.folds),
        fold_seed: args.fold_seed.unwrap_or(defaults.fold_seed),
        grid: if args.grid.is_empty() { defaults.grid } else { args.grid.clone() },
    };
    if let Some(problem) = settings.problem() {
        anyhow::bail!("{problem}");
    }
    let nih = bpals_release::source::load_files(&bpals_release::source::SourceFiles {
        data_entry: args.data_entry.clone(),
        ..Default::default()
    })?;
    let json_path = args.out.join("label_issues.json");
    let (issues, oof) = match (&args.features, &args.probabilities) {
        (Some(path), _) => {
            let (names, features) = table::read_features(path)?;
            eprintln!(
                "probes: {} findings x {} images x {} features, {} folds by patient, {} strengths each",
                findings.len(),
                names.len(),
                features.dims,
                settings.folds,
                settings.grid.len()
            );
            let progress = indicatif::ProgressBar::new(confident_learning::fit_count(settings.folds) as u64);
            progress.set_style(indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} fits {msg}").expect("a valid template"));
            let (issues, rows) = report::from_features(&names, &features, &nih, &findings, &settings, &|f| {
                progress.set_message(f.to_string());
                progress.inc(1);
            })?;
            progress.finish_and_clear();
            (issues, Some(table::out_of_fold_parquet(&rows)))
        }
        (None, Some(path)) => (report::from_probabilities(&table::read_probabilities(path)?, &nih, &findings)?, None),
        (None, None) => unreachable!("clap requires one input"),
    };
    let json = bpals_release::manifest::to_json_bytes(&issues);
    let oof_path = args.out.join("out_of_fold.parquet");
    let mut files: Vec<(&std::path::Path, &[u8])> = vec![(&json_path, &json)];
    if let Some(bytes) = &oof {
        files.push((&oof_path, bytes));
    }
    // Whole or not at all.
    bpals_release::review::write_all(&files)?;
    print_summary(&issues);
    println!("wrote {}{}", json_path.display(), if oof.is_some() { format!(" and {}", oof_path.display()) } else { String::new() });
    Ok(ExitCode::SUCCESS)
}

fn print_summary(issues: &LabelIssues) {
    println!("{:<20} {:>9} {:>9} {:>12} {:>12} {:>8}", "finding", "positives", "C chosen", "pos. wrong", "neg. missed", "issues");
    for f in &issues.findings {
        let chosen = match &f.probes {
            Some(p) if p.skipped.is_none() => {
                let (lo, hi) = p.chosen_c.iter().fold((f64::INFINITY, 0f64), |(lo, hi), &c| (lo.min(c), hi.max(c)));
                if lo == hi {
                    format!("{lo}")
                } else {
                    format!("{lo}-{hi}")
                }
            }
            Some(_) => "-".into(),
            None => "given".into(),
        };
        match (&f.rules, f.probes.as_ref().and_then(|p| p.skipped.as_ref())) {
            (_, Some(why)) => println!("{:<20} skipped: {why}", f.finding),
            (Some(r), None) => println!(
                "{:<20} {:>9} {:>9} {:>11.1}% {:>11.1}% {:>8}",
                f.finding,
                r.given[1],
                chosen,
                100.0 * r.positives_wrong,
                100.0 * r.negatives_missed,
                f.issues.len()
            ),
            (None, None) => {}
        }
    }
}
