//! `bpals-release build SPEC`: a release directory from a spec.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::{BuilderIdArg, CacheDirArg, JobsArg, JsonArg, OfflineArg, ProgressArg};
use bpals_release::pipeline::{self, demo_banner, BuildOptions};
use bpals_release::signing::Signer;
use bpals_release::{inputs, release_spec::gates};

#[derive(Args)]
pub struct BuildArgs {
    /// The release spec (YAML).
    spec: PathBuf,
    /// Release directory to write [default: releases/<release id>].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print the resolved plan (stages, keys, cache hits) and stop: nothing is scored or written.
    #[arg(long)]
    dry_run: bool,
    #[command(flatten)]
    json: JsonArg,
    /// Sign the release with this private key (PEM; EC P-256 or P-384) before it is moved into
    /// place. A password-protected key takes its password from BPALS_SIGN_KEY_PASSWORD, or
    /// asks on the terminal.
    #[arg(long, value_name = "KEY.pem")]
    sign_key: Option<PathBuf>,
    #[command(flatten)]
    builder: BuilderIdArg,
    #[command(flatten)]
    pub(super) run: RunArgs,
}

/// The flags of every command that scores images: `build` and `infer`.
#[derive(Args)]
pub struct RunArgs {
    /// Refuse demo inputs (embedded sample, fixture scorer, random weights, unpinned files).
    #[arg(long)]
    publishable: bool,
    #[command(flatten)]
    jobs: JobsArg,
    #[command(flatten)]
    cache_dir: CacheDirArg,
    #[command(flatten)]
    progress: ProgressArg,
    #[command(flatten)]
    offline: OfflineArg,
    /// Requests in flight at once to an OpenAI-compatible server (backend `openai`) [default:
    /// the spec's model.concurrency, else 16].
    #[arg(long, value_name = "N")]
    concurrency: Option<usize>,
    /// Images the native engine scores in one pass, for the model and a native second opinion
    /// alike [default: each one's images_per_pass key, else 1]. Several fill a GPU; the pass size
    /// can move the scores' last bits, so build.lock records it and `rebuild --audit` repeats it.
    #[arg(long, value_name = "N")]
    images_per_pass: Option<usize>,
    /// Hash the model's weights even when the digest cache knows them (a publishable build
    /// always does).
    #[arg(long)]
    verify_cache: bool,
}

impl RunArgs {
    /// Loads the spec and the files it names, with --concurrency and --images-per-pass applied.
    pub fn load(&self, spec: &std::path::Path) -> anyhow::Result<inputs::ResolvedSpec> {
        let mut spec = inputs::load(spec)?;
        if let Some(n) = self.concurrency {
            spec.set_request_concurrency(n)?;
        }
        if let Some(n) = self.images_per_pass {
            spec.set_images_per_pass(n)?;
        }
        Ok(spec)
    }

    pub fn options(&self, out: PathBuf) -> BuildOptions {
        BuildOptions {
            out,
            jobs: self.jobs.get(),
            cache_dir: self.cache_dir.get(),
            publishable: self.publishable,
            progress: self.progress.enabled(),
            offline: self.offline.offline,
            signer: None,
            verify_cache: self.verify_cache,
        }
    }
}

pub fn run(args: BuildArgs) -> anyhow::Result<ExitCode> {
    let spec = args.run.load(&args.spec)?;
    let out = args.out.clone().unwrap_or_else(|| PathBuf::from("releases").join(&spec.release.id));
    let mut options = args.run.options(out);
    if let Some(path) = &args.sign_key {
        // Before any work: a wrong key or password costs nothing.
        let key = super::load_signing_key(path)?;
        options.signer = Some(std::sync::Arc::new(Signer { key, builder_id: args.builder.builder_id.clone() }));
    }
    if args.dry_run {
        args.json.print(&pipeline::plan(&spec, &options)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let demo = gates::demo_reasons(&spec);
    if !demo.is_empty() && !options.publishable {
        eprint!("{}", demo_banner(&demo));
    }
    let report = pipeline::build(&spec, &options, &|line| eprintln!("{line}"))?;
    args.json.print(&report)?;
    Ok(ExitCode::SUCCESS)
}
