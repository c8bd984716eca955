/* What the consumers of the attention schedules share (schedules/narrow/narrow_consumer.cuh,
 * lib/wide_consumer.cuh): loading Q into operand blocks, the operand order of the latent, and the
 * stores of an item's outputs or split partials. */
#ifndef NVFP4_MLA_ATTEND_CONSUMER_CUH
#define NVFP4_MLA_ATTEND_CONSUMER_CUH

#include "attend_pipeline.cuh"

/* ---- consumers: shared pieces ---- */

/* v as lane 0 holds it, which the compiler knows to be the same in every lane: values built from
 * it (wgmma descriptors) then live in uniform registers (docs/performance-notes.md, warp_uniform).
 * For values every lane holds alike, with the whole warp converged (the consumers' warps are). */
static __device__ __forceinline__ uint32_t warp_uniform(uint32_t v) {
    return __shfl_sync(0xFFFFFFFFu, v, 0);
}

/* Log2 units: how far a row's scores may pass its running maximum before it moves (advance_max:
 * P stays below 2^8, which bf16 and the f32 sums carry). */
#define ATT_MAX_SLACK 8.0f

/* Moves a row's running maximum m to cover the tile's maximum and returns alpha, the factor for
 * the row's sums and outputs so far. m moves only when the tile passes it by more than
 * ATT_MAX_SLACK (or from -inf): P then stays below 2^ATT_MAX_SLACK, which bf16 and the f32 sums
 * carry, and the outputs are rescaled only on those jumps, not on every rise. alpha is exactly 1
 * when m stays, not ex2.approx(0), so that a caller can skip the rescale on alpha == 1
 * (docs/performance-notes.md, advance_max). */
static __device__ __forceinline__ float advance_max(float &m, float tile_max) {
    float m_new = fmaxf(m, tile_max);
    if (m_new - m <= ATT_MAX_SLACK) m_new = m; /* false from -inf (inf, or NaN for -inf - -inf) */
    const float alpha = m_new == m ? 1.0f : exp2_ftz(m - m_new);
    m = m_new;
    return alpha;
}

#define ATT_Q_CHUNKS (NVFP4_MLA_ROW_DIM / 8) /* 16-byte chunks of a Q row: 8 bf16 each */

/* A 16-byte chunk of 8 bf16 latent values from dim order to the operand order the bit moves of the
 * dequantisation give, (0,4,1,5,2,6,3,7), and back. Q is permuted on its way in, the staged
 * accumulators of the wide kind on their way out. */
static __device__ __forceinline__ uint4 to_operand_order(uint4 v) {
    return make_uint4(__byte_perm(v.x, v.z, 0x5410), __byte_perm(v.x, v.z, 0x7632), __byte_perm(v.y, v.w, 0x5410),
                      __byte_perm(v.y, v.w, 0x7632));
}
static __device__ __forceinline__ uint4 from_operand_order(uint4 v) {
    return make_uint4(__byte_perm(v.x, v.y, 0x5410), __byte_perm(v.z, v.w, 0x5410), __byte_perm(v.x, v.y, 0x7632),
                      __byte_perm(v.z, v.w, 0x7632));
}

/* Loads the item's Q rows [head0, head0 + ROWS) (ROWS 16 or 32) into SW128 blocks of the operand
 * layout (one per 64 dims, `block_bytes` apart, local rows from row0), rows past the query's heads
 * as zeros, then permutes the latent chunks in place to the operand order. Thread t of a warpgroup
 * copies chunk t % 8 of every block row of rows row0 + t / 8 + 16k: each copy's addresses are the
 * row's base plus constants, where a walk over chunk indices spends more issue slots on addresses
 * than on copies (docs/performance-notes.md, load_q_rows). The caller synchronises the threads
 * that read Q afterwards. */
template <int ROWS>
static __device__ __forceinline__ void load_q_rows(const nvfp4_mla_attend_kernel_args_t &a, int64_t qi, int64_t head0,
                                                   int row0, uint8_t *qs, int block_bytes, int t) {
    static_assert(ROWS % 16 == 0 && ROWS <= 64, "16 rows a pass of a warpgroup");
    const int cc = t & 7; /* 16-byte chunk of each 128-byte block row */
#pragma unroll 1
    for (int r = row0 + (t >> 3); r < row0 + ROWS; r += 16) {
        const int64_t head = head0 + r;
        const bool real = head < a.num_heads;
        const uint16_t *src = real ? a.q + qi * a.q_stride_token + head * a.q_stride_head + cc * 8 : a.q;
        uint8_t *dst = qs + swizzle_off(r, cc * 8);
#pragma unroll 1
        for (int blk = 0; blk < ATT_TILE_BLOCKS; blk++, dst += block_bytes, src += real ? ATT_BLOCK_DIMS : 0)
            cp_async16(dst, src, real ? 16 : 0);
    }
    cp_async_wait_all();
#pragma unroll 1
    for (int r = row0 + (t >> 3); r < row0 + ROWS; r += 16) {
        uint8_t *dst = qs + swizzle_off(r, cc * 8);
#pragma unroll 1
        /* the latent blocks; the RoPE block (the last) keeps its order */
        for (int blk = 0; blk < ATT_LATENT_BLOCKS; blk++, dst += block_bytes) {
            uint4 *p = reinterpret_cast<uint4 *>(dst);
            const uint4 v = *p;
            *p = to_operand_order(v);
        }
    }
    fence_proxy_async();
}

/* load_q_rows's work by a walk over chunk indices: thread `t` of `nthreads` copies every
 * nthreads-th chunk of rows [row0, row0 + rows_here), then permutes its latent chunks in place.
 * Slower to issue than load_q_rows (a division a chunk), but the wide kind keeps it for long
 * items, whose tile loop ran slower beside load_q_rows (ATT_ROW_Q_TILES). */
static __device__ __forceinline__ void load_q_chunks(const nvfp4_mla_attend_kernel_args_t &a, int64_t qi, int64_t head0,
                                                   int row0, int rows_here, uint8_t *qs, int block_bytes, int t,
                                                   int nthreads) {
    const int chunks = rows_here * ATT_Q_CHUNKS;
    for (int i = t; i < chunks; i += nthreads) {
        const int r = row0 + i / ATT_Q_CHUNKS, ch = i % ATT_Q_CHUNKS;
        uint8_t *dst = qs + (ch >> 3) * block_bytes + swizzle_off(r, (ch & 7) * 8);
        const int64_t head = head0 + r;
        const bool real = head < a.num_heads;
        const uint16_t *src = real ? a.q + qi * a.q_stride_token + head * a.q_stride_head + ch * 8 : a.q;
        cp_async16(dst, src, real ? 16 : 0);
    }
    cp_async_wait_all();
    for (int i = t; i < chunks; i += nthreads) {
        const int r = row0 + i / ATT_Q_CHUNKS, ch = i % ATT_Q_CHUNKS;
        uint4 *p = reinterpret_cast<uint4 *>(qs + (ch >> 3) * block_bytes + swizzle_off(r, (ch & 7) * 8));
        uint4 v = *p;
        if (ch < NVFP4_MLA_LATENT_DIM / 8) /* a latent chunk */
            v = to_operand_order(v);
        *p = v;
    }
    fence_proxy_async();
}

/* Latent element of operand position p (0..511): chunks hold (0,4,1,5,2,6,3,7). */
static __device__ __forceinline__ int latent_dim(int p) {
    return (p & ~7) + ((p & 7) >> 1) + 4 * (p & 1);
}

/* ---- the split-K workspace (its layout: attend_plan.h, partial_rows) ---- */
static __device__ __forceinline__ float *partial_lse_of(const nvfp4_mla_attend_kernel_args_t &a, int splits) {
    return reinterpret_cast<float *>((uint8_t *)a.workspace + partial_lse_offset(&a, splits));
}

/* Where an item's result goes: the output rows (one split) or its split's partial rows, both bf16. */
struct item_out {
    uint16_t *out;       /* row of head0: out (one split) or the partial O (splits > 1) */
    float *lse;          /* lse of head0 (natural log) or NULL */
    float *partial_lse;  /* partial log2-sum-exp of head0 or NULL */
    int64_t out_head_stride, lse_head_stride;
    int64_t heads;       /* heads of this item that exist (rows past them are not stored) */
};

static __device__ __forceinline__ item_out item_out_of(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl,
                                                       const item_span &s) {
    item_out o;
    const int64_t head0 = (int64_t)s.group * pl.heads;
    const int64_t left = a.num_heads - head0;
    o.heads = left < pl.heads ? left : pl.heads;
    o.lse_head_stride = a.lse_stride_head;
    if (pl.splits == 1) {
        o.out = a.out + s.q * a.out_stride_token + head0 * a.out_stride_head;
        o.out_head_stride = a.out_stride_head;
        o.lse = a.lse ? a.lse + s.q * a.lse_stride_token + head0 * a.lse_stride_head : nullptr;
        o.partial_lse = nullptr;
    } else {
        const int64_t prow = ((int64_t)s.split * a.num_queries + s.q) * a.num_heads + head0;
        o.out = (uint16_t *)a.workspace + prow * NVFP4_MLA_LATENT_DIM;
        o.out_head_stride = NVFP4_MLA_LATENT_DIM;
        o.partial_lse = partial_lse_of(a, pl.splits) + prow;
        o.lse = nullptr;
    }
    return o;
}

/* ---- the item's outputs ----
 *
 * bf16 outputs pass through the item's Q region (free once its last Q.K^T is done) so that the
 * global stores are whole 16-byte runs, not a 2-byte store per value (the accumulators hold dims
 * in operand order, heads across lanes), exposed after the last tile. Output rows are held 1040 bytes apart:
 * 512 bf16 and 16 bytes of padding, which put consecutive heads 4 banks apart. Split partials are
 * bf16 rows too and take the same path (docs/performance-notes.md, out_flush). */
#define ATT_OUT_ROW 1040
static_assert(ATT_OUT_ROW % 16 == 0 && ATT_OUT_ROW >= 1024, "output rows: 512 bf16, 16-byte aligned");
static_assert(ATT_OUT_ROW <= ATT_TILE_BLOCKS * 128,
              "narrow: N output rows fit the N-row Q blocks (9 x N x 128 bytes)");
static_assert(64 * ATT_OUT_ROW <= ATT_TILE_BLOCKS * ATT_BLOCK, "wide: 64 output rows fit the 9 Q blocks");

/* Copies the output rows [0, ROWS) to o.out (rows past o.heads are not stored); thread t of NT
 * copies 16-byte run t % 64 of rows t / 64 + (NT / 64) k, eight loads in flight before their stores. out
 * is 16-byte aligned with 8-element strides (the plugin checks it), and so is the workspace.
 * OPERAND_ORDER: the rows were written in operand order (each 8-element chunk holding dims
 * (0,4,1,5,2,6,3,7), as the accumulators hold them), and each run is put back in dim order on its
 * way out (from_operand_order). */
template <int ROWS, int NT, bool OPERAND_ORDER>
static __device__ __forceinline__ void out_flush(const item_out &o, const uint8_t *outrows, int t) {
    constexpr int STEP = NT / 64, PER = ROWS / STEP, BATCH = PER < 8 ? PER : 8; /* 32 registers of loads */
    static_assert(NT % 64 == 0 && ROWS % STEP == 0 && PER % BATCH == 0, "whole rows a pass");
    const int ch = t & 63, row0 = t >> 6;
    const uint8_t *src = outrows + row0 * ATT_OUT_ROW + 16 * ch;
    uint16_t *dst = o.out + row0 * o.out_head_stride + 8 * ch;
#pragma unroll 1
    for (int k0 = 0; k0 < PER; k0 += BATCH) {
        uint4 v[BATCH];
#pragma unroll
        for (int k = 0; k < BATCH; k++)
            v[k] = *reinterpret_cast<const uint4 *>(src + (k0 + k) * STEP * ATT_OUT_ROW);
#pragma unroll
        for (int k = 0; k < BATCH; k++) {
            if (row0 + STEP * (k0 + k) < o.heads)
                *reinterpret_cast<uint4 *>(dst + (int64_t)STEP * (k0 + k) * o.out_head_stride) =
                    OPERAND_ORDER ? from_operand_order(v[k]) : v[k];
        }
    }
}

/* A row's log-sum-exp in base 2 (the kernels' domain: the scores carry log2 e) from its maximum m
 * and its sum of 2^(x - m); -inf for a row that saw no entry. Times ATT_LN2 it is the natural lse
 * the ABI returns (store_lse, and the split-K merge's merged_lse). */
#define ATT_LN2 0.6931471805599453f
static __device__ __forceinline__ float lse2_of(float m, float sum) {
    return sum > 0.0f ? m + log2f(sum) : -INFINITY;
}

/* Stores the row statistics of head `head`: l (sum) and m (log2-domain max). */
static __device__ __forceinline__ void store_lse(const item_out &o, int64_t head, float l, float m) {
    if (head >= o.heads) return;
    const float lse2 = lse2_of(m, l);
    if (o.lse) o.lse[head * o.lse_head_stride] = lse2 * ATT_LN2;
    if (o.partial_lse) o.partial_lse[head] = lse2;
}

#endif
