/* The wide consumer of the attention pipeline (kernels/attend_pipeline.cuh), sm_90a: two
 * warpgroups serving 64 heads of one query (h > 32; h = 128 runs as two items per query).
 *
 *   S [64 heads, 32 keys]       = Q . K^T     warpgroup c takes keys 32c..32c+31 of each tile
 *                                             (A = Q, B = the operand blocks, both K-major)
 *   O [64 heads, 256 dims]     += P . V       warpgroup c owns dims 256c..256c+255
 *                                             (A = its own P half from registers, the other
 *                                             half from shared memory; B = the blocks MN-major)
 *
 * Why this split: 64 heads x 512 dims of f32 accumulators fill half the register file, so O must
 * be split by dims across the two warpgroups; splitting the scores by keys keeps both warpgroups'
 * tensor work equal, and what they must trade each tile is small (64 row maxima and an 8 KB bf16
 * P tile) instead of partial score tiles. Each record is dequantised once per 64 heads.
 */
#ifndef NVFP4_MLA_ATTEND_WIDE_CUH
#define NVFP4_MLA_ATTEND_WIDE_CUH

#include "attend_consumer.cuh"

#if NVFP4_HAVE_WGMMA

struct wide_state {
    float o[4][32]; /* O rows 16w + lane/4 (+8), dims 64(4c + b) + 8j + 2(lane%4) (+1) */
    float m[2];     /* running row maximum (log2 domain) of rows lane/4 and lane/4 + 8 */
    float l[2];     /* this warpgroup's part of the running row sums */
};

/* Where a tile's nine blocks are (block 0 RoPE, 1..8 latent) and how they are handed over. In a
 * paired ring (attend_producer_paired) tile `tile` is the contiguous buffer tile & 1 and its slots'
 * barriers are indexed directly; otherwise the blocks are ring positions pos0.. . */
template <bool PAIRED>
struct wide_tile {
    uint32_t pos0;   /* ring position of block 0 */
    uint32_t base;   /* PAIRED: shared address of block 0 */
    uint32_t slot0;  /* PAIRED: 9 * (tile & 1) */
    uint32_t parity; /* PAIRED: the buffer's phase, (tile >> 1) & 1 */
    __device__ __forceinline__ wide_tile(uint8_t *smem, const attend_plan &pl, uint32_t pos, uint32_t tile)
        : pos0(pos), base(smem_addr(paired_buffer(smem, pl, tile))), slot0(9u * (tile & 1u)),
          parity(paired_phase(tile)) {}
    __device__ __forceinline__ uint32_t block(uint8_t *smem, const attend_plan &pl, int i) const {
        return PAIRED ? base + (uint32_t)i * ATT_BLOCK : smem_addr(slot_ptr(smem, pl, pos0 + i));
    }
    __device__ __forceinline__ void wait(const attend_bars &bars, const attend_plan &pl, int i) const {
        if (PAIRED) mbar_wait(&bars.slot_full[slot0 + i], parity);
        else wait_full(bars, pos0 + i, pl);
    }
    __device__ __forceinline__ void release(const attend_bars &bars, const attend_plan &pl, int i) const {
        if (PAIRED) mbar_arrive(&bars.slot_empty[slot0 + i]);
        else release_slot(bars, pos0 + i, pl);
    }
};

/* The warpgroup index for the wgmma descriptors (warp_uniform): built from t >> 7 each wgmma's
 * descriptors were 64-bit sums per thread moved in by R2UR (48 R2UR among the 139 instructions
 * around P.V's 16 wgmma, Nsight Compute, h = 64). Only the descriptors take it: cw itself
 * broadcast took the consumer from 4 to 80 bytes of spills at 208 registers. */
static __device__ __forceinline__ uint32_t uniform_cw(int cw) {
    return warp_uniform((uint32_t)cw);
}

/* S over the tile's 9 blocks for this warpgroup's 32 keys. A descriptor's address field is the
 * shared address / 16 (below 2^14 for 227 KB), so the next 8 KB block is +512 with no carry: Q's
 * blocks and a paired tile's step by adding to one descriptor, where building each from a slot
 * address cost ~48 instructions a block (Nsight Compute, h = 64). */
template <bool PAIRED>
static __device__ __forceinline__ void wide_qk(const attend_plan &pl, uint8_t *smem, const attend_bars &bars,
                                               const wide_tile<PAIRED> &tl, int cw, float *lat_out, float *rope) {
    float lat[2][16]; /* two accumulator chains (k-step parity): back-to-back wgmma into one wait */
    const uint64_t dq = sw128_desc(smem_addr(smem + pl.off_q), 1024, 16); /* Q block j: + 512 j */
    const uint64_t d0 = sw128_desc(tl.block(smem, pl, 0) + 4096 * uniform_cw(cw), 1024, 16); /* rows 32cw.. */
    /* RoPE block, then the latent blocks: separate loops, each opening with a wgmma fence (see
     * narrow_qk on C7519). */
    tl.wait(bars, pl, 8);
    wgmma_fence();
    { /* a k-step is +32 bytes = +2 in the address field */
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_ss_n32<0, 0>(rope, dq + 512 * 8 + 2 * kk, d0 + 2 * kk, kk > 0);
    }
    wgmma_commit();
#pragma unroll 1
    for (int i = 1; i < 9; i++) {
        wgmma_fence();
        const uint64_t db = PAIRED ? d0 + 512 * i : sw128_desc(tl.block(smem, pl, i) + 4096 * cw, 1024, 16);
        const uint64_t da = dq + 512 * (i - 1);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) wgmma_ss_n32<0, 0>(lat[kk & 1], da + 2 * kk, db + 2 * kk, i > 1 || kk > 1);
        wgmma_commit();
    }
    wgmma_wait<0>();
    fence_regs<16>(lat[0]);
    fence_regs<16>(lat[1]);
    fence_regs<16>(rope);
#pragma unroll
    for (int i = 0; i < 16; i++) lat_out[i] = lat[0][i] + lat[1][i];
    /* Done with the other warpgroup's latent blocks, and with the RoPE block unless P goes there. */
    if (!PAIRED) tl.release(bars, pl, 0);
#pragma unroll 1
    for (int b = 0; b < 4; b++) tl.release(bars, pl, 1 + 4 * (1 - cw) + b);
}

/* Softmax over the tile's 64 keys (row maxima traded with the other warpgroup); leaves this
 * warpgroup's P' = p * s as A fragments and writes them to the P tile at pbuf for the other one. */
static __device__ __forceinline__ void wide_softmax(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl,
                                                    uint8_t *smem, wide_state &st, const float *lat, const float *rope,
                                                    const tile_meta &meta, int cw, int warp, int lane,
                                                    uint32_t (*pf)[4], uint8_t *pbuf) {
    float *xrow = reinterpret_cast<float *>(smem + pl.off_red); /* [2 warpgroups][64 rows] */
    const float scale_log2 = a.sm_scale * 1.4426950408889634f;
    const int g = lane >> 2, c = lane & 3;
    float sc[16], sk[8];
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int key = 32 * cw + 8 * j + 2 * c + e;
            const float s = meta.s[key], ls = s * scale_log2, rs = meta.r[key] * scale_log2;
            const bool v = meta.valid[key] != 0;
            sk[2 * j + e] = s;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int i = 4 * j + 2 * h + e;
                sc[i] = v ? fmaf(lat[i], ls, rope[i] * rs) : -INFINITY;
                mx[h] = fmaxf(mx[h], sc[i]);
            }
        }
#pragma unroll
    for (int h = 0; h < 2; h++) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xFFFFFFFFu, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xFFFFFFFFu, mx[h], 2));
        if (c == 0) xrow[64 * cw + 16 * warp + g + 8 * h] = mx[h];
    }
    named_sync(BAR_WIDE_MAX, 256);
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; h++) /* both warpgroups compute the same maximum for a row */
        alpha[h] = advance_max(st.m[h], fmaxf(mx[h], xrow[64 * (1 - cw) + 16 * warp + g + 8 * h]));
    uint32_t w[8]; /* [j][h]: bf16 pair of row g + 8h, keys 8j + 2c (+1) */
    float sum[2] = {0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float p0 = st.m[h] == -INFINITY ? 0.0f : exp2_ftz(sc[4 * j + 2 * h] - st.m[h]);
            const float p1 = st.m[h] == -INFINITY ? 0.0f : exp2_ftz(sc[4 * j + 2 * h + 1] - st.m[h]);
            sum[h] += p0 + p1;
            w[2 * j + h] = bf16_pair(p0 * sk[2 * j], p1 * sk[2 * j + 1]);
        }
#pragma unroll
    for (int h = 0; h < 2; h++) st.l[h] = st.l[h] * alpha[h] + sum[h];
    /* A fragment of k-step kk (keys 16kk..): rows g, g+8 of keys +0 and +8. */
#pragma unroll
    for (int kk = 0; kk < 2; kk++) {
        pf[kk][0] = w[2 * (2 * kk)], pf[kk][1] = w[2 * (2 * kk) + 1];
        pf[kk][2] = w[2 * (2 * kk + 1)], pf[kk][3] = w[2 * (2 * kk + 1) + 1];
    }
    /* The shared P tile (rows = heads, 64 keys): lane 8i + r addresses row r of matrix i = (j, h). */
    const int i4 = lane >> 3, r = lane & 7;
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const int j = 2 * half + (i4 >> 1), h = i4 & 1;
        stsm_x4(pbuf + swizzle_off(16 * warp + 8 * h + r, 32 * cw + 8 * j), pf[half][0], pf[half][1], pf[half][2],
                pf[half][3]);
    }
    fence_proxy_async();
    named_sync(BAR_WIDE_P, 256); /* both halves of P written; the row maxima read */
    if (__any_sync(0xFFFFFFFFu, alpha[0] != 1.0f || alpha[1] != 1.0f)) { /* most tiles move no maximum */
#pragma unroll
        for (int b = 0; b < 4; b++)
#pragma unroll
            for (int i = 0; i < 32; i++) st.o[b][i] *= alpha[(i >> 1) & 1];
    }
}

/* O += P V over this warpgroup's 4 latent blocks, then releases them (and, paired, the RoPE
 * block's slot, where P is). */
template <bool PAIRED>
static __device__ __forceinline__ void wide_pv(const attend_plan &pl, uint8_t *smem, const attend_bars &bars,
                                               wide_state &st, const wide_tile<PAIRED> &tl, int cw, uint32_t (*pf)[4],
                                               const uint8_t *pbuf) {
    const uint32_t p0 = smem_addr(pbuf);
#pragma unroll
    for (int b = 0; b < 4; b++) fence_regs<32>(st.o[b]);
    fence_regs<4>(pf[0]);
    fence_regs<4>(pf[1]);
    wgmma_fence();
    const uint32_t cwu = uniform_cw(cw);
    const uint32_t own = 2 * cwu, other = 2 - own; /* first k-step (16 keys) of each half; no branch on cw */
    uint64_t vd[4]; /* V block descriptors; a k-step (16 keys) is +2048 bytes = +128 */
#pragma unroll
    for (int b = 0; b < 4; b++) vd[b] = sw128_desc(tl.block(smem, pl, 1 + 4 * cwu + b), 1024, ATT_BLOCK);
    const uint64_t pd = sw128_desc(p0, 1024, 16);
    /* k-step major: consecutive wgmma go to different accumulators */
#pragma unroll
    for (int kk = 0; kk < 2; kk++)
#pragma unroll
        for (int b = 0; b < 4; b++) wgmma_rs_n64<1>(st.o[b], pf[kk], vd[b] + 128 * (own + kk), 1);
#pragma unroll
    for (int kk = 0; kk < 2; kk++)
#pragma unroll
        for (int b = 0; b < 4; b++) wgmma_ss_n64<0, 1>(st.o[b], pd + 2 * (other + kk), vd[b] + 128 * (other + kk), 1);
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int b = 0; b < 4; b++) fence_regs<32>(st.o[b]);
#pragma unroll 1
    for (int b = 0; b < 4; b++) tl.release(bars, pl, 1 + 4 * cw + b);
    if (PAIRED) tl.release(bars, pl, 0);
}

static __device__ __forceinline__ void wide_epilogue(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl,
                                                     uint8_t *smem, wide_state &st, const item_span &span, int cw,
                                                     int warp, int lane) {
    float *xrow = reinterpret_cast<float *>(smem + pl.off_red);
    const int g = lane >> 2, c = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float l = st.l[h];
        l += __shfl_xor_sync(0xFFFFFFFFu, l, 1);
        l += __shfl_xor_sync(0xFFFFFFFFu, l, 2);
        if (c == 0) xrow[64 * cw + 16 * warp + g + 8 * h] = l;
    }
    named_sync(BAR_WIDE_ITEM, 256);
    const item_out out = item_out_of(a, pl, span);
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int row = 16 * warp + g + 8 * h;
        const float l = xrow[row] + xrow[64 + row];
        inv[h] = l > 0.0f ? 1.0f / l : 0.0f;
        if (cw == 0 && c == 0) store_lse(out, row, l, st.m[h]);
    }
    if (out.out) {
        uint8_t *stage = smem + pl.off_q; /* 64 rows of ATT_STAGE_ROW <= the 9 Q blocks */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            __nv_bfloat16 *row = reinterpret_cast<__nv_bfloat16 *>(stage + (16 * warp + g + 8 * h) * ATT_STAGE_ROW) + 256 * cw + c;
#pragma unroll
            for (int b = 0; b < 4; b++)
#pragma unroll
                for (int j = 0; j < 8; j++) { /* positions 2c, 2c + 1 of chunk j: latent dims c, c + 4 */
                    const int i = 4 * j + 2 * h;
                    row[64 * b + 8 * j] = __float2bfloat16_rn(st.o[b][i] * inv[h]);
                    row[64 * b + 8 * j + 4] = __float2bfloat16_rn(st.o[b][i + 1] * inv[h]);
                }
        }
        named_sync(BAR_WIDE_ITEM, 256);
        stage_flush(out, stage, 64, 128 * cw + 32 * warp + lane, 256);
    } else {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = 16 * warp + g + 8 * h;
            if (row < out.heads) {
                float *dst = out.partial + row * 512 + 256 * cw + c;
#pragma unroll
                for (int b = 0; b < 4; b++)
#pragma unroll
                    for (int j = 0; j < 8; j++) {
                        const int i = 4 * j + 2 * h;
                        dst[64 * b + 8 * j] = st.o[b][i] * inv[h];
                        dst[64 * b + 8 * j + 4] = st.o[b][i + 1] * inv[h];
                    }
            }
        }
    }
    named_sync(BAR_WIDE_ITEM, 256); /* xrow, the stage and Q's region free for the next item */
}

/* The two wide consumer warpgroups (thread t = 0..255). PAIRED: the ring is two tile buffers. */
template <int RB, bool PAIRED>
static __device__ void attend_wide(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl, uint8_t *smem,
                                   int t) {
    const int cw = t >> 7, warp = (t >> 5) & 3, lane = t & 31;
    const attend_bars bars = bars_of(smem, pl);
    const tile_meta *meta = reinterpret_cast<const tile_meta *>(smem + pl.off_meta);
    uint32_t pos = 0, tile = 0;
    for (int64_t item = blockIdx.x; item < pl.items; item += gridDim.x) {
        const item_span span = item_at(a, pl, item);
        const int64_t tiles = item_tiles(span);
        load_q_rows(a, span.q, (int64_t)span.group * 64, 32 * cw, 32, smem + pl.off_q, ATT_BLOCK, t & 127, 128);
        named_sync(BAR_WIDE_ITEM, 256);
        wide_state st;
#pragma unroll
        for (int b = 0; b < 4; b++)
#pragma unroll
            for (int i = 0; i < 32; i++) st.o[b][i] = 0.0f;
        st.m[0] = st.m[1] = -INFINITY;
        st.l[0] = st.l[1] = 0.0f;
        for (int64_t k = 0; k < tiles; k++, tile++, pos += 9) {
            float lat[16], rope[16];
            uint32_t pf[2][4];
            const wide_tile<PAIRED> tl(smem, pl, pos, tile);
            /* P: paired, in the tile's RoPE block (both warpgroups' Q.K^T are done with it once
             * they meet on BAR_WIDE_MAX, before P is written), which saves the 8 KB shared P tile:
             * with it the paired layout would need 233,520 bytes, over the 232,448 a block may
             * have on the H200. Else the shared P tile. */
            uint8_t *pbuf = PAIRED ? paired_buffer(smem, pl, tile) : smem + pl.off_p;
            wide_qk<PAIRED>(pl, smem, bars, tl, cw, lat, rope);
            wide_softmax(a, pl, smem, st, lat, rope, meta[tile % ATT_META_RING], cw, warp, lane, pf, pbuf);
            wide_pv<PAIRED>(pl, smem, bars, st, tl, cw, pf, pbuf);
        }
        wide_epilogue(a, pl, smem, st, span, cw, warp, lane);
    }
}

#endif /* NVFP4_HAVE_WGMMA */
#endif
