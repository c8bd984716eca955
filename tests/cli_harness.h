/* Running the built nvfp4-mla tool as a user does, for the CLI's test programs (test_cli.c,
 * test_cli_closed.c): a private temporary folder, the tool run through the shell with its exit
 * status, stdout and stderr kept, and the checks every case makes. */
#ifndef NVFP4_MLA_TESTS_CLI_HARNESS_H
#define NVFP4_MLA_TESTS_CLI_HARNESS_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "host_codes.h" /* the host side's bf16 conversions; the tests reach the plugin only through the CLI */

static char tmp[] = "/tmp/nvfp4_cli_XXXXXX";
static char cli[2048], profile[2048];
static char out_text[1 << 16], err_text[1 << 16];

static inline int setup(void **state) {
    (void)state;
    const char *c = getenv("NVFP4_MLA_CLI"), *p = getenv("NVFP4_MLA_PLUGIN_PATH");
    const char *r = getenv("NVFP4_MLA_TEST_PROFILE"); /* the real profile, product data (data/) */
    if (!c || !p || !r || !mkdtemp(tmp)) return -1;
    snprintf(cli, sizeof cli, "%s", c);
    snprintf(profile, sizeof profile, "%s", r);
    setenv("NVFP4_MLA_PLUGIN", p, 1);
    return 0;
}

static inline void slurp(const char *path, char *buf, size_t size) {
    FILE *f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, size - 1, f) : 0;
    buf[n] = '\0';
    if (f) fclose(f);
}

/* Runs "PREFIX 'nvfp4-mla' ARGS" through the shell (PREFIX: environment assignments, or "cd DIR &&");
 * returns the exit status, with stdout and stderr in out_text and err_text. */
static inline int vrun(const char *prefix, const char *tool, const char *fmt, va_list ap) {
    char args[4096], cmd[8192];
    vsnprintf(args, sizeof args, fmt, ap);
    snprintf(cmd, sizeof cmd, "%s '%s' %s >%s/out.txt 2>%s/err.txt", prefix ? prefix : "", tool, args, tmp, tmp);
    int status = system(cmd);
    char path[4096];
    snprintf(path, sizeof path, "%s/out.txt", tmp);
    slurp(path, out_text, sizeof out_text);
    snprintf(path, sizeof path, "%s/err.txt", tmp);
    slurp(path, err_text, sizeof err_text);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Runs another copy of the tool. */
static inline int run_tool(const char *prefix, const char *tool, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = vrun(prefix, tool, fmt, ap);
    va_end(ap);
    return rc;
}

/* Runs "nvfp4-mla ARGS" (ARGS may use %s for the temp folder); returns the exit status. */
static inline int run(const char *env, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int rc = vrun(env, cli, fmt, ap);
    va_end(ap);
    return rc;
}

static inline long file_size(const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

static inline void write_file(const char *name, const void *bytes, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    FILE *f = fopen(path, "wb");
    fwrite(bytes, 1, n, f);
    fclose(f);
}

static inline void expect_failure(int rc, const char *needle) {
    assert_int_equal(rc, 1);
    if (!strstr(err_text, needle)) fail_msg("stderr \"%s\" lacks \"%s\"", err_text, needle);
}

static inline void expect_content(const char *name, const char *want) {
    char path[4096], got[256];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    slurp(path, got, sizeof got);
    assert_string_equal(got, want);
}

/* Names in tmp/DIR that start with '.' (temporary files the writer would have left). */
static inline int leftovers(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", tmp, dir);
    DIR *d = opendir(path);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] == '.' && strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

/* T tokens [T, 576] bf16 of uniform values in +-scale/2, written to tmp/in.bf16. */
enum { T = 100 };
static uint16_t tokens[T * 576];

static inline void make_tokens(double scale) {
    uint64_t s = 99;
    for (int i = 0; i < T * 576; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        tokens[i] = host_bf16_bits((float)(((double)(s >> 11) * 0x1p-53 - 0.5) * scale));
    }
    write_file("in.bf16", tokens, sizeof tokens);
}

#endif
