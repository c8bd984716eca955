/* CPU attend against an independent float64 attention over the records' binary32 values:
 * both modes, the 656-byte baseline layout, -1 entries, per-query lengths, duplicates, no valid
 * entry, and argument checks. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "context.h"
#include "errors.h"
#include "ops.h"
#include "record_cpu.h"
#include "test_util.h"

#define ctx tu_cpu

static uint64_t rng = 99;
static double gauss(void) {
    return tu_gauss(&rng);
}

enum { SLOTS = 48, NQ = 3, H = 5, TOPK = 7 };

typedef struct setup_ {
    uint8_t cache[SLOTS * 656];
    int32_t bytes;
    uint32_t layout, mode;
    float scale;
    uint16_t q[NQ * H * 576];
    int32_t slots[NQ * TOPK];
    int32_t valid[NQ];
} world_t;

/* A 656-byte fp8_ds_mla record from bf16 values (the test's own encoder, section 8 of the spec). */
static void encode_656(const uint16_t *row, uint8_t *rec) {
    for (int tile = 0; tile < 4; tile++) {
        float amax = 0;
        for (int i = 0; i < 128; i++) amax = fmaxf(amax, fabsf(nvfp4_bf16_to_f32(row[tile * 128 + i])));
        float scale = fmaxf(amax / 448.0f, 0x1p-126f);
        memcpy(rec + 512 + 4 * tile, &scale, 4);
        for (int i = 0; i < 128; i++)
            rec[tile * 128 + i] = nvfp4_e4m3_encode(nvfp4_bf16_to_f32(row[tile * 128 + i]) / scale);
    }
    memcpy(rec + 528, row + 512, 128);
}

static void make_world(world_t *w, uint32_t layout, uint32_t mode, float scale) {
    w->layout = layout, w->mode = mode, w->scale = scale;
    w->bytes = layout == NVFP4_MLA_LAYOUT_FP8_DS_MLA_656 ? 656 : layout == NVFP4_MLA_LAYOUT_BF16_ROPE_432 ? 432 : 368;
    uint16_t tokens[SLOTS * 576];
    for (int i = 0; i < SLOTS * 576; i++) tokens[i] = nvfp4_f32_to_bf16((float)(gauss() * 0.3));
    if (w->bytes == 656) {
        for (int t = 0; t < SLOTS; t++) encode_656(tokens + t * 576, w->cache + t * 656);
    } else {
        int64_t slots[SLOTS];
        for (int t = 0; t < SLOTS; t++) slots[t] = t;
        nvfp4_mla_write_args_t a = {.struct_size = sizeof a, .layout = layout, .scale_mode = mode, .outer_scale = scale,
                                    .kv_c = tu_rows(tokens, NVFP4_MLA_DTYPE_BF16, SLOTS, 512, 576),
                                    .k_pe = tu_rows(tokens + 512, NVFP4_MLA_DTYPE_BF16, SLOTS, 64, 576),
                                    .slot_mapping = tu_vec(slots, NVFP4_MLA_DTYPE_I64, SLOTS),
                                    .cache = tu_cache(w->cache, 4, SLOTS / 4, w->bytes, SLOTS / 4 * w->bytes)};
        assert_int_equal(nvfp4_op_write(ctx, &a), NVFP4_MLA_OK);
    }
    for (int i = 0; i < NQ * H * 576; i++) w->q[i] = nvfp4_f32_to_bf16((float)gauss());
    /* query 0: plain; query 1: -1 entries and a duplicate; query 2: nothing valid */
    const int32_t s[NQ * TOPK] = {0, 7, 13, 21, 30, 44, 47, 3, -1, 3, 9, -1, 46, 12, -1, -1, -1, -1, -1, -1, -1};
    memcpy(w->slots, s, sizeof s);
    w->valid[0] = TOPK, w->valid[1] = 6, w->valid[2] = TOPK;
}

static nvfp4_mla_attend_args_t attend_args(world_t *w, uint16_t *out, float *lse, int with_valid) {
    nvfp4_mla_attend_args_t a = {.struct_size = sizeof a, .layout = w->layout, .scale_mode = w->mode,
                                 .outer_scale = w->scale, .sm_scale = 0.04f};
    a.q = tu_tensor(w->q, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){NQ, H, 576}, (int64_t[]){H * 576, 576, 1});
    a.slots = tu_rows(w->slots, NVFP4_MLA_DTYPE_I32, NQ, TOPK, TOPK);
    if (with_valid) a.valid_len = tu_vec(w->valid, NVFP4_MLA_DTYPE_I32, NQ);
    a.cache = w->bytes == 656 ? tu_cache(w->cache, 1, SLOTS, 656, SLOTS * 656)
                              : tu_cache(w->cache, 4, SLOTS / 4, w->bytes, SLOTS / 4 * w->bytes);
    a.out = tu_tensor(out, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){NQ, H, 512}, (int64_t[]){H * 512, 512, 1});
    a.lse = tu_rows(lse, NVFP4_MLA_DTYPE_F32, NQ, H, H);
    return a;
}

/* A record's binary32 values, written out from docs/record-format.md section 5: (e2m1 * d) * outer,
 * RoPE e4m3 * r (368) or the stored bf16 (432). */
static void decode_binary32(const world_t *w, const uint8_t *rec, float *row) {
    float outer = w->scale, r;
    if (w->mode == NVFP4_MLA_SCALE_PER_TOKEN) memcpy(&outer, rec + 292, 4);
    for (int i = 0; i < 512; i++) {
        const uint8_t code = (uint8_t)(i & 1 ? rec[i / 2] >> 4 : rec[i / 2] & 0xF);
        row[i] = nvfp4_mul_rn(nvfp4_mul_rn(nvfp4_e2m1_decode(code), nvfp4_e4m3_decode(rec[256 + i / 16])), outer);
    }
    memcpy(&r, rec + 288, 4);
    for (int j = 0; j < 64; j++) {
        uint16_t b;
        memcpy(&b, rec + 304 + 2 * j, 2);
        row[512 + j] = w->bytes == 368 ? nvfp4_mul_rn(nvfp4_e4m3_decode(rec[304 + j]), r) : nvfp4_bf16_to_f32(b);
    }
}

/* The reference: each valid entry's binary32 values (the 656 layout: its bf16 decoder; NVFP4 rows
 * also checked to round to the plugin's gather output), then attention in float64 written out
 * plainly. */
static void check_against_reference(world_t *w, int with_valid) {
    uint16_t out[NQ * H * 512];
    float lse[NQ * H];
    nvfp4_mla_attend_args_t a = attend_args(w, out, lse, with_valid);
    if (nvfp4_op_attend(ctx, &a) != NVFP4_MLA_OK) fail_msg("%s", nvfp4_last_error());
    for (int q = 0; q < NQ; q++) {
        float rows[TOPK][576];
        int n = 0;
        for (int e = 0; e < (with_valid ? w->valid[q] : TOPK); e++) {
            int32_t slot = w->slots[q * TOPK + e];
            if (slot < 0) continue;
            uint16_t bf16[576];
            if (w->bytes == 656) {
                nvfp4_mla_decode_fp8_656_cpu(w->cache + slot * 656, bf16);
                for (int i = 0; i < 576; i++) rows[n][i] = nvfp4_bf16_to_f32(bf16[i]);
            } else {
                nvfp4_mla_gather_args_t g = {sizeof g, w->layout, w->mode, 0, w->scale, 0, a.cache,
                                             tu_vec(&slot, NVFP4_MLA_DTYPE_I32, 1),
                                             tu_rows(bf16, NVFP4_MLA_DTYPE_BF16, 1, 576, 576), NULL, {0}};
                assert_int_equal(nvfp4_op_gather(ctx, &g), NVFP4_MLA_OK);
                decode_binary32(w, w->cache + slot * w->bytes, rows[n]);
                for (int i = 0; i < 576; i++) assert_int_equal(nvfp4_f32_to_bf16(rows[n][i]), bf16[i]);
            }
            n++;
        }
        for (int h = 0; h < H; h++) {
            const uint16_t *qv = w->q + (q * H + h) * 576;
            double s[TOPK], m = -INFINITY, l = 0, o[512] = {0};
            for (int k = 0; k < n; k++) {
                s[k] = 0;
                for (int i = 0; i < 576; i++) s[k] += (double)nvfp4_bf16_to_f32(qv[i]) * rows[k][i];
                s[k] *= (double)0.04f;
                m = fmax(m, s[k]);
            }
            for (int k = 0; k < n; k++) {
                double p = exp(s[k] - m);
                l += p;
                for (int i = 0; i < 512; i++) o[i] += p * rows[k][i];
            }
            const uint16_t *got = out + (q * H + h) * 512;
            for (int i = 0; i < 512; i++) {
                double want = n ? o[i] / l : 0.0;
                double err = fabs(nvfp4_bf16_to_f32(got[i]) - want);
                if (err > 1e-3 + 4e-3 * fabs(want))
                    fail_msg("q %d h %d i %d: got %g want %g", q, h, i, (double)nvfp4_bf16_to_f32(got[i]), want);
            }
            float want_lse = n ? (float)(m + log(l)) : -INFINITY;
            if (n) assert_true(fabsf(lse[q * H + h] - want_lse) <= 1e-5f * fabsf(want_lse) + 1e-6f);
            else assert_true(isinf(lse[q * H + h]) && lse[q * H + h] < 0);
        }
    }
}

static void attend_should_match_float64_attention_in_every_layout_and_mode(void **state) {
    (void)state;
    static world_t w;
    make_world(&w, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f);
    check_against_reference(&w, 1);
    check_against_reference(&w, 0);
    make_world(&w, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC, 0.3f * 4 / 2688);
    check_against_reference(&w, 1);
    make_world(&w, NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC, 1.0f);
    check_against_reference(&w, 1);
    make_world(&w, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC, 1.0f);
    check_against_reference(&w, 1);
}

static void duplicates_should_count_twice(void **state) {
    (void)state;
    static world_t w;
    make_world(&w, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f);
    uint16_t once[NQ * H * 512], twice[NQ * H * 512];
    float lse_once[NQ * H], lse_twice[NQ * H];
    int32_t s1[NQ * TOPK] = {4, 8, -1, -1, -1, -1, -1}, s2[NQ * TOPK] = {4, 8, 8, -1, -1, -1, -1};
    for (int i = TOPK; i < NQ * TOPK; i++) s1[i] = s2[i] = -1;
    memcpy(w.slots, s1, sizeof s1);
    nvfp4_mla_attend_args_t a = attend_args(&w, once, lse_once, 0);
    assert_int_equal(nvfp4_op_attend(ctx, &a), NVFP4_MLA_OK);
    memcpy(w.slots, s2, sizeof s2);
    a = attend_args(&w, twice, lse_twice, 0);
    assert_int_equal(nvfp4_op_attend(ctx, &a), NVFP4_MLA_OK);
    assert_memory_not_equal(once, twice, H * 512 * 2); /* slot 8 weighs twice as much */
    for (int h = 0; h < H; h++) assert_true(lse_twice[h] > lse_once[h]);
}

static void attend_should_reject_bad_arguments_by_name(void **state) {
    (void)state;
    static world_t w;
    make_world(&w, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f);
    uint16_t out[NQ * H * 512];
    float lse[NQ * H];
    const char *needles[] = {"sm_scale is 0, must be finite and > 0", "h = shape[1] is 129, must be 1..128",
                             "slots[1, 2] = 48 is neither -1 nor in [0, 48)", "valid_len[2] = 8 is outside [0, 7]",
                             "fp8_ds_mla_656 carries its own tile scales", "out: shape[2] is 500, must be 512",
                             "out heads: a stride of 100 elements overlaps rows of 512",
                             "attend: workspace: base 0x"};
    static uint8_t scratch[64] __attribute__((aligned(16)));
    for (int c = 0; c < 8; c++) {
        make_world(&w, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f);
        nvfp4_mla_attend_args_t a = attend_args(&w, out, lse, 1);
        switch (c) {
        case 0: a.sm_scale = 0; break;
        case 1: a.q.shape[1] = 129; break;
        case 2: w.slots[TOPK + 2] = SLOTS; break;
        case 3: w.valid[2] = TOPK + 1; break;
        case 4: a.layout = NVFP4_MLA_LAYOUT_FP8_DS_MLA_656; break;
        case 5: a.out.shape[2] = 500; break;
        case 6: a.out.strides[1] = 100; break;
        case 7: a.workspace = tu_vec(scratch + 4, NVFP4_MLA_DTYPE_U8, 32); break; /* misaligned (partials: 16) */
        }
        memset(out, 0x5A, sizeof out);
        assert_int_equal(nvfp4_op_attend(ctx, &a), NVFP4_MLA_ERR_INVALID_ARGUMENT);
        if (!strstr(nvfp4_last_error(), needles[c]))
            fail_msg("case %d: \"%s\" lacks \"%s\"", c, nvfp4_last_error(), needles[c]);
        if (c == 1 && strstr(nvfp4_last_error(), "strides")) /* issue 58, N18: a valid stride is not listed */
            fail_msg("\"%s\" names a stride that is fine", nvfp4_last_error());
        for (size_t i = 0; i < sizeof out / 2; i++) assert_int_equal(out[i], 0x5A5A);
    }
    uint64_t bytes = 7;
    nvfp4_mla_attend_args_t a = attend_args(&w, out, lse, 1);
    assert_int_equal(nvfp4_op_attend_workspace_bytes(ctx, &a, &bytes), NVFP4_MLA_OK);
    assert_int_equal(bytes, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(attend_should_match_float64_attention_in_every_layout_and_mode),
        cmocka_unit_test(duplicates_should_count_twice),
        cmocka_unit_test(attend_should_reject_bad_arguments_by_name),
    };
    return cmocka_run_group_tests(tests, tu_setup_cpu, tu_teardown_cpu);
}
