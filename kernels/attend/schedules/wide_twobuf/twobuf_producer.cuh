/* The two-buffer wide schedule's producer (wide_twobuf.cuh; record rules: lib/attend_producer.cuh).
 * The ring is two tiles: 18 blocks, tile X the contiguous buffer X & 1 (RoPE block, latent blocks
 * 0..7; tile_buffer). Beside 72 KB of Q there is no room for raw stages, so thread t (key_part: key
 * k, part p of 4) loads its quarter of key k's record of tile X + 1 into registers right after
 * writing tile X: the loads are in flight while it waits for the buffer to be freed, which it then
 * writes in one pass (docs/performance-notes.md, attend_producer_twobuf). */
#ifndef NVFP4_MLA_TWOBUF_PRODUCER_CUH
#define NVFP4_MLA_TWOBUF_PRODUCER_CUH

#include "lib/attend_producer.cuh"

/* A producer thread's quarter of one record (zeros for an entry that counts nothing): 64 code
 * bytes, 8 group-scale codes and a quarter of the RoPE, rope_chunks 16-byte chunks (16 E4M3 codes,
 * or 16 bf16). */
template <int RB>
struct record_quarter {
    static_assert(wide_uses_twobuf(RB), "quarters of the layouts that pair");
    static constexpr int rope_chunks = record_layout<RB>::fp8_rope ? 1 : 2;
    uint4 codes[4];          /* payload bytes 64p .. 64p + 63: latent groups 8p .. 8p + 7 */
    uint2 scales;            /* their E4M3 group-scale codes */
    uint4 rope[rope_chunks]; /* RoPE dims 16p .. 16p + 15: 16 E4M3 codes (368) or 16 bf16 (432) */
    uint2 scales_rs;         /* part 0: the f32 bits of the RoPE scale r and of s_t */
    bool valid;
};

/* ---- the slot ring ----
 *
 * Loading a tile's slot indices and then the records they name put two dependent round trips on the
 * producer's chain (docs/performance-notes.md, "Issue 46's designs"). So the slots come from a ring in
 * shared memory (slot_ring; 4 tiles, 1 KB, in the fixed area: wide_twobuf_red), written ATT_SLOT_AHEAD tiles
 * ahead by the value warpgroup (wide_twobuf.cuh, warpgroup 1, which waits for warpgroup 0's P most
 * of each tile): it loads the raw slots of tile X + 3 at the start of its tile X and stores them
 * before it frees tile X's RoPE block. The producer reads them after it has waited for tile X's
 * nine blocks to be free (to write X + 2), an acquire of that release; and the ring place of X + 3 was
 * last read (for tile X - 1) before the producer wrote X - 1 < X, which warpgroup 1 waited for.
 * The producer's first ATT_SLOT_AHEAD tiles load their slots themselves, and all of them where the
 * instantiation has no ring (RING false: wide_twobuf_slot_ring). */

/* Tile `tile`'s place in the slot ring: [64 keys] raw slots (-1 past the span's end). */
static __device__ __forceinline__ int32_t *slot_ring(uint8_t *smem, const attend_plan &pl, uint32_t tile) {
    /* the row by a multiply of the int32 pointer, not the array's row address: the same code as before
     * the struct (tools/kernel-text-compare) */
    return reinterpret_cast<int32_t *>(smem + pl.off_red + offsetof(wide_twobuf_red, slot_ring)) +
           (tile % ATT_SLOT_RING) * ATT_KEYS;
}

/* The raw slot of entry `k` of the cursor's tile (-1 past the span's end or the walk's). */
static __device__ __forceinline__ int32_t cursor_slot(const nvfp4_mla_attend_kernel_args_t &a, const tile_cursor &c,
                                                      int k) {
    const int64_t e = c.entry + k;
    return c.valid && e < c.span.end ? __ldg(a.slots + c.span.q * a.slot_stride + e) : -1;
}

/* Part `part` of the record in raw slot `raw_slot` (as loaded; -1 or outside the cache: an entry
 * that counts nothing), by read-only loads. */
template <int RB>
static __device__ __forceinline__ void load_quarter(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl,
                                                    int32_t raw_slot, int part, record_quarter<RB> &q) {
    using L = record_layout<RB>;
    const int32_t slot = sane_slot(a, raw_slot);
    const uint4 z = make_uint4(0, 0, 0, 0);
    q.valid = slot >= 0;
#pragma unroll
    for (int i = 0; i < 4; i++) q.codes[i] = z;
    q.scales = q.scales_rs = make_uint2(0, 0);
#pragma unroll
    for (int i = 0; i < q.rope_chunks; i++) q.rope[i] = z;
    if (!q.valid) return;
    const uint8_t *rec = record_src<RB>(a, pl, slot);
#pragma unroll
    for (int i = 0; i < 4; i++)
        q.codes[i] = __ldg(reinterpret_cast<const uint4 *>(rec + L::payload_offset + 64 * part + 16 * i));
    q.scales = __ldg(reinterpret_cast<const uint2 *>(rec + L::group_scale_offset + 8 * part));
#pragma unroll
    for (int i = 0; i < q.rope_chunks; i++)
        q.rope[i] = __ldg(reinterpret_cast<const uint4 *>(rec + L::rope_offset + 16 * q.rope_chunks * part + 16 * i));
    static_assert(L::token_scale_offset == L::rope_scale_offset + 4, "scales_rs: r, then s_t, in one 8-byte load");
    if (part == 0) q.scales_rs = __ldg(reinterpret_cast<const uint2 *>(rec + L::rope_scale_offset));
}

/* From part 0 of key k: the key's metadata. */
template <int RB>
static __device__ __forceinline__ void write_quarter_meta(const nvfp4_mla_attend_kernel_args_t &a,
                                                          const record_quarter<RB> &q, wide_meta *m, int k, int part) {
    if (part == 0)
        write_key_meta<RB>(
            a, q.valid, [&] { return __uint_as_float(q.scales_rs.y); }, [&] { return __uint_as_float(q.scales_rs.x); },
            m, k);
}

/* Key k's quarter q into tile buffer `buf`: the RoPE chunks 2p, 2p + 1 (368: the bare E4M3 values,
 * exact in f16 (ROPE_F16) or bf16; 432: the stored bf16), latent groups 8p .. 8p + 7 (blocks
 * 1 + 2p, 2 + 2p) and, from part 0, the key's metadata. */
template <int RB, bool ROPE_F16>
static __device__ __forceinline__ void write_quarter(const nvfp4_mla_attend_kernel_args_t &a,
                                                     const record_quarter<RB> &q, uint8_t *buf, wide_meta *m, int k,
                                                     int part) {
    static_assert(!ROPE_F16 || record_layout<RB>::fp8_rope, "an f16 RoPE block from E4M3 codes only");
    write_quarter_meta<RB>(a, q, m, k, part);
    uint4 lo, hi;
    if (ROPE_F16) e4m3x16_f16(q.rope[0], lo, hi);
    else if (record_layout<RB>::fp8_rope) e4m3x16_bf16(q.rope[0], lo, hi);
    else lo = stored_rope_bf16(q.rope[0]), hi = stored_rope_bf16(q.rope[q.rope_chunks - 1]);
    *reinterpret_cast<uint4 *>(buf + swizzle_off(k, 16 * part)) = lo;
    *reinterpret_cast<uint4 *>(buf + swizzle_off(k, 16 * part + 8)) = hi;
    /* An invalid entry's zero codes and scale codes write zeros. */
    const uint32_t r16 = ((uint32_t)k & 7u) << 4;
    uint8_t *row = buf + ATT_BLOCK + (swizzle_off(k, 0) - r16); /* store_latent_groups8's row; base: block 1 */
    store_latent_groups8(row, [](uint32_t b) { return b * (uint32_t)ATT_BLOCK; }, r16, 8u * (uint32_t)part, q.codes,
                         q.scales.x, q.scales.y);
}

/* ---- the stage-removal probes (lib/attend_probe.cuh; off in normal builds) ---- */

/* The NO_DEQUANT probe's write_quarter: the key metadata alone. While the loads run (NO_LOADS off),
 * their words are folded into a store that never happens (`zero` is 0), so that they stay loads
 * consumed here, where write_quarter consumes them, rather than dead code. */
template <int RB>
static __device__ __forceinline__ void probe_write_quarter(const nvfp4_mla_attend_kernel_args_t &a,
                                                           const record_quarter<RB> &q, uint8_t *buf, wide_meta *m,
                                                           int k, int part) {
    write_quarter_meta<RB>(a, q, m, k, part);
    if constexpr (!att_probe<ATT_PROBE_NO_LOADS>()) {
        uint32_t fold = q.scales.x ^ q.scales.y ^ q.scales_rs.x ^ q.scales_rs.y;
#pragma unroll
        for (int i = 0; i < 4; i++) fold ^= q.codes[i].x ^ q.codes[i].y ^ q.codes[i].z ^ q.codes[i].w;
#pragma unroll
        for (int i = 0; i < q.rope_chunks; i++) fold ^= q.rope[i].x ^ q.rope[i].y ^ q.rope[i].z ^ q.rope[i].w;
        if ((fold & att_probe_zero(a)) != 0u) *reinterpret_cast<uint32_t *>(buf + swizzle_off(k, 16 * part)) = fold;
    }
}

/* The two-buffer producer (thread t = 0..PT-1, PT = 256: four threads a key). Tile X: buffer X & 1
 * (tile_buffer), written once tile X - 2's consumers have freed all nine of its blocks;
 * metadata X % 4 (last read by tile X - 4's consumers, whose blocks were all freed before tile
 * X - 2's could be written). */
template <int RB, int PT, bool ROPE_F16, bool RING>
static __device__ void attend_producer_twobuf(const nvfp4_mla_attend_kernel_args_t &a, const attend_plan &pl,
                                              uint8_t *smem, int t) {
    static_assert(producer_shape<PT>::parts == 4, "a quarter record a thread");
    const attend_bars bars = bars_of(smem, pl);
    wide_meta *meta = reinterpret_cast<wide_meta *>(smem + pl.off_meta);
    int k, part;
    key_part<PT>(t, k, part);
    tile_cursor cur;
    cur.item = blockIdx.x;
    cursor_seek(a, pl, cur);
    /* Probe builds: the warm tiles, one a buffer; 0 added at run time, so that nvcc does not peel
     * them off the loop (after them the held quarter would be loop-invariant, its dequantisation
     * hoisted out of the NO_LOADS probe's loop). */
    const uint32_t warm = ATT_TILE_BUFFERS + att_probe_zero(a);
    record_quarter<RB> q;
    load_quarter<RB>(a, pl, cursor_slot(a, cur, k), part, q);
    for (uint32_t tile = 0; cur.valid; tile++) {
        const uint32_t b = tile & 1u;
        uint8_t *buf = tile_buffer(smem, pl, tile);
        for (int i = 0; i < ATT_TILE_BLOCKS; i++)
            mbar_wait(&bars.block_empty[ATT_TILE_BLOCKS * b + i], buffer_phase(tile) ^ 1u);
        if (att_probe_keeps<ATT_PROBE_NO_DEQUANT>(tile, warm))
            write_quarter<RB, ROPE_F16>(a, q, buf, &meta[tile % ATT_META_RING], k, part);
        else
            probe_write_quarter<RB>(a, q, buf, &meta[tile % ATT_META_RING], k, part);
        fence_proxy_async(); /* generic writes -> the consumers' wgmma (async proxy) reads */
        for (int i = 0; i < ATT_TILE_BLOCKS; i++)
            mbar_arrive(&bars.block_full[ATT_TILE_BLOCKS * b + i]);
        cursor_next(a, pl, cur);
        if (att_probe_keeps<ATT_PROBE_NO_LOADS>(tile + 1,
                                                warm)) { /* the next tile's, in flight through the next wait */
            const int32_t raw = !RING || tile + 1 < ATT_SLOT_AHEAD ? cursor_slot(a, cur, k)
                                : cur.valid               ? slot_ring(smem, pl, tile + 1)[k]
                                                          : -1;
            load_quarter<RB>(a, pl, raw, part, q);
        }
    }
}

#endif
