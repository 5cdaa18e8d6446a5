//! A whole vision-language model on one device: image embeddings, the prompt with the image
//! scattered in, last-position logits, and yes/no scoring of many questions over one shared image
//! prefix. Greedy generation is in [`super::generate`].

use tch::{Device, Kind, Tensor};

use super::checkpoint::ModelConfig;
use super::error::VlmError;
use super::families::Family;
use super::families::{ImageFeatures, VisionTower};
use super::model_dir::ModelDir;
use super::rope;
use super::shared_prefix::PrefixAttention;
use super::text::{DecoderCache, Deepstack, Embedded, TextModel};
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
    /// [`Weights::random`]): for throughput benchmarks of models too large to ship.
    pub fn random(config: &ModelConfig, device: Device, kind: Kind, seed: i64) -> Result<VlModel, VlmError> {
        super::cpu_kernels::pin();
        let weights = Weights::random(device, kind, !config.text.tie_word_embeddings, seed);
        Self::from_weights(&weights, config, device, kind)
    }

    fn from_weights(weights: &Weights, config: &ModelConfig, device: Device, kind: Kind) -> Result<VlModel, VlmError> {
        Ok(VlModel {
            vision: VisionTower::load(config.family, weights, &config.vision)?,
            text: TextModel::load(weights, &config.text, config.image_token_id)?,
            image_token_id: config.image_token_id,
            merge: config.vision.spatial_merge_size,
            multimodal_positions: config.family != Family::Gemma4,
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

    fn positions_tensor(&self, axes: &[Vec<i64>; 3], from: usize, to: usize) -> Tensor {
        let flat: Vec<i64> = axes.iter().flat_map(|a| a[from..to].iter().copied()).collect();
        Tensor::from_slice(&flat).to_device(self.device).view([3, 1, (to - from) as i64])
    }

    /// Runs the first `len` tokens of `ids` (the image's among them) into `cache`, DeepStack
    /// features added where the family has them; returns their hidden states (1, len, hidden).
    pub(super) fn prefill(
        &self,
        ids: &[u32],
        len: usize,
        image: &ImageFeatures,
        grid: (usize, usize, usize),
        cache: &mut DecoderCache,
    ) -> Result<Tensor, VlmError> {
        let chunk = &ids[..len];
        let embeds = self.embed(chunk, Some(&image.embeds))?;
        let (axes, _) = self.positions(ids, grid)?;
        let deepstack = match chunk.iter().position(|&i| i == self.image_token_id) {
            Some(start) if !image.deepstack.is_empty() => {
                Some(Deepstack { start: start as i64, layers: image.deepstack.iter().map(Tensor::shallow_clone).collect() })
            }
            _ => None,
        };
        Ok(self.text.forward(&embeds, &self.positions_tensor(&axes, 0, len), cache, deepstack.as_ref()))
    }

    /// Logits (vocab) predicting the token after `ids`, from one full pass.
    pub fn last_logits(&self, ids: &[u32], image: &ImageFeatures, grid: (usize, usize, usize)) -> Result<Tensor, VlmError> {
        tch::no_grad(|| {
            let hidden = self.prefill(ids, ids.len(), image, grid, &mut DecoderCache::default())?;
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
        self.score_with(prompts, image, grid, answer, PrefixAttention::Copied)
    }

    /// [`Self::score`], the suffixes meeting the prefix as `method` says: on copies of its cache,
    /// or on the one cache ([`PrefixAttention::Shared`], the Qwen decoder only).
    pub fn score_with(
        &self,
        prompts: &[Vec<u32>],
        image: &ImageFeatures,
        grid: (usize, usize, usize),
        answer: (u32, u32),
        method: PrefixAttention,
    ) -> Result<Vec<YesNo>, VlmError> {
        if prompts.is_empty() {
            return Ok(Vec::new());
        }
        tch::no_grad(|| {
            let shortest = prompts.iter().map(Vec::len).min().unwrap_or(0);
            let mut common = (0..shortest).take_while(|&i| prompts.iter().all(|p| p[i] == prompts[0][i])).count();
            common = common.min(shortest - 1); // every prompt keeps at least one token of its own
            let mut cache = DecoderCache::default();
            // Only the cache it leaves is needed.
            let _ = self.prefill(&prompts[0], common, image, grid, &mut cache)?;

            let longest = prompts.iter().map(|p| p.len() - common).max().unwrap_or(1);
            let mut ids = Vec::new();
            let mut positions = [Vec::new(), Vec::new(), Vec::new()];
            for p in prompts {
                let (axes, _) = self.positions(p, grid)?;
                let suffix = &p[common..];
                let pad = longest - suffix.len();
                ids.extend(suffix.iter().map(|&i| i64::from(i)).chain(std::iter::repeat_n(0, pad)));
                for (axis, out) in axes.iter().zip(positions.iter_mut()) {
                    let last = *axis.last().expect("non-empty");
                    out.extend(axis[common..].iter().copied().chain((1..=pad as i64).map(|k| last + k)));
                }
            }
            let n = prompts.len() as i64;
            let ids = Tensor::from_slice(&ids).to_device(self.device).view([n, longest as i64]);
            let flat: Vec<i64> = positions.concat();
            let positions = Tensor::from_slice(&flat).to_device(self.device).view([3, n, longest as i64]);
            let embedded = self.text.embed(&ids);
            let hidden = match method {
                PrefixAttention::Copied => self.text.forward(&embedded, &positions, &mut cache.expand(n), None),
                PrefixAttention::Shared => {
                    self.text.forward_shared_prefix(&embedded, &positions, &mut cache.shared_by(n)).ok_or_else(|| {
                        VlmError::Input(
                            "shared prefix attention is implemented for the Qwen decoder only, not yet Gemma 4's: score it copied".into(),
                        )
                    })?
                }
            };
            // Each prompt's last real token, then only the two answer rows of the LM head: the
            // full vocabulary projection would cost vocab/2 times as much and is never read.
            let last: Vec<i64> =
                prompts.iter().enumerate().map(|(row, p)| row as i64 * longest as i64 + (p.len() - common - 1) as i64).collect();
            let last = hidden.view([n * longest as i64, -1]).index_select(0, &Tensor::from_slice(&last).to_device(self.device));
            let pair = self.text.answer_logits(&last, answer).to_kind(Kind::Float).to_device(Device::Cpu);
            let values = Vec::<f32>::try_from(pair.view([-1])).map_err(|e| VlmError::Input(format!("reading the answer logits: {e}")))?;
            let out = values.chunks_exact(2).map(|c| YesNo { logit_yes: c[0], logit_no: c[1] }).collect();
            Ok(out)
        })
    }
}
