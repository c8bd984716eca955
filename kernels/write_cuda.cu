/* The record writer on CUDA: byte-identical to kernels/write_cpu.c for every input.
 *
 * One warp per token: lane g owns latent group g (16 values, two 16-byte loads) and RoPE values
 * 2g, 2g+1. The per-token amax and the RoPE amax are warp reductions; every arithmetic step is the
 * one of kernels/fp_codes.h (shared with the CPU twin) with __fmul_rn/__frcp_rn, so nothing is
 * contracted into an FMA (-fmad=false as well). Hopper has no E2M1 conversion instruction: the
 * threshold encoder is used everywhere. The record is assembled in shared memory and stored as 16-byte
 * words (368 = 23 x 16, 432 = 27 x 16). Tested byte-for-byte against the CPU writer in
 * tests/test_gpu_codec.c, under compute-sanitizer too.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "codec.h"
#include "cuda_util.cuh"
#include "fp_codes.h"

#define WARPS_PER_BLOCK 8

static __device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, offset));
    }
    return v;
}

static __device__ __forceinline__ float load_input(uint16_t bits, int is_f16) {
    return is_f16 ? nvfp4_f16_to_f32(bits) : nvfp4_bf16_to_f32(bits);
}

static __device__ __forceinline__ float finite_abs(float v) {
    float a = nvfp4_abs(v);
    return nvfp4_is_finite(a) ? a : 0.0f;
}

__global__ void __launch_bounds__(WARPS_PER_BLOCK * 32) nvfp4_write_kernel(nvfp4_mla_write_kernel_args_t a) {
    __shared__ __align__(16) uint8_t staging[WARPS_PER_BLOCK][432];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t t = (int64_t)blockIdx.x * WARPS_PER_BLOCK + warp;
    if (t >= a.num_tokens) {
        return;
    }
    const int64_t slot = a.slot_mapping[t * a.slot_stride];
    if (slot < 0 || slot >= a.capacity) {
        return; /* padding token or past the cache: write nothing */
    }
    uint8_t *rec = staging[warp];

    /* Load this lane's group (16 values) and its two RoPE values. */
    const uint16_t *row = (const uint16_t *)a.kv_c + t * a.kv_c_row_stride + lane * NVFP4_GROUP_SIZE;
    uint4 raw[2] = {((const uint4 *)row)[0], ((const uint4 *)row)[1]};
    const uint16_t *bits = (const uint16_t *)raw;
    float x[NVFP4_GROUP_SIZE];
    float amax = 0.0f;
    uint32_t nonfinite = 0;
    for (int i = 0; i < NVFP4_GROUP_SIZE; i++) {
        x[i] = load_input(bits[i], a.input_is_f16);
        amax = fmaxf(amax, finite_abs(x[i]));
        nonfinite += !nvfp4_is_finite(x[i]);
    }
    const uint32_t rope_pair = ((const uint32_t *)((const uint16_t *)a.k_pe + t * a.k_pe_row_stride))[lane];
    float rope[2] = {load_input((uint16_t)(rope_pair & 0xFFFF), a.input_is_f16),
                     load_input((uint16_t)(rope_pair >> 16), a.input_is_f16)};
    nonfinite += !nvfp4_is_finite(rope[0]) + !nvfp4_is_finite(rope[1]);

    /* Step 1: outer scale. */
    const float token_amax = warp_max(amax);
    float inv = 1.0f, s_t = 0.0f;
    bool zero_token = false;
    if (a.per_token) {
        s_t = nvfp4_mul_rn(token_amax, NVFP4_K2688);
        zero_token = s_t < NVFP4_FLT_MIN;
        if (!zero_token) {
            inv = nvfp4_rcp_rn(s_t);
        }
    } else if (a.outer_scale != 1.0f) {
        inv = nvfp4_rcp_rn(a.outer_scale);
    }

    /* Steps 2-4: this lane's group. */
    uint32_t payload[2] = {0, 0};
    uint8_t code = 0;
    if (!zero_token) {
        float y[NVFP4_GROUP_SIZE];
        float group_amax = 0.0f;
        for (int i = 0; i < NVFP4_GROUP_SIZE; i++) {
            y[i] = nvfp4_mul_rn(x[i], inv);
            group_amax = fmaxf(group_amax, finite_abs(y[i]));
        }
        code = (uint8_t)nvfp4_e4m3_magnitude_code(nvfp4_mul_rn(group_amax, NVFP4_K6));
        const float d = nvfp4_e4m3_decode(code);
        if (d != 0.0f) {
            for (int i = 0; i < NVFP4_GROUP_SIZE; i++) {
                payload[i >> 3] |= (uint32_t)nvfp4_e2m1_encode(y[i], d) << (4 * (i & 7));
            }
        }
    }
    ((uint2 *)rec)[lane] = make_uint2(payload[0], payload[1]);
    rec[NVFP4_REC_GROUP_SCALE_OFF + lane] = code;

    /* Step 5: RoPE. */
    if (a.record_bytes == NVFP4_MLA_RECORD_BYTES_368) {
        const float r = nvfp4_mul_rn(warp_max(fmaxf(finite_abs(rope[0]), finite_abs(rope[1]))), NVFP4_K448);
        uint8_t c0 = 0, c1 = 0;
        if (!(r < NVFP4_FLT_MIN)) {
            const float inv_r = nvfp4_rcp_rn(r);
            c0 = nvfp4_e4m3_encode(nvfp4_mul_rn(rope[0], inv_r));
            c1 = nvfp4_e4m3_encode(nvfp4_mul_rn(rope[1], inv_r));
        }
        if (lane < 4) { /* [288,304): RoPE scale, s_t (0 when static or a zero token), zeros */
            const float words[4] = {r < NVFP4_FLT_MIN ? 0.0f : r, zero_token ? 0.0f : s_t, 0.0f, 0.0f};
            ((float *)(rec + NVFP4_REC_ROPE_SCALE_OFF))[lane] = words[lane];
        }
        ((uint16_t *)(rec + NVFP4_REC_ROPE_OFF))[lane] = (uint16_t)(c0 | (c1 << 8));
    } else {
        uint32_t pair = rope_pair;
        if (a.input_is_f16) {
            pair = nvfp4_f32_to_bf16(rope[0]) | ((uint32_t)nvfp4_f32_to_bf16(rope[1]) << 16);
        }
        if (lane < 4) {
            ((uint32_t *)(rec + NVFP4_REC_ROPE_SCALE_OFF))[lane] = 0; /* [288,304) */
        }
        ((uint32_t *)(rec + NVFP4_REC_ROPE_OFF))[lane] = pair;
    }
    __syncwarp();

    uint8_t *dst = a.cache + (slot / a.block_size) * a.block_stride + (slot % a.block_size) * a.record_bytes;
    const int words = a.record_bytes / 16;
    if (lane < words) {
        ((uint4 *)dst)[lane] = ((const uint4 *)rec)[lane];
    }

    if (a.capture_max_abs && lane == 0 && token_amax > 0.0f) {
        atomicMax((int *)a.capture_max_abs, __float_as_int(token_amax)); /* non-negative floats order as ints */
    }
    if (a.nonfinite_count) {
        for (int offset = 16; offset > 0; offset >>= 1) {
            nonfinite += __shfl_xor_sync(0xFFFFFFFFu, nonfinite, offset);
        }
        if (lane == 0 && nonfinite) {
            atomicAdd((unsigned long long *)a.nonfinite_count, (unsigned long long)nonfinite);
        }
    }
}

extern "C" void nvfp4_mla_write_cuda(const nvfp4_mla_write_kernel_args_t *args, nvfp4_mla_kernel_result_t *result) {
    if (args->num_tokens == 0) {
        nvfp4_cuda_result(result, cudaSuccess, "write");
        return;
    }
    nvfp4_device_guard guard(args->device_index);
    if (guard.error != cudaSuccess) {
        nvfp4_cuda_result(result, guard.error, "write: selecting the context's device");
        return;
    }
    const int64_t blocks = (args->num_tokens + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK;
    if (blocks > INT32_MAX) {
        result->status = NVFP4_MLA_ERR_INVALID_ARGUMENT;
        snprintf(result->message, sizeof result->message, "write: %lld tokens exceed one launch",
                 (long long)args->num_tokens);
        return;
    }
    nvfp4_write_kernel<<<(unsigned)blocks, WARPS_PER_BLOCK * 32, 0, (cudaStream_t)args->stream>>>(*args);
    nvfp4_cuda_result(result, cudaGetLastError(), "write: kernel launch");
}
