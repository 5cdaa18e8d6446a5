// The delta rule's pass across a prefix's chunks as one kernel: each block holds a tile of one
// head's state on chip through all the chunks, where the engine's libtorch form launches five
// kernels a chunk and writes and reads the whole state between them.
//
// It computes what `Chunked::states_kept` in crates/vlm/src/families/qwen3_5/delta_rule.rs computes
// before its two closing products, for chunk i = 0 .. n-1 from state S_0 = first:
//
//   new_i     = values_i - keys_read_i @ S_i          (CHUNK x dv)
//   S_{i+1}   = S_i * chunk_decay_i + k_to_end_i^T @ new_i   (DK x dv; made where i + 1 < n or keep)
//
// and writes every S_i (states) and new_i (news); the outputs are then q_decayed @ states +
// within @ news, as in the engine. A state's columns never meet (each product reads one column of
// S or new), so a block takes TILE columns of one (image, head) and needs nothing from another:
// a row's result does not depend on what else is in the pass. Every sum runs in f32 in a fixed
// order (the keys' index, then the chunk's rows, upward), with no atomics.
//
// On trial: the engine launches it where BPALS_CUDA_KERNELS names its cubins (made by nvrtc.py
// here; crates/vlm/src/cuda_kernels/delta_rule.rs), benches/delta_rule_gpu.py times it beside the
// engine's form, and crates/vlm/tests/kernels/fake_libcuda.cpp runs it on the CPU. TILE, THREADS and
// SHARED_BYTES are repeated in cuda_kernels/delta_rule.rs and in the bench (the stand-in driver
// checks both launches).
//
// Layouts, all f32 and contiguous, bh = images x heads:
//   values (bh, n, CHUNK, dv), keys_read and k_to_end (bh, n, CHUNK, DK), chunk_decay (bh, n),
//   first (bh, DK, dv); out: states (bh, n, DK, dv), news (bh, n, CHUNK, dv), last (bh, DK, dv)
//   when keep is non-zero. Grid (bh, dv / TILE), THREADS threads, SHARED_BYTES of dynamic
//   shared memory.

#ifndef CHUNK
#define CHUNK 64  // tokens a chunk (the engine's)
#endif
#ifndef DK
#define DK 128  // a key head's width
#endif
#define TILE 64                    // state columns a block holds
#define THREADS 256
#define GROUPS (THREADS / TILE)    // threads sharing a column
#define ROWS (CHUNK / GROUPS)      // rows of new_i a thread makes
#define KROWS (DK / GROUPS)        // rows of the state a thread updates
#define PITCH (CHUNK + 4)          // keys_read held transposed, rows kept 16-byte aligned
#define SHARED_FLOATS (DK * TILE + CHUNK * TILE + DK * PITCH)
#define SHARED_BYTES (SHARED_FLOATS * 4)

#if CHUNK % (4 * GROUPS) != 0 || DK % (4 * GROUPS) != 0
#error "CHUNK and DK must be multiples of 16"
#endif

// acc[0..4] += k * x, one fused multiply-add each.
__device__ inline void add_scaled(float* acc, float4 k, float x) {
    acc[0] = fmaf(k.x, x, acc[0]);
    acc[1] = fmaf(k.y, x, acc[1]);
    acc[2] = fmaf(k.z, x, acc[2]);
    acc[3] = fmaf(k.w, x, acc[3]);
}

extern "C" __global__ void delta_rule_across(const float* values, const float* keys_read, const float* k_to_end,
                                             const float* chunk_decay, const float* first, float* states,
                                             float* news, float* last, int n, int dv, int keep) {
    extern __shared__ float4 shared4[];
    float* state = reinterpret_cast<float*>(shared4);  // DK x TILE
    float* fresh = state + DK * TILE;                   // CHUNK x TILE: new_i
    float* stage = fresh + CHUNK * TILE;                // keys_read_i as DK x PITCH, or k_to_end_i as CHUNK x DK
    const int t = threadIdx.x, column = t % TILE, group = t / TILE;
    const long bh = blockIdx.x;
    const long col0 = (long)blockIdx.y * TILE;

    for (int idx = t; idx < DK * TILE; idx += THREADS) {
        state[idx] = first[(bh * DK + idx / TILE) * dv + col0 + idx % TILE];
    }
    __syncthreads();

    for (int i = 0; i < n; ++i) {
        const long at = bh * n + i;  // this chunk of this head
        const float* read_keys = keys_read + at * CHUNK * DK;
        for (int idx = t; idx < CHUNK * DK; idx += THREADS) {
            stage[(idx % DK) * PITCH + idx / DK] = read_keys[idx];
        }
        float* state_out = states + at * DK * dv;
        for (int idx = t; idx < DK * TILE; idx += THREADS) {
            state_out[(long)(idx / TILE) * dv + col0 + idx % TILE] = state[idx];
        }
        __syncthreads();

        // new_i = values_i - keys_read_i @ S_i: this thread's ROWS rows of one column.
        float held[ROWS];
#pragma unroll
        for (int m = 0; m < ROWS; ++m) held[m] = 0.0f;
        for (int d = 0; d < DK; ++d) {
            const float s = state[d * TILE + column];
            const float4* keys = reinterpret_cast<const float4*>(stage + d * PITCH + group * ROWS);
#pragma unroll
            for (int q = 0; q < ROWS / 4; ++q) add_scaled(held + 4 * q, keys[q], s);
        }
        const float* values_in = values + at * CHUNK * dv;
        float* news_out = news + at * CHUNK * dv;
#pragma unroll
        for (int m = 0; m < ROWS; ++m) {
            const int r = group * ROWS + m;
            const float x = values_in[(long)r * dv + col0 + column] - held[m];
            fresh[r * TILE + column] = x;
            news_out[(long)r * dv + col0 + column] = x;
        }
        if (i + 1 == n && !keep) break;
        __syncthreads();

        // S_{i+1} = S_i * decay + k_to_end_i^T @ new_i: this thread's KROWS rows of one column.
        const float* end_keys = k_to_end + at * CHUNK * DK;
        for (int idx = t; idx < CHUNK * DK; idx += THREADS) stage[idx] = end_keys[idx];
        __syncthreads();
        float written[KROWS];
#pragma unroll
        for (int m = 0; m < KROWS; ++m) written[m] = 0.0f;
        for (int r = 0; r < CHUNK; ++r) {
            const float x = fresh[r * TILE + column];
            const float4* keys = reinterpret_cast<const float4*>(stage + r * DK + group * KROWS);
#pragma unroll
            for (int q = 0; q < KROWS / 4; ++q) add_scaled(written + 4 * q, keys[q], x);
        }
        const float decay = chunk_decay[at];
#pragma unroll
        for (int m = 0; m < KROWS; ++m) {
            float* s = &state[(group * KROWS + m) * TILE + column];
            *s = *s * decay + written[m];
        }
        __syncthreads();
    }

    if (keep) {
        for (int idx = t; idx < DK * TILE; idx += THREADS) {
            last[(bh * DK + idx / TILE) * dv + col0 + idx % TILE] = state[idx];
        }
    }
}
