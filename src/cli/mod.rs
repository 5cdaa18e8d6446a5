//! The command line, one file per command. This file holds the flag groups several commands
//! share, each defined once so that a flag means the same thing (and reads the same
//! environment variable) wherever it appears.

pub mod access;
pub mod bench;
pub mod build;
pub mod calibrate;
pub mod curate;
pub mod describe;
pub mod diff;
pub mod doctor;
pub mod engine;
pub mod eval;
pub mod features;
pub mod fetch_nih;
pub mod infer;
pub mod install;
pub mod label_issues;
pub mod label_report;
pub mod probe;
pub mod publish;
pub mod rebuild;
pub mod review;
pub mod sign;
pub mod source;
pub mod verify;

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde::Serialize;

use bpals_release::hub;
use bpals_release::infer::CacheLocation;
use bpals_release::signing;

/// `--jobs`: how many threads work at once.
#[derive(Args)]
pub struct JobsArg {
    /// Worker threads for scoring and shard writing [default: the number of CPUs].
    #[arg(long, short = 'j')]
    jobs: Option<usize>,
}

impl JobsArg {
    pub fn get(&self) -> usize {
        self.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
}

/// `--offline`: never touch the network.
#[derive(Args)]
pub struct OfflineArg {
    /// Never touch the network: a model missing from the Hugging Face cache is an error instead
    /// of a download (also set by HF_HUB_OFFLINE=1).
    #[arg(long)]
    pub offline: bool,
}

/// `--cache-dir`: the score cache builds and sharded `infer` runs share.
#[derive(Args)]
pub struct CacheDirArg {
    /// Score cache shared by builds and sharded `infer` runs: a folder, or s3://BUCKET/PREFIX,
    /// gs://… or az://… (credentials from the provider's environment variables) [default:
    /// $XDG_CACHE_HOME/bpals-release, else ~/.cache/bpals-release].
    #[arg(long, env = "BPALS_CACHE_DIR", value_parser = CacheLocation::parse)]
    cache_dir: Option<CacheLocation>,
}

impl CacheDirArg {
    pub fn get(&self) -> CacheLocation {
        self.cache_dir.clone().unwrap_or_else(|| CacheLocation::Dir(CacheLocation::default_dir()))
    }
}

/// `--json`: the command's report as JSON on stdout instead of text.
#[derive(Args)]
pub struct JsonArg {
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

impl JsonArg {
    /// Prints `report` as JSON or as its own text rendering.
    pub fn print<T: Serialize + std::fmt::Display>(&self, report: &T) -> anyhow::Result<()> {
        if self.json {
            println!("{}", serde_json::to_string_pretty(report)?);
        } else {
            print!("{report}");
        }
        Ok(())
    }
}

/// `--no-progress`: no progress bars on stderr.
#[derive(Args)]
pub struct ProgressArg {
    /// Never draw a progress bar.
    #[arg(long)]
    no_progress: bool,
}

impl ProgressArg {
    pub fn enabled(&self) -> bool {
        !self.no_progress
    }
}

/// Where the Hub is and how hard to try.
#[derive(Args)]
pub struct HubArgs {
    /// Hub API endpoint [default: $HF_ENDPOINT, else https://huggingface.co].
    #[arg(long)]
    pub endpoint: Option<String>,
    /// Retries after a transient HTTP failure (5xx, 429, dropped connection) [default: hf-hub's 5].
    #[arg(long)]
    pub retries: Option<usize>,
    /// Seconds a request may connect or wait for data before it fails (and is retried).
    #[arg(long, value_name = "SECS", default_value_t = hub::DEFAULT_STALL_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,
    /// Seconds one call to the Hub may take in all, retries included; a transfer gets one more
    /// second per MiB it moves.
    #[arg(long, value_name = "SECS", default_value_t = hub::DEFAULT_DEADLINE.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub deadline: u64,
}

impl HubArgs {
    pub fn patience(&self) -> hub::Patience {
        hub::Patience { retries: self.retries, stall: Duration::from_secs(self.timeout), deadline: Duration::from_secs(self.deadline) }
    }
    pub fn connect(&self) -> anyhow::Result<hub::Hub> {
        Ok(hub::Hub::connect(self.endpoint.as_deref(), self.patience())?)
    }
}

/// NIH metadata files named one by one (plain or `.gz`), for `source` and `curate`.
/// The publisher's private key, for `build --sign-key` and `sign --key`.
pub fn load_signing_key(path: &std::path::Path) -> anyhow::Result<signing::SigningKey> {
    use std::io::IsTerminal;
    let password = if signing::is_encrypted(path)? {
        match std::env::var("BPALS_SIGN_KEY_PASSWORD") {
            Ok(p) => Some(zeroize_string(p)),
            Err(_) if std::io::stdin().is_terminal() => {
                Some(zeroize_string(rpassword::prompt_password(format!("password for {}: ", path.display()))?))
            }
            Err(_) => None,
        }
    } else {
        None
    };
    Ok(signing::SigningKey::load(path, password.as_deref().map(|p| p.as_str()))?)
}

fn zeroize_string(s: String) -> p256::elliptic_curve::zeroize::Zeroizing<String> {
    p256::elliptic_curve::zeroize::Zeroizing::new(s)
}

/// A public key given on the command line.
pub fn load_public_key(path: &std::path::Path) -> anyhow::Result<signing::PublicKey> {
    Ok(signing::PublicKey::load(path)?)
}

/// Who the provenance says built the release.
#[derive(Args)]
pub struct BuilderIdArg {
    /// The builder id written into the provenance: a URI naming the CI workflow that ran the
    /// build [default: a local builder that no CI vouches for].
    #[arg(long, env = "BPALS_BUILDER_ID", value_name = "URI")]
    pub builder_id: Option<String>,
}

#[derive(Args)]
pub struct NihFilesArgs {
    /// Data_Entry_2017.csv or Data_Entry_2017_v2020.csv.
    #[arg(long)]
    data_entry: PathBuf,
    /// BBox_List_2017.csv.
    #[arg(long)]
    bbox: Option<PathBuf>,
    /// train_val_list.txt (needs --test-list).
    #[arg(long, requires = "test_list")]
    train_val_list: Option<PathBuf>,
    /// test_list.txt (needs --train-val-list).
    #[arg(long, requires = "train_val_list")]
    test_list: Option<PathBuf>,
}

impl NihFilesArgs {
    pub fn get(&self) -> bpals_release::source::SourceFiles {
        bpals_release::source::SourceFiles {
            data_entry: self.data_entry.clone(),
            bbox: self.bbox.clone(),
            train_val_list: self.train_val_list.clone(),
            test_list: self.test_list.clone(),
        }
    }
}

/// `--gold` and `--format`: expert labels, for `eval` and `calibrate`.
#[derive(Args)]
pub struct GoldArgs {
    /// Expert gold labels, in the format given by --format.
    #[arg(long)]
    pub gold: PathBuf,
    #[arg(long, value_enum, default_value_t = GoldFormatArg::Generic)]
    pub format: GoldFormatArg,
}

impl GoldArgs {
    pub fn read(&self) -> anyhow::Result<bpals_release::eval::GoldSet> {
        Ok(bpals_release::eval::gold::read(&self.gold, self.format.into())?)
    }
}

/// Gold file formats.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum GoldFormatArg {
    /// A CSV with header image_index,label,value (value 0 or 1), NIH label names or "No Finding".
    Generic,
    /// Google's expert relabels of NIH images: the four-findings adjudicated labels, or the
    /// all-findings labels (one row per image, or per reader with a majority vote).
    GoogleNih,
}

impl From<GoldFormatArg> for bpals_release::release_spec::GoldFormat {
    fn from(f: GoldFormatArg) -> Self {
        match f {
            GoldFormatArg::Generic => Self::Generic,
            GoldFormatArg::GoogleNih => Self::GoogleNih,
        }
    }
}
