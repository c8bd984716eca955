/* The attention launch's plan, on the host (attend_plan.c): which schedule takes the call, how its
 * work is cut into items (query, head group, top-k split), and where everything lives in a CTA's
 * shared memory (the schedule's fit function). Pure arithmetic on the shapes and on the device
 * limits the context read once at init (SM count, opt-in shared memory per block after
 * NVFP4_MLA_ATTEND_SMEM_CAP, architecture, NVFP4_MLA_ATTEND_MMA, NVFP4_MLA_ATTEND_MERGE), in C, so
 * that the workspace query and the launch agree without a device call and tests/test_attend_plan.c
 * holds the table without a GPU.
 *
 * Also here, because both the plan and the kernels (kernels/attend/attend_kernel.cuh) read them: the
 * table of schedules (each one's map: schedules/<name>/<name>_map.h; what all share:
 * lib/attend_map.h), the kinds of the table of kernels, and the split-K workspace's layout. Nothing
 * here includes a CUDA header; under nvcc the small shared functions are also device functions.
 */
#ifndef NVFP4_MLA_ATTEND_PLAN_H
#define NVFP4_MLA_ATTEND_PLAN_H

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernel_args.h"
#include "lib/attend_map.h"
#include "schedules/narrow/narrow_map.h"
#include "schedules/wide_twobuf/wide_twobuf_map.h"
#include "schedules/wide_ring/wide_ring_map.h"

/* ---- the schedules: a room each under schedules/, a row each here ---- */

#ifdef __cplusplus
static constexpr attend_schedule_facts attend_schedules[SCHEDULE_COUNT] =
#else
static const attend_schedule_facts attend_schedules[SCHEDULE_COUNT] =
#endif
    {NARROW_SYNC_FACTS, NARROW_WGMMA_FACTS, WIDE_TWOBUF_FACTS, WIDE_RING_FACTS};

/* The kinds of kernel the table of kernels instantiates (kernels/attend/attend_kernels.cuh): the
 * narrow schedule's four (heads x engine), and KIND_WIDE, whose schedule the record size picks. */
enum { KIND_N16_SYNC, KIND_N32_SYNC, KIND_N16_WGMMA, KIND_N32_WGMMA, KIND_WIDE, KIND_COUNT };

/* Whether the wide kind runs the two-buffer schedule for records of record_bytes. Not for 656: a
 * quarter record would not fit a producer thread's registers (docs/performance-notes.md,
 * wide_uses_twobuf). */
ATT_CONST bool wide_uses_twobuf(int record_bytes) {
    return record_bytes != NVFP4_MLA_RECORD_BYTES_656;
}

/* The schedule that runs a kind on records of record_bytes. */
ATT_CONST int schedule_of_kind(int kind, int record_bytes) {
    if (kind == KIND_WIDE) return wide_uses_twobuf(record_bytes) ? SCHEDULE_WIDE_TWOBUF : SCHEDULE_WIDE_RING;
    return kind >= KIND_N16_WGMMA ? SCHEDULE_NARROW_WGMMA : SCHEDULE_NARROW_SYNC;
}
/* Heads an item of a kind (its MMA's N, or the wide consumer's 64). */
ATT_CONST int kind_heads(int kind) {
    return kind == KIND_WIDE ? 64 : kind == KIND_N16_SYNC || kind == KIND_N16_WGMMA ? 16 : 32;
}
ATT_CONST attend_schedule_facts schedule_facts(int schedule) {
    return attend_schedules[schedule];
}
ATT_CONST int schedule_threads(int schedule) {
    return attend_schedules[schedule].consumers + attend_schedules[schedule].producers;
}
/* Registers a thread of a schedule's launch starts with: 65536 / threads, rounded down to
 * setmaxnreg's multiple of 8. */
ATT_CONST int schedule_launch_regs(int schedule) {
    return 65536 / schedule_threads(schedule) / 8 * 8;
}
ATT_CONST int kind_threads(int kind, int record_bytes) {
    return schedule_threads(schedule_of_kind(kind, record_bytes));
}
/* Whether a kind has an instantiation of `variant` (the two wide schedules have the same variants:
 * checked below). */
ATT_CONST bool kind_has_variant(int kind, int variant) {
    return variant == VARIANT_PLAIN ||
           variant == attend_schedules[schedule_of_kind(kind, NVFP4_MLA_RECORD_BYTES_368)].variant;
}

#ifdef __cplusplus
/* A row's register split within the register file: warpgroup 0 at consumer_regs, the wide
 * consumer's warpgroup 1 at value_regs, the producers at producer_regs (0: the launch's count).
 * Checked where the kernels compile, so that a new row cannot overdraw it. */
ATT_CONST bool schedule_regs_fit(int schedule) {
    const attend_schedule_facts f = attend_schedules[schedule];
    const int launch = schedule_launch_regs(schedule);
    const int wg0 = f.consumer_regs ? f.consumer_regs : launch, wg1 = f.value_regs ? f.value_regs : launch;
    const int producer = f.producer_regs ? f.producer_regs : launch;
    return ATT_WARPGROUP * wg0 + (f.consumers - ATT_WARPGROUP) * wg1 + f.producers * producer <= 65536;
}
static_assert(schedule_regs_fit(SCHEDULE_NARROW_SYNC) && schedule_regs_fit(SCHEDULE_NARROW_WGMMA) &&
                  schedule_regs_fit(SCHEDULE_WIDE_TWOBUF) && schedule_regs_fit(SCHEDULE_WIDE_RING),
              "attend_schedules: a row's registers over the register file");
static_assert(attend_schedules[SCHEDULE_WIDE_TWOBUF].variant == attend_schedules[SCHEDULE_WIDE_RING].variant,
              "kind_has_variant: the wide kind's variants are both wide schedules'");
#endif

/* ---- the plan (its struct: lib/attend_map.h) ---- */

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
 * to place 4 CTAs in one GPC, which helps the light calls (docs/performance-notes.md,
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
