/* The backends side by side: the dispatch table of the record operations, the CPU and CUDA tables,
 * every backend entry point and the CUDA device probe.
 *
 * Each operation has a CPU twin (`..._cpu`, plain C, always built: the test oracle and the fallback)
 * and a CUDA implementation (`..._cuda`) with the same argument struct (kernel_args.h). A context picks one
 * table at init and calls through it, the way PipeWire's audio-conversion ops pick an
 * implementation once; the plugin never names a backend function directly. Nothing here runs before
 * a context's init: probing the plugin makes no CUDA call.
 */
#ifndef NVFP4_MLA_KERNELS_BACKENDS_H
#define NVFP4_MLA_KERNELS_BACKENDS_H

#include <stddef.h>
#include <stdint.h>

#include "attend/attend_launches.h"
#include "kernel_args.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One backend. Every entry reports through `result` (status 0 or NVFP4_MLA_ERR_*, and words). */
typedef struct nvfp4_mla_backend_ops {
    const char *name; /* "cpu" or "cuda" */
    void (*write)(const nvfp4_mla_write_kernel_args_t *args, nvfp4_mla_kernel_result_t *result);
    void (*gather)(const nvfp4_mla_gather_kernel_args_t *args, nvfp4_mla_kernel_result_t *result);
    /* Scratch bytes attend needs for these shapes (shapes only are read): what
     * attend_workspace_bytes reports to the host. */
    uint64_t (*attend_workspace)(const nvfp4_mla_attend_kernel_args_t *args);
    /* Attention. Plans once for the call and refuses (INVALID_ARGUMENT, both sizes named) when
     * args->workspace_bytes is less than that plan needs, before writing anything. `launches` is the
     * context's launch table (attend_launches.h: CUDA, made on first use, *launches NULL until then;
     * the CPU ignores it); NULL: every call launches directly (NVFP4_MLA_ATTEND_GRAPHS=off). */
    void (*attend)(const nvfp4_mla_attend_kernel_args_t *args, nvfp4_attend_launches_t **launches,
                   nvfp4_mla_kernel_result_t *result);
    /* Releases a context's launch table (NULL: nothing), its graphs and capture stream, on the context's
     * device; called by shutdown. Never fails (what the driver refuses is dropped). */
    void (*release_launches)(int32_t device_index, nvfp4_attend_launches_t *launches);
    /* The merge of partial attentions (kernels/merge/merge_*.{c,cu}). */
    void (*merge)(const nvfp4_mla_merge_kernel_args_t *args, nvfp4_mla_kernel_result_t *result);
} nvfp4_mla_backend_ops_t;

/* ---- CPU (kernels/{codec,attend,merge}/..._cpu.c, backend_cpu.c): always built. ---- */
extern const nvfp4_mla_backend_ops_t nvfp4_mla_cpu_ops;
void nvfp4_mla_write_cpu(const nvfp4_mla_write_kernel_args_t *args, nvfp4_mla_kernel_result_t *result);
void nvfp4_mla_gather_cpu(const nvfp4_mla_gather_kernel_args_t *args, nvfp4_mla_kernel_result_t *result);
uint64_t nvfp4_mla_attend_workspace_cpu(const nvfp4_mla_attend_kernel_args_t *args);
void nvfp4_mla_attend_cpu(const nvfp4_mla_attend_kernel_args_t *args, nvfp4_attend_launches_t **launches,
                          nvfp4_mla_kernel_result_t *result);
void nvfp4_mla_release_launches_cpu(int32_t device_index, nvfp4_attend_launches_t *launches);
void nvfp4_mla_merge_cpu(const nvfp4_mla_merge_kernel_args_t *args, nvfp4_mla_kernel_result_t *result);

/* ---- CUDA (kernels/{codec,attend,merge}/..._cuda.cu, cuda_device.cu): built when the toolkit is there. ---- */

/* What a CUDA context reads of its device once, at init (nvfp4_mla_cuda_probe). */
typedef struct nvfp4_mla_cuda_limits {
    int32_t sm_count;       /* multiprocessors */
    int32_t smem_per_block; /* opt-in dynamic shared memory per block, bytes */
    int32_t arch;           /* 10 * major + minor */
    int32_t quad_clusters;  /* clusters of 4 attend CTAs (one an SM at smem_per_block) the device runs at
                             * once, counted by nvfp4_mla_cuda_prepare; 0: none (split grids then launch
                             * without clusters: attend_cuda.cu, placement_cluster) */
} nvfp4_mla_cuda_limits_t;

/* Can this process run our kernels on `ordinal`? 0 = yes, with `name` ("NVIDIA H200 (sm_90)") and
 * `limits` filled; otherwise `note` says why (no driver, no device, architecture not in the fatbin). */
int nvfp4_mla_cuda_probe(int ordinal, char *name, size_t name_size, char *note, size_t note_size,
                         nvfp4_mla_cuda_limits_t *limits);

/* Once per context, with the limits decided (smem_per_block after the cap): attribute settings the
 * launches rely on, and limits->quad_clusters. 0 = done, else a cudaError_t described in `note`. */
int nvfp4_mla_cuda_prepare(int ordinal, nvfp4_mla_cuda_limits_t *limits, char *note, size_t note_size);

extern const nvfp4_mla_backend_ops_t nvfp4_mla_cuda_ops;
void nvfp4_mla_write_cuda(const nvfp4_mla_write_kernel_args_t *args, nvfp4_mla_kernel_result_t *result);
void nvfp4_mla_gather_cuda(const nvfp4_mla_gather_kernel_args_t *args, nvfp4_mla_kernel_result_t *result);
uint64_t nvfp4_mla_attend_workspace_cuda(const nvfp4_mla_attend_kernel_args_t *args);
void nvfp4_mla_attend_cuda(const nvfp4_mla_attend_kernel_args_t *args, nvfp4_attend_launches_t **launches,
                           nvfp4_mla_kernel_result_t *result);
void nvfp4_mla_release_launches_cuda(int32_t device_index, nvfp4_attend_launches_t *launches);
void nvfp4_mla_merge_cuda(const nvfp4_mla_merge_kernel_args_t *args, nvfp4_mla_kernel_result_t *result);
/* Lets every attend kernel use `smem_per_block` bytes of dynamic shared memory on the current
 * device, and counts into *quad_clusters the clusters of 4 attend CTAs it runs at once
 * (kernels/attend/attend_cuda.cu; called by nvfp4_mla_cuda_prepare). 0 or a cudaError_t. */
int nvfp4_mla_attend_cuda_prepare(int smem_per_block, int32_t *quad_clusters);

#ifdef __cplusplus
}
#endif
#endif /* NVFP4_MLA_KERNELS_BACKENDS_H */
