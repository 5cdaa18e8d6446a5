//! `bpals-release verify DIR` or `--remote ORG/NAME[@REV]`: every file against the manifest.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::{HubArgs, JsonArg};
use bpals_release::{audit, hub, manifest};

#[derive(Args)]
pub struct VerifyArgs {
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
    #[command(flatten)]
    json: JsonArg,
}

pub fn run(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let ok = match (&args.remote, &args.dir) {
        (Some(remote), _) => {
            let repo = hub::RepoRef::parse(remote)?;
            let report = audit::remote::verify_remote(&args.hub.connect()?, &repo, args.download.as_deref(), &|m| eprintln!("{m}"))?;
            args.json.print(&report)?;
            report.ok()
        }
        (None, Some(dir)) => {
            let report = manifest::verify(dir)?;
            args.json.print(&report)?;
            report.ok()
        }
        (None, None) => unreachable!("clap requires DIR without --remote"),
    };
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
