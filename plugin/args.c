/* Versioned structs and tensor descriptor checks (see args.h). */
#include "args.h"

#include <string.h>

#include "errors.h"

/* Shapes and strides past this are nonsense for a KV cache and would overflow byte offsets. */
#define NVFP4_MAX_EXTENT (INT64_C(1) << 40)

nvfp4_mla_status_t nvfp4_copy_versioned(void *dst, size_t known_size, size_t min_size, const void *src,
                                        const char *what) {
    if (!src) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "%s: argument pointer is NULL", what);
    }
    uint32_t host_size;
    memcpy(&host_size, src, sizeof host_size);
    if (host_size < min_size) {
        return nvfp4_fail(NVFP4_MLA_ERR_VERSION, "%s: struct_size %u is smaller than the ABI 1.0 size %zu", what,
                          host_size, min_size);
    }
    memset(dst, 0, known_size);
    memcpy(dst, src, host_size < known_size ? host_size : known_size);
    for (size_t i = known_size; i < host_size; i++) {
        if (((const unsigned char *)src)[i] != 0) {
            return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT,
                              "%s: struct_size %u carries a non-zero field at byte %zu that ABI %d.%d does not know",
                              what, host_size, i, NVFP4_MLA_ABI_MAJOR, NVFP4_MLA_ABI_MINOR);
        }
    }
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_take_args(void *dst, size_t size, size_t min_size, const void *src, const char *op,
                                   const char *what, size_t flags_offset, size_t flags_size, size_t reserved_offset,
                                   size_t reserved_size) {
    nvfp4_mla_status_t st = nvfp4_copy_versioned(dst, size, min_size, src, what);
    if (!st && !(st = nvfp4_check_zero(op, "flags", (const unsigned char *)dst + flags_offset, flags_size))) {
        st = nvfp4_check_zero(op, "reserved", (const unsigned char *)dst + reserved_offset, reserved_size);
    }
    return st;
}

size_t nvfp4_dtype_size(int32_t dtype) {
    switch (dtype) {
    case NVFP4_MLA_DTYPE_U8: return 1;
    case NVFP4_MLA_DTYPE_BF16:
    case NVFP4_MLA_DTYPE_F16: return 2;
    case NVFP4_MLA_DTYPE_I32:
    case NVFP4_MLA_DTYPE_F32: return 4;
    case NVFP4_MLA_DTYPE_I64: return 8;
    default: return 0;
    }
}

const char *nvfp4_dtype_name(int32_t dtype) {
    switch (dtype) {
    case NVFP4_MLA_DTYPE_U8: return "u8";
    case NVFP4_MLA_DTYPE_I32: return "i32";
    case NVFP4_MLA_DTYPE_I64: return "i64";
    case NVFP4_MLA_DTYPE_F32: return "f32";
    case NVFP4_MLA_DTYPE_BF16: return "bf16";
    case NVFP4_MLA_DTYPE_F16: return "f16";
    default: return "unknown";
    }
}

nvfp4_mla_status_t nvfp4_check_tensor(const nvfp4_mla_tensor_t *t, const nvfp4_tensor_rule_t *r) {
    const nvfp4_mla_status_t bad = NVFP4_MLA_ERR_INVALID_ARGUMENT;
    if (t->dtype != r->dtype && (r->alt_dtype == 0 || t->dtype != r->alt_dtype)) {
        return nvfp4_fail(bad, "%s: %s: dtype is %s (%d), must be %s%s%s", r->op, r->name, nvfp4_dtype_name(t->dtype),
                          t->dtype, nvfp4_dtype_name(r->dtype), r->alt_dtype ? " or " : "",
                          r->alt_dtype ? nvfp4_dtype_name(r->alt_dtype) : "");
    }
    if (t->ndim != r->ndim) {
        return nvfp4_fail(bad, "%s: %s: ndim is %d, must be %d", r->op, r->name, t->ndim, r->ndim);
    }
    int64_t elements = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0 || t->shape[d] > NVFP4_MAX_EXTENT) {
            return nvfp4_fail(bad, "%s: %s: shape[%d] = %lld is outside [0, 2^40]", r->op, r->name, d,
                              (long long)t->shape[d]);
        }
        if (t->strides[d] < 0 || t->strides[d] > NVFP4_MAX_EXTENT) {
            return nvfp4_fail(bad, "%s: %s: strides[%d] = %lld is outside [0, 2^40]", r->op, r->name, d,
                              (long long)t->strides[d]);
        }
        elements *= t->shape[d] ? 1 : 0;
    }
    for (int d = t->ndim; d < NVFP4_MLA_MAX_DIMS; d++) {
        if (t->shape[d] != 0 || t->strides[d] != 0) {
            return nvfp4_fail(bad, "%s: %s: shape/strides past ndim %d must be zero", r->op, r->name, t->ndim);
        }
    }
    if (t->device_type != r->device_type || t->device_index != r->device_index) {
        return nvfp4_fail(bad, "%s: %s: lives on device (type %d, index %d), the context is on (type %d, index %d)",
                          r->op, r->name, t->device_type, t->device_index, r->device_type, r->device_index);
    }
    if (elements && !t->data) {
        return nvfp4_fail(bad, "%s: %s: data is NULL", r->op, r->name);
    }
    size_t align = nvfp4_dtype_size(t->dtype);
    if (t->data && ((uintptr_t)t->data % align) != 0) {
        return nvfp4_fail(bad, "%s: %s: data %p is not aligned to its %zu-byte elements", r->op, r->name, t->data,
                          align);
    }
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_check_dim(const nvfp4_mla_tensor_t *t, const nvfp4_tensor_rule_t *r, int dim, int64_t want,
                                   const char *why) {
    if (t->shape[dim] != want) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "%s: %s: shape[%d] is %lld, must be %lld (%s)", r->op,
                          r->name, dim, (long long)t->shape[dim], (long long)want, why);
    }
    return NVFP4_MLA_OK;
}

int nvfp4_tensor_absent(const nvfp4_mla_tensor_t *t) {
    return t->data == NULL && t->ndim == 0;
}

/* `count` rows `stride` elements apart, each `extent` elements long, must not overlap (outputs). */
static nvfp4_mla_status_t check_no_overlap(const char *op, const char *name, int64_t count, int64_t stride,
                                           int64_t extent) {
    if (count > 1 && stride < extent) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "%s: %s: a stride of %lld elements overlaps rows of %lld", op,
                          name, (long long)stride, (long long)extent);
    }
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_check_head_outputs(const char *op, int32_t device_type, int32_t device_index,
                                            const nvfp4_mla_tensor_t *out, const nvfp4_mla_tensor_t *lse, int64_t nq,
                                            int64_t heads) {
    nvfp4_tensor_rule_t r = {op, "out", NVFP4_MLA_DTYPE_BF16, 0, 3, device_type, device_index};
    nvfp4_mla_status_t st;
    if ((st = nvfp4_check_tensor(out, &r)) || (st = nvfp4_check_dim(out, &r, 0, nq, "n_q")) ||
        (st = nvfp4_check_dim(out, &r, 1, heads, "h")) ||
        (st = nvfp4_check_dim(out, &r, 2, NVFP4_MLA_LATENT_DIM, "latent"))) {
        return st;
    }
    if (out->strides[2] != 1) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "%s: out: strides[2] is %lld, must be 1", op,
                          (long long)out->strides[2]);
    }
    if ((st = check_no_overlap(op, "out heads", heads, out->strides[1], NVFP4_MLA_LATENT_DIM)) ||
        (st = check_no_overlap(op, "out queries", nq, out->strides[0],
                               (heads - 1) * out->strides[1] + NVFP4_MLA_LATENT_DIM)) ||
        nvfp4_tensor_absent(lse)) {
        return st;
    }
    r = (nvfp4_tensor_rule_t){op, "lse", NVFP4_MLA_DTYPE_F32, 0, 2, device_type, device_index};
    if ((st = nvfp4_check_tensor(lse, &r)) || (st = nvfp4_check_dim(lse, &r, 0, nq, "n_q")) ||
        (st = nvfp4_check_dim(lse, &r, 1, heads, "h")) ||
        (st = check_no_overlap(op, "lse heads", heads, lse->strides[1], 1))) {
        return st;
    }
    return check_no_overlap(op, "lse queries", nq, lse->strides[0], (heads - 1) * lse->strides[1] + 1);
}

nvfp4_mla_status_t nvfp4_check_rows(const nvfp4_mla_tensor_t *t, const nvfp4_tensor_rule_t *r, int64_t cols) {
    nvfp4_mla_status_t st = nvfp4_check_dim(t, r, 1, cols, "values per row");
    if (st) {
        return st;
    }
    if (t->strides[1] != 1) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "%s: %s: strides[1] is %lld, must be 1 (contiguous rows)",
                          r->op, r->name, (long long)t->strides[1]);
    }
    if (t->shape[0] > 1 && t->strides[0] < cols) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT,
                          "%s: %s: strides[0] is %lld, must be >= %lld so that rows do not overlap", r->op, r->name,
                          (long long)t->strides[0], (long long)cols);
    }
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_check_mode(const char *op, uint64_t op_cap, uint32_t layout, uint32_t scale_mode,
                                    float outer_scale) {
    const nvfp4_mla_status_t bad = NVFP4_MLA_ERR_INVALID_ARGUMENT;
    const char *attend_too = op_cap == NVFP4_MLA_CAP_OP_ATTEND ? " or 3 (fp8_ds_mla_656)" : "";
    switch (nvfp4_mla_mode_check(op_cap, layout, scale_mode, outer_scale)) {
    case NVFP4_MLA_MODE_OK: return NVFP4_MLA_OK;
    case NVFP4_MLA_MODE_UNKNOWN_LAYOUT:
        return nvfp4_fail(bad, "%s: layout is %u, must be 1 (fp8_rope_368), 2 (bf16_rope_432)%s", op, layout,
                          attend_too);
    case NVFP4_MLA_MODE_LAYOUT_NOT_FOR_OP:
        return nvfp4_fail(bad, "%s: layout %u (%s) is read by attend only; %s takes 1 (fp8_rope_368) or 2 "
                               "(bf16_rope_432)", op, layout, nvfp4_mla_layout_name(layout), op);
    case NVFP4_MLA_MODE_UNKNOWN_SCALE_MODE:
        return nvfp4_fail(bad, "%s: scale_mode is %u, must be 1 (static) or 2 (per-token)", op, scale_mode);
    case NVFP4_MLA_MODE_PER_TOKEN_NEEDS_368:
        return nvfp4_fail(bad, "%s: scale_mode per-token requires layout fp8_rope_368; %s records have no per-token "
                               "scale field", op, nvfp4_mla_layout_name(layout));
    case NVFP4_MLA_MODE_PER_TOKEN_SCALE:
        return nvfp4_fail(bad, "%s: outer_scale is %g, must be 0 in per-token mode (records carry s_t)", op,
                          (double)outer_scale);
    case NVFP4_MLA_MODE_FP8_656_SCALE:
        return nvfp4_fail(bad, "%s: layout fp8_ds_mla_656 carries its own tile scales: scale_mode must be static "
                               "with outer_scale 1.0", op);
    default:
        return nvfp4_fail(bad, "%s: outer_scale is %g, must be a positive normal float (1.0 when uncalibrated)", op,
                          (double)outer_scale);
    }
}

nvfp4_mla_status_t nvfp4_check_cache(const nvfp4_mla_tensor_t *c, const nvfp4_tensor_rule_t *r, uint32_t layout,
                                     nvfp4_cache_geometry_t *g) {
    const nvfp4_mla_status_t bad = NVFP4_MLA_ERR_INVALID_ARGUMENT;
    nvfp4_mla_status_t st = nvfp4_check_tensor(c, r);
    if (st) {
        return st;
    }
    const int32_t bytes = (int32_t)nvfp4_mla_record_bytes(layout); /* a known layout: checked by mode */
    if ((st = nvfp4_check_dim(c, r, 2, bytes, "record bytes of the layout"))) {
        return st;
    }
    if (c->strides[2] != 1 || c->strides[1] != bytes) {
        return nvfp4_fail(bad, "%s: %s: strides[1..2] are {%lld, %lld}, must be {%d, 1} (records packed in a block)",
                          r->op, r->name, (long long)c->strides[1], (long long)c->strides[2], bytes);
    }
    if (c->shape[1] < 1) {
        return nvfp4_fail(bad, "%s: %s: block_size (shape[1]) is %lld, must be >= 1", r->op, r->name,
                          (long long)c->shape[1]);
    }
    if (c->shape[0] > 1 && c->strides[0] < c->shape[1] * bytes) {
        return nvfp4_fail(bad, "%s: %s: block stride (strides[0]) is %lld bytes, must be >= block_size * %d = %lld",
                          r->op, r->name, (long long)c->strides[0], bytes, (long long)(c->shape[1] * bytes));
    }
    int64_t capacity = c->shape[0] * c->shape[1];
    if (capacity >= (INT64_C(1) << 31)) {
        return nvfp4_fail(bad, "%s: %s: %lld slots (num_blocks * block_size), must be below 2^31 (int32 slot ids)",
                          r->op, r->name, (long long)capacity);
    }
    if (c->device_type == NVFP4_MLA_DEVICE_CUDA && (((uintptr_t)c->data % 16) || (c->strides[0] % 16))) {
        return nvfp4_fail(bad,
                          "%s: %s: CUDA caches need a 16-byte aligned base and block stride (base %p, stride %lld)",
                          r->op, r->name, c->data, (long long)c->strides[0]);
    }
    g->record_bytes = bytes;
    g->block_size = c->shape[1];
    g->block_stride = c->shape[0] > 1 ? c->strides[0] : c->shape[1] * bytes;
    g->capacity = capacity;
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_check_zero(const char *op, const char *what, const void *p, size_t bytes) {
    for (size_t i = 0; i < bytes; i++) {
        if (((const unsigned char *)p)[i]) {
            return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "%s: %s must be zero in ABI %d.%d", op, what,
                              NVFP4_MLA_ABI_MAJOR, NVFP4_MLA_ABI_MINOR);
        }
    }
    return NVFP4_MLA_OK;
}
