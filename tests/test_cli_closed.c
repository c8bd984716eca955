/* Issue 37, "fail closed, second round", through the nvfp4-mla tool as a user runs it: interrupted
 * writes, file modes, write errors with their cause, decode modes the records contradict, non-finite
 * input, plugin file names, cache dtypes and messages that name the real cause. Each case asserts the
 * exit status and the words (RELIABILITY.md's table lists them). */
#include <signal.h>

#include "cli_harness.h"
#include "host_codes.h"

#define SCALES "glm52-nvfp4-nf3-hybrid_mla_outer_scales_v1.json" /* in NVFP4_MLA_TEST_DATA */

enum { T = 100 };
static uint16_t tokens[T * 576];

static void make_tokens(double scale) {
    uint64_t s = 7;
    for (int i = 0; i < T * 576; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        tokens[i] = host_bf16_bits((float)(((double)(s >> 11) * 0x1p-53 - 0.5) * scale));
    }
    write_file("in.bf16", tokens, sizeof tokens);
}

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
    assert_int_equal(run("umask 022;", "quality --tokens 16 --scales %s/%s --json %s/new.json", data, SCALES, tmp), 0);
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
    expect_failure(run("trap '' XFSZ; ulimit -f 4;", "quality --tokens 16 --scales %s/%s --json %s/lim/q.json", data,
                       SCALES, tmp),
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(interrupted_writes_should_leave_no_temporary_file),
        cmocka_unit_test(outputs_should_never_carry_setuid_or_setgid),
        cmocka_unit_test(write_errors_should_name_their_cause),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
