//! The sparse mixture-of-experts MLP, as transformers 5.23 computes it for `qwen3_vl_moe` and
//! `qwen3_5_moe`: a router scores every expert per token (softmax in f32), the top k are kept and
//! their weights renormalised to sum to one, each chosen expert's gated MLP runs on its tokens,
//! and the weighted outputs are summed. Qwen3.5's block adds a shared expert that every token
//! takes, scaled by a sigmoid gate.
//!
//! Tokens are grouped by expert (one stable sort of the (token, slot) assignments), each active
//! expert runs one matrix product over its group, and the outputs go back to their (token, slot)
//! places by a gather, summed over the k slots. No loop over tokens, and no scatter-add: a
//! GPU's atomic adds would sum in an unpredictable order, and a release's bytes must not depend
//! on it. The one host synchronisation per layer is reading the group sizes (E integers).

use tch::{Kind, Tensor};

use super::config::{FusedLayout, MoeConfig};
use super::error::VlmError;
use super::layers::{GatedMlp, Linear};
use super::weights::Weights;

/// One projection of an expert, as the checkpoint stores it.
enum Projection {
    /// (outputs, inputs), applied as `x Wᵀ`: per-expert tensors and transformers' own
    /// `gate_up_proj` / `down_proj` of shape (experts, outputs, inputs).
    Rows(Tensor),
    /// (inputs, outputs), applied as `x W`: Qwen3-VL-MoE's published fused tensors.
    Columns(Tensor),
}

impl Projection {
    fn apply(&self, x: &Tensor) -> Tensor {
        match self {
            Projection::Rows(w) => x.linear(w, None::<&Tensor>),
            Projection::Columns(w) => x.matmul(w),
        }
    }
}

/// One routed expert: gate and up (side by side in one projection, or two), then down.
struct Expert {
    gate_up: Vec<Projection>,
    down: Projection,
}

impl Expert {
    fn forward(&self, x: &Tensor) -> Tensor {
        let (gate, up) = match self.gate_up.as_slice() {
            [both] => {
                let both = both.apply(x);
                let half = both.size()[1] / 2;
                (both.narrow(1, 0, half), both.narrow(1, half, half))
            }
            [gate, up] => (gate.apply(x), up.apply(x)),
            _ => unreachable!("an expert has a fused gate_up or a gate and an up"),
        };
        self.down.apply(&(gate.silu() * up))
    }
}

pub struct SparseMoe {
    router: Linear,
    experts: Vec<Expert>,
    top_k: i64,
    renormalize: bool,
    /// Qwen3.5: an MLP every token takes, scaled by sigmoid(gate(x)).
    shared: Option<(GatedMlp, Linear)>,
}

impl SparseMoe {
    /// Loads `{prefix}.gate` (the router), the experts in whichever layout the checkpoint has, and
    /// the shared expert where the config has one. Experts of a fused tensor are views of it: no
    /// weight is copied.
    pub fn load(w: &Weights, prefix: &str, hidden: i64, cfg: &MoeConfig) -> Result<SparseMoe, VlmError> {
        let (e, i) = (cfg.num_experts as i64, cfg.moe_intermediate_size as i64);
        let at = |name: &str| format!("{prefix}.{name}");
        let experts = if w.has(&at("experts.gate_up_proj")) {
            fused_experts(w, &at("experts"), e, hidden, i, cfg.fused_layout)?
        } else {
            (0..e)
                .map(|n| {
                    let one = |proj: &str, rows: i64, cols: i64| w.get(&at(&format!("experts.{n}.{proj}.weight")), &[rows, cols]);
                    Ok(Expert {
                        gate_up: vec![Projection::Rows(one("gate_proj", i, hidden)?), Projection::Rows(one("up_proj", i, hidden)?)],
                        down: Projection::Rows(one("down_proj", hidden, i)?),
                    })
                })
                .collect::<Result<Vec<_>, VlmError>>()?
        };
        let shared = match cfg.shared_expert_intermediate_size {
            Some(size) => Some((
                GatedMlp::load(w, &at("shared_expert"), hidden, size as i64, false)?,
                Linear::load(w, &at("shared_expert_gate"), hidden, 1, false)?,
            )),
            None => None,
        };
        Ok(SparseMoe {
            router: Linear::load(w, &at("gate"), hidden, e, false)?,
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
        let (tokens, k) = (x.size()[0], self.top_k);
        let probs = self.router.forward(&x).softmax(-1, Kind::Float);
        let (mut weights, chosen) = probs.topk(k, -1, true, true);
        if self.renormalize {
            weights = &weights / weights.sum_dim_intlist(-1, true, Kind::Float);
        }
        let weights = weights.to_kind(x.kind());

        // Assignments (token, slot) in row-major order, grouped by expert; stable, so each
        // expert's tokens keep their order.
        let flat = chosen.flatten(0, -1);
        let (_, order) = flat.sort_stable(true, 0, false);
        let sizes = Vec::<i64>::try_from(flat.bincount(None::<&Tensor>, self.experts.len() as i64)).expect("group sizes");
        let token_of = order.divide_scalar_mode(k, "floor");
        let mut outputs = Vec::new();
        let mut start = 0;
        for (expert, &size) in self.experts.iter().zip(&sizes) {
            if size > 0 {
                outputs.push(expert.forward(&x.index_select(0, &token_of.narrow(0, start, size))));
                start += size;
            }
        }
        // Back to (token, slot) order: the grouped row of assignment j is at inverse[j].
        let grouped = Tensor::cat(&outputs, 0);
        let inverse = order.argsort(0, false);
        let routed = grouped.index_select(0, &inverse).view([tokens, k, -1]) * weights.unsqueeze(-1);
        let mut out = routed.sum_dim_intlist(1, false, x.kind());
        if let Some((mlp, gate)) = &self.shared {
            out = out + gate.forward(&x).sigmoid() * mlp.forward(&x);
        }
        out.view(shape.as_slice())
    }
}

/// The experts of fused `gate_up_proj` and `down_proj` tensors, as views of them.
/// The layout is read from the stored shape where it can be, else the family's published one.
fn fused_experts(w: &Weights, prefix: &str, e: i64, hidden: i64, i: i64, layout: FusedLayout) -> Result<Vec<Expert>, VlmError> {
    let (rows, columns) = (vec![e, 2 * i, hidden], vec![e, hidden, 2 * i]);
    let layout = match w.shape(&format!("{prefix}.gate_up_proj")) {
        Some(s) if s == rows && s != columns => FusedLayout::Rows,
        Some(s) if s == columns && s != rows => FusedLayout::Columns,
        _ => layout,
    };
    let (gate_up, down) = match layout {
        // transformers' in-memory form: (E, 2I, H) and (E, H, I).
        FusedLayout::Rows => (w.get(&format!("{prefix}.gate_up_proj"), &rows)?, w.get(&format!("{prefix}.down_proj"), &[e, hidden, i])?),
        // Qwen3-VL-MoE's published checkpoints: (E, H, 2I) and (E, I, H).
        FusedLayout::Columns => (w.get(&format!("{prefix}.gate_up_proj"), &columns)?, w.get(&format!("{prefix}.down_proj"), &[e, i, hidden])?),
    };
    Ok((0..e)
        .map(|n| match layout {
            FusedLayout::Rows => Expert { gate_up: vec![Projection::Rows(gate_up.get(n))], down: Projection::Rows(down.get(n)) },
            FusedLayout::Columns => Expert { gate_up: vec![Projection::Columns(gate_up.get(n))], down: Projection::Columns(down.get(n)) },
        })
        .collect())
}
