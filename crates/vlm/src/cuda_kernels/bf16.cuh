// bf16 as the kernels read and write it: the high half of an f32's bits, kept as an unsigned
// short (NVRTC's cuda_bf16.h is not needed, and the stand-in driver compiles the same code on a
// CPU). Rounding to nearest even, as libtorch's casts round.
#pragma once

__device__ inline float from_bf16(unsigned short x) {
    return __uint_as_float(static_cast<unsigned int>(x) << 16);
}
/// `x` rounded to bf16, as an f32.
__device__ inline float round_bf16(float x) {
    const unsigned int bits = __float_as_uint(x);
    if ((bits & 0x7f800000u) == 0x7f800000u) return x;  // inf and NaN as they are
    const unsigned int rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
    return __uint_as_float(rounded & 0xffff0000u);
}

// An element of the model's precision (bf16 or f32) read as an f32, and an f32 rounded as that
// precision stores it; the pointer's type says which.
__device__ inline float load(const unsigned short* p) { return from_bf16(*p); }
__device__ inline float load(const float* p) { return *p; }
__device__ inline float as_stored(float x, const unsigned short*) { return round_bf16(x); }
__device__ inline float as_stored(float x, const float*) { return x; }
__device__ inline void store(unsigned short* p, float x) { *p = static_cast<unsigned short>(__float_as_uint(round_bf16(x)) >> 16); }
__device__ inline void store(float* p, float x) { *p = x; }
