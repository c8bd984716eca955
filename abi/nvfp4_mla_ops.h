/* nvfp4-mla ABI 1: argument structs of the operations (write, gather, attend; merge, ABI 1.1).
 *
 * Every struct starts with `struct_size` (sizeof as the host compiled it: older hosts pass smaller
 * structs, and the plugin reads only what they carry). `flags` and `reserved` fields must be zero;
 * a bit or field this version does not know is NVFP4_MLA_ERR_INVALID_ARGUMENT, never ignored.
 * Shapes are written as comments on each field; T = tokens written, N = records gathered,
 * n_q = query tokens, h = heads. All tensors of one call live on the context's device.
 */
#ifndef NVFP4_MLA_OPS_H
#define NVFP4_MLA_OPS_H

#include "nvfp4_mla_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The paged cache of one layer, shared by every operation:
 *   cache: [num_blocks, block_size, record_bytes] u8,
 *          strides {block_stride >= block_size * record_bytes, record_bytes, 1} (bytes),
 *          record_bytes = 368 or 432 to match `layout`; num_blocks * block_size < 2^31.
 *   CUDA caches: base and block_stride multiples of 16 bytes (records are read in 16-byte units).
 *
 * Slots, one rule for write, gather and attend (capacity = num_blocks * block_size):
 *   - negative: padding, the convention engines use. write skips any negative slot (the padding
 *     tokens of captured graphs); readers take -1 as an unused entry (a zero row, no attention
 *     weight) and refuse other negatives like any other value out of range.
 *   - at or past the capacity: a host bug (a token's record would be lost, or another's read).
 *     CPU: the call is refused before anything is written, INVALID_ARGUMENT naming the argument,
 *     the index, the value and the capacity. CUDA: the values live on the device and refusing
 *     would need a synchronising copy, so the kernels go on: write writes nothing for that token
 *     and adds it to the optional out_of_range_count (ABI 1.1), gather writes a zero row, attend
 *     gives the entry no weight (as -1). A host that cannot rule the bug out passes the counter
 *     and checks it after the stream reaches the write. */

/* write: quantise T tokens into their cache slots (docs/record-format.md section 4). */
typedef struct nvfp4_mla_write_args {
    uint32_t struct_size;   /* sizeof(nvfp4_mla_write_args_t) as the host compiled it */
    uint32_t layout;        /* NVFP4_MLA_LAYOUT_* */
    uint32_t scale_mode;    /* NVFP4_MLA_SCALE_*; PER_TOKEN requires the 368 layout */
    uint32_t flags;         /* zero */
    float outer_scale;      /* STATIC: layer scale s, a normal float with finite 1/s (1.0 =
                               uncalibrated); PER_TOKEN: must be 0 */
    uint32_t writer_policy; /* NVFP4_MLA_WRITER_POLICY_* (ABI 1.1; "reserved0, zero" in 1.0, so a
                               1.0 host gets rtn): the configuration's writer_policy. The context
                               must serve nvfp4_mla_writer_policy_cap(policy); an unknown id is
                               INVALID_ARGUMENT. Readers take no policy: records read the same. */
    nvfp4_mla_tensor_t kv_c;         /* [T, 512] bf16 or f16, inner stride 1, row stride >= 512 */
    nvfp4_mla_tensor_t k_pe;         /* [T, 64] same dtype as kv_c, inner stride 1 */
    nvfp4_mla_tensor_t slot_mapping; /* [T] i64; slot < 0: padding, skipped; slot >= capacity:
                                        refused on the CPU, skipped and counted in
                                        out_of_range_count on CUDA (the slot rule above) */
    nvfp4_mla_tensor_t cache;        /* [num_blocks, block_size, record_bytes] u8 (see above) */
    float *capture_max_abs;  /* optional [1] f32 on the cache's device: max-reduced with max |kv_c|
                                over the finite latent values of the tokens written (skipped slots
                                excluded); the host initialises it (0 or a running value) */
    uint64_t *nonfinite_count; /* optional [1] u64 on the cache's device: incremented by the number of
                                  NaN/Inf values (latent and RoPE) of the tokens written */
    void *stream;            /* cudaStream_t for CUDA tensors (NULL = legacy default); NULL on CPU */
    uint64_t reserved[4];    /* zero */
    uint64_t *out_of_range_count; /* ABI 1.1 (read when struct_size covers it; a 1.1 host built before
                                     it passes the shorter struct): optional [1] u64 on the cache's
                                     device, owned by the host, which initialises it; 8-byte aligned.
                                     CUDA: incremented (atomically, stream-ordered with the write) by
                                     the number of tokens whose slot is >= capacity, whose records
                                     were therefore not written; non-zero means the host lost that
                                     many records. CPU: never incremented (such a call is refused
                                     before anything is written). NULL: not counted. A misaligned
                                     pointer is INVALID_ARGUMENT. */
} nvfp4_mla_write_args_t;

/* gather: dequantise N records to dense bf16 rows (docs/record-format.md section 5). */
typedef struct nvfp4_mla_gather_args {
    uint32_t struct_size;   /* sizeof(nvfp4_mla_gather_args_t) as the host compiled it */
    uint32_t layout;        /* NVFP4_MLA_LAYOUT_* */
    uint32_t scale_mode;    /* NVFP4_MLA_SCALE_* */
    uint32_t flags;         /* zero */
    float outer_scale;      /* STATIC: layer scale s (1.0 = uncalibrated); PER_TOKEN: must be 0 */
    uint32_t reserved0;     /* zero */
    nvfp4_mla_tensor_t cache; /* [num_blocks, block_size, record_bytes] u8 (see above) */
    nvfp4_mla_tensor_t slots; /* [N] i32; -1 = none (row of zeros); other values in [0, capacity)
                                 (else the slot rule above: refused on the CPU, a zero row on CUDA) */
    nvfp4_mla_tensor_t out;   /* [N, 576] bf16 (512 latent then 64 RoPE), inner stride 1,
                                 row stride >= 576 */
    void *stream;             /* cudaStream_t for CUDA tensors; NULL on CPU */
    uint64_t reserved[4];     /* zero */
} nvfp4_mla_gather_args_t;

/* attend: sparse MLA attention over each query's top-k records, read straight from the cache.
 * out[q, j] = sum_k softmax_k(sm_scale * <q[q, j], key_k>) * latent_k over the valid entries k of
 * slots[q, :] (the first valid_len[q] entries, minus the -1 ones); key = [latent, rope] (576).
 * lse[q, j] = natural log of sum_k exp(sm_scale * score_k); -inf (and out = 0) when no entry is
 * valid. Duplicate slots count as often as they appear. Keys and values are the records' binary32
 * values (docs/record-format.md section 5, before gather's bf16 rounding; the 656 layout: its bf16
 * decode). The CPU backend accumulates in double; CUDA uses bf16 tensor-core operands with f32
 * sums and stays within rel 2/128 + 1e-3 max|value| of it on out and rel 1e-5 on lse. */
typedef struct nvfp4_mla_attend_args {
    uint32_t struct_size;   /* sizeof(nvfp4_mla_attend_args_t) as the host compiled it */
    uint32_t layout;        /* NVFP4_MLA_LAYOUT_* */
    uint32_t scale_mode;    /* NVFP4_MLA_SCALE_* */
    uint32_t flags;         /* zero */
    float outer_scale;      /* STATIC: layer scale s; PER_TOKEN: must be 0 */
    float sm_scale;         /* softmax scale applied to the raw scores, finite and > 0 */
    nvfp4_mla_tensor_t q;         /* [n_q, h, 576] bf16, inner stride 1; h in 1..128 */
    nvfp4_mla_tensor_t slots;     /* [n_q, topk] i32, inner stride 1; -1 = unused entry; other values
                                     in [0, capacity) (else the slot rule above: refused on the CPU,
                                     unused on CUDA) */
    nvfp4_mla_tensor_t valid_len; /* optional [n_q] i32 in [0, topk] (data NULL = all topk) */
    nvfp4_mla_tensor_t cache;     /* [num_blocks, block_size, record_bytes] u8 (see above) */
    nvfp4_mla_tensor_t out;       /* [n_q, h, 512] bf16, inner stride 1 */
    nvfp4_mla_tensor_t lse;       /* optional [n_q, h] f32 (data NULL = not written) */
    nvfp4_mla_tensor_t workspace; /* [bytes] u8 scratch on the device, at least what
                                     attend_workspace_bytes reports (data NULL when that is 0),
                                     16-byte aligned base */
    void *stream;                 /* cudaStream_t for CUDA tensors; NULL on CPU */
    uint64_t reserved[4];         /* zero */
} nvfp4_mla_attend_args_t;

/* merge (ABI 1.1): P partial attentions of the same queries, each over its own share of their
 * top-k entries, become one, exactly as one softmax over the union of the shares. This is the
 * combine step of decode context parallelism: each rank attends over the records it holds, the
 * group all-gathers out and lse (the engine owns the communicator), and every rank merges. For each
 * query q and head j, over the parts p whose lse_p[q, j] is not -inf:
 *   m = max_p lse_p[q, j];  w_p = exp(lse_p[q, j] - m);
 *   out[q, j] = sum_p w_p * out_p[q, j] / sum_p w_p;  lse[q, j] = m + log(sum_p w_p) (natural log).
 * A part with lse -inf held no valid entry: it counts for nothing and its out_p is not read (it may
 * hold anything); a (q, j) without any other part gets out = 0 and lse = -inf, as attend does. When
 * the parts are attend's over disjoint shares whose union is the top-k row (each entry in one share),
 * the result is attend over the whole row up to the partials' own rounding (bf16 out_p: 2^-8 of
 * each value). The CPU backend computes in double; CUDA in f32 (expf, logf) and stays within one
 * bf16 unit in the last place (2^-7 |cpu|) + 1e-5 max|out_p| of it on out, and 1e-6 max(|lse|, 1)
 * on lse. A NaN or +inf lse_p is no attention's: the CPU backend refuses it (INVALID_ARGUMENT naming
 * the element); a CUDA call, which cannot read it without a sync, writes NaN to that (q, j)'s out
 * and lse. */
typedef struct nvfp4_mla_merge_args {
    uint32_t struct_size; /* sizeof(nvfp4_mla_merge_args_t) as the host compiled it */
    uint32_t flags;       /* zero */
    nvfp4_mla_tensor_t partial_out; /* [P, n_q, h, 512] bf16 or f32, strides[3] = 1, P in 1..65536; other
                                       strides free: all_gather_into_tensor's [P * n_q, h, 512] output
                                       viewed as [P, n_q, h, 512], or P equally spaced buffers */
    nvfp4_mla_tensor_t partial_lse; /* [P, n_q, h] f32, any strides; -inf = the part held no valid entry */
    nvfp4_mla_tensor_t out;         /* [n_q, h, 512] bf16, strides[2] = 1, rows that do not overlap */
    nvfp4_mla_tensor_t lse;         /* optional [n_q, h] f32 (data NULL = not written) */
    void *stream;                   /* cudaStream_t for CUDA tensors (NULL = legacy default); NULL on CPU */
    uint64_t reserved[4];           /* zero */
} nvfp4_mla_merge_args_t;

#ifdef __cplusplus
}
#endif
#endif /* NVFP4_MLA_OPS_H */
