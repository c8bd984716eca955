/* The attention launch's plan, on the host (attend_plan.c): which kernel kind takes the call, how its
 * work is cut into items (query, head group, top-k split), and where everything lives in a CTA's
 * shared memory. Pure arithmetic on the shapes and on the device limits the context read once at
 * init (SM count, opt-in shared memory per block after NVFP4_MLA_ATTEND_SMEM_CAP, architecture,
 * NVFP4_MLA_ATTEND_MMA, NVFP4_MLA_ATTEND_MERGE), in C, so that the workspace query and the launch
 * agree without a device call and tests/test_attend_plan.c holds the table without a GPU.
 *
 * Also here, because both the plan and the kernels (kernels/attend/attend_kernel.cuh and the .cuh
 * files it includes) read them: the tile geometry, the kinds with their thread and register counts, and
 * the split-K workspace's layout. Nothing here includes a CUDA header; under nvcc the small shared
 * functions are also device functions.
 */
#ifndef NVFP4_MLA_ATTEND_PLAN_H
#define NVFP4_MLA_ATTEND_PLAN_H

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>

#include "codec.h"

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
#define ATT_PAIRED_BUFFERS 2 /* tile buffers of a paired ring (attend_pipeline.cuh, paired_buffer) */

/* The geometry of a tile's operand blocks: 64 dims each, so a 576-dim record row is the RoPE block
 * and 8 latent blocks. A resident tile is those 9 blocks; a streamed tile 17, its latent blocks
 * produced again for P.V; the largest ring holds two resident tiles. (Constants, not macros:
 * #pragma unroll takes them.) Threads of the roles: a warpgroup (the narrow consumer; a producer
 * warpgroup) and the wide consumer's two. */
enum {
    ATT_BLOCK_DIMS = 64,                                       /* dims (bf16 columns) of a block */
    ATT_LATENT_BLOCKS = NVFP4_MLA_LATENT_DIM / ATT_BLOCK_DIMS, /* 8 */
    ATT_TILE_BLOCKS = NVFP4_MLA_ROW_DIM / ATT_BLOCK_DIMS,      /* 9: RoPE, then latent 0..7 */
    ATT_STREAM_BLOCKS = ATT_TILE_BLOCKS + ATT_LATENT_BLOCKS,   /* 17: RoPE, latent 0..7, 0..7 */
    ATT_RING_SLOTS = 2 * ATT_TILE_BLOCKS,                      /* 18: two whole tiles */
    ATT_WARPGROUP = 128,
    ATT_WIDE_CONSUMERS = 2 * ATT_WARPGROUP,
};
static_assert(ATT_TILE_BLOCKS == 1 + ATT_LATENT_BLOCKS && NVFP4_MLA_ROPE_DIM == ATT_BLOCK_DIMS,
              "one RoPE block beside the latent blocks");

/* Bytes a tile of key metadata takes in the ring: tile_meta (s, r as f32, a validity byte a key) for
 * the narrow consumers, wide_meta (16 bytes a key) for the wide one (attend_pipeline.cuh checks the
 * structs against these). */
#define ATT_TILE_META_BYTES (ATT_KEYS * (4 + 4 + 1))
#define ATT_WIDE_META_BYTES (ATT_KEYS * 16)
ATT_SHARED int meta_bytes(bool wide) {
    return wide ? ATT_WIDE_META_BYTES : ATT_TILE_META_BYTES;
}
/* The consumers' reduction arrays after the metadata: red_max and red_sum, [4 warps][32 columns]
 * f32 each (attend_narrow.cuh); xalpha and xl, [64 rows] f32 each (attend_wide.cuh). */
#define ATT_NARROW_RED_BYTES (2 * 4 * 32 * 4)
#define ATT_WIDE_RED_BYTES (2 * 64 * 4)
/* The paired wide kind adds its slot ring after them (attend_producer_paired.cuh, slot_ring): the raw
 * slots of ATT_SLOT_RING tiles, [tile % ATT_SLOT_RING][64 keys] int32, each tile's written
 * ATT_SLOT_AHEAD tiles before the producer reads it. */
#define ATT_SLOT_AHEAD 3
#define ATT_SLOT_RING 4
#define ATT_PAIRED_RED_BYTES (ATT_WIDE_RED_BYTES + ATT_SLOT_RING * ATT_KEYS * 4)

/* ---- the kinds: consumer shape and engine, thread and register counts ---- */

enum { KIND_N16_SYNC, KIND_N32_SYNC, KIND_N16_WGMMA, KIND_N32_WGMMA, KIND_WIDE, KIND_COUNT };

/* Registers per thread of the roles after setmaxnreg: the threads start at 65536 / threads and
 * trade them; the producers get what the consumers leave (setmaxnreg takes multiples of 8). Tuning
 * constants, checked against the register file below (docs/performance-notes.md, ATT_SCORE_REGS). */
#define ATT_SCORE_REGS 232           /* wide warpgroup 0: scores, softmax, half of O */
#define ATT_VALUE_REGS 168           /* wide warpgroup 1: half of O */
#define ATT_PAIRED_PRODUCER_REGS 56  /* (65536 - 128 x (232 + 168)) / 256: the rest of the register file */
#define ATT_WIDE_PRODUCER_REGS 104   /* (384 x 168 - 128 x (232 + 168)) / 128: the rest of the launch's */
#define ATT_NARROW_PRODUCER_REGS 136 /* (384 x 168 - 128 x 232) / 256: the rest of the launch's */
#define ATT_NARROW_CONSUMER_REGS 232 /* the narrow consumer (the 32-head one spills a little here) */
#define ATT_LAUNCH_REGS 168          /* 65536 / 384, rounded down to setmaxnreg's multiple of 8 */
static_assert(128 * (ATT_SCORE_REGS + ATT_VALUE_REGS) + 256 * ATT_PAIRED_PRODUCER_REGS <= 65536,
              "wide paired: over the register file");
static_assert(128 * (ATT_SCORE_REGS + ATT_VALUE_REGS) + 128 * ATT_WIDE_PRODUCER_REGS <= 384 * ATT_LAUNCH_REGS,
              "wide: over the launch's registers");
static_assert(ATT_VALUE_REGS >= 128 && ATT_VALUE_REGS <= ATT_LAUNCH_REGS,
              "wide warpgroup 1 raises its count in the paired kind (128 at launch), lowers it in the other (168)");
static_assert(128 * ATT_NARROW_CONSUMER_REGS + 256 * ATT_NARROW_PRODUCER_REGS <= 384 * ATT_LAUNCH_REGS,
              "narrow: over the launch's registers");

/* Whether the wide kind pairs its buffers for records of record_bytes (the paired producer,
 * attend_producer_paired.cuh). Not for 656: a quarter record would not fit a producer thread's
 * registers (docs/performance-notes.md, wide_pairs). */
ATT_CONST bool wide_pairs(int record_bytes) {
    return record_bytes != NVFP4_MLA_RECORD_BYTES_656;
}

ATT_CONST bool kind_paired(int kind, int record_bytes) {
    return kind == KIND_WIDE && wide_pairs(record_bytes);
}
ATT_CONST int kind_consumers(int kind) {
    return kind == KIND_WIDE ? ATT_WIDE_CONSUMERS : ATT_WARPGROUP;
}
/* Producer threads of a kind (also the in-launch merge's width). Two warpgroups for the narrow
 * wgmma kinds, whose single latency-bound producer warpgroup set the tile time, and for the paired
 * wide kind (a quarter record a thread, four threads a key); one otherwise
 * (docs/performance-notes.md, kind_producers). */
ATT_CONST int kind_producers(int kind, int record_bytes) {
    return kind == KIND_N16_WGMMA || kind == KIND_N32_WGMMA || kind_paired(kind, record_bytes) ? 2 * ATT_WARPGROUP
                                                                                             : ATT_WARPGROUP;
}
ATT_CONST int kind_threads(int kind, int record_bytes) {
    return kind_consumers(kind) + kind_producers(kind, record_bytes);
}
/* The producers' setmaxnreg count; 0: no rebalance (the mma.sync kinds). */
ATT_CONST int kind_producer_regs(int kind, int record_bytes) {
    return kind_paired(kind, record_bytes) ? ATT_PAIRED_PRODUCER_REGS
           : kind == KIND_WIDE             ? ATT_WIDE_PRODUCER_REGS
           : kind >= KIND_N16_WGMMA        ? ATT_NARROW_PRODUCER_REGS
                                           : 0;
}

/* The instantiations of a kind (the table of kernels/attend/attend_kernels.cuh): PLAIN;
 * MERGE_IN_LAUNCH, split-K merged in the launch (plan.one_launch, merge_if_last), the narrow kinds
 * only; ROW_Q, Q loaded by rows (load_q_rows) for short items, the wide kind only. Each is its own
 * instantiation so that the other calls keep the register allocation without its code. */
enum { VARIANT_PLAIN, VARIANT_MERGE_IN_LAUNCH, VARIANT_ROW_Q, VARIANT_COUNT };
ATT_CONST bool kind_has_variant(int kind, int variant) {
    return variant == VARIANT_PLAIN || variant == (kind == KIND_WIDE ? VARIANT_ROW_Q : VARIANT_MERGE_IN_LAUNCH);
}

/* ---- the plan ---- */

/* How one launch is tiled and where everything lives in the dynamic shared memory (byte offsets
 * from the 1024-byte aligned base). The kernels' parameter: its layout is their code's. */
typedef struct attend_plan {
    int32_t wide;            /* 1: 64 heads per CTA, two consumer warpgroups (sm_90a wgmma) */
    int32_t wgmma;           /* 1: wgmma consumers (sm_90a), 0: mma.sync consumers */
    int32_t heads;           /* heads per item as the MMA sees them: 16, 32 (narrow) or 64 (wide) */
    int32_t groups;          /* head groups per query: ceil(h / heads) */
    int32_t splits;          /* top-k splits per (query, group) */
    int32_t tiles_per_split; /* 64-entry tiles per split */
    int32_t stages;          /* raw record stages R (paired: 0, the records pass through registers) */
    int32_t slots;           /* operand ring slots S */
    int32_t resident;        /* 1: 9 blocks a tile (latent kept for P.V), 0: 17 (streaming) */
    int32_t paired;          /* 1: 18 slots = two tile buffers written from records staged in the
                              * producers' registers (the wide kind: attend_producer_paired) */
    int32_t contiguous;      /* block_stride == block_size * record_bytes */
    int32_t grid;            /* persistent CTAs */
    int32_t threads;         /* 256 (narrow mma.sync), 384 (narrow wgmma, wide 656), 512 (paired): kind_threads */
    int32_t one_launch;      /* 1: splits > 1 merged in this launch by each group's last split */
    uint32_t slots_magic;    /* ceil(2^32 / slots): ring positions divide by a multiply */
    int64_t items;           /* n_q * groups * splits */
    int32_t off_q, off_p, off_ring, off_raw, off_valid, off_meta, off_red, off_bar;
    int32_t bytes;           /* dynamic shared memory requested (alignment slack included) */
} attend_plan;

/* The most partials one CTA's in-launch merge reads (past it the merge kernel, which spreads them
 * over a CTA a row, takes the call: attend_plan_for). */
#define ATT_ONE_LAUNCH_MERGE_BYTES (128 << 10)

/* The wide kind's items of at most this many tiles take the ROW_Q instantiation: its Q load is
 * shorter, which counts in a short item's chain, but its tile loop is slower, which counts in a
 * long one (docs/performance-notes.md, ATT_ROW_Q_TILES). */
#define ATT_ROW_Q_TILES 8

/* ---- placement: split grids in clusters of 4 ----
 * A split grid (one item a CTA, at most one CTA an SM) launches in clusters of 4 consecutive CTAs
 * when the device runs all of the grid's clusters at once (a grid whose clusters do not all fit
 * would wait a wave). The kernel does not use the cluster: the dimension only tells the scheduler
 * to place 4 CTAs in one GPC, which measured faster in the light calls (docs/performance-notes.md,
 * attend_placement_cluster). The count is a device limit the context reads at init
 * (count_quad_clusters, a->quad_clusters; 0: no clusters). */
#define ATT_QUAD 4

/* ---- the split-K workspace ----
 * splits > 1: partial O [splits, n_q, h, 512] bf16 (each split's normalised rows, rounded as an
 * output row is), partial log2-sum-exp [splits, n_q, h] f32, then, 8-byte aligned, one arrival
 * counter per (query, head group). bf16 rather than f32 partials: at small batches the partials
 * were the largest traffic of a call (docs/performance-notes.md, partial_rows); the rounding adds
 * at most half a bf16 ulp of a partial to the merged row. Every place that finds a part of the
 * layout takes it from these. */
ATT_SHARED uint64_t partial_rows(const nvfp4_mla_attend_kernel_args_t *a, int splits) {
    return (uint64_t)splits * a->num_queries * a->num_heads;
}
ATT_SHARED uint64_t partial_lse_offset(const nvfp4_mla_attend_kernel_args_t *a, int splits) {
    return partial_rows(a, splits) * NVFP4_MLA_LATENT_DIM * sizeof(uint16_t);
}
ATT_SHARED uint64_t counters_offset(const nvfp4_mla_attend_kernel_args_t *a, int splits) {
    return (partial_lse_offset(a, splits) + partial_rows(a, splits) * sizeof(float) + 7) / 8 * 8;
}

#ifdef __cplusplus
extern "C" {
#endif

/* The launch's plan; bytes == 0 when no configuration fits the device's shared memory. */
attend_plan attend_plan_for(const nvfp4_mla_attend_kernel_args_t *a);

/* Workspace bytes of a plan: the partials, then the arrival counters (every split-K plan holds them,
 * whichever way it merges, so that the size does not depend on the setting); 0 for an unsplit one. */
uint64_t attend_workspace_of(const nvfp4_mla_attend_kernel_args_t *a, const attend_plan *pl);

/* The kind and the instantiation (VARIANT_*) that run a plan. */
int attend_kind_of(const attend_plan *pl);
int attend_variant_of(const attend_plan *pl);

/* CTAs a cluster of the plan's launch: ATT_QUAD or 1 (placement, above). */
int attend_placement_cluster(const nvfp4_mla_attend_kernel_args_t *a, const attend_plan *pl);

#ifdef __cplusplus
}
#endif
#endif /* NVFP4_MLA_ATTEND_PLAN_H */
