// crates/vlm/src/cuda_kernels/delta_rule_across.cu on the CPU, for the stand-in driver.
#include "emulated_kernels.h"

#include "../../src/cuda_kernels/delta_rule_across.cu"

static_assert(sizeof(shared4) >= SHARED_BYTES, "the emulated shared memory holds the kernel's");

int emulate_delta_rule_across(dim3 grid, dim3 block, unsigned shared, void** params) {
    if (grid.z != 1 || block.x != THREADS || block.y != 1 || block.z != 1 || shared != SHARED_BYTES) return 1;
    auto tensor = [&](int i) { return launch_argument<float*>(params, i); };
    auto number = [&](int i) { return launch_argument<int>(params, i); };
    emulate_launch(grid, block, [&] {
        delta_rule_across(tensor(0), tensor(1), tensor(2), tensor(3), tensor(4), tensor(5), tensor(6), tensor(7), number(8),
                          number(9), number(10));
    });
    return 0;
}
