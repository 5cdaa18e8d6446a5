// Runs a CUDA kernel's source on the CPU, so a test can hold it to a reference where no GPU is:
// each CUDA thread a fiber of its own stack on the calling thread, the grid's blocks one after
// another, __syncthreads a switch to the block's next thread (a round of the block's threads, in
// an order shuffled each round, runs each to its next barrier, so none passes one before all
// reach it), and __shared__ memory one buffer the block's threads share (the including file
// defines it).
// Fibers, not OS threads: a block of 256 threads costs 256 switches a barrier, not 256 threads
// made and scheduled, so a test takes the same time beside a busy build as alone. Warp-level
// operations are not emulated; the kernels it runs use none. The arithmetic is the CPU's (fmaf is
// a true fused multiply-add here too), so results match a GPU's to rounding, not to the bit.
#pragma once

#include <ucontext.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
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

static dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;

/// The block that runs: a context per thread, the scheduler's, and which thread has the CPU.
struct EmulatedBlock {
    ucontext_t scheduler;
    std::vector<ucontext_t> threads;
    std::vector<bool> finished;
    unsigned running = 0;
};
static EmulatedBlock* emulated_block = nullptr;

/// A thread's __syncthreads: back to the scheduler, which resumes it in the next round.
inline void emulated_syncthreads() {
    EmulatedBlock& block = *emulated_block;
    if (swapcontext(&block.threads[block.running], &block.scheduler) != 0) std::abort();
}

#define __global__
#define __device__
#define __shared__
#define __launch_bounds__(...)
#define __syncthreads() emulated_syncthreads()

// CUDA's intrinsics the kernels use, as the CPU has them.
inline float __uint_as_float(unsigned int x) { return std::bit_cast<float>(x); }
inline unsigned int __float_as_uint(float x) { return std::bit_cast<unsigned int>(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
using std::max;
using std::min;

/// Each emulated thread's stack: a kernel's locals are a few hundred floats at most.
constexpr size_t EMULATED_STACK_BYTES = 256 * 1024;

/// Runs `kernel` (a callable taking no arguments) over `grid` blocks of `block.x` threads.
template <class Kernel>
void emulate_launch(dim3 grid, dim3 block, Kernel kernel) {
    gridDim = grid;
    blockDim = block;
    // A thread's entry takes no arguments: it finds the kernel here, and says it is done.
    static Kernel* current;
    current = &kernel;
    auto entry = [] {
        (*current)();
        emulated_block->finished[emulated_block->running] = true;
    };
    const unsigned n = block.x;
    // Left uninitialised: only the pages a thread touches are ever made.
    std::unique_ptr<char[]> stacks(new char[n * EMULATED_STACK_BYTES]);
    EmulatedBlock state;
    emulated_block = &state;
    std::vector<unsigned> order(n);
    for (unsigned t = 0; t < n; ++t) order[t] = t;
    std::minstd_rand shuffle(20261130);
    for (unsigned y = 0; y < grid.y; ++y) {
        for (unsigned x = 0; x < grid.x; ++x) {
            blockIdx = {x, y, 0};
            state.threads.assign(n, ucontext_t{});
            state.finished.assign(n, false);
            for (unsigned t = 0; t < n; ++t) {
                ucontext_t& context = state.threads[t];
                if (getcontext(&context) != 0) std::abort();
                context.uc_stack.ss_sp = stacks.get() + size_t(t) * EMULATED_STACK_BYTES;
                context.uc_stack.ss_size = EMULATED_STACK_BYTES;
                context.uc_link = &state.scheduler;  // where a thread goes when its kernel returns
                makecontext(&context, static_cast<void (*)()>(entry), 0);
            }
            // Rounds: each unfinished thread runs to its next barrier or its end, in an order
            // shuffled each round (the same on every run). A kernel gives the same result in any
            // order unless a barrier is missing; then a thread that reads what another writes
            // reads it too early in some blocks, whichever of the two has the higher index.
            for (unsigned left = n; left > 0;) {
                std::shuffle(order.begin(), order.end(), shuffle);
                for (const unsigned t : order) {
                    if (state.finished[t]) continue;
                    state.running = t;
                    threadIdx = {t, 0, 0};
                    if (swapcontext(&state.scheduler, &state.threads[t]) != 0) std::abort();
                    left -= state.finished[t];
                }
            }
        }
    }
    emulated_block = nullptr;
}
