// A mixture of experts' rows grouped by expert before its grouped products, and each token's
// outputs summed back after them. libtorch's form of the grouping is some twenty small kernels
// (a sort of the choices, two searches, the index arithmetic, a copy of the pass's rows with a
// zero row after them, a gather, the inverse permutation); its sum is an embedding bag with
// per-row weights. Here the grouping is three launches and the sum one.
//
// They compute what `Experts::grouping` and `weighted_sum_by_bags` in crates/vlm/src/moe.rs compute,
// with the same layout, to the byte:
//
//   the pass's assignments i = token * k + slot, each choosing expert chosen[i], go in expert
//   order, and in the order of i within an expert (a stable sort's); each expert's group is
//   padded with zero rows to a multiple of group_rows, the groups one after another; rows[p] is
//   the row x[i / k] of the assignment placed at p, or zero; ends[e] is where expert e's padded
//   group ends (the grouped product's offsets); output_row[i] is the row assignment i went to.
//   The buffer has assignments + experts * (group_rows - 1) rows, zero after the last group.
//
//   sums[token] = sum over slots s of weights[token][s] * outputs[output_row[token * k + s]],
//   in f32, the slots in order, rounded once to the model's precision.
//
// The grouping's three launches, over tiles of TILE assignments:
//   experts_count    a block a tile: how many of its assignments chose each expert;
//   experts_offsets  one block: each expert's padded group, and where each tile's first
//                    assignment of each expert goes (written over the counts);
//   experts_place    a block a tile: each assignment's row (a thread an expert scans the tile in
//                    order, so the order within an expert is the assignments'), then the tile's
//                    rows copied there in 16-byte words; then a block an expert writes its
//                    group's padding and its share of the zero rows after the last group.
// Counts are integers and every place is computed, not raced for: no atomics, and the same
// layout whatever the GPU's scheduling. A token's sum reads only its own k rows.
//
// On trial like the delta-rule kernels: the engine launches them where BPALS_CUDA_KERNELS names
// their cubins (crates/vlm/src/cuda_kernels/experts.rs); the suite runs them on the CPU (crates/vlm/tests/kernels/).
//
// Layouts, contiguous: chosen (assignments) int64; x (tokens, width) and rows (rows, width) as
// row_words 16-byte words a row; counts (tiles, experts), ends and filled (experts) int32;
// output_row (assignments) int64; outputs (rows, width), weights (tokens, k) and sums (tokens,
// width) in the model's precision. THREADS threads a block everywhere.

#define THREADS 256
#define TILE 512  // assignments a tile of the grouping

#include "bf16.cuh"

// The tile's experts, as ints, in shared memory; returns how many assignments the tile holds.
__device__ inline int load_tile(const long long* chosen, int* ids, int assignments) {
    const long first = static_cast<long>(blockIdx.x) * TILE;
    const int n = min(static_cast<long>(TILE), assignments - first);
    for (int j = threadIdx.x; j < n; j += THREADS) ids[j] = static_cast<int>(chosen[first + j]);
    __syncthreads();
    return n;
}

// Grid (tiles); 4 TILE bytes of dynamic shared memory.
extern "C" __global__ void __launch_bounds__(THREADS) experts_count(const long long* chosen, int* counts, int assignments,
                                                                    int experts) {
    extern __shared__ float4 shared4[];
    int* ids = reinterpret_cast<int*>(shared4);
    const int n = load_tile(chosen, ids, assignments);
    for (int e = threadIdx.x; e < experts; e += THREADS) {
        int count = 0;
        for (int j = 0; j < n; ++j) count += ids[j] == e;
        counts[static_cast<long>(blockIdx.x) * experts + e] = count;
    }
}

// Grid (1); 8 experts bytes of dynamic shared memory. Turns counts into each tile's first row of
// each expert; writes each padded group's end and where its assignments' rows end.
extern "C" __global__ void __launch_bounds__(THREADS) experts_offsets(int* counts, int* ends, int* filled, int tiles,
                                                                      int experts, int group_rows) {
    extern __shared__ float4 shared4[];
    int* total = reinterpret_cast<int*>(shared4);
    int* padded = total + experts;
    for (int e = threadIdx.x; e < experts; e += THREADS) {
        int sum = 0;
        for (int tile = 0; tile < tiles; ++tile) sum += counts[static_cast<long>(tile) * experts + e];
        total[e] = sum;
        padded[e] = (sum + group_rows - 1) / group_rows * group_rows;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < experts; e += THREADS) {
        int start = 0;  // the groups before this one, padded
        for (int before = 0; before < e; ++before) start += padded[before];
        ends[e] = start + padded[e];
        filled[e] = start + total[e];
        int next = start;
        for (int tile = 0; tile < tiles; ++tile) {
            const long at = static_cast<long>(tile) * experts + e;
            const int count = counts[at];
            counts[at] = next;
            next += count;
        }
    }
}

// `rows` rows of `row_words` 16-byte words from `to` on made zero, the block's threads taking
// every THREADS-th word.
__device__ inline void zero_rows(float4* to, long rows, int row_words) {
    for (long w = threadIdx.x; w < rows * row_words; w += THREADS) to[w] = float4{0.0f, 0.0f, 0.0f, 0.0f};
}

// Grid (tiles + experts); 8 TILE bytes of dynamic shared memory. `firsts` is what
// experts_offsets made of the counts.
extern "C" __global__ void __launch_bounds__(THREADS) experts_place(const long long* chosen, const int* firsts, const int* ends,
                                                                    const int* filled, const float4* x, float4* rows,
                                                                    long long* output_row, int assignments, int experts,
                                                                    int k, int row_words, int total_rows, int group_rows) {
    extern __shared__ float4 shared4[];
    const int tiles = (assignments + TILE - 1) / TILE;
    if (static_cast<int>(blockIdx.x) >= tiles) {
        // Expert e's padding, and the e-th group_rows - 1 of the rows after the last group
        // (there are at most experts * (group_rows - 1) of them).
        const int e = blockIdx.x - tiles;
        zero_rows(rows + static_cast<long>(filled[e]) * row_words, ends[e] - filled[e], row_words);
        const int after = ends[experts - 1] + e * (group_rows - 1);
        zero_rows(rows + static_cast<long>(after) * row_words, max(0, min(after + group_rows - 1, total_rows) - after), row_words);
        return;
    }
    int* ids = reinterpret_cast<int*>(shared4);
    int* places = ids + TILE;
    const int n = load_tile(chosen, ids, assignments);
    const long first = static_cast<long>(blockIdx.x) * TILE;
    for (int e = threadIdx.x; e < experts; e += THREADS) {
        int next = firsts[static_cast<long>(blockIdx.x) * experts + e];
        for (int j = 0; j < n; ++j) {
            if (ids[j] == e) places[j] = next++;
        }
    }
    __syncthreads();
    for (int j = threadIdx.x; j < n; j += THREADS) output_row[first + j] = places[j];
    for (int w = threadIdx.x; w < n * row_words; w += THREADS) {  // a tile's words fit an int (the engine checks)
        const int j = w / row_words, word = w - j * row_words;
        const long token = (first + j) / k;
        rows[static_cast<long>(places[j]) * row_words + word] = x[token * row_words + word];
    }
}

// Grid (tokens); no shared memory.
template <class T>
__device__ void weighted_sum(const T* outputs, const long long* output_row, const T* weights, T* sums, int k, int width) {
    const long token = blockIdx.x;
    for (int c = threadIdx.x; c < width; c += THREADS) {
        float sum = 0.0f;
        for (int slot = 0; slot < k; ++slot) {
            const long at = token * k + slot;
            sum = fmaf(load(weights + at), load(outputs + output_row[at] * width + c), sum);
        }
        store(sums + token * width + c, sum);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS) experts_weighted_sum_bf16(const unsigned short* outputs,
                                                                                const long long* output_row,
                                                                                const unsigned short* weights,
                                                                                unsigned short* sums, int k, int width) {
    weighted_sum(outputs, output_row, weights, sums, k, width);
}

extern "C" __global__ void __launch_bounds__(THREADS) experts_weighted_sum_f32(const float* outputs, const long long* output_row,
                                                                               const float* weights, float* sums, int k,
                                                                               int width) {
    weighted_sum(outputs, output_row, weights, sums, k, width);
}
