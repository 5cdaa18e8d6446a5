//! A whole vision-language model on one device: image embeddings, the prompt with the image
//! scattered in, last-position logits, and yes/no scoring of many questions over one shared image
//! prefix. Greedy generation is in [`super::generate`].

use tch::{Device, Kind, Tensor};

use super::checkpoint::ModelConfig;
use super::error::VlmError;
use super::families::TextModel;
use super::families::{ImageFeatures, VisionTower};
use super::model_dir::ModelDir;
use super::real_tokens::{LastTokens, QuestionRows, RealTokens, RowIds, SuffixRows};
use super::rope;
use super::shared_prefix::PrefixAttention;
use super::stage_clock::{Stage, StageClock};
use super::text::{DecoderCache, Deepstack, Embedded};
use super::weights::Weights;
use super::YesNo;

pub struct VlModel {
    pub vision: VisionTower,
    pub text: TextModel,
    image_token_id: u32,
    merge: usize,
    /// Positions are multimodal (M-RoPE, the Qwen families) or plain token indices (Gemma 4).
    multimodal_positions: bool,
    parameter_count: i64,
    pub device: Device,
    pub kind: Kind,
}

impl VlModel {
    pub fn load(dir: &ModelDir, device: Device, kind: Kind) -> Result<VlModel, VlmError> {
        // Before the first tensor, for a program that uses the library without the binary's `main`.
        super::cpu_kernels::pin();
        Self::from_weights(&Weights::load(&dir.weights, device, kind)?, &dir.config, device, kind)
    }

    /// The model a config describes with seeded random weights made on the device (see
    /// `Weights::random`): for throughput benchmarks of models too large to ship.
    pub fn random(config: &ModelConfig, device: Device, kind: Kind, seed: i64) -> Result<VlModel, VlmError> {
        super::cpu_kernels::pin();
        let weights = Weights::random(device, kind, !config.text.tie_word_embeddings, seed);
        Self::from_weights(&weights, config, device, kind)
    }

    fn from_weights(weights: &Weights, config: &ModelConfig, device: Device, kind: Kind) -> Result<VlModel, VlmError> {
        Ok(VlModel {
            vision: VisionTower::load(config.family, weights, &config.vision)?,
            text: TextModel::load(config.family, weights, &config.text, config.image_token_id)?,
            image_token_id: config.image_token_id,
            merge: config.vision.spatial_merge_size,
            multimodal_positions: config.family.architecture().multimodal_positions(),
            parameter_count: weights.parameter_count(),
            device,
            kind,
        })
    }

    pub fn parameters(&self) -> i64 {
        self.parameter_count
    }

    /// The vision tower's features of one image's `pixel_values`, patch grid (t, h, w).
    pub fn encode_image(&self, pixels: &Tensor, grid: (usize, usize, usize)) -> ImageFeatures {
        tch::no_grad(|| self.vision.forward(&pixels.to_device(self.device), grid))
    }

    /// How many images a pass of `pass_images` is padded to: the size itself, and on the CPU one
    /// spare more when several (libtorch's scalar tail falls on it, never on a scored image).
    fn padded_pass(&self, pass_images: usize) -> usize {
        pass_images + usize::from(self.device == Device::Cpu && pass_images > 1)
    }

    /// The vision tower's features of a pass's images (pixel values and patch grid), in order.
    /// Consecutive images of one grid go through the tower together, `pass_images` at a time,
    /// padded as [`Self::score_pass`] pads (repeats of the last; one spare more on the CPU when
    /// several), so an image's features are the same bits whichever images share its pass. One
    /// image a pass is [`Self::encode_image`]'s bits (each tower's `forward` is its
    /// `forward_many` of one image).
    pub fn encode_pass(&self, images: &[(&Tensor, (usize, usize, usize))], pass_images: usize) -> Vec<ImageFeatures> {
        let mut out = Vec::with_capacity(images.len());
        for (pass, real) in self.padded_passes(images, |a, b| a.1 == b.1, pass_images) {
            let pixels: Vec<Tensor> = pass.iter().map(|(p, _)| p.to_device(self.device)).collect();
            let refs: Vec<&Tensor> = pixels.iter().collect();
            let mut features = tch::no_grad(|| self.vision.forward_many(&refs, pass[0].1));
            features.truncate(real);
            out.extend(features);
        }
        out
    }

    /// `items` in the passes the tower and the prefix run them in: runs of consecutive items
    /// that `same` puts together, `pass_images` at a time, each pass padded by repeats of its
    /// last item to [`Self::padded_pass`]'s size. With each pass, how many of its items are
    /// real. Every pass of a build then has one shape, so no item's bits depend on its pass.
    fn padded_passes<T: Copy>(&self, items: &[T], same: impl Fn(&T, &T) -> bool, pass_images: usize) -> Vec<(Vec<T>, usize)> {
        let size = pass_images.max(1);
        let padded = self.padded_pass(size);
        let mut out = Vec::new();
        for run in items.chunk_by(same) {
            for group in run.chunks(size) {
                let mut pass = group.to_vec();
                pass.resize(padded, group[group.len() - 1]);
                out.push((pass, group.len()));
            }
        }
        out
    }

    /// The decoder's final hidden state (after its last norm) at the token that closes each
    /// image's run of placeholder tokens (`<|vision_end|>`, Gemma's end of image), as (hidden,)
    /// f32 on the CPU. Each prompt runs only up to that token, so what follows (the question)
    /// does not reach it. Grouped, padded and spared as [`Self::encode_pass`] groups its images,
    /// so an image's state is the same bits whichever images share its pass.
    pub fn prefix_end_states(&self, images: &[PromptImage<'_>], pass_images: usize) -> Result<Vec<Tensor>, VlmError> {
        let mut ends = Vec::with_capacity(images.len());
        for PromptImage { ids, .. } in images {
            let start =
                ids.iter().position(|&i| i == self.image_token_id).ok_or_else(|| VlmError::Input("the prompt holds no image".into()))?;
            let end = start + ids[start..].iter().take_while(|&&i| i == self.image_token_id).count();
            if end >= ids.len() {
                return Err(VlmError::Input("no token closes the prompt's image".into()));
            }
            ends.push(end);
        }
        let mut out = Vec::with_capacity(images.len());
        // Each image's prompt up to and with the token that closes its image.
        let prefixes: Vec<PromptImage<'_>> = images.iter().zip(&ends).map(|(i, &end)| PromptImage { ids: &i.ids[..=end], ..*i }).collect();
        for (pass, real) in self.padded_passes(&prefixes, |a, b| (a.grid, a.ids) == (b.grid, b.ids), pass_images) {
            let len = pass[0].ids.len();
            let states = tch::no_grad(|| -> Result<Tensor, VlmError> {
                let (embeds, positions, deepstack) = self.prefix_input(&pass, len)?;
                let hidden = self.text.forward(&embeds, &positions, &mut DecoderCache::default(), deepstack.as_ref());
                Ok(hidden.select(1, len as i64 - 1).to_kind(Kind::Float).to_device(Device::Cpu))
            })?;
            out.extend((0..real as i64).map(|row| states.get(row)));
        }
        Ok(out)
    }

    /// Token embeddings (1, len, hidden) with the image's run of placeholder tokens replaced by
    /// the image embeddings.
    fn embed(&self, ids: &[u32], image_embeds: Option<&Tensor>) -> Result<Embedded, VlmError> {
        let t = Tensor::from_slice(&ids.iter().map(|&i| i64::from(i)).collect::<Vec<_>>()).to_device(self.device).unsqueeze(0);
        let mut input = self.text.embed(&t);
        let embeds = &input.embeds;
        let Some(start) = ids.iter().position(|&i| i == self.image_token_id) else { return Ok(input) };
        let run = ids[start..].iter().take_while(|&&i| i == self.image_token_id).count();
        let image = image_embeds.ok_or_else(|| VlmError::Input("the prompt holds an image but no image was given".into()))?;
        if image.size()[0] != run as i64 {
            return Err(VlmError::Input(format!("the prompt has {run} image tokens, the image {} embeddings", image.size()[0])));
        }
        let end = (start + run) as i64;
        input.embeds = Tensor::cat(
            &[embeds.narrow(1, 0, start as i64), image.to_kind(embeds.kind()).unsqueeze(0), embeds.narrow(1, end, ids.len() as i64 - end)],
            1,
        );
        input.image_span = Some((start as i64, end));
        Ok(input)
    }

    pub(super) fn positions(&self, ids: &[u32], grid: (usize, usize, usize)) -> Result<([Vec<i64>; 3], i64), VlmError> {
        if !self.multimodal_positions {
            let plain: Vec<i64> = (0..ids.len() as i64).collect();
            return Ok(([plain.clone(), plain.clone(), plain], 0));
        }
        let grids = if ids.contains(&self.image_token_id) { vec![grid] } else { Vec::new() };
        rope::position_ids(ids, self.image_token_id, &grids, self.merge)
    }

    /// The first `len` tokens of each image's `ids` (its image's tokens among them) as the
    /// decoder takes them, one batch row an image: their embeddings, positions (3, images, len)
    /// and DeepStack features, where the family has them. The images' tokens must lie in the
    /// same places, as prompts of one shape place them.
    fn prefix_input(&self, images: &[PromptImage<'_>], len: usize) -> Result<PrefixInput, VlmError> {
        let mut embedded = Vec::with_capacity(images.len());
        let mut axes: [Vec<i64>; 3] = Default::default();
        for image in images {
            embedded.push(self.embed(&image.ids[..len], Some(&image.features.embeds))?);
            let (all, _) = self.positions(image.ids, image.grid)?;
            for (out, axis) in axes.iter_mut().zip(all) {
                out.extend_from_slice(&axis[..len]);
            }
        }
        let positions = Tensor::from_slice(&axes.concat()).to_device(self.device).view([3, images.len() as i64, len as i64]);
        let first = &images[0];
        let deepstack = match first.ids[..len].iter().position(|&i| i == self.image_token_id) {
            Some(start) if !first.features.deepstack.is_empty() => {
                let layers = (0..first.features.deepstack.len())
                    .map(|l| Tensor::stack(&images.iter().map(|i| &i.features.deepstack[l]).collect::<Vec<_>>(), 0))
                    .collect();
                Some(Deepstack { start: start as i64, layers })
            }
            _ => None,
        };
        // Gemma 4's per-layer embeddings stack too; its image attends both ways within the span,
        // which prompts of one shape place alike.
        let image_span = embedded[0].image_span;
        if embedded.iter().any(|e| e.image_span != image_span) {
            return Err(VlmError::Input("the images of a pass have their image tokens in different places".into()));
        }
        let per_layer = embedded.iter().map(|e| e.per_layer.as_ref()).collect::<Option<Vec<_>>>().map(|p| Tensor::cat(&p, 0));
        let input = Embedded { embeds: Tensor::cat(&embedded.iter().map(|e| &e.embeds).collect::<Vec<_>>(), 0), per_layer, image_span };
        Ok((input, positions, deepstack))
    }

    /// Runs the first `len` tokens of `ids` (the image's among them) into `cache`, only as far
    /// as the cache needs ([`TextModel::fill_cache`]): what reads the prefix after reads its cache.
    pub(super) fn prefill(
        &self,
        ids: &[u32],
        len: usize,
        image: &ImageFeatures,
        grid: (usize, usize, usize),
        cache: &mut DecoderCache,
    ) -> Result<(), VlmError> {
        let (embeds, positions, deepstack) = self.prefix_input(&[PromptImage { ids, features: image, grid }], len)?;
        self.text.fill_cache(&embeds, &positions, cache, deepstack.as_ref());
        Ok(())
    }

    /// Logits (vocab) predicting the token after `ids`, from one full pass.
    pub fn last_logits(&self, ids: &[u32], image: &ImageFeatures, grid: (usize, usize, usize)) -> Result<Tensor, VlmError> {
        tch::no_grad(|| {
            let (embeds, positions, deepstack) = self.prefix_input(&[PromptImage { ids, features: image, grid }], ids.len())?;
            let hidden = self.text.forward(&embeds, &positions, &mut DecoderCache::default(), deepstack.as_ref());
            Ok(self.text.logits(&hidden.narrow(1, ids.len() as i64 - 1, 1)).view([-1]).to_kind(Kind::Float))
        })
    }

    /// Yes/no logits for many prompts about one image: the shared prefix (everything up to where
    /// the prompts differ, the image included) runs once; the suffixes run as one batch on copies
    /// of its cache.
    pub fn score(
        &self,
        prompts: &[Vec<u32>],
        image: &ImageFeatures,
        grid: (usize, usize, usize),
        answer: (u32, u32),
    ) -> Result<Vec<YesNo>, VlmError> {
        self.score_with(prompts, image, grid, answer, PrefixAttention::Copied, &mut StageClock::off())
    }

    /// [`Self::score`], the suffixes meeting the prefix as `method` says: on copies of its cache,
    /// or on the one cache ([`PrefixAttention::Shared`]); `clock` marks the stages.
    pub fn score_with(
        &self,
        prompts: &[Vec<u32>],
        image: &ImageFeatures,
        grid: (usize, usize, usize),
        answer: (u32, u32),
        method: PrefixAttention,
        clock: &mut StageClock,
    ) -> Result<Vec<YesNo>, VlmError> {
        if prompts.is_empty() {
            return Ok(Vec::new());
        }
        if method != PrefixAttention::Copied {
            let one = [PassImage { prompts, features: image, grid }];
            let mut scores = self.score_pass_with(&one, answer, 1, method, SuffixRows::Deduplicated, clock)?;
            return Ok(scores.pop().unwrap_or_default());
        }
        tch::no_grad(|| {
            let common = common_prefix(prompts);
            let mut cache = DecoderCache::default();
            self.prefill(&prompts[0], common, image, grid, &mut cache)?;
            clock.mark(Stage::Prefix);
            let one = [PassImage { prompts, features: image, grid }];
            let suffixes = self.suffixes(&one, common)?;
            let hidden = self.text.forward(&suffixes.embedded, &suffixes.positions, &mut cache.expand(suffixes.rows), None);
            let last = LastTokens::new(&suffixes.lengths, suffixes.longest, None, self.device);
            let last = last.rows_alone(&last.pick(&hidden));
            clock.mark(Stage::Questions);
            let scores = self.answers(&last, &suffixes, answer)?.pop().unwrap_or_default();
            clock.mark(Stage::Answers);
            Ok(scores)
        })
    }

    /// Yes/no logits for the prompts of several images in passes: the images' prefixes (each
    /// up to where its prompts differ, the image included) prefilled together, then every
    /// image's suffixes as one batch, each meeting its own image's prefix held once
    /// ([`PrefixAttention::for_device`]). Images whose prompts have another
    /// shape (prefix length, number of prompts) go in a pass of their own.
    ///
    /// Every pass is padded to `pass_images` images (repeats of its last, their scores dropped),
    /// so every pass of a build has the same shapes: the kernels chosen, and so the last bits of
    /// a score, do not depend on how many images share its pass. On the CPU a pass of several
    /// carries one spare image more: libtorch's CPU kernels compute a tensor's last few elements
    /// in a scalar loop whose SiLU differs from the vector one in the last bit, and the spare
    /// takes that tail, so no scored image's bits depend on its place in the pass.
    pub fn score_pass(&self, images: &[PassImage<'_>], answer: (u32, u32), pass_images: usize) -> Result<Vec<Vec<YesNo>>, VlmError> {
        self.score_pass_with(
            images,
            answer,
            pass_images,
            PrefixAttention::for_device(self.device),
            SuffixRows::Deduplicated,
            &mut StageClock::off(),
        )
    }

    /// [`Self::score_pass`], the prefix part as `method` says (the products or the fused
    /// kernel) and the question rows as `rows` says, to measure one way beside another; `clock`
    /// marks the stages.
    pub fn score_pass_with(
        &self,
        images: &[PassImage<'_>],
        answer: (u32, u32),
        pass_images: usize,
        method: PrefixAttention,
        rows: SuffixRows,
        clock: &mut StageClock,
    ) -> Result<Vec<Vec<YesNo>>, VlmError> {
        if method == PrefixAttention::Copied {
            return Err(VlmError::Input("a pass holds its images' prefixes once: the copied path scores one image at a time".into()));
        }
        let mut out: Vec<Vec<YesNo>> = images.iter().map(|_| Vec::new()).collect();
        // Passes of one shape, in the order their first image comes.
        let mut shapes: Vec<((usize, usize), Vec<usize>)> = Vec::new();
        for (i, image) in images.iter().enumerate() {
            if image.prompts.is_empty() {
                continue;
            }
            let shape = (common_prefix(image.prompts), image.prompts.len());
            match shapes.iter_mut().find(|(s, members)| *s == shape && members.len() < pass_images.max(1)) {
                Some((_, members)) => members.push(i),
                None => shapes.push((shape, vec![i])),
            }
        }
        for ((common, _), members) in shapes {
            let mut pass: Vec<&PassImage<'_>> = members.iter().map(|&i| &images[i]).collect();
            while pass.len() < self.padded_pass(pass_images) {
                pass.push(pass[pass.len() - 1]);
            }
            let scores = tch::no_grad(|| self.one_pass(&pass, common, answer, method == PrefixAttention::Fused, rows, clock))?;
            for (i, s) in members.into_iter().zip(scores) {
                out[i] = s;
            }
        }
        Ok(out)
    }

    /// One pass of [`Self::score_pass`]: images with prompts of one shape, `common` tokens shared.
    fn one_pass(
        &self,
        images: &[&PassImage<'_>],
        common: usize,
        answer: (u32, u32),
        fused: bool,
        rows: SuffixRows,
        clock: &mut StageClock,
    ) -> Result<Vec<Vec<YesNo>>, VlmError> {
        let mut cache = DecoderCache::default();
        self.prefill_images(images, common, &mut cache)?;
        clock.mark(Stage::Prefix);
        let images: Vec<PassImage<'_>> = images.iter().map(|&&i| i).collect();
        let suffixes = self.suffixes(&images, common)?;
        let ids = RowIds { ids: &suffixes.ids, lengths: &suffixes.lengths, longest: suffixes.longest, per_image: &suffixes.per_image };
        let rows = QuestionRows::new(&ids, rows, self.device);
        let hidden = self.text.forward_shared_prefix(&suffixes.embedded, &suffixes.positions, &mut cache.shared(), fused, &rows);
        clock.mark(Stage::Questions);
        let scores = self.answers(&hidden, &suffixes, answer)?;
        clock.mark(Stage::Answers);
        Ok(scores)
    }

    /// Runs the first `len` tokens of each image's first prompt into `cache`, one batch row per
    /// image (their prefixes have one length).
    fn prefill_images(&self, images: &[&PassImage<'_>], len: usize, cache: &mut DecoderCache) -> Result<(), VlmError> {
        let inputs: Vec<_> = images.iter().map(|i| PromptImage { ids: &i.prompts[0], features: i.features, grid: i.grid }).collect();
        let (input, positions, deepstack) = self.prefix_input(&inputs, len)?;
        self.text.fill_cache(&input, &positions, cache, deepstack.as_ref());
        Ok(())
    }

    /// Every prompt's tokens after the first `common`, image by image, right-padded to the
    /// longest, with their positions.
    fn suffixes(&self, images: &[PassImage<'_>], common: usize) -> Result<Suffixes, VlmError> {
        let prompts: Vec<&[Vec<u32>]> = images.iter().map(|i| i.prompts).collect();
        let (ids, lengths, longest) = question_ids(&prompts, common);
        let mut positions = [Vec::new(), Vec::new(), Vec::new()];
        let mut length = lengths.iter();
        for image in images {
            for p in image.prompts {
                let (axes, _) = self.positions(p, image.grid)?;
                let pad = longest - length.next().expect("a length per prompt");
                for (axis, out) in axes.iter().zip(positions.iter_mut()) {
                    let end = *axis.last().expect("non-empty");
                    out.extend(axis[common..].iter().copied().chain((1..=pad).map(|k| end + k)));
                }
            }
        }
        let rows = lengths.len() as i64;
        let embedded = self.text.embed(&Tensor::from_slice(&ids).to_device(self.device).view([rows, longest]));
        let positions = Tensor::from_slice(&positions.concat()).to_device(self.device).view([3, rows, longest]);
        let per_image = images.iter().map(|i| i.prompts.len()).collect();
        Ok(Suffixes { embedded, positions, rows, ids, longest, lengths, per_image })
    }

    /// Each prompt's yes/no logits from the final hidden state of its last token (prompts,
    /// hidden), image by image.
    fn answers(&self, last: &Tensor, suffixes: &Suffixes, answer: (u32, u32)) -> Result<Vec<Vec<YesNo>>, VlmError> {
        // Only the two answer rows of the LM head: the full vocabulary projection would cost
        // vocab/2 times as much and is never read.
        let pair = self.text.answer_logits(last, answer).to_kind(Kind::Float).to_device(Device::Cpu);
        let values = Vec::<f32>::try_from(pair.view([-1])).map_err(|e| VlmError::Input(format!("reading the answer logits: {e}")))?;
        let mut scores = values.chunks_exact(2).map(|c| YesNo { logit_yes: c[0], logit_no: c[1] });
        Ok(suffixes.per_image.iter().map(|&n| scores.by_ref().take(n).collect()).collect())
    }
}

/// A prefix as the decoder takes it: embeddings, positions, DeepStack features.
type PrefixInput = (Embedded, Tensor, Option<Deepstack>);

/// A prompt about an image, as its prefix is run: its ids, and the image's features and grid.
#[derive(Clone, Copy)]
pub struct PromptImage<'a> {
    pub ids: &'a [u32],
    pub features: &'a ImageFeatures,
    pub grid: (usize, usize, usize),
}

/// One image's part of a scoring pass: its prompts, its vision features, its patch grid.
#[derive(Clone, Copy)]
pub struct PassImage<'a> {
    pub prompts: &'a [Vec<u32>],
    pub features: &'a ImageFeatures,
    pub grid: (usize, usize, usize),
}

/// The suffix batch of a pass: embedded tokens, positions (3, rows, longest), and each row's
/// real tokens.
struct Suffixes {
    embedded: Embedded,
    positions: Tensor,
    rows: i64,
    /// The rows' token ids (rows x longest), padding zeros.
    ids: Vec<i64>,
    longest: i64,
    /// Each row's real tokens (the rest, up to `longest`, padding).
    lengths: Vec<i64>,
    per_image: Vec<usize>,
}

/// Each image's prompts' tokens after the first `common`, row by row, right-padded with zeros
/// to the longest: the ids (rows x longest), each row's real tokens, and the longest.
fn question_ids(images: &[&[Vec<u32>]], common: usize) -> (Vec<i64>, Vec<i64>, i64) {
    let longest = images.iter().flat_map(|p| p.iter()).map(|p| p.len() - common).max().unwrap_or(1);
    let mut ids = Vec::new();
    let mut lengths = Vec::new();
    for suffix in images.iter().flat_map(|p| p.iter()).map(|p| &p[common..]) {
        lengths.push(suffix.len() as i64);
        ids.extend(suffix.iter().map(|&i| i64::from(i)).chain(std::iter::repeat_n(0, longest - suffix.len())));
    }
    (ids, lengths, longest as i64)
}

/// How many of the question tokens of one image's `prompts` a scoring pass holds once (with
/// [`SuffixRows::Deduplicated`], as releases score): those whose question has the same tokens up
/// to them as an earlier question's. The bench's FLOP count takes them off the token-wise parts.
pub fn question_tokens_held_once(prompts: &[Vec<u32>]) -> usize {
    if prompts.is_empty() {
        return 0;
    }
    let (ids, lengths, longest) = question_ids(&[prompts], common_prefix(prompts));
    let rows = RowIds { ids: &ids, lengths: &lengths, longest, per_image: &[prompts.len()] };
    RealTokens::deduplicated(&rows, Device::Cpu).map_or(0, |real| real.held_once())
}

/// Tokens every prompt shares from the start, leaving each at least one of its own.
fn common_prefix(prompts: &[Vec<u32>]) -> usize {
    let shortest = prompts.iter().map(Vec::len).min().unwrap_or(0);
    let common = (0..shortest).take_while(|&i| prompts.iter().all(|p| p[i] == prompts[0][i])).count();
    common.min(shortest.saturating_sub(1))
}
