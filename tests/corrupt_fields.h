/* Corrupt record fields and what every reader takes them for (docs/record-format.md section 5): a
 * scale field (368's r and s_t, the 656 record's tile scales) that is NaN, +-Inf or negative reads as
 * 0; a bf16 RoPE value (432, 656) that is NaN or +-Inf reads as 0; an E4M3 NaN code (0x7F / 0xFF)
 * reads as +-448 (0x7E / 0xFE). Each row names the bytes a corruption writes and the bytes a reader
 * must take them for, so that a test compares a reader on the corrupt record with the same reader on
 * the record holding those bytes instead. Shared by tests/test_corrupt_fields.c (CPU: gather and
 * attend, corrupt equal to replaced, bit for bit) and tests/test_gpu_corrupt_fields.c (CUDA gather
 * and attend against the CPU twin on the same corrupt records). */
#ifndef NVFP4_MLA_TESTS_CORRUPT_FIELDS_H
#define NVFP4_MLA_TESTS_CORRUPT_FIELDS_H

#include <stdint.h>
#include <string.h>

#include "nvfp4_mla.h"

typedef struct corrupt_field {
    uint32_t layout, mode; /* the records it applies to (NVFP4_MLA_LAYOUT_*, NVFP4_MLA_SCALE_*) */
    int offset;            /* byte offset of the field in the record */
    int width;             /* 4: a float32 field, 2: a bf16 value, 1: an E4M3 code */
    uint32_t bad;          /* the corrupt bits written there */
    uint32_t read_as;      /* the bits every reader takes them for */
    const char *what;
} corrupt_field_t;

#define CF_368 NVFP4_MLA_LAYOUT_FP8_ROPE_368
#define CF_432 NVFP4_MLA_LAYOUT_BF16_ROPE_432
#define CF_656 NVFP4_MLA_LAYOUT_FP8_DS_MLA_656
#define CF_STATIC NVFP4_MLA_SCALE_STATIC
#define CF_TOKEN NVFP4_MLA_SCALE_PER_TOKEN

static const corrupt_field_t corrupt_fields[] = {
    /* 368, static: the RoPE scale r at [288, 292). */
    {CF_368, CF_STATIC, 288, 4, 0x7FC00000u, 0, "368 static: r NaN"},
    {CF_368, CF_STATIC, 288, 4, 0xFFC00001u, 0, "368 static: r -NaN"},
    {CF_368, CF_STATIC, 288, 4, 0x7F800000u, 0, "368 static: r +Inf"},
    {CF_368, CF_STATIC, 288, 4, 0xFF800000u, 0, "368 static: r -Inf"},
    {CF_368, CF_STATIC, 288, 4, 0xBF800000u, 0, "368 static: r -1.0"},
    {CF_368, CF_STATIC, 256, 1, 0x7Fu, 0x7Eu, "368 static: group scale code 0x7F (E4M3 NaN)"},
    {CF_368, CF_STATIC, 310, 1, 0xFFu, 0xFEu, "368 static: RoPE code 0xFF (E4M3 NaN)"},
    /* 368, per-token: s_t at [292, 296), r beside it. */
    {CF_368, CF_TOKEN, 292, 4, 0x7FC00000u, 0, "368 per-token: s_t NaN"},
    {CF_368, CF_TOKEN, 292, 4, 0x7F800000u, 0, "368 per-token: s_t +Inf"},
    {CF_368, CF_TOKEN, 292, 4, 0xFF800000u, 0, "368 per-token: s_t -Inf"},
    {CF_368, CF_TOKEN, 292, 4, 0xC0000000u, 0, "368 per-token: s_t -2.0"},
    {CF_368, CF_TOKEN, 288, 4, 0x7FC00000u, 0, "368 per-token: r NaN"},
    {CF_368, CF_TOKEN, 288, 4, 0x7F800000u, 0, "368 per-token: r +Inf"},
    {CF_368, CF_TOKEN, 263, 1, 0xFFu, 0xFEu, "368 per-token: group scale code 0xFF (E4M3 NaN)"},
    /* 432: the bf16 RoPE values at [304, 432). */
    {CF_432, CF_STATIC, 304, 2, 0x7FC0u, 0, "432: RoPE[0] NaN"},
    {CF_432, CF_STATIC, 330, 2, 0xFFC1u, 0, "432: RoPE[13] -NaN"},
    {CF_432, CF_STATIC, 366, 2, 0x7F80u, 0, "432: RoPE[31] +Inf"},
    {CF_432, CF_STATIC, 430, 2, 0xFF80u, 0, "432: RoPE[63] -Inf"},
    {CF_432, CF_STATIC, 257, 1, 0x7Fu, 0x7Eu, "432: group scale code 0x7F (E4M3 NaN)"},
    /* 656: the tile scales at [512, 528), the bf16 RoPE values at [528, 656), E4M3 latent codes. */
    {CF_656, CF_STATIC, 512, 4, 0x7FC00000u, 0, "656: tile 0 scale NaN"},
    {CF_656, CF_STATIC, 516, 4, 0x7F800000u, 0, "656: tile 1 scale +Inf"},
    {CF_656, CF_STATIC, 520, 4, 0xFF800000u, 0, "656: tile 2 scale -Inf"},
    {CF_656, CF_STATIC, 524, 4, 0xBF000000u, 0, "656: tile 3 scale -0.5"},
    {CF_656, CF_STATIC, 528, 2, 0x7FC0u, 0, "656: RoPE[0] NaN"},
    {CF_656, CF_STATIC, 600, 2, 0x7F80u, 0, "656: RoPE[36] +Inf"},
    {CF_656, CF_STATIC, 654, 2, 0xFF80u, 0, "656: RoPE[63] -Inf"},
    {CF_656, CF_STATIC, 5, 1, 0x7Fu, 0x7Eu, "656: latent code 0x7F (E4M3 NaN)"},
};

#define CORRUPT_FIELD_COUNT ((int)(sizeof corrupt_fields / sizeof corrupt_fields[0]))

static inline void corrupt_field_put(uint8_t *record, const corrupt_field_t *f, uint32_t bits) {
    if (f->width == 4) {
        memcpy(record + f->offset, &bits, 4);
    } else if (f->width == 2) {
        const uint16_t h = (uint16_t)bits;
        memcpy(record + f->offset, &h, 2);
    } else {
        record[f->offset] = (uint8_t)bits;
    }
}

/* Whether bf16 bits hold NaN or an infinity (nothing a reader may give out). */
static inline int corrupt_bf16_nonfinite(uint16_t h) {
    return (h & 0x7F80u) == 0x7F80u;
}

#endif
