// crates/vlm/src/cuda_kernels/suffix_attention.cu on the CPU, for the stand-in driver.
#include "emulated_kernels.h"

#include "../../src/cuda_kernels/suffix_attention.cu"

namespace {
template <class T, class Kernel>
int launch(dim3 grid, dim3 block, unsigned shared, void** params, Kernel kernel) {
    auto number = [&](int i) { return launch_argument<int>(params, i); };
    const int s = number(7), d = number(8), heads = number(9);
    // A query head of a question a block, and the shared memory its scores, queries, keys and
    // values take (a staged row of queries or keys padded by one 4-byte word).
    const unsigned staged = sizeof(T) * (2 * s * (d + 4 / sizeof(T)) + s * d);
    if (grid.x != unsigned(heads) || grid.z != 1 || block.x != THREADS || block.y != 1 || block.z != 1) return 1;
    if (shared != 4u * (s * s + 2 * s) + staged || shared > sizeof(shared4)) return 1;
    emulate_launch(grid, block, [&] {
        kernel(launch_argument<const T*>(params, 0), launch_argument<const T*>(params, 1),
               launch_argument<const T*>(params, 2), launch_argument<const T*>(params, 3),
               launch_argument<const float*>(params, 4), launch_argument<const float*>(params, 5),
               launch_argument<T*>(params, 6), s, d, heads, number(10), number(11), number(12), number(13), number(14),
               number(15), number(16), number(17), number(18), number(19), number(20), number(21), number(22),
               number(23), number(24), number(25), number(26), launch_argument<float>(params, 27));
    });
    return 0;
}
}  // namespace

int emulate_suffix_attention_bf16(dim3 grid, dim3 block, unsigned shared, void** params) {
    return launch<unsigned short>(grid, block, shared, params, suffix_attention_bf16);
}

int emulate_suffix_attention_f32(dim3 grid, dim3 block, unsigned shared, void** params) {
    return launch<float>(grid, block, shared, params, suffix_attention_f32);
}
