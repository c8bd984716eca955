/* Shared pieces of the nvfp4-mla command-line tool. The tool is a host like any runtime: it reaches
 * the plugin only through the C loader and the ABI table. */
#ifndef NVFP4_MLA_CLI_H
#define NVFP4_MLA_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "nvfp4_mla_loader.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An open plugin and a CPU context on it. */
typedef struct cli_host {
    nvfp4_mla_loader_t loader;
    const nvfp4_mla_plugin_t *table;
    nvfp4_mla_context_t *cpu;
} cli_host_t;

/* Loads the plugin (--plugin value or NVFP4_MLA_PLUGIN) and opens a CPU context. Prints one line and
 * returns non-zero on failure. */
int cli_host_open(cli_host_t *host, const char *plugin);
void cli_host_close(cli_host_t *host);

/* One line to stderr, "nvfp4-mla <cmd>: ...", and returns 1 (the exit status of a failed command). */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Reads a whole file (the caller frees); writes one. Return 0 on success, else print and return 1. */
int cli_read_file(const char *cmd, const char *path, uint8_t **data, size_t *len);
int cli_write_file(const char *cmd, const char *path, const void *data, size_t len);

/* CPU tensor descriptors for the ABI. */
nvfp4_mla_tensor_t cli_tensor_2d(void *data, int32_t dtype, int64_t rows, int64_t cols, int64_t row_stride);
nvfp4_mla_tensor_t cli_tensor_1d(void *data, int32_t dtype, int64_t n);
/* A cache of `tokens` records in one block per 64 slots: [ceil(tokens/64), 64, record_bytes]. */
nvfp4_mla_tensor_t cli_cache_tensor(uint8_t *data, int64_t tokens, int32_t record_bytes);
int64_t cli_cache_bytes(int64_t tokens, int32_t record_bytes);

/* Parses --layout 368|432, --mode per-token|static, --scale S. */
typedef struct cli_codec_flags {
    uint32_t layout;
    int32_t record_bytes;
    uint32_t scale_mode;
    float scale;
} cli_codec_flags_t;
int cli_parse_codec_flag(const char *cmd, const char *flag, const char *value, cli_codec_flags_t *out);
int cli_check_codec_flags(const char *cmd, cli_codec_flags_t *flags, int need_mode);

/* Encodes / decodes T tokens through the plugin's CPU write and gather entries.
 * tokens: [T, 576] bf16 (latent then RoPE); records: [T, record_bytes]; rows: [T, 576] bf16. */
int cli_encode(const char *cmd, cli_host_t *host, const cli_codec_flags_t *flags, const uint16_t *tokens,
               int64_t count, uint8_t *records);
int cli_decode(const char *cmd, cli_host_t *host, const cli_codec_flags_t *flags, const uint8_t *records,
               int64_t count, uint16_t *rows);

/* Subcommands. */
int cli_probe(int argc, char **argv);
int cli_encode_cmd(int argc, char **argv);
int cli_decode_cmd(int argc, char **argv);
int cli_inspect_cmd(int argc, char **argv);
int cli_quality_cmd(int argc, char **argv);
int cli_calibrate_cmd(int argc, char **argv);
int cli_demo_cmd(int argc, char **argv);
int cli_bench_cmd(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif
