/* Issue 48, case 2: a record's corrupt float field made every query that read it NaN (status OK).
 * The rule of docs/record-format.md section 5 on the CPU readers: for every corrupt field of
 * tests/corrupt_fields.h (NaN, +-Inf and negative scale fields; NaN and +-Inf bf16 RoPE values; E4M3
 * NaN codes), gather and attend on the corrupt record give the bits they give on the record holding
 * what the rule reads instead, and nothing they write is NaN or infinite (an lse of -inf only for a
 * query without an entry, which these have none of). The CUDA readers: tests/test_gpu_corrupt_fields.c. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "context.h"
#include "corrupt_fields.h"
#include "errors.h"
#include "host_codes.h"
#include "ops.h"
#include "test_util.h"

#define ctx tu_cpu
enum { N = 64, NQ = 2, H = 4, SLOT = 5 };

static uint64_t rng = 4242;

/* The call's outer scale: per-token 0, the 656 baseline 1.0, a static NVFP4 layer 0.5. */
static float outer_of(uint32_t layout, uint32_t mode) {
    return mode == NVFP4_MLA_SCALE_PER_TOKEN ? 0.0f : layout == NVFP4_MLA_LAYOUT_FP8_DS_MLA_656 ? 1.0f : 0.5f;
}

/* One block of N records of random tokens in the layout and mode (656: FlashMLA's rule). */
static void make_cache(uint32_t layout, uint32_t mode, uint8_t *cache) {
    static uint16_t tok[N * 576];
    for (int i = 0; i < N * 576; i++) tok[i] = nvfp4_f32_to_bf16((float)(tu_gauss(&rng) * 0.7));
    const int32_t rb = (int32_t)nvfp4_mla_record_bytes(layout);
    if (layout == NVFP4_MLA_LAYOUT_FP8_DS_MLA_656) {
        for (int t = 0; t < N; t++) host_encode_fp8_656_pow2(tok + t * 576, cache + t * rb);
        return;
    }
    int64_t ids[N];
    for (int t = 0; t < N; t++) ids[t] = t;
    nvfp4_mla_write_args_t w = {.struct_size = sizeof w,
                                .layout = layout,
                                .scale_mode = mode,
                                .outer_scale = outer_of(layout, mode),
                                .kv_c = tu_rows(tok, NVFP4_MLA_DTYPE_BF16, N, 512, 576),
                                .k_pe = tu_rows(tok + 512, NVFP4_MLA_DTYPE_BF16, N, 64, 576),
                                .slot_mapping = tu_vec(ids, NVFP4_MLA_DTYPE_I64, N),
                                .cache = tu_cache(cache, 1, N, rb, N * rb)};
    assert_int_equal(nvfp4_op_write(ctx, &w), NVFP4_MLA_OK);
}

/* gather of every slot (NVFP4 layouts only: 656 is attend's). */
static void gather_all(uint32_t layout, uint32_t mode, uint8_t *cache, uint16_t *rows) {
    int32_t slots[N];
    for (int t = 0; t < N; t++) slots[t] = t;
    const int32_t rb = (int32_t)nvfp4_mla_record_bytes(layout);
    nvfp4_mla_gather_args_t g = {.struct_size = sizeof g,
                                 .layout = layout,
                                 .scale_mode = mode,
                                 .outer_scale = outer_of(layout, mode),
                                 .cache = tu_cache(cache, 1, N, rb, N * rb),
                                 .slots = tu_vec(slots, NVFP4_MLA_DTYPE_I32, N),
                                 .out = tu_rows(rows, NVFP4_MLA_DTYPE_BF16, N, 576, 576)};
    if (nvfp4_op_gather(ctx, &g) != NVFP4_MLA_OK) fail_msg("gather: %s", nvfp4_last_error());
}

/* attend of NQ queries of H heads over every slot. */
static void attend_all(uint32_t layout, uint32_t mode, uint8_t *cache, const uint16_t *q, uint16_t *out, float *lse) {
    static int32_t slots[NQ * N];
    for (int i = 0; i < NQ * N; i++) slots[i] = i % N;
    const int32_t rb = (int32_t)nvfp4_mla_record_bytes(layout);
    nvfp4_mla_attend_args_t a = {
        .struct_size = sizeof a,
        .layout = layout,
        .scale_mode = mode,
        .outer_scale = outer_of(layout, mode),
        .sm_scale = 0.0417f,
        .q = tu_tensor((void *)q, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){NQ, H, 576}, (int64_t[]){H * 576, 576, 1}),
        .slots = tu_rows(slots, NVFP4_MLA_DTYPE_I32, NQ, N, N),
        .cache = tu_cache(cache, 1, N, rb, N * rb),
        .out = tu_tensor(out, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){NQ, H, 512}, (int64_t[]){H * 512, 512, 1}),
        .lse = tu_tensor(lse, NVFP4_MLA_DTYPE_F32, 2, (int64_t[]){NQ, H}, (int64_t[]){H, 1}),
    };
    if (nvfp4_op_attend(ctx, &a) != NVFP4_MLA_OK) fail_msg("attend: %s", nvfp4_last_error());
}

static void assert_finite_bf16(const uint16_t *v, size_t n, const char *what, const char *where) {
    for (size_t i = 0; i < n; i++)
        if (corrupt_bf16_nonfinite(v[i])) fail_msg("%s: %s[%zu] = 0x%04x is not finite", what, where, i, v[i]);
}

/* One row of corrupt_fields: the readers on the corrupt record equal the readers on the record that
 * holds what the rule reads, bit for bit, and finite. */
static void check_field(const corrupt_field_t *f, const uint8_t *cache, const uint16_t *q) {
    const size_t bytes = (size_t)N * nvfp4_mla_record_bytes(f->layout);
    static uint8_t bad[N * 656], same[N * 656];
    static uint16_t rows_bad[N * 576], rows_same[N * 576], out_bad[NQ * H * 512], out_same[NQ * H * 512];
    float lse_bad[NQ * H], lse_same[NQ * H];
    memcpy(bad, cache, bytes);
    memcpy(same, cache, bytes);
    const size_t at = (size_t)SLOT * nvfp4_mla_record_bytes(f->layout);
    corrupt_field_put(bad + at, f, f->bad);
    corrupt_field_put(same + at, f, f->read_as);
    if (f->layout != NVFP4_MLA_LAYOUT_FP8_DS_MLA_656) {
        gather_all(f->layout, f->mode, bad, rows_bad);
        gather_all(f->layout, f->mode, same, rows_same);
        assert_finite_bf16(rows_bad, N * 576, f->what, "gather row");
        if (memcmp(rows_bad, rows_same, sizeof rows_bad)) fail_msg("%s: gather differs from the rule's", f->what);
    }
    attend_all(f->layout, f->mode, bad, q, out_bad, lse_bad);
    attend_all(f->layout, f->mode, same, q, out_same, lse_same);
    assert_finite_bf16(out_bad, NQ * H * 512, f->what, "attend out");
    for (int i = 0; i < NQ * H; i++)
        if (!isfinite(lse_bad[i])) fail_msg("%s: attend lse[%d] = %g", f->what, i, (double)lse_bad[i]);
    if (memcmp(out_bad, out_same, sizeof out_bad) || memcmp(lse_bad, lse_same, sizeof lse_bad))
        fail_msg("%s: attend differs from the rule's", f->what);
}

static void readers_should_take_corrupt_fields_by_the_records_rule(void **state) {
    (void)state;
    static uint8_t cache[N * 656];
    static uint16_t q[NQ * H * 576];
    for (int i = 0; i < NQ * H * 576; i++) q[i] = nvfp4_f32_to_bf16((float)tu_gauss(&rng));
    uint32_t made_layout = 0, made_mode = 0;
    for (int i = 0; i < CORRUPT_FIELD_COUNT; i++) {
        const corrupt_field_t *f = &corrupt_fields[i];
        if (f->layout != made_layout || f->mode != made_mode) {
            make_cache(f->layout, f->mode, cache);
            made_layout = f->layout, made_mode = f->mode;
        }
        check_field(f, cache, q);
    }
}

/* The rule's helpers themselves (kernels/fp_codes.h), which the CUDA readers compile too. */
static void field_helpers_should_read_nan_infinite_and_negative_as_zero(void **state) {
    (void)state;
    const float zeros[] = {NAN, -NAN, INFINITY, -INFINITY, -1.0f, -0.0f, -FLT_MIN, -0x1p-149f};
    for (size_t i = 0; i < sizeof zeros / sizeof zeros[0]; i++) {
        assert_int_equal(nvfp4_f32_bits(nvfp4_scale_field(zeros[i])), 0);
    }
    const float kept[] = {0.0f, 0x1p-149f, FLT_MIN, 0.00334821432f, 1.0f, FLT_MAX};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++) {
        assert_int_equal(nvfp4_f32_bits(nvfp4_scale_field(kept[i])), nvfp4_f32_bits(kept[i]));
    }
    for (uint32_t h = 0; h < 0x10000u; h++) {
        const uint16_t got = nvfp4_rope_bf16_field((uint16_t)h);
        assert_int_equal(got, (h & 0x7F80u) == 0x7F80u ? 0 : h);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(readers_should_take_corrupt_fields_by_the_records_rule),
        cmocka_unit_test(field_helpers_should_read_nan_infinite_and_negative_as_zero),
    };
    return cmocka_run_group_tests(tests, tu_setup_cpu, tu_teardown_cpu);
}
