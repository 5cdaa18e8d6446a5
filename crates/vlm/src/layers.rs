//! The small layers both families share.

use tch::{Device, Kind, Tensor};

use super::config::TextConfig;
use super::cuda_kernels::{self, CudaKernels};
use super::error::VlmError;
use super::weights::Weights;

pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    pub fn load(w: &Weights, prefix: &str, inputs: i64, outputs: i64, bias: bool) -> Result<Linear, VlmError> {
        Ok(Linear {
            weight: w.get(&format!("{prefix}.weight"), &[outputs, inputs])?,
            bias: if bias { Some(w.get(&format!("{prefix}.bias"), &[outputs])?) } else { None },
        })
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.linear(&self.weight, self.bias.as_ref())
    }
}

/// The gated MLP of the text decoders and the Qwen2.5-VL vision blocks:
/// down(act(gate(x)) * up(x)), act SiLU (Qwen) or tanh-approximated GELU (Gemma 4).
pub struct GatedMlp {
    gate: Linear,
    up: Linear,
    down: Linear,
    gelu_tanh: bool,
}

impl GatedMlp {
    pub fn load(w: &Weights, prefix: &str, dim: i64, hidden: i64, bias: bool) -> Result<GatedMlp, VlmError> {
        Ok(GatedMlp {
            gate: Linear::load(w, &format!("{prefix}.gate_proj"), dim, hidden, bias)?,
            up: Linear::load(w, &format!("{prefix}.up_proj"), dim, hidden, bias)?,
            down: Linear::load(w, &format!("{prefix}.down_proj"), hidden, dim, bias)?,
            gelu_tanh: false,
        })
    }

    /// Gemma 4's: no biases, `gelu_pytorch_tanh` on the gate.
    pub fn load_gelu_tanh(w: &Weights, prefix: &str, dim: i64, hidden: i64) -> Result<GatedMlp, VlmError> {
        Ok(GatedMlp { gelu_tanh: true, ..GatedMlp::load(w, prefix, dim, hidden, false)? })
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        let (gate, up) = (self.gate.forward(x), self.up.forward(x));
        self.down.forward(&gated_activation(&gate, &up, self.gelu_tanh, cuda_kernels::asked_for(x.device())))
    }
}

/// SiLU(gate), or GELU's tanh form where `gelu_tanh`, times `up`: by `kernels` in one pass where
/// given and they take these operands, else by libtorch's two operations.
pub fn gated_activation(gate: &Tensor, up: &Tensor, gelu_tanh: bool, kernels: Option<&CudaKernels>) -> Tensor {
    match kernels.filter(|_| CudaKernels::takes_gated_activation(gate, up)) {
        Some(kernels) => kernels.gated_activation(gate, up, gelu_tanh),
        None => (if gelu_tanh { gate.gelu("tanh") } else { gate.silu() }) * up,
    }
}

pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
}

impl LayerNorm {
    pub fn load(w: &Weights, prefix: &str, dim: i64, eps: f64) -> Result<LayerNorm, VlmError> {
        Ok(LayerNorm { weight: w.get(&format!("{prefix}.weight"), &[dim])?, bias: w.get(&format!("{prefix}.bias"), &[dim])?, eps })
    }

    pub fn forward(&self, x: &Tensor) -> Tensor {
        x.layer_norm([*self.weight.size().last().expect("1-d")], Some(&self.weight), Some(&self.bias), self.eps, false)
    }
}

/// Root-mean-square norm, computed in f32 whatever the activations' dtype.
pub struct RmsNorm {
    weight: Tensor,
    eps: f64,
    /// Scale in f32 before the cast back (Qwen3.5's norms), rather than after it.
    scale_in_f32: bool,
}

impl RmsNorm {
    pub fn load(w: &Weights, prefix: &str, dim: i64, eps: f64) -> Result<RmsNorm, VlmError> {
        Ok(RmsNorm { weight: w.get(&format!("{prefix}.weight"), &[dim])?, eps, scale_in_f32: false })
    }

    /// A text decoder's norm as its family stores it: a scale, or an offset from one.
    pub fn load_decoder(w: &Weights, prefix: &str, dim: i64, cfg: &TextConfig) -> Result<RmsNorm, VlmError> {
        if cfg.variant.zero_centered_norm {
            RmsNorm::load_centered(w, prefix, dim, cfg.rms_norm_eps)
        } else {
            RmsNorm::load(w, prefix, dim, cfg.rms_norm_eps)
        }
    }

    /// A norm whose stored weight is an offset from one: it scales by `1 + weight`, in f32.
    pub fn load_centered(w: &Weights, prefix: &str, dim: i64, eps: f64) -> Result<RmsNorm, VlmError> {
        let weight = w.get(&format!("{prefix}.weight"), &[dim])?.to_kind(Kind::Float) + 1.0;
        Ok(RmsNorm { weight, eps, scale_in_f32: true })
    }

    /// On a GPU where the engine's own kernels are asked for, rows of the hidden size are normed
    /// by one of them ([`cuda_kernels`]), rounding where this rounds.
    pub fn forward(&self, x: &Tensor) -> Tensor {
        if let Some(kernels) = cuda_kernels::asked_for(x.device()).filter(|_| CudaKernels::takes_rms_norm(x, self.weight.kind())) {
            return kernels.rms_norm(x, &self.weight, self.eps);
        }
        self.by_libtorch(x)
    }

    /// [`Self::forward`] by libtorch's operations.
    fn by_libtorch(&self, x: &Tensor) -> Tensor {
        let kind = x.kind();
        let normed = rms_normalize(&x.to_kind(Kind::Float), self.eps);
        if self.scale_in_f32 {
            (normed * &self.weight).to_kind(kind)
        } else {
            &self.weight * normed.to_kind(kind)
        }
    }
}

/// `xf` (f32) times (mean(xf^2) + eps)^-1/2 over the last dimension, in f32: the unscaled
/// RMSNorm that every norm of the decoders scales as its family does. On a GPU it is libtorch's
/// fused kernel, one pass where the elementwise form takes five (the norms were 5-8% of a Qwen
/// model's time on an H100); the CPU keeps the elementwise form, whose bits the releases
/// scored there were made with.
pub fn rms_normalize(xf: &Tensor, eps: f64) -> Tensor {
    if xf.device().is_cuda() {
        return xf.rms_norm([xf.size()[xf.dim() - 1]], None::<&Tensor>, eps);
    }
    let variance = xf.pow_tensor_scalar(2).mean_dim(-1, true, Kind::Float);
    xf * (variance + eps).rsqrt()
}

/// The patch embedding: a Conv3d whose stride is its kernel, which is a matrix product on the
/// flattened (channel, time, row, column) patches.
pub fn load_patch_embed(w: &Weights, cfg: &super::config::VisionConfig) -> Result<Tensor, VlmError> {
    let d = cfg.hidden_size as i64;
    let (c, t, p) = (cfg.in_channels as i64, cfg.temporal_patch_size as i64, cfg.patch_size as i64);
    Ok(w.get("visual.patch_embed.proj.weight", &[d, c, t, p, p])?.reshape([d, c * t * p * p]))
}

/// The patch merger's MLP, after its norm: each merge x merge block of patches, concatenated,
/// through Linear, GELU, Linear to the text model's width.
pub struct MergerMlp {
    fc1: Linear,
    fc2: Linear,
    merged: i64,
}

impl MergerMlp {
    pub fn load(w: &Weights, cfg: &super::config::VisionConfig) -> Result<MergerMlp, VlmError> {
        let merged = cfg.hidden_size as i64 * (cfg.spatial_merge_size * cfg.spatial_merge_size) as i64;
        Ok(MergerMlp {
            fc1: Linear::load(w, "visual.merger.mlp.0", merged, merged, true)?,
            fc2: Linear::load(w, "visual.merger.mlp.2", merged, cfg.out_hidden_size as i64, true)?,
            merged,
        })
    }

    pub fn forward(&self, normed: &Tensor) -> Tensor {
        self.fc2.forward(&self.fc1.forward(&normed.reshape([-1, self.merged])).gelu("none"))
    }
}

/// Vision self-attention: fused qkv projection, 2D rotary positions, attention within each run of
/// `lens` rows (one run = the whole image; several = windows), output projection.
pub struct VisionAttention {
    qkv: Linear,
    proj: Linear,
    heads: i64,
    head_dim: i64,
}

impl VisionAttention {
    pub fn load(w: &Weights, prefix: &str, dim: i64, heads: i64) -> Result<VisionAttention, VlmError> {
        Ok(VisionAttention {
            qkv: Linear::load(w, &format!("{prefix}.qkv"), dim, 3 * dim, true)?,
            proj: Linear::load(w, &format!("{prefix}.proj"), dim, dim, true)?,
            heads,
            head_dim: dim / heads,
        })
    }

    /// `turn`: the tower's rotary angles, made once a forward pass for all its blocks.
    pub fn forward(&self, x: &Tensor, turn: &Turn, lens: &[i64]) -> Tensor {
        let n = x.size()[0];
        let qkv = self.qkv.forward(x).reshape([n, 3, self.heads, self.head_dim]).permute([1, 0, 2, 3]);
        let q = turn.apply(&qkv.get(0));
        let k = turn.apply(&qkv.get(1));
        let v = qkv.get(2);
        let scale = (self.head_dim as f64).powf(-0.5);
        let out = windowed_attention(&q, &k, &v, lens, scale);
        self.proj.forward(&out.reshape([n, self.heads * self.head_dim]))
    }
}

/// Attention within each run of `lens` rows of `q`, `k`, `v` (rows, heads, dim) -> (rows, heads,
/// dim). Consecutive windows of one length go through one batched call: Qwen2.5-VL's image of
/// 1,036 x 1,036 has 100 windows a block, 9 of 10 in a row of one size: 20 calls instead of 100,
/// each a handful of kernel launches on a GPU. A window's rows are computed alike either way (the
/// kernels split the work by window, head and query block, never across windows).
pub fn windowed_attention(q: &Tensor, k: &Tensor, v: &Tensor, lens: &[i64], scale: f64) -> Tensor {
    let (heads, dim) = (q.size()[1], q.size()[2]);
    let mut parts = Vec::new();
    let mut start = 0;
    for run in lens.chunk_by(|a, b| a == b) {
        let (windows, len) = (run.len() as i64, run[0]);
        let [q, k, v] = [q, k, v].map(|t| t.narrow(0, start, windows * len).view([windows, len, heads, dim]).transpose(1, 2));
        parts.push(attention(&q, &k, &v, None, scale).transpose(1, 2).reshape([windows * len, heads, dim]));
        start += windows * len;
    }
    // One run (a whole image, or windows of one size) needs no concatenation, which would copy it.
    if parts.len() == 1 {
        return parts.remove(0);
    }
    Tensor::cat(&parts, 0)
}

/// (x1, x2) -> (-x2, x1) over the last dimension's halves.
/// The logits of two tokens only, (rows, 2), from hidden states (rows, hidden) and the LM head
/// (vocab, hidden): a yes/no score reads two rows of the head, never the whole vocabulary.
pub fn answer_logits(hidden: &Tensor, lm_head: &Tensor, (yes, no): (u32, u32)) -> Tensor {
    let ids = Tensor::from_slice(&[i64::from(yes), i64::from(no)]).to_device(lm_head.device());
    hidden.linear(&lm_head.index_select(0, &ids), None::<&Tensor>)
}

/// A rotary embedding's angles, made once a pass and applied to every layer's queries and keys:
/// x * cos + rotate_half(x) * sin, where rotate_half takes the last dimension's halves (a, b) to
/// (-b, a). It holds cos, and sin with the first half of its last dimension negated: rotate_half(x) * sin is then
/// the halves of x swapped, times that sin: the same bits, since (-b) s = b (-s) exactly, with
/// the negation paid once on the angles instead of on every head.
pub struct Turn {
    cos: Tensor,
    sin_signed: Tensor,
}

impl Turn {
    /// `cos` and `sin` f32, their last dimension the turned width (two equal halves of angles).
    pub fn new(cos: Tensor, sin: &Tensor) -> Turn {
        let half = sin.size().last().copied().expect("non-scalar") / 2;
        let sin_signed = Tensor::cat(&[-sin.narrow(-1, 0, half), sin.narrow(-1, half, half)], -1);
        Turn { cos, sin_signed }
    }

    /// The turned width.
    pub fn width(&self) -> i64 {
        self.cos.size().last().copied().expect("non-scalar")
    }

    /// x * cos + rotate_half(x) * sin in f32, back to x's dtype. The products read x in its own
    /// dtype (promoted to f32 as a cast would, exactly), so no f32 copy of x is made: on a bf16
    /// model four kernels over the heads' f32 width and one swap of x's halves, where the cast,
    /// the negation and the concatenation made seven. Bit for bit the form it replaces (tested).
    pub fn apply(&self, x: &Tensor) -> Tensor {
        let half = x.size().last().copied().expect("non-scalar") / 2;
        let swapped = x.unflatten(-1, [2, half]).flip([-2]).flatten(-2, -1);
        (x * &self.cos + swapped * &self.sin_signed).to_kind(x.kind())
    }
}

/// softmax(q k^T * scale + mask) v over (batch, heads, seq, dim): libtorch's fused
/// scaled-dot-product attention, as transformers' default `sdpa` path uses.
pub fn attention(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>, scale: f64) -> Tensor {
    Tensor::scaled_dot_product_attention(q, k, v, mask, 0.0, false, scale, false)
}

/// Each patch's (row, column) on the patch grid, listed in merge-block order: the patches of one
/// merge x merge block together, blocks row by row, as the vision towers lay them out.
pub fn merge_block_order(grid: (usize, usize, usize), merge: usize) -> (Vec<usize>, Vec<usize>) {
    let (t, h, w) = grid;
    let (mut rows, mut cols) = (Vec::with_capacity(t * h * w), Vec::with_capacity(t * h * w));
    for _ in 0..t {
        for hb in 0..h / merge {
            for wb in 0..w / merge {
                for i in 0..merge {
                    for j in 0..merge {
                        rows.push(hb * merge + i);
                        cols.push(wb * merge + j);
                    }
                }
            }
        }
    }
    (rows, cols)
}

/// cos and sin of the 2D rotary angles (base `theta`), per patch in merge-block order:
/// (patches, 1, head_dim).
pub fn vision_rotary(grid: (usize, usize, usize), merge: usize, head_dim: i64, theta: f64, device: Device) -> (Tensor, Tensor) {
    let (rows, cols) = merge_block_order(grid, merge);
    let dim = head_dim / 2;
    let inv_freq = Tensor::arange_start_step(0, dim, 2, (Kind::Float, device)).to_kind(Kind::Float) / dim as f64;
    let inv_freq = Tensor::from(theta as f32).to_device(device).pow(&inv_freq).reciprocal();
    let angles = |pos: Vec<usize>| {
        let pos: Vec<f32> = pos.into_iter().map(|p| p as f32).collect();
        Tensor::from_slice(&pos).to_device(device).unsqueeze(1) * inv_freq.unsqueeze(0)
    };
    let half = Tensor::cat(&[angles(rows), angles(cols)], -1);
    let full = Tensor::cat(&[&half, &half], -1).unsqueeze(1);
    (full.cos(), full.sin())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The GPU's fused RMSNorm call means what the CPU's elementwise form computes (checked here
    /// through libtorch's CPU implementation of the same call): the epsilon inside the root, the
    /// last dimension normalised.
    #[test]
    fn the_fused_rms_norm_call_means_the_elementwise_form() {
        tch::manual_seed(9);
        let xf = Tensor::randn([3, 5, 16], (Kind::Float, Device::Cpu)) * 0.01;
        let eps = 1e-4;
        let fused = xf.rms_norm([16], None::<&Tensor>, eps);
        let elementwise = rms_normalize(&xf, eps);
        let diff = (&fused - &elementwise).abs().max().double_value(&[]);
        assert!(diff < 1e-5, "{diff}");
        let without_eps = &xf / xf.square().mean_dim(-1, true, Kind::Float).sqrt();
        assert!((&fused - without_eps).abs().max().double_value(&[]) > 1e-3, "a small input shows the epsilon");
    }

    /// The engine's RMSNorm kernel through the stand-in driver gives libtorch's form (a bf16
    /// weight after the rounding, Qwen3.5's f32 weight before it, and f32 throughout): in f32
    /// within f32's rounding, in bf16 the same bits but where a sum of squares falls the other
    /// side of a rounding; a row alone the same bits as among others. Heads' widths stay with
    /// libtorch.
    #[test]
    fn the_rms_norm_kernel_through_a_stand_in_driver_gives_libtorchs_form() {
        let scratch = tempfile::tempdir().unwrap();
        let (library, kernels) = cuda_kernels::stand_in::kernels(scratch.path());
        tch::manual_seed(17);
        let width = 1100; // not a whole number of the block's threads
        let x = Tensor::randn([2, 3, width], (Kind::Float, Device::Cpu)) * 3.0;
        let raw = Tensor::randn([width], (Kind::Float, Device::Cpu)) * 0.2;
        for (kind, centered, tolerance) in
            [(Kind::Float, false, 1e-5), (Kind::BFloat16, false, 2.0 * 2f64.powi(-8)), (Kind::BFloat16, true, 2.0 * 2f64.powi(-8))]
        {
            let weight = if centered { raw.shallow_clone() + 1.0 } else { raw.to_kind(kind) + 1.0 };
            let norm = RmsNorm { weight, eps: 1e-6, scale_in_f32: centered };
            let x = x.to_kind(kind);
            let before = cuda_kernels::stand_in::launches(&library);
            let by_kernel = kernels.rms_norm(&x, &norm.weight, norm.eps);
            assert_eq!(cuda_kernels::stand_in::launches(&library), before + 1, "one launch");
            let by_libtorch = norm.by_libtorch(&x);
            let context = format!("{kind:?}, weight in {:?}", norm.weight.kind());
            assert_eq!((by_kernel.size(), by_kernel.kind()), (by_libtorch.size(), kind), "{context}");
            let f32 = |t: &Tensor| t.to_kind(Kind::Float);
            let diff =
                (f32(&by_kernel) - f32(&by_libtorch)).abs().max().double_value(&[]) / f32(&by_libtorch).abs().max().double_value(&[]);
            assert!(diff <= tolerance, "{context}: differs by {diff} of the largest value");
            let same = by_kernel.eq_tensor(&by_libtorch).to_kind(Kind::Float).mean(Kind::Float).double_value(&[]);
            assert!(kind == Kind::Float || same >= 0.99, "{context}: {same} of the values the same");
            let alone = kernels.rms_norm(&x.narrow(1, 1, 1), &norm.weight, norm.eps);
            assert!(alone.equal(&by_kernel.narrow(1, 1, 1)), "{context}: a row alone and among six");
        }
        let heads = Tensor::randn([4, 128], (Kind::Float, Device::Cpu));
        assert!(!CudaKernels::takes_rms_norm(&heads, Kind::Float), "a head's width is libtorch's");
    }

    /// Windows of one length batched: the bits of one call per window (the CPU's kernels split by
    /// window, head and query block alike), whatever the runs of lengths.
    #[test]
    fn windows_batched_by_length_give_the_bits_of_one_call_each() {
        tch::manual_seed(5);
        let lens = [64i64, 64, 64, 16, 64, 64, 64, 16, 16, 16, 16, 4, 100];
        let (rows, heads, dim) = (lens.iter().sum::<i64>(), 4, 16);
        let qkv = Tensor::randn([rows, 3, heads, dim], (Kind::Float, Device::Cpu)).permute([1, 0, 2, 3]);
        let (q, k, v) = (qkv.get(0), qkv.get(1), qkv.get(2));
        let batched = windowed_attention(&q, &k, &v, &lens, 0.25);
        let mut start = 0;
        let one_each: Vec<Tensor> = lens
            .iter()
            .map(|&len| {
                let [q, k, v] = [&q, &k, &v].map(|t| t.narrow(0, start, len).transpose(0, 1).unsqueeze(0));
                start += len;
                attention(&q, &k, &v, None, 0.25).squeeze_dim(0).transpose(0, 1)
            })
            .collect();
        assert!(batched.equal(&Tensor::cat(&one_each, 0)));
    }

    /// The form [`Turn`] replaced: rotate_half as a negation and a concatenation, on an f32 copy.
    fn rotary_by_rotate_half(x: &Tensor, cos: &Tensor, sin: &Tensor) -> Tensor {
        let xf = x.to_kind(Kind::Float);
        let half = x.size()[x.dim() - 1] / 2;
        let rotated = Tensor::cat(&[-xf.narrow(-1, half, half), xf.narrow(-1, 0, half)], -1);
        (&xf * cos + rotated * sin).to_kind(x.kind())
    }

    /// Queries as the decoders turn them, (batch, heads, seq, dim) views of (batch, seq, heads,
    /// dim) projections, in f32 and bf16: the same bits as the form it replaced.
    #[test]
    fn a_turn_gives_the_bits_of_rotate_half() {
        tch::manual_seed(11);
        let (b, s, heads, dim) = (2, 7, 3, 16);
        let angles = Tensor::randn([b, 1, s, dim / 2], (Kind::Float, Device::Cpu)) * 40.0;
        let full = Tensor::cat(&[&angles, &angles], -1);
        let (cos, sin) = (full.cos(), full.sin());
        let turn = Turn::new(cos.shallow_clone(), &sin);
        assert_eq!(turn.width(), dim);
        for kind in [Kind::Float, Kind::BFloat16] {
            let x = (Tensor::randn([b, s, heads, dim], (Kind::Float, Device::Cpu)) * 3.0).to_kind(kind).transpose(1, 2);
            let (new, old) = (turn.apply(&x), rotary_by_rotate_half(&x, &cos, &sin));
            assert_eq!(new.kind(), kind);
            assert!(new.equal(&old), "{kind:?}: differs by {}", (new.to_kind(Kind::Float) - old.to_kind(Kind::Float)).abs().max());
            assert!(turn.apply(&x.contiguous()).equal(&old));
        }
    }

    /// The gated activation by the kernel (on the CPU, through the stand-in driver) gives
    /// libtorch's two operations: SiLU and GELU's tanh form, in f32 within rounding and in bf16
    /// the same bits but for a few, for a dense MLP's contiguous rows, for the two halves of the
    /// experts' rows, and for a gate and up whose rows lie apart unlike; one launch each, a block
    /// taking several rows.
    #[test]
    fn the_gated_activation_kernel_through_a_stand_in_driver_gives_libtorchs_form() {
        let scratch = tempfile::tempdir().unwrap();
        let (library, kernels) = cuda_kernels::stand_in::kernels(scratch.path());
        tch::manual_seed(23);
        let width = 300; // not a whole number of the block's threads
        let both = Tensor::randn([70, 2 * width], (Kind::Float, Device::Cpu)) * 3.0;
        for (kind, gelu_tanh) in [(Kind::Float, false), (Kind::Float, true), (Kind::BFloat16, false), (Kind::BFloat16, true)] {
            let both = both.to_kind(kind);
            let dense = (
                both.narrow(1, 0, width).contiguous().view([2, 35, width]),
                both.narrow(1, width, width).contiguous().view([2, 35, width]),
            );
            let halves = (both.narrow(1, 0, width), both.narrow(1, width, width));
            let apart = (both.narrow(1, 0, width), both.narrow(1, width, width).contiguous());
            for (layout, (gate, up)) in [("dense", dense), ("halves", halves), ("rows apart unlike", apart)] {
                let context = format!("{kind:?}, GELU {gelu_tanh}, {layout}");
                assert!(CudaKernels::takes_gated_activation(&gate, &up), "{context}");
                let before = cuda_kernels::stand_in::launches(&library);
                let by_kernel = gated_activation(&gate, &up, gelu_tanh, Some(&kernels));
                assert_eq!(cuda_kernels::stand_in::launches(&library), before + 1, "{context}: one launch");
                let by_libtorch = gated_activation(&gate, &up, gelu_tanh, None);
                assert_eq!((by_kernel.size(), by_kernel.kind()), (by_libtorch.size(), kind), "{context}");
                let (a, b) = (by_kernel.to_kind(Kind::Float), by_libtorch.to_kind(Kind::Float));
                let diff = ((&a - &b).abs() / (b.abs() + 1.0)).max().double_value(&[]);
                assert!(diff <= if kind == Kind::Float { 1e-5 } else { 2f64.powi(-7) }, "{context}: differs by {diff}");
                let differ = a.ne_tensor(&b).sum(Kind::Int64).int64_value(&[]);
                assert!(kind == Kind::Float || differ * 100 <= a.numel() as i64, "{context}: {differ} values differ");
            }
        }
    }
}
