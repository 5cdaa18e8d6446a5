//! The sparse mixture-of-experts MLP, as transformers 5.23 computes it for `qwen3_vl_moe` and
//! `qwen3_5_moe` ([`Experts`], the experts without their router, also serve Gemma 4's block): a router scores every expert per token (softmax in f32), the top k are kept and
//! their weights renormalised to sum to one, each chosen expert's gated MLP runs on its tokens,
//! and the weighted outputs are summed. Qwen3.5's block adds a shared expert that every token
//! takes, scaled by a sigmoid gate.
//!
//! Tokens are grouped by expert (one stable sort of the (token, slot) assignments), and each
//! projection of every expert runs as one grouped matrix product over the groups (libtorch's
//! `_grouped_mm`, as transformers' default `grouped_mm` experts use on the CPU and the GPU); the
//! outputs go back to their (token, slot) places by a gather and are summed over the k slots.
//! Each way, the rows move in one gather: the index arithmetic runs on the indexes. No
//! loop over tokens or experts, no host synchronisation (the group offsets stay on the device),
//! and no scatter-add, whose atomic adds on a GPU would sum in an unpredictable order: a
//! release's bytes must not depend on it. Each group is padded with zero rows to a multiple of
//! [`GROUP_ROWS`], so a token's output does not depend on how many other tokens chose its expert
//! (which other images share the pass).
//!
//! On a GPU where the engine's own kernels are asked for, the grouping (the same layout, to the
//! byte) and the weighted sum are theirs ([`cuda_kernels`]): four launches where libtorch's
//! forms take some twenty.

use tch::{Kind, Tensor};

use super::config::{FusedLayout, MoeConfig};
use super::cuda_kernels::{self, CudaKernels, ExpertGroups};
use super::error::VlmError;
use super::layers::{gated_activation, GatedMlp, Linear};
use super::part_clock::timed;
use super::weights::Weights;

/// Rows of an expert's group come in multiples of this (zero rows fill the last): on a CPU a
/// product of one to three rows takes another path than one of four or more, and its bits differ.
const GROUP_ROWS: i64 = 8;

pub struct SparseMoe {
    router: Linear,
    experts: Experts,
    top_k: i64,
    renormalize: bool,
    /// Qwen3.5: an MLP every token takes, scaled by sigmoid(gate(x)).
    shared: Option<(GatedMlp, Linear)>,
}

/// Every expert's gated MLP, run on the tokens routed to it: what the Qwen and Gemma 4 blocks
/// share (their routers differ).
pub struct Experts {
    /// Every expert's gate and up projections, (experts, hidden, 2 x intermediate): the gate's
    /// columns, then the up's. Often a transposed view of the stored tensor.
    gate_up: Tensor,
    /// (experts, intermediate, hidden).
    down: Tensor,
    experts: i64,
    /// The gate's activation: SiLU (Qwen) or tanh-approximated GELU (Gemma 4).
    gelu_tanh: bool,
}

impl Experts {
    /// `{prefix}.gate_up_proj` and `{prefix}.down_proj` (fused) or one tensor per expert.
    pub fn load(w: &Weights, prefix: &str, hidden: i64, cfg: &MoeConfig, gelu_tanh: bool) -> Result<Experts, VlmError> {
        let (e, i) = (cfg.num_experts as i64, cfg.moe_intermediate_size as i64);
        let (gate_up, down) = if w.has(&format!("{prefix}.gate_up_proj")) {
            fused_experts(w, prefix, e, hidden, i, cfg.fused_layout)?
        } else {
            stacked_experts(w, prefix, e, hidden, i)?
        };
        Ok(Experts { gate_up, down, experts: e, gelu_tanh })
    }

    /// `x` (tokens, hidden), each token's k experts `chosen` (tokens, k) and their `weights`
    /// (tokens, k) -> the weighted sum of the chosen experts' outputs (tokens, hidden). On a GPU
    /// where the engine's own kernels are asked for, the grouping and the sum are theirs.
    pub fn forward(&self, x: &Tensor, weights: &Tensor, chosen: &Tensor) -> Tensor {
        let kernels = cuda_kernels::asked_for(x.device()).filter(|_| CudaKernels::takes_experts(x, self.experts));
        self.forward_by(x, weights, chosen, kernels)
    }

    /// [`Self::forward`], the rows grouped and summed by `kernels` where given, else by
    /// libtorch's operations.
    fn forward_by(&self, x: &Tensor, weights: &Tensor, chosen: &Tensor, kernels: Option<&CudaKernels>) -> Tensor {
        let grouping = timed("experts: grouping", || match kernels {
            Some(kernels) => kernels.experts_grouping(x, chosen, self.experts, GROUP_ROWS),
            None => self.grouping(x, chosen),
        });
        let both = timed("experts: products", || {
            let both = grouping.rows.internal_grouped_mm(&self.gate_up, Some(&grouping.offsets), None::<&Tensor>, None::<Kind>);
            let i = both.size()[1] / 2;
            let (gate, up) = (both.narrow(1, 0, i), both.narrow(1, i, i));
            let hidden = gated_activation(&gate, &up, self.gelu_tanh, kernels);
            hidden.internal_grouped_mm(&self.down, Some(&grouping.offsets), None::<&Tensor>, None::<Kind>)
        });
        timed("experts: weighted sum", || {
            let weights = weights.to_kind(x.kind());
            match kernels {
                Some(kernels) => kernels.experts_weighted_sum(&both, &grouping.output_row, &weights),
                None if x.device().is_cuda() => weighted_sum_by_bags(&both, &grouping.output_row, &weights),
                None => weighted_sum_by_gather(&both, &grouping.output_row, &weights),
            }
        })
    }

    /// The tokens' rows grouped by expert, each group padded, and where each (token, slot)'s
    /// output will be.
    fn grouping(&self, x: &Tensor, chosen: &Tensor) -> ExpertGroups {
        let (tokens, k, device) = (x.size()[0], chosen.size()[1], x.device());
        // Sorted as bytes where the experts fit one (a GPU's radix sort then takes one pass over
        // the keys, not eight): a stable sort's order is the same whatever the keys' type.
        let flat = chosen.flatten(0, -1);
        let keys = if self.experts <= 256 { flat.to_kind(Kind::Uint8) } else { flat };
        let (sorted, order) = keys.sort_stable(true, 0, false);
        let sorted = sorted.to_kind(Kind::Int64);
        // Each expert's group padded with zero rows to a multiple of GROUP_ROWS: a group's size
        // then never takes a kernel's few-row path, and a token's output is the same bits whatever
        // else shares the pass. The buffer's size is fixed by the shapes alone (no host sync).
        // Each expert's run in the sorted choices, found by a search: bincount would read the
        // choices' largest and smallest values back to the host to size its output, twice a layer.
        let experts = Tensor::arange(self.experts, (Kind::Int64, device));
        let starts = experts.searchsorted(&sorted, false, false, "left", None::<&Tensor>);
        let counts = experts.searchsorted(&sorted, false, true, "right", None::<&Tensor>) - &starts;
        let padded = (&counts + (GROUP_ROWS - 1)).floor_divide_scalar(GROUP_ROWS) * GROUP_ROWS;
        let padded_ends = padded.cumsum(0, Kind::Int64);
        let padded_starts = &padded_ends - &padded;
        let rank = Tensor::arange(tokens * k, (Kind::Int64, device)) - starts.index_select(0, &sorted);
        let place = padded_starts.index_select(0, &sorted) + rank;
        let offsets = padded_ends.to_kind(Kind::Int);
        // The rows are moved once each way, the index arithmetic done on the (small) indexes:
        // each row of the grouped buffer names the token it holds, or the zero row after the
        // last token; and each (token, slot) names the grouped row of its output.
        let rows = tokens * k + self.experts * (GROUP_ROWS - 1);
        let source = Tensor::full([rows], tokens, (Kind::Int64, device)).index_copy(0, &place, &order.divide_scalar_mode(k, "floor"));
        let with_zero_row = Tensor::cat(&[x, &Tensor::zeros([1, x.size()[1]], (x.kind(), device))], 0);
        let rows = gather_rows(&with_zero_row, &source);
        // The sorted assignment j is (token, slot) order[j] and sits at grouped row place[j].
        let output_row = place.zeros_like().index_copy(0, &order, &place);
        ExpertGroups { rows, offsets, output_row }
    }
}

/// Rows `index` of `x` (rows, width), moved as 8-byte words where a row is a whole number of
/// them: the same bytes, in a quarter of a GPU's threads for 2-byte elements.
fn gather_rows(x: &Tensor, index: &Tensor) -> Tensor {
    let row_bytes = x.size()[1] * x.kind().elt_size_in_bytes() as i64;
    if row_bytes % 8 != 0 || !x.is_contiguous() {
        return x.index_select(0, index);
    }
    x.view_dtype(Kind::Int64).index_select(0, index).view_dtype(x.kind())
}

/// The k outputs of each token, (token, slot) `output_row` of the grouped outputs `both`, times
/// its routing `weights` (tokens, k), summed over the slots: the CPU's form, whose bits the
/// releases scored there were made with (each product rounded to the model's precision, then
/// summed).
fn weighted_sum_by_gather(both: &Tensor, output_row: &Tensor, weights: &Tensor) -> Tensor {
    let (tokens, k) = (weights.size()[0], weights.size()[1]);
    let routed = gather_rows(both, output_row).view([tokens, k, -1]) * weights.unsqueeze(-1);
    routed.sum_dim_intlist(1, false, both.kind())
}

/// [`weighted_sum_by_gather`] as one bag per token (libtorch's embedding bag, in sum mode with
/// per-row weights): a GPU's form, one kernel that reads each output row once and writes only
/// the sums, where the gather, the products and the sum each wrote the k rows in full. Each
/// thread sums one token's k products in slot order in f32 (no atomics), so a token's sum
/// depends on its own rows alone.
fn weighted_sum_by_bags(both: &Tensor, output_row: &Tensor, weights: &Tensor) -> Tensor {
    let (tokens, k) = (weights.size()[0], weights.size()[1]);
    let starts = Tensor::arange_start_step(0, tokens * k, k, (Kind::Int64, both.device()));
    let (mode_sum, scale_grad_by_freq, sparse, include_last_offset) = (0, false, false, false);
    let (sums, _, _, _) = Tensor::embedding_bag(
        both,
        output_row,
        &starts,
        scale_grad_by_freq,
        mode_sum,
        sparse,
        Some(weights.flatten(0, -1).contiguous()),
        include_last_offset,
    );
    sums
}

impl SparseMoe {
    /// Loads `{prefix}.gate` (the router), the experts in whichever layout the checkpoint has, and
    /// the shared expert where the config has one. Fused expert tensors are used as stored (views,
    /// no copy); per-expert tensors are copied into one stack each, every expert's own tensor
    /// freed as it is copied, so loading never holds both.
    pub fn load(w: &Weights, prefix: &str, hidden: i64, cfg: &MoeConfig) -> Result<SparseMoe, VlmError> {
        let at = |name: &str| format!("{prefix}.{name}");
        let experts = Experts::load(w, &at("experts"), hidden, cfg, false)?;
        let shared = match cfg.shared_expert_intermediate_size {
            Some(size) => Some((
                GatedMlp::load(w, &at("shared_expert"), hidden, size as i64, false)?,
                Linear::load(w, &at("shared_expert_gate"), hidden, 1, false)?,
            )),
            None => None,
        };
        Ok(SparseMoe {
            router: Linear::load(w, &at("gate"), hidden, cfg.num_experts as i64, false)?,
            experts,
            top_k: cfg.num_experts_per_tok as i64,
            renormalize: cfg.norm_topk_prob,
            shared,
        })
    }

    /// `x` (batch, seq, hidden) -> (batch, seq, hidden).
    pub fn forward(&self, x: &Tensor) -> Tensor {
        let shape = x.size();
        let x = x.reshape([-1, shape[2]]);
        let (weights, chosen) = timed("experts: router", || {
            let logits = self.router.forward(&x);
            match cuda_kernels::asked_for(x.device()).filter(|_| CudaKernels::takes_router(&logits, self.top_k)) {
                Some(kernels) => kernels.router_top_k(&logits, self.top_k, self.renormalize),
                None => top_k_by_libtorch(&logits, self.top_k, self.renormalize),
            }
        });
        let mut out = self.experts.forward(&x, &weights, &chosen);
        if let Some((mlp, gate)) = &self.shared {
            out = out + timed("experts: shared expert", || gate.forward(&x).sigmoid() * mlp.forward(&x));
        }
        out.view(shape.as_slice())
    }
}

/// Each token's `k` most probable experts from its router `logits` (tokens, experts), and their
/// softmax probabilities (in f32, renormalised where the model asks) in the logits' precision.
fn top_k_by_libtorch(logits: &Tensor, k: i64, renormalize: bool) -> (Tensor, Tensor) {
    let probs = logits.softmax(-1, Kind::Float);
    let (mut weights, chosen) = probs.topk(k, -1, true, true);
    if renormalize {
        weights = &weights / weights.sum_dim_intlist(-1, true, Kind::Float);
    }
    (weights.to_kind(logits.kind()), chosen)
}

/// The experts of fused `gate_up_proj` and `down_proj` tensors, as views of them, in the
/// orientation of a grouped product: (E, H, 2I) and (E, I, H).
/// The layout is read from the stored shapes: `gate_up_proj`'s, or where hidden = 2 x
/// intermediate makes both readings of it the same shape, `down_proj`'s, which then differ
/// (hidden x I against I x hidden). Only where neither can say (no such tensors: the error
/// names them) is the family's published layout assumed.
fn fused_experts(w: &Weights, prefix: &str, e: i64, hidden: i64, i: i64, layout: FusedLayout) -> Result<(Tensor, Tensor), VlmError> {
    let (rows, columns) = (vec![e, 2 * i, hidden], vec![e, hidden, 2 * i]);
    let (down_rows, down_columns) = (vec![e, hidden, i], vec![e, i, hidden]);
    let layout = match (w.shape(&format!("{prefix}.gate_up_proj")), w.shape(&format!("{prefix}.down_proj"))) {
        (Some(s), _) if s == rows && s != columns => FusedLayout::Rows,
        (Some(s), _) if s == columns && s != rows => FusedLayout::Columns,
        (_, Some(d)) if d == down_rows && d != down_columns => FusedLayout::Rows,
        (_, Some(d)) if d == down_columns && d != down_rows => FusedLayout::Columns,
        _ => layout,
    };
    Ok(match layout {
        // transformers' in-memory form: (E, 2I, H) and (E, H, I).
        FusedLayout::Rows => (
            w.get(&format!("{prefix}.gate_up_proj"), &rows)?.transpose(1, 2),
            w.get(&format!("{prefix}.down_proj"), &[e, hidden, i])?.transpose(1, 2),
        ),
        // Qwen3-VL-MoE's published checkpoints: (E, H, 2I) and (E, I, H).
        FusedLayout::Columns => {
            (w.get(&format!("{prefix}.gate_up_proj"), &columns)?, w.get(&format!("{prefix}.down_proj"), &[e, i, hidden])?)
        }
    })
}

/// Per-expert tensors (`experts.N.gate_proj.weight`, ...) copied into the fused form
/// transformers makes of them, (E, 2I, H) and (E, H, I), and returned as views like
/// [`fused_experts`]'.
fn stacked_experts(w: &Weights, prefix: &str, e: i64, hidden: i64, i: i64) -> Result<(Tensor, Tensor), VlmError> {
    let one = |n: i64, proj: &str, shape: &[i64]| w.take(&format!("{prefix}.{n}.{proj}.weight"), shape);
    let first = one(0, "gate_proj", &[i, hidden])?;
    let options = (first.kind(), first.device());
    let (gate_up, down) = (Tensor::empty([e, 2 * i, hidden], options), Tensor::empty([e, hidden, i], options));
    for n in 0..e {
        let gate = if n == 0 { first.shallow_clone() } else { one(n, "gate_proj", &[i, hidden])? };
        gate_up.get(n).narrow(0, 0, i).copy_(&gate);
        gate_up.get(n).narrow(0, i, i).copy_(&one(n, "up_proj", &[i, hidden])?);
        down.get(n).copy_(&one(n, "down_proj", &[hidden, i])?);
    }
    Ok((gate_up.transpose(1, 2), down.transpose(1, 2)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tch::{Device, Kind};

    /// The GPU's one-kernel weighted sum means the CPU's gather, products and sum (here both on
    /// the CPU), and a token's sum is the same whatever other tokens share the call.
    #[test]
    fn the_weighted_sum_by_bags_equals_the_one_by_gather() {
        tch::manual_seed(3);
        let (tokens, k, rows, width) = (6, 3, 40, 24);
        let both = Tensor::randn([rows, width], (Kind::Float, Device::Cpu));
        let output_row = Tensor::randint(rows, [tokens * k], (Kind::Int64, Device::Cpu));
        let weights = Tensor::rand([tokens, k], (Kind::Float, Device::Cpu));
        let (bags, gather) = (weighted_sum_by_bags(&both, &output_row, &weights), weighted_sum_by_gather(&both, &output_row, &weights));
        assert_eq!(bags.size(), [tokens, width]);
        assert!((&bags - &gather).abs().max().double_value(&[]) < 1e-5);
        let alone = weighted_sum_by_bags(&both, &output_row.narrow(0, 2 * k, k), &weights.narrow(0, 2, 1));
        assert!(alone.equal(&bags.narrow(0, 2, 1)), "token 2 alone and among six");
    }

    /// Rows moved as 8-byte words are the same bytes as rows moved as elements, in any precision.
    #[test]
    fn rows_gathered_as_words_are_the_same_bytes() {
        let index = Tensor::from_slice(&[3i64, 0, 3, 1]);
        for kind in [Kind::Float, Kind::BFloat16, Kind::Half] {
            let x = Tensor::randn([4, 12], (Kind::Float, Device::Cpu)).to_kind(kind);
            assert!(gather_rows(&x, &index).equal(&x.index_select(0, &index)), "{kind:?}");
        }
        let odd = Tensor::randn([4, 3], (Kind::BFloat16, Device::Cpu)); // 6-byte rows: moved as elements
        assert!(gather_rows(&odd, &index).equal(&odd.index_select(0, &index)));
    }

    /// A byte-keyed stable sort orders the choices as the 64-bit one does.
    #[test]
    fn sorting_the_choices_as_bytes_keeps_their_order() {
        let chosen = Tensor::randint(200, [300], (Kind::Int64, Device::Cpu));
        let (wide, wide_order) = chosen.sort_stable(true, 0, false);
        let (narrow, narrow_order) = chosen.to_kind(Kind::Uint8).sort_stable(true, 0, false);
        assert!(narrow.to_kind(Kind::Int64).equal(&wide) && narrow_order.equal(&wide_order));
    }

    /// hidden = 2 x intermediate: `gate_up_proj` has the same shape in both layouts, so the
    /// layout comes from `down_proj`. A checkpoint in transformers' saved order (rows) loads,
    /// whatever the family's published layout says, and its experts are the stored ones.
    #[test]
    fn an_ambiguous_gate_up_takes_its_layout_from_down_proj() {
        let (e, hidden, i) = (2i64, 8i64, 4i64);
        let gate_up = Tensor::arange(e * 2 * i * hidden, (Kind::Float, Device::Cpu)).reshape([e, 2 * i, hidden]);
        let down = Tensor::arange(e * hidden * i, (Kind::Float, Device::Cpu)).reshape([e, hidden, i]);
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("model.safetensors");
        Tensor::write_safetensors(&[("m.experts.gate_up_proj", &gate_up), ("m.experts.down_proj", &down)], &file).unwrap();
        let w = Weights::load(&[file], Device::Cpu, Kind::Float).unwrap();
        let (got_gate_up, got_down) = fused_experts(&w, "m.experts", e, hidden, i, FusedLayout::Columns).unwrap();
        assert_eq!(got_gate_up.size(), [e, hidden, 2 * i]);
        assert!(got_gate_up.equal(&gate_up.transpose(1, 2)) && got_down.equal(&down.transpose(1, 2)));
    }

    /// Experts of `hidden` rows and `intermediate` columns, random, in `kind`.
    fn random_experts(experts: i64, hidden: i64, intermediate: i64, kind: Kind) -> Experts {
        let options = (Kind::Float, Device::Cpu);
        Experts {
            gate_up: (Tensor::randn([experts, hidden, 2 * intermediate], options) * 0.1).to_kind(kind),
            down: (Tensor::randn([experts, intermediate, hidden], options) * 0.1).to_kind(kind),
            experts,
            gelu_tanh: false,
        }
    }

    /// The grouping's three kernels, run on the CPU through the stand-in driver, lay a pass's rows
    /// out as libtorch's operations do, to the byte: the rows (padding and the zero rows after the
    /// last group included), the groups' ends and each (token, slot)'s row. One tile and several,
    /// a token chosen twice, more experts than a block has threads, experts no token chose (the
    /// first and the last two), one token alone.
    #[test]
    fn the_grouping_kernels_through_a_stand_in_driver_lay_the_rows_out_as_libtorch_does() {
        let scratch = tempfile::tempdir().unwrap();
        let (library, kernels) = cuda_kernels::stand_in::kernels(scratch.path());
        for (tokens, k, experts, kind) in [(150, 3, 10, Kind::Float), (700, 4, 300, Kind::BFloat16), (1, 2, 4, Kind::Float)] {
            tch::manual_seed(tokens);
            let x = Tensor::randn([tokens, 64], (Kind::Float, Device::Cpu)).to_kind(kind);
            let chosen = Tensor::randint_low(1, experts - 2, [tokens, k], (Kind::Int64, Device::Cpu));
            let layer = random_experts(experts, 64, 8, kind);
            let before = cuda_kernels::stand_in::launches(&library);
            let by_kernel = kernels.experts_grouping(&x, &chosen, experts, GROUP_ROWS);
            assert_eq!(cuda_kernels::stand_in::launches(&library), before + 3, "three launches");
            let by_libtorch = layer.grouping(&x, &chosen);
            let context = format!("{tokens} tokens, k {k}, {experts} experts, {kind:?}");
            assert!(by_kernel.offsets.equal(&by_libtorch.offsets), "{context}: the groups' ends");
            assert!(by_kernel.output_row.equal(&by_libtorch.output_row), "{context}: each (token, slot)'s row");
            assert!(by_kernel.rows.equal(&by_libtorch.rows), "{context}: the grouped rows");
        }
    }

    /// The weighted-sum kernel through the stand-in driver: each token's k rows times its weights,
    /// summed in f32 and rounded once, as libtorch's f32 gather, products and sum give them (to
    /// rounding); a token's sum is the same bits alone and among others.
    #[test]
    fn the_weighted_sum_kernel_through_a_stand_in_driver_sums_each_tokens_rows() {
        let scratch = tempfile::tempdir().unwrap();
        let (library, kernels) = cuda_kernels::stand_in::kernels(scratch.path());
        tch::manual_seed(5);
        let (tokens, k, rows, width) = (7, 3, 40, 300);
        let output_row = Tensor::randint(rows, [tokens * k], (Kind::Int64, Device::Cpu));
        for kind in [Kind::Float, Kind::BFloat16] {
            let outputs = Tensor::randn([rows, width], (Kind::Float, Device::Cpu)).to_kind(kind);
            let weights = Tensor::rand([tokens, k], (Kind::Float, Device::Cpu)).to_kind(kind);
            let before = cuda_kernels::stand_in::launches(&library);
            let sums = kernels.experts_weighted_sum(&outputs, &output_row, &weights);
            assert_eq!(cuda_kernels::stand_in::launches(&library), before + 1, "one launch");
            assert_eq!((sums.size(), sums.kind()), (vec![tokens, width], kind));
            let f32 = |t: &Tensor| t.to_kind(Kind::Float);
            let exact = weighted_sum_by_gather(&f32(&outputs), &output_row, &f32(&weights));
            let tolerance = if kind == Kind::Float { 1e-5 } else { 2f64.powi(-7) * 4.0 };
            let diff = (f32(&sums) - &exact).abs().max().double_value(&[]);
            assert!(diff < tolerance, "{kind:?}: {diff} from the f32 sum");
            let alone = kernels.experts_weighted_sum(&outputs, &output_row.narrow(0, 4 * k, k), &weights.narrow(0, 4, 1));
            assert!(alone.equal(&sums.narrow(0, 4, 1)), "{kind:?}: token 4 alone and among seven");
        }
    }

    /// The router kernel through the stand-in driver chooses libtorch's experts in libtorch's
    /// order and gives their weights (renormalised or not) within rounding; of equal logits the
    /// lower expert comes first; a token's choice is the same alone.
    #[test]
    fn the_router_kernel_through_a_stand_in_driver_chooses_libtorchs_experts() {
        let scratch = tempfile::tempdir().unwrap();
        let (library, kernels) = cuda_kernels::stand_in::kernels(scratch.path());
        tch::manual_seed(21);
        let (tokens, experts, k) = (300, 130, 8);
        let logits = Tensor::randn([tokens, experts], (Kind::Float, Device::Cpu)) * 2.0;
        let weights_of = |(weights, _): &(Tensor, Tensor)| weights.to_kind(Kind::Float);
        for (kind, renormalize, tolerance) in [(Kind::Float, true, 1e-6), (Kind::Float, false, 1e-6), (Kind::BFloat16, true, 2f64.powi(-8))]
        {
            let logits = logits.to_kind(kind);
            let before = cuda_kernels::stand_in::launches(&library);
            let by_kernel = kernels.router_top_k(&logits, k, renormalize);
            assert_eq!(cuda_kernels::stand_in::launches(&library), before + 1, "one launch");
            let by_libtorch = top_k_by_libtorch(&logits, k, renormalize);
            let context = format!("{kind:?}, renormalised {renormalize}");
            // libtorch's top k leaves the order of equal probabilities open (bf16 logits tie
            // often); a stable sort of the logits gives the kernel's rule, the lower expert first.
            let (_, by_rule) = logits.neg().sort_stable(true, -1, false);
            assert!(by_kernel.1.equal(&by_rule.narrow(1, 0, k)), "{context}: the experts chosen, in order");
            let differ = by_kernel.1.ne_tensor(&by_libtorch.1).any_dim(1, false).sum(Kind::Int64).int64_value(&[]);
            assert!(kind == Kind::BFloat16 || differ == 0, "{context}: {differ} tokens' choices differ from libtorch's");
            assert_eq!(by_kernel.0.kind(), kind);
            let diff = (weights_of(&by_kernel) - weights_of(&by_libtorch)).abs().max().double_value(&[]);
            assert!(diff <= tolerance, "{context}: weights differ by {diff}");
            let alone = kernels.router_top_k(&logits.narrow(0, 7, 1), k, renormalize);
            assert!(alone.0.equal(&by_kernel.0.narrow(0, 7, 1)) && alone.1.equal(&by_kernel.1.narrow(0, 7, 1)), "{context}: token 7 alone");
        }
        let ties = Tensor::from_slice(&[1.0f32, 3.0, 2.0, 3.0, 2.0, 0.0]).view([1, 6]);
        let (_, chosen) = kernels.router_top_k(&ties, 4, true);
        assert_eq!(Vec::<i64>::try_from(chosen.flatten(0, -1)).unwrap(), [1, 3, 2, 4], "of equal ones the lower expert first");
    }

    /// A layer's experts with the grouping and the sum by the kernels (on the CPU, through the
    /// stand-in driver) give libtorch's outputs: the same products run between them.
    #[test]
    fn experts_by_the_kernels_through_a_stand_in_driver_give_libtorchs_outputs() {
        let scratch = tempfile::tempdir().unwrap();
        let (library, kernels) = cuda_kernels::stand_in::kernels(scratch.path());
        tch::manual_seed(9);
        let (tokens, k, experts, hidden) = (40, 2, 6, 64);
        let layer = random_experts(experts, hidden, 32, Kind::Float);
        let x = Tensor::randn([tokens, hidden], (Kind::Float, Device::Cpu));
        let (weights, chosen) =
            Tensor::rand([tokens, experts], (Kind::Float, Device::Cpu)).softmax(-1, Kind::Float).topk(k, -1, true, true);
        let before = cuda_kernels::stand_in::launches(&library);
        let by_kernels = layer.forward_by(&x, &weights, &chosen, Some(&kernels));
        assert_eq!(
            cuda_kernels::stand_in::launches(&library),
            before + 5,
            "the grouping's three launches, the activation's one and the sum's one"
        );
        let by_libtorch = layer.forward_by(&x, &weights, &chosen, None);
        assert!(by_libtorch.abs().max().double_value(&[]) > 0.01, "outputs of a size where a wrong form shows");
        let diff = (&by_kernels - &by_libtorch).abs().max().double_value(&[]);
        assert!(diff < 1e-5, "outputs differ by {diff}");
    }
}
