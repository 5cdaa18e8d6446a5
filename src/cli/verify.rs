//! `bpals-release verify DIR` or `--remote ORG/NAME[@REV]`: every file against the manifest, and
//! with `--public-key`, the publisher's signature and build provenance.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use serde::Serialize;

use super::{HubArgs, JsonArg};
use bpals_release::{audit, hub, manifest, signing};

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
    /// Also check release.sig and provenance.intoto.jsonl with the publisher's public key (PEM).
    /// Get its fingerprint from the publisher, not only from the release.
    #[arg(long, value_name = "KEY.pub.pem")]
    public_key: Option<PathBuf>,
    /// Fail on an unsigned release (needs --public-key).
    #[arg(long, requires = "public_key")]
    require_signature: bool,
    #[command(flatten)]
    json: JsonArg,
}

/// The files' check, and the signature's when a key was given.
#[derive(Serialize)]
struct Verified {
    #[serde(flatten)]
    files: manifest::VerifyReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    signature: Option<signing::SignatureReport>,
    /// A signed release checked without a key: say so.
    #[serde(skip)]
    signed_unchecked: bool,
    /// A `release.sig` that is not a signature bundle at all (checked without a key).
    #[serde(skip_serializing_if = "Option::is_none")]
    signature_unreadable: Option<String>,
}

impl std::fmt::Display for Verified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.files)?;
        if let Some(signature) = &self.signature {
            write!(f, "{signature}")?;
        } else if let Some(why) = &self.signature_unreadable {
            writeln!(f, "FAILED: {why}")?;
        } else if self.signed_unchecked {
            writeln!(f, "note: the release is signed; pass --public-key KEY.pub.pem to check who signed it")?;
        }
        Ok(())
    }
}

pub fn run(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let key = args.public_key.as_deref().map(super::load_public_key).transpose()?;
    let ok = match (&args.remote, &args.dir) {
        (Some(remote), _) => {
            let repo = hub::RepoRef::parse(remote)?;
            let hub = args.hub.connect()?;
            let report = audit::remote::verify_remote(&hub, &repo, args.download.as_deref(), key.as_ref(), &|m| eprintln!("{m}"))?;
            args.json.print(&report)?;
            report.ok(args.require_signature)
        }
        (None, Some(dir)) => verify_dir(dir, key.as_ref(), args.require_signature, &args.json)?,
        (None, None) => unreachable!("clap requires DIR without --remote"),
    };
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// A signature that was checked holds; an unsigned release passes only when none is required.
fn signature_ok(report: Option<&signing::SignatureReport>, required: bool) -> bool {
    report.is_none_or(|s| s.ok() && (s.signed || !required))
}

fn verify_dir(dir: &Path, key: Option<&signing::PublicKey>, required: bool, json: &JsonArg) -> anyhow::Result<bool> {
    let report = manifest::verify(dir)?;
    let signature = key.map(|key| signing::check_dir(dir, key)).transpose()?;
    let form = signing::signature_form(dir);
    let signature_unreadable = if signature.is_none() { form.clone().err() } else { None };
    let ok = report.ok() && signature_ok(signature.as_ref(), required) && signature_unreadable.is_none();
    let signed_unchecked = form.unwrap_or(false);
    json.print(&Verified { files: report, signature, signed_unchecked, signature_unreadable })?;
    Ok(ok)
}
