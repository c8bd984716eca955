/* Checks shared by every entry: versioned argument structs and tensor descriptors.
 *
 * Every message names the operation and the argument ("write: kv_c: shape[1] is 500, must be
 * 512"), because the host reads it through last_error() far from the call site.
 */
#ifndef NVFP4_MLA_PLUGIN_ARGS_H
#define NVFP4_MLA_PLUGIN_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "nvfp4_mla.h"

/* Copies a host struct of `host_size` bytes into `dst` (our `known_size` bytes, zero-filled past
 * what the host passed). Older hosts pass smaller structs (>= `min_size`, the 1.0 size); newer ones
 * larger structs whose unknown tail must be zero. */
nvfp4_mla_status_t nvfp4_copy_versioned(void *dst, size_t known_size, size_t min_size, const void *src,
                                        const char *what);

/* The intake of a versioned argument struct, the first thing every entry point does: the host's
 * struct copied by nvfp4_copy_versioned (`min_size`: the 1.0 size, or the size before the newest
 * appended member), then its `flags` and `reserved` words checked zero (nvfp4_check_zero). The
 * messages name the operation and the struct ("write: nvfp4_mla_write_args_t: struct_size ...",
 * "write: flags must be zero ..."). Called through NVFP4_TAKE_ARGS, which fills in the layout and
 * joins `what` ("op: type") at compile time: write, gather, attend and merge take their arguments
 * here on every call, and a successful call formats nothing. `op` must be a string literal. */
nvfp4_mla_status_t nvfp4_take_args(void *dst, size_t size, size_t min_size, const void *src, const char *op,
                                   const char *what, size_t flags_offset, size_t flags_size, size_t reserved_offset,
                                   size_t reserved_size);
#define NVFP4_TAKE_ARGS(op, type, dst, src, min_size)                                                            \
    nvfp4_take_args((dst), sizeof(type), (min_size), (src), op, op ": " #type, offsetof(type, flags),            \
                    sizeof(((type *)0)->flags), offsetof(type, reserved), sizeof(((type *)0)->reserved))

/* Expected element type(s) and rank of a tensor argument. */
typedef struct nvfp4_tensor_rule {
    const char *op;      /* "write", "gather", "attend" */
    const char *name;    /* argument name, e.g. "kv_c" */
    int32_t dtype;       /* required NVFP4_MLA_DTYPE_* */
    int32_t alt_dtype;   /* a second accepted dtype, or 0 */
    int32_t ndim;        /* required rank */
    int32_t device_type; /* the context's device */
    int32_t device_index;
} nvfp4_tensor_rule_t;

size_t nvfp4_dtype_size(int32_t dtype);
const char *nvfp4_dtype_name(int32_t dtype);

/* dtype, rank, non-negative shape/strides, device, non-NULL and naturally aligned data (when the
 * tensor has elements), and the bytes its shape and strides address: at most 2^48 from its base
 * (checked arithmetic), not wrapping the address space, so that no offset a backend computes
 * overflows. */
nvfp4_mla_status_t nvfp4_check_tensor(const nvfp4_mla_tensor_t *t, const nvfp4_tensor_rule_t *rule);

/* shape[dim] == want. */
nvfp4_mla_status_t nvfp4_check_dim(const nvfp4_mla_tensor_t *t, const nvfp4_tensor_rule_t *rule, int dim,
                                   int64_t want, const char *why);

/* An optional tensor is absent when the host leaves it zeroed (data NULL, ndim 0). */
int nvfp4_tensor_absent(const nvfp4_mla_tensor_t *t);

/* The per-head outputs of attend and merge: out [n_q, h, 512] bf16 with inner stride 1 and the
 * optional lse [n_q, h] f32, each with rows (heads, queries) that do not overlap. `op` names the
 * operation in the messages; device_type/device_index are the context's. */
nvfp4_mla_status_t nvfp4_check_head_outputs(const char *op, int32_t device_type, int32_t device_index,
                                            const nvfp4_mla_tensor_t *out, const nvfp4_mla_tensor_t *lse, int64_t nq,
                                            int64_t heads);

/* The bytes [lo, hi) a tensor addresses from its base (lo == hi when it has no element), for one that
 * nvfp4_check_tensor passed; and those of a pointer to `bytes` bytes (lo == hi when NULL). */
typedef struct nvfp4_span {
    uintptr_t lo, hi;
} nvfp4_span_t;
nvfp4_span_t nvfp4_tensor_span(const nvfp4_mla_tensor_t *t);
nvfp4_span_t nvfp4_pointer_span(const void *p, size_t bytes);

/* The one overlap rule of write, gather, attend and merge: every output apart from every input, then
 * from every output before it (an absent argument spans nothing). An output must share no byte with
 * another argument of the same call: the kernels read their inputs while they write, and two outputs
 * in one place leave one of them garbage. INVALID_ARGUMENT naming both and their bytes. (Spans are the
 * lowest to the highest byte: strided tensors that interleave without sharing a byte are refused too.) */
typedef struct nvfp4_named_span {
    const char *name;
    nvfp4_span_t span;
} nvfp4_named_span_t;
nvfp4_mla_status_t nvfp4_check_outputs_apart(const char *op, const nvfp4_named_span_t *outputs, int n_outputs,
                                             const nvfp4_named_span_t *inputs, int n_inputs);
/* An array of named spans and its length, for nvfp4_check_outputs_apart: the count follows the list. */
#define NVFP4_SPANS(list) list, (int)(sizeof list / sizeof list[0])

/* A row-major matrix [rows, cols] with unit inner stride and rows that do not overlap. */
nvfp4_mla_status_t nvfp4_check_rows(const nvfp4_mla_tensor_t *t, const nvfp4_tensor_rule_t *rule, int64_t cols);

/* The ABI's mode rule (nvfp4_mla_mode_check of nvfp4_mla_record.h) for operation `op_cap` (its
 * NVFP4_MLA_CAP_OP_* bit), with a message that names the operation and the value. */
nvfp4_mla_status_t nvfp4_check_mode(const char *op, uint64_t op_cap, uint32_t layout, uint32_t scale_mode,
                                    float outer_scale);

/* The paged cache of one layer (a layout nvfp4_check_mode accepted); fills record_bytes, block_size,
 * block_stride (bytes), capacity. */
typedef struct nvfp4_cache_geometry {
    int32_t record_bytes;
    int64_t block_size;
    int64_t block_stride;
    int64_t capacity;
} nvfp4_cache_geometry_t;
nvfp4_mla_status_t nvfp4_check_cache(const nvfp4_mla_tensor_t *cache, const nvfp4_tensor_rule_t *rule,
                                     uint32_t layout, nvfp4_cache_geometry_t *geometry);

/* flags and every reserved word zero. */
nvfp4_mla_status_t nvfp4_check_zero(const char *op, const char *what, const void *p, size_t bytes);

#endif
