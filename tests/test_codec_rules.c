/* Writer/reader rules on the CPU: invariants per mode, skip rules and guard bytes, padded strides,
 * fp16 input, the 432 layout, round-trip error bounds, capture of max |kv_c|, and argument checks. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "backends.h"
#include "config.h"
#include "context.h"
#include "errors.h"
#include "ops.h"
#include "test_util.h"

#define ctx tu_cpu

static uint64_t rng = 12345;
static double gauss(void) {
    return tu_gauss(&rng);
}

/* T random tokens [T, 576] bf16 of roughly `sigma` spread (latent), RoPE of unit spread. */
static uint16_t *random_tokens(int64_t count, double sigma) {
    uint16_t *v = malloc((size_t)count * 576 * sizeof *v);
    for (int64_t i = 0; i < count * 576; i++) {
        v[i] = nvfp4_f32_to_bf16((float)(gauss() * ((i % 576) < 512 ? sigma * exp(gauss()) : 1.0)));
    }
    return v;
}

static nvfp4_mla_write_args_t write_args(const uint16_t *tokens, int64_t count, int64_t *slots, uint8_t *cache,
                                         int64_t blocks, int64_t block_size, int32_t bytes, uint32_t mode,
                                         float scale) {
    nvfp4_mla_write_args_t w = {
        .struct_size = sizeof w,
        .layout = bytes == 368 ? NVFP4_MLA_LAYOUT_FP8_ROPE_368 : NVFP4_MLA_LAYOUT_BF16_ROPE_432,
        .scale_mode = mode,
        .outer_scale = scale,
        .kv_c = tu_rows((void *)tokens, NVFP4_MLA_DTYPE_BF16, count, 512, 576),
        .k_pe = tu_rows((void *)(tokens + 512), NVFP4_MLA_DTYPE_BF16, count, 64, 576),
        .slot_mapping = tu_vec(slots, NVFP4_MLA_DTYPE_I64, count),
        .cache = tu_cache(cache, blocks, block_size, bytes, block_size * bytes),
    };
    return w;
}

static int64_t *identity_slots(int64_t count) {
    int64_t *s = malloc((size_t)count * sizeof *s);
    for (int64_t i = 0; i < count; i++) s[i] = i;
    return s;
}

static void per_token_records_should_satisfy_the_invariants(void **state) {
    (void)state;
    enum { T = 64 };
    uint16_t *tok = random_tokens(T, 0.05);
    int64_t *slots = identity_slots(T);
    uint8_t *pt = malloc(T * 368), *st = malloc(T * 368);
    nvfp4_mla_write_args_t w = write_args(tok, T, slots, pt, 1, T, 368, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f);
    assert_int_equal(nvfp4_op_write(ctx, &w), NVFP4_MLA_OK);
    w = write_args(tok, T, slots, st, 1, T, 368, NVFP4_MLA_SCALE_STATIC, 1.0f);
    assert_int_equal(nvfp4_op_write(ctx, &w), NVFP4_MLA_OK);
    for (int t = 0; t < T; t++) {
        const uint8_t *r = pt + t * 368, *s = st + t * 368;
        float amax = 0, largest = 0;
        for (int i = 0; i < 512; i++) amax = fmaxf(amax, fabsf(nvfp4_bf16_to_f32(tok[t * 576 + i])));
        for (int g = 0; g < 32; g++) largest = fmaxf(largest, nvfp4_e4m3_decode(r[256 + g]));
        assert_true(tu_f32_at(r + 292) == amax * NVFP4_K2688); /* bit-exact s_t */
        assert_true(largest >= 256.0f);
        assert_true(tu_all_zero(r + 296, 8));
        assert_memory_equal(r + 288, s + 288, 4);   /* RoPE scale identical across modes */
        assert_memory_equal(r + 304, s + 304, 64);  /* RoPE codes identical across modes */
        assert_true(tu_all_zero(s + 292, 12));      /* static: [292,304) zero */
    }
    free(tok), free(slots), free(pt), free(st);
}

/* The slot rule (abi/nvfp4_mla_ops.h; issue 37): negative slots are padding, skipped; a slot at or
 * past the capacity loses its token's record, so a CPU write refuses the call before writing a
 * byte, naming it; the kernels' CPU twin, as the CUDA writer, skips and counts it. */
static void writer_should_skip_padding_and_refuse_slots_past_the_cache(void **state) {
    (void)state;
    enum { T = 4, BLOCKS = 2, BS = 4, GUARD = 64 };
    uint16_t *tok = random_tokens(T, 1.0);
    int64_t slots[T] = {-1, BLOCKS * BS, (INT64_C(1) << 40) + 17, 5};
    size_t bytes = BLOCKS * BS * 368;
    uint8_t *buf = malloc(bytes + 2 * GUARD), *cache = buf + GUARD;
    memset(buf, 0xA5, bytes + 2 * GUARD);
    nvfp4_mla_write_args_t w = write_args(tok, T, slots, cache, BLOCKS, BS, 368, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f);
    uint64_t counted = 0;
    w.out_of_range_count = &counted;
    assert_int_equal(nvfp4_op_write(ctx, &w), NVFP4_MLA_ERR_INVALID_ARGUMENT);
    assert_string_equal(nvfp4_last_error(), "write: slot_mapping[1] = 8 is at or past the cache's capacity 8 "
                                            "(num_blocks * block_size): its token's record would be lost; negative "
                                            "slots are the padding that is skipped, nothing was written");
    for (size_t i = 0; i < bytes + 2 * GUARD; i++) assert_int_equal(buf[i], 0xA5);
    assert_int_equal(counted, 0);
    /* The twin every backend shares: skipped and counted, the other bytes left alone. */
    slots[0] = 0; /* a valid slot makes the lowering pass; the kernel then sees the raw ones */
    nvfp4_mla_write_kernel_args_t k;
    int64_t ok_slots[T] = {-1, -1, -1, 5};
    w.slot_mapping.data = ok_slots;
    assert_int_equal(nvfp4_lower_write(ctx, &w, &k), NVFP4_MLA_OK);
    slots[0] = -1;
    k.slot_mapping = slots;
    nvfp4_mla_kernel_result_t res = {0, ""};
    nvfp4_mla_write_cpu(&k, &res);
    assert_int_equal(res.status, 0);
    assert_int_equal(counted, 2);
    for (size_t i = 0; i < bytes + 2 * GUARD; i++) {
        int in_slot5 = i >= GUARD + 5 * 368 && i < GUARD + 6 * 368;
        if (!in_slot5) assert_int_equal(buf[i], 0xA5);
    }
    /* Padding alone is written around, through the entry as well. */
    memset(buf, 0xA5, bytes + 2 * GUARD);
    w.slot_mapping.data = ok_slots;
    assert_int_equal(nvfp4_op_write(ctx, &w), NVFP4_MLA_OK);
    assert_int_equal(counted, 2);
    /* A host struct that ends before the counter (ABI 1.1 before it) is served; a misaligned one is not. */
    w.struct_size = (uint32_t)offsetof(nvfp4_mla_write_args_t, out_of_range_count);
    assert_int_equal(nvfp4_op_write(ctx, &w), NVFP4_MLA_OK);
    w.struct_size = sizeof w;
    w.out_of_range_count = (uint64_t *)((uint8_t *)&counted + 1);
    assert_int_equal(nvfp4_op_write(ctx, &w), NVFP4_MLA_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(nvfp4_last_error(), "write: out_of_range_count "));
    for (size_t i = 0; i < bytes + 2 * GUARD; i++) {
        int in_slot5 = i >= GUARD + 5 * 368 && i < GUARD + 6 * 368;
        if (!in_slot5) assert_int_equal(buf[i], 0xA5);
    }
    uint8_t want[368];
    int64_t one = 0;
    nvfp4_mla_write_args_t w1 = write_args(tok + 3 * 576, 1, &one, want, 1, 1, 368, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f);
    assert_int_equal(nvfp4_op_write(ctx, &w1), NVFP4_MLA_OK);
    assert_memory_equal(cache + 5 * 368, want, 368);
    free(tok), free(buf);
}

static void writer_should_honour_a_padded_block_stride(void **state) {
    (void)state;
    enum { T = 12, BS = 4, BLOCKS = 3, PAD = 48 };
    const int64_t stride = BS * 368 + PAD;
    uint16_t *tok = random_tokens(T, 0.3);
    int64_t *slots = identity_slots(T);
    uint8_t *padded = malloc(BLOCKS * stride), *dense = malloc(T * 368);
    memset(padded, 0x5A, BLOCKS * stride);
    nvfp4_mla_write_args_t w = write_args(tok, T, slots, padded, BLOCKS, BS, 368, NVFP4_MLA_SCALE_STATIC, 0.25f);
    w.cache.strides[0] = stride;
    assert_int_equal(nvfp4_op_write(ctx, &w), NVFP4_MLA_OK);
    w = write_args(tok, T, slots, dense, 1, T, 368, NVFP4_MLA_SCALE_STATIC, 0.25f);
    assert_int_equal(nvfp4_op_write(ctx, &w), NVFP4_MLA_OK);
    for (int s = 0; s < T; s++) {
        assert_memory_equal(padded + (s / BS) * stride + (s % BS) * 368, dense + s * 368, 368);
    }
    for (int b = 0; b < BLOCKS; b++) {
        for (int i = 0; i < PAD; i++) assert_int_equal(padded[b * stride + BS * 368 + i], 0x5A);
    }
    free(tok), free(slots), free(padded), free(dense);
}

static void writer_should_give_fp16_input_the_same_records_as_bf16(void **state) {
    (void)state;
    enum { T = 8 };
    uint16_t *tok = random_tokens(T, 0.5), *half = malloc(T * 576 * sizeof *half);
    for (int i = 0; i < T * 576; i++) { /* bf16 values with |x| in fp16's normal range are exact in fp16 */
        float v = nvfp4_bf16_to_f32(tok[i]);
        if (fabsf(v) < 0x1p-14f) tok[i] = 0, v = 0;
        half[i] = tu_f32_to_f16(v);
        assert_true(nvfp4_f16_to_f32(half[i]) == v); /* exact in both formats */
    }
    int64_t *slots = identity_slots(T);
    for (int layout = 0; layout < 2; layout++) {
        int32_t bytes = layout ? 432 : 368;
        uint8_t *a = malloc(T * bytes), *b = malloc(T * bytes);
        nvfp4_mla_write_args_t w = write_args(tok, T, slots, a, 1, T, bytes, NVFP4_MLA_SCALE_STATIC, 1.0f);
        assert_int_equal(nvfp4_op_write(ctx, &w), NVFP4_MLA_OK);
        w = write_args(half, T, slots, b, 1, T, bytes, NVFP4_MLA_SCALE_STATIC, 1.0f);
        w.kv_c.dtype = w.k_pe.dtype = NVFP4_MLA_DTYPE_F16;
        assert_int_equal(nvfp4_op_write(ctx, &w), NVFP4_MLA_OK);
        assert_memory_equal(a, b, T * bytes);
        free(a), free(b);
    }
    free(tok), free(half), free(slots);
}

static void layout_432_should_zero_its_gap_and_copy_rope_verbatim(void **state) {
    (void)state;
    enum { T = 3 };
    uint16_t *tok = random_tokens(T, 1.0);
    int64_t *slots = identity_slots(T);
    uint8_t rec[T * 432];
    nvfp4_mla_write_args_t w = write_args(tok, T, slots, rec, 1, T, 432, NVFP4_MLA_SCALE_STATIC, 1.0f);
    assert_int_equal(nvfp4_op_write(ctx, &w), NVFP4_MLA_OK);
    for (int t = 0; t < T; t++) {
        assert_true(tu_all_zero(rec + t * 432 + 288, 16));
        assert_memory_equal(rec + t * 432 + 304, tok + t * 576 + 512, 128);
    }
    free(tok), free(slots);
}

static void writer_should_reject_bad_arguments_by_name(void **state) {
    (void)state;
    enum { T = 4 };
    uint16_t *tok = random_tokens(T, 1.0);
    int64_t *slots = identity_slots(T);
    uint8_t cache[T * 432];
    struct {
        const char *what;
        int32_t status;
        const char *needle;
    } cases[] = {
        {"per-token on 432", NVFP4_MLA_ERR_INVALID_ARGUMENT, "per-token requires layout fp8_rope_368"},
        {"short k_pe", NVFP4_MLA_ERR_INVALID_ARGUMENT, "write: k_pe: shape[0] is 3, must be 4"},
        {"short slot_mapping", NVFP4_MLA_ERR_INVALID_ARGUMENT, "write: slot_mapping: shape[0] is 2, must be 4"},
        {"narrow kv_c", NVFP4_MLA_ERR_INVALID_ARGUMENT, "write: kv_c: shape[1] is 500, must be 512"},
        {"overlapping rows", NVFP4_MLA_ERR_INVALID_ARGUMENT, "write: kv_c: strides[0] is 100, must be >= 512"},
        {"i32 slots", NVFP4_MLA_ERR_INVALID_ARGUMENT, "write: slot_mapping: dtype is i32 (2), must be i64"},
        {"record size", NVFP4_MLA_ERR_INVALID_ARGUMENT, "write: cache: shape[2] is 432, must be 368"},
        {"zero scale", NVFP4_MLA_ERR_INVALID_ARGUMENT, "outer_scale is 0, must be a positive normal float"},
        {"flags", NVFP4_MLA_ERR_INVALID_ARGUMENT, "write: flags must be zero"},
        {"old struct", NVFP4_MLA_ERR_VERSION, "struct_size 8 is smaller"},
        {"cuda tensor", NVFP4_MLA_ERR_INVALID_ARGUMENT, "write: kv_c: lives on device (type 2, index 0)"},
        {"stream on cpu", NVFP4_MLA_ERR_INVALID_ARGUMENT, "stream must be NULL on a CPU context"},
        {"huge cache", NVFP4_MLA_ERR_INVALID_ARGUMENT, "must be below 2^31"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        nvfp4_mla_write_args_t w = write_args(tok, T, slots, cache, 1, T, 368, NVFP4_MLA_SCALE_STATIC, 1.0f);
        switch (c) {
        case 0: w.layout = NVFP4_MLA_LAYOUT_BF16_ROPE_432, w.scale_mode = NVFP4_MLA_SCALE_PER_TOKEN, w.outer_scale = 0;
                w.cache.shape[2] = w.cache.strides[1] = 432; break;
        case 1: w.k_pe.shape[0] = 3; break;
        case 2: w.slot_mapping.shape[0] = 2; break;
        case 3: w.kv_c.shape[1] = 500; break;
        case 4: w.kv_c.strides[0] = 100; break;
        case 5: w.slot_mapping.dtype = NVFP4_MLA_DTYPE_I32; break;
        case 6: w.cache.shape[2] = 432; break;
        case 7: w.outer_scale = 0.0f; break;
        case 8: w.flags = 1; break;
        case 9: w.struct_size = 8; break;
        case 10: w.kv_c.device_type = NVFP4_MLA_DEVICE_CUDA; break;
        case 11: w.stream = (void *)16; break;
        case 12: w.cache.shape[0] = INT64_C(1) << 30; w.cache.strides[0] = 4 * 368; break;
        }
        memset(cache, 0x33, sizeof cache);
        assert_int_equal(nvfp4_op_write(ctx, &w), cases[c].status);
        if (!strstr(nvfp4_last_error(), cases[c].needle)) {
            fail_msg("%s: message \"%s\" lacks \"%s\"", cases[c].what, nvfp4_last_error(), cases[c].needle);
        }
        for (size_t i = 0; i < sizeof cache; i++) assert_int_equal(cache[i], 0x33); /* nothing written */
    }
    free(tok), free(slots);
}

/* Relative RMS of the decoded latent against the input over all tokens. */
static void round_trip(int32_t bytes, uint32_t mode, float scale, double sigma, double bound) {
    enum { T = 256 };
    uint16_t *tok = random_tokens(T, sigma), *rows = malloc(T * 576 * sizeof *rows);
    int64_t *slots = identity_slots(T);
    int32_t gslots[T];
    for (int i = 0; i < T; i++) gslots[i] = T - 1 - i; /* reversed: rows follow the slot list */
    uint8_t *cache = malloc((size_t)T * bytes);
    nvfp4_mla_write_args_t w = write_args(tok, T, slots, cache, 4, T / 4, bytes, mode, scale);
    assert_int_equal(nvfp4_op_write(ctx, &w), NVFP4_MLA_OK);
    nvfp4_mla_gather_args_t g = {sizeof g, w.layout, mode, 0, scale, 0, w.cache, tu_vec(gslots, NVFP4_MLA_DTYPE_I32, T),
                                 tu_rows(rows, NVFP4_MLA_DTYPE_BF16, T, 576, 576), NULL, {0}};
    assert_int_equal(nvfp4_op_gather(ctx, &g), NVFP4_MLA_OK);
    double num = 0, den = 0, rope_err = 0;
    for (int r = 0; r < T; r++) {
        const uint16_t *x = tok + gslots[r] * 576, *y = rows + r * 576;
        for (int i = 0; i < 512; i++) {
            double d = nvfp4_bf16_to_f32(y[i]) - nvfp4_bf16_to_f32(x[i]);
            num += d * d;
            den += (double)nvfp4_bf16_to_f32(x[i]) * nvfp4_bf16_to_f32(x[i]);
        }
        for (int j = 512; j < 576; j++) {
            double a = nvfp4_bf16_to_f32(x[j]), b = nvfp4_bf16_to_f32(y[j]);
            rope_err = fmax(rope_err, fabs(a - b) / fmax(fabs(a), 1e-3));
        }
    }
    double rel = sqrt(num / den);
    if (!(rel > 0.05 && rel < bound)) {
        fail_msg("layout %d mode %u scale %g sigma %g: relative RMS %.4f outside (0.05, %.2f)", bytes, mode,
                 (double)scale, sigma, rel, bound);
    }
    assert_true(bytes == 432 ? rope_err == 0 : rope_err < 0.0625 + 0.01); /* E4M3: half an ulp of 3 bits */
    free(tok), free(rows), free(slots), free(cache);
}

static void round_trip_should_stay_within_the_error_bound_of_each_mode(void **state) {
    (void)state;
    round_trip(368, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f, 0.003, 0.11);
    round_trip(368, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f, 5.0, 0.11);
    round_trip(368, NVFP4_MLA_SCALE_STATIC, 1.0f, 1.0, 0.12);
    round_trip(368, NVFP4_MLA_SCALE_STATIC, 0.003f * 40 / 2688, 0.003, 0.12); /* calibrated shallow layer */
    round_trip(432, NVFP4_MLA_SCALE_STATIC, 1.0f, 1.0, 0.12);
}

static void gather_should_zero_unused_slots_and_reject_out_of_range(void **state) {
    (void)state;
    enum { T = 4 };
    uint16_t *tok = random_tokens(T, 1.0), rows[3 * 576];
    int64_t *slots = identity_slots(T);
    uint8_t cache[T * 368];
    nvfp4_mla_write_args_t w = write_args(tok, T, slots, cache, 1, T, 368, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f);
    assert_int_equal(nvfp4_op_write(ctx, &w), NVFP4_MLA_OK);
    int32_t g_slots[3] = {2, -1, 0};
    memset(rows, 0xFF, sizeof rows);
    nvfp4_mla_gather_args_t g = {sizeof g,
                                 w.layout,
                                 NVFP4_MLA_SCALE_PER_TOKEN,
                                 0,
                                 0.0f,
                                 0,
                                 w.cache,
                                 tu_vec(g_slots, NVFP4_MLA_DTYPE_I32, 3),
                                 tu_rows(rows, NVFP4_MLA_DTYPE_BF16, 3, 576, 576),
                                 NULL,
                                 {0}};
    assert_int_equal(nvfp4_op_gather(ctx, &g), NVFP4_MLA_OK);
    assert_true(tu_all_zero((uint8_t *)(rows + 576), 576 * 2));
    assert_false(tu_all_zero((uint8_t *)rows, 576 * 2));
    g_slots[1] = 4;
    memset(rows, 0x77, sizeof rows);
    assert_int_equal(nvfp4_op_gather(ctx, &g), NVFP4_MLA_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(nvfp4_last_error(), "gather: slots[1] = 4 is neither -1 nor in [0, 4)"));
    for (size_t i = 0; i < sizeof rows / 2; i++) assert_int_equal(rows[i], 0x7777); /* untouched */
    free(tok), free(slots);
}

/* The one mode rule (nvfp4_mla_record.h) as the operations apply it, in their words. */
static void operations_should_apply_the_records_mode_rule(void **state) {
    (void)state;
    uint8_t cache[656];
    int32_t slot = 0;
    uint16_t row[576];
    struct {
        uint32_t layout, mode;
        float scale;
        const char *needle;
    } cases[] = {
        {NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC, 1.0f,
         "gather: layout 3 (fp8_ds_mla_656) is read by attend only; gather takes 1 (fp8_rope_368) or 2"},
        {7, NVFP4_MLA_SCALE_STATIC, 1.0f, "gather: layout is 7, must be 1 (fp8_rope_368), 2 (bf16_rope_432)"},
        {NVFP4_MLA_LAYOUT_FP8_ROPE_368, 3, 1.0f, "gather: scale_mode is 3, must be 1 (static) or 2 (per-token)"},
        {NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 1.0f,
         "gather: outer_scale is 1, must be 0 in per-token mode (records carry s_t)"},
        {NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f,
         "gather: scale_mode per-token requires layout fp8_rope_368; bf16_rope_432 records have no per-token"},
        {NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC, -2.0f, "outer_scale is -2, must be a positive normal"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int32_t rb =
            (int32_t)(nvfp4_mla_record_bytes(cases[c].layout) ? nvfp4_mla_record_bytes(cases[c].layout) : 368);
        nvfp4_mla_gather_args_t g = {sizeof g, cases[c].layout, cases[c].mode, 0, cases[c].scale, 0,
                                     tu_cache(cache, 1, 1, rb, rb), tu_vec(&slot, NVFP4_MLA_DTYPE_I32, 1),
                                     tu_rows(row, NVFP4_MLA_DTYPE_BF16, 1, 576, 576), NULL, {0}};
        assert_int_equal(nvfp4_op_gather(ctx, &g), NVFP4_MLA_ERR_INVALID_ARGUMENT);
        if (!strstr(nvfp4_last_error(), cases[c].needle)) {
            fail_msg("case %zu: \"%s\" lacks \"%s\"", c, nvfp4_last_error(), cases[c].needle);
        }
    }
    assert_int_equal(nvfp4_mla_mode_check(NVFP4_MLA_CAP_OP_ATTEND, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656,
                                          NVFP4_MLA_SCALE_STATIC, 1.0f), NVFP4_MLA_MODE_OK);
    assert_true(
        nvfp4_mla_caps_needed(NVFP4_MLA_CAP_OP_GATHER, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN) &
        NVFP4_MLA_CAP_READ_LATENT_SCALE_PER_TOKEN); /* gather is a reader too */
}

static void capture_should_max_reduce_over_written_tokens_only(void **state) {
    (void)state;
    enum { T = 3 };
    uint16_t *tok = random_tokens(T, 0.01);
    tu_set((tu_token_t *)(tok + 1 * 576), 7, -99.0f); /* token 1 is skipped: its 99 must not count */
    tu_set((tu_token_t *)(tok + 2 * 576), 9, NAN);    /* non-finite values never count */
    int64_t slots[T] = {0, -1, 2};
    uint8_t cache[T * 368];
    float captured = 0.5f; /* a running value from earlier calls is kept when larger */
    uint64_t nonfinite = 0;
    nvfp4_mla_write_args_t w = write_args(tok, T, slots, cache, 1, T, 368, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f);
    w.capture_max_abs = &captured;
    w.nonfinite_count = &nonfinite;
    assert_int_equal(nvfp4_op_write(ctx, &w), NVFP4_MLA_OK);
    assert_true(captured == 0.5f);
    assert_int_equal(nonfinite, 1);
    captured = 0.0f;
    assert_int_equal(nvfp4_op_write(ctx, &w), NVFP4_MLA_OK);
    float want = 0;
    for (int t = 0; t < T; t += 2)
        for (int i = 0; i < 512; i++) {
            float a = fabsf(nvfp4_bf16_to_f32(tok[t * 576 + i]));
            if (isfinite(a)) want = fmaxf(want, a);
        }
    assert_true(captured == want && want > 0 && want < 1);
    free(tok);
}

/* One intake for every versioned argument struct (nvfp4_take_args): each of the six entries that
 * take one refuses a non-zero flags or reserved word, and a struct below its 1.0 size, in the same
 * words, naming itself, before it looks at anything else. */
#define INTAKE_CASE(type, op, call)                                                                               \
    do {                                                                                                          \
        type a;                                                                                                   \
        memset(&a, 0, sizeof a);                                                                                  \
        a.struct_size = sizeof a;                                                                                 \
        a.flags = 1;                                                                                              \
        assert_int_equal(call, NVFP4_MLA_ERR_INVALID_ARGUMENT);                                                  \
        assert_string_equal(nvfp4_last_error(), op ": flags must be zero in ABI 1.1");                            \
        a.flags = 0;                                                                                              \
        a.reserved[3] = 1;                                                                                        \
        assert_int_equal(call, NVFP4_MLA_ERR_INVALID_ARGUMENT);                                                  \
        assert_string_equal(nvfp4_last_error(), op ": reserved must be zero in ABI 1.1");                         \
        a.struct_size = 4;                                                                                        \
        assert_int_equal(call, NVFP4_MLA_ERR_VERSION);                                                            \
        assert_non_null(strstr(nvfp4_last_error(), op ": " #type ": struct_size 4 is smaller than the ABI 1.0"));  \
    } while (0)

static void every_entry_should_take_its_versioned_struct_alike(void **state) {
    (void)state;
    nvfp4_mla_context_t *made = NULL;
    nvfp4_mla_config_t *config = NULL;
    uint64_t bytes = 0;
    INTAKE_CASE(nvfp4_mla_init_args_t, "init", nvfp4_context_init(&a, &made));
    INTAKE_CASE(nvfp4_mla_config_request_t, "config_create", nvfp4_config_create(&a, &config));
    INTAKE_CASE(nvfp4_mla_write_args_t, "write", nvfp4_op_write(tu_cpu, &a));
    INTAKE_CASE(nvfp4_mla_gather_args_t, "gather", nvfp4_op_gather(tu_cpu, &a));
    INTAKE_CASE(nvfp4_mla_attend_args_t, "attend", nvfp4_op_attend(tu_cpu, &a));
    INTAKE_CASE(nvfp4_mla_attend_args_t, "attend", nvfp4_op_attend_workspace_bytes(tu_cpu, &a, &bytes));
    INTAKE_CASE(nvfp4_mla_merge_args_t, "merge", nvfp4_op_merge(tu_cpu, &a));
    assert_null(made);
    assert_null(config);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(per_token_records_should_satisfy_the_invariants),
        cmocka_unit_test(writer_should_skip_padding_and_refuse_slots_past_the_cache),
        cmocka_unit_test(writer_should_honour_a_padded_block_stride),
        cmocka_unit_test(writer_should_give_fp16_input_the_same_records_as_bf16),
        cmocka_unit_test(layout_432_should_zero_its_gap_and_copy_rope_verbatim),
        cmocka_unit_test(writer_should_reject_bad_arguments_by_name),
        cmocka_unit_test(round_trip_should_stay_within_the_error_bound_of_each_mode),
        cmocka_unit_test(gather_should_zero_unused_slots_and_reject_out_of_range),
        cmocka_unit_test(capture_should_max_reduce_over_written_tokens_only),
        cmocka_unit_test(operations_should_apply_the_records_mode_rule),
        cmocka_unit_test(every_entry_should_take_its_versioned_struct_alike),
    };
    return cmocka_run_group_tests(tests, tu_setup_cpu, tu_teardown_cpu);
}
