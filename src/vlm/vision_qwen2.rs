//! The Qwen2-VL vision tower: patch embedding, blocks of full attention with 2D rotary
//! positions, LayerNorm and quick-GELU, then the patch merger.
// `x = x + y` on purpose: `+=` on a tch tensor adds in place, and `x` may share storage with
// the caller's input.
#![allow(clippy::assign_op_pattern)]

use tch::Tensor;

use super::config::VisionConfig;
use super::layers::{apply_rotary, attention, load_patch_embed, vision_rotary, LayerNorm, Linear, MergerMlp};
use super::model_dir::VlmError;
use super::weights::Weights;

const EPS: f64 = 1e-6;

struct Block {
    norm1: LayerNorm,
    norm2: LayerNorm,
    qkv: Linear,
    proj: Linear,
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
                    qkv: Linear::load(w, &at("attn.qkv"), d, 3 * d, true)?,
                    proj: Linear::load(w, &at("attn.proj"), d, d, true)?,
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
        let n = x.size()[0];
        for b in &self.blocks {
            let h = b.norm1.forward(&x);
            let qkv = b.qkv.forward(&h).reshape([n, 3, heads, head_dim]).permute([1, 0, 2, 3]);
            let (q, k, v) = (qkv.get(0), qkv.get(1), qkv.get(2));
            let q = apply_rotary(&q, &cos, &sin).transpose(0, 1).unsqueeze(0);
            let k = apply_rotary(&k, &cos, &sin).transpose(0, 1).unsqueeze(0);
            let v = v.transpose(0, 1).unsqueeze(0);
            let out =
                attention(&q, &k, &v, None, (head_dim as f64).powf(-0.5)).squeeze_dim(0).transpose(0, 1).reshape([n, heads * head_dim]);
            x = x + b.proj.forward(&out);
            let h = b.fc1.forward(&b.norm2.forward(&x));
            let h = &h * (&h * 1.702).sigmoid(); // quick GELU
            x = x + b.fc2.forward(&h);
        }
        self.merger.forward(&self.ln_q.forward(&x))
    }
}
