/* The gather reader on CUDA: records by slot to bf16 rows, values identical to kernels/gather_cpu.c.
 *
 * One thread per 16-byte chunk of output (8 bf16 values; a row is 72 chunks): a latent chunk reads
 * 4 payload bytes, its group's scale code and the outer scale; a RoPE chunk reads 8 codes and the
 * RoPE scale (368) or copies 16 bytes (432). E2M1 values come from a nibble table, products in
 * binary32 with the CPU twin's order, bf16 pairs from the hardware round-to-nearest-even conversion. Many small independent loads per SM keep the memory
 * system busy (kernel-notes.md: short records need many loads in flight). Slot -1, and any slot
 * outside [0, capacity) (which the plugin cannot check on the host without a sync), give zeros.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "codec.h"
#include "cuda_util.cuh"
#include "fp_codes.h"

#define CHUNKS_PER_ROW 72
#define ROWS_PER_BLOCK 4
#define THREADS (ROWS_PER_BLOCK * CHUNKS_PER_ROW)

/* Exact e2m1 * d for nibble `code`: twice the magnitudes {0,.5,1,1.5,2,3,4,6} are the integers
 * {0,1,2,3,4,6,8,12} (a nibble table in one word), times d/2 (exact: d >= 2^-9), with the sign. */
static __device__ __forceinline__ float e2m1_times(uint32_t code, float half_d) {
    const float v = (float)((0xC8643210u >> (4 * (code & 7u))) & 0xFu) * half_d;
    return __uint_as_float(__float_as_uint(v) ^ ((code & 8u) << 28)); /* a sign flip, as e * d gives */
}

__global__ void __launch_bounds__(THREADS) nvfp4_gather_kernel(nvfp4_mla_gather_kernel_args_t a) {
    /* A block is ROWS_PER_BLOCK rows of 72 chunks: 32-bit index arithmetic with constant divisors. */
    const int64_t n = (int64_t)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / CHUNKS_PER_ROW;
    const int chunk = (int)(threadIdx.x % CHUNKS_PER_ROW);
    if (n >= a.num_rows) {
        return;
    }
    uint4 *out = (uint4 *)(a.out + n * a.out_row_stride) + chunk;
    const int64_t slot = a.slots[n * a.slot_stride];
    if (slot < 0 || slot >= a.capacity) {
        *out = make_uint4(0, 0, 0, 0);
        return;
    }
    /* capacity < 2^31: 32-bit block arithmetic (64-bit division is slow on GPUs). */
    const uint32_t slot32 = (uint32_t)slot, bs = (uint32_t)a.block_size, block = slot32 / bs;
    const uint8_t *rec = a.cache + (int64_t)block * a.block_stride + (int64_t)(slot32 - block * bs) * a.record_bytes;
    uint4 packed;
    uint32_t *words = (uint32_t *)&packed;
    if (chunk < 64) {
        const float outer = a.per_token ? __ldg((const float *)(rec + NVFP4_REC_TOKEN_SCALE_OFF)) : a.outer_scale;
        const float half_d = 0.5f * nvfp4_e4m3_decode(__ldg(rec + NVFP4_REC_GROUP_SCALE_OFF + chunk / 2));
        const uint32_t codes = __ldg((const uint32_t *)(rec + 4 * chunk));
#pragma unroll
        for (int i = 0; i < 4; i++) {
            /* (e2m1 * d) * outer in binary32, then bf16 round-to-nearest-even: the CPU twin's order. */
            const float lo = nvfp4_mul_rn(e2m1_times(codes >> (8 * i), half_d), outer);
            const float hi = nvfp4_mul_rn(e2m1_times(codes >> (8 * i + 4), half_d), outer);
            const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
            words[i] = *(const uint32_t *)&pair;
        }
    } else if (a.record_bytes == NVFP4_MLA_RECORD_BYTES_368) {
        const float r = __ldg((const float *)(rec + NVFP4_REC_ROPE_SCALE_OFF));
        const uint2 codes = __ldg((const uint2 *)(rec + NVFP4_REC_ROPE_OFF + 8 * (chunk - 64)));
        const uint8_t *c = (const uint8_t *)&codes;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const __nv_bfloat162 pair = __floats2bfloat162_rn(nvfp4_mul_rn(nvfp4_e4m3_decode(c[2 * i]), r),
                                                              nvfp4_mul_rn(nvfp4_e4m3_decode(c[2 * i + 1]), r));
            words[i] = *(const uint32_t *)&pair;
        }
    } else {
        packed = __ldg((const uint4 *)(rec + NVFP4_REC_ROPE_OFF + 16 * (chunk - 64)));
    }
    *out = packed;
}

extern "C" void nvfp4_mla_gather_cuda(const nvfp4_mla_gather_kernel_args_t *args, nvfp4_mla_kernel_result_t *result) {
    if (args->num_rows == 0) {
        nvfp4_cuda_result(result, cudaSuccess, "gather");
        return;
    }
    nvfp4_device_guard guard(args->device_index);
    if (guard.error != cudaSuccess) {
        nvfp4_cuda_result(result, guard.error, "gather: selecting the context's device");
        return;
    }
    const int64_t blocks = (args->num_rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    if (blocks > INT32_MAX) {
        result->status = NVFP4_MLA_ERR_INVALID_ARGUMENT;
        snprintf(result->message, sizeof result->message, "gather: %lld rows exceed one launch",
                 (long long)args->num_rows);
        return;
    }
    nvfp4_gather_kernel<<<(unsigned)blocks, THREADS, 0, (cudaStream_t)args->stream>>>(*args);
    nvfp4_cuda_result(result, cudaGetLastError(), "gather: kernel launch");
}
