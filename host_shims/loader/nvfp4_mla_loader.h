/* The C host loader: find the nvfp4-mla plugin, check it, and decide whether it can serve the
 * cache configuration this host wants (docs/architecture.md, "Flow of one request").
 *
 * Selection: NVFP4_MLA_PLUGIN (read with secure_getenv; a row of the plugin's settings table, which
 * this library compiles in, plugin/settings.c, because it is read before any plugin exists) is a
 * path to the .so, or a folder holding libnvfp4_mla.so; "none" (exactly) disables the plugin. A
 * path is taken as a path, never searched: a name without a slash ("libnvfp4_mla.so") is the file
 * of that name in the working folder ("./libnvfp4_mla.so"), not whatever the dynamic loader's search
 * path finds under it. A value with leading or trailing whitespace is refused, as is a
 * keyword-like value ("None", "0", "off", ...) that names no file: the same rule
 * as the plugin's own path settings (plugin/settings.h). Before dlopen the file is checked, since
 * dlopen trusts what it maps and a damaged file kills the host inside it: its ELF shape (a file cut
 * short is named with its size), then its SHA-256 against the digest file the build and `meson
 * install` write beside it (libnvfp4_mla.so.sha256); a plugin without one is dlopen()ed in a forked
 * child first, and a file that kills the child is refused (docs/integration.md section 2). The loader
 * dlopen()s with RTLD_NOW|RTLD_LOCAL, looks up the one entry symbol, and checks magic, ABI major, the minimum
 * table size and that every member the table's struct_size covers is filled (a NULL entry point
 * would crash the host on its first call) before the host reads anything else. `require` names the
 * plugin path, both ABI versions and every missing capability when it refuses. Thread rules:
 * open/close once per process (not concurrently with each other); require and the table's
 * [any-thread] members from any thread. Installed with its library and nvfp4-mla.pc: a host builds
 * with `pkg-config --cflags --libs nvfp4-mla` and may select the installed plugin by its folder,
 * `pkg-config --variable=plugindir nvfp4-mla`.
 */
#ifndef NVFP4_MLA_LOADER_H
#define NVFP4_MLA_LOADER_H

#include <stddef.h>

#include "nvfp4_mla.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NVFP4_MLA_PLUGIN_FILE "libnvfp4_mla.so"

/* Outcome of open: the plugin is usable, deliberately off, not selected, or refused. */
#define NVFP4_MLA_LOAD_OK 0
#define NVFP4_MLA_LOAD_DISABLED 1     /* selection is "none" */
#define NVFP4_MLA_LOAD_NOT_SELECTED 2 /* no selection: NVFP4_MLA_PLUGIN unset or empty */
#define NVFP4_MLA_LOAD_FAILED 3       /* missing file, not a plugin, wrong ABI: see the message */

/* Machine-readable reasons (nvfp4_mla_loader_t.reason, `probe --json`'s "reason"): static strings. */
#define NVFP4_MLA_REASON_NONE ""                           /* loaded */
#define NVFP4_MLA_REASON_DISABLED "disabled"               /* selection "none" */
#define NVFP4_MLA_REASON_NOT_SELECTED "not_selected"       /* unset or empty */
#define NVFP4_MLA_REASON_INVALID_SELECTION "invalid_selection" /* whitespace, keyword-like, too long */
#define NVFP4_MLA_REASON_NOT_FOUND "not_found"             /* no such file */
#define NVFP4_MLA_REASON_LOAD_ERROR "load_error"           /* dlopen failed on an existing file */
#define NVFP4_MLA_REASON_NOT_A_PLUGIN "not_a_plugin"       /* no entry symbol, no table, wrong magic */
#define NVFP4_MLA_REASON_ABI_MISMATCH "abi_mismatch"       /* other ABI major, table too small */
#define NVFP4_MLA_REASON_INCOMPLETE_TABLE "incomplete_table" /* a covered member is NULL */

typedef struct nvfp4_mla_loader {
    void *handle;                     /* dlopen handle; owned, released by close */
    const nvfp4_mla_plugin_t *table;  /* the plugin's table; valid until close */
    char path[4096];                  /* the file that was (or would have been) opened */
    const char *reason;               /* NVFP4_MLA_REASON_* of the last open; static string */
} nvfp4_mla_loader_t;

/* Opens the plugin named by `selection` (NULL: NVFP4_MLA_PLUGIN). On anything but LOAD_OK the loader
 * holds nothing, `reason` classifies the failure and `message` (always NUL-terminated, may be NULL)
 * says why in words. */
int nvfp4_mla_loader_open(nvfp4_mla_loader_t *loader, const char *selection, char *message, size_t message_size);

/* dlclose()s the plugin; safe on a loader that holds nothing. The host first shuts down every
 * context and destroys every configuration it made. */
void nvfp4_mla_loader_close(nvfp4_mla_loader_t *loader);

/* The cache configuration a host wants served. */
typedef struct nvfp4_mla_requirement {
    uint32_t layout;         /* NVFP4_MLA_LAYOUT_* */
    uint32_t scale_mode;     /* NVFP4_MLA_SCALE_* */
    uint64_t extra_caps;     /* further NVFP4_MLA_CAP_* bits the host will call (e.g. OP_ATTEND,
                                OP_MERGE_PARTIALS for decode context parallelism, or
                                nvfp4_mla_writer_policy_cap() of the configuration's writer_policy) */
    int user_requested;      /* 1: the user asked for this mode: refuse loudly if anything is missing */
} nvfp4_mla_requirement_t;

/* The capability bits `want` needs: nvfp4_mla_caps_needed (nvfp4_mla_record.h) of write, gather and
 * any operation in extra_caps for its layout and mode (per-token: the writer's per_token_scale and
 * the readers' latent_scale_per_token; static: static_outer), and extra_caps. */
uint64_t nvfp4_mla_requirement_caps(const nvfp4_mla_requirement_t *want);

/* The bits a table really offers: its capability bits, minus operations its struct_size cannot hold
 * (a 1.0 table has no merge member, so op.merge_partials is masked there whatever its bits say). */
uint64_t nvfp4_mla_loader_table_caps(const nvfp4_mla_loader_t *loader);

/* Accepts (0) or refuses (-1) `want` against `available` (the table's compiled bits from
 * nvfp4_mla_loader_table_caps, or a context's runtime bits after init). A refusal's message names the
 * plugin path, the plugin's and the host's ABI versions and each missing capability. A layout or scale
 * mode with no NVFP4_MLA_* name, or per-token scales on a layout without the s_t field (432, 656), is
 * refused whatever the bits say, naming it. */
int nvfp4_mla_loader_require(const nvfp4_mla_loader_t *loader, const nvfp4_mla_requirement_t *want, uint64_t available,
                             char *message, size_t message_size);

/* The persistent-cache identity (docs/record-format.md section 6) for `cache_dtype`, computed by the
 * plugin from the process environment and the checkpoint in `model_dir` (may be NULL), so that every
 * host gets the same string. 0 and the identity in `identity` (always NUL-terminated), or -1 and the
 * plugin's reason in `identity`. */
int nvfp4_mla_loader_cache_identity(const nvfp4_mla_loader_t *loader, const char *cache_dtype, const char *model_dir,
                                    char *identity, size_t identity_size);

/* The writer policy NVFP4_MLA_WRITER_POLICY asks for in `environ` (a NULL-terminated "NAME=VALUE"
 * snapshot; NULL: the process environment), by the plugin's own settings rule (this library carries
 * the plugin's settings table, plugin/settings.c). A host asks the plugin instead (config_info's
 * writer_policy); this is for a plugin too old to answer, an ABI 1.0 one, whose config_info ends
 * before writer_policy and which ignores the variable: a policy the user asked for must not vanish
 * silently there. 0 and *policy (NVFP4_MLA_WRITER_POLICY_RTN when unset or empty), or -1 and
 * `message` in the plugin's words (the variable, its quoted value and the accepted names). */
int nvfp4_mla_loader_writer_policy(const char *const *environ, uint32_t *policy, char *message, size_t message_size);

/* Name of a capability bit known to this host's header ("unknown" otherwise). */
const char *nvfp4_mla_loader_cap_name(uint64_t bit);

#ifdef __cplusplus
}
#endif
#endif
