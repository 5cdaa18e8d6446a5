// Runs a CUDA kernel's source on the CPU, so a test can hold it to a reference where no GPU is:
// one std::thread per CUDA thread, the grid's blocks one after another, __syncthreads as a
// barrier among a block's threads, and __shared__ memory one buffer those threads share (the
// including file defines it). Warp-level operations are not emulated; the kernels it runs use
// none. The arithmetic is the CPU's (fmaf is a true fused multiply-add here too), so results
// match a GPU's to rounding, not to the bit.
#pragma once

#include <algorithm>
#include <barrier>
#include <bit>
#include <cmath>
#include <thread>
#include <vector>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
struct alignas(16) float4 {
    float x, y, z, w;
};

// Everything below is a translation unit's own (static): a kernel and its launch share one unit,
// and no two units, nor two stand-in libraries loaded in one process (tests running side by
// side), may share a barrier or shared memory. (`inline` variables would be unique process-wide.)

/// The emulated shared memory, one buffer for the block that runs: the kernel's block-scope
/// `extern __shared__ float4 shared4[]` takes this declaration's internal linkage.
constexpr unsigned EMULATED_SHARED_BYTES = 96 * 1024;
static float4 shared4[EMULATED_SHARED_BYTES / sizeof(float4)];

static thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;
static std::barrier<>* emulated_block_barrier = nullptr;

#define __global__
#define __device__
#define __shared__
#define __launch_bounds__(...)
#define __syncthreads() emulated_block_barrier->arrive_and_wait()

// CUDA's intrinsics the kernels use, as the CPU has them.
inline float __uint_as_float(unsigned int x) { return std::bit_cast<float>(x); }
inline unsigned int __float_as_uint(float x) { return std::bit_cast<unsigned int>(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
using std::max;
using std::min;

/// Runs `kernel` (a callable taking no arguments) over `grid` blocks of `block.x` threads.
template <class Kernel>
void emulate_launch(dim3 grid, dim3 block, Kernel kernel) {
    gridDim = grid;
    blockDim = block;
    for (unsigned y = 0; y < grid.y; ++y) {
        for (unsigned x = 0; x < grid.x; ++x) {
            std::barrier<> barrier(block.x);
            emulated_block_barrier = &barrier;
            std::vector<std::thread> threads;
            for (unsigned t = 0; t < block.x; ++t) {
                threads.emplace_back([&, t] {
                    threadIdx = {t, 0, 0};
                    blockIdx = {x, y, 0};
                    kernel();
                });
            }
            for (auto& thread : threads) thread.join();
        }
    }
}
