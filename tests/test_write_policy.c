/* Writer policies (kernels/codec/write_policy.h, docs/record-format.md 4b): the mse policy's arithmetic on
 * hand-computed groups, its guarantee against rtn, rtn's bytes unchanged, and the policy's path
 * through the configuration (NVFP4_MLA_WRITER_POLICY) and the write arguments. The hand-computed
 * values were also checked by an independent model with exact rationals (E4M3 and E2M1 rounding)
 * and numpy float32 sums. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "kernel_args.h"
#include "config.h"
#include "context.h"
#include "errors.h"
#include "ops.h"
#include "record_cpu.h"
#include "settings.h"
#include "test_util.h"
#include "rtn_inputs.h"
#include "write_policy.h"

/* The hand-computed groups (values of y: static mode, outer scale 1.0, so y = x). */
enum { FOUR_OVER_SIX, TIE_KEEPS_RTN, C4_MINUS_1, C6_MINUS_1, SATURATION, SUBNORMAL, NONFINITE, ZERO, CASES };
static const float groups[CASES][16] = {
    /* All on the E2M1 grid of d = 1: c4 = code(4 * 0.25) = 0x38 has E = 0; the rtn code
     * c6 = code(4 * K6 = 0.6667) = 0x33 (0.6875) has E = 0.24609375. */
    [FOUR_OVER_SIX] = {4, 3, 2, 1.5f, 1, .5f, 0, -4, -3, -2, -1.5f, -1, -.5f, 0, 0, 0},
    /* c6 = 0x38 (d = 1) and c4 = 0x3C (1.5) both give E = 0: the tie keeps rtn's 0x38. */
    [TIE_KEEPS_RTN] = {6, 3},
    /* E per candidate: 0x38 8.4375, 0x37 2.25, 0x39 9.0, 0x3B 1.1875, 0x3C 8.4375, 0x3D 2.359375:
     * c4 - 1 = 0x3B (1.375) wins; 6 and 5.25 both take 4 * 1.375 = 5.5 (code 6). */
    [C4_MINUS_1] = {6, 5.25f, 5.25f, 5.25f, 5.25f, 5.25f, 5.25f, 5.25f, 5.25f, 5.25f, 5.25f, 5.25f, 5.25f, 5.25f, 5.25f,
                    5.25f},
    /* 0x38 2.109375, 0x37 0.140625, 0x39 19.546875, 0x3B 0.484375, 0x3C 2.109375, 0x3D 8.6875: c6 - 1
     * = 0x37 (0.9375) wins; every element takes 6 * 0.9375 = 5.625 (code 7). */
    [C6_MINUS_1] = {6, 5.625f, 5.625f, 5.625f, 5.625f, 5.625f, 5.625f, 5.625f, 5.625f, 5.625f, 5.625f, 5.625f, 5.625f,
                    5.625f, 5.625f, 5.625f},
    /* c6 = c4 = 0x7E (448, saturated): 0x7F (NaN) is never a candidate; 0x7D (416) is worse. */
    [SATURATION] = {3000, 2688},
    /* a * K6 = 2^-10: the tie rounds to code 0 (rtn writes a zero group, E = 10 * 2^-18); c6 + 1 =
     * 0x01 (d = 2^-9) has E = 0 and is the first such candidate: 3 -> code 5, 1 -> code 2. */
    [SUBNORMAL] = {3 * 0x1p-9f, 0x1p-9f},
    /* NaN and +-Inf are left out of the maximum and of E: c4 = 0x38 wins on the finite values as
     * in FOUR_OVER_SIX; NaN -> 0, +Inf -> 7, -Inf -> 0xF, as rtn writes them. */
    [NONFINITE] = {NAN, INFINITY, -INFINITY, 4, 3, 2, 1, .5f},
    [ZERO] = {0},
};
static const uint8_t want_code[CASES] = {0x38, 0x38, 0x3B, 0x37, 0x7E, 0x01, 0x38, 0x00};
static const uint8_t want_payload[CASES][8] = {
    [FOUR_OVER_SIX] = {0x56, 0x34, 0x12, 0xE0, 0xCD, 0xAB, 0x09, 0x00},
    [TIE_KEEPS_RTN] = {0x57},
    [C4_MINUS_1] = {0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66},
    [C6_MINUS_1] = {0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77},
    [SATURATION] = {0x77},
    [SUBNORMAL] = {0x25},
    [NONFINITE] = {0x70, 0x6F, 0x45, 0x12},
    [ZERO] = {0},
};

/* One token through the write entry: kv_c/k_pe f32 values as bf16 (exact for the groups above). */
static void write_token(const float *latent, const float *rope, uint32_t layout, uint32_t mode, float scale,
                        uint32_t policy, uint8_t *record) {
    tu_token_t tok = {{0}};
    for (int i = 0; i < 512; i++) tu_set(&tok, i, latent[i]);
    for (int i = 0; rope && i < 64; i++) tu_set(&tok, 512 + i, rope[i]);
    const int32_t rb = (int32_t)nvfp4_mla_record_bytes(layout);
    int64_t slot = 0;
    nvfp4_mla_write_args_t w = {
        .struct_size = sizeof w, .layout = layout, .scale_mode = mode, .outer_scale = scale, .writer_policy = policy,
        .kv_c = tu_rows(tok.v, NVFP4_MLA_DTYPE_BF16, 1, 512, 576),
        .k_pe = tu_rows(tok.v + 512, NVFP4_MLA_DTYPE_BF16, 1, 64, 576),
        .slot_mapping = tu_vec(&slot, NVFP4_MLA_DTYPE_I64, 1),
        .cache = tu_cache(record, 1, 1, rb, rb),
    };
    memset(record, 0xA5, (size_t)rb);
    if (nvfp4_op_write(tu_cpu, &w) != NVFP4_MLA_OK) fail_msg("%s", nvfp4_last_error());
}

/* E by its definition: the encoder's nearest code, decoded, the error of each finite element
 * squared and summed in order (binary32 throughout). */
static float sse_by_definition(const float *y, float d) {
    float sum = 0.0f;
    for (int i = 0; i < 16; i++) {
        if (!nvfp4_is_finite(y[i])) continue;
        const float v = d == 0.0f ? 0.0f : nvfp4_e2m1_decode(nvfp4_e2m1_encode(y[i], d) & 7u) * d;
        const float e = fabsf(y[i]) - v;
        sum += e * e;
    }
    return sum;
}

static void group_sse_should_sum_the_errors_of_the_nearest_e2m1_codes(void **state) {
    (void)state;
    static const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 7.0f};
    uint64_t s = 99;
    for (int round = 0; round < 2000; round++) {
        float y[16];
        const uint8_t code = (uint8_t)(round % 127);
        const float d = nvfp4_e4m3_decode(code);
        for (int i = 0; i < 16; i++) {
            /* Half the rounds put every element on a threshold m * d (ties), the others anywhere. */
            y[i] = round & 1 ? ties[(round + i) % 9] * (d ? d : 0x1p-9f) * (i & 1 ? -1.0f : 1.0f)
                             : (float)(tu_gauss(&s) * pow(2.0, (double)(round % 40) - 30));
        }
        const float want = sse_by_definition(y, d);
        assert_true(nvfp4_group_sse(y, d, 1) == want);
        assert_true(nvfp4_group_sse(y, d, 0) == want);
    }
    /* The C4_MINUS_1 group, candidate by candidate (the comment's numbers). */
    static const struct {
        uint8_t code;
        float sse;
    } hand[] = {{0x38, 8.4375f}, {0x37, 2.25f}, {0x39, 9.0f}, {0x3B, 1.1875f}, {0x3C, 8.4375f}, {0x3D, 2.359375f}};
    for (size_t k = 0; k < sizeof hand / sizeof hand[0]; k++) {
        assert_true(nvfp4_group_sse(groups[C4_MINUS_1], nvfp4_e4m3_decode(hand[k].code), 1) == hand[k].sse);
    }
    const float nonfinite_only[16] = {NAN, INFINITY};
    assert_true(nvfp4_group_sse(nonfinite_only, 1.0f, 0) == 0.0f); /* left out, never NaN */
}

static void mse_writer_should_write_the_hand_computed_groups(void **state) {
    (void)state;
    float latent[512] = {0};
    for (int g = 0; g < CASES; g++) memcpy(latent + 16 * g, groups[g], sizeof groups[g]);
    uint8_t rec[368], rtn[368];
    write_token(latent, NULL, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC, 1.0f, NVFP4_MLA_WRITER_POLICY_MSE,
                rec);
    for (int g = 0; g < CASES; g++) {
        if (rec[256 + g] != want_code[g] || memcmp(rec + 8 * g, want_payload[g], 8) != 0) {
            fail_msg("group %d: code 0x%02x (want 0x%02x), payload %02x %02x %02x %02x ...", g, rec[256 + g],
                     want_code[g], rec[8 * g], rec[8 * g + 1], rec[8 * g + 2], rec[8 * g + 3]);
        }
    }
    assert_true(tu_all_zero(rec + 8 * CASES, 256 - 8 * CASES) && tu_all_zero(rec + 256 + CASES, 32 - CASES));
    write_token(latent, NULL, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC, 1.0f, NVFP4_MLA_WRITER_POLICY_RTN,
                rtn);
    static const uint8_t rtn_codes[CASES] = {0x33, 0x38, 0x38, 0x38, 0x7E, 0x00, 0x33, 0x00};
    assert_memory_equal(rtn + 256, rtn_codes, CASES);
    assert_memory_equal(rec + 8 * TIE_KEEPS_RTN, rtn + 8 * TIE_KEEPS_RTN, 8); /* no change without a gain */
    assert_memory_equal(rec + 288, rtn + 288, 368 - 288);                   /* RoPE and scales: rtn's */
}

/* A random token: Gaussian latent with a per-channel spread, over magnitudes 1e-6..1e2 (shallow
 * layers' E4M3-subnormal group scales included), Gaussian RoPE. */
static void random_token(uint64_t *s, int t, float *latent, float *rope) {
    const double mag = pow(10.0, -6 + 8 * ((t * 53) % 97) / 96.0);
    for (int i = 0; i < 512; i++)
        latent[i] = nvfp4_bf16_to_f32(nvfp4_f32_to_bf16((float)(tu_gauss(s) * mag * exp(0.5 * sin(i)))));
    for (int i = 0; i < 64; i++) rope[i] = nvfp4_bf16_to_f32(nvfp4_f32_to_bf16((float)tu_gauss(s)));
}

/* The writer's y of group g (docs/record-format.md step 2) for a record written in (mode, scale). */
static void scaled_group(const float *latent, const uint8_t *rec, int per_token, float scale, int g, float *y) {
    float inv = scale == 1.0f ? 1.0f : 1.0f / scale;
    if (per_token) inv = 1.0f / tu_f32_at(rec + NVFP4_MLA_RECORD_TOKEN_SCALE_OFFSET);
    for (int i = 0; i < 16; i++) y[i] = latent[16 * g + i] * inv;
}

/* Squared error of group g of a decoded row against the input, in double. */
static double group_error(const float *latent, const float *row, int g) {
    double e = 0;
    for (int i = 16 * g; i < 16 * g + 16; i++) e += ((double)row[i] - latent[i]) * ((double)row[i] - latent[i]);
    return e;
}

static void mse_should_never_have_larger_group_error_than_rtn(void **state) {
    (void)state;
    static const struct {
        int32_t per_token;
        float scale;
    } modes[] = {{0, 1.0f}, {0, 0.003f}, {0, 5.19f / 2688}, {1, 0.0f}};
    uint64_t s = 2024;
    double total_rtn = 0, total_mse = 0;
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        for (int t = 0; t < 400; t++) {
            float latent[512], rope[64], row_rtn[576], row_mse[576];
            uint8_t rtn[368], mse[368];
            random_token(&s, t, latent, rope);
            nvfp4_mla_encode_record_cpu(latent, rope, NULL, 368, modes[m].per_token, modes[m].scale,
                                        NVFP4_MLA_WRITER_POLICY_RTN, rtn);
            nvfp4_mla_encode_record_cpu(latent, rope, NULL, 368, modes[m].per_token, modes[m].scale,
                                        NVFP4_MLA_WRITER_POLICY_MSE, mse);
            assert_memory_equal(rtn + 288, mse + 288, 368 - 288);
            nvfp4_mla_decode_record_f32_cpu(rtn, 368, modes[m].per_token, modes[m].scale, row_rtn);
            nvfp4_mla_decode_record_f32_cpu(mse, 368, modes[m].per_token, modes[m].scale, row_mse);
            double norm = 1e-300, er_token = 0, em_token = 0;
            for (int i = 0; i < 512; i++) norm += (double)latent[i] * latent[i];
            for (int g = 0; g < 32; g++) {
                float y[16];
                scaled_group(latent, rtn, modes[m].per_token, modes[m].scale, g, y);
                /* The objective itself, exactly; and the decoded values against the input. */
                assert_true(nvfp4_group_sse(y, nvfp4_e4m3_decode(mse[256 + g]), 0) <=
                            nvfp4_group_sse(y, nvfp4_e4m3_decode(rtn[256 + g]), 0));
                const double er = group_error(latent, row_rtn, g), em = group_error(latent, row_mse, g);
                assert_true(em <= er * (1 + 1e-5) + 1e-300);
                er_token += er, em_token += em;
            }
            total_rtn += er_token / norm, total_mse += em_token / norm; /* relative: every token counts */
        }
    }
    /* Measured 0.68 (the shallow tokens, whose group scales are E4M3 subnormals, gain most). */
    fprintf(stderr, "mean squared relative error, mse / rtn: %.4f\n", total_mse / total_rtn);
    assert_true(total_mse < 0.9 * total_rtn);
}

static void rtn_should_write_the_bytes_of_the_writer_before_policies(void **state) {
    (void)state;
    /* rtn_inputs.h's digest from commit adb5110 (before writer policies), CPU backend. */
    static const char *const before = "a2fddfc3af1b86f07ab14b2a1333ec8949b98026db25b5a62b256371706e8b45";
    unsigned char digest[32];
    char hex[65];
    rtn_records_digest(tu_cpu, digest);
    for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", digest[i]);
    assert_string_equal(hex, before);
}

static void write_should_refuse_a_policy_it_does_not_know(void **state) {
    (void)state;
    float latent[512] = {1.0f};
    uint8_t rec[368];
    tu_token_t tok = {{0}};
    tu_set(&tok, 0, latent[0]);
    int64_t slot = 0;
    nvfp4_mla_write_args_t w = {
        .struct_size = sizeof w, .layout = NVFP4_MLA_LAYOUT_FP8_ROPE_368, .scale_mode = NVFP4_MLA_SCALE_STATIC,
        .outer_scale = 1.0f, .writer_policy = NVFP4_MLA_WRITER_POLICY_COUNT,
        .kv_c = tu_rows(tok.v, NVFP4_MLA_DTYPE_BF16, 1, 512, 576),
        .k_pe = tu_rows(tok.v + 512, NVFP4_MLA_DTYPE_BF16, 1, 64, 576),
        .slot_mapping = tu_vec(&slot, NVFP4_MLA_DTYPE_I64, 1), .cache = tu_cache(rec, 1, 1, 368, 368),
    };
    memset(rec, 0xA5, sizeof rec);
    assert_int_equal(nvfp4_op_write(tu_cpu, &w), NVFP4_MLA_ERR_INVALID_ARGUMENT);
    assert_string_equal(nvfp4_last_error(), "write: writer_policy is 2, must be 0 (rtn) or 1 (mse)");
    for (size_t i = 0; i < sizeof rec; i++) assert_int_equal(rec[i], 0xA5); /* nothing written */
}

/* A configuration from an environment snapshot: its status, and its info (identity copied to
 * `identity`, the object is gone) when made. */
static nvfp4_mla_status_t configure(const char *const *env, nvfp4_mla_config_info_t *info, char identity[160]) {
    nvfp4_mla_config_request_t req = {sizeof req, 0, "nvfp4_ds_mla", NULL, env, NULL, {0}};
    nvfp4_mla_config_t *cfg = NULL;
    nvfp4_mla_status_t st = nvfp4_config_create(&req, &cfg);
    if (st == NVFP4_MLA_OK) {
        *info = (nvfp4_mla_config_info_t){.struct_size = sizeof *info};
        assert_int_equal(nvfp4_config_info(cfg, info), NVFP4_MLA_OK);
        snprintf(identity, 160, "%s", info->identity);
        info->identity = info->scale_source_path = NULL;
        nvfp4_config_destroy(cfg);
    }
    return st;
}

static void writer_policy_setting_should_follow_the_choice_rule(void **state) {
    (void)state;
    static const struct {
        const char *value; /* NULL: unset */
        int policy;        /* -1: refused */
    } cases[] = {{NULL, 0}, {"", 0}, {"rtn", 0}, {"RTN", 0}, {"mse", 1}, {"Mse", 1}, {" mse", -1}, {"mse\n", -1},
                 {"0", -1},   {"1", -1}, {"4over6", -1}, {"rtn,mse", -1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char setting[64];
        snprintf(setting, sizeof setting, "NVFP4_MLA_WRITER_POLICY=%s", cases[c].value ? cases[c].value : "");
        const char *env[] = {"KV_FP8_ROPE=1", cases[c].value ? setting : NULL, NULL};
        nvfp4_mla_config_info_t info;
        char identity[160];
        nvfp4_mla_status_t st = configure(env, &info, identity);
        if (cases[c].policy < 0) {
            assert_int_equal(st, NVFP4_MLA_ERR_CONFIG);
            char quoted[64], want[256];
            nvfp4_setting_quote(cases[c].value, quoted, sizeof quoted);
            snprintf(want, sizeof want,
                     "NVFP4_MLA_WRITER_POLICY=%s is not one of: rtn, mse (any case); unset or empty is rtn", quoted);
            assert_string_equal(nvfp4_last_error(), want);
        } else {
            assert_int_equal(st, NVFP4_MLA_OK);
            assert_int_equal(info.writer_policy, cases[c].policy);
        }
    }
}

static void cache_identity_should_not_depend_on_the_writer_policy(void **state) {
    (void)state;
    char scales[4096];
    const char *profile = getenv("NVFP4_MLA_TEST_PROFILE");
    snprintf(scales, sizeof scales, "VLLM_NVFP4_MLA_SCALES_FILE=%s",
             profile ? profile : "data/glm52-nvfp4-nf3-hybrid_mla_outer_scales_v1.json");
    const char *modes[3][3] = {{"KV_FP8_ROPE=1", NULL}, {"KV_FP8_ROPE=1", "VLLM_NVFP4_MLA_DYNAMIC_SCALE=1"},
                               {scales, NULL}};
    for (int m = 0; m < 3; m++) {
        const char *rtn_env[] = {modes[m][0], modes[m][1], NULL, NULL};
        const char *mse_env[] = {"NVFP4_MLA_WRITER_POLICY=mse", modes[m][0], modes[m][1], NULL};
        nvfp4_mla_config_info_t rtn, mse;
        char rtn_identity[160], mse_identity[160];
        assert_int_equal(configure(rtn_env, &rtn, rtn_identity), NVFP4_MLA_OK);
        assert_int_equal(configure(mse_env, &mse, mse_identity), NVFP4_MLA_OK);
        assert_int_equal(rtn.writer_policy, NVFP4_MLA_WRITER_POLICY_RTN);
        assert_int_equal(mse.writer_policy, NVFP4_MLA_WRITER_POLICY_MSE);
        assert_string_equal(mse_identity, rtn_identity); /* readers unchanged: one namespace */
        assert_int_equal(mse.layout, rtn.layout);
        assert_int_equal(mse.scale_mode, rtn.scale_mode);
    }
}

static void config_info_should_fill_what_a_1_0_host_passes(void **state) {
    (void)state;
    const char *env[] = {"NVFP4_MLA_WRITER_POLICY=mse", NULL};
    nvfp4_mla_config_request_t req = {sizeof req, 0, "nvfp4_ds_mla", NULL, env, NULL, {0}};
    nvfp4_mla_config_t *cfg;
    assert_int_equal(nvfp4_config_create(&req, &cfg), NVFP4_MLA_OK);
    const size_t v1_0 = offsetof(nvfp4_mla_config_info_t, writer_policy);
    nvfp4_mla_config_info_t info;
    memset(&info, 0xEE, sizeof info);
    info.struct_size = (uint32_t)v1_0; /* a 1.0 host's struct: nothing past scale_source_path */
    assert_int_equal(nvfp4_config_info(cfg, &info), NVFP4_MLA_OK);
    assert_int_equal(info.struct_size, v1_0);
    assert_int_equal(info.writer_policy, 0xEEEEEEEEu); /* untouched */
    assert_string_equal(info.identity, "vllm-default-v1");
    info.struct_size = sizeof info;
    assert_int_equal(nvfp4_config_info(cfg, &info), NVFP4_MLA_OK);
    assert_int_equal(info.struct_size, sizeof info);
    assert_int_equal(info.writer_policy, NVFP4_MLA_WRITER_POLICY_MSE);
    assert_int_equal(info.reserved1, 0);
    info.struct_size = (uint32_t)v1_0 - 8;
    assert_int_equal(nvfp4_config_info(cfg, &info), NVFP4_MLA_ERR_VERSION);
    nvfp4_config_destroy(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(group_sse_should_sum_the_errors_of_the_nearest_e2m1_codes),
        cmocka_unit_test(mse_writer_should_write_the_hand_computed_groups),
        cmocka_unit_test(mse_should_never_have_larger_group_error_than_rtn),
        cmocka_unit_test(rtn_should_write_the_bytes_of_the_writer_before_policies),
        cmocka_unit_test(write_should_refuse_a_policy_it_does_not_know),
        cmocka_unit_test(writer_policy_setting_should_follow_the_choice_rule),
        cmocka_unit_test(cache_identity_should_not_depend_on_the_writer_policy),
        cmocka_unit_test(config_info_should_fill_what_a_1_0_host_passes),
    };
    return cmocka_run_group_tests(tests, tu_setup_cpu, tu_teardown_cpu);
}
