/* Sparse MLA attention over records on CUDA (sm_90 and up), checked against kernels/attend_cpu.c.
 *
 * One CTA of 8 warps per (query token, group of 16*MT heads, top-k split); MT = 1, 2 or 4 m-tiles
 * of 16 heads, picked from h so that h = 64 and 128 dequantise each record once per 64 heads.
 * The top-k is walked in tiles of 64 entries through a ring of raw-record stages in shared memory
 * filled by cp.async (16-byte chunks, zero-filled for unused entries), so the loads of the next
 * tiles are in flight while this one is computed; that is what the memory-bound case (h <= 32)
 * needs, since each CTA's slots make its loads dependent and short.
 *
 * Per tile: (1) the stage is dequantised into a bf16 K tile WITHOUT the outer scale: NVFP4 latent
 * values are e2m1 * d (exact in bf16) by bit moves and two bf16 multiplies, 368 RoPE values the
 * bare E4M3 values (exact); the outer scale (per-token s_t or the static s) is folded into the
 * latent part of the score column and into P before P.V, the RoPE scale r into the RoPE part of
 * the score, so no element pays for them and K/V keep the binary32 values of the spec exactly.
 * The latent's 8-element chunks are stored in the order (0,4,1,5,2,6,3,7) that the bit moves
 * give; Q is loaded in the same order and the output columns are mapped back at the store. (2) S = Q K^T with mma.sync m16n8k16 (bf16 in, f32 accumulate;
 * latent and RoPE in separate accumulators), operands through ldmatrix; warp w owns m-tile w % MT
 * and 8*MT keys. (3) Online softmax in the log2 domain, row statistics through shared memory.
 * (4) O += P V, warp w owning output columns 64w..64w+63 of every m-tile.
 *
 * When n_q x head groups cannot fill the GPU the top-k is split across CTAs: each writes its
 * normalised partial output and log2-sum-exp to the workspace and a second kernel merges them.
 * Entries with slot -1, past valid_len, or outside the cache count for nothing (the CPU entry
 * rejects out-of-range ids; a CUDA entry cannot read them without a sync). Heads past h in the
 * last group are computed on zero queries and never stored.
 *
 * Measured limits and the variants tried (BENCHMARKS.md): the kernel is bound by instruction issue
 * and the shared-memory pipe at 2 warps per scheduler, not by DRAM. 32-key tiles with two CTAs per
 * SM, Q held in registers with the dims split over warp pairs, and 16 warps per CTA were each
 * measured no faster and were not kept.
 *
 * Differences from the CPU reference (attention in double over the same binary32 values; bounds
 * in tests/test_gpu_attend.c): the outer and RoPE scales are applied to f32 sums instead of
 * elements, P is rounded to bf16 for the tensor cores, sums are f32. The 656-byte baseline
 * dequantises E4M3 * tile scale to bf16 exactly as the CPU does (hardware e4m3 -> f16, f32
 * product, bf16 rounding).
 */
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "codec.h"
#include "cuda_util.cuh"
#include "decode_cuda.cuh"
#include "fp_codes.h"
#include "mma_cuda.cuh"

#define KEYS 64           /* top-k entries per tile */
#define WARPS 8
#define THREADS (WARPS * 32)
#define ROW 576
#define PITCH 584         /* bf16 per Q/K smem row: 1168 bytes, 16-byte aligned, ldmatrix rows 4 banks apart */
#define P_PITCH 72        /* bf16 per P row: 144 bytes, same property */
#define MAX_STAGES 3
#define SMEM_BUDGET (227 * 1024) /* the sm_90 per-block opt-in maximum */

/* How one launch is tiled and where everything lives in the dynamic shared memory of one CTA
 * (byte offsets): computed on the host by plan_for, handed to the kernel. */
struct attend_plan {
    int mt;           /* m-tiles of 16 heads per CTA: 1, 2 or 4 */
    int stages;       /* raw-record stages in flight: 1..MAX_STAGES */
    int splits;       /* top-k splits per (query, head group) */
    int record_bytes; /* 368, 432 or 656 */
    int contiguous;   /* block_stride == block_size * record_bytes: a record is at slot * record_bytes */
    int off_k, off_p, off_raw, off_small, bytes;
};

/* The small per-tile arrays after the raw stages (floats/ints, 64 rows at most). */
struct attend_small {
    int32_t slot[MAX_STAGES][KEYS]; /* sanitised slot per stage entry, -1 = unused */
    float tok_scale[KEYS];          /* outer scale of each key of the current tile (latent) */
    float rope_scale[KEYS];         /* RoPE scale r of each key (368), else 1 */
    int32_t valid[KEYS];            /* 1 when the key counts */
    float red_max[WARPS][64];       /* per key-block row maxima */
    float red_sum[WARPS][64];       /* per key-block row sums */
    float alpha[64];                /* this tile's rescale factor per row */
    float m_state[2][64];           /* running row maximum (log2 domain), ping-pong by tile parity */
    float l_state[64];              /* running row sum */
};

/* ---- the kernel ---- */

struct attend_ctx {
    const nvfp4_mla_attend_kernel_args_t &a;
    const attend_plan &pl;
    unsigned char *smem;
    attend_small &sm;
    const int32_t *slot_row; /* this query's top-k row */
    int64_t end;             /* entries at or past `end` are unused in this CTA */
};

/* Lane l < 8 of warp w loads the sanitised slot of entry base+8w+l of a tile (-1 = unused), ahead
 * of the copies so the load's latency hides behind other work. */
static __device__ __forceinline__ int32_t load_slot(const attend_ctx &c, int64_t base) {
    const int64_t e = base + 8 * (threadIdx.x >> 5) + (threadIdx.x & 7);
    const int32_t s = e < c.end ? __ldg(c.slot_row + e) : -1;
    return (s >= 0 && s < c.a.capacity) ? s : -1;
}

/* Issues the copies of this warp's 8 entries of a tile into stage `stage`: entry j's slot comes
 * from lane j, each lane copies one 16-byte chunk (two for 656-byte records); unused entries are
 * zero-filled without a read. Records each entry's slot for the dequantisation. */
template <int RB, bool CONTIGUOUS>
static __device__ __forceinline__ void issue_copies(const attend_ctx &c, int32_t my_slot, unsigned char *dst) {
    constexpr int CHUNKS = RB / 16;
    const int lane = threadIdx.x & 31;
    const uint32_t bs = (uint32_t)c.a.block_size;
    const int64_t block_stride = c.a.block_stride;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int32_t slot = __shfl_sync(0xFFFFFFFFu, my_slot, j);
        const uint32_t u = (uint32_t)(slot < 0 ? 0 : slot);
        const uint8_t *src;
        if (CONTIGUOUS) {
            src = c.a.cache + (int64_t)u * RB + 16 * lane;
        } else {
            const uint32_t block = u / bs;
            src = c.a.cache + (int64_t)block * block_stride + (int64_t)(u - block * bs) * RB + 16 * lane;
        }
        const int bytes = slot < 0 ? 0 : 16;
        if (lane < CHUNKS) cp_async16(dst + j * RB, bytes ? (const void *)src : (const void *)c.a.cache, bytes);
        if (CHUNKS > 32 && lane + 32 < CHUNKS)
            cp_async16(dst + j * RB + 512, bytes ? (const void *)(src + 512) : (const void *)c.a.cache, bytes);
    }
}

/* Issues the copies of this warp's 8 entries of a tile into stage `stage`: entry j's slot comes
 * from lane j, each lane copies one 16-byte chunk (two for 656-byte records); unused entries are
 * zero-filled without a read. Records each entry's slot for the dequantisation. */
template <int RB>
static __device__ __forceinline__ void issue_tile(const attend_ctx &c, int32_t my_slot, int stage) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    unsigned char *dst = c.smem + c.pl.off_raw + (stage * KEYS + 8 * warp) * RB + 16 * lane;
    if (c.pl.contiguous) /* uniform: the division only for padded pages */
        issue_copies<RB, true>(c, my_slot, dst);
    else
        issue_copies<RB, false>(c, my_slot, dst);
    if (lane < 8) c.sm.slot[stage][8 * warp + lane] = my_slot;
}

/* Dequantises stage `stage` into the bf16 K tile (latent without the outer scale, 368 RoPE without
 * r: both exact in bf16) and sets each key's validity, outer scale and RoPE scale. Thread t owns
 * latent chunk t % 64 of records t / 64 + 4i, so strides are constants. */
template <int RB>
static __device__ __forceinline__ void dequant_tile(const attend_ctx &c, int stage) {
    const int tid = threadIdx.x;
    constexpr bool IS656 = RB == 656, IS368 = RB == NVFP4_MLA_RECORD_BYTES_368;
    constexpr int STEP = THREADS / 64; /* records between one thread's latent units */
    const unsigned char *raw = c.smem + c.pl.off_raw + stage * KEYS * RB;
    __nv_bfloat16 *k = reinterpret_cast<__nv_bfloat16 *>(c.smem + c.pl.off_k);
    {
        const int chunk = tid & 63, r0 = tid >> 6;
        const unsigned char *rec = raw + r0 * RB;
        __nv_bfloat16 *dst = k + r0 * PITCH + 8 * chunk;
#pragma unroll 4
        for (int i = 0; i < KEYS / STEP; i++) {
            uint4 v;
            if (IS656) {
                const uint2 codes = *reinterpret_cast<const uint2 *>(rec + i * STEP * RB + 8 * chunk);
                v = e4m3x8_scaled(codes.x, codes.y, *reinterpret_cast<const float *>(rec + i * STEP * RB + 512 + 4 * (chunk >> 4)), true);
            } else {
                const uint32_t codes = *reinterpret_cast<const uint32_t *>(rec + i * STEP * RB + 4 * chunk);
                const float2 d = e4m3x2_to_float2(rec[i * STEP * RB + NVFP4_REC_GROUP_SCALE_OFF + (chunk >> 1)]);
                v = e2m1x8_times(codes, __float2bfloat162_rn(d.x));
            }
            *reinterpret_cast<uint4 *>(dst + i * STEP * PITCH) = v;
        }
    }
    {
        const int chunk = tid & 7, r0 = tid >> 3; /* RoPE: 8 chunks of 8 values per record */
#pragma unroll
        for (int i = 0; i < KEYS * 8 / THREADS; i++) {
            const unsigned char *rec = raw + (r0 + i * (THREADS / 8)) * RB;
            uint4 v;
            if (IS368) {
                const uint2 codes = *reinterpret_cast<const uint2 *>(rec + NVFP4_REC_ROPE_OFF + 8 * chunk);
                v = e4m3x8_scaled(codes.x, codes.y, 1.0f, false); /* r goes into the score */
            } else {
                v = *reinterpret_cast<const uint4 *>(rec + (IS656 ? 528 : NVFP4_REC_ROPE_OFF) + 16 * chunk);
            }
            *reinterpret_cast<uint4 *>(k + (r0 + i * (THREADS / 8)) * PITCH + 512 + 8 * chunk) = v;
        }
    }
    if (tid < KEYS) {
        const unsigned char *rec = raw + tid * RB;
        c.sm.valid[tid] = c.sm.slot[stage][tid] >= 0;
        c.sm.rope_scale[tid] = IS368 ? *reinterpret_cast<const float *>(rec + NVFP4_REC_ROPE_SCALE_OFF) : 1.0f;
        c.sm.tok_scale[tid] = IS656 ? 1.0f
                              : c.a.per_token ? *reinterpret_cast<const float *>(rec + NVFP4_REC_TOKEN_SCALE_OFF)
                                              : c.a.outer_scale;
    }
}

/* S += Q K^T over k-steps KK0..KK1-1 (16 dims each) for NT n-tiles of 8 keys from key0, into
 * CH = 4 / NT independent chains per n-tile (an mma's latency is long; one chain per n-tile would
 * serialise the 36 k-steps when NT is 1); the caller sums the chains. */
template <int NT, int KK0, int KK1>
static __device__ __forceinline__ void qk_steps(float (&acc)[NT][4 / NT][4], const __nv_bfloat16 *qrow,
                                                const __nv_bfloat16 *ks, int key0, int lane) {
    constexpr int CH = 4 / NT;
#pragma unroll
    for (int kk = KK0; kk < KK1; kk += 2) {
        uint32_t af[2][4];
        ldsm_x4(af[0], qrow + kk * 16);
        ldsm_x4(af[1], qrow + kk * 16 + 16);
        if (NT == 1) { /* one x4 covers two k-steps of the single n-tile */
            uint32_t b[4];
            ldsm_x4(b, ks + (key0 + (lane & 7)) * PITCH + (kk + (lane >> 4)) * 16 + ((lane >> 3) & 1) * 8);
            mma_bf16(acc[0][(kk >> 1) % 2 * 2 % CH], af[0], b[0], b[1]);
            mma_bf16(acc[0][((kk >> 1) % 2 * 2 + 1) % CH], af[1], b[2], b[3]);
        } else {
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int j = 0; j + 1 < NT; j += 2) {
                    uint32_t b[4];
                    ldsm_x4(b, ks + (key0 + 8 * (j + (lane >> 4)) + (lane & 7)) * PITCH + (kk + h) * 16 + ((lane >> 3) & 1) * 8);
                    mma_bf16(acc[j][h % CH], af[h], b[0], b[1]);
                    mma_bf16(acc[j + 1][h % CH], af[h], b[2], b[3]);
                }
        }
    }
}

template <int MT, int RB>
__global__ void __launch_bounds__(THREADS, 1) nvfp4_attend_kernel(nvfp4_mla_attend_kernel_args_t a, attend_plan pl) {
    extern __shared__ __align__(128) unsigned char smem[];
    attend_small &sm = *reinterpret_cast<attend_small *>(smem + pl.off_small);
    __nv_bfloat16 *qs = reinterpret_cast<__nv_bfloat16 *>(smem);
    __nv_bfloat16 *ks = reinterpret_cast<__nv_bfloat16 *>(smem + pl.off_k);
    __nv_bfloat16 *ps = reinterpret_cast<__nv_bfloat16 *>(smem + pl.off_p);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    constexpr int HG = 16 * MT, NT = MT, KB = WARPS / MT;
    const int64_t groups = (a.num_heads + HG - 1) / HG;
    const int split = (int)(blockIdx.x % pl.splits);
    const int64_t qg = blockIdx.x / pl.splits, qi = qg / groups, head0 = (qg % groups) * HG;

    int64_t limit = a.topk;
    if (a.valid_len) {
        const int64_t v = a.valid_len[qi * a.valid_len_stride];
        limit = v < 0 ? 0 : (v < limit ? v : limit);
    }
    const int64_t per_split = ((a.topk + pl.splits - 1) / pl.splits + KEYS - 1) / KEYS * KEYS;
    const int64_t begin = split * per_split;
    const int64_t end = begin + per_split < limit ? begin + per_split : limit;
    const attend_ctx c{a, pl, smem, sm, a.slots + qi * a.slot_stride, end};

    /* Start the first stages' copies, then load Q (latent chunks in the K tile's order). */
    for (int s = 0; s < pl.stages; s++) {
        if (begin + (int64_t)s * KEYS < end) issue_tile<RB>(c, load_slot(c, begin + (int64_t)s * KEYS), s);
        cp_async_commit();
    }
    for (int i = tid; i < HG * (ROW / 8); i += THREADS) {
        const int r = i / (ROW / 8), ch = i % (ROW / 8);
        uint4 v = make_uint4(0, 0, 0, 0);
        if (head0 + r < a.num_heads) v = __ldg((const uint4 *)(a.q + qi * a.q_stride_token + (head0 + r) * a.q_stride_head) + ch);
        if (ch < 64)
            v = make_uint4(__byte_perm(v.x, v.z, 0x5410), __byte_perm(v.x, v.z, 0x7632), __byte_perm(v.y, v.w, 0x5410),
                           __byte_perm(v.y, v.w, 0x7632));
        *reinterpret_cast<uint4 *>(qs + r * PITCH + 8 * ch) = v;
    }
    if (tid < HG) sm.m_state[0][tid] = -INFINITY, sm.l_state[tid] = 0.0f;

    const float scale_log2 = a.sm_scale * 1.4426950408889634f;
    const int mi = warp % MT, kb = warp / MT, key0 = kb * 8 * NT;
    float o[MT][8][4];
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int j = 0; j < 8; j++) o[m][j][0] = o[m][j][1] = o[m][j][2] = o[m][j][3] = 0.0f;

    int tile = 0;
    for (int64_t base = begin; base < end; base += KEYS, tile++) {
        const int stage = tile % pl.stages;
        const int64_t next = base + (int64_t)pl.stages * KEYS;
        const int32_t next_slot = next < end ? load_slot(c, next) : -1; /* in flight during the wait and the dequantisation */
        cp_async_wait(pl.stages - 1);
        __syncthreads(); /* the stage has landed for every thread; the previous tile's P.V is done */
        dequant_tile<RB>(c, stage);
        __syncthreads(); /* K tile ready, the stage is free */
        if (next < end) issue_tile<RB>(c, next_slot, stage);
        cp_async_commit();

        /* S = Q K^T: this warp's m-tile, keys key0..key0+8*NT-1. */
        float acc[NT][4], accr[NT][4];
        {
            float chains[NT][4 / NT][4], chains_r[NT][4 / NT][4];
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int ch = 0; ch < 4 / NT; ch++)
#pragma unroll
                    for (int e = 0; e < 4; e++) chains[j][ch][e] = chains_r[j][ch][e] = 0.0f;
            const __nv_bfloat16 *qrow = qs + (16 * mi + (lane & 15)) * PITCH + (lane >> 4) * 8;
            qk_steps<NT, 0, 32>(chains, qrow, ks, key0, lane);
            qk_steps<NT, 32, ROW / 16>(chains_r, qrow, ks, key0, lane);
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    acc[j][e] = chains[j][0][e], accr[j][e] = chains_r[j][0][e];
#pragma unroll
                    for (int ch = 1; ch < 4 / NT; ch++) acc[j][e] += chains[j][ch][e], accr[j][e] += chains_r[j][ch][e];
                }
        }
        /* Scores in the log2 domain (outer scale on the latent part), masked; row maxima. */
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = key0 + 8 * j + 2 * t + (e & 1);
                const float score = __fadd_rn(__fmul_rn(sm.tok_scale[key], acc[j][e]), __fmul_rn(sm.rope_scale[key], accr[j][e]));
                acc[j][e] = sm.valid[key] ? __fmul_rn(score, scale_log2) : -INFINITY;
                mx[e >> 1] = fmaxf(mx[e >> 1], acc[j][e]);
            }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xFFFFFFFFu, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xFFFFFFFFu, mx[h], 2));
        }
        if (t == 0) sm.red_max[kb][16 * mi + g] = mx[0], sm.red_max[kb][16 * mi + g + 8] = mx[1];
        __syncthreads();
        /* P = 2^(S - m) (times the key's outer scale for P.V), row sums, rescale factors. */
        float m_new[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = 16 * mi + g + 8 * h;
            float tile_max = sm.red_max[0][row];
#pragma unroll
            for (int b = 1; b < KB; b++) tile_max = fmaxf(tile_max, sm.red_max[b][row]);
            const float m_old = sm.m_state[tile & 1][row];
            m_new[h] = fmaxf(m_old, tile_max);
            if (kb == 0 && t == 0) {
                sm.alpha[row] = m_new[h] == -INFINITY ? 1.0f : exp2f(m_old - m_new[h]);
                sm.m_state[(tile + 1) & 1][row] = m_new[h];
            }
        }
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int key = key0 + 8 * j + 2 * t;
                const float p0 = m_new[h] == -INFINITY ? 0.0f : exp2f(acc[j][2 * h] - m_new[h]);
                const float p1 = m_new[h] == -INFINITY ? 0.0f : exp2f(acc[j][2 * h + 1] - m_new[h]);
                sum[h] += p0 + p1;
                *reinterpret_cast<uint32_t *>(ps + (16 * mi + g + 8 * h) * P_PITCH + key) =
                    bf16_pair(p0 * sm.tok_scale[key], p1 * sm.tok_scale[key + 1]);
            }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            sum[h] += __shfl_xor_sync(0xFFFFFFFFu, sum[h], 1);
            sum[h] += __shfl_xor_sync(0xFFFFFFFFu, sum[h], 2);
        }
        if (t == 0) sm.red_sum[kb][16 * mi + g] = sum[0], sm.red_sum[kb][16 * mi + g + 8] = sum[1];
        __syncthreads(); /* P, alpha and the partial sums are complete */
        if (tid < HG) {
            float tile_sum = 0.0f;
            for (int b = 0; b < KB; b++) tile_sum += sm.red_sum[b][tid];
            sm.l_state[tid] = sm.l_state[tid] * sm.alpha[tid] + tile_sum;
        }
        /* O = alpha O + P V over this warp's 64 columns. */
#pragma unroll
        for (int m = 0; m < MT; m++) {
            const float a0 = sm.alpha[16 * m + g], a1 = sm.alpha[16 * m + g + 8];
#pragma unroll
            for (int j = 0; j < 8; j++) o[m][j][0] *= a0, o[m][j][1] *= a0, o[m][j][2] *= a1, o[m][j][3] *= a1;
        }
#pragma unroll
        for (int ks16 = 0; ks16 < KEYS / 16; ks16++) {
            uint32_t pf[MT][4];
#pragma unroll
            for (int m = 0; m < MT; m++) ldsm_x4(pf[m], ps + (16 * m + (lane & 15)) * P_PITCH + ks16 * 16 + (lane >> 4) * 8);
#pragma unroll
            for (int j = 0; j < 8; j += 2) {
                uint32_t b[4];
                ldsm_x4_trans(b, ks + (ks16 * 16 + (lane & 15)) * PITCH + 64 * warp + 8 * (j + (lane >> 4)));
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    mma_bf16(o[m][j], pf[m], b[0], b[1]);
                    mma_bf16(o[m][j + 1], pf[m], b[2], b[3]);
                }
            }
        }
    }
    cp_async_wait(0);
    __syncthreads();

    /* Normalise and store: directly (one split) or as a partial for the merge kernel. Column
     * 64w+8j+2t+e of the K order is latent element 64w+8j+t+4e. */
    float *partial_o = (float *)a.workspace;
    float *partial_lse = partial_o + (int64_t)pl.splits * a.num_queries * a.num_heads * 512;
#pragma unroll
    for (int m = 0; m < MT; m++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = 16 * m + g + 8 * h;
            const int64_t head = head0 + row;
            if (head >= a.num_heads) continue;
            const float l = sm.l_state[row], mrow = sm.m_state[tile & 1][row];
            const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
            const float lse2 = l > 0.0f ? mrow + log2f(l) : -INFINITY;
            if (pl.splits == 1) {
                __nv_bfloat16 *out = reinterpret_cast<__nv_bfloat16 *>(a.out + qi * a.out_stride_token + head * a.out_stride_head);
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    out[64 * warp + 8 * j + t] = __float2bfloat16_rn(o[m][j][2 * h] * inv_l);
                    out[64 * warp + 8 * j + t + 4] = __float2bfloat16_rn(o[m][j][2 * h + 1] * inv_l);
                }
                if (a.lse && warp == 0 && t == 0)
                    a.lse[qi * a.lse_stride_token + head * a.lse_stride_head] = lse2 * 0.6931471805599453f;
            } else {
                const int64_t prow = ((int64_t)split * a.num_queries + qi) * a.num_heads + head;
                float *po = partial_o + prow * 512;
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    po[64 * warp + 8 * j + t] = o[m][j][2 * h] * inv_l;
                    po[64 * warp + 8 * j + t + 4] = o[m][j][2 * h + 1] * inv_l;
                }
                if (warp == 0 && t == 0) partial_lse[prow] = lse2;
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

/* Splits of the top-k so that queries x head groups x splits fill the GPU's SMs (one CTA each). */
static int attend_splits(const nvfp4_mla_attend_kernel_args_t *a, int mt) {
    int sms = 132;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, a->device_index) != cudaSuccess || sms < 1) {
        (void)cudaGetLastError();
        sms = 132;
    }
    const int64_t groups = (a->num_heads + 16 * mt - 1) / (16 * mt);
    const int64_t ctas = a->num_queries * groups;
    const int64_t tiles = (a->topk + KEYS - 1) / KEYS;
    int64_t splits = ctas > 0 ? sms / ctas : 1;
    splits = splits > tiles ? tiles : splits;
    splits = splits > 64 ? 64 : splits;
    return splits < 1 ? 1 : (int)splits;
}

/* The launch's plan: heads per CTA from h, splits from the SM count, as many raw stages (up to
 * MAX_STAGES) as the shared memory left after the fixed parts holds. Deterministic in the shapes
 * and the device, so the workspace query and the launch agree. */
static attend_plan plan_for(const nvfp4_mla_attend_kernel_args_t *a) {
    attend_plan p;
    p.mt = a->num_heads <= 16 ? 1 : a->num_heads <= 32 ? 2 : 4;
    p.record_bytes = a->record_bytes;
    p.splits = attend_splits(a, p.mt);
    p.contiguous = a->block_stride == a->block_size * a->record_bytes;
    p.off_k = 16 * p.mt * PITCH * 2;
    p.off_p = p.off_k + KEYS * PITCH * 2;
    p.off_raw = p.off_p + 16 * p.mt * P_PITCH * 2;
    const int stages = (SMEM_BUDGET - p.off_raw - (int)sizeof(attend_small)) / (KEYS * p.record_bytes);
    p.stages = stages > MAX_STAGES ? MAX_STAGES : stages;
    p.off_small = p.off_raw + p.stages * KEYS * p.record_bytes;
    p.bytes = p.off_small + (int)sizeof(attend_small);
    return p;
}

extern "C" uint64_t nvfp4_mla_attend_workspace_cuda(const nvfp4_mla_attend_kernel_args_t *a) {
    const attend_plan pl = plan_for(a);
    return pl.splits > 1 ? (uint64_t)pl.splits * a->num_queries * a->num_heads * (512 + 1) * sizeof(float) : 0;
}

template <int MT, int RB>
static cudaError_t launch_attend(const nvfp4_mla_attend_kernel_args_t *args, const attend_plan &pl, unsigned ctas) {
    cudaError_t err = cudaFuncSetAttribute(nvfp4_attend_kernel<MT, RB>, cudaFuncAttributeMaxDynamicSharedMemorySize, pl.bytes);
    if (err != cudaSuccess) return err;
    nvfp4_attend_kernel<MT, RB><<<ctas, THREADS, pl.bytes, (cudaStream_t)args->stream>>>(*args, pl);
    return cudaGetLastError();
}

/* One instantiation per (heads per CTA, record size): strides and offsets become constants. */
template <int RB>
static cudaError_t launch_attend_rb(const nvfp4_mla_attend_kernel_args_t *args, const attend_plan &pl, unsigned ctas) {
    return pl.mt == 1   ? launch_attend<1, RB>(args, pl, ctas)
           : pl.mt == 2 ? launch_attend<2, RB>(args, pl, ctas)
                        : launch_attend<4, RB>(args, pl, ctas);
}

extern "C" void nvfp4_mla_attend_cuda(const nvfp4_mla_attend_kernel_args_t *args, nvfp4_mla_kernel_result_t *result) {
    if (args->num_queries == 0) {
        nvfp4_cuda_result(result, cudaSuccess, "attend");
        return;
    }
    nvfp4_device_guard guard(args->device_index);
    if (!nvfp4_cuda_guard_ok(guard, result, "attend")) {
        return;
    }
    const attend_plan pl = plan_for(args);
    int smem_optin = 0;
    cudaError_t err = cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, args->device_index);
    if (err != cudaSuccess) {
        nvfp4_cuda_result(result, err, "attend: querying shared memory");
        return;
    }
    if (pl.stages < 1 || pl.bytes > smem_optin) { /* sm_120 parts offer 99 KiB: this tiling needs more */
        result->status = NVFP4_MLA_ERR_UNSUPPORTED;
        snprintf(result->message, sizeof result->message,
                 "attend: the CUDA kernel needs %d bytes of shared memory per block for h=%lld and %d-byte records; "
                 "device %d offers %d", pl.bytes, (long long)args->num_heads, pl.record_bytes, args->device_index, smem_optin);
        return;
    }
    const int64_t groups = (args->num_heads + 16 * pl.mt - 1) / (16 * pl.mt);
    const int64_t ctas = args->num_queries * groups * pl.splits;
    if (!nvfp4_cuda_grid_fits(ctas, result, "attend", ctas, "CTAs")) {
        return;
    }
    err = pl.record_bytes == 656   ? launch_attend_rb<656>(args, pl, (unsigned)ctas)
          : pl.record_bytes == 432 ? launch_attend_rb<432>(args, pl, (unsigned)ctas)
                                   : launch_attend_rb<368>(args, pl, (unsigned)ctas);
    if (err == cudaSuccess && pl.splits > 1) {
        const int64_t rows = args->num_queries * args->num_heads;
        nvfp4_attend_merge_kernel<<<(unsigned)((rows + 3) / 4), 128, 0, (cudaStream_t)args->stream>>>(*args, pl.splits);
        err = cudaGetLastError();
    }
    nvfp4_cuda_result(result, err, "attend: kernel launch");
}
