//! `bpals-release rebuild DIR --audit`: rebuild from build.lock and compare every byte.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::{JobsArg, JsonArg, OfflineArg};
use bpals_release::audit::rebuild::{rebuild_audit, RebuildOptions};
use bpals_release::signing;

#[derive(Args)]
pub struct RebuildArgs {
    /// The release directory (with its build.lock).
    dir: PathBuf,
    /// Compare the rebuild with DIR and report; exits non-zero on any mismatch.
    #[arg(long, required = true)]
    audit: bool,
    /// The spec the release was built from [default: specs/<the spec file named in build.lock>].
    #[arg(long)]
    spec: Option<PathBuf>,
    /// Reuse this score cache instead of rerunning inference in a fresh one. (Unlike `build`,
    /// an audit never reads BPALS_CACHE_DIR: by default it reruns inference.)
    #[arg(long, value_name = "DIR")]
    reuse_cache: Option<PathBuf>,
    /// Rebuild here and keep it [default: a temporary directory, removed when the audit passes].
    #[arg(long)]
    scratch: Option<PathBuf>,
    #[command(flatten)]
    jobs: JobsArg,
    #[command(flatten)]
    offline: OfflineArg,
    /// First check the release's signature with the publisher's public key (PEM), and refuse
    /// to audit a release that is unsigned or whose signature does not hold.
    #[arg(long, value_name = "KEY.pub.pem")]
    public_key: Option<PathBuf>,
    #[command(flatten)]
    json: JsonArg,
}

pub fn run(args: RebuildArgs) -> anyhow::Result<ExitCode> {
    if let Some(path) = &args.public_key {
        let report = signing::check_dir(&args.dir, &super::load_public_key(path)?)?;
        eprint!("{report}");
        if !report.ok() || !report.signed {
            anyhow::bail!("{}: the signature does not hold with {}; not auditing", args.dir.display(), path.display());
        }
    }
    let options = RebuildOptions {
        spec: args.spec,
        cache_dir: args.reuse_cache,
        scratch: args.scratch,
        jobs: args.jobs.get(),
        progress: false,
        offline: args.offline.offline,
    };
    let report = rebuild_audit(&args.dir, &options, &|m| eprintln!("{m}"))?;
    args.json.print(&report)?;
    Ok(if report.pass { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
