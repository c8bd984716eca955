/* Split-K partials and their merge, for the attention kernel of kernels/attend/attend_cuda.cu:
 * the separate merge kernel (one CTA a (query, head) row, launched as a programmatic dependent of
 * the attention grid) and the in-launch merge (merge_if_last, run by the producer warps of the
 * last split of each (query, head group) to arrive). Both read the workspace laid out in
 * attend_consumer.cuh and give the same bits. */
#ifndef NVFP4_MLA_ATTEND_SPLIT_MERGE_CUH
#define NVFP4_MLA_ATTEND_SPLIT_MERGE_CUH

#include <math.h>
#include <stdint.h>

#include "attend_consumer.cuh"
#include "attend_pipeline.cuh"

#define ATT_MERGE_BATCH 8 /* partial rows a thread of the in-launch merge has in flight (merge_if_last) */

/* Four bf16 partial values (a uint2 of the partial O) as f32, in order. */
static __device__ __forceinline__ float4 bf16x4_floats(uint2 v) {
    return make_float4(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xFFFF0000u), __uint_as_float(v.y << 16),
                       __uint_as_float(v.y & 0xFFFF0000u));
}

/* The steps both merges share for a (row, 4 columns) of a thread, so that they keep the same
 * arithmetic in the same order (their outputs are bit-identical):
 * the partial runs of splits sp .. sp + BATCH - 1 (zeros past `splits`), every load issued before
 * any is used; src is split 0's run, split_step the uint2s from one split's row to the next's; */
template <int BATCH>
static __device__ __forceinline__ void load_split_runs(uint2 *v, const uint2 *src, int64_t split_step, int sp,
                                                       int splits) {
#pragma unroll
    for (int j = 0; j < BATCH; j++) v[j] = sp + j < splits ? __ldcg(src + (sp + j) * split_step) : make_uint2(0, 0);
}
/* acc += weight[s] x run s for those splits below `splits`, in split order; */
template <int BATCH>
static __device__ __forceinline__ void accumulate_split_runs(float4 &acc, const uint2 *v, const float *weight, int sp,
                                                             int splits) {
#pragma unroll
    for (int j = 0; j < BATCH; j++) {
        if (sp + j >= splits) break;
        const float w = weight[sp + j];
        const float4 f = bf16x4_floats(v[j]);
        acc.x += w * f.x, acc.y += w * f.y, acc.z += w * f.z, acc.w += w * f.w;
    }
}
/* the merged run, acc times k (1 / the sum of the weights), as 4 bf16 at dst. */
static __device__ __forceinline__ void store_merged_run(uint16_t *dst, float4 acc, float k) {
    *reinterpret_cast<uint2 *>(dst) = make_uint2(bf16_pair(acc.x * k, acc.y * k), bf16_pair(acc.z * k, acc.w * k));
}

/* An arrival counter is a 64-bit word: a 48-bit tag over a 16-bit count of the splits that have
 * stored their partials. The workspace is the caller's scratch, so a word that does not carry the
 * tag counts as zero; the last split to arrive sets it back to 0, leaving a word that counts as
 * zero for the next launch (graph replays included). The tag's upper half is a signalling-NaN
 * pattern as f32, which no kernel here writes, so the partials of an earlier call whose counters
 * sat elsewhere cannot forge it. Returns true for the last of `splits` arrivals. */
#define ATT_COUNTER_TAG 0x7FA5C0DE1E57ull
static __device__ __forceinline__ bool arrive_last(unsigned long long *counter, int splits) {
    unsigned long long cur = *(volatile unsigned long long *)counter;
    for (;;) {
        const bool counting = (cur >> 16) == ATT_COUNTER_TAG && (int)(cur & 0xffff) < splits;
        const unsigned long long next = (counting ? cur : ATT_COUNTER_TAG << 16) + 1;
        const unsigned long long seen = atomicCAS(counter, cur, next);
        if (seen == cur) {
            if ((int)(next & 0xffff) < splits) return false;
            atomicExch(counter, 0ull);
            return true;
        }
        cur = seen;
    }
}

/* A merged row's lse (natural log) from its largest partial log2-sum-exp m and the sum of its
 * weights 2^(lse_s - m); -inf for a row no split saw. Both merges share it. */
static __device__ __forceinline__ float merged_lse(float m, float sum) {
    return lse2_of(m, sum) * ATT_LN2;
}

/* The separate merge launch (NVFP4_MLA_ATTEND_MERGE=separate, auto under graph capture, and
 * plans whose merge one CTA would read too slowly): one CTA of 128 threads a (query, head) row,
 * thread c owning columns 4c .. 4c + 3. Each thread issues its loads before it uses any: the
 * row's split lse values (threads < splits) and its partials, BATCH splits at a time, so a row
 * costs about one L2 round trip a batch. BATCH is 4 up to 4 splits (the loads in flight take
 * registers, and a wide split plan's rows must fit one wave), 16 up to 16 splits, 32 above (one
 * round trip where 16 took two): docs/performance-notes.md, nvfp4_attend_merge_kernel; the
 * instantiation for a call: merge_kernel_for, attend_cuda.cu, the one unit that instantiates them.
 * Launched dependent on the attention grid (nvfp4_launch_clustered), so its launch overlaps that grid's
 * tail; it reads through L2 (__ldcg), as merge_if_last does. The arithmetic and its order are
 * merge_if_last's: the outputs are bit-identical to the in-launch merge's. */
#define ATT_MERGE_THREADS (NVFP4_MLA_LATENT_DIM / 4) /* a CTA a row, 4 columns a thread */
template <int BATCH>
__global__ void __launch_bounds__(ATT_MERGE_THREADS)
    nvfp4_attend_merge_kernel(const __grid_constant__ nvfp4_mla_attend_kernel_args_t a, int splits) {
    __shared__ float weight[64]; /* splits <= 64 (the plan's cap) */
    __shared__ float warp_max[2];
    pdl_wait();    /* the attention grid's partials */
    pdl_release(); /* the stream's next grid may start its prologue */
    const int64_t row = blockIdx.x, stride = a.num_queries * a.num_heads;
    const int c = threadIdx.x;
    const float *partial_lse = partial_lse_of(a, splits);
    const uint2 *src = reinterpret_cast<const uint2 *>((const uint16_t *)a.workspace + row * NVFP4_MLA_LATENT_DIM) + c;
    const int64_t split_step = stride * (NVFP4_MLA_LATENT_DIM / 4); /* uint2s from one split's row to the next's */
    const float l = c < splits ? __ldcg(partial_lse + c * stride + row) : -INFINITY;
    uint2 v[BATCH];
    load_split_runs<BATCH>(v, src, split_step, 0, splits);
    float m = l; /* the row's largest lse: threads 0 .. 63 hold them */
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, o));
    if (c < 64 && (c & 31) == 0) warp_max[c >> 5] = m;
    __syncthreads();
    m = fmaxf(warp_max[0], warp_max[1]);
    if (c < splits) weight[c] = m == -INFINITY ? 0.0f : exp2f(l - m);
    __syncthreads();
    float sum = 0.0f; /* merge_if_last's order: split 0, 1, ... */
    for (int sp = 0; sp < splits; sp++) sum += weight[sp];
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int sp = 0; sp < splits; sp += BATCH) {
        if (sp > 0) load_split_runs<BATCH>(v, src, split_step, sp, splits);
        accumulate_split_runs<BATCH>(acc, v, weight, sp, splits);
    }
    const int64_t qi = row / a.num_heads, head = row % a.num_heads;
    store_merged_run(a.out + qi * a.out_stride_token + head * a.out_stride_head + 4 * c, acc,
                     sum > 0.0f ? 1.0f / sum : 0.0f);
    if (a.lse && c == 0) a.lse[qi * a.lse_stride_token + head * a.lse_stride_head] = merged_lse(m, sum);
}

/* The in-launch merge (plan.one_launch), run by the producer threads (t < nthreads of them), idle
 * once their item's tiles are written: with splits > 1 the plan has no more items than CTAs, so
 * each CTA holds one. The `consumers` consumer threads store the item's partials, fence them
 * device-wide and bar.arrive on BAR_MERGE (then exit); the producers bar.sync there (so every
 * partial store precedes what follows), arrive once for the CTA's (query, head group) and, for the
 * last split, merge the group's rows in the ring's shared memory (the consumers read their last
 * block before arriving). The last arrival fences again before the rows are read, through L2
 * (__ldcg: other SMs wrote them). Same arithmetic, in the same order, as the merge kernel: the outputs
 * are bit-identical to the separate merge's. Producers merge at their own register count (136 in
 * the narrow wgmma kinds; the mma.sync kinds do not rebalance; the wide kind has no in-launch
 * instantiation): no setmaxnreg rebalance, and only the consumers' arrival crosses roles. `bar`
 * is the producers' own named barrier. */
static __device__ void merge_if_last(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl, uint8_t *smem,
                                     int t, int nthreads, int consumers, uint32_t bar) {
    const item_span s = item_at(a, pl, blockIdx.x);
    volatile int *last = reinterpret_cast<volatile int *>(smem + pl.off_red);
    named_sync(BAR_MERGE, nthreads + consumers); /* the consumers' partials are stored and fenced */
    if (t == 0) {
        unsigned long long *counters =
            reinterpret_cast<unsigned long long *>((uint8_t *)a.workspace + counters_offset(&a, pl.splits));
        const int is_last = arrive_last(counters + s.q * pl.groups + s.group, pl.splits);
        if (is_last) __threadfence();
        *last = is_last;
    }
    named_sync(bar, nthreads);
    if (!*last) return;
    const int splits = pl.splits; /* <= 64 (the plan's cap) */
    const int64_t head0 = (int64_t)s.group * pl.heads;
    const int heads = (int)(a.num_heads - head0 < pl.heads ? a.num_heads - head0 : pl.heads);
    const int64_t stride = a.num_queries * a.num_heads, row0 = s.q * a.num_heads + head0;
    const float *partial_lse = partial_lse_of(a, splits);
    float *weight = reinterpret_cast<float *>(smem + pl.off_ring); /* [64 rows][64 splits] */
    float *scale = weight + 64 * 64;                               /* [64 rows]: 1 / sum of weights */
    const int warp = t >> 5, lane = t & 31;
    for (int r = warp; r < heads; r += nthreads >> 5) { /* a row's weights: lanes over the splits */
        const float l0 = lane < splits ? __ldcg(partial_lse + lane * stride + row0 + r) : -INFINITY;
        const float l1 = lane + 32 < splits ? __ldcg(partial_lse + (lane + 32) * stride + row0 + r) : -INFINITY;
        float m = fmaxf(l0, l1);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        const float w0 = m == -INFINITY ? 0.0f : exp2f(l0 - m), w1 = m == -INFINITY ? 0.0f : exp2f(l1 - m);
        float sum = 0.0f; /* split 0, 1, ...: the merge kernel's order */
        for (int sp = 0; sp < splits; sp++) sum += __shfl_sync(0xffffffffu, sp < 32 ? w0 : w1, sp & 31);
        if (lane < splits) weight[r * 64 + lane] = w0;
        if (lane + 32 < splits) weight[r * 64 + lane + 32] = w1;
        if (lane == 0) {
            scale[r] = sum > 0.0f ? 1.0f / sum : 0.0f;
            if (a.lse) a.lse[s.q * a.lse_stride_token + (head0 + r) * a.lse_stride_head] = merged_lse(m, sum);
        }
    }
    named_sync(bar, nthreads);
    const int64_t split_step = stride * (NVFP4_MLA_LATENT_DIM / 4); /* uint2s from one split's row to the next's */
    for (int u = t; u < heads * 128; u += nthreads) { /* (row, 4 columns) a thread, ATT_MERGE_BATCH splits in flight */
        const int r = u >> 7, c = u & 127;
        const uint2 *src =
            reinterpret_cast<const uint2 *>((const uint16_t *)a.workspace + (row0 + r) * NVFP4_MLA_LATENT_DIM) + c;
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int sp = 0; sp < splits; sp += ATT_MERGE_BATCH) {
            uint2 v[ATT_MERGE_BATCH];
            load_split_runs<ATT_MERGE_BATCH>(v, src, split_step, sp, splits);
            accumulate_split_runs<ATT_MERGE_BATCH>(acc, v, weight + r * 64, sp, splits);
        }
        store_merged_run(a.out + s.q * a.out_stride_token + (head0 + r) * a.out_stride_head + 4 * c, acc, scale[r]);
    }
}

#endif
