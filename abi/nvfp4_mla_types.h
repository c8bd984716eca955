/* nvfp4-mla ABI 1: status codes, enumerations, capabilities and tensor descriptors.
 *
 * Part of the public contract between a host (an inference runtime) and the plugin. Everything
 * here is frozen for ABI major 1: values are never renumbered or reused, structs only grow at the
 * end (minor versions), and every struct a host passes starts with `struct_size`.
 * Included by nvfp4_mla.h; a host never needs to include it alone.
 */
#ifndef NVFP4_MLA_TYPES_H
#define NVFP4_MLA_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status codes: frozen int32 values; 0 is success, anything else a failure. ----
 * After a failure the calling thread's last-error text (table->last_error) says what was wrong. */
typedef int32_t nvfp4_mla_status_t;
#define NVFP4_MLA_OK 0
#define NVFP4_MLA_ERR_INVALID_ARGUMENT 1 /* a pointer, size, dtype, shape, stride or flag is wrong */
#define NVFP4_MLA_ERR_UNSUPPORTED 2      /* valid request this build or device cannot serve */
#define NVFP4_MLA_ERR_OUT_OF_MEMORY 3    /* host or device allocation failed */
#define NVFP4_MLA_ERR_DEVICE 4           /* a CUDA call or launch failed */
#define NVFP4_MLA_ERR_IO 5               /* a file could not be opened or read */
#define NVFP4_MLA_ERR_CONFIG 6           /* configuration or calibration content is invalid */
#define NVFP4_MLA_ERR_VERSION 7          /* struct_size or version too small or unknown */
#define NVFP4_MLA_ERR_INTERNAL 8         /* a bug in the plugin; please report */

/* Record layouts, record sizes, field offsets and scale modes: nvfp4_mla_record.h. */

/* ---- Element types of tensor descriptors. ---- */
#define NVFP4_MLA_DTYPE_U8 1
#define NVFP4_MLA_DTYPE_I32 2
#define NVFP4_MLA_DTYPE_I64 3
#define NVFP4_MLA_DTYPE_F32 4
#define NVFP4_MLA_DTYPE_BF16 5
#define NVFP4_MLA_DTYPE_F16 6

/* ---- Devices. ---- */
#define NVFP4_MLA_DEVICE_CPU 1  /* host memory; device_index must be 0 */
#define NVFP4_MLA_DEVICE_CUDA 2 /* device memory of CUDA ordinal device_index */

/* ---- Log levels of the host's log callback. ---- */
#define NVFP4_MLA_LOG_ERROR 1
#define NVFP4_MLA_LOG_WARN 2
#define NVFP4_MLA_LOG_INFO 3
#define NVFP4_MLA_LOG_DEBUG 4

/* ---- Capabilities: named, each with a revision, mirrored by a never-reused bit. ----
 * Compiled capabilities (table->capabilities) say what the binary carries, readable before any
 * device call. Runtime capabilities (context_info's capability_bits, after init) say what a
 * context's device actually serves. A capability is present only when it works end to end on that backend. */
#define NVFP4_MLA_CAP_BACKEND_CPU (UINT64_C(1) << 0)             /* "backend.cpu" */
#define NVFP4_MLA_CAP_BACKEND_CUDA (UINT64_C(1) << 1)            /* "backend.cuda" */
#define NVFP4_MLA_CAP_LAYOUT_FP8_ROPE_368 (UINT64_C(1) << 2)     /* "layout.fp8_rope_368" */
#define NVFP4_MLA_CAP_LAYOUT_BF16_ROPE_432 (UINT64_C(1) << 3)    /* "layout.bf16_rope_432" */
#define NVFP4_MLA_CAP_SCALE_STATIC_OUTER (UINT64_C(1) << 4)      /* "scale.static_outer" */
#define NVFP4_MLA_CAP_WRITE_PER_TOKEN_SCALE (UINT64_C(1) << 5)   /* "write.per_token_scale" */
#define NVFP4_MLA_CAP_READ_LATENT_SCALE_PER_TOKEN (UINT64_C(1) << 6) /* "read.latent_scale_per_token" */
#define NVFP4_MLA_CAP_OP_WRITE (UINT64_C(1) << 7)                /* "op.write" */
#define NVFP4_MLA_CAP_OP_GATHER (UINT64_C(1) << 8)               /* "op.gather" */
#define NVFP4_MLA_CAP_OP_ATTEND (UINT64_C(1) << 9)               /* "op.attend" */
#define NVFP4_MLA_CAP_WRITE_CAPTURE_MAX_ABS (UINT64_C(1) << 10)  /* "write.capture_max_abs" */
#define NVFP4_MLA_CAP_CONFIG_CACHE_IDENTITY (UINT64_C(1) << 11)  /* "config.cache_identity" */
#define NVFP4_MLA_CAP_READ_FP8_DS_MLA_656 (UINT64_C(1) << 12)    /* "read.fp8_ds_mla_656" */
#define NVFP4_MLA_CAP_WRITE_POLICY_MSE (UINT64_C(1) << 13)       /* "write.policy_mse" (ABI 1.1) */
#define NVFP4_MLA_CAP_OP_MERGE_PARTIALS (UINT64_C(1) << 14)      /* "op.merge_partials" (ABI 1.1) */

/* Every capability this header knows, as X(bit, "name") pairs, for hosts that print names. */
#define NVFP4_MLA_FOR_EACH_CAPABILITY(X)                                                            \
    X(NVFP4_MLA_CAP_BACKEND_CPU, "backend.cpu")                                                     \
    X(NVFP4_MLA_CAP_BACKEND_CUDA, "backend.cuda")                                                   \
    X(NVFP4_MLA_CAP_LAYOUT_FP8_ROPE_368, "layout.fp8_rope_368")                                     \
    X(NVFP4_MLA_CAP_LAYOUT_BF16_ROPE_432, "layout.bf16_rope_432")                                   \
    X(NVFP4_MLA_CAP_SCALE_STATIC_OUTER, "scale.static_outer")                                       \
    X(NVFP4_MLA_CAP_WRITE_PER_TOKEN_SCALE, "write.per_token_scale")                                 \
    X(NVFP4_MLA_CAP_READ_LATENT_SCALE_PER_TOKEN, "read.latent_scale_per_token")                     \
    X(NVFP4_MLA_CAP_OP_WRITE, "op.write")                                                           \
    X(NVFP4_MLA_CAP_OP_GATHER, "op.gather")                                                         \
    X(NVFP4_MLA_CAP_OP_ATTEND, "op.attend")                                                         \
    X(NVFP4_MLA_CAP_WRITE_CAPTURE_MAX_ABS, "write.capture_max_abs")                                 \
    X(NVFP4_MLA_CAP_CONFIG_CACHE_IDENTITY, "config.cache_identity")                                 \
    X(NVFP4_MLA_CAP_READ_FP8_DS_MLA_656, "read.fp8_ds_mla_656")                                     \
    X(NVFP4_MLA_CAP_WRITE_POLICY_MSE, "write.policy_mse")                                           \
    X(NVFP4_MLA_CAP_OP_MERGE_PARTIALS, "op.merge_partials")

/* Name of one capability bit known to this header, "unknown" otherwise (a host-side convenience). */
static inline const char *nvfp4_mla_capability_name(uint64_t bit) {
#define NVFP4_MLA_NAME_OF_(b, name)                                                                 \
    if (bit == (b)) {                                                                               \
        return name;                                                                                \
    }
    NVFP4_MLA_FOR_EACH_CAPABILITY(NVFP4_MLA_NAME_OF_)
#undef NVFP4_MLA_NAME_OF_
    return "unknown";
}

typedef struct nvfp4_mla_capability {
    const char *name;  /* e.g. "write.per_token_scale"; static storage owned by the plugin */
    uint32_t revision; /* bumped when the capability's behaviour grows; 1 is the first */
    uint32_t reserved; /* zero */
    uint64_t bit;      /* the NVFP4_MLA_CAP_* mirror bit; 0 for names this header predates */
} nvfp4_mla_capability_t;

/* ---- Tensor descriptor: how every array crosses the ABI. ----
 * The plugin validates every field against the operation's contract before touching memory:
 * a wrong dtype, shape, stride, device, misaligned base or too-short source is
 * NVFP4_MLA_ERR_INVALID_ARGUMENT, never an out-of-bounds access. Borrowed: the plugin keeps no
 * pointer past the call (stream-ordered calls: past the work enqueued by the call). */
#define NVFP4_MLA_MAX_DIMS 4
typedef struct nvfp4_mla_tensor {
    void *data;                          /* base address; NULL only where a field is optional */
    int32_t dtype;                       /* NVFP4_MLA_DTYPE_* */
    int32_t ndim;                        /* 1..NVFP4_MLA_MAX_DIMS */
    int64_t shape[NVFP4_MLA_MAX_DIMS];   /* [ndim] sizes, each >= 0; unused entries 0 */
    int64_t strides[NVFP4_MLA_MAX_DIMS]; /* [ndim] in ELEMENTS (not bytes), each >= 0 */
    int32_t device_type;                 /* NVFP4_MLA_DEVICE_* */
    int32_t device_index;                /* CUDA ordinal; 0 for the CPU */
} nvfp4_mla_tensor_t;

#ifdef __cplusplus
}
#endif
#endif /* NVFP4_MLA_TYPES_H */
