/* The gather reader on CUDA: records by slot to bf16 rows, values identical to kernels/codec/gather_cpu.c.
 *
 * One warp per row: lane g decodes latent group g (8 payload bytes, one scale code, the outer scale)
 * into 16 bf16 values, two 16-byte stores; lanes 0..7 also write the RoPE chunk g (8 codes times
 * the RoPE scale for 368, a 16-byte copy for 432). The slot, address and outer scale are worked out
 * once per lane instead of once per 8 values: the kernel is instruction-bound, and two rows a warp
 * cost more in occupancy than they saved (docs/performance-notes.md, nvfp4_gather_kernel).
 * E2M1 values come from a nibble table, products are binary32 in the CPU twin's order, bf16 pairs
 * come from the hardware round-to-nearest-even conversion. Slot -1, and any slot outside
 * [0, capacity) (which the plugin cannot check on the host without a sync), give zeros.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "backends.h"
#include "cuda_util.cuh"
#include "fp_codes.h"
#include "record_read.cuh"

#define WARPS_PER_BLOCK 8

__global__ void __launch_bounds__(WARPS_PER_BLOCK * 32) nvfp4_gather_kernel(nvfp4_mla_gather_kernel_args_t a) {
    const int64_t n = (int64_t)blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5);
    const uint32_t lane = threadIdx.x & 31u;
    if (n >= a.num_rows) {
        return;
    }
    uint4 *out = (uint4 *)(a.out + n * a.out_row_stride);
    const int64_t slot = a.slots[n * a.slot_stride];
    if (slot < 0 || slot >= a.capacity) {
        out[2 * lane] = out[2 * lane + 1] = make_uint4(0, 0, 0, 0);
        if (lane < 8) out[64 + lane] = make_uint4(0, 0, 0, 0);
        return;
    }
    /* capacity < 2^31: 32-bit block arithmetic (64-bit division is slow on GPUs). */
    const uint32_t slot32 = (uint32_t)slot, bs = (uint32_t)a.block_size, block = slot32 / bs;
    const uint8_t *rec = a.cache + (int64_t)block * a.block_stride + (int64_t)(slot32 - block * bs) * a.record_bytes;

    const float outer = a.per_token
                            ? stored_token_scale(__ldg((const float *)(rec + NVFP4_MLA_RECORD_TOKEN_SCALE_OFFSET)))
                            : a.outer_scale;
    const float half_d = 0.5f * nvfp4_e4m3_decode(__ldg(rec + NVFP4_MLA_RECORD_GROUP_SCALE_OFFSET + lane));
    const uint2 codes = __ldg((const uint2 *)rec + lane);
    uint4 v[2];
    uint32_t *words = (uint32_t *)v;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        /* (e2m1 * d) * outer in binary32, then bf16 round-to-nearest-even: the CPU twin's order. */
        const uint32_t byte = ((i < 4 ? codes.x : codes.y) >> (8 * (i & 3))) & 0xFFu;
        words[i] = bf16_pair(nvfp4_mul_rn(e2m1_times(byte, half_d), outer),
                             nvfp4_mul_rn(e2m1_times(byte >> 4, half_d), outer));
    }
    out[2 * lane] = v[0];
    out[2 * lane + 1] = v[1];

    if (lane < 8) {
        uint4 rope;
        if (a.record_bytes == NVFP4_MLA_RECORD_BYTES_368) {
            const float r = stored_rope_scale(__ldg((const float *)(rec + NVFP4_MLA_RECORD_ROPE_SCALE_OFFSET)));
            const uint2 c = __ldg((const uint2 *)(rec + NVFP4_MLA_RECORD_ROPE_OFFSET) + lane);
            uint32_t *w = (uint32_t *)&rope;
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const uint32_t pair = ((i < 2 ? c.x : c.y) >> (16 * (i & 1))) & 0xFFFFu;
                w[i] = bf16_pair(nvfp4_mul_rn(nvfp4_e4m3_decode((uint8_t)pair), r),
                                 nvfp4_mul_rn(nvfp4_e4m3_decode((uint8_t)(pair >> 8)), r));
            }
        } else {
            rope = stored_rope_bf16(__ldg((const uint4 *)(rec + NVFP4_MLA_RECORD_ROPE_OFFSET) + lane));
        }
        out[64 + lane] = rope;
    }
}

extern "C" void nvfp4_mla_gather_cuda(const nvfp4_mla_gather_kernel_args_t *args, nvfp4_mla_kernel_result_t *result) {
    if (args->num_rows == 0) {
        nvfp4_cuda_result(result, cudaSuccess, "gather");
        return;
    }
    nvfp4_device_guard guard(args->device_index);
    const int64_t blocks = (args->num_rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK;
    if (!nvfp4_cuda_guard_ok(guard, result, "gather") ||
        !nvfp4_cuda_grid_fits(blocks, result, "gather", args->num_rows, "rows")) {
        return;
    }
    nvfp4_gather_kernel<<<(unsigned)blocks, WARPS_PER_BLOCK * 32, 0, (cudaStream_t)args->stream>>>(*args);
    nvfp4_cuda_result(result, cudaGetLastError(), "gather: kernel launch");
}
