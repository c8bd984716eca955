/* The attention kernel's shared parts (kernels/attend/attend_cuda.cu): the launch plan and its
 * shared-memory map, the walk over work items and the ring's hand-over. The roles are in
 * attend_producer.cuh (copies, dequantisation) and attend_producer_paired.cuh (the paired wide
 * kind's register-staged records), attend_narrow.cuh (with its engines in
 * attend_narrow_engines.cuh) and attend_wide.cuh (the consumers, sharing attend_consumer.cuh).
 *
 * Pipeline of one CTA (persistent: it takes items blockIdx.x, blockIdx.x + gridDim.x, ...; an
 * item is one query's top-k split for one group of heads):
 *
 *   global records --(bulk copies, 16 or 8 per producer warp)--> raw stages [R x 64 records]
 *   raw stage --(dequantisation, the 4 or 8 producer warps)--> operand ring [S slots of 8 KB]
 *   operand ring --(wgmma / mma.sync, the consumer warpgroups)--> S, softmax, P.V
 *
 * The paired wide kind (368 and 432 records) has no raw stages: its ring is two whole-tile buffers,
 * written from records each producer thread loads into its registers a tile ahead
 * (attend_producer_paired).
 *
 * An operand block is 64 keys x 64 dims of bf16 in the SW128 layout of sm90_cuda.cuh; a tile of 64
 * top-k entries is produced as the RoPE block, then latent blocks 0..7 ("resident": the consumer
 * keeps the latent blocks for P.V, 9 blocks a tile) or those followed by latent blocks 0..7 again
 * ("streaming", 17 blocks a tile: for shared memory that cannot hold a whole tile, the 99 KB
 * parts). Slots are handed over with full/empty mbarriers in FIFO order; per-tile key metadata
 * (validity, outer scale, RoPE scale: tile_meta, or the wide kind's wide_meta) rides in a ring of 4
 * beside them, which is safe because the
 * producer can be at most two tiles ahead (slots <= 2 blocks-per-tile, checked by the planner).
 *
 * Values in the operand blocks (why the scales are folded, not applied): NVFP4 latent values are
 * e2m1 * d * 2^-9 (exact in bf16: one multiply of bit-moved nibbles by d * 2^117, which cannot
 * overflow), RoPE values the bare E4M3 values (368) or the stored bf16 (432, 656); the outer scale
 * (s_t or the static s) times 2^9 and the RoPE scale r are applied per key to the score columns
 * and to P. The 656 baseline stores bf16(e4m3 * tile scale) as its readers do. The latent's
 * 8-element chunks hold elements in the order (0,4,1,5,2,6,3,7), which is what the bit moves
 * give; Q is permuted the same way when it is loaded and output columns are mapped back.
 */
#ifndef NVFP4_MLA_ATTEND_PIPELINE_CUH
#define NVFP4_MLA_ATTEND_PIPELINE_CUH

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "attend_plan.h"
#include "codec.h"
#include "record_read.cuh"
#include "sm90_cuda.cuh"

/* Named barriers (0 is __syncthreads). */
/* BAR_WIDE_P: warpgroup 0 has written a tile's P and alpha (attend_wide); BAR_WIDE_P_FREE:
 * warpgroup 1 is done with them. Both warpgroups bar.sync on each (attend_wide says why). */
enum { BAR_CONSUMER = 1, BAR_PRODUCER = 2, BAR_WIDE_P_FREE = 3, BAR_WIDE_P = 4, BAR_WIDE_ITEM = 5, BAR_MERGE = 6 };

/* Key metadata of one tile for the narrow consumers, written by the producer with the tile's RoPE
 * block (the wide consumer's form: wide_meta). */
struct tile_meta {
    float s[ATT_KEYS];       /* latent score/P scale: (s_t or s) * 2^9 (NVFP4), 1 (656), 0 if unused */
    float r[ATT_KEYS];       /* RoPE score scale: r (368), 1 (432, 656) */
    uint8_t valid[ATT_KEYS]; /* 1 when the entry counts (bytes: at 32 heads the 768 bytes that int32
                              * flags took over 4 tiles kept the ring one slot short of 17) */
};

/* The wide kind's key metadata: what its softmax multiplies by, precomputed once a key by the
 * producer. The consumer then forms a score in two FFMA from one 16-byte load a key, where the
 * (s, r, valid) form took three loads, two scale multiplies, a compare and a -inf move. With
 * one -inf select a row instead of one a score (wide_softmax), the softmax went from 480 to 331
 * static SASS instructions, and warpgroup 0 from 837 to 732 executed a warp-tile (Nsight
 * Compute, h = 64). Measured: 656 records 1-2.5% faster at h = 64 / 128, 368
 * the same (their producer sets the pace; docs/performance-notes.md). 1 KB a tile
 * against tile_meta's 576 bytes: the wide kind has the room, the narrow rings at 32 heads do not. */
struct alignas(16) wide_key {
    float ls;   /* latent score scale: tile_meta's s * sm_scale * log2(e) */
    float rs;   /* RoPE score scale: tile_meta's r * sm_scale * log2(e) */
    float bias; /* 0 when the entry counts, else -inf (its scale factors are 0 and the producer
                 * writes its operand rows as zeros, so its score is -inf for finite Q; a Q row
                 * holding inf or NaN gives NaN there, where the narrow kinds' mask gives -inf) */
    float s;    /* P scale: tile_meta's s */
};
struct wide_meta {
    wide_key key[ATT_KEYS];
};

/* A consumer's metadata form (the wide kind's or the narrow kinds'), of the bytes the plan gives it. */
template <bool WIDE>
using meta_of = std::conditional_t<WIDE, wide_meta, tile_meta>;
static_assert(sizeof(tile_meta) == ATT_TILE_META_BYTES && sizeof(wide_meta) == ATT_WIDE_META_BYTES,
              "meta_bytes: the plan's sizes of the metadata forms");

/* The factor that takes a score to log2 units in both forms: exp2(score * it) = e^(sm_scale * score). */
static __device__ __forceinline__ float score_scale_log2(const nvfp4_mla_attend_kernel_args_t &a) {
    return a.sm_scale * 1.4426950408889634f;
}

/* One key's metadata into either form: s and r as write_key_meta makes them, v whether it counts. */
static __device__ __forceinline__ void put_key_meta(const nvfp4_mla_attend_kernel_args_t &, tile_meta *m, int k,
                                                    float s, float r, bool v) {
    m->s[k] = s;
    m->r[k] = r;
    m->valid[k] = v;
}
static __device__ __forceinline__ void put_key_meta(const nvfp4_mla_attend_kernel_args_t &a, wide_meta *m, int k,
                                                    float s, float r, bool v) {
    const float l2 = score_scale_log2(a);
    m->key[k] = wide_key{s * l2, r * l2, v ? 0.0f : -INFINITY, s};
}

/* One item: query q's top-k entries [begin, end) for head group `group`. */
struct item_span {
    int64_t q;
    int32_t group, split;
    int64_t begin, end;
};

static __device__ __forceinline__ item_span item_at(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl,
                                                    int64_t item) {
    item_span s;
    s.group = (int32_t)(item % pl.groups);
    const int64_t rest = item / pl.groups;
    s.split = (int32_t)(rest % pl.splits);
    s.q = rest / pl.splits;
    s.begin = (int64_t)s.split * pl.tiles_per_split * ATT_KEYS;
    int64_t end = s.begin + (int64_t)pl.tiles_per_split * ATT_KEYS;
    end = end < a.topk ? end : a.topk;
    if (a.valid_len) {
        int64_t v = __ldg(a.valid_len + s.q * a.valid_len_stride);
        v = v < 0 ? 0 : v > a.topk ? a.topk : v;
        end = end < v ? end : v;
    }
    s.end = end > s.begin ? end : s.begin;
    return s;
}

static __device__ __forceinline__ int64_t item_tiles(const item_span &s) {
    return (s.end - s.begin + ATT_KEYS - 1) / ATT_KEYS;
}

/* Barrier arrays inside the shared-memory map. */
struct attend_bars {
    uint64_t *raw_full;   /* [R]: the stage's copies landed (one arrival per producer thread + transaction bytes) */
    uint64_t *slot_full;  /* [S]: the block is written (one arrival per producer thread) */
    uint64_t *slot_empty; /* [S]: the block is consumed (one arrival per consumer thread; wide: per thread of the
                           * warpgroup that reads it last) */
};

static __device__ __forceinline__ attend_bars bars_of(uint8_t *smem, const attend_plan &pl) {
    uint64_t *b = reinterpret_cast<uint64_t *>(smem + pl.off_bar);
    return {b, b + pl.stages, b + pl.stages + pl.slots};
}

/* Ring position -> slot and phase parity. The quotient pos / slots is umulhi(pos, ceil(2^32 /
 * slots)), exact while pos * slots < 2^32 (a CTA walks at most items x tiles x 17 positions);
 * an integer division here cost the consumers ~20 instructions a block. */
static __device__ __forceinline__ uint32_t pos_round(uint32_t pos, const attend_plan &pl) {
    return __umulhi(pos, pl.slots_magic);
}
static __device__ __forceinline__ uint32_t pos_slot(uint32_t pos, const attend_plan &pl) {
    return pos - pos_round(pos, pl) * (uint32_t)pl.slots;
}
static __device__ __forceinline__ uint32_t pos_parity(uint32_t pos, const attend_plan &pl) {
    return pos_round(pos, pl) & 1u;
}

/* The slot of ring position pos0 + i from s0 = pos_slot(pos0), i < slots: a compare where pos_slot
 * takes a multiply-high and a multiply (for a tile's nine slots, ~60 instructions a thread a tile
 * in the producer's arrivals alone). */
static __device__ __forceinline__ uint32_t slot_after(uint32_t s0, uint32_t i, const attend_plan &pl) {
    const uint32_t s = s0 + i;
    return s >= (uint32_t)pl.slots ? s - (uint32_t)pl.slots : s;
}

/* ---- ring hand-over helpers (consumers) ---- */

/* A consumer thread releases a slot once its reads of it are complete. Every thread arrives (the
 * barrier counts all consumer threads) so that each thread's own accesses are ordered by its own
 * release: compute-sanitizer racecheck does not carry a __syncwarp into another lane's arrival.
 * In the wide kind only the warpgroup that reads a block last arrives (128 threads): warpgroup
 * 0's Q.K^T reads of the blocks warpgroup 1 frees come before their BAR_WIDE_P sync, which
 * precedes warpgroup 1's release. The narrow consumers must release in ring (position) order:
 * their producers wait only for the last of a tile's slots (attend_producer, IN_ORDER). A consumer
 * that frees blocks out of ring order, as the wide one does, must run with IN_ORDER false. */
static __device__ __forceinline__ void release_slot_at(const attend_bars &bars, uint32_t slot) {
    mbar_arrive(&bars.slot_empty[slot]);
}
static __device__ __forceinline__ void release_slot(const attend_bars &bars, uint32_t pos, const attend_plan &pl) {
    release_slot_at(bars, pos_slot(pos, pl));
}

static __device__ __forceinline__ uint8_t *slot_ptr(uint8_t *smem, const attend_plan &pl, uint32_t pos) {
    return smem + pl.off_ring + pos_slot(pos, pl) * ATT_BLOCK;
}

static __device__ __forceinline__ void wait_full(const attend_bars &bars, uint32_t pos, const attend_plan &pl) {
    mbar_wait(&bars.slot_full[pos_slot(pos, pl)], pos_parity(pos, pl));
}

/* A paired ring (plan.paired; attend_producer_paired, wide_tile) is two buffers of 9 blocks: tile
 * X is buffer X & 1, slots 9 (X & 1) .. +8, in phase (X >> 1) & 1 of their barriers. */
static __device__ __forceinline__ uint8_t *paired_buffer(uint8_t *smem, const attend_plan &pl, uint32_t tile) {
    return smem + pl.off_ring + (tile & 1u) * ATT_TILE_BLOCKS * ATT_BLOCK;
}
static __device__ __forceinline__ uint32_t paired_phase(uint32_t tile) {
    return (tile >> 1) & 1u;
}

#endif
