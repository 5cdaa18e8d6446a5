//! The Qwen2-VL vision tower: patch embedding, blocks of full attention with 2D rotary
//! positions, LayerNorm and quick-GELU, then the patch merger.

use tch::Tensor;

use crate::config::VisionConfig;
use crate::error::VlmError;
use crate::families::{ImageFeatures, Tower};
use crate::layers::{load_patch_embed, vision_rotary, LayerNorm, Linear, MergerMlp, Turn, VisionAttention};
use crate::weights::Weights;

const EPS: f64 = 1e-6;

/// fc2(quick_gelu(fc1(x))), quick GELU being x * sigmoid(1.702 x).
struct QuickGeluMlp {
    fc1: Linear,
    fc2: Linear,
}

impl QuickGeluMlp {
    fn forward(&self, x: &Tensor) -> Tensor {
        let h = self.fc1.forward(x);
        let h = &h * (&h * 1.702).sigmoid();
        self.fc2.forward(&h)
    }
}

/// Pre-norm attention over the whole image, then a pre-norm MLP, each added back.
struct Block {
    norm1: LayerNorm,
    attn: VisionAttention,
    norm2: LayerNorm,
    mlp: QuickGeluMlp,
}

impl Block {
    fn load(w: &Weights, prefix: &str, cfg: &VisionConfig) -> Result<Block, VlmError> {
        let (d, i) = (cfg.hidden_size as i64, cfg.intermediate_size as i64);
        let at = |name: &str| format!("{prefix}.{name}");
        Ok(Block {
            norm1: LayerNorm::load(w, &at("norm1"), d, EPS)?,
            attn: VisionAttention::load(w, &at("attn"), d, cfg.num_heads as i64)?,
            norm2: LayerNorm::load(w, &at("norm2"), d, EPS)?,
            mlp: QuickGeluMlp { fc1: Linear::load(w, &at("mlp.fc1"), d, i, true)?, fc2: Linear::load(w, &at("mlp.fc2"), i, d, true)? },
        })
    }

    /// `x` holds images of `lens` patches each, one after another; each attends within itself.
    fn forward(&self, x: &Tensor, turn: &Turn, lens: &[i64]) -> Tensor {
        let x = x + self.attn.forward(&self.norm1.forward(x), turn, lens);
        &x + self.mlp.forward(&self.norm2.forward(&x))
    }
}

pub struct VisionQwen2 {
    patch_embed: Tensor,
    blocks: Vec<Block>,
    ln_q: LayerNorm,
    merger: MergerMlp,
    cfg: VisionConfig,
}

impl VisionQwen2 {
    pub fn load(w: &Weights, cfg: &VisionConfig) -> Result<VisionQwen2, VlmError> {
        let d = cfg.hidden_size as i64;
        let patch_embed = load_patch_embed(w, cfg)?;
        let blocks = (0..cfg.depth).map(|b| Block::load(w, &format!("visual.blocks.{b}"), cfg)).collect::<Result<Vec<_>, VlmError>>()?;
        Ok(VisionQwen2 {
            patch_embed,
            blocks,
            ln_q: LayerNorm::load(w, "visual.merger.ln_q", d, EPS)?,
            merger: MergerMlp::load(w, cfg)?,
            cfg: cfg.clone(),
        })
    }

    /// Image embeddings, one per merged patch: (h * w / merge², out_hidden_size).
    pub fn forward(&self, pixels: &Tensor, grid: (usize, usize, usize)) -> Tensor {
        self.forward_many(&[pixels], grid).remove(0)
    }

    /// [`Self::forward`] for several images of one patch grid at once: their patches in one
    /// sequence, so every product has all their rows; attention stays within each image.
    pub fn forward_many(&self, pixels: &[&Tensor], grid: (usize, usize, usize)) -> Vec<Tensor> {
        let (kind, images) = (self.patch_embed.kind(), pixels.len() as i64);
        let mut x = Tensor::cat(pixels, 0).to_kind(kind).linear(&self.patch_embed, None::<&Tensor>);
        let head_dim = self.cfg.hidden_size as i64 / self.cfg.num_heads as i64;
        let (cos, sin) = vision_rotary(grid, self.cfg.spatial_merge_size, head_dim, self.cfg.rope_theta, x.device());
        let turn = Turn::new(cos.repeat([images, 1, 1]), &sin.repeat([images, 1, 1]));
        let lens = vec![(grid.0 * grid.1 * grid.2) as i64; images as usize];
        for block in &self.blocks {
            x = block.forward(&x, &turn, &lens);
        }
        self.merger.forward(&self.ln_q.forward(&x)).chunk(images, 0)
    }
}

impl Tower for VisionQwen2 {
    fn features(&self, pixels: &Tensor, grid: (usize, usize, usize)) -> ImageFeatures {
        ImageFeatures::plain(self.forward(pixels, grid))
    }

    fn features_many(&self, pixels: &[&Tensor], grid: (usize, usize, usize)) -> Vec<ImageFeatures> {
        self.forward_many(pixels, grid).into_iter().map(ImageFeatures::plain).collect()
    }
}
