//! `bpals-release bench scoring`: images and prefill tokens per second, and MFU, of a full-size
//! model known only by its config (random weights made on the device). benches/gpu.sh runs it
//! on Qwen2.5-VL-7B.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;

use crate::cli::engine::{DeviceArg, DtypeArg};

#[derive(Args)]
pub struct BenchScoringArgs {
    /// The model's config.json (only the architecture is read; no weights are loaded).
    #[arg(long)]
    pub config: PathBuf,
    /// Its preprocessor_config.json (patch size, pixel bounds, normalisation), or a
    /// processor_config.json holding them as `image_processor` (how Gemma 4 ships them).
    #[arg(long)]
    pub preprocessor: PathBuf,
    #[arg(long, value_enum, default_value_t = DeviceArg::Auto)]
    pub device: DeviceArg,
    /// auto: bf16 on CUDA, f32 on the CPU.
    #[arg(long, value_enum, default_value_t = DtypeArg::Auto)]
    pub dtype: DtypeArg,
    /// Images timed (after the warm-up).
    #[arg(long, default_value_t = 8)]
    pub images: usize,
    #[arg(long, default_value_t = 1)]
    pub warmup: usize,
    /// Width and height of the synthetic images.
    #[arg(long, default_value_t = 1024)]
    pub size: u32,
    /// Questions per image (a release's prompt set: 57 with the sides and zones of S2).
    #[arg(long, default_value_t = 57)]
    pub questions: usize,
    /// Tokens per question after the shared image prefix: N for every question, or MIN-MAX
    /// spread evenly over them (a release's 57 run from about 16 to about 28; a pass pads them to
    /// the longest).
    #[arg(long, default_value = "24", value_parser = question_tokens)]
    pub question_tokens: (usize, usize),
    /// The device's dense peak for the dtype, in TFLOP/s, for MFU (H100 SXM bf16: 989).
    #[arg(long)]
    pub peak_tflops: Option<f64>,
    /// Keep only this many text layers and vision blocks, every width kept: the full-size shapes
    /// on a machine that cannot hold the whole model (the CPU slice of benches/vlm.sh).
    #[arg(long)]
    pub layers: Option<usize>,
    /// Images to project a run time for [default: the 4,628-image baseline].
    #[arg(long, default_value_t = 4628)]
    pub project_images: usize,
    /// How the questions meet the image prefix: `copied` per question (the old path), `shared`,
    /// held once, its part of the attention by matrix products (how releases are scored on the
    /// CPU), or `fused`, held once, that part through libtorch's fused kernel (on a GPU).
    #[arg(long, value_enum, default_value_t = PrefixAttentionArg::Copied)]
    pub prefix_attention: PrefixAttentionArg,
    /// Images scored in one pass, their suffixes in one batch (with `--prefix-attention shared` or
    /// `fused`).
    /// Timed and warm-up images are rounded up to whole passes.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=bpals_release::release_spec::MAX_IMAGES_PER_PASS as u64))]
    pub images_per_pass: u64,
    /// How the questions' rows go between the layers' attention (with `shared` or `fused`):
    /// `deduplicated`, their real tokens only, the tokens an image's questions share from their
    /// start once, and in the last layers each question's last token only (how releases are
    /// scored); `packed`, the same but every question's tokens its own; or `padded` to the
    /// longest question through every layer (the old way). The last two are kept to measure
    /// against.
    #[arg(long, value_enum, default_value_t = SuffixRowsArg::Deduplicated)]
    pub suffix_rows: SuffixRowsArg,
    /// After timing, score the first pass's images each alone and compare the bits with the
    /// pass's (reported under `invariance`).
    #[arg(long)]
    pub check_invariance: bool,
    /// After timing, score the first pass once more, waiting for the device around each part of
    /// every layer (attention, linear attention, experts and their steps): where the time goes
    /// (reported under `parts`; the waits make that pass slower).
    #[arg(long)]
    pub parts: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum SuffixRowsArg {
    Padded,
    Packed,
    Deduplicated,
}

/// `N` or `MIN-MAX`, each at least 1.
fn question_tokens(text: &str) -> Result<(usize, usize), String> {
    let count = |part: &str| match part.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("expected a whole number of tokens, at least 1, not '{part}'")),
    };
    let (shortest, longest) = match text.split_once('-') {
        Some((low, high)) => (count(low)?, count(high)?),
        None => (count(text)?, count(text)?),
    };
    if shortest > longest {
        return Err(format!("the shortest question ({shortest}) is longer than the longest ({longest})"));
    }
    Ok((shortest, longest))
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum PrefixAttentionArg {
    Copied,
    Shared,
    Fused,
}

pub fn run(args: BenchScoringArgs) -> Result<ExitCode> {
    #[cfg(feature = "vlm")]
    {
        use bpals_vlm::{engine, throughput, ModelConfig};
        let config = ModelConfig::from_json(&super::read_json(&args.config)?)
            .map_err(|e| anyhow::anyhow!("{}: key {}: {}", args.config.display(), e.key, e.message))?;
        let config = match args.layers {
            Some(layers) => throughput::slice(&config, layers),
            None => config,
        };
        let preprocessor = super::read_preprocessor(&args.preprocessor)?;
        let (device, kind) = engine::device_and_kind(args.device.choice(), args.dtype.choice())?;
        let bench = throughput::ScoringBench {
            images: args.images,
            size: args.size,
            questions: args.questions,
            question_tokens: throughput::QuestionTokens { shortest: args.question_tokens.0, longest: args.question_tokens.1 },
            warmup: args.warmup,
            peak_tflops: args.peak_tflops,
            project_images: args.project_images,
            prefix_attention: match args.prefix_attention {
                PrefixAttentionArg::Copied => bpals_vlm::shared_prefix::PrefixAttention::Copied,
                PrefixAttentionArg::Shared => bpals_vlm::shared_prefix::PrefixAttention::Shared,
                PrefixAttentionArg::Fused => bpals_vlm::shared_prefix::PrefixAttention::Fused,
            },
            images_per_pass: args.images_per_pass as usize,
            suffix_rows: match args.suffix_rows {
                SuffixRowsArg::Padded => bpals_vlm::real_tokens::SuffixRows::Padded,
                SuffixRowsArg::Packed => bpals_vlm::real_tokens::SuffixRows::Packed,
                SuffixRowsArg::Deduplicated => bpals_vlm::real_tokens::SuffixRows::Deduplicated,
            },
            check_invariance: args.check_invariance,
            parts: args.parts,
        };
        let report = throughput::run(&config, &preprocessor, device, kind, &bench)?;
        println!("{}", serde_json::to_string_pretty(&report)?);
        Ok(ExitCode::SUCCESS)
    }
    #[cfg(not(feature = "vlm"))]
    {
        let _ = args;
        Err(crate::cli::engine::no_vlm())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn question_tokens_are_a_count_or_a_range() {
        assert_eq!(super::question_tokens("24"), Ok((24, 24)));
        assert_eq!(super::question_tokens("16-28"), Ok((16, 28)));
        for bad in ["0", "", "x", "28-16", "16-", "-4"] {
            let error = super::question_tokens(bad).unwrap_err();
            assert!(error.contains("token") || error.contains("longer"), "{bad}: {error}");
        }
        assert_eq!(super::question_tokens("28-16").unwrap_err(), "the shortest question (28) is longer than the longest (16)");
    }
}
