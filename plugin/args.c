/* Versioned structs and tensor descriptor checks (see args.h). */
#include "args.h"

#include <string.h>

#include "errors.h"

/* Shapes and strides past this are nonsense for a KV cache and would overflow byte offsets. */
#define NVFP4_MAX_EXTENT (INT64_C(1) << 40)
/* No tensor spans more bytes than this from its base (256 TiB: more than any host or device addresses),
 * so that every element offset a backend computes from shapes and strides fits an int64 with room. */
#define NVFP4_MAX_SPAN_BYTES (UINT64_C(1) << 48)

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

/* Bytes from a tensor's base to one past its last element, (sum of (shape[d] - 1) * strides[d] + 1) *
 * element size, in checked arithmetic (each term alone may pass 2^64: shape and strides are up to 2^40);
 * 0 for a tensor without elements. -1 when the sum overflows. */
static int span_bytes(const nvfp4_mla_tensor_t *t, uint64_t *bytes) {
    uint64_t last = 0, term;
    *bytes = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 0) {
            return 0;
        }
        if (__builtin_mul_overflow((uint64_t)(t->shape[d] - 1), (uint64_t)t->strides[d], &term) ||
            __builtin_add_overflow(last, term, &last)) {
            return -1;
        }
    }
    return __builtin_add_overflow(last, 1, &last) ||
                   __builtin_mul_overflow(last, (uint64_t)nvfp4_dtype_size(t->dtype), bytes)
               ? -1
               : 0;
}

nvfp4_span_t nvfp4_tensor_span(const nvfp4_mla_tensor_t *t) {
    uint64_t bytes = 0;
    if (!t->data || span_bytes(t, &bytes) != 0) {
        bytes = 0; /* unreachable for a tensor nvfp4_check_tensor passed */
    }
    return (nvfp4_span_t){(uintptr_t)t->data, (uintptr_t)t->data + (uintptr_t)bytes};
}

nvfp4_span_t nvfp4_pointer_span(const void *p, size_t bytes) {
    return (nvfp4_span_t){(uintptr_t)p, p ? (uintptr_t)p + bytes : (uintptr_t)p};
}

/* INVALID_ARGUMENT when output span a shares a byte with b (nvfp4_check_outputs_apart's rule). */
static nvfp4_mla_status_t check_apart(const char *op, const char *name, nvfp4_span_t a, const char *other_name,
                                      nvfp4_span_t b) {
    if (a.lo < a.hi && b.lo < b.hi && a.lo < b.hi && b.lo < a.hi) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT,
                          "%s: %s overlaps %s (bytes [%p, %p) and [%p, %p)): an output shares no byte with another "
                          "argument of the call", op, name, other_name, (void *)a.lo, (void *)a.hi, (void *)b.lo,
                          (void *)b.hi);
    }
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_check_outputs_apart(const char *op, const nvfp4_named_span_t *outputs, int n_outputs,
                                             const nvfp4_named_span_t *inputs, int n_inputs) {
    nvfp4_mla_status_t st = NVFP4_MLA_OK;
    for (int o = 0; o < n_outputs && !st; o++) {
        for (int i = 0; i < n_inputs && !st; i++) {
            st = check_apart(op, outputs[o].name, outputs[o].span, inputs[i].name, inputs[i].span);
        }
        for (int e = 0; e < o && !st; e++) {
            st = check_apart(op, outputs[o].name, outputs[o].span, outputs[e].name, outputs[e].span);
        }
    }
    return st;
}

/* The bytes a tensor's shape and strides address, within NVFP4_MAX_SPAN_BYTES and the address space. */
static nvfp4_mla_status_t check_span(const nvfp4_mla_tensor_t *t, const nvfp4_tensor_rule_t *r) {
    uint64_t bytes;
    if (span_bytes(t, &bytes) != 0) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT,
                          "%s: %s: its shape and strides address more than 2^64 bytes from its base", r->op, r->name);
    }
    if (bytes > NVFP4_MAX_SPAN_BYTES) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT,
                          "%s: %s: its shape and strides address %llu bytes from its base, more than 2^48 (256 TiB): "
                          "no device holds such a tensor", r->op, r->name, (unsigned long long)bytes);
    }
    if ((uintptr_t)t->data > UINTPTR_MAX - (uintptr_t)bytes) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT,
                          "%s: %s: data %p plus the %llu bytes its shape and strides address wraps the address space",
                          r->op, r->name, t->data, (unsigned long long)bytes);
    }
    return NVFP4_MLA_OK;
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
    return check_span(t, r);
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

/* `count` rows `stride` elements apart, each `extent` elements long, must not overlap (outputs); *span
 * (may be NULL) is then the elements they cover, (count - 1) * stride + extent, in checked arithmetic
 * (count and stride are up to 2^40 each, and a tensor without elements has no span to bound them). */
static nvfp4_mla_status_t check_no_overlap(const char *op, const char *name, int64_t count, int64_t stride,
                                           int64_t extent, int64_t *span) {
    int64_t covered;
    if (count > 1 && stride < extent) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "%s: %s: a stride of %lld elements overlaps rows of %lld", op,
                          name, (long long)stride, (long long)extent);
    }
    if (__builtin_mul_overflow(count > 0 ? count - 1 : 0, stride, &covered) ||
        __builtin_add_overflow(covered, extent, &covered)) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "%s: %s: %lld rows %lld elements apart overflow 64 bits", op,
                          name, (long long)count, (long long)stride);
    }
    if (span) {
        *span = covered;
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
    int64_t head_rows = 0; /* set by the first check when it passes; 0 keeps -Wmaybe-uninitialized quiet */
    if ((st = check_no_overlap(op, "out heads", heads, out->strides[1], NVFP4_MLA_LATENT_DIM, &head_rows)) ||
        (st = check_no_overlap(op, "out queries", nq, out->strides[0], head_rows, NULL)) ||
        nvfp4_tensor_absent(lse)) {
        return st;
    }
    r = (nvfp4_tensor_rule_t){op, "lse", NVFP4_MLA_DTYPE_F32, 0, 2, device_type, device_index};
    if ((st = nvfp4_check_tensor(lse, &r)) || (st = nvfp4_check_dim(lse, &r, 0, nq, "n_q")) ||
        (st = nvfp4_check_dim(lse, &r, 1, heads, "h")) ||
        (st = check_no_overlap(op, "lse heads", heads, lse->strides[1], 1, &head_rows)) ||
        (st = check_no_overlap(op, "lse queries", nq, lse->strides[0], head_rows, NULL))) {
        return st;
    }
    return NVFP4_MLA_OK;
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
    /* shape[1] <= 2^40 and bytes <= 656: the block's bytes fit; the capacity is checked (a cache of
     * {147102629888, 125400505, 368} wrapped to 2^30 slots and passed). */
    if (c->shape[0] > 1 && c->strides[0] < c->shape[1] * bytes) {
        return nvfp4_fail(bad, "%s: %s: block stride (strides[0]) is %lld bytes, must be >= block_size * %d = %lld",
                          r->op, r->name, (long long)c->strides[0], bytes, (long long)(c->shape[1] * bytes));
    }
    int64_t capacity;
    if (__builtin_mul_overflow(c->shape[0], c->shape[1], &capacity) || capacity >= (INT64_C(1) << 31)) {
        return nvfp4_fail(bad, "%s: %s: %lld * %lld slots (num_blocks * block_size), must be below 2^31 (int32 slot "
                               "ids)", r->op, r->name, (long long)c->shape[0], (long long)c->shape[1]);
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
