//! `bpals-release bench prep`: images per second of PNG decode, resize and normalisation on 1, 4
//! and all CPU threads, with a model's preprocessor config; JSON on stdout.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

#[derive(Args)]
pub struct BenchPrepArgs {
    /// The model's preprocessor_config.json (patch size, pixel bounds, normalisation), or a
    /// processor_config.json holding them as `image_processor` (how Gemma 4 ships them).
    #[arg(long)]
    pub preprocessor: PathBuf,
    /// Images prepared per run (made here, 1024 x 1024 greyscale like NIH's).
    #[arg(long, default_value_t = 64)]
    pub images: usize,
    #[arg(long, default_value_t = 1024)]
    pub size: u32,
    /// Thread counts to time, comma-separated [default: 1, 4 and every CPU].
    #[arg(long, value_delimiter = ',')]
    pub threads: Vec<usize>,
}

pub fn run(args: BenchPrepArgs) -> Result<ExitCode> {
    #[cfg(feature = "vlm")]
    {
        use bpals_release::bench::preparation;
        let pre = super::read_preprocessor(&args.preprocessor)?;
        let threads = if args.threads.is_empty() {
            let all = std::thread::available_parallelism().map_or(1, usize::from);
            let mut t = vec![1, 4.min(all), all];
            t.dedup();
            t
        } else {
            args.threads
        };
        let report = preparation::run(&pre, args.images, args.size, &threads)?;
        println!("{}", serde_json::to_string_pretty(&report)?);
        Ok(ExitCode::SUCCESS)
    }
    #[cfg(not(feature = "vlm"))]
    {
        let _ = args;
        Err(crate::cli::engine::no_vlm())
    }
}
