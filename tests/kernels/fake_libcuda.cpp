// A stand-in for the CUDA driver (libcuda.so.1) on a machine without a GPU, so the suite runs
// the engine's launch path (src/vlm/cuda_kernels.rs) end to end: the entry points it calls, a
// GPU of compute capability 9.0, a "cubin" that is any file starting FAKE-CUBIN, and a launch
// that runs the kernel's own source on the CPU (cpu_emulation.h), on host memory, checking the
// geometry the kernel was written for. Built by the test that uses it.
#include "cpu_emulation.h"

#include <cstring>

extern "C" {
alignas(16) float4 shared4[(128 * 64 + 64 * 64 + 128 * 68) / 4 + 1024];
}

#include "../../benches/kernels/delta_rule_across.cu"

static_assert(sizeof(shared4) >= SHARED_BYTES, "the emulated shared memory holds the kernel's");

static int function_marker, context_marker, module_marker;
static int max_dynamic_shared = 48 * 1024;  // the driver's default for a function
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
    if (module != &module_marker || std::strcmp(name, "delta_rule_across") != 0) return 500;  // CUDA_ERROR_NOT_FOUND
    *function = &function_marker;
    return 0;
}
int cuFuncSetAttribute(void* function, int attribute, int value) {
    if (function != &function_marker) return 400;
    if (attribute == 8) max_dynamic_shared = value;
    return 0;
}
int cuLaunchKernel(void* function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void* stream, void** params, void** extra) {
    if (function != &function_marker || stream != nullptr || extra != nullptr) return 1;
    // The geometry the kernel was written for; more shared memory than allowed is refused, as by the driver.
    if (gz != 1 || bx != THREADS || by != 1 || bz != 1 || shared != SHARED_BYTES || int(shared) > max_dynamic_shared) return 1;
    auto tensor = [&](int i) { return *static_cast<float**>(params[i]); };
    auto number = [&](int i) { return *static_cast<int*>(params[i]); };
    emulate_launch({gx, gy, 1}, {bx, 1, 1}, [&] {
        delta_rule_across(tensor(0), tensor(1), tensor(2), tensor(3), tensor(4), tensor(5), tensor(6), tensor(7), number(8),
                          number(9), number(10));
    });
    ++launches;
    return 0;
}
int cuGetErrorString(int code, const char** text) {
    *text = code == 200 ? "CUDA_ERROR_INVALID_IMAGE, from the stand-in driver" : "an error of the stand-in driver";
    return 0;
}
// Not the driver's: how many kernels ran, for the test.
int standin_launches() { return launches; }
}
