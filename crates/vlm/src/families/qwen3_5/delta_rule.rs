//! The gated delta rule, Qwen3.5's linear attention's recurrence, in its two forms.
//!
//! Decoding runs it one token at a time ([`recurrent_rule`]). A prompt runs it in chunks of up to
//! 64 tokens ([`chunked_rule`]): within a chunk the updates are solved together through the
//! inverse of one unit triangular system (the "WY" form), and only the state crosses chunk
//! boundaries. Both forms are checked against each other in the tests below, and against
//! transformers' reference forms by the parity goldens.
//!
//! Scoring's questions all start from their image's state after the prefix. That state is read
//! where it is, one product per image for all its questions' rows ([`Start::PerImage`]), never
//! repeated per question, and the state after the questions, which nothing reads, is not made.

use tch::{Kind, Tensor};

use crate::cuda_kernels::{self, CudaKernels, WithinChunks};
use crate::part_clock::timed;

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
///
/// On a GPU where the engine's own kernels are asked for ([`cuda_kernels`]), the chunks are
/// prepared by one launch and a pass across several chunks is another; a failure to load them
/// stops the pass with the driver's words.
pub fn chunked_rule(q: &Tensor, k: &Tensor, v: &Tensor, g: &Tensor, beta: &Tensor, start: Start, keep: bool) -> (Tensor, Option<Tensor>) {
    let across = cuda_kernels::asked_for(q.device()).map_or(Across::StatesKept, Across::Kernel);
    chunked_rule_across(q, k, v, g, beta, start, keep, across)
}

/// How [`chunked_rule`] passes several chunks from one state per row: [`Chunked::states_kept`]
/// (what it does), the same loop as one kernel where the widths fit it, or
/// [`Chunked::one_at_a_time`], which the tests hold it to.
#[derive(Clone, Copy)]
enum Across<'k> {
    StatesKept,
    Kernel(&'k CudaKernels),
    #[cfg_attr(not(test), allow(dead_code))]
    OneAtATime,
}

#[allow(clippy::too_many_arguments)]
fn chunked_rule_across(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    g: &Tensor,
    beta: &Tensor,
    start: Start,
    keep: bool,
    across: Across,
) -> (Tensor, Option<Tensor>) {
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
    let g = padded(g, &[0, pad]).reshape([b, h, n, chunk]);
    // What a chunk hands the next: only where there is a next chunk, or the state is kept (the
    // questions' one chunk hands nothing on).
    let carry = n > 1 || keep;
    let chunked = timed("linear attention: delta rule: within chunks", || match across {
        Across::Kernel(kernels) if CudaKernels::takes_within(chunk, dk, dv, q.kind()) => {
            Chunked::from(kernels.delta_rule_within(&q, &k, &v, &g, &beta, carry))
        }
        _ => Chunked::prepare(&q, &k, &v, &g, &beta, carry),
    });

    let state = match start {
        Start::Zero => State::Rows(Tensor::zeros([b, h, dk, dv], (Kind::Float, q.device()))),
        Start::PerRow(state) => State::Rows(state),
        Start::PerImage(state) => State::Images(state),
    };
    let (out, last) = timed("linear attention: delta rule: across chunks", || match (state, across) {
        (State::Rows(first), Across::Kernel(kernels)) if n > 1 && CudaKernels::takes_across(chunk, dk, dv, q.kind()) => {
            chunked.by_kernel(kernels, first, keep)
        }
        (State::Rows(first), Across::StatesKept | Across::Kernel(_)) if n > 1 => chunked.states_kept(first, keep),
        (state, _) => chunked.one_at_a_time(state, b, keep),
    });
    (out.reshape([b, h, n * chunk, dv]).narrow(2, 0, s), last)
}

/// A call's tensors chunk by chunk, (batch, heads, chunks, chunk, ·): what the pass across the
/// chunks reads.
struct Chunked {
    /// What each position writes, before the part the state already holds is taken off: (.., dv).
    values: Tensor,
    /// The keys that read that part from the state at the chunk's start: (.., dk).
    keys_read: Tensor,
    /// The queries, decayed from the chunk's start: (.., dk).
    q_decayed: Tensor,
    /// Each position's decayed attention to the chunk's writes up to it: (.., chunk).
    within: Tensor,
    /// The keys decayed to the chunk's end (.., dk) and the chunk's whole decay (.., 1, 1): what
    /// a chunk hands the next. None where nothing is handed on (the questions' one chunk).
    carried: Option<(Tensor, Tensor)>,
}

impl Chunked {
    /// The chunks prepared by libtorch's operations: q, k (rows, heads, chunks, chunk, dk), v (..,
    /// dv), the log decays g (.., chunk) and beta (.., chunk, 1), padded to whole chunks.
    fn prepare(q: &Tensor, k: &Tensor, v: &Tensor, g: &Tensor, beta: &Tensor, carry: bool) -> Chunked {
        let chunk = q.size()[3];
        let decay = g.cumsum(-1, Kind::Float); // log decay from the chunk start
        let (k_beta, v_beta) = (k * beta, v * beta);
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
        let q_decayed = q * &decay_exp;
        let carried = carry.then(|| {
            let last = decay.narrow(-1, chunk - 1, 1);
            (k * (&last - &decay).exp().unsqueeze(-1), last.exp().unsqueeze(-1))
            // (b, h, n, c, dk), (b, h, n, 1, 1)
        });
        Chunked { values, keys_read, q_decayed, within, carried }
    }

    /// Each chunk's output made as the state passes it: one chunk (the questions'), or rows that
    /// start from their image's state, read in place before the first chunk.
    fn one_at_a_time(&self, mut state: State, b: i64, keep: bool) -> (Tensor, Option<Tensor>) {
        let n = self.values.size()[2];
        let mut outs = Vec::with_capacity(n as usize);
        for c in 0..n {
            // What the chunk writes, less what the state (decayed to each position) already holds.
            let new = self.values.select(2, c) - state.read(&self.keys_read.select(2, c));
            outs.push(state.read(&self.q_decayed.select(2, c)) + self.within.select(2, c).matmul(&new));
            if let (true, Some((k_to_end, chunk_decay))) = (c + 1 < n || keep, &self.carried) {
                state = State::Rows(state.per_row(b) * chunk_decay.select(2, c) + k_to_end.select(2, c).transpose(-1, -2).matmul(&new));
            }
        }
        let out = match outs.len() {
            1 => outs.remove(0).unsqueeze(2),
            _ => Tensor::stack(&outs, 2),
        };
        (out, keep.then(|| state.per_row(b)))
    }

    /// Several chunks from one state per row (a prefix's pass). The loop keeps only what follows
    /// from the chunk before, what each chunk writes and the state after it, into tensors that
    /// hold every chunk's; the outputs are then two products over all the chunks at once. On a
    /// GPU, where a small product's launch costs more than its arithmetic, a chunk takes five
    /// kernels instead of nine. The products are the same, matrix by matrix, as
    /// [`Chunked::one_at_a_time`]'s, and so are the CPU's bits (tested below).
    fn states_kept(&self, first: Tensor, keep: bool) -> (Tensor, Option<Tensor>) {
        let (size, dk) = (self.values.size(), self.keys_read.size()[4]);
        let (b, h, n, c, dv) = (size[0], size[1], size[2], size[3], size[4]);
        let Some((k_to_end, chunk_decay)) = &self.carried else {
            unreachable!("several chunks hand each other their state");
        };
        let options = (Kind::Float, self.values.device());
        let (states, news) = (Tensor::empty([b, h, n, dk, dv], options), Tensor::empty([b, h, n, c, dv], options));
        states.select(2, 0).copy_(&first);
        let (state_at, new_at) = (states.unbind(2), news.unbind(2));
        let (values, keys_read) = (self.values.unbind(2), self.keys_read.unbind(2));
        let (k_to_end, chunk_decay) = (k_to_end.transpose(-1, -2).unbind(2), chunk_decay.unbind(2));
        let mut last = None;
        for i in 0..n as usize {
            // What chunk i writes, less what its starting state already holds; then the next state.
            _ = values[i].sub_out(&new_at[i], &keys_read[i].matmul(&state_at[i]));
            if i + 1 < n as usize || keep {
                let (decayed, written) = (&state_at[i] * &chunk_decay[i], k_to_end[i].matmul(&new_at[i]));
                match state_at.get(i + 1) {
                    Some(next) => _ = decayed.add_out(next, &written),
                    None => last = Some(decayed + written),
                }
            }
        }
        (self.q_decayed.matmul(&states) + self.within.matmul(&news), last)
    }

    /// [`Chunked::states_kept`] with its loop as one launch of the engine's delta-rule kernel.
    fn by_kernel(&self, kernels: &CudaKernels, first: Tensor, keep: bool) -> (Tensor, Option<Tensor>) {
        let Some((k_to_end, chunk_decay)) = &self.carried else {
            unreachable!("several chunks hand each other their state");
        };
        let (states, news, last) = kernels.delta_rule_across(&self.values, &self.keys_read, k_to_end, chunk_decay, &first, keep);
        (self.q_decayed.matmul(&states) + self.within.matmul(&news), last)
    }
}

impl From<WithinChunks> for Chunked {
    fn from(w: WithinChunks) -> Chunked {
        Chunked { values: w.values, keys_read: w.keys_read, q_decayed: w.q_decayed, within: w.within, carried: w.carried }
    }
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

    use super::super::linear_attention::l2_normalize;
    use super::{chunked_rule, chunked_rule_across, recurrent_rule, Across, CudaKernels, Start};
    use crate::cuda_kernels::stand_in;

    /// Random inputs in the ranges the layer produces: unit-norm keys, decays <= 0, beta in (0, 1).
    fn inputs(b: i64, h: i64, s: i64, seed: i64) -> [Tensor; 5] {
        inputs_of(b, h, s, 16, 8, seed)
    }

    fn inputs_of(b: i64, h: i64, s: i64, dk: i64, dv: i64, seed: i64) -> [Tensor; 5] {
        tch::manual_seed(seed);
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

    /// A prefix's pass with every chunk's state kept gives the bits of the pass that makes each
    /// chunk's output as it goes: the same products, matrix by matrix, batched otherwise. From
    /// zero and from a carried state, with and without the state after it.
    #[test]
    fn keeping_every_chunks_state_gives_the_bits_of_one_chunk_at_a_time() {
        let [q, k, v, g, beta] = inputs(2, 3, 150, 15);
        let head = |t: &Tensor| t.narrow(2, 0, 70);
        let (_, carried) = chunked_rule(&head(&q), &head(&k), &head(&v), &head(&g), &head(&beta), Start::Zero, true);
        let carried = carried.unwrap();
        for keep in [true, false] {
            for start in [None, Some(&carried)] {
                let begin = || start.map_or(Start::Zero, |s| Start::PerRow(s.copy()));
                let (kept, kept_state) = chunked_rule_across(&q, &k, &v, &g, &beta, begin(), keep, Across::StatesKept);
                let (stepped, stepped_state) = chunked_rule_across(&q, &k, &v, &g, &beta, begin(), keep, Across::OneAtATime);
                assert!(
                    kept.equal(&stepped),
                    "keep {keep}, from a state {}: outputs differ by {}",
                    start.is_some(),
                    max_diff(&kept, &stepped)
                );
                assert_eq!(kept_state.is_some(), keep);
                if let (Some(a), Some(b)) = (kept_state, stepped_state) {
                    assert!(a.equal(&b), "final states differ by {}", max_diff(&a, &b));
                }
            }
        }
    }

    /// The engine's delta-rule kernels launched as on a GPU, through a stand-in driver that runs
    /// their source on the CPU: a prefix's pass is two launches (the chunks prepared, then the pass
    /// across them) and gives libtorch's outputs and final state, from zero and from a carried
    /// state; widths they do not take stay with libtorch; a folder without this GPU's cubins, or
    /// with a bad one, is refused naming the file.
    #[test]
    fn the_delta_rule_kernels_through_a_stand_in_driver_give_libtorchs_pass() {
        let scratch = tempfile::tempdir().unwrap();
        let (library, cubins) = stand_in::driver(scratch.path());
        let (within, across) = (cubins.join("delta_rule_within.sm_90.cubin"), cubins.join("delta_rule_across.sm_90.cubin"));
        stand_in::write_cubins(&cubins, &["delta_rule_within", "delta_rule_across"]);
        for missing in [&within, &across] {
            let refused = CudaKernels::load(&library, &cubins, 0).err().unwrap();
            assert!(refused.contains(&missing.display().to_string()) && refused.contains("--arch sm_90"), "{refused}");
            std::fs::write(missing, b"FAKE-CUBIN").unwrap();
        }
        std::fs::write(&across, b"NOT-A-CUBIN").unwrap();
        let refused = CudaKernels::load(&library, &cubins, 0).err().unwrap();
        assert!(refused.contains("CUDA_ERROR_INVALID_IMAGE") && refused.contains(&across.display().to_string()), "{refused}");
        std::fs::write(&across, b"FAKE-CUBIN").unwrap();
        let kernels = CudaKernels::load(&library, &cubins, 0).unwrap();
        assert_eq!(kernels.arch, "sm_90");

        // 150 tokens: two full chunks and a padded third, at the widths of Qwen3.5's linear layers.
        let [q, k, v, g, beta] = inputs_of(1, 2, 150, 128, 128, 17);
        let carried = Tensor::randn([1, 2, 128, 128], (Kind::Float, tch::Device::Cpu)) * 0.1;
        for keep in [true, false] {
            for start in [None, Some(&carried)] {
                let begin = || start.map_or(Start::Zero, |s| Start::PerRow(s.copy()));
                let before = stand_in::launches(&library);
                let (by_kernel, kernel_state) = chunked_rule_across(&q, &k, &v, &g, &beta, begin(), keep, Across::Kernel(&kernels));
                assert_eq!(stand_in::launches(&library), before + 2, "a prefix's pass is two launches");
                let (looped, loop_state) = chunked_rule_across(&q, &k, &v, &g, &beta, begin(), keep, Across::StatesKept);
                let context = format!("keep {keep}, from a state {}", start.is_some());
                assert!(looped.abs().max().double_value(&[]) > 0.1, "{context}: outputs of a size where a wrong form shows");
                assert!(max_diff(&by_kernel, &looped) < 1e-5, "{context}: outputs differ by {}", max_diff(&by_kernel, &looped));
                assert_eq!(kernel_state.is_some(), keep, "{context}");
                if let (Some(a), Some(b)) = (kernel_state, loop_state) {
                    assert!(max_diff(&a, &b) < 1e-5, "{context}: final states differ by {}", max_diff(&a, &b));
                }
            }
        }
        let [q, k, v, g, beta] = inputs(1, 2, 150, 19);
        let before = stand_in::launches(&library);
        let (narrow, _) = chunked_rule_across(&q, &k, &v, &g, &beta, Start::Zero, true, Across::Kernel(&kernels));
        assert_eq!(stand_in::launches(&library), before, "keys of 16 are not the kernels': libtorch runs");
        assert!(narrow.equal(&chunked_rule_across(&q, &k, &v, &g, &beta, Start::Zero, true, Across::StatesKept).0));
    }

    /// Questions after their image, through the stand-in driver: their chunks (one of 24 tokens, or
    /// two of 64) are prepared by the kernel and read their image's state in place, values twice
    /// as wide as the keys, as libtorch gives them.
    #[test]
    fn questions_prepared_by_the_kernel_through_a_stand_in_driver_give_libtorchs_outputs() {
        let scratch = tempfile::tempdir().unwrap();
        let (library, kernels) = stand_in::kernels(scratch.path());
        let (images, rows) = (2, 3);
        let prefix = Tensor::randn([images, 2, 128, 256], (Kind::Float, tch::Device::Cpu)) * 0.1;
        for tokens in [21, 90] {
            let [q, k, v, g, beta] = inputs_of(images * rows, 2, tokens, 128, 256, 23);
            let start = || Start::PerImage(prefix.shallow_clone());
            let before = stand_in::launches(&library);
            let (by_kernel, none) = chunked_rule_across(&q, &k, &v, &g, &beta, start(), false, Across::Kernel(&kernels));
            assert_eq!(stand_in::launches(&library), before + 1, "{tokens} tokens: the chunks prepared in one launch, read one at a time");
            assert!(none.is_none());
            let (by_libtorch, _) = chunked_rule_across(&q, &k, &v, &g, &beta, start(), false, Across::StatesKept);
            assert!(by_libtorch.abs().max().double_value(&[]) > 0.1);
            let diff = max_diff(&by_kernel, &by_libtorch);
            assert!(diff < 1e-5, "{tokens} tokens: outputs differ by {diff}");
        }
    }

    fn copies_of(q: &Tensor, k: &Tensor, v: &Tensor, g: &Tensor, beta: &Tensor, rows: i64) -> Tensor {
        chunked_rule(q, k, v, g, beta, Start::Zero, true).1.unwrap().repeat_interleave_self_int(rows, 0, None)
    }
}
