// crates/vlm/src/cuda_kernels/router.cu on the CPU, for the stand-in driver.
#include "emulated_kernels.h"

#include "../../src/cuda_kernels/router.cu"

namespace {
template <class T, class Kernel>
int launch(dim3 grid, dim3 block, unsigned shared, void** params, Kernel kernel) {
    auto number = [&](int i) { return launch_argument<int>(params, i); };
    const int tokens = number(3);
    // A thread a token, in whole blocks; no shared memory.
    if (grid.x != unsigned((tokens + THREADS - 1) / THREADS) || grid.y != 1 || grid.z != 1) return 1;
    if (block.x != THREADS || block.y != 1 || block.z != 1 || shared != 0) return 1;
    emulate_launch(grid, block, [&] {
        kernel(launch_argument<const T*>(params, 0), launch_argument<T*>(params, 1), launch_argument<long long*>(params, 2), tokens,
               number(4), number(5), number(6));
    });
    return 0;
}
}  // namespace

int emulate_router_top_k_bf16(dim3 grid, dim3 block, unsigned shared, void** params) {
    return launch<unsigned short>(grid, block, shared, params, router_top_k_bf16);
}

int emulate_router_top_k_f32(dim3 grid, dim3 block, unsigned shared, void** params) {
    return launch<float>(grid, block, shared, params, router_top_k_f32);
}
