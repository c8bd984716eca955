/* The gather reader on CUDA: records by slot to bf16 rows, values identical to kernels/gather_cpu.c.
 *
 * One thread per 16-byte chunk of output (8 bf16 values; a row is 72 chunks): a latent chunk reads
 * 4 payload bytes, its group's scale code and the outer scale; a RoPE chunk reads 8 codes and the
 * RoPE scale (368) or copies 16 bytes (432). Many small independent loads per SM keep the memory
 * system busy (kernel-notes.md: short records need many loads in flight). Slot -1, and any slot
 * outside [0, capacity) (which the plugin cannot check on the host without a sync), give zeros.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "codec.h"
#include "cuda_util.cuh"
#include "fp_codes.h"

#define CHUNKS_PER_ROW 72
#define THREADS 256

__global__ void __launch_bounds__(THREADS) nvfp4_gather_kernel(nvfp4_mla_gather_kernel_args_t a) {
    const int64_t index = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    const int64_t n = index / CHUNKS_PER_ROW;
    const int chunk = (int)(index % CHUNKS_PER_ROW);
    if (n >= a.num_rows) {
        return;
    }
    uint4 *out = (uint4 *)(a.out + n * a.out_row_stride) + chunk;
    const int64_t slot = a.slots[n * a.slot_stride];
    if (slot < 0 || slot >= a.capacity) {
        *out = make_uint4(0, 0, 0, 0);
        return;
    }
    const uint8_t *rec = a.cache + (slot / a.block_size) * a.block_stride + (slot % a.block_size) * a.record_bytes;
    __align__(16) uint16_t v[8];
    if (chunk < 64) {
        const float outer = a.per_token ? *(const float *)(rec + NVFP4_REC_TOKEN_SCALE_OFF) : a.outer_scale;
        const float d = nvfp4_e4m3_decode(rec[NVFP4_REC_GROUP_SCALE_OFF + chunk / 2]);
        const uint32_t codes = *(const uint32_t *)(rec + 4 * chunk);
        for (int i = 0; i < 8; i++) {
            const float e = nvfp4_e2m1_decode((uint8_t)((codes >> (4 * i)) & 0xF));
            v[i] = nvfp4_f32_to_bf16(nvfp4_mul_rn(nvfp4_mul_rn(e, d), outer));
        }
    } else if (a.record_bytes == NVFP4_MLA_RECORD_BYTES_368) {
        const float r = *(const float *)(rec + NVFP4_REC_ROPE_SCALE_OFF);
        const uint2 codes = *(const uint2 *)(rec + NVFP4_REC_ROPE_OFF + 8 * (chunk - 64));
        const uint8_t *c = (const uint8_t *)&codes;
        for (int i = 0; i < 8; i++) {
            v[i] = nvfp4_f32_to_bf16(nvfp4_mul_rn(nvfp4_e4m3_decode(c[i]), r));
        }
    } else {
        *out = *(const uint4 *)(rec + NVFP4_REC_ROPE_OFF + 16 * (chunk - 64));
        return;
    }
    *out = *(const uint4 *)v;
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
    const int64_t blocks = (args->num_rows * CHUNKS_PER_ROW + THREADS - 1) / THREADS;
    if (blocks > INT32_MAX) {
        result->status = NVFP4_MLA_ERR_INVALID_ARGUMENT;
        snprintf(result->message, sizeof result->message, "gather: %lld rows exceed one launch",
                 (long long)args->num_rows);
        return;
    }
    nvfp4_gather_kernel<<<(unsigned)blocks, THREADS, 0, (cudaStream_t)args->stream>>>(*args);
    nvfp4_cuda_result(result, cudaGetLastError(), "gather: kernel launch");
}
