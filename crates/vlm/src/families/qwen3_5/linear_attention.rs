//! Gated DeltaNet, Qwen3.5's linear attention.
//!
//! Each value head keeps a (key_dim x value_dim) state S. Per token, after a short causal
//! depthwise convolution over the projected queries, keys and values:
//!   S <- exp(g) S;  S <- S + k (beta (v - k^T S))^T;  out = q^T S
//! with the decay g = -exp(A_log) softplus(a + dt_bias) and the write strength beta = sigmoid(b).
//! This file is the layer around that recurrence (projections, convolution, norms); the
//! recurrence itself, token by token and in chunks, is [`super::delta_rule`].

use tch::{Kind, Tensor};

use super::delta_rule::{chunked_rule, recurrent_rule, Start};
use crate::config::{LinearAttentionConfig, TextConfig};
use crate::cuda_kernels::{self, CudaKernels};
use crate::error::VlmError;
use crate::layers::{rms_normalize, Linear};
use crate::part_clock::timed;
use crate::real_tokens::{rows_of, tokens_of, RealTokens};
use crate::weights::Weights;

/// What a linear layer carries from one call to the next, per batch row: the last
/// `conv_kernel_dim - 1` inputs of the convolution, (batch, conv_dim, kernel - 1), and the delta
/// rule's state, (batch, value_heads, key_head_dim, value_head_dim) in f32.
pub struct LinearState {
    pub conv: Tensor,
    pub recurrent: Tensor,
}

pub struct GatedDeltaNet {
    in_proj_qkv: Linear,
    in_proj_z: Linear,
    in_proj_b: Linear,
    in_proj_a: Linear,
    conv: ShortConvolution,
    /// -exp(A_log) and dt_bias, f32: the decay rate per value head and its offset.
    neg_a: Tensor,
    dt_bias: Tensor,
    /// The gated RMSNorm over each head's output.
    norm_weight: Tensor,
    eps: f64,
    out_proj: Linear,
    shape: LinearAttentionConfig,
}

impl GatedDeltaNet {
    pub fn load(w: &Weights, prefix: &str, cfg: &TextConfig, shape: LinearAttentionConfig) -> Result<GatedDeltaNet, VlmError> {
        let h = cfg.hidden_size as i64;
        let at = |name: &str| format!("{prefix}.{name}");
        let (key_dim, value_dim, conv_dim) = (shape.key_dim() as i64, shape.value_dim() as i64, shape.conv_dim() as i64);
        let heads = shape.num_value_heads as i64;
        Ok(GatedDeltaNet {
            in_proj_qkv: Linear::load(w, &at("in_proj_qkv"), h, 2 * key_dim + value_dim, false)?,
            in_proj_z: Linear::load(w, &at("in_proj_z"), h, value_dim, false)?,
            in_proj_b: Linear::load(w, &at("in_proj_b"), h, heads, false)?,
            in_proj_a: Linear::load(w, &at("in_proj_a"), h, heads, false)?,
            conv: ShortConvolution { weight: w.get(&at("conv1d.weight"), &[conv_dim, 1, shape.conv_kernel_dim as i64])?, shape },
            neg_a: -w.get(&at("A_log"), &[heads])?.to_kind(Kind::Float).exp(),
            dt_bias: w.get(&at("dt_bias"), &[heads])?.to_kind(Kind::Float),
            norm_weight: w.get(&at("norm.weight"), &[shape.value_head_dim as i64])?,
            eps: cfg.rms_norm_eps,
            out_proj: Linear::load(w, &at("out_proj"), value_dim, h, false)?,
            shape,
        })
    }

    /// `x` (batch, seq, hidden) after what `state` holds -> (batch, seq, hidden). `valid`
    /// (batch, seq) marks real tokens in a right-padded batch: padding neither decays nor writes
    /// the state, and the convolution keeps each row's last real inputs, so the state left is
    /// the one after each row's own tokens.
    pub fn forward(&self, x: &Tensor, state: &mut Option<LinearState>, valid: Option<&Tensor>) -> Tensor {
        let (conv, start) = match state.take() {
            Some(st) => (Some(st.conv), Start::PerRow(st.recurrent)),
            None => (None, Start::Zero),
        };
        let (out, kept) = self.mix(x, conv.as_ref(), start, true, valid, None);
        *state = kept;
        out
    }

    /// `x` (images x rows, seq, hidden), each image's rows continuing from that image's state
    /// `prefix` (images first): the questions of scoring after their image. The prefix's
    /// recurrent state is read in place (its small convolution inputs are repeated per row), and
    /// the state after `x` is not made. Where `real` says which tokens of the rows are real, `x`
    /// and the output hold those alone (1, tokens, hidden), and the projections run on them only.
    pub fn forward_after_prefix(&self, x: &Tensor, prefix: &LinearState, real: Option<&RealTokens>) -> Tensor {
        let rows = real.map_or(x.size()[0], RealTokens::rows) / prefix.conv.size()[0];
        let conv = prefix.conv.repeat_interleave_self_int(rows, 0, None);
        self.mix(x, Some(&conv), Start::PerImage(prefix.recurrent.shallow_clone()), false, None, real).0
    }

    /// The layer after the convolution inputs `conv` and the delta rule's `start`; with
    /// `keep_state`, also the state after `x`. Where `real` says which tokens of the rows are
    /// real, `x` holds those alone, and only what reads rows is laid out in rows.
    fn mix(
        &self,
        x: &Tensor,
        conv: Option<&Tensor>,
        start: Start,
        keep_state: bool,
        valid: Option<&Tensor>,
        real: Option<&RealTokens>,
    ) -> (Tensor, Option<LinearState>) {
        let s_cfg = &self.shape;
        let (vh, dv) = (s_cfg.num_value_heads as i64, s_cfg.value_head_dim as i64);
        let (mixed, z, beta, g) = timed("linear attention: projections in", || {
            let rows = |t: Tensor| rows_of(real, t);
            let mixed = rows(self.in_proj_qkv.forward(x)); // (b, s, conv_dim)
            let z = rows(self.in_proj_z.forward(x));
            let mut beta = rows(self.in_proj_b.forward(x)).sigmoid().to_kind(Kind::Float);
            let mut g = &self.neg_a * (rows(self.in_proj_a.forward(x)).to_kind(Kind::Float) + &self.dt_bias).softplus();
            if let Some(valid) = valid {
                let keep = valid.to_kind(Kind::Float).unsqueeze(-1);
                beta = beta * &keep;
                g = g * keep;
            }
            (mixed, z, beta, g)
        });
        let (b, s) = (mixed.size()[0], mixed.size()[1]);
        let z = z.view([b, s, vh, dv]);

        let (q, k, v, conv_state) = self.conv.delta_rule_inputs(&mixed, conv, valid);
        let (beta, g) = (beta.transpose(1, 2), g.transpose(1, 2)); // (b, vh, s)

        let (out, recurrent) = timed("linear attention: delta rule", || match start {
            Start::PerRow(initial) if s == 1 => {
                let (out, state) = recurrent_rule(&q, &k, &v, &g, &beta, Some(initial));
                (out, Some(state))
            }
            start => chunked_rule(&q, &k, &v, &g, &beta, start, keep_state),
        });
        let kept = recurrent.map(|recurrent| LinearState { conv: conv_state, recurrent });

        let out = out.transpose(1, 2); // (b, s, vh, dv)
        let out = timed("linear attention: gated norm", || self.gated_norm(&out, &z, x.kind()));
        let out = tokens_of(real, out.reshape([b, s, vh * dv]));
        (timed("linear attention: projection out", || self.out_proj.forward(&out)), kept)
    }

    /// The delta rule's output `out` (f32) in the model's precision `kind`, RMSNorm over each
    /// head (in f32), scaled, then gated by SiLU(z), as transformers does; on a GPU, in the
    /// fewer kernels of [`gated_norm_fused`], or in one of the engine's own where asked for.
    fn gated_norm(&self, out: &Tensor, z: &Tensor, kind: Kind) -> Tensor {
        let (heads, dv) = (self.shape.num_value_heads as i64, self.shape.value_head_dim as i64);
        if let Some(kernels) = cuda_kernels::asked_for(out.device()).filter(|_| CudaKernels::takes_gated_norm(heads, dv, kind)) {
            return kernels.gated_norm(out, z, &self.norm_weight, self.eps);
        }
        if out.device().is_cuda() {
            let mut x = Tensor::empty(out.size(), (kind, out.device()));
            x.copy_(out); // cast and made contiguous in one pass
            return gated_norm_fused(&x, z, &self.norm_weight, self.eps);
        }
        gated_norm_elementwise(&out.to_kind(kind), z, &self.norm_weight, self.eps)
    }
}

/// The causal depthwise convolution over the projected queries, keys and values, and what makes
/// its output the delta rule's inputs: SiLU, the queries' and keys' L2 norms, heads split and
/// each key head repeated for the value heads it serves.
struct ShortConvolution {
    /// Depthwise kernel, (conv_dim, 1, kernel).
    weight: Tensor,
    shape: LinearAttentionConfig,
}

impl ShortConvolution {
    /// The delta rule's inputs from the projection `mixed` (batch, seq, channels) after the
    /// convolution's `previous` inputs (batch, channels, kernel - 1): the queries (L2-normalised
    /// and scaled) and keys (L2-normalised), each key head repeated for its value heads, and the
    /// values, all (batch, value heads, seq, ·) in f32; and the convolution's inputs to keep. On a
    /// GPU where the engine's own kernels are asked for, in one launch of its kernel.
    fn delta_rule_inputs(&self, mixed: &Tensor, previous: Option<&Tensor>, valid: Option<&Tensor>) -> (Tensor, Tensor, Tensor, Tensor) {
        match cuda_kernels::asked_for(mixed.device()).filter(|_| CudaKernels::takes_linear_inputs(&self.shape, mixed.kind())) {
            Some(kernels) => timed("linear attention: convolution", || self.by_kernel(kernels, mixed, previous, valid)),
            None => self.by_libtorch(mixed, previous, valid),
        }
    }

    /// [`Self::delta_rule_inputs`] by libtorch's operations.
    fn by_libtorch(&self, mixed: &Tensor, previous: Option<&Tensor>, valid: Option<&Tensor>) -> (Tensor, Tensor, Tensor, Tensor) {
        let (b, s) = (mixed.size()[0], mixed.size()[1]);
        let s_cfg = &self.shape;
        let (kh, vh, dk, dv) =
            (s_cfg.num_key_heads as i64, s_cfg.num_value_heads as i64, s_cfg.key_head_dim as i64, s_cfg.value_head_dim as i64);
        let (mixed, conv_state) = timed("linear attention: convolution", || self.convolve(mixed, previous, valid)); // (b, s, conv_dim)
        let key_dim = kh * dk;
        let split_heads = |t: Tensor, heads: i64, dim: i64| t.reshape([b, s, heads, dim]).transpose(1, 2).to_kind(Kind::Float);
        let q = split_heads(mixed.narrow(-1, 0, key_dim), kh, dk);
        let k = split_heads(mixed.narrow(-1, key_dim, key_dim), kh, dk);
        let v = split_heads(mixed.narrow(-1, 2 * key_dim, vh * dv), vh, dv);
        // Each query/key head serves vh / kh consecutive value heads: normalised once per key
        // head, then repeated, for half the work. Made contiguous first, as the repeat made them
        // before: a norm over the convolution's strided layout sums in another order.
        let normalised = |t: &Tensor, scale: f64| match t.device().is_cuda() {
            true => l2_normalize_fused(t, scale),
            false if scale == 1.0 => l2_normalize(&t.contiguous()),
            false => l2_normalize(&t.contiguous()) * scale,
        };
        let (q, k) = timed("linear attention: q, k norms", || {
            let q = normalised(&q, (dk as f64).powf(-0.5)).repeat_interleave_self_int(vh / kh, 1, None);
            (q, normalised(&k, 1.0).repeat_interleave_self_int(vh / kh, 1, None))
        });
        (q, k, v, conv_state)
    }

    /// [`Self::by_libtorch`] as one launch of the engine's own kernel on a GPU
    /// (`crates/vlm/src/cuda_kernels/linear_inputs.cu`): the convolution, its SiLU, the norms and the repeat
    /// in one pass over the projection.
    fn by_kernel(
        &self,
        kernels: &CudaKernels,
        mixed: &Tensor,
        previous: Option<&Tensor>,
        valid: Option<&Tensor>,
    ) -> (Tensor, Tensor, Tensor, Tensor) {
        let (b, channels) = (mixed.size()[0], mixed.size()[2]);
        let keep = self.shape.conv_kernel_dim as i64 - 1;
        let previous = previous.map_or_else(|| Tensor::zeros([b, channels, keep], (mixed.kind(), mixed.device())), Tensor::shallow_clone);
        let q_scale = (self.shape.key_head_dim as f64).powf(-0.5);
        let (q, k, v) = kernels.linear_inputs(mixed, &previous, &self.weight, &self.shape, q_scale);
        let previous = previous.transpose(1, 2);
        (q, k, v, kept_inputs(&previous, mixed, valid, || Tensor::cat(&[&previous, mixed], 1)))
    }

    /// The causal depthwise convolution with SiLU over `mixed` (batch, seq, channels), continuing
    /// from `previous` inputs (batch, channels, kernel - 1); returns its output (batch, seq,
    /// channels) and the inputs to keep for the next call.
    ///
    /// On a GPU it runs as a 2-D convolution over a channels-last view of the projection's own
    /// layout, which libtorch gives to cuDNN's depthwise kernels; over (batch, channels, seq) it
    /// took libtorch's generic depthwise kernel, about 8% of an image's time on the 35B. The CPU
    /// keeps the 1-D form whose bits the parity goldens were checked with.
    fn convolve(&self, mixed: &Tensor, previous: Option<&Tensor>, valid: Option<&Tensor>) -> (Tensor, Tensor) {
        let (b, channels) = (mixed.size()[0], mixed.size()[2]);
        let keep = self.shape.conv_kernel_dim as i64 - 1;
        let previous = match previous {
            Some(p) => p.transpose(1, 2),
            None => Tensor::zeros([b, keep, channels], (mixed.kind(), mixed.device())),
        };
        let inputs = Tensor::cat(&[&previous, mixed], 1); // (b, keep + s, channels)
        let out = if mixed.device().is_cuda() { depthwise_channels_last(&inputs, &self.weight) } else { depthwise(&inputs, &self.weight) };
        (out.silu(), kept_inputs(&previous, mixed, valid, || inputs.shallow_clone()))
    }
}

/// The convolution's inputs to keep for the next call after `previous` (batch, kernel - 1,
/// channels) and `mixed` (batch, seq, channels): (batch, channels, kernel - 1), ending at each
/// row's last real token where `valid` marks them (row r's at lens[r] + kernel - 2 of the two
/// side by side). `side_by_side` gives the two concatenated, made only where needed (a caller
/// that has them already hands them over).
fn kept_inputs(previous: &Tensor, mixed: &Tensor, valid: Option<&Tensor>, side_by_side: impl FnOnce() -> Tensor) -> Tensor {
    let (b, s, channels) = (mixed.size()[0], mixed.size()[1], mixed.size()[2]);
    let keep = previous.size()[1];
    let kept = match valid {
        Some(valid) if keep > 0 => {
            let inputs = side_by_side();
            let lens = valid.to_kind(Kind::Int64).sum_dim_intlist(1, false, Kind::Int64); // (b)
            let offsets = Tensor::arange(keep, (Kind::Int64, mixed.device()));
            let rows = (lens.unsqueeze(1) + offsets.unsqueeze(0)).unsqueeze(2).expand([b, keep, channels], false);
            inputs.gather(1, &rows, false)
        }
        _ if s >= keep => mixed.narrow(1, s - keep, keep),
        _ => side_by_side().narrow(1, s, keep),
    };
    kept.transpose(1, 2).contiguous()
}

/// The gated norm of `x` (in the model's precision) as transformers computes it, rounding as it
/// rounds: the CPU's form, whose bits the releases scored there were made with.
fn gated_norm_elementwise(x: &Tensor, z: &Tensor, weight: &Tensor, eps: f64) -> Tensor {
    let kind = x.kind();
    let normed = rms_normalize(&x.to_kind(Kind::Float), eps);
    let normed = (weight * normed.to_kind(kind)).to_kind(Kind::Float);
    (normed * z.to_kind(Kind::Float).silu()).to_kind(kind)
}

/// The gated norm of `x` (in the model's precision) in four kernels where the elementwise form
/// takes nine: the fused RMSNorm scales by `weight` in f32 and rounds once (transformers rounds
/// the norm, then its product with the weight), and the gate's product is taken in f32 and
/// written in the model's precision by one kernel.
fn gated_norm_fused(x: &Tensor, z: &Tensor, weight: &Tensor, eps: f64) -> Tensor {
    let normed = x.rms_norm([x.size()[x.dim() - 1]], Some(weight), eps);
    let gate = z.to_kind(Kind::Float).silu();
    let out = Tensor::empty(normed.size(), (x.kind(), x.device()));
    normed.mul_out(&out, &gate)
}

/// The depthwise convolution of `inputs` (batch, seq, channels) by `weight` (channels, 1,
/// kernel), without padding: (batch, seq - kernel + 1, channels), as a 1-D convolution over the
/// channels-first transpose.
fn depthwise(inputs: &Tensor, weight: &Tensor) -> Tensor {
    let channels = inputs.size()[2];
    inputs.transpose(1, 2).conv1d(weight, None::<&Tensor>, [1], [0], [1], channels).transpose(1, 2)
}

/// [`depthwise`] as a 2-D convolution over (batch, channels, 1, seq) with channels-last strides,
/// which are `inputs`' own: no copy either way, and on a GPU, cuDNN's depthwise kernels, asked
/// for deterministic algorithms and never TF32 (libtorch's default allows it: an f32 model
/// would lose precision here alone).
fn depthwise_channels_last(inputs: &Tensor, weight: &Tensor) -> Tensor {
    let channels = inputs.size()[2];
    let nchw = inputs.unsqueeze(1).permute([0, 3, 1, 2]);
    let (benchmark, deterministic, cudnn, tf32) = (false, true, true, false);
    let out = nchw.internal_convolution(
        &weight.unsqueeze(2),
        None::<&Tensor>,
        [1, 1],
        [0, 0],
        [1, 1],
        false,
        [0, 0],
        channels,
        benchmark,
        deterministic,
        cudnn,
        tf32,
    );
    out.squeeze_dim(2).transpose(1, 2)
}

/// x / sqrt(sum(x^2) + 1e-6) over the last dimension (the FLA kernels' epsilon).
pub(super) fn l2_normalize(x: &Tensor) -> Tensor {
    x * ((x * x).sum_dim_intlist(-1, true, Kind::Float) + 1e-6).rsqrt()
}

/// [`l2_normalize`] times `scale` through the fused RMSNorm (a GPU's form: two kernels where
/// the elementwise form takes six): sum(x^2) + 1e-6 = d (mean(x^2) + 1e-6 / d), so the L2 norm
/// is the RMS norm of epsilon 1e-6 / d over sqrt(d).
fn l2_normalize_fused(x: &Tensor, scale: f64) -> Tensor {
    let d = x.size()[x.dim() - 1];
    rms_normalize(x, 1e-6 / d as f64) * (scale / (d as f64).sqrt())
}

#[cfg(test)]
mod tests {
    use tch::{Kind, Tensor};

    use super::{
        depthwise, depthwise_channels_last, gated_norm_elementwise, gated_norm_fused, l2_normalize, l2_normalize_fused,
        LinearAttentionConfig, ShortConvolution,
    };
    use crate::cuda_kernels::stand_in;

    fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
        (a - b).abs().max().double_value(&[])
    }

    /// The GPU's channels-last form of the convolution gives the 1-D form's numbers (here on the
    /// CPU), and each output is the kernel's taps over its own input and the three before.
    #[test]
    fn the_channels_last_convolution_equals_the_one_dimensional_one() {
        tch::manual_seed(5);
        let (b, s, channels, kernel) = (3, 11, 6, 4);
        let inputs = Tensor::randn([b, s + kernel - 1, channels], (Kind::Float, tch::Device::Cpu));
        let weight = Tensor::randn([channels, 1, kernel], (Kind::Float, tch::Device::Cpu));
        let (one, last) = (depthwise(&inputs, &weight), depthwise_channels_last(&inputs, &weight));
        assert_eq!(one.size(), [b, s, channels]);
        assert!(max_diff(&one, &last) < 1e-6, "{}", max_diff(&one, &last));
        let by_hand = (0..kernel).fold(Tensor::zeros([b, s, channels], (Kind::Float, tch::Device::Cpu)), |sum, j| {
            sum + inputs.narrow(1, j, s) * weight.select(2, j).view([1, 1, channels])
        });
        assert!(max_diff(&one, &by_hand) < 1e-5);
    }

    /// The GPU's fused gated norm means the elementwise one (here both on the CPU): within f32's
    /// rounding in f32, and within a bf16 rounding or two in bf16 (the fused kernel rounds the
    /// weight's product once, not twice).
    #[test]
    fn the_fused_gated_norm_equals_the_elementwise_one() {
        tch::manual_seed(13);
        let (eps, dv) = (1e-6, 32);
        let out = Tensor::randn([2, 5, 4, dv], (Kind::Float, tch::Device::Cpu));
        let z = Tensor::randn([2, 5, 4, dv], (Kind::Float, tch::Device::Cpu)) * 2.0;
        let weight = Tensor::rand([dv], (Kind::Float, tch::Device::Cpu)) + 0.5;
        for (kind, tolerance) in [(Kind::Float, 1e-6), (Kind::BFloat16, 4.0 * 2f64.powi(-8))] {
            let (x, z, weight) = (out.to_kind(kind), z.to_kind(kind), weight.to_kind(kind));
            let elementwise = gated_norm_elementwise(&x, &z, &weight, eps);
            let fused = gated_norm_fused(&x, &z, &weight, eps);
            assert_eq!(fused.kind(), kind);
            // Relative to each value's size: bf16's step is relative.
            let relative = ((&fused - &elementwise).to_kind(Kind::Float).abs() / (elementwise.to_kind(Kind::Float).abs() + 1e-3)).max();
            assert!(relative.double_value(&[]) <= tolerance, "{kind:?}: {}", relative.double_value(&[]));
        }
    }

    /// The engine's gated-norm kernel through the stand-in driver, reading the delta rule's
    /// output through its strides (padded chunks, heads moved), gives libtorch's fused form: in
    /// f32 within f32's rounding, in bf16 the same bits but where a sum of squares falls the other
    /// side of a rounding.
    #[test]
    fn the_gated_norm_kernel_through_a_stand_in_driver_gives_libtorchs_fused_form() {
        let scratch = tempfile::tempdir().unwrap();
        let (library, kernels) = stand_in::kernels(scratch.path());
        tch::manual_seed(31);
        let (eps, b, heads, s, dv) = (1e-6, 3, 4, 21, 64);
        let padded = Tensor::randn([b, heads, 24, dv], (Kind::Float, tch::Device::Cpu));
        let out = padded.narrow(2, 0, s).transpose(1, 2); // (b, s, heads, dv), as the layer has it
        let z = Tensor::randn([b, s, heads, dv], (Kind::Float, tch::Device::Cpu)) * 2.0;
        let weight = Tensor::rand([dv], (Kind::Float, tch::Device::Cpu)) + 0.5;
        for (kind, tolerance) in [(Kind::Float, 1e-5), (Kind::BFloat16, 2.0 * 2f64.powi(-8))] {
            let (z, weight) = (z.to_kind(kind), weight.to_kind(kind));
            let before = stand_in::launches(&library);
            let by_kernel = kernels.gated_norm(&out, &z, &weight, eps);
            assert_eq!(stand_in::launches(&library), before + 1, "one launch");
            let fused = gated_norm_fused(&out.to_kind(kind).contiguous(), &z, &weight, eps);
            assert_eq!((by_kernel.size(), by_kernel.kind()), (fused.size(), kind));
            let diff = max_diff(&by_kernel.to_kind(Kind::Float), &fused.to_kind(Kind::Float)) / fused.abs().max().double_value(&[]);
            assert!(diff <= tolerance, "{kind:?}: differs by {diff} of the largest value");
            let same = by_kernel.eq_tensor(&fused).to_kind(Kind::Float).mean(Kind::Float).double_value(&[]);
            assert!(kind == Kind::Float || same >= 0.99, "{kind:?}: {same} of the values the same");
        }
    }

    /// The GPU's fused form of the queries' and keys' L2 norm means the elementwise one (here
    /// both on the CPU), scale included.
    #[test]
    fn the_fused_l2_norm_equals_the_elementwise_one() {
        tch::manual_seed(11);
        let x = Tensor::randn([2, 3, 5, 128], (Kind::Float, tch::Device::Cpu)) * 3.0;
        let scale = 128f64.powf(-0.5);
        let (fused, elementwise) = (l2_normalize_fused(&x, scale), l2_normalize(&x) * scale);
        assert!(max_diff(&fused, &elementwise) < 1e-7, "{}", max_diff(&fused, &elementwise));
        let norms = (&fused * &fused).sum_dim_intlist(-1, false, Kind::Float).sqrt();
        assert!(max_diff(&norms, &norms.ones_like().g_mul_scalar(scale)) < 1e-6);
    }

    /// The queries and keys are normalised per key head and then repeated for its value heads:
    /// the same bits as normalising the repeats, when taken contiguous from the layer's layout
    /// (the convolution's output transposed: the head dimension strided).
    #[test]
    fn normalising_before_the_repeat_gives_the_bits_of_normalising_after() {
        tch::manual_seed(14);
        let (b, s, kh, dk) = (3, 21, 4, 32);
        let conv_out = Tensor::randn([b, 3 * kh * dk, s], (Kind::Float, tch::Device::Cpu));
        let x = conv_out.transpose(1, 2).narrow(-1, 0, kh * dk).reshape([b, s, kh, dk]).transpose(1, 2);
        let after = l2_normalize(&x.repeat_interleave_self_int(2, 1, None)) * 0.125;
        let before = (l2_normalize(&x.contiguous()) * 0.125).repeat_interleave_self_int(2, 1, None);
        assert!(after.equal(&before));
    }

    /// The engine's linear-inputs kernel launched as on a GPU, through the stand-in driver that
    /// runs its source on the CPU: one launch gives libtorch's queries, keys and values (norms,
    /// scale, repeat and all) and the same inputs kept, from zero and from carried inputs, with
    /// right-padded rows; in f32 within f32's rounding, in bf16 within a bf16 step of the values.
    #[test]
    fn the_linear_inputs_kernel_through_a_stand_in_driver_gives_libtorchs_inputs() {
        let scratch = tempfile::tempdir().unwrap();
        let (library, kernels) = stand_in::kernels(scratch.path());
        let shape =
            LinearAttentionConfig { conv_kernel_dim: 4, key_head_dim: 128, value_head_dim: 64, num_key_heads: 2, num_value_heads: 4 };
        let (b, s, channels) = (3, 13, shape.conv_dim() as i64);
        tch::manual_seed(29);
        let cpu = |size: &[i64]| Tensor::randn(size, (Kind::Float, tch::Device::Cpu));
        let weight = cpu(&[channels, 1, 4]) * 0.5;
        let (mixed, carried) = (cpu(&[b, s, channels]), cpu(&[b, channels, 3]));
        let valid = Tensor::ones([b, s], (Kind::Int64, tch::Device::Cpu));
        let _ = valid.narrow(0, 2, 1).narrow(1, s - 4, 4).fill_(0); // the last row right-padded by 4
        for (kind, tolerance) in [(Kind::Float, 1e-5), (Kind::BFloat16, 2.0 * 2f64.powi(-8))] {
            let conv = ShortConvolution { weight: weight.to_kind(kind), shape };
            for (previous, valid) in [(None, None), (Some(carried.to_kind(kind)), Some(&valid))] {
                let mixed = mixed.to_kind(kind);
                let before = stand_in::launches(&library);
                let (q, k, v, kept) = conv.by_kernel(&kernels, &mixed, previous.as_ref(), valid);
                assert_eq!(stand_in::launches(&library), before + 1, "one launch");
                let (q0, k0, v0, kept0) = conv.by_libtorch(&mixed, previous.as_ref(), valid);
                let context = format!("{kind:?}, from carried inputs {}", previous.is_some());
                assert!(kept.equal(&kept0), "{context}: the inputs kept");
                for (name, got, want) in [("q", &q, &q0), ("k", &k, &k0), ("v", &v, &v0)] {
                    assert_eq!(got.size(), want.size(), "{context}: {name}");
                    // Relative to the tensor's scale: the queries are scaled by 1 / sqrt(128).
                    let diff = max_diff(got, want) / want.abs().max().double_value(&[]);
                    assert!(diff <= tolerance, "{context}: {name} differs by {diff} of its largest");
                }
                // In bf16 the values are the convolution's SiLU rounded where libtorch rounds (its
                // sum, then its SiLU): equal but where two sums fall either side of a rounding.
                let same = v.eq_tensor(&v0).to_kind(Kind::Float).mean(Kind::Float).double_value(&[]);
                assert!(kind == Kind::Float || same >= 0.99, "{context}: {same} of the values the same");
            }
        }
    }
}
