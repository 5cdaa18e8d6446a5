// A linear-attention layer's gated norm in one pass: the delta rule's f32 output cast to the
// model's precision, RMSNorm over each head with its weight, times SiLU of the gate. libtorch's
// form on a GPU is five kernels (the cast with the heads moved, the fused RMSNorm, the gate's
// cast, its SiLU, the product), three of them round trips of f32 tensors; this reads the output
// and the gate once and writes the result once.
//
// It computes what `GatedDeltaNet::gated_norm` in crates/vlm/src/families/qwen3_5/linear_attention.rs
// computes on a GPU, for one token of one row a block, rounding where libtorch rounds there:
//
//   x[h][e] = as_stored(out[h][e])                                  (the cast)
//   y[h][e] = as_stored(x[h][e] * rsqrt(mean over e of x[h]^2 + eps) * weight[e])
//   result  = as_stored(y[h][e] * SiLU(z[h][e]))                    (the gate in f32)
//
// Each head's sum of squares runs in one thread, its entries in order; no atomics: a token's
// result depends on nothing else in the pass.
//
// On trial like the other kernels here: the engine launches it where BPALS_CUDA_KERNELS names
// its cubins (crates/vlm/src/cuda_kernels/gated_norm.rs); the suite runs it on the CPU (crates/vlm/tests/kernels/).
//
// Layouts: out f32, the (row, token, head) element e at row * row_stride + token * token_stride
// + head * head_stride + e (the delta rule's output with its heads moved, as a view); z and the
// result (rows, s, heads, dv) contiguous, weight (dv), in the model's precision. Grid (s, rows),
// THREADS threads, 4 (heads (dv + 1) + heads) bytes of dynamic shared memory.

#define THREADS 256

#include "bf16.cuh"

template <class T>
__device__ void gated_norm(const float* out, const T* z, const T* weight, T* result, int s, int heads, int dv,
                           int row_stride, int token_stride, int head_stride, float eps) {
    extern __shared__ float4 shared4[];
    const int t = threadIdx.x, token = blockIdx.x;
    const long row = blockIdx.y;
    const int pitch = dv + 1;                       // a head's entries, padded so that a thread a head meets no bank twice
    float* x = reinterpret_cast<float*>(shared4);  // the token's heads, cast
    float* inverse_rms = x + heads * pitch;
    const float* from = out + row * row_stride + static_cast<long>(token) * token_stride;

    for (int c = t; c < heads * dv; c += THREADS) {
        const int h = c / dv, e = c - h * dv;
        x[h * pitch + e] = as_stored(from[static_cast<long>(h) * head_stride + e], z);
    }
    __syncthreads();
    for (int h = t; h < heads; h += THREADS) {
        float squares = 0.0f;
        for (int e = 0; e < dv; ++e) squares = fmaf(x[h * pitch + e], x[h * pitch + e], squares);
        inverse_rms[h] = rsqrtf(squares / dv + eps);
    }
    __syncthreads();
    const long first = (row * s + token) * heads * dv;
    for (int c = t; c < heads * dv; c += THREADS) {
        const int h = c / dv, e = c - h * dv;
        const float y = as_stored(x[h * pitch + e] * inverse_rms[h] * load(weight + e), z);
        const float gate = load(z + first + c);
        store(result + first + c, y * (gate / (1.0f + expf(-gate))));
    }
}

extern "C" __global__ void __launch_bounds__(THREADS) gated_norm_bf16(const float* out, const unsigned short* z,
                                                                      const unsigned short* weight, unsigned short* result,
                                                                      int s, int heads, int dv, int row_stride,
                                                                      int token_stride, int head_stride, float eps) {
    gated_norm(out, z, weight, result, s, heads, dv, row_stride, token_stride, head_stride, eps);
}

extern "C" __global__ void __launch_bounds__(THREADS) gated_norm_f32(const float* out, const float* z, const float* weight,
                                                                     float* result, int s, int heads, int dv, int row_stride,
                                                                     int token_stride, int head_stride, float eps) {
    gated_norm(out, z, weight, result, s, heads, dv, row_stride, token_stride, head_stride, eps);
}
