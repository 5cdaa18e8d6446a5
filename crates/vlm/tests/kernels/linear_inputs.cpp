// crates/vlm/src/cuda_kernels/linear_inputs.cu on the CPU, for the stand-in driver.
#include "emulated_kernels.h"

#include "../../src/cuda_kernels/linear_inputs.cu"

namespace {
template <class T, class Kernel>
int launch(dim3 grid, dim3 block, unsigned shared, void** params, Kernel kernel) {
    auto number = [&](int i) { return launch_argument<int>(params, i); };
    const int key_heads = number(7), value_heads = number(8), dk = number(9), dv = number(10);
    const unsigned channels = 2 * key_heads * dk + value_heads * dv;
    // One token of one row a block, and the shared memory its channels and norms take.
    if (grid.x != unsigned(number(6)) || grid.z != 1 || block.x != THREADS || block.y != 1 || block.z != 1) return 1;
    if (shared != 4 * (channels + 2 * key_heads) || shared > sizeof(shared4) || value_heads % key_heads != 0) return 1;
    emulate_launch(grid, block, [&] {
        kernel(launch_argument<const T*>(params, 0), launch_argument<const T*>(params, 1), launch_argument<const T*>(params, 2),
               launch_argument<float*>(params, 3), launch_argument<float*>(params, 4), launch_argument<float*>(params, 5),
               number(6), key_heads, value_heads, dk, dv, number(11), launch_argument<float>(params, 12));
    });
    return 0;
}
}  // namespace

int emulate_linear_inputs_bf16(dim3 grid, dim3 block, unsigned shared, void** params) {
    return launch<unsigned short>(grid, block, shared, params, linear_inputs_bf16);
}

int emulate_linear_inputs_f32(dim3 grid, dim3 block, unsigned shared, void** params) {
    return launch<float>(grid, block, shared, params, linear_inputs_f32);
}
