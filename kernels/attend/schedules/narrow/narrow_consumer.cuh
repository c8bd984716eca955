/* The narrow schedule's consumer (narrow.cuh has the CTA; lib/attend_pipeline.cuh the pipeline): one warpgroup
 * serving N = 16 or 32 heads of one query, for h <= 32 (tensor-parallel ranks hold 16 or 32 heads)
 * and for every h where wgmma is not available.
 *
 * The products are transposed so that the 64 keys of a tile fill the MMA's M = 64 and the heads
 * are its N, which wastes nothing for small h (FlashMLA pads h to 64 instead):
 *   S^T [64 keys, N]   = K [64 keys, 576] . Q^T          (A = the operand blocks, K-major)
 *   O^T [512 dims, N] += V^T [512, 64 keys] . P^T        (A = the same blocks read MN-major)
 * Engines: wgmma (sm_90a; A and B from shared memory) or mma.sync m16n8k16 with ldmatrix (every
 * other target, and on sm_90 when NVFP4_MLA_ATTEND_MMA=sync). Both leave S^T in the same fragment
 * (warp w: keys 16w + lane/4 (+8), heads 8j + 2(lane%4) (+1)), so the softmax is shared; O^T rows
 * are dims 64b + 16w + .. (wgmma) or 128w + 16m + .. (mma.sync).
 *
 * Softmax runs over keys (the rows), so column maxima cross the four warps through shared memory
 * once a tile; the column sums stay per thread until the item ends. P^T goes to shared memory
 * (stmatrix, transposed) as the B operand of the second product.
 */
#ifndef NVFP4_MLA_NARROW_CONSUMER_CUH
#define NVFP4_MLA_NARROW_CONSUMER_CUH

#include "narrow_engines.cuh"

/* ---- one tile ---- */

#if NVFP4_HAVE_WGMMA
/* S^T of a resident tile with wgmma: its nine blocks in one batch (qk_issue_resident), the RoPE
 * block released once the scores are in. The per-block loop below (waits and releases for
 * streaming rings) cost the resident tiles its branches and block arithmetic. */
template <int N>
static __device__ __forceinline__ void narrow_qk_resident(const attend_plan &pl, uint8_t *smem, const attend_bars &bars,
                                                          uint32_t pos0, float *lat_out, float *rope) {
    constexpr int C = qk_chains<N, true>::value;
    float lat[C][N / 2];
    wgmma_fence();
    qk_issue_resident<N, C>(lat, rope, smem, pl, resident_descs<false>(smem, pl, pos0));
    wgmma_commit();
    wgmma_wait<0>();
    qk_pin<N, C>(lat, rope);
    release_block(bars, pos0, pl);
    qk_sum<N, C>(lat, lat_out);
}
#endif

/* S^T of one tile into (lat, rope); releases what this phase is done with. Resident wgmma tiles
 * go in one batch (narrow_qk_resident); streaming rings and mma.sync take the blocks one by one,
 * the RoPE block and the latent blocks in separate loops, each opening with a wgmma fence: ptxas
 * serialises wgmma whose accumulators meet at a branch join or cross a loop edge without one
 * (warning C7519). */
template <int N, bool WG>
static __device__ __forceinline__ void narrow_qk(const attend_plan &pl, uint8_t *smem, const attend_bars &bars,
                                                 uint32_t pos0, float *lat_out, float *rope, int warp, int lane) {
    constexpr int C = qk_chains<N, WG>::value;
    const uint8_t *qs = smem + pl.off_q;
    const int qblock = N * 128;
    float lat[C][N / 2];
    float(*rope1)[N / 2] = reinterpret_cast<float(*)[N / 2]>(rope);
    /* A resident tile is handed over whole (the producer arrives on its 9 blocks after writing all
     * of them, in ring order), so its last block's barrier covers the 8 before it. */
    wait_full(bars, plan_resident(&pl) ? pos0 + ATT_LATENT_BLOCKS : pos0, pl); /* the tile's last block */
#if NVFP4_HAVE_WGMMA
    if constexpr (WG) {
        if (plan_resident(&pl)) {
            narrow_qk_resident<N>(pl, smem, bars, pos0, lat_out, rope);
            return;
        }
        wgmma_fence(); /* from here on, wgmma streams */
    }
#endif
    qk_block<N, WG, 1>(rope1, block_ptr(smem, pl, pos0), qs + 8 * qblock, true, warp, lane);
    if constexpr (WG) {
#if NVFP4_HAVE_WGMMA
        wgmma_commit();
#endif
    } else {
        release_block(bars, pos0, pl);
    }
    /* wgmma: unrolled, so that ptxas keeps the descriptors in uniform registers without the loop's
     * bookkeeping; mma.sync keeps the loop, which spills less (docs/performance-notes.md,
     * narrow_qk). */
#pragma unroll (WG ? ATT_LATENT_BLOCKS : 1)
    for (int i = 1; i < ATT_TILE_BLOCKS; i++) {
        if (WG || !plan_resident(&pl)) wait_full(bars, pos0 + i, pl);
#if NVFP4_HAVE_WGMMA
        if (WG) wgmma_fence();
#endif
        qk_block<N, WG, C>(lat, block_ptr(smem, pl, pos0 + i), qs + (i - 1) * qblock, i == 1, warp, lane);
        if constexpr (WG) {
#if NVFP4_HAVE_WGMMA
            wgmma_commit();
            wgmma_wait<1>(); /* keep one block in flight; release the one before */
            release_block(bars, pos0 + i - 1, pl);
#endif
        } else if (!plan_resident(&pl)) {
            release_block(bars, pos0 + i, pl);
        }
    }
#if NVFP4_HAVE_WGMMA
    if (WG) {
        wgmma_wait<0>();
        qk_pin<N, C>(lat, rope);
        release_block(bars, pos0 + ATT_LATENT_BLOCKS, pl);
    }
#endif
    qk_sum<N, C>(lat, lat_out);
}

/* Softmax over the tile's keys: updates m, l, rescales O^T and writes P^T (times each key's
 * latent scale) to shared memory. */
template <int N, bool WG>
static __device__ __forceinline__ void narrow_softmax(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl,
                                                      uint8_t *smem, narrow_state<N, WG> &st, const float *lat,
                                                      const float *rope, const tile_meta &meta, int warp, int lane) {
    float *red_max = reinterpret_cast<narrow_red *>(smem + pl.off_red)->red_max[0]; /* [4 warps][32 columns] */
    uint8_t *pt = smem + pl.off_p;
    const float scale_log2 = score_scale_log2(a);
    const int g = lane >> 2;
    float sk[2], lk[2], rk[2]; /* the key's latent scale; both score scales times log2(e) sm_scale */
    bool vk[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int key = 16 * warp + g + 8 * h;
        sk[h] = meta.s[key], vk[h] = meta.valid[key] != 0;
        lk[h] = sk[h] * scale_log2, rk[h] = meta.r[key] * scale_log2;
    }
    float sc[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; i++) {
        const int h = (i >> 1) & 1;
        sc[i] = vk[h] ? fmaf(lat[i], lk[h], rope[i] * rk[h]) : -INFINITY;
    }
#pragma unroll
    for (int c = 0; c < N / 4; c++) { /* column c = value pairs i = 4(c/2) + c%2 (+2) */
        const int i = 4 * (c >> 1) + (c & 1);
        float mx = fmaxf(sc[i], sc[i + 2]);
        mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 4));
        mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 8));
        mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, 16));
        if (g == 0) red_max[32 * warp + frag_col(i, lane)] = mx;
    }
    named_sync(BAR_CONSUMER, ATT_WARPGROUP);
    float alpha[N / 4];
#pragma unroll
    for (int c = 0; c < N / 4; c++) {
        const int col = frag_col(4 * (c >> 1) + (c & 1), lane);
        const float tmax = fmaxf(fmaxf(red_max[col], red_max[32 + col]), fmaxf(red_max[64 + col], red_max[96 + col]));
        alpha[c] = advance_max(st.m[c], tmax);
    }
    uint32_t pk[N / 4]; /* bf16 pairs of P' = p * s: [j][h] */
#pragma unroll
    for (int j = 0; j < N / 8; j++) {
        float p[4];
#pragma unroll
        for (int v = 0; v < 4; v++) {
            const int c = 2 * j + (v & 1);
            p[v] = st.m[c] == -INFINITY ? 0.0f : exp2_ftz(sc[4 * j + v] - st.m[c]);
        }
#pragma unroll
        for (int e = 0; e < 2; e++) st.l[2 * j + e] = st.l[2 * j + e] * alpha[2 * j + e] + (p[e] + p[e + 2]);
        pk[2 * j] = bf16_pair(p[0] * sk[0], p[1] * sk[0]);
        pk[2 * j + 1] = bf16_pair(p[2] * sk[1], p[3] * sk[1]);
    }
    /* P^T rows = heads: lane 8h + r (< 16) addresses head 8j + r, keys 16w + 8h. */
    const int ln = lane & 15;
#pragma unroll
    for (int j = 0; j < N / 8; j++)
        stsm_x2_trans(pt + swizzle_off(8 * j + (ln & 7), 16 * warp + 8 * (ln >> 3)), pk[2 * j], pk[2 * j + 1]);
    fence_proxy_async();
    named_sync(BAR_CONSUMER, ATT_WARPGROUP); /* P^T complete; red_max free */
    bool moved = false; /* most tiles leave every running maximum where it was */
#pragma unroll
    for (int c = 0; c < N / 4; c++) moved |= alpha[c] != 1.0f;
    if (__any_sync(0xFFFFFFFFu, moved)) {
#pragma unroll
        for (int b = 0; b < ATT_LATENT_BLOCKS; b++)
#pragma unroll
            for (int i = 0; i < N / 2; i++) st.o[b][i] *= alpha[2 * (i >> 2) + (i & 1)];
    }
}

/* O^T += V^T P^T over the tile's latent blocks (positions from `pos`), then releases them. Each
 * wgmma path is whole from fence to wait: no accumulator crosses a branch join in flight. */
template <int N, bool WG>
static __device__ __forceinline__ void narrow_pv(const attend_plan &pl, uint8_t *smem, const attend_bars &bars,
                                                 narrow_state<N, WG> &st, uint32_t pos, int warp, int lane) {
    const uint8_t *pt = smem + pl.off_p;
    if constexpr (WG) {
#if NVFP4_HAVE_WGMMA
        if (plan_resident(&pl)) {
#pragma unroll
            for (int b = 0; b < ATT_LATENT_BLOCKS; b++) fence_regs<N / 2>(st.o[b]);
            wgmma_fence();
            const resident_descs<false> tile(smem, pl, pos - 1);
            pv_resident_wgmma<N, false>(st, pl, tile, pt);
            wgmma_commit();
            wgmma_wait<0>();
            pv_resident_done<N, false>(st, bars, tile, pl);
        } else { /* a streaming ring may be smaller than 8 blocks: free as we go */
#pragma unroll
            for (int b = 0; b < ATT_LATENT_BLOCKS; b++) fence_regs<N / 2>(st.o[b]);
#pragma unroll
            for (int b = 0; b < ATT_LATENT_BLOCKS; b++) {
                wait_full(bars, pos + b, pl);
                wgmma_fence();
                pv_block<N, WG>(st, block_ptr(smem, pl, pos + b), pt, b, warp, lane);
                wgmma_commit();
                wgmma_wait<1>();
                if (b > 0) release_block(bars, pos + b - 1, pl);
            }
            wgmma_wait<0>();
#pragma unroll
            for (int b = 0; b < ATT_LATENT_BLOCKS; b++) fence_regs<N / 2>(st.o[b]);
            release_block(bars, pos + (ATT_LATENT_BLOCKS - 1), pl);
        }
#endif
    } else {
#pragma unroll
        for (int b = 0; b < ATT_LATENT_BLOCKS; b++) {
            if (!plan_resident(&pl)) wait_full(bars, pos + b, pl);
            pv_block<N, WG>(st, block_ptr(smem, pl, pos + b), pt, b, warp, lane);
            release_block(bars, pos + b, pl);
        }
    }
}

/* Column sums across the warpgroup, then the item's outputs. */
template <int N, bool WG>
static __device__ __forceinline__ void narrow_epilogue(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl,
                                                       uint8_t *smem, narrow_state<N, WG> &st, const item_span &span,
                                                       int warp, int lane) {
    float *red_sum = reinterpret_cast<narrow_red *>(smem + pl.off_red)->red_sum[0]; /* [4 warps][32 columns] */
    named_sync(BAR_CONSUMER, ATT_WARPGROUP);
#pragma unroll
    for (int c = 0; c < N / 4; c++) {
        float l = st.l[c];
        l += __shfl_xor_sync(0xFFFFFFFFu, l, 4);
        l += __shfl_xor_sync(0xFFFFFFFFu, l, 8);
        l += __shfl_xor_sync(0xFFFFFFFFu, l, 16);
        if ((lane >> 2) == 0) red_sum[32 * warp + frag_col(4 * (c >> 1) + (c & 1), lane)] = l;
    }
    named_sync(BAR_CONSUMER, ATT_WARPGROUP);
    const item_out out = item_out_of(a, pl, span);
    float inv[N / 4];
#pragma unroll
    for (int c = 0; c < N / 4; c++) {
        const int col = frag_col(4 * (c >> 1) + (c & 1), lane);
        const float l = (red_sum[col] + red_sum[32 + col]) + (red_sum[64 + col] + red_sum[96 + col]);
        inv[c] = l > 0.0f ? 1.0f / l : 0.0f;
        if (warp == 0 && (lane >> 2) == 0) store_lse(out, col, l, st.m[c]);
    }
    const int dim0 = latent_dim(narrow_row0<WG>(warp, lane)), head0 = 2 * (lane & 3);
    /* output rows in Q's region: N rows of ATT_OUT_ROW <= the 9 Q blocks' 1152 N bytes */
    uint8_t *outrows = smem + pl.off_q;
    __nv_bfloat16 *base = reinterpret_cast<__nv_bfloat16 *>(outrows + head0 * ATT_OUT_ROW) + dim0;
#pragma unroll
    for (int b = 0; b < ATT_LATENT_BLOCKS; b++)
#pragma unroll
        for (int i = 0; i < N / 2; i++)
            base[narrow_col(i) * (ATT_OUT_ROW / 2) + narrow_row<WG>(b, i)] =
                __float2bfloat16_rn(st.o[b][i] * inv[2 * (i >> 2) + (i & 1)]);
    named_sync(BAR_CONSUMER, ATT_WARPGROUP);
    out_flush<N, ATT_WARPGROUP, false>(out, outrows, 32 * warp + lane);
    named_sync(BAR_CONSUMER, ATT_WARPGROUP); /* the output rows (Q's region) free for the next item's Q */
}

#if NVFP4_HAVE_WGMMA
/* An item's tiles on a resident ring with wgmma, overlapped: P.V of tile T and Q.K^T of tile T+1
 * are issued back to back, so the tensor cores go from one to the other without the consumer
 * waiting in between (one warp per scheduler: each wait was a drained pipe). Tile T's latent
 * blocks are released when P.V completes (wgmma groups complete in order), T+1's RoPE block when
 * its scores do: still ring order for the producer. */
template <int N>
static __device__ __forceinline__ void narrow_tiles_overlapped(const nvfp4_mla_attend_kernel_args_t &a,
                                                               const attend_plan &pl, uint8_t *smem,
                                                               const attend_bars &bars, const tile_meta *meta,
                                                               narrow_state<N, true> &st, int64_t tiles, uint32_t &pos,
                                                               uint32_t &tile, int warp, int lane) {
    static_assert(N == 16,
                  "at 32 heads a second set of score accumulators spilled, and 32 heads have at most 17 blocks");
    constexpr int C = qk_chains<N, true>::value;
    constexpr bool CONTIG = true; /* ATT_RING_BLOCKS: attend_narrow's condition, fit_ring's largest ring */
    const uint8_t *pt = smem + pl.off_p;
    float acc[C][N / 2], rope[N / 2], lat[N / 2];
    wait_full(bars, pos + ATT_LATENT_BLOCKS, pl);
    wgmma_fence();
    qk_issue_resident<N, C>(acc, rope, smem, pl, resident_descs<CONTIG>(smem, pl, pos));
    wgmma_commit();
    wgmma_wait<0>();
    qk_collect<N, C>(acc, rope, lat);
    release_block(bars, pos, pl);
    for (int64_t k = 0; k < tiles; k++, tile++, pos += ATT_TILE_BLOCKS) {
        narrow_softmax<N, true>(a, pl, smem, st, lat, rope, meta[tile % ATT_META_RING], warp, lane);
        const bool next = k + 1 < tiles;
        /* The next tile's wait comes first: a wait loop with P.V's accumulators in flight would be
         * a loop edge (C7519). The producer wrote that tile into blocks freed before this one. */
        if (next) wait_full(bars, pos + ATT_TILE_BLOCKS + ATT_LATENT_BLOCKS, pl);
#pragma unroll
        for (int b = 0; b < ATT_LATENT_BLOCKS; b++) fence_regs<N / 2>(st.o[b]);
        wgmma_fence();
        const resident_descs<CONTIG> cur(smem, pl, pos);
        pv_resident_wgmma<N, CONTIG>(st, pl, cur, pt);
        wgmma_commit();
        if (next) {
            wgmma_fence(); /* the score registers were read by this tile's softmax */
            qk_issue_resident<N, C>(acc, rope, smem, pl, resident_descs<CONTIG>(smem, pl, pos + ATT_TILE_BLOCKS));
            wgmma_commit();
            wgmma_wait<1>(); /* P.V's group: wgmma groups complete in order */
            pv_resident_done<N, CONTIG>(st, bars, cur, pl);
            wgmma_wait<0>();
            qk_collect<N, C>(acc, rope, lat);
            release_block(bars, pos + ATT_TILE_BLOCKS, pl);
        } else {
            wgmma_wait<0>();
            pv_resident_done<N, CONTIG>(st, bars, cur, pl);
        }
    }
}
#endif

/* The narrow consumer warpgroup (thread t = 0..127). */
template <int N, bool WG>
static __device__ void attend_narrow(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl, uint8_t *smem,
                                     int t) {
    const int warp = t >> 5, lane = t & 31;
    const attend_bars bars = bars_of(smem, pl);
    const tile_meta *meta = reinterpret_cast<const tile_meta *>(smem + pl.off_meta);
    const int per_tile = plan_resident(&pl) ? ATT_TILE_BLOCKS : ATT_STREAM_BLOCKS;
    uint32_t pos = 0, tile = 0;
    for (int64_t item = blockIdx.x; item < pl.items; item += gridDim.x) {
        const item_span span = item_at(a, pl, item);
        const int64_t tiles = item_tiles(span);
        load_q_rows<N>(a, span.q, (int64_t)span.group * N, 0, smem + pl.off_q, N * 128, t);
        named_sync(BAR_CONSUMER, ATT_WARPGROUP);
        narrow_state<N, WG> st;
#pragma unroll
        for (int b = 0; b < ATT_LATENT_BLOCKS; b++)
#pragma unroll
            for (int i = 0; i < N / 2; i++) st.o[b][i] = 0.0f;
#pragma unroll
        for (int c = 0; c < N / 4; c++) st.m[c] = -INFINITY, st.l[c] = 0.0f;
#if NVFP4_HAVE_WGMMA
        /* Two whole tiles of blocks: tile T+1 is waited for before P.V of tile T is issued, so it
         * must not need T's blocks (at 17 blocks, T+1 takes T's RoPE block: docs/performance-notes.md,
         * narrow_tiles_overlapped). */
        /* (an empty item has no tile to wait for) */
        if (WG && N == 16 && pl.flow == ATT_FLOW_OVERLAPPED && tiles > 0) { /* the plan decides (narrow_fit) */
            if constexpr (WG && N == 16)
                narrow_tiles_overlapped<N>(a, pl, smem, bars, meta, st, tiles, pos, tile, warp, lane);
            narrow_epilogue<N, WG>(a, pl, smem, st, span, warp, lane);
            continue;
        }
#endif
        for (int64_t k = 0; k < tiles; k++, tile++, pos += per_tile) {
            float lat[N / 2], rope[N / 2];
            narrow_qk<N, WG>(pl, smem, bars, pos, lat, rope, warp, lane);
            narrow_softmax<N, WG>(a, pl, smem, st, lat, rope, meta[tile % ATT_META_RING], warp, lane);
            narrow_pv<N, WG>(pl, smem, bars, st, plan_resident(&pl) ? pos + 1 : pos + ATT_TILE_BLOCKS, warp, lane);
        }
        narrow_epilogue<N, WG>(a, pl, smem, st, span, warp, lane);
    }
}

#endif
