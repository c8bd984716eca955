/* What every attention schedule's map is made of (C, host and device): the tile geometry, the key
 * metadata forms' sizes, the wide consumer's fixed shared-memory area and register split, the plan
 * struct every kernel takes, and the ring fitting the schedules' fit functions share. Each schedule's
 * own map is schedules/<name>/<name>_map.h; the chooser is attend_plan.c. */
#ifndef NVFP4_MLA_ATTEND_MAP_H
#define NVFP4_MLA_ATTEND_MAP_H

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernel_args.h"

#ifdef __CUDACC__
#define ATT_SHARED static __host__ __device__ __forceinline__ /* plan and kernels call it */
#define ATT_CONST static __host__ __device__ constexpr        /* also in the kernels' constant expressions */
#else
#define ATT_SHARED static inline
#define ATT_CONST static inline
#endif

/* ---- tile geometry ---- */

#define ATT_KEYS 64          /* top-k entries per tile */
#define ATT_BLOCK 8192       /* bytes of one operand block: 64 rows x 128 bytes */
#define ATT_META_RING 4      /* tiles of key metadata in flight */

/* A 576-dim record row is the RoPE block and 8 latent blocks of 64 dims. A resident tile is those 9
 * blocks; a streamed tile 17, its latent blocks produced again for P.V; the largest ring holds two
 * resident tiles. (Constants, not macros: #pragma unroll takes them.) */
enum {
    ATT_BLOCK_DIMS = 64,                                       /* dims (bf16 columns) of a block */
    ATT_LATENT_BLOCKS = NVFP4_MLA_LATENT_DIM / ATT_BLOCK_DIMS, /* 8 */
    ATT_TILE_BLOCKS = NVFP4_MLA_ROW_DIM / ATT_BLOCK_DIMS,      /* 9: RoPE, then latent 0..7 */
    ATT_STREAM_BLOCKS = ATT_TILE_BLOCKS + ATT_LATENT_BLOCKS,   /* 17: RoPE, latent 0..7, 0..7 */
    ATT_RING_BLOCKS = 2 * ATT_TILE_BLOCKS,                      /* 18: two whole tiles */
    ATT_WARPGROUP = 128,
    ATT_WIDE_CONSUMERS = 2 * ATT_WARPGROUP,
};
static_assert(ATT_TILE_BLOCKS == 1 + ATT_LATENT_BLOCKS && NVFP4_MLA_ROPE_DIM == ATT_BLOCK_DIMS,
              "one RoPE block beside the latent blocks");

/* Bytes a tile of key metadata takes in the ring: tile_meta (s, r as f32, a validity byte a key) for
 * the narrow consumers, wide_meta (16 bytes a key) for the wide one (lib/attend_pipeline.cuh checks
 * the structs against these). */
#define ATT_TILE_META_BYTES (ATT_KEYS * (4 + 4 + 1))
#define ATT_WIDE_META_BYTES (ATT_KEYS * 16)
ATT_SHARED int meta_bytes(bool wide) {
    return wide ? ATT_WIDE_META_BYTES : ATT_TILE_META_BYTES;
}

/* ---- registers ----
 * Threads start at 65536 / threads registers and trade them by setmaxnreg (multiples of 8); each
 * schedule's map checks its split against the register file. */
#define ATT_LAUNCH_REGS 168 /* 65536 / 384, rounded down to setmaxnreg's multiple of 8 */

/* ---- the wide consumer (lib/wide_consumer.cuh): two warpgroups, 64 heads ---- */

#define ATT_SCORE_REGS 232 /* warpgroup 0: scores, softmax, half of O */
#define ATT_VALUE_REGS 168 /* warpgroup 1: half of O */

/* Its fixed area at off_red: the rows' alpha from warpgroup 0 to warpgroup 1 each tile, and the
 * rows' 1 / l in the epilogue (xl), where the two-buffer schedule's f16 RoPE keeps the rows' 2^-s
 * during the item's tiles (xshift: the same warp's rows, read before the epilogue writes xl). */
typedef struct wide_red {
    float xalpha[64];
    union {
        float xl[64];
        float xshift[64];
    } x;
} wide_red;
#define ATT_WIDE_RED_BYTES ((int)sizeof(wide_red))
static_assert(sizeof(wide_red) == 2 * 64 * 4, "wide_red: two [64 rows] f32 arrays");

/* ---- the plan ---- */

/* The schedules, a room each under schedules/ and a row each of attend_schedules (attend_plan.h). */
enum { SCHEDULE_NARROW_SYNC, SCHEDULE_NARROW_WGMMA, SCHEDULE_WIDE_TWOBUF, SCHEDULE_WIDE_RING, SCHEDULE_COUNT };

/* The tile flows, a plan's `flow`: STREAMING, 17 blocks a tile (the latent blocks produced again
 * for P.V: for shared memory that cannot hold a whole tile); RESIDENT, 9 blocks a tile produced in
 * one batch and kept for P.V; OVERLAPPED, resident on an 18-block ring of two whole tiles, where
 * the narrow wgmma consumer at 16 heads waits for tile T+1 before it issues P.V of tile T
 * (narrow_tiles_overlapped). The device obeys the plan's flow; it does not derive it. */
enum { ATT_FLOW_STREAMING, ATT_FLOW_RESIDENT, ATT_FLOW_OVERLAPPED };

/* How one launch is tiled and where everything lives in the dynamic shared memory (byte offsets
 * from the 1024-byte aligned base). The kernels' parameter: its layout is their code's. */
typedef struct attend_plan {
    int32_t wide;            /* 1: 64 heads per CTA, two consumer warpgroups (sm_90a wgmma) */
    int32_t wgmma;           /* 1: wgmma consumers (sm_90a), 0: mma.sync consumers */
    int32_t heads;           /* heads per item as the MMA sees them: 16, 32 (narrow) or 64 (wide) */
    int32_t groups;          /* head groups per query: ceil(h / heads) */
    int32_t splits;          /* top-k splits per (query, group) */
    int32_t tiles_per_split; /* 64-entry tiles per split */
    int32_t stages;          /* raw record stages R (two-buffer: 0, the records pass through registers) */
    int32_t ring_blocks;           /* operand ring blocks S */
    int32_t flow;            /* the tile flow, ATT_FLOW_*: how the ring holds a tile and the consumer walks it */
    int32_t schedule;        /* SCHEDULE_* (attend_plan.h): the schedule the launch runs, which its fit set */
    int32_t contiguous;      /* block_stride == block_size * record_bytes */
    int32_t grid;            /* persistent CTAs */
    int32_t threads;         /* the schedule's (attend_schedules, attend_plan.h) */
    int32_t one_launch;      /* 1: splits > 1 merged in this launch by each group's last split */
    uint32_t ring_magic;    /* ceil(2^32 / blocks): ring positions divide by a multiply */
    int64_t items;           /* n_q * groups * splits */
    int32_t off_q, off_p, off_ring, off_raw, off_valid, off_meta, off_red, off_bar;
    int32_t bytes;           /* dynamic shared memory requested (alignment slack included) */
} attend_plan;

/* Whether a plan's ring holds whole tiles (9 blocks a tile), kept for P.V. */
ATT_SHARED bool plan_resident(const attend_plan *p) {
    return p->flow != ATT_FLOW_STREAMING;
}

#ifndef __cplusplus /* the plan's (attend_plan.c); the kernels read only the numbers */
/* ---- fitting a map (host: the schedules' fit functions) ---- */

static inline int att_align_up(int v, int a) {
    return (v + a - 1) / a * a;
}

/* Places the raw stages and their flags after the ring (none when stages is 0, as in the two-buffer
 * schedule, whose records pass through the producers' registers; off_raw / off_valid are then -1),
 * then the metadata ring, the schedule's fixed area of red_bytes and the barriers; returns the
 * bytes used. */
static inline int place_tail(attend_plan *p, int record_bytes, int red_bytes) {
    p->off_raw = p->off_ring + p->ring_blocks * ATT_BLOCK;
    p->off_valid = p->off_raw + p->stages * ATT_KEYS * record_bytes;
    p->off_meta = att_align_up(p->off_valid + p->stages * ATT_KEYS, 16);
    if (p->stages == 0) p->off_raw = p->off_valid = -1;
    p->off_red = p->off_meta + ATT_META_RING * meta_bytes(p->wide);
    p->off_bar = att_align_up(p->off_red + red_bytes, 8);
    return p->off_bar + (p->stages + 2 * p->ring_blocks) * 8;
}

/* Chooses stages R and blocks S under `budget` bytes. Resident rings (whole tiles, produced in one
 * batch) first: 17+ blocks let the producer write tile T+1 while the consumers run P.V of tile T,
 * so prefer them with 2-3 stages, then take what fits down to 9 blocks; else (if allowed)
 * streaming (3+ blocks, 2 or 1 stages). At most 2 tiles of blocks: the metadata ring's bound. */
static inline bool fit_ring(attend_plan *p, int record_bytes, int red_bytes, int budget, int max_stages,
                            bool may_stream) {
    const int want[2] = {ATT_TILE_BLOCKS + ATT_LATENT_BLOCKS, ATT_TILE_BLOCKS};
    for (int pass = 0; pass < 2; pass++)
        for (int r = pass == 0 ? max_stages : 2; r >= (pass == 0 ? 2 : 1); r--) {
            p->stages = r, p->ring_blocks = ATT_RING_BLOCKS, p->flow = ATT_FLOW_RESIDENT;
            while (p->ring_blocks >= want[pass] && place_tail(p, record_bytes, red_bytes) > budget) p->ring_blocks--;
            if (p->ring_blocks >= want[pass]) return true;
        }
    if (!may_stream) return false;
    for (int r = 2; r >= 1; r--) { /* one stage (656-byte records in 99 KB) serialises copies and work */
        p->stages = r, p->ring_blocks = 2 * ATT_STREAM_BLOCKS, p->flow = ATT_FLOW_STREAMING;
        while (p->ring_blocks >= 3 && place_tail(p, record_bytes, red_bytes) > budget) p->ring_blocks--;
        if (p->ring_blocks >= 3) return true;
    }
    return false;
}
#endif

/* ---- the schedules' facts (a row each of attend_schedules, attend_plan.h) ---- */

/* The instantiations of a schedule (the table of kernels/attend/attend_kernels.cuh): PLAIN;
 * MERGE_IN_LAUNCH, split-K merged in the launch (plan.one_launch, merge_if_last), the narrow
 * schedules only; ROW_Q, Q loaded by rows (load_q_rows) for short items, the wide ones only. Each is
 * its own instantiation so that the other calls keep the register allocation without its code. */
enum { VARIANT_PLAIN, VARIANT_MERGE_IN_LAUNCH, VARIANT_ROW_Q, VARIANT_COUNT };

typedef struct attend_schedule_facts {
    int32_t wgmma;          /* 1: its consumers run wgmma (sm_90a only) */
    int32_t consumers;      /* consumer threads */
    int32_t producers;      /* producer threads (also the in-launch merge's width) */
    int32_t consumer_regs;  /* consumer warpgroup 0's setmaxnreg count (raised); 0: no rebalance */
    int32_t value_regs;     /* the wide consumer's warpgroup 1 count (raised or lowered from the launch's); 0: none */
    int32_t producer_regs;  /* the producers' setmaxnreg count (lowered); 0: no rebalance */
    int32_t empty_arrivals; /* arrivals that free an operand block */
    int32_t red_bytes;      /* its fixed area at off_red (the <name>_red struct of its map) */
    int32_t variant;        /* its instantiation besides VARIANT_PLAIN (attend_plan.h) */
} attend_schedule_facts;

#endif /* NVFP4_MLA_ATTEND_MAP_H */
