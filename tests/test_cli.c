/* The nvfp4-mla tool as a user runs it: encode/decode/inspect on files, calibrate, probe, writer
 * policies; errors are one clear line and a non-zero exit. Runs the built CLI against the built plugin. */
#include "cli_harness.h"

/* Relative RMS error of the latents of tmp/NAME (bf16 [T,576]) against the tokens. */
static double latent_error(const char *name) {
    static uint16_t back[T * 576];
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(back, 2, T * 576, f), T * 576);
    fclose(f);
    double num = 0, den = 0;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < 512; i++) {
            const double x = host_bf16_value(tokens[t * 576 + i]), d = host_bf16_value(back[t * 576 + i]) - x;
            num += d * d, den += x * x;
        }
    return sqrt(num / den);
}

static void tools_should_round_trip_records_through_files(void **state) {
    (void)state;
    make_tokens(2.0);
    assert_int_equal(run(NULL, "encode --layout 368 --mode per-token %s/in.bf16 %s/rec.bin", tmp, tmp), 0);
    assert_int_equal(file_size("rec.bin"), T * 368);
    assert_int_equal(run(NULL, "decode --layout 368 --mode per-token %s/rec.bin %s/out.bf16", tmp, tmp), 0);
    assert_int_equal(file_size("out.bf16"), T * 1152);
    const double err = latent_error("out.bf16");
    assert_true(err < 0.11 && err > 0.01);
    assert_int_equal(run(NULL, "encode --layout 432 --mode static --scale 0.01 %s/in.bf16 %s/rec432.bin", tmp, tmp), 0);
    assert_int_equal(file_size("rec432.bin"), T * 432);
}

static void tools_should_fail_with_one_clear_line(void **state) {
    (void)state;
    make_tokens(1.0);
    write_file("short.bf16", tokens, 1000);
    assert_int_equal(run(NULL, "encode --layout 368 --mode static %s/short.bf16 %s/x.bin", tmp, tmp), 1);
    assert_non_null(strstr(err_text, "is 1000 bytes, not a positive whole number of bf16 [T,576] rows (1152 bytes each)"));
    assert_int_equal(run(NULL, "encode --layout 368 --mode dynamic %s/in.bf16 %s/x.bin", tmp, tmp), 1);
    assert_non_null(strstr(err_text, "--mode is \"dynamic\", must be per-token or static"));
    assert_int_equal(run(NULL, "encode --layout 432 --mode per-token %s/in.bf16 %s/x.bin", tmp, tmp), 1);
    assert_non_null(strstr(err_text, "per-token requires layout fp8_rope_368"));
    /* The tool passes --scale as given; the plugin's mode rule refuses it in per-token mode. */
    assert_int_equal(run(NULL, "encode --layout 368 --mode per-token --scale 0.5 %s/in.bf16 %s/x.bin", tmp, tmp), 1);
    assert_non_null(strstr(err_text, "outer_scale is 0.5, must be 0 in per-token mode (records carry s_t)"));
    assert_int_equal(run(NULL, "encode --layout 368 --mode static %s/in.bf16 %s/rec.bin", tmp, tmp), 0);
    assert_int_equal(run(NULL, "decode --layout 432 --mode static %s/rec.bin %s/x.bf16", tmp, tmp), 1);
    assert_non_null(strstr(err_text, "not a positive whole number of 432-byte records (wrong --layout or a short file?)"));
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
    assert_int_equal(
        run(NULL,
            "calibrate --out %s/cal.json --model m --dataset d --hook h --created-utc 2026-11-29T00:00:00+00:00 "
            "%s/rank0.csv %s/rank1.json",
            tmp, tmp, tmp),
        0);
    assert_non_null(strstr(out_text, "2 ranks, 3 layers; worst rank disagreement 2.44% (layer 1)"));
    assert_non_null(
        strstr(out_text, "loader check: 3 layers, cache identity nvfp4_ds_mla:fp8-rope-368:static-calibrated-v1:"));
    char path[4096], text[8192];
    snprintf(path, sizeof path, "%s/cal.json", tmp);
    slurp(path, text, sizeof text);
    assert_non_null(strstr(text, "\"max_abs\":\t[0.5, 2.05, 1]"));
    assert_non_null(strstr(text, "\"model\":\t\"m\""));
    assert_non_null(strstr(text, "\"created_utc\":\t\"2026-11-29T00:00:00+00:00\""));
    assert_int_equal(run(NULL, "calibrate --out %s/c2.json --tolerance 0.01 %s/rank0.csv %s/rank1.json", tmp, tmp, tmp),
                     1);
    assert_non_null(strstr(err_text, "ranks disagree by 2.44% at layer 1, more than --tolerance 1%"));
    write_file("bad.csv", "0,0.5\n0,0.6\n", 12);
    assert_int_equal(run(NULL, "calibrate --out %s/c3.json %s/bad.csv", tmp, tmp), 1);
    assert_non_null(strstr(err_text, "bad.csv:2: layer 0 appears twice"));
}

static void probe_should_report_and_decide(void **state) {
    (void)state;
    assert_int_equal(run("KV_FP8_ROPE=1", "probe --json"), 0);
    assert_non_null(strstr(out_text, "\"accepted\":\ttrue"));
    assert_non_null(strstr(out_text, "\"abi\":\t\"1.1\""));
    char env[4200];
    snprintf(env, sizeof env, "KV_FP8_ROPE=1 VLLM_NVFP4_MLA_SCALES_FILE=%s", profile);
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

/* ---- Issue 13: bad input on purpose. Each case asserts the exit status and the words. ---- */

/* Case 1 through a host: "true" is on, "yes" is an error naming the variable and its value. */
static void probe_should_apply_the_boolean_rule(void **state) {
    (void)state;
    assert_int_equal(run("VLLM_NVFP4_MLA_DYNAMIC_SCALE=true KV_FP8_ROPE=TRUE", "probe"), 0);
    assert_non_null(strstr(out_text, "nvfp4_ds_mla:fp8-rope-368:dynamic-token-v1"));
    expect_failure(
        run("VLLM_NVFP4_MLA_DYNAMIC_SCALE=yes KV_FP8_ROPE=1", "probe"),
        "configuration refused: VLLM_NVFP4_MLA_DYNAMIC_SCALE=\"yes\" is not a boolean: use 1 or true for on");
    /* Issue 37: the scales file is read stripped, as vLLM reads it; "  " is none (test_cli_closed.c). */
    assert_int_equal(run("VLLM_NVFP4_MLA_SCALES_FILE='  '", "probe"), 0);
}

/* Case 2: a plugin whose table has a NULL entry point is refused by every host command, by name. */
static void tools_should_refuse_a_plugin_with_a_null_member(void **state) {
    (void)state;
    make_tokens(1.0);
    char env[4200];
    snprintf(env, sizeof env, "NVFP4_MLA_PLUGIN=%s/libmock_null_init.so", getenv("NVFP4_MLA_MOCK_DIR"));
    const char *words = "refused: table member \"init\" is NULL (plugin ABI 1.1, host ABI 1.1;";
    expect_failure(run(env, "probe"), words);
    expect_failure(run(env, "probe --json"), words);
    assert_non_null(strstr(out_text, "\"reason\":\t\"incomplete_table\""));
    expect_failure(run(env, "encode --layout 368 --mode static %s/in.bf16 %s/x.bin", tmp, tmp), words);
    snprintf(env, sizeof env, "NVFP4_MLA_PLUGIN=%s/libmock_null_attend.so", getenv("NVFP4_MLA_MOCK_DIR"));
    expect_failure(run(env, "demo"), "refused: table member \"attend\" is NULL");
    /* An older table ends before attend: a command that calls it says so instead of reading past it. */
    snprintf(env, sizeof env, "NVFP4_MLA_PLUGIN=%s/libmock_old_minor.so", getenv("NVFP4_MLA_MOCK_DIR"));
    expect_failure(run(env, "quality --tokens 16"), "lacks op.attend, which this command calls");
}

/* Case 3: an output that is an input (same device and inode, by any name) is refused before anything
 * is written; a failed write leaves the old output and no temporary file, and says why. */
static void outputs_should_never_destroy_a_users_file(void **state) {
    (void)state;
    make_tokens(1.0);
    char path[4096], link_path[4096];
    snprintf(path, sizeof path, "%s/in.bf16", tmp);
    snprintf(link_path, sizeof link_path, "%s/hard.bf16", tmp);
    unlink(link_path);
    assert_int_equal(link(path, link_path), 0);
    expect_failure(run(NULL, "encode --layout 368 --mode static %s/in.bf16 %s/in.bf16", tmp, tmp),
                   "in.bf16 is the input");
    expect_failure(run(NULL, "encode --layout 368 --mode static %s/in.bf16 %s/hard.bf16", tmp, tmp),
                   "hard.bf16 is the input");
    assert_int_equal(file_size("in.bf16"), (long)sizeof tokens);
    expect_failure(run(NULL, "quality --scales %s/in.bf16 --json %s/in.bf16", tmp, tmp), "(same file)");
    expect_failure(run(NULL, "encode --layout 368 --mode static %s/in.bf16 /dev/null", tmp),
                   "cannot write /dev/null: it is a character device, only regular files are replaced");

    snprintf(path, sizeof path, "%s/full", tmp);
    mkdir(path, 0755);
    write_file("full/rec.bin", "old", 3);
    write_file("full/cal.json", "old", 3);
    write_file("full/q.json", "old", 3);
    write_file("rank0.csv", "0,0.5\n1,2.0\n", 12);
    /* A file-size limit stands in for a full disk: writes fail with EFBIG, as with ENOSPC. */
    const char *limited = "trap '' XFSZ; ulimit -f 4;";
    expect_failure(run(limited, "encode --layout 368 --mode per-token %s/in.bf16 %s/full/rec.bin", tmp, tmp),
                   "cannot write ");
    assert_non_null(strstr(err_text, "/full/rec.bin: File too large (nothing was replaced)"));
    expect_content("full/rec.bin", "old");
    expect_failure(run(limited, "quality --tokens 16 --json %s/full/q.json", tmp), "File too large");
    expect_content("full/q.json", "old");
    char big[3000]; /* a long --model makes the document outgrow the limit */
    memset(big, 'm', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    expect_failure(run(limited, "calibrate --out %s/full/cal.json --model %s %s/rank0.csv", tmp, big, tmp),
                   "File too large");
    expect_content("full/cal.json", "old");
    assert_int_equal(leftovers("full"), 0);
    /* Unlimited, the same commands replace the files. */
    assert_int_equal(run(NULL, "encode --layout 368 --mode per-token %s/in.bf16 %s/full/rec.bin", tmp, tmp), 0);
    assert_int_equal(file_size("full/rec.bin"), T * 368);
    assert_int_equal(leftovers("full"), 0);
}

/* Case 4: calibrate checks the file with the plugin's own rules before it replaces anything. */
static void calibrate_should_check_before_writing(void **state) {
    (void)state;
    write_file("rank0.csv", "0,0.5\n1,2.0\n", 12);
    write_file("tiny.csv", "0,0.5\n1,1e-300\n", 15);
    char path[4096];
    snprintf(path, sizeof path, "%s/cal", tmp);
    mkdir(path, 0755);
    write_file("cal/out.json", "good", 4);
    /* issue 58, N16: a max_abs whose scale the plugin refuses is named at its capture line, before the
     * plugin sees the file (it named the output, which does not exist) */
    expect_failure(run(NULL, "calibrate --out %s/cal/out.json %s/tiny.csv", tmp, tmp), "/tiny.csv:2: max_abs 1e-300 is "
                                                                                     "outside [6.10352e-05, 65504]");
    assert_null(strstr(err_text, "out.json"));
    expect_content("cal/out.json", "good");
    expect_failure(run("NVFP4_MLA_PLUGIN=", "calibrate --out %s/cal/out.json %s/rank0.csv", tmp, tmp),
                   "no plugin to check ");
    assert_non_null(strstr(err_text, "out.json against, so nothing was written: set NVFP4_MLA_PLUGIN (or --plugin), "
                                     "or pass --no-check to write it unchecked"));
    expect_content("cal/out.json", "good");
    assert_int_equal(run("NVFP4_MLA_PLUGIN=", "calibrate --no-check --out %s/cal/out.json %s/rank0.csv", tmp, tmp), 0);
    assert_non_null(strstr(out_text, "wrote "));
    assert_non_null(strstr(out_text, "(2 layers); not checked by a plugin (--no-check)"));
    assert_int_equal(leftovers("cal"), 0);
}

/* Case 5: numbers parse whole; "not a number" and "out of range" are told apart; flags come once. */
static void flags_should_parse_strictly(void **state) {
    (void)state;
    make_tokens(1.0);
    write_file("rank0.csv", "0,0.5\n1,2.0\n", 12);
    struct {
        const char *args, *needle;
    } cases[] = {
        {"--scale 0", "--scale is \"0\": out of range, must be a positive normal float (1.17549e-38 to 3.40282e+38)"},
        {"--scale -1", "--scale is \"-1\": out of range"},
        {"--scale 1e40", "--scale is \"1e40\": out of range"},
        {"--scale 1e-40", "--scale is \"1e-40\": out of range"},
        {"--scale abc", "--scale is \"abc\": not a number"},
        {"--scale nan", "--scale is \"nan\": not a number"},
        {"--scale 1.5x", "--scale is \"1.5x\": not a number"},
        {"--scale 1 --scale 2", "--scale is given twice: give each flag once"},
        {"--layout 432", "--layout is given twice"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        expect_failure(run(NULL, "encode --layout 368 --mode static %s %s/in.bf16 %s/x.bin", cases[c].args, tmp, tmp),
                       cases[c].needle);
    }
    expect_failure(run(NULL, "inspect --layout 368 --tokens abc %s/in.bf16", tmp),
                   "--tokens is \"abc\": not an integer");
    expect_failure(run(NULL, "quality --tokens abc"), "--tokens is \"abc\": not an integer");
    expect_failure(run(NULL, "quality --tokens 1"),
                   "--tokens is \"1\": out of range, must be an integer in [2, 65536]");
    expect_failure(run(NULL, "quality --tokens 99999999999999999999"),
                   "out of range, must be an integer in [2, 65536]");
    expect_failure(run(NULL, "quality --seed xyz"), "--seed is \"xyz\": not an integer");
    expect_failure(run(NULL, "quality --seed -1"), "--seed is \"-1\": out of range");
    expect_failure(run(NULL, "quality --seed 1 --seed 2"), "--seed is given twice");
    expect_failure(run(NULL, "calibrate --out %s/c.json --tolerance abc %s/rank0.csv", tmp, tmp),
                   "--tolerance is \"abc\": not a number");
    expect_failure(run(NULL, "calibrate --out %s/c.json --tolerance 2 %s/rank0.csv", tmp, tmp),
                   "--tolerance is \"2\": out of range, must be a finite number in [0, 1]");
    expect_failure(run(NULL, "calibrate --out %s/c.json --out %s/d.json %s/rank0.csv", tmp, tmp, tmp),
                   "--out is given twice");
    expect_failure(run(NULL, "probe --json --json"), "--json is given twice");
    expect_failure(run(NULL, "demo --scales a --scales b"), "--scales is given twice");
}

/* Case 6: an installed tool (here a copy outside the build tree) runs demo and quality from any
 * folder, on the profile it carries; the plugin sees the real file's bytes (same identity). */
static void demo_and_quality_should_work_from_any_folder(void **state) {
    (void)state;
    char bin[4096], where[4200], tool[4200], cmd[12000];
    snprintf(bin, sizeof bin, "%s/installed", tmp);
    mkdir(bin, 0755);
    snprintf(where, sizeof where, "%s/elsewhere", tmp);
    mkdir(where, 0755);
    snprintf(tool, sizeof tool, "%s/nvfp4-mla", bin);
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", cli, tool);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "cd '%s' && TMPDIR='%s' ", where, where);
    assert_int_equal(run_tool(cmd, tool, "demo"), 0);
    assert_non_null(
        strstr(out_text, "magnitude profile: built-in glm52-nvfp4-nf3-hybrid_mla_outer_scales_v1.json (78 layers)"));
    assert_non_null(
        strstr(out_text, "static-calibrated-v1:52462f01e0559e987e171702ad26e40e0bfb39d7d944d07af96c001f5e62b9c9"));
    assert_int_equal(run_tool(cmd, tool, "quality --tokens 16 --json q.json"), 0);
    char json[4300];
    snprintf(json, sizeof json, "%s/q.json", where);
    slurp(json, out_text, sizeof out_text);
    assert_non_null(strstr(out_text, "\n\"scales_file\": \"built-in glm52-nvfp4-nf3-hybrid_mla_outer_scales_v1.json\""));
    /* The copy of the built-in profile the plugin read is gone again: only q.json is left. */
    DIR *d = opendir(where);
    int entries = 0;
    for (struct dirent *e; (e = readdir(d));) entries += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    assert_int_equal(entries, 1);
}

/* Case 7: probe --json says why a load failed in a word a script can test, and the message. */
static void probe_json_should_give_a_machine_readable_reason(void **state) {
    (void)state;
    const char *mocks = getenv("NVFP4_MLA_MOCK_DIR");
    struct {
        const char *env_fmt, *reason;
    } cases[] = {
        {"NVFP4_MLA_PLUGIN=/nonexistent/libnvfp4_mla.so", "not_found"},
        {"NVFP4_MLA_PLUGIN=%s/libmock_not_a_plugin.so", "not_a_plugin"},
        {"NVFP4_MLA_PLUGIN=%s/libmock_wrong_major.so", "abi_mismatch"},
        {"NVFP4_MLA_PLUGIN=%s/libmock_null_version.so", "incomplete_table"},
        {"NVFP4_MLA_PLUGIN=", "not_selected"},
        {"NVFP4_MLA_PLUGIN=none", "disabled"},
        {"NVFP4_MLA_PLUGIN=' none'", "invalid_selection"},
        {"NVFP4_MLA_PLUGIN=%s/libmock_no_per_token.so VLLM_NVFP4_MLA_DYNAMIC_SCALE=1", "missing_capability"},
        {"KV_FP8_ROPE=yes", "config_error"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char env[4200], want[128];
        snprintf(env, sizeof env, cases[c].env_fmt, mocks);
        assert_int_equal(run(env, "probe --json"), 1);
        snprintf(want, sizeof want, "\"reason\":\t\"%s\"", cases[c].reason);
        if (!strstr(out_text, want) || !strstr(out_text, "\"message\":\t\"") ||
            !strstr(out_text, "\"accepted\":\tfalse"))
            fail_msg("case %zu: %s lacks %s, a message or accepted false", c, out_text, want);
    }
}

/* Case 8: inputs that are not regular files are refused without blocking; sizes are bounded before
 * anything is read. */
static void inputs_should_be_regular_files_of_bounded_size(void **state) {
    (void)state;
    char fifo[4096], path[4096];
    snprintf(fifo, sizeof fifo, "%s/fifo", tmp);
    unlink(fifo);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    expect_failure(run(NULL, "encode --layout 368 --mode static /dev/zero %s/x.bin", tmp),
                   "/dev/zero is a character device: only regular files are read");
    expect_failure(run(NULL, "encode --layout 368 --mode static %s %s/x.bin", fifo, tmp), "fifo is a FIFO");
    expect_failure(run(NULL, "calibrate --out %s/c.json %s", tmp, fifo), "fifo is a FIFO");
    expect_failure(run(NULL, "quality --scales %s", tmp), "is a directory: only regular files are read");
    expect_failure(run("VLLM_NVFP4_MLA_SCALES_FILE=/dev/zero", "probe"), "/dev/zero is a character device");
    /* A sparse file: its size is refused from fstat, long before it could be read. */
    snprintf(path, sizeof path, "%s/huge.bf16", tmp);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    assert_true(fd >= 0 && ftruncate(fd, (off_t)3 << 30) == 0);
    close(fd);
    expect_failure(run(NULL, "encode --layout 368 --mode static %s %s/x.bin", path, tmp),
                   "huge.bf16 is 3221225472 bytes, more than the 1073741824-byte limit for this input");
    expect_failure(run(NULL, "calibrate --out %s/c.json %s", tmp, path), "more than the 16777216-byte limit");
    unlink(path);
}

/* Issue 16: encode writes with --policy (rtn by default), decode reads every policy's records alike;
 * quality and demo measure the policy beside rtn; probe shows it; bad names are refused by name. */
static void writer_policy_should_be_selectable_from_the_tools(void **state) {
    (void)state;
    make_tokens(2.0);
    assert_int_equal(run(NULL, "encode --layout 368 --mode per-token %s/in.bf16 %s/rtn.bin", tmp, tmp), 0);
    assert_int_equal(run(NULL, "encode --layout 368 --mode per-token --policy rtn %s/in.bf16 %s/rtn2.bin", tmp, tmp),
                     0);
    assert_int_equal(run(NULL, "encode --layout 368 --mode per-token --policy mse %s/in.bf16 %s/mse.bin", tmp, tmp), 0);
    char rtn[T * 368], rtn2[T * 368], mse[T * 368], path[4096];
    snprintf(path, sizeof path, "%s/rtn.bin", tmp), slurp(path, rtn, sizeof rtn);
    snprintf(path, sizeof path, "%s/rtn2.bin", tmp), slurp(path, rtn2, sizeof rtn2);
    snprintf(path, sizeof path, "%s/mse.bin", tmp), slurp(path, mse, sizeof mse);
    assert_memory_equal(rtn, rtn2, sizeof rtn - 1);     /* rtn is the default */
    assert_memory_not_equal(rtn, mse, sizeof rtn - 1);
    assert_memory_equal(rtn + 288, mse + 288, 80);       /* s_t and RoPE: rtn's */
    assert_int_equal(run(NULL, "decode --layout 368 --mode per-token %s/rtn.bin %s/rtn.bf16", tmp, tmp), 0);
    assert_int_equal(run(NULL, "decode --layout 368 --mode per-token %s/mse.bin %s/mse.bf16", tmp, tmp), 0);
    assert_true(latent_error("mse.bf16") < 0.95 * latent_error("rtn.bf16"));
    expect_failure(run(NULL, "encode --layout 368 --mode static --policy 4over6 %s/in.bf16 %s/x.bin", tmp, tmp),
                   "--policy is \"4over6\", must be one of: rtn, mse");
    expect_failure(
        run(NULL, "encode --layout 368 --mode static --policy mse --policy rtn %s/in.bf16 %s/x.bin", tmp, tmp),
        "--policy is given twice");
    expect_failure(run(NULL, "decode --layout 368 --mode static --policy mse %s/rtn.bin %s/x.bf16", tmp, tmp),
                   "unknown flag --policy");
    expect_failure(run(NULL, "quality --policy MSE"), "--policy is \"MSE\", must be one of: rtn, mse");
    assert_int_equal(run(NULL, "quality --tokens 16 --policy rtn"), 0);
    assert_null(strstr(out_text, "-mse"));
    assert_int_equal(run(NULL, "quality --tokens 16 --json %s/q.json", tmp), 0);
    assert_non_null(strstr(out_text, "static-mse per-token-mse"));
    static char json[1 << 20];
    snprintf(path, sizeof path, "%s/q.json", tmp);
    slurp(path, json, sizeof json);
    assert_non_null(strstr(json, "\"seed\": 1, \"writer_policy\": \"mse\", \"layers\": ["));
    /* where the file came from, in the keys bench/compare_table.py reads (issue 57) */
    assert_non_null(strstr(json, "{\"provenance\": {\"plugin\":{\"path\":"));
    assert_non_null(strstr(json, "\"name\":\"nvfp4-mla\",\"version\":"));
    assert_non_null(strstr(json, "\"device\":{\"name\":\"the CPU backend\",\"driver\":\"none (no GPU used)\"}"));
    assert_non_null(strstr(json, "\"command\":\"nvfp4-mla quality --tokens 16 --json "));
    assert_non_null(strstr(json, "\"mode\": \"per-token-mse\", \"rel_rms\": "));
    assert_non_null(strstr(json, "{\"attend\": true, \"layer\": 1, \"mode\": \"static-mse\", \"rel_rms\": "));
    assert_int_equal(run(NULL, "demo --policy rtn"), 0);
    assert_null(strstr(out_text, "per-token-mse"));
    assert_int_equal(run(NULL, "demo"), 0);
    assert_non_null(strstr(out_text, "per-token-mse"));
    char line[128]; /* the same identity as per-token with rtn: readers do not change */
    snprintf(line, sizeof line, "%-34s %s\n",
             "per-token, writer policy mse:", "nvfp4_ds_mla:fp8-rope-368:dynamic-token-v1");
    assert_non_null(strstr(out_text, line));
}

/* probe: the configured policy and the ones the plugin serves; a plugin that predates policies, or
 * lacks the policy's capability, is refused when the environment asks for one. */
static void probe_should_show_and_check_the_writer_policy(void **state) {
    (void)state;
    assert_int_equal(run("KV_FP8_ROPE=1 VLLM_NVFP4_MLA_DYNAMIC_SCALE=1 NVFP4_MLA_WRITER_POLICY=MSE", "probe"), 0);
    assert_non_null(strstr(out_text, "writer policy         mse (available: rtn, mse;"));
    assert_non_null(strstr(out_text, "cache identity        nvfp4_ds_mla:fp8-rope-368:dynamic-token-v1\n"));
    assert_int_equal(run("KV_FP8_ROPE=1 NVFP4_MLA_WRITER_POLICY=mse", "probe --json"), 0);
    assert_non_null(strstr(out_text, "\"writer_policies\":\t[\"rtn\", \"mse\"],\n\t\"writer_policy\":\t\"mse\""));
    assert_int_equal(run("KV_FP8_ROPE=1", "probe --json"), 0);
    assert_non_null(strstr(out_text, "\"writer_policy\":\t\"rtn\""));
    expect_failure(run("NVFP4_MLA_WRITER_POLICY=4over6", "probe"),
                   "configuration refused: NVFP4_MLA_WRITER_POLICY=\"4over6\" is not one of: rtn, mse (any case); "
                   "unset or empty is rtn");
    char env[4200];
    const char *mocks = getenv("NVFP4_MLA_MOCK_DIR");
    snprintf(env, sizeof env, "NVFP4_MLA_PLUGIN=%s/libmock_old_minor.so", mocks);
    assert_int_equal(run(env, "probe"), 0);
    assert_non_null(
        strstr(out_text, "writer policy         rtn (the plugin predates writer policies) (available: rtn;"));
    snprintf(env, sizeof env, "NVFP4_MLA_PLUGIN=%s/libmock_old_minor.so NVFP4_MLA_WRITER_POLICY=mse", mocks);
    expect_failure(run(env, "probe --json"), "(ABI 1.0) has no writer policies, but NVFP4_MLA_WRITER_POLICY=\"mse\" "
                                             "asks for one");
    assert_non_null(strstr(out_text, "\"writer_policies\":\t[\"rtn\"]"));
    assert_non_null(strstr(out_text, "\"reason\":\t\"missing_capability\""));
    /* The old plugin cannot report the policy: the loader reads the variable by the plugin's rule
     * (any case: "RTN" asks for nothing; a name it does not know is refused in the rule's words). */
    snprintf(env, sizeof env, "NVFP4_MLA_PLUGIN=%s/libmock_old_minor.so NVFP4_MLA_WRITER_POLICY=RTN", mocks);
    assert_int_equal(run(env, "probe"), 0);
    snprintf(env, sizeof env, "NVFP4_MLA_PLUGIN=%s/libmock_old_minor.so NVFP4_MLA_WRITER_POLICY=4over6", mocks);
    expect_failure(run(env, "probe --json"),
                   "configuration refused: NVFP4_MLA_WRITER_POLICY=\"4over6\" is not one of: rtn, mse (any case); "
                   "unset or empty is rtn");
    assert_non_null(strstr(out_text, "\"reason\":\t\"config_error\""));
    snprintf(env, sizeof env, "NVFP4_MLA_PLUGIN=%s/libmock_current.so NVFP4_MLA_WRITER_POLICY=mse", mocks);
    expect_failure(run(env, "probe"), "cannot serve static scales on fp8_rope_368 (requested by the configuration): "
                                      "missing write.policy_mse");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tools_should_round_trip_records_through_files),
        cmocka_unit_test(tools_should_fail_with_one_clear_line),
        cmocka_unit_test(inspect_should_count_subnormal_group_scales),
        cmocka_unit_test(calibrate_should_envelope_ranks_and_load_through_the_plugin),
        cmocka_unit_test(probe_should_report_and_decide),
        cmocka_unit_test(probe_should_apply_the_boolean_rule),
        cmocka_unit_test(tools_should_refuse_a_plugin_with_a_null_member),
        cmocka_unit_test(outputs_should_never_destroy_a_users_file),
        cmocka_unit_test(calibrate_should_check_before_writing),
        cmocka_unit_test(flags_should_parse_strictly),
        cmocka_unit_test(demo_and_quality_should_work_from_any_folder),
        cmocka_unit_test(probe_json_should_give_a_machine_readable_reason),
        cmocka_unit_test(inputs_should_be_regular_files_of_bounded_size),
        cmocka_unit_test(writer_policy_should_be_selectable_from_the_tools),
        cmocka_unit_test(probe_should_show_and_check_the_writer_policy),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
