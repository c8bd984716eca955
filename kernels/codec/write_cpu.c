/* The record writer on the CPU: the reference every other writer must equal byte for byte.
 *
 * Computes docs/record-format.md section 4 literally, one token at a time, in the order the spec gives
 * its steps, so that a reader of the spec can check it line by line. Layouts 368 and 432; static
 * and per-token outer scales; the writer policies of write_policy.h (rtn: the spec as written).
 * Slots < 0 (padding) are skipped; slots >= capacity are skipped and counted in out_of_range_count,
 * as on CUDA (the plugin refuses them before a CPU write: abi/nvfp4_mla_ops.h's slot rule); only
 * the addressed records are written. Tested against hand-computed golden records in tests/test_codec_golden.c.
 */
#include <string.h>

#include "backends.h"
#include "fp_codes.h"
#include "record_cpu.h"
#include "write_policy.h"

/* Largest finite |v| over n values (0 when none is finite). */
static float finite_abs_max(const float *v, int n) {
    float best = 0.0f;
    for (int i = 0; i < n; i++) {
        float a = nvfp4_abs(v[i]);
        if (nvfp4_is_finite(a) && a > best) {
            best = a;
        }
    }
    return best;
}

static uint32_t count_nonfinite(const float *v, int n) {
    uint32_t count = 0;
    for (int i = 0; i < n; i++) {
        count += (uint32_t)!nvfp4_is_finite(v[i]);
    }
    return count;
}

static void store_f32(uint8_t *dst, float v) {
    memcpy(dst, &v, sizeof v); /* little-endian host: the spec's byte order */
}

/* Steps 2-4 for one group of 16: scale, group scale code (step 3's, or the policy's choice among
 * candidates, write_policy.h), element codes. */
static void encode_group(const float *x, float inv, int32_t policy, uint8_t *payload8, uint8_t *scale_code) {
    float y[NVFP4_MLA_GROUP_SIZE];
    for (int i = 0; i < NVFP4_MLA_GROUP_SIZE; i++) {
        y[i] = nvfp4_mul_rn(x[i], inv);
    }
    const float a = finite_abs_max(y, NVFP4_MLA_GROUP_SIZE);
    uint8_t code = (uint8_t)nvfp4_e4m3_magnitude_code(nvfp4_mul_rn(a, NVFP4_K6));
    if (policy == NVFP4_MLA_WRITER_POLICY_MSE) {
        code = (uint8_t)nvfp4_mse_group_code(y, code, nvfp4_e4m3_magnitude_code(nvfp4_mul_rn(a, NVFP4_K4)), 0);
    }
    float d = nvfp4_e4m3_decode(code);
    *scale_code = code;
    memset(payload8, 0, NVFP4_MLA_GROUP_SIZE / 2);
    if (d == 0.0f) {
        return;
    }
    for (int i = 0; i < NVFP4_MLA_GROUP_SIZE; i += 2) {
        uint8_t lo = nvfp4_e2m1_encode(y[i], d);
        uint8_t hi = nvfp4_e2m1_encode(y[i + 1], d);
        payload8[i / 2] = (uint8_t)(lo | (hi << 4));
    }
}

/* Step 5: the E4M3 RoPE block of the 368 layout. */
static void encode_rope_e4m3(const float *rope, uint8_t *record) {
    float r = nvfp4_mul_rn(finite_abs_max(rope, NVFP4_MLA_ROPE_DIM), NVFP4_K448);
    uint8_t *codes = record + NVFP4_MLA_RECORD_ROPE_OFFSET;
    if (r < NVFP4_FLT_MIN) {
        store_f32(record + NVFP4_MLA_RECORD_ROPE_SCALE_OFFSET, 0.0f);
        memset(codes, 0, NVFP4_MLA_ROPE_DIM);
        return;
    }
    store_f32(record + NVFP4_MLA_RECORD_ROPE_SCALE_OFFSET, r);
    float inv_r = nvfp4_rcp_rn(r);
    for (int j = 0; j < NVFP4_MLA_ROPE_DIM; j++) {
        codes[j] = nvfp4_e4m3_encode(nvfp4_mul_rn(rope[j], inv_r));
    }
}

uint32_t nvfp4_mla_encode_record_cpu(const float *latent, const float *rope, const uint16_t *rope_bf16,
                                     int32_t record_bytes, int32_t per_token, float outer_scale,
                                     int32_t writer_policy, uint8_t *record) {
    memset(record + NVFP4_MLA_RECORD_ROPE_SCALE_OFFSET, 0,
           NVFP4_MLA_RECORD_ROPE_OFFSET - NVFP4_MLA_RECORD_ROPE_SCALE_OFFSET);

    /* Step 1: the outer scale and its inverse. */
    float inv = 1.0f;
    int zero_token = 0;
    if (per_token) {
        float s_t = nvfp4_mul_rn(finite_abs_max(latent, NVFP4_MLA_LATENT_DIM), NVFP4_K2688);
        if (s_t < NVFP4_FLT_MIN) {
            zero_token = 1;
        } else {
            store_f32(record + NVFP4_MLA_RECORD_TOKEN_SCALE_OFFSET, s_t);
            inv = nvfp4_rcp_rn(s_t);
        }
    } else if (outer_scale != 1.0f) {
        inv = nvfp4_rcp_rn(outer_scale);
    }

    if (zero_token) {
        memset(record, 0, NVFP4_MLA_RECORD_ROPE_SCALE_OFFSET);
    } else {
        for (int g = 0; g < NVFP4_MLA_GROUPS; g++) {
            encode_group(latent + g * NVFP4_MLA_GROUP_SIZE, inv, writer_policy, record + 8 * g,
                         record + NVFP4_MLA_RECORD_GROUP_SCALE_OFFSET + g);
        }
    }

    if (record_bytes == NVFP4_MLA_RECORD_BYTES_368) {
        encode_rope_e4m3(rope, record);
    } else {
        memcpy(record + NVFP4_MLA_RECORD_ROPE_OFFSET, rope_bf16, NVFP4_MLA_ROPE_DIM * sizeof(uint16_t));
    }
    return count_nonfinite(latent, NVFP4_MLA_LATENT_DIM) + count_nonfinite(rope, NVFP4_MLA_ROPE_DIM);
}

/* Converts one input row (bf16 or fp16) to f32, and keeps a bf16 copy for the 432 RoPE. */
static void load_row(const void *src, int64_t row, int64_t row_stride, int n, int is_f16, float *dst,
                     uint16_t *dst_bf16) {
    const uint16_t *p = (const uint16_t *)src + row * row_stride;
    for (int i = 0; i < n; i++) {
        dst[i] = is_f16 ? nvfp4_f16_to_f32(p[i]) : nvfp4_bf16_to_f32(p[i]);
        if (dst_bf16) {
            dst_bf16[i] = is_f16 ? nvfp4_f32_to_bf16(dst[i]) : p[i];
        }
    }
}

void nvfp4_mla_write_cpu(const nvfp4_mla_write_kernel_args_t *a, nvfp4_mla_kernel_result_t *result) {
    float latent[NVFP4_MLA_LATENT_DIM];
    float rope[NVFP4_MLA_ROPE_DIM];
    uint16_t rope_bf16[NVFP4_MLA_ROPE_DIM];
    float captured = a->capture_max_abs ? *a->capture_max_abs : 0.0f;
    uint64_t nonfinite = 0;

    uint64_t out_of_range = 0;
    for (int64_t t = 0; t < a->num_tokens; t++) {
        int64_t slot = a->slot_mapping[t * a->slot_stride];
        if (slot < 0 || slot >= a->capacity) {
            out_of_range += slot >= a->capacity; /* padding (< 0) is skipped silently; past the cache, counted */
            continue;
        }
        load_row(a->kv_c, t, a->kv_c_row_stride, NVFP4_MLA_LATENT_DIM, a->input_is_f16, latent, NULL);
        load_row(a->k_pe, t, a->k_pe_row_stride, NVFP4_MLA_ROPE_DIM, a->input_is_f16, rope, rope_bf16);
        uint8_t *record =
            a->cache + (slot / a->block_size) * a->block_stride + (slot % a->block_size) * a->record_bytes;
        nonfinite += nvfp4_mla_encode_record_cpu(latent, rope, rope_bf16, a->record_bytes, a->per_token,
                                                 a->outer_scale, a->writer_policy, record);
        float amax = finite_abs_max(latent, NVFP4_MLA_LATENT_DIM);
        if (amax > captured) {
            captured = amax;
        }
    }
    if (a->capture_max_abs) {
        *a->capture_max_abs = captured;
    }
    if (a->nonfinite_count) {
        *a->nonfinite_count += nonfinite;
    }
    if (a->out_of_range_count) {
        *a->out_of_range_count += out_of_range;
    }
    result->status = 0;
    result->message[0] = '\0';
}
