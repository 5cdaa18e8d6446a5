//! The command line: parses arguments and calls into the library. No logic lives here.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand};

use bpals_release::build::{self, BuildOptions};
use bpals_release::{audit, hub, infer, manifest, publish, source, spec};

/// Command groups too large to keep in this file; src/cli/ belongs to the binary, not the library.
mod cli {
    pub mod vlm;
}
use cli::vlm::{run_describe, run_probe, DescribeArgs, ProbeArgs};

#[derive(Parser)]
#[command(
    name = "bpals-release",
    version,
    about = "Build, verify and publish CXR14-BPALS releases: a trust signal over NIH ChestX-ray14 labels"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build a release directory from a spec (Parquet shards, card, manifest, lock).
    Build(BuildArgs),
    /// Fill the score cache for one shard of a spec's images, for array jobs on many machines.
    Infer(InferArgs),
    /// Re-hash a release against its manifest, locally or on the Hub; exits non-zero on any difference.
    Verify(VerifyArgs),
    /// Publish a verified release to a Hugging Face dataset repo: one commit, one tag.
    Publish(PublishArgs),
    /// Rebuild a release from its build.lock and compare every byte (an audit).
    Rebuild(RebuildArgs),
    /// Compare two releases row by row: trust-class agreement, Cohen's kappa, confidence correlation.
    Diff(DiffArgs),
    /// Ask a VLM yes/no questions about one image: JSON with logit_yes, logit_no and p_yes each.
    Probe(ProbeArgs),
    /// Let a VLM answer a free-form prompt about one image (greedy): JSON with the response.
    Describe(DescribeArgs),
    /// What this machine can run: libtorch, CUDA devices, dtypes, a spec's model, the Hub token.
    Doctor(DoctorArgs),
    /// Summarise NIH metadata files as JSON (images, patients, labels, views, boxes, splits).
    Source(SourceArgs),
    /// Evaluate a release against expert labels: JSON on stdout, optionally a Markdown section.
    Eval(EvalArgs),
    /// Fit per-label calibration of a release's confidence on expert labels; a spec can name the file.
    Calibrate(CalibrateArgs),
    /// Time the non-inference pipeline on a metadata file (see benches/pipeline.sh).
    Bench(BenchArgs),
}

#[derive(Args)]
struct CalibrateArgs {
    /// The release directory.
    dir: PathBuf,
    /// Gold labels (see `eval --help` for the formats).
    #[arg(long)]
    gold: PathBuf,
    #[arg(long, value_enum, default_value_t = GoldFormatArg::Generic)]
    format: GoldFormatArg,
    #[arg(long, value_enum, default_value_t = CalibrationMethod::Platt)]
    method: CalibrationMethod,
    /// Where to write the calibration JSON (name it in a spec as signal.calibration).
    #[arg(long)]
    out: PathBuf,
}

/// Gold file formats.
#[derive(Clone, Copy, clap::ValueEnum)]
enum GoldFormatArg {
    /// A CSV with header image_index,label,value (value 0 or 1), NIH label names.
    Generic,
    /// Google's expert relabels of NIH images: the four-findings adjudicated labels, or the
    /// all-findings labels (one row per image, or per reader with a majority vote).
    GoogleNih,
}

impl From<GoldFormatArg> for bpals_release::eval::GoldFormat {
    fn from(f: GoldFormatArg) -> Self {
        match f {
            GoldFormatArg::Generic => Self::Generic,
            GoldFormatArg::GoogleNih => Self::GoogleNih,
        }
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum CalibrationMethod {
    Platt,
    Temperature,
}

#[derive(Args)]
struct EvalArgs {
    /// The release directory.
    dir: PathBuf,
    /// Expert gold labels, in the format given by --format.
    #[arg(long)]
    gold: PathBuf,
    #[arg(long, value_enum, default_value_t = GoldFormatArg::Generic)]
    format: GoldFormatArg,
    /// Bootstrap resamples for the 95% intervals.
    #[arg(long, default_value_t = 1000)]
    bootstrap: usize,
    /// Seed of the bootstrap resampler.
    #[arg(long, default_value_t = 20260526)]
    seed: u64,
    /// Also write the Markdown section for the card here.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// A calibration file to report ECE and Brier after (see `calibrate`).
    #[arg(long)]
    calibration: Option<PathBuf>,
}

#[derive(Args)]
struct BenchArgs {
    /// Spec whose prompts, signal and output settings the bench uses.
    spec: PathBuf,
    /// NIH-format metadata, e.g. from `fixtures/gen_sample.py --metadata-only --images 112120`.
    #[arg(long)]
    data_entry: PathBuf,
    /// Folder for the shards (replaced).
    #[arg(long)]
    out: PathBuf,
    #[arg(long, short = 'j')]
    jobs: Option<usize>,
}

#[derive(Args)]
struct Common {
    /// Worker threads for scoring and shard writing [default: the number of CPUs].
    #[arg(long, short = 'j')]
    jobs: Option<usize>,
    /// Score cache folder, shared by builds and sharded `infer` runs.
    #[arg(long, env = "BPALS_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    /// Refuse demo inputs (embedded sample, fixture scorer, random weights, unpinned files).
    #[arg(long)]
    publishable: bool,
    /// Never draw a progress bar.
    #[arg(long)]
    no_progress: bool,
    /// Never touch the network: a model missing from the Hugging Face cache is an error instead
    /// of a download (also set by HF_HUB_OFFLINE=1).
    #[arg(long)]
    offline: bool,
}

#[derive(Args)]
struct BuildArgs {
    /// The release spec (YAML).
    spec: PathBuf,
    /// Release directory to write [default: releases/<release id>].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the resolved plan (stages, keys, cache hits) and stop: nothing is scored or written.
    #[arg(long)]
    dry_run: bool,
    /// Print the build report (or the plan) as JSON on stdout.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct InferArgs {
    spec: PathBuf,
    /// K/N: score only the images of shard K (0-based) of N.
    #[arg(long)]
    shard: Option<String>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
struct VerifyArgs {
    /// The release directory (or --remote).
    #[arg(required_unless_present = "remote", conflicts_with = "remote")]
    dir: Option<PathBuf>,
    /// A published release instead: ORG/NAME[@REVISION] (a branch, tag or commit; main by default).
    #[arg(long, value_name = "ORG/NAME[@REV]")]
    remote: Option<String>,
    #[command(flatten)]
    hub: HubArgs,
    /// With --remote: also download every file into this directory (checked on the way).
    #[arg(long, requires = "remote")]
    download: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Where the Hub is and how hard to try.
#[derive(Args)]
struct HubArgs {
    /// Hub API endpoint [default: $HF_ENDPOINT, else https://huggingface.co].
    #[arg(long)]
    endpoint: Option<String>,
    /// Retries after a transient HTTP failure (5xx, 429, dropped connection) [default: hf-hub's 5].
    #[arg(long)]
    retries: Option<usize>,
    /// Seconds a request may connect or wait for data before it fails (and is retried).
    #[arg(long, value_name = "SECS", default_value_t = hub::DEFAULT_STALL_TIMEOUT.as_secs())]
    timeout: u64,
}

impl HubArgs {
    fn connect(&self) -> Result<hub::Hub> {
        Ok(hub::Hub::connect(self.endpoint.as_deref(), self.retries, std::time::Duration::from_secs(self.timeout))?)
    }
}

#[derive(Args)]
struct DoctorArgs {
    /// A release spec whose model to look for.
    spec: Option<PathBuf>,
}

#[derive(Args)]
struct DiffArgs {
    /// Release A (e.g. ours).
    a: PathBuf,
    /// Release B (e.g. a build with your own VLM).
    b: PathBuf,
    /// How many changed rows to list.
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Also write the Markdown report here.
    #[arg(long)]
    markdown: Option<PathBuf>,
}

#[derive(Args)]
struct RebuildArgs {
    /// The release directory (with its build.lock).
    dir: PathBuf,
    /// Compare the rebuild with DIR and report; exits non-zero on any mismatch.
    #[arg(long, required = true)]
    audit: bool,
    /// The spec the release was built from [default: specs/<the spec file named in build.lock>].
    #[arg(long)]
    spec: Option<PathBuf>,
    /// Reuse this score cache instead of rerunning inference in a fresh one.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Rebuild here and keep it [default: a temporary directory, removed when the audit passes].
    #[arg(long)]
    scratch: Option<PathBuf>,
    #[arg(long, short = 'j')]
    jobs: Option<usize>,
    /// Never download the model; use only the Hugging Face cache.
    #[arg(long)]
    offline: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct PublishArgs {
    /// The release directory (it must verify).
    dir: PathBuf,
    /// Dataset repo ORG/NAME [default: the spec's publish.repo].
    #[arg(long)]
    repo: Option<String>,
    #[command(flatten)]
    hub: HubArgs,
    /// Print the plan (files new, changed, unchanged or removed; the tag) and change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Publish a demo build anyway: only to an --endpoint other than the public Hub (staging, tests).
    #[arg(long)]
    allow_demo: bool,
}

#[derive(Args)]
struct SourceArgs {
    /// Data_Entry_2017.csv or Data_Entry_2017_v2020.csv.
    #[arg(long)]
    data_entry: PathBuf,
    /// BBox_List_2017.csv.
    #[arg(long)]
    bbox: Option<PathBuf>,
    /// train_val_list.txt (needs --test-list).
    #[arg(long, requires = "test_list")]
    train_val_list: Option<PathBuf>,
    /// test_list.txt (needs --train-val-list).
    #[arg(long, requires = "train_val_list")]
    test_list: Option<PathBuf>,
}

fn default_cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    base.join("bpals-release")
}

fn jobs_or_cpus(jobs: Option<usize>) -> usize {
    jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

fn options(common: &Common, out: PathBuf) -> BuildOptions {
    BuildOptions {
        out,
        jobs: jobs_or_cpus(common.jobs),
        cache_dir: common.cache_dir.clone().unwrap_or_else(default_cache_dir),
        publishable: common.publishable,
        progress: !common.no_progress,
        offline: common.offline,
    }
}

fn demo_banner(reasons: &[String]) -> String {
    let mut s = String::from("DEMO BUILD: not publishable, `publish` will refuse it, because\n");
    for r in reasons {
        s.push_str(&format!("  - {r}\n"));
    }
    s
}

fn run_build(args: BuildArgs) -> Result<ExitCode> {
    let spec = spec::load(&args.spec)?;
    let out = args.out.unwrap_or_else(|| PathBuf::from("releases").join(&spec.release.id));
    let opts = options(&args.common, out);
    if args.dry_run {
        let plan = build::plan(&spec, &opts)?;
        if args.json {
            println!("{}", serde_json::to_string_pretty(&plan)?);
        } else {
            print!("{plan}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let demo = spec::gates::demo_reasons(&spec);
    if !demo.is_empty() && !opts.publishable {
        eprint!("{}", demo_banner(&demo));
    }
    let report = build::build(&spec, &opts, &|line| eprintln!("{line}"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!("built release {} in {}", report.release_id, report.out.display());
    println!("  scorer: {}", report.scorer);
    println!(
        "  {} images, {} rows; {} images scored, {} from the cache",
        report.images, report.rows, report.scored_images, report.cached_images
    );
    for f in &report.files {
        match f.rows {
            Some(rows) => println!("  {:<44} {:>10} bytes {:>8} rows  {}", f.path, f.bytes, rows, &f.sha256[..16]),
            None => println!("  {:<44} {:>10} bytes {:>14}  {}", f.path, f.bytes, "", &f.sha256[..16]),
        }
    }
    for n in &report.notes {
        println!("  note: {n}");
    }
    if !report.demo_reasons.is_empty() {
        print!("{}", demo_banner(&report.demo_reasons));
    }
    Ok(ExitCode::SUCCESS)
}

fn run_infer(args: InferArgs) -> Result<ExitCode> {
    let spec = spec::load(&args.spec)?;
    let shard = args.shard.as_deref().map(infer::parse_shard).transpose()?;
    let opts = options(&args.common, PathBuf::new());
    let report = build::infer_shard(&spec, &opts, shard)?;
    let in_run = report.scores.iter().filter(|s| s.is_some()).count();
    println!(
        "infer {}{}: {in_run} images, {} scored, {} already cached (cache: {})",
        spec.release.id,
        args.shard.map(|s| format!(" shard {s}")).unwrap_or_default(),
        report.computed,
        report.cached,
        opts.cache_dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

fn run_verify(args: VerifyArgs) -> Result<ExitCode> {
    if let Some(remote) = &args.remote {
        return run_verify_remote(remote, &args);
    }
    let dir = args.dir.as_ref().expect("clap requires DIR without --remote");
    let report = manifest::verify(dir).map_err(anyhow::Error::msg)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if report.ok() {
        println!("ok: release {} in {}: {} files match the manifest", report.release_id, dir.display(), report.files_checked);
    } else {
        println!("FAILED: release {} in {}: {} problem(s)", report.release_id, dir.display(), report.problems.len());
        for p in &report.problems {
            println!("  {p}");
        }
    }
    Ok(if report.ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn run_verify_remote(remote: &str, args: &VerifyArgs) -> Result<ExitCode> {
    let repo = hub::RepoRef::parse(remote)?;
    let client = args.hub.connect()?;
    let report = audit::remote::verify_remote(&client, &repo, args.download.as_deref(), &|m| eprintln!("{m}"))?;
    let at = format!("{}@{} ({})", report.repo, report.revision, hub::short(&report.commit));
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if report.ok() {
        println!(
            "ok: release {} {} at {at}: {} files match the manifest ({} by the Hub's sha256 ETag, {} downloaded and hashed)",
            report.release_id, report.version, report.files_checked, report.by_etag, report.by_download
        );
    } else {
        println!("FAILED: release {} at {at}: {} problem(s)", report.release_id, report.problems.len());
        for p in &report.problems {
            println!("  {p}");
        }
    }
    Ok(if report.ok() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn run_doctor(args: DoctorArgs) -> Result<ExitCode> {
    let spec = match &args.spec {
        Some(path) => Some(spec::load(path)?),
        None => None,
    };
    let report = bpals_release::doctor::report(spec.as_ref());
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(ExitCode::SUCCESS)
}

fn run_diff(args: DiffArgs) -> Result<ExitCode> {
    let report = bpals_release::diff::diff(&args.a, &args.b, args.top).map_err(anyhow::Error::msg)?;
    if let Some(path) = &args.markdown {
        std::fs::write(path, bpals_release::diff::to_markdown(&report)).with_context(|| format!("writing {}", path.display()))?;
    }
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(ExitCode::SUCCESS)
}

fn run_rebuild(args: RebuildArgs) -> Result<ExitCode> {
    let options = audit::rebuild::RebuildOptions {
        spec: args.spec,
        cache_dir: args.cache_dir,
        scratch: args.scratch,
        jobs: jobs_or_cpus(args.jobs),
        progress: false,
        offline: args.offline,
    };
    let report = audit::rebuild::rebuild_audit(&args.dir, &options, &|m| eprintln!("{m}"))?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.render());
    }
    Ok(if report.pass { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

fn run_publish(args: PublishArgs) -> Result<ExitCode> {
    let options = publish::PublishOptions {
        repo: args.repo,
        endpoint: args.hub.endpoint,
        dry_run: args.dry_run,
        allow_demo: args.allow_demo,
        retries: args.hub.retries,
        stall_timeout: std::time::Duration::from_secs(args.hub.timeout),
    };
    let outcome = publish::publish(&args.dir, &options, &|m| eprintln!("{}", m.trim_end()))?;
    let plan = &outcome.plan;
    if args.dry_run {
        println!("dry run: nothing was changed on {}", plan.endpoint);
    } else {
        let commit = outcome.commit.as_deref().map_or("no new commit".to_string(), |c| format!("commit {}", hub::short(c)));
        let tagged = outcome.tagged.as_deref().map(hub::short).unwrap_or("-");
        println!("published {} to {} ({commit}); tag {} names {tagged}", args.dir.display(), plan.repo, plan.tag);
    }
    Ok(ExitCode::SUCCESS)
}

fn run_source(args: SourceArgs) -> Result<ExitCode> {
    let files = source::SourceFiles {
        data_entry: args.data_entry,
        bbox: args.bbox,
        train_val_list: args.train_val_list,
        test_list: args.test_list,
    };
    let table = source::load_files(&files)?;
    let summary = source::summarize(&table).context("summarising the NIH table")?;
    println!("{}", serde_json::to_string_pretty(&summary)?);
    Ok(ExitCode::SUCCESS)
}

fn run_eval(args: EvalArgs) -> Result<ExitCode> {
    let gold = bpals_release::eval::gold::read(&args.gold, args.format.into())?;
    let options = bpals_release::eval::EvalOptions { bootstrap_resamples: args.bootstrap, seed: args.seed, ..Default::default() };
    let calibration = match &args.calibration {
        Some(path) => {
            let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            Some(serde_json::from_slice(&bytes).with_context(|| format!("{} is not a calibration file", path.display()))?)
        }
        None => None,
    };
    let report = bpals_release::eval::evaluate(&args.dir, &args.gold, &gold, &options, calibration.as_ref()).map_err(anyhow::Error::msg)?;
    if let Some(path) = &args.markdown {
        std::fs::write(path, bpals_release::eval::to_markdown(&report)).with_context(|| format!("writing {}", path.display()))?;
    }
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(ExitCode::SUCCESS)
}

fn run_calibrate(args: CalibrateArgs) -> Result<ExitCode> {
    use bpals_release::signal::calibration::Method;
    let gold = bpals_release::eval::gold::read(&args.gold, args.format.into())?;
    let method = match args.method {
        CalibrationMethod::Platt => Method::Platt,
        CalibrationMethod::Temperature => Method::Temperature,
    };
    let table = bpals_release::eval::fit_calibration(&args.dir, &args.gold, &gold, method).map_err(anyhow::Error::msg)?;
    std::fs::write(&args.out, bpals_release::manifest::to_json_bytes(&table)).with_context(|| format!("writing {}", args.out.display()))?;
    println!("wrote {:?} calibration for {} labels ({}) to {}", method, table.labels.len(), table.fitted_on, args.out.display());
    Ok(ExitCode::SUCCESS)
}

fn run_bench(args: BenchArgs) -> Result<ExitCode> {
    let spec = spec::load(&args.spec)?;
    let jobs = jobs_or_cpus(args.jobs);
    let report = bpals_release::bench::run(&spec, &args.data_entry, &args.out, jobs)?;
    println!("{}", serde_json::to_string_pretty(&report)?);
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Build(a) => run_build(a),
        Command::Infer(a) => run_infer(a),
        Command::Verify(a) => run_verify(a),
        Command::Publish(a) => run_publish(a),
        Command::Rebuild(a) => run_rebuild(a),
        Command::Diff(a) => run_diff(a),
        Command::Probe(a) => run_probe(a),
        Command::Describe(a) => run_describe(a),
        Command::Doctor(a) => run_doctor(a),
        Command::Source(a) => run_source(a),
        Command::Eval(a) => run_eval(a),
        Command::Calibrate(a) => run_calibrate(a),
        Command::Bench(a) => run_bench(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            // Errors can carry text from a server; the Hub token never goes out with them.
            eprintln!("{}", hub::token::redact(&format!("error: {e:#}")));
            ExitCode::FAILURE
        }
    }
}
