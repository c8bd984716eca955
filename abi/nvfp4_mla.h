/* nvfp4-mla ABI 1: the plugin table and its one exported entry.
 *
 * A host dlopen()s the plugin, looks up NVFP4_MLA_ENTRY_SYMBOL, calls it, and checks the header:
 * magic, abi_major == NVFP4_MLA_ABI_MAJOR, struct_size >= the size of the fields it will read.
 * Minor versions only append members; a host compiled against 1.N reads a member added after 1.0
 * only when header.struct_size covers it (NVFP4_MLA_TABLE_HAS). Thread rules used below:
 *   [any-thread]      callable from any thread at any time, concurrently with anything;
 *   [context-thread]  callable from any thread, but not concurrently on the same context;
 *   [stream-ordered]  enqueues work on the caller's stream and returns before it finishes
 *                     (CPU contexts finish before returning); never synchronises the device and
 *                     is safe inside CUDA graph capture.
 * Every function returns a status; on failure the thread's last_error() names what was wrong and
 * nothing was written to caller buffers unless the member says otherwise.
 */
#ifndef NVFP4_MLA_H
#define NVFP4_MLA_H

#include "nvfp4_mla_config.h"
#include "nvfp4_mla_ops.h"
#include "nvfp4_mla_record.h"
#include "nvfp4_mla_types.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NVFP4_MLA_ABI_MAGIC 0x4D34464Eu /* "NF4M" in little-endian bytes */
#define NVFP4_MLA_ABI_MAJOR 1
#define NVFP4_MLA_ABI_MINOR 1
#define NVFP4_MLA_ENTRY_SYMBOL "nvfp4_mla_plugin_v1"
#define NVFP4_MLA_PLUGIN_ENV "NVFP4_MLA_PLUGIN"
#define NVFP4_MLA_RECORD_FORMAT "nvfp4_ds_mla"

/* Frozen forever: a host of any version can read these four fields of any plugin. */
typedef struct nvfp4_mla_header {
    uint32_t magic;       /* NVFP4_MLA_ABI_MAGIC */
    uint32_t struct_size; /* sizeof the plugin's whole table */
    uint16_t abi_major;   /* NVFP4_MLA_ABI_MAJOR the plugin implements */
    uint16_t abi_minor;   /* NVFP4_MLA_ABI_MINOR the plugin implements */
    uint32_t reserved;    /* zero */
} nvfp4_mla_header_t;

typedef struct nvfp4_mla_plugin {
    nvfp4_mla_header_t header;

    /* ---- Build information: static strings owned by the plugin, valid while it is loaded. ---- */
    const char *plugin_name;   /* "nvfp4-mla" */
    const char *version;       /* build version, e.g. "0.1.0" */
    const char *git_revision;  /* commit the build came from, "unknown" outside git */
    const char *cuda_archs;    /* architectures in the fatbin, e.g. "sm_90,sm_100a,sm_120a"; "" = CPU only */
    const char *record_format; /* NVFP4_MLA_RECORD_FORMAT */

    /* ---- Compiled capabilities: what this binary carries, before any device call. ---- */
    uint64_t capability_bits;  /* OR of the NVFP4_MLA_CAP_* bits of `capabilities` */
    uint32_t capability_count; /* entries in `capabilities` */
    uint32_t reserved0;        /* zero */
    const nvfp4_mla_capability_t *capabilities; /* [capability_count], static, owned by the plugin */

    /* [any-thread] Name of a status code ("NVFP4_MLA_OK", ...; "unknown status" for others).
     * Returns a static string; never fails. */
    const char *(*status_string)(nvfp4_mla_status_t status);

    /* [any-thread] The calling thread's last error message: which argument, bound, file or key was
     * wrong. Owned by the plugin, valid until this thread's next plugin call. "" when none. */
    const char *(*last_error)(void);

    /* [any-thread] Create a context on a device. On success *out is a new context the host owns and
     * releases with shutdown. On failure *out is NULL (unless `out` itself is NULL) and the host
     * calls nothing else on it; the status says why:
     *   INVALID_ARGUMENT  out or args NULL; flags or reserved not zero; a device_type other than
     *                     cpu or cuda; a device_index other than 0 (cpu) or below 0 (cuda); a larger
     *                     args or host struct with a non-zero field this ABI does not know;
     *   VERSION           args->struct_size or host->struct_size below the ABI 1.0 size;
     *   OUT_OF_MEMORY     the context cannot be allocated;
     *   UNSUPPORTED       a CUDA device that is unusable (no driver, no such ordinal, an
     *                     architecture not in the fatbin) or a build without the CUDA backend;
     *   CONFIG            (cuda) an attention setting of args->environ or the process environment
     *                     (NVFP4_MLA_ATTEND_SMEM_CAP, NVFP4_MLA_ATTEND_MMA, NVFP4_MLA_ATTEND_MERGE,
     *                     NVFP4_MLA_ATTEND_GRAPHS) that
     *                     the settings rule does not take, named with its quoted value;
     *   DEVICE            (cuda) the kernels' shared-memory limits cannot be set on the device;
     *   INTERNAL          a bug in the plugin. */
    nvfp4_mla_status_t (*init)(const nvfp4_mla_init_args_t *args, nvfp4_mla_context_t **out);

    /* [context-thread] Release a context and everything it holds; NULL is accepted (OK). The host
     * first finishes (or synchronises) the work it enqueued with the context. A pointer that is not a
     * live context (released already, or a configuration) is INVALID_ARGUMENT and nothing is freed, as
     * far as a magic word in the context can tell: calling on a released context is a host bug. */
    nvfp4_mla_status_t (*shutdown)(nvfp4_mla_context_t *ctx);

    /* [any-thread] Runtime capabilities of a context's device; fills *info up to info->struct_size.
     * Fails with INVALID_ARGUMENT on a NULL or too-small info. */
    nvfp4_mla_status_t (*context_info)(const nvfp4_mla_context_t *ctx, nvfp4_mla_context_info_t *info);

    /* [any-thread] Build the immutable cache-format configuration (docs/record-format.md 6 and 7) from the
     * environment (or request->environ), the cache dtype and the checkpoint. *out is owned by the
     * host (config_destroy). Boolean variables accept unset or "" (off), 0/1 and false/true in any
     * case; VLLM_NVFP4_MLA_SCALES_FILE is taken stripped of surrounding ASCII whitespace, as the
     * runtime that defines it reads it ("" after stripping: unset); NVFP4_MLA_WRITER_POLICY (ABI
     * 1.1) is unset or "" (rtn) or a policy's name in any case. Fails closed: any other boolean or
     * policy value, mutually exclusive modes, per-token without the 368 layout, an unreadable or
     * invalid scales file or checkpoint field, a model_dir that is not a folder holding a readable
     * config.json are NVFP4_MLA_ERR_CONFIG (or ERR_IO) with the variable, its quoted value (and the
     * accepted names), file and key named; *out is then NULL. */
    nvfp4_mla_status_t (*config_create)(const nvfp4_mla_config_request_t *request,
                                        nvfp4_mla_config_t **out);

    /* [any-thread] Describe a configuration; fills *info up to info->struct_size (at least the 1.0
     * size, else ERR_VERSION) and sets struct_size to the bytes filled. Strings are owned by the
     * configuration and live until config_destroy. */
    nvfp4_mla_status_t (*config_info)(const nvfp4_mla_config_t *config, nvfp4_mla_config_info_t *info);

    /* [any-thread] The static outer scale of `layer` (1.0 for layers past the calibration, and for
     * uncalibrated static mode; 0.0 in per-token mode, where the records carry it). */
    nvfp4_mla_status_t (*config_layer_scale)(const nvfp4_mla_config_t *config, uint32_t layer,
                                             float *scale_out);

    /* [any-thread, not concurrently with other calls on the same config] Release a configuration;
     * NULL is accepted. Never fails: a pointer that is not a live configuration (destroyed already) is
     * ignored, as far as its magic word can tell; the other config entries refuse it
     * (INVALID_ARGUMENT). */
    void (*config_destroy)(nvfp4_mla_config_t *config);

    /* [stream-ordered][context-thread] Quantise tokens into cache records (nvfp4_mla_ops.h).
     * Writes only the addressed records (and the optional capture/counter). Returns UNSUPPORTED when
     * the context's device lacks op.write (or the requested layout/mode capability); INVALID_ARGUMENT
     * for a bad descriptor, one addressing more than 2^48 bytes, or an output (the cache, a counter)
     * sharing a byte with another argument. */
    nvfp4_mla_status_t (*write)(nvfp4_mla_context_t *ctx, const nvfp4_mla_write_args_t *args);

    /* [stream-ordered][context-thread] Dequantise records by slot to bf16 rows. Writes only `out`.
     * UNSUPPORTED without op.gather; INVALID_ARGUMENT as write's, `out` overlapping the cache or slots
     * included. */
    nvfp4_mla_status_t (*gather)(nvfp4_mla_context_t *ctx, const nvfp4_mla_gather_args_t *args);

    /* [context-thread] Scratch bytes `attend` needs for these shapes (0 = none). Reads shapes only,
     * never data pointers. UNSUPPORTED without op.attend. */
    nvfp4_mla_status_t (*attend_workspace_bytes)(nvfp4_mla_context_t *ctx,
                                                 const nvfp4_mla_attend_args_t *args,
                                                 uint64_t *bytes_out);

    /* [stream-ordered][context-thread] Sparse MLA attention over the records (nvfp4_mla_ops.h).
     * Writes only out, lse and workspace. UNSUPPORTED without op.attend; INVALID_ARGUMENT as write's,
     * out, lse or the workspace overlapping another argument included. */
    nvfp4_mla_status_t (*attend)(nvfp4_mla_context_t *ctx, const nvfp4_mla_attend_args_t *args);

    /* ---- ABI 1.1: read only when NVFP4_MLA_TABLE_HAS(table, merge) (a 1.0 table ends above). ---- */

    /* [stream-ordered][context-thread] Merge P partial attentions into one (nvfp4_mla_ops.h): the
     * combine step of decode context parallelism; the host owns the communicator. The arrays are
     * borrowed: read partial_out and partial_lse, write only out and lse, keep nothing past the work
     * enqueued. Fails before writing anything: UNSUPPORTED without op.merge_partials;
     * INVALID_ARGUMENT for a bad descriptor, more than 65536 partials, outputs that overlap each other
     * or the inputs, or (CPU) a NaN or +inf lse; DEVICE when the launch fails. */
    nvfp4_mla_status_t (*merge)(nvfp4_mla_context_t *ctx, const nvfp4_mla_merge_args_t *args);
} nvfp4_mla_plugin_t;

/* Every plugin of ABI major 1 carries at least the members before config_create (build
 * information, capabilities, status/error text, init/shutdown/context_info); a host reads any later
 * member only after NVFP4_MLA_TABLE_HAS says the plugin's table is long enough to hold it, and treats
 * an operation whose member is missing as an absent capability. Every member that struct_size
 * covers is set (never NULL; an operation a device lacks returns UNSUPPORTED): the loaders refuse a
 * table with a NULL one, naming it. */
#define NVFP4_MLA_TABLE_MIN_SIZE offsetof(nvfp4_mla_plugin_t, config_create)

/* True when a plugin table of header.struct_size bytes carries `member`. */
#define NVFP4_MLA_TABLE_HAS(table, member)                                                       \
    ((table)->header.struct_size >= offsetof(nvfp4_mla_plugin_t, member) + sizeof((table)->member))

/* The one exported symbol of ABI major 1. Pure: no allocation, no I/O, no CUDA call, no
 * environment read; returns the same static table on every call, from any thread. */
typedef const nvfp4_mla_plugin_t *(*nvfp4_mla_entry_fn)(void);

/* Marks the entry's definition for export (the plugin builds with -fvisibility=hidden). */
#ifndef NVFP4_MLA_EXPORT
#if defined(__GNUC__) || defined(__clang__)
#define NVFP4_MLA_EXPORT __attribute__((visibility("default")))
#else
#define NVFP4_MLA_EXPORT
#endif
#endif

/* [any-thread] The entry itself, declared so that the compiler checks the plugin's definition
 * against this contract. A host does not link it: it looks NVFP4_MLA_ENTRY_SYMBOL up with dlsym()
 * in the plugin it dlopen()ed (the loaders do), and calls it through nvfp4_mla_entry_fn. Returns
 * the plugin's static table, owned by the plugin and valid while it is loaded; never NULL, never
 * fails. */
NVFP4_MLA_EXPORT const nvfp4_mla_plugin_t *nvfp4_mla_plugin_v1(void);

#ifdef __cplusplus
}
#endif
#endif /* NVFP4_MLA_H */
