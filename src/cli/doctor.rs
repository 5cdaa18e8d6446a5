//! `bpals-release doctor [SPEC]`: what this machine can run.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use bpals_release::{doctor, release_spec};

#[derive(Args)]
pub struct DoctorArgs {
    /// A release spec whose model to look for.
    spec: Option<PathBuf>,
}

pub fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let spec = args.spec.as_deref().map(release_spec::load).transpose()?;
    println!("{}", serde_json::to_string_pretty(&doctor::report(spec.as_ref()))?);
    Ok(ExitCode::SUCCESS)
}
