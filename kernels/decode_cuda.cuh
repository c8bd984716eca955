/* Device helpers shared by the CUDA readers (gather, attend): the exact e2m1 * d product and bf16
 * pair packing. Values equal the CPU twin's (kernels/gather_cpu.c): products in binary32, then
 * bf16 round-to-nearest-even. */
#ifndef NVFP4_MLA_DECODE_CUDA_CUH
#define NVFP4_MLA_DECODE_CUDA_CUH

#include <cuda_bf16.h>
#include <stdint.h>

/* Exact e2m1 * d for nibble `code`: twice the magnitudes {0,.5,1,1.5,2,3,4,6} are the integers
 * {0,1,2,3,4,6,8,12} (a nibble table in one word), times d/2 (exact: d >= 2^-9); the sign flips
 * the product, as e * d does (also for a corrupt negative d). */
static __device__ __forceinline__ float e2m1_times(uint32_t code, float half_d) {
    const float v = (float)((0xC8643210u >> (4 * (code & 7u))) & 0xFu) * half_d;
    return __uint_as_float(__float_as_uint(v) ^ ((code & 8u) << 28));
}

static __device__ __forceinline__ uint32_t bf16_pair(float lo, float hi) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    return *(const uint32_t *)&pair;
}

#endif
