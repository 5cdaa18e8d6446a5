//! A mixture of experts' grouping of a pass's rows by expert and its weighted sum of each token's
//! outputs (`crates/vlm/src/cuda_kernels/experts.cu`): three launches and one, where libtorch's forms take
//! some twenty small kernels and an embedding bag.

use std::ffi::{c_int, c_uint};

use tch::{Kind, Tensor};

use super::{in_precision, CudaKernels, KernelSpec};

/// Assignments a tile of the grouping, as `experts.cu` is compiled.
const TILE: i64 = 512;
/// The most experts the grouping takes: their counts and padded sizes fill 8 bytes each of the
/// offsets kernel's shared memory, within the 48 KiB every GPU gives a block unasked.
const MAX_EXPERTS: i64 = 4096;

pub(super) const COUNT: KernelSpec = KernelSpec { file: "experts", name: "experts_count", shared_bytes: 4 * TILE };
pub(super) const OFFSETS: KernelSpec = KernelSpec { file: "experts", name: "experts_offsets", shared_bytes: 8 * MAX_EXPERTS };
pub(super) const PLACE: KernelSpec = KernelSpec { file: "experts", name: "experts_place", shared_bytes: 8 * TILE };
/// bf16's, then f32's.
pub(super) const WEIGHTED_SUM: [KernelSpec; 2] = [
    KernelSpec { file: "experts", name: "experts_weighted_sum_bf16", shared_bytes: 0 },
    KernelSpec { file: "experts", name: "experts_weighted_sum_f32", shared_bytes: 0 },
];

/// A pass's rows grouped by expert, as `Experts::grouping` (crates/vlm/src/moe.rs) lays them out.
pub struct ExpertGroups {
    /// Each expert's rows together, in the order of their (token, slot), each group padded with
    /// zero rows to a multiple of the group size; zero rows after the last group.
    pub rows: Tensor,
    /// Where each expert's padded group ends, (experts) int32.
    pub offsets: Tensor,
    /// The grouped row of each (token, slot), (tokens x k) int64.
    pub output_row: Tensor,
}

impl CudaKernels {
    /// Whether the grouping and the weighted sum take a pass of `tokens` rows `x` among `experts`
    /// experts: bf16 or f32 rows of whole 16-byte words, a tile's words in an int.
    pub fn takes_experts(x: &Tensor, experts: i64) -> bool {
        let (tokens, width) = (x.size()[0], x.size()[1]);
        let row_bytes = width * x.kind().elt_size_in_bytes() as i64;
        matches!(x.kind(), Kind::BFloat16 | Kind::Float)
            && tokens > 0
            && row_bytes % 16 == 0
            && TILE * row_bytes / 16 <= i64::from(i32::MAX)
            && (1..=MAX_EXPERTS).contains(&experts)
    }

    /// The rows `x` (tokens, width), each token's k experts `chosen` (tokens, k), grouped by
    /// expert for the grouped products, each group padded to a multiple of `group_rows`.
    pub fn experts_grouping(&self, x: &Tensor, chosen: &Tensor, experts: i64, group_rows: i64) -> ExpertGroups {
        assert!(Self::takes_experts(x, experts), "a pass the kernels do not take: {:?} {:?}", x.size(), x.kind());
        let (tokens, k, device) = (x.size()[0], chosen.size()[1], x.device());
        let chosen = chosen.to_kind(Kind::Int64).contiguous();
        // The rows move as 16-byte words: a view at an odd offset is copied to an aligned one.
        let x = x.contiguous();
        let x = if (x.data_ptr() as usize).is_multiple_of(16) { x } else { x.copy() };
        let assignments = tokens * k;
        let tiles = (assignments + TILE - 1) / TILE;
        let total_rows = assignments + experts * (group_rows - 1);
        let int32 = |n: i64| Tensor::empty([n], (Kind::Int, device));
        let (counts, offsets, filled) = (int32(tiles * experts), int32(experts), int32(experts));
        let rows = Tensor::empty([total_rows, x.size()[1]], (x.kind(), device));
        let output_row = Tensor::empty([assignments], (Kind::Int64, device));
        let row_words = x.size()[1] * x.kind().elt_size_in_bytes() as i64 / 16;
        let numbers = |list: &[i64]| list.iter().map(|&n| n as c_int).collect::<Vec<_>>();

        self.launch(&COUNT, (tiles as c_uint, 1), COUNT.shared_bytes, &[&chosen, &counts], &numbers(&[assignments, experts]), &[]);
        self.launch(&OFFSETS, (1, 1), 8 * experts, &[&counts, &offsets, &filled], &numbers(&[tiles, experts, group_rows]), &[]);
        self.launch(
            &PLACE,
            ((tiles + experts) as c_uint, 1),
            PLACE.shared_bytes,
            &[&chosen, &counts, &offsets, &filled, &x, &rows, &output_row],
            &numbers(&[assignments, experts, k, row_words, total_rows, group_rows]),
            &[],
        );
        ExpertGroups { rows, offsets, output_row }
    }

    /// Each token's k grouped `outputs` (rows `output_row` of them) times its `weights` (tokens,
    /// k), summed in f32 in slot order and rounded once: (tokens, width), in the outputs' precision.
    pub fn experts_weighted_sum(&self, outputs: &Tensor, output_row: &Tensor, weights: &Tensor) -> Tensor {
        let (tokens, k, width) = (weights.size()[0], weights.size()[1], outputs.size()[1]);
        let kind = outputs.kind();
        assert!(matches!(kind, Kind::BFloat16 | Kind::Float), "outputs in {kind:?}");
        let (outputs, output_row, weights) =
            (outputs.contiguous(), output_row.to_kind(Kind::Int64).contiguous(), weights.to_kind(kind).contiguous());
        let sums = Tensor::empty([tokens, width], (kind, outputs.device()));
        let kernel = in_precision(&WEIGHTED_SUM, kind);
        self.launch(kernel, (tokens as c_uint, 1), 0, &[&outputs, &output_row, &weights, &sums], &[k as c_int, width as c_int], &[]);
        sums
    }
}
