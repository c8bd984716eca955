/* The two-buffer wide schedule's map (C, host and device): 368- and 432-byte records, 64 heads a CTA.
 * Two consumer warpgroups (lib/wide_consumer.cuh), two producer warpgroups each staging a quarter
 * record in registers (twobuf_producer.cuh), and no raw stages: the ring is two whole-tile buffers
 * beside Q. Its CTA: wide_twobuf.cuh. */
#ifndef NVFP4_MLA_WIDE_TWOBUF_MAP_H
#define NVFP4_MLA_WIDE_TWOBUF_MAP_H

#include "lib/attend_map.h"

#define ATT_TILE_BUFFERS 2 /* tile buffers of the ring (tile_buffer) */

/* Registers: warpgroup 1 raises its count from the launch's 128 (512 threads). */
#define ATT_TWOBUF_PRODUCER_REGS 56 /* (65536 - 128 x (232 + 168)) / 256: the rest of the register file */
static_assert(128 * (ATT_SCORE_REGS + ATT_VALUE_REGS) + 256 * ATT_TWOBUF_PRODUCER_REGS <= 65536,
              "wide two-buffer: over the register file");
static_assert(ATT_VALUE_REGS >= 128, "wide two-buffer: warpgroup 1 raises its count from the launch's 128");

/* The slot ring (twobuf_producer.cuh): the raw slots of ATT_SLOT_RING tiles, each tile's written
 * ATT_SLOT_AHEAD tiles before the producer reads it. */
#define ATT_SLOT_AHEAD 3
#define ATT_SLOT_RING 4

/* The fixed area at off_red: the wide consumer's, then the slot ring. */
typedef struct wide_twobuf_red {
    wide_red wide;
    int32_t slot_ring[ATT_SLOT_RING][ATT_KEYS]; /* [tile % ATT_SLOT_RING][key]: raw slots, -1 past the span */
} wide_twobuf_red;
#define ATT_TWOBUF_RED_BYTES ((int)sizeof(wide_twobuf_red))
static_assert(sizeof(wide_twobuf_red) == ATT_WIDE_RED_BYTES + ATT_SLOT_RING * ATT_KEYS * 4,
              "wide_twobuf_red: the slot ring right after the wide consumer's area");

/* Its row of attend_schedules: 256 consumers, 256 producers (a quarter record a thread, four a
 * key); a block is freed by the one warpgroup that reads it last. */
#define WIDE_TWOBUF_FACTS                                                                                              \
    {1, ATT_WIDE_CONSUMERS, 2 * ATT_WARPGROUP, ATT_SCORE_REGS, ATT_VALUE_REGS, ATT_TWOBUF_PRODUCER_REGS,              \
     ATT_WARPGROUP, ATT_TWOBUF_RED_BYTES, VARIANT_ROW_Q}

#ifndef __cplusplus /* the plan's (attend_plan.c); the kernels read only the numbers */
/* The map: Q 72 KB, two tile buffers of 72 KB, P in each tile's RoPE block (220 KB in all). */
static inline bool wide_twobuf_fit(attend_plan *p, int record_bytes, int contiguous, int threads, int budget) {
    *p = (attend_plan){0};
    p->wide = 1, p->wgmma = 1, p->heads = 64, p->contiguous = contiguous, p->off_q = 0;
    p->off_p = -1, p->off_ring = ATT_TILE_BLOCKS * ATT_BLOCK; /* after Q's blocks */
    p->schedule = SCHEDULE_WIDE_TWOBUF, p->flow = ATT_FLOW_RESIDENT, p->stages = 0,
    p->ring_blocks = ATT_TILE_BLOCKS * ATT_TILE_BUFFERS;
    p->threads = threads;
    return place_tail(p, record_bytes, ATT_TWOBUF_RED_BYTES) <= budget;
}
#endif

#endif
