/* The attention schedules' shared pipeline (the picture: docs/architecture.md): the key metadata, the
 * walk over work items (persistent CTAs: items blockIdx.x, + gridDim.x, ...; an item is one query's
 * top-k split for one head group) and the ring's hand-over. Blocks pass by full/empty mbarriers in
 * FIFO order; the key metadata rides in a ring of 4 tiles beside them, safe because the producer is
 * at most two tiles ahead (ring_blocks <= 2 tiles' blocks, the plan's bound).
 *
 * The scales are folded, not applied: a latent operand value is e2m1 * d * 2^-9, exact in bf16
 * (record_read.cuh, e2m1x8_block), a 656 latent value bf16(e4m3 x tile scale), a RoPE value the bare
 * E4M3 value (368) or the stored bf16; the outer scale (s_t or s) times 2^9 and the RoPE scale r
 * multiply each key's score column and P. The latent's 8-element chunks hold elements in the order
 * (0,4,1,5,2,6,3,7), which the bit moves give; Q is permuted the same way when it is loaded, and
 * output columns are mapped back.
 */
#ifndef NVFP4_MLA_ATTEND_PIPELINE_CUH
#define NVFP4_MLA_ATTEND_PIPELINE_CUH

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "attend_plan.h"
#include "kernel_args.h"
#include "record_read.cuh"
#include "sm90_cuda.cuh"

/* Named barriers (0 is __syncthreads). */
/* BAR_WIDE_P: warpgroup 0 has written a tile's P and alpha (wide_softmax); BAR_WIDE_P_FREE:
 * warpgroup 1 is done with them. Both warpgroups bar.sync on each (schedules/wide_twobuf/wide_twobuf.cuh says why). */
enum { BAR_CONSUMER = 1, BAR_PRODUCER = 2, BAR_WIDE_P_FREE = 3, BAR_WIDE_P = 4, BAR_WIDE_ITEM = 5, BAR_MERGE = 6 };

/* Key metadata of one tile for the narrow consumers, written by the producer with the tile's RoPE
 * block (the wide consumer's form: wide_meta; docs/performance-notes.md, tile_meta). */
struct tile_meta {
    float s[ATT_KEYS];       /* latent score/P scale: (s_t or s) * 2^9 (NVFP4), 1 (656), 0 if unused */
    float r[ATT_KEYS];       /* RoPE score scale: r (368), 1 (432, 656) */
    uint8_t valid[ATT_KEYS]; /* 1 when the entry counts (bytes: int32 flags cost the 32-head ring a block) */
};

/* The wide kind's key metadata: what its softmax multiplies by, precomputed once a key by the
 * producer, so that the consumer forms a score in two FFMA from one 16-byte load a key
 * (docs/performance-notes.md, wide_meta). 1 KB a tile against tile_meta's 576 bytes: the wide kind
 * has the room, the narrow rings at 32 heads do not. */
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
    uint64_t *block_full;  /* [S]: the block is written (one arrival per producer thread) */
    uint64_t *block_empty; /* [S]: the block is consumed (one arrival per consumer thread; wide: per thread of the
                           * warpgroup that reads it last) */
};

static __device__ __forceinline__ attend_bars bars_of(uint8_t *smem, const attend_plan &pl) {
    uint64_t *b = reinterpret_cast<uint64_t *>(smem + pl.off_bar);
    return {b, b + pl.stages, b + pl.stages + pl.ring_blocks};
}

/* Ring position -> block and phase parity. The quotient pos / blocks is umulhi(pos, ceil(2^32 /
 * blocks)), exact while pos * blocks < 2^32 (a CTA walks at most items x tiles x 17 positions): an
 * integer division cost the consumers about 20 instructions a block. */
static __device__ __forceinline__ uint32_t pos_round(uint32_t pos, const attend_plan &pl) {
    return __umulhi(pos, pl.ring_magic);
}
static __device__ __forceinline__ uint32_t ring_index(uint32_t pos, const attend_plan &pl) {
    return pos - pos_round(pos, pl) * (uint32_t)pl.ring_blocks;
}
static __device__ __forceinline__ uint32_t pos_parity(uint32_t pos, const attend_plan &pl) {
    return pos_round(pos, pl) & 1u;
}

/* The block of ring position pos0 + i from s0 = ring_index(pos0), i < blocks: a compare where ring_index
 * takes a multiply-high and a multiply (docs/performance-notes.md, ring_index_after). */
static __device__ __forceinline__ uint32_t ring_index_after(uint32_t s0, uint32_t i, const attend_plan &pl) {
    const uint32_t s = s0 + i;
    return s >= (uint32_t)pl.ring_blocks ? s - (uint32_t)pl.ring_blocks : s;
}

/* ---- ring hand-over helpers (consumers) ---- */

/* A consumer thread releases a block once its reads of it are complete. Every thread arrives (the
 * barrier counts all consumer threads) so that each thread's own accesses are ordered by its own
 * release: compute-sanitizer racecheck does not carry a __syncwarp into another lane's arrival.
 * In the wide kind only the warpgroup that reads a block last arrives (128 threads): warpgroup
 * 0's Q.K^T reads of the blocks warpgroup 1 frees come before their BAR_WIDE_P sync, which
 * precedes warpgroup 1's release. The narrow consumers must release in ring (position) order:
 * their producers wait only for the last of a tile's blocks (attend_producer, IN_ORDER). A consumer
 * that frees blocks out of ring order, as the wide one does, must run with IN_ORDER false. */
static __device__ __forceinline__ void release_block_at(const attend_bars &bars, uint32_t block) {
    mbar_arrive(&bars.block_empty[block]);
}
static __device__ __forceinline__ void release_block(const attend_bars &bars, uint32_t pos, const attend_plan &pl) {
    release_block_at(bars, ring_index(pos, pl));
}

static __device__ __forceinline__ uint8_t *block_ptr(uint8_t *smem, const attend_plan &pl, uint32_t pos) {
    return smem + pl.off_ring + ring_index(pos, pl) * ATT_BLOCK;
}

static __device__ __forceinline__ void wait_full(const attend_bars &bars, uint32_t pos, const attend_plan &pl) {
    mbar_wait(&bars.block_full[ring_index(pos, pl)], pos_parity(pos, pl));
}

/* A two-buffer ring (plan.twobuf; schedules/wide_twobuf, wide_tile) is two buffers of 9 blocks: tile
 * X is buffer X & 1, blocks 9 (X & 1) .. +8, in phase (X >> 1) & 1 of their barriers. */
static __device__ __forceinline__ uint8_t *tile_buffer(uint8_t *smem, const attend_plan &pl, uint32_t tile) {
    return smem + pl.off_ring + (tile & 1u) * ATT_TILE_BLOCKS * ATT_BLOCK;
}
static __device__ __forceinline__ uint32_t buffer_phase(uint32_t tile) {
    return (tile >> 1) & 1u;
}

#endif
