/* The record writer on CUDA: byte-identical to kernels/codec/write_cpu.c for every input (tested
 * byte for byte for every policy in tests/test_gpu_codec.c, under compute-sanitizer too).
 *
 * One warp per token: lane g owns latent group g (16 values, two 16-byte loads) and RoPE values
 * 2g, 2g+1; the per-token and RoPE amax are warp reductions. Every arithmetic step is one of
 * kernels/fp_codes.h (shared with the CPU twin) with __fmul_rn/__frcp_rn, so nothing is contracted
 * into an FMA (-fmad=false as well). Hopper has no E2M1 conversion instruction: the threshold
 * encoder (three comparisons) runs everywhere; E4M3 codes come from the hardware round-to-nearest-
 * even saturating conversion, which equals the spec's E4M3_RN_SATFINITE on finite input. A token
 * with any NaN/Inf input takes the general path (encode_group<POLICY, false>), which filters them
 * out of every maximum and counts them; the warp decides together, so the branch is uniform. The
 * record is assembled in shared memory and stored as 16-byte words. The writer policy is a template
 * parameter: `mse` picks each group's scale code with write_policy.h's functions, which the CPU
 * writer compiles too (its c6/c4 come from the hardware conversion on the all-finite path, which
 * equals nvfp4_e4m3_magnitude_code there). A slot >= capacity writes nothing and is counted in the
 * optional out_of_range_count (abi/nvfp4_mla_ops.h; the CPU refuses such a call instead).
 */
#include <cuda_fp8.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backends.h"
#include "cuda_util.cuh"
#include "fp_codes.h"
#include "write_policy.h"

#define WARPS_PER_BLOCK 8
/* Blocks per SM the register budget is cut for: rtn's tuned 5 (48 registers); 3 for the mse
 * candidates' search, which spills at fewer (docs/performance-notes.md, MIN_BLOCKS). */
#define MIN_BLOCKS(policy) ((policy) == NVFP4_MLA_WRITER_POLICY_RTN ? 5 : 3)
#define FULL 0xFFFFFFFFu

static __device__ __forceinline__ float warp_max(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(FULL, v, offset));
    }
    return v;
}

static __device__ __forceinline__ float finite_abs(float v) {
    float a = nvfp4_abs(v);
    return nvfp4_is_finite(a) ? a : 0.0f;
}

/* E4M3_RN_SATFINITE of a finite value (hardware cvt.rn.satfinite.e4m3x2.f32 on sm_89+). */
static __device__ __forceinline__ uint8_t e4m3_finite(float v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    return (uint8_t)__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
#else
    return nvfp4_e4m3_encode(v);
#endif
}

/* E2M1 code of a finite y against the group's seven exact thresholds t[k] = m_k * d (docs/record-format.md
 * step 4): the same three-comparison search as nvfp4_e2m1_encode, with the products made once per
 * group instead of per element (the all-finite path: no NaN test needed). */
static __device__ __forceinline__ uint32_t e2m1_finite(float y, const float *t) {
    const float a = fabsf(y);
    const bool upper = a >= t[3];                         /* >= 1.75 d */
    const bool mid = a >= (upper ? t[5] : t[1]);          /* >= 3.5 d or >= 0.75 d */
    const float strict = upper ? (mid ? t[6] : t[4]) : (mid ? t[2] : t[0]);
    const uint32_t index = (upper ? 4u : 0u) | (mid ? 2u : 0u) | (a > strict ? 1u : 0u);
    return index | ((__float_as_uint(y) >> 28) & 8u);
}

/* The E4M3 magnitude code of a non-negative value: the hardware conversion when the value is known
 * finite, else the spec's encoder (which equals it on finite input). */
template <bool FINITE>
static __device__ __forceinline__ uint32_t e4m3_magnitude(float v) {
    if constexpr (FINITE) {
        return e4m3_finite(v);
    } else {
        return nvfp4_e4m3_magnitude_code(v);
    }
}

/* Steps 2-4 for this lane's group. FINITE (the common case, the token's inputs all finite): plain
 * |y| maxima (a free operand modifier), hardware E4M3, thresholds made once, and the general case
 * when x * inv overflows; the mse candidates' squared errors then need no finiteness test
 * (all_finite = 1). Otherwise (general) every maximum leaves NaN/Inf out (spec step 3).
 * POLICY: NVFP4_MLA_WRITER_POLICY_* (write_policy.h picks the mse code, as the CPU writer does). */
template <int POLICY, bool FINITE>
static __device__ __forceinline__ uint8_t encode_group(const float *x, float inv, uint32_t *payload) {
    float y[NVFP4_MLA_GROUP_SIZE];
    float group_amax = 0.0f;
#pragma unroll
    for (int i = 0; i < NVFP4_MLA_GROUP_SIZE; i++) {
        y[i] = nvfp4_mul_rn(x[i], inv);
        group_amax = fmaxf(group_amax, FINITE ? fabsf(y[i]) : finite_abs(y[i]));
    }
    if constexpr (FINITE) {
        if (!nvfp4_is_finite(group_amax)) {
            return encode_group<POLICY, false>(x, inv, payload);
        }
    }
    uint8_t code = (uint8_t)e4m3_magnitude<FINITE>(nvfp4_mul_rn(group_amax, NVFP4_K6));
    if (POLICY == NVFP4_MLA_WRITER_POLICY_MSE) {
        code = (uint8_t)nvfp4_mse_group_code(y, code, e4m3_magnitude<FINITE>(nvfp4_mul_rn(group_amax, NVFP4_K4)),
                                             FINITE ? 1 : 0);
    }
    const float d = nvfp4_e4m3_decode(code);
    payload[0] = payload[1] = 0;
    if (d != 0.0f) {
        if constexpr (FINITE) {
            const float t[7] = {nvfp4_mul_rn(0.25f, d), nvfp4_mul_rn(0.75f, d), nvfp4_mul_rn(1.25f, d),
                                nvfp4_mul_rn(1.75f, d), nvfp4_mul_rn(2.5f, d),  nvfp4_mul_rn(3.5f, d),
                                nvfp4_mul_rn(5.0f, d)};
#pragma unroll
            for (int i = 0; i < NVFP4_MLA_GROUP_SIZE; i++) payload[i >> 3] |= e2m1_finite(y[i], t) << (4 * (i & 7));
        } else {
#pragma unroll
            for (int i = 0; i < NVFP4_MLA_GROUP_SIZE; i++) {
                payload[i >> 3] |= (uint32_t)nvfp4_e2m1_encode(y[i], d) << (4 * (i & 7));
            }
        }
    }
    return code;
}

/* This lane's inputs of token t: latent group `lane` (16 values, two 16-byte loads) and RoPE values
 * 2 lane, 2 lane + 1 (`rope_pair` keeps their input bits), converted exactly to f32. */
static __device__ __forceinline__ void load_lane(const nvfp4_mla_write_kernel_args_t &a, int64_t t, int lane,
                                                 float *x, float *rope, uint32_t &rope_pair) {
    const uint16_t *row = (const uint16_t *)a.kv_c + t * a.kv_c_row_stride + lane * NVFP4_MLA_GROUP_SIZE;
    const uint4 raw[2] = {((const uint4 *)row)[0], ((const uint4 *)row)[1]};
    const uint32_t *pairs = (const uint32_t *)raw;
    rope_pair = ((const uint32_t *)((const uint16_t *)a.k_pe + t * a.k_pe_row_stride))[lane];
    if (a.input_is_f16) {
#pragma unroll
        for (int i = 0; i < NVFP4_MLA_GROUP_SIZE; i++)
            x[i] = nvfp4_f16_to_f32((uint16_t)(pairs[i >> 1] >> (16 * (i & 1))));
        rope[0] = nvfp4_f16_to_f32((uint16_t)rope_pair);
        rope[1] = nvfp4_f16_to_f32((uint16_t)(rope_pair >> 16));
    } else {
#pragma unroll
        for (int i = 0; i < NVFP4_MLA_GROUP_SIZE; i++)
            x[i] = __uint_as_float((i & 1) ? pairs[i >> 1] & 0xFFFF0000u : pairs[i >> 1] << 16);
        rope[0] = __uint_as_float(rope_pair << 16);
        rope[1] = __uint_as_float(rope_pair & 0xFFFF0000u);
    }
}

/* Whether the whole token is finite (a warp vote), this lane's latent |x| maximum over its finite
 * values, and (when not all finite) its count of NaN/Inf inputs. */
static __device__ __forceinline__ bool lane_amax(const float *x, const float *rope, float &amax, uint32_t &nonfinite) {
    /* x * 0 is NaN exactly for NaN/Inf x: one FMA per value detects a non-finite input. */
    float probe = fmaf(rope[0], 0.0f, rope[1] * 0.0f);
    amax = 0.0f;
#pragma unroll
    for (int i = 0; i < NVFP4_MLA_GROUP_SIZE; i++) {
        amax = fmaxf(amax, fabsf(x[i]));
        probe = fmaf(x[i], 0.0f, probe);
    }
    const bool all_finite = __all_sync(FULL, probe == 0.0f);
    nonfinite = 0;
    if (!all_finite) {
        amax = 0.0f;
#pragma unroll
        for (int i = 0; i < NVFP4_MLA_GROUP_SIZE; i++) {
            amax = fmaxf(amax, finite_abs(x[i]));
            nonfinite += !nvfp4_is_finite(x[i]);
        }
        nonfinite += !nvfp4_is_finite(rope[0]) + !nvfp4_is_finite(rope[1]);
    }
    return all_finite;
}

/* Step 5 of the 368 layout: the RoPE scale and codes, and the [288,304) words (RoPE scale, s_t:
 * 0 when static or a zero token, zeros). */
static __device__ __forceinline__ void rope_368(const float *rope, bool all_finite, bool zero_token, float s_t,
                                                int lane, uint8_t *rec) {
    const float rope_amax = all_finite ? fmaxf(fabsf(rope[0]), fabsf(rope[1]))
                                       : fmaxf(finite_abs(rope[0]), finite_abs(rope[1]));
    const float r = nvfp4_mul_rn(warp_max(rope_amax), NVFP4_K448);
    uint32_t codes = 0;
    if (!(r < NVFP4_FLT_MIN)) {
        const float inv_r = nvfp4_rcp_rn(r);
        const float q0 = nvfp4_mul_rn(rope[0], inv_r), q1 = nvfp4_mul_rn(rope[1], inv_r);
        codes = all_finite ? e4m3_finite(q0) | ((uint32_t)e4m3_finite(q1) << 8)
                           : nvfp4_e4m3_encode(q0) | ((uint32_t)nvfp4_e4m3_encode(q1) << 8);
    }
    if (lane < 4) {
        const float word = lane == 0 ? (r < NVFP4_FLT_MIN ? 0.0f : r) : lane == 1 ? (zero_token ? 0.0f : s_t) : 0.0f;
        ((float *)(rec + NVFP4_MLA_RECORD_ROPE_SCALE_OFFSET))[lane] = word;
    }
    ((uint16_t *)(rec + NVFP4_MLA_RECORD_ROPE_OFFSET))[lane] = (uint16_t)codes;
}

/* The 432 layout: [288,304) zero, the RoPE copied as bf16 (converted from fp16 input). */
static __device__ __forceinline__ void rope_432(bool input_is_f16, const float *rope, uint32_t rope_pair, int lane,
                                                uint8_t *rec) {
    uint32_t pair = rope_pair;
    if (input_is_f16) {
        pair = nvfp4_f32_to_bf16(rope[0]) | ((uint32_t)nvfp4_f32_to_bf16(rope[1]) << 16);
    }
    if (lane < 4) {
        ((uint32_t *)(rec + NVFP4_MLA_RECORD_ROPE_SCALE_OFFSET))[lane] = 0;
    }
    ((uint32_t *)(rec + NVFP4_MLA_RECORD_ROPE_OFFSET))[lane] = pair;
}

/* The staged record to its slot in 16-byte words (368 = 23 x 16, 432 = 27 x 16). */
static __device__ __forceinline__ void store_record(const nvfp4_mla_write_kernel_args_t &a, int64_t slot, int lane,
                                                    const uint8_t *rec) {
    /* capacity < 2^31, so the block arithmetic fits 32 bits (64-bit division is slow on GPUs). */
    const uint32_t slot32 = (uint32_t)slot, bs = (uint32_t)a.block_size, block = slot32 / bs;
    uint8_t *dst = a.cache + (int64_t)block * a.block_stride + (int64_t)(slot32 - block * bs) * a.record_bytes;
    if (lane < a.record_bytes / 16) {
        ((uint4 *)dst)[lane] = ((const uint4 *)rec)[lane];
    }
}

/* The optional capture (max |latent|) and non-finite counter. */
static __device__ __forceinline__ void count_token(const nvfp4_mla_write_kernel_args_t &a, float token_amax,
                                                   bool all_finite, uint32_t nonfinite, int lane) {
    if (a.capture_max_abs && lane == 0 && token_amax > 0.0f) {
        atomicMax((int *)a.capture_max_abs, __float_as_int(token_amax)); /* non-negative floats order as ints */
    }
    if (a.nonfinite_count && !all_finite) {
        for (int offset = 16; offset > 0; offset >>= 1) {
            nonfinite += __shfl_xor_sync(FULL, nonfinite, offset);
        }
        if (lane == 0) {
            atomicAdd((unsigned long long *)a.nonfinite_count, (unsigned long long)nonfinite);
        }
    }
}

/* One kernel per writer policy (a template parameter): the rtn kernel's code is the one the policy
 * work started from, and neither pays for the other's branch. */
template <int POLICY>
__global__ void __launch_bounds__(WARPS_PER_BLOCK * 32, MIN_BLOCKS(POLICY))
    nvfp4_write_kernel(nvfp4_mla_write_kernel_args_t a) {
    __shared__ __align__(16) uint8_t staging[WARPS_PER_BLOCK][432];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t t = (int64_t)blockIdx.x * WARPS_PER_BLOCK + warp;
    if (t >= a.num_tokens) {
        return;
    }
    const int64_t slot = a.slot_mapping[t * a.slot_stride];
    if (slot < 0 || slot >= a.capacity) {
        /* Padding (< 0): nothing written. Past the cache: a host bug the launcher cannot see without
         * a sync, so the token is dropped and counted for the host to read (out_of_range_count). */
        if (slot >= a.capacity && a.out_of_range_count && (threadIdx.x & 31) == 0) {
            atomicAdd((unsigned long long *)a.out_of_range_count, 1ull);
        }
        return;
    }
    uint8_t *rec = staging[warp];
    float x[NVFP4_MLA_GROUP_SIZE], rope[2], amax;
    uint32_t rope_pair, nonfinite;
    load_lane(a, t, lane, x, rope, rope_pair);
    const bool all_finite = lane_amax(x, rope, amax, nonfinite);

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
        code = all_finite ? encode_group<POLICY, true>(x, inv, payload) : encode_group<POLICY, false>(x, inv, payload);
    }
    ((uint2 *)rec)[lane] = make_uint2(payload[0], payload[1]);
    rec[NVFP4_MLA_RECORD_GROUP_SCALE_OFFSET + lane] = code;

    /* Step 5: RoPE. */
    if (a.record_bytes == NVFP4_MLA_RECORD_BYTES_368) {
        rope_368(rope, all_finite, zero_token, s_t, lane, rec);
    } else {
        rope_432(a.input_is_f16, rope, rope_pair, lane, rec);
    }
    __syncwarp();
    store_record(a, slot, lane, rec);
    count_token(a, token_amax, all_finite, nonfinite, lane);
}

extern "C" void nvfp4_mla_write_cuda(const nvfp4_mla_write_kernel_args_t *args, nvfp4_mla_kernel_result_t *result) {
    if (args->num_tokens == 0) {
        nvfp4_cuda_result(result, cudaSuccess, "write");
        return;
    }
    nvfp4_device_guard guard(args->device_index);
    const int64_t blocks = (args->num_tokens + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK;
    if (!nvfp4_cuda_guard_ok(guard, result, "write") ||
        !nvfp4_cuda_grid_fits(blocks, result, "write", args->num_tokens, "tokens")) {
        return;
    }
    if (args->writer_policy == NVFP4_MLA_WRITER_POLICY_MSE) {
        nvfp4_write_kernel<NVFP4_MLA_WRITER_POLICY_MSE>
            <<<(unsigned)blocks, WARPS_PER_BLOCK * 32, 0, (cudaStream_t)args->stream>>>(*args);
    } else {
        nvfp4_write_kernel<NVFP4_MLA_WRITER_POLICY_RTN>
            <<<(unsigned)blocks, WARPS_PER_BLOCK * 32, 0, (cudaStream_t)args->stream>>>(*args);
    }
    nvfp4_cuda_result(result, cudaGetLastError(), "write: kernel launch");
}
