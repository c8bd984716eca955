/* The gather reader on the CPU: records back to dense bf16 rows (docs/record-format.md section 5).
 *
 * The oracle of the CUDA gather and of attention's dequantisation: value = (e2m1 * e4m3) * outer
 * in binary32 (the first product is exact; attention uses this binary32 value), then bf16 with
 * round-to-nearest-even for gather's rows. Slot -1 gives a row of zeros. Also the decoder of the
 * 656-byte fp8_ds_mla record, which attention reads. Every float field of a record (r, s_t, the 656
 * tile scales) and every stored bf16 RoPE value goes through the corrupt-field rule of fp_codes.h
 * (nvfp4_scale_field, nvfp4_rope_bf16_field). Tested by round trips and golden records in
 * tests/test_codec_*.c, the field rule in tests/test_corrupt_fields.c.
 */
#include <string.h>

#include "backends.h"
#include "fp_codes.h"
#include "record_cpu.h"

/* 64 stored bf16 RoPE values (432 and 656 records) by the corrupt-field rule. */
static void copy_rope_bf16(const uint8_t *stored, uint16_t *row) {
    for (int j = 0; j < NVFP4_MLA_ROPE_DIM; j++) {
        uint16_t v;
        memcpy(&v, stored + 2 * j, sizeof v);
        row[j] = nvfp4_rope_bf16_field(v);
    }
}

void nvfp4_mla_decode_record_f32_cpu(const uint8_t *record, int32_t record_bytes, int32_t per_token,
                                     float outer_scale, float *row) {
    float outer = outer_scale; /* static: the call's scale, checked by the plugin */
    if (per_token) {
        memcpy(&outer, record + NVFP4_MLA_RECORD_TOKEN_SCALE_OFFSET, sizeof outer);
        outer = nvfp4_scale_field(outer);
    }
    for (int g = 0; g < NVFP4_MLA_GROUPS; g++) {
        float d = nvfp4_e4m3_decode(record[NVFP4_MLA_RECORD_GROUP_SCALE_OFFSET + g]);
        for (int i = 0; i < NVFP4_MLA_GROUP_SIZE; i++) {
            uint8_t byte = record[8 * g + i / 2];
            uint8_t code = (uint8_t)((i & 1) ? byte >> 4 : byte & 0xF);
            row[g * NVFP4_MLA_GROUP_SIZE + i] = nvfp4_mul_rn(nvfp4_mul_rn(nvfp4_e2m1_decode(code), d), outer);
        }
    }
    float *rope_out = row + NVFP4_MLA_LATENT_DIM;
    if (record_bytes == NVFP4_MLA_RECORD_BYTES_368) {
        float r;
        memcpy(&r, record + NVFP4_MLA_RECORD_ROPE_SCALE_OFFSET, sizeof r);
        r = nvfp4_scale_field(r);
        for (int j = 0; j < NVFP4_MLA_ROPE_DIM; j++) {
            rope_out[j] = nvfp4_mul_rn(nvfp4_e4m3_decode(record[NVFP4_MLA_RECORD_ROPE_OFFSET + j]), r);
        }
    } else {
        for (int j = 0; j < NVFP4_MLA_ROPE_DIM; j++) {
            uint16_t v;
            memcpy(&v, record + NVFP4_MLA_RECORD_ROPE_OFFSET + 2 * j, sizeof v);
            rope_out[j] = nvfp4_bf16_to_f32(nvfp4_rope_bf16_field(v));
        }
    }
}

void nvfp4_mla_decode_record_cpu(const uint8_t *record, int32_t record_bytes, int32_t per_token,
                                 float outer_scale, uint16_t *row) {
    float values[NVFP4_MLA_ROW_DIM];
    nvfp4_mla_decode_record_f32_cpu(record, record_bytes, per_token, outer_scale, values);
    /* 432's RoPE: bf16 -> binary32 -> bf16 gives back the stored bits, -0 and subnormals included, now
     * that the field rule has read NaN and +-Inf as 0 (NaN payloads were the reason for a copy). */
    for (int i = 0; i < NVFP4_MLA_ROW_DIM; i++) {
        row[i] = nvfp4_f32_to_bf16(values[i]);
    }
}

/* The 656-byte fp8_ds_mla record (docs/record-format.md section 8): the baseline attend reads. */
void nvfp4_mla_decode_fp8_656_cpu(const uint8_t *record, uint16_t *row) {
    enum { TILE = NVFP4_MLA_FP8_656_TILE_SIZE };
    for (int tile = 0; tile < NVFP4_MLA_FP8_656_TILES; tile++) {
        float scale;
        memcpy(&scale, record + NVFP4_MLA_FP8_656_TILE_SCALE_OFFSET + 4 * tile, sizeof scale);
        scale = nvfp4_scale_field(scale);
        for (int i = 0; i < TILE; i++) {
            row[tile * TILE + i] = nvfp4_f32_to_bf16(nvfp4_mul_rn(nvfp4_e4m3_decode(record[tile * TILE + i]), scale));
        }
    }
    copy_rope_bf16(record + NVFP4_MLA_FP8_656_ROPE_OFFSET, row + NVFP4_MLA_LATENT_DIM);
}

void nvfp4_mla_gather_cpu(const nvfp4_mla_gather_kernel_args_t *a, nvfp4_mla_kernel_result_t *result) {
    for (int64_t n = 0; n < a->num_rows; n++) {
        int64_t slot = a->slots[n * a->slot_stride];
        uint16_t *row = a->out + n * a->out_row_stride;
        if (slot < 0 || slot >= a->capacity) {
            memset(row, 0, NVFP4_MLA_ROW_DIM * sizeof(uint16_t));
            continue;
        }
        const uint8_t *record =
            a->cache + (slot / a->block_size) * a->block_stride + (slot % a->block_size) * a->record_bytes;
        nvfp4_mla_decode_record_cpu(record, a->record_bytes, a->per_token, a->outer_scale, row);
    }
    result->status = 0;
    result->message[0] = '\0';
}
