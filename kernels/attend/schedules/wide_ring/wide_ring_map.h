/* The ring wide schedule's map (C, host and device): 656-byte records, 64 heads a CTA. Two consumer
 * warpgroups (lib/wide_consumer.cuh), one producer warpgroup over raw record stages, a shared P tile
 * and a ring of up to 18 blocks. Its CTA: wide_ring.cuh. */
#ifndef NVFP4_MLA_WIDE_RING_MAP_H
#define NVFP4_MLA_WIDE_RING_MAP_H

#include "lib/attend_map.h"

/* Registers: warpgroup 1 lowers its count from the launch's 168 (384 threads). */
#define ATT_RING_PRODUCER_REGS 104 /* (384 x 168 - 128 x (232 + 168)) / 128: the rest of the launch's */
static_assert(128 * (ATT_SCORE_REGS + ATT_VALUE_REGS) + 128 * ATT_RING_PRODUCER_REGS <= 384 * ATT_LAUNCH_REGS,
              "wide ring: over the launch's registers");
static_assert(ATT_VALUE_REGS <= ATT_LAUNCH_REGS, "wide ring: warpgroup 1 lowers its count");

/* Its row of attend_schedules: a block is freed by the one warpgroup that reads it last. */
#define WIDE_RING_FACTS                                                                                                \
    {1, ATT_WIDE_CONSUMERS, ATT_WARPGROUP, ATT_SCORE_REGS, ATT_VALUE_REGS, ATT_RING_PRODUCER_REGS, ATT_WARPGROUP,      \
     ATT_WIDE_RED_BYTES, VARIANT_ROW_Q}

#ifndef __cplusplus /* the plan's (attend_plan.c); the kernels read only the numbers */
/* The map: Q 72 KB, the shared P tile 8 KB, then a resident ring (up to 3 raw stages; no streaming). */
static inline bool wide_ring_fit(attend_plan *p, int record_bytes, int contiguous, int threads, int budget) {
    *p = (attend_plan){0};
    p->wide = 1, p->wgmma = 1, p->heads = 64, p->contiguous = contiguous, p->off_q = 0;
    p->off_p = ATT_TILE_BLOCKS * ATT_BLOCK, p->off_ring = p->off_p + ATT_BLOCK;
    p->threads = threads, p->schedule = SCHEDULE_WIDE_RING;
    return fit_ring(p, record_bytes, ATT_WIDE_RED_BYTES, budget, 3, false);
}
#endif

#endif
