/* nvfp4-mla ABI 1: the record contract in one place (docs/record-format.md sections 2, 4, 6 and 8).
 *
 * Layout ids, record sizes, field offsets and the rules every writer, reader and host applies to
 * them: the bytes of a layout's record, whether a layout carries a scale mode, whether an operation
 * may be called with a layout/mode/outer-scale combination, and which capabilities it needs then.
 * The plugin validates with these functions, the loaders decide with them, the CLI and the kernels
 * address records with these offsets, and the layout manifest (host_shims/python) prints their
 * results for the Python shim's tests; nothing else restates them.
 *
 * Everything here is a constant or a pure static inline function: no state, no I/O, safe from any
 * thread, and never an exported symbol (a host compiles its own copy). Values are frozen for ABI
 * major 1 like those of nvfp4_mla_types.h. Included by nvfp4_mla.h.
 */
#ifndef NVFP4_MLA_RECORD_H
#define NVFP4_MLA_RECORD_H

#include <float.h>
#include <stdint.h>

#include "nvfp4_mla_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Record layouts (docs/record-format.md section 2; section 8 for the 656-byte baseline). ---- */
#define NVFP4_MLA_LAYOUT_FP8_ROPE_368 1   /* 368-byte record, E4M3 RoPE */
#define NVFP4_MLA_LAYOUT_BF16_ROPE_432 2  /* 432-byte record, bf16 RoPE; static mode only */
#define NVFP4_MLA_LAYOUT_FP8_DS_MLA_656 3 /* 656-byte fp8_ds_mla record (docs/record-format.md section 8),
                                             read by attend only: the baseline serving stacks run */
#define NVFP4_MLA_RECORD_BYTES_368 368
#define NVFP4_MLA_RECORD_BYTES_432 432
#define NVFP4_MLA_RECORD_BYTES_656 656
#define NVFP4_MLA_LATENT_DIM 512 /* kv_c values per token */
#define NVFP4_MLA_ROPE_DIM 64    /* k_pe values per token */
#define NVFP4_MLA_ROW_DIM 576    /* a decoded row: the latent, then the RoPE key */

/* ---- Outer-scale modes (docs/record-format.md section 4, step 1). ---- */
#define NVFP4_MLA_SCALE_STATIC 1    /* one launch scalar per layer (1.0 = uncalibrated) */
#define NVFP4_MLA_SCALE_PER_TOKEN 2 /* s_t stored in each record at [292,296); 368 only */

/* ---- Writer policies: how a writer picks the codes (docs/record-format.md section 4b). ----
 * Any choice of codes is a valid record (docs/record-format.md sections 4-5): a policy changes which
 * codes the writer picks, never what a reader computes, so it is not part of the cache identity.
 * Ids are frozen like the values above; a policy a plugin serves is named by a capability. */
#define NVFP4_MLA_WRITER_POLICY_RTN 0 /* "rtn": docs/record-format.md section 4 as written (the default) */
#define NVFP4_MLA_WRITER_POLICY_MSE 1 /* "mse": per group, the scale code of least squared error
                                         among six candidates (capability write.policy_mse) */
#define NVFP4_MLA_WRITER_POLICY_COUNT 2

/* Every policy this header knows, as X(id, "name") pairs in id order. */
#define NVFP4_MLA_FOR_EACH_WRITER_POLICY(X)                                                         \
    X(NVFP4_MLA_WRITER_POLICY_RTN, "rtn")                                                           \
    X(NVFP4_MLA_WRITER_POLICY_MSE, "mse")

/* The policy's name ("rtn", "mse"); "unknown" for an id this header does not know. */
static inline const char *nvfp4_mla_writer_policy_name(uint32_t policy) {
#define NVFP4_MLA_POLICY_NAME_OF_(id, name)                                                         \
    if (policy == (id)) {                                                                           \
        return name;                                                                                \
    }
    NVFP4_MLA_FOR_EACH_WRITER_POLICY(NVFP4_MLA_POLICY_NAME_OF_)
#undef NVFP4_MLA_POLICY_NAME_OF_
    return "unknown";
}

/* The capability bit a writer needs to serve `policy` (rtn needs none: every writer is rtn). */
static inline uint64_t nvfp4_mla_writer_policy_cap(uint32_t policy) {
    return policy == NVFP4_MLA_WRITER_POLICY_MSE ? NVFP4_MLA_CAP_WRITE_POLICY_MSE : 0u;
}

/* ---- Fields of the 368- and 432-byte records (byte offsets, little-endian). ---- */
#define NVFP4_MLA_GROUP_SIZE 16                /* latent values per E4M3 group scale */
#define NVFP4_MLA_GROUPS 32                    /* group scales per record */
#define NVFP4_MLA_RECORD_PAYLOAD_OFFSET 0      /* [0,256) 512 E2M1 codes, element 2i in the low nibble */
#define NVFP4_MLA_RECORD_GROUP_SCALE_OFFSET 256 /* [256,288) 32 E4M3 group-scale codes */
#define NVFP4_MLA_RECORD_ROPE_SCALE_OFFSET 288 /* [288,292) f32 RoPE scale r (368; zero in 432) */
#define NVFP4_MLA_RECORD_TOKEN_SCALE_OFFSET 292 /* [292,296) f32 s_t (368 per-token; else 0.0f) */
#define NVFP4_MLA_RECORD_PAD_OFFSET 296        /* [296,304) zero */
#define NVFP4_MLA_RECORD_ROPE_OFFSET 304       /* [304,368) 64 E4M3 codes, or [304,432) 64 bf16 */

/* ---- Fields of the 656-byte fp8_ds_mla record. ---- */
#define NVFP4_MLA_FP8_656_TILE_SIZE 128          /* latent values per f32 tile scale */
#define NVFP4_MLA_FP8_656_TILES 4                /* tile scales per record */
#define NVFP4_MLA_FP8_656_TILE_SCALE_OFFSET 512  /* [512,528) 4 f32 tile scales after 512 E4M3 codes */
#define NVFP4_MLA_FP8_656_ROPE_OFFSET 528        /* [528,656) 64 bf16 RoPE values */

/* Bytes of one record of `layout`; 0 for an id this header does not know. */
static inline uint32_t nvfp4_mla_record_bytes(uint32_t layout) {
    return layout == NVFP4_MLA_LAYOUT_FP8_ROPE_368    ? NVFP4_MLA_RECORD_BYTES_368
           : layout == NVFP4_MLA_LAYOUT_BF16_ROPE_432 ? NVFP4_MLA_RECORD_BYTES_432
           : layout == NVFP4_MLA_LAYOUT_FP8_DS_MLA_656 ? NVFP4_MLA_RECORD_BYTES_656
                                                       : 0u;
}

/* The layout's name as capabilities and messages spell it ("fp8_rope_368", ...); "unknown". */
static inline const char *nvfp4_mla_layout_name(uint32_t layout) {
    return layout == NVFP4_MLA_LAYOUT_FP8_ROPE_368    ? "fp8_rope_368"
           : layout == NVFP4_MLA_LAYOUT_BF16_ROPE_432 ? "bf16_rope_432"
           : layout == NVFP4_MLA_LAYOUT_FP8_DS_MLA_656 ? "fp8_ds_mla_656"
                                                       : "unknown";
}

/* The record operations of the table, named by their capability bits: write and gather serve the
 * NVFP4 layouts; attend also reads the 656-byte baseline. */
static inline uint64_t nvfp4_mla_layout_ops(uint32_t layout) {
    const uint64_t all = NVFP4_MLA_CAP_OP_WRITE | NVFP4_MLA_CAP_OP_GATHER | NVFP4_MLA_CAP_OP_ATTEND;
    return layout == NVFP4_MLA_LAYOUT_FP8_ROPE_368 || layout == NVFP4_MLA_LAYOUT_BF16_ROPE_432 ? all
           : layout == NVFP4_MLA_LAYOUT_FP8_DS_MLA_656                                         ? NVFP4_MLA_CAP_OP_ATTEND
                                                                                               : 0u;
}

/* 1 when records of `layout` carry `scale_mode`: only the 368-byte record has the s_t field, so
 * per-token needs it; the 656-byte record has its own tile scales and is read in static mode. */
static inline int nvfp4_mla_layout_has_mode(uint32_t layout, uint32_t scale_mode) {
    if (scale_mode == NVFP4_MLA_SCALE_PER_TOKEN) {
        return layout == NVFP4_MLA_LAYOUT_FP8_ROPE_368;
    }
    return scale_mode == NVFP4_MLA_SCALE_STATIC && nvfp4_mla_record_bytes(layout) != 0;
}

/* What is wrong with a call's layout, scale mode and outer scale (nvfp4_mla_mode_check). */
#define NVFP4_MLA_MODE_OK 0
#define NVFP4_MLA_MODE_UNKNOWN_LAYOUT 1      /* no NVFP4_MLA_LAYOUT_* */
#define NVFP4_MLA_MODE_LAYOUT_NOT_FOR_OP 2   /* the 656-byte record given to write or gather */
#define NVFP4_MLA_MODE_UNKNOWN_SCALE_MODE 3  /* no NVFP4_MLA_SCALE_* */
#define NVFP4_MLA_MODE_PER_TOKEN_NEEDS_368 4 /* per-token on a layout without the s_t field */
#define NVFP4_MLA_MODE_PER_TOKEN_SCALE 5     /* per-token with an outer scale other than 0 */
#define NVFP4_MLA_MODE_STATIC_SCALE 6        /* static with a scale that is no positive normal float */
#define NVFP4_MLA_MODE_FP8_656_SCALE 7       /* 656 not read as static with outer scale 1.0 */

/* The mode rule of one operation (`op`: one NVFP4_MLA_CAP_OP_* bit): NVFP4_MLA_MODE_OK, or the
 * first thing wrong. A static scale must be a positive normal float (its reciprocal is then
 * finite); per-token calls pass 0, because the records carry s_t. */
static inline int32_t nvfp4_mla_mode_check(uint64_t op, uint32_t layout, uint32_t scale_mode, float outer_scale) {
    if (!nvfp4_mla_record_bytes(layout)) {
        return NVFP4_MLA_MODE_UNKNOWN_LAYOUT;
    }
    if (!(nvfp4_mla_layout_ops(layout) & op)) {
        return NVFP4_MLA_MODE_LAYOUT_NOT_FOR_OP;
    }
    if (layout == NVFP4_MLA_LAYOUT_FP8_DS_MLA_656) {
        return scale_mode == NVFP4_MLA_SCALE_STATIC && outer_scale == 1.0f ? NVFP4_MLA_MODE_OK
                                                                            : NVFP4_MLA_MODE_FP8_656_SCALE;
    }
    if (scale_mode == NVFP4_MLA_SCALE_PER_TOKEN) {
        return !nvfp4_mla_layout_has_mode(layout, scale_mode) ? NVFP4_MLA_MODE_PER_TOKEN_NEEDS_368
               : outer_scale != 0.0f                        ? NVFP4_MLA_MODE_PER_TOKEN_SCALE
                                                            : NVFP4_MLA_MODE_OK;
    }
    if (scale_mode != NVFP4_MLA_SCALE_STATIC) {
        return NVFP4_MLA_MODE_UNKNOWN_SCALE_MODE;
    }
    return outer_scale >= FLT_MIN && outer_scale <= FLT_MAX ? NVFP4_MLA_MODE_OK : NVFP4_MLA_MODE_STATIC_SCALE;
}

/* The outer scale a call passes when its caller names none: 0 in per-token mode (the records carry
 * s_t), 1.0 otherwise (uncalibrated static mode; the 656-byte record). */
static inline float nvfp4_mla_default_outer_scale(uint32_t scale_mode) {
    return scale_mode == NVFP4_MLA_SCALE_PER_TOKEN ? 0.0f : 1.0f;
}

/* Every capability bit that `ops` (an OR of NVFP4_MLA_CAP_OP_* bits) need for records of `layout`
 * in `scale_mode`: the operations themselves, the layout, and the mode on each side of it (the
 * writer's write.per_token_scale, the readers' read.latent_scale_per_token, or scale.static_outer).
 * Valid combinations only (nvfp4_mla_mode_check first); an unknown layout adds no layout bit. */
static inline uint64_t nvfp4_mla_caps_needed(uint64_t ops, uint32_t layout, uint32_t scale_mode) {
    const uint64_t readers = NVFP4_MLA_CAP_OP_GATHER | NVFP4_MLA_CAP_OP_ATTEND;
    if (layout == NVFP4_MLA_LAYOUT_FP8_DS_MLA_656) {
        return ops | NVFP4_MLA_CAP_READ_FP8_DS_MLA_656; /* its own tile scales: no outer-scale mode */
    }
    uint64_t need = ops | (layout == NVFP4_MLA_LAYOUT_FP8_ROPE_368    ? NVFP4_MLA_CAP_LAYOUT_FP8_ROPE_368
                           : layout == NVFP4_MLA_LAYOUT_BF16_ROPE_432 ? NVFP4_MLA_CAP_LAYOUT_BF16_ROPE_432
                                                                      : 0u);
    if (scale_mode != NVFP4_MLA_SCALE_PER_TOKEN) {
        return need | NVFP4_MLA_CAP_SCALE_STATIC_OUTER;
    }
    return need | ((ops & NVFP4_MLA_CAP_OP_WRITE) ? NVFP4_MLA_CAP_WRITE_PER_TOKEN_SCALE : 0u) |
           ((ops & readers) ? NVFP4_MLA_CAP_READ_LATENT_SCALE_PER_TOKEN : 0u);
}

#ifdef __cplusplus
}
#endif
#endif /* NVFP4_MLA_RECORD_H */
