//! The Qwen3-VL vision tower: patch embedding (with a bias), learned position embeddings
//! interpolated to the image's patch grid, LayerNorm blocks with 2D rotary attention and a GELU
//! MLP, then the patch merger; DeepStack mergers read the blocks named in
//! `deepstack_visual_indexes`.

use tch::{Device, Kind, Tensor};

use crate::config::VisionConfig;
use crate::error::VlmError;
use crate::families::{ImageFeatures, Tower};
use crate::layers::{load_patch_embed, merge_block_order, vision_rotary, LayerNorm, Linear, Turn, VisionAttention};
use crate::weights::Weights;

const EPS: f64 = 1e-6;

/// Pre-norm attention over the whole image, then a pre-norm GELU MLP, each added back.
struct Block {
    norm1: LayerNorm,
    attn: VisionAttention,
    norm2: LayerNorm,
    fc1: Linear,
    fc2: Linear,
    gelu: &'static str,
}

impl Block {
    fn load(w: &Weights, prefix: &str, cfg: &VisionConfig) -> Result<Block, VlmError> {
        let (d, i) = (cfg.hidden_size as i64, cfg.intermediate_size as i64);
        let at = |name: &str| format!("{prefix}.{name}");
        Ok(Block {
            norm1: LayerNorm::load(w, &at("norm1"), d, EPS)?,
            attn: VisionAttention::load(w, &at("attn"), d, cfg.num_heads as i64)?,
            norm2: LayerNorm::load(w, &at("norm2"), d, EPS)?,
            fc1: Linear::load(w, &at("mlp.linear_fc1"), d, i, true)?,
            fc2: Linear::load(w, &at("mlp.linear_fc2"), i, d, true)?,
            gelu: cfg.mlp_gelu,
        })
    }

    /// `x` holds images of `lens` patches each, one after another; each attends within itself.
    fn forward(&self, x: &Tensor, turn: &Turn, lens: &[i64]) -> Tensor {
        let x = x + self.attn.forward(&self.norm1.forward(x), turn, lens);
        &x + self.fc2.forward(&self.fc1.forward(&self.norm2.forward(&x)).gelu(self.gelu))
    }
}

/// Each merge x merge block of patches, concatenated, through Linear, GELU, Linear to the text
/// model's width. The main merger normalises each patch before concatenating; the DeepStack
/// mergers normalise the concatenation.
struct Merger {
    norm: LayerNorm,
    fc1: Linear,
    fc2: Linear,
    norm_after_concat: bool,
    merged: i64,
}

impl Merger {
    fn load(w: &Weights, prefix: &str, cfg: &VisionConfig, norm_after_concat: bool) -> Result<Merger, VlmError> {
        let merged = cfg.hidden_size as i64 * (cfg.spatial_merge_size * cfg.spatial_merge_size) as i64;
        let norm_width = if norm_after_concat { merged } else { cfg.hidden_size as i64 };
        Ok(Merger {
            norm: LayerNorm::load(w, &format!("{prefix}.norm"), norm_width, EPS)?,
            fc1: Linear::load(w, &format!("{prefix}.linear_fc1"), merged, merged, true)?,
            fc2: Linear::load(w, &format!("{prefix}.linear_fc2"), merged, cfg.out_hidden_size as i64, true)?,
            norm_after_concat,
            merged,
        })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        let normed = if self.norm_after_concat {
            self.norm.forward(&x.view([-1, self.merged]))
        } else {
            self.norm.forward(x).view([-1, self.merged])
        };
        self.fc2.forward(&self.fc1.forward(&normed).gelu("none"))
    }
}

pub struct VisionQwen3 {
    patch_embed: Tensor,
    patch_bias: Tensor,
    /// (grid side², width): the learned positions of a square grid.
    pos_embed: Tensor,
    side: usize,
    blocks: Vec<Block>,
    merger: Merger,
    /// One merger per entry of `deepstack_visual_indexes`, in that order.
    deepstack: Vec<Merger>,
    cfg: VisionConfig,
}

impl VisionQwen3 {
    pub fn load(w: &Weights, cfg: &VisionConfig) -> Result<VisionQwen3, VlmError> {
        let d = cfg.hidden_size as i64;
        let positions = cfg.num_position_embeddings.unwrap_or(0);
        let blocks = (0..cfg.depth).map(|b| Block::load(w, &format!("visual.blocks.{b}"), cfg)).collect::<Result<Vec<_>, VlmError>>()?;
        let deepstack = (0..cfg.deepstack_visual_indexes.len())
            .map(|k| Merger::load(w, &format!("visual.deepstack_merger_list.{k}"), cfg, true))
            .collect::<Result<Vec<_>, VlmError>>()?;
        Ok(VisionQwen3 {
            patch_embed: load_patch_embed(w, cfg)?,
            patch_bias: w.get("visual.patch_embed.proj.bias", &[d])?,
            pos_embed: w.get("visual.pos_embed.weight", &[positions as i64, d])?,
            side: (positions as f64).sqrt().round() as usize,
            blocks,
            merger: Merger::load(w, "visual.merger", cfg, false)?,
            deepstack,
            cfg: cfg.clone(),
        })
    }

    /// Image embeddings and DeepStack features, one row per merged patch.
    pub fn forward(&self, pixels: &Tensor, grid: (usize, usize, usize)) -> ImageFeatures {
        self.forward_many(&[pixels], grid).remove(0)
    }

    /// [`Self::forward`] for several images of one patch grid at once: their patches in one
    /// sequence, so every product has all their rows; attention stays within each image.
    pub fn forward_many(&self, pixels: &[&Tensor], grid: (usize, usize, usize)) -> Vec<ImageFeatures> {
        let (kind, images) = (self.patch_embed.kind(), pixels.len() as i64);
        let device = pixels[0].device();
        let mut x = Tensor::cat(pixels, 0).to_kind(kind).linear(&self.patch_embed, Some(&self.patch_bias));
        x = &x + self.positions(grid, device).to_kind(kind).repeat([images, 1]);
        let head_dim = self.cfg.hidden_size as i64 / self.cfg.num_heads as i64;
        let (cos, sin) = vision_rotary(grid, self.cfg.spatial_merge_size, head_dim, self.cfg.rope_theta, device);
        let turn = Turn::new(cos.repeat([images, 1, 1]), &sin.repeat([images, 1, 1]));
        let lens = vec![(grid.0 * grid.1 * grid.2) as i64; images as usize];
        let mut deepstack = Vec::with_capacity(self.deepstack.len());
        for (index, block) in self.blocks.iter().enumerate() {
            x = block.forward(&x, &turn, &lens);
            if let Some(k) = self.cfg.deepstack_visual_indexes.iter().position(|&d| d == index) {
                deepstack.push((k, self.deepstack[k].forward(&x)));
            }
        }
        // The text model takes them in block order (as pushed), whatever order the config lists
        // them in.
        let per_image = |t: &Tensor| t.chunk(images, 0);
        let mut maps: Vec<Vec<Tensor>> = deepstack.iter().map(|(_, f)| per_image(f)).collect();
        per_image(&self.merger.forward(&x))
            .into_iter()
            .enumerate()
            .map(|(i, embeds)| ImageFeatures { embeds, deepstack: maps.iter_mut().map(|m| m[i].shallow_clone()).collect() })
            .collect()
    }

    /// The learned position grid resampled bilinearly (corners aligned) to the image's patch
    /// grid, per patch in merge-block order: (patches, width), f32.
    fn positions(&self, grid: (usize, usize, usize), device: Device) -> Tensor {
        let (rows, cols) = merge_block_order(grid, self.cfg.spatial_merge_size);
        let side = self.side as i64;
        // Two taps per axis and their weights, as transformers computes them in f32.
        let axis = |index: Vec<f32>, size: usize| -> (Tensor, Tensor) {
            let source = Tensor::from_slice(&index) * (side - 1) as f64 / (size.max(2) - 1) as f64;
            let floor = source.floor();
            let taps = (floor.to_kind(Kind::Int64).unsqueeze(1) + Tensor::from_slice(&[0i64, 1])).clamp(0, side - 1);
            let distance = (source.unsqueeze(1) - floor.unsqueeze(1) - Tensor::from_slice(&[0f32, 1.0])).abs();
            (taps, (-distance + 1.0).clamp_min(0.0))
        };
        let (h_taps, h_weights) = axis(rows.iter().map(|&r| r as f32).collect(), grid.1);
        let (w_taps, w_weights) = axis(cols.iter().map(|&c| c as f32).collect(), grid.2);
        let indices = (h_taps.unsqueeze(2) * side + w_taps.unsqueeze(1)).view([-1, 4]).to_device(device);
        let weights = (h_weights.unsqueeze(2) * w_weights.unsqueeze(1)).view([-1, 4, 1]).to_device(device);
        let taps = self.pos_embed.index_select(0, &indices.view([-1])).view([indices.size()[0], 4, -1]).to_kind(Kind::Float);
        (taps * weights).sum_dim_intlist(&[1i64][..], false, Kind::Float)
    }
}

impl Tower for VisionQwen3 {
    fn features(&self, pixels: &Tensor, grid: (usize, usize, usize)) -> ImageFeatures {
        self.forward(pixels, grid)
    }

    fn features_many(&self, pixels: &[&Tensor], grid: (usize, usize, usize)) -> Vec<ImageFeatures> {
        self.forward_many(pixels, grid)
    }
}
