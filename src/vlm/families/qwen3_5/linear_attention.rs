//! Gated DeltaNet, Qwen3.5's linear attention.
//!
//! Each value head keeps a (key_dim x value_dim) state S. Per token, after a short causal
//! depthwise convolution over the projected queries, keys and values:
//!   S <- exp(g) S;  S <- S + k (beta (v - k^T S))^T;  out = q^T S
//! with the decay g = -exp(A_log) softplus(a + dt_bias) and the write strength beta = sigmoid(b).
//! Decoding runs that recurrence one token at a time. A prompt runs it in chunks of up to 64
//! tokens: within a chunk the updates are solved together through the inverse of one unit
//! triangular system (the "WY" form), and only the state crosses chunk boundaries. Both forms are
//! checked against each other in the tests below, and against transformers' reference forms by
//! the parity goldens.
//!
//! Scoring's questions all start from their image's state after the prefix. That state is read
//! where it is, one product per image for all its questions' rows ([`Start::PerImage`]), never
//! repeated per question, and the state after the questions, which nothing reads, is not made.

use tch::{Kind, Tensor};

use crate::vlm::config::{LinearAttentionConfig, TextConfig};
use crate::vlm::error::VlmError;
use crate::vlm::layers::{rms_normalize, Linear};
use crate::vlm::part_clock::timed;
use crate::vlm::weights::Weights;

/// Tokens per chunk of the chunked form at most (transformers' and the FLA kernels' size). A
/// shorter call (a question's few dozen tokens) takes one chunk of its own length rounded up to
/// [`CHUNK_STEP`]: padding 24 tokens to 64 would nearly triple the chunk's work.
const CHUNK: i64 = 64;
const CHUNK_STEP: i64 = 8;

/// The delta rule's state before a call.
pub enum Start {
    /// No tokens before: a zero state.
    Zero,
    /// One state per row, (batch, heads, dk, dv).
    PerRow(Tensor),
    /// One state per image, (images, heads, dk, dv), shared by that image's rows, which come
    /// image by image (batch / images of each).
    PerImage(Tensor),
}

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
    /// Depthwise kernel, (conv_dim, 1, kernel).
    conv: Tensor,
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
            conv: w.get(&at("conv1d.weight"), &[conv_dim, 1, shape.conv_kernel_dim as i64])?,
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
        let (out, kept) = self.mix(x, conv.as_ref(), start, true, valid);
        *state = kept;
        out
    }

    /// `x` (images x rows, seq, hidden), each image's rows continuing from that image's state
    /// `prefix` (images first): the questions of scoring after their image. The prefix's
    /// recurrent state is read in place (its small convolution inputs are repeated per row), and
    /// the state after `x` is not made.
    pub fn forward_after_prefix(&self, x: &Tensor, prefix: &LinearState, valid: Option<&Tensor>) -> Tensor {
        let rows = x.size()[0] / prefix.conv.size()[0];
        let conv = prefix.conv.repeat_interleave_self_int(rows, 0, None);
        self.mix(x, Some(&conv), Start::PerImage(prefix.recurrent.shallow_clone()), false, valid).0
    }

    /// The layer after the convolution inputs `conv` and the delta rule's `start`; with
    /// `keep_state`, also the state after `x`.
    fn mix(
        &self,
        x: &Tensor,
        conv: Option<&Tensor>,
        start: Start,
        keep_state: bool,
        valid: Option<&Tensor>,
    ) -> (Tensor, Option<LinearState>) {
        let (b, s) = (x.size()[0], x.size()[1]);
        let s_cfg = &self.shape;
        let (kh, vh, dk, dv) =
            (s_cfg.num_key_heads as i64, s_cfg.num_value_heads as i64, s_cfg.key_head_dim as i64, s_cfg.value_head_dim as i64);
        let (mixed, z, beta, g) = timed("linear attention: projections in", || {
            let mixed = self.in_proj_qkv.forward(x); // (b, s, conv_dim)
            let z = self.in_proj_z.forward(x).view([b, s, vh, dv]);
            let mut beta = self.in_proj_b.forward(x).sigmoid().to_kind(Kind::Float);
            let mut g = &self.neg_a * (self.in_proj_a.forward(x).to_kind(Kind::Float) + &self.dt_bias).softplus();
            if let Some(valid) = valid {
                let keep = valid.to_kind(Kind::Float).unsqueeze(-1);
                beta = beta * &keep;
                g = g * keep;
            }
            (mixed, z, beta, g)
        });

        let (mixed, conv_state) = timed("linear attention: convolution", || self.convolve(&mixed, conv, valid)); // (b, s, conv_dim)
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
        (timed("linear attention: projection out", || self.out_proj.forward(&out.reshape([b, s, vh * dv]))), kept)
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
        let (b, s, channels) = (mixed.size()[0], mixed.size()[1], mixed.size()[2]);
        let keep = self.shape.conv_kernel_dim as i64 - 1;
        let previous = match previous {
            Some(p) => p.transpose(1, 2),
            None => Tensor::zeros([b, keep, channels], (mixed.kind(), mixed.device())),
        };
        let inputs = Tensor::cat(&[&previous, mixed], 1); // (b, keep + s, channels)
        let out = if mixed.device().is_cuda() { depthwise_channels_last(&inputs, &self.conv) } else { depthwise(&inputs, &self.conv) };
        // The kept inputs end at each row's last real token: row lens[r] + keep - 1.
        let kept = match valid {
            Some(valid) if keep > 0 => {
                let lens = valid.to_kind(Kind::Int64).sum_dim_intlist(1, false, Kind::Int64); // (b)
                let offsets = Tensor::arange(keep, (Kind::Int64, mixed.device()));
                let rows = (lens.unsqueeze(1) + offsets.unsqueeze(0)).unsqueeze(2).expand([b, keep, channels], false);
                inputs.gather(1, &rows, false)
            }
            _ => inputs.narrow(1, s, keep),
        };
        (out.silu(), kept.transpose(1, 2).contiguous())
    }

    /// The delta rule's output `out` (f32) in the model's precision `kind`, RMSNorm over each
    /// head (in f32), scaled, then gated by SiLU(z), as transformers does; on a GPU, in the
    /// fewer kernels of [`gated_norm_fused`].
    fn gated_norm(&self, out: &Tensor, z: &Tensor, kind: Kind) -> Tensor {
        if out.device().is_cuda() {
            let mut x = Tensor::empty(out.size(), (kind, out.device()));
            x.copy_(out); // cast and made contiguous in one pass
            return gated_norm_fused(&x, z, &self.norm_weight, self.eps);
        }
        gated_norm_elementwise(&out.to_kind(kind), z, &self.norm_weight, self.eps)
    }
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
fn l2_normalize(x: &Tensor) -> Tensor {
    x * ((x * x).sum_dim_intlist(-1, true, Kind::Float) + 1e-6).rsqrt()
}

/// [`l2_normalize`] times `scale` through the fused RMSNorm (a GPU's form: two kernels where
/// the elementwise form takes six): sum(x^2) + 1e-6 = d (mean(x^2) + 1e-6 / d), so the L2 norm
/// is the RMS norm of epsilon 1e-6 / d over sqrt(d).
fn l2_normalize_fused(x: &Tensor, scale: f64) -> Tensor {
    let d = x.size()[x.dim() - 1];
    rms_normalize(x, 1e-6 / d as f64) * (scale / (d as f64).sqrt())
}

/// The delta rule token by token. q, k (batch, heads, seq, dk), v (batch, heads, seq, dv), g and
/// beta (batch, heads, seq), all f32, q already scaled; returns the outputs (batch, heads, seq,
/// dv) and the final state.
pub fn recurrent_rule(q: &Tensor, k: &Tensor, v: &Tensor, g: &Tensor, beta: &Tensor, initial: Option<Tensor>) -> (Tensor, Tensor) {
    let (b, h, s, dk) = (q.size()[0], q.size()[1], q.size()[2], q.size()[3]);
    let dv = v.size()[3];
    let mut state = initial.unwrap_or_else(|| Tensor::zeros([b, h, dk, dv], (Kind::Float, q.device())));
    let mut outs = Vec::with_capacity(s as usize);
    for t in 0..s {
        let (q_t, k_t, v_t) = (q.select(2, t), k.select(2, t), v.select(2, t));
        state = state * g.select(2, t).exp().unsqueeze(-1).unsqueeze(-1);
        let remembered = (&state * k_t.unsqueeze(-1)).sum_dim_intlist(-2, false, Kind::Float); // k^T S: (b, h, dv)
        let delta = (v_t - remembered) * beta.select(2, t).unsqueeze(-1);
        state = state + k_t.unsqueeze(-1) * delta.unsqueeze(-2);
        outs.push((&state * q_t.unsqueeze(-1)).sum_dim_intlist(-2, false, Kind::Float));
    }
    (Tensor::stack(&outs, 2), state)
}

/// The delta rule in chunks of at most [`CHUNK`] tokens, from `start`; the same arguments and
/// outputs as [`recurrent_rule`], and the final state where `keep` asks for it.
pub fn chunked_rule(q: &Tensor, k: &Tensor, v: &Tensor, g: &Tensor, beta: &Tensor, start: Start, keep: bool) -> (Tensor, Option<Tensor>) {
    let (b, h, s, dk) = (q.size()[0], q.size()[1], q.size()[2], q.size()[3]);
    let dv = v.size()[3];
    let chunk = CHUNK.min((s + CHUNK_STEP - 1) / CHUNK_STEP * CHUNK_STEP).max(CHUNK_STEP);
    let pad = (chunk - s % chunk) % chunk;
    let n = (s + pad) / chunk;
    // Padded to whole chunks; a call of whole chunks (the questions' one) is not copied.
    let padded = |t: &Tensor, pads: &[i64]| if pad == 0 { t.shallow_clone() } else { t.constant_pad_nd(pads) };
    let chunks = |t: &Tensor, d: i64| padded(t, &[0, 0, 0, pad]).reshape([b, h, n, chunk, d]);
    let (q, k, v) = (chunks(q, dk), chunks(k, dk), chunks(v, dv));
    let beta = padded(beta, &[0, pad]).reshape([b, h, n, chunk, 1]);
    let decay = padded(g, &[0, pad]).reshape([b, h, n, chunk]).cumsum(-1, Kind::Float); // log decay from the chunk start
    let (k_beta, v_beta) = (&k * &beta, &v * &beta);

    // decay_between[i, j] = exp(decay_i - decay_j) for j <= i: what a write at j has decayed by at i.
    let future = Tensor::ones([chunk, chunk], (Kind::Bool, q.device())).triu(1);
    let decay_between = (decay.unsqueeze(-1) - decay.unsqueeze(-2)).masked_fill(&future, f64::NEG_INFINITY).exp();
    // Within a chunk the writes interfere through (I + strictly lower part of this)^-1, made
    // once (one triangular solve against the identity) and applied by two products: on a GPU
    // far cheaper than two triangular solves against the values and keys.
    let system = k_beta.matmul(&k.transpose(-1, -2)) * &decay_between;
    let identity = Tensor::eye(chunk, (Kind::Float, q.device())).expand_as(&system);
    let inverse = timed("linear attention: delta rule: inverse", || system.linalg_solve_triangular(&identity, false, true, true));
    let decay_exp = decay.exp().unsqueeze(-1);
    let values = inverse.matmul(&v_beta);
    let keys_read = inverse.matmul(&(&k_beta * &decay_exp));
    let within = q.matmul(&k.transpose(-1, -2)) * &decay_between;
    let q_decayed = &q * &decay_exp;
    // What a chunk hands the next: only where there is a next chunk, or the state is kept (the
    // questions' one chunk hands nothing on).
    let carried = (n > 1 || keep).then(|| {
        let last = decay.narrow(-1, chunk - 1, 1);
        (&k * (&last - &decay).exp().unsqueeze(-1), last.exp().unsqueeze(-1)) // (b, h, n, c, dk), (b, h, n, 1, 1)
    });

    let mut state = match start {
        Start::Zero => State::Rows(Tensor::zeros([b, h, dk, dv], (Kind::Float, q.device()))),
        Start::PerRow(state) => State::Rows(state),
        Start::PerImage(state) => State::Images(state),
    };
    let out = timed("linear attention: delta rule: across chunks", || {
        let mut outs = Vec::with_capacity(n as usize);
        for c in 0..n {
            // What the chunk writes, less what the state (decayed to each position) already holds.
            let new = values.select(2, c) - state.read(&keys_read.select(2, c));
            outs.push(state.read(&q_decayed.select(2, c)) + within.select(2, c).matmul(&new));
            if let (true, Some((k_to_end, chunk_decay))) = (c + 1 < n || keep, &carried) {
                state = State::Rows(state.per_row(b) * chunk_decay.select(2, c) + k_to_end.select(2, c).transpose(-1, -2).matmul(&new));
            }
        }
        match outs.len() {
            1 => outs.remove(0).unsqueeze(2),
            _ => Tensor::stack(&outs, 2),
        }
    });
    let out = out.reshape([b, h, n * chunk, dv]).narrow(2, 0, s);
    (out, keep.then(|| state.per_row(b)))
}

/// The state inside [`chunked_rule`]: one per row, or one per image not yet repeated.
enum State {
    Rows(Tensor),
    Images(Tensor),
}

impl State {
    /// `x` (rows, heads, c, dk) times each row's state: (rows, heads, c, dv). Per image, the rows
    /// of an image are stacked into one product with its state.
    fn read(&self, x: &Tensor) -> Tensor {
        match self {
            State::Rows(state) => x.matmul(state),
            State::Images(state) => {
                let (b, h, c, dk) = (x.size()[0], x.size()[1], x.size()[2], x.size()[3]);
                let (images, dv) = (state.size()[0], state.size()[3]);
                let rows = b / images;
                let stacked = x.reshape([images, rows, h, c, dk]).permute([0, 2, 1, 3, 4]).reshape([images, h, rows * c, dk]);
                stacked.matmul(state).view([images, h, rows, c, dv]).permute([0, 2, 1, 3, 4]).reshape([b, h, c, dv])
            }
        }
    }

    fn per_row(&self, b: i64) -> Tensor {
        match self {
            State::Rows(state) => state.shallow_clone(),
            State::Images(state) => {
                let rows = b / state.size()[0];
                state.repeat_interleave_self_int(rows, 0, None)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tch::{Kind, Tensor};

    use super::{
        chunked_rule, depthwise, depthwise_channels_last, gated_norm_elementwise, gated_norm_fused, l2_normalize, l2_normalize_fused,
        recurrent_rule, Start,
    };

    /// Random inputs in the ranges the layer produces: unit-norm keys, decays <= 0, beta in (0, 1).
    fn inputs(b: i64, h: i64, s: i64, seed: i64) -> [Tensor; 5] {
        tch::manual_seed(seed);
        let (dk, dv) = (16, 8);
        let q = l2_normalize(&Tensor::randn([b, h, s, dk], (Kind::Float, tch::Device::Cpu))) * 0.25;
        let k = l2_normalize(&Tensor::randn([b, h, s, dk], (Kind::Float, tch::Device::Cpu)));
        let v = Tensor::randn([b, h, s, dv], (Kind::Float, tch::Device::Cpu));
        let g = -Tensor::rand([b, h, s], (Kind::Float, tch::Device::Cpu)) * 0.5;
        let beta = Tensor::rand([b, h, s], (Kind::Float, tch::Device::Cpu));
        [q, k, v, g, beta]
    }

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

    #[test]
    fn the_chunked_form_equals_the_recurrent_form_token_by_token() {
        // 150 tokens: two full chunks and a padded third, from zero and from a carried state.
        let [q, k, v, g, beta] = inputs(2, 4, 150, 7);
        let (out_r, state_r) = recurrent_rule(&q, &k, &v, &g, &beta, None);
        let (out_c, state_c) = chunked_rule(&q, &k, &v, &g, &beta, Start::Zero, true);
        let state_c = state_c.unwrap();
        assert!(max_diff(&out_r, &out_c) < 1e-4, "outputs differ by {}", max_diff(&out_r, &out_c));
        assert!(max_diff(&state_r, &state_c) < 1e-4, "states differ by {}", max_diff(&state_r, &state_c));

        let [q2, k2, v2, g2, beta2] = inputs(2, 4, 70, 8);
        let (out_r, state_r) = recurrent_rule(&q2, &k2, &v2, &g2, &beta2, Some(state_r));
        let (out_c, state_c) = chunked_rule(&q2, &k2, &v2, &g2, &beta2, Start::PerRow(state_c), true);
        let state_c = state_c.unwrap();
        assert!(max_diff(&out_r, &out_c) < 1e-4, "continued outputs differ by {}", max_diff(&out_r, &out_c));
        assert!(max_diff(&state_r, &state_c) < 1e-4, "continued states differ by {}", max_diff(&state_r, &state_c));
    }

    #[test]
    fn a_sequence_split_in_two_ends_in_the_same_state() {
        let [q, k, v, g, beta] = inputs(1, 2, 100, 9);
        let (whole, state_whole) = chunked_rule(&q, &k, &v, &g, &beta, Start::Zero, true);
        let part = |t: &Tensor, from: i64, len: i64| t.narrow(2, from, len);
        let (first, state) =
            chunked_rule(&part(&q, 0, 37), &part(&k, 0, 37), &part(&v, 0, 37), &part(&g, 0, 37), &part(&beta, 0, 37), Start::Zero, true);
        let (second, state) = chunked_rule(
            &part(&q, 37, 63),
            &part(&k, 37, 63),
            &part(&v, 37, 63),
            &part(&g, 37, 63),
            &part(&beta, 37, 63),
            Start::PerRow(state.unwrap()),
            true,
        );
        assert!(max_diff(&whole, &Tensor::cat(&[first, second], 2)) < 1e-4);
        assert!(max_diff(&state_whole.unwrap(), &state.unwrap()) < 1e-4);
    }

    #[test]
    fn padding_with_no_decay_and_no_write_leaves_the_state_alone() {
        // 25 tokens whose last 5 are padding: real q, k, v there, but g = 0 and beta = 0.
        let [q, k, v, g, beta] = inputs(1, 2, 25, 10);
        let (_, state) = chunked_rule(
            &q.narrow(2, 0, 20),
            &k.narrow(2, 0, 20),
            &v.narrow(2, 0, 20),
            &g.narrow(2, 0, 20),
            &beta.narrow(2, 0, 20),
            Start::Zero,
            true,
        );
        let real = Tensor::cat(
            &[Tensor::ones([1, 2, 20], (Kind::Float, tch::Device::Cpu)), Tensor::zeros([1, 2, 5], (Kind::Float, tch::Device::Cpu))],
            2,
        );
        let (_, padded) = chunked_rule(&q, &k, &v, &(&g * &real), &(&beta * &real), Start::Zero, true);
        assert!(max_diff(&state.unwrap(), &padded.unwrap()) < 1e-6);
    }

    /// Questions after their image: 3 images' states, 5 rows each of 21 tokens (one chunk of 24),
    /// the state read per image equals it repeated per row, and token by token.
    #[test]
    fn rows_sharing_their_images_state_equal_rows_with_a_copy_each() {
        let (images, rows, s) = (3, 5, 21);
        let [pq, pk, pv, pg, pbeta] = inputs(images, 2, 40, 11);
        let (_, prefix) = chunked_rule(&pq, &pk, &pv, &pg, &pbeta, Start::Zero, true);
        let prefix = prefix.unwrap();
        let [q, k, v, g, beta] = inputs(images * rows, 2, s, 12);
        let copies = prefix.repeat_interleave_self_int(rows, 0, None);
        let (shared, none) = chunked_rule(&q, &k, &v, &g, &beta, Start::PerImage(prefix.shallow_clone()), false);
        assert!(none.is_none());
        let (copied, _) = chunked_rule(&q, &k, &v, &g, &beta, Start::PerRow(copies.shallow_clone()), true);
        let (stepped, _) = recurrent_rule(&q, &k, &v, &g, &beta, Some(copies));
        assert!(max_diff(&shared, &copied) < 1e-6, "shared vs copied: {}", max_diff(&shared, &copied));
        assert!(max_diff(&shared, &stepped) < 1e-4, "shared vs token by token: {}", max_diff(&shared, &stepped));
        // More tokens than one chunk: the shared state is repeated after the first.
        let [q, k, v, g, beta] = inputs(images * rows, 2, 90, 13);
        let (shared, _) = chunked_rule(&q, &k, &v, &g, &beta, Start::PerImage(prefix), false);
        let (stepped, _) = recurrent_rule(&q, &k, &v, &g, &beta, Some(copies_of(&pq, &pk, &pv, &pg, &pbeta, rows)));
        assert!(max_diff(&shared, &stepped) < 1e-4, "two chunks: {}", max_diff(&shared, &stepped));
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

    fn copies_of(q: &Tensor, k: &Tensor, v: &Tensor, g: &Tensor, beta: &Tensor, rows: i64) -> Tensor {
        chunked_rule(q, k, v, g, beta, Start::Zero, true).1.unwrap().repeat_interleave_self_int(rows, 0, None)
    }
}
