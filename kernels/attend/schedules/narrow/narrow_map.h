/* The narrow schedule's map (C, host and device): one consumer warpgroup over 16 or 32 heads, one
 * producer warpgroup (mma.sync) or two (wgmma), a ring of raw record stages and operand blocks
 * (resident or streaming: fit_ring). Its CTA: narrow.cuh. */
#ifndef NVFP4_MLA_NARROW_MAP_H
#define NVFP4_MLA_NARROW_MAP_H

#include "lib/attend_map.h"

/* Registers after setmaxnreg (wgmma form; the mma.sync form does not rebalance). */
#define ATT_NARROW_CONSUMER_REGS 232 /* the consumer (the 32-head one spills a little here) */
#define ATT_NARROW_PRODUCER_REGS 136 /* (384 x 168 - 128 x 232) / 256: the rest of the launch's */
static_assert(128 * ATT_NARROW_CONSUMER_REGS + 256 * ATT_NARROW_PRODUCER_REGS <= 384 * ATT_LAUNCH_REGS,
              "narrow: over the launch's registers");

/* The fixed area at off_red: the column maxima and sums crossing the consumer's four warps. */
typedef struct narrow_red {
    float red_max[4][32]; /* [warp][column] */
    float red_sum[4][32];
} narrow_red;
#define ATT_NARROW_RED_BYTES ((int)sizeof(narrow_red))
static_assert(sizeof(narrow_red) == 2 * 4 * 32 * 4, "narrow_red: two [4 warps][32 columns] f32 arrays");

/* The two forms' rows of attend_schedules: mma.sync (no rebalance) and wgmma (two producer
 * warpgroups: one latency-bound warpgroup set the tile time; docs/performance-notes.md,
 * kind_producers). Every consumer thread frees every block. */
/* In the order of attend_schedule_facts (lib/attend_map.h): wgmma, consumers, producers,
 * consumer_regs, value_regs, producer_regs, empty_arrivals, red_bytes, variant. */
#define NARROW_SYNC_FACTS                                                                                              \
    {0, ATT_WARPGROUP, ATT_WARPGROUP, 0, 0, 0, ATT_WARPGROUP, ATT_NARROW_RED_BYTES, VARIANT_MERGE_IN_LAUNCH}
#define NARROW_WGMMA_FACTS                                                                                             \
    {1, ATT_WARPGROUP, 2 * ATT_WARPGROUP, ATT_NARROW_CONSUMER_REGS, 0, ATT_NARROW_PRODUCER_REGS, ATT_WARPGROUP,        \
     ATT_NARROW_RED_BYTES, VARIANT_MERGE_IN_LAUNCH}

#ifndef __cplusplus /* the plan's (attend_plan.c); the kernels read only the numbers */
/* The map for `heads` (16 or 32) under `budget` bytes: Q, the P tile, then the ring (up to 4 raw
 * stages, streaming allowed). The tile flow: OVERLAPPED for the wgmma consumer at 16 heads on a
 * ring of two whole tiles (at 32 heads a second set of score accumulators spills; 17 blocks would
 * give tile T+1 tile T's RoPE block), else what the ring holds. */
static inline bool narrow_fit(attend_plan *p, int record_bytes, int heads, int wgmma, int contiguous, int threads,
                              int budget) {
    *p = (attend_plan){0};
    p->wgmma = wgmma, p->heads = heads, p->contiguous = contiguous, p->threads = threads;
    p->schedule = wgmma ? SCHEDULE_NARROW_WGMMA : SCHEDULE_NARROW_SYNC;
    p->off_q = 0, p->off_p = ATT_TILE_BLOCKS * heads * 128, p->off_ring = p->off_p + heads * 128;
    if (!fit_ring(p, record_bytes, ATT_NARROW_RED_BYTES, budget, 4, true)) return false;
    if (wgmma && heads == 16 && p->flow == ATT_FLOW_RESIDENT && p->ring_blocks >= ATT_RING_BLOCKS)
        p->flow = ATT_FLOW_OVERLAPPED;
    return true;
}
#endif

#endif
