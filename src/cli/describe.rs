//! `bpals-release describe`: a free-form answer about one image (greedy decoding).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use bpals_vlm::Thinking;
use clap::{Args, ValueEnum};

#[derive(Args)]
pub struct DescribeArgs {
    #[command(flatten)]
    pub engine: super::engine::EngineArgs,
    #[arg(long)]
    pub image: PathBuf,
    #[arg(long)]
    pub prompt: String,
    #[arg(long, default_value_t = 2048)]
    pub max_new_tokens: usize,
    /// Let the model reason first (its chat template's enable_thinking): the reasoning block
    /// comes back in `think`, the text after it in `answer`.
    #[arg(long, value_enum, default_value_t = ThinkingArg::Off)]
    pub thinking: ThinkingArg,
}

pub fn run(args: DescribeArgs) -> Result<ExitCode> {
    #[cfg(feature = "vlm")]
    {
        let report = super::engine::open(&args.engine)?.describe(&args.image, &args.prompt, args.max_new_tokens, args.thinking.into())?;
        println!("{}", serde_json::to_string_pretty(&report)?);
        Ok(ExitCode::SUCCESS)
    }
    #[cfg(not(feature = "vlm"))]
    {
        let _ = args;
        Err(super::engine::no_vlm())
    }
}

/// `--thinking`'s values (the engine's [`Thinking`] knows nothing of the command line).
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum ThinkingArg {
    Off,
    On,
}

impl From<ThinkingArg> for Thinking {
    fn from(arg: ThinkingArg) -> Self {
        match arg {
            ThinkingArg::Off => Thinking::Off,
            ThinkingArg::On => Thinking::On,
        }
    }
}
