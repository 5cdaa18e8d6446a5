// What each emulated kernel's translation unit gives the stand-in driver (fake_libcuda.cpp): a
// launch that checks the geometry its kernel was written for (block size, dynamic shared memory)
// and runs it on the CPU, returning a CUDA error code (0 on success, 1 for a launch it refuses).
// Each kernel is its own translation unit, so their macros never meet.
#pragma once

#include "cpu_emulation.h"

int emulate_delta_rule_across(dim3 grid, dim3 block, unsigned shared, void** params);
int emulate_delta_rule_within(dim3 grid, dim3 block, unsigned shared, void** params);
int emulate_linear_inputs_bf16(dim3 grid, dim3 block, unsigned shared, void** params);
int emulate_linear_inputs_f32(dim3 grid, dim3 block, unsigned shared, void** params);
int emulate_experts_count(dim3 grid, dim3 block, unsigned shared, void** params);
int emulate_experts_offsets(dim3 grid, dim3 block, unsigned shared, void** params);
int emulate_experts_place(dim3 grid, dim3 block, unsigned shared, void** params);
int emulate_experts_weighted_sum_bf16(dim3 grid, dim3 block, unsigned shared, void** params);
int emulate_experts_weighted_sum_f32(dim3 grid, dim3 block, unsigned shared, void** params);
int emulate_gated_activation_bf16(dim3 grid, dim3 block, unsigned shared, void** params);
int emulate_gated_activation_f32(dim3 grid, dim3 block, unsigned shared, void** params);
int emulate_gated_norm_bf16(dim3 grid, dim3 block, unsigned shared, void** params);
int emulate_gated_norm_f32(dim3 grid, dim3 block, unsigned shared, void** params);
int emulate_rms_norm_bf16(dim3 grid, dim3 block, unsigned shared, void** params);
int emulate_rms_norm_bf16_weight_f32(dim3 grid, dim3 block, unsigned shared, void** params);
int emulate_rms_norm_f32(dim3 grid, dim3 block, unsigned shared, void** params);
int emulate_router_top_k_bf16(dim3 grid, dim3 block, unsigned shared, void** params);
int emulate_router_top_k_f32(dim3 grid, dim3 block, unsigned shared, void** params);
int emulate_suffix_attention_bf16(dim3 grid, dim3 block, unsigned shared, void** params);
int emulate_suffix_attention_f32(dim3 grid, dim3 block, unsigned shared, void** params);

/// Kernel argument `i` of a launch's parameter array, as its type.
template <class T>
T launch_argument(void** params, int i) {
    return *static_cast<T*>(params[i]);
}
