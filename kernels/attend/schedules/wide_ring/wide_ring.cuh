/* The ring wide schedule's CTA, sm_90a (wide_ring_map.h: threads, registers, the fit): 656-byte
 * records, 64 heads of one query an item.
 *
 *   warpgroup 0 (232 registers)  scores, softmax, P.V over dims 0..255 with P from registers
 *   warpgroup 1 (168 registers)  P.V over dims 256..511 with P from the shared P tile
 *   warpgroup 2 (104)            the producer (lib/attend_producer.cuh): bulk copies into raw
 *                                stages, dequantised into a ring of operand blocks
 *
 * Each block is freed by the warpgroup that reads it last (empty_arrivals 128): the RoPE block and
 * blocks 1..4 by warpgroup 0, blocks 5..8 by warpgroup 1, out of ring order (the producer runs with
 * IN_ORDER false). The next tile needs ring blocks that warpgroup 1 frees last, so warpgroup 0
 * overlaps less than in the two-buffer schedule. The pieces of the consumers are lib/wide_consumer.cuh's. */
#ifndef NVFP4_MLA_WIDE_RING_CUH
#define NVFP4_MLA_WIDE_RING_CUH

#include "lib/attend_producer.cuh"
#include "lib/wide_consumer.cuh"

#if NVFP4_HAVE_WGMMA

/* The two consumer warpgroups (thread t = 0..255; cw = t / 128): as wide_twobuf_consumer
 * (schedules/wide_twobuf/wide_twobuf.cuh says how they meet), over ring positions and the P tile. */
template <int RB, int CW, bool ROW_Q>
static __device__ void wide_ring_consumer(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl,
                                          uint8_t *smem, int t) {
    constexpr int cw = CW;
    const int warp = (t >> 5) & 3, lane = t & 31;
    const attend_bars bars = bars_of(smem, pl);
    const wide_meta *meta = reinterpret_cast<const wide_meta *>(smem + pl.off_meta);
    float *xalpha = reinterpret_cast<wide_red *>(smem + pl.off_red)->xalpha;
    uint32_t pos = 0, tile = 0;
    for (int64_t item = blockIdx.x; item < pl.items; item += gridDim.x) {
        const item_span span = item_at(a, pl, item);
        const int64_t tiles = item_tiles(span);
        wide_load_q<ROW_Q>(a, pl, smem, span, cw, t);
        named_sync(BAR_WIDE_ITEM, ATT_WIDE_CONSUMERS);
        wide_state st;
        wide_state_clear(st);
        for (int64_t k = 0; k < tiles; k++, tile++, pos += ATT_TILE_BLOCKS) {
            const wide_tile<false> tl(smem, pl, pos, tile);
            uint8_t *pbuf = smem + pl.off_p;
            if constexpr (CW == 0) {
                float lat[32], rope[32];
                uint32_t pf[4][4]; /* P' as A fragments */
                wide_scores<false, false>(pl, smem, bars, tl, lat, rope);
                /* warpgroup 1 is done with the last P and alpha */
                if (k > 0) named_sync(BAR_WIDE_P_FREE, ATT_WIDE_CONSUMERS);
                wide_softmax(st, lat, rope, meta[tile % ATT_META_RING], warp, lane, pf, pbuf, xalpha);
                wide_pv<false, true>(pl, smem, bars, st, tl, 1, pf, pbuf);
            } else {
                named_sync(BAR_WIDE_P, ATT_WIDE_CONSUMERS);
                tl.wait(bars, pl, ATT_LATENT_BLOCKS); /* complete already (warpgroup 0 waited); this thread's acquire */
                wide_rescale_from(st, xalpha, warp, lane);
                wide_pv<false, false>(pl, smem, bars, st, tl, 5, nullptr, pbuf);
                if (k + 1 < tiles) named_sync(BAR_WIDE_P_FREE, ATT_WIDE_CONSUMERS);
            }
        }
        wide_epilogue(a, pl, smem, st, span, cw, warp, lane);
    }
}

#endif /* NVFP4_HAVE_WGMMA */

#endif
