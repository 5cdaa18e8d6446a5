//! Gemma 4's vision tower and its projection into the text model (`Gemma4VisionModel` and
//! `Gemma4MultimodalEmbedder` in transformers 5.23).
//!
//! Patches (rows, columns; each 16 x 16 x RGB, values in [0, 1]) are scaled to [-1, 1] and
//! projected, a column and a row embedding added; the blocks attend over all of the image's
//! patches with 2D rotary angles (the first half of each head turns with the column, the second
//! with the row) and no 1/sqrt(d) scale (q, k and v are RMS-normalised per head). Then each
//! k x k square of patches is averaged into one token, scaled by sqrt(width), optionally
//! standardised, RMS-normalised without a weight and projected to the text model's width.
//!
//! The image processor pads every image's patches to one length; padding takes no part in any
//! of this (its keys are masked, its tokens dropped), so the engine runs the real patches only.

use tch::{Kind, Tensor};

use super::norm::Norm;
use super::Gemma4Vision;
use crate::config::VisionConfig;
use crate::error::VlmError;
use crate::families::{ImageFeatures, Tower};
use crate::layers::{attention, Turn};
use crate::weights::Weights;

/// A linear layer without bias whose input and output may be clamped to bounds stored with the
/// weights (`use_clipped_linears`).
struct ClippedLinear {
    weight: Tensor,
    bounds: Option<[f64; 4]>,
}

impl ClippedLinear {
    fn load(w: &Weights, prefix: &str, inputs: i64, outputs: i64, clipped: bool) -> Result<ClippedLinear, VlmError> {
        let bounds = if clipped {
            let bound = |name: &str| -> Result<f64, VlmError> {
                Ok(w.get(&format!("{prefix}.{name}"), &[])?.to_kind(Kind::Double).double_value(&[]))
            };
            Some([bound("input_min")?, bound("input_max")?, bound("output_min")?, bound("output_max")?])
        } else {
            None
        };
        Ok(ClippedLinear { weight: w.get(&format!("{prefix}.linear.weight"), &[outputs, inputs])?, bounds })
    }

    fn forward(&self, x: &Tensor) -> Tensor {
        match self.bounds {
            None => x.linear(&self.weight, None::<&Tensor>),
            Some([in_min, in_max, out_min, out_max]) => {
                x.clamp(in_min, in_max).linear(&self.weight, None::<&Tensor>).clamp(out_min, out_max)
            }
        }
    }
}

struct Block {
    input_norm: Norm,
    q: ClippedLinear,
    k: ClippedLinear,
    v: ClippedLinear,
    o: ClippedLinear,
    q_norm: Norm,
    k_norm: Norm,
    v_norm: Norm,
    post_attention_norm: Norm,
    pre_mlp_norm: Norm,
    gate: ClippedLinear,
    up: ClippedLinear,
    down: ClippedLinear,
    post_mlp_norm: Norm,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
}

impl Block {
    fn load(w: &Weights, prefix: &str, cfg: &VisionConfig) -> Result<Block, VlmError> {
        let g = cfg.own.get::<Gemma4Vision>().expect("a Gemma 4 vision config");
        let (d, i, eps) = (cfg.hidden_size as i64, cfg.intermediate_size as i64, g.rms_norm_eps);
        let (heads, kv_heads, hd) = (cfg.num_heads as i64, g.kv_heads as i64, g.head_dim as i64);
        let c = g.clipped_linears;
        let at = |name: &str| format!("{prefix}.{name}");
        Ok(Block {
            input_norm: Norm::load(w, &at("input_layernorm"), d, eps)?,
            q: ClippedLinear::load(w, &at("self_attn.q_proj"), d, heads * hd, c)?,
            k: ClippedLinear::load(w, &at("self_attn.k_proj"), d, kv_heads * hd, c)?,
            v: ClippedLinear::load(w, &at("self_attn.v_proj"), d, kv_heads * hd, c)?,
            o: ClippedLinear::load(w, &at("self_attn.o_proj"), heads * hd, d, c)?,
            q_norm: Norm::load(w, &at("self_attn.q_norm"), hd, eps)?,
            k_norm: Norm::load(w, &at("self_attn.k_norm"), hd, eps)?,
            v_norm: Norm::unscaled(eps),
            post_attention_norm: Norm::load(w, &at("post_attention_layernorm"), d, eps)?,
            pre_mlp_norm: Norm::load(w, &at("pre_feedforward_layernorm"), d, eps)?,
            gate: ClippedLinear::load(w, &at("mlp.gate_proj"), d, i, c)?,
            up: ClippedLinear::load(w, &at("mlp.up_proj"), d, i, c)?,
            down: ClippedLinear::load(w, &at("mlp.down_proj"), i, d, c)?,
            post_mlp_norm: Norm::load(w, &at("post_feedforward_layernorm"), d, eps)?,
            heads,
            kv_heads,
            head_dim: hd,
        })
    }

    /// `x` (images, patches, width), each image attending within itself; `turns` the 2D angles,
    /// one per half of a head.
    fn forward(&self, x: &Tensor, turns: &AxisTurns) -> Tensor {
        let (b, n) = (x.size()[0], x.size()[1]);
        let normed = self.input_norm.forward(x);
        let heads_of = |t: Tensor, h: i64| t.view([b, n, h, self.head_dim]).transpose(1, 2);
        let q = turns.apply(&self.q_norm.forward(&heads_of(self.q.forward(&normed), self.heads)));
        let k = turns.apply(&self.k_norm.forward(&heads_of(self.k.forward(&normed), self.kv_heads)));
        let v = self.v_norm.forward(&heads_of(self.v.forward(&normed), self.kv_heads));
        let groups = self.heads / self.kv_heads;
        let (k, v) = (k.repeat_interleave_self_int(groups, 1, None), v.repeat_interleave_self_int(groups, 1, None));
        let out = attention(&q, &k, &v, None, 1.0).transpose(1, 2).reshape([b, n, self.heads * self.head_dim]);
        let x = x + self.post_attention_norm.forward(&self.o.forward(&out));
        let h = self.pre_mlp_norm.forward(&x);
        let mlp = self.down.forward(&(self.gate.forward(&h).gelu("tanh") * self.up.forward(&h)));
        &x + self.post_mlp_norm.forward(&mlp)
    }
}

/// The 2D angles (1, 1, patches, head_dim): each half of a head turns with its own axis
/// (rotate_half within the half), each half's turn made once a forward pass.
struct AxisTurns([Turn; 2]);

impl AxisTurns {
    fn new(cos: &Tensor, sin: &Tensor) -> AxisTurns {
        let half = cos.size()[3] / 2;
        let turn = |i: i64| Turn::new(cos.narrow(-1, i * half, half), &sin.narrow(-1, i * half, half));
        AxisTurns([turn(0), turn(1)])
    }

    fn apply(&self, x: &Tensor) -> Tensor {
        let half = x.size()[3] / 2;
        Tensor::cat(&[self.0[0].apply(&x.narrow(-1, 0, half)), self.0[1].apply(&x.narrow(-1, half, half))], -1)
    }
}

pub struct VisionGemma4 {
    input_proj: Tensor,
    /// (2, positions, width): column embeddings, then row embeddings.
    position_table: Tensor,
    blocks: Vec<Block>,
    standardize: Option<(Tensor, Tensor)>,
    projection: Tensor,
    inv_freq: Tensor,
    pool: i64,
    width: i64,
    /// The multimodal embedder's RMSNorm (no weight) before the projection.
    embed_norm: Norm,
}

impl VisionGemma4 {
    pub fn load(w: &Weights, cfg: &VisionConfig) -> Result<VisionGemma4, VlmError> {
        let g = cfg.own.get::<Gemma4Vision>().ok_or_else(|| VlmError::Input("Gemma 4's tower needs its vision config".into()))?;
        let (d, p) = (cfg.hidden_size as i64, cfg.patch_size as i64);
        let t = "model.vision_tower";
        let blocks =
            (0..cfg.depth).map(|i| Block::load(w, &format!("{t}.encoder.layers.{i}"), cfg)).collect::<Result<Vec<_>, VlmError>>()?;
        let input_proj = w.get(&format!("{t}.patch_embedder.input_proj.weight"), &[d, 3 * p * p])?;
        let device = input_proj.device();
        // The angles of one axis: head_dim / 4 frequencies over head_dim / 2.
        let spatial = g.head_dim as i64 / 2;
        let exponents = Tensor::arange_start_step(0, spatial, 2, (Kind::Int64, device)).to_kind(Kind::Float) / spatial as f64;
        let inv_freq = Tensor::from(cfg.rope_theta as f32).to_device(device).pow(&exponents).reciprocal();
        Ok(VisionGemma4 {
            input_proj,
            position_table: w.get(&format!("{t}.patch_embedder.position_embedding_table"), &[2, g.position_embedding_size as i64, d])?,
            blocks,
            standardize: if g.standardize {
                Some((
                    w.get(&format!("{t}.std_bias"), &[d])?.to_kind(Kind::Float),
                    w.get(&format!("{t}.std_scale"), &[d])?.to_kind(Kind::Float),
                ))
            } else {
                None
            },
            projection: w.get("model.embed_vision.embedding_projection.weight", &[cfg.out_hidden_size as i64, d])?,
            inv_freq,
            pool: cfg.spatial_merge_size as i64,
            width: d,
            embed_norm: Norm::unscaled(g.rms_norm_eps),
        })
    }

    /// The soft tokens (rows / k x columns / k, text width) of one image's patches (rows x
    /// columns, row-major; grid (1, rows, columns)).
    pub fn forward(&self, pixels: &Tensor, grid: (usize, usize, usize)) -> Tensor {
        self.forward_many(&[pixels], grid).remove(0)
    }

    /// [`Self::forward`] for several images of one grid at once, a batch of images: every
    /// product sees all their patches; attention stays within each image.
    pub fn forward_many(&self, pixels: &[&Tensor], (_, rows, cols): (usize, usize, usize)) -> Vec<Tensor> {
        let (rows, cols, images) = (rows as i64, cols as i64, pixels.len() as i64);
        let device = self.input_proj.device();
        let x = ((Tensor::stack(pixels, 0) - 0.5) * 2.0).to_kind(self.input_proj.kind()).linear(&self.input_proj, None::<&Tensor>);
        let col = Tensor::arange(cols, (Kind::Int64, device)).repeat([rows]);
        let row = Tensor::arange(rows, (Kind::Int64, device)).repeat_interleave_self_int(cols, 0, None);
        let positions = self.position_table.get(0).index_select(0, &col) + self.position_table.get(1).index_select(0, &row);
        let mut x = x + positions;
        // Angles (patches, head_dim / 4) per axis, laid out column, column, row, row.
        let angles = |pos: &Tensor| pos.to_kind(Kind::Float).unsqueeze(1) * &self.inv_freq;
        let (a_col, a_row) = (angles(&col), angles(&row));
        let full = Tensor::cat(&[&a_col, &a_col, &a_row, &a_row], -1).unsqueeze(0).unsqueeze(0);
        let turns = AxisTurns::new(&full.cos(), &full.sin());
        for block in &self.blocks {
            x = block.forward(&x, &turns);
        }
        // Average each k x k square (row-major over squares), scale, in f32.
        let k = self.pool;
        let pooled = x
            .to_kind(Kind::Float)
            .view([images, rows / k, k, cols / k, k, self.width])
            .permute([0, 1, 3, 2, 4, 5])
            .reshape([images, (rows / k) * (cols / k), k * k, self.width])
            .mean_dim(2, false, Kind::Float)
            * (self.width as f64).sqrt();
        let pooled = match &self.standardize {
            Some((bias, scale)) => (pooled - bias) * scale,
            None => pooled,
        };
        let pooled = pooled.to_kind(x.kind());
        self.embed_norm.forward(&pooled).linear(&self.projection, None::<&Tensor>).unbind(0)
    }
}

impl Tower for VisionGemma4 {
    fn features(&self, pixels: &Tensor, grid: (usize, usize, usize)) -> ImageFeatures {
        ImageFeatures::plain(self.forward(pixels, grid))
    }

    fn features_many(&self, pixels: &[&Tensor], grid: (usize, usize, usize)) -> Vec<ImageFeatures> {
        self.forward_many(pixels, grid).into_iter().map(ImageFeatures::plain).collect()
    }
}
