// crates/vlm/src/cuda_kernels/gated_activation.cu on the CPU, for the stand-in driver.
#include "emulated_kernels.h"

#include "../../src/cuda_kernels/gated_activation.cu"

namespace {
template <class T, class Kernel>
int launch(dim3 grid, dim3 block, unsigned shared, void** params, Kernel kernel) {
    auto number = [&](int i) { return launch_argument<int>(params, i); };
    const int width = number(4);
    // A column a thread, the columns' blocks across x, and no shared memory.
    if (grid.x != unsigned((width + THREADS - 1) / THREADS) || grid.z != 1 || block.x != THREADS || block.y != 1 ||
        block.z != 1 || shared != 0)
        return 1;
    emulate_launch(grid, block, [&] {
        kernel(launch_argument<const T*>(params, 0), launch_argument<const T*>(params, 1), launch_argument<T*>(params, 2),
               number(3), width, number(5), number(6), number(7));
    });
    return 0;
}
}  // namespace

int emulate_gated_activation_bf16(dim3 grid, dim3 block, unsigned shared, void** params) {
    return launch<unsigned short>(grid, block, shared, params, gated_activation_bf16);
}

int emulate_gated_activation_f32(dim3 grid, dim3 block, unsigned shared, void** params) {
    return launch<float>(grid, block, shared, params, gated_activation_f32);
}
