// A linear-attention layer's inputs to the delta rule in one pass: the causal depthwise
// convolution over the projected queries, keys and values, its SiLU, the queries' and keys' L2
// norms (the queries scaled), each key head repeated for the value heads it serves, and all of
// it in f32 in the delta rule's layout. libtorch's form concatenates the previous inputs, runs
// cuDNN's convolution and a SiLU, copies each part to f32 with its heads moved, normalises and
// repeats: some ten passes over the layer's activations where one reads them and one writes.
//
// It computes what `GatedDeltaNet::mix` in crates/vlm/src/families/qwen3_5/linear_attention.rs computes
// on a GPU between its projections and its delta rule, for one token of one row a block:
//
//   x[c]  = SiLU(sum over j < K of weight[c][j] * input[token + j][c])      (input = previous, then mixed)
//   q[h'] = x[q head h] / |x[q head h]| * q_scale,  k[h'] = x[k head h] / |x[k head h]|,  for h' / (vh / kh) = h
//   v[h]  = x[v head h]
//
// the norm as libtorch's fused RMSNorm takes it there: x rsqrt(mean(x^2) + 1e-6 / d) / sqrt(d).
// In the bf16 kernel the convolution's sum and the SiLU round to bf16 as libtorch's do before the
// copy to f32. Every sum runs in a fixed order (the taps, then a head's entries, upward), with no
// atomics: a token's result depends on nothing else in the pass.
//
// On trial like the delta-rule kernels: the engine launches it where BPALS_CUDA_KERNELS names its
// cubins (crates/vlm/src/cuda_kernels/linear_inputs.rs); the suite runs it on the CPU (crates/vlm/tests/kernels/).
//
// Layouts, contiguous: mixed (rows, s, C) and previous (rows, C, K - 1) in the model's precision,
// weight (C, K) likewise, with C = 2 kh dk + vh dv channels (queries, keys, values); out q, k
// (rows, vh, s, dk) and v (rows, vh, s, dv), f32. Grid (s, rows), THREADS threads, C + 2 kh
// floats of dynamic shared memory.

#define THREADS 256
#define EPS 1e-6f  // the FLA kernels' epsilon on the sum of squares

#include "bf16.cuh"

template <class T>
__device__ void linear_inputs(const T* mixed, const T* previous, const T* weight, float* q, float* k, float* v, int s,
                              int key_heads, int value_heads, int dk, int dv, int taps, float q_scale) {
    extern __shared__ float4 shared4[];
    const int t = threadIdx.x, token = blockIdx.x;
    const long row = blockIdx.y;
    const int channels = 2 * key_heads * dk + value_heads * dv, keep = taps - 1;
    float* x = reinterpret_cast<float*>(shared4);  // the token's channels after the convolution
    float* inverse_norm = x + channels;            // a query or key head's 1 / |x|, scaled

    for (int c = t; c < channels; c += THREADS) {
        float sum = 0.0f;
        for (int j = 0; j < taps; ++j) {
            const int at = token + j;  // in the previous inputs, then this call's
            const float input = at < keep ? load(previous + (row * channels + c) * keep + at)
                                          : load(mixed + (row * s + at - keep) * channels + c);
            sum = fmaf(load(weight + (long)c * taps + j), input, sum);
        }
        const float y = as_stored(sum, mixed);
        x[c] = as_stored(y / (1.0f + expf(-y)), mixed);
    }
    __syncthreads();
    if (t < 2 * key_heads) {
        const float* head = x + t * dk;
        float squares = 0.0f;
        for (int e = 0; e < dk; ++e) squares = fmaf(head[e], head[e], squares);
        const float scale = (t < key_heads ? q_scale : 1.0f) / sqrtf(static_cast<float>(dk));
        inverse_norm[t] = rsqrtf(squares / dk + EPS / dk) * scale;
    }
    __syncthreads();

    const int repeat = value_heads / key_heads;
    for (int c = t; c < 2 * key_heads * dk; c += THREADS) {
        const int h = c / dk, e = c % dk;
        float* out = h < key_heads ? q : k;
        const int key_head = h % key_heads;
        const float y = x[c] * inverse_norm[h];
        for (int r = 0; r < repeat; ++r) {
            out[((row * value_heads + key_head * repeat + r) * s + token) * dk + e] = y;
        }
    }
    for (int c = t; c < value_heads * dv; c += THREADS) {
        const int h = c / dv, e = c % dv;
        v[((row * value_heads + h) * s + token) * dv + e] = x[2 * key_heads * dk + c];
    }
}

extern "C" __global__ void linear_inputs_bf16(const unsigned short* mixed, const unsigned short* previous,
                                              const unsigned short* weight, float* q, float* k, float* v, int s,
                                              int key_heads, int value_heads, int dk, int dv, int taps, float q_scale) {
    linear_inputs(mixed, previous, weight, q, k, v, s, key_heads, value_heads, dk, dv, taps, q_scale);
}

extern "C" __global__ void linear_inputs_f32(const float* mixed, const float* previous, const float* weight, float* q,
                                             float* k, float* v, int s, int key_heads, int value_heads, int dk, int dv,
                                             int taps, float q_scale) {
    linear_inputs(mixed, previous, weight, q, k, v, s, key_heads, value_heads, dk, dv, taps, q_scale);
}
