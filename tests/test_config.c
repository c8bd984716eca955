/* Cache-format configuration, calibration files and the cache identity (docs/record-format.md 6, 7). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "calibration.h"
#include "config.h"
#include "context.h"
#include "errors.h"
#include "settings.h"

#define REAL_SHA "52462f01e0559e987e171702ad26e40e0bfb39d7d944d07af96c001f5e62b9c9"

static char data_dir[2048];
static char real_file[2048]; /* the real profile, product data (data/): NVFP4_MLA_TEST_PROFILE */
static char tmp_dir[] = "/tmp/nvfp4_cfg_XXXXXX";

static const char *data_path(const char *name) {
    static char path[3][4096];
    static int next;
    char *p = path[next++ % 3];
    snprintf(p, 4096, "%s/%s", data_dir, name);
    return p;
}

static const char *tmp_file(const char *name, const char *text) {
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", tmp_dir, name);
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
    return path;
}

static int setup(void **state) {
    (void)state;
    const char *d = getenv("NVFP4_MLA_TEST_DATA");
    snprintf(data_dir, sizeof data_dir, "%s", d ? d : "tests/data");
    const char *r = getenv("NVFP4_MLA_TEST_PROFILE");
    snprintf(real_file, sizeof real_file, "%s", r ? r : "data/glm52-nvfp4-nf3-hybrid_mla_outer_scales_v1.json");
    return mkdtemp(tmp_dir) ? 0 : -1;
}

/* Creates a configuration from an environment snapshot; returns the status, fills info. */
static nvfp4_mla_status_t make(const char *dtype, const char *model_dir, const char *const *env,
                               nvfp4_mla_config_t **cfg, nvfp4_mla_config_info_t *info) {
    nvfp4_mla_config_request_t req = {sizeof req, 0, dtype, model_dir, env, NULL, {0}};
    nvfp4_mla_status_t st = nvfp4_config_create(&req, cfg);
    if (st == NVFP4_MLA_OK) {
        info->struct_size = sizeof *info;
        assert_int_equal(nvfp4_config_info(*cfg, info), NVFP4_MLA_OK);
    }
    return st;
}

static void expect_identity(const char *dtype, const char *model_dir, const char *const *env, const char *want) {
    nvfp4_mla_config_t *cfg;
    nvfp4_mla_config_info_t info;
    if (make(dtype, model_dir, env, &cfg, &info) != NVFP4_MLA_OK) {
        fail_msg("config for %s refused: %s", dtype, nvfp4_last_error());
    }
    assert_string_equal(info.identity, want);
    nvfp4_config_destroy(cfg);
}

static void expect_refusal(const char *dtype, const char *model_dir, const char *const *env, nvfp4_mla_status_t status,
                           const char *needle) {
    nvfp4_mla_config_t *cfg = (nvfp4_mla_config_t *)1;
    nvfp4_mla_config_info_t info;
    assert_int_equal(make(dtype, model_dir, env, &cfg, &info), status);
    assert_null(cfg);
    if (!strstr(nvfp4_last_error(), needle)) {
        fail_msg("message \"%s\" lacks \"%s\"", nvfp4_last_error(), needle);
    }
}

static void identity_should_stay_default_for_non_nvfp4_and_implicit_nvfp4(void **state) {
    (void)state;
    const char *none[] = {NULL};
    const char *fp8_rope[] = {"KV_FP8_ROPE=1", NULL};
    const char *dynamic[] = {"VLLM_NVFP4_MLA_DYNAMIC_SCALE=1", "KV_FP8_ROPE=1", NULL};
    expect_identity("fp8", NULL, none, "vllm-default-v1");
    expect_identity("torch.float8_e4m3fn", NULL, dynamic, "vllm-default-v1");
    expect_identity("fp8_ds_mla", NULL, dynamic, "vllm-default-v1");
    expect_identity("nvfp4_ds_mla", NULL, none, "vllm-default-v1");
    expect_identity("nvfp4_ds_mla", NULL, fp8_rope, "vllm-default-v1");
    expect_identity("torch.nvfp4_ds_mla", data_path("model_plain"), fp8_rope, "vllm-default-v1");
}

static void identity_should_name_layout_and_mode(void **state) {
    (void)state;
    char file_env[4200];
    snprintf(file_env, sizeof file_env, "VLLM_NVFP4_MLA_SCALES_FILE=%s", real_file);
    const char *dynamic[] = {"VLLM_NVFP4_MLA_DYNAMIC_SCALE=1", "KV_FP8_ROPE=1", NULL};
    const char *dynamic_words[] = {"VLLM_NVFP4_MLA_DYNAMIC_SCALE=True", "KV_FP8_ROPE=TRUE", NULL};
    const char *static368[] = {file_env, "KV_FP8_ROPE=true", NULL};
    const char *static432[] = {file_env, "KV_FP8_ROPE=0", "VLLM_NVFP4_MLA_DYNAMIC_SCALE=False", NULL};
    const char *empty[] = {"VLLM_NVFP4_MLA_DYNAMIC_SCALE=", "KV_FP8_ROPE=", "VLLM_NVFP4_MLA_SCALES_FILE=", NULL};
    expect_identity("nvfp4_ds_mla", NULL, dynamic, "nvfp4_ds_mla:fp8-rope-368:dynamic-token-v1");
    expect_identity("nvfp4_ds_mla", NULL, dynamic_words, "nvfp4_ds_mla:fp8-rope-368:dynamic-token-v1");
    expect_identity("nvfp4_ds_mla", NULL, empty, "vllm-default-v1");
    expect_identity("nvfp4_ds_mla", NULL, static368, "nvfp4_ds_mla:fp8-rope-368:static-calibrated-v1:" REAL_SHA);
    expect_identity("torch.nvfp4_ds_mla", NULL, static432, "nvfp4_ds_mla:bf16-rope-432:static-calibrated-v1:" REAL_SHA);
}

/* Issue 13, case 1: a value the rule does not understand is ERR_CONFIG naming the variable, the
 * quoted value and the accepted spellings; it never means "off" and never skips a check. */
static void settings_should_refuse_values_they_do_not_understand(void **state) {
    (void)state;
    char file_env[4200];
    snprintf(file_env, sizeof file_env, "VLLM_NVFP4_MLA_SCALES_FILE=%s", real_file);
    const char *accepted =
        "is not a boolean: use 1 or true for on, 0 or false for off (any case); unset or empty is off";
    struct {
        const char *env[4], *needle;
    } cases[] = {
        {{"VLLM_NVFP4_MLA_DYNAMIC_SCALE=yes", "KV_FP8_ROPE=1"},
         "VLLM_NVFP4_MLA_DYNAMIC_SCALE=\"yes\" is not a boolean"},
        {{"VLLM_NVFP4_MLA_DYNAMIC_SCALE=2", "KV_FP8_ROPE=1"}, "VLLM_NVFP4_MLA_DYNAMIC_SCALE=\"2\" is not a boolean"},
        {{"VLLM_NVFP4_MLA_DYNAMIC_SCALE=1 ", "KV_FP8_ROPE=1"}, "VLLM_NVFP4_MLA_DYNAMIC_SCALE=\"1 \" is not a boolean"},
        {{"VLLM_NVFP4_MLA_DYNAMIC_SCALE=on", "KV_FP8_ROPE=1", file_env}, "VLLM_NVFP4_MLA_DYNAMIC_SCALE=\"on\""},
        {{"KV_FP8_ROPE=\ttrue"}, "KV_FP8_ROPE=\"\\ttrue\" is not a boolean"},
        {{"KV_FP8_ROPE=y\x01\xc3\xa9\"\\"}, "KV_FP8_ROPE=\"y\\x01\\xc3\\xa9\\\"\\\\\" is not a boolean"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        expect_refusal("nvfp4_ds_mla", NULL, cases[c].env, NVFP4_MLA_ERR_CONFIG, cases[c].needle);
        if (strstr(cases[c].needle, "boolean") && !strstr(nvfp4_last_error(), accepted)) {
            fail_msg("message \"%s\" lacks \"%s\"", nvfp4_last_error(), accepted);
        }
    }
    /* Settings are read before the dtype decides anything: a malformed one is refused for any dtype. */
    const char *bad[] = {"KV_FP8_ROPE=yes", NULL};
    expect_refusal("fp8", NULL, bad, NVFP4_MLA_ERR_CONFIG, "KV_FP8_ROPE=\"yes\" is not a boolean");
}

/* Issue 37, case 11: VLLM_NVFP4_MLA_SCALES_FILE is read stripped, as the runtime it comes from
 * reads it (os.getenv(name, "").strip()); empty after stripping is none. */
static void scales_file_should_be_taken_stripped_as_the_runtime_reads_it(void **state) {
    (void)state;
    char spaced[4200];
    snprintf(spaced, sizeof spaced, "VLLM_NVFP4_MLA_SCALES_FILE= \t%s \n", real_file);
    const char *padded[] = {spaced, "KV_FP8_ROPE=1", NULL};
    const char *blank[] = {"VLLM_NVFP4_MLA_SCALES_FILE=  \n", "KV_FP8_ROPE=1", NULL};
    nvfp4_mla_config_t *cfg;
    nvfp4_mla_config_info_t info;
    assert_int_equal(make("nvfp4_ds_mla", NULL, padded, &cfg, &info), NVFP4_MLA_OK);
    assert_string_equal(info.identity, "nvfp4_ds_mla:fp8-rope-368:static-calibrated-v1:" REAL_SHA);
    assert_string_equal(info.scale_source_path, real_file);
    nvfp4_config_destroy(cfg);
    assert_int_equal(make("nvfp4_ds_mla", NULL, blank, &cfg, &info), NVFP4_MLA_OK);
    assert_int_equal(info.scale_source, NVFP4_MLA_SCALE_SOURCE_NONE);
    assert_string_equal(info.identity, "vllm-default-v1");
    nvfp4_config_destroy(cfg);
    char out[16], message[NVFP4_SETTING_MESSAGE_MAX];
    assert_int_equal(nvfp4_setting_path_stripped("X", " \v/a b\f\r", out, sizeof out, message, sizeof message), 0);
    assert_string_equal(out, "/a b");
    assert_int_equal(nvfp4_setting_path_stripped("X", " /0123456789abcdef ", out, sizeof out, message, sizeof message),
                     -1);
    assert_string_equal(message, "X is 17 bytes long, longer than the 15-byte limit of a path");
    /* Where no runtime set that convention, whitespace stays an error (NVFP4_MLA_PLUGIN: test_loader). */
    assert_int_equal(nvfp4_setting_path("X", " /a", out, sizeof out, message, sizeof message), -1);
}

static void setting_quote_should_escape_and_cut(void **state) {
    (void)state;
    char out[NVFP4_SETTING_QUOTED_MAX], longer[300];
    nvfp4_setting_quote("a b\t\x7f", out, sizeof out);
    assert_string_equal(out, "\"a b\\t\\x7f\"");
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    nvfp4_setting_quote(longer, out, sizeof out);
    assert_int_equal(strlen(out), NVFP4_SETTING_QUOTE_MAX + 5); /* two quotes and "..." */
    assert_string_equal(out + NVFP4_SETTING_QUOTE_MAX + 1, "\"...");
    nvfp4_setting_quote("abcdef", out, 5); /* never past the buffer: whole pieces only */
    assert_string_equal(out, "\"abc");
    int on = 7;
    char message[NVFP4_SETTING_MESSAGE_MAX];
    assert_int_equal(nvfp4_setting_bool("X", NULL, &on, message, sizeof message), 0);
    assert_int_equal(on, 0);
    assert_int_equal(nvfp4_setting_bool("X", "FaLsE", &on, message, sizeof message), 0);
    assert_int_equal(on, 0);
    assert_int_equal(nvfp4_setting_bool("X", "tRuE", &on, message, sizeof message), 0);
    assert_int_equal(on, 1);
    char path[8];
    assert_int_equal(nvfp4_setting_path("P", "12345678", path, sizeof path, message, sizeof message), -1);
    assert_string_equal(message, "P is 8 bytes long, longer than the 7-byte limit of a path");
    assert_string_equal(path, "");
}

static void identity_should_change_with_one_byte_of_the_scales_file(void **state) {
    (void)state;
    char *text;
    size_t len;
    assert_int_equal(nvfp4_read_file(real_file, 1 << 22, &text, &len), NVFP4_MLA_OK);
    char *hook = strstr(text, "\"hook\": \"mla.py");
    assert_non_null(hook);
    hook[9] = 'M'; /* "mla.py" -> "Mla.py": still a valid file, other bytes */
    char env[2][4200];
    snprintf(env[0], sizeof env[0], "VLLM_NVFP4_MLA_SCALES_FILE=%s", tmp_file("edited.json", text));
    free(text);
    const char *edited[] = {env[0], "KV_FP8_ROPE=1", NULL};
    nvfp4_mla_config_t *cfg;
    nvfp4_mla_config_info_t info;
    assert_int_equal(make("nvfp4_ds_mla", NULL, edited, &cfg, &info), NVFP4_MLA_OK);
    assert_non_null(strstr(info.identity, "static-calibrated-v1:"));
    assert_null(strstr(info.identity, REAL_SHA));
    nvfp4_config_destroy(cfg);
}

static void configuration_should_fail_closed_on_conflicts_and_missing_files(void **state) {
    (void)state;
    char file_env[4200];
    snprintf(file_env, sizeof file_env, "VLLM_NVFP4_MLA_SCALES_FILE=%s", real_file);
    const char *both[] = {"VLLM_NVFP4_MLA_DYNAMIC_SCALE=1", "KV_FP8_ROPE=1", file_env, NULL};
    const char *dyn432[] = {"VLLM_NVFP4_MLA_DYNAMIC_SCALE=1", NULL};
    const char *missing[] = {"VLLM_NVFP4_MLA_SCALES_FILE=/nonexistent/scales.json", "KV_FP8_ROPE=1", NULL};
    expect_refusal("nvfp4_ds_mla", NULL, both, NVFP4_MLA_ERR_CONFIG, "are mutually exclusive");
    expect_refusal("nvfp4_ds_mla", NULL, dyn432, NVFP4_MLA_ERR_CONFIG,
                   "VLLM_NVFP4_MLA_DYNAMIC_SCALE=1 requires KV_FP8_ROPE=1");
    expect_refusal("nvfp4_ds_mla", NULL, missing, NVFP4_MLA_ERR_IO,
                   "VLLM_NVFP4_MLA_SCALES_FILE=/nonexistent/scales.json names a scales file the plugin cannot use: cannot open "
                   "/nonexistent/scales.json");
}

static void scales_should_come_from_override_then_checkpoint_then_one(void **state) {
    (void)state;
    char file_env[4200];
    snprintf(file_env, sizeof file_env, "VLLM_NVFP4_MLA_SCALES_FILE=%s", real_file);
    const char *override[] = {file_env, "KV_FP8_ROPE=1", NULL};
    const char *plain[] = {"KV_FP8_ROPE=1", NULL};
    struct {
        const char *model, *const *env;
        uint32_t source;
        float layer1;
    } cases[] = {
        {"model_inline", override, NVFP4_MLA_SCALE_SOURCE_ENV_FILE, (float)(0.021728515625 / 2688)},
        {"model_inline", plain, NVFP4_MLA_SCALE_SOURCE_CHECKPOINT_INLINE, (float)(2.0 / 2688)},
        {"model_sidecar", plain, NVFP4_MLA_SCALE_SOURCE_CHECKPOINT_FILE, (float)(4.0 / 2688)},
        {"model_plain", plain, NVFP4_MLA_SCALE_SOURCE_NONE, 1.0f},
        {NULL, plain, NVFP4_MLA_SCALE_SOURCE_NONE, 1.0f},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        nvfp4_mla_config_t *cfg;
        nvfp4_mla_config_info_t info;
        assert_int_equal(
            make("nvfp4_ds_mla", cases[c].model ? data_path(cases[c].model) : NULL, cases[c].env, &cfg, &info),
            NVFP4_MLA_OK);
        assert_int_equal(info.scale_source, cases[c].source);
        float s;
        assert_int_equal(nvfp4_config_layer_scale(cfg, 1, &s), NVFP4_MLA_OK);
        assert_true(s == cases[c].layer1);
        assert_int_equal(nvfp4_config_layer_scale(cfg, 78, &s), NVFP4_MLA_OK); /* draft layer */
        assert_true(s == 1.0f);
        if (cases[c].source == NVFP4_MLA_SCALE_SOURCE_CHECKPOINT_FILE) {
            assert_non_null(strstr(info.scale_source_path, "model_sidecar/calib/scales.json"));
        }
        nvfp4_config_destroy(cfg);
    }
    expect_refusal("nvfp4_ds_mla", data_path("model_broken"), plain, NVFP4_MLA_ERR_IO,
                   "checkpoint calibration is present but unusable (no silent fallback to 1.0): cannot open");
    /* Issue 37: no folder, or no config.json in it, is no checkpoint at all, not unusable calibration. */
    expect_refusal("nvfp4_ds_mla", "/nonexistent", plain, NVFP4_MLA_ERR_IO,
                   "model_dir /nonexistent: No such file or directory (no checkpoint there to read calibration from)");
    expect_refusal("nvfp4_ds_mla", real_file, plain, NVFP4_MLA_ERR_CONFIG, "is not a folder");
    char empty_dir[4200];
    snprintf(empty_dir, sizeof empty_dir, "%s/no_config", tmp_dir);
    mkdir(empty_dir, 0700);
    expect_refusal("nvfp4_ds_mla", empty_dir, plain, NVFP4_MLA_ERR_IO, "holds no readable checkpoint config.json: "
                                                                       "cannot open");
    assert_null(strstr(nvfp4_last_error(), "present but unusable"));
}

/* Issue 37: a JSON text the reader refuses is said to be empty, cut short, NaN, or nested past the
 * reader's depth limit, not "malformed JSON" at a byte that is fine. */
static void json_refusals_should_name_their_cause(void **state) {
    (void)state;
    static char deep[20001];
    memset(deep, '[', 10000);
    memset(deep + 10000, ']', 10000);
    const struct {
        const char *text, *needle;
    } cases[] = {
        {"", "json.json: is empty (no JSON value)"},
        {" \n", "is empty (no JSON value)"},
        {"{\"max_abs\": [0.1, 0.2", "ends at byte offset 21 before its JSON value is complete (cut short?)"},
        {"{\"max_abs\": \"abc", "ends at byte offset 16 before its JSON value is complete"},
        {"{\"max_abs\": [NaN]}", "holds NaN at byte offset 13: NaN and Infinity are not JSON numbers"},
        {"{\"max_abs\": [1, -Infinity]}", "holds -Infinity at byte offset 16"},
        {deep, "nests arrays and objects more than 1000 deep at byte offset 1000 (the JSON reader's limit)"},
        {"{\"a\": 1,}", "is malformed JSON near byte offset 8"},
        {"{\"a\": 1} \n{}", "json.json: has trailing data after its JSON value at byte offset 10"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        nvfp4_calibration_t cal;
        assert_int_equal(nvfp4_calibration_load_file(tmp_file("json.json", cases[c].text), &cal), NVFP4_MLA_ERR_CONFIG);
        if (!strstr(nvfp4_last_error(), cases[c].needle)) {
            fail_msg("case %zu: message \"%s\" lacks \"%s\"", c, nvfp4_last_error(), cases[c].needle);
        }
    }
}

static void sidecar_paths_should_stay_inside_the_model_folder(void **state) {
    (void)state;
    const char *plain[] = {"KV_FP8_ROPE=1", NULL};
    const char *bad[] = {"{\"nvfp4_mla_outer_scales\": {\"file\": \"/etc/passwd\"}}",
                         "{\"nvfp4_mla_outer_scales\": {\"file\": \"../x.json\"}}",
                         "{\"nvfp4_mla_outer_scales\": {\"file\": \"a/../../x.json\"}}",
                         "{\"nvfp4_mla_outer_scales\": 7}",
                         "{\"nvfp4_mla_outer_scales\": {\"file\": \"x.json\", \"extra\": 1}}"};
    const char *needles[] = {"must be a path relative to the model folder", "must be a path relative",
                             "must be a path relative", "must be an object", "must have no other key"};
    for (int i = 0; i < 5; i++) {
        tmp_file("config.json", bad[i]);
        expect_refusal("nvfp4_ds_mla", tmp_dir, plain, NVFP4_MLA_ERR_CONFIG, needles[i]);
    }
}

/* A v1 document with one field replaced (by text substitution of `key`'s line). */
static nvfp4_mla_status_t load_variant(const char *key_line, const char *replacement) {
    const char *base = "{\"format\": \"nvfp4_ds_mla_outer_scale_v1\",\n\"num_layers\": 2,\n\"latent_dim\": 512,\n"
                       "\"denominator\": 2688.0,\n\"max_abs\": [0.5, 2.0],\n\"scales\": [0.00018601190476190475, "
                       "0.000744047619047619]\n}";
    char text[2048];
    const char *at = key_line ? strstr(base, key_line) : NULL;
    if (at) {
        const char *eol = strchr(at, '\n');
        if (!eol) eol = at + strlen(at) - 2;
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - base), base, replacement, eol);
    } else {
        snprintf(text, sizeof text, "%s", base);
    }
    nvfp4_calibration_t cal;
    nvfp4_mla_status_t st = nvfp4_calibration_load_file(tmp_file("variant.json", text), &cal);
    nvfp4_calibration_free(&cal);
    return st;
}

static void loader_should_reject_each_invalid_field_by_name(void **state) {
    (void)state;
    assert_int_equal(load_variant(NULL, NULL), NVFP4_MLA_OK);
    struct {
        const char *line, *replacement, *needle;
    } cases[] = {
        {"\"format\"", "\"format\": \"nvfp4_ds_mla_outer_scale_v2\",",
         "\"format\" must be \"nvfp4_ds_mla_outer_scale_v1\""},
        {"\"format\"", "\"Format\": \"nvfp4_ds_mla_outer_scale_v1\",", "unknown key \"Format\""},
        {"\"num_layers\"", "\"num_layers\": 3,", "\"scales\" has 2 entries, \"num_layers\" says 3"},
        {"\"num_layers\"", "\"num_layers\": 2.5,", "\"num_layers\" must be an integer"},
        {"\"latent_dim\"", "\"latent_dim\": 576,", "\"latent_dim\" is 576, must be 512"},
        {"\"denominator\"", "\"denominator\": 2048.0,", "\"denominator\" must be the number 2688.0"},
        {"\"scales\"", "\"scales\": [0.00018601190476190475, 1e999]", "\"scales\"[1] = inf must be finite"},
        {"\"scales\"", "\"scales\": [-0.00018601190476190475, 0.1]",
         "\"scales\"[0] = -0.000186012 must be finite, positive"},
        {"\"scales\"", "\"scales\": [0, 0.1]", "\"scales\"[0] = 0 must be finite, positive"},
        {"\"scales\"", "\"scales\": [true, 0.1]", "\"scales\"[0] is not a number"},
        {"\"scales\"", "\"scales\": [1e-300, 0.1]", "must be finite, positive and a normal float"},
        {"\"max_abs\"", "\"max_abs\": [0.5, 3.0],", "\"max_abs\"[1] = 3 disagrees with \"scales\"[1]"},
        {"\"max_abs\"", "\"scales\": [1, 2],", "key \"scales\" appears more than once"},
        {"\"latent_dim\"", "\"latent_dim\": 512,, ", "malformed JSON near byte offset 78"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        nvfp4_mla_status_t st = load_variant(cases[c].line, cases[c].replacement);
        assert_int_equal(st, NVFP4_MLA_ERR_CONFIG);
        if (!strstr(nvfp4_last_error(), cases[c].needle) || !strstr(nvfp4_last_error(), "variant.json")) {
            fail_msg("case %zu: message \"%s\" lacks \"%s\" or the file name", c, nvfp4_last_error(), cases[c].needle);
        }
    }
}

/* Issue 13, case 8: a duplicate key is refused at every depth, not only at the top. */
static void calibration_should_refuse_duplicate_keys_at_every_depth(void **state) {
    (void)state;
    assert_int_equal(
        load_variant("\"latent_dim\"", "\"latent_dim\": 512, \"dataset\": {\"name\": \"a\", \"name\": \"b\"},"),
        NVFP4_MLA_ERR_CONFIG);
    assert_non_null(strstr(nvfp4_last_error(), "variant.json: key \"dataset\".\"name\" appears more than once"));
    assert_int_equal(
        load_variant("\"latent_dim\"", "\"latent_dim\": 512, \"dataset\": {\"w\": [1, {\"k\": 1, \"k\": 2}]},"),
        NVFP4_MLA_ERR_CONFIG);
    assert_non_null(strstr(nvfp4_last_error(), "key \"dataset\".\"w\"[1].\"k\" appears more than once"));
    assert_int_equal(
        load_variant("\"latent_dim\"", "\"latent_dim\": 512, \"dataset\": {\"name\": \"a\", \"Name\": \"b\"},"),
        NVFP4_MLA_OK); /* keys are case-sensitive: two keys */
    const char *plain[] = {"KV_FP8_ROPE=1", NULL};
    tmp_file("config.json", "{\"nvfp4_mla_outer_scales\": {\"file\": \"a.json\"}, \"nvfp4_mla_outer_scales\": 7}");
    expect_refusal("nvfp4_ds_mla", tmp_dir, plain, NVFP4_MLA_ERR_CONFIG,
                   "config.json: key \"nvfp4_mla_outer_scales\" appears more than once");
    tmp_file("config.json",
             "{\"nvfp4_mla_outer_scales\": {\"format\": \"nvfp4_ds_mla_outer_scale_v1\", \"num_layers\": 1, "
             "\"latent_dim\": 512, \"denominator\": 2688.0, \"scales\": [0.001], "
             "\"dataset\": {\"n\": 1, \"n\": 2}}}");
    expect_refusal("nvfp4_ds_mla", tmp_dir, plain, NVFP4_MLA_ERR_CONFIG,
                   "key \"dataset\".\"n\" appears more than once");
}

/* Issue 13, case 8: the containment check reads the resolved path, so a link cannot lead out. */
static void sidecar_links_should_not_lead_out_of_the_model_folder(void **state) {
    (void)state;
    const char *plain[] = {"KV_FP8_ROPE=1", NULL};
    char model[4200], outside[4200], link_path[4400], target[4400];
    snprintf(model, sizeof model, "%s/model_links", tmp_dir);
    snprintf(outside, sizeof outside, "%s/outside", tmp_dir);
    mkdir(model, 0755);
    mkdir(outside, 0755);
    snprintf(target, sizeof target, "%s/scales.json", outside);
    char *text;
    size_t len;
    assert_int_equal(nvfp4_read_file(data_path("model_sidecar/calib/scales.json"), 1 << 20, &text, &len), NVFP4_MLA_OK);
    FILE *f = fopen(target, "wb");
    fwrite(text, 1, len, f);
    fclose(f);
    free(text);
    snprintf(link_path, sizeof link_path, "%s/calib", model);
    unlink(link_path);
    assert_int_equal(symlink(outside, link_path), 0); /* a folder link */
    snprintf(link_path, sizeof link_path, "%s/config.json", model);
    f = fopen(link_path, "wb");
    fputs("{\"nvfp4_mla_outer_scales\": {\"file\": \"calib/scales.json\"}}", f);
    fclose(f);
    expect_refusal("nvfp4_ds_mla", model, plain, NVFP4_MLA_ERR_CONFIG,
                   "\"file\" = \"calib/scales.json\" resolves to ");
    expect_refusal("nvfp4_ds_mla", model, plain, NVFP4_MLA_ERR_CONFIG,
                   "/outside/scales.json, outside the model folder");
    snprintf(link_path, sizeof link_path, "%s/calib", model);
    unlink(link_path);
    mkdir(link_path, 0755);
    snprintf(link_path, sizeof link_path, "%s/calib/scales.json", model);
    assert_int_equal(symlink(target, link_path), 0); /* a file link */
    expect_refusal("nvfp4_ds_mla", model, plain, NVFP4_MLA_ERR_CONFIG, "outside the model folder");
    /* A link that stays inside is fine. */
    unlink(link_path);
    snprintf(target, sizeof target, "%s/real.json", model);
    snprintf(link_path, sizeof link_path, "%s/outside/scales.json", tmp_dir);
    assert_int_equal(rename(link_path, target), 0);
    snprintf(link_path, sizeof link_path, "%s/calib/scales.json", model);
    assert_int_equal(symlink("../real.json", link_path), 0);
    nvfp4_mla_config_t *cfg;
    nvfp4_mla_config_info_t info;
    assert_int_equal(make("nvfp4_ds_mla", model, plain, &cfg, &info), NVFP4_MLA_OK);
    assert_int_equal(info.scale_source, NVFP4_MLA_SCALE_SOURCE_CHECKPOINT_FILE);
    assert_non_null(strstr(info.scale_source_path, "model_links/real.json"));
    nvfp4_config_destroy(cfg);
}

/* Issue 13, case 8: a scales file that is a device, FIFO or folder is refused without blocking, and a
 * file past the size limit is refused from its size. */
static void scales_files_should_be_regular_and_bounded(void **state) {
    (void)state;
    char fifo[4200], big[4200], env[4300];
    snprintf(fifo, sizeof fifo, "%s/fifo", tmp_dir);
    unlink(fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    snprintf(big, sizeof big, "%s/big.json", tmp_dir);
    int fd = open(big, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    assert_true(fd >= 0 && ftruncate(fd, 5 << 20) == 0);
    close(fd);
    struct {
        const char *path, *needle;
    } cases[] = {
        {"/dev/zero", "/dev/zero is a character device, not a regular file"},
        {fifo, "/fifo is a FIFO, not a regular file"},
        {tmp_dir, " is a directory, not a regular file"},
        {big, "big.json is larger than the 4194304-byte limit (5242880 bytes)"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        snprintf(env, sizeof env, "VLLM_NVFP4_MLA_SCALES_FILE=%s", cases[c].path);
        const char *settings[] = {env, "KV_FP8_ROPE=1", NULL};
        expect_refusal("nvfp4_ds_mla", NULL, settings, NVFP4_MLA_ERR_CONFIG, cases[c].needle);
    }
    unlink(big);
    unlink(fifo);
}

static void real_production_file_should_load(void **state) {
    (void)state;
    nvfp4_calibration_t cal;
    assert_int_equal(nvfp4_calibration_load_file(real_file, &cal), NVFP4_MLA_OK);
    assert_int_equal(cal.num_layers, 78);
    assert_true(cal.scales[0] == (float)(0.04833984375 / 2688));
    float lo = cal.scales[0], hi = cal.scales[0];
    for (uint32_t l = 0; l < cal.num_layers; l++) lo = fminf(lo, cal.scales[l]), hi = fmaxf(hi, cal.scales[l]);
    assert_true(hi / lo > 200 && hi / lo < 260); /* the 240x range of the spec */
    nvfp4_calibration_free(&cal);
}

static void log_sink(void *user, int32_t level, const char *message) {
    if (level == NVFP4_MLA_LOG_INFO) snprintf((char *)user, 1024, "%s", message);
}

static void source_should_be_reported_through_the_log_callback(void **state) {
    (void)state;
    char seen[1024] = "";
    nvfp4_mla_host_desc_t host = {sizeof host, 0, "test", log_sink, seen};
    const char *plain[] = {"KV_FP8_ROPE=1", NULL};
    nvfp4_mla_config_request_t req = {sizeof req, 0, "nvfp4_ds_mla", data_path("model_sidecar"), plain, &host, {0}};
    nvfp4_mla_config_t *cfg;
    assert_int_equal(nvfp4_config_create(&req, &cfg), NVFP4_MLA_OK);
    assert_non_null(strstr(seen, "outer scales: checkpoint sidecar file from"));
    assert_non_null(strstr(seen, "(2 calibrated layers)"));
    nvfp4_config_destroy(cfg);
}

/* nvfp4_attend_settings_parse over a snapshot holding (cap, mma, merge) (NULL: left out), the
 * outputs primed with the given values. */
static nvfp4_mla_status_t parse3(const char *cap, const char *mma, const char *merge, int32_t *smem, int32_t *sync,
                                 int32_t *merge_mode) {
    char vars[3][128];
    const char *env[4] = {NULL, NULL, NULL, NULL};
    const char *names[3] = {NVFP4_ENV_ATTEND_SMEM_CAP, NVFP4_ENV_ATTEND_MMA, NVFP4_ENV_ATTEND_MERGE};
    const char *values[3] = {cap, mma, merge};
    for (int i = 0, n = 0; i < 3; i++) {
        if (values[i]) {
            snprintf(vars[i], sizeof vars[i], "%s=%s", names[i], values[i]);
            env[n++] = vars[i];
        }
    }
    int32_t graphs = 0;
    return nvfp4_attend_settings_parse(env, smem, sync, merge_mode, &graphs);
}

static void attend_settings_should_parse_strictly(void **state) {
    (void)state;
    int32_t smem = 232448, sync = 7, merge = 7;
    assert_int_equal(parse3(NULL, NULL, NULL, &smem, &sync, &merge), NVFP4_MLA_OK);
    assert_int_equal(smem, 232448);
    assert_int_equal(sync, 0);
    assert_int_equal(merge, NVFP4_ATTEND_MERGE_AUTO);
    assert_int_equal(parse3("101376", "sync", "in-launch", &smem, &sync, &merge), NVFP4_MLA_OK);
    assert_int_equal(smem, 101376);
    assert_int_equal(sync, 1);
    assert_int_equal(merge, NVFP4_ATTEND_MERGE_IN_LAUNCH);
    assert_int_equal(parse3("999999999", "auto", "separate", &smem, &sync, &merge), NVFP4_MLA_OK);
    assert_int_equal(smem, 101376); /* a cap above what the device offers changes nothing */
    assert_int_equal(sync, 0);
    assert_int_equal(merge, NVFP4_ATTEND_MERGE_SEPARATE);
    const char *bad_caps[] = {"99KB", " 101376", "101376 ", "-1", "16383", "1e5", "4294967296"};
    for (size_t i = 0; i < sizeof bad_caps / sizeof *bad_caps; i++) {
        smem = 232448;
        assert_int_equal(parse3(bad_caps[i], NULL, NULL, &smem, &sync, &merge), NVFP4_MLA_ERR_CONFIG);
        assert_non_null(strstr(nvfp4_last_error(), "NVFP4_MLA_ATTEND_SMEM_CAP=\""));
        assert_non_null(strstr(nvfp4_last_error(), bad_caps[i]));
        assert_non_null(strstr(nvfp4_last_error(), "is not a decimal byte count in [16384,"));
        assert_int_equal(smem, 232448);
    }
    assert_int_equal(parse3(NULL, "wgmma", NULL, &smem, &sync, &merge), NVFP4_MLA_ERR_CONFIG);
    assert_string_equal(
        nvfp4_last_error(),
        "init: NVFP4_MLA_ATTEND_MMA=\"wgmma\" is not one of: auto, sync (any case); unset or empty is auto");
    /* the settings rule: names in any case, the quoted value shows whitespace */
    assert_int_equal(parse3(NULL, "Sync", NULL, &smem, &sync, &merge), NVFP4_MLA_OK);
    assert_int_equal(sync, 1);
    assert_int_equal(parse3(NULL, "sync ", NULL, &smem, &sync, &merge), NVFP4_MLA_ERR_CONFIG);
    assert_non_null(strstr(nvfp4_last_error(), "NVFP4_MLA_ATTEND_MMA=\"sync \""));
    /* the merge setting; a refused setting leaves every output as it was, the cap included */
    smem = 232448, sync = 0, merge = NVFP4_ATTEND_MERGE_SEPARATE;
    assert_int_equal(parse3("101376", "sync", "kernel", &smem, &sync, &merge), NVFP4_MLA_ERR_CONFIG);
    assert_string_equal(nvfp4_last_error(), "init: NVFP4_MLA_ATTEND_MERGE=\"kernel\" is not one of: auto, separate, "
                                            "in-launch (any case); unset or empty is auto");
    assert_int_equal(smem, 232448);
    assert_int_equal(sync, 0);
    assert_int_equal(merge, NVFP4_ATTEND_MERGE_SEPARATE);
    assert_int_equal(parse3(NULL, NULL, "IN-LAUNCH", &smem, &sync, &merge), NVFP4_MLA_OK);
    assert_int_equal(merge, NVFP4_ATTEND_MERGE_IN_LAUNCH);
    assert_int_equal(parse3(NULL, NULL, "Auto", &smem, &sync, &merge), NVFP4_MLA_OK);
    assert_int_equal(merge, NVFP4_ATTEND_MERGE_AUTO);
    assert_int_equal(parse3(NULL, NULL, "separate", &smem, &sync, &merge), NVFP4_MLA_OK);
    assert_int_equal(merge, NVFP4_ATTEND_MERGE_SEPARATE);
    assert_int_equal(parse3(NULL, NULL, "", &smem, &sync, &merge), NVFP4_MLA_OK);
    assert_int_equal(merge, NVFP4_ATTEND_MERGE_AUTO);
}

/* NVFP4_MLA_ATTEND_GRAPHS: auto (unset, "", any case) lets repeated eager attends launch as prebuilt
 * graphs, off keeps every call a direct launch; anything else is refused by name, with the value quoted
 * and the names listed, and leaves the output as it was. */
static nvfp4_mla_status_t parse_graphs(const char *const *env, int32_t *graphs) {
    int32_t smem = 232448, sync = 0, merge = NVFP4_ATTEND_MERGE_AUTO;
    return nvfp4_attend_settings_parse(env, &smem, &sync, &merge, graphs);
}

static void attend_graphs_setting_should_parse_strictly(void **state) {
    (void)state;
    int32_t graphs = 7;
    const char *unset[] = {NULL}, *empty[] = {NVFP4_ENV_ATTEND_GRAPHS "=", NULL};
    const char *off[] = {NVFP4_ENV_ATTEND_GRAPHS "=OFF", NULL}, *on[] = {NVFP4_ENV_ATTEND_GRAPHS "=auto", NULL};
    assert_int_equal(parse_graphs(unset, &graphs), NVFP4_MLA_OK);
    assert_int_equal(graphs, 1);
    assert_int_equal(parse_graphs(off, &graphs), NVFP4_MLA_OK);
    assert_int_equal(graphs, 0);
    assert_int_equal(parse_graphs(empty, &graphs), NVFP4_MLA_OK);
    assert_int_equal(graphs, 1);
    assert_int_equal(parse_graphs(off, &graphs), NVFP4_MLA_OK);
    assert_int_equal(parse_graphs(on, &graphs), NVFP4_MLA_OK);
    assert_int_equal(graphs, 1);
    const char *bad[] = {NVFP4_ENV_ATTEND_GRAPHS "=0", NULL};
    assert_int_equal(parse_graphs(bad, &graphs), NVFP4_MLA_ERR_CONFIG);
    assert_int_equal(graphs, 1);
    assert_string_equal(nvfp4_last_error(),
                        "init: NVFP4_MLA_ATTEND_GRAPHS=\"0\" is not one of: auto, off (any case); unset or empty is auto");
}

/* init's attention settings come from the host's snapshot when it passes one, the process
 * environment otherwise (an empty snapshot hides a bad process value; a snapshot's bad value is
 * refused although the process has none). */
static void attend_settings_should_come_from_the_snapshot(void **state) {
    (void)state;
    int32_t smem = 232448, sync = 0, merge = NVFP4_ATTEND_MERGE_AUTO, graphs = 1;
    const char *empty[] = {NULL};
    const char *snap[] = {"NVFP4_MLA_ATTEND_MMA_X=sync", NVFP4_ENV_ATTEND_MMA "=sync", NULL};
    setenv(NVFP4_ENV_ATTEND_MMA, "wgmma", 1);
    assert_int_equal(nvfp4_attend_settings_parse(NULL, &smem, &sync, &merge, &graphs), NVFP4_MLA_ERR_CONFIG);
    assert_string_equal(
        nvfp4_last_error(),
        "init: NVFP4_MLA_ATTEND_MMA=\"wgmma\" is not one of: auto, sync (any case); unset or empty is auto");
    assert_int_equal(nvfp4_attend_settings_parse(empty, &smem, &sync, &merge, &graphs), NVFP4_MLA_OK);
    assert_int_equal(sync, 0);
    assert_int_equal(nvfp4_attend_settings_parse(snap, &smem, &sync, &merge, &graphs), NVFP4_MLA_OK);
    assert_int_equal(sync, 1);
    unsetenv(NVFP4_ENV_ATTEND_MMA);
    const char *bad[] = {NVFP4_ENV_ATTEND_SMEM_CAP "=99KB", NULL};
    assert_int_equal(nvfp4_attend_settings_parse(bad, &smem, &sync, &merge, &graphs), NVFP4_MLA_ERR_CONFIG);
    assert_non_null(strstr(nvfp4_last_error(), "NVFP4_MLA_ATTEND_SMEM_CAP=\"99KB\" is not a decimal byte count"));
    assert_int_equal(smem, 232448);
}

/* init's args grew environ in ABI 1.1: a 1.0 host's smaller struct is taken (environ NULL), a
 * snapshot is taken on the CPU (which reads no setting), a struct below the 1.0 size is VERSION. */
static void init_should_take_the_1_0_args_and_a_snapshot(void **state) {
    (void)state;
    const char *snap[] = {NVFP4_ENV_ATTEND_MMA "=not-read-by-a-cpu-context", NULL};
    nvfp4_mla_init_args_t args = {sizeof args, NVFP4_MLA_DEVICE_CPU, 0, 0, NULL, {0}, snap};
    nvfp4_mla_context_t *ctx = NULL;
    assert_int_equal(nvfp4_context_init(&args, &ctx), NVFP4_MLA_OK);
    nvfp4_context_shutdown(ctx);
    args.struct_size = (uint32_t)offsetof(nvfp4_mla_init_args_t, environ); /* a 1.0 host */
    assert_int_equal(nvfp4_context_init(&args, &ctx), NVFP4_MLA_OK);
    nvfp4_context_shutdown(ctx);
    args.struct_size = (uint32_t)offsetof(nvfp4_mla_init_args_t, environ) - 8;
    assert_int_equal(nvfp4_context_init(&args, &ctx), NVFP4_MLA_ERR_VERSION);
    assert_null(ctx);
    assert_non_null(strstr(nvfp4_last_error(), "init: nvfp4_mla_init_args_t: struct_size"));
}

/* One table holds every variable: the names are unique, each has a reader and an "unset" meaning,
 * choices have names and counts bounds; the configuration's and init's rows are where they read. */
static void settings_table_should_hold_every_variable_once(void **state) {
    (void)state;
    for (int i = 0; i < NVFP4_SETTINGS; i++) {
        const nvfp4_setting_t *s = &nvfp4_settings[i];
        assert_non_null(s->name);
        assert_non_null(s->reader);
        assert_non_null(s->unset);
        assert_true((s->kind == NVFP4_SETTING_KIND_CHOICE) == (s->choice_count > 0 && s->choices));
        assert_true((s->kind == NVFP4_SETTING_KIND_COUNT) == (s->what && s->lo <= s->hi && s->hi > 0));
        if (s->kind == NVFP4_SETTING_KIND_CHOICE) {
            assert_string_equal(s->choices[0], s->unset); /* the default is the first name */
        }
        for (int j = 0; j < i; j++) {
            assert_string_not_equal(s->name, nvfp4_settings[j].name);
        }
    }
    assert_string_equal(nvfp4_settings[NVFP4_SETTING_WRITER_POLICY].name, NVFP4_ENV_WRITER_POLICY);
    assert_string_equal(nvfp4_settings[NVFP4_SETTING_WRITER_POLICY].reader, "config_create");
    assert_int_equal(nvfp4_settings[NVFP4_SETTING_WRITER_POLICY].choice_count, NVFP4_MLA_WRITER_POLICY_COUNT);
    for (uint32_t p = 0; p < NVFP4_MLA_WRITER_POLICY_COUNT; p++) {
        assert_string_equal(nvfp4_settings[NVFP4_SETTING_WRITER_POLICY].choices[p], nvfp4_mla_writer_policy_name(p));
    }
    assert_string_equal(nvfp4_settings[NVFP4_SETTING_ATTEND_MERGE].reader, "init");
    assert_string_equal(nvfp4_settings[NVFP4_SETTING_PLUGIN].name, NVFP4_MLA_PLUGIN_ENV);
    assert_string_equal(nvfp4_setting_lookup((const char *const[]){"A=1", "AB=2", NULL}, "AB"), "2");
    assert_null(nvfp4_setting_lookup((const char *const[]){"ABC=1", NULL}, "AB"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(identity_should_stay_default_for_non_nvfp4_and_implicit_nvfp4),
        cmocka_unit_test(identity_should_name_layout_and_mode),
        cmocka_unit_test(settings_should_refuse_values_they_do_not_understand),
        cmocka_unit_test(scales_file_should_be_taken_stripped_as_the_runtime_reads_it),
        cmocka_unit_test(setting_quote_should_escape_and_cut),
        cmocka_unit_test(identity_should_change_with_one_byte_of_the_scales_file),
        cmocka_unit_test(configuration_should_fail_closed_on_conflicts_and_missing_files),
        cmocka_unit_test(scales_should_come_from_override_then_checkpoint_then_one),
        cmocka_unit_test(sidecar_paths_should_stay_inside_the_model_folder),
        cmocka_unit_test(loader_should_reject_each_invalid_field_by_name),
        cmocka_unit_test(json_refusals_should_name_their_cause),
        cmocka_unit_test(calibration_should_refuse_duplicate_keys_at_every_depth),
        cmocka_unit_test(sidecar_links_should_not_lead_out_of_the_model_folder),
        cmocka_unit_test(scales_files_should_be_regular_and_bounded),
        cmocka_unit_test(real_production_file_should_load),
        cmocka_unit_test(source_should_be_reported_through_the_log_callback),
        cmocka_unit_test(attend_settings_should_parse_strictly),
        cmocka_unit_test(attend_settings_should_come_from_the_snapshot),
        cmocka_unit_test(attend_graphs_setting_should_parse_strictly),
        cmocka_unit_test(settings_table_should_hold_every_variable_once),
        cmocka_unit_test(init_should_take_the_1_0_args_and_a_snapshot),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
