// crates/vlm/src/cuda_kernels/gated_norm.cu on the CPU, for the stand-in driver.
#include "emulated_kernels.h"

#include "../../src/cuda_kernels/gated_norm.cu"

namespace {
template <class T, class Kernel>
int launch(dim3 grid, dim3 block, unsigned shared, void** params, Kernel kernel) {
    auto number = [&](int i) { return launch_argument<int>(params, i); };
    const int s = number(4), heads = number(5), dv = number(6);
    // One token of one row a block, and the shared memory its heads and norms take.
    if (grid.x != unsigned(s) || grid.z != 1 || block.x != THREADS || block.y != 1 || block.z != 1) return 1;
    if (shared != 4u * (heads * (dv + 1) + heads) || shared > sizeof(shared4)) return 1;
    emulate_launch(grid, block, [&] {
        kernel(launch_argument<const float*>(params, 0), launch_argument<const T*>(params, 1),
               launch_argument<const T*>(params, 2), launch_argument<T*>(params, 3), s, heads, dv, number(7), number(8),
               number(9), launch_argument<float>(params, 10));
    });
    return 0;
}
}  // namespace

int emulate_gated_norm_bf16(dim3 grid, dim3 block, unsigned shared, void** params) {
    return launch<unsigned short>(grid, block, shared, params, gated_norm_bf16);
}

int emulate_gated_norm_f32(dim3 grid, dim3 block, unsigned shared, void** params) {
    return launch<float>(grid, block, shared, params, gated_norm_f32);
}
