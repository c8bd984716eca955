/* The producer warpgroup(s) of the attention pipeline (lib/attend_pipeline.cuh): bulk copies of
 * raw records into the stages and their dequantisation into operand blocks, and the record rules
 * (dequantisation, key metadata) that the two-buffer wide kind's producer (schedules/wide_twobuf/twobuf_producer.cuh)
 * shares. */
#ifndef NVFP4_MLA_ATTEND_PRODUCER_CUH
#define NVFP4_MLA_ATTEND_PRODUCER_CUH

#include "attend_pipeline.cuh"
#include "attend_probe.cuh"

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

/* An entry's slot as the copies take it: -1 unless inside the cache. */
static __device__ __forceinline__ int32_t sane_slot(const nvfp4_mla_attend_kernel_args_t &a, int32_t s) {
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

/* Top-k entries each producer warp copies per tile: 64 over the PT / 32 warps. */
template <int PT>
struct producer_shape {
    static constexpr int warps = PT / 32;
    static constexpr int entries = ATT_KEYS / warps; /* per warp: 16 (128 threads) or 8 (256) */
    static constexpr int parts = PT / ATT_KEYS;      /* threads per key in the dequantisation: 2 or 4 */
};

/* Key and part of producer thread t in the whole-tile dequantisation passes. The 8 lanes of each
 * quarter warp take 8 consecutive keys of one part: their 16-byte stores then fall in 8 different
 * swizzled chunks of one block, and their raw loads (every record stride) in 8 different bank
 * groups. With the lanes of one key spread over the parts, the parts' stores hit the same chunk of
 * 4 different blocks (docs/performance-notes.md, key_part). */
template <int PT>
static __device__ __forceinline__ void key_part(int t, int &key, int &part) {
    constexpr int P = producer_shape<PT>::parts;
    const int quarter = t >> 3; /* 0 .. PT/8 - 1 */
    key = 8 * (quarter / P) + (t & 7);
    part = quarter % P;
}

/* Lane l (< entries) of producer warp w: the raw slot of entry entries * w + l of the cursor's
 * tile (-1 past its end), loaded a tile ahead of the copies and sanitised only when they are
 * issued (sane_slot): a test right after the load made the producer wait for it
 * (docs/performance-notes.md, load_tile_slot). */
template <int PT>
static __device__ __forceinline__ int32_t load_tile_slot(const nvfp4_mla_attend_kernel_args_t &a,
                                                         const tile_cursor &c, int warp, int lane) {
    constexpr int E = producer_shape<PT>::entries;
    const int64_t e = c.entry + E * warp + lane;
    return lane < E && e < c.span.end ? __ldg(a.slots + c.span.q * a.slot_stride + e) : -1;
}

/* Every producer warp: bulk copies of its entries of a tile (16 or 8) to `raw` (64 records), one
 * record per valid entry (entries past the end, -1 or outside the cache are not read and count
 * nothing), their validity flags to `valid`; lane 0 announces the warp's bytes on `landed`, every
 * thread arrives (after its own validity flag). Spread over the producer warps because one warp
 * issuing all 64 copies held the others at the tile barrier (docs/performance-notes.md,
 * issue_records). */
template <int RB, int PT>
static __device__ __forceinline__ void issue_records(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl,
                                                     uint8_t *raw, uint8_t *valid, uint64_t *landed, int32_t raw_slot,
                                                     int warp, int lane) {
    constexpr int E = producer_shape<PT>::entries;
    const int e = E * warp + lane;
    const int32_t slot = sane_slot(a, raw_slot);
    if (lane < E) valid[e] = slot >= 0;
    const uint32_t n = __popc(__ballot_sync(0xFFFFFFFFu, slot >= 0));
    fence_proxy_async(); /* the destination's earlier generic accesses before the copies' writes */
    if (lane == 0) mbar_arrive_expect_tx(landed, n * RB);
    else mbar_arrive(landed);
    if (slot >= 0) bulk_copy_g2s(raw + e * RB, record_src<RB>(a, pl, slot), RB, landed);
}

/* The copies of a tile into raw stage `stage` (the resident and streaming rings). */
template <int RB, int PT>
static __device__ __forceinline__ void issue_tile(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl,
                                                  uint8_t *smem, const attend_bars &bars, int32_t raw_slot, int stage,
                                                  int warp, int lane) {
    issue_records<RB, PT>(a, pl, smem + pl.off_raw + stage * ATT_KEYS * RB, smem + pl.off_valid + stage * ATT_KEYS,
                          &bars.raw_full[stage], raw_slot, warp, lane);
}

/* ---- producer: dequantisation of one 8 KB operand block ---- */

/* Latent block b (dims 64b..64b+63) of the stage's 64 records. Thread t: group t % 4 of the block
 * (two 8-element chunks) of keys t / 4 (+ 32 with 128 threads); unused entries are written as zeros. */
template <int RB, int PT>
static __device__ __forceinline__ void dequant_latent(const uint8_t *stage, const uint8_t *valid, uint8_t *blk, int b,
                                                      int t) {
    using L = record_layout<RB>;
    constexpr int BLOCK = L::latent_block_bytes, GROUP = BLOCK / 4; /* code bytes of a block, of a thread's part */
    const int gq = t & 3;
#pragma unroll
    for (int i = 0; i < 4 * ATT_KEYS / PT; i++) {
        const int k = (t >> 2) + PT / 4 * i;
        const uint8_t *rec = stage + k * RB;
        const bool v = valid[k] != 0;
        uint4 lo, hi;
        if (L::fp8_latent) {
            const uint4 c = v ? *reinterpret_cast<const uint4 *>(rec + L::payload_offset + BLOCK * b + GROUP * gq)
                              : make_uint4(0, 0, 0, 0);
            const float scale =
                v ? stored_tile_scale(*reinterpret_cast<const float *>(rec + L::tile_scale_offset + 4 * (b >> 1)))
                  : 0.0f;
            lo = e4m3x8_scaled(c.x, c.y, scale, true);
            hi = e4m3x8_scaled(c.z, c.w, scale, true);
        } else {
            const uint2 c = v ? *reinterpret_cast<const uint2 *>(rec + L::payload_offset + BLOCK * b + GROUP * gq)
                              : make_uint2(0, 0);
            const __nv_bfloat162 d2 = group_scale_x2(v ? rec[L::group_scale_offset + 4 * b + gq] : 0u);
            lo = e2m1x8_block(c.x, d2);
            hi = e2m1x8_block(c.y, d2);
        }
        *reinterpret_cast<uint4 *>(blk + swizzle_off(k, 16 * gq)) = lo;
        *reinterpret_cast<uint4 *>(blk + swizzle_off(k, 16 * gq + 8)) = hi;
    }
}

/* Latent groups gl0 .. gl0 + 3 of key k (656 records: 16 E4M3 codes each in c[], with their 128-value
 * tiles' scales) into their blocks at base + blk_off(block). FINITE: dequant_latent_tile's vote. */
template <bool FINITE, typename BlockOff>
static __device__ __forceinline__ void store_fp8_groups(uint8_t *base, BlockOff blk_off, int k, int gl0,
                                                        const uint4 *c, float4 tiles) {
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int gl = gl0 + i, b = gl >> 2, gq = gl & 3;
        const float scale = stored_tile_scale((b >> 1) == 0   ? tiles.x
                                              : (b >> 1) == 1 ? tiles.y
                                              : (b >> 1) == 2 ? tiles.z
                                                              : tiles.w);
        uint8_t *blk = base + blk_off((uint32_t)b);
        *reinterpret_cast<uint4 *>(blk + swizzle_off(k, 16 * gq)) = e4m3x8_scaled<FINITE>(c[i].x, c[i].y, scale, true);
        *reinterpret_cast<uint4 *>(blk + swizzle_off(k, 16 * gq + 8)) =
            e4m3x8_scaled<FINITE>(c[i].z, c[i].w, scale, true);
    }
}

/* The whole tile at once (resident rings): thread t takes one key and one latent part (key_part) of P =
 * PT / 64 parts (G = 32 / P groups: 16 for 128 producer threads, 8 for 256): its 8G code bytes and
 * G scale codes come in vector loads and give 2G independent 8-element chunks, which is what keeps
 * the warps busy (one block at a time left each thread two dependent chains and the producer
 * latency-bound). Latent block b is at base + blk_off(b). */
template <int RB, int PT, typename BlockOff>
static __device__ __forceinline__ void dequant_latent_tile(const uint8_t *stage, const uint8_t *valid, uint8_t *base,
                                                           BlockOff blk_off, int t) {
    constexpr int P = producer_shape<PT>::parts, G = 32 / P;
    int k, half; /* `half`: the part (a half with 128 threads) */
    key_part<PT>(t, k, half);
    using L = record_layout<RB>;
    const uint8_t *rec = stage + k * RB;
    const bool v = valid[k] != 0;
    const uint4 z = make_uint4(0, 0, 0, 0);
    if (L::fp8_latent) {
        const float4 tiles =
            v ? *reinterpret_cast<const float4 *>(rec + L::tile_scale_offset) : make_float4(0, 0, 0, 0);
        /* Four groups at a time, their 16 code words tested for NaN codes with one vote
         * (e4m3x4_nan_bits): the per-word fix only where a lane of the warp holds one. */
#pragma unroll
        for (int i0 = 0; i0 < G; i0 += 4) {
            uint4 c[4];
            uint32_t bad = 0;
#pragma unroll
            for (int i = 0; i < 4; i++) { /* 16 bytes = chunks 2i, 2i+1 of this part = group i0 + i */
                c[i] = v ? *reinterpret_cast<const uint4 *>(rec + L::payload_offset + 16 * G * half + 16 * (i0 + i))
                         : z;
                bad |= e4m3x4_nan_bits(c[i].x) | e4m3x4_nan_bits(c[i].y) | e4m3x4_nan_bits(c[i].z) |
                       e4m3x4_nan_bits(c[i].w);
            }
            if (__any_sync(0xFFFFFFFFu, bad & E4M3_NAN_BITS))
                store_fp8_groups<true>(base, blk_off, k, G * half + i0, c, tiles);
            else
                store_fp8_groups<false>(base, blk_off, k, G * half + i0, c, tiles);
        }
    } else {
        uint32_t scw[4];
        if (G == 16) {
            const uint4 sc =
                v ? *reinterpret_cast<const uint4 *>(rec + L::group_scale_offset + 16 * half) : z;
            scw[0] = sc.x, scw[1] = sc.y, scw[2] = sc.z, scw[3] = sc.w;
        } else {
            const uint2 sc =
                v ? *reinterpret_cast<const uint2 *>(rec + L::group_scale_offset + 8 * half) : make_uint2(0, 0);
            scw[0] = sc.x, scw[1] = sc.y, scw[2] = scw[3] = 0;
        }
        /* Passes of 8 groups (store_latent_groups8's shape; performance-notes.md, dequant_latent_tile).
         * The codes are read whatever the entry: an invalid entry's zero scale codes make zeros. */
        const uint32_t r16 = ((uint32_t)k & 7u) << 4, row = swizzle_off(k, 0) - r16;
#pragma unroll
        for (int pass = 0; pass < G / 8; pass++) {
            uint4 codes[4];
#pragma unroll
            for (int i = 0; i < 4; i++)
                codes[i] =
                    *reinterpret_cast<const uint4 *>(rec + L::payload_offset + 8 * G * half + 64 * pass + 16 * i);
            store_latent_groups8(base + row, blk_off, r16, (uint32_t)(G * half + 8 * pass), codes, scw[2 * pass],
                                 scw[2 * pass + 1]);
            __syncwarp(); /* keeps the second pass's loads after the first pass's stores */
        }
    }
}

/* The RoPE block (dims 512..575) of the stage's records: thread t writes the C = 8 / P chunks of
 * 8 dims C*part..+C-1 of its key (key_part; P = PT / 64 parts). 368: the bare E4M3 values (exact in
 * bf16); 432 / 656: the stored bf16. */
template <int RB, int PT>
static __device__ __forceinline__ void dequant_rope(const uint8_t *stage, const uint8_t *valid, uint8_t *blk, int t) {
    constexpr int P = producer_shape<PT>::parts, C = 8 / P;
    using L = record_layout<RB>;
    int k, part;
    key_part<PT>(t, k, part);
    const uint8_t *rec = stage + k * RB;
    const bool v = valid[k] != 0;
    const uint4 z = make_uint4(0, 0, 0, 0);
    uint4 out[C];
    if (L::fp8_rope) {
#pragma unroll
        for (int i = 0; i < C / 2; i++) { /* 16 E4M3 codes = two chunks */
            const uint4 c = v ? *reinterpret_cast<const uint4 *>(rec + L::rope_offset + 8 * C * part + 16 * i) : z;
            e4m3x16_bf16(c, out[2 * i], out[2 * i + 1]);
        }
    } else { /* stored bf16: the NaN / Inf rule (stored_rope_bf16) only where a lane of the warp needs it */
        uint32_t bad = 0;
#pragma unroll
        for (int i = 0; i < C; i++) {
            out[i] = v ? *reinterpret_cast<const uint4 *>(rec + L::rope_offset + 16 * C * part + 16 * i) : z;
            bad |= bf16x2_nonfinite_bits(out[i].x) | bf16x2_nonfinite_bits(out[i].y) |
                   bf16x2_nonfinite_bits(out[i].z) | bf16x2_nonfinite_bits(out[i].w);
        }
        if (__any_sync(0xFFFFFFFFu, bad & BF16_NONFINITE_BITS)) {
#pragma unroll
            for (int i = 0; i < C; i++) out[i] = stored_rope_bf16(out[i]);
        }
    }
#pragma unroll
    for (int i = 0; i < C; i++) *reinterpret_cast<uint4 *>(blk + swizzle_off(k, 8 * C * part + 8 * i)) = out[i];
}

/* Key k's metadata (tile_meta, or the wide kind's wide_meta: put_key_meta) for an entry that
 * counts (v) or not, by the layout's key metadata (record_layout: outer_scaled, latent_unit,
 * rope_scaled). The record's s_t and RoPE scale r come from token_scale() and rope_scale(), called
 * only when the rule needs them; s = r = 0 for an entry that counts nothing. */
template <int RB, typename TokenScale, typename RopeScale, typename Meta>
static __device__ __forceinline__ void write_key_meta(const nvfp4_mla_attend_kernel_args_t &a, bool v,
                                                      TokenScale token_scale, RopeScale rope_scale, Meta *m, int k) {
    using L = record_layout<RB>;
    float s = 0.0f, r = 0.0f;
    if (v) {
        if (!L::outer_scaled) {
            s = 1.0f;
        } else {
            const float outer = a.per_token ? stored_token_scale(token_scale()) : a.outer_scale;
            s = __fmul_rn(outer, L::latent_unit);
        }
        r = L::rope_scaled ? stored_rope_scale(rope_scale()) : 1.0f;
    }
    put_key_meta(a, m, k, s, r, v);
}

/* Threads 0..63 of the producer: the tile's key metadata from the raw stage. */
template <int RB, typename Meta>
static __device__ __forceinline__ void write_meta(const nvfp4_mla_attend_kernel_args_t &a, const uint8_t *stage,
                                                  const uint8_t *valid, Meta *m, int t) {
    if (t >= ATT_KEYS) return;
    const uint8_t *rec = stage + t * RB;
    write_key_meta<RB>(
        a, valid[t] != 0, [&] { return *reinterpret_cast<const float *>(rec + record_layout<RB>::token_scale_offset); },
        [&] { return *reinterpret_cast<const float *>(rec + record_layout<RB>::rope_scale_offset); }, m, t);
}

/* The producer (thread t = 0..PT-1 of its PT / 128 warpgroups): keeps R stages of copies in
 * flight and turns each landed stage into the tile's operand blocks. IN_ORDER: the consumers
 * release blocks in ring order (the narrow ones; the wide warpgroups each free their own blocks,
 * out of ring order), so a resident tile waits only for the last of its 9 blocks to be released: each
 * consumer thread's arrival there comes after its arrivals on the 8 before. Meta: the consumers'
 * key metadata form (tile_meta, or wide_meta for the wide kind). */
template <int RB, int PT, bool IN_ORDER, typename Meta>
static __device__ void attend_producer(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl, uint8_t *smem,
                                       int t) {
    const int warp = t >> 5, lane = t & 31;
    const attend_bars bars = bars_of(smem, pl);
    Meta *meta = reinterpret_cast<Meta *>(smem + pl.off_meta);
    const int per_tile = plan_resident(&pl) ? ATT_TILE_BLOCKS : ATT_STREAM_BLOCKS;
    const uint32_t warm = att_probe_warm_tiles(pl.stages, pl.ring_blocks, per_tile); /* probe builds only */
    tile_cursor cur;
    cur.item = blockIdx.x;
    cursor_seek(a, pl, cur);
    uint32_t issued = 0;
    for (int s = 0; s < pl.stages && cur.valid; s++, issued++) {
        issue_tile<RB, PT>(a, pl, smem, bars, load_tile_slot<PT>(a, cur, warp, lane), s, warp, lane);
        cursor_next(a, pl, cur);
    }
    uint32_t pos = 0;
    for (uint32_t tile = 0; tile < issued; tile++) {
        const int stage = (int)(tile % (uint32_t)pl.stages);
        /* The next copies' slots, in flight during this tile's dequantisation. */
        const int32_t next = cur.valid && att_probe_keeps<ATT_PROBE_NO_LOADS>(issued, warm)
                                 ? load_tile_slot<PT>(a, cur, warp, lane)
                                 : -1;
        mbar_wait(&bars.raw_full[stage], (tile / (uint32_t)pl.stages) & 1u);
        const uint8_t *raw = smem + pl.off_raw + stage * ATT_KEYS * RB;
        const uint8_t *valid = smem + pl.off_valid + stage * ATT_KEYS;
        if (plan_resident(&pl)) { /* the tile's 9 blocks in one batch */
            const uint32_t s0 = ring_index(pos, pl);
            for (int i = IN_ORDER ? ATT_LATENT_BLOCKS : 0; i < ATT_TILE_BLOCKS; i++)
                mbar_wait(&bars.block_empty[ring_index_after(s0, i, pl)], pos_parity(pos + i, pl) ^ 1u);
            write_meta<RB>(a, raw, valid, &meta[tile % ATT_META_RING], t);
            if (att_probe_keeps<ATT_PROBE_NO_DEQUANT>(tile, warm)) {
                dequant_rope<RB, PT>(raw, valid, smem + pl.off_ring + s0 * ATT_BLOCK, t);
                dequant_latent_tile<RB, PT>(
                    raw, valid, smem + pl.off_ring,
                    [&](uint32_t b) { return ring_index_after(s0, 1 + b, pl) * ATT_BLOCK; }, t);
            }
            fence_proxy_async();
            for (int i = 0; i < ATT_TILE_BLOCKS; i++)
                mbar_arrive(&bars.block_full[ring_index_after(s0, i, pl)]);
            pos += ATT_TILE_BLOCKS;
        }
        for (int i = 0; i < per_tile && !plan_resident(&pl); i++, pos++) {
            const uint32_t block = ring_index(pos, pl);
            mbar_wait(&bars.block_empty[block], pos_parity(pos, pl) ^ 1u);
            uint8_t *blk = smem + pl.off_ring + block * ATT_BLOCK;
            if (i == 0) {
                write_meta<RB>(a, raw, valid, &meta[tile % ATT_META_RING], t);
                if (att_probe_keeps<ATT_PROBE_NO_DEQUANT>(tile, warm)) dequant_rope<RB, PT>(raw, valid, blk, t);
            } else if (att_probe_keeps<ATT_PROBE_NO_DEQUANT>(tile, warm)) {
                dequant_latent<RB, PT>(raw, valid, blk, (i - 1) & (ATT_LATENT_BLOCKS - 1), t);
            }
            fence_proxy_async(); /* generic writes -> the consumers' wgmma (async proxy) reads */
            mbar_arrive(&bars.block_full[block]);
        }
        named_sync(BAR_PRODUCER, PT); /* every producer thread is done with the stage */
        if (cur.valid) {
            if (att_probe_keeps<ATT_PROBE_NO_LOADS>(issued, warm))
                issue_tile<RB, PT>(a, pl, smem, bars, next, stage, warp, lane);
            else
                mbar_arrive(&bars.raw_full[stage]); /* the NO_LOADS probe: the stage's arrivals without copies */
            cursor_next(a, pl, cur);
            issued++;
        }
    }
}

#endif
