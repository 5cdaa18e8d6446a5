//! `bpals-release sign DIR --key KEY.pem`: signs a finished release.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::{BuilderIdArg, JsonArg};
use bpals_release::signing::{self, RunDetails};

#[derive(Args)]
pub struct SignArgs {
    /// The release directory (it must verify against its manifest).
    dir: PathBuf,
    /// The private key (PEM; EC P-256 or P-384). A password-protected key takes its password
    /// from BPALS_SIGN_KEY_PASSWORD, or asks on the terminal.
    #[arg(long, value_name = "KEY.pem")]
    key: PathBuf,
    #[command(flatten)]
    builder: BuilderIdArg,
    #[command(flatten)]
    json: JsonArg,
}

#[derive(serde::Serialize)]
struct Signed {
    dir: PathBuf,
    #[serde(flatten)]
    outcome: signing::SignOutcome,
}

impl std::fmt::Display for Signed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let o = &self.outcome;
        writeln!(f, "signed {}: {} files, key {} ({})", self.dir.display(), o.files_signed, o.fingerprint, o.curve)?;
        writeln!(f, "  wrote release.sig and provenance.intoto.jsonl; check with:")?;
        writeln!(f, "  bpals-release verify {} --public-key KEY.pub.pem", self.dir.display())
    }
}

pub fn run(args: SignArgs) -> anyhow::Result<ExitCode> {
    let key = super::load_signing_key(&args.key)?;
    // Signed after the build: the provenance has no run times to state.
    let run = RunDetails { builder_id: args.builder.builder_id, ..RunDetails::default() };
    let outcome = signing::sign_release(&args.dir, &key, &run)?;
    args.json.print(&Signed { dir: args.dir, outcome })?;
    Ok(ExitCode::SUCCESS)
}
