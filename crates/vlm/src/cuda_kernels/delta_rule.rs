//! The delta rule's kernels: its preparation within each chunk (`crates/vlm/src/cuda_kernels/delta_rule_within.cu`,
//! a chunk's in one block where libtorch's form takes some twenty small kernels over all the
//! chunks) and its pass across a prefix's chunks (`crates/vlm/src/cuda_kernels/delta_rule_across.cu`, each
//! head's state held on chip through all of them where libtorch's form takes five kernels a
//! chunk).

use std::ffi::{c_int, c_uint};

use tch::{Kind, Tensor};

use super::{CudaKernels, KernelSpec};

/// The kernels' geometry, as `delta_rule_within.cu` and `delta_rule_across.cu` are compiled for
/// the engine: tokens a chunk (at most, within), a key head's width.
pub const CHUNK: i64 = 64;
pub const KEY_DIM: i64 = 128;
/// State columns a block of the pass across holds.
const TILE: i64 = 64;

/// The preparation within chunks: a chunk's keys and one staged operand, the system's inverse,
/// and the decays and betas.
pub(super) const WITHIN: KernelSpec = KernelSpec {
    file: "delta_rule_within",
    name: "delta_rule_within",
    shared_bytes: 4 * (2 * CHUNK * (KEY_DIM + 4) + CHUNK * (CHUNK + 4) + 3 * CHUNK),
};
/// The pass across chunks: the state tile, a chunk's new values, one chunk's keys.
pub(super) const ACROSS: KernelSpec = KernelSpec {
    file: "delta_rule_across",
    name: "delta_rule_across",
    shared_bytes: 4 * (KEY_DIM * TILE + CHUNK * TILE + KEY_DIM * (CHUNK + 4)),
};

/// The delta rule's chunks prepared for the pass across them (`chunked_rule_across`'s tensors,
/// each (rows, heads, chunks, chunk, ·)).
pub struct WithinChunks {
    pub values: Tensor,
    pub keys_read: Tensor,
    pub q_decayed: Tensor,
    pub within: Tensor,
    /// The keys decayed to the chunk's end and the chunk's whole decay (.., 1, 1), where asked.
    pub carried: Option<(Tensor, Tensor)>,
}

impl CudaKernels {
    /// Whether the preparation kernel takes chunks of these widths (f32, chunks of a multiple of 8
    /// tokens up to 64, keys of 128, values in whole key widths).
    pub fn takes_within(chunk: i64, key_dim: i64, value_dim: i64, kind: Kind) -> bool {
        chunk % 8 == 0 && (8..=CHUNK).contains(&chunk) && key_dim == KEY_DIM && value_dim % KEY_DIM == 0 && kind == Kind::Float
    }

    /// Whether the pass-across kernel takes a pass of these widths (f32, 64-token chunks, keys of
    /// 128, values in whole tiles).
    pub fn takes_across(chunk: i64, key_dim: i64, value_dim: i64, kind: Kind) -> bool {
        chunk == CHUNK && key_dim == KEY_DIM && value_dim % TILE == 0 && kind == Kind::Float
    }

    /// The delta rule's chunks prepared for the pass across them, from `q` and `k` (rows, heads,
    /// chunks, chunk, dk), `v` (.., dv), the log decays `g` (rows, heads, chunks, chunk) and `beta`
    /// (.., chunk, 1), all padded to whole chunks; what each chunk hands the next where `carry`.
    pub fn delta_rule_within(&self, q: &Tensor, k: &Tensor, v: &Tensor, g: &Tensor, beta: &Tensor, carry: bool) -> WithinChunks {
        let size = v.size();
        let (b, h, n, chunk, dv) = (size[0], size[1], size[2], size[3], size[4]);
        assert!(Self::takes_within(chunk, q.size()[4], dv, v.kind()), "chunks the kernel does not take: {size:?}");
        let [q, k, v, g, beta] = [q, k, v, g, beta].map(Tensor::contiguous);
        let options = (Kind::Float, v.device());
        let keys = || Tensor::empty([b, h, n, chunk, KEY_DIM], options);
        let (values, keys_read, q_decayed, within) =
            (Tensor::empty_like(&v), keys(), keys(), Tensor::empty([b, h, n, chunk, chunk], options));
        let (k_to_end, chunk_decay) = if carry {
            (keys(), Tensor::empty([b, h, n, 1, 1], options))
        } else {
            (Tensor::empty([1], options), Tensor::empty([1], options))
        };
        let tensors = [&q, &k, &v, &g, &beta, &values, &keys_read, &q_decayed, &within, &k_to_end, &chunk_decay];
        let grid = ((b * h * n) as c_uint, 1);
        self.launch(&WITHIN, grid, WITHIN.shared_bytes, &tensors, &[chunk as c_int, dv as c_int, c_int::from(carry)], &[]);
        WithinChunks { values, keys_read, q_decayed, within, carried: carry.then_some((k_to_end, chunk_decay)) }
    }

    /// The delta rule's pass across chunks (`Chunked::states_kept`'s loop): from `first` (rows,
    /// heads, dk, dv), each chunk's starting state (rows, heads, n, dk, dv) and new values (rows,
    /// heads, n, chunk, dv), and the state after the last chunk where `keep`. `values` (.., chunk,
    /// dv), `keys_read` and `keys_to_end` (.., chunk, dk), `chunk_decay` one a chunk.
    pub fn delta_rule_across(
        &self,
        values: &Tensor,
        keys_read: &Tensor,
        keys_to_end: &Tensor,
        chunk_decay: &Tensor,
        first: &Tensor,
        keep: bool,
    ) -> (Tensor, Tensor, Option<Tensor>) {
        let size = values.size();
        let (b, h, n, chunk, dv) = (size[0], size[1], size[2], size[3], size[4]);
        assert!(Self::takes_across(chunk, keys_read.size()[4], dv, values.kind()), "a pass the kernel does not take: {size:?}");
        let [values, keys_read, keys_to_end, chunk_decay, first] =
            [values, keys_read, keys_to_end, chunk_decay, first].map(Tensor::contiguous);
        let options = (Kind::Float, values.device());
        let states = Tensor::empty([b, h, n, KEY_DIM, dv], options);
        let news = Tensor::empty([b, h, n, chunk, dv], options);
        let last = Tensor::empty(if keep { vec![b, h, KEY_DIM, dv] } else { vec![1] }, options);
        let tensors = [&values, &keys_read, &keys_to_end, &chunk_decay, &first, &states, &news, &last];
        let grid = ((b * h) as c_uint, (dv / TILE) as c_uint);
        self.launch(&ACROSS, grid, ACROSS.shared_bytes, &tensors, &[n as c_int, dv as c_int, c_int::from(keep)], &[]);
        (states, news, keep.then_some(last))
    }
}
