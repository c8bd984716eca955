/* The producer warpgroup(s) of the attention pipeline (kernels/attend_pipeline.cuh): bulk copies of
 * raw records into the stages, and their dequantisation into operand blocks. */
#ifndef NVFP4_MLA_ATTEND_PRODUCER_CUH
#define NVFP4_MLA_ATTEND_PRODUCER_CUH

#include "attend_pipeline.cuh"

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
 * swizzled chunks of one block, and their raw loads (record strides of 368, 432 and 656 bytes) in
 * 8 different bank groups. With the lanes of one key spread over the parts, the parts' stores hit
 * the same chunk of 4 different blocks (Nsight Compute, h = 16: 2112 store wavefronts a tile
 * against 576 ideal, and twice the ideal on the raw loads). */
template <int PT>
static __device__ __forceinline__ void key_part(int t, int &key, int &part) {
    constexpr int P = producer_shape<PT>::parts;
    const int quarter = t >> 3; /* 0 .. PT/8 - 1 */
    key = 8 * (quarter / P) + (t & 7);
    part = quarter % P;
}

/* Lane l (< entries) of producer warp w: the raw slot of entry entries * w + l of the cursor's
 * tile (-1 past its end), loaded a tile ahead of the copies and sanitised only when they are
 * issued (sane_slot): a test right after the load made the producer wait for it (4% of samples). */
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
 * thread arrives (after its own validity flag). Spread
 * over the producer warps because one warp issuing all 64 copies held the others at the tile barrier.
 * The compiler issues the copies one lane at a time (the address goes through uniform registers),
 * 12% of the samples at h = 16; whole-warp cp.async copies (one instruction per record) measured
 * slower all the same (92.9 against 82.6 us at h = 16, BENCHMARKS.md). */
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

/* The record of one entry (raw_slot as load_tile_slot gives it) into L2, line by line, so that its
 * bulk copy a tile later reads L2 instead of HBM. */
template <int RB>
static __device__ __forceinline__ void prefetch_record(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl,
                                                       int32_t raw_slot) {
    const int32_t slot = sane_slot(a, raw_slot);
    if (slot < 0) return;
    const uint8_t *src = record_src<RB>(a, pl, slot);
#pragma unroll
    for (int off = 0; off < RB; off += 128) prefetch_l2(src + off);
    prefetch_l2(src + RB - 1); /* the last line, when the record straddles one more */
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

/* One 16-value latent group (codes w0, w1; scale d2) into its key's row of a latent block: chunk
 * offset `off` and the next chunk, which differs from it in bit 4 alone (the SW128 swizzle XORs a
 * row's chunk index with row % 8, and a group's chunks are 2j and 2j + 1). `row` is the key's row
 * offset without the swizzle, `off` = (2j * 16) ^ ((key % 8) << 4) plus any whole block: 2 + 5
 * instructions for both stores, where two swizzle_off took about 10. */
static __device__ __forceinline__ void store_e2m1_group(uint8_t *row, uint32_t off, uint32_t w0, uint32_t w1,
                                                        __nv_bfloat162 d2) {
    *reinterpret_cast<uint4 *>(row + off) = e2m1x8_block(w0, d2);
    *reinterpret_cast<uint4 *>(row + (off ^ 16u)) = e2m1x8_block(w1, d2);
}

/* Latent block b (dims 64b..64b+63) of the stage's 64 records. Thread t: group t % 4 of the block
 * (two 8-element chunks) of keys t / 4 (+ 32 with 128 threads); unused entries are written as zeros. */
template <int RB, int PT>
static __device__ __forceinline__ void dequant_latent(const uint8_t *stage, const uint8_t *valid, uint8_t *blk, int b,
                                                      int t) {
    const int gq = t & 3;
#pragma unroll
    for (int i = 0; i < 4 * ATT_KEYS / PT; i++) {
        const int k = (t >> 2) + PT / 4 * i;
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

/* The whole tile at once (resident rings): thread t takes one key and one latent part (key_part) of P =
 * PT / 64 parts (G = 32 / P groups: 16 for 128 producer threads, 8 for 256): its 8G code bytes and
 * G scale codes come in vector loads and give 2G independent 8-element chunks, which is what keeps
 * the warps busy (one block at a time left each thread two dependent chains and the producer
 * latency-bound). blk(b) = latent block b. */
template <int RB, int PT, typename BlockAt>
static __device__ __forceinline__ void dequant_latent_tile(const uint8_t *stage, const uint8_t *valid, BlockAt blk,
                                                           int t) {
    constexpr int P = producer_shape<PT>::parts, G = 32 / P;
    int k, half; /* `half`: the part (a half with 128 threads) */
    key_part<PT>(t, k, half);
    const uint8_t *rec = stage + k * RB;
    const bool v = valid[k] != 0;
    const uint4 z = make_uint4(0, 0, 0, 0);
    if (RB == 656) {
        const float4 tiles = v ? *reinterpret_cast<const float4 *>(rec + NVFP4_MLA_FP8_656_TILE_SCALE_OFFSET) : make_float4(0, 0, 0, 0);
#pragma unroll
        for (int i = 0; i < G; i++) { /* 16 bytes = chunks 2i, 2i+1 of this part = group i */
            const uint4 c = v ? *reinterpret_cast<const uint4 *>(rec + NVFP4_MLA_RECORD_PAYLOAD_OFFSET + 16 * G * half + 16 * i) : z;
            const int gl = G * half + i, b = gl >> 2, gq = gl & 3;
            const float scale = (b >> 1) == 0 ? tiles.x : (b >> 1) == 1 ? tiles.y : (b >> 1) == 2 ? tiles.z : tiles.w;
            *reinterpret_cast<uint4 *>(blk(b) + swizzle_off(k, 16 * gq)) = e4m3x8_scaled(c.x, c.y, scale, true);
            *reinterpret_cast<uint4 *>(blk(b) + swizzle_off(k, 16 * gq + 8)) = e4m3x8_scaled(c.z, c.w, scale, true);
        }
    } else {
        uint32_t scw[4];
        if (G == 16) {
            const uint4 sc = v ? *reinterpret_cast<const uint4 *>(rec + NVFP4_MLA_RECORD_GROUP_SCALE_OFFSET + 16 * half) : z;
            scw[0] = sc.x, scw[1] = sc.y, scw[2] = sc.z, scw[3] = sc.w;
        } else {
            const uint2 sc = v ? *reinterpret_cast<const uint2 *>(rec + NVFP4_MLA_RECORD_GROUP_SCALE_OFFSET + 8 * half) : make_uint2(0, 0);
            scw[0] = sc.x, scw[1] = sc.y, scw[2] = scw[3] = 0;
        }
        constexpr int PG = 8; /* groups per pass: enough ILP, fewer registers (16 measured no faster) */
        /* A group's two chunks sit at ((gq << 5) ^ r16) and that ^ 16 of the key's unswizzled row
         * (store_e2m1_group's addressing); the codes are read whatever the entry (load_group). */
        const uint32_t r16 = ((uint32_t)k & 7u) << 4, row = swizzle_off(k, 0) - r16;
#pragma unroll
        for (int pass = 0; pass < G / PG; pass++) {
            uint4 codes[PG / 2];
#pragma unroll
            for (int i = 0; i < PG / 2; i++)
                codes[i] = *reinterpret_cast<const uint4 *>(rec + NVFP4_MLA_RECORD_PAYLOAD_OFFSET + 8 * G * half + 8 * PG * pass + 16 * i);
#pragma unroll
            for (int j = 0; j < PG; j++) { /* group i of this part: 8 code bytes, one scale byte */
                const int i = PG * pass + j, gl = G * half + i, b = gl >> 2, gq = gl & 3;
                const __nv_bfloat162 d2 = group_scale_x2((scw[i >> 2] >> (8 * (i & 3))) & 0xFFu);
                const uint32_t w0 = (j & 1) ? codes[j >> 1].z : codes[j >> 1].x;
                const uint32_t w1 = (j & 1) ? codes[j >> 1].w : codes[j >> 1].y;
                store_e2m1_group(blk(b) + row, ((uint32_t)gq << 5) ^ r16, w0, w1, d2);
            }
            __syncwarp(); /* keeps the second pass's loads after the first pass's stores */
        }
    }
}

/* Four E4M3 codes (one word) as two bf16 pairs, exactly: each code's bits moved into a bf16 whose
 * exponent is 120 short, then times 2^120 (subnormal codes become bf16 subnormals, which the
 * multiply takes exactly, as e2m1x8_block's do). 12 instructions where the conversion through f32
 * took about 20. The NaN codes 0x7F / 0xFF, which no writer stores, read as -+480. */
static __device__ __forceinline__ uint2 e4m3x4_bf16(uint32_t w) {
    const __nv_bfloat162 two120 = as_bf162(0x7B807B80u);
    const uint32_t t0 = __byte_perm(w, 0, 0x4140), t1 = __byte_perm(w, 0, 0x4342); /* codes 0, 1 | 2, 3 in the halves */
    const uint32_t b0 = ((t0 << 8) & 0x80008000u) | ((t0 << 4) & 0x07F007F0u);
    const uint32_t b1 = ((t1 << 8) & 0x80008000u) | ((t1 << 4) & 0x07F007F0u);
    return make_uint2(as_u32(__hmul2(as_bf162(b0), two120)), as_u32(__hmul2(as_bf162(b1), two120)));
}

/* The RoPE block (dims 512..575) of the stage's records: thread t writes the C = 8 / P chunks of
 * 8 dims C*part..+C-1 of its key (key_part; P = PT / 64 parts). 368: the bare E4M3 values (exact in
 * bf16); 432 / 656: the stored bf16. */
template <int RB, int PT>
static __device__ __forceinline__ void dequant_rope(const uint8_t *stage, const uint8_t *valid, uint8_t *blk, int t) {
    constexpr int P = producer_shape<PT>::parts, C = 8 / P;
    int k, part;
    key_part<PT>(t, k, part);
    const uint8_t *rec = stage + k * RB;
    const bool v = valid[k] != 0;
    const uint4 z = make_uint4(0, 0, 0, 0);
    uint4 out[C];
    if (RB == NVFP4_MLA_RECORD_BYTES_368) {
#pragma unroll
        for (int i = 0; i < C / 2; i++) { /* 16 E4M3 codes = two chunks */
            const uint4 c = v ? *reinterpret_cast<const uint4 *>(rec + NVFP4_MLA_RECORD_ROPE_OFFSET + 8 * C * part + 16 * i) : z;
            const uint2 a0 = e4m3x4_bf16(c.x), a1 = e4m3x4_bf16(c.y), a2 = e4m3x4_bf16(c.z), a3 = e4m3x4_bf16(c.w);
            out[2 * i] = make_uint4(a0.x, a0.y, a1.x, a1.y);
            out[2 * i + 1] = make_uint4(a2.x, a2.y, a3.x, a3.y);
        }
    } else {
        const int off = RB == 656 ? NVFP4_MLA_FP8_656_ROPE_OFFSET : NVFP4_MLA_RECORD_ROPE_OFFSET;
#pragma unroll
        for (int i = 0; i < C; i++) out[i] = v ? *reinterpret_cast<const uint4 *>(rec + off + 16 * C * part + 16 * i) : z;
    }
#pragma unroll
    for (int i = 0; i < C; i++) *reinterpret_cast<uint4 *>(blk + swizzle_off(k, 8 * C * part + 8 * i)) = out[i];
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

/* The producer (thread t = 0..PT-1 of its PT / 128 warpgroups): keeps R stages of copies in
 * flight and turns each landed stage into the tile's operand blocks. IN_ORDER: the consumers
 * release slots in ring order (the narrow ones; the wide warpgroups free each other's latent
 * blocks early), so a resident tile waits only for the last of its 9 slots to be released: each
 * consumer thread's arrival there comes after its arrivals on the 8 before. */
template <int RB, int PT, bool IN_ORDER>
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
        issue_tile<RB, PT>(a, pl, smem, bars, load_tile_slot<PT>(a, cur, warp, lane), s, warp, lane);
        cursor_next(a, pl, cur);
    }
    uint32_t pos = 0;
    for (uint32_t tile = 0; tile < issued; tile++) {
        const int stage = (int)(tile % (uint32_t)pl.stages);
        /* The next copies' slots, in flight during this tile's dequantisation. */
        const int32_t next = cur.valid ? load_tile_slot<PT>(a, cur, warp, lane) : -1;
        mbar_wait(&bars.raw_full[stage], (tile / (uint32_t)pl.stages) & 1u);
        const uint8_t *raw = smem + pl.off_raw + stage * ATT_KEYS * RB;
        const uint8_t *valid = smem + pl.off_valid + stage * ATT_KEYS;
        if (pl.resident) { /* the tile's 9 blocks in one batch */
            const uint32_t s0 = pos_slot(pos, pl);
            for (int i = IN_ORDER ? 8 : 0; i < 9; i++)
                mbar_wait(&bars.slot_empty[slot_after(s0, i, pl)], pos_parity(pos + i, pl) ^ 1u);
            write_meta<RB>(a, raw, valid, &meta[tile % ATT_META_RING], t);
            dequant_rope<RB, PT>(raw, valid, smem + pl.off_ring + s0 * ATT_BLOCK, t);
            dequant_latent_tile<RB, PT>(raw, valid, [&](int b) { return smem + pl.off_ring + slot_after(s0, 1 + b, pl) * ATT_BLOCK; }, t);
            fence_proxy_async();
            for (int i = 0; i < 9; i++) mbar_arrive(&bars.slot_full[slot_after(s0, i, pl)]);
            pos += 9;
        }
        for (int i = 0; i < per_tile && !pl.resident; i++, pos++) {
            const uint32_t slot = pos_slot(pos, pl);
            mbar_wait(&bars.slot_empty[slot], pos_parity(pos, pl) ^ 1u);
            uint8_t *blk = smem + pl.off_ring + slot * ATT_BLOCK;
            if (i == 0) {
                write_meta<RB>(a, raw, valid, &meta[tile % ATT_META_RING], t);
                dequant_rope<RB, PT>(raw, valid, blk, t);
            } else {
                dequant_latent<RB, PT>(raw, valid, blk, (i - 1) & 7, t);
            }
            fence_proxy_async(); /* generic writes -> the consumers' wgmma (async proxy) reads */
            mbar_arrive(&bars.slot_full[slot]);
        }
        named_sync(BAR_PRODUCER, PT); /* every producer thread is done with the stage */
        if (cur.valid) {
            issue_tile<RB, PT>(a, pl, smem, bars, next, stage, warp, lane);
            cursor_next(a, pl, cur);
            issued++;
        }
    }
}

/* ---- producer of the paired tile buffers (the wide kind) ----
 *
 * The ring is two tiles: 18 slots, tile X's nine blocks the contiguous buffer X & 1 (RoPE block,
 * then latent blocks 0..7; paired_buffer). Beside 72 KB of Q there is no room for raw stages as
 * well as two buffers, so tile X's records are copied into the tail of its own buffer, once tile
 * X - 2's consumers have freed that tail, and dequantised while the consumers work on tile X - 1:
 * one tile's copy latency and dequantisation hide behind the other tile's MMA (with 12 slots and
 * two stages the next tile could only be written once P.V had freed the current one's, and the
 * two alternated: Nsight Compute, h = 64, BENCHMARKS.md). The blocks below the records are written
 * straight from them; the blocks the records overlap are written only after every producer thread
 * has loaded what it needs into registers and the producers have met on BAR_PRODUCER. At 48
 * registers the producer spilled (ptxas -v: 56 bytes of spill stores for 368 records, 52 for 432);
 * it has 56 since the wide consumer's warpgroup 1 needs only 168 (ATT_PAIRED_PRODUCER_REGS).
 *
 * Whether the wide kind pairs its buffers for records of record_bytes. Not for 656: a tile's
 * records (42 KB) overlap six of the nine blocks, and the overlapped blocks' codes (24 registers a
 * thread) did not fit the paired producer's 48 registers (it spilled, and measured slower than the
 * 12-slot ring: 223 against 168 us at h = 64). */
static __host__ __device__ constexpr bool wide_pairs(int record_bytes) {
    return record_bytes != 656;
}

template <int RB>
struct paired_shape {
    static_assert(wide_pairs(RB), "the paired buffers take 368 and 432 byte records");
    static constexpr int raw_off = 9 * ATT_BLOCK - ATT_KEYS * RB; /* the records: 50176 / 46080 */
    static constexpr int first_overlapped = raw_off / ATT_BLOCK;  /* first block they overlap: 6 / 5 */
    static constexpr int groups_below = 4 * (first_overlapped - 1); /* latent groups below them: 20 / 16 */
    /* The copies' validity flags sit just below the records, in the part of the first overlapped
     * block that no record covers: written with the copies, read (write_meta, the dequantisation)
     * before BAR_PRODUCER lets that block be written. */
    static constexpr int flags_off = raw_off - ATT_KEYS;
    static_assert(raw_off % 16 == 0 && first_overlapped >= 1, "records 16-byte aligned, above the RoPE block");
    static_assert(flags_off >= first_overlapped * ATT_BLOCK, "flags inside the first overlapped block");
};

/* One latent group of a key (16 values; 4 groups a 64-dim block) as a record holds it. */
struct latent_group {
    uint2 codes;    /* 16 E2M1 codes */
    uint32_t scale; /* the E4M3 group-scale code; 0 for an entry that counts nothing */
};

/* Group g of the record at rec. The codes are read whatever the entry: an invalid entry's bytes are
 * stale but finite once bit-moved (e2m1x8_block), and its zero scale makes them zeros, one
 * selection where the codes' load took a zeroing and a predicate of its own. */
static __device__ __forceinline__ latent_group load_group(const uint8_t *rec, bool v, int g) {
    latent_group in;
    in.codes = *reinterpret_cast<const uint2 *>(rec + NVFP4_MLA_RECORD_PAYLOAD_OFFSET + 8 * g);
    in.scale = v ? rec[NVFP4_MLA_RECORD_GROUP_SCALE_OFFSET + g] : 0u;
    return in;
}

/* Writes group g into latent block g / 4 of a tile buffer (store_e2m1_group). `row`: the buffer's
 * latent block 0 plus the key's row offset without the swizzle (swizzle_off(k, 0) - r16), r16 =
 * (k & 7) << 4. */
static __device__ __forceinline__ void store_group(const latent_group &in, uint8_t *row, uint32_t r16, int g) {
    const uint32_t off = ((uint32_t)g >> 2) * ATT_BLOCK + ((((uint32_t)g & 3u) << 5) ^ r16);
    store_e2m1_group(row, off, in.codes.x, in.codes.y, group_scale_x2(in.scale));
}

/* The latent of a tile in buffer `buf` from its records at buf + raw_off. Thread t (key_part: key
 * k, part p of P) writes its groups of the blocks below the records, then loads its groups of the
 * overlapped blocks, meets the other producers on BAR_PRODUCER (every read of the records done),
 * and writes those. */
template <int RB, int PT>
static __device__ __forceinline__ void dequant_latent_paired(uint8_t *buf, const uint8_t *valid, int t) {
    using S = paired_shape<RB>;
    constexpr int P = producer_shape<PT>::parts;
    constexpr int below = S::groups_below / P, over = (32 - S::groups_below) / P; /* a thread's groups */
    static_assert(S::groups_below % P == 0 && (32 - S::groups_below) % P == 0, "groups split evenly over the parts");
    int k, part;
    key_part<PT>(t, k, part);
    const uint8_t *rec = buf + S::raw_off + k * RB;
    const bool v = valid[k] != 0;
    const uint32_t r16 = ((uint32_t)k & 7u) << 4;
    uint8_t *row = buf + ATT_BLOCK + (swizzle_off(k, 0) - r16);
#pragma unroll 1 /* unrolled, the loads hoisted and the producer spilled 132 bytes at 48 registers */
    for (int g = part * below; g < (part + 1) * below; g++) store_group(load_group(rec, v, g), row, r16, g);
    latent_group in[over];
#pragma unroll
    for (int j = 0; j < over; j++) in[j] = load_group(rec, v, S::groups_below + part * over + j);
    named_sync(BAR_PRODUCER, PT); /* the records are read; the overlapped blocks may be written */
#pragma unroll
    for (int j = 0; j < over; j++) store_group(in[j], row, r16, S::groups_below + part * over + j);
}

/* The paired producer (thread t = 0..PT-1). Tile X: buffer X & 1 (paired_buffer), metadata X % 4
 * (last read by tile X - 4's consumers, all of whose blocks were released before tile X - 2 could
 * be written). */
template <int RB, int PT>
static __device__ void attend_producer_paired(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl,
                                              uint8_t *smem, int t) {
    using S = paired_shape<RB>;
    const int warp = t >> 5, lane = t & 31;
    const attend_bars bars = bars_of(smem, pl);
    tile_meta *meta = reinterpret_cast<tile_meta *>(smem + pl.off_meta);
    tile_cursor cur;
    cur.item = blockIdx.x;
    cursor_seek(a, pl, cur);
    int32_t next = cur.valid ? load_tile_slot<PT>(a, cur, warp, lane) : -1; /* a tile ahead of the copies */
    uint32_t issued = 0;
    /* Tile `issued`'s copies (and their flags, just below them), once tile issued - 2 no longer
     * needs the blocks they land on. */
    auto issue_next = [&]() {
        const uint32_t b = issued & 1u, empty_phase = paired_phase(issued) ^ 1u;
        for (int i = S::first_overlapped; i < 9; i++) mbar_wait(&bars.slot_empty[9 * b + i], empty_phase);
        uint8_t *buf = paired_buffer(smem, pl, issued);
        issue_records<RB, PT>(a, pl, buf + S::raw_off, buf + S::flags_off, &bars.raw_full[b], next, warp, lane);
        cursor_next(a, pl, cur);
        next = cur.valid ? load_tile_slot<PT>(a, cur, warp, lane) : -1;
        issued++;
    };
    if (cur.valid) issue_next(); /* tiles 0 and 1: both buffers start free */
    if (cur.valid) issue_next();
    for (uint32_t tile = 0;; tile++) {
        /* Tile `tile` (issued == tile from 2 on): waits for tile - 2's P.V, while the consumers work
         * on tile - 1; its copies then land while nothing else is left to do. */
        if (tile >= 2 && cur.valid) issue_next();
        if (tile >= issued) break;
        const uint32_t b = tile & 1u, phase = paired_phase(tile);
        uint8_t *buf = paired_buffer(smem, pl, tile);
        const uint8_t *raw = buf + S::raw_off;
        mbar_wait(&bars.raw_full[b], phase);
        /* The records of the next tile to be issued (`next`: tile + 1's from tile 2 on, tile 2's at
         * tile 0, which tile 1 would repeat; loaded by the last issue_next, a copy's latency ago)
         * into L2. Its copies are issued only once tile - 1's P.V frees their blocks, and then
         * waited for at once: from HBM that wait was 14% of the producer's samples and left the
         * consumers waiting for tiles (Nsight Compute, h = 64). */
        if (tile != 1) prefetch_record<RB>(a, pl, next);
        for (int i = 0; i < S::first_overlapped; i++) mbar_wait(&bars.slot_empty[9 * b + i], phase ^ 1u);
        const uint8_t *valid = buf + S::flags_off;
        write_meta<RB>(a, raw, valid, &meta[tile % ATT_META_RING], t);
        dequant_rope<RB, PT>(raw, valid, buf, t);
        dequant_latent_paired<RB, PT>(buf, valid, t);
        fence_proxy_async(); /* generic writes -> the consumers' wgmma (async proxy) reads */
        for (int i = 0; i < 9; i++) mbar_arrive(&bars.slot_full[9 * b + i]);
    }
}

#endif
