//! The Qwen2-VL vision tower: patch embedding, blocks of full attention with 2D rotary
//! positions, LayerNorm and quick-GELU, then the patch merger.
// `x = x + y` on purpose: `+=` on a tch tensor adds in place, and `x` may share storage with
// the caller's input.
#![allow(clippy::assign_op_pattern)]

use tch::Tensor;

use super::config::VisionConfig;
use super::layers::{load_patch_embed, vision_rotary, LayerNorm, Linear, MergerMlp, VisionAttention};
use super::model_dir::VlmError;
use super::weights::Weights;

const EPS: f64 = 1e-6;

struct Block {
    norm1: LayerNorm,
    norm2: LayerNorm,
    attn: VisionAttention,
    fc1: Linear,
    fc2: Linear,
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
        let (d, i) = (cfg.hidden_size as i64, cfg.intermediate_size as i64);
        let patch_embed = load_patch_embed(w, cfg)?;
        let blocks = (0..cfg.depth)
            .map(|b| {
                let at = |name: &str| format!("visual.blocks.{b}.{name}");
                Ok(Block {
                    norm1: LayerNorm::load(w, &at("norm1"), d, EPS)?,
                    norm2: LayerNorm::load(w, &at("norm2"), d, EPS)?,
                    attn: VisionAttention::load(w, &at("attn"), d, cfg.num_heads as i64)?,
                    fc1: Linear::load(w, &at("mlp.fc1"), d, i, true)?,
                    fc2: Linear::load(w, &at("mlp.fc2"), i, d, true)?,
                })
            })
            .collect::<Result<Vec<_>, VlmError>>()?;
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
        let kind = self.patch_embed.kind();
        let mut x = pixels.to_kind(kind).linear(&self.patch_embed, None::<&Tensor>);
        let heads = self.cfg.num_heads as i64;
        let head_dim = self.cfg.hidden_size as i64 / heads;
        let (cos, sin) = vision_rotary(grid, self.cfg.spatial_merge_size, head_dim, x.device());
        let whole = [x.size()[0]];
        for b in &self.blocks {
            let attended = b.attn.forward(&b.norm1.forward(&x), &cos, &sin, &whole);
            x = x + attended;
            let h = b.fc1.forward(&b.norm2.forward(&x));
            let h = &h * (&h * 1.702).sigmoid(); // quick GELU
            x = x + b.fc2.forward(&h);
        }
        self.merger.forward(&self.ln_q.forward(&x))
    }
}
