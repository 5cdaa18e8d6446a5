// crates/vlm/src/cuda_kernels/delta_rule_within.cu on the CPU, for the stand-in driver.
#include "emulated_kernels.h"

#include "../../src/cuda_kernels/delta_rule_within.cu"

static_assert(sizeof(shared4) >= SHARED_BYTES, "the emulated shared memory holds the kernel's");

int emulate_delta_rule_within(dim3 grid, dim3 block, unsigned shared, void** params) {
    if (grid.y != 1 || grid.z != 1 || block.x != THREADS || block.y != 1 || block.z != 1 || shared != SHARED_BYTES) return 1;
    auto tensor = [&](int i) { return launch_argument<float*>(params, i); };
    auto number = [&](int i) { return launch_argument<int>(params, i); };
    const int chunk = number(11);
    if (chunk <= 0 || chunk > MAX_CHUNK || chunk % 8 != 0 || number(12) % KEY_DIM != 0) return 1;
    emulate_launch(grid, block, [&] {
        delta_rule_within(tensor(0), tensor(1), tensor(2), tensor(3), tensor(4), tensor(5), tensor(6), tensor(7), tensor(8),
                          tensor(9), tensor(10), chunk, number(12), number(13));
    });
    return 0;
}
