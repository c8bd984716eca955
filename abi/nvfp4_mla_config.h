/* nvfp4-mla ABI 1: host description, context creation and the cache-format configuration.
 *
 * The configuration is what keeps a fleet from mixing records of different meaning
 * (docs/record-format.md sections 6 and 7): one immutable object per process, made once from the
 * environment (or a snapshot the host passes) and the checkpoint, from which the writer and every
 * reader take their layout, mode and per-layer scales, the writer its policy, and persistent caches
 * their identity.
 */
#ifndef NVFP4_MLA_CONFIG_H
#define NVFP4_MLA_CONFIG_H

#include "nvfp4_mla_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Log sink of the host. Called only from inside a plugin call, on the calling thread, so it needs
 * no locking of its own beyond what the host's sink needs. `message` is valid during the call. */
typedef void (*nvfp4_mla_log_fn)(void *user_data, int32_t level, const char *message);

typedef struct nvfp4_mla_host_desc {
    uint32_t struct_size;    /* sizeof(nvfp4_mla_host_desc_t) as the host compiled it */
    uint32_t reserved0;      /* zero */
    const char *host_name;   /* optional, used in messages; borrowed for the call */
    nvfp4_mla_log_fn log;    /* optional; NULL = the plugin stays silent */
    void *log_user_data;     /* passed back to `log`; owned by the host */
} nvfp4_mla_host_desc_t;

typedef struct nvfp4_mla_init_args {
    uint32_t struct_size;    /* sizeof(nvfp4_mla_init_args_t) as the host compiled it */
    int32_t device_type;     /* NVFP4_MLA_DEVICE_CPU or NVFP4_MLA_DEVICE_CUDA */
    int32_t device_index;    /* CUDA ordinal; 0 for the CPU */
    uint32_t flags;          /* zero */
    const nvfp4_mla_host_desc_t *host; /* optional; copied: it (and log_user_data's lifetime)
                                          must outlive the context */
    uint64_t reserved[4];    /* zero */
    /* ---- ABI 1.1 ---- */
    const char *const *environ; /* optional NULL-terminated "NAME=VALUE" snapshot the host took, from
                                   which a CUDA context reads the attention settings
                                   (NVFP4_MLA_ATTEND_*); NULL = the process environment, read
                                   with secure_getenv. Borrowed for the call. A host struct that
                                   ends before it (every 1.0 host) reads as NULL. */
} nvfp4_mla_init_args_t;

/* What a context's device serves (after init). */
typedef struct nvfp4_mla_context_info {
    uint32_t struct_size;    /* set by the host; the plugin fills fields that fit in it */
    int32_t device_type;     /* as passed to init */
    int32_t device_index;    /* as passed to init */
    uint32_t reserved0;
    uint64_t capability_bits;   /* runtime NVFP4_MLA_CAP_* bits of this device */
    const char *device_name;    /* e.g. "NVIDIA H200 (sm_90)" or "cpu"; owned by the context */
    const char *backend_note;   /* why a backend is off ("no CUDA device", "sm_80 not in the
                                   fatbin", ...), "" when none; owned by the context */
} nvfp4_mla_context_info_t;

/* Where the per-layer outer scales came from (docs/record-format.md section 7). */
#define NVFP4_MLA_SCALE_SOURCE_NONE 0              /* no calibration: every layer 1.0 */
#define NVFP4_MLA_SCALE_SOURCE_ENV_FILE 1          /* VLLM_NVFP4_MLA_SCALES_FILE */
#define NVFP4_MLA_SCALE_SOURCE_CHECKPOINT_INLINE 2 /* config.json's nvfp4_mla_outer_scales object */
#define NVFP4_MLA_SCALE_SOURCE_CHECKPOINT_FILE 3   /* sidecar named by config.json */
#define NVFP4_MLA_SCALE_SOURCE_PER_TOKEN 4         /* per-token mode: no layer scales */

typedef struct nvfp4_mla_config_request {
    uint32_t struct_size;       /* sizeof(nvfp4_mla_config_request_t) as the host compiled it */
    uint32_t flags;             /* zero */
    const char *cache_dtype;    /* the runtime's KV-cache dtype name, e.g. "nvfp4_ds_mla" or
                                   "fp8"; a "torch." prefix is ignored; required */
    const char *model_dir;      /* optional checkpoint folder holding config.json; NULL = none */
    const char *const *environ; /* optional NULL-terminated "NAME=VALUE" snapshot the host took;
                                   NULL = the process environment, read with secure_getenv */
    const nvfp4_mla_host_desc_t *host; /* optional; the scale source is reported through it */
    uint64_t reserved[4];       /* zero */
} nvfp4_mla_config_request_t;

typedef struct nvfp4_mla_config_info {
    uint32_t struct_size;       /* set by the host (at least the 1.0 size, which ends at
                                   scale_source_path); the plugin fills the fields that fit in it
                                   and sets it to the bytes it filled (a 1.0 plugin: the 1.0 size) */
    uint32_t is_nvfp4;          /* 1 when the cache dtype is nvfp4_ds_mla */
    uint32_t layout;            /* NVFP4_MLA_LAYOUT_* (KV_FP8_ROPE on gives 368, else 432) */
    uint32_t scale_mode;        /* NVFP4_MLA_SCALE_STATIC or NVFP4_MLA_SCALE_PER_TOKEN */
    uint32_t scale_source;      /* NVFP4_MLA_SCALE_SOURCE_* */
    uint32_t num_layers;        /* calibrated layers; layers >= num_layers use 1.0 */
    const char *identity;       /* cache identity (section 6); owned by the config object */
    const char *scale_source_path; /* file the scales came from, "" if none; owned likewise */
    /* ---- ABI 1.1 ---- */
    uint32_t writer_policy;     /* NVFP4_MLA_WRITER_POLICY_* from NVFP4_MLA_WRITER_POLICY (unset or
                                   "" = rtn): what the host passes in every write's writer_policy.
                                   Not part of `identity`: readers decode every policy's records
                                   alike. Absent (struct_size too small): rtn. */
    uint32_t reserved1;         /* zero */
} nvfp4_mla_config_info_t;

/* Opaque handles. */
typedef struct nvfp4_mla_context nvfp4_mla_context_t;
typedef struct nvfp4_mla_config nvfp4_mla_config_t;

#ifdef __cplusplus
}
#endif
#endif /* NVFP4_MLA_CONFIG_H */
