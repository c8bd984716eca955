/* Issue 58, "fail closed, fourth round", through the nvfp4-mla tool as a user runs it: a damaged (not cut
 * short) plugin file, records read with the other layout, a file of mixed modes, calibrate's messages,
 * absurd scales and a byte order mark in a scales file, the tool's argument nits, and the first-use
 * lines of probe and demo. Each case asserts the exit status and the words (RELIABILITY.md's fourth
 * table lists them). */
#include "cli_harness.h"

static const char *plugin_path(void) {
    return getenv("NVFP4_MLA_PLUGIN_PATH");
}

static void expect_words(const char *text, const char *needle) {
    if (!strstr(text, needle)) fail_msg("\"%s\" lacks \"%s\"", text, needle);
}

static void write_text(const char *name, const char *text) {
    write_file(name, text, strlen(text));
}

static void shell(const char *fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    if (system(cmd) != 0) fail_msg("%s failed", cmd);
}

/* N2: probe of a plugin whose DYNAMIC segment is zeroed died of SIGSEGV (exit 139) inside dlopen. With
 * the digest copied beside it, it is refused by its digest; without, after a child process died
 * loading it. Either way probe exits 1 and says why. */
static void probe_should_survive_a_damaged_plugin(void **state) {
    (void)state;
    make_tokens(1.0);
    shell("cp '%s' '%s/d.so' && o=$(readelf -lW '%s/d.so' | awk '$1==\"DYNAMIC\"{print $2}') && "
          "n=$(readelf -lW '%s/d.so' | awk '$1==\"DYNAMIC\"{print $5}') && "
          "dd if=/dev/zero of='%s/d.so' bs=1 seek=$((o)) count=$((n)) conv=notrunc status=none",
          plugin_path(), tmp, tmp, tmp, tmp);
    expect_failure(run(NULL, "probe --plugin %s/d.so", tmp), "/d.so: loading it in a child process first (it has no "
                                                             "digest file ");
    expect_words(err_text, "killed that process with signal 11 (Segmentation fault)");
    assert_int_equal(run(NULL, "probe --json --plugin %s/d.so", tmp), 1);
    expect_words(out_text, "\"reason\":\t\"load_error\"");
    shell("cp '%s.sha256' '%s/d.so.sha256'", plugin_path(), tmp);
    expect_failure(run(NULL, "probe --plugin %s/d.so", tmp), "/d.so: its SHA-256 is ");
    expect_words(err_text, "/d.so.sha256 when it was built or installed: the file changed since");
    expect_failure(run(NULL, "encode --plugin %s/d.so --layout 368 --mode static %s/in.bf16 %s/x.rec", tmp, tmp, tmp),
                   "the file changed since");
    assert_int_equal(file_size("x.rec"), -1);
}

/* N13: a file of 27 x 368 = 23 x 432 bytes decoded as 432-byte records gave 23 rows of garbage, exit 0.
 * Records carry no layout tag; every writer zeroes [296,304) of a 368 record and [288,304) of a 432
 * one, which a misread layout breaks: refused, naming the other layout, unless --force. */
static void decode_should_refuse_records_of_another_layout(void **state) {
    (void)state;
    make_tokens(1.0);
    write_file("in27.bf16", tokens, 27 * 576 * 2);
    assert_int_equal(run(NULL, "encode --layout 368 --mode static --scale 0.002 %s/in27.bf16 %s/s27.rec", tmp, tmp), 0);
    assert_int_equal(file_size("s27.rec"), 9936);
    expect_failure(run(NULL, "decode --layout 432 --mode static %s/s27.rec %s/o.bf16", tmp, tmp),
                   "23 of the 23 records of ");
    expect_words(err_text, "hold non-zero bytes in [288,304), which every writer of 432-byte records zeroes: these are "
                           "not --layout 432 records (its 9936 bytes are also 27 records of 368 bytes: --layout 368?)");
    expect_words(err_text, "nothing was written; pass --force to decode them anyway");
    assert_int_equal(file_size("o.bf16"), -1);
    assert_int_equal(run(NULL, "decode --force --layout 432 --mode static %s/s27.rec %s/o.bf16", tmp, tmp), 0);
    expect_words(err_text, "warning: 23 of the 23 records");
    assert_int_equal(run(NULL, "inspect --layout 432 %s/s27.rec", tmp), 0);
    expect_words(err_text, "inspect: warning: 23 of the 23 records");
    /* 432-byte records read as 368: the same rule on [296,304) */
    assert_int_equal(run(NULL, "encode --layout 432 --mode static --scale 0.002 %s/in.bf16 %s/b.rec", tmp, tmp), 0);
    shell("head -c %d '%s/b.rec' >'%s/b23.rec'", 23 * 432, tmp, tmp);
    expect_failure(run(NULL, "decode --layout 368 --mode static --scale 0.002 %s/b23.rec %s/o.bf16", tmp, tmp),
                   "hold non-zero bytes in [296,304), which every writer of 368-byte records zeroes");
    /* the right layouts decode without a word */
    assert_int_equal(run(NULL, "decode --layout 368 --mode static --scale 0.002 %s/s27.rec %s/o.bf16", tmp, tmp), 0);
    assert_string_equal(err_text, "");
    assert_int_equal(run(NULL, "decode --layout 432 --mode static --scale 0.002 %s/b23.rec %s/o.bf16", tmp, tmp), 0);
    assert_string_equal(err_text, "");
}

/* D18: decode's mode advice came from the first contradicting record alone, so a file of both modes
 * sent the user to the other mode and back. Every record is read; a mixed file is named as such. */
static void decode_mode_advice_should_read_every_record(void **state) {
    (void)state;
    make_tokens(1.0);
    assert_int_equal(run(NULL, "encode --layout 368 --mode per-token %s/in.bf16 %s/pt.rec", tmp, tmp), 0);
    assert_int_equal(run(NULL, "encode --layout 368 --mode static --scale 0.002 %s/in.bf16 %s/st.rec", tmp, tmp), 0);
    shell("head -c %d '%s/pt.rec' >'%s/mix.rec' && tail -c %d '%s/st.rec' >>'%s/mix.rec'", 5 * 368, tmp, tmp, 7 * 368,
          tmp, tmp);
    expect_failure(run(NULL, "decode --layout 368 --mode static --scale 0.002 %s/mix.rec %s/m.bf16", tmp, tmp),
                   "--mode static, but record 0 of ");
    expect_words(err_text, "where a static record holds 0, while 7 other records are static ones (the first: record 5): "
                           "the file mixes the two modes (7 static, 5 per-token records), which no one --mode decodes");
    assert_null(strstr(err_text, "decode them with --mode per-token"));
    expect_failure(run(NULL, "decode --layout 368 --mode per-token %s/mix.rec %s/m.bf16", tmp, tmp),
                   "--mode per-token, but record 5 of ");
    expect_words(err_text, "while 5 other records are per-token ones (the first: record 0)");
    assert_null(strstr(err_text, "decode them with --mode static"));
    assert_int_equal(file_size("m.bf16"), -1);
}

/* N16: calibrate's messages named the wrong thing: a plugin that was given but did not load ("set
 * NVFP4_MLA_PLUGIN (or --plugin)"), the output for an input's value, a comment after a value refused
 * though documented, a JSON object taken for a line capture. */
static void calibrate_should_name_the_input_at_fault(void **state) {
    (void)state;
    write_text("cap.txt", "0,0.5\n1,1.0\n");
    expect_failure(run(NULL, "calibrate --plugin /nonexistent --out %s/o.json %s/cap.txt", tmp, tmp),
                   "the plugin that would check ");
    expect_words(err_text, "o.json (--plugin /nonexistent) cannot be used (the line above says why), so nothing was "
                           "written");
    assert_null(strstr(err_text, "set NVFP4_MLA_PLUGIN (or --plugin)"));
    expect_failure(run("NVFP4_MLA_PLUGIN=/nonexistent", "calibrate --out %s/o.json %s/cap.txt", tmp, tmp),
                   "(NVFP4_MLA_PLUGIN=/nonexistent) cannot be used");
    write_text("h.txt", "0,1e300\n1,1.0\n");
    expect_failure(run(NULL, "calibrate --out %s/o.json %s/h.txt", tmp, tmp),
                   "/h.txt:1: max_abs 1e+300 is outside [6.10352e-05, 65504], the latent magnitudes a model stores");
    assert_null(strstr(err_text, "o.json"));
    write_text("ha.json", "[0.5, 1e-300]");
    expect_failure(run(NULL, "calibrate --out %s/o.json %s/ha.json", tmp, tmp), "/ha.json: entry 1, max_abs 1e-300, is "
                                                                             "outside");
    write_text("c.txt", "# a capture\n0,0.5 # layer 0\n1,1.0\t# layer 1\n");
    assert_int_equal(run(NULL, "calibrate --out %s/o.json %s/c.txt", tmp, tmp), 0);
    expect_words(out_text, "wrote ");
    write_text("j.json", "{\"max_abs\":[0.5,1]}");
    expect_failure(run(NULL, "calibrate --out %s/o2.json %s/j.json", tmp, tmp),
                   "/j.json: holds an object; a JSON capture is an array of max_abs per layer (a v1 scales file is "
                   "folded in with --envelope-with)");
}

/* N12 through the tool: absurd scales and a byte order mark in VLLM_NVFP4_MLA_SCALES_FILE, accepted by
 * probe before; the lead phrase names the file, not the identity (N18). */
static void probe_should_refuse_scales_no_latent_has(void **state) {
    (void)state;
    write_text("abs.json", "{\"format\":\"nvfp4_ds_mla_outer_scale_v1\",\"num_layers\":2,\"latent_dim\":512,"
                           "\"denominator\":2688.0,\"scales\":[1e30,3.4e38]}");
    char env[8192];
    snprintf(env, sizeof env, "KV_FP8_ROPE=1 VLLM_NVFP4_MLA_SCALES_FILE=%s/abs.json", tmp);
    expect_failure(run(env, "probe"), "abs.json names a scales file the plugin cannot use: ");
    expect_words(err_text, "\"scales\"[0] = 1e+30 implies max_abs 2.688e+33 (scale * 2688), outside");
    assert_null(strstr(err_text, "cannot form a cache identity"));
    shell("printf '\\357\\273\\277' | cat - '%s' >'%s/bom.json'", profile, tmp);
    snprintf(env, sizeof env, "KV_FP8_ROPE=1 VLLM_NVFP4_MLA_SCALES_FILE=%s/bom.json", tmp);
    expect_failure(run(env, "probe"), "bom.json: starts with a UTF-8 byte order mark (bytes EF BB BF)");
}

/* N18's CLI nits: --version with an argument, the --flag=value form, a positional argument to demo,
 * "-" as an output. */
static void arguments_should_be_refused_by_name(void **state) {
    (void)state;
    make_tokens(1.0);
    assert_int_equal(run(NULL, "--version extra"), 2);
    expect_words(err_text, "--version takes no argument (got \"extra\")");
    expect_failure(run(NULL, "encode --layout=368 --mode static %s/in.bf16 %s/x.rec", tmp, tmp),
                   "encode: --layout=368: give a flag's value as the next argument: --layout 368");
    expect_failure(run(NULL, "demo extra"), "demo: unexpected argument extra: demo takes flags only");
    expect_failure(run(NULL, "quality extra"), "quality: unexpected argument extra: quality takes flags only");
    char in_tmp[4200];
    snprintf(in_tmp, sizeof in_tmp, "cd '%s' &&", tmp);
    expect_failure(run(in_tmp, "encode --layout 368 --mode static in.bf16 -"),
                   "the output \"-\" would be a file named \"-\": this tool does not write standard output");
    assert_int_equal(file_size("-"), -1);
}

/* First use: probe printed an empty "runtime (cuda:0)" line on a CPU build, and demo's last line named a
 * temporary copy of the profile that was gone by the time the user read it. */
static void first_use_lines_should_say_what_is_there(void **state) {
    (void)state;
    assert_int_equal(run(NULL, "probe"), 0);
    if (strstr(out_text, "CUDA archs: none")) {
        expect_words(out_text, "runtime (cuda:0)      not built: a CPU-only plugin (CUDA archs: none)\n");
    }
    assert_null(strstr(out_text, "runtime (cuda:0)      \n"));
    assert_int_equal(run(NULL, "demo"), 0);
    expect_words(out_text, "refused: VLLM_NVFP4_MLA_SCALES_FILE=<a copy of the built-in "
                           "glm52-nvfp4-nf3-hybrid_mla_outer_scales_v1.json profile> and VLLM_NVFP4_MLA_DYNAMIC_SCALE=1 "
                           "are mutually exclusive");
    assert_null(strstr(out_text, "nvfp4-mla-"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(probe_should_survive_a_damaged_plugin),
        cmocka_unit_test(decode_should_refuse_records_of_another_layout),
        cmocka_unit_test(decode_mode_advice_should_read_every_record),
        cmocka_unit_test(calibrate_should_name_the_input_at_fault),
        cmocka_unit_test(probe_should_refuse_scales_no_latent_has),
        cmocka_unit_test(arguments_should_be_refused_by_name),
        cmocka_unit_test(first_use_lines_should_say_what_is_there),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
