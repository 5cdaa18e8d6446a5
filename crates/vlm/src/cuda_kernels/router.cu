// A Qwen mixture of experts' router after its linear layer, in one launch: each token's softmax
// over the experts in f32, its k most probable experts (most probable first), and their
// probabilities, renormalised to sum to one where the model asks, in the model's precision.
// libtorch's form is a softmax, a top-k, a sum, a division and a cast, over a pass's rows.
//
// It computes what `SparseMoe::forward` in crates/vlm/src/moe.rs computes for the router, a thread a
// token:
//
//   chosen[i] = the expert of the i-th largest logit; of equal ones the lower expert first
//   p[e]      = exp(logit[e] - max) / sum over e' of exp(logit[e'] - max)      in f32, in order
//   weight[i] = as_stored(p[chosen[i]] / sum over i' < k of p[chosen[i']])  (or p itself)
//
// The softmax keeps the logits' order, so the k largest logits are the k most probable experts
// (libtorch chooses by probability: two logits can round to one probability only far below the
// top k's). The choice keeps no list of the experts taken: the i-th is the largest below the
// (i-1)-th in the order (logit descending, expert ascending), and reads no exponential. Every
// sum runs in order; no atomics: a token's experts and weights depend on its own logits alone.
//
// On trial like the other kernels here: the engine launches it where BPALS_CUDA_KERNELS names
// its cubins (crates/vlm/src/cuda_kernels/router.rs); the suite runs it on the CPU (crates/vlm/tests/kernels/).
//
// Layouts, contiguous: logits (tokens, experts) and weights (tokens, k) in the model's
// precision, chosen (tokens, k) int64. Grid (tokens / THREADS, rounded up), no shared memory.

#define THREADS 256

#include "bf16.cuh"

template <class T>
__device__ void router_top_k(const T* logits, T* weights, long long* chosen, int tokens, int experts, int k,
                             int renormalize) {
    const long token = static_cast<long>(blockIdx.x) * THREADS + threadIdx.x;
    if (token >= tokens) return;
    const T* row = logits + token * experts;
    float top = load(row);
    for (int e = 1; e < experts; ++e) top = fmaxf(top, load(row + e));
    float sum = 0.0f;
    for (int e = 0; e < experts; ++e) sum += expf(load(row + e) - top);

    float last_logit = 0.0f, kept = 0.0f;
    int last = -1;  // the expert chosen before; none yet
    for (int i = 0; i < k; ++i) {
        int best = 0;
        float best_logit = 0.0f;
        bool found = false;
        for (int e = 0; e < experts; ++e) {
            const float logit = load(row + e);
            const bool after_last = last < 0 || logit < last_logit || (logit == last_logit && e > last);
            if (after_last && (!found || logit > best_logit)) {
                best = e;
                best_logit = logit;
                found = true;
            }
        }
        chosen[token * k + i] = best;
        kept += expf(best_logit - top) / sum;
        last = best;
        last_logit = best_logit;
    }
    for (int i = 0; i < k; ++i) {
        const float p = expf(load(row + chosen[token * k + i]) - top) / sum;
        store(weights + token * k + i, renormalize ? p / kept : p);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS) router_top_k_bf16(const unsigned short* logits, unsigned short* weights,
                                                                        long long* chosen, int tokens, int experts, int k,
                                                                        int renormalize) {
    router_top_k(logits, weights, chosen, tokens, experts, k, renormalize);
}

extern "C" __global__ void __launch_bounds__(THREADS) router_top_k_f32(const float* logits, float* weights, long long* chosen,
                                                                       int tokens, int experts, int k, int renormalize) {
    router_top_k(logits, weights, chosen, tokens, experts, k, renormalize);
}
