/* libFuzzer target: write, gather, attend and merge argument validation on the CPU backend.
 *
 * The input picks every descriptor field: mostly a valid template, sometimes a mutated value. Each
 * buffer is allocated at exactly the extent its descriptor claims (1 + sum((shape-1) * stride)
 * elements), so under AddressSanitizer any access the validation lets through beyond a descriptor
 * is a crash. Slot values come from the input too (negative, past capacity, huge). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "ops.h"

typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader_t;

static uint32_t r8(reader_t *r) {
    if (!r->n) return 0;
    r->n--;
    return *r->p++;
}

static int64_t pick(reader_t *r, int64_t valid) {
    uint32_t c = r8(r);
    if (c < 200) return valid;
    switch (c % 6) {
    case 0: return 0;
    case 1: return valid + 1;
    case 2: return valid - 1;
    case 3: return (int64_t)r8(r) * 7;
    case 4: return -(int64_t)r8(r);
    default: return (INT64_C(1) << 40) + r8(r);
    }
}

/* Fills a descriptor from a template with mutations and allocates exactly its extent. */
static int make(reader_t *r, nvfp4_mla_tensor_t *t, int32_t dtype, int ndim, const int64_t *shape,
                const int64_t *strides, void **owned) {
    memset(t, 0, sizeof *t);
    t->dtype = (int32_t)pick(r, dtype);
    t->ndim = (int32_t)pick(r, ndim);
    t->device_type = (int32_t)pick(r, NVFP4_MLA_DEVICE_CPU);
    int dims = t->ndim >= 1 && t->ndim <= 4 ? t->ndim : ndim;
    int64_t extent = 1, any_zero = 0;
    for (int d = 0; d < dims; d++) {
        t->shape[d] = pick(r, d < ndim ? shape[d] : 0);
        t->strides[d] = pick(r, d < ndim ? strides[d] : 0);
        if (t->shape[d] <= 0) any_zero = 1;
        else if (t->shape[d] > (1 << 20) || t->strides[d] < 0 || t->strides[d] > (1 << 20)) return -1;
        else extent += (t->shape[d] - 1) * t->strides[d];
    }
    size_t elem = t->dtype == NVFP4_MLA_DTYPE_U8 ? 1 : t->dtype == NVFP4_MLA_DTYPE_I64 ? 8
                : t->dtype == NVFP4_MLA_DTYPE_I32 || t->dtype == NVFP4_MLA_DTYPE_F32 ? 4 : 2;
    size_t bytes = any_zero ? 0 : (size_t)extent * elem;
    if (bytes > (4u << 20)) return -1;
    *owned = malloc(bytes ? bytes : 1);
    for (size_t i = 0; i < bytes; i++) ((uint8_t *)*owned)[i] = (uint8_t)r8(r) ^ (uint8_t)i;
    t->data = r8(r) == 255 ? NULL : *owned;
    return 0;
}

static nvfp4_mla_context_t *cpu;

/* merge: partial_out [P, rows, heads, 512] bf16|f32, partial_lse [P, rows, heads] (values from the
 * input: NaN, +-inf included), out, lse; the outputs may land on the inputs' memory. */
static void fuzz_merge(reader_t *r, int64_t rows, void **bufs) {
    const int64_t parts = 1 + r8(r) % 5, heads = 1 + r8(r) % 6;
    const int32_t po_dtype = r8(r) & 1 ? NVFP4_MLA_DTYPE_F32 : NVFP4_MLA_DTYPE_BF16;
    nvfp4_mla_merge_args_t m = {.struct_size = (uint32_t)pick(r, sizeof m), .flags = (uint32_t)pick(r, 0)};
    void *lse_buf = NULL;
    int ok = make(r, &m.partial_out, po_dtype, 4, (int64_t[]){parts, rows, heads, 512},
                  (int64_t[]){rows * heads * 512, heads * 512, 512, 1}, &bufs[1]) == 0 &&
             make(r, &m.partial_lse, NVFP4_MLA_DTYPE_F32, 3, (int64_t[]){parts, rows, heads},
                  (int64_t[]){rows * heads, heads, 1}, &bufs[2]) == 0 &&
             make(r, &m.out, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){rows, heads, 512}, (int64_t[]){heads * 512, 512, 1},
                  &bufs[3]) == 0 &&
             make(r, &m.lse, NVFP4_MLA_DTYPE_F32, 2, (int64_t[]){rows, heads}, (int64_t[]){heads, 1}, &lse_buf) == 0;
    if (ok && r8(r) & 1) memset(&m.lse, 0, sizeof m.lse);
    if (ok && r8(r) == 254) m.out.data = m.partial_out.data; /* aliasing the outputs must be refused */
    if (ok && r8(r) == 254) m.lse.data = m.partial_lse.data;
    if (ok && m.struct_size <= sizeof m) {
        nvfp4_op_merge(cpu, &m);
    }
    free(lse_buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!cpu) {
        nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CPU, 0, 0, NULL, {0}, NULL};
        if (nvfp4_context_init(&init, &cpu)) return 0;
    }
    reader_t r = {data, size};
    const uint32_t op = r8(&r) % 4; /* 0 write, 1 gather, 2 attend, 3 merge */
    const int gather = op == 1;
    const uint32_t layout = (uint32_t)pick(&r, 1 + (r8(&r) & 1));
    const int32_t rb = layout == 2 ? 432 : 368;
    const uint32_t mode = (uint32_t)pick(&r, layout == 2 ? 1 : 1 + (r8(&r) & 1));
    const float scales[4] = {1.0f, 0.003f, 0.0f, -1.0f};
    float scale = mode == 2 ? 0.0f : scales[r8(&r) & 3];
    const int64_t rows = 1 + r8(&r) % 6, blocks = 1 + r8(&r) % 3, bs = 1 + r8(&r) % 4;
    const int64_t bstride = bs * rb + 16 * (r8(&r) % 3);
    void *bufs[4] = {0};
    nvfp4_mla_tensor_t cache;
    int ok = make(&r, &cache, NVFP4_MLA_DTYPE_U8, 3, (int64_t[]){blocks, bs, rb}, (int64_t[]){bstride, rb, 1},
                  &bufs[0]) == 0;
    if (ok && op == 3) {
        fuzz_merge(&r, rows, bufs);
    } else if (ok && op == 2) {
        nvfp4_mla_attend_args_t at = {.struct_size = (uint32_t)pick(&r, sizeof at),
                                      .layout = layout,
                                      .scale_mode = mode,
                                      .outer_scale = scale,
                                      .sm_scale = (float)pick(&r, 1) * 0.04f,
                                      .cache = cache};
        const int64_t heads = 1 + r8(&r) % 20, topk = 1 + r8(&r) % 9;
        void *more[3] = {0};
        ok =
            make(&r, &at.q, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){rows, heads, 576}, (int64_t[]){heads * 576, 576, 1},
                 &bufs[1]) == 0 &&
            make(&r, &at.slots, NVFP4_MLA_DTYPE_I32, 2, (int64_t[]){rows, topk}, (int64_t[]){topk, 1}, &bufs[2]) == 0 &&
            make(&r, &at.out, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){rows, heads, 512}, (int64_t[]){heads * 512, 512, 1},
                 &bufs[3]) == 0 &&
            make(&r, &at.lse, NVFP4_MLA_DTYPE_F32, 2, (int64_t[]){rows, heads}, (int64_t[]){heads, 1}, &more[0]) == 0 &&
            make(&r, &at.valid_len, NVFP4_MLA_DTYPE_I32, 1, (int64_t[]){rows}, (int64_t[]){1}, &more[1]) == 0;
        if (ok && r8(&r) & 1) memset(&at.lse, 0, sizeof at.lse);           /* optional tensors absent */
        if (ok && r8(&r) & 1) memset(&at.valid_len, 0, sizeof at.valid_len);
        if (ok && at.struct_size <= sizeof at) {
            nvfp4_op_attend(cpu, &at);
        }
        for (int i = 0; i < 3; i++) free(more[i]);
    } else if (ok && !gather) {
        nvfp4_mla_write_args_t w = {.struct_size = (uint32_t)pick(&r, sizeof w), .layout = layout, .scale_mode = mode,
                                    .outer_scale = scale, .cache = cache};
        ok = make(&r, &w.kv_c, NVFP4_MLA_DTYPE_BF16, 2, (int64_t[]){rows, 512}, (int64_t[]){576, 1}, &bufs[1]) == 0 &&
             make(&r, &w.k_pe, NVFP4_MLA_DTYPE_BF16, 2, (int64_t[]){rows, 64}, (int64_t[]){64, 1}, &bufs[2]) == 0 &&
             make(&r, &w.slot_mapping, NVFP4_MLA_DTYPE_I64, 1, (int64_t[]){rows}, (int64_t[]){1}, &bufs[3]) == 0;
        w.writer_policy = (uint32_t)pick(&r, NVFP4_MLA_WRITER_POLICY_MSE); /* mutated: 0 (rtn), 2, ... */
        uint64_t out_of_range = 0;
        w.out_of_range_count = r8(&r) & 1 ? &out_of_range : NULL; /* struct_size - 8 leaves it unread */
        if (ok && w.struct_size <= sizeof w) { /* a larger size would promise bytes this stack struct lacks */
            nvfp4_op_write(cpu, &w);
        }
    } else if (ok) {
        nvfp4_mla_gather_args_t g = {.struct_size = (uint32_t)pick(&r, sizeof g), .layout = layout, .scale_mode = mode,
                                     .outer_scale = scale, .cache = cache};
        ok = make(&r, &g.slots, NVFP4_MLA_DTYPE_I32, 1, (int64_t[]){rows}, (int64_t[]){1}, &bufs[1]) == 0 &&
             make(&r, &g.out, NVFP4_MLA_DTYPE_BF16, 2, (int64_t[]){rows, 576}, (int64_t[]){576, 1}, &bufs[2]) == 0;
        if (ok && g.struct_size <= sizeof g) {
            nvfp4_op_gather(cpu, &g);
        }
    }
    for (int i = 0; i < 4; i++) free(bufs[i]);
    return 0;
}
