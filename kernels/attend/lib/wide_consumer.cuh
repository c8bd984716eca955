/* The wide consumer's pieces, sm_90a: two warpgroups serving 64 heads of one query (h > 32; h = 128
 * runs as two items per query), run per tile by the wide schedules' consumer loops
 * (schedules/wide_twobuf/wide_twobuf.cuh, schedules/wide_ring/wide_ring.cuh).
 *
 *   S [64 heads, 64 keys]       = Q . K^T     warpgroup 0 alone (A = Q, B = the blocks, K-major)
 *   O [64 heads, 256 dims]     += P . V       warpgroup c owns dims 256c..; warpgroup 0 takes P from
 *                                             its registers, warpgroup 1 from shared memory
 *
 * 64 x 512 f32 accumulators fill half the register file, so O is split by dims; scores for all 64
 * keys in one warpgroup read Q once a tile and keep whole rows there (no maxima cross warpgroups),
 * and warpgroup 0 goes on to the next tile's Q.K^T while warpgroup 1 runs this tile's P.V, with far
 * fewer registers (docs/performance-notes.md, attend_wide).
 */
#ifndef NVFP4_MLA_WIDE_CONSUMER_CUH
#define NVFP4_MLA_WIDE_CONSUMER_CUH

#include "attend_consumer.cuh"

#if NVFP4_HAVE_WGMMA

struct wide_state {
    float o[4][32]; /* O rows 16w + lane/4 (+8), dims 64(4c + b) + 8j + 2(lane%4) (+1); o[2h], o[2h + 1]
                     * contiguous: the two-buffer kind's n128 accumulator h (wide_pv, wgmma_ss_n128) */
    float m[2];     /* warpgroup 0: running row maximum (log2 domain) of rows lane/4 and lane/4 + 8 */
    float l[2];     /* warpgroup 0: this thread's part of the running row sums (16 of 64 keys) */
};

/* Where a tile's nine blocks are (block 0 RoPE, 1..8 latent) and how they are handed over. In a
 * two-buffer ring (schedules/wide_twobuf) tile `tile` is the contiguous buffer tile & 1 and its blocks'
 * barriers are indexed directly; otherwise the blocks are ring positions pos0.. . */
template <bool TWOBUF>
struct wide_tile {
    uint32_t pos0;   /* ring position of block 0 */
    uint32_t base;   /* TWOBUF: shared address of block 0 */
    uint32_t block0;  /* TWOBUF: ATT_TILE_BLOCKS * (tile & 1) */
    uint32_t parity; /* TWOBUF: the buffer's phase, (tile >> 1) & 1 */
    __device__ __forceinline__ wide_tile(uint8_t *smem, const attend_plan &pl, uint32_t pos, uint32_t tile)
        : pos0(pos), base(smem_addr(tile_buffer(smem, pl, tile))), block0(ATT_TILE_BLOCKS * (tile & 1u)),
          parity(buffer_phase(tile)) {}
    __device__ __forceinline__ uint32_t block(uint8_t *smem, const attend_plan &pl, int i) const {
        return TWOBUF ? base + (uint32_t)i * ATT_BLOCK : smem_addr(block_ptr(smem, pl, pos0 + i));
    }
    __device__ __forceinline__ void wait(const attend_bars &bars, const attend_plan &pl, int i) const {
        if (TWOBUF) mbar_wait(&bars.block_full[block0 + i], parity);
        else wait_full(bars, pos0 + i, pl);
    }
    __device__ __forceinline__ void release(const attend_bars &bars, const attend_plan &pl, int i) const {
        if (TWOBUF) mbar_arrive(&bars.block_empty[block0 + i]);
        else release_block(bars, pos0 + i, pl);
    }
};

/* The 4 RoPE k-steps of S = Q.K^T (64 heads x 64 keys) into `rope`: Q's RoPE block (descriptor
 * dq_rope) against the tile's (dk_rope), f16 or bf16 operands (schedules/wide_twobuf/rope_f16.cuh). */
template <bool F16>
static __device__ __forceinline__ void rope_ksteps(float *rope, uint64_t dq_rope, uint64_t dk_rope) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) wgmma_ss_n64<0, F16>(rope, dq_rope + 2 * kk, dk_rope + 2 * kk, kk > 0);
}

/* S over the tile's 9 blocks for all 64 keys (warpgroup 0): A = Q, B = the blocks, both K-major,
 * N = 64. One Q read a tile, where two warpgroups of N = 32 read Q twice (about 216 KB of operand
 * reads a tile against 144 KB). A descriptor's address field is the
 * shared address / 16, so the next 8 KB block is +512 with no carry. ROPE_F16: the RoPE blocks are
 * f16 (schedules/wide_twobuf/rope_f16.cuh; `rope` then holds the rows' shifted scores). */
template <bool TWOBUF, bool ROPE_F16 = false>
static __device__ __forceinline__ void wide_scores(const attend_plan &pl, uint8_t *smem, const attend_bars &bars,
                                                   const wide_tile<TWOBUF> &tl, float *lat, float *rope) {
    const uint64_t dq = sw128_desc(warp_uniform(smem_addr(smem + pl.off_q)), 1024, 16); /* Q block j: + 512 j */
    const uint64_t d0 = sw128_desc(warp_uniform(tl.block(smem, pl, 0)), 1024, 16);
    tl.wait(bars, pl, ATT_LATENT_BLOCKS); /* the tile's last block */
    /* RoPE block, then the latent blocks: separate loops, each opening with a wgmma fence (see
     * narrow_qk on C7519). */
    wgmma_fence();
    rope_ksteps<ROPE_F16>(rope, dq + 512 * ATT_LATENT_BLOCKS, d0);
    wgmma_commit();
#pragma unroll 1
    for (int i = 1; i < ATT_TILE_BLOCKS; i++) {
        wgmma_fence();
        const uint64_t db = TWOBUF ? d0 + 512 * i : sw128_desc(warp_uniform(tl.block(smem, pl, i)), 1024, 16);
        const uint64_t da = dq + 512 * (i - 1);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_ss_n64<0>(lat, da + 2 * kk, db + 2 * kk, i > 1 || kk > 0);
        wgmma_commit();
    }
    wgmma_wait<0>();
    fence_regs<32>(lat);
    fence_regs<32>(rope);
    if (!TWOBUF) tl.release(bars, pl, 0); /* two-buffer: P goes into the RoPE block; warpgroup 1 frees it */
}

/* This warpgroup's O rows times their alpha (rows lane/4 and lane/4 + 8 of each warp); skipped
 * by whole warps, since most tiles move no maximum. */
static __device__ __forceinline__ void wide_rescale(wide_state &st, const float *alpha) {
    if (__any_sync(0xFFFFFFFFu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
        for (int b = 0; b < 4; b++)
#pragma unroll
            for (int i = 0; i < 32; i++) st.o[b][i] *= alpha[(i >> 1) & 1];
    }
}

/* Warpgroup 1's rescale: the rows' alpha that warpgroup 0 left in xalpha before BAR_WIDE_P. */
static __device__ __forceinline__ void wide_rescale_from(wide_state &st, const float *xalpha, int warp, int lane) {
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; h++) alpha[h] = xalpha[16 * warp + (lane >> 2) + 8 * h];
    wide_rescale(st, alpha);
}

/* An item's Q, this warpgroup's 32 rows: by rows for short items (ROW_Q), else by chunks
 * (lib/attend_consumer.cuh says why). */
template <bool ROW_Q>
static __device__ __forceinline__ void wide_load_q(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl,
                                                   uint8_t *smem, const item_span &span, int cw, int t) {
    if constexpr (ROW_Q)
        load_q_rows<32>(a, span.q, (int64_t)span.group * 64, 32 * cw, smem + pl.off_q, ATT_BLOCK, t & 127);
    else
        load_q_chunks(a, span.q, (int64_t)span.group * 64, 32 * cw, 32, smem + pl.off_q, ATT_BLOCK, t & 127,
                      ATT_WARPGROUP);
}
/* A new item's O, m and l. */
static __device__ __forceinline__ void wide_state_clear(wide_state &st) {
#pragma unroll
    for (int b = 0; b < 4; b++)
#pragma unroll
        for (int i = 0; i < 32; i++) st.o[b][i] = 0.0f;
    st.m[0] = st.m[1] = -INFINITY;
    st.l[0] = st.l[1] = 0.0f;
}

/* Softmax over the tile's 64 keys (warpgroup 0, which holds whole rows: no maxima cross
 * warpgroups): updates m, l, leaves P' = p * s as this warpgroup's A fragments, writes P' to the P
 * tile at pbuf and the rows' alpha to xalpha for warpgroup 1, and rescales this warpgroup's O. */
static __device__ __forceinline__ void wide_softmax(wide_state &st, const float *lat, const float *rope,
                                                    const wide_meta &meta, int warp, int lane, uint32_t (*pf)[4],
                                                    uint8_t *pbuf, float *xalpha) {
    const int g = lane >> 2, c = lane & 3;
    float sc[32], sk[16];
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const wide_key key = meta.key[8 * j + 2 * c + e]; /* -inf bias: an entry that counts nothing */
            sk[2 * j + e] = key.s;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int i = 4 * j + 2 * h + e;
                sc[i] = fmaf(lat[i], key.ls, fmaf(rope[i], key.rs, key.bias));
                mx[h] = fmaxf(mx[h], sc[i]);
            }
        }
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xFFFFFFFFu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xFFFFFFFFu, mx[h], 2));
        alpha[h] = advance_max(st.m[h], mx[h]);
    }
    /* A row whose maximum is still -inf has only -inf scores: against 0 they give p = 0, with one
     * select a row rather than one a score (-inf - -inf would be NaN). */
    float mu[2];
#pragma unroll
    for (int h = 0; h < 2; h++) mu[h] = st.m[h] == -INFINITY ? 0.0f : st.m[h];
    uint32_t w[16]; /* [j][h]: bf16 pair of row g + 8h, keys 8j + 2c (+1) */
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float p0 = exp2_ftz(sc[4 * j + 2 * h] - mu[h]);
            const float p1 = exp2_ftz(sc[4 * j + 2 * h + 1] - mu[h]);
            sum[h] += p0 + p1;
            w[2 * j + h] = bf16_pair(p0 * sk[2 * j], p1 * sk[2 * j + 1]);
        }
#pragma unroll
    for (int h = 0; h < 2; h++) st.l[h] = st.l[h] * alpha[h] + sum[h];
    /* A fragment of k-step kk (keys 16kk..): rows g, g+8 of keys +0 and +8. */
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        pf[kk][0] = w[2 * (2 * kk)], pf[kk][1] = w[2 * (2 * kk) + 1];
        pf[kk][2] = w[2 * (2 * kk + 1)], pf[kk][3] = w[2 * (2 * kk + 1) + 1];
    }
    /* The P tile (rows = heads, 64 keys): lane 8i + r addresses row r of matrix i = (j, h). */
    const int i4 = lane >> 3, r = lane & 7;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        const int j = 2 * kk + (i4 >> 1), h = i4 & 1;
        stsm_x4(pbuf + swizzle_off(16 * warp + 8 * h + r, 8 * j), pf[kk][0], pf[kk][1], pf[kk][2], pf[kk][3]);
    }
#pragma unroll
    for (int h = 0; h < 2; h++)
        if (c == 0) xalpha[16 * warp + g + 8 * h] = alpha[h];
    fence_proxy_async();
    named_sync(BAR_WIDE_P, ATT_WIDE_CONSUMERS); /* P' and alpha of the tile ready for warpgroup 1 */
    wide_rescale(st, alpha);
}

/* O += P V over latent blocks first .. first + 3 (dims 64 (first - 1) ..): warpgroup 0 with P from
 * its registers (pf), warpgroup 1 from the P tile at pbuf (pf unused: null); then frees them. */
template <bool TWOBUF, bool P_IN_REGS>
static __device__ __forceinline__ void wide_pv(const attend_plan &pl, uint8_t *smem, const attend_bars &bars,
                                               wide_state &st, const wide_tile<TWOBUF> &tl, int first,
                                               uint32_t (*pf)[4], const uint8_t *pbuf) {
#pragma unroll
    for (int b = 0; b < 4; b++) fence_regs<32>(st.o[b]);
    wgmma_fence();
    /* V block descriptors; a k-step (16 keys) is +2048 bytes = +128. LBO = ATT_BLOCK matters to the
     * n128 form alone: it reads vd[2h]'s columns 64..127 from block first + 2h + 1, 8 KB on in a
     * two-buffer buffer (vd[1], vd[3]: the ring's n64 forms only). */
    uint64_t vd[4];
#pragma unroll
    for (int b = 0; b < 4; b++) vd[b] = sw128_desc(warp_uniform(tl.block(smem, pl, first + b)), 1024, ATT_BLOCK);
    if constexpr (att_probe<P_IN_REGS ? ATT_PROBE_NO_PV_SCORE : ATT_PROBE_NO_PV_VALUE>()) {
#pragma unroll
        for (int b = 0; b < 4; b++) att_probe_mma_skipped<32>(st.o[b]);
    } else if constexpr (TWOBUF) { /* contiguous blocks: two n128 wgmma a k-step (performance-notes.md, wide_pv) */
        float *o = &st.o[0][0]; /* o + 64h = st.o[2h], st.o[2h + 1]: block b's columns at o + 32b */
        const uint64_t pd = sw128_desc(warp_uniform(smem_addr(pbuf)), 1024, 16);
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                if constexpr (P_IN_REGS) wgmma_rs_n128(o + 64 * h, pf[kk], vd[2 * h] + 128 * kk, 1);
                else wgmma_ss_n128(o + 64 * h, pd + 2 * kk, vd[2 * h] + 128 * kk, 1);
            }
    } else if constexpr (P_IN_REGS) { /* k-step major: consecutive wgmma go to different accumulators */
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
#pragma unroll
            for (int b = 0; b < 4; b++) wgmma_rs_n64(st.o[b], pf[kk], vd[b] + 128 * kk, 1);
    } else {
        const uint64_t pd = sw128_desc(warp_uniform(smem_addr(pbuf)), 1024, 16);
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
#pragma unroll
            for (int b = 0; b < 4; b++) wgmma_ss_n64<1>(st.o[b], pd + 2 * kk, vd[b] + 128 * kk, 1);
    }
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int b = 0; b < 4; b++) fence_regs<32>(st.o[b]);
#pragma unroll 1
    for (int b = 0; b < 4; b++) tl.release(bars, pl, first + b);
}

/* The item's outputs: warpgroup 0 holds the rows' sums and maxima (lse) and hands 1 / l to
 * warpgroup 1 through xl; each writes its 256 dims. */
static __device__ __forceinline__ void wide_epilogue(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl,
                                                     uint8_t *smem, wide_state &st, const item_span &span, int cw,
                                                     int warp, int lane) {
    float *xl = reinterpret_cast<wide_red *>(smem + pl.off_red)->x.xl; /* [64 rows]: 1 / l */
    const int g = lane >> 2, c = lane & 3;
    const item_out out = item_out_of(a, pl, span);
    if (cw == 0) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float l = st.l[h];
            l += __shfl_xor_sync(0xFFFFFFFFu, l, 1);
            l += __shfl_xor_sync(0xFFFFFFFFu, l, 2);
            const int row = 16 * warp + g + 8 * h;
            if (c == 0) {
                xl[row] = l > 0.0f ? 1.0f / l : 0.0f;
                store_lse(out, row, l, st.m[h]);
            }
        }
    }
    named_sync(BAR_WIDE_ITEM, ATT_WIDE_CONSUMERS);
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; h++) inv[h] = xl[16 * warp + g + 8 * h];
    /* Written in operand order, a bf16 pair a 4-byte store (positions 2c, 2c + 1 of chunk j), half
     * the instructions of 2-byte stores of dims c and c + 4; out_flush puts each chunk back in dim
     * order (docs/performance-notes.md, wide_epilogue). */
    uint8_t *outrows = smem + pl.off_q; /* 64 rows of ATT_OUT_ROW <= the 9 Q blocks */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        uint32_t *row = reinterpret_cast<uint32_t *>(outrows + (16 * warp + g + 8 * h) * ATT_OUT_ROW) +
                        NVFP4_MLA_LATENT_DIM / 4 * cw + c;
#pragma unroll
        for (int b = 0; b < 4; b++)
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int i = 4 * j + 2 * h;
                row[32 * b + 4 * j] = bf16_pair(st.o[b][i] * inv[h], st.o[b][i + 1] * inv[h]);
            }
    }
    named_sync(BAR_WIDE_ITEM, ATT_WIDE_CONSUMERS);
    out_flush<64, ATT_WIDE_CONSUMERS, true>(out, outrows, ATT_WARPGROUP * cw + 32 * warp + lane);
    named_sync(BAR_WIDE_ITEM, ATT_WIDE_CONSUMERS); /* xl, the output rows and Q's region free for the next item */
}

#endif /* NVFP4_HAVE_WGMMA */
#endif
