/* Issue 48, case 9 and the configuration's smaller cases: model_dir is read in every mode (a bad one
 * is refused, calibration it carries but does not serve is named in a warning), a checkpoint key in
 * another case, a sidecar naming a folder, and JSON that cJSON takes but JSON is not (a NUL byte, a
 * \u0000 escape, a leading zero, a raw control character, ill-formed UTF-8). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "calibration.h"
#include "config.h"
#include "errors.h"

static char data_dir[2048], real_file[2048];
static char tmp_dir[] = "/tmp/nvfp4_strict_XXXXXX";

static int setup(void **state) {
    (void)state;
    const char *d = getenv("NVFP4_MLA_TEST_DATA"), *r = getenv("NVFP4_MLA_TEST_PROFILE");
    snprintf(data_dir, sizeof data_dir, "%s", d ? d : "tests/data");
    snprintf(real_file, sizeof real_file, "%s", r ? r : "data/glm52-nvfp4-nf3-hybrid_mla_outer_scales_v1.json");
    return mkdtemp(tmp_dir) ? 0 : -1;
}

/* tmp_dir/name holding `len` bytes of `text` (NUL bytes included); its path. */
static const char *tmp_bytes(const char *name, const char *text, size_t len) {
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    fclose(f);
    return path;
}

static char warned[2048];
static void log_sink(void *user, int32_t level, const char *message) {
    (void)user;
    if (level == NVFP4_MLA_LOG_WARN) snprintf(warned, sizeof warned, "%s", message);
}

/* config_create for (model_dir, env) with a log sink; the status, warned[] holding the last warning. */
static nvfp4_mla_status_t create(const char *model_dir, const char *const *env) {
    nvfp4_mla_host_desc_t host = {sizeof host, 0, "test", log_sink, NULL};
    nvfp4_mla_config_request_t req = {sizeof req, 0, "nvfp4_ds_mla", model_dir, env, &host, {0}};
    nvfp4_mla_config_t *cfg = NULL;
    warned[0] = '\0';
    nvfp4_mla_status_t st = nvfp4_config_create(&req, &cfg);
    nvfp4_config_destroy(cfg);
    return st;
}

static void expect_words(const char *text, const char *needle) {
    if (!strstr(text, needle)) fail_msg("\"%s\" lacks \"%s\"", text, needle);
}

static const char *in_data(const char *name) {
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", data_dir, name);
    return path;
}

/* Case 9: with per-token scales or an environment scales file, model_dir was never read: a missing
 * folder and a checkpoint carrying its own calibration were accepted without a word. */
static void model_dir_should_be_read_in_every_mode(void **state) {
    (void)state;
    char file_env[4200];
    snprintf(file_env, sizeof file_env, "VLLM_NVFP4_MLA_SCALES_FILE=%s", real_file);
    const char *per_token[] = {"VLLM_NVFP4_MLA_DYNAMIC_SCALE=1", "KV_FP8_ROPE=1", NULL};
    const char *env_file[] = {file_env, "KV_FP8_ROPE=1", NULL};
    const char *const *modes[] = {per_token, env_file};
    for (int m = 0; m < 2; m++) {
        assert_int_equal(create("/nonexistent", modes[m]), NVFP4_MLA_ERR_IO);
        expect_words(nvfp4_last_error(), "model_dir /nonexistent: No such file or directory");
        assert_int_equal(create(real_file, modes[m]), NVFP4_MLA_ERR_CONFIG);
        expect_words(nvfp4_last_error(), "is not a folder");
        tmp_bytes("config.json", "{\"a\": ", 6);
        assert_int_equal(create(tmp_dir, modes[m]), NVFP4_MLA_ERR_CONFIG);
        expect_words(nvfp4_last_error(), "config.json: ends at byte offset 6 before its JSON value is complete");
        assert_int_equal(create(in_data("model_plain"), modes[m]), NVFP4_MLA_OK);
        assert_string_equal(warned, "");
        assert_int_equal(create(in_data("model_inline"), modes[m]), NVFP4_MLA_OK);
        expect_words(warned, "model_inline/config.json carries calibration (\"nvfp4_mla_outer_scales\") that is not "
                             "used: ");
        expect_words(warned, m == 0 ? "per-token mode (VLLM_NVFP4_MLA_DYNAMIC_SCALE=1) takes each token's own scale"
                                    : "VLLM_NVFP4_MLA_SCALES_FILE=");
        /* a broken field the scales do not come from stays a warning: the environment overrides it */
        assert_int_equal(create(in_data("model_broken"), modes[m]), NVFP4_MLA_OK);
        expect_words(warned, "carries calibration");
    }
}

/* A checkpoint whose config.json is `text`, under the plain environment: refused, in these words. */
static void expect_checkpoint_refused(const char *text, const char *words) {
    const char *plain[] = {"KV_FP8_ROPE=1", NULL};
    tmp_bytes("config.json", text, strlen(text));
    assert_int_equal(create(tmp_dir, plain), NVFP4_MLA_ERR_CONFIG);
    expect_words(nvfp4_last_error(), words);
}

/* A key in another case was ignored, and the layers ran at 1.0. */
static void checkpoint_key_in_another_case_should_be_refused(void **state) {
    (void)state;
    expect_checkpoint_refused("{\"Nvfp4_mla_outer_scales\": {\"file\": \"scales.json\"}}",
                              "config.json: key \"Nvfp4_mla_outer_scales\" is \"nvfp4_mla_outer_scales\" in "
                              "another case: keys are case-sensitive, so it would be ignored");
}

/* {"file": "."} was refused as a link leading out of the model folder. */
static void sidecar_naming_a_folder_should_say_so(void **state) {
    (void)state;
    expect_checkpoint_refused("{\"nvfp4_mla_outer_scales\": {\"file\": \".\"}}",
                              "\"file\" = \".\" names the model folder itself, not a v1 scales file in it");
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/calib", tmp_dir);
    mkdir(sub, 0700);
    expect_checkpoint_refused("{\"nvfp4_mla_outer_scales\": {\"file\": \"calib\"}}",
                              "\"file\" = \"calib\" names a folder, not a v1 scales file in it");
}

/* The JSON reader took "scales\u0000evil" as "scales", a sidecar "x\u0000y" as "x", 078 as 78, a
 * trailing NUL, raw control characters and invalid UTF-8 in strings: each is refused by name. */
#define TAIL(literal) literal, sizeof literal - 1 /* a string literal and its length, NUL bytes included */

static void json_reader_should_refuse_what_json_is_not(void **state) {
    (void)state;
    static const char v1[] = "{\"format\": \"nvfp4_ds_mla_outer_scale_v1\", \"num_layers\": 1, \"latent_dim\": 512, "
                             "\"denominator\": 2688.0, \"scales\": [0.001]";
    const struct {
        const char *tail;
        size_t tail_len;
        const char *needle;
    } cases[] = {
        {TAIL(", \"scales\\u0000evil\": [1]}"), "holds \\u0000 at byte offset 127: a key or string with a NUL"},
        {TAIL(", \"model\": \"a\001b\"}"), "holds the control character 0x01 in a string at byte offset 131"},
        {TAIL(", \"model\": \"a\xff\"}"), "holds invalid UTF-8 in a string at byte offset 131"},
        {TAIL(", \"model\": \"\xc0\xaf\"}"), "holds invalid UTF-8 in a string"},
        {TAIL(", \"model\": \"\xed\xa0\x80\"}"), "holds invalid UTF-8 in a string"},
        {TAIL("}\0"), "holds a NUL byte at byte offset 119 (no JSON text has one)"},
        {TAIL(", \"dataset\": {\"n\": 078}}"), "holds a number with a leading zero at byte offset 137"},
        {TAIL(", \"dataset\": {\"n\": -01}}"), "holds a number with a leading zero"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char text[512];
        memcpy(text, v1, sizeof v1 - 1);
        memcpy(text + sizeof v1 - 1, cases[c].tail, cases[c].tail_len);
        nvfp4_calibration_t cal;
        const char *path = tmp_bytes("scales.json", text, sizeof v1 - 1 + cases[c].tail_len);
        assert_int_equal(nvfp4_calibration_load_file(path, &cal), NVFP4_MLA_ERR_CONFIG);
        if (!strstr(nvfp4_last_error(), cases[c].needle))
            fail_msg("case %zu: \"%s\" lacks \"%s\"", c, nvfp4_last_error(), cases[c].needle);
    }
    /* what JSON allows stays accepted: escapes, UTF-8, exponents with leading zeros, a lone 0 */
    static const char fine[] = ", \"model\": \"caf\xc3\xa9 \\\\u0000 \\u00e9 \\t\xf0\x9f\x98\x80\", "
                               "\"dataset\": {\"n\": 0, \"e\": 1e-05, \"m\": -0.5}}";
    char text[512];
    memcpy(text, v1, sizeof v1 - 1);
    memcpy(text + sizeof v1 - 1, fine, sizeof fine - 1);
    nvfp4_calibration_t cal;
    const char *path = tmp_bytes("scales.json", text, sizeof v1 - 1 + sizeof fine - 1);
    if (nvfp4_calibration_load_file(path, &cal) != NVFP4_MLA_OK) fail_msg("%s", nvfp4_last_error());
    nvfp4_calibration_free(&cal);
    /* the sidecar name of config.json: "x\u0000y" is refused, not read as "x" */
    const char plain_env[] = "KV_FP8_ROPE=1";
    const char *plain[] = {plain_env, NULL};
    static const char sidecar[] = "{\"nvfp4_mla_outer_scales\": {\"file\": \"scales.json\\u0000x\"}}";
    tmp_bytes("config.json", sidecar, sizeof sidecar - 1);
    assert_int_equal(create(tmp_dir, plain), NVFP4_MLA_ERR_CONFIG);
    expect_words(nvfp4_last_error(), "config.json: holds \\u0000 at byte offset");
}

/* Issue 58, N12: scales of 1e30, 3.4e38 and 1e-30 (every latent 0 or saturated) passed as "positive
 * normal floats", and a UTF-8 byte order mark, which Python's json refuses, passed the plugin. Both are
 * refused naming the key or the bytes; the bounds themselves and the real file's scales are taken. */
static void calibration_should_refuse_scales_no_latent_has_and_a_bom(void **state) {
    (void)state;
    const struct {
        const char *scales, *needle;
    } cases[] = {
        {"[0.001, 1e30]", "\"scales\"[1] = 1e+30 implies max_abs 2.688e+33 (scale * 2688), outside [6.10352e-05, 65504]"},
        {"[3.4e38, 0.001]", "\"scales\"[0] = 3.4e+38 implies max_abs"},
        {"[1e-30, 0.001]", "\"scales\"[0] = 1e-30 implies max_abs 2.688e-27"},
        {"[0.001, 24.38]", "\"scales\"[1] = 24.38 implies max_abs 65533.4"},
        {"[2.2e-08, 0.001]", "it would decode that layer's latents saturated"},
        {"[0.001, 1e30]", "it would decode that layer's latents as zeros"},
    };
    char text[512];
    nvfp4_calibration_t cal;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        snprintf(text, sizeof text, "{\"format\": \"nvfp4_ds_mla_outer_scale_v1\", \"num_layers\": 2, \"latent_dim\": 512, "
                 "\"denominator\": 2688.0, \"scales\": %s}", cases[c].scales);
        const char *path = tmp_bytes("absurd.json", text, strlen(text));
        assert_int_equal(nvfp4_calibration_load_file(path, &cal), NVFP4_MLA_ERR_CONFIG);
        expect_words(nvfp4_last_error(), cases[c].needle);
        expect_words(nvfp4_last_error(), path);
    }
    snprintf(text, sizeof text, "{\"format\": \"nvfp4_ds_mla_outer_scale_v1\", \"num_layers\": 2, \"latent_dim\": 512, "
             "\"denominator\": 2688.0, \"scales\": [2.3e-08, 24.36]}"); /* max_abs 6.18e-05 and 65480: inside */
    if (nvfp4_calibration_load_file(tmp_bytes("edge.json", text, strlen(text)), &cal) != NVFP4_MLA_OK)
        fail_msg("%s", nvfp4_last_error());
    nvfp4_calibration_free(&cal);
    /* the real file with a byte order mark in front: refused; as it is: taken */
    FILE *f = fopen(real_file, "rb");
    assert_non_null(f);
    static char real[1 << 20];
    memcpy(real, "\xef\xbb\xbf", 3);
    const size_t n = fread(real + 3, 1, sizeof real - 3, f);
    fclose(f);
    assert_int_equal(nvfp4_calibration_load_file(tmp_bytes("bom.json", real, n + 3), &cal), NVFP4_MLA_ERR_CONFIG);
    expect_words(nvfp4_last_error(), "bom.json: starts with a UTF-8 byte order mark (bytes EF BB BF)");
    if (nvfp4_calibration_load_file(tmp_bytes("nobom.json", real + 3, n), &cal) != NVFP4_MLA_OK)
        fail_msg("%s", nvfp4_last_error());
    nvfp4_calibration_free(&cal);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(model_dir_should_be_read_in_every_mode),
        cmocka_unit_test(checkpoint_key_in_another_case_should_be_refused),
        cmocka_unit_test(sidecar_naming_a_folder_should_say_so),
        cmocka_unit_test(json_reader_should_refuse_what_json_is_not),
        cmocka_unit_test(calibration_should_refuse_scales_no_latent_has_and_a_bom),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
