/* E2M1 / E4M3 / bf16 / fp16 conversions of docs/record-format.md section 2c, 4 and 5, written once.
 *
 * Why one header for both backends: the CUDA writer must be bit-identical to the CPU writer, so
 * both compile the same arithmetic (host and device). Every step is a single IEEE binary32
 * operation with round-to-nearest-even; nothing here adds a product to anything, so no FMA
 * contraction can occur, and the CUDA side uses the explicit __fmul_rn/__frcp_rn forms anyway.
 * Tested exhaustively (E4M3, against an independent table) and on a dense grid with every tie
 * (E2M1, against division) in tests/test_fp_codes.c.
 */
#ifndef NVFP4_MLA_FP_CODES_H
#define NVFP4_MLA_FP_CODES_H

#include <stdint.h>
#include <string.h>

#if defined(__CUDACC__)
#define NVFP4_HD __host__ __device__ __forceinline__
#else
#define NVFP4_HD static inline
#endif

/* Single-precision roundings of 1/6, 1/2688 and 1/448 (docs/record-format.md section 4). */
#define NVFP4_K6 0x1.555556p-3f
#define NVFP4_K2688 0x1.861862p-12f
#define NVFP4_K448 0x1.24924ap-9f
#define NVFP4_FLT_MIN 0x1p-126f
#define NVFP4_E4M3_MAX_CODE 0x7Eu /* 448 */

NVFP4_HD uint32_t nvfp4_f32_bits(float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

NVFP4_HD float nvfp4_bits_f32(uint32_t u) {
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* Products, sums and reciprocals with the rounding the spec names, never contracted (__fadd_rn and
 * __fsub_rn are never fused into an FMA by nvcc; the host build uses -ffp-contract=off). */
NVFP4_HD float nvfp4_mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}

NVFP4_HD float nvfp4_add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

NVFP4_HD float nvfp4_sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

NVFP4_HD float nvfp4_rcp_rn(float a) {
#if defined(__CUDA_ARCH__)
    return __frcp_rn(a);
#else
    return 1.0f / a;
#endif
}

NVFP4_HD int nvfp4_is_finite(float v) {
    return (nvfp4_f32_bits(v) & 0x7F800000u) != 0x7F800000u;
}

NVFP4_HD float nvfp4_abs(float v) {
    return nvfp4_bits_f32(nvfp4_f32_bits(v) & 0x7FFFFFFFu);
}

/* Magnitude code (7 bits) of |v| rounded to nearest E4M3, ties to even, saturated to 448.
 * `a` must be >= 0 or +Inf (NaN is the caller's case). Works on the bits so that it is exact. */
NVFP4_HD uint32_t nvfp4_e4m3_magnitude_code(float a) {
    if (!(a < 448.0f)) {
        return NVFP4_E4M3_MAX_CODE; /* 448 and above, +Inf included, saturate */
    }
    uint32_t u = nvfp4_f32_bits(a);
    int32_t exp = (int32_t)(u >> 23) - 127;
    if (exp < -6) {
        /* Subnormal range k * 2^-9: scale by 2^9 (exact) and round the integer part to even.
         * k = 8 is 2^-6, whose code 0x08 is the smallest normal: the codes coincide. */
        float k = nvfp4_mul_rn(a, 512.0f);
        uint32_t whole = (uint32_t)k;
        float frac = k - (float)whole; /* exact: k < 8 has enough bits */
        if (frac > 0.5f || (frac == 0.5f && (whole & 1u))) {
            whole += 1u;
        }
        return whole;
    }
    uint32_t mantissa = u & 0x7FFFFFu;
    uint32_t kept = mantissa >> 20;
    uint32_t rest = mantissa & 0xFFFFFu;
    if (rest > 0x80000u || (rest == 0x80000u && (kept & 1u))) {
        kept += 1u;
    }
    uint32_t code = ((uint32_t)(exp + 7) << 3) + kept; /* a mantissa carry bumps the exponent */
    return code > NVFP4_E4M3_MAX_CODE ? NVFP4_E4M3_MAX_CODE : code;
}

/* E4M3_RN_SATFINITE(v) of the spec with its NaN rule for RoPE codes: NaN gives 0x00. */
NVFP4_HD uint8_t nvfp4_e4m3_encode(float v) {
    if (v != v) {
        return 0;
    }
    uint32_t sign = (nvfp4_f32_bits(v) >> 24) & 0x80u;
    return (uint8_t)(sign | nvfp4_e4m3_magnitude_code(nvfp4_abs(v)));
}

/* Exact value of an E4M3 code (NaN codes 0x7F/0xFF are never written; they decode as 448 here
 * only so that a corrupt record cannot inject NaN into attention). */
NVFP4_HD float nvfp4_e4m3_decode(uint8_t code) {
    uint32_t exp = (code >> 3) & 0xFu;
    uint32_t man = code & 0x7u;
    float mag;
    if ((code & 0x7Fu) == 0x7Fu) {
        mag = 448.0f;
    } else if (exp == 0) {
        mag = (float)man * 0x1p-9f;
    } else {
        mag = nvfp4_bits_f32(((exp + 120u) << 23) | (man << 20));
    }
    return (code & 0x80u) ? -mag : mag;
}

/* A record's float32 scale field as every reader takes it (docs/record-format.md section 5): the 368
 * record's RoPE scale r and per-token s_t, the 656 record's tile scales. NaN, +-Inf and negative values
 * (the sign bit set, -0 included), which no writer stores, read as +0: the part of the record the field
 * scales decodes to zeros, and one corrupt record cannot make a query's attention NaN. Both backends
 * call this, so that they agree bit for bit. */
NVFP4_HD float nvfp4_scale_field(float v) {
    const uint32_t u = nvfp4_f32_bits(v);
    return (u >> 31) || (u & 0x7F800000u) == 0x7F800000u ? 0.0f : v;
}

/* A stored bf16 RoPE value (432 and 656 records) as every reader takes it: NaN and +-Inf (all exponent
 * bits set) read as +0, by the same rule as the scale fields. */
NVFP4_HD uint16_t nvfp4_rope_bf16_field(uint16_t h) {
    return (h & 0x7F80u) == 0x7F80u ? (uint16_t)0 : h;
}

/* E2M1 code of y / d without a division (docs/record-format.md section 4, step 4): the magnitude index
 * is the number of exact thresholds m * d passed (> at 0.25, 1.25, 2.5, 5; >= at 0.75, 1.75, 3.5).
 * The thresholds increase, so three comparisons (a binary search) find that number. d > 0 is a
 * decoded group scale; every m * d is exact in binary32. */
NVFP4_HD uint8_t nvfp4_e2m1_encode(float y, float d) {
    if (y != y) {
        return 0;
    }
    const float a = nvfp4_abs(y);
    uint32_t index = a >= nvfp4_mul_rn(1.75f, d) ? 4u : 0u;
    index += a >= nvfp4_mul_rn(index ? 3.5f : 0.75f, d) ? 2u : 0u;
    const float strict = index == 0 ? 0.25f : index == 2 ? 1.25f : index == 4 ? 2.5f : 5.0f;
    index += a > nvfp4_mul_rn(strict, d) ? 1u : 0u;
    const uint32_t sign = (nvfp4_f32_bits(y) >> 28) & 0x8u;
    return (uint8_t)(sign | index);
}

/* Value of an E2M1 code: {0, 0.5, 1, 1.5, 2, 3, 4, 6} with bit 3 the sign. */
NVFP4_HD float nvfp4_e2m1_decode(uint8_t code) {
    uint32_t m = code & 0x7u;
    /* Two halves of the table: 0.5 * m below 4, then 2, 3, 4, 6 by doubling steps. */
    float mag = m < 4u ? 0.5f * (float)m : (float)((m & 1u) ? (m == 5u ? 3 : 6) : (m == 4u ? 2 : 4));
    return (code & 0x8u) ? -mag : mag;
}

NVFP4_HD float nvfp4_bf16_to_f32(uint16_t h) {
    return nvfp4_bits_f32((uint32_t)h << 16);
}

/* Round to nearest even; NaN becomes the canonical 0x7FFF, as the hardware conversion
 * (cvt.rn.bf16x2.f32) that the CUDA readers use gives it. */
NVFP4_HD uint16_t nvfp4_f32_to_bf16(float v) {
    uint32_t u = nvfp4_f32_bits(v);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
        return 0x7FFF;
    }
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* IEEE binary16 to binary32, exact (subnormals, infinities and NaN included). */
NVFP4_HD float nvfp4_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t man = h & 0x3FFu;
    float mag;
    if (exp == 0x1Fu) {
        return nvfp4_bits_f32(sign | 0x7F800000u | (man << 13));
    } else if (exp == 0) {
        mag = (float)man * 0x1p-24f;
    } else {
        mag = nvfp4_bits_f32(((exp + 112u) << 23) | (man << 13));
    }
    return nvfp4_bits_f32(sign | nvfp4_f32_bits(mag));
}

#endif /* NVFP4_MLA_FP_CODES_H */
