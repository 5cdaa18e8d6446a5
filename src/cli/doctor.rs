//! `bpals-release doctor [SPEC]`: what this machine can run.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use bpals_release::{doctor, release_spec};

#[derive(Args)]
pub struct DoctorArgs {
    /// A release spec whose model to look for.
    spec: Option<PathBuf>,
    /// A Hugging Face model directory to read as the engine would: its family, the variables its
    /// chat template reads, what the tool sets, and the prompt it renders. No weights are loaded.
    #[arg(long, value_name = "DIR")]
    model: Option<PathBuf>,
    /// The question whose prompt `--model` shows.
    #[arg(long, requires = "model", default_value = "Is there a pleural effusion in this chest X-ray?")]
    question: String,
    /// The whole report as JSON (every field), instead of the summary in words.
    #[arg(long)]
    json: bool,
}

pub fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let spec = args.spec.as_deref().map(release_spec::load).transpose()?;
    let mut report = doctor::report(spec.as_ref());
    if let Some(dir) = &args.model {
        // A directory the engine would refuse fails here with the engine's own message.
        report.model_dir = Some(doctor::model_dir(dir, &args.question)?);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{report}");
    }
    Ok(ExitCode::SUCCESS)
}
