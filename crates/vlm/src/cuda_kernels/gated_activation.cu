// A gated MLP's activation in one pass: act(gate) times up, where act is SiLU (the Qwen models)
// or GELU with the tanh approximation (Gemma 4). libtorch's form is two kernels, the activation
// and the product, and the activation's result makes a round trip through memory; this reads the
// gate and up once and writes their product once. Every dense MLP of a decoder and every
// mixture of experts' grouped rows (between their two grouped products) goes through it.
//
// It computes what `GatedMlp::forward` in crates/vlm/src/layers.rs and `Experts::forward_by` in
// crates/vlm/src/moe.rs compute on a GPU, an element a thread, rounding where libtorch rounds there:
//
//   a   = as_stored(act(gate))        SiLU: g / (1 + exp(-g)); GELU: g/2 (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))
//   out = as_stored(a * up)
//
// An element's result depends on nothing else in the pass.
//
// On trial like the other kernels here: the engine launches it where BPALS_CUDA_KERNELS names
// its cubins (crates/vlm/src/cuda_kernels/gated_activation.rs); the suite runs it on the CPU
// (crates/vlm/tests/kernels/).
//
// Layouts, in the model's precision: gate and up (rows, width), each row's entries contiguous,
// rows gate_row and up_row apart (the two halves of one product's rows, or two products); out
// (rows, width), contiguous. Grid (width / THREADS rounded up, at most 65,535 groups of rows), a
// thread a column of every row of its group; no shared memory.

#define THREADS 256

#include "bf16.cuh"

__device__ inline float activation(float g, int gelu_tanh) {
    if (gelu_tanh) {
        const float inner = 0.7978845608028654f * (g + 0.044715f * g * g * g);
        return 0.5f * g * (1.0f + tanhf(inner));
    }
    return g / (1.0f + expf(-g));
}

template <class T>
__device__ void gated_activation(const T* gate, const T* up, T* out, int rows, int width, int gate_row, int up_row,
                                 int gelu_tanh) {
    const int e = blockIdx.x * THREADS + threadIdx.x;
    if (e >= width) return;
    for (long row = blockIdx.y; row < rows; row += gridDim.y) {
        const float a = as_stored(activation(load(gate + row * gate_row + e), gelu_tanh), out);
        store(out + row * width + e, a * load(up + row * up_row + e));
    }
}

extern "C" __global__ void __launch_bounds__(THREADS) gated_activation_bf16(const unsigned short* gate,
                                                                            const unsigned short* up,
                                                                            unsigned short* out, int rows, int width,
                                                                            int gate_row, int up_row, int gelu_tanh) {
    gated_activation(gate, up, out, rows, width, gate_row, up_row, gelu_tanh);
}

extern "C" __global__ void __launch_bounds__(THREADS) gated_activation_f32(const float* gate, const float* up, float* out,
                                                                           int rows, int width, int gate_row, int up_row,
                                                                           int gelu_tanh) {
    gated_activation(gate, up, out, rows, width, gate_row, up_row, gelu_tanh);
}
