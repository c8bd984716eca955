/* Golden records computed by hand (docs/record-format.md section 4): each case states the input, the
 * arithmetic in a comment, and the exact bytes it must produce. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "context.h"
#include "ops.h"
#include "record_cpu.h"
#include "test_util.h"

#define ctx tu_cpu

/* Writes one token into slot 0 of a one-record cache and returns the record. */
static void encode_one(const tu_token_t *tok, uint32_t mode, float scale, uint32_t layout, uint8_t *record) {
    int32_t bytes = layout == NVFP4_MLA_LAYOUT_FP8_ROPE_368 ? 368 : 432;
    int64_t slot = 0;
    nvfp4_mla_write_args_t w = {
        .struct_size = sizeof w, .layout = layout, .scale_mode = mode, .outer_scale = scale,
        .kv_c = tu_rows((void *)tok->v, NVFP4_MLA_DTYPE_BF16, 1, 512, 576),
        .k_pe = tu_rows((void *)(tok->v + 512), NVFP4_MLA_DTYPE_BF16, 1, 64, 576),
        .slot_mapping = tu_vec(&slot, NVFP4_MLA_DTYPE_I64, 1),
        .cache = tu_cache(record, 1, 1, bytes, bytes),
    };
    memset(record, 0xA5, (size_t)bytes);
    assert_int_equal(nvfp4_op_write(ctx, &w), NVFP4_MLA_OK);
}

static void writer_should_encode_every_e2m1_tie_to_even(void **state) {
    (void)state;
    /* Group 0 amax 6: a_g * K6 = 6 * f32(1/6) = 1.0000000298 -> f32 1.0 -> E4M3 0x38, d = 1.
     * y/d at each tie: .25 -> 0, .75 -> 1.0 (2), 1.25 -> 1.0 (2), 1.75 -> 2 (4), 2.5 -> 2 (4),
     * 3.5 -> 4 (6), 5 -> 4 (6); 6 -> 7. Negative twins add the sign bit 8. */
    static const float group[16] = {6, .25f, .75f, 1.25f, 1.75f, 2.5f, 3.5f, 5, -6, -.25f, -.75f, -1.25f, -1.75f,
                                    -2.5f, -3.5f, -5};
    static const uint8_t payload[8] = {0x07, 0x22, 0x44, 0x66, 0x8F, 0xAA, 0xCC, 0xEE};
    tu_token_t tok = {{0}};
    for (int i = 0; i < 16; i++) tu_set(&tok, i, group[i]);
    uint8_t rec[368], want[368] = {0};
    memcpy(want, payload, 8);
    want[256] = 0x38;
    encode_one(&tok, NVFP4_MLA_SCALE_STATIC, 1.0f, NVFP4_MLA_LAYOUT_FP8_ROPE_368, rec);
    assert_memory_equal(rec, want, 368); /* zero RoPE: r = 0 and zero codes; [288,304) zero */
}

static void writer_should_round_group_scales_at_the_e4m3_subnormal_boundary(void **state) {
    (void)state;
    /* One non-zero element per group (its amax); static outer scale 1.0.
     * g0: 6*2^-9       -> a*K6 = 2^-9: smallest subnormal, code 0x01, y/d = 6 -> 7
     * g1: 3*2^-10      -> a*K6 = 2^-10: half of 2^-9, tie to even -> code 0x00, payload zero
     * g2: 3.5*2^-9     -> a*K6 = 0.583*2^-9 rounds up to 2^-9 (0x01); y/d = 3.5: tie -> 4 (code 6)
     * g3: 6*2^-6       -> a*K6 = 2^-6: smallest normal, 0x08; y/d = 6 -> 7
     * g4: 6*2^-6-2^-11 -> a*K6 = 7.958*2^-9 rounds up to 2^-6 (0x08); y/d = 5.97 -> 7 (6)
     * g5: 42*2^-9      -> a*K6 = 7*2^-9: largest subnormal, 0x07; y/d = 6 -> 7 */
    static const float amax[6] = {6 * 0x1p-9f, 3 * 0x1p-10f, 3.5f * 0x1p-9f, 6 * 0x1p-6f, 6 * 0x1p-6f - 0x1p-11f,
                                  42 * 0x1p-9f};
    static const uint8_t scale_codes[6] = {0x01, 0x00, 0x01, 0x08, 0x08, 0x07};
    static const uint8_t first_byte[6] = {0x07, 0x00, 0x06, 0x07, 0x07, 0x07};
    tu_token_t tok = {{0}};
    for (int g = 0; g < 6; g++) tu_set(&tok, 16 * g, amax[g]);
    uint8_t rec[368];
    encode_one(&tok, NVFP4_MLA_SCALE_STATIC, 1.0f, NVFP4_MLA_LAYOUT_FP8_ROPE_368, rec);
    for (int g = 0; g < 6; g++) {
        assert_int_equal(rec[256 + g], scale_codes[g]);
        assert_int_equal(rec[8 * g], first_byte[g]);
        assert_true(tu_all_zero(rec + 8 * g + 1, 7));
    }
}

static void writer_should_zero_a_token_whose_scale_is_below_flt_min(void **state) {
    (void)state;
    /* All-zero latent, and a latent of amax 1e-38 (s_t = 3.7e-42 < FLT_MIN): zero tokens. RoPE [0] = 1:
     * r = 1 * K448 (bits 0x3b124925), code of 1 * f32(1/r) = 448 -> 0x7E. */
    for (int tiny = 0; tiny < 2; tiny++) {
        tu_token_t tok = {{0}};
        if (tiny) tu_set(&tok, 3, 1e-38f);
        tu_set(&tok, 512, 1.0f);
        uint8_t rec[368];
        encode_one(&tok, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f, NVFP4_MLA_LAYOUT_FP8_ROPE_368, rec);
        assert_true(tu_all_zero(rec, 288));
        assert_int_equal(tu_bits_at(rec + 288), 0x3b124925u);
        assert_int_equal(tu_bits_at(rec + 292), 0u);
        assert_true(tu_all_zero(rec + 296, 8));
        assert_int_equal(rec[304], 0x7E);
        assert_true(tu_all_zero(rec + 305, 63));
    }
}

static void writer_should_map_nan_and_inf_by_the_spec(void **state) {
    (void)state;
    /* Group 0 = {3, NaN, +Inf, -Inf, -3, 0.5, 0...}: a_g over finite values = 3, 3*K6 -> 0.5 (0x30),
     * d = 0.5. Codes: 3 -> 7, NaN -> 0, +Inf -> 7, -Inf -> 15, -3 -> 15, 0.5 -> 1.0 (2).
     * RoPE {NaN, +Inf, -Inf, 2}: r = 2 * K448; NaN -> 0x00, +-Inf -> 0x7E/0xFE, 2 -> 448 (0x7E). */
    tu_token_t tok = {{0}};
    const float g0[6] = {3, NAN, INFINITY, -INFINITY, -3, 0.5f};
    for (int i = 0; i < 6; i++) tu_set(&tok, i, g0[i]);
    tu_set(&tok, 512, NAN);
    tu_set(&tok, 513, INFINITY);
    tu_set(&tok, 514, -INFINITY);
    tu_set(&tok, 515, 2.0f);
    uint8_t rec[368];
    encode_one(&tok, NVFP4_MLA_SCALE_STATIC, 1.0f, NVFP4_MLA_LAYOUT_FP8_ROPE_368, rec);
    assert_int_equal(rec[256], 0x30);
    assert_int_equal(rec[0], 0x07);
    assert_int_equal(rec[1], 0xF7);
    assert_int_equal(rec[2], 0x2F);
    assert_true(tu_f32_at(rec + 288) == 2.0f * NVFP4_K448);
    assert_int_equal(rec[304], 0x00);
    assert_int_equal(rec[305], 0x7E);
    assert_int_equal(rec[306], 0xFE);
    assert_int_equal(rec[307], 0x7E);
    /* Per-token: a_t also leaves NaN/Inf out: s_t = 3 * K2688 exactly. */
    encode_one(&tok, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f, NVFP4_MLA_LAYOUT_FP8_ROPE_368, rec);
    assert_true(tu_f32_at(rec + 292) == 3.0f * NVFP4_K2688);
}

static void writer_should_saturate_elements_and_group_scales(void **state) {
    (void)state;
    /* g0: amax 5376 -> 5376*K6 = 896 -> E4M3 saturates at 448 (0x7E); y/d = 12 -> 6 (7).
     * g1: amax 6.375 -> 6.375*K6 = 1.0625: tie between 1.0 and 1.125 -> 1.0 (0x38); 6.375 -> 6 (7). */
    tu_token_t tok = {{0}};
    tu_set(&tok, 0, 5376.0f);
    tu_set(&tok, 16, -6.375f);
    uint8_t rec[368];
    encode_one(&tok, NVFP4_MLA_SCALE_STATIC, 1.0f, NVFP4_MLA_LAYOUT_FP8_ROPE_368, rec);
    assert_int_equal(rec[256], 0x7E);
    assert_int_equal(rec[0], 0x07);
    assert_int_equal(rec[257], 0x38);
    assert_int_equal(rec[8], 0x0F);
}

static void per_token_writer_should_keep_a_240x_spread_out_of_subnormals(void **state) {
    (void)state;
    /* The real profile's extremes in one token: group 0 amax 5.1875, group 1 amax 0.021728515625.
     * Per-token: s_t = 5.1875 * K2688; group 0's y amax ~ 2688 -> scale 448 (0x7E); group 1's
     * y amax ~ 11.26 -> 1.876 (normal). Outer 1.0: group 1 -> 0.0036 -> E4M3 subnormal. */
    tu_token_t tok = {{0}};
    tu_set(&tok, 0, 5.1875f);
    tu_set(&tok, 16, 0.021728515625f);
    uint8_t rec[368];
    encode_one(&tok, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f, NVFP4_MLA_LAYOUT_FP8_ROPE_368, rec);
    assert_true(tu_f32_at(rec + 292) == 5.1875f * NVFP4_K2688);
    assert_int_equal(rec[256], 0x7E);
    assert_true(nvfp4_e4m3_decode(rec[256]) >= 256.0f);
    assert_true(rec[257] >= 0x08);
    encode_one(&tok, NVFP4_MLA_SCALE_STATIC, 1.0f, NVFP4_MLA_LAYOUT_FP8_ROPE_368, rec);
    assert_true(rec[257] >= 0x01 && rec[257] <= 0x07);
}

static void reader_should_decode_products_exactly(void **state) {
    (void)state;
    /* The tie record of the first case, read with outer scale 2: (e2m1 * 1.0) * 2. */
    static const float group[16] = {6, .25f, .75f, 1.25f, 1.75f, 2.5f, 3.5f, 5, -6, -.25f, -.75f, -1.25f, -1.75f,
                                    -2.5f, -3.5f, -5};
    static const float want[16] = {12, 0, 2, 2, 4, 4, 8, 8, -12, -0.0f, -2, -2, -4, -4, -8, -8};
    tu_token_t tok = {{0}};
    for (int i = 0; i < 16; i++) tu_set(&tok, i, group[i]);
    uint8_t rec[368];
    encode_one(&tok, NVFP4_MLA_SCALE_STATIC, 1.0f, NVFP4_MLA_LAYOUT_FP8_ROPE_368, rec);
    uint16_t row[576];
    nvfp4_mla_decode_record_cpu(rec, 368, 0, 2.0f, row);
    for (int i = 0; i < 16; i++) {
        assert_int_equal(row[i], nvfp4_f32_to_bf16(want[i]));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(writer_should_encode_every_e2m1_tie_to_even),
        cmocka_unit_test(writer_should_round_group_scales_at_the_e4m3_subnormal_boundary),
        cmocka_unit_test(writer_should_zero_a_token_whose_scale_is_below_flt_min),
        cmocka_unit_test(writer_should_map_nan_and_inf_by_the_spec),
        cmocka_unit_test(writer_should_saturate_elements_and_group_scales),
        cmocka_unit_test(per_token_writer_should_keep_a_240x_spread_out_of_subnormals),
        cmocka_unit_test(reader_should_decode_products_exactly),
    };
    return cmocka_run_group_tests(tests, tu_setup_cpu, tu_teardown_cpu);
}
