/* The plugin-to-backend contract of the four operations: their kernel-side argument structs (write,
 * gather, attend, merge) and the result of a kernel call.
 *
 * The plugin validates the host's ABI structs (plugin/ops.c with the checks of plugin/args.c) and
 * lowers them to these flat structs: raw pointers, strides in elements or bytes as named, nothing
 * left to check. Each operation has one struct shared by its CPU twin (`..._cpu`, always built, the
 * test oracle) and its CUDA implementation (`..._cuda`); backends.h declares both and the dispatch
 * table that picks one per context. Record layouts and field offsets are the ABI's
 * (nvfp4_mla_record.h).
 */
#ifndef NVFP4_MLA_KERNEL_ARGS_H
#define NVFP4_MLA_KERNEL_ARGS_H

#include <stdint.h>

#include "nvfp4_mla_record.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nvfp4_mla_write_kernel_args {
    const void *kv_c;             /* [T, 512] bf16|f16, rows kv_c_row_stride elements apart */
    const void *k_pe;             /* [T, 64] same dtype, rows k_pe_row_stride elements apart */
    const int64_t *slot_mapping;  /* [T] slot ids, slot_stride elements apart */
    uint8_t *cache;               /* [num_blocks, block_size, record_bytes] */
    float *capture_max_abs;       /* optional [1]: max-reduced with max |kv_c| of written tokens */
    uint64_t *nonfinite_count;    /* optional [1]: += NaN/Inf inputs of written tokens */
    uint64_t *out_of_range_count; /* optional [1]: += tokens whose slot >= capacity (not written; the
                                     plugin refuses them before a CPU write, so only CUDA counts) */
    void *stream;                 /* cudaStream_t (CUDA); unused on the CPU */
    int64_t num_tokens;           /* T >= 0 */
    int64_t kv_c_row_stride;      /* elements, >= 512 */
    int64_t k_pe_row_stride;      /* elements, >= 64 */
    int64_t slot_stride;          /* elements, >= 0 */
    int64_t block_stride;         /* bytes, >= block_size * record_bytes */
    int64_t block_size;           /* tokens per block, >= 1 */
    int64_t capacity;             /* num_blocks * block_size < 2^31 */
    int32_t input_is_f16;         /* 0: bf16, 1: fp16 */
    int32_t record_bytes;         /* 368 or 432 */
    int32_t per_token;            /* 1: per-token outer scale (368 only) */
    float outer_scale;            /* static mode s (1.0 = uncalibrated); unused per-token */
    int32_t device_index;         /* CUDA ordinal of every pointer above; 0 on the CPU */
    int32_t writer_policy;        /* NVFP4_MLA_WRITER_POLICY_* (validated): how group scales are picked */
} nvfp4_mla_write_kernel_args_t;

typedef struct nvfp4_mla_gather_kernel_args {
    const uint8_t *cache;         /* [num_blocks, block_size, record_bytes] */
    const int32_t *slots;         /* [N], slot_stride elements apart; -1 = zeros */
    uint16_t *out;                /* [N, 576] bf16, rows out_row_stride elements apart */
    void *stream;                 /* cudaStream_t (CUDA); unused on the CPU */
    int64_t num_rows;             /* N >= 0 */
    int64_t slot_stride;          /* elements */
    int64_t out_row_stride;       /* elements, >= 576 */
    int64_t block_stride;         /* bytes */
    int64_t block_size;           /* tokens per block */
    int64_t capacity;             /* num_blocks * block_size; the kernel treats slots outside
                                     [0, capacity) other than -1 as zeros (validated on the CPU) */
    int32_t record_bytes;         /* 368 or 432 */
    int32_t per_token;            /* 1: outer scale from each record's s_t */
    float outer_scale;            /* static mode s */
    int32_t device_index;         /* CUDA ordinal of every pointer above; 0 on the CPU */
} nvfp4_mla_gather_kernel_args_t;

typedef struct nvfp4_mla_attend_kernel_args {
    const uint16_t *q;            /* [n_q, h, 576] bf16 */
    const int32_t *slots;         /* [n_q, topk] */
    const int32_t *valid_len;     /* optional [n_q]: entries past valid_len[q] are unused */
    const uint8_t *cache;         /* [num_blocks, block_size, record_bytes] */
    uint16_t *out;                /* [n_q, h, 512] bf16 */
    float *lse;                   /* optional [n_q, h], natural log */
    void *workspace;              /* scratch of workspace_bytes (split-K partials, CUDA) */
    void *stream;                 /* cudaStream_t (CUDA); unused on the CPU */
    uint64_t workspace_bytes;     /* what the host passed; the backend's attend checks it against
                                     the one plan it makes for the call (backends.h) */
    int64_t num_queries;          /* n_q */
    int64_t num_heads;            /* h, 1..128 */
    int64_t topk;
    int64_t q_stride_token, q_stride_head;       /* elements */
    int64_t slot_stride;                         /* elements between queries' slot rows */
    int64_t valid_len_stride;                    /* elements */
    int64_t out_stride_token, out_stride_head;   /* elements */
    int64_t lse_stride_token, lse_stride_head;   /* elements */
    int64_t block_stride, block_size, capacity;  /* the cache's geometry (bytes, tokens, slots) */
    int32_t record_bytes;         /* 368, 432 or 656: names the layout too (nvfp4_mla_record_bytes) */
    int32_t per_token;
    float outer_scale;            /* static mode s */
    float sm_scale;
    int32_t device_index;
    /* The device as the context read it once at init (CUDA only; the plan is computed from these
     * and the shapes, so the workspace query and the launch agree without device calls). */
    int32_t sm_count;             /* multiprocessors */
    int32_t smem_per_block;       /* opt-in shared memory per block, after NVFP4_MLA_ATTEND_SMEM_CAP */
    int32_t arch;                 /* 10 * major + minor (90 = sm_90) */
    /* The two settings below are 16-bit so that quad_clusters fits the struct's size: it is the CUDA
     * kernels' parameter too, and their code stays that of a fixed layout. */
    int16_t force_mma_sync;       /* 1: NVFP4_MLA_ATTEND_MMA=sync (the mma.sync consumers on sm_90) */
    int16_t merge_mode;           /* NVFP4_ATTEND_MERGE_*: how split partials are merged (NVFP4_MLA_ATTEND_MERGE,
                                     read at init; AUTO is resolved per call; the workspace size ignores it) */
    int32_t quad_clusters;        /* clusters of 4 attend CTAs the device runs at once (0: split grids launch
                                     without clusters; nvfp4_mla_cuda_limits_t) */
} nvfp4_mla_attend_kernel_args_t;

/* How attend merges split-K partials (nvfp4_mla_attend_kernel_args_t.merge_mode). */
enum {
    NVFP4_ATTEND_MERGE_SEPARATE = 0,  /* by a second kernel: the least GPU time */
    NVFP4_ATTEND_MERGE_IN_LAUNCH = 1, /* by each group's last split inside the attention launch: one launch */
    NVFP4_ATTEND_MERGE_AUTO = 2,      /* in-launch on an eager stream, separate on a capturing one (default) */
};

typedef struct nvfp4_mla_merge_kernel_args {
    const void *partial_out;      /* [P, n_q, h, 512] bf16|f32, unit inner stride */
    const float *partial_lse;     /* [P, n_q, h], natural log; -inf = the part is empty */
    uint16_t *out;                /* [n_q, h, 512] bf16, unit inner stride */
    float *lse;                   /* optional [n_q, h] */
    void *stream;                 /* cudaStream_t (CUDA); unused on the CPU */
    int64_t num_parts;            /* P >= 1 */
    int64_t num_queries;          /* n_q */
    int64_t num_heads;            /* h */
    int64_t po_stride_part, po_stride_token, po_stride_head;    /* partial_out, elements */
    int64_t pl_stride_part, pl_stride_token, pl_stride_head;    /* partial_lse, elements */
    int64_t out_stride_token, out_stride_head;                  /* elements */
    int64_t lse_stride_token, lse_stride_head;                  /* elements */
    int32_t partial_is_f32;       /* 0: partial_out is bf16, 1: f32 */
    int32_t device_index;         /* CUDA ordinal of every pointer above; 0 on the CPU */
} nvfp4_mla_merge_kernel_args_t;

/* Status of a kernel call: 0 = OK, else an NVFP4_MLA_ERR_* code; details through the message
 * buffer (kernels cannot reach the plugin's thread-local error). */
typedef struct nvfp4_mla_kernel_result {
    int32_t status;
    char message[240];
} nvfp4_mla_kernel_result_t;

#ifdef __cplusplus
}
#endif
#endif /* NVFP4_MLA_KERNEL_ARGS_H */
