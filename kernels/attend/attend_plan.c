/* The attention launch's plan (attend_plan.h): the kind, the items and the shared-memory map of a
 * call. Tested by tests/test_attend_plan.c (the table for the H200 and for 99 KB of shared memory). */
#include "attend_plan.h"

#include <stddef.h>

static int align_up(int v, int a) {
    return (v + a - 1) / a * a;
}

/* The reduction area's bytes of a kind (attend_plan.h): the paired wide kind's holds its slot ring. */
static int red_bytes_of(const attend_plan *p) {
    return !p->wide ? ATT_NARROW_RED_BYTES : p->paired ? ATT_PAIRED_RED_BYTES : ATT_WIDE_RED_BYTES;
}

/* Places the raw stages and their flags after the ring (none when stages is 0, as in the paired
 * wide kind, whose records pass through the producers' registers; off_raw / off_valid are then -1),
 * then the small arrays and barriers; returns the bytes used. */
static int place_tail(attend_plan *p, int record_bytes, int red_bytes) {
    p->off_raw = p->off_ring + p->slots * ATT_BLOCK;
    p->off_valid = p->off_raw + p->stages * ATT_KEYS * record_bytes;
    p->off_meta = align_up(p->off_valid + p->stages * ATT_KEYS, 16);
    if (p->stages == 0) p->off_raw = p->off_valid = -1;
    p->off_red = p->off_meta + ATT_META_RING * meta_bytes(p->wide);
    p->off_bar = align_up(p->off_red + red_bytes, 8);
    return p->off_bar + (p->stages + 2 * p->slots) * 8;
}

/* Chooses stages R and slots S under `budget` bytes. Resident rings (whole tiles, produced in one
 * batch) first: 17+ slots let the producer write tile T+1 while the consumers run P.V of tile T,
 * so prefer them with 2-3 stages, then take what fits down to 9 slots; else (if allowed)
 * streaming (3+ slots, 2 or 1 stages). At most 2 tiles of slots: the metadata ring's bound. */
static bool fit_ring(attend_plan *p, int record_bytes, int red_bytes, int budget, int max_stages, bool may_stream) {
    const int want[2] = {ATT_TILE_BLOCKS + ATT_LATENT_BLOCKS, ATT_TILE_BLOCKS};
    for (int pass = 0; pass < 2; pass++)
        for (int r = pass == 0 ? max_stages : 2; r >= (pass == 0 ? 2 : 1); r--) {
            p->stages = r, p->slots = ATT_RING_SLOTS, p->resident = 1;
            while (p->slots >= want[pass] && place_tail(p, record_bytes, red_bytes) > budget) p->slots--;
            if (p->slots >= want[pass]) return true;
        }
    if (!may_stream) return false;
    for (int r = 2; r >= 1; r--) { /* one stage (656-byte records in 99 KB) serialises copies and work */
        p->stages = r, p->slots = 2 * ATT_STREAM_BLOCKS, p->resident = 0;
        while (p->slots >= 3 && place_tail(p, record_bytes, red_bytes) > budget) p->slots--;
        if (p->slots >= 3) return true;
    }
    return false;
}

/* The wide kind's map, Q 72 KB: true when it fits `budget`. */
static bool fit_wide(attend_plan *p, int rb, int contiguous, int budget) {
    *p = (attend_plan){0};
    p->wide = 1, p->wgmma = 1, p->heads = 64, p->contiguous = contiguous, p->off_q = 0;
    if (wide_pairs(rb)) { /* two tile buffers of 72 KB, P in each tile's RoPE block (220 KB in all) */
        p->off_p = -1, p->off_ring = ATT_TILE_BLOCKS * ATT_BLOCK; /* after Q's blocks */
        p->paired = 1, p->resident = 1, p->stages = 0, p->slots = ATT_TILE_BLOCKS * ATT_PAIRED_BUFFERS;
        p->threads = kind_threads(KIND_WIDE, NVFP4_MLA_RECORD_BYTES_368);
        return place_tail(p, rb, red_bytes_of(p)) <= budget;
    }
    /* the shared P tile 8 KB and a 12-slot ring */
    p->off_p = ATT_TILE_BLOCKS * ATT_BLOCK, p->off_ring = p->off_p + ATT_BLOCK;
    p->threads = kind_threads(KIND_WIDE, NVFP4_MLA_RECORD_BYTES_656);
    return fit_ring(p, rb, ATT_WIDE_RED_BYTES, budget, 3, false);
}

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
     * the kinds cross in graph replays on the H200 (docs/performance-notes.md, attend_plan_for). */
    const int sms = a->sm_count > 0 ? a->sm_count : 1;
    const int64_t tiles = (a->topk + ATT_KEYS - 1) / ATT_KEYS;
    const bool wide_groups = wide_pairs(rb) || a->num_queries * ((a->num_heads + 63) / 64) >= 32;
    if (wgmma && a->num_heads > 32 && wide_groups) ok = fit_wide(&p, rb, contiguous, budget);
    const bool few = a->num_queries * a->num_heads < 256;
    for (int heads = a->num_heads <= 16 || few ? 16 : 32; !ok && heads >= 16; heads -= 16) {
        p = (attend_plan){0};
        p.wgmma = wgmma, p.heads = heads, p.contiguous = contiguous;
        p.threads = kind_threads(wgmma ? KIND_N16_WGMMA : KIND_N16_SYNC, NVFP4_MLA_RECORD_BYTES_368);
        p.off_q = 0, p.off_p = ATT_TILE_BLOCKS * heads * 128, p.off_ring = p.off_p + heads * 128;
        ok = fit_ring(&p, rb, ATT_NARROW_RED_BYTES, budget, 4, true);
    }
    if (!ok) return (attend_plan){0};
    p.bytes = place_tail(&p, rb, red_bytes_of(&p)) + 1024;
    p.slots_magic = (uint32_t)((((uint64_t)1 << 32) + (uint64_t)p.slots - 1) / (uint64_t)p.slots);
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
    if (pl->wide) return KIND_WIDE;
    if (pl->wgmma) return pl->heads == 16 ? KIND_N16_WGMMA : KIND_N32_WGMMA;
    return pl->heads == 16 ? KIND_N16_SYNC : KIND_N32_SYNC;
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
