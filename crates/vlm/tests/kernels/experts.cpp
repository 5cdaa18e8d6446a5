// crates/vlm/src/cuda_kernels/experts.cu on the CPU, for the stand-in driver.
#include "emulated_kernels.h"

#include "../../src/cuda_kernels/experts.cu"

namespace {
int number(void** params, int i) { return launch_argument<int>(params, i); }
bool threads_a_block(dim3 grid, dim3 block) {
    return grid.y == 1 && grid.z == 1 && block.x == THREADS && block.y == 1 && block.z == 1;
}
unsigned tiles_of(int assignments) { return (assignments + TILE - 1) / TILE; }
}  // namespace

int emulate_experts_count(dim3 grid, dim3 block, unsigned shared, void** params) {
    const int assignments = number(params, 2);
    if (!threads_a_block(grid, block) || grid.x != tiles_of(assignments) || shared != 4 * TILE) return 1;
    emulate_launch(grid, block, [&] {
        experts_count(launch_argument<const long long*>(params, 0), launch_argument<int*>(params, 1), assignments,
                      number(params, 3));
    });
    return 0;
}

int emulate_experts_offsets(dim3 grid, dim3 block, unsigned shared, void** params) {
    const int experts = number(params, 4);
    if (!threads_a_block(grid, block) || grid.x != 1 || shared != 8u * experts || shared > sizeof(shared4)) return 1;
    emulate_launch(grid, block, [&] {
        experts_offsets(launch_argument<int*>(params, 0), launch_argument<int*>(params, 1), launch_argument<int*>(params, 2),
                        number(params, 3), experts, number(params, 5));
    });
    return 0;
}

int emulate_experts_place(dim3 grid, dim3 block, unsigned shared, void** params) {
    const int assignments = number(params, 7), experts = number(params, 8);
    if (!threads_a_block(grid, block) || grid.x != tiles_of(assignments) + experts || shared != 8 * TILE) return 1;
    emulate_launch(grid, block, [&] {
        experts_place(launch_argument<const long long*>(params, 0), launch_argument<const int*>(params, 1),
                      launch_argument<const int*>(params, 2), launch_argument<const int*>(params, 3),
                      launch_argument<const float4*>(params, 4), launch_argument<float4*>(params, 5),
                      launch_argument<long long*>(params, 6), assignments, experts, number(params, 9), number(params, 10),
                      number(params, 11), number(params, 12));
    });
    return 0;
}

namespace {
template <class T, class Kernel>
int launch_weighted_sum(dim3 grid, dim3 block, unsigned shared, void** params, Kernel kernel) {
    if (!threads_a_block(grid, block) || shared != 0) return 1;
    emulate_launch(grid, block, [&] {
        kernel(launch_argument<const T*>(params, 0), launch_argument<const long long*>(params, 1),
               launch_argument<const T*>(params, 2), launch_argument<T*>(params, 3), number(params, 4), number(params, 5));
    });
    return 0;
}
}  // namespace

int emulate_experts_weighted_sum_bf16(dim3 grid, dim3 block, unsigned shared, void** params) {
    return launch_weighted_sum<unsigned short>(grid, block, shared, params, experts_weighted_sum_bf16);
}

int emulate_experts_weighted_sum_f32(dim3 grid, dim3 block, unsigned shared, void** params) {
    return launch_weighted_sum<float>(grid, block, shared, params, experts_weighted_sum_f32);
}
