//! Exact attention over a shared prefix, without copying it (Hydragen: Juravsky et al., 2024,
//! arXiv 2402.05099).
//!
//! Scoring asks one image many questions: a long prefix (the image and the chat template's head)
//! and a few dozen tokens per question. The copied path repeats the prefix's keys and values per
//! question and per query head, then runs one attention call; this path holds them once. Each
//! question's queries attend in two parts, each a plain matrix product:
//! - to the prefix: the queries of every question and every query head of a key/value head are
//!   stacked into one matrix against that head's one copy of the prefix;
//! - to their own suffix, causally (a few dozen keys per question).
//!
//! Each part keeps its row maxima and sums of exponentials, and the two are merged exactly by
//! their log-sum-exp: softmax over the union of keys, as one call would give, up to the order of
//! the sums. No atomics: the same inputs give the same bits.

use tch::{Kind, Tensor};

use super::cuda_kernels::{self, CudaKernels};
use super::part_clock::timed;
use super::prefix_queries::PrefixQueries;
use super::real_tokens::{LastTokens, RealTokens};

/// How the questions of one image meet the image's prefix when they are scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PrefixAttention {
    /// The prefix's keys and values copied per question (and per query head), then one attention
    /// call: the path every release so far was scored by.
    #[default]
    Copied,
    /// The prefix held once, its attention merged with the suffix's by log-sum-exp.
    Shared,
    /// [`Self::Shared`] with the prefix part through libtorch's fused attention kernel, which
    /// returns its log-sum-exp instead of a score matrix the size of queries x prefix (flash
    /// attention on the CPU, memory-efficient attention on CUDA).
    Fused,
}

impl PrefixAttention {
    /// How releases are scored on `device`. On a GPU the fused kernel: the products' f32 score
    /// matrix is a memory round trip the kernel never makes (the questions of Qwen3-VL-8B 24%
    /// faster on an H200, the same numbers within 1e-5 in f32, batch-invariant). On the CPU the
    /// products: they cost the same there, and their bits are pinned alike on every processor
    /// (`vlm::cpu_kernels`), which the CPU flash kernel's vector paths are not known to be.
    pub fn for_device(device: tch::Device) -> PrefixAttention {
        if device.is_cuda() {
            PrefixAttention::Fused
        } else {
            PrefixAttention::Shared
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            PrefixAttention::Copied => "copied",
            PrefixAttention::Shared => "shared",
            PrefixAttention::Fused => "fused",
        }
    }
}

/// The queries whose prefix part a layer computes ([`Prefix::queries`]): where it runs each
/// row's last token alone (`last`), those; where the rows hold only their real tokens
/// (`real`), each of those once; else every query.
pub fn chosen_queries<'a>(real: Option<&'a RealTokens>, last: Option<&'a LastTokens>) -> Option<&'a PrefixQueries> {
    match last {
        Some(last) => last.prefix_queries(),
        None => real.and_then(RealTokens::prefix_queries),
    }
}

/// The prefix part's scores are computed this many elements at most at a time (1 GiB in f32):
/// the images of a pass go through in groups, so a pass of many images does not need its whole
/// score matrix at once.
const PREFIX_SCORES_AT_ONCE: i64 = 1 << 28;

/// A prefix held once, one per image: keys and values (images, kv_heads, p, d), and where some
/// queries may not see all of it (a sliding window), an additive mask (s, p) of what each of a
/// row's s queries sees.
#[derive(Clone, Copy)]
pub struct Prefix<'a> {
    pub k: &'a Tensor,
    pub v: &'a Tensor,
    pub mask: Option<&'a Tensor>,
    /// The prefix part through the fused kernel ([`PrefixAttention::Fused`]).
    pub fused: bool,
    /// Where given, the only queries whose prefix part is computed, each once; the other places
    /// take a chosen one's (a shared token's) or a spare's (padding, or what nothing reads).
    pub queries: Option<&'a PrefixQueries>,
}

/// Softmax attention of `q` (b, heads, s, d) over `prefix`, and the rows' own keys and values
/// `k`, `v` (b, kv_heads, s, d) under the additive `suffix_mask` (s, s) broadcastable: (b, heads,
/// s, d), in `q`'s dtype. The rows come image by image, b / images of each: row r attends to
/// prefix r / (b / images). The products run in the inputs' dtype, as transformers' eager
/// attention runs a bf16 model's; the softmax and the merge in f32.
pub fn attention(q: &Tensor, prefix: &Prefix<'_>, k: &Tensor, v: &Tensor, suffix_mask: &Tensor, scale: f64) -> Tensor {
    timed("attention: questions over the prefix", || attention_by(q, prefix, k, v, suffix_mask, scale, cuda_kernels::asked_for(q.device())))
}

/// [`attention`], the questions' own part and the merge by the engine's kernel where `kernels`
/// are given and take the questions (after the prefix part through libtorch's fused kernel).
fn attention_by(
    q: &Tensor,
    prefix: &Prefix<'_>,
    k: &Tensor,
    v: &Tensor,
    suffix_mask: &Tensor,
    scale: f64,
    kernels: Option<&CudaKernels>,
) -> Tensor {
    let (s, d) = (q.size()[2], q.size()[3]);
    let takes =
        |_: &&CudaKernels| prefix.fused && suffix_mask.numel() as i64 == s * s && CudaKernels::takes_suffix_attention(s, d, q.kind());
    match kernels.filter(takes) {
        Some(kernels) => {
            let stacked = PrefixRows::of(q, prefix);
            let (out, lse) = fused_prefix(&stacked.queries, prefix, stacked.mask.as_ref(), scale);
            let (out, lse) = (stacked.every(&out), stacked.every(&lse.unsqueeze(-1)).squeeze_dim(-1));
            kernels.suffix_attention(q, k, v, &out, &lse.to_kind(Kind::Float), &suffix_mask.reshape([s, s]), scale)
        }
        None => attention_in_groups(q, prefix, k, v, suffix_mask, scale, PREFIX_SCORES_AT_ONCE),
    }
}

/// The queries of an image's rows that meet its prefix, for each key/value head as one matrix,
/// the prefix's mask laid out for them, and the way back to every query.
struct PrefixRows<'a> {
    /// (images, kv_heads, n, d): every query (rows x groups x s, row by row, each row's query
    /// heads of that key/value head in turn), or the chosen ones ([`PrefixQueries::stacked`]).
    queries: Tensor,
    /// The prefix's mask for those queries, (1 or images, 1, n, p).
    mask: Option<Tensor>,
    chosen: Option<&'a PrefixQueries>,
    rows: i64,
    s: i64,
}

impl<'a> PrefixRows<'a> {
    /// The queries `q` (b, heads, s, d) that meet `prefix` (images, kv_heads, p, d).
    fn of(q: &Tensor, prefix: &Prefix<'a>) -> PrefixRows<'a> {
        let (b, heads, s, d) = (q.size()[0], q.size()[1], q.size()[2], q.size()[3]);
        let (images, kv_heads, p) = (prefix.k.size()[0], prefix.k.size()[1], prefix.k.size()[2]);
        let (groups, rows) = (heads / kv_heads, b / images);
        let mask = |m: &Tensor| m.to_kind(Kind::Float);
        let (queries, mask) = match prefix.queries {
            Some(chosen) => (chosen.stacked(q, kv_heads), prefix.mask.map(|m| chosen.mask(&mask(m), groups))),
            None => {
                let by_head = q.view([images, rows, kv_heads, groups, s, d]).permute([0, 2, 1, 3, 4, 5]);
                let n = rows * groups * s;
                (by_head.reshape([images, kv_heads, n, d]), prefix.mask.map(|m| mask(m).repeat([rows * groups, 1]).view([1, 1, n, p])))
            }
        };
        PrefixRows { queries, mask, chosen: prefix.queries, rows, s }
    }

    /// Results `t` (images, kv_heads, n, x) of the queries at every query: (images, kv_heads,
    /// rows x groups x s, x).
    fn every(&self, t: &Tensor) -> Tensor {
        match self.chosen {
            Some(chosen) => chosen.spread(t, self.rows, self.s),
            None => t.shallow_clone(),
        }
    }
}

/// [`attention`], the prefix part's scores `at_once` elements at most at a time.
fn attention_in_groups(q: &Tensor, prefix: &Prefix<'_>, k: &Tensor, v: &Tensor, suffix_mask: &Tensor, scale: f64, at_once: i64) -> Tensor {
    let (prefix_k, prefix_v) = (prefix.k, prefix.v);
    let (b, heads, s, d) = (q.size()[0], q.size()[1], q.size()[2], q.size()[3]);
    let (images, kv_heads, p, kind) = (prefix_k.size()[0], prefix_k.size()[1], prefix_k.size()[2], q.kind());
    let (groups, rows) = (heads / kv_heads, b / images);

    // The prefix: the queries of an image's rows for a key/value head as one matrix, against one
    // copy of that image's keys (a batched product over the images, a group of them at a time).
    let stacked = PrefixRows::of(q, prefix);
    let q = q.view([b, kv_heads, groups, s, d]);
    let per_group = (at_once / (kv_heads * stacked.queries.size()[2] * p).max(1)).clamp(1, images);
    let parts: Vec<(Tensor, Tensor, Tensor)> = if prefix.fused {
        // The kernel keeps no score matrix: every image at once.
        vec![fused(&stacked.queries, prefix, stacked.mask.as_ref(), scale)]
    } else {
        (0..images)
            .step_by(per_group as usize)
            .map(|first| {
                let n = per_group.min(images - first);
                let scores =
                    stacked.queries.narrow(0, first, n).matmul(&prefix_k.narrow(0, first, n).transpose(-2, -1)).to_kind(Kind::Float)
                        * scale;
                let scores = match &stacked.mask {
                    // Each query's mask, in the order they were stacked (one for every image, or
                    // each image's own).
                    Some(mask) if mask.size()[0] == 1 => scores + mask,
                    Some(mask) => scores + mask.narrow(0, first, n),
                    None => scores,
                };
                partial(&scores, &prefix_v.narrow(0, first, n))
            })
            .collect()
    };
    let joined =
        |pick: fn(&(Tensor, Tensor, Tensor)) -> &Tensor| stacked.every(&Tensor::cat(&parts.iter().map(pick).collect::<Vec<_>>(), 0));
    let per_row = |t: Tensor| {
        let last = t.size()[3];
        t.view([images, kv_heads, rows, groups, s, last]).permute([0, 2, 1, 3, 4, 5]).reshape([b, kv_heads, groups, s, last])
    };
    let (max_p, sum_p, out_p) = (per_row(joined(|t| &t.0)), per_row(joined(|t| &t.1)), per_row(joined(|t| &t.2)));

    // The suffix: each row's own keys, the query heads of a key/value head broadcast over it.
    let mask = suffix_mask.to_kind(Kind::Float).view([-1, 1, 1, s, s]);
    let scores = q.matmul(&k.unsqueeze(2).transpose(-2, -1)).to_kind(Kind::Float) * scale + mask;
    let (max_s, sum_s, out_s) = partial(&scores, &v.unsqueeze(2));

    // Merged by log-sum-exp: each part's terms rescaled to the common maximum.
    let max = max_p.maximum(&max_s);
    let (w_p, w_s) = ((max_p - &max).exp(), (max_s - &max).exp());
    let out = (out_p * &w_p + out_s * &w_s) / (sum_p * &w_p + sum_s * &w_s);
    out.reshape([b, heads, s, d]).to_kind(kind)
}

/// The prefix part of every stacked query (images, kv_heads, repeats x s, d) through libtorch's
/// fused attention, in the form [`partial`] gives: its log-sum-exp stands for the maximum, a sum
/// of one, and the normalised output.
fn fused(stacked: &Tensor, prefix: &Prefix<'_>, mask: Option<&Tensor>, scale: f64) -> (Tensor, Tensor, Tensor) {
    let (out, lse) = fused_prefix(stacked, prefix, mask, scale);
    let lse = lse.to_kind(Kind::Float).unsqueeze(-1);
    (lse.shallow_clone(), lse.ones_like(), out.to_kind(Kind::Float))
}

/// libtorch's fused attention of the stacked queries (images, kv_heads, l, d) over the prefix:
/// the output (images, kv_heads, l, d) in the queries' dtype and its log-sum-exp (images,
/// kv_heads, l). `mask` (1 or images, 1, l, p), f32, is the prefix's mask for each query.
fn fused_prefix(stacked: &Tensor, prefix: &Prefix<'_>, mask: Option<&Tensor>, scale: f64) -> (Tensor, Tensor) {
    let (l, p, kind) = (stacked.size()[2], prefix.k.size()[2], stacked.kind());
    // The kernels take a mask in the queries' dtype: hidden keys at a large finite value, so a
    // query that sees none of the prefix gets a finite log-sum-exp (and zero weight in the merge).
    let hidden = if kind == Kind::Half { -65504.0 } else { -1e30 };
    let mask = mask.map(|m| m.clamp_min(hidden).to_kind(kind));
    if stacked.device().is_cuda() {
        // Memory-efficient attention wants the bias's rows 16-aligned (padded storage, narrowed)
        // and its size to be the queries' batch and heads exactly (libtorch's SDPA expands the
        // mask before it calls this kernel; called directly, the expansion is ours: no copy).
        let (images, kv_heads) = (stacked.size()[0], stacked.size()[1]);
        let bias = mask.map(|m| {
            let masks = m.size()[0];
            let padded = Tensor::zeros([masks, 1, l, (p + 15) / 16 * 16], (kind, stacked.device()));
            padded.narrow(3, 0, p).copy_(&m);
            padded.narrow(3, 0, p).expand([images, kv_heads, l, p], false)
        });
        let (out, lse, _, _) =
            Tensor::internal_scaled_dot_product_efficient_attention(stacked, prefix.k, prefix.v, bias, true, 0.0, false, scale);
        (out, lse.narrow(2, 0, l))
    } else {
        Tensor::internal_scaled_dot_product_flash_attention_for_cpu(stacked, prefix.k, prefix.v, 0.0, false, mask.as_ref(), scale)
    }
}

/// One part of a softmax over f32 `scores`: the row maxima, the sums of exp(score - max), and
/// those weights times the values (in the values' dtype, as flash attention multiplies them;
/// not yet divided by the sums), all three in f32.
fn partial(scores: &Tensor, values: &Tensor) -> (Tensor, Tensor, Tensor) {
    let max = scores.amax(-1, true);
    let weights = (scores - &max).exp();
    let sum = weights.sum_dim_intlist(-1, true, Kind::Float);
    let out = weights.to_kind(values.kind()).matmul(values).to_kind(Kind::Float);
    (max, sum, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same numbers as one attention call over the prefix copied per row and per head.
    #[test]
    fn equals_attention_over_the_copied_prefix() {
        tch::manual_seed(7);
        let (b, heads, kv_heads, p, s, d) = (5, 8, 2, 37, 6, 16);
        let opts = (Kind::Float, tch::Device::Cpu);
        let q = Tensor::randn([b, heads, s, d], opts);
        let (pk, pv) = (Tensor::randn([1, kv_heads, p, d], opts), Tensor::randn([1, kv_heads, p, d], opts));
        let (k, v) = (Tensor::randn([b, kv_heads, s, d], opts), Tensor::randn([b, kv_heads, s, d], opts));
        let causal = Tensor::ones([s, s], opts).triu(1) * f64::from(f32::MIN);
        let scale = (d as f64).powf(-0.5);
        let shared = attention(&q, &Prefix { k: &pk, v: &pv, mask: None, fused: false, queries: None }, &k, &v, &causal, scale);
        let fused = attention(&q, &Prefix { k: &pk, v: &pv, mask: None, fused: true, queries: None }, &k, &v, &causal, scale);

        let groups = heads / kv_heads;
        let full_k = Tensor::cat(&[pk.expand([b, kv_heads, p, d], false), k], 2).repeat_interleave_self_int(groups, 1, None);
        let full_v = Tensor::cat(&[pv.expand([b, kv_heads, p, d], false), v], 2).repeat_interleave_self_int(groups, 1, None);
        let mask = Tensor::cat(&[Tensor::zeros([s, p], opts), causal], 1).view([1, 1, s, p + s]);
        let copied = Tensor::scaled_dot_product_attention(&q, &full_k, &full_v, Some(&mask), 0.0, false, scale, false);
        for (path, out) in [("products", shared), ("fused kernel", fused)] {
            let diff = (out - &copied).abs().max().double_value(&[]);
            assert!(diff < 1e-5, "{path}: {diff}");
        }
    }

    /// Rows of several images in one call: each row meets its own image's prefix, bit for bit as
    /// that image's rows alone.
    #[test]
    fn rows_of_several_images_meet_their_own_prefix() {
        tch::manual_seed(11);
        let (images, rows, heads, kv_heads, p, s, d) = (3, 4, 4, 2, 19, 5, 8);
        let opts = (Kind::Float, tch::Device::Cpu);
        let q = Tensor::randn([images * rows, heads, s, d], opts);
        let (pk, pv) = (Tensor::randn([images, kv_heads, p, d], opts), Tensor::randn([images, kv_heads, p, d], opts));
        let (k, v) = (Tensor::randn([images * rows, kv_heads, s, d], opts), Tensor::randn([images * rows, kv_heads, s, d], opts));
        let causal = Tensor::ones([s, s], opts).triu(1) * f64::from(f32::MIN);
        let prefix = Prefix { k: &pk, v: &pv, mask: None, fused: false, queries: None };
        let together = attention(&q, &prefix, &k, &v, &causal, 0.3);
        // The images' prefix scores a group at a time: the same bits.
        let grouped = attention_in_groups(&q, &prefix, &k, &v, &causal, 0.3, 2 * kv_heads * rows * (heads / kv_heads) * s * p);
        assert!(grouped.equal(&together));
        for i in 0..images {
            let at = |t: &Tensor| t.narrow(0, i * rows, rows);
            let own = Prefix { k: &pk.narrow(0, i, 1), v: &pv.narrow(0, i, 1), mask: None, fused: false, queries: None };
            let alone = attention(&at(&q), &own, &at(&k), &at(&v), &causal, 0.3);
            let diff = (at(&together) - alone).abs().max().double_value(&[]);
            assert!(diff < 1e-6, "image {i}: {diff}");
        }
    }

    /// A mask on the prefix (a sliding window's) hides those keys as one call's mask would.
    #[test]
    fn a_prefix_mask_hides_keys_as_one_calls_mask_does() {
        tch::manual_seed(3);
        let (b, heads, kv_heads, p, s, d, window) = (4, 4, 2, 23, 5, 8, 20);
        let opts = (Kind::Float, tch::Device::Cpu);
        let q = Tensor::randn([b, heads, s, d], opts);
        let (pk, pv) = (Tensor::randn([1, kv_heads, p, d], opts), Tensor::randn([1, kv_heads, p, d], opts));
        let (k, v) = (Tensor::randn([b, kv_heads, s, d], opts), Tensor::randn([b, kv_heads, s, d], opts));
        // Query i sits at p + i and sees the keys less than `window` behind it.
        let query = Tensor::arange(s, (Kind::Int64, tch::Device::Cpu)).view([s, 1]) + p;
        let hidden = |keys: &Tensor| {
            let far = (&query - keys).ge(window).logical_or(&keys.gt_tensor(&query));
            Tensor::zeros(far.size().as_slice(), opts).masked_fill(&far, f64::from(f32::MIN))
        };
        let keys = Tensor::arange(p + s, (Kind::Int64, tch::Device::Cpu)).view([1, p + s]);
        let full_mask = hidden(&keys);
        let (prefix_mask, suffix_mask) = (full_mask.narrow(1, 0, p), full_mask.narrow(1, p, s));
        let shared =
            attention(&q, &Prefix { k: &pk, v: &pv, mask: Some(&prefix_mask), fused: false, queries: None }, &k, &v, &suffix_mask, 0.5);
        let fused =
            attention(&q, &Prefix { k: &pk, v: &pv, mask: Some(&prefix_mask), fused: true, queries: None }, &k, &v, &suffix_mask, 0.5);

        let groups = heads / kv_heads;
        let full_k = Tensor::cat(&[pk.expand([b, kv_heads, p, d], false), k], 2).repeat_interleave_self_int(groups, 1, None);
        let full_v = Tensor::cat(&[pv.expand([b, kv_heads, p, d], false), v], 2).repeat_interleave_self_int(groups, 1, None);
        let copied =
            Tensor::scaled_dot_product_attention(&q, &full_k, &full_v, Some(&full_mask.view([1, 1, s, p + s])), 0.0, false, 0.5, false);
        for (path, out) in [("products", shared), ("fused kernel", fused)] {
            let diff = (out - &copied).abs().max().double_value(&[]);
            assert!(diff < 1e-5, "{path}: {diff}");
        }
    }

    /// Where only some queries meet the prefix, each once, every real place gets what every
    /// query meeting it gives: to the bit by products, within 1e-6 by the fused kernel (whose
    /// blocks of queries follow their count), with a sliding window and rows of several images
    /// (the second image's second row beginning as its first: the same queries there).
    #[test]
    fn the_chosen_queries_give_every_real_place_what_every_query_gives() {
        use crate::prefix_queries::ImageQueries;
        tch::manual_seed(23);
        let (images, rows, heads, kv_heads, p, s, d) = (2, 2, 4, 2, 13, 4, 8);
        let cpu = (Kind::Float, tch::Device::Cpu);
        let q = Tensor::randn([images * rows, heads, s, d], cpu);
        q.get(3).narrow(1, 0, 2).copy_(&q.get(2).narrow(1, 0, 2));
        let (pk, pv) = (Tensor::randn([images, kv_heads, p, d], cpu), Tensor::randn([images, kv_heads, p, d], cpu));
        let (k, v) = (Tensor::randn([images * rows, kv_heads, s, d], cpu), Tensor::randn([images * rows, kv_heads, s, d], cpu));
        let causal = Tensor::ones([s, s], cpu).triu(1) * f64::from(f32::MIN);
        let query = Tensor::arange(s, (Kind::Int64, tch::Device::Cpu)).view([s, 1]) + p;
        let keys = Tensor::arange(p, (Kind::Int64, tch::Device::Cpu)).view([1, p]);
        let window = Tensor::zeros([s, p], cpu).masked_fill(&(&query - keys).ge(10), f64::from(f32::MIN));
        // Image 0: rows of 3 and 4 tokens; image 1: rows of 4 and 3, the second's first two its first's.
        let first =
            ImageQueries { chosen: vec![0, 1, 2, 4, 5, 6, 7], of_place: [0, 1, 2, -1, 3, 4, 5, 6].map(|c| (c >= 0).then_some(c)).to_vec() };
        let second =
            ImageQueries { chosen: vec![0, 1, 2, 3, 6], of_place: [0, 1, 2, 3, 0, 1, 4, -1].map(|c| (c >= 0).then_some(c)).to_vec() };
        let chosen = PrefixQueries::new(&[first, second], crate::real_tokens::SPARE as usize, tch::Device::Cpu);
        let real = [(0, 0..3), (1, 0..4), (2, 0..4), (3, 0..3)];
        for (fused, exact) in [(false, true), (true, false)] {
            let every = Prefix { k: &pk, v: &pv, mask: Some(&window), fused, queries: None };
            let by_every = attention(&q, &every, &k, &v, &causal, 0.3);
            let by_chosen = attention(&q, &Prefix { queries: Some(&chosen), ..every }, &k, &v, &causal, 0.3);
            for (row, places) in real.clone() {
                let at = |t: &Tensor| t.get(row).narrow(1, places.start, places.end - places.start);
                let diff = (at(&by_every) - at(&by_chosen)).abs().max().double_value(&[]);
                match exact {
                    true => assert!(at(&by_every).equal(&at(&by_chosen)), "products, row {row}: {diff}"),
                    false => assert!(diff < 1e-6, "fused, row {row}: {diff}"),
                }
            }
        }
    }

    /// The questions' own part and the merge by the engine's kernel (on the CPU, through the
    /// stand-in driver) give libtorch's form after the same fused prefix part: in f32 and bf16,
    /// with the values a strided view as the decoders give them, where a sliding window hides
    /// some of the prefix or all of it from a query, in one launch; an image's rows alone give
    /// the same bits as in the pass.
    #[test]
    fn the_suffix_kernel_through_a_stand_in_driver_gives_libtorchs_merge() {
        let scratch = tempfile::tempdir().unwrap();
        let (library, kernels) = cuda_kernels::stand_in::kernels(scratch.path());
        tch::manual_seed(17);
        let (images, rows, heads, kv_heads, p, s, d) = (2, 3, 4, 2, 29, 7, 24);
        let b = images * rows;
        let cpu = (Kind::Float, tch::Device::Cpu);
        let q = Tensor::randn([b, heads, s, d], cpu);
        let (pk, pv) = (Tensor::randn([images, kv_heads, p, d], cpu), Tensor::randn([images, kv_heads, p, d], cpu));
        let k = Tensor::randn([b, kv_heads, s, d], cpu);
        let v = Tensor::randn([b, s, kv_heads, d], cpu).transpose(1, 2);
        let causal = Tensor::ones([s, s], cpu).triu(1) * f64::from(f32::MIN);
        // Query i sits at p + i and sees the keys less than 4 behind it: two queries see some of
        // the prefix, the others none of it.
        let query = Tensor::arange(s, (Kind::Int64, tch::Device::Cpu)).view([s, 1]) + p;
        let keys = Tensor::arange(p, (Kind::Int64, tch::Device::Cpu)).view([1, p]);
        let window = Tensor::zeros([s, p], cpu).masked_fill(&(&query - keys).ge(4), f64::from(f32::MIN));
        let places: Vec<i64> = (0..rows * s).collect();
        let first_five = crate::prefix_queries::ImageQueries {
            chosen: places.iter().copied().filter(|place| place % s < 5).collect(),
            of_place: places.iter().map(|place| (place % s < 5).then_some(place / s * 5 + place % s)).collect(),
        };
        for (kind, prefix_mask, tolerance) in [(Kind::Float, None, 1e-5), (Kind::Float, Some(&window), 1e-5), (Kind::BFloat16, None, 0.02)]
        {
            let [q, pk, pv, k, v] = [&q, &pk, &pv, &k, &v].map(|t| t.to_kind(kind));
            let prefix = Prefix { k: &pk, v: &pv, mask: prefix_mask, fused: true, queries: None };
            let before = cuda_kernels::stand_in::launches(&library);
            let by_kernel = attention_by(&q, &prefix, &k, &v, &causal, 0.4, Some(&kernels));
            let context = format!("{kind:?}, windowed {}", prefix_mask.is_some());
            assert_eq!(cuda_kernels::stand_in::launches(&library), before + 1, "{context}: one launch");
            let by_libtorch = attention_by(&q, &prefix, &k, &v, &causal, 0.4, None);
            assert_eq!((by_kernel.size(), by_kernel.kind()), (by_libtorch.size(), kind), "{context}");
            let (by_kernel_f32, by_libtorch_f32) = (by_kernel.to_kind(Kind::Float), by_libtorch.to_kind(Kind::Float));
            let diff = (&by_kernel_f32 - &by_libtorch_f32).abs().max().double_value(&[]);
            assert!(diff <= tolerance, "{context}: differs from libtorch's form by {diff}");
            if kind == Kind::BFloat16 {
                // It rounds where libtorch rounds (the scores, the weights, the own part): all
                // but a few values the same bits; a rounding left out moves 3-20% of them.
                let differ = by_kernel_f32.ne_tensor(&by_libtorch_f32).sum(Kind::Int64).int64_value(&[]);
                assert!(differ * 100 <= by_kernel.numel() as i64, "{context}: {differ} values differ from libtorch's");
            }

            let at = |t: &Tensor| t.narrow(0, rows, rows);
            let own = Prefix { k: &pk.narrow(0, 1, 1), v: &pv.narrow(0, 1, 1), mask: prefix_mask, fused: true, queries: None };
            let alone = attention_by(&at(&q), &own, &at(&k), &at(&v), &causal, 0.4, Some(&kernels));
            assert!(alone.equal(&at(&by_kernel)), "{context}: the second image's rows alone");

            // The prefix part of chosen queries only (each row's first five) spread back before the kernel.
            let chosen =
                PrefixQueries::new(&[first_five.clone(), first_five.clone()], crate::real_tokens::SPARE as usize, tch::Device::Cpu);
            let prefix = Prefix { queries: Some(&chosen), ..prefix };
            let by_kernel = attention_by(&q, &prefix, &k, &v, &causal, 0.4, Some(&kernels));
            let by_libtorch = attention_by(&q, &prefix, &k, &v, &causal, 0.4, None);
            let diff = (by_kernel.to_kind(Kind::Float) - by_libtorch.to_kind(Kind::Float)).abs().max().double_value(&[]);
            assert!(diff <= tolerance, "{context}, chosen queries: differs from libtorch's form by {diff}");
        }
    }
}
