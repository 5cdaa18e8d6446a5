// crates/vlm/src/cuda_kernels/rms_norm.cu on the CPU, for the stand-in driver.
#include "emulated_kernels.h"

#include "../../src/cuda_kernels/rms_norm.cu"

namespace {
template <class T, class W, class Kernel>
int launch(dim3 grid, dim3 block, unsigned shared, void** params, Kernel kernel) {
    // A row a block, and a float a thread for the sum's tree.
    if (grid.y != 1 || grid.z != 1 || block.x != THREADS || block.y != 1 || block.z != 1 || shared != 4 * THREADS) return 1;
    emulate_launch(grid, block, [&] {
        kernel(launch_argument<const T*>(params, 0), launch_argument<const W*>(params, 1), launch_argument<T*>(params, 2),
               launch_argument<int>(params, 3), launch_argument<float>(params, 4));
    });
    return 0;
}
}  // namespace

int emulate_rms_norm_bf16(dim3 grid, dim3 block, unsigned shared, void** params) {
    return launch<unsigned short, unsigned short>(grid, block, shared, params, rms_norm_bf16);
}

int emulate_rms_norm_bf16_weight_f32(dim3 grid, dim3 block, unsigned shared, void** params) {
    return launch<unsigned short, float>(grid, block, shared, params, rms_norm_bf16_weight_f32);
}

int emulate_rms_norm_f32(dim3 grid, dim3 block, unsigned shared, void** params) {
    return launch<float, float>(grid, block, shared, params, rms_norm_f32);
}
