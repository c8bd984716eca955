/* The nvfp4-mla tool as a user runs it: encode/decode/inspect on files, calibrate, probe; errors are
 * one clear line and a non-zero exit. Runs the built CLI against the built plugin. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "fp_codes.h" /* header-only bf16 conversions; the test still reaches the plugin only through the CLI */

static char tmp[] = "/tmp/nvfp4_cli_XXXXXX";
static char cli[2048], data[2048];
static char out_text[1 << 16], err_text[1 << 16];

static int setup(void **state) {
    (void)state;
    const char *c = getenv("NVFP4_MLA_CLI"), *p = getenv("NVFP4_MLA_PLUGIN_PATH"), *d = getenv("NVFP4_MLA_TEST_DATA");
    if (!c || !p || !d || !mkdtemp(tmp)) return -1;
    snprintf(cli, sizeof cli, "%s", c);
    snprintf(data, sizeof data, "%s", d);
    setenv("NVFP4_MLA_PLUGIN", p, 1);
    return 0;
}

static void slurp(const char *path, char *buf, size_t size) {
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, size - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
}

/* Runs "nvfp4-mla ARGS" (ARGS may use %s for the temp folder); returns the exit status. */
static int run(const char *env, const char *fmt, ...) {
    char args[4096], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s '%s' %s >%s/out.txt 2>%s/err.txt", env ? env : "", cli, args, tmp, tmp);
    int status = system(cmd);
    char path[4096];
    snprintf(path, sizeof path, "%s/out.txt", tmp);
    slurp(path, out_text, sizeof out_text);
    snprintf(path, sizeof path, "%s/err.txt", tmp);
    slurp(path, err_text, sizeof err_text);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static long file_size(const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

static void write_file(const char *name, const void *bytes, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "wb");
    fwrite(bytes, 1, n, f);
    fclose(f);
}

enum { T = 100 };
static uint16_t tokens[T * 576];

static void make_tokens(double scale) {
    uint64_t s = 99;
    for (int i = 0; i < T * 576; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        tokens[i] = nvfp4_f32_to_bf16((float)(((double)(s >> 11) * 0x1p-53 - 0.5) * scale));
    }
    write_file("in.bf16", tokens, sizeof tokens);
}

static void tools_should_round_trip_records_through_files(void **state) {
    (void)state;
    make_tokens(2.0);
    assert_int_equal(run(NULL, "encode --layout 368 --mode per-token %s/in.bf16 %s/rec.bin", tmp, tmp), 0);
    assert_int_equal(file_size("rec.bin"), T * 368);
    assert_int_equal(run(NULL, "decode --layout 368 --mode per-token %s/rec.bin %s/out.bf16", tmp, tmp), 0);
    assert_int_equal(file_size("out.bf16"), T * 1152);
    static uint16_t back[T * 576];
    char path[4096];
    snprintf(path, sizeof path, "%s/out.bf16", tmp);
    FILE *f = fopen(path, "rb");
    assert_int_equal(fread(back, 2, T * 576, f), T * 576);
    fclose(f);
    double num = 0, den = 0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < 512; i++) {
            double d = nvfp4_bf16_to_f32(back[t * 576 + i]) - nvfp4_bf16_to_f32(tokens[t * 576 + i]);
            num += d * d;
            den += (double)nvfp4_bf16_to_f32(tokens[t * 576 + i]) * nvfp4_bf16_to_f32(tokens[t * 576 + i]);
        }
    assert_true(sqrt(num / den) < 0.11 && sqrt(num / den) > 0.01);
    assert_int_equal(run(NULL, "encode --layout 432 --mode static --scale 0.01 %s/in.bf16 %s/rec432.bin", tmp, tmp), 0);
    assert_int_equal(file_size("rec432.bin"), T * 432);
}

static void tools_should_fail_with_one_clear_line(void **state) {
    (void)state;
    make_tokens(1.0);
    write_file("short.bf16", tokens, 1000);
    assert_int_equal(run(NULL, "encode --layout 368 --mode static %s/short.bf16 %s/x.bin", tmp, tmp), 1);
    assert_non_null(strstr(err_text, "is 1000 bytes, not a whole number of bf16 [T,576] rows (1152 bytes each)"));
    assert_int_equal(run(NULL, "encode --layout 368 --mode dynamic %s/in.bf16 %s/x.bin", tmp, tmp), 1);
    assert_non_null(strstr(err_text, "--mode is \"dynamic\", must be per-token or static"));
    assert_int_equal(run(NULL, "encode --layout 432 --mode per-token %s/in.bf16 %s/x.bin", tmp, tmp), 1);
    assert_non_null(strstr(err_text, "per-token requires layout fp8_rope_368"));
    assert_int_equal(run(NULL, "encode --layout 368 --mode static %s/in.bf16 %s/rec.bin", tmp, tmp), 0);
    assert_int_equal(run(NULL, "decode --layout 432 --mode static %s/rec.bin %s/x.bf16", tmp, tmp), 1);
    assert_non_null(strstr(err_text, "not a whole number of 432-byte records (wrong --layout or a short file?)"));
    assert_int_equal(run(NULL, "inspect --layout 512 %s/rec.bin", tmp), 1);
    assert_non_null(strstr(err_text, "--layout is \"512\", must be 368 or 432"));
    assert_int_equal(run(NULL, "decode --layout 368 --mode static %s/missing.bin %s/x.bf16", tmp, tmp), 1);
    assert_non_null(strstr(err_text, "cannot open"));
    assert_null(strchr(strchr(err_text, '\n') + 1, '\n')); /* exactly one line */
}

static void inspect_should_count_subnormal_group_scales(void **state) {
    (void)state;
    make_tokens(0.04); /* a shallow layer's magnitude */
    assert_int_equal(run(NULL, "encode --layout 368 --mode static %s/in.bf16 %s/id.bin", tmp, tmp), 0);
    assert_int_equal(run(NULL, "inspect --layout 368 %s/id.bin", tmp), 0);
    assert_non_null(strstr(out_text, "100 records of 368 bytes"));
    assert_null(strstr(out_text, " 0 E4M3 subnormal")); /* outer scale 1.0: subnormal group scales */
    assert_int_equal(run(NULL, "encode --layout 368 --mode per-token %s/in.bf16 %s/pt.bin", tmp, tmp), 0);
    assert_int_equal(run(NULL, "inspect --layout 368 %s/pt.bin", tmp), 0);
    assert_non_null(strstr(out_text, "3200 groups, 0 zero (0.00%), 0 E4M3 subnormal (0.00%)"));
}

static void calibrate_should_envelope_ranks_and_load_through_the_plugin(void **state) {
    (void)state;
    const char *rank0 = "# layer,max_abs\n0,0.5\n1,2.0\n2,1.0\n";
    const char *rank1 = "[0.49, 2.05, 1.0]";
    write_file("rank0.csv", rank0, strlen(rank0));
    write_file("rank1.json", rank1, strlen(rank1));
    assert_int_equal(run(NULL, "calibrate --out %s/cal.json --model m --dataset d --hook h --created-utc 2026-11-29T00:00:00+00:00 "
                         "%s/rank0.csv %s/rank1.json", tmp, tmp, tmp), 0);
    assert_non_null(strstr(out_text, "2 ranks, 3 layers; worst rank disagreement 2.44% (layer 1)"));
    assert_non_null(strstr(out_text, "loader check: 3 layers, cache identity nvfp4_ds_mla:fp8-rope-368:static-calibrated-v1:"));
    char path[4096], text[8192];
    snprintf(path, sizeof path, "%s/cal.json", tmp);
    slurp(path, text, sizeof text);
    assert_non_null(strstr(text, "\"max_abs\":\t[0.5, 2.05, 1]"));
    assert_non_null(strstr(text, "\"model\":\t\"m\""));
    assert_non_null(strstr(text, "\"created_utc\":\t\"2026-11-29T00:00:00+00:00\""));
    assert_int_equal(run(NULL, "calibrate --out %s/c2.json --tolerance 0.01 %s/rank0.csv %s/rank1.json", tmp, tmp, tmp), 1);
    assert_non_null(strstr(err_text, "ranks disagree by 2.44% at layer 1, more than --tolerance 1%"));
    write_file("bad.csv", "0,0.5\n0,0.6\n", 12);
    assert_int_equal(run(NULL, "calibrate --out %s/c3.json %s/bad.csv", tmp, tmp), 1);
    assert_non_null(strstr(err_text, "bad.csv:2: layer 0 appears twice"));
}

static void probe_should_report_and_decide(void **state) {
    (void)state;
    assert_int_equal(run("KV_FP8_ROPE=1", "probe --json"), 0);
    assert_non_null(strstr(out_text, "\"accepted\":\ttrue"));
    assert_non_null(strstr(out_text, "\"abi\":\t\"1.0\""));
    char env[4200];
    snprintf(env, sizeof env, "KV_FP8_ROPE=1 VLLM_NVFP4_MLA_SCALES_FILE=%s/glm52-nvfp4-nf3-hybrid_mla_outer_scales_v1.json", data);
    assert_int_equal(run(env, "probe"), 0);
    assert_non_null(strstr(out_text, "static-calibrated-v1:52462f01"));
    assert_int_equal(run("KV_FP8_ROPE=1 VLLM_NVFP4_MLA_DYNAMIC_SCALE=1", "probe"), 0);
    assert_non_null(strstr(out_text, "nvfp4_ds_mla:fp8-rope-368:dynamic-token-v1"));
    assert_non_null(strstr(out_text, "serves per-token scales on fp8_rope_368"));
    assert_int_equal(run("VLLM_NVFP4_MLA_DYNAMIC_SCALE=1", "probe"), 1); /* per-token needs the 368 layout */
    assert_non_null(strstr(err_text, "configuration refused: VLLM_NVFP4_MLA_DYNAMIC_SCALE=1 requires KV_FP8_ROPE=1"));
    assert_int_equal(run("NVFP4_MLA_PLUGIN=none", "probe"), 1);
    assert_non_null(strstr(err_text, "disabled (NVFP4_MLA_PLUGIN=none)"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tools_should_round_trip_records_through_files),
        cmocka_unit_test(tools_should_fail_with_one_clear_line),
        cmocka_unit_test(inspect_should_count_subnormal_group_scales),
        cmocka_unit_test(calibrate_should_envelope_ranks_and_load_through_the_plugin),
        cmocka_unit_test(probe_should_report_and_decide),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
