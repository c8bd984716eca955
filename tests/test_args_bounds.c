/* Issue 48, cases 6 to 8, in the plugin's argument checks: extents and strides whose products wrap
 * (checked arithmetic: each is refused by name, and nothing overflows under UBSan), a bound on the
 * work one call may ask for, outputs that overlap an input or another output (refused by write,
 * gather, attend and merge, naming both, nothing written), and contexts or configurations used after
 * their release (a magic word, refused by name instead of a double free). */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "config.h"
#include "context.h"
#include "errors.h"
#include "ops.h"
#include "test_util.h"

#define ctx tu_cpu

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

static void expect_refusal(nvfp4_mla_status_t st, const char *needle) {
    assert_int_equal(st, NVFP4_MLA_ERR_INVALID_ARGUMENT);
    if (!strstr(nvfp4_last_error(), needle)) fail_msg("\"%s\" lacks \"%s\"", nvfp4_last_error(), needle);
}

enum { T = 4, BLOCK = 8, RB = 368 };
static _Alignas(16) uint16_t tokens[T * 576];
static int64_t slots64[T] = {0, 1, 2, 3};
static int32_t slots32[T] = {0, 1, 2, 3};
static _Alignas(16) uint8_t cache[2 * BLOCK * 656];
static _Alignas(16) uint16_t rows[T * 576];

static nvfp4_mla_write_args_t write_args(void) {
    return (nvfp4_mla_write_args_t){.struct_size = sizeof(nvfp4_mla_write_args_t),
                                    .layout = NVFP4_MLA_LAYOUT_FP8_ROPE_368,
                                    .scale_mode = NVFP4_MLA_SCALE_PER_TOKEN,
                                    .kv_c = tu_rows(tokens, NVFP4_MLA_DTYPE_BF16, T, 512, 576),
                                    .k_pe = tu_rows(tokens + 512, NVFP4_MLA_DTYPE_BF16, T, 64, 576),
                                    .slot_mapping = tu_vec(slots64, NVFP4_MLA_DTYPE_I64, T),
                                    .cache = tu_cache(cache, 2, BLOCK, RB, BLOCK * RB)};
}

static nvfp4_mla_gather_args_t gather_args(void) {
    return (nvfp4_mla_gather_args_t){.struct_size = sizeof(nvfp4_mla_gather_args_t),
                                     .layout = NVFP4_MLA_LAYOUT_FP8_ROPE_368,
                                     .scale_mode = NVFP4_MLA_SCALE_PER_TOKEN,
                                     .cache = tu_cache(cache, 2, BLOCK, RB, BLOCK * RB),
                                     .slots = tu_vec(slots32, NVFP4_MLA_DTYPE_I32, T),
                                     .out = tu_rows(rows, NVFP4_MLA_DTYPE_BF16, T, 576, 576)};
}

enum { NQ = 2, H = 2 };
static _Alignas(16) uint16_t q[NQ * H * 576], out[NQ * H * 512 + 512];
static float lse[NQ * H];
static _Alignas(16) int32_t topk_slots[NQ * T] = {0, 1, 2, 3, 3, 2, 1, 0};

static nvfp4_mla_attend_args_t attend_args(void) {
    return (nvfp4_mla_attend_args_t){
        .struct_size = sizeof(nvfp4_mla_attend_args_t),
        .layout = NVFP4_MLA_LAYOUT_FP8_ROPE_368,
        .scale_mode = NVFP4_MLA_SCALE_PER_TOKEN,
        .sm_scale = 0.05f,
        .q = tu_tensor(q, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){NQ, H, 576}, (int64_t[]){H * 576, 576, 1}),
        .slots = tu_rows(topk_slots, NVFP4_MLA_DTYPE_I32, NQ, T, T),
        .cache = tu_cache(cache, 2, BLOCK, RB, BLOCK * RB),
        .out = tu_tensor(out, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){NQ, H, 512}, (int64_t[]){H * 512, 512, 1}),
        .lse = tu_rows(lse, NVFP4_MLA_DTYPE_F32, NQ, H, H)};
}

/* Case 6: a cache of {147102629888, 125400505, 368} made num_blocks * block_size wrap to 2^30 slots,
 * which passed (UBSan aborted on the signed product): every operation now refuses it by the bytes
 * its shape and strides address, before any product can wrap; so does a tensor addressing more than
 * 2^48 bytes, and one whose end wraps the address space. */
static void extents_should_be_checked_without_overflow(void **state) {
    (void)state;
    const nvfp4_mla_tensor_t huge = tu_cache(cache, 147102629888, 125400505, RB, 125400505ll * RB);
    nvfp4_mla_write_args_t w = write_args();
    nvfp4_mla_write_kernel_args_t wk;
    w.cache = huge;
    expect_refusal(nvfp4_lower_write(ctx, &w, &wk), "write: cache: its shape and strides address more than 2^64 bytes");
    nvfp4_mla_gather_args_t g = gather_args();
    nvfp4_mla_gather_kernel_args_t gk;
    g.cache = huge;
    expect_refusal(nvfp4_lower_gather(ctx, &g, &gk), "gather: cache: its shape and strides address more than 2^64");
    nvfp4_mla_attend_args_t a = attend_args(), host;
    nvfp4_mla_attend_kernel_args_t ak;
    a.cache = huge;
    expect_refusal(nvfp4_lower_attend(ctx, &a, &host, &ak), "attend: cache: its shape and strides address more than");
    /* one block of 2^40 slots: more than 2^48 bytes; of 2^31: within them, past the int32 slot ids */
    g = gather_args();
    g.cache = tu_cache(cache, 1, INT64_C(1) << 40, RB, 0);
    expect_refusal(nvfp4_lower_gather(ctx, &g, &gk), "gather: cache: its shape and strides address 404620279021568 bytes");
    g.cache = tu_cache(cache, 1, INT64_C(1) << 31, RB, 0);
    expect_refusal(nvfp4_lower_gather(ctx, &g, &gk),
                   "gather: cache: 1 * 2147483648 slots (num_blocks * block_size), must be below 2^31");
    g = gather_args();
    g.cache = tu_cache(cache, 1024, BLOCK, RB, INT64_C(1) << 40); /* 2^50 bytes of pages */
    expect_refusal(nvfp4_lower_gather(ctx, &g, &gk), "more than 2^48 (256 TiB): no device holds such a tensor");
    w = write_args();
    w.kv_c.data = (void *)(UINTPTR_MAX - 1); /* aligned for bf16, and its rows run past the top */
    expect_refusal(nvfp4_lower_write(ctx, &w, &wk), "write: kv_c: data");
    expect_refusal(nvfp4_lower_write(ctx, &w, &wk), "wraps the address space");
}

/* Case 6: merge's (heads - 1) * strides[1] (args.c) wrapped with 2^40 heads 2^40 apart on zero queries;
 * and 2^40 partials with stride 0 ran for minutes before any refusal. */
static void merge_should_bound_its_work_and_check_its_products(void **state) {
    (void)state;
    static float po[512], pl[4];
    static uint16_t mo[512];
    float ml[1];
    const int64_t big = INT64_C(1) << 40;
    nvfp4_mla_merge_args_t m = {
        .struct_size = sizeof m,
        .partial_out = tu_tensor(po, NVFP4_MLA_DTYPE_F32, 4, (int64_t[]){1, 0, big, 512}, (int64_t[]){0, 0, big, 1}),
        .partial_lse = tu_tensor(pl, NVFP4_MLA_DTYPE_F32, 3, (int64_t[]){1, 0, big}, (int64_t[]){0, 0, 1}),
        .out = tu_tensor(mo, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){0, big, 512}, (int64_t[]){0, big, 1}),
    };
    nvfp4_mla_merge_kernel_args_t k;
    expect_refusal(nvfp4_lower_merge(ctx, &m, &k),
                   "merge: out heads: 1099511627776 rows 1099511627776 elements apart overflow 64 bits");
    m.partial_out = tu_tensor(po, NVFP4_MLA_DTYPE_F32, 4, (int64_t[]){big, 1, 1, 512}, (int64_t[]){0, 512, 512, 1});
    m.partial_lse = tu_tensor(pl, NVFP4_MLA_DTYPE_F32, 3, (int64_t[]){big, 1, 1}, (int64_t[]){0, 1, 1});
    m.out = tu_tensor(mo, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){1, 1, 512}, (int64_t[]){512, 512, 1});
    m.lse = tu_rows(ml, NVFP4_MLA_DTYPE_F32, 1, 1, 1);
    expect_refusal(nvfp4_op_merge(ctx, &m), "merge: partial_out: P = shape[0] is 1099511627776, must be 1..65536");
    assert_null(strstr(nvfp4_last_error(), "strides")); /* issue 58, N18: the valid stride is not listed as wrong */
    m.partial_out.shape[0] = m.partial_lse.shape[0] = 65536; /* the bound itself is served */
    assert_int_equal(nvfp4_op_merge(ctx, &m), NVFP4_MLA_OK);
}

/* Case 8: an output over an input or another output is refused by name (bytes named), and the
 * outputs are left as they were. */
static void outputs_should_share_no_byte_with_other_arguments(void **state) {
    (void)state;
    nvfp4_mla_write_kernel_args_t wk;
    struct {
        const char *needle;
        int which;
    } writes[] = {
        {"write: cache overlaps kv_c", 0},      {"write: cache overlaps k_pe", 1},
        {"write: cache overlaps slot_mapping", 2}, {"write: nonfinite_count overlaps kv_c", 3},
        {"write: out_of_range_count overlaps nonfinite_count", 4}, {"write: capture_max_abs overlaps cache", 5},
    };
    static _Alignas(16) uint8_t scratch[2 * BLOCK * RB + 4096];
    for (size_t c = 0; c < sizeof writes / sizeof writes[0]; c++) {
        nvfp4_mla_write_args_t w = write_args();
        w.cache.data = scratch;
        uint64_t counters[2] = {0, 0};
        switch (writes[c].which) {
        case 0: w.kv_c.data = scratch + 64; break;
        case 1: w.k_pe.data = scratch + 2 * BLOCK * RB - 32; break;
        case 2: w.slot_mapping.data = scratch + 368; break;
        case 3: w.nonfinite_count = (uint64_t *)(void *)(tokens + 8); break;
        case 4: w.nonfinite_count = w.out_of_range_count = counters; break;
        case 5: w.capture_max_abs = (float *)(void *)(scratch + 4); break;
        }
        memset(scratch, 0xA5, sizeof scratch);
        expect_refusal(nvfp4_op_write(ctx, &w), writes[c].needle);
        assert_true(tu_all_zero((const uint8_t *)counters, sizeof counters));
        for (size_t i = 0; i < sizeof scratch; i++) assert_int_equal(scratch[i], 0xA5);
    }
    nvfp4_mla_write_args_t w = write_args(); /* the arguments above, apart: served */
    assert_int_equal(nvfp4_lower_write(ctx, &w, &wk), NVFP4_MLA_OK);
    nvfp4_mla_gather_args_t g = gather_args();
    g.out = tu_rows(cache, NVFP4_MLA_DTYPE_BF16, T, 576, 576);
    expect_refusal(nvfp4_op_gather(ctx, &g), "gather: out overlaps cache");
    g = gather_args();
    g.slots.data = rows + 100;
    expect_refusal(nvfp4_op_gather(ctx, &g), "gather: out overlaps slots");
}

/* Case 8 for attend: out over q, lse a view into out, the workspace over out; outputs untouched. */
static void attend_outputs_should_share_no_byte_with_other_arguments(void **state) {
    (void)state;
    nvfp4_mla_attend_args_t a = attend_args();
    static _Alignas(16) uint16_t both[NQ * H * 576 + 64];
    a.q.data = both;
    a.out.data = both + 576;
    memset(out, 0x5A, sizeof out);
    expect_refusal(nvfp4_op_attend(ctx, &a), "attend: out overlaps q");
    a = attend_args();
    a.lse.data = out + 2 * 512; /* lse as a view into out */
    expect_refusal(nvfp4_op_attend(ctx, &a), "attend: lse overlaps out");
    a = attend_args();
    a.lse.data = cache + 64;
    expect_refusal(nvfp4_op_attend(ctx, &a), "attend: lse overlaps cache");
    a = attend_args();
    a.workspace = tu_vec(out, NVFP4_MLA_DTYPE_U8, 256);
    expect_refusal(nvfp4_op_attend(ctx, &a), "attend: workspace overlaps out");
    a = attend_args();
    a.workspace = tu_vec(topk_slots, NVFP4_MLA_DTYPE_U8, 16);
    expect_refusal(nvfp4_op_attend(ctx, &a), "attend: workspace overlaps slots");
    for (size_t i = 0; i < sizeof out / 2; i++) assert_int_equal(out[i], 0x5A5A);
    a = attend_args(); /* the arguments above, apart: served */
    assert_int_equal(nvfp4_op_attend(ctx, &a), NVFP4_MLA_OK);
}

/* Case 7: misuse of a released or foreign object is refused by its magic word. A configuration passed
 * as a context and a context passed as a configuration are refused everywhere; a second shutdown or
 * destroy is refused (ignored) instead of freeing twice: that check reads memory the allocator owns
 * again, so it runs outside AddressSanitizer builds, which report the read itself. */
static void released_and_foreign_objects_should_be_refused(void **state) {
    (void)state;
    nvfp4_mla_config_request_t req = {sizeof req, 0, "nvfp4_ds_mla", NULL, (const char *const[]){NULL}, NULL, {0}};
    nvfp4_mla_config_t *cfg = NULL;
    assert_int_equal(nvfp4_config_create(&req, &cfg), NVFP4_MLA_OK);
    nvfp4_mla_write_args_t w = write_args();
    nvfp4_mla_context_t *not_a_context = (nvfp4_mla_context_t *)(void *)cfg;
    expect_refusal(nvfp4_op_write(not_a_context, &w), "write: ctx ");
    expect_refusal(nvfp4_op_write(not_a_context, &w), "is not a live context (shut down already, or not a context");
    nvfp4_mla_context_info_t info = {.struct_size = sizeof info};
    expect_refusal(nvfp4_context_info(not_a_context, &info), "context_info: ctx");
    expect_refusal(nvfp4_context_shutdown(not_a_context), "shutdown: ctx");
    nvfp4_mla_config_info_t ci = {.struct_size = sizeof ci};
    expect_refusal(nvfp4_config_info((nvfp4_mla_config_t *)(void *)ctx, &ci),
                   "is not a live configuration (destroyed already, or not one from config_create)");
    float scale;
    expect_refusal(nvfp4_config_layer_scale((nvfp4_mla_config_t *)(void *)ctx, 0, &scale), "config_layer_scale: config");
    nvfp4_config_destroy((nvfp4_mla_config_t *)(void *)ctx); /* not a configuration: nothing freed */
    assert_int_equal(nvfp4_config_info(cfg, &ci), NVFP4_MLA_OK);
    nvfp4_config_destroy(cfg);
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CPU, 0, 0, NULL, {0}, NULL};
    nvfp4_mla_context_t *c2 = NULL;
    assert_int_equal(nvfp4_context_init(&init, &c2), NVFP4_MLA_OK);
    assert_int_equal(nvfp4_context_shutdown(c2), NVFP4_MLA_OK);
    assert_int_equal(nvfp4_context_shutdown(NULL), NVFP4_MLA_OK);
    if (!UNDER_ASAN) {
        expect_refusal(nvfp4_context_shutdown(c2), "shutdown: ctx");
        expect_refusal(nvfp4_op_write(c2, &w), "is not a live context");
        nvfp4_config_destroy(cfg); /* a second destroy: ignored, no double free */
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(extents_should_be_checked_without_overflow),
        cmocka_unit_test(merge_should_bound_its_work_and_check_its_products),
        cmocka_unit_test(outputs_should_share_no_byte_with_other_arguments),
        cmocka_unit_test(attend_outputs_should_share_no_byte_with_other_arguments),
        cmocka_unit_test(released_and_foreign_objects_should_be_refused),
    };
    return cmocka_run_group_tests(tests, tu_setup_cpu, tu_teardown_cpu);
}
