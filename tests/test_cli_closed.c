/* Issue 37, "fail closed, second round", through the nvfp4-mla tool as a user runs it: interrupted
 * writes, file modes, write errors with their cause, decode modes the records contradict, non-finite
 * input, plugin file names, cache dtypes and messages that name the real cause. Each case asserts the
 * exit status and the words (RELIABILITY.md's table lists them). */
#include <signal.h>

#include "cli_harness.h"

static void make_dir(const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    mkdir(path, 0755);
}

/* Entries of tmp/DIR whose names start with `prefix`. */
static int entries_named(const char *dir, const char *prefix) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", tmp, dir);
    DIR *d = opendir(path);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

/* Runs `script` with bash (job control for INT), stderr to err_text; returns the exit status. */
static int run_bash(const char *script) {
    char path[4096], cmd[16384];
    snprintf(path, sizeof path, "%s/script.sh", tmp);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(script, f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "bash '%s' 2>'%s/err.txt'", path, tmp);
    int status = system(cmd);
    snprintf(path, sizeof path, "%s/err.txt", tmp);
    slurp(path, err_text, sizeof err_text);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* quality --json in the background, stopped by `sig` once its temporary file exists; the exit
 * status the shell saw. */
static int interrupt_quality(const char *dir, const char *sig) {
    char script[8192];
    snprintf(script, sizeof script,
             "set -m\ncd '%s/%s'\n"
             "TMPDIR=\"$PWD\" NVFP4_MLA_PLUGIN='%s' '%s' quality --tokens 4096 --json q.json >/dev/null &\n"
             "pid=$!\nfor i in $(seq 600); do ls -a | grep -q '^\\.q\\.json\\.' && break; sleep 0.05; done\n"
             "ls -d nvfp4-mla-* >/dev/null || exit 99\nkill -%s $pid\nwait $pid\nexit $?\n",
             tmp, dir, getenv("NVFP4_MLA_PLUGIN_PATH"), cli, sig);
    return run_bash(script);
}

/* Case 1: a signal during a write removes the temporary file (and quality's private folder), then
 * ends the process by that signal: the old output is intact and nothing is left beside it. */
static void interrupted_writes_should_leave_no_temporary_file(void **state) {
    (void)state;
    make_tokens(1.0);
    make_dir("sig");
    write_file("sig/rec.bin", "old", 3);
    write_file("sig/cal.json", "old", 3);
    write_file("sig/q.json", "old", 3);
    write_file("rank0.csv", "0,0.5\n1,2.0\n", 12);
    /* SIGXFSZ's default action ends a write past `ulimit -f` (512-byte blocks in dash): mid-write. */
    const int enc = run("ulimit -f 8;", "encode --layout 368 --mode per-token %s/in.bf16 %s/sig/rec.bin", tmp, tmp);
    assert_true(enc == 128 + SIGXFSZ || enc == -1);
    expect_content("sig/rec.bin", "old");
    char big[3000]; /* a long --model makes the document outgrow the limit */
    memset(big, 'm', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    const int cal = run("ulimit -f 2;", "calibrate --out %s/sig/cal.json --model %s %s/rank0.csv", tmp, big, tmp);
    assert_true(cal == 128 + SIGXFSZ || cal == -1);
    expect_content("sig/cal.json", "old");
    assert_int_equal(leftovers("sig"), 0);
    /* INT (as ^C sends it) and TERM (as timeout sends it) while quality writes its JSON. */
    assert_int_equal(interrupt_quality("sig", "INT"), 128 + SIGINT);
    expect_content("sig/q.json", "old");
    assert_int_equal(leftovers("sig"), 0);
    assert_int_equal(entries_named("sig", "nvfp4-mla-"), 0);
    assert_int_equal(interrupt_quality("sig", "TERM"), 128 + SIGTERM);
    expect_content("sig/q.json", "old");
    assert_int_equal(leftovers("sig"), 0);
    assert_int_equal(entries_named("sig", "nvfp4-mla-"), 0);
}

static unsigned mode_of(const char *name) {
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    assert_int_equal(stat(path, &st), 0);
    return (unsigned)(st.st_mode & 07777);
}

/* Case 2: a replaced file keeps its permission bits but never setuid/setgid (the new file is the
 * writer's); a new file gets 0666 less the umask. */
static void outputs_should_never_carry_setuid_or_setgid(void **state) {
    (void)state;
    make_tokens(1.0);
    char path[4096];
    snprintf(path, sizeof path, "%s/suid.bin", tmp);
    write_file("suid.bin", "old", 3);
    assert_int_equal(chmod(path, 06755), 0);
    assert_int_equal(run(NULL, "encode --layout 368 --mode static %s/in.bf16 %s/suid.bin", tmp, tmp), 0);
    assert_int_equal(mode_of("suid.bin"), 0755);
    assert_int_equal(chmod(path, 0640), 0);
    assert_int_equal(run(NULL, "encode --layout 368 --mode static %s/in.bf16 %s/suid.bin", tmp, tmp), 0);
    assert_int_equal(mode_of("suid.bin"), 0640);
    unlink(path);
    assert_int_equal(run("umask 027;", "encode --layout 368 --mode static %s/in.bf16 %s/suid.bin", tmp, tmp), 0);
    assert_int_equal(mode_of("suid.bin"), 0640);
    snprintf(path, sizeof path, "%s/new.json", tmp);
    unlink(path);
    assert_int_equal(run("umask 022;", "quality --tokens 16 --scales %s --json %s/new.json", profile, tmp), 0);
    assert_int_equal(mode_of("new.json"), 0644);
}

/* Case 3: every write error names its cause, quality --json's included (its rows are written long
 * before the final flush), and so does standard output on a full device. */
static void write_errors_should_name_their_cause(void **state) {
    (void)state;
    make_tokens(1.0);
    make_dir("lim");
    write_file("lim/q.json", "old", 3);
    /* --scales: no private copy of the built-in profile is written, so the JSON is what hits the limit. */
    expect_failure(
        run("trap '' XFSZ; ulimit -f 4;", "quality --tokens 16 --scales %s --json %s/lim/q.json", profile, tmp),
        "/lim/q.json: File too large (nothing was replaced)");
    expect_content("lim/q.json", "old");
    assert_int_equal(leftovers("lim"), 0);
    assert_int_equal(run(NULL, "encode --layout 368 --mode static %s/in.bf16 %s/rec.bin", tmp, tmp), 0);
    char cmd[8192], path[4096];
    snprintf(cmd, sizeof cmd, "'%s' inspect --layout 368 '%s/rec.bin' >/dev/full 2>'%s/err.txt'", cli, tmp, tmp);
    const int status = system(cmd);
    snprintf(path, sizeof path, "%s/err.txt", tmp);
    slurp(path, err_text, sizeof err_text);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 1);
    assert_non_null(strstr(err_text, "nvfp4-mla: cannot write standard output: No space left on device"));
}

/* Case 4: the s_t field of 368-byte records tells static records (0) from per-token ones (positive,
 * or 0 in an all-zero token): decode refuses the mode they contradict, --force decodes anyway. */
static void decode_should_refuse_a_mode_the_records_contradict(void **state) {
    (void)state;
    make_tokens(2.0);
    assert_int_equal(run(NULL, "encode --layout 368 --mode per-token %s/in.bf16 %s/pt.bin", tmp, tmp), 0);
    assert_int_equal(run(NULL, "encode --layout 368 --mode static --scale 0.002 %s/in.bf16 %s/st.bin", tmp, tmp), 0);
    expect_failure(run(NULL, "decode --layout 368 --mode static %s/pt.bin %s/x.bf16", tmp, tmp),
                   "--mode static, but record 0 of ");
    assert_non_null(strstr(err_text, "at bytes [292,296), where a static record holds 0: these are per-token records "
                                     "(decode them with --mode per-token); or pass --force to decode them as static"));
    assert_int_equal(file_size("x.bf16"), -1);
    expect_failure(run(NULL, "decode --layout 368 --mode per-token %s/st.bin %s/x.bf16", tmp, tmp),
                   "--mode per-token, but record 0 of ");
    assert_non_null(strstr(err_text, "holds s_t = 0 at bytes [292,296), beside non-zero group scales, which only a "
                                     "static record has"));
    assert_int_equal(run(NULL, "decode --layout 368 --mode per-token --force %s/st.bin %s/x.bf16", tmp, tmp), 0);
    assert_non_null(strstr(err_text, "warning: record 0 of "));
    assert_int_equal(file_size("x.bf16"), T * 1152);
    /* The matching modes decode without a word; an all-zero token (s_t 0) is a per-token record too. */
    assert_int_equal(run(NULL, "decode --layout 368 --mode per-token %s/pt.bin %s/y.bf16", tmp, tmp), 0);
    assert_string_equal(err_text, "");
    assert_int_equal(run(NULL, "decode --layout 368 --mode static --scale 0.002 %s/st.bin %s/y.bf16", tmp, tmp), 0);
    memset(tokens, 0, 576 * sizeof tokens[0]);
    write_file("in.bf16", tokens, sizeof tokens);
    assert_int_equal(run(NULL, "encode --layout 368 --mode per-token %s/in.bf16 %s/pt0.bin", tmp, tmp), 0);
    assert_int_equal(run(NULL, "decode --layout 368 --mode per-token %s/pt0.bin %s/y.bf16", tmp, tmp), 0);
    /* A per-token field no writer writes (a negative s_t) is named as such. */
    char rec[T * 368], path[4096];
    snprintf(path, sizeof path, "%s/pt.bin", tmp);
    slurp(path, rec, sizeof rec);
    const float negative = -1.0f;
    memcpy(rec + 5 * 368 + 292, &negative, 4);
    write_file("bad.bin", rec, T * 368);
    expect_failure(run(NULL, "decode --layout 368 --mode per-token %s/bad.bin %s/x.bf16", tmp, tmp),
                   "record 5 of ");
    assert_non_null(strstr(err_text, "holds s_t = -1 at bytes [292,296), which is neither 0 (a static record) nor a positive normal float"));
}

/* Case 7: NaN/Inf input (the plugin's nonfinite_count) is refused by encode with the count and the
 * first place; --force writes it and says so. */
static void encode_should_report_nonfinite_input(void **state) {
    (void)state;
    make_tokens(1.0);
    tokens[3 * 576 + 17] = 0x7F80; /* +Inf */
    tokens[7 * 576 + 600 - 576] = 0x7FC1; /* NaN */
    write_file("inf.bf16", tokens, sizeof tokens);
    write_file("rec.bin", "old", 3);
    expect_failure(run(NULL, "encode --layout 368 --mode per-token %s/inf.bf16 %s/rec.bin", tmp, tmp),
                   "inf.bf16 holds 2 NaN/Inf values (the plugin's nonfinite_count; the first is token 3, element 17): "
                   "records hold neither");
    assert_non_null(strstr(err_text, "so nothing was written; fix the input, or pass --force to write them so"));
    expect_content("rec.bin", "old");
    assert_int_equal(run(NULL, "encode --layout 368 --mode per-token --force %s/inf.bf16 %s/rec.bin", tmp, tmp), 0);
    assert_non_null(strstr(err_text, "warning: 2 NaN/Inf values of "));
    assert_int_equal(file_size("rec.bin"), T * 368);
    expect_failure(run(NULL, "encode --layout 368 --mode per-token --force --force %s/inf.bf16 %s/rec.bin", tmp, tmp),
                   "--force is given twice");
}

/* Case 8 through the tool: a plugin name without a slash is a file in the working folder. */
static void plugin_names_without_a_slash_should_be_files_in_the_working_folder(void **state) {
    (void)state;
    make_dir("plugdir");
    expect_failure(run("NVFP4_MLA_PLUGIN=libc.so.6", "probe --json"), "cannot load nvfp4-mla plugin ./libc.so.6: ");
    assert_non_null(strstr(out_text, "\"reason\":\t\"not_found\""));
    char link_path[4200], prefix[4300];
    snprintf(link_path, sizeof link_path, "%s/plugdir/libnvfp4_mla.so", tmp);
    unlink(link_path);
    assert_int_equal(symlink(getenv("NVFP4_MLA_PLUGIN_PATH"), link_path), 0);
    snprintf(prefix, sizeof prefix, "cd '%s/plugdir' && NVFP4_MLA_PLUGIN=libnvfp4_mla.so", tmp);
    assert_int_equal(run(prefix, "probe"), 0);
    assert_non_null(strstr(out_text, "plugin                ./libnvfp4_mla.so\n"));
}

/* Case 9: probe asks about a cache dtype a runtime uses; another name (or "") is refused with the list. */
static void probe_should_refuse_a_cache_dtype_it_does_not_know(void **state) {
    (void)state;
    const char *list = "must be one of: nvfp4_mla368_ds_mla, nvfp4_mla432_ds_mla, nvfp4_ds_mla, auto, bfloat16, fp8, "
                       "fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla";
    expect_failure(run(NULL, "probe --cache-dtype garbage"), "--cache-dtype is \"garbage\", ");
    assert_non_null(strstr(err_text, list));
    expect_failure(run(NULL, "probe --cache-dtype ''"), "--cache-dtype is \"\", must be one of: ");
    assert_int_equal(run(NULL, "probe --cache-dtype fp8"), 0);
    assert_non_null(strstr(out_text, "accepted: cache dtype fp8 does not use the plugin"));
    assert_int_equal(run("KV_FP8_ROPE=1", "probe --cache-dtype torch.nvfp4_ds_mla"), 0);
}

/* Issue 56, N9: probe takes the dtype names a user gives vLLM and decides as the vLLM plugin does (the
 * name chooses the layout; nothing calibrated: per-token on 368, refused on 432 unless the opt-in),
 * and checks the attention settings that only a CUDA context's init reads, without a GPU. */
static void probe_should_take_vllms_dtype_names_and_check_the_attention_settings(void **state) {
    (void)state;
    assert_int_equal(run(NULL, "probe --cache-dtype nvfp4_mla368_ds_mla"), 0);
    assert_non_null(strstr(out_text, "cache identity        nvfp4_ds_mla:fp8-rope-368:dynamic-token-v1\n"));
    assert_non_null(strstr(err_text, "no calibration: the vLLM plugin serves this dtype with per-token"));
    expect_failure(run(NULL, "probe --cache-dtype nvfp4_mla432_ds_mla"), "nvfp4_mla432_ds_mla: no outer scales");
    assert_non_null(strstr(err_text, "or set NVFP4_MLA_UNCALIBRATED=1 to serve every layer at outer scale 1.0"));
    assert_int_equal(run("NVFP4_MLA_UNCALIBRATED=1", "probe --cache-dtype nvfp4_mla432_ds_mla"), 0);
    assert_non_null(strstr(out_text, "cache identity        vllm-default-v1\n"));
    assert_non_null(strstr(err_text, "[warn] every layer's outer scale is 1.0 (NVFP4_MLA_UNCALIBRATED=1)"));
    expect_failure(run("KV_FP8_ROPE=0", "probe --cache-dtype nvfp4_mla368_ds_mla"),
                   "KV_FP8_ROPE=\"0\" says 432-byte records: unset KV_FP8_ROPE");
    expect_failure(run("NVFP4_MLA_ATTEND_MERGE=bogus", "probe"),
                   "NVFP4_MLA_ATTEND_MERGE=\"bogus\" is not one of: auto, separate, in-launch");
    expect_failure(run("NVFP4_MLA_ATTEND_SMEM_CAP=-5", "probe --json"), "NVFP4_MLA_ATTEND_SMEM_CAP=\"-5\" is not");
    assert_non_null(strstr(out_text, "\"reason\":\t\"config_error\""));
}

/* Case 10: messages that name the real cause. */
static void messages_should_name_the_real_cause(void **state) {
    (void)state;
    make_tokens(1.0);
    /* "encode --help" asks for help; "--bogus" is an unknown flag, not one that "needs a value". */
    assert_int_equal(run(NULL, "encode --help"), 0);
    assert_non_null(strstr(out_text, "usage: nvfp4-mla encode --layout 368|432 --mode per-token|static"));
    expect_failure(run(NULL, "encode --bogus"), "unknown flag --bogus (nvfp4-mla encode --help lists the flags)");
    expect_failure(run(NULL, "decode --layout"), "--layout needs a value");
    /* demo --scales: what the file is, not "no max_abs array". */
    static char deep[20001];
    memset(deep, '[', 10000);
    memset(deep + 10000, ']', 10000);
    const struct {
        const char *text, *needle;
    } files[] = {
        {"", "p.json is empty (no JSON value)"},
        {"{\"max_abs\": [0.1, 0.2", "p.json ends at byte offset 21 before its JSON value is complete (cut short?)"},
        {"{\"max_abs\": [NaN]}", "p.json holds NaN at byte offset 13: NaN and Infinity are not JSON numbers"},
        {"null", "p.json holds null, not a v1 scales file (a JSON object with a \"max_abs\" array)"},
        {deep, "p.json nests arrays and objects more than 1000 deep at byte offset 1000 (the JSON reader's limit)"},
        {"{\"max_abs\": 3}", "p.json: \"max_abs\" is a number, not a non-empty array of per-layer magnitudes"},
        {"{\"max_abs\": [1]} x", "p.json has trailing data after its JSON value at byte offset 17"},
    };
    for (size_t c = 0; c < sizeof files / sizeof files[0]; c++) {
        write_file("p.json", files[c].text, strlen(files[c].text));
        expect_failure(run(NULL, "demo --scales %s/p.json", tmp), files[c].needle);
    }
    /* The plugin's own JSON reader says the same of the depth limit. */
    write_file("p.json", deep, strlen(deep));
    char env[4300];
    snprintf(env, sizeof env, "KV_FP8_ROPE=1 VLLM_NVFP4_MLA_SCALES_FILE=%s/p.json", tmp);
    expect_failure(run(env, "probe"), "p.json: nests arrays and objects more than 1000 deep at byte offset 1000");
    /* A scales file the plugin refuses is named as the user gave it, without a variable they did not set. */
    const char *partial = "{\"format\": \"nvfp4_ds_mla_outer_scale_v1\", \"max_abs\": [1.0, 2.0]}";
    write_file("p.json", partial, strlen(partial));
    expect_failure(run(NULL, "demo --scales %s/p.json", tmp), "the plugin refuses the scales file ");
    assert_non_null(strstr(err_text, "p.json: missing key \"num_layers\""));
    assert_null(strstr(err_text, "VLLM_NVFP4_MLA_SCALES_FILE"));
    /* calibrate names --out, never its temporary file. */
    write_file("tiny.csv", "0,0.5\n1,1e-300\n", 15);
    expect_failure(run(NULL, "calibrate --out %s/c.json %s/tiny.csv", tmp, tmp), "tiny.csv:2: max_abs 1e-300");
    assert_null(strstr(err_text, "/.c.json.")); /* issue 58: the input's line, not the output, is named */
    assert_null(strstr(err_text, "c.json"));
    /* A model folder that is not there is no checkpoint, not unusable calibration. */
    expect_failure(run("KV_FP8_ROPE=1", "probe --model-dir /nonexistent"),
                   "model_dir /nonexistent: No such file or directory (no checkpoint there to read calibration from)");
    assert_null(strstr(err_text, "present but unusable"));
}

/* Case 11: VLLM_NVFP4_MLA_SCALES_FILE is taken stripped, as the runtime it comes from reads it;
 * --scales, handed to the plugin through that variable, refuses surrounding whitespace instead. */
static void scales_file_should_be_taken_stripped(void **state) {
    (void)state;
    char env[4300];
    snprintf(env, sizeof env, "KV_FP8_ROPE=1 VLLM_NVFP4_MLA_SCALES_FILE=' %s\n'", profile);
    assert_int_equal(run(env, "probe"), 0);
    assert_non_null(strstr(out_text, "static-calibrated-v1:52462f01"));
    assert_int_equal(run("KV_FP8_ROPE=1 VLLM_NVFP4_MLA_SCALES_FILE='  '", "probe"), 0);
    assert_non_null(strstr(out_text, "cache identity        vllm-default-v1"));
    expect_failure(run("NVFP4_MLA_PLUGIN=' none'", "probe"), "has leading or trailing whitespace");
    expect_failure(run(NULL, "demo --scales ' %s'", profile), "has leading or trailing whitespace, which the "
                                                               "plugin strips from VLLM_NVFP4_MLA_SCALES_FILE");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(interrupted_writes_should_leave_no_temporary_file),
        cmocka_unit_test(outputs_should_never_carry_setuid_or_setgid),
        cmocka_unit_test(write_errors_should_name_their_cause),
        cmocka_unit_test(decode_should_refuse_a_mode_the_records_contradict),
        cmocka_unit_test(encode_should_report_nonfinite_input),
        cmocka_unit_test(plugin_names_without_a_slash_should_be_files_in_the_working_folder),
        cmocka_unit_test(probe_should_refuse_a_cache_dtype_it_does_not_know),
        cmocka_unit_test(probe_should_take_vllms_dtype_names_and_check_the_attention_settings),
        cmocka_unit_test(messages_should_name_the_real_cause),
        cmocka_unit_test(scales_file_should_be_taken_stripped),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
