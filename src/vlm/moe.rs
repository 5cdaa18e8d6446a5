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

use tch::{Kind, Tensor};

use super::config::{FusedLayout, MoeConfig};
use super::error::VlmError;
use super::layers::{GatedMlp, Linear};
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
    /// (tokens, k) -> the weighted sum of the chosen experts' outputs (tokens, hidden).
    pub fn forward(&self, x: &Tensor, weights: &Tensor, chosen: &Tensor) -> Tensor {
        let grouping = timed("experts: grouping", || self.grouping(x, chosen));
        let both = timed("experts: products", || {
            let both = grouping.rows.internal_grouped_mm(&self.gate_up, Some(&grouping.offsets), None::<&Tensor>, None::<Kind>);
            let i = both.size()[1] / 2;
            let gate = both.narrow(1, 0, i);
            let gate = if self.gelu_tanh { gate.gelu("tanh") } else { gate.silu() };
            let hidden = gate * both.narrow(1, i, i);
            hidden.internal_grouped_mm(&self.down, Some(&grouping.offsets), None::<&Tensor>, None::<Kind>)
        });
        timed("experts: weighted sum", || {
            let (tokens, k) = (x.size()[0], chosen.size()[1]);
            let routed = both.index_select(0, &grouping.output_row).view([tokens, k, -1]) * weights.to_kind(x.kind()).unsqueeze(-1);
            routed.sum_dim_intlist(1, false, x.kind())
        })
    }

    /// The tokens' rows grouped by expert, each group padded, and where each (token, slot)'s
    /// output will be.
    fn grouping(&self, x: &Tensor, chosen: &Tensor) -> Grouping {
        let (tokens, k, device) = (x.size()[0], chosen.size()[1], x.device());
        let flat = chosen.flatten(0, -1);
        let (sorted, order) = flat.sort_stable(true, 0, false);
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
        let rows = with_zero_row.index_select(0, &source);
        // The sorted assignment j is (token, slot) order[j] and sits at grouped row place[j].
        let output_row = place.zeros_like().index_copy(0, &order, &place);
        Grouping { rows, offsets, output_row }
    }
}

/// A pass's rows grouped by expert for the grouped products.
struct Grouping {
    /// The rows, each expert's together, padded with zero rows.
    rows: Tensor,
    /// Where each expert's group ends, (experts) int32.
    offsets: Tensor,
    /// For each (token, slot), the grouped row holding its output.
    output_row: Tensor,
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
        let k = self.top_k;
        let (weights, chosen) = timed("experts: router", || {
            let probs = self.router.forward(&x).softmax(-1, Kind::Float);
            let (mut weights, chosen) = probs.topk(k, -1, true, true);
            if self.renormalize {
                weights = &weights / weights.sum_dim_intlist(-1, true, Kind::Float);
            }
            (weights, chosen)
        });
        let mut out = self.experts.forward(&x, &weights.to_kind(x.kind()), &chosen);
        if let Some((mlp, gate)) = &self.shared {
            out = out + timed("experts: shared expert", || gate.forward(&x).sigmoid() * mlp.forward(&x));
        }
        out.view(shape.as_slice())
    }
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
}
