/* The two-buffer wide schedule's CTA, sm_90a (wide_twobuf_map.h: threads, registers, the fixed area,
 * the fit): 368- and 432-byte records, 64 heads of one query an item.
 *
 *   warpgroup 0 (232 registers)  scores, softmax, P.V over dims 0..255 with P from registers
 *   warpgroup 1 (168 registers)  P.V over dims 256..511 with P from the tile's RoPE block; fills the
 *                                slot ring ATT_SLOT_AHEAD tiles ahead and frees the RoPE block
 *   warpgroups 2, 3 (56)         the producers (twobuf_producer.cuh): a quarter record a thread,
 *                                staged in registers a tile ahead, into tile buffer X & 1
 *
 * The ring is two tile buffers (no raw stages); each block is freed by the warpgroup that reads it
 * last (empty_arrivals 128): blocks 1..4 by warpgroup 0, 5..8 and the RoPE block (P) by warpgroup 1.
 * The pieces of the consumers are lib/wide_consumer.cuh's; the f16 RoPE is rope_f16.cuh's. */
#ifndef NVFP4_MLA_WIDE_TWOBUF_CUH
#define NVFP4_MLA_WIDE_TWOBUF_CUH

#include "lib/wide_consumer.cuh"
#include "twobuf_producer.cuh"
#include "rope_f16.cuh"

/* The RoPE operand of an instantiation, which its producers and consumers share: f16 where the
 * records carry E4M3 RoPE codes (368 bytes: the codes through the hardware conversion, f16 wgmma
 * for the RoPE k-steps, Q's RoPE part in f16 with a per-row shift, rope_f16.cuh), else bf16 (bit
 * moves, bf16 wgmma; 432 bytes store bf16). A template flag of the producer and the consumer, so
 * that one instantiation (a variant) can take the bf16 form while the others keep f16. */
template <int RB, bool ROW_Q>
static __host__ __device__ constexpr bool wide_twobuf_rope_f16() {
    return record_layout<RB>::fp8_rope && !ROW_Q;
}

/* Whether an instantiation's producer takes its slots from the slot ring (twobuf_producer.cuh) that
 * warpgroup 1 fills. ROW_Q (light calls: items of <= ATT_ROW_Q_TILES tiles) takes neither the ring
 * nor the f16 RoPE: their per-item work (warpgroup 1's look-ahead walk before its Q copies; Q's RoPE
 * conversion before the item barrier) sits on a light call's Q -> first Q.K^T chain, which is what
 * such a call waits on (docs/performance-notes.md, "Light calls"). */
template <bool ROW_Q>
static __host__ __device__ constexpr bool wide_twobuf_slot_ring() {
    return !ROW_Q;
}

#if NVFP4_HAVE_WGMMA

/* The two consumer warpgroups (thread t = 0..255; cw = t / 128). Warpgroup 0 computes each tile's
 * scores and softmax and its half of P.V; warpgroup 1 its half, while warpgroup 0 goes on to the
 * next tile's Q.K^T. They meet twice a tile: BAR_WIDE_P (P and alpha written) and BAR_WIDE_P_FREE
 * (warpgroup 1 done with them, before the next tile's are written). Both sides bar.sync on both,
 * although each barrier only needs the other side's bar.arrive: the side that would only arrive
 * reaches the other barrier next and waits there anyway, and compute-sanitizer racecheck orders no
 * accesses across a bar.arrive (docs/performance-notes.md, attend_wide). ROPE_F16: the RoPE blocks
 * and Q's RoPE part are f16 (wide_twobuf_rope_f16). ROW_Q: Q loaded with load_q_rows (short items:
 * attend_variant_of picks), else with load_q_chunks (lib/attend_consumer.cuh says why). One
 * instantiation a warpgroup: ptxas allocates each setmaxnreg region to its own count only when the
 * code after it is its own (with one body for both, all of it got 128). */
template <int RB, int CW, bool ROW_Q, bool ROPE_F16>
static __device__ void wide_twobuf_consumer(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl,
                                            uint8_t *smem, int t) {
    constexpr int cw = CW;
    const int warp = (t >> 5) & 3, lane = t & 31;
    const attend_bars bars = bars_of(smem, pl);
    const wide_meta *meta = reinterpret_cast<const wide_meta *>(smem + pl.off_meta);
    wide_twobuf_red *red = reinterpret_cast<wide_twobuf_red *>(smem + pl.off_red);
    float *xalpha = red->wide.xalpha;
    /* ROPE_F16: the rows' 2^-s of Q's RoPE part (q_rope_to_f16) during an item's tiles */
    float *xshift = red->wide.x.xshift;
    constexpr bool RING = wide_twobuf_slot_ring<ROW_Q>();
    uint32_t pos = 0, tile = 0;
    /* warpgroup 1: the walk ATT_SLOT_AHEAD tiles ahead whose slots it puts in the slot ring
     * (twobuf_producer.cuh), one key a thread of the first 64. */
    tile_cursor ahead;
    if constexpr (RING && CW == 1) {
        ahead.item = blockIdx.x;
        cursor_seek(a, pl, ahead);
        for (int i = 0; i < ATT_SLOT_AHEAD; i++) cursor_next(a, pl, ahead);
    }
    for (int64_t item = blockIdx.x; item < pl.items; item += gridDim.x) {
        const item_span span = item_at(a, pl, item);
        const int64_t tiles = item_tiles(span);
        wide_load_q<ROW_Q>(a, pl, smem, span, cw, t);
        if constexpr (ROPE_F16) { /* load_q_chunks: a row's chunks came from other threads */
            if constexpr (!ROW_Q) named_sync(BAR_WIDE_ITEM, ATT_WIDE_CONSUMERS);
            q_rope_to_f16<32>(smem + pl.off_q + ATT_LATENT_BLOCKS * ATT_BLOCK, 32 * cw, t & 127, xshift);
        }
        named_sync(BAR_WIDE_ITEM, ATT_WIDE_CONSUMERS);
        wide_state st;
        wide_state_clear(st);
        for (int64_t k = 0; k < tiles; k++, tile++, pos += ATT_TILE_BLOCKS) {
            const wide_tile<true> tl(smem, pl, pos, tile);
            uint8_t *pbuf = tile_buffer(smem, pl, tile); /* P in the tile's RoPE block */
            if constexpr (CW == 0) {
                float lat[32], rope[32];
                uint32_t pf[4][4]; /* P' as A fragments */
                wide_scores<true, ROPE_F16>(pl, smem, bars, tl, lat, rope);
                if constexpr (ROPE_F16) rope_unshift(rope, xshift, warp, lane);
                /* warpgroup 1 is done with the last P and alpha */
                if (k > 0) named_sync(BAR_WIDE_P_FREE, ATT_WIDE_CONSUMERS);
                wide_softmax(st, lat, rope, meta[tile % ATT_META_RING], warp, lane, pf, pbuf, xalpha);
                wide_pv<true, true>(pl, smem, bars, st, tl, 1, pf, pbuf);
            } else {
                /* tile + ATT_SLOT_AHEAD's slots, loading while this warpgroup waits for P */
                int32_t ahead_slot = -1;
                if (RING && (t & 127) < ATT_KEYS) ahead_slot = cursor_slot(a, ahead, t & 127);
                if constexpr (RING) cursor_next(a, pl, ahead);
                named_sync(BAR_WIDE_P, ATT_WIDE_CONSUMERS);
                tl.wait(bars, pl, ATT_LATENT_BLOCKS); /* complete already (warpgroup 0 waited); this thread's acquire */
                wide_rescale_from(st, xalpha, warp, lane);
                wide_pv<true, false>(pl, smem, bars, st, tl, 5, nullptr, pbuf);
                /* before the release that hands the buffer back (slot_ring says why) */
                if (RING && (t & 127) < ATT_KEYS) slot_ring(smem, pl, tile + ATT_SLOT_AHEAD)[t & 127] = ahead_slot;
                tl.release(bars, pl, 0); /* P, in the RoPE block, is read */
                if (k + 1 < tiles) named_sync(BAR_WIDE_P_FREE, ATT_WIDE_CONSUMERS);
            }
        }
        wide_epilogue(a, pl, smem, st, span, cw, warp, lane);
    }
}

#endif /* NVFP4_HAVE_WGMMA */

#endif
