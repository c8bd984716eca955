/* A context: one device, its backend ops and runtime capabilities, the host's log sink.
 * All state of the plugin lives here (no globals beyond the const table). */
#ifndef NVFP4_MLA_PLUGIN_CONTEXT_H
#define NVFP4_MLA_PLUGIN_CONTEXT_H

#include "codec.h"
#include "nvfp4_mla.h"

struct nvfp4_mla_context {
    int32_t device_type;
    int32_t device_index;
    uint64_t capability_bits;
    const nvfp4_mla_backend_ops_t *ops;
    nvfp4_mla_host_desc_t host; /* copy of the host's descriptor; log NULL when none was given */
    char device_name[128];
    char backend_note[192];
    nvfp4_mla_cuda_limits_t cuda;   /* CUDA contexts: the device as read at init, smem after the cap */
    int32_t attend_force_mma_sync;  /* NVFP4_MLA_ATTEND_MMA=sync */
};

nvfp4_mla_status_t nvfp4_context_init(const nvfp4_mla_init_args_t *args, nvfp4_mla_context_t **out);
nvfp4_mla_status_t nvfp4_context_shutdown(nvfp4_mla_context_t *ctx);
nvfp4_mla_status_t nvfp4_context_info(const nvfp4_mla_context_t *ctx, nvfp4_mla_context_info_t *info);

/* Fails with UNSUPPORTED naming `capability` unless the context's device serves every bit of `need`. */
nvfp4_mla_status_t nvfp4_context_require(const nvfp4_mla_context_t *ctx, const char *op, uint64_t need);

#if NVFP4_MLA_HAVE_CUDA
/* kernels/cuda_device.cu: can this process run our kernels on `ordinal`? 0 = yes; otherwise `note`
 * says why (no driver, no device, architecture not in the fatbin). */
int nvfp4_mla_cuda_probe(int ordinal, char *name, size_t name_size, char *note, size_t note_size,
                         nvfp4_mla_cuda_limits_t *limits);
/* Once per context, with the limits decided: attribute settings the launches rely on. */
int nvfp4_mla_cuda_prepare(int ordinal, int smem_per_block, char *note, size_t note_size);
extern const nvfp4_mla_backend_ops_t nvfp4_mla_cuda_ops;
#endif

#endif
