/* Device helpers shared by the CUDA readers (gather, attend): the exact e2m1 * d product, bf16
 * pair packing, and attention's bit-move dequantisation into bf16 MMA operands. Values equal the CPU twin's
 * (kernels/codec/gather_cpu.c): products in binary32, then bf16 round-to-nearest-even. */
#ifndef NVFP4_MLA_DECODE_CUDA_CUH
#define NVFP4_MLA_DECODE_CUDA_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
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

/* ---- attention: bf16 operands for the tensor cores ---- */

static __device__ __forceinline__ __nv_bfloat162 as_bf162(uint32_t w) {
    return *reinterpret_cast<const __nv_bfloat162 *>(&w);
}
static __device__ __forceinline__ uint32_t as_u32(__nv_bfloat162 v) {
    return *reinterpret_cast<const uint32_t *>(&v);
}

/* Two E4M3 codes (low byte first) to floats, exactly (every E4M3 value is an f16 value). */
static __device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t two_codes) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(two_codes & 0xFFFFu), __NV_E4M3);
    return __half22float2(__half2(h));
}

/* Eight E4M3 codes (bytes of lo, hi) times a binary32 scale, rounded to bf16 like the CPU decoder;
 * `interleave` gives the latent order (0,4),(1,5),(2,6),(3,7), else natural pairs (RoPE). */
static __device__ __forceinline__ uint4 e4m3x8_scaled(uint32_t lo, uint32_t hi, float scale, bool interleave) {
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const uint32_t two = interleave ? __byte_perm(lo, hi, (uint32_t)(k | ((4 + k) << 4)))
                                        : (k < 2 ? lo : hi) >> (16 * (k & 1));
        const float2 f = e4m3x2_to_float2(two);
        w[k] = bf16_pair(__fmul_rn(f.x, scale), __fmul_rn(f.y, scale));
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

#endif
