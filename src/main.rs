//! The command line: the list of commands. Each lives in its own file under `src/cli/`, and
//! each is a call into the library.

mod cli;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

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
    Build(cli::build::BuildArgs),
    /// Fill the score cache for one shard of a spec's images, for array jobs on many machines.
    Infer(cli::infer::InferArgs),
    /// Re-hash a release against its manifest, locally or on the Hub, and check its signature
    /// with the publisher's public key; exits non-zero on any difference.
    Verify(cli::verify::VerifyArgs),
    /// Sign a release with the publisher's key: release.sig (OpenSSF Model Signing) and its
    /// SLSA build provenance.
    Sign(cli::sign::SignArgs),
    /// Publish a verified release to a Hugging Face dataset repo: one commit, one tag.
    Publish(cli::publish::PublishArgs),
    /// Sell access: sync paid licenses to the gated release's access requests; the sales ledger.
    Access(cli::access::AccessArgs),
    /// Rebuild a release from its build.lock and compare every byte (an audit).
    Rebuild(cli::rebuild::RebuildArgs),
    /// Compare two releases row by row: trust-class agreement, Cohen's kappa, confidence correlation.
    Diff(cli::diff::DiffArgs),
    /// Ask a VLM yes/no questions about one image: JSON with logit_yes, logit_no and p_yes each.
    Probe(cli::probe::ProbeArgs),
    /// Let a VLM answer a free-form prompt about one image (greedy): JSON with the response.
    Describe(cli::describe::DescribeArgs),
    /// What this machine can run: libtorch, CUDA devices, dtypes, a spec's model, the Hub token.
    Doctor(cli::doctor::DoctorArgs),
    /// Summarise NIH metadata files as JSON (images, patients, labels, views, boxes, splits).
    Source(cli::source::SourceArgs),
    /// Run the curation rule on real NIH metadata: the image list a spec's selection.images names.
    Curate(cli::curate::CurateArgs),
    /// Evaluate a release against expert labels: JSON on stdout, optionally a Markdown section.
    Eval(cli::eval::EvalArgs),
    /// Expert review of the doubted rows: plan it, export it to Label Studio, import the answers.
    Review(cli::review::ReviewArgs),
    /// Fit per-label calibration of a release's confidence on expert labels, or with --joint a
    /// two-family release's joint rule; a spec can name the file.
    Calibrate(cli::calibrate::CalibrateArgs),
    /// Every selected image's feature vector from the spec's model: the features file
    /// `label-issues` reads.
    Features(cli::features::FeaturesArgs),
    /// Confident learning over NIH's labels: a probe per finding on image features, out of fold
    /// (folds split by patient), and the labels its probabilities confidently contradict.
    LabelIssues(cli::label_issues::LabelIssuesArgs),
    /// Benchmarks: the pipeline, batched decoding, full-size scoring, the report labeler.
    Bench(cli::bench::BenchArgs),
    /// `bench generation`'s older name.
    #[command(hide = true)]
    BenchGeneration(cli::bench::generation::BenchGenerationArgs),
    /// `bench scoring`'s older name.
    #[command(hide = true)]
    BenchScoring(cli::bench::scoring::BenchScoringArgs),
    /// Label a radiology report: per NIH finding and device, present / absent / uncertain.
    LabelReport(cli::label_report::LabelReportArgs),
    /// `bench labeler`'s older name.
    #[command(hide = true)]
    BenchLabeler(cli::bench::labeler::BenchLabelerArgs),
    /// Download NIH ChestX-ray14's image archives (resumable), extract all or a curated list's
    /// images, and check them against a release's images.sha256.
    FetchNih(cli::fetch_nih::FetchNihArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(cli::install::CompletionsArgs),
    /// Write the man pages: bpals-release.1 and one per command.
    Man(cli::install::ManArgs),
}

fn main() -> ExitCode {
    // Before anything can start libtorch or a second thread.
    bpals_vlm::cpu_kernels::pin();
    // A reader that stops early (`bpals-release eval ... | head`) ends the command quietly, as
    // for any Unix tool, instead of a panic at the next line printed. Sockets are unaffected:
    // the standard library sends with MSG_NOSIGNAL.
    // SAFETY: setting a signal's disposition to the default, before any other thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let result = match Cli::parse().command {
        Command::Build(a) => cli::build::run(a),
        Command::FetchNih(a) => cli::fetch_nih::run(a),
        Command::Completions(a) => cli::install::completions(a, Cli::command()),
        Command::Man(a) => cli::install::man(a, Cli::command()),
        Command::Infer(a) => cli::infer::run(a),
        Command::Verify(a) => cli::verify::run(a),
        Command::Sign(a) => cli::sign::run(a),
        Command::Publish(a) => cli::publish::run(a),
        Command::Access(a) => cli::access::run(a),
        Command::Rebuild(a) => cli::rebuild::run(a),
        Command::Diff(a) => cli::diff::run(a),
        Command::Probe(a) => cli::probe::run(a),
        Command::Describe(a) => cli::describe::run(a),
        Command::Doctor(a) => cli::doctor::run(a),
        Command::Source(a) => cli::source::run(a),
        Command::Curate(a) => cli::curate::run(a),
        Command::Eval(a) => cli::eval::run(a),
        Command::Calibrate(a) => cli::calibrate::run(a),
        Command::Review(a) => cli::review::run(a),
        Command::Features(a) => cli::features::run(a),
        Command::LabelIssues(a) => cli::label_issues::run(a),
        Command::Bench(a) => cli::bench::run(a),
        Command::BenchGeneration(a) => {
            cli::bench::renamed("bench-generation");
            cli::bench::generation::run(a)
        }
        Command::BenchScoring(a) => {
            cli::bench::renamed("bench-scoring");
            cli::bench::scoring::run(a)
        }
        Command::LabelReport(a) => cli::label_report::run(a),
        Command::BenchLabeler(a) => {
            cli::bench::renamed("bench-labeler");
            cli::bench::labeler::run(a)
        }
    };
    result.unwrap_or_else(|e| {
        // Each cause once, outermost first. Errors can carry a server's text: neither the Hub
        // token nor the OpenAI-compatible server's API key goes out with them.
        let text = bpals_release::hub::token::redact(&format!("error: {e:#}"));
        eprintln!("{}", bpals_release::infer::openai::redact(&text));
        ExitCode::FAILURE
    })
}
