//! `bpals-release fetch-nih DIR`: NIH's image archives, downloaded, extracted and checked.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::{JsonArg, ProgressArg};
use bpals_release::source::fetch::{self, FetchOptions};

#[derive(Args)]
pub struct FetchNihArgs {
    /// Where to put the data: DIR/downloads (the archives) and DIR/images (the PNGs): point a
    /// spec's source.images there.
    dir: PathBuf,
    /// Which of NIH's 12 archives, like 1-3,7 [default: all].
    #[arg(long, default_value = "1-12")]
    parts: String,
    /// Extract only the images this list names (one file name per line, as a spec's
    /// selection.images): the 4,628-image baseline needs a small part of the 42 GB on disk.
    #[arg(long, value_name = "LIST")]
    images_from: Option<PathBuf>,
    /// Then check every image the release's images.sha256 lists against the extracted files.
    #[arg(long, value_name = "RELEASE_DIR")]
    check_against: Option<PathBuf>,
    /// A mirror of NIH's Box share with the same file names [default: NIH's share].
    #[arg(long, value_name = "URL", default_value = fetch::NIH_BOX)]
    base_url: String,
    /// Retries after a dropped connection, a 5xx or a 429 (the wait doubles from one second).
    #[arg(long, default_value_t = 5)]
    retries: usize,
    /// Seconds a request may connect or wait for data before it fails and is retried.
    #[arg(long, value_name = "SECS", default_value_t = 120)]
    timeout: u64,
    #[command(flatten)]
    progress: ProgressArg,
    #[command(flatten)]
    json: JsonArg,
}

/// The NIH folder also holds the metadata files a user put there: fetch-nih writes only inside
/// its `downloads/` and `images/`, so those must be folders; the rest is left alone.
fn fetch_folders(dir: &std::path::Path) -> Result<(), String> {
    for name in ["downloads", "images"] {
        let path = dir.join(name);
        if std::fs::metadata(&path).is_ok_and(|m| !m.is_dir()) {
            return Err(format!("holds {name}, which is not a folder (fetch-nih writes the archives and images into {name}/)"));
        }
    }
    Ok(())
}

pub fn run(args: FetchNihArgs) -> anyhow::Result<ExitCode> {
    // One fetch at a time into a folder: two would extract the same archive over each other.
    let claim = bpals_release::files::Claim { option: "DIR", replaces: false, is_ours: &fetch_folders, protected: &[] };
    let _claimed = bpals_release::files::OutDir::claim(&args.dir, &claim)?;
    let options = FetchOptions {
        dir: args.dir.clone(),
        base_url: args.base_url,
        parts: fetch::parse_parts(&args.parts)?,
        images: args.images_from.as_deref().map(fetch::read_image_list).transpose()?,
        retries: args.retries,
        stall: std::time::Duration::from_secs(args.timeout),
        backoff: std::env::var("BPALS_FETCH_BACKOFF_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .map_or(std::time::Duration::from_secs(1), std::time::Duration::from_millis),
        progress: args.progress.enabled(),
    };
    let report = fetch::fetch(&options, &|m| eprintln!("{m}"))?;
    args.json.print(&report)?;
    if let Some(release) = &args.check_against {
        let check = fetch::check_against(&args.dir.join("images"), release)?;
        args.json.print(&check)?;
        if !check.ok() {
            return Ok(ExitCode::FAILURE);
        }
    }
    Ok(ExitCode::SUCCESS)
}
