/* Sparse MLA attention over records on CUDA (sm_90 and up), checked against kernels/attend_cpu.c.
 *
 * One CTA of 4 warps per (query token, group of 16 heads, top-k split). Per tile of 64 top-k
 * entries: the records are dequantised into shared memory as bf16 (the same values `gather`
 * returns), S = Q K^T with mma.sync m16n8k16 (bf16 in, f32 accumulate; warp w owns keys
 * 16w..16w+15), an online softmax in the log2 domain across the 4 warps, then O += P V with warp w
 * owning output columns 128w..128w+127. When n_q x head groups cannot fill the GPU, the top-k is
 * split across CTAs: each writes its normalised partial output and log2-sum-exp to the workspace,
 * and a second kernel merges them. Entries with slot -1, past valid_len, or outside the cache count
 * for nothing (the CPU entry rejects out-of-range ids; a CUDA entry cannot read them without a
 * sync). Heads past h in the last group are computed on zero queries and never stored.
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "codec.h"
#include "cuda_util.cuh"
#include "decode_cuda.cuh"
#include "fp_codes.h"

#define HEADS 16      /* rows of one CTA's MMA tiles */
#define KEYS 64       /* top-k entries per tile */
#define WARPS 4
#define ROW 576
#define PITCH 584     /* bf16 per smem row: 1168 bytes, 16-byte aligned, rows 4 banks apart */
#define P_PITCH 72

struct attend_smem {
    __nv_bfloat16 q[HEADS][PITCH];
    __nv_bfloat16 k[KEYS][PITCH];
    __nv_bfloat16 p[HEADS][P_PITCH];
    float red[WARPS][HEADS];
    int32_t slot[KEYS];
};

/* Dequantises unit u of a 64-record tile into shared memory: units 0..2047 are (record, latent
 * group of 16), 2048..2559 are (record, RoPE chunk of 8). Invalid records give zeros. */
static __device__ void dequant_unit(const nvfp4_mla_attend_kernel_args_t &a, attend_smem &s, int u) {
    const int latent = u < KEYS * 32;
    const int r = latent ? u >> 5 : (u - KEYS * 32) >> 3;
    const int part = latent ? u & 31 : (u - KEYS * 32) & 7;
    uint4 *dst = latent ? (uint4 *)&s.k[r][16 * part] : (uint4 *)&s.k[r][512 + 8 * part];
    const int32_t slot = s.slot[r];
    if (slot < 0) {
        dst[0] = make_uint4(0, 0, 0, 0);
        if (latent) dst[1] = make_uint4(0, 0, 0, 0);
        return;
    }
    const uint32_t bs = (uint32_t)a.block_size, block = (uint32_t)slot / bs;
    const uint8_t *rec = a.cache + (int64_t)block * a.block_stride + (int64_t)((uint32_t)slot - block * bs) * a.record_bytes;
    uint32_t w[8];
    if (a.layout == NVFP4_MLA_LAYOUT_FP8_DS_MLA_656) {
        if (latent) {
            const uint4 codes = __ldg((const uint4 *)(rec + 16 * part));
            const float scale = __ldg((const float *)(rec + 512) + part / 8);
            const uint8_t *c = (const uint8_t *)&codes;
#pragma unroll
            for (int i = 0; i < 8; i++)
                w[i] = bf16_pair(nvfp4_mul_rn(nvfp4_e4m3_decode(c[2 * i]), scale),
                                 nvfp4_mul_rn(nvfp4_e4m3_decode(c[2 * i + 1]), scale));
            dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
            dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
        } else {
            dst[0] = __ldg((const uint4 *)(rec + 528) + part);
        }
        return;
    }
    if (latent) {
        const float outer = a.per_token ? __ldg((const float *)(rec + NVFP4_REC_TOKEN_SCALE_OFF)) : a.outer_scale;
        const float half_d = 0.5f * nvfp4_e4m3_decode(__ldg(rec + NVFP4_REC_GROUP_SCALE_OFF + part));
        const uint2 codes = __ldg((const uint2 *)rec + part);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t byte = ((i < 4 ? codes.x : codes.y) >> (8 * (i & 3))) & 0xFFu;
            w[i] = bf16_pair(nvfp4_mul_rn(e2m1_times(byte, half_d), outer), nvfp4_mul_rn(e2m1_times(byte >> 4, half_d), outer));
        }
        dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
        dst[1] = make_uint4(w[4], w[5], w[6], w[7]);
    } else if (a.record_bytes == NVFP4_MLA_RECORD_BYTES_368) {
        const float r_scale = __ldg((const float *)(rec + NVFP4_REC_ROPE_SCALE_OFF));
        const uint2 codes = __ldg((const uint2 *)(rec + NVFP4_REC_ROPE_OFF) + part);
        const uint8_t *c = (const uint8_t *)&codes;
#pragma unroll
        for (int i = 0; i < 4; i++)
            w[i] = bf16_pair(nvfp4_mul_rn(nvfp4_e4m3_decode(c[2 * i]), r_scale),
                             nvfp4_mul_rn(nvfp4_e4m3_decode(c[2 * i + 1]), r_scale));
        dst[0] = make_uint4(w[0], w[1], w[2], w[3]);
    } else {
        dst[0] = __ldg((const uint4 *)(rec + NVFP4_REC_ROPE_OFF) + part);
    }
}

static __device__ __forceinline__ void mma_bf16(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

static __device__ __forceinline__ uint32_t lds32(const __nv_bfloat16 *p) {
    return *(const uint32_t *)p;
}

static __device__ __forceinline__ uint32_t pack2(__nv_bfloat16 lo, __nv_bfloat16 hi) {
    return (uint32_t)__bfloat16_as_ushort(lo) | ((uint32_t)__bfloat16_as_ushort(hi) << 16);
}

/* Splits of the top-k so that queries x head groups x splits fill the GPU (deterministic in the
 * shapes, so the workspace query and the launch agree). */
static int attend_splits(const nvfp4_mla_attend_kernel_args_t *a) {
    const int64_t groups = (a->num_heads + HEADS - 1) / HEADS;
    const int64_t ctas = a->num_queries * groups;
    const int64_t tiles = (a->topk + KEYS - 1) / KEYS;
    int64_t splits = ctas > 0 ? (4 * 132 + ctas - 1) / ctas : 1;
    splits = splits > tiles ? tiles : splits;
    splits = splits > 64 ? 64 : splits;
    return splits < 1 ? 1 : (int)splits;
}

__global__ void __launch_bounds__(WARPS * 32) nvfp4_attend_kernel(nvfp4_mla_attend_kernel_args_t a, int splits) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    attend_smem &s = *reinterpret_cast<attend_smem *>(smem_raw);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int64_t groups = (a.num_heads + HEADS - 1) / HEADS;
    const int split = (int)(blockIdx.x % splits);
    const int64_t qg = blockIdx.x / splits, qi = qg / groups, head0 = (qg % groups) * HEADS;

    /* Q tile: 16 heads (zeros past h). */
    for (int i = tid; i < HEADS * (ROW / 8); i += WARPS * 32) {
        const int r = i / (ROW / 8), c = i % (ROW / 8);
        uint4 v = make_uint4(0, 0, 0, 0);
        if (head0 + r < a.num_heads) v = __ldg((const uint4 *)(a.q + qi * a.q_stride_token + (head0 + r) * a.q_stride_head) + c);
        *(uint4 *)&s.q[r][8 * c] = v;
    }
    int64_t limit = a.topk;
    if (a.valid_len) {
        const int64_t v = a.valid_len[qi * a.valid_len_stride];
        limit = v < 0 ? 0 : (v < limit ? v : limit);
    }
    const int64_t per_split = ((a.topk + splits - 1) / splits + KEYS - 1) / KEYS * KEYS;
    const int64_t begin = split * per_split;
    const int64_t end = begin + per_split < limit ? begin + per_split : limit;

    const float scale_log2 = a.sm_scale * 1.4426950408889634f;
    float m_row[2] = {-INFINITY, -INFINITY}, l_row[2] = {0.0f, 0.0f};
    float o[16][4];
#pragma unroll
    for (int j = 0; j < 16; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

    for (int64_t base = begin; base < end; base += KEYS) {
        if (tid < KEYS) {
            const int64_t e = base + tid;
            int32_t slot = e < end ? a.slots[qi * a.slot_stride + e] : -1;
            s.slot[tid] = (slot >= 0 && slot < a.capacity) ? slot : -1;
        }
        __syncthreads();
        for (int u = tid; u < KEYS * 40; u += WARPS * 32) dequant_unit(a, s, u);
        __syncthreads();

        /* S = Q K^T for this warp's 16 keys (two n8 tiles). */
        float sc[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll 4
        for (int kk = 0; kk < ROW / 16; kk++) {
            const int col = kk * 16 + 2 * t;
            const uint32_t af[4] = {lds32(&s.q[g][col]), lds32(&s.q[g + 8][col]), lds32(&s.q[g][col + 8]),
                                    lds32(&s.q[g + 8][col + 8])};
#pragma unroll
            for (int j = 0; j < 2; j++) {
                const int key = 16 * warp + 8 * j + g;
                mma_bf16(sc[j], af, lds32(&s.k[key][col]), lds32(&s.k[key][col + 8]));
            }
        }
        /* Mask, scale into the log2 domain, row maxima of this warp's keys. */
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int c = 0; c < 4; c++) {
                const int key = 16 * warp + 8 * j + 2 * t + (c & 1);
                sc[j][c] = s.slot[key] >= 0 ? sc[j][c] * scale_log2 : -INFINITY;
                mx[c >> 1] = fmaxf(mx[c >> 1], sc[j][c]);
            }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xFFFFFFFFu, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xFFFFFFFFu, mx[h], 2));
        }
        if (t == 0) s.red[warp][g] = mx[0], s.red[warp][g + 8] = mx[1];
        __syncthreads();
        float m_new[2], alpha[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float tile_max = s.red[0][g + 8 * h];
#pragma unroll
            for (int w2 = 1; w2 < WARPS; w2++) tile_max = fmaxf(tile_max, s.red[w2][g + 8 * h]);
            m_new[h] = fmaxf(m_row[h], tile_max);
            alpha[h] = m_new[h] == -INFINITY ? 1.0f : exp2f(m_row[h] - m_new[h]);
        }
        /* P = 2^(S - m), into shared memory as bf16; this warp's part of the row sums. */
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const float p0 = m_new[h] == -INFINITY ? 0.0f : exp2f(sc[j][2 * h] - m_new[h]);
                const float p1 = m_new[h] == -INFINITY ? 0.0f : exp2f(sc[j][2 * h + 1] - m_new[h]);
                sum[h] += p0 + p1;
                *(uint32_t *)&s.p[g + 8 * h][16 * warp + 8 * j + 2 * t] = bf16_pair(p0, p1);
            }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            sum[h] += __shfl_xor_sync(0xFFFFFFFFu, sum[h], 1);
            sum[h] += __shfl_xor_sync(0xFFFFFFFFu, sum[h], 2);
        }
        __syncthreads(); /* everyone has read s.red (maxima) and written s.p */
        if (t == 0) s.red[warp][g] = sum[0], s.red[warp][g + 8] = sum[1];
        __syncthreads();
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float tile_sum = 0.0f;
#pragma unroll
            for (int w2 = 0; w2 < WARPS; w2++) tile_sum += s.red[w2][g + 8 * h];
            l_row[h] = l_row[h] * alpha[h] + tile_sum;
            m_row[h] = m_new[h];
        }
#pragma unroll
        for (int j = 0; j < 16; j++) o[j][0] *= alpha[0], o[j][1] *= alpha[0], o[j][2] *= alpha[1], o[j][3] *= alpha[1];
        /* O += P V over this warp's 128 columns. */
#pragma unroll
        for (int ks = 0; ks < KEYS / 16; ks++) {
            const int kc = ks * 16 + 2 * t;
            const uint32_t af[4] = {lds32(&s.p[g][kc]), lds32(&s.p[g + 8][kc]), lds32(&s.p[g][kc + 8]),
                                    lds32(&s.p[g + 8][kc + 8])};
#pragma unroll
            for (int j = 0; j < 16; j++) {
                const int n = 128 * warp + 8 * j + g;
                const uint32_t b0 = pack2(s.k[kc][n], s.k[kc + 1][n]);
                const uint32_t b1 = pack2(s.k[kc + 8][n], s.k[kc + 9][n]);
                mma_bf16(o[j], af, b0, b1);
            }
        }
        __syncthreads(); /* before the next tile overwrites slot, k, p and red */
    }

    /* Normalise and store: directly (one split) or as a partial for the merge kernel. */
    float *partial_o = (float *)a.workspace;
    float *partial_lse = partial_o + (int64_t)splits * a.num_queries * a.num_heads * 512;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int64_t head = head0 + g + 8 * h;
        if (head >= a.num_heads) continue;
        const float inv_l = l_row[h] > 0.0f ? 1.0f / l_row[h] : 0.0f;
        const float lse2 = l_row[h] > 0.0f ? m_row[h] + log2f(l_row[h]) : -INFINITY;
        if (splits == 1) {
            uint16_t *out = a.out + qi * a.out_stride_token + head * a.out_stride_head;
#pragma unroll
            for (int j = 0; j < 16; j++)
                *(uint32_t *)(out + 128 * warp + 8 * j + 2 * t) = bf16_pair(o[j][2 * h] * inv_l, o[j][2 * h + 1] * inv_l);
            if (a.lse && warp == 0 && t == 0)
                a.lse[qi * a.lse_stride_token + head * a.lse_stride_head] = lse2 * 0.6931471805599453f;
        } else {
            const int64_t row = ((int64_t)split * a.num_queries + qi) * a.num_heads + head;
            float *po = partial_o + row * 512;
#pragma unroll
            for (int j = 0; j < 16; j++)
                *(float2 *)(po + 128 * warp + 8 * j + 2 * t) = make_float2(o[j][2 * h] * inv_l, o[j][2 * h + 1] * inv_l);
            if (warp == 0 && t == 0) partial_lse[row] = lse2;
        }
    }
}

/* Merges the split partials: one warp per (query, head), 16 columns per lane. */
__global__ void nvfp4_attend_merge_kernel(nvfp4_mla_attend_kernel_args_t a, int splits) {
    const int64_t row = (int64_t)blockIdx.x * 4 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= a.num_queries * a.num_heads) return;
    const int64_t qi = row / a.num_heads, head = row % a.num_heads;
    const float *partial_o = (const float *)a.workspace;
    const float *partial_lse = partial_o + (int64_t)splits * a.num_queries * a.num_heads * 512;
    const int64_t stride = a.num_queries * a.num_heads;
    float lmax = -INFINITY;
    for (int sp = 0; sp < splits; sp++) lmax = fmaxf(lmax, partial_lse[sp * stride + row]);
    float acc[16] = {0}, wsum = 0.0f;
    if (lmax != -INFINITY) {
        for (int sp = 0; sp < splits; sp++) {
            const float w = exp2f(partial_lse[sp * stride + row] - lmax);
            wsum += w;
            const float *po = partial_o + (sp * stride + row) * 512 + 16 * lane;
#pragma unroll
            for (int i = 0; i < 16; i++) acc[i] += w * po[i];
        }
    }
    const float inv = wsum > 0.0f ? 1.0f / wsum : 0.0f;
    uint16_t *out = a.out + qi * a.out_stride_token + head * a.out_stride_head + 16 * lane;
#pragma unroll
    for (int i = 0; i < 16; i += 2) *(uint32_t *)(out + i) = bf16_pair(acc[i] * inv, acc[i + 1] * inv);
    if (a.lse && lane == 0)
        a.lse[qi * a.lse_stride_token + head * a.lse_stride_head] =
            wsum > 0.0f ? (lmax + log2f(wsum)) * 0.6931471805599453f : -INFINITY;
}

extern "C" uint64_t nvfp4_mla_attend_workspace_cuda(const nvfp4_mla_attend_kernel_args_t *a) {
    const int splits = attend_splits(a);
    return splits > 1 ? (uint64_t)splits * a->num_queries * a->num_heads * (512 + 1) * sizeof(float) : 0;
}

extern "C" void nvfp4_mla_attend_cuda(const nvfp4_mla_attend_kernel_args_t *args, nvfp4_mla_kernel_result_t *result) {
    if (args->num_queries == 0) {
        nvfp4_cuda_result(result, cudaSuccess, "attend");
        return;
    }
    nvfp4_device_guard guard(args->device_index);
    if (guard.error != cudaSuccess) {
        nvfp4_cuda_result(result, guard.error, "attend: selecting the context's device");
        return;
    }
    const int splits = attend_splits(args);
    const int64_t groups = (args->num_heads + HEADS - 1) / HEADS;
    const int64_t ctas = args->num_queries * groups * splits;
    if (ctas > INT32_MAX) {
        result->status = NVFP4_MLA_ERR_INVALID_ARGUMENT;
        snprintf(result->message, sizeof result->message, "attend: %lld CTAs exceed one launch", (long long)ctas);
        return;
    }
    const size_t smem = sizeof(attend_smem);
    cudaError_t err = cudaFuncSetAttribute(nvfp4_attend_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (err != cudaSuccess) {
        nvfp4_cuda_result(result, err, "attend: shared-memory attribute");
        return;
    }
    cudaStream_t stream = (cudaStream_t)args->stream;
    nvfp4_attend_kernel<<<(unsigned)ctas, WARPS * 32, smem, stream>>>(*args, splits);
    if ((err = cudaGetLastError()) == cudaSuccess && splits > 1) {
        const int64_t rows = args->num_queries * args->num_heads;
        nvfp4_attend_merge_kernel<<<(unsigned)((rows + 3) / 4), 128, 0, stream>>>(*args, splits);
        err = cudaGetLastError();
    }
    nvfp4_cuda_result(result, err, "attend: kernel launch");
}
