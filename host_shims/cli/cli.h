/* Shared pieces of the nvfp4-mla command-line tool. The tool is a host like any runtime: it reaches
 * the plugin only through the C loader and the ABI table. */
#ifndef NVFP4_MLA_CLI_H
#define NVFP4_MLA_CLI_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

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

/* Table members (as NVFP4_MLA_CAP_* operation bits) every command of the tool may call. */
#define CLI_NEEDS_ALL                                                                                    \
    (NVFP4_MLA_CAP_OP_WRITE | NVFP4_MLA_CAP_OP_GATHER | NVFP4_MLA_CAP_OP_ATTEND | NVFP4_MLA_CAP_CONFIG_CACHE_IDENTITY)

/* Loads the plugin (--plugin value or NVFP4_MLA_PLUGIN), checks that its table holds the members of
 * the operations in `need` (an older minor's table ends before later members; the tool never reads
 * past it) and opens a CPU context. Prints one line and returns non-zero on failure.
 * cli_host_open needs CLI_NEEDS_ALL. */
int cli_host_open_for(cli_host_t *host, const char *plugin, uint64_t need);
/* nvfp4_mla_loader_open for the tool: `plugin` (--plugin; "" refused as such), else NVFP4_MLA_PLUGIN
 * when set and not empty, else the plugin installed with this tool when it is there. */
int cli_loader_open(const char *cmd, nvfp4_mla_loader_t *loader, const char *plugin, char *message, size_t size);
int cli_host_open(cli_host_t *host, const char *plugin);
void cli_host_close(cli_host_t *host);

/* One line to stderr, "nvfp4-mla <cmd>: ...", and returns 1 (the exit status of a failed command). */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Input bounds, checked on the file's size before anything is read. */
#define CLI_MAX_DATA_BYTES ((size_t)1 << 30)        /* bf16 token and record files */
#define CLI_MAX_CAPTURE_BYTES ((size_t)16 << 20)    /* calibrate's per-rank captures */
#define CLI_MAX_CALIBRATION_BYTES ((size_t)4 << 20) /* v1 files (the plugin's own limit) */

/* Parses JSON text (length-bounded) as the plugin does (nvfp4_json_read, plugin/json_text.h): a
 * refusal names its cause (empty, cut short, NaN/Infinity, nested too deep, malformed, trailing data)
 * and the byte offset, after `origin` ("x.json is empty (no JSON value)"). NULL after printing one line. */
struct cJSON;
struct cJSON *cli_json_parse(const char *cmd, const char *origin, const char *text, size_t len);

/* Reads a whole regular file of at most max_bytes (the caller frees; a NUL follows the data). A FIFO,
 * device or directory is refused without blocking. 0 on success, else one line printed and 1. */
int cli_read_file(const char *cmd, const char *path, size_t max_bytes, uint8_t **data, size_t *len);

/* Refuses (prints, returns 1) when `out` exists and is the same file (device and inode) as one of
 * the `count` inputs (NULL entries are skipped): run before anything is read or written. */
int cli_check_distinct(const char *cmd, const char *out, const char *const *inputs, int count);

/* Temporary files and folders that a fatal signal (INT, TERM, HUP, QUIT, PIPE, ALRM, XCPU, XFSZ,
 * USR1/2) must not leave behind: its handler removes them (files, then folders) and raises the signal
 * again with its default action (cleanup.c). Register with the signals held from before the path is
 * created, and forget it with them held across its rename or removal. add returns the slot, or -1
 * when the table is full or the path too long (then nothing is registered). */
#define CLI_CLEANUP_PATH_MAX 4200
void cli_signals_hold(sigset_t *old);
void cli_signals_release(const sigset_t *old);
int cli_cleanup_add(const char *path, int is_folder);
void cli_cleanup_forget(int slot);

/* An output written atomically: bytes go to `f`, a temporary file beside the target; commit
 * flushes, fsync()s and renames it over the target; on any failure (on abort, and on a fatal signal)
 * the temporary file is removed and the target is untouched. A target that is a link is replaced
 * where it leads; one that exists but is not a regular file is refused. A new file gets the mode
 * 0666 less the umask; a replaced one its permission bits (0777), never setuid, setgid or sticky:
 * the new file belongs to whoever runs the tool. Writes go through cli_out_write / cli_out_printf,
 * which keep the errno of the first failed write, so every message names the cause ("No space left
 * on device") even when a later call or the final flush reports the stream's error. */
typedef struct cli_out {
    FILE *f;              /* the temporary file; owned */
    const char *cmd;      /* for messages; borrowed */
    const char *path;     /* as the user gave it; borrowed */
    char target[4096];    /* the file that is replaced */
    char temp[CLI_CLEANUP_PATH_MAX]; /* the temporary file beside it; "" once renamed or removed */
    int cleanup;          /* its slot in the signal cleanup table (cli_cleanup_add) */
    int error;            /* errno of the first failed write; 0 while none failed */
    int synced;           /* flushed and fsync()ed */
} cli_out_t;
int cli_out_open(const char *cmd, const char *path, cli_out_t *out);
void cli_out_write(cli_out_t *out, const void *data, size_t len);
void cli_out_printf(cli_out_t *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int cli_out_sync(cli_out_t *out);   /* flush + fsync: the temporary file is complete (may be read) */
int cli_out_commit(cli_out_t *out); /* sync if needed, then rename over the target */
void cli_out_abort(cli_out_t *out);
/* open + write + commit. */
int cli_write_file(const char *cmd, const char *path, const void *data, size_t len);

/* Flags given twice are refused: the last one silently winning hid typos in scripts. */
typedef struct cli_seen {
    const char *flags[32]; /* borrowed from argv */
    int count;
} cli_seen_t;
int cli_once(const char *cmd, cli_seen_t *seen, const char *flag);

/* Strict values: the whole text, else "not an integer" / "not a number"; a number outside the
 * range, else "out of range" with the range. --scale: a positive normal float. */
int cli_parse_int(const char *cmd, const char *flag, const char *value, long long lo, long long hi, long long *out);
int cli_parse_u64(const char *cmd, const char *flag, const char *value, unsigned long long *out);
int cli_parse_real(const char *cmd, const char *flag, const char *value, double lo, double hi, double *out);
int cli_parse_scale(const char *cmd, const char *flag, const char *value, float *out);
/* Text the tool writes into JSON (calibrate's --model, --dataset, ...): well-formed UTF-8 without
 * control characters, else one line naming the flag and the byte, and 1. */
int cli_check_text(const char *cmd, const char *flag, const char *value);

/* CPU tensor descriptors for the ABI. */
/* The environment of a server that loads the static scales file `path` (VLLM_NVFP4_MLA_SCALES_FILE
 * plus KV_FP8_ROPE=1) into env[0..2] (NULL-terminated), env[0] formatted into `buf`. */
#define CLI_SCALES_ENV_MAX 4500 /* the name and the longest path the tools hold (cli_profile_t.scales_path: 4400) */
void cli_scales_env(const char *path, char buf[CLI_SCALES_ENV_MAX], const char *env[3]);
/* The plugin's nvfp4_ds_mla configuration for the environment `env`, asked for as a server asks
 * (no model folder, no host); the plugin's status, its last error on refusal. */
nvfp4_mla_status_t cli_config_for_env(cli_host_t *host, const char *const *env, nvfp4_mla_config_t **cfg);
/* The plugin's refusal (last_error) of the scales file the tool handed it as
 * VLLM_NVFP4_MLA_SCALES_FILE=`given`, in the user's terms: without the variable, which the user did
 * not set, and with `given` (a temporary file, say) named `shown` wherever it appears. */
void cli_scales_refusal(cli_host_t *host, const char *given, const char *shown, char *out, size_t size);
/* The plugin's configuration for the static scales file `path`, loaded as a server loads it; NULL
 * after one line, `refusal` (a format with two %s: `shown`, then the plugin's words as
 * cli_scales_refusal gives them) after "nvfp4-mla CMD: ". */
nvfp4_mla_config_t *cli_scales_config(cli_host_t *host, const char *cmd, const char *path, const char *shown,
                                      const char *refusal);

nvfp4_mla_tensor_t cli_tensor_2d(void *data, int32_t dtype, int64_t rows, int64_t cols, int64_t row_stride);
nvfp4_mla_tensor_t cli_tensor_1d(void *data, int32_t dtype, int64_t n);
/* A cache of `tokens` records in one block per 64 slots: [ceil(tokens/64), 64, record_bytes]. */
nvfp4_mla_tensor_t cli_cache_tensor(uint8_t *data, int64_t tokens, int32_t record_bytes);
int64_t cli_cache_bytes(int64_t tokens, int32_t record_bytes);

/* (flags.c) Parses --layout 368|432, --mode per-token|static, --scale S (each at most once), and --policy
 * rtn|mse where the command writes (`with_policy`). The values go
 * to the plugin as given, which applies the mode rule (nvfp4_mla_record.h) and refuses in its words;
 * a --scale left out becomes the mode's default (nvfp4_mla_default_outer_scale). */
typedef struct cli_codec_flags {
    uint32_t layout;        /* NVFP4_MLA_LAYOUT_*; its record bytes: nvfp4_mla_record_bytes(layout) */
    uint32_t scale_mode;    /* NVFP4_MLA_SCALE_* */
    float scale;            /* the outer_scale passed; 0 while --scale is not given */
    uint32_t writer_policy; /* NVFP4_MLA_WRITER_POLICY_* the writes pass (0 = rtn); readers take none */
} cli_codec_flags_t;

/* --policy NAME: a writer policy's name exactly as nvfp4_mla_writer_policy_name spells it. */
int cli_parse_policy(const char *cmd, const char *value, uint32_t *policy);
/* "rtn, mse": every policy name this host knows, for messages and usage. */
const char *cli_policy_names(void);

/* Bytes of one record of the flags' layout. */
int32_t cli_record_bytes(const cli_codec_flags_t *flags);
int cli_parse_codec_flag(const char *cmd, const char *flag, const char *value, cli_codec_flags_t *out,
                         cli_seen_t *seen, int with_policy);
int cli_check_codec_flags(const char *cmd, cli_codec_flags_t *flags, int need_mode);

/* Encodes / decodes T tokens through the plugin's CPU write and gather entries.
 * tokens: [T, 576] bf16 (latent then RoPE); records: [T, record_bytes]; rows: [T, 576] bf16.
 * cli_encode refuses NaN/Inf input (the plugin's nonfinite_count, which cli_encode_counted adds to
 * *nonfinite and leaves to the caller). */
int cli_encode(const char *cmd, cli_host_t *host, const cli_codec_flags_t *flags, const uint16_t *tokens,
               int64_t count, uint8_t *records);
int cli_encode_counted(const char *cmd, cli_host_t *host, const cli_codec_flags_t *flags, const uint16_t *tokens,
                       int64_t count, uint8_t *records, uint64_t *nonfinite);
int cli_decode(const char *cmd, cli_host_t *host, const cli_codec_flags_t *flags, const uint8_t *records,
               int64_t count, uint16_t *rows);

/* Subcommands. */
int cli_probe(int argc, char **argv);
int cli_encode_cmd(int argc, char **argv);
int cli_decode_cmd(int argc, char **argv);
int cli_inspect_cmd(int argc, char **argv);
int cli_quality_cmd(int argc, char **argv);

/* provenance.c: a results file's shared provenance keys (plugin, schema, date_utc, command with
 * `program` first when not NULL, cwd, environment) as a new cJSON object the caller owns and adds
 * "build" and "device" to. NULL when out of memory. */
struct cJSON *cli_provenance(const cli_host_t *host, const char *program, int argc, char **argv);
int cli_calibrate_cmd(int argc, char **argv);
int cli_demo_cmd(int argc, char **argv);

#ifdef __cplusplus
}
#endif
#endif
