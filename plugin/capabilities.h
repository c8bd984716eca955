/* Which capabilities each backend really serves, in one place (docs/architecture.md, ABI rule 4).
 *
 * A bit appears here only when the code behind it is finished and tested on that backend: the
 * compiled table is the union over the backends this binary carries, a context's runtime set is
 * its backend's set (and nothing of CUDA's when its device cannot run our fatbin).
 */
#ifndef NVFP4_MLA_PLUGIN_CAPABILITIES_H
#define NVFP4_MLA_PLUGIN_CAPABILITIES_H

#include "nvfp4_mla.h"

/* Serves both backends: layouts, modes and the record operations implemented everywhere. */
#define NVFP4_CAPS_CODEC                                                                               \
    (NVFP4_MLA_CAP_LAYOUT_FP8_ROPE_368 | NVFP4_MLA_CAP_LAYOUT_BF16_ROPE_432 | NVFP4_MLA_CAP_SCALE_STATIC_OUTER |  \
     NVFP4_MLA_CAP_WRITE_PER_TOKEN_SCALE | NVFP4_MLA_CAP_READ_LATENT_SCALE_PER_TOKEN | NVFP4_MLA_CAP_OP_WRITE |    \
     NVFP4_MLA_CAP_OP_GATHER | NVFP4_MLA_CAP_WRITE_CAPTURE_MAX_ABS | NVFP4_MLA_CAP_WRITE_POLICY_MSE)

/* Needs no device at all. */
#define NVFP4_CAPS_HOST_ONLY NVFP4_MLA_CAP_CONFIG_CACHE_IDENTITY

/* Attention over the records (both NVFP4 modes and the 656-byte baseline layout). */
#define NVFP4_CAPS_ATTEND (NVFP4_MLA_CAP_OP_ATTEND | NVFP4_MLA_CAP_READ_FP8_DS_MLA_656)

/* Merging partial attentions (decode context parallelism; no record is read). */
#define NVFP4_CAPS_MERGE NVFP4_MLA_CAP_OP_MERGE_PARTIALS

#define NVFP4_CAPS_CPU                                                                                 \
    (NVFP4_MLA_CAP_BACKEND_CPU | NVFP4_CAPS_CODEC | NVFP4_CAPS_HOST_ONLY | NVFP4_CAPS_ATTEND | NVFP4_CAPS_MERGE)
#define NVFP4_CAPS_CUDA                                                                                \
    (NVFP4_MLA_CAP_BACKEND_CUDA | NVFP4_CAPS_CODEC | NVFP4_CAPS_HOST_ONLY | NVFP4_CAPS_ATTEND | NVFP4_CAPS_MERGE)

#if NVFP4_MLA_HAVE_CUDA
#define NVFP4_CAPS_COMPILED (NVFP4_CAPS_CPU | NVFP4_CAPS_CUDA)
#else
#define NVFP4_CAPS_COMPILED NVFP4_CAPS_CPU
#endif

/* The revision of a capability this build carries: bumped when its behaviour grows (all are at
 * their first). Names come from the header's NVFP4_MLA_FOR_EACH_CAPABILITY, nowhere else: the
 * table of compiled capabilities is generated from it (compiled_capabilities.c). */
#define NVFP4_CAP_REVISION(bit) 1u

#endif
