//! The Qwen2.5-VL vision tower: patch embedding, blocks with RMSNorm and gated SiLU that attend
//! within windows of merged patches (all but the `fullatt_block_indexes` blocks, which attend
//! over the whole image), then the patch merger and the window order undone.

use tch::Tensor;

use crate::config::VisionConfig;
use crate::error::VlmError;
use crate::families::{ImageFeatures, Tower};
use crate::layers::{load_patch_embed, vision_rotary, GatedMlp, MergerMlp, RmsNorm, Turn, VisionAttention};
use crate::weights::Weights;

const EPS: f64 = 1e-6;

/// Pre-norm attention (within windows, or over the whole image), then a pre-norm gated MLP, each
/// added back.
struct Block {
    norm1: RmsNorm,
    attn: VisionAttention,
    norm2: RmsNorm,
    mlp: GatedMlp,
}

impl Block {
    fn load(w: &Weights, prefix: &str, cfg: &VisionConfig) -> Result<Block, VlmError> {
        let (d, i) = (cfg.hidden_size as i64, cfg.intermediate_size as i64);
        let at = |name: &str| format!("{prefix}.{name}");
        Ok(Block {
            norm1: RmsNorm::load(w, &at("norm1"), d, EPS)?,
            attn: VisionAttention::load(w, &at("attn"), d, cfg.num_heads as i64)?,
            norm2: RmsNorm::load(w, &at("norm2"), d, EPS)?,
            mlp: GatedMlp::load(w, &at("mlp"), d, i, true)?,
        })
    }

    /// `lens`: the rows of each attention window, in order.
    fn forward(&self, x: &Tensor, turn: &Turn, lens: &[i64]) -> Tensor {
        let x = x + self.attn.forward(&self.norm1.forward(x), turn, lens);
        &x + self.mlp.forward(&self.norm2.forward(&x))
    }
}

pub struct VisionQwen25 {
    patch_embed: Tensor,
    blocks: Vec<Block>,
    ln_q: RmsNorm,
    merger: MergerMlp,
    cfg: VisionConfig,
}

impl VisionQwen25 {
    pub fn load(w: &Weights, cfg: &VisionConfig) -> Result<VisionQwen25, VlmError> {
        let d = cfg.hidden_size as i64;
        let patch_embed = load_patch_embed(w, cfg)?;
        let blocks = (0..cfg.depth).map(|b| Block::load(w, &format!("visual.blocks.{b}"), cfg)).collect::<Result<Vec<_>, VlmError>>()?;
        Ok(VisionQwen25 {
            patch_embed,
            blocks,
            ln_q: RmsNorm::load(w, "visual.merger.ln_q", d, EPS)?,
            merger: MergerMlp::load(w, cfg)?,
            cfg: cfg.clone(),
        })
    }

    /// Image embeddings, one per merged patch, in the image's own (not the window) order.
    pub fn forward(&self, pixels: &Tensor, grid: (usize, usize, usize)) -> Tensor {
        self.forward_many(&[pixels], grid).remove(0)
    }

    /// [`Self::forward`] for several images of one patch grid at once: their patches in one
    /// sequence, each image's windows after the last image's, so every product has all their
    /// rows; attention stays within each window, or each image in the full-attention blocks.
    pub fn forward_many(&self, pixels: &[&Tensor], grid: (usize, usize, usize)) -> Vec<Tensor> {
        let cfg = &self.cfg;
        let images = pixels.len();
        let unit = (cfg.spatial_merge_size * cfg.spatial_merge_size) as i64;
        let (order, window_lens) = windows(grid, cfg.spatial_merge_size, cfg.window_size.unwrap_or(0), cfg.patch_size);
        let merged_per_image = order.len() as i64;
        let order: Vec<i64> = (0..images as i64).flat_map(|i| order.iter().map(move |&o| o + i * merged_per_image)).collect();
        let window_lens = window_lens.repeat(images);
        let device = pixels[0].device();
        let order_t = Tensor::from_slice(&order).to_device(device);
        // Rows grouped by merged patch (unit rows each), reordered window by window.
        let by_window = |x: &Tensor| {
            let n = x.size()[0];
            x.reshape([n / unit, unit, -1]).index_select(0, &order_t).reshape([n, -1])
        };
        let kind = self.patch_embed.kind();
        let mut x = by_window(&Tensor::cat(pixels, 0).to_kind(kind).linear(&self.patch_embed, None::<&Tensor>));
        let head_dim = cfg.hidden_size as i64 / cfg.num_heads as i64;
        let (cos, sin) = vision_rotary(grid, cfg.spatial_merge_size, head_dim, cfg.rope_theta, device);
        let repeated = |t: Tensor| by_window(&t.squeeze_dim(1).repeat([images as i64, 1])).unsqueeze(1);
        let turn = Turn::new(repeated(cos), &repeated(sin));
        let whole = vec![merged_per_image * unit; images];
        for (index, block) in self.blocks.iter().enumerate() {
            let lens: &[i64] = if cfg.fullatt_block_indexes.contains(&index) { &whole } else { &window_lens };
            x = block.forward(&x, &turn, lens);
        }
        let merged = self.merger.forward(&self.ln_q.forward(&x));
        merged.index_select(0, &order_t.argsort(0, false)).chunk(images as i64, 0)
    }
}

/// The merged patches in window order, and each window's length in (unmerged) patches.
/// Windows are `window_size / merge / patch` merged patches square, row-major; edge windows
/// are smaller.
fn windows(grid: (usize, usize, usize), merge: usize, window_size: usize, patch: usize) -> (Vec<i64>, Vec<i64>) {
    let (t, h, w) = grid;
    let (lh, lw) = (h / merge, w / merge);
    let side = (window_size / merge / patch).max(1);
    let (mut order, mut lens) = (Vec::new(), Vec::new());
    for ti in 0..t {
        for wy in (0..lh).step_by(side) {
            for wx in (0..lw).step_by(side) {
                let before = order.len();
                for y in wy..(wy + side).min(lh) {
                    for x in wx..(wx + side).min(lw) {
                        order.push((ti * lh * lw + y * lw + x) as i64);
                    }
                }
                lens.push(((order.len() - before) * merge * merge) as i64);
            }
        }
    }
    (order, lens)
}

impl Tower for VisionQwen25 {
    fn features(&self, pixels: &Tensor, grid: (usize, usize, usize)) -> ImageFeatures {
        ImageFeatures::plain(self.forward(pixels, grid))
    }

    fn features_many(&self, pixels: &[&Tensor], grid: (usize, usize, usize)) -> Vec<ImageFeatures> {
        self.forward_many(pixels, grid).into_iter().map(ImageFeatures::plain).collect()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn windows_cover_every_patch_once() {
        // 10 x 14 patches, merge 2 -> 5 x 7 merged; windows of 2 merged patches (56 px / 2 / 14).
        let (order, lens) = super::windows((1, 10, 14), 2, 56, 14);
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(sorted, (0..35).collect::<Vec<i64>>());
        assert_eq!(lens.len(), 3 * 4);
        assert_eq!(lens.iter().sum::<i64>(), 35 * 4);
        assert_eq!(&order[..4], &[0, 1, 7, 8]);
    }
}
