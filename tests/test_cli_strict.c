/* Issue 48, "fail closed, third round", through the nvfp4-mla tool as a user runs it: a plugin file cut
 * short, corrupt record fields counted by decode and inspect, a NUL in a line capture, calibrate's text
 * flags, --envelope-with and empty captures, flags inspect does not read, decode's words for a corrupt
 * s_t, long output names, --plugin none|"", TMPDIR, empty inputs, --version and --help. Each case
 * asserts the exit status and the words (RELIABILITY.md's third table lists them). */
#include "cli_harness.h"

static const char *plugin_path(void) {
    return getenv("NVFP4_MLA_PLUGIN_PATH");
}

static void read_back(const char *name, void *buf, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(buf, 1, n, f), n);
    fclose(f);
}

static void write_text(const char *name, const char *text) {
    write_file(name, text, strlen(text));
}

static void expect_words(const char *text, const char *needle) {
    if (!strstr(text, needle)) fail_msg("\"%s\" lacks \"%s\"", text, needle);
}

/* Case 1: `probe --plugin t.so` of a plugin cut to 20000 bytes died of SIGBUS in dlopen (exit 135). */
static void probe_should_refuse_a_plugin_cut_short(void **state) {
    (void)state;
    make_tokens(1.0);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "head -c 20000 '%s' >'%s/cut.so'", plugin_path(), tmp);
    assert_int_equal(system(cmd), 0);
    expect_failure(run(NULL, "probe --plugin %s/cut.so", tmp), "/cut.so: its loadable segment (program header 0) "
                                                               "ends at byte");
    expect_words(err_text, "past the end of the 20000-byte file (cut short: an interrupted copy or a full disk?)");
    assert_int_equal(run(NULL, "probe --json --plugin %s/cut.so", tmp), 1);
    expect_words(out_text, "\"reason\":\t\"load_error\"");
    expect_failure(run(NULL, "encode --plugin %s/cut.so --layout 368 --mode static %s/in.bf16 %s/x.rec", tmp, tmp, tmp),
                   "cut short");
}

/* Case 2: decode wrote the NaN RoPE values of a record whose r is NaN, exit 0, and inspect said
 * nothing; now decode writes zeros there and warns with the count, inspect counts every kind. */
static void decode_and_inspect_should_count_corrupt_fields(void **state) {
    (void)state;
    make_tokens(1.0);
    static uint8_t rec[T * 432];
    static uint16_t rows[T * 576];
    assert_int_equal(run(NULL, "encode --layout 368 --mode static %s/in.bf16 %s/s.rec", tmp, tmp), 0);
    read_back("s.rec", rec, T * 368);
    const uint32_t nan_bits = 0x7FC00000u, minus_one = 0xBF800000u;
    memcpy(rec + 1 * 368 + 288, &nan_bits, 4);  /* record 1: r NaN */
    memcpy(rec + 7 * 368 + 288, &minus_one, 4); /* record 7: r -1 */
    write_file("s.rec", rec, T * 368);
    assert_int_equal(run(NULL, "decode --layout 368 --mode static %s/s.rec %s/s.bf16", tmp, tmp), 0);
    expect_words(err_text, "s.rec holds 2 corrupt fields (2 r, 0 s_t, 0 bf16 RoPE values; the first: record 1, r at "
                           "bytes [288,292) = nan), decoded as 0 by the record format's rule");
    read_back("s.bf16", rows, sizeof rows);
    for (int i = 0; i < T * 576; i++) assert_false((rows[i] & 0x7F80) == 0x7F80);
    for (int j = 512; j < 576; j++) assert_int_equal(rows[1 * 576 + j] & 0x7FFF, 0);
    assert_int_equal(run(NULL, "inspect --layout 368 %s/s.rec", tmp), 0);
    expect_words(out_text, "corrupt fields (no writer stores them; readers take them as 0): 2 r, 0 s_t, 0 bf16 RoPE "
                           "values; the first: record 1, r at bytes [288,292) = nan");
    /* 432: a NaN and an infinite RoPE value are written as 0 (they were copied as NaN and Inf) */
    assert_int_equal(run(NULL, "encode --layout 432 --mode static %s/in.bf16 %s/b.rec", tmp, tmp), 0);
    read_back("b.rec", rec, T * 432);
    const uint16_t nan16 = 0x7FC0, inf16 = 0xFF80;
    memcpy(rec + 3 * 432 + 304 + 10, &nan16, 2);
    memcpy(rec + 3 * 432 + 304 + 20, &inf16, 2);
    write_file("b.rec", rec, T * 432);
    assert_int_equal(run(NULL, "decode --layout 432 --mode static %s/b.rec %s/b.bf16", tmp, tmp), 0);
    expect_words(err_text, "holds 2 corrupt fields (0 r, 0 s_t, 2 bf16 RoPE values; the first: record 3");
    read_back("b.bf16", rows, sizeof rows);
    assert_int_equal(rows[3 * 576 + 512 + 5], 0);
    assert_int_equal(rows[3 * 576 + 512 + 10], 0);
    /* per-token: an s_t of NaN contradicts either mode; with --force it is decoded as 0 and counted */
    assert_int_equal(run(NULL, "encode --layout 368 --mode per-token %s/in.bf16 %s/t.rec", tmp, tmp), 0);
    read_back("t.rec", rec, T * 368);
    memcpy(rec + 4 * 368 + 292, &nan_bits, 4);
    write_file("t.rec", rec, T * 368);
    expect_failure(run(NULL, "decode --layout 368 --mode per-token %s/t.rec %s/t.bf16", tmp, tmp),
                   "record 4 of");
    expect_words(err_text, "holds s_t = nan at bytes [292,296), which is neither 0 (a static record) nor a positive "
                           "normal float (a per-token record): no writer wrote this record");
    assert_int_equal(run(NULL, "decode --force --layout 368 --mode per-token %s/t.rec %s/t.bf16", tmp, tmp), 0);
    expect_words(err_text, "1 corrupt fields (0 r, 1 s_t, 0 bf16 RoPE values; the first: record 4, s_t at bytes");
    read_back("t.bf16", rows, sizeof rows);
    for (int j = 0; j < 512; j++) assert_int_equal(rows[4 * 576 + j] & 0x7FFF, 0);
}

/* Small cases: decode --mode static named a corrupt s_t as per-token records (which per-token then
 * refused as written by no writer); inspect took --mode, --scale and --plugin /nonexistent and
 * ignored them; an empty file was encoded and decoded to an empty output with exit 0. */
static void records_tools_should_say_what_is_wrong(void **state) {
    (void)state;
    make_tokens(1.0);
    static uint8_t rec[T * 368];
    assert_int_equal(run(NULL, "encode --layout 368 --mode static %s/in.bf16 %s/s.rec", tmp, tmp), 0);
    read_back("s.rec", rec, sizeof rec);
    const uint32_t minus_one = 0xBF800000u;
    memcpy(rec + 2 * 368 + 292, &minus_one, 4);
    write_file("s.rec", rec, sizeof rec);
    expect_failure(run(NULL, "decode --layout 368 --mode static %s/s.rec %s/s.bf16", tmp, tmp),
                   "holds s_t = -1 at bytes [292,296), which is neither 0 (a static record) nor a positive normal");
    assert_null(strstr(err_text, "--mode per-token"));
    const char *flags[] = {"--mode static", "--scale 2", "--plugin /nonexistent"};
    for (int i = 0; i < 3; i++)
        expect_failure(run(NULL, "inspect --layout 368 %s %s/s.rec", flags[i], tmp),
                       "inspect reads the records' bytes only and takes --layout, --tokens and IN");
    write_file("empty", "", 0);
    expect_failure(run(NULL, "encode --layout 368 --mode static %s/empty %s/e.rec", tmp, tmp),
                   "empty is 0 bytes, not a positive whole number of bf16 [T,576] rows (1152 bytes each): nothing was "
                   "written");
    assert_int_equal(file_size("e.rec"), -1);
    expect_failure(run(NULL, "decode --layout 368 --mode static %s/empty %s/e.bf16", tmp, tmp),
                   "empty is 0 bytes, not a positive whole number of 368-byte records");
    assert_int_equal(file_size("e.bf16"), -1);
}

/* Case 3: a NUL byte in a line capture dropped every layer after it (2 layers written, exit 0); and
 * calibrate's smaller cases: an empty JSON capture wrote num_layers 0 (--no-check), --model with
 * control or invalid bytes wrote a file Python's json cannot read, --envelope-with took any object
 * with max_abs and refused a valid v1 file without it in garbled words. */
static void calibrate_should_refuse_what_it_would_mangle(void **state) {
    (void)state;
    write_file("nul.txt", "0,0.5\n1,1.0\n\0002,2.0\n3,3.0\n", 25);
    expect_failure(run(NULL, "calibrate --out %s/c.json %s/nul.txt", tmp, tmp),
                   "nul.txt:3: holds a NUL byte at byte offset 12: a line capture is text");
    assert_int_equal(file_size("c.json"), -1);
    write_text("empty.json", "[]");
    expect_failure(run(NULL, "calibrate --no-check --out %s/c.json %s/empty.json", tmp, tmp),
                   "empty.json: no layers (an empty array)");
    assert_int_equal(file_size("c.json"), -1);
    write_text("r0.txt", "0,0.5\n1,1.0\n");
    expect_failure(run(NULL, "calibrate --no-check --model $(printf 'a\\001b') --out %s/c.json %s/r0.txt", tmp, tmp),
                   "--model holds a control character at byte 1: give printable UTF-8 text");
    expect_failure(run(NULL, "calibrate --no-check --dataset $(printf 'x\\377') --out %s/c.json %s/r0.txt", tmp, tmp),
                   "--dataset holds invalid UTF-8 at byte 1");
    assert_int_equal(run(NULL, "calibrate --model 'caf\xc3\xa9' --out %s/c.json %s/r0.txt", tmp, tmp), 0);
    write_text("other.json", "{\"max_abs\": [9, 9]}");
    expect_failure(run(NULL, "calibrate --no-check --envelope-with %s/other.json --out %s/d.json %s/r0.txt", tmp, tmp,
                       tmp),
                   "--envelope-with");
    expect_words(err_text, "other.json is not a v1 scales file (its \"format\" must be \"nvfp4_ds_mla_outer_scale_v1\")");
    write_text("v1.json", "{\"format\": \"nvfp4_ds_mla_outer_scale_v1\", \"num_layers\": 2, \"latent_dim\": 512, "
                          "\"denominator\": 2688.0, \"scales\": [0.001, 0.0001]}");
    assert_int_equal(run(NULL, "calibrate --envelope-with %s/v1.json --out %s/e.json %s/r0.txt", tmp, tmp, tmp), 0);
    char text[4096];
    char path[4200];
    snprintf(path, sizeof path, "%s/e.json", tmp);
    slurp(path, text, sizeof text);
    expect_words(text, "2.688"); /* layer 0: max(0.5, 0.001 x 2688) */
    write_text("bad_v1.json", "{\"format\": \"nvfp4_ds_mla_outer_scale_v1\", \"num_layers\": 2, \"Scales\": []}");
    expect_failure(run(NULL, "calibrate --envelope-with %s/bad_v1.json --out %s/f.json %s/r0.txt", tmp, tmp, tmp),
                   "the plugin refuses --envelope-with");
    expect_words(err_text, "unknown key \"Scales\"");
}

/* Output names of 248..255 bytes: the temporary ".NAME.XXXXXX" beside them did not fit NAME_MAX. */
static void long_output_names_should_be_written(void **state) {
    (void)state;
    make_tokens(1.0);
    char name[256];
    for (int len = 248; len <= 255; len++) {
        memset(name, 'n', (size_t)len);
        name[len] = '\0';
        assert_int_equal(run(NULL, "encode --layout 368 --mode static %s/in.bf16 %s/%s", tmp, tmp, name), 0);
        assert_int_equal(file_size(name), T * 368);
        assert_int_equal(leftovers("."), 0);
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", tmp, name);
        unlink(path);
    }
}

/* probe --plugin none|"" blamed NVFP4_MLA_PLUGIN; TMPDIR=/nonexistent failed the demo without naming
 * TMPDIR; the tool had no --version, and calibrate's and bench's --help left out flags and the capture
 * format. */
static void messages_should_name_what_the_user_gave(void **state) {
    (void)state;
    expect_failure(run(NULL, "probe --plugin ''"), "--plugin is empty: give the plugin file or its folder");
    assert_null(strstr(err_text, "NVFP4_MLA_PLUGIN"));
    expect_failure(run(NULL, "probe --plugin none"), "nvfp4-mla plugin disabled (the plugin selection is \"none\")");
    expect_failure(run("TMPDIR=/nonexistent", "demo"),
                   "cannot create a temporary folder for the built-in profile in /nonexistent (TMPDIR): No such file");
    assert_int_equal(run(NULL, "--version"), 0);
    expect_words(out_text, "nvfp4-mla ");
    expect_words(out_text, "(host ABI 1.1, record format nvfp4_ds_mla)");
    assert_int_equal(run(NULL, "calibrate --help"), 0);
    const char *calibrate_words[] = {"--tolerance T", "--envelope-with V1FILE", "--created-utc T", "--no-check",
                                     "lines \"layer,max_abs\"", "JSON array of max_abs indexed by layer"};
    for (int i = 0; i < 6; i++) expect_words(out_text, calibrate_words[i]);
    /* bench is its own executable now (bench/meson.build, nvfp4-mla-bench --help), not a command. */
    assert_int_equal(run(NULL, "bench --help"), 2);
    expect_words(err_text, "unknown command \"bench\"");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(probe_should_refuse_a_plugin_cut_short),
        cmocka_unit_test(decode_and_inspect_should_count_corrupt_fields),
        cmocka_unit_test(records_tools_should_say_what_is_wrong),
        cmocka_unit_test(calibrate_should_refuse_what_it_would_mangle),
        cmocka_unit_test(long_output_names_should_be_written),
        cmocka_unit_test(messages_should_name_what_the_user_gave),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
