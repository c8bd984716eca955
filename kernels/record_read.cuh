/* Reading a record on the device: what the CUDA readers (kernels/codec/gather_cuda.cu, the attention
 * producers under kernels/attend/) know about a record's bytes, with values equal to the CPU twins'
 * (products in binary32, bf16 round-to-nearest-even, or exact bit moves): record_layout<RB> (where
 * a layout keeps each field, how it codes them, the key metadata);
 * stored_* (the value a reader takes for a stored scale or bf16 RoPE chunk); the conversions of
 * E2M1 and E4M3 codes (gather's exact products; attention's bit moves into bf16 MMA operands, latent
 * chunks in the order (0,4,1,5,2,6,3,7): kernels/attend/lib/attend_pipeline.cuh).
 */
#ifndef NVFP4_MLA_RECORD_READ_CUH
#define NVFP4_MLA_RECORD_READ_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "kernel_args.h"
#include "fp_codes.h"
#include "nvfp4_mla_record.h"

/* ---- stored fields as every reader takes them ----
 * Every CUDA reader takes a stored s_t, RoPE scale r, 656-byte tile scale or bf16 RoPE chunk (8
 * values in a uint4) through these, so that what a reader makes of a stored value is decided in one
 * place for each field: the corrupt-field rule of docs/record-format.md section 5, through the same
 * functions the CPU readers call (kernels/fp_codes.h), so that both backends agree bit for bit. A
 * scale that is NaN, +-Inf or negative reads as 0; a NaN or +-Inf bf16 RoPE value reads as 0. */
#define stored_token_scale(s_t) nvfp4_scale_field(s_t)
#define stored_rope_scale(r) nvfp4_scale_field(r)
#define stored_tile_scale(scale) nvfp4_scale_field(scale)
#define stored_rope_bf16(eight_values) rope_bf16x8_field(eight_values)

/* Two stored bf16 values (a word) with nvfp4_rope_bf16_field applied to each, branch-free: a half whose
 * exponent bits are all set (NaN, +-Inf) becomes +0. t's halves are 0 exactly there; t + 0x7FFF sets
 * bit 15 of every other half without a carry into the next (t <= 0x7F80). */
static __device__ __forceinline__ uint32_t rope_bf16x2_field(uint32_t w) {
    const uint32_t t = ~w & 0x7F807F80u;
    const uint32_t keep = (t + 0x7FFF7FFFu) & 0x80008000u; /* bit 15 of each finite half */
    return w & (keep | (keep - (keep >> 15)));              /* 0xFFFF for those halves, else 0 */
}
static __device__ __forceinline__ uint4 rope_bf16x8_field(uint4 c) {
    return make_uint4(rope_bf16x2_field(c.x), rope_bf16x2_field(c.y), rope_bf16x2_field(c.z), rope_bf16x2_field(c.w));
}

/* Four E4M3 codes (a word) with the NaN codes 0x7F / 0xFF, which no writer stores, replaced by the
 * largest finite 0x7E / 0xFE, as every reader decodes them (docs/record-format.md section 3, and
 * nvfp4_e4m3_decode on the CPU): before a conversion that would give NaN (the hardware's) or 480 (the
 * bit moves). t's bytes are 0 exactly at those codes; t + 0x7F sets bit 7 of every other byte without
 * a carry (t <= 0x7F), and the subtraction cannot borrow (those bytes are 0x7F or 0xFF). */
static __device__ __forceinline__ uint32_t e4m3x4_finite(uint32_t w) {
    const uint32_t t = ~w & 0x7F7F7F7Fu;
    const uint32_t nan = ~(t + 0x7F7F7F7Fu) & 0x80808080u;
    return w - (nan >> 7);
}

/* Tests for the corrupt codes above, cheaper than the fixes when OR-ed over many words and voted on
 * once (the readers' hot loops take the fixing path only when some lane of the warp has a corrupt
 * word: never on records a writer made, which keeps the outputs bit-identical at about half the
 * instructions; performance-notes.md, "The 656 reader's vote"). Bit 7 of each byte of
 * e4m3x4_nan_bits is set exactly for the codes 0x7F / 0xFF (the masked byte is at most 0x7F, so
 * adding 1 carries into no other byte); bit 15 of each half of bf16x2_nonfinite_bits exactly for a
 * NaN or +-Inf half (at most 0x7F80 + 0x0080). */
static __device__ __forceinline__ uint32_t e4m3x4_nan_bits(uint32_t w) {
    return (w & 0x7F7F7F7Fu) + 0x01010101u;
}
#define E4M3_NAN_BITS 0x80808080u
static __device__ __forceinline__ uint32_t bf16x2_nonfinite_bits(uint32_t w) {
    return (w & 0x7F807F80u) + 0x00800080u;
}
#define BF16_NONFINITE_BITS 0x80008000u

/* ---- the layouts ---- */

/* How a reader addresses and interprets records of RB bytes (docs/record-format.md sections 2 and
 * 8); -1: the layout has no such field. */
template <int RB>
struct record_layout {
    static_assert(RB == NVFP4_MLA_RECORD_BYTES_368 || RB == NVFP4_MLA_RECORD_BYTES_432 ||
                      RB == NVFP4_MLA_RECORD_BYTES_656,
                  "a layout the readers know");
    /* The latent: E4M3 codes with an f32 scale a 128-value tile (the 656-byte fp8_ds_mla baseline),
     * else E2M1 codes with an E4M3 scale a 16-value group, times the outer scale (s_t or static). */
    static constexpr bool fp8_latent = RB == NVFP4_MLA_RECORD_BYTES_656;
    /* The RoPE key: E4M3 codes times the stored r (368), else stored bf16 (432, 656). */
    static constexpr bool fp8_rope = RB == NVFP4_MLA_RECORD_BYTES_368;
    static_assert(NVFP4_MLA_RECORD_PAYLOAD_OFFSET == 0, "the 656-byte record's codes start at byte 0 too");
    static constexpr int payload_offset = NVFP4_MLA_RECORD_PAYLOAD_OFFSET;
    static constexpr int latent_block_bytes = fp8_latent ? 64 : 32; /* code bytes of a 64-dim operand block */
    static constexpr int group_scale_offset = fp8_latent ? -1 : NVFP4_MLA_RECORD_GROUP_SCALE_OFFSET;
    static constexpr int tile_scale_offset = fp8_latent ? NVFP4_MLA_FP8_656_TILE_SCALE_OFFSET : -1;
    static constexpr int rope_scale_offset = fp8_latent ? -1 : NVFP4_MLA_RECORD_ROPE_SCALE_OFFSET; /* 432: zero */
    static constexpr int token_scale_offset = fp8_latent ? -1 : NVFP4_MLA_RECORD_TOKEN_SCALE_OFFSET;
    static constexpr int rope_offset = fp8_latent ? NVFP4_MLA_FP8_656_ROPE_OFFSET : NVFP4_MLA_RECORD_ROPE_OFFSET;

    /* Key metadata (write_key_meta): an E2M1 latent's score/P scale is the outer scale (s_t or the
     * static s) times latent_unit, the 2^9 its operand values lack (attend_pipeline.cuh); a 656
     * latent's operand values are whole (scale 1). The RoPE's score scale is the stored r (368),
     * else 1. */
    static constexpr bool outer_scaled = !fp8_latent;
    static constexpr float latent_unit = 512.0f;
    static constexpr bool rope_scaled = fp8_rope;
};

/* ---- conversions ---- */

/* Exact e2m1 * d for nibble `code`: twice the magnitudes {0,.5,1,1.5,2,3,4,6} are the integers
 * {0,1,2,3,4,6,8,12} (a nibble table in one word), times d/2 (exact: d >= 2^-9); the sign flips
 * the product, as e * d does (also for a corrupt negative d). */
static __device__ __forceinline__ float e2m1_times(uint32_t code, float half_d) {
    const float v = (float)((0xC8643210u >> (4 * (code & 7u))) & 0xFu) * half_d;
    return __uint_as_float(__float_as_uint(v) ^ ((code & 8u) << 28));
}

static __device__ __forceinline__ uint32_t bf16_pair(float lo, float hi) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
    return *(const uint32_t *)&pair;
}

static __device__ __forceinline__ __nv_bfloat162 as_bf162(uint32_t w) {
    return *reinterpret_cast<const __nv_bfloat162 *>(&w);
}
static __device__ __forceinline__ uint32_t as_u32(__nv_bfloat162 v) {
    return *reinterpret_cast<const uint32_t *>(&v);
}

/* Two E4M3 codes (low byte first) to floats, exactly (every E4M3 value is an f16 value). */
static __device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t two_codes) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(two_codes & 0xFFFFu), __NV_E4M3);
    return __half22float2(__half2(h));
}

/* Eight E4M3 codes (bytes of lo, hi) times a binary32 scale, rounded to bf16 like the CPU decoder;
 * `interleave` gives the latent order (0,4),(1,5),(2,6),(3,7), else natural pairs (RoPE). FINITE:
 * the NaN codes read as the largest finite (e4m3x4_finite); false only where the caller has voted
 * that no such code is among them (e4m3x4_nan_bits). */
template <bool FINITE = true>
static __device__ __forceinline__ uint4 e4m3x8_scaled(uint32_t lo, uint32_t hi, float scale, bool interleave) {
    if (FINITE) lo = e4m3x4_finite(lo), hi = e4m3x4_finite(hi);
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const uint32_t two = interleave ? __byte_perm(lo, hi, (uint32_t)(k | ((4 + k) << 4)))
                                        : (k < 2 ? lo : hi) >> (16 * (k & 1));
        const float2 f = e4m3x2_to_float2(two);
        w[k] = bf16_pair(__fmul_rn(f.x, scale), __fmul_rn(f.y, scale));
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

/* bf16x2 of E4M3 code `code` times 2^117 (exact: at most 4 significant bits, at most 448 * 2^117). */
static __device__ __forceinline__ __nv_bfloat162 group_scale_x2(uint32_t code) {
    code -= (code & 0x7Fu) == 0x7Fu ? 1u : 0u; /* the NaN codes read as +-448 (e4m3x4_finite) */
    const float d = __fmul_rn(e4m3x2_to_float2(code).x, 0x1p117f);
    return __floats2bfloat162_rn(d, d);
}

/* The scale of group j (0..7) of a pass of eight (store_latent_groups8) from its word of four codes
 * (groups 4 (j / 4) ..), which e4m3x4_finite has already taken: group_scale_x2's value, with one
 * conversion for the code pair of groups 2i and 2i + 1 (the unrolled calls' conversions are the
 * same instruction) and the NaN rule once a word rather than once a code: 72 instructions for
 * eight codes where group_scale_x2 takes 104, and bit moves (the code into a bf16's bits, then
 * two multiplies, as e4m3x4_bf16 with 2^237 in two steps) 96 (docs/performance-notes.md,
 * group_scale_x2_of). */
static __device__ __forceinline__ __nv_bfloat162 group_scale_x2_of(uint32_t finite_word, int j) {
    const float2 f = e4m3x2_to_float2(finite_word >> (16 * ((j >> 1) & 1)));
    const float d = __fmul_rn((j & 1) ? f.y : f.x, 0x1p117f);
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
 * offset without the swizzle, `off` = (2j * 16) ^ ((key % 8) << 4) plus any whole block: fewer
 * instructions than two swizzle_off (docs/performance-notes.md, store_e2m1_group). */
static __device__ __forceinline__ void store_e2m1_group(uint8_t *row, uint32_t off, uint32_t w0, uint32_t w1,
                                                        __nv_bfloat162 d2) {
    *reinterpret_cast<uint4 *>(row + off) = e2m1x8_block(w0, d2);
    *reinterpret_cast<uint4 *>(row + (off ^ 16u)) = e2m1x8_block(w1, d2);
}

/* Latent groups g0 .. g0 + 7 of one key (g0 a multiple of 8) into their blocks, from their 64
 * code bytes and their 8 scale codes (two words, group g0 in the low byte). `row` = base +
 * swizzle_off(key, 0) - r16 (the key's row, swizzle removed), blk_off(b) = latent block b's offset
 * from base, r16 = (key % 8) << 4 (store_e2m1_group's addressing). The resident raw-stage
 * dequantisation (dequant_latent_tile) and the register-staged two-buffer producer write through
 * here; dequant_latent (the streaming rings, one group a thread) keeps its own loop. */
template <typename BlockOff>
static __device__ __forceinline__ void store_latent_groups8(uint8_t *row, BlockOff blk_off, uint32_t r16, uint32_t g0,
                                                            const uint4 *codes, uint32_t scales_lo,
                                                            uint32_t scales_hi) {
    scales_lo = e4m3x4_finite(scales_lo), scales_hi = e4m3x4_finite(scales_hi); /* group_scale_x2_of's words */
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const uint32_t g = g0 + (uint32_t)j;
        const uint32_t w0 = (j & 1) ? codes[j >> 1].z : codes[j >> 1].x;
        const uint32_t w1 = (j & 1) ? codes[j >> 1].w : codes[j >> 1].y;
        store_e2m1_group(row, blk_off(g >> 2) + (((g & 3u) << 5) ^ r16), w0, w1,
                         group_scale_x2_of(j < 4 ? scales_lo : scales_hi, j));
    }
}

/* Four E4M3 codes (one word) as two bf16 pairs, exactly: each code's bits moved into a bf16 whose
 * exponent is 120 short, then times 2^120 (subnormal codes become bf16 subnormals, which the
 * multiply takes exactly, as e2m1x8_block's do), in fewer instructions than a conversion through
 * f32 (docs/performance-notes.md, e4m3x4_bf16). The NaN codes 0x7F / 0xFF, which no writer
 * stores, read as +-448 (e4m3x4_finite; the bit moves alone would give 480). */
static __device__ __forceinline__ uint2 e4m3x4_bf16(uint32_t w) {
    w = e4m3x4_finite(w);
    const __nv_bfloat162 two120 = as_bf162(0x7B807B80u);
    const uint32_t t0 = __byte_perm(w, 0, 0x4140), t1 = __byte_perm(w, 0, 0x4342); /* codes 0, 1 | 2, 3 in the halves */
    const uint32_t b0 = ((t0 << 8) & 0x80008000u) | ((t0 << 4) & 0x07F007F0u);
    const uint32_t b1 = ((t1 << 8) & 0x80008000u) | ((t1 << 4) & 0x07F007F0u);
    return make_uint2(as_u32(__hmul2(as_bf162(b0), two120)), as_u32(__hmul2(as_bf162(b1), two120)));
}

/* Four E4M3 codes (one word) as two f16 pairs, exactly (every E4M3 value is an f16 value), through
 * the hardware conversion: one cvt.rn.f16x2.e4m3x2 (an F2FP on sm_90) a pair, where the bf16 bit
 * moves take five instructions a pair. The NaN codes read as +-448 (e4m3x4_finite), where the
 * conversion would give NaN. */
static __device__ __forceinline__ uint2 e4m3x4_f16(uint32_t w) {
    w = e4m3x4_finite(w);
    const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xFFFFu), __NV_E4M3);
    const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w >> 16), __NV_E4M3);
    return make_uint2((uint32_t)lo.x | ((uint32_t)lo.y << 16), (uint32_t)hi.x | ((uint32_t)hi.y << 16));
}

/* Sixteen E4M3 RoPE codes as two 8-value chunks of f16 (e4m3x4_f16: exact): the two-buffer kind's RoPE
 * block in its f16 form (ROPE_F16, schedules/wide_twobuf). */
static __device__ __forceinline__ void e4m3x16_f16(uint4 c, uint4 &lo, uint4 &hi) {
    const uint2 a0 = e4m3x4_f16(c.x), a1 = e4m3x4_f16(c.y), a2 = e4m3x4_f16(c.z), a3 = e4m3x4_f16(c.w);
    lo = make_uint4(a0.x, a0.y, a1.x, a1.y);
    hi = make_uint4(a2.x, a2.y, a3.x, a3.y);
}

/* Sixteen E4M3 RoPE codes as two 8-value chunks of bf16 (e4m3x4_bf16: exact). */
static __device__ __forceinline__ void e4m3x16_bf16(uint4 c, uint4 &lo, uint4 &hi) {
    const uint2 a0 = e4m3x4_bf16(c.x), a1 = e4m3x4_bf16(c.y), a2 = e4m3x4_bf16(c.z), a3 = e4m3x4_bf16(c.w);
    lo = make_uint4(a0.x, a0.y, a1.x, a1.y);
    hi = make_uint4(a2.x, a2.y, a3.x, a3.y);
}

#endif
