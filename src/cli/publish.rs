//! `bpals-release publish DIR`: one verified release, one commit, one tag on the Hub.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::HubArgs;
use bpals_release::publish;

#[derive(Args)]
pub struct PublishArgs {
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
    /// The publisher's public key (PEM): a signed release is checked with it before any upload.
    #[arg(long, value_name = "KEY.pub.pem")]
    public_key: Option<PathBuf>,
    /// Let the release commit delete files on main that are not a bpals release's (without it,
    /// publish lists them and stops).
    #[arg(long)]
    replace_foreign_files: bool,
}

pub fn run(args: PublishArgs) -> anyhow::Result<ExitCode> {
    let options = publish::PublishOptions {
        repo: args.repo,
        patience: args.hub.patience(),
        endpoint: args.hub.endpoint,
        dry_run: args.dry_run,
        allow_demo: args.allow_demo,
        public_key: args.public_key.as_deref().map(super::load_public_key).transpose()?,
        replace_foreign_files: args.replace_foreign_files,
    };
    let outcome = publish::publish(&args.dir, &options, &|m| eprintln!("{}", m.trim_end()))?;
    print!("{outcome}");
    Ok(ExitCode::SUCCESS)
}
