// A stand-in for the CUDA driver (libcuda.so.1) on a machine without a GPU, so the suite runs
// the engine's launch path (crates/vlm/src/cuda_kernels/) end to end: the entry points it calls, a
// GPU of compute capability 9.0, a "cubin" that is any file starting FAKE-CUBIN, and a launch
// that runs the kernel's own source on the CPU (cpu_emulation.h; each kernel's translation unit
// beside this one checks the geometry it was written for), on host memory. Built by the test
// that uses it, from this file and those units.
#include <cstring>

#include "emulated_kernels.h"

/// The kernels a fake cubin holds, by name: a CUfunction is a pointer to one of these.
struct EmulatedKernel {
    const char* name;
    int (*launch)(dim3, dim3, unsigned, void**);
    int max_dynamic_shared;  // the driver's default for a function, until raised
};
static EmulatedKernel kernels[] = {
    {"delta_rule_across", emulate_delta_rule_across, 48 * 1024},
    {"delta_rule_within", emulate_delta_rule_within, 48 * 1024},
    {"linear_inputs_bf16", emulate_linear_inputs_bf16, 48 * 1024},
    {"linear_inputs_f32", emulate_linear_inputs_f32, 48 * 1024},
    {"experts_count", emulate_experts_count, 48 * 1024},
    {"experts_offsets", emulate_experts_offsets, 48 * 1024},
    {"experts_place", emulate_experts_place, 48 * 1024},
    {"experts_weighted_sum_bf16", emulate_experts_weighted_sum_bf16, 48 * 1024},
    {"experts_weighted_sum_f32", emulate_experts_weighted_sum_f32, 48 * 1024},
    {"gated_activation_bf16", emulate_gated_activation_bf16, 48 * 1024},
    {"gated_activation_f32", emulate_gated_activation_f32, 48 * 1024},
    {"gated_norm_bf16", emulate_gated_norm_bf16, 48 * 1024},
    {"gated_norm_f32", emulate_gated_norm_f32, 48 * 1024},
    {"rms_norm_bf16", emulate_rms_norm_bf16, 48 * 1024},
    {"rms_norm_bf16_weight_f32", emulate_rms_norm_bf16_weight_f32, 48 * 1024},
    {"rms_norm_f32", emulate_rms_norm_f32, 48 * 1024},
    {"router_top_k_bf16", emulate_router_top_k_bf16, 48 * 1024},
    {"router_top_k_f32", emulate_router_top_k_f32, 48 * 1024},
    {"suffix_attention_bf16", emulate_suffix_attention_bf16, 48 * 1024},
    {"suffix_attention_f32", emulate_suffix_attention_f32, 48 * 1024},
};

static int context_marker, module_marker;
static int launches = 0;

extern "C" {
int cuInit(unsigned) { return 0; }
int cuDeviceGet(int* device, int ordinal) {
    *device = ordinal;
    return ordinal == 0 ? 0 : 101;  // CUDA_ERROR_INVALID_DEVICE
}
int cuDeviceGetAttribute(int* value, int attribute, int) {
    if (attribute != 75 && attribute != 76) return 1;
    *value = attribute == 75 ? 9 : 0;
    return 0;
}
int cuCtxGetCurrent(void** context) {
    *context = nullptr;  // none current on this thread: the caller makes the primary one current
    return 0;
}
int cuDevicePrimaryCtxRetain(void** context, int) {
    *context = &context_marker;
    return 0;
}
int cuCtxSetCurrent(void* context) { return context == &context_marker ? 0 : 201; }
int cuModuleLoadData(void** module, const void* image) {
    if (std::memcmp(image, "FAKE-CUBIN", 10) != 0) return 200;  // CUDA_ERROR_INVALID_IMAGE
    *module = &module_marker;
    return 0;
}
int cuModuleGetFunction(void** function, void* module, const char* name) {
    if (module != &module_marker) return 400;  // CUDA_ERROR_INVALID_HANDLE
    for (auto& kernel : kernels) {
        if (std::strcmp(name, kernel.name) == 0) {
            *function = &kernel;
            return 0;
        }
    }
    return 500;  // CUDA_ERROR_NOT_FOUND
}
static EmulatedKernel* kernel_of(void* function) {
    for (auto& kernel : kernels) {
        if (function == &kernel) return &kernel;
    }
    return nullptr;
}
int cuFuncSetAttribute(void* function, int attribute, int value) {
    EmulatedKernel* kernel = kernel_of(function);
    if (kernel == nullptr) return 400;
    if (attribute == 8) kernel->max_dynamic_shared = value;
    return 0;
}
int cuLaunchKernel(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void* stream, void** params, void** extra) {
    EmulatedKernel* kernel = kernel_of(function);
    if (kernel == nullptr || stream != nullptr || extra != nullptr) return 1;
    if (int(shared) > kernel->max_dynamic_shared) return 1;  // more shared memory than allowed, as the driver refuses it
    const int code = kernel->launch({gx, gy, gz}, {bx, by, bz}, shared, params);
    launches += code == 0;
    return code;
}
int cuGetErrorString(int code, const char** text) {
    *text = code == 200 ? "CUDA_ERROR_INVALID_IMAGE, from the stand-in driver" : "an error of the stand-in driver";
    return 0;
}
// Not the driver's: how many kernels ran, for the test.
int standin_launches() { return launches; }
}
