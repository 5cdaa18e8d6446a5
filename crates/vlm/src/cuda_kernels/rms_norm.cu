// A decoder's RMSNorm over the hidden size in one pass: a row read, its mean square summed, the
// row normed, scaled and written once in the model's precision. libtorch's form on a GPU casts
// the row to f32, runs its fused RMSNorm in f32, scales, and casts back: four or five passes,
// three of them over f32 copies.
//
// It computes what `RmsNorm::forward` in crates/vlm/src/layers.rs computes, for one row a block,
// rounding where it rounds:
//
//   n[c]   = x[c] * rsqrt(mean over c of x^2 + eps)                   in f32
//   out[c] = as_stored(n[c] * weight[c])                              the weight in f32 (Qwen3.5's 1 + w)
//   out[c] = as_stored(weight[c] * as_stored(n[c]))                   the weight in the model's precision
//
// The sum of squares: each thread its columns in order, then the threads' sums in a fixed tree;
// no atomics, so a row's result depends on nothing else in the pass.
//
// On trial like the other kernels here: the engine launches it where BPALS_CUDA_KERNELS names
// its cubins (crates/vlm/src/cuda_kernels/rms_norm.rs); the suite runs it on the CPU (crates/vlm/tests/kernels/).
//
// Layouts, contiguous: x and out (rows, width), weight (width). Grid (rows), THREADS threads,
// 4 THREADS bytes of dynamic shared memory.

#define THREADS 256

#include "bf16.cuh"

// A normed value times its weight, rounded as `T` stores it: a weight in the model's precision
// scales the rounded norm, one in f32 the f32 norm.
template <class T, class W>
__device__ inline float scaled(float normed, const W* weight, const T* as) {
    return as_stored(load(weight) * as_stored(normed, as), as);
}
template <class T>
__device__ inline float scaled(float normed, const float* weight, const T* as) {
    return as_stored(normed * *weight, as);
}

template <class T, class W>
__device__ void rms_norm(const T* x, const W* weight, T* out, int width, float eps) {
    extern __shared__ float4 shared4[];
    float* sums = reinterpret_cast<float*>(shared4);
    const int t = threadIdx.x;
    const T* row = x + static_cast<long>(blockIdx.x) * width;
    float squares = 0.0f;
    for (int c = t; c < width; c += THREADS) {
        const float v = load(row + c);
        squares = fmaf(v, v, squares);
    }
    sums[t] = squares;
    __syncthreads();
    for (int half = THREADS / 2; half > 0; half /= 2) {
        if (t < half) sums[t] += sums[t + half];
        __syncthreads();
    }
    const float inverse_rms = rsqrtf(sums[0] / width + eps);
    T* to = out + static_cast<long>(blockIdx.x) * width;
    for (int c = t; c < width; c += THREADS) store(to + c, scaled(load(row + c) * inverse_rms, weight + c, row));
}

extern "C" __global__ void __launch_bounds__(THREADS) rms_norm_bf16(const unsigned short* x, const unsigned short* weight,
                                                                    unsigned short* out, int width, float eps) {
    rms_norm(x, weight, out, width, eps);
}

extern "C" __global__ void __launch_bounds__(THREADS) rms_norm_bf16_weight_f32(const unsigned short* x, const float* weight,
                                                                               unsigned short* out, int width, float eps) {
    rms_norm(x, weight, out, width, eps);
}

extern "C" __global__ void __launch_bounds__(THREADS) rms_norm_f32(const float* x, const float* weight, float* out, int width,
                                                                   float eps) {
    rms_norm(x, weight, out, width, eps);
}
