/* The merge of partial attentions on CUDA, checked against kernels/merge/merge_cpu.c
 * (tests/test_gpu_merge.c).
 *
 * One warp per (query, head): every lane reads the row's P lse values (a broadcast: P is a group
 * size, a handful), takes their maximum, then sums w_p * out_p over the non-empty parts for its 16
 * of the 512 columns in f32 and writes them as bf16. The same arithmetic as attend's split-K merge
 * (kernels/attend/lib/attend_split_merge.cuh), in natural log because the partials come from the host: expf(lse_p - m)
 * (every weight in (0, 1], one exactly 1), the sum's reciprocal once per row, lse = m + logf(sum).
 * Columns are spread so that a warp's loads are contiguous: lane l reads columns 4 (32 i + l) .. +3
 * with one 16-byte (f32) or 8-byte (bf16) load each when every partial row, and out, are aligned for
 * it (decided on the host from the pointers and strides, no device query); otherwise columns
 * 32 i + l with scalar loads, so any element-aligned strides work. Differences from the CPU twin
 * (double): f32 weights and sums, expf/logf; the gpu suite's bound is in nvfp4_mla_ops.h.
 * A NaN or +inf lse (which the CPU entry refuses, and this launch cannot read on the host) makes
 * that row's out and lse NaN rather than silently dropping or favouring the part.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "backends.h"
#include "cuda_util.cuh"
#include "fp_codes.h"

#define MERGE_WARPS 4

/* VEC consecutive columns of a partial row, as f32. */
template <typename T, int VEC> struct merge_load;
template <> struct merge_load<float, 4> {
    static __device__ __forceinline__ void get(const float *p, float *v) {
        const float4 x = __ldg((const float4 *)p);
        v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
    }
};
template <> struct merge_load<uint16_t, 4> {
    static __device__ __forceinline__ void get(const uint16_t *p, float *v) {
        const uint2 x = __ldg((const uint2 *)p);
        v[0] = __uint_as_float(x.x << 16), v[1] = __uint_as_float(x.x & 0xFFFF0000u);
        v[2] = __uint_as_float(x.y << 16), v[3] = __uint_as_float(x.y & 0xFFFF0000u);
    }
};
template <> struct merge_load<float, 1> {
    static __device__ __forceinline__ void get(const float *p, float *v) { v[0] = __ldg(p); }
};
template <> struct merge_load<uint16_t, 1> {
    static __device__ __forceinline__ void get(const uint16_t *p, float *v) {
        v[0] = __uint_as_float((uint32_t)__ldg(p) << 16);
    }
};

/* The row's largest lse over its non-empty parts; *bad when one is NaN or +inf. */
static __device__ __forceinline__ float merge_max(const nvfp4_mla_merge_kernel_args_t &a, const float *lse, bool *bad) {
    float m = -INFINITY;
    for (int64_t p = 0; p < a.num_parts; p++) {
        const float l = __ldg(lse + p * a.pl_stride_part);
        *bad |= isnan(l) || l == INFINITY;
        m = fmaxf(m, l);
    }
    return m;
}

template <typename T, int VEC>
__global__ void __launch_bounds__(MERGE_WARPS * 32) nvfp4_merge_kernel(const nvfp4_mla_merge_kernel_args_t a) {
    constexpr int STEPS = 512 / (32 * VEC);
    const int64_t row = (int64_t)blockIdx.x * MERGE_WARPS + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= a.num_queries * a.num_heads) return;
    const int64_t qi = row / a.num_heads, head = row % a.num_heads;
    const float *lse = a.partial_lse + qi * a.pl_stride_token + head * a.pl_stride_head;
    bool bad = false;
    const float m = merge_max(a, lse, &bad);
    float acc[STEPS * VEC] = {0}, wsum = 0.0f;
    for (int64_t p = 0; p < a.num_parts && m != -INFINITY && !bad; p++) {
        const float l = __ldg(lse + p * a.pl_stride_part);
        if (l == -INFINITY) continue; /* an empty part: its out is not read */
        const float w = expf(l - m);
        wsum += w;
        const T *po =
            (const T *)a.partial_out + p * a.po_stride_part + qi * a.po_stride_token + head * a.po_stride_head;
#pragma unroll
        for (int s = 0; s < STEPS; s++) {
            float v[VEC];
            merge_load<T, VEC>::get(po + (s * 32 + lane) * VEC, v);
#pragma unroll
            for (int j = 0; j < VEC; j++) acc[s * VEC + j] += w * v[j];
        }
    }
    const float inv = bad ? NAN : wsum > 0.0f ? 1.0f / wsum : 0.0f;
    uint16_t *out = a.out + qi * a.out_stride_token + head * a.out_stride_head;
#pragma unroll
    for (int s = 0; s < STEPS; s++) {
        uint16_t b[VEC];
#pragma unroll
        for (int j = 0; j < VEC; j++) b[j] = nvfp4_f32_to_bf16(acc[s * VEC + j] * inv);
        if constexpr (VEC == 4) {
            *(uint2 *)(out + (s * 32 + lane) * 4) =
                make_uint2(b[0] | (uint32_t)b[1] << 16, b[2] | (uint32_t)b[3] << 16);
        } else {
            out[s * 32 + lane] = b[0];
        }
    }
    if (a.lse && lane == 0)
        a.lse[qi * a.lse_stride_token + head * a.lse_stride_head] = bad           ? NAN
                                                                    : wsum > 0.0f ? m + logf(wsum)
                                                                                  : -INFINITY;
}

/* The 4-wide loads and stores need every partial row 16-byte (f32) or 8-byte (bf16) aligned, and out's rows
 * 8-byte aligned: bases, and strides in whole groups of 4 elements. */
static bool merge_vector_aligned(const nvfp4_mla_merge_kernel_args_t *a) {
    const uintptr_t in_align = a->partial_is_f32 ? 16 : 8;
    return (uintptr_t)a->partial_out % in_align == 0 && (uintptr_t)a->out % 8 == 0 &&
           (a->po_stride_part | a->po_stride_token | a->po_stride_head | a->out_stride_token | a->out_stride_head) %
                   4 ==
               0;
}

template <typename T>
static cudaError_t merge_launch(const nvfp4_mla_merge_kernel_args_t *a, unsigned blocks) {
    if (merge_vector_aligned(a))
        nvfp4_merge_kernel<T, 4><<<blocks, MERGE_WARPS * 32, 0, (cudaStream_t)a->stream>>>(*a);
    else
        nvfp4_merge_kernel<T, 1><<<blocks, MERGE_WARPS * 32, 0, (cudaStream_t)a->stream>>>(*a);
    return cudaGetLastError();
}

extern "C" void nvfp4_mla_merge_cuda(const nvfp4_mla_merge_kernel_args_t *args, nvfp4_mla_kernel_result_t *result) {
    const int64_t rows = args->num_queries * args->num_heads;
    if (rows == 0) {
        nvfp4_cuda_result(result, cudaSuccess, "merge");
        return;
    }
    nvfp4_device_guard guard(args->device_index);
    const int64_t blocks = (rows + MERGE_WARPS - 1) / MERGE_WARPS;
    if (!nvfp4_cuda_guard_ok(guard, result, "merge") || !nvfp4_cuda_grid_fits(blocks, result, "merge", rows, "rows")) {
        return;
    }
    const cudaError_t err = args->partial_is_f32 ? merge_launch<float>(args, (unsigned)blocks)
                                                 : merge_launch<uint16_t>(args, (unsigned)blocks);
    nvfp4_cuda_result(result, err, "merge: kernel launch");
}
