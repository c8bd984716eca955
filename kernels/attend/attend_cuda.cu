/* Sparse MLA attention over records on CUDA, checked against kernels/attend/attend_cpu.c
 * (tests/test_gpu_attend.c).
 *
 * One warp-specialised, persistent kernel family (kernels/attend/attend_pipeline.cuh):
 *  - producer warps (two warpgroups for the narrow wgmma kinds and the paired wide kind, else
 *    one) keep bulk copies of raw records in flight (one copy per record, completing on an
 *    mbarrier; the paired wide kind loads records into registers instead) and dequantise each
 *    tile once per CTA into 8 KB operand blocks of bf16 (64
 *    keys x 64 dims, 128-byte swizzle) handed over through a ring: R raw stages beside the ring,
 *    or, in the paired wide kind (368 and 432 bytes), a ring of two whole-tile buffers written from
 *    records the producer threads hold in registers (attend_producer_paired);
 *  - consumer warpgroups read the blocks straight from shared memory with wgmma (sm_90a) or
 *    mma.sync (other targets): the narrow consumer (attend_narrow.cuh) for 16 or 32 heads, the
 *    wide one (attend_wide.cuh) for 64 heads with two warpgroups;
 *  - online softmax with the outer and RoPE scales folded into score columns and P; split-K over
 *    the top-k when queries x head groups cannot fill the GPU (down to one or two tiles a split), merged
 *    by a second kernel, one CTA a (query, head) row, launched dependent on the attention grid
 *    (programmatic dependent launch: its launch overlaps the attention's tail), or, for small
 *    merges, in the same launch by the producer warps of the last split of each (query, head
 *    group) to arrive on a tagged counter in the workspace (one launch: less host time, more GPU
 *    time, since one SM reads all of a group's partials). NVFP4_MLA_ATTEND_MERGE picks; its
 *    default, auto, merges in the launch on an eager stream when the merge reads at most
 *    ATT_ONE_LAUNCH_MERGE_BYTES, and with the second kernel on a capturing one
 *    (stream_capturing).
 * CTAs walk work items (query, head group, top-k split) in a static round robin, so the producer
 * streams the next item's records while the consumers finish the current one.
 *
 * The plan (attend_plan_for) is pure arithmetic on the shapes and the device limits the context
 * read once at init (SM count, the opt-in shared memory per block, possibly capped by
 * NVFP4_MLA_ATTEND_SMEM_CAP, the architecture, NVFP4_MLA_ATTEND_MMA) and the merge setting: the
 * launch path makes no device query and sets no attribute (under NVFP4_MLA_ATTEND_MERGE=auto a
 * split call reads the stream's capture state, stream_capturing). The workspace does not depend
 * on the merge. Shared memory picks the configuration: wide needs about 220 KB, narrow 32 heads
 * with whole tiles resident about 120 KB+, narrow 16 heads streams its tiles through 3 slots in
 * under 99 KB (sm_120 parts), dequantising the latent twice.
 *
 * Differences from the CPU reference (attention in double over the same binary32 values): scales
 * applied to f32 sums instead of elements, P rounded to bf16 for the tensor cores (against a
 * running maximum that may trail the scores by up to 2^8: advance_max), f32 sums, and split-K
 * partial rows rounded to bf16 before the merge (the workspace, attend_consumer.cuh).
 * Entries with slot -1, past valid_len, or outside the cache count for nothing (the CPU entry
 * rejects out-of-range ids; a CUDA entry cannot read them without a sync).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attend_narrow.cuh"
#include "attend_pipeline.cuh"
#include "attend_producer.cuh"
#include "attend_producer_paired.cuh"
#include "attend_split_merge.cuh"
#include "attend_wide.cuh"
#include "backends.h"
#include "codec.h"
#include "cuda_util.cuh"

/* Registers per thread of the roles after setmaxnreg: the threads start at 65536 / threads and
 * trade them. Wide: warpgroup 0 x 232 (scores, softmax, half of O; at 216 it spilled O) and
 * warpgroup 1 x 168 (half of O) with 2 paired producer warpgroups x 56 (512 threads, all 64K) or,
 * for 656-byte records, 1 producer warpgroup x 104 (384 threads); narrow wgmma: 1 consumer x 232 +
 * 2 producers x 136. Tuning constants, checked against the register file by the asserts below; the
 * producers' counts are what the consumers leave (setmaxnreg takes multiples of 8). */
#define ATT_SCORE_REGS 232           /* wide warpgroup 0: scores, softmax, half of O (at 216 it spilled O) */
#define ATT_VALUE_REGS 168           /* wide warpgroup 1: half of O (at 152 it spilled 161 words, ptxas) */
#define ATT_PAIRED_PRODUCER_REGS 56  /* (65536 - 128 x (232 + 168)) / 256: the rest of the register file */
#define ATT_WIDE_PRODUCER_REGS 104   /* (384 x 168 - 128 x (232 + 168)) / 128: the rest of the launch's */
#define ATT_NARROW_PRODUCER_REGS 136 /* (384 x 168 - 128 x 232) / 256: the rest of the launch's */
#define ATT_NARROW_CONSUMER_REGS 232 /* the 32-head one spills a little here (kind_threads), used 255 before */
/* The most partials one CTA's in-launch merge reads (past it the merge kernel, which spreads them
 * over a CTA a row, takes the call: attend_plan_for). */
#define ATT_ONE_LAUNCH_MERGE_BYTES (128 << 10)
#define ATT_LAUNCH_REGS 168 /* 65536 / 384, rounded down to setmaxnreg's multiple of 8 */
static_assert(128 * (ATT_SCORE_REGS + ATT_VALUE_REGS) + 256 * ATT_PAIRED_PRODUCER_REGS <= 65536,
              "wide paired: over the register file");
static_assert(128 * (ATT_SCORE_REGS + ATT_VALUE_REGS) + 128 * ATT_WIDE_PRODUCER_REGS <= 384 * ATT_LAUNCH_REGS,
              "wide: over the launch's registers");
static_assert(ATT_VALUE_REGS >= 128 && ATT_VALUE_REGS <= ATT_LAUNCH_REGS,
              "wide warpgroup 1 raises its count in the paired kind (128 at launch), lowers it in the other (168)");
static_assert(128 * ATT_NARROW_CONSUMER_REGS + 256 * ATT_NARROW_PRODUCER_REGS <= 384 * ATT_LAUNCH_REGS,
              "narrow: over the launch's registers");

/* Kernel kinds: the consumer shape and engine. */
enum { KIND_N16_SYNC, KIND_N32_SYNC, KIND_N16_WGMMA, KIND_N32_WGMMA, KIND_WIDE, KIND_COUNT };

/* Producer threads of a kind (also the in-launch merge's width). The narrow wgmma kinds take two
 * producer warpgroups: with one, the producer (one warp per scheduler, latency-bound at 0.4 issues
 * a cycle) set the tile time and the consumer waited on it for 20% of its samples (Nsight
 * Compute, h = 16). Two measured 8-10% faster at h = 16 and at h = 32, although the latter's
 * consumer, which used 255 registers with 256 threads, now runs at setmaxnreg's 232 and spills
 * (ptxas -v: a 40-byte stack frame, 56 bytes of spill stores; ptxas allocates each setmaxnreg
 * region to its own count). The paired wide kind takes two as well: its producer holds a quarter
 * record a thread (four threads a key, attend_producer_paired); with bulk copies, one warpgroup at
 * 88 registers had measured 3% slower than two at 48 (docs/performance-notes.md). */
template <int KIND, int RB>
struct kind_threads {
    static constexpr bool paired = KIND == KIND_WIDE && wide_pairs(RB);
    static constexpr int consumers = KIND == KIND_WIDE ? ATT_WIDE_CONSUMERS : ATT_WARPGROUP;
    static constexpr int producers =
        KIND == KIND_N16_WGMMA || KIND == KIND_N32_WGMMA || paired ? 2 * ATT_WARPGROUP : ATT_WARPGROUP;
    static constexpr int total = consumers + producers;
    /* The producers' setmaxnreg count; 0: no rebalance (the mma.sync kinds). */
    static constexpr int producer_regs = paired                 ? ATT_PAIRED_PRODUCER_REGS
                                         : KIND == KIND_WIDE    ? ATT_WIDE_PRODUCER_REGS
                                         : KIND >= KIND_N16_WGMMA ? ATT_NARROW_PRODUCER_REGS
                                                                : 0;
};

/* ONE_LAUNCH: split-K merged in this launch (plan.one_launch, merge_if_last); its own
 * instantiation, so that the other calls keep the register allocation without the merge tail.
 * ROW_Q (the wide kind): Q loaded by rows (load_q_rows), for short items; its own instantiation
 * for the same reason (attend_wide, launch_kind). */
template <int KIND, int RB, bool ONE_LAUNCH, bool ROW_Q = false>
__global__ void __launch_bounds__(kind_threads<KIND, RB>::total, 1)
    nvfp4_attend_kernel(const __grid_constant__ nvfp4_mla_attend_kernel_args_t a,
                        const __grid_constant__ attend_plan pl) {
    constexpr bool WG = KIND >= KIND_N16_WGMMA;
    constexpr int CONSUMERS = kind_threads<KIND, RB>::consumers, PRODUCERS = kind_threads<KIND, RB>::producers;
    constexpr bool PAIRED = kind_threads<KIND, RB>::paired;
#if !NVFP4_HAVE_WGMMA
    if constexpr (WG) { /* the planner never picks wgmma kinds off sm_90a */
        __trap();
        return;
    }
#endif
    extern __shared__ uint8_t smem_raw[];
    uint8_t *smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u); /* SW128 atoms: 1024-aligned */
    if (threadIdx.x == 0) {
        const attend_bars bars = bars_of(smem, pl);
        /* Every thread arrives on every barrier it signals (attend_pipeline.cuh, release_slot). */
        for (int s = 0; s < pl.stages; s++) mbar_init(&bars.raw_full[s], PRODUCERS);
        for (int s = 0; s < pl.slots; s++) {
            mbar_init(&bars.slot_full[s], PRODUCERS);
            /* the wide kind: each block is freed by the one warpgroup that reads it last */
            mbar_init(&bars.slot_empty[s], KIND == KIND_WIDE ? CONSUMERS / 2 : CONSUMERS);
        }
        mbar_init_fence();
    }
    __syncthreads();
    pdl_wait();    /* the stream's previous grid: its writes of q, slots, the cache; its reads of out */
    pdl_release(); /* the merge (or the stream's next grid) may start launching */
    if (threadIdx.x >= CONSUMERS) {
#if NVFP4_HAVE_WGMMA
        constexpr int PRODUCER_REGS = kind_threads<KIND, RB>::producer_regs;
        if constexpr (PRODUCER_REGS > 0) setmaxnreg_dec<PRODUCER_REGS>();
#endif
        if constexpr (PAIRED)
            attend_producer_paired<RB, PRODUCERS>(a, pl, smem, threadIdx.x - CONSUMERS);
        else
            attend_producer<RB, PRODUCERS, KIND != KIND_WIDE, meta_of<KIND == KIND_WIDE>>(a, pl, smem,
                                                                                         threadIdx.x - CONSUMERS);
        if constexpr (ONE_LAUNCH)
            merge_if_last(a, pl, smem, threadIdx.x - CONSUMERS, PRODUCERS, CONSUMERS, BAR_PRODUCER);
    } else {
#if NVFP4_HAVE_WGMMA
        if constexpr (WG && KIND != KIND_WIDE && PRODUCERS == 2 * ATT_WARPGROUP)
            setmaxnreg_inc<ATT_NARROW_CONSUMER_REGS>();
#endif
        if constexpr (KIND == KIND_WIDE) {
#if NVFP4_HAVE_WGMMA
            if (threadIdx.x < ATT_WARPGROUP) {
                setmaxnreg_inc<ATT_SCORE_REGS>();
                attend_wide<RB, PAIRED, 0, ROW_Q>(a, pl, smem, threadIdx.x);
            } else {
                if constexpr (PAIRED) setmaxnreg_inc<ATT_VALUE_REGS>();
                else setmaxnreg_dec<ATT_VALUE_REGS>();
                attend_wide<RB, PAIRED, 1, ROW_Q>(a, pl, smem, threadIdx.x);
            }
#endif
        } else {
            attend_narrow<(KIND == KIND_N16_SYNC || KIND == KIND_N16_WGMMA) ? 16 : 32, WG>(a, pl, smem, threadIdx.x);
        }
        if constexpr (ONE_LAUNCH) { /* hand the stored partials to the producers, which merge */
            __threadfence();
            named_arrive(BAR_MERGE, CONSUMERS + PRODUCERS);
        }
    }
}

/* ---- the plan ---- */

static int align_up(int v, int a) {
    return (v + a - 1) / a * a;
}

/* Places the raw stages and their flags after the ring (none when stages is 0, as in the paired
 * wide kind, whose records pass through the producers' registers; off_raw / off_valid are then -1),
 * then the small arrays and barriers; returns the bytes used. */
static int place_tail(attend_plan &p, int record_bytes, int red_bytes) {
    p.off_raw = p.off_ring + p.slots * ATT_BLOCK;
    p.off_valid = p.off_raw + p.stages * ATT_KEYS * record_bytes;
    p.off_meta = align_up(p.off_valid + p.stages * ATT_KEYS, 16);
    if (p.stages == 0) p.off_raw = p.off_valid = -1;
    p.off_red = p.off_meta + ATT_META_RING * meta_bytes(p.wide);
    p.off_bar = align_up(p.off_red + red_bytes, 8);
    return p.off_bar + (p.stages + 2 * p.slots) * 8;
}

/* Chooses stages R and slots S under `budget` bytes. Resident rings (whole tiles, produced in one
 * batch) first: 17+ slots let the producer write tile T+1 while the consumers run P.V of tile T,
 * so prefer them with 2-3 stages, then take what fits down to 9 slots; else (if allowed)
 * streaming (3+ slots, 2 or 1 stages). At most 2 tiles of slots: the metadata ring's bound. */
static bool fit_ring(attend_plan &p, int record_bytes, int red_bytes, int budget, int max_stages, bool may_stream) {
    const int want[2] = {ATT_TILE_BLOCKS + ATT_LATENT_BLOCKS, ATT_TILE_BLOCKS};
    for (int pass = 0; pass < 2; pass++)
        for (int r = pass == 0 ? max_stages : 2; r >= (pass == 0 ? 2 : 1); r--) {
            p.stages = r, p.slots = ATT_RING_SLOTS, p.resident = 1;
            while (p.slots >= want[pass] && place_tail(p, record_bytes, red_bytes) > budget) p.slots--;
            if (p.slots >= want[pass]) return true;
        }
    if (!may_stream) return false;
    for (int r = 2; r >= 1; r--) { /* one stage (656-byte records in 99 KB) serialises copies and work */
        p.stages = r, p.slots = 2 * ATT_STREAM_BLOCKS, p.resident = 0;
        while (p.slots >= 3 && place_tail(p, record_bytes, red_bytes) > budget) p.slots--;
        if (p.slots >= 3) return true;
    }
    return false;
}

/* The launch's plan; p.bytes == 0 when no configuration fits the device's shared memory. */
static attend_plan attend_plan_for(const nvfp4_mla_attend_kernel_args_t *a) {
    const int rb = a->record_bytes;
    const int budget = a->smem_per_block - 1024; /* slack for aligning the base to 1024 */
    const int wgmma = a->arch == 90 && !a->force_mma_sync;
    const int contiguous = a->block_stride == a->block_size * a->record_bytes;
    attend_plan p;
    bool ok = false;
    /* Heads a CTA, by the call's size (queries x heads), every kind split over the top-k until the
     * CTAs fill the SMs: h > 32 on 368 and 432 records, 64 heads at every batch (the wide
     * consumer: the most heads a tile, a record dequantised once per 64 heads; with bf16 split
     * partials it beat 16- and 32-head groups at every light shape, e.g. 4 x 128 heads 17.9 against
     * 21.3 us); on 656 records from 32 queries x 64-head groups. Otherwise below 256 query-heads
     * 16-head groups (the most CTAs at work: more, shorter chains), from there 32 (fewer copies of
     * the dequantisation, half the items: 8 queries x 32 heads 16.5 against 18.0 us). The
     * thresholds are where the kinds cross in graph replays on the H200 (docs/performance-notes.md,
     * "plan by call size" and "small batches, round 2"). */
    const int sms = a->sm_count > 0 ? a->sm_count : 1;
    const int64_t tiles = (a->topk + ATT_KEYS - 1) / ATT_KEYS;
    const bool wide_groups = wide_pairs(rb) || a->num_queries * ((a->num_heads + 63) / 64) >= 32;
    if (wgmma && a->num_heads > 32 && wide_groups) { /* wide: Q 72 KB */
        p = attend_plan();
        p.wide = 1, p.wgmma = 1, p.heads = 64, p.contiguous = contiguous, p.off_q = 0;
        if (wide_pairs(rb)) { /* two tile buffers of 72 KB, P in each tile's RoPE block (220 KB in all) */
            p.off_p = -1, p.off_ring = ATT_TILE_BLOCKS * ATT_BLOCK; /* after Q's blocks */
            p.paired = 1, p.resident = 1, p.stages = 0, p.slots = ATT_TILE_BLOCKS * ATT_PAIRED_BUFFERS;
            p.threads = kind_threads<KIND_WIDE, NVFP4_MLA_RECORD_BYTES_368>::total;
            ok = place_tail(p, rb, 2 * 64 * 4) <= budget;
        } else { /* the shared P tile 8 KB and a 12-slot ring */
            p.off_p = ATT_TILE_BLOCKS * ATT_BLOCK, p.off_ring = p.off_p + ATT_BLOCK;
            p.threads = kind_threads<KIND_WIDE, NVFP4_MLA_RECORD_BYTES_656>::total;
            ok = fit_ring(p, rb, 2 * 64 * 4, budget, 3, false);
        }
    }
    const bool few = a->num_queries * a->num_heads < 256;
    for (int heads = a->num_heads <= 16 || few ? 16 : 32; !ok && heads >= 16; heads -= 16) {
        p = attend_plan();
        p.wgmma = wgmma, p.heads = heads, p.contiguous = contiguous;
        p.threads = wgmma ? kind_threads<KIND_N16_WGMMA, 368>::total : kind_threads<KIND_N16_SYNC, 368>::total;
        p.off_q = 0, p.off_p = ATT_TILE_BLOCKS * heads * 128, p.off_ring = p.off_p + heads * 128;
        ok = fit_ring(p, rb, 2 * 4 * 32 * 4, budget, 4, true);
    }
    if (!ok) return attend_plan();
    p.bytes = place_tail(p, rb, p.wide ? 2 * 64 * 4 : 2 * 4 * 32 * 4) + 1024;
    p.slots_magic = (uint32_t)((((uint64_t)1 << 32) + (uint64_t)p.slots - 1) / (uint64_t)p.slots);
    p.groups = (int32_t)((a->num_heads + p.heads - 1) / p.heads);
    const int64_t base_items = a->num_queries * p.groups;
    int64_t splits = base_items >= sms || base_items == 0 ? 1 : sms / base_items;
    /* Down to one tile a split while the call stays within half the SMs, else two: one-tile splits
     * on every SM cost more in partials and in Q re-reads than their shorter chain saves (graph
     * replays on the H200: 4 queries x 64 heads 15.5 us at 32 splits of one tile, 14.9 at 16 of two;
     * 1 x 64 heads, 32 CTAs: 11.7 against 13.5; docs/performance-notes.md). */
    const int64_t least = base_items * tiles > sms / 2 && tiles >= 2 ? 2 : 1;
    splits = splits <= tiles / least || tiles == 0 ? splits : tiles / least;
    splits = splits < 64 ? splits : 64;
    const int64_t per_split = tiles > 0 ? (tiles + splits - 1) / splits : 1;
    p.tiles_per_split = (int32_t)per_split;
    p.splits = (int32_t)(tiles > 0 ? (tiles + per_split - 1) / per_split : 1);
    p.items = base_items * p.splits;
    p.grid = (int32_t)(p.items < sms ? p.items : sms);
    /* In the launch (in-launch, or auto until the call finds its stream capturing) unless the last
     * split's CTA would read more than ATT_ONE_LAUNCH_MERGE_BYTES of partials (group rows x splits x
     * 1 KB): one SM reads them all, where the merge kernel spreads them over a CTA a row. The wide
     * kind has no in-launch instantiation: its splits always take the merge kernel. */
    p.one_launch = !p.wide && p.splits > 1 && a->merge_mode != NVFP4_ATTEND_MERGE_SEPARATE &&
                   (int64_t)p.heads * p.splits * NVFP4_MLA_LATENT_DIM * (int64_t)sizeof(uint16_t) <=
                       ATT_ONE_LAUNCH_MERGE_BYTES;
    return p;
}

/* Partials, then the arrival counters (every split-K plan holds them, whichever way it merges, so
 * that the size does not depend on the setting). */
static uint64_t workspace_of(const nvfp4_mla_attend_kernel_args_t *a, const attend_plan &pl) {
    if (!pl.bytes || pl.splits <= 1) return 0;
    return counters_offset(*a, pl.splits) + (uint64_t)a->num_queries * pl.groups * sizeof(unsigned long long);
}

extern "C" uint64_t nvfp4_mla_attend_workspace_cuda(const nvfp4_mla_attend_kernel_args_t *a) {
    return workspace_of(a, attend_plan_for(a));
}

/* ---- launch ---- */

/* Whether a kind has an in-launch merge instantiation (the plan never gives wide one_launch). */
template <int KIND>
struct kind_merges_in_launch {
    static constexpr bool value = KIND != KIND_WIDE;
};

/* The wide kind's items of at most this many tiles take the ROW_Q instantiation: its Q load is
 * 1.5 us shorter, which counts in a short item's chain, while its tile loop runs 2-3% slower (an
 * unsplit item of 32 tiles at batch 128, same-process A/B; docs/performance-notes.md). */
#define ATT_ROW_Q_TILES 8

/* ---- placement: split grids in clusters of 4 ----
 * A split grid (one item a CTA, at most one CTA an SM) launches in clusters of 4 consecutive CTAs
 * when the device runs all of the grid's clusters at once. The kernel does not use the cluster:
 * the dimension only tells the scheduler to place 4 CTAs in one GPC. In graph replays on the H200
 * this measured 0.4-0.7 us faster in 6 of 8 light cells (e.g. 4 x 64 heads 13.3 against 13.8-14.0
 * us), slower in none (docs/performance-notes.md, "small batches, round 3"). With clusters of 16
 * the same grid ran 0.6 us slower. The H200 runs 30 clusters of 4 at once, not 33: a grid whose
 * clusters do not all fit would wait a wave, so it launches without them. The count of clusters
 * the device runs at once is a device limit the context reads at init (count_quad_clusters,
 * a->quad_clusters; 0: no clusters). */
#define ATT_QUAD 4

static int placement_cluster(const nvfp4_mla_attend_kernel_args_t *a, const attend_plan &pl) {
    return pl.splits > 1 && pl.grid % ATT_QUAD == 0 && pl.grid / ATT_QUAD <= a->quad_clusters ? ATT_QUAD : 1;
}

/* A split attention grid (the light calls, where the chain of launches is the time) is launched
 * dependent on the stream's previous grid (nvfp4_launch_clustered): its barrier set-up and register
 * reallocation overlap that grid's tail, and in a graph its node's launch does (the kernel waits,
 * pdl_wait, before it reads or writes global memory). An unsplit grid runs for tens of
 * microseconds or more and gains nothing from it: it launches as a plain kernel, as before. */
template <int KIND, int RB>
static cudaError_t launch_kind(const nvfp4_mla_attend_kernel_args_t *a, const attend_plan &pl) {
    auto kernel = nvfp4_attend_kernel<KIND, RB, false>;
    if constexpr (kind_merges_in_launch<KIND>::value) {
        if (pl.one_launch) kernel = nvfp4_attend_kernel<KIND, RB, true>;
    }
    if constexpr (KIND == KIND_WIDE) {
        if (pl.tiles_per_split <= ATT_ROW_Q_TILES) kernel = nvfp4_attend_kernel<KIND, RB, false, true>;
    }
    return nvfp4_launch_clustered(kernel, pl.grid, pl.threads, pl.bytes, a->stream, pl.splits > 1,
                                  placement_cluster(a, pl), *a, pl);
}

template <int RB>
static cudaError_t launch_rb(const nvfp4_mla_attend_kernel_args_t *a, const attend_plan &pl) {
    if (pl.wide) return launch_kind<KIND_WIDE, RB>(a, pl);
    if (pl.wgmma)
        return pl.heads == 16 ? launch_kind<KIND_N16_WGMMA, RB>(a, pl) : launch_kind<KIND_N32_WGMMA, RB>(a, pl);
    return pl.heads == 16 ? launch_kind<KIND_N16_SYNC, RB>(a, pl) : launch_kind<KIND_N32_SYNC, RB>(a, pl);
}

static cudaError_t launch_plan(const nvfp4_mla_attend_kernel_args_t *a, const attend_plan &pl) {
    return a->record_bytes == 656   ? launch_rb<656>(a, pl)
           : a->record_bytes == 432 ? launch_rb<432>(a, pl)
                                    : launch_rb<368>(a, pl);
}

/* NVFP4_ATTEND_MERGE_AUTO keeps the in-launch merge (one launch: the eager caller waits on the
 * host's launch time) unless the stream is capturing: a graph replay costs GPU time alone, and the
 * separate merge takes less of it. A stream whose state cannot be read (the legacy stream while a
 * blocking stream of the device captures, or an earlier asynchronous error) counts as capturing;
 * the launch then reports the error itself.
 * The query reads the stream's capture state on the host (a fraction of a microsecond): no device
 * query, safe while capturing, and made only for calls the plan would merge in the launch. */
static bool stream_capturing(void *stream) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing((cudaStream_t)stream, &capture) != cudaSuccess) {
        (void)cudaGetLastError();
        return true;
    }
    return capture != cudaStreamCaptureStatusNone;
}

extern "C" void nvfp4_mla_attend_cuda(const nvfp4_mla_attend_kernel_args_t *args, nvfp4_mla_kernel_result_t *result) {
    if (args->num_queries == 0) {
        nvfp4_cuda_result(result, cudaSuccess, "attend");
        return;
    }
    nvfp4_device_guard guard(args->device_index);
    if (!nvfp4_cuda_guard_ok(guard, result, "attend")) {
        return;
    }
    attend_plan pl = attend_plan_for(args);
    if (!pl.bytes) {
        result->status = NVFP4_MLA_ERR_UNSUPPORTED;
        snprintf(result->message, sizeof result->message,
                 "attend: no kernel configuration fits %d bytes of shared memory per block on device %d "
                 "(%d-byte records need at least about 68 KB)",
                 args->smem_per_block, args->device_index, args->record_bytes);
        return;
    }
    const uint64_t need = workspace_of(args, pl); /* the backend contract's check, from the one plan */
    if (args->workspace_bytes < need) {
        result->status = NVFP4_MLA_ERR_INVALID_ARGUMENT;
        snprintf(result->message, sizeof result->message,
                 "workspace has %llu bytes, these shapes need %llu (attend_workspace_bytes)",
                 (unsigned long long)args->workspace_bytes, (unsigned long long)need);
        return;
    }
    if (!nvfp4_cuda_grid_fits(pl.grid, result, "attend", pl.grid, "CTAs")) {
        return;
    }
    if (pl.one_launch && args->merge_mode == NVFP4_ATTEND_MERGE_AUTO && stream_capturing(args->stream)) {
        pl.one_launch = 0;
    }
    const bool merge_kernel = pl.splits > 1 && !pl.one_launch;
    const int64_t rows = args->num_queries * args->num_heads; /* the merge kernel's CTAs */
    if (merge_kernel && !nvfp4_cuda_grid_fits(rows, result, "attend", rows, "merged rows")) {
        return;
    }
    cudaError_t err = launch_plan(args, pl);
    if (err == cudaSuccess && merge_kernel) {
        err = nvfp4_launch(merge_kernel_for(pl.splits), (unsigned)rows, ATT_MERGE_THREADS, 0, args->stream, true,
                           *args, (int)pl.splits);
    }
    nvfp4_cuda_result(result, err, "attend: kernel launch");
}

/* ---- once per context ---- */

template <int KIND, int RB>
static cudaError_t allow_smem(int bytes) {
    const cudaFuncAttribute attr = cudaFuncAttributeMaxDynamicSharedMemorySize;
    cudaError_t e = cudaFuncSetAttribute(nvfp4_attend_kernel<KIND, RB, false>, attr, bytes);
    if constexpr (kind_merges_in_launch<KIND>::value)
        if (e == cudaSuccess) e = cudaFuncSetAttribute(nvfp4_attend_kernel<KIND, RB, true>, attr, bytes);
    if constexpr (KIND == KIND_WIDE)
        if (e == cudaSuccess) e = cudaFuncSetAttribute(nvfp4_attend_kernel<KIND, RB, false, true>, attr, bytes);
    return e;
}

template <int RB>
static cudaError_t allow_smem_rb(int bytes) {
    cudaError_t e = cudaSuccess;
    if (e == cudaSuccess) e = allow_smem<KIND_N16_SYNC, RB>(bytes);
    if (e == cudaSuccess) e = allow_smem<KIND_N32_SYNC, RB>(bytes);
    if (e == cudaSuccess) e = allow_smem<KIND_N16_WGMMA, RB>(bytes);
    if (e == cudaSuccess) e = allow_smem<KIND_N32_WGMMA, RB>(bytes);
    if (e == cudaSuccess) e = allow_smem<KIND_WIDE, RB>(bytes);
    return e;
}

/* The clusters of 4 CTAs of the wide kind (the most registers and shared memory a CTA of any kind:
 * one an SM at the full opt-in size) the current device runs at once with `smem_per_block` bytes;
 * 0 when the count fails. */
static int32_t count_quad_clusters(int smem_per_block) {
    cudaLaunchAttribute dim = nvfp4_cluster_attribute(ATT_QUAD);
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(ATT_QUAD);
    config.blockDim = dim3(kind_threads<KIND_WIDE, NVFP4_MLA_RECORD_BYTES_368>::total);
    config.dynamicSmemBytes = (size_t)smem_per_block;
    config.attrs = &dim;
    config.numAttrs = 1;
    int count = 0;
    if (cudaOccupancyMaxActiveClusters(&count, nvfp4_attend_kernel<KIND_WIDE, NVFP4_MLA_RECORD_BYTES_368, false, true>,
                                       &config) != cudaSuccess) {
        (void)cudaGetLastError();
        count = 0;
    }
    return count;
}

/* Lets every attend kernel use `smem_per_block` bytes of dynamic shared memory on the current
 * device (called by the context's init with its device selected; a per-function attribute), and
 * counts its clusters of 4 into *quad_clusters (count_quad_clusters; 0 when the attributes fail). */
extern "C" int nvfp4_mla_attend_cuda_prepare(int smem_per_block, int32_t *quad_clusters) {
    cudaError_t e = allow_smem_rb<368>(smem_per_block);
    if (e == cudaSuccess) e = allow_smem_rb<432>(smem_per_block);
    if (e == cudaSuccess) e = allow_smem_rb<656>(smem_per_block);
    /* Loads the merge kernel now as the attribute calls load the others (lazy module loading):
     * under NVFP4_MLA_ATTEND_MERGE=auto eager calls with small merges do not launch it, so its
     * first launch could otherwise fall inside a graph capture, which drivers before CUDA 12.3
     * refuse. */
    cudaFuncAttributes merge_attributes;
    for (int splits : {4, 16, 64}) /* each of merge_kernel_for's instantiations */
        if (e == cudaSuccess) e = cudaFuncGetAttributes(&merge_attributes, merge_kernel_for(splits));
    if (e != cudaSuccess) (void)cudaGetLastError();
    *quad_clusters = e == cudaSuccess ? count_quad_clusters(smem_per_block) : 0;
    return e == cudaSuccess ? 0 : (int)e;
}
