/* A context: one device, its backend ops and runtime capabilities, the host's log sink.
 * All state of the plugin lives here (no globals beyond the const tables). The backends, their
 * tables and the CUDA probe are declared in kernels/backends.h. */
#ifndef NVFP4_MLA_PLUGIN_CONTEXT_H
#define NVFP4_MLA_PLUGIN_CONTEXT_H

#include "backends.h"
#include "nvfp4_mla.h"

/* A live context's first word; shutdown clears it before freeing. A pointer that is not a live context
 * (shut down already, a configuration passed as a context, garbage) is refused by name instead of
 * being freed twice or read as one: the check costs one comparison per call. (After free the memory is
 * the allocator's: the check catches what the allocator leaves there, not every reuse.) */
#define NVFP4_CONTEXT_MAGIC 0x7843344Eu /* "N4Cx" */

struct nvfp4_mla_context {
    uint32_t magic;                     /* NVFP4_CONTEXT_MAGIC while the context lives */
    int32_t device_type;                /* NVFP4_MLA_DEVICE_*, as passed to init */
    int32_t device_index;               /* CUDA ordinal; 0 for the CPU */
    uint64_t capability_bits;           /* runtime NVFP4_MLA_CAP_* bits of this device */
    const nvfp4_mla_backend_ops_t *ops; /* nvfp4_mla_cpu_ops or nvfp4_mla_cuda_ops; static */
    nvfp4_mla_host_desc_t host; /* copy of the host's descriptor; log NULL when none was given */
    char device_name[128];
    char backend_note[192];
    nvfp4_mla_cuda_limits_t cuda;   /* CUDA contexts: the device as read at init, smem after the cap */
    int32_t attend_force_mma_sync;  /* NVFP4_MLA_ATTEND_MMA=sync */
    int32_t attend_merge_mode;      /* NVFP4_ATTEND_MERGE_*, from NVFP4_MLA_ATTEND_MERGE */
    int32_t attend_graphs;          /* 1: repeated eager attends may launch as prebuilt graphs
                                       (NVFP4_MLA_ATTEND_GRAPHS=auto, the default); 0: off */
    nvfp4_attend_launches_t *attend_launches; /* CUDA: eager calls' prebuilt launches (attend_launches.h),
                                                 made by the first attend that needs it, released by shutdown */
};

nvfp4_mla_status_t nvfp4_context_init(const nvfp4_mla_init_args_t *args, nvfp4_mla_context_t **out);
nvfp4_mla_status_t nvfp4_context_shutdown(nvfp4_mla_context_t *ctx);
nvfp4_mla_status_t nvfp4_context_info(const nvfp4_mla_context_t *ctx, nvfp4_mla_context_info_t *info);

/* The attention kernel's settings (rows of settings.h's table), looked up in `environ` (the host's
 * snapshot; NULL: the process environment), each unset or "" = its default:
 *   NVFP4_MLA_ATTEND_SMEM_CAP (decimal bytes in [16384, INT32_MAX], lowers *smem_per_block),
 *   NVFP4_MLA_ATTEND_MMA ("auto" or "sync", sets *force_mma_sync),
 *   NVFP4_MLA_ATTEND_MERGE ("auto", "separate" or "in-launch", sets *merge_mode to
 *   NVFP4_ATTEND_MERGE_AUTO, _SEPARATE or _IN_LAUNCH),
 *   NVFP4_MLA_ATTEND_GRAPHS ("auto" sets *graphs to 1, "off" to 0).
 * ERR_CONFIG naming the variable and its quoted value otherwise, every output left as it was. */
nvfp4_mla_status_t nvfp4_attend_settings_parse(const char *const *environ, int32_t *smem_per_block,
                                               int32_t *force_mma_sync, int32_t *merge_mode, int32_t *graphs);

/* INVALID_ARGUMENT naming `op` unless ctx is a live context (not NULL, its magic set). */
nvfp4_mla_status_t nvfp4_context_check(const nvfp4_mla_context_t *ctx, const char *op);

/* Fails with UNSUPPORTED naming `capability` unless the context's device serves every bit of `need`
 * (and as nvfp4_context_check for a context that is not live). */
nvfp4_mla_status_t nvfp4_context_require(const nvfp4_mla_context_t *ctx, const char *op, uint64_t need);

#endif
