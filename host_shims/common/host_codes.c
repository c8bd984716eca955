/* Host-side number formats and the 656-byte record (see host_codes.h). */
#include "host_codes.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "nvfp4_mla_record.h"

uint16_t host_bf16_bits(float value) {
    uint32_t u;
    memcpy(&u, &value, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) {
        return 0x7FFF;
    }
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float host_bf16_value(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

int host_scale_field_corrupt(uint32_t bits) {
    return (bits >> 31) || (bits & 0x7F800000u) == 0x7F800000u;
}

int host_bf16_nonfinite(uint16_t bits) {
    return (bits & 0x7F80u) == 0x7F80u;
}

float host_e4m3_value(uint8_t code) {
    const int exponent = (code >> 3) & 0xF, mantissa = code & 0x7;
    float magnitude = (code & 0x7F) == 0x7F ? 448.0f
                      : exponent == 0       ? ldexpf((float)mantissa, -9)
                                            : ldexpf(1.0f + (float)mantissa / 8.0f, exponent - 7);
    return (code & 0x80) ? -magnitude : magnitude;
}

/* The code of a magnitude that is already an E4M3 value (0 .. 448). */
static uint8_t code_of_value(float magnitude) {
    if (magnitude < 0x1p-6f) {
        return (uint8_t)ldexpf(magnitude, 9); /* subnormal: k * 2^-9 */
    }
    int e;
    const float fraction = frexpf(magnitude, &e); /* magnitude = fraction * 2^e, fraction in [0.5, 1) */
    const int mantissa = (int)((fraction * 2.0f - 1.0f) * 8.0f);
    return (uint8_t)(((e - 1 + 7) << 3) | mantissa);
}

uint8_t host_e4m3_code(float value) {
    if (isnan(value)) {
        return 0;
    }
    const uint8_t sign = signbit(value) ? 0x80 : 0x00;
    const float magnitude = fabsf(value);
    if (magnitude >= 448.0f) {
        return sign | 0x7E;
    }
    /* The spacing of E4M3 values around `magnitude`: 2^-9 below 2^-6, else 3 mantissa bits. */
    int e = 0;
    if (magnitude > 0.0f) {
        frexpf(magnitude, &e);
    }
    const int step = (e - 1 < -6 ? -6 : e - 1) - 3;
    const float rounded = ldexpf(rintf(ldexpf(magnitude, -step)), step); /* rintf: ties to even */
    return sign | code_of_value(rounded > 448.0f ? 448.0f : rounded);
}

/* The smallest power of two >= x (x > 0, finite). */
static float pow2_at_least(float x) {
    int e;
    const float fraction = frexpf(x, &e); /* x = fraction * 2^e, fraction in [0.5, 1) */
    return fraction == 0.5f ? x : ldexpf(1.0f, e);
}

/* One encoder, two scale rules: the spec's max(amax / 448, FLT_MIN), or FlashMLA's power of two. */
static void encode_656(const uint16_t *token, uint8_t *record, int pow2) {
    enum { TILE = NVFP4_MLA_FP8_656_TILE_SIZE };
    for (int tile = 0; tile < NVFP4_MLA_FP8_656_TILES; tile++) {
        float amax = 0.0f;
        for (int j = 0; j < TILE; j++) {
            const float a = fabsf(host_bf16_value(token[tile * TILE + j]));
            amax = isfinite(a) && a > amax ? a : amax;
        }
        const float scale = pow2 ? pow2_at_least(amax / 448.0f < 1e-4f ? 1e-4f : amax / 448.0f)
                                 : amax / 448.0f < FLT_MIN ? FLT_MIN : amax / 448.0f;
        memcpy(record + NVFP4_MLA_FP8_656_TILE_SCALE_OFFSET + 4 * tile, &scale, sizeof scale);
        for (int j = 0; j < TILE; j++) {
            record[tile * TILE + j] = host_e4m3_code(host_bf16_value(token[tile * TILE + j]) / scale);
        }
    }
    memcpy(record + NVFP4_MLA_FP8_656_ROPE_OFFSET, token + NVFP4_MLA_LATENT_DIM, NVFP4_MLA_ROPE_DIM * sizeof(uint16_t));
}

void host_encode_fp8_656(const uint16_t *token, uint8_t *record) {
    encode_656(token, record, 0);
}

void host_encode_fp8_656_pow2(const uint16_t *token, uint8_t *record) {
    encode_656(token, record, 1);
}

void host_decode_fp8_656_latent(const uint8_t *record, float *latent) {
    for (int j = 0; j < NVFP4_MLA_LATENT_DIM; j++) {
        float scale;
        memcpy(&scale, record + NVFP4_MLA_FP8_656_TILE_SCALE_OFFSET + 4 * (j / NVFP4_MLA_FP8_656_TILE_SIZE),
               sizeof scale);
        latent[j] = host_e4m3_value(record[j]) * scale;
    }
}
