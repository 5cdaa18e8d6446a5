// The questions' attention to their own tokens, merged with their attention to the image's prefix,
// in one pass. The prefix's part comes from libtorch's fused kernel (memory-efficient attention:
// its output and log-sum-exp); libtorch's form of the rest is some twenty kernels over the
// questions' heads, six of them round trips of f32 copies the size of every question's output
// (the prefix part cast and moved, the suffix's output, each part rescaled, the sum, the
// quotient), then the result moved for the projection out. This reads the queries, the prefix
// part and the questions' own keys and values once, and writes the result once, already laid
// out for the projection out.
//
// It computes what `shared_prefix::attention` in crates/vlm/src/shared_prefix.rs computes on a GPU, for
// one query head of one question a block, rounding where libtorch rounds there:
//
//   score[i][j] = as_stored(q[i] . k[j]) * scale + mask[i][j]           the product in the model's precision
//   m[i]        = max over j of score[i][j]
//   w[i][j]     = exp(score[i][j] - m[i]);  sum[i] = sum over j of w[i][j]
//   own[i][e]   = as_stored(sum over j of as_stored(w[i][j]) v[j][e])
//   top[i]      = max(lse[i], m[i]);  wp = exp(lse[i] - top[i]);  ws = exp(m[i] - top[i])
//   result      = as_stored((prefix[i][e] wp + own[i][e] ws) / (wp + sum[i] ws))   the merge in f32
//
// Every sum runs in one thread in a fixed order; no atomics: a question's result depends on
// nothing else in the pass.
//
// On trial like the other kernels here: the engine launches it where BPALS_CUDA_KERNELS names
// its cubins (crates/vlm/src/cuda_kernels/suffix_attention.rs); the suite runs it on the CPU
// (crates/vlm/tests/kernels/).
//
// Layouts, in the model's precision unless said: q (rows, heads, s, d), k and v (rows, kv_heads,
// s, d), each through its strides (row, head, token; a head's entries contiguous). The prefix
// part as libtorch's fused kernel gives it for the queries stacked by image and key/value head
// (images, kv_heads, rows_per_image * groups * s, d): query i of row r's head h is stacked row
// ((r % rows_per_image) * groups + h % groups) * s + i of image r / rows_per_image and key/value
// head h / groups, through its strides (image, head, token); its log-sum-exp f32 through its
// strides (image, head, token). mask (s, s) f32, contiguous. result (rows, s, heads,
// d), contiguous. Grid (heads, rows), THREADS threads, shared_bytes() of dynamic shared memory.

#define THREADS 256

#include "bf16.cuh"

// A staged row of queries or keys is padded by one 4-byte word, so that the threads of a warp,
// each on another key, meet no bank twice.
__device__ constexpr int padded(int d, const unsigned short*) { return d + 2; }
__device__ constexpr int padded(int d, const float*) { return d + 1; }

template <class T>
__device__ void suffix_attention(const T* q, const T* k, const T* v, const T* prefix, const float* lse,
                                 const float* mask, T* result, int s, int d, int heads, int groups,
                                 int rows_per_image, int q_row, int q_head, int q_token, int k_row, int k_head,
                                 int k_token, int v_row, int v_head, int v_token, int prefix_image,
                                 int prefix_head, int prefix_token, int lse_image, int lse_head, int lse_token,
                                 float scale) {
    extern __shared__ float4 shared4[];
    const int t = threadIdx.x, h = blockIdx.x, kv = h / groups, g = h - kv * groups;
    const long row = blockIdx.y, image = row / rows_per_image, in_image = row - image * rows_per_image;
    const int pitch = padded(d, q);
    float* scores = reinterpret_cast<float*>(shared4);  // (s, s): the scores, then the weights
    float* row_max = scores + s * s;
    float* row_sum = row_max + s;
    T* qs = reinterpret_cast<T*>(row_sum + s);  // (s, pitch)
    T* ks = qs + s * pitch;                     // (s, pitch)
    T* vs = ks + s * pitch;                     // (s, d)

    const T* q_from = q + row * q_row + static_cast<long>(h) * q_head;
    const T* k_from = k + row * k_row + static_cast<long>(kv) * k_head;
    const T* v_from = v + row * v_row + static_cast<long>(kv) * v_head;
    for (int c = t; c < s * d; c += THREADS) {
        const int i = c / d, e = c - i * d;
        qs[i * pitch + e] = q_from[static_cast<long>(i) * q_token + e];
        ks[i * pitch + e] = k_from[static_cast<long>(i) * k_token + e];
        vs[c] = v_from[static_cast<long>(i) * v_token + e];
    }
    __syncthreads();

    for (int c = t; c < s * s; c += THREADS) {
        const int i = c / s, j = c - i * s;
        float dot = 0.0f;
        for (int e = 0; e < d; ++e) dot = fmaf(load(qs + i * pitch + e), load(ks + j * pitch + e), dot);
        scores[c] = as_stored(dot, q) * scale + mask[c];
    }
    __syncthreads();

    for (int i = t; i < s; i += THREADS) {
        float* own = scores + i * s;
        float top = own[0];
        for (int j = 1; j < s; ++j) top = fmaxf(top, own[j]);
        float sum = 0.0f;
        for (int j = 0; j < s; ++j) {
            const float w = expf(own[j] - top);
            sum += w;
            own[j] = as_stored(w, q);
        }
        row_max[i] = top;
        row_sum[i] = sum;
    }
    __syncthreads();

    const long stacked = (in_image * groups + g) * s;
    const float* lse_from = lse + image * lse_image + static_cast<long>(kv) * lse_head + stacked * lse_token;
    const T* prefix_from = prefix + image * prefix_image + static_cast<long>(kv) * prefix_head;
    for (int c = t; c < s * d; c += THREADS) {
        const int i = c / d, e = c - i * d;
        float acc = 0.0f;
        for (int j = 0; j < s; ++j) acc = fmaf(scores[i * s + j], load(vs + j * d + e), acc);
        const float own = as_stored(acc, q);
        const float from_prefix = load(prefix_from + (stacked + i) * prefix_token + e);
        const float prefix_lse = lse_from[static_cast<long>(i) * lse_token];
        const float top = fmaxf(prefix_lse, row_max[i]);
        const float wp = expf(prefix_lse - top), ws = expf(row_max[i] - top);
        store(result + ((row * s + i) * heads + h) * static_cast<long>(d) + e,
              (from_prefix * wp + own * ws) / (wp + row_sum[i] * ws));
    }
}

#define SUFFIX_ATTENTION(NAME, T)                                                                                  \
    extern "C" __global__ void __launch_bounds__(THREADS)                                                          \
        NAME(const T* q, const T* k, const T* v, const T* prefix, const float* lse, const float* mask, T* result,   \
             int s, int d, int heads, int groups, int rows_per_image, int q_row, int q_head, int q_token, int k_row, \
             int k_head, int k_token, int v_row, int v_head, int v_token, int prefix_image, int prefix_head,        \
             int prefix_token, int lse_image, int lse_head, int lse_token, float scale) {                          \
        suffix_attention(q, k, v, prefix, lse, mask, result, s, d, heads, groups, rows_per_image, q_row, q_head,   \
                         q_token, k_row, k_head, k_token, v_row, v_head, v_token, prefix_image, prefix_head,       \
                         prefix_token, lse_image, lse_head, lse_token, scale);                                     \
    }

SUFFIX_ATTENTION(suffix_attention_bf16, unsigned short)
SUFFIX_ATTENTION(suffix_attention_f32, float)
