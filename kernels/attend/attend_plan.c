/* The attention launch's plan (attend_plan.h): the chooser of a call's schedule (whose fit function,
 * in its map header, places the shared-memory map), its items and its split-K. Tested by
 * tests/test_attend_plan.c over tests/data/attend_plan.tsv. */
#include "attend_plan.h"

#include <stddef.h>

/* Splits over the top-k's `tiles` until the CTAs fill the SMs, and the grid. */
static void split_items(attend_plan *p, const nvfp4_mla_attend_kernel_args_t *a, int sms, int64_t tiles) {
    const int64_t base_items = a->num_queries * p->groups;
    int64_t splits = base_items >= sms || base_items == 0 ? 1 : sms / base_items;
    /* Down to one tile a split while the call stays within half the SMs, else two: one-tile splits
     * on every SM cost more in partials and in Q re-reads than their shorter chain saves
     * (docs/performance-notes.md, split_items). */
    const int64_t least = base_items * tiles > sms / 2 && tiles >= 2 ? 2 : 1;
    splits = splits <= tiles / least || tiles == 0 ? splits : tiles / least;
    splits = splits < 64 ? splits : 64;
    const int64_t per_split = tiles > 0 ? (tiles + splits - 1) / splits : 1;
    p->tiles_per_split = (int32_t)per_split;
    p->splits = (int32_t)(tiles > 0 ? (tiles + per_split - 1) / per_split : 1);
    p->items = base_items * p->splits;
    p->grid = (int32_t)(p->items < sms ? p->items : sms);
}

attend_plan attend_plan_for(const nvfp4_mla_attend_kernel_args_t *a) {
    const int rb = a->record_bytes;
    const int budget = a->smem_per_block - 1024; /* slack for aligning the base to 1024 */
    const int wgmma = a->arch == 90 && !a->force_mma_sync;
    const int contiguous = a->block_stride == a->block_size * a->record_bytes;
    attend_plan p;
    bool ok = false;
    /* Heads a CTA, by the call's size (queries x heads), every kind split over the top-k until the
     * CTAs fill the SMs: h > 32 on 368 and 432 records, 64 heads at every batch (the wide consumer:
     * a record dequantised once per 64 heads); on 656 records from 32 queries x 64-head groups.
     * Otherwise below 256 query-heads 16-head groups (the most CTAs at work: more, shorter chains),
     * from there 32 (fewer copies of the dequantisation, half the items). The thresholds are where
     * the kinds cross in graph replays (docs/performance-notes.md, attend_plan_for). */
    const int sms = a->sm_count > 0 ? a->sm_count : 1;
    const int64_t tiles = (a->topk + ATT_KEYS - 1) / ATT_KEYS;
    const bool wide_groups = wide_uses_twobuf(rb) || a->num_queries * ((a->num_heads + 63) / 64) >= 32;
    if (wgmma && a->num_heads > 32 && wide_groups)
        ok = wide_uses_twobuf(rb) ? wide_twobuf_fit(&p, rb, contiguous, schedule_threads(SCHEDULE_WIDE_TWOBUF), budget)
                            : wide_ring_fit(&p, rb, contiguous, schedule_threads(SCHEDULE_WIDE_RING), budget);
    const bool few = a->num_queries * a->num_heads < 256;
    const int narrow_threads = schedule_threads(wgmma ? SCHEDULE_NARROW_WGMMA : SCHEDULE_NARROW_SYNC);
    for (int heads = a->num_heads <= 16 || few ? 16 : 32; !ok && heads >= 16; heads -= 16)
        ok = narrow_fit(&p, rb, heads, wgmma, contiguous, narrow_threads, budget);
    if (!ok) return (attend_plan){0};
    p.bytes = place_tail(&p, rb, attend_schedules[p.schedule].red_bytes) + 1024;
    p.ring_magic = (uint32_t)((((uint64_t)1 << 32) + (uint64_t)p.ring_blocks - 1) / (uint64_t)p.ring_blocks);
    p.groups = (int32_t)((a->num_heads + p.heads - 1) / p.heads);
    split_items(&p, a, sms, tiles);
    /* In the launch (in-launch, or auto until the call finds its stream capturing) unless the last
     * split's CTA would read more than ATT_ONE_LAUNCH_MERGE_BYTES of partials (group rows x splits x
     * 1 KB): one SM reads them all, where the merge kernel spreads them over a CTA a row. The wide
     * kind has no in-launch instantiation: its splits always take the merge kernel. */
    p.one_launch = !p.wide && p.splits > 1 && a->merge_mode != NVFP4_ATTEND_MERGE_SEPARATE &&
                   (int64_t)p.heads * p.splits * NVFP4_MLA_LATENT_DIM * (int64_t)sizeof(uint16_t) <=
                       ATT_ONE_LAUNCH_MERGE_BYTES;
    return p;
}

uint64_t attend_workspace_of(const nvfp4_mla_attend_kernel_args_t *a, const attend_plan *pl) {
    if (!pl->bytes || pl->splits <= 1) return 0;
    return counters_offset(a, pl->splits) + (uint64_t)a->num_queries * pl->groups * sizeof(unsigned long long);
}

int attend_kind_of(const attend_plan *pl) {
    switch (pl->schedule) {
    case SCHEDULE_WIDE_TWOBUF:
    case SCHEDULE_WIDE_RING: return KIND_WIDE; /* the record size's row holds the schedule (schedule_of_kind) */
    case SCHEDULE_NARROW_WGMMA: return pl->heads == 16 ? KIND_N16_WGMMA : KIND_N32_WGMMA;
    default: return pl->heads == 16 ? KIND_N16_SYNC : KIND_N32_SYNC;
    }
}

/* The wide kind has no in-launch merge (the plan never gives it one_launch); ROW_Q for its short
 * items (ATT_ROW_Q_TILES). */
int attend_variant_of(const attend_plan *pl) {
    if (pl->wide) return pl->tiles_per_split <= ATT_ROW_Q_TILES ? VARIANT_ROW_Q : VARIANT_PLAIN;
    return pl->one_launch ? VARIANT_MERGE_IN_LAUNCH : VARIANT_PLAIN;
}

int attend_placement_cluster(const nvfp4_mla_attend_kernel_args_t *a, const attend_plan *pl) {
    return pl->splits > 1 && pl->grid % ATT_QUAD == 0 && pl->grid / ATT_QUAD <= a->quad_clusters ? ATT_QUAD : 1;
}
