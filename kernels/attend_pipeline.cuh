/* The attention kernel's shared parts (kernels/attend_cuda.cu): the launch plan and its
 * shared-memory map, the walk over work items, and the producer warpgroup.
 *
 * Pipeline of one CTA (persistent: it takes items blockIdx.x, blockIdx.x + gridDim.x, ...; an
 * item is one query's top-k split for one group of heads):
 *
 *   global records --(bulk copies, 16 per producer warp)--> raw stages [R x 64 records]
 *   raw stage --(dequantisation, the 4 producer warps)--> operand ring [S slots of 8 KB]
 *   operand ring --(wgmma / mma.sync, the consumer warpgroups)--> S, softmax, P.V
 *
 * An operand block is 64 keys x 64 dims of bf16 in the SW128 layout of sm90_cuda.cuh; a tile of 64
 * top-k entries is produced as the RoPE block, then latent blocks 0..7 ("resident": the consumer
 * keeps the latent blocks for P.V, 9 blocks a tile) or those followed by latent blocks 0..7 again
 * ("streaming", 17 blocks a tile: for shared memory that cannot hold a whole tile, the 99 KB
 * parts). Slots are handed over with full/empty mbarriers in FIFO order; per-tile key metadata
 * (validity, outer scale, RoPE scale) rides in a ring of 4 beside them, which is safe because the
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

#include "codec.h"
#include "decode_cuda.cuh"
#include "sm90_cuda.cuh"

#define ATT_KEYS 64          /* top-k entries per tile */
#define ATT_BLOCK 8192       /* bytes of one operand block: 64 rows x 128 bytes */
#define ATT_META_RING 4      /* tiles of key metadata in flight */
#define ATT_PRODUCER_THREADS 128

/* Named barriers (0 is __syncthreads). */
enum { BAR_CONSUMER = 1, BAR_PRODUCER = 2, BAR_WIDE_MAX = 3, BAR_WIDE_P = 4, BAR_WIDE_ITEM = 5 };

/* How one launch is tiled and where everything lives in the dynamic shared memory (byte offsets
 * from the 1024-byte aligned base). Computed on the host by attend_plan_for (attend_cuda.cu). */
struct attend_plan {
    int32_t wide;            /* 1: 64 heads per CTA, two consumer warpgroups (sm_90a wgmma) */
    int32_t wgmma;           /* 1: wgmma consumers (sm_90a), 0: mma.sync consumers */
    int32_t heads;           /* heads per item as the MMA sees them: 16, 32 (narrow) or 64 (wide) */
    int32_t groups;          /* head groups per query: ceil(h / heads) */
    int32_t splits;          /* top-k splits per (query, group) */
    int32_t tiles_per_split; /* 64-entry tiles per split */
    int32_t stages;          /* raw record stages R */
    int32_t slots;           /* operand ring slots S */
    int32_t resident;        /* 1: 9 blocks a tile (latent kept for P.V), 0: 17 (streaming) */
    int32_t contiguous;      /* block_stride == block_size * record_bytes */
    int32_t grid;            /* persistent CTAs */
    int32_t threads;         /* 256 (narrow) or 384 (wide) */
    uint32_t slots_magic;    /* ceil(2^32 / slots): ring positions divide by a multiply */
    int64_t items;           /* n_q * groups * splits */
    int32_t off_q, off_p, off_ring, off_raw, off_valid, off_meta, off_red, off_bar;
    int32_t bytes;           /* dynamic shared memory requested (alignment slack included) */
};

/* Key metadata of one tile, written by the producer with the tile's RoPE block. */
struct tile_meta {
    float s[ATT_KEYS];       /* latent score/P scale: (s_t or s) * 2^9 (NVFP4), 1 (656), 0 if unused */
    float r[ATT_KEYS];       /* RoPE score scale: r (368), 1 (432, 656) */
    int32_t valid[ATT_KEYS]; /* 1 when the entry counts */
};

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
    uint64_t *raw_full;   /* [R]: the stage's copies landed (4 arrivals + transaction bytes) */
    uint64_t *slot_full;  /* [S]: the block is written (one arrival per producer warp) */
    uint64_t *slot_empty; /* [S]: the block is consumed (one arrival per consumer warp) */
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

/* ---- producer: copies ---- */

/* A walk over this CTA's tiles in order: the issue cursor of the producer. */
struct tile_cursor {
    int64_t item;
    item_span span;
    int64_t entry; /* first entry of the current tile */
    bool valid;
};

static __device__ __forceinline__ void cursor_seek(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl,
                                                   tile_cursor &c) {
    for (; c.item < pl.items; c.item += gridDim.x) {
        c.span = item_at(a, pl, c.item);
        if (c.span.end > c.span.begin) {
            c.entry = c.span.begin;
            c.valid = true;
            return;
        }
    }
    c.valid = false;
}

static __device__ __forceinline__ void cursor_next(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl,
                                                   tile_cursor &c) {
    c.entry += ATT_KEYS;
    if (c.entry >= c.span.end) {
        c.item += gridDim.x;
        cursor_seek(a, pl, c);
    }
}

static __device__ __forceinline__ int32_t sane_slot(const nvfp4_mla_attend_kernel_args_t &a, const int32_t *row,
                                                    int64_t e, int64_t end) {
    const int32_t s = e < end ? __ldg(row + e) : -1;
    return (s >= 0 && s < a.capacity) ? s : -1;
}

template <int RB>
static __device__ __forceinline__ const uint8_t *record_src(const nvfp4_mla_attend_kernel_args_t &a,
                                                            const attend_plan &pl, int32_t slot) {
    const uint32_t u = (uint32_t)slot;
    if (pl.contiguous) return a.cache + (int64_t)u * RB;
    const uint32_t bs = (uint32_t)a.block_size, block = u / bs;
    return a.cache + (int64_t)block * a.block_stride + (int64_t)(u - block * bs) * RB;
}

/* Lane l (< 16) of producer warp w: entry 16w + l of the cursor's tile, sanitised; loaded a tile
 * ahead of the copies, since this global load on the copies' path stalled the producer. */
static __device__ __forceinline__ int32_t load_tile_slot(const nvfp4_mla_attend_kernel_args_t &a,
                                                         const tile_cursor &c, int warp, int lane) {
    const int32_t *row = a.slots + c.span.q * a.slot_stride;
    return lane < 16 ? sane_slot(a, row, c.entry + 16 * warp + lane, c.span.end) : -1;
}

/* Every producer warp: bulk copies of its 16 entries of a tile into raw stage `stage`, one record
 * per valid entry (entries past the end, -1 or outside the cache are not read and count nothing);
 * lane 0 announces the warp's bytes (the stage barrier counts one arrival per warp). Spread over
 * the four warps because one warp issuing all 64 copies held the others at the tile barrier. */
template <int RB>
static __device__ __forceinline__ void issue_tile(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl,
                                                  uint8_t *smem, const attend_bars &bars, int32_t slot, int stage,
                                                  int warp, int lane) {
    const int e = 16 * warp + lane;
    uint8_t *valid = smem + pl.off_valid + stage * ATT_KEYS;
    if (lane < 16) valid[e] = slot >= 0;
    const uint32_t n = __popc(__ballot_sync(0xFFFFFFFFu, slot >= 0));
    fence_proxy_async(); /* this stage's earlier generic reads before the copies' writes */
    __syncwarp();
    if (lane == 0) mbar_arrive_expect_tx(&bars.raw_full[stage], n * RB);
    if (slot >= 0)
        bulk_copy_g2s(smem + pl.off_raw + (stage * ATT_KEYS + e) * RB, record_src<RB>(a, pl, slot), RB,
                      &bars.raw_full[stage]);
}

/* ---- producer: dequantisation of one 8 KB operand block ---- */

/* bf16x2 of E4M3 code `code` times 2^117 (exact: at most 4 significant bits, at most 448 * 2^117). */
static __device__ __forceinline__ __nv_bfloat162 group_scale_x2(uint32_t code) {
    const float d = __fmul_rn(e4m3x2_to_float2(code).x, 0x1p117f);
    return __floats2bfloat162_rn(d, d);
}

/* Eight E2M1 codes (one word) times d2 = d * 2^117: bf16 pairs (0,4),(1,5),(2,6),(3,7) holding
 * e2m1 * d * 2^-9 exactly (bit moves give e2m1 * 2^-126, the E2M1 subnormal 0.5 included). */
static __device__ __forceinline__ uint4 e2m1x8_block(uint32_t w, __nv_bfloat162 d2) {
    const uint32_t p0 = ((w << 12) & 0x80008000u) | ((w << 6) & 0x01C001C0u);
    const uint32_t p1 = ((w << 8) & 0x80008000u) | ((w << 2) & 0x01C001C0u);
    const uint32_t p2 = ((w << 4) & 0x80008000u) | ((w >> 2) & 0x01C001C0u);
    const uint32_t p3 = (w & 0x80008000u) | ((w >> 6) & 0x01C001C0u);
    return make_uint4(as_u32(__hmul2(as_bf162(p0), d2)), as_u32(__hmul2(as_bf162(p1), d2)),
                      as_u32(__hmul2(as_bf162(p2), d2)), as_u32(__hmul2(as_bf162(p3), d2)));
}

/* Latent block b (dims 64b..64b+63) of the stage's 64 records. Thread t: group t % 4 of the block
 * (two 8-element chunks) of keys t / 4 and t / 4 + 32; unused entries are written as zeros. */
template <int RB>
static __device__ __forceinline__ void dequant_latent(const uint8_t *stage, const uint8_t *valid, uint8_t *blk, int b,
                                                      int t) {
    const int gq = t & 3;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int k = (t >> 2) + 32 * i;
        const uint8_t *rec = stage + k * RB;
        const bool v = valid[k] != 0;
        uint4 lo, hi;
        if (RB == 656) {
            const uint4 c = v ? *reinterpret_cast<const uint4 *>(rec + 64 * b + 16 * gq) : make_uint4(0, 0, 0, 0);
            const float scale = v ? *reinterpret_cast<const float *>(rec + NVFP4_MLA_FP8_656_TILE_SCALE_OFFSET + 4 * (b >> 1)) : 0.0f;
            lo = e4m3x8_scaled(c.x, c.y, scale, true);
            hi = e4m3x8_scaled(c.z, c.w, scale, true);
        } else {
            const uint2 c = v ? *reinterpret_cast<const uint2 *>(rec + 32 * b + 8 * gq) : make_uint2(0, 0);
            const __nv_bfloat162 d2 = group_scale_x2(v ? rec[NVFP4_MLA_RECORD_GROUP_SCALE_OFFSET + 4 * b + gq] : 0u);
            lo = e2m1x8_block(c.x, d2);
            hi = e2m1x8_block(c.y, d2);
        }
        *reinterpret_cast<uint4 *>(blk + swizzle_off(k, 16 * gq)) = lo;
        *reinterpret_cast<uint4 *>(blk + swizzle_off(k, 16 * gq + 8)) = hi;
    }
}

/* The whole tile at once (resident rings): thread t takes key t / 2 and latent half t % 2 (blocks
 * 4h..4h+3, groups 16h..16h+15): its 128 code bytes and 16 scale codes come in 9 vector loads and
 * give 32 independent 8-element chunks, which is what keeps four warps busy (one block at a time
 * left each thread two dependent chains and the producer latency-bound). blk(b) = latent block b. */
template <int RB, typename BlockAt>
static __device__ __forceinline__ void dequant_latent_tile(const uint8_t *stage, const uint8_t *valid, BlockAt blk,
                                                           int t) {
    const int k = t >> 1, half = t & 1;
    const uint8_t *rec = stage + k * RB;
    const bool v = valid[k] != 0;
    const uint4 z = make_uint4(0, 0, 0, 0);
    if (RB == 656) {
        const float4 tiles = v ? *reinterpret_cast<const float4 *>(rec + NVFP4_MLA_FP8_656_TILE_SCALE_OFFSET) : make_float4(0, 0, 0, 0);
#pragma unroll
        for (int i = 0; i < 16; i++) { /* 16 bytes = chunks 2i, 2i+1 of this half = group i */
            const uint4 c = v ? *reinterpret_cast<const uint4 *>(rec + NVFP4_MLA_RECORD_PAYLOAD_OFFSET + 256 * half + 16 * i) : z;
            const int gl = 16 * half + i, b = gl >> 2, gq = gl & 3;
            const float scale = (b >> 1) == 0 ? tiles.x : (b >> 1) == 1 ? tiles.y : (b >> 1) == 2 ? tiles.z : tiles.w;
            *reinterpret_cast<uint4 *>(blk(b) + swizzle_off(k, 16 * gq)) = e4m3x8_scaled(c.x, c.y, scale, true);
            *reinterpret_cast<uint4 *>(blk(b) + swizzle_off(k, 16 * gq + 8)) = e4m3x8_scaled(c.z, c.w, scale, true);
        }
    } else {
        const uint4 sc = v ? *reinterpret_cast<const uint4 *>(rec + NVFP4_MLA_RECORD_GROUP_SCALE_OFFSET + 16 * half) : z;
        const uint32_t scw[4] = {sc.x, sc.y, sc.z, sc.w};
#pragma unroll
        for (int pass = 0; pass < 2; pass++) { /* two passes of 8 groups: enough ILP, fewer registers */
            uint4 codes[4];
#pragma unroll
            for (int i = 0; i < 4; i++)
                codes[i] = v ? *reinterpret_cast<const uint4 *>(rec + 128 * half + 64 * pass + 16 * i) : z;
#pragma unroll
            for (int j = 0; j < 8; j++) { /* group i of this half: 8 code bytes, one scale byte */
                const int i = 8 * pass + j, gl = 16 * half + i, b = gl >> 2, gq = gl & 3;
                const __nv_bfloat162 d2 = group_scale_x2((scw[i >> 2] >> (8 * (i & 3))) & 0xFFu);
                const uint32_t w0 = (j & 1) ? codes[j >> 1].z : codes[j >> 1].x;
                const uint32_t w1 = (j & 1) ? codes[j >> 1].w : codes[j >> 1].y;
                *reinterpret_cast<uint4 *>(blk(b) + swizzle_off(k, 16 * gq)) = e2m1x8_block(w0, d2);
                *reinterpret_cast<uint4 *>(blk(b) + swizzle_off(k, 16 * gq + 8)) = e2m1x8_block(w1, d2);
            }
            __syncwarp(); /* keeps the second pass's loads after the first pass's stores */
        }
    }
}

/* The RoPE block (dims 512..575) of the stage's records: thread t writes chunks 4(t%2)..+3 of
 * key t / 2. 368: the bare E4M3 values (exact in bf16); 432 / 656: the stored bf16. */
template <int RB>
static __device__ __forceinline__ void dequant_rope(const uint8_t *stage, const uint8_t *valid, uint8_t *blk, int t) {
    const int k = t >> 1, half = t & 1;
    const uint8_t *rec = stage + k * RB;
    const bool v = valid[k] != 0;
    uint4 out[4];
    if (RB == NVFP4_MLA_RECORD_BYTES_368) {
        const uint4 z = make_uint4(0, 0, 0, 0);
        const uint4 c0 = v ? *reinterpret_cast<const uint4 *>(rec + NVFP4_MLA_RECORD_ROPE_OFFSET + 32 * half) : z;
        const uint4 c1 = v ? *reinterpret_cast<const uint4 *>(rec + NVFP4_MLA_RECORD_ROPE_OFFSET + 32 * half + 16) : z;
        out[0] = e4m3x8_scaled(c0.x, c0.y, 1.0f, false);
        out[1] = e4m3x8_scaled(c0.z, c0.w, 1.0f, false);
        out[2] = e4m3x8_scaled(c1.x, c1.y, 1.0f, false);
        out[3] = e4m3x8_scaled(c1.z, c1.w, 1.0f, false);
    } else {
        const int off = RB == 656 ? NVFP4_MLA_FP8_656_ROPE_OFFSET : NVFP4_MLA_RECORD_ROPE_OFFSET;
#pragma unroll
        for (int i = 0; i < 4; i++)
            out[i] = v ? *reinterpret_cast<const uint4 *>(rec + off + 64 * half + 16 * i) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int i = 0; i < 4; i++) *reinterpret_cast<uint4 *>(blk + swizzle_off(k, 32 * half + 8 * i)) = out[i];
}

/* Threads 0..63 of the producer: the tile's key metadata. */
template <int RB>
static __device__ __forceinline__ void write_meta(const nvfp4_mla_attend_kernel_args_t &a, const uint8_t *stage,
                                                  const uint8_t *valid, tile_meta *m, int t) {
    if (t >= ATT_KEYS) return;
    const uint8_t *rec = stage + t * RB;
    const bool v = valid[t] != 0;
    float s = 0.0f, r = 0.0f;
    if (v) {
        if (RB == 656) {
            s = 1.0f;
        } else {
            const float outer = a.per_token ? *reinterpret_cast<const float *>(rec + NVFP4_MLA_RECORD_TOKEN_SCALE_OFFSET) : a.outer_scale;
            s = __fmul_rn(outer, 512.0f);
        }
        r = RB == NVFP4_MLA_RECORD_BYTES_368 ? *reinterpret_cast<const float *>(rec + NVFP4_MLA_RECORD_ROPE_SCALE_OFFSET) : 1.0f;
    }
    m->s[t] = s;
    m->r[t] = r;
    m->valid[t] = v;
}

/* The producer warpgroup (thread t = 0..127 of it): keeps R stages of copies in flight and turns
 * each landed stage into the tile's operand blocks. */
template <int RB>
static __device__ void attend_producer(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl, uint8_t *smem,
                                       int t) {
    const int warp = t >> 5, lane = t & 31;
    const attend_bars bars = bars_of(smem, pl);
    tile_meta *meta = reinterpret_cast<tile_meta *>(smem + pl.off_meta);
    const int per_tile = pl.resident ? 9 : 17;
    tile_cursor cur;
    cur.item = blockIdx.x;
    cursor_seek(a, pl, cur);
    uint32_t issued = 0;
    for (int s = 0; s < pl.stages && cur.valid; s++, issued++) {
        issue_tile<RB>(a, pl, smem, bars, load_tile_slot(a, cur, warp, lane), s, warp, lane);
        cursor_next(a, pl, cur);
    }
    uint32_t pos = 0;
    for (uint32_t tile = 0; tile < issued; tile++) {
        const int stage = (int)(tile % (uint32_t)pl.stages);
        /* The next copies' slots, in flight during this tile's dequantisation. */
        const int32_t next = cur.valid ? load_tile_slot(a, cur, warp, lane) : -1;
        mbar_wait(&bars.raw_full[stage], (tile / (uint32_t)pl.stages) & 1u);
        const uint8_t *raw = smem + pl.off_raw + stage * ATT_KEYS * RB;
        const uint8_t *valid = smem + pl.off_valid + stage * ATT_KEYS;
        if (pl.resident) { /* the tile's 9 blocks in one batch */
            for (int i = 0; i < 9; i++) mbar_wait(&bars.slot_empty[pos_slot(pos + i, pl)], pos_parity(pos + i, pl) ^ 1u);
            write_meta<RB>(a, raw, valid, &meta[tile % ATT_META_RING], t);
            dequant_rope<RB>(raw, valid, smem + pl.off_ring + pos_slot(pos, pl) * ATT_BLOCK, t);
            dequant_latent_tile<RB>(raw, valid, [&](int b) { return smem + pl.off_ring + pos_slot(pos + 1 + b, pl) * ATT_BLOCK; }, t);
            fence_proxy_async();
            __syncwarp();
            if (lane == 0)
                for (int i = 0; i < 9; i++) mbar_arrive(&bars.slot_full[pos_slot(pos + i, pl)]);
            pos += 9;
        }
        for (int i = 0; i < per_tile && !pl.resident; i++, pos++) {
            const uint32_t slot = pos_slot(pos, pl);
            mbar_wait(&bars.slot_empty[slot], pos_parity(pos, pl) ^ 1u);
            uint8_t *blk = smem + pl.off_ring + slot * ATT_BLOCK;
            if (i == 0) {
                write_meta<RB>(a, raw, valid, &meta[tile % ATT_META_RING], t);
                dequant_rope<RB>(raw, valid, blk, t);
            } else {
                dequant_latent<RB>(raw, valid, blk, (i - 1) & 7, t);
            }
            fence_proxy_async(); /* generic writes -> the consumers' wgmma (async proxy) reads */
            __syncwarp();
            if (lane == 0) mbar_arrive(&bars.slot_full[slot]);
        }
        named_sync(BAR_PRODUCER, ATT_PRODUCER_THREADS); /* every producer thread is done with the stage */
        if (cur.valid) {
            issue_tile<RB>(a, pl, smem, bars, next, stage, warp, lane);
            cursor_next(a, pl, cur);
            issued++;
        }
    }
}

/* ---- consumers: shared pieces ---- */

/* Loads the item's Q rows [head0, head0 + rows) into `rows_n`-row SW128 blocks (one per 64 dims,
 * `block_bytes` apart), rows past the query's heads as zeros; thread `t` of `nthreads` copies every
 * nthreads-th chunk of rows [row0, row0 + rows_here), then permutes its latent chunks in place to
 * the operand order. The caller synchronises the threads that read Q afterwards. */
static __device__ __forceinline__ void load_q_rows(const nvfp4_mla_attend_kernel_args_t &a, int64_t qi, int64_t head0,
                                                   int row0, int rows_here, uint8_t *qs, int block_bytes, int t,
                                                   int nthreads) {
    const int chunks = rows_here * 72;
    for (int i = t; i < chunks; i += nthreads) {
        const int r = row0 + i / 72, ch = i % 72;
        uint8_t *dst = qs + (ch >> 3) * block_bytes + swizzle_off(r, (ch & 7) * 8);
        const int64_t head = head0 + r;
        const bool real = head < a.num_heads;
        const uint16_t *src = real ? a.q + qi * a.q_stride_token + head * a.q_stride_head + ch * 8 : a.q;
        cp_async16(dst, src, real ? 16 : 0);
    }
    cp_async_wait_all();
    for (int i = t; i < chunks; i += nthreads) {
        const int r = row0 + i / 72, ch = i % 72;
        uint4 *p = reinterpret_cast<uint4 *>(qs + (ch >> 3) * block_bytes + swizzle_off(r, (ch & 7) * 8));
        uint4 v = *p;
        if (ch < 64)
            v = make_uint4(__byte_perm(v.x, v.z, 0x5410), __byte_perm(v.x, v.z, 0x7632), __byte_perm(v.y, v.w, 0x5410),
                           __byte_perm(v.y, v.w, 0x7632));
        *p = v;
    }
    fence_proxy_async();
}

/* Latent element of operand position p (0..511): chunks hold (0,4,1,5,2,6,3,7). */
static __device__ __forceinline__ int latent_dim(int p) {
    return (p & ~7) + ((p & 7) >> 1) + 4 * (p & 1);
}

/* Where an item's result goes: the output (one split) or a split partial for the merge kernel. */
struct item_out {
    uint16_t *out;       /* out row of head0 (one split), else NULL */
    float *partial;      /* partial row of head0 (splits > 1), else NULL */
    float *lse;          /* lse of head0 (natural log) or NULL */
    float *partial_lse;  /* partial log2-sum-exp of head0 or NULL */
    int64_t out_head_stride, lse_head_stride;
    int64_t heads;       /* heads of this item that exist (rows past them are not stored) */
};

static __device__ __forceinline__ item_out item_out_of(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl,
                                                       const item_span &s) {
    item_out o;
    const int64_t head0 = (int64_t)s.group * pl.heads;
    const int64_t left = a.num_heads - head0;
    o.heads = left < pl.heads ? left : pl.heads;
    if (pl.splits == 1) {
        o.out = a.out + s.q * a.out_stride_token + head0 * a.out_stride_head;
        o.lse = a.lse ? a.lse + s.q * a.lse_stride_token + head0 * a.lse_stride_head : nullptr;
        o.partial = nullptr;
        o.partial_lse = nullptr;
    } else {
        const int64_t prow = ((int64_t)s.split * a.num_queries + s.q) * a.num_heads + head0;
        o.partial = (float *)a.workspace + prow * 512;
        o.partial_lse = (float *)a.workspace + (int64_t)pl.splits * a.num_queries * a.num_heads * 512 + prow;
        o.out = nullptr;
        o.lse = nullptr;
    }
    o.out_head_stride = a.out_stride_head;
    o.lse_head_stride = a.lse_stride_head;
    return o;
}

/* Stores two adjacent operand columns (p, p+1: latent elements d and d+4) of head row `head`. */
static __device__ __forceinline__ void store_pair(const item_out &o, int64_t head, int p, float v0, float v1) {
    if (head >= o.heads) return;
    const int d0 = latent_dim(p), d1 = latent_dim(p + 1);
    if (o.out) {
        uint16_t *row = o.out + head * o.out_head_stride;
        const __nv_bfloat16 b0 = __float2bfloat16_rn(v0), b1 = __float2bfloat16_rn(v1);
        row[d0] = *reinterpret_cast<const uint16_t *>(&b0);
        row[d1] = *reinterpret_cast<const uint16_t *>(&b1);
    } else {
        float *row = o.partial + head * 512;
        row[d0] = v0;
        row[d1] = v1;
    }
}

/* Stores one value of a head row (the narrow consumer's layout has rows = dims). */
static __device__ __forceinline__ void store_one(const item_out &o, int64_t head, int p, float v) {
    if (head >= o.heads) return;
    const int d = latent_dim(p);
    if (o.out) {
        const __nv_bfloat16 b = __float2bfloat16_rn(v);
        o.out[head * o.out_head_stride + d] = *reinterpret_cast<const uint16_t *>(&b);
    } else {
        o.partial[head * 512 + d] = v;
    }
}

/* Stores the row statistics of head `head`: l (sum) and m (log2-domain max). */
static __device__ __forceinline__ void store_lse(const item_out &o, int64_t head, float l, float m) {
    if (head >= o.heads) return;
    const float lse2 = l > 0.0f ? m + log2f(l) : -INFINITY;
    if (o.lse) o.lse[head * o.lse_head_stride] = lse2 * 0.6931471805599453f;
    if (o.partial_lse) o.partial_lse[head] = lse2;
}

/* Consumer warp releases a slot once its reads of it are complete. */
static __device__ __forceinline__ void release_slot(const attend_bars &bars, uint32_t pos, const attend_plan &pl,
                                                    int lane) {
    __syncwarp();
    if (lane == 0) mbar_arrive(&bars.slot_empty[pos_slot(pos, pl)]);
}

static __device__ __forceinline__ uint8_t *slot_ptr(uint8_t *smem, const attend_plan &pl, uint32_t pos) {
    return smem + pl.off_ring + pos_slot(pos, pl) * ATT_BLOCK;
}

static __device__ __forceinline__ void wait_full(const attend_bars &bars, uint32_t pos, const attend_plan &pl) {
    mbar_wait(&bars.slot_full[pos_slot(pos, pl)], pos_parity(pos, pl));
}

#endif
