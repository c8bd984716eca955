/* Loader, tensors, configurations and the codec calls shared by the subcommands (see cli.h). The
 * flags are parsed in flags.c, which calls cli_fail here; nothing here calls flags.c. */
#include <cJSON.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "json_text.h"

int cli_fail(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "nvfp4-mla %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

cJSON *cli_json_parse(const char *cmd, const char *origin, const char *text, size_t len) {
    char why[NVFP4_JSON_REFUSAL_MAX];
    cJSON *root = nvfp4_json_read(text, len, why, sizeof why);
    if (!root) {
        cli_fail(cmd, "%s %s", origin, why);
    }
    return root;
}

#ifndef NVFP4_MLA_INSTALLED_PLUGIN
#define NVFP4_MLA_INSTALLED_PLUGIN "" /* none known */
#endif

/* The plugin installed with this tool: NVFP4_MLA_INSTALLED_PLUGIN, absolute or relative to the folder
 * of this executable (host_shims/cli/meson.build), when that file is there; else NULL. */
static const char *installed_plugin(char *path, size_t size) {
    char exe[4096];
    const char *rel = NVFP4_MLA_INSTALLED_PLUGIN;
    const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (!rel[0] || (rel[0] != '/' && n <= 0)) {
        return NULL;
    }
    exe[n > 0 ? n : 0] = '\0';
    char *slash = strrchr(exe, '/');
    if (slash) *slash = '\0';
    char joined[8300], real[PATH_MAX];
    const int wrote = rel[0] == '/' ? snprintf(joined, sizeof joined, "%s", rel)
                                    : snprintf(joined, sizeof joined, "%s/%s", exe, rel);
    struct stat st;
    if (wrote <= 0 || (size_t)wrote >= sizeof joined || !realpath(joined, real) || stat(real, &st) != 0 ||
        !S_ISREG(st.st_mode) || (size_t)snprintf(path, size, "%s", real) >= size) {
        return NULL; /* "bin/../lib/..." resolved: the path the messages show is the file's */
    }
    return path;
}

int cli_loader_open(const char *cmd, nvfp4_mla_loader_t *loader, const char *plugin, char *message, size_t size) {
    static char installed[4200];
    if (plugin && !plugin[0]) { /* the loader would blame NVFP4_MLA_PLUGIN, which the user did not set */
        memset(loader, 0, sizeof *loader);
        loader->reason = NVFP4_MLA_REASON_INVALID_SELECTION;
        snprintf(message, size, "--plugin is empty: give the plugin file or its folder (or none to run %s without "
                                "one)", cmd);
        return NVFP4_MLA_LOAD_FAILED;
    }
    const char *env = getenv(NVFP4_MLA_PLUGIN_ENV);
    if (!plugin && !(env && env[0])) {
        plugin = installed_plugin(installed, sizeof installed); /* NULL: the loader says none is selected */
    }
    return nvfp4_mla_loader_open(loader, plugin, message, size);
}

int cli_host_open_for(cli_host_t *host, const char *plugin, uint64_t need) {
    memset(host, 0, sizeof *host);
    char message[1024];
    if (cli_loader_open("plugin", &host->loader, plugin, message, sizeof message) != NVFP4_MLA_LOAD_OK) {
        fprintf(stderr, "nvfp4-mla: %s\n", message);
        return 1;
    }
    host->table = host->loader.table;
    /* nvfp4_mla_loader_table_caps clears each operation whose member the table is too short to
     * hold: what is left may be called. */
    uint64_t missing = need & ~nvfp4_mla_loader_table_caps(&host->loader);
    for (int b = 0; b < 64 && missing; b++) {
        if (missing & (UINT64_C(1) << b)) {
            fprintf(stderr, "nvfp4-mla: plugin %s (ABI %u.%u, table %u bytes) lacks %s, which this command calls\n",
                    host->loader.path, host->table->header.abi_major, host->table->header.abi_minor,
                    host->table->header.struct_size, nvfp4_mla_loader_cap_name(UINT64_C(1) << b));
            nvfp4_mla_loader_close(&host->loader);
            return 1;
        }
    }
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CPU, 0, 0, NULL, {0}, NULL};
    if (host->table->init(&init, &host->cpu) != NVFP4_MLA_OK) {
        fprintf(stderr, "nvfp4-mla: init on the CPU failed: %s\n", host->table->last_error());
        nvfp4_mla_loader_close(&host->loader);
        return 1;
    }
    return 0;
}

int cli_host_open(cli_host_t *host, const char *plugin) {
    return cli_host_open_for(host, plugin, CLI_NEEDS_ALL);
}

void cli_host_close(cli_host_t *host) {
    if (host->table && host->cpu) {
        host->table->shutdown(host->cpu);
    }
    nvfp4_mla_loader_close(&host->loader);
}

nvfp4_mla_tensor_t cli_tensor_2d(void *data, int32_t dtype, int64_t rows, int64_t cols, int64_t row_stride) {
    nvfp4_mla_tensor_t t = {data, dtype, 2, {rows, cols, 0, 0}, {row_stride, 1, 0, 0}, NVFP4_MLA_DEVICE_CPU, 0};
    return t;
}

nvfp4_mla_tensor_t cli_tensor_1d(void *data, int32_t dtype, int64_t n) {
    nvfp4_mla_tensor_t t = {data, dtype, 1, {n, 0, 0, 0}, {1, 0, 0, 0}, NVFP4_MLA_DEVICE_CPU, 0};
    return t;
}

#define CLI_BLOCK 64

int64_t cli_cache_bytes(int64_t tokens, int32_t record_bytes) {
    return (tokens + CLI_BLOCK - 1) / CLI_BLOCK * CLI_BLOCK * record_bytes;
}

void cli_scales_env(const char *path, char buf[CLI_SCALES_ENV_MAX], const char *env[3]) {
    snprintf(buf, CLI_SCALES_ENV_MAX, "VLLM_NVFP4_MLA_SCALES_FILE=%s", path);
    env[0] = buf, env[1] = "KV_FP8_ROPE=1", env[2] = NULL;
}

nvfp4_mla_status_t cli_config_for_env(cli_host_t *host, const char *const *env, nvfp4_mla_config_t **cfg) {
    nvfp4_mla_config_request_t req = {sizeof req, 0, "nvfp4_ds_mla", NULL, env, NULL, {0}};
    return host->table->config_create(&req, cfg);
}

nvfp4_mla_config_t *cli_scales_config(cli_host_t *host, const char *cmd, const char *path, const char *shown,
                                      const char *refusal) {
    char env_file[CLI_SCALES_ENV_MAX]; /* `path` may be a temporary file (cli_out_t.temp, 4200 bytes) */
    const char *env[3];
    cli_scales_env(path, env_file, env);
    nvfp4_mla_config_t *cfg = NULL;
    if (cli_config_for_env(host, env, &cfg) != NVFP4_MLA_OK) {
        char why[2048]; /* in the user's words: a temporary file is gone by the time the user reads it */
        cli_scales_refusal(host, path, shown, why, sizeof why);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral" /* the callers' literals, each with two %s (cli.h) */
        cli_fail(cmd, refusal, shown, why);
#pragma GCC diagnostic pop
        return NULL;
    }
    return cfg;
}

void cli_scales_refusal(cli_host_t *host, const char *given, const char *shown, char *out, size_t size) {
    char prefix[CLI_SCALES_ENV_MAX + 64];
    const char *message = host->table->last_error();
    snprintf(prefix, sizeof prefix, "VLLM_NVFP4_MLA_SCALES_FILE=%s names a scales file the plugin cannot use: ", given);
    if (strncmp(message, prefix, strlen(prefix)) == 0) {
        message += strlen(prefix);
    }
    size_t used = 0;
    const size_t given_len = strlen(given);
    out[0] = '\0';
    while (*message && used + 1 < size) { /* every `given` becomes `shown` */
        if (given_len && strncmp(message, given, given_len) == 0) {
            used += (size_t)snprintf(out + used, size - used, "%s", shown);
            message += given_len;
        } else {
            out[used++] = *message++;
            out[used] = '\0';
        }
        used = used < size ? used : size - 1;
    }
}

nvfp4_mla_tensor_t cli_cache_tensor(uint8_t *data, int64_t tokens, int32_t record_bytes) {
    int64_t blocks = (tokens + CLI_BLOCK - 1) / CLI_BLOCK;
    nvfp4_mla_tensor_t t = {data, NVFP4_MLA_DTYPE_U8, 3, {blocks, CLI_BLOCK, record_bytes, 0},
                            {CLI_BLOCK * record_bytes, record_bytes, 1, 0}, NVFP4_MLA_DEVICE_CPU, 0};
    return t;
}

int32_t cli_record_bytes(const cli_codec_flags_t *f) {
    return (int32_t)nvfp4_mla_record_bytes(f->layout);
}

int cli_encode(const char *cmd, cli_host_t *host, const cli_codec_flags_t *f, const uint16_t *tokens, int64_t count,
               uint8_t *records) {
    uint64_t nonfinite = 0;
    if (cli_encode_counted(cmd, host, f, tokens, count, records, &nonfinite)) {
        return 1;
    }
    return nonfinite ? cli_fail(cmd, "%llu NaN/Inf input values (the plugin's nonfinite_count): records hold neither",
                                (unsigned long long)nonfinite)
                     : 0;
}

int cli_encode_counted(const char *cmd, cli_host_t *host, const cli_codec_flags_t *f, const uint16_t *tokens,
                       int64_t count, uint8_t *records, uint64_t *nonfinite) {
    const int32_t rb = cli_record_bytes(f);
    int64_t *slots = malloc((size_t)(count ? count : 1) * sizeof *slots);
    uint8_t *cache = calloc(1, (size_t)cli_cache_bytes(count, rb) + 1);
    if (!slots || !cache) {
        free(slots);
        free(cache);
        return cli_fail(cmd, "out of memory for %lld tokens", (long long)count);
    }
    for (int64_t t = 0; t < count; t++) {
        slots[t] = t;
    }
    nvfp4_mla_write_args_t w = {
        .struct_size = sizeof w,
        .layout = f->layout,
        .scale_mode = f->scale_mode,
        .outer_scale = f->scale,
        .writer_policy = f->writer_policy,
        .kv_c = cli_tensor_2d((void *)tokens, NVFP4_MLA_DTYPE_BF16, count, NVFP4_MLA_LATENT_DIM, NVFP4_MLA_ROW_DIM),
        .k_pe = cli_tensor_2d((void *)(tokens + NVFP4_MLA_LATENT_DIM), NVFP4_MLA_DTYPE_BF16, count,
                              NVFP4_MLA_ROPE_DIM, NVFP4_MLA_ROW_DIM),
        .slot_mapping = cli_tensor_1d(slots, NVFP4_MLA_DTYPE_I64, count),
        .cache = cli_cache_tensor(cache, count, rb),
        .nonfinite_count = nonfinite,
    };
    int rc = 0;
    if (host->table->write(host->cpu, &w) != NVFP4_MLA_OK) {
        rc = cli_fail(cmd, "%s", host->table->last_error());
    } else {
        memcpy(records, cache, (size_t)(count * rb)); /* one block after another: slot order */
    }
    free(slots);
    free(cache);
    return rc;
}

int cli_decode(const char *cmd, cli_host_t *host, const cli_codec_flags_t *f, const uint8_t *records, int64_t count,
               uint16_t *rows) {
    const int32_t rb = cli_record_bytes(f);
    int32_t *slots = malloc((size_t)(count ? count : 1) * sizeof *slots);
    uint8_t *cache = calloc(1, (size_t)cli_cache_bytes(count, rb) + 1);
    if (!slots || !cache) {
        free(slots);
        free(cache);
        return cli_fail(cmd, "out of memory for %lld records", (long long)count);
    }
    memcpy(cache, records, (size_t)(count * rb));
    for (int64_t t = 0; t < count; t++) {
        slots[t] = (int32_t)t;
    }
    nvfp4_mla_gather_args_t g = {
        .struct_size = sizeof g,
        .layout = f->layout,
        .scale_mode = f->scale_mode,
        .outer_scale = f->scale,
        .cache = cli_cache_tensor(cache, count, rb),
        .slots = cli_tensor_1d(slots, NVFP4_MLA_DTYPE_I32, count),
        .out = cli_tensor_2d(rows, NVFP4_MLA_DTYPE_BF16, count, NVFP4_MLA_ROW_DIM, NVFP4_MLA_ROW_DIM),
    };
    int rc = 0;
    if (host->table->gather(host->cpu, &g) != NVFP4_MLA_OK) {
        rc = cli_fail(cmd, "%s", host->table->last_error());
    }
    free(slots);
    free(cache);
    return rc;
}
