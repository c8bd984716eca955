/* Every environment variable nvfp4-mla reads, in one table, and the one rule each is parsed by:
 * booleans, paths, choices and counts.
 *
 * The table (nvfp4_settings, below) names each variable, its kind, what unset means and the call
 * that reads it: the configuration (config_create: VLLM_NVFP4_MLA_DYNAMIC_SCALE, KV_FP8_ROPE,
 * VLLM_NVFP4_MLA_SCALES_FILE, NVFP4_MLA_WRITER_POLICY), a CUDA context's init
 * (NVFP4_MLA_ATTEND_SMEM_CAP, NVFP4_MLA_ATTEND_MMA, NVFP4_MLA_ATTEND_MERGE, NVFP4_MLA_ATTEND_GRAPHS) and the
 * host loader
 * (NVFP4_MLA_PLUGIN, read before any plugin exists, so the loader library compiles this file too)
 * and the vLLM plugin (NVFP4_MLA_UNCALIBRATED, reader "vllm_plugin": with no calibration, the 432-byte
 * record is refused there unless this opt-in asks for static scale 1.0 on every layer; no C code reads it,
 * the row keeps the variable in the one table and under the one rule).
 * The plugin reads its rows only through nvfp4_setting_read, from the snapshot the host passed
 * (config_create's request->environ, init's args->environ) or, without one, the process
 * environment. The Python shim mirrors the table and the rule (host_shims/python/nvfp4_mla/
 * settings.py); the build's layout manifest prints both, and its test compares them row for row
 * and message for message.
 *
 * Why strict: a value the old parser did not understand ("true", "yes", "1 ") silently meant off, which
 * ran a server on static scales at 1.0 when the user asked for per-token scales; a whitespace-only
 * scales file silently meant uncalibrated. Now:
 *   boolean  unset or "" is off; "0"/"false" off and "1"/"true" on, in any case; anything else fails;
 *   path     unset or "" is none; leading or trailing whitespace fails (it is never part of a path a
 *            user meant, and trimming it hid mistakes). One exception, where the runtime the
 *            variable comes from set the convention: VLLM_NVFP4_MLA_SCALES_FILE is read there as
 *            os.getenv(name, "").strip(), so deployments carry values such as " /x/s.json\n" that
 *            work there; it takes the stripped path (ASCII whitespace: " \t\n\v\f\r"), and empty
 *            after stripping is none (nvfp4_setting_path_stripped). NVFP4_MLA_PLUGIN, which has no
 *            such convention, keeps refusing whitespace.
 *   choice   unset or "" is the default (the first name); one of the names in any case; anything
 *            else fails (whitespace included), listing the names.
 *   count    unset or "" is the caller's default; decimal digits only, within the bounds the
 *            message gives (NVFP4_MLA_ATTEND_SMEM_CAP).
 * A failure message names the variable, shows the value quoted (control, quote, backslash and
 * non-ASCII bytes escaped, so whitespace shows) and says what is accepted. No I/O, no state: the
 * functions are safe from any thread (nvfp4_setting_lookup without a snapshot reads the process
 * environment through secure_getenv, as safe as the host's own setenv calls let it be).
 */
#ifndef NVFP4_MLA_PLUGIN_SETTINGS_H
#define NVFP4_MLA_PLUGIN_SETTINGS_H

#include <stddef.h>

/* Enough for any message below (the quoted value is cut at NVFP4_SETTING_QUOTE_MAX bytes). */
#define NVFP4_SETTING_MESSAGE_MAX 768
#define NVFP4_SETTING_QUOTE_MAX 100
/* Bytes of nvfp4_setting_quote's output for any value (every byte escaped as \xHH, quotes, "..."). */
#define NVFP4_SETTING_QUOTED_MAX (NVFP4_SETTING_QUOTE_MAX * 4 + 8)

/* `value` NULL means unset. 0 and *on = 0 or 1, or -1 and `message` (NUL-terminated) says why. */
int nvfp4_setting_bool(const char *name, const char *value, int *on, char *message, size_t message_size);

/* `value` NULL means unset. 0 and the path in `out` ("" = none), or -1 and `message` says why
 * (surrounding whitespace, or longer than out_size - 1 bytes); `out` is then "". */
int nvfp4_setting_path(const char *name, const char *value, char *out, size_t out_size, char *message,
                       size_t message_size);

/* The same path with ASCII whitespace (" \t\n\v\f\r") stripped from both ends first, as the runtime
 * that defines the variable strips it; "" after stripping is none. -1 and `message` only when the
 * stripped path is longer than out_size - 1 bytes. */
int nvfp4_setting_path_stripped(const char *name, const char *value, char *out, size_t out_size, char *message,
                                size_t message_size);

/* A choice among `count` names (`names[0]` is the default). `value` NULL means unset. 0 and *index:
 * 0 for unset or "", else the position of the name `value` equals with ASCII case ignored; or -1
 * and `message` names the variable, shows the value quoted and lists every accepted name. */
int nvfp4_setting_choice(const char *name, const char *value, const char *const *names, int count, int *index,
                         char *message, size_t message_size);

/* A decimal count in [lo, hi] (digits only; `what` names it in the message, `none` says what unset
 * means). `value` NULL means unset. 0 and *out (left as it was for unset or ""), or -1 and
 * `message` names the variable, shows the value quoted and gives the bounds. */
int nvfp4_setting_count(const char *name, const char *value, const char *what, unsigned long long lo,
                        unsigned long long hi, const char *none, unsigned long long *out, char *message,
                        size_t message_size);

/* `value` between double quotes, escaped as above and cut after NVFP4_SETTING_QUOTE_MAX bytes ("..."
 * follows the closing quote then). Always NUL-terminated. */
void nvfp4_setting_quote(const char *value, char *out, size_t out_size);


/* ---- the table ---- */

/* The variables' names, for messages that name them; the table below is where each is defined. */
#define NVFP4_ENV_DYNAMIC_SCALE "VLLM_NVFP4_MLA_DYNAMIC_SCALE"
#define NVFP4_ENV_FP8_ROPE "KV_FP8_ROPE"
#define NVFP4_ENV_SCALES_FILE "VLLM_NVFP4_MLA_SCALES_FILE"
#define NVFP4_ENV_WRITER_POLICY "NVFP4_MLA_WRITER_POLICY"
#define NVFP4_ENV_ATTEND_SMEM_CAP "NVFP4_MLA_ATTEND_SMEM_CAP"
#define NVFP4_ENV_ATTEND_MMA "NVFP4_MLA_ATTEND_MMA"
#define NVFP4_ENV_ATTEND_MERGE "NVFP4_MLA_ATTEND_MERGE"
#define NVFP4_ENV_ATTEND_GRAPHS "NVFP4_MLA_ATTEND_GRAPHS"
#define NVFP4_ENV_UNCALIBRATED "NVFP4_MLA_UNCALIBRATED"

typedef enum nvfp4_setting_kind {
    NVFP4_SETTING_KIND_BOOL,          /* nvfp4_setting_bool */
    NVFP4_SETTING_KIND_PATH,          /* nvfp4_setting_path */
    NVFP4_SETTING_KIND_PATH_STRIPPED, /* nvfp4_setting_path_stripped */
    NVFP4_SETTING_KIND_CHOICE,        /* nvfp4_setting_choice over the row's choices */
    NVFP4_SETTING_KIND_COUNT,         /* nvfp4_setting_count within the row's bounds */
} nvfp4_setting_kind_t;

/* The rows, in table order. */
typedef enum nvfp4_setting_id {
    NVFP4_SETTING_DYNAMIC_SCALE,   /* VLLM_NVFP4_MLA_DYNAMIC_SCALE: per-token scales */
    NVFP4_SETTING_FP8_ROPE,        /* KV_FP8_ROPE: the 368-byte record */
    NVFP4_SETTING_SCALES_FILE,     /* VLLM_NVFP4_MLA_SCALES_FILE: the static calibration file */
    NVFP4_SETTING_WRITER_POLICY,   /* NVFP4_MLA_WRITER_POLICY: the writer's rounding policy */
    NVFP4_SETTING_ATTEND_SMEM_CAP, /* NVFP4_MLA_ATTEND_SMEM_CAP: caps the attention's shared memory */
    NVFP4_SETTING_ATTEND_MMA,      /* NVFP4_MLA_ATTEND_MMA: "sync" forces the mma.sync consumers */
    NVFP4_SETTING_ATTEND_MERGE,    /* NVFP4_MLA_ATTEND_MERGE: how split-K partials are merged */
    NVFP4_SETTING_ATTEND_GRAPHS,   /* NVFP4_MLA_ATTEND_GRAPHS: "off" keeps repeated eager calls off prebuilt graphs */
    NVFP4_SETTING_PLUGIN,          /* NVFP4_MLA_PLUGIN: the plugin file or folder (host loaders) */
    NVFP4_SETTING_UNCALIBRATED,    /* NVFP4_MLA_UNCALIBRATED: the vLLM plugin may serve static 1.0 on every layer */
    NVFP4_SETTINGS                 /* the number of rows */
} nvfp4_setting_id_t;

typedef struct nvfp4_setting {
    const char *name;            /* the variable */
    nvfp4_setting_kind_t kind;
    const char *reader;          /* who reads it: "config_create", "init" (CUDA contexts), "loader" (hosts)
                                  * or "vllm_plugin" (host_shims/python/nvfp4_mla/vllm_plugin) */
    const char *unset;           /* what unset or "" means, in the words of the messages */
    const char *const *choices;  /* CHOICE: the names in index order, [0] the default; else NULL */
    int choice_count;            /* CHOICE: entries in choices; else 0 */
    const char *what;            /* COUNT: what the number is ("a decimal byte count"); else NULL */
    unsigned long long lo, hi;   /* COUNT: the accepted range; else 0 */
} nvfp4_setting_t;

/* The table, indexed by nvfp4_setting_id_t: static, never changes. */
extern const nvfp4_setting_t nvfp4_settings[NVFP4_SETTINGS];

/* A parsed value; which member is set depends on the row's kind. */
typedef struct nvfp4_setting_value {
    int on;                   /* BOOL: 0 or 1 */
    int index;                /* CHOICE: the position in choices, 0 for unset or "" */
    unsigned long long count; /* COUNT: the number; left as the caller primed it for unset or "" */
    char *path;               /* PATH kinds: the caller's buffer of path_size bytes; "" = none */
    size_t path_size;
} nvfp4_setting_value_t;

/* `name`'s value in `environ` (a NULL-terminated array of "NAME=VALUE" strings: the host's
 * snapshot), or in the process environment (secure_getenv) when environ is NULL; NULL when unset. */
const char *nvfp4_setting_lookup(const char *const *environ, const char *name);

/* `value` (NULL: unset) by `setting`'s rule into *out: 0, or -1 and `message` (NUL-terminated). */
int nvfp4_setting_parse(const nvfp4_setting_t *setting, const char *value, nvfp4_setting_value_t *out,
                        char *message, size_t message_size);

/* Row `id` looked up in `environ` (as nvfp4_setting_lookup) and parsed: 0, or -1 and `message`. */
int nvfp4_setting_read(nvfp4_setting_id_t id, const char *const *environ, nvfp4_setting_value_t *out, char *message,
                       size_t message_size);

#endif
