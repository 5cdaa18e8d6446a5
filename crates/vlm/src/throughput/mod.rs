//! Scoring throughput of a full-size model that is not on the machine: the real config, seeded
//! random weights made on the device, synthetic images, and a release's worth of questions per
//! image. Reports images and prefill tokens per second and the model FLOP utilisation (MFU)
//! against the device's dense peak. `bpals-release bench scoring`; benches/gpu.sh runs it on the
//! Qwen2.5-VL-7B config.
//! The FLOPs are counted from the config (the crate's `flops.rs`).

mod report;
mod slice;

use std::time::Instant;

use image::{DynamicImage, GrayImage, Luma};
use tch::{Device, Kind};

use super::checkpoint::ModelConfig;
use super::config::PreprocessorConfig;
use super::error::VlmError;
use super::families::ImageFeatures;
use super::flops::ImageFlops;
use super::flops::{active_parameters, flops_as_run, QuestionLayers};
use super::model::{question_tokens_held_once, PassImage, VlModel};
use super::part_clock;
use super::pixels;
use super::real_tokens::SuffixRows;
use super::shared_prefix::PrefixAttention;
use super::stage_clock::{Stage, StageClock};

pub use report::{Invariance, PartShare, Parts, ScoringBenchReport, StageTime};
pub use slice::slice;

/// What to run.
#[derive(Debug, Clone)]
pub struct ScoringBench {
    pub images: usize,
    /// Width and height of the synthetic images (NIH's are 1024 x 1024).
    pub size: u32,
    pub questions: usize,
    /// Tokens per question after the shared prefix: the question and the chat template's tail.
    pub question_tokens: QuestionTokens,
    /// Images run first and not timed (kernel selection, allocator warm-up).
    pub warmup: usize,
    /// The device's dense peak in TFLOP/s for the dtype, for MFU (None: not reported).
    pub peak_tflops: Option<f64>,
    /// Images in the release to project a run time for (the baseline: 4,628).
    pub project_images: usize,
    /// How the questions meet the image prefix (copied per question, the old path; or held once,
    /// by products or the fused kernel).
    pub prefix_attention: PrefixAttention,
    /// Images scored in one pass (the shared path; 1 with the copied one).
    pub images_per_pass: usize,
    /// How the questions' rows go between the layers' mixers (the shared path): padded to the
    /// longest question, or their real tokens only.
    pub suffix_rows: SuffixRows,
    /// After timing, score the first pass's images each alone (padded to the pass) and compare
    /// their bits with the pass's.
    pub check_invariance: bool,
    /// After timing, score the first pass once more with the part clock on
    /// (`part_clock.rs`): where a layer's time goes.
    pub parts: bool,
}

/// Tokens each question adds after the shared prefix (the question and the chat template's
/// tail): one count for every question, or counts spread evenly from the shortest to the
/// longest. A release's questions vary so: with the template's tail, the 57 of `specs/s1a.yaml`
/// run from about 16 tokens to about 28, and a pass pads its questions to the longest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuestionTokens {
    pub shortest: usize,
    pub longest: usize,
}

impl QuestionTokens {
    /// Every question `tokens` long.
    pub fn each(tokens: usize) -> QuestionTokens {
        QuestionTokens { shortest: tokens, longest: tokens }
    }

    /// Each of `questions`' tokens, the shortest first and the longest last (at least one).
    pub fn lengths(&self, questions: usize) -> Vec<usize> {
        let spread = self.longest.saturating_sub(self.shortest);
        let steps = questions.saturating_sub(1).max(1);
        (0..questions).map(|q| (self.shortest + (spread * q + steps / 2) / steps).max(1)).collect()
    }
}

/// A deterministic grey image with structure at every scale (so no kernel sees constant input).
fn synthetic_image(size: u32, seed: u32) -> DynamicImage {
    DynamicImage::ImageLuma8(GrayImage::from_fn(size, size, |x, y| {
        let v = (x.wrapping_mul(31) ^ y.wrapping_mul(17)).wrapping_add(seed.wrapping_mul(97)) % 251;
        Luma([v as u8])
    }))
}

/// Prompt ids in the layout the chat template gives: a fixed prefix, the image run, then each
/// question's own tokens, `lengths` of them. The questions begin alike as a release's do (in
/// `specs/s1a.yaml`, 20 of 57 with "Does this radiograph show", 13 with "Is there", most others
/// with "Is"): a third of them each with the same 5, 2 and 1 tokens ([`STEMS`]), never a whole
/// question; the three stems' first tokens differ, so the prefix all share ends at the image.
fn prompts(config: &ModelConfig, image_tokens: usize, lengths: &[usize]) -> Vec<Vec<u32>> {
    let vocab = config.text.vocab_size as u32;
    let filler = |i: usize| 10 + (i as u32 * 7919) % (vocab - 20);
    let mut prefix: Vec<u32> = (0..14).map(filler).collect();
    prefix.push(config.vision_start_token_id);
    prefix.extend(std::iter::repeat_n(config.image_token_id, image_tokens));
    prefix.push(config.vision_end_token_id);
    let longest = lengths.iter().copied().max().unwrap_or(1);
    lengths
        .iter()
        .enumerate()
        .map(|(q, &len)| {
            let stem = stem_of(q, len);
            let mut ids = prefix.clone();
            ids.extend((0..stem).map(|t| filler(100 + (q % STEMS.len()) * 8 + t)));
            ids.extend((stem..len).map(|t| filler(1000 + q * longest + t)));
            ids
        })
        .collect()
}

/// How many first tokens the bench's questions share, by question number modulo 3.
const STEMS: [usize; 3] = [5, 2, 1];

/// Question `q` of `len` tokens: how many of them are its stem's (it keeps one of its own).
fn stem_of(q: usize, len: usize) -> usize {
    STEMS[q % STEMS.len()].min(len - 1)
}

/// The FLOPs of scoring an image whose questions add `lengths` tokens each: their real tokens,
/// never their padding, through the last layers as `layers` says, `shared` of them held once.
fn flops_of(config: &ModelConfig, patches: usize, prefix: usize, lengths: &[usize], layers: QuestionLayers, shared: usize) -> ImageFlops {
    // With no question of its own, the count's questions are what the shared tokens take off.
    let mut flops = flops_as_run(config, patches, prefix, 0, 0, layers, shared);
    flops.questions += lengths.iter().map(|&len| flops_as_run(config, patches, prefix, 1, len, layers, 0).questions).sum::<f64>();
    flops
}

/// Runs the benchmark on a model with random weights.
pub fn run(
    config: &ModelConfig,
    preprocessor: &PreprocessorConfig,
    device: Device,
    kind: Kind,
    bench: &ScoringBench,
) -> Result<ScoringBenchReport, VlmError> {
    let model = VlModel::random(config, device, kind, 0)?;
    let vocab = config.text.vocab_size as u32;
    let answer = (vocab - 1, vocab - 2);
    // Whole passes: the warm-up's and the timed images', each rounded up.
    let pass = bench.images_per_pass.max(1);
    let total = (bench.warmup.div_ceil(pass) + bench.images.max(1).div_ceil(pass)) * pass;

    let start = Instant::now();
    let inputs = (0..total)
        .map(|k| pixels::pixel_values(&synthetic_image(bench.size, k as u32), preprocessor, device))
        .collect::<Result<Vec<_>, _>>()?;
    let preprocess_ms = start.elapsed().as_secs_f64() * 1000.0 / total as f64;
    let grid = inputs[0].1;
    let patches = grid.0 * grid.1 * grid.2;
    let image_tokens = patches / (config.vision.spatial_merge_size * config.vision.spatial_merge_size);
    let lengths = bench.question_tokens.lengths(bench.questions);
    let ids = prompts(config, image_tokens, &lengths);
    let prefix = 14 + 2 + image_tokens;

    let pass = bench.images_per_pass.max(1);
    if pass > 1 && bench.prefix_attention == PrefixAttention::Copied {
        return Err(VlmError::Input("several images per pass need the prefix held once (--prefix-attention shared or fused)".into()));
    }
    let warmup_passes = bench.warmup.div_ceil(pass);
    let mut timed = Instant::now();
    let mut clock = StageClock::on(device);
    for (k, chunk) in inputs.chunks(pass).enumerate() {
        if k == warmup_passes {
            clock.restart();
            timed = Instant::now();
        }
        let features = encode(&model, chunk, pass);
        clock.mark(Stage::Vision);
        // The scores come back to the host, so the device's work is done when this returns.
        Pass { model: &model, inputs: chunk, ids: &ids, answer, pass, rows: bench.suffix_rows }.score(
            &features,
            bench.prefix_attention,
            &mut clock,
        )?;
    }
    let seconds = timed.elapsed().as_secs_f64();
    let images = inputs.len() - warmup_passes * pass;
    let first = Pass { model: &model, inputs: &inputs[..pass.min(inputs.len())], ids: &ids, answer, pass, rows: bench.suffix_rows };
    let max_abs_logit_diff_to_shared = match bench.prefix_attention {
        PrefixAttention::Fused => Some(difference(&first, (PrefixAttention::Fused, PrefixAttention::Shared))?),
        _ => None,
    };
    let parts = if bench.parts { Some(clocked_parts(&first, bench.prefix_attention)?) } else { None };
    let invariance = if bench.check_invariance { Some(invariance(&first, bench.prefix_attention)?) } else { None };
    let per_image = seconds / images as f64;
    // Padded rows, and the copied path, run every token through every layer.
    let question_layers = match (bench.prefix_attention, bench.suffix_rows) {
        (PrefixAttention::Copied, _) | (_, SuffixRows::Padded) => QuestionLayers::Whole,
        _ => QuestionLayers::LastTokens,
    };
    // What the engine holds once, found as it finds it (from the prompts' ids).
    let shared = if bench.suffix_rows == SuffixRows::Deduplicated && question_layers == QuestionLayers::LastTokens {
        question_tokens_held_once(&ids)
    } else {
        0
    };
    let by_stage = flops_of(config, patches, prefix, &lengths, question_layers, shared);
    let flops = by_stage.total();
    let stages = clock
        .seconds()
        .iter()
        .map(|&(stage, spent)| {
            let ms_per_image = spent * 1000.0 / images as f64;
            let tflop_per_image = match stage {
                Stage::Vision => by_stage.vision,
                Stage::Prefix => by_stage.prefix,
                Stage::Questions => by_stage.questions,
                Stage::Answers => 0.0, // two rows of the LM head, counted with the questions
            } / 1e12;
            let mfu = bench.peak_tflops.filter(|_| tflop_per_image > 0.0).map(|peak| tflop_per_image / (ms_per_image / 1000.0) / peak);
            StageTime { stage, ms_per_image, tflop_per_image, mfu }
        })
        .collect();
    let prefill_tokens = prefix + lengths.iter().sum::<usize>();
    let achieved = flops / per_image / 1e12;
    Ok(ScoringBenchReport {
        family: config.family,
        prefix_attention: bench.prefix_attention.name(),
        suffix_rows: match bench.prefix_attention {
            PrefixAttention::Copied => SuffixRows::Padded.name(),
            _ => bench.suffix_rows.name(),
        },
        images_per_pass: pass,
        text_layers: config.text.num_hidden_layers,
        vision_blocks: config.vision.depth,
        device: format!("{device:?}"),
        dtype: format!("{kind:?}"),
        arithmetic: super::arithmetic::revision(device.is_cuda()),
        parameters: model.parameters(),
        active_parameters: active_parameters(config, model.parameters()),
        image_size: bench.size,
        grid_thw: grid,
        vision_patches: patches,
        image_tokens,
        questions: bench.questions,
        question_tokens: (bench.question_tokens.shortest, bench.question_tokens.longest),
        prefill_tokens_per_image: prefill_tokens,
        question_tokens_shared: shared,
        tflop_per_image: flops / 1e12,
        images_timed: images,
        preprocess_ms_per_image: preprocess_ms,
        device_ms_per_image: per_image * 1000.0,
        images_per_second: 1.0 / per_image,
        prefill_tokens_per_second: prefill_tokens as f64 / per_image,
        achieved_tflops: achieved,
        peak_tflops: bench.peak_tflops,
        mfu: bench.peak_tflops.map(|peak| achieved / peak),
        project_images: bench.project_images,
        projected_seconds: per_image * bench.project_images as f64,
        roofline_seconds: bench.peak_tflops.map(|peak| flops * bench.project_images as f64 / (peak * 1e12)),
        invariance,
        stages,
        max_abs_logit_diff_to_shared,
        parts,
    })
}

/// A pass of the bench's images, each asked every prompt: the timed passes, and the first of
/// them, which the checks after the timing score again.
#[derive(Clone, Copy)]
struct Pass<'a> {
    model: &'a VlModel,
    /// Pixel values and patch grid of each image.
    inputs: &'a [(tch::Tensor, (usize, usize, usize))],
    ids: &'a [Vec<u32>],
    answer: (u32, u32),
    pass: usize,
    rows: SuffixRows,
}

impl Pass<'_> {
    /// Scores the pass from its images' `features`: the copied path by [`VlModel::score_with`]
    /// (it takes one image at a time), the others by [`VlModel::score_pass_with`].
    fn score(&self, features: &[ImageFeatures], method: PrefixAttention, clock: &mut StageClock) -> Result<(), VlmError> {
        self.scores(features, method, clock).map(|_| ())
    }

    /// The scores of the pass's images from their `features`.
    fn scores(
        &self,
        features: &[ImageFeatures],
        method: PrefixAttention,
        clock: &mut StageClock,
    ) -> Result<Vec<Vec<super::YesNo>>, VlmError> {
        let Pass { model, inputs, ids, answer, pass, rows } = *self;
        if method == PrefixAttention::Copied {
            return Ok(vec![model.score_with(ids, &features[0], inputs[0].1, answer, method, clock)?]);
        }
        model.score_pass_with(&pass_of(features, inputs, ids), answer, pass, method, rows, clock)
    }
}

/// Scores the first pass once more with the part clock on.
fn clocked_parts(first: &Pass<'_>, method: PrefixAttention) -> Result<Parts, VlmError> {
    let Pass { model, inputs, pass, .. } = *first;
    part_clock::start(model.device);
    let begun = Instant::now();
    let features = part_clock::timed("vision tower", || encode(model, inputs, pass));
    let scored = first.score(&features, method, &mut StageClock::off());
    let seconds = begun.elapsed().as_secs_f64();
    let timed = part_clock::stop();
    scored?;
    let per_image = |s: f64| s * 1000.0 / inputs.len() as f64;
    Ok(Parts {
        clocked_ms_per_image: per_image(seconds),
        parts: timed.into_iter().map(|p| PartShare { part: p.part, ms_per_image: per_image(p.seconds), calls: p.calls }).collect(),
    })
}

/// The vision tower's features of each of `inputs` (pixel values and patch grid), `pass` at a
/// time as a build encodes them.
fn encode(model: &VlModel, inputs: &[(tch::Tensor, (usize, usize, usize))], pass: usize) -> Vec<ImageFeatures> {
    let refs: Vec<_> = inputs.iter().map(|(values, grid)| (values, *grid)).collect();
    model.encode_pass(&refs, pass)
}

/// One pass of `inputs`, each asked every prompt of `ids`.
fn pass_of<'a>(features: &'a [ImageFeatures], inputs: &[(tch::Tensor, (usize, usize, usize))], ids: &'a [Vec<u32>]) -> Vec<PassImage<'a>> {
    features.iter().zip(inputs).map(|(f, (_, grid))| PassImage { prompts: ids, features: f, grid: *grid }).collect()
}

/// Scores the first pass by each of `methods` and returns the largest difference of their logits.
fn difference(first: &Pass<'_>, methods: (PrefixAttention, PrefixAttention)) -> Result<f32, VlmError> {
    let features = encode(first.model, first.inputs, first.pass);
    let second = first.scores(&features, methods.1, &mut StageClock::off())?;
    let first = first.scores(&features, methods.0, &mut StageClock::off())?;
    let pairs = first.iter().flatten().zip(second.iter().flatten());
    Ok(pairs.fold(0f32, |most, (a, b)| most.max((a.logit_yes - b.logit_yes).abs()).max((a.logit_no - b.logit_no).abs())))
}

/// Scores the first pass, then its first, middle and last image alone (padded to the pass, and
/// in a pass of one), and compares the bits.
fn invariance(first: &Pass<'_>, method: PrefixAttention) -> Result<Invariance, VlmError> {
    let Pass { model, inputs, ids, answer, pass, rows } = *first;
    // A build scores on the CPU with one thread per worker, as here: a product split over
    // threads may split its sums by how many rows it has.
    if model.device == Device::Cpu {
        tch::set_num_threads(1);
    }
    let features = encode(model, inputs, pass);
    let images = pass_of(&features, inputs, ids);
    let together = model.score_pass_with(&images, answer, pass, method, rows, &mut StageClock::off())?;
    let (mut padded, mut unpadded) = (0f32, 0f32);
    let (mut same_padded, mut same_unpadded, mut scores) = (true, true, 0);
    // The first, a middle and the last image of the pass: each place in it, at a third of the cost.
    let mut places: Vec<usize> = vec![0, images.len() / 2, images.len() - 1];
    places.dedup();
    for (k, in_pass) in places.iter().map(|&k| (k, &together[k])) {
        for (alone_in, diff, same) in [(pass, &mut padded, &mut same_padded), (1, &mut unpadded, &mut same_unpadded)] {
            // Alone from the pixels on: the vision tower too sees it without the others.
            let input = &inputs[k..k + 1];
            let features = encode(model, input, alone_in);
            let image = pass_of(&features, input, ids);
            let alone = model.score_pass_with(&image, answer, alone_in, method, rows, &mut StageClock::off())?.remove(0);
            for (a, b) in alone.iter().zip(in_pass) {
                *same &= a.logit_yes.to_bits() == b.logit_yes.to_bits() && a.logit_no.to_bits() == b.logit_no.to_bits();
                *diff = diff.max((a.logit_yes - b.logit_yes).abs()).max((a.logit_no - b.logit_no).abs());
            }
        }
        scores += in_pass.len();
    }
    Ok(Invariance {
        images: places.len(),
        scores,
        identical_padded: same_padded,
        max_abs_logit_diff_padded: padded,
        identical_unpadded: same_unpadded,
        max_abs_logit_diff_unpadded: unpadded,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flops::tests::{config, preprocessor};

    /// Two small images, three short questions, no warm-up, every check off: each test changes
    /// what it measures.
    fn small_bench(prefix_attention: PrefixAttention, images_per_pass: usize) -> ScoringBench {
        ScoringBench {
            images: 2,
            size: 112,
            questions: 3,
            question_tokens: QuestionTokens::each(4),
            warmup: 0,
            peak_tflops: None,
            prefix_attention,
            images_per_pass,
            suffix_rows: SuffixRows::Deduplicated,
            check_invariance: false,
            parts: false,
            project_images: 10,
        }
    }

    #[test]
    fn random_model_scores_on_the_cpu() {
        let (c, pre) = (config("qwen2_vl"), preprocessor("qwen2_vl"));
        let bench = ScoringBench {
            questions: 5,
            question_tokens: QuestionTokens::each(6),
            warmup: 1,
            peak_tflops: Some(1.0),
            project_images: 4628,
            ..small_bench(PrefixAttention::Copied, 1)
        };
        let r = run(&c, &pre, Device::Cpu, Kind::Float, &bench).unwrap();
        assert_eq!(r.image_tokens * 4, r.vision_patches);
        assert_eq!(r.prefill_tokens_per_image, 16 + r.image_tokens + 5 * 6);
        assert!(r.parameters > 0 && r.images_per_second > 0.0 && r.mfu.unwrap() > 0.0);
        assert!((r.projected_seconds - 4628.0 / r.images_per_second).abs() < 1e-6);
        // Every stage timed, their sum the image's time (the marks cover the timed loop).
        let stages: Vec<Stage> = r.stages.iter().map(|s| s.stage).collect();
        assert_eq!(stages, [Stage::Vision, Stage::Prefix, Stage::Questions, Stage::Answers]);
        let json = serde_json::to_value(&r.stages[0]).unwrap();
        assert_eq!(json["stage"], "vision", "the report names stages in lower case");
        let sum: f64 = r.stages.iter().map(|s| s.ms_per_image).sum();
        assert!(sum <= r.device_ms_per_image * 1.001 && sum >= r.device_ms_per_image * 0.8, "{sum} of {}", r.device_ms_per_image);
        let flops: f64 = r.stages.iter().map(|s| s.tflop_per_image).sum();
        assert!((flops - r.tflop_per_image).abs() < 1e-9 && r.stages[3].mfu.is_none() && r.stages[2].mfu.unwrap() > 0.0);
        assert!(r.max_abs_logit_diff_to_shared.is_none());
    }

    /// The parts pass: every part of a hybrid stack timed, each as often as its layers run (the
    /// questions run every layer once, the prefix every layer but the MLP of its last, a linear
    /// layer here, which it stops at), and a step inside its part.
    #[test]
    fn the_parts_pass_times_each_part_of_every_layer() {
        let (c, pre) = (config("qwen3_5"), preprocessor("qwen3_5"));
        let bench = ScoringBench { parts: true, ..small_bench(PrefixAttention::Shared, 2) };
        let r = run(&c, &pre, Device::Cpu, Kind::Float, &bench).unwrap();
        let parts = r.parts.unwrap();
        let part = |name: &str| parts.parts.iter().find(|p| p.part == name).unwrap_or_else(|| panic!("no {name}: {:?}", parts.parts));
        assert_eq!(part("linear attention").calls, 2 * 3);
        assert_eq!(part("attention").calls, 2);
        let attention_steps = ["attention: projections in, norms, rotary", "attention: projection out", "attention: over the cache"];
        assert!(attention_steps.iter().all(|name| part(name).calls == 2 || *name == "attention: over the cache"));
        assert!(attention_steps.iter().map(|name| part(name).ms_per_image).sum::<f64>() <= part("attention").ms_per_image);
        assert_eq!(part("mlp").calls, 2 * 4 - 1);
        assert_eq!(part("vision tower").calls, 1);
        let steps: f64 = parts
            .parts
            .iter()
            .filter(|p| p.part.starts_with("linear attention: ") && !p.part.starts_with("linear attention: delta rule: "))
            .map(|p| p.ms_per_image)
            .sum();
        // Six steps, and three of the delta rule's own.
        assert_eq!(parts.parts.iter().filter(|p| p.part.starts_with("linear attention: ")).count(), 9);
        assert!(
            part("linear attention: delta rule: inverse").ms_per_image <= part("linear attention: delta rule: within chunks").ms_per_image
        );
        assert!(part("linear attention: delta rule: within chunks").ms_per_image <= part("linear attention: delta rule").ms_per_image);
        assert!(steps <= part("linear attention").ms_per_image && parts.clocked_ms_per_image >= part("vision tower").ms_per_image);
    }

    #[test]
    fn question_lengths_spread_from_the_shortest_to_the_longest() {
        assert_eq!(QuestionTokens { shortest: 16, longest: 28 }.lengths(5), [16, 19, 22, 25, 28]);
        // A release's 57: 22 tokens each on average, as the even spread gives them.
        let release = QuestionTokens { shortest: 16, longest: 28 }.lengths(57);
        assert_eq!((release[0], release[28], release[56], release.iter().sum::<usize>()), (16, 22, 28, 1256));
        assert_eq!(QuestionTokens::each(24).lengths(3), [24, 24, 24]);
        assert_eq!(QuestionTokens { shortest: 3, longest: 9 }.lengths(1), [3]);
    }

    /// Questions of several lengths: the prefill and the FLOPs count their real tokens, whichever
    /// way their rows go, and the report says which way that was.
    #[test]
    fn questions_of_several_lengths_count_their_real_tokens_either_way() {
        let (c, pre) = (config("qwen3_5"), preprocessor("qwen3_5"));
        let mut reports = [SuffixRows::Padded, SuffixRows::Packed, SuffixRows::Deduplicated].map(|suffix_rows| {
            let bench = ScoringBench {
                questions: 4,
                question_tokens: QuestionTokens { shortest: 2, longest: 8 },
                suffix_rows,
                ..small_bench(PrefixAttention::Shared, 2)
            };
            run(&c, &pre, Device::Cpu, Kind::Float, &bench).unwrap()
        });
        let [padded, packed, deduplicated] = &mut reports;
        assert_eq!((padded.suffix_rows, packed.suffix_rows), ("padded", "packed"));
        assert_eq!(packed.question_tokens, (2, 8));
        assert_eq!(packed.prefill_tokens_per_image, 16 + packed.image_tokens + (2 + 4 + 6 + 8));
        assert_eq!(padded.prefill_tokens_per_image, packed.prefill_tokens_per_image);
        // Padded rows run every token through the last layer; packed ones, each question's last.
        let rest = [QuestionLayers::Whole, QuestionLayers::LastTokens].map(|l| flops_as_run(&c, 0, 0, 1, 2, l, 0).questions);
        let saved = (padded.tflop_per_image - packed.tflop_per_image) * 1e12;
        assert!((saved - (1 + 3 + 5 + 7) as f64 * (rest[0] - rest[1])).abs() < 1.0, "{saved}");
        // The fourth question begins as the first, which its 2 tokens cut to 1 token: that one is
        // held once, its token-wise parts and its attention to the prefix counted once.
        assert_eq!((packed.question_tokens_shared, deduplicated.question_tokens_shared), (0, 1));
        let prefix = 16 + packed.image_tokens;
        let one_token = -flops_as_run(&c, 0, prefix, 0, 0, QuestionLayers::LastTokens, 1).questions;
        let its_attention = one_token + flops_as_run(&c, 0, 0, 0, 0, QuestionLayers::LastTokens, 1).questions;
        assert!(its_attention > 0.0, "a shared token's attention to the prefix is counted once");
        assert!(one_token > 0.0);
        let saved = (packed.tflop_per_image - deduplicated.tflop_per_image) * 1e12;
        assert!((saved - one_token).abs() < 1.0, "{saved} against {one_token}");
        let copied = run(
            &c,
            &pre,
            Device::Cpu,
            Kind::Float,
            &ScoringBench { suffix_rows: SuffixRows::Packed, ..small_bench(PrefixAttention::Copied, 1) },
        );
        assert_eq!(copied.unwrap().suffix_rows, "padded", "the copied path pads its rows");
    }

    /// The bench's 57 questions of 16 to 28 tokens begin alike as a release's do: 18 of each
    /// third share their stem with the first, 144 tokens of 1,256, which the engine holds once.
    #[test]
    fn the_bench_questions_begin_alike_by_thirds() {
        let lengths = QuestionTokens { shortest: 16, longest: 28 }.lengths(57);
        assert_eq!(lengths.iter().sum::<usize>(), 1256);
        let c = config("qwen2_vl");
        let ids = prompts(&c, 4, &lengths);
        assert_eq!(question_tokens_held_once(&ids), 18 * (5 + 2 + 1));
        assert_eq!(question_tokens_held_once(&ids[..4]), 5);
        let own = |a: &[u32], b: &[u32]| a.iter().zip(b).take_while(|(x, y)| x == y).count() - (14 + 1 + 4 + 1);
        assert_eq!((own(&ids[0], &ids[3]), own(&ids[1], &ids[4]), own(&ids[2], &ids[5]), own(&ids[0], &ids[1])), (5, 2, 1, 0));
        // A question too short for its stem keeps one token of its own.
        assert_eq!((stem_of(0, 3), stem_of(0, 1)), (2, 0));
    }

    /// The fused kernel measured beside the products: its logits' distance from them reported.
    #[test]
    fn the_fused_path_reports_its_distance_from_the_products() {
        let (c, pre) = (config("qwen2_vl"), preprocessor("qwen2_vl"));
        let bench = ScoringBench { questions: 4, question_tokens: QuestionTokens::each(5), ..small_bench(PrefixAttention::Fused, 2) };
        let r = run(&c, &pre, Device::Cpu, Kind::Float, &bench).unwrap();
        let diff = r.max_abs_logit_diff_to_shared.unwrap();
        assert!(diff < 1e-4, "{diff}");
        assert!(r.stages.iter().all(|s| s.mfu.is_none()));
    }
}
