// The delta rule's preparation within each chunk as one kernel: a block a chunk of one head, the
// chunk's keys held on chip, where the engine's libtorch form runs some twenty kernels over all
// the chunks (products, masks, exponentials, a triangular solve), each writing its whole result.
//
// It computes what `chunked_rule_across` in crates/vlm/src/families/qwen3_5/delta_rule.rs computes before
// its pass across chunks, for a chunk of c tokens with log decay d = cumsum(g) from its start:
//
//   T          = (I + strictly lower part of (beta_i k_i . k_j) exp(d_i - d_j))^-1
//   values     = T @ (beta * v)                      (c x dv)
//   keys_read  = T @ (beta * k * exp(d))             (c x KEY_DIM)
//   within     = (q_i . k_j) exp(d_i - d_j) for j <= i, 0 above (c x c)
//   q_decayed  = q * exp(d)                          (c x KEY_DIM)
//   and where carry is non-zero, what a chunk hands the next:
//   k_to_end   = k * exp(d_last - d)                 (c x KEY_DIM)
//   chunk_decay = exp(d_last)
//
// T comes by forward substitution, a column a thread (T's columns never meet). Every sum runs in
// f32 in a fixed order (the key's index, or the chunk's rows, upward), with no atomics: a chunk's
// result does not depend on what else is in the pass.
//
// On trial, like delta_rule_across.cu: the engine launches it where BPALS_CUDA_KERNELS names its
// cubins (crates/vlm/src/cuda_kernels/delta_rule.rs), benches/delta_rule_gpu.py times it, and the
// suite runs it on the CPU (crates/vlm/tests/kernels/). THREADS and SHARED_BYTES are repeated in
// cuda_kernels/delta_rule.rs and in the bench (the stand-in driver checks both launches).
//
// Layouts, all f32 and contiguous, rows = images x heads x chunks x c: q, k, k_to_end, keys_read,
// q_decayed (rows, KEY_DIM); v, values (rows, dv); g, beta (rows); within (rows, c); chunk_decay
// one a chunk. c a multiple of 8 up to MAX_CHUNK, dv a multiple of KEY_DIM. Grid: one block a
// chunk, THREADS threads, SHARED_BYTES of dynamic shared memory.

#ifndef KEY_DIM
#define KEY_DIM 128  // a key head's width
#endif
#define MAX_CHUNK 64                     // tokens a chunk at most (the engine's)
#define THREADS 256
#define HALVES (THREADS / KEY_DIM)       // threads sharing a column of a (chunk x KEY_DIM) product
#define ROWS_EACH 16                     // rows of it a thread makes in one sweep
#define KPITCH (KEY_DIM + 4)             // a row of keys or of a staged operand, 16-byte aligned
#define CPITCH (MAX_CHUNK + 4)           // a row of the system or its inverse, 16-byte aligned
#define SHARED_FLOATS (2 * MAX_CHUNK * KPITCH + MAX_CHUNK * CPITCH + 3 * MAX_CHUNK)
#define SHARED_BYTES (SHARED_FLOATS * 4)

#if THREADS % KEY_DIM != 0 || (MAX_CHUNK / 4) * (MAX_CHUNK / 4) > THREADS
#error "a block's threads must cover KEY_DIM columns and the chunk's 4 x 4 tiles"
#endif

// acc[a][b] = sum over e (upward) of x[i + a * stride][e] * y[j + b * stride][e]: a thread's
// 4 x 4 of x y^T, its rows and columns a quarter of the chunk apart, so that the lanes reading
// neighbouring rows of y at once meet no bank twice. Rows are read four floats at a time.
__device__ inline void tile_of_products(const float* x, const float* y, int i, int j, int stride, float acc[4][4]) {
#pragma unroll
    for (int a = 0; a < 4; ++a) {
#pragma unroll
        for (int b = 0; b < 4; ++b) acc[a][b] = 0.0f;
    }
    for (int e = 0; e < KEY_DIM; e += 4) {
        float4 xs[4], ys[4];
#pragma unroll
        for (int a = 0; a < 4; ++a) {
            xs[a] = *reinterpret_cast<const float4*>(x + (i + a * stride) * KPITCH + e);
            ys[a] = *reinterpret_cast<const float4*>(y + (j + a * stride) * KPITCH + e);
        }
#pragma unroll
        for (int a = 0; a < 4; ++a) {
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                acc[a][b] = fmaf(xs[a].x, ys[b].x, acc[a][b]);
                acc[a][b] = fmaf(xs[a].y, ys[b].y, acc[a][b]);
                acc[a][b] = fmaf(xs[a].z, ys[b].z, acc[a][b]);
                acc[a][b] = fmaf(xs[a].w, ys[b].w, acc[a][b]);
            }
        }
    }
}

// out[r][column] = sum over m (upward) of inverse[r][m] * x[m][column], for this thread's rows
// half, half + HALVES, ...: T applied to a staged (c x KEY_DIM) operand, ROWS_EACH rows a sweep.
// A warp's lanes share their rows, so each reads T's four next entries of a row in one broadcast.
// T is zero above its diagonal, so the sum is over m <= r.
__device__ inline void apply_inverse(const float* inverse, const float* x, int c, int column, int half, float* out,
                                     long pitch) {
    for (int base = half; base < c; base += HALVES * ROWS_EACH) {
        float acc[ROWS_EACH];
#pragma unroll
        for (int n = 0; n < ROWS_EACH; ++n) acc[n] = 0.0f;
#pragma unroll 1
        for (int m = 0; m < c; m += 4) {
            const float x0 = x[m * KPITCH + column], x1 = x[(m + 1) * KPITCH + column];
            const float x2 = x[(m + 2) * KPITCH + column], x3 = x[(m + 3) * KPITCH + column];
#pragma unroll
            for (int n = 0; n < ROWS_EACH; ++n) {
                const int r = base + n * HALVES;
                if (r < c) {
                    const float4 w = *reinterpret_cast<const float4*>(inverse + r * CPITCH + m);
                    acc[n] = fmaf(w.w, x3, fmaf(w.z, x2, fmaf(w.y, x1, fmaf(w.x, x0, acc[n]))));
                }
            }
        }
#pragma unroll
        for (int n = 0; n < ROWS_EACH; ++n) {
            const int r = base + n * HALVES;
            if (r < c) out[(long)r * pitch + column] = acc[n];
        }
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, 2) delta_rule_within(const float* q, const float* k, const float* v, const float* g,
                                             const float* beta, float* values, float* keys_read, float* q_decayed,
                                             float* within, float* k_to_end, float* chunk_decay, int c, int dv,
                                             int carry) {
    extern __shared__ float4 shared4[];
    float* keys = reinterpret_cast<float*>(shared4);  // c x KPITCH: the chunk's keys
    float* staged = keys + MAX_CHUNK * KPITCH;        // the system (c x CPITCH), then what T is applied to, then q
    float* inverse = staged + MAX_CHUNK * KPITCH;     // c x CPITCH: T
    float* decay = inverse + MAX_CHUNK * CPITCH;      // c: the log decay from the chunk's start
    float* growth = decay + MAX_CHUNK;                // c: exp(decay)
    float* betas = growth + MAX_CHUNK;                // c
    const int t = threadIdx.x, column = t % KEY_DIM, half = t / KEY_DIM;
    const long at = blockIdx.x;  // this chunk of this head
    const long first = at * c;   // its first row

    for (int idx = t; idx < c * KEY_DIM; idx += THREADS) {
        keys[(idx / KEY_DIM) * KPITCH + idx % KEY_DIM] = k[first * KEY_DIM + idx];
    }
    if (t < c) betas[t] = beta[first + t];
    if (t == 0) {
        float sum = 0.0f;
        for (int i = 0; i < c; ++i) decay[i] = sum += g[first + i];
    }
    __syncthreads();
    if (t < c) growth[t] = expf(decay[t]);

    // The system's strictly lower part, 4 x 4 entries a thread (rows and columns a quarter apart).
    const int quarter = c / 4;
    const bool tiled = t < quarter * quarter;
    const int i0 = tiled ? t / quarter : 0, j0 = tiled ? t % quarter : 0;
    float acc[4][4];
    if (tiled) {
        tile_of_products(keys, keys, i0, j0, quarter, acc);
#pragma unroll
        for (int a = 0; a < 4; ++a) {
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                const int i = i0 + a * quarter, j = j0 + b * quarter;
                staged[i * CPITCH + j] = j < i ? betas[i] * acc[a][b] * expf(decay[i] - decay[j]) : 0.0f;
            }
        }
    }
    __syncthreads();

    // T by forward substitution down column t: T[i][t] = -sum over m < i of S[i][m] T[m][t],
    // with 1 on the diagonal and 0 above it.
    if (t < c) {
        for (int i = 0; i < c; ++i) {
            float sum = 0.0f;
            for (int m = 0; m < i; ++m) sum = fmaf(staged[i * CPITCH + m], inverse[m * CPITCH + t], sum);
            inverse[i * CPITCH + t] = i < t ? 0.0f : (i == t ? 1.0f : -sum);
        }
    }
    __syncthreads();

    // keys_read = T (beta k exp(d)), over the system's space.
    for (int idx = t; idx < c * KEY_DIM; idx += THREADS) {
        const int m = idx / KEY_DIM, e = idx % KEY_DIM;
        staged[m * KPITCH + e] = keys[m * KPITCH + e] * betas[m] * growth[m];
    }
    __syncthreads();
    apply_inverse(inverse, staged, c, column, half, keys_read + first * KEY_DIM, KEY_DIM);
    __syncthreads();

    // values = T (beta v), KEY_DIM of v's columns at a time.
    for (int tile = 0; tile < dv; tile += KEY_DIM) {
        for (int idx = t; idx < c * KEY_DIM; idx += THREADS) {
            const int m = idx / KEY_DIM, e = idx % KEY_DIM;
            staged[m * KPITCH + e] = v[(first + m) * dv + tile + e] * betas[m];
        }
        __syncthreads();
        apply_inverse(inverse, staged, c, column, half, values + first * dv + tile, dv);
        __syncthreads();
    }

    // The queries: decayed from the chunk's start, and their decayed attention to its keys.
    for (int idx = t; idx < c * KEY_DIM; idx += THREADS) {
        const int m = idx / KEY_DIM, e = idx % KEY_DIM;
        const float x = q[first * KEY_DIM + idx];
        staged[m * KPITCH + e] = x;
        q_decayed[first * KEY_DIM + idx] = x * growth[m];
    }
    __syncthreads();
    if (tiled) {
        tile_of_products(staged, keys, i0, j0, quarter, acc);
#pragma unroll
        for (int a = 0; a < 4; ++a) {
#pragma unroll
            for (int b = 0; b < 4; ++b) {
                const int i = i0 + a * quarter, j = j0 + b * quarter;
                within[(first + i) * c + j] = j <= i ? acc[a][b] * expf(decay[i] - decay[j]) : 0.0f;
            }
        }
    }

    if (carry) {
        const float last = decay[c - 1];
        for (int idx = t; idx < c * KEY_DIM; idx += THREADS) {
            const int m = idx / KEY_DIM, e = idx % KEY_DIM;
            k_to_end[first * KEY_DIM + idx] = keys[m * KPITCH + e] * expf(last - decay[m]);
        }
        if (t == 0) chunk_decay[at] = expf(last);
    }
}
