/* CPU merge of partial attentions (ABI 1.1): against an explicit float64 softmax over the union of
 * synthetic parts (f32 and bf16 partials, P = 1..8, parts far apart in lse, empty parts whose out
 * holds NaN, a query with no valid entry anywhere); against one CPU attend over the whole top-k row
 * when the parts are CPU attends over disjoint shares of it (both modes, duplicates, -1 entries);
 * strided layouts; and every argument check with its message, outputs untouched. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "context.h"
#include "errors.h"
#include "ops.h"
#include "test_util.h"

#define ctx tu_cpu

enum { NQ = 3, H = 4, KEYS = 40, D = 512, PMAX = 8 };

static uint64_t rng = 2024;
static double gauss(void) {
    return tu_gauss(&rng);
}
static int below(int n) {
    return (int)((gauss() + 10.0) * 1e6) % n;
}

/* P parts of NQ x H attentions over KEYS keys: the partials and the float64 answer over the union. */
typedef struct synth {
    int64_t parts;
    int share[NQ][KEYS]; /* the part holding each key; -1: not among the query's entries */
    double score[NQ][H][KEYS];
    float value[KEYS][D];
    float po[PMAX][NQ][H][D]; /* f32 partial outs; an empty part's rows are NaN */
    uint16_t po_bf16[PMAX][NQ][H][D];
    float pl[PMAX][NQ][H];
    double want[NQ][H][D], want_lse[NQ][H];
} synth_t;

/* Softmax of query q, head h over the keys whose share is `part` (-2: every listed key) in float64:
 * out[D] and the lse (-inf when no key is in). */
static double softmax(const synth_t *s, int q, int h, int part, double *out) {
    double m = -INFINITY, l = 0;
    for (int k = 0; k < KEYS; k++) {
        if (s->share[q][k] >= 0 && (part == -2 || s->share[q][k] == part)) m = fmax(m, s->score[q][h][k]);
    }
    for (int i = 0; i < D; i++) out[i] = 0;
    for (int k = 0; k < KEYS && m != -INFINITY; k++) {
        if (s->share[q][k] < 0 || (part != -2 && s->share[q][k] != part)) continue;
        const double w = exp(s->score[q][h][k] - m);
        l += w;
        for (int i = 0; i < D; i++) out[i] += w * s->value[k][i];
    }
    for (int i = 0; i < D && l > 0; i++) out[i] /= l;
    return l > 0 ? m + log(l) : -INFINITY;
}

/* Query 0: keys spread over the parts; query 1: part 0 empty and part 1 about 60 below the rest in
 * lse (its weight underflows nothing in double); query 2: no key at all. */
static void make_synth(synth_t *s, int64_t parts) {
    s->parts = parts;
    for (int k = 0; k < KEYS; k++)
        for (int i = 0; i < D; i++) s->value[k][i] = (float)gauss();
    for (int q = 0; q < NQ; q++)
        for (int k = 0; k < KEYS; k++) {
            s->share[q][k] = q == 2 ? -1 : k % 7 == 3 ? -1 : below((int)parts);
            if (q == 1 && parts > 1 && s->share[q][k] == 0) s->share[q][k] = 1 + below((int)parts - 1);
            for (int h = 0; h < H; h++)
                s->score[q][h][k] = 3 * gauss() - (q == 1 && parts > 2 && s->share[q][k] == 1 ? 60 : 0);
        }
    double out[D];
    for (int q = 0; q < NQ; q++)
        for (int h = 0; h < H; h++) {
            for (int p = 0; p < parts; p++) {
                const double lse = softmax(s, q, h, p, out);
                s->pl[p][q][h] = (float)lse;
                for (int i = 0; i < D; i++) {
                    s->po[p][q][h][i] = lse == -INFINITY ? NAN : (float)out[i]; /* never read when empty */
                    s->po_bf16[p][q][h][i] = nvfp4_f32_to_bf16(s->po[p][q][h][i]);
                }
            }
            s->want_lse[q][h] = softmax(s, q, h, -2, s->want[q][h]);
        }
}

static nvfp4_mla_merge_args_t merge_args(int64_t parts, void *po, int32_t dtype, float *pl, uint16_t *out, float *lse) {
    nvfp4_mla_merge_args_t a = {.struct_size = sizeof a};
    a.partial_out = tu_tensor(po, dtype, 4, (int64_t[]){parts, NQ, H, D}, (int64_t[]){NQ * H * D, H * D, D, 1});
    a.partial_lse = tu_tensor(pl, NVFP4_MLA_DTYPE_F32, 3, (int64_t[]){parts, NQ, H}, (int64_t[]){NQ * H, H, 1});
    a.out = tu_tensor(out, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){NQ, H, D}, (int64_t[]){H * D, D, 1});
    if (lse) a.lse = tu_rows(lse, NVFP4_MLA_DTYPE_F32, NQ, H, H);
    return a;
}

/* out within bf16 rounding of the float64 answer, plus `part_err`: how far the partials' own
 * rounding may move it (a convex combination moves no further than its worst term); lse within 1e-6;
 * no key anywhere: zeros and -inf. */
static void check_against(const synth_t *s, const uint16_t *out, const float *lse, double part_err) {
    for (int q = 0; q < NQ; q++)
        for (int h = 0; h < H; h++) {
            for (int i = 0; i < D; i++) {
                const double got = nvfp4_bf16_to_f32(out[(q * H + h) * D + i]), want = s->want[q][h][i];
                if (!(fabs(got - want) <= 0x1p-8 * fabs(want) + 1.01 * part_err + 1e-9))
                    fail_msg("P %lld q %d h %d i %d: got %.9g want %.9g", (long long)s->parts, q, h, i, got, want);
            }
            const double want_lse = s->want_lse[q][h];
            if (want_lse == -INFINITY) {
                assert_true(isinf(lse[q * H + h]) && lse[q * H + h] < 0);
                assert_true(tu_all_zero((const uint8_t *)(out + (q * H + h) * D), D * 2));
            } else if (!(fabs(lse[q * H + h] - want_lse) <= 1e-6 * fmax(fabs(want_lse), 1))) {
                fail_msg("P %lld q %d h %d: lse %.9g want %.9g", (long long)s->parts, q, h, (double)lse[q * H + h],
                         want_lse);
            }
        }
}

/* The largest |value| of the non-empty parts. */
static double parts_max(const synth_t *s) {
    double pmax = 0;
    for (int64_t i = 0; i < s->parts * NQ * H * D; i++) {
        const float v = (&s->po[0][0][0][0])[i];
        pmax = isnan(v) ? pmax : fmax(pmax, fabs(v));
    }
    return pmax;
}

static void merge_should_equal_a_float64_softmax_over_the_union(void **state) {
    (void)state;
    static synth_t s;
    static uint16_t out[NQ * H * D];
    static float lse[NQ * H];
    for (int64_t parts = 1; parts <= PMAX; parts++) {
        make_synth(&s, parts);
        nvfp4_mla_merge_args_t a = merge_args(parts, s.po, NVFP4_MLA_DTYPE_F32, &s.pl[0][0][0], out, lse);
        if (nvfp4_op_merge(ctx, &a) != NVFP4_MLA_OK) fail_msg("%s", nvfp4_last_error());
        check_against(&s, out, lse, 0x1p-24 * parts_max(&s));
        a = merge_args(parts, s.po_bf16, NVFP4_MLA_DTYPE_BF16, &s.pl[0][0][0], out, lse);
        if (nvfp4_op_merge(ctx, &a) != NVFP4_MLA_OK) fail_msg("%s", nvfp4_last_error());
        check_against(&s, out, lse, 0x1p-8 * parts_max(&s)); /* a bf16 partial: within 2^-8 of itself */
    }
}

/* The lse alone decides an all-empty row: NaN garbage in every part's out still gives zeros. */
static void merge_should_give_zeros_and_minus_inf_where_no_part_holds_an_entry(void **state) {
    (void)state;
    static float po[3 * NQ * H * D], pl[3 * NQ * H];
    static uint16_t out[NQ * H * D];
    for (size_t i = 0; i < sizeof po / sizeof po[0]; i++) po[i] = NAN;
    for (size_t i = 0; i < sizeof pl / sizeof pl[0]; i++) pl[i] = -INFINITY;
    memset(out, 0x5A, sizeof out);
    nvfp4_mla_merge_args_t a = merge_args(3, po, NVFP4_MLA_DTYPE_F32, pl, out, NULL); /* lse is optional */
    assert_int_equal(nvfp4_op_merge(ctx, &a), NVFP4_MLA_OK);
    assert_true(tu_all_zero((const uint8_t *)out, sizeof out));
    float lse[NQ * H];
    a = merge_args(3, po, NVFP4_MLA_DTYPE_F32, pl, out, lse);
    assert_int_equal(nvfp4_op_merge(ctx, &a), NVFP4_MLA_OK);
    for (int i = 0; i < NQ * H; i++) assert_true(isinf(lse[i]) && lse[i] < 0);
}

/* Any element strides: parts interleaved per query with padded rows, lse stored [h, n_q, P], out
 * padded; the same bytes as the contiguous call. */
static void merge_should_read_and_write_any_strides(void **state) {
    (void)state;
    enum { P = 5, PAD = 16 };
    static synth_t s;
    static float po[NQ * P * H * (D + PAD)], pl[H * NQ * P];
    static uint16_t want[NQ * H * D], out[NQ * H * (D + 8) + 64];
    float want_lse[NQ * H], lse[NQ * 2 * H];
    make_synth(&s, P);
    for (int p = 0; p < P; p++)
        for (int q = 0; q < NQ; q++)
            for (int h = 0; h < H; h++) {
                memcpy(po + ((q * P + p) * H + h) * (D + PAD), s.po[p][q][h], D * 4);
                pl[(h * NQ + q) * P + p] = s.pl[p][q][h];
            }
    nvfp4_mla_merge_args_t a = merge_args(P, s.po, NVFP4_MLA_DTYPE_F32, &s.pl[0][0][0], want, want_lse);
    assert_int_equal(nvfp4_op_merge(ctx, &a), NVFP4_MLA_OK);
    a.partial_out = tu_tensor(po, NVFP4_MLA_DTYPE_F32, 4, (int64_t[]){P, NQ, H, D},
                              (int64_t[]){H * (D + PAD), P * H * (D + PAD), D + PAD, 1});
    a.partial_lse = tu_tensor(pl, NVFP4_MLA_DTYPE_F32, 3, (int64_t[]){P, NQ, H}, (int64_t[]){1, P, NQ * P});
    a.out = tu_tensor(out, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){NQ, H, D}, (int64_t[]){H * (D + 8) + 16, D + 8, 1});
    a.lse = tu_tensor(lse, NVFP4_MLA_DTYPE_F32, 2, (int64_t[]){NQ, H}, (int64_t[]){2 * H, 1});
    assert_int_equal(nvfp4_op_merge(ctx, &a), NVFP4_MLA_OK);
    for (int q = 0; q < NQ; q++)
        for (int h = 0; h < H; h++) {
            assert_memory_equal(out + q * (H * (D + 8) + 16) + h * (D + 8), want + (q * H + h) * D, D * 2);
            assert_memory_equal(&lse[q * 2 * H + h], &want_lse[q * H + h], 4);
        }
}

/* ---- The parts as CPU attends over disjoint shares of each query's top-k row. ---- */

enum { SLOTS = 64, TOPK = 24 };

typedef struct attend_world {
    uint8_t cache[SLOTS * 368];
    uint32_t mode;
    float scale;
    uint16_t q[NQ * H * 576];
    int32_t row[NQ * TOPK]; /* query 0: -1 entries and a duplicate; 1: one share holds all; 2: all -1 */
} attend_world_t;

static void make_attend_world(attend_world_t *w, uint32_t mode, float scale) {
    static uint16_t tokens[SLOTS * 576];
    int64_t ids[SLOTS];
    w->mode = mode, w->scale = scale;
    for (int i = 0; i < SLOTS * 576; i++) tokens[i] = nvfp4_f32_to_bf16((float)(gauss() * 0.3));
    for (int t = 0; t < SLOTS; t++) ids[t] = t;
    nvfp4_mla_write_args_t wa = {.struct_size = sizeof wa, .layout = NVFP4_MLA_LAYOUT_FP8_ROPE_368, .scale_mode = mode,
                                 .outer_scale = scale, .kv_c = tu_rows(tokens, NVFP4_MLA_DTYPE_BF16, SLOTS, 512, 576),
                                 .k_pe = tu_rows(tokens + 512, NVFP4_MLA_DTYPE_BF16, SLOTS, 64, 576),
                                 .slot_mapping = tu_vec(ids, NVFP4_MLA_DTYPE_I64, SLOTS),
                                 .cache = tu_cache(w->cache, 4, SLOTS / 4, 368, SLOTS / 4 * 368)};
    assert_int_equal(nvfp4_op_write(ctx, &wa), NVFP4_MLA_OK);
    for (int i = 0; i < NQ * H * 576; i++) w->q[i] = nvfp4_f32_to_bf16((float)gauss());
    for (int e = 0; e < NQ * TOPK; e++) w->row[e] = e >= 2 * TOPK || e % 5 == 4 ? -1 : below(SLOTS);
    w->row[1] = w->row[0];
}

static void attend_into(attend_world_t *w, const int32_t *slots, uint16_t *out, float *lse) {
    nvfp4_mla_attend_args_t a = {.struct_size = sizeof a, .layout = NVFP4_MLA_LAYOUT_FP8_ROPE_368,
                                 .scale_mode = w->mode, .outer_scale = w->scale, .sm_scale = 0.05f};
    a.q = tu_tensor(w->q, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){NQ, H, 576}, (int64_t[]){H * 576, 576, 1});
    a.slots = tu_rows((void *)slots, NVFP4_MLA_DTYPE_I32, NQ, TOPK, TOPK);
    a.cache = tu_cache(w->cache, 4, SLOTS / 4, 368, SLOTS / 4 * 368);
    a.out = tu_tensor(out, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){NQ, H, D}, (int64_t[]){H * D, D, 1});
    a.lse = tu_rows(lse, NVFP4_MLA_DTYPE_F32, NQ, H, H);
    if (nvfp4_op_attend(ctx, &a) != NVFP4_MLA_OK) fail_msg("%s", nvfp4_last_error());
}

/* P attends over the shares, merged, against one attend over the row: both round to bf16 once
 * (2^-8 each, relative), and the partials did once more (2^-8 of the largest). */
static void merge_parts_of_the_row(attend_world_t *w, int64_t parts, const uint16_t *full, const float *full_lse) {
    static uint16_t po[PMAX][NQ * H * D], out[NQ * H * D];
    float pl[PMAX][NQ * H], lse[NQ * H];
    int share[NQ * TOPK];
    for (int e = 0; e < NQ * TOPK; e++) share[e] = e / TOPK == 1 ? (int)parts - 1 : below((int)parts);
    double pmax = 0;
    for (int p = 0; p < parts; p++) {
        int32_t slots[NQ * TOPK];
        for (int e = 0; e < NQ * TOPK; e++) slots[e] = share[e] == p ? w->row[e] : -1;
        attend_into(w, slots, po[p], pl[p]);
        for (int i = 0; i < NQ * H * D; i++) pmax = fmax(pmax, fabs(nvfp4_bf16_to_f32(po[p][i])));
    }
    nvfp4_mla_merge_args_t a = merge_args(parts, po, NVFP4_MLA_DTYPE_BF16, pl[0], out, lse);
    assert_int_equal(nvfp4_op_merge(ctx, &a), NVFP4_MLA_OK);
    for (int i = 0; i < NQ * H * D; i++) {
        const double got = nvfp4_bf16_to_f32(out[i]), want = nvfp4_bf16_to_f32(full[i]);
        if (!(fabs(got - want) <= 0x1p-7 * fabs(want) + 0x1p-8 * 1.01 * pmax))
            fail_msg("mode %u P %lld: out[%d] merged %.9g, one attend %.9g", w->mode, (long long)parts, i, got, want);
    }
    for (int i = 0; i < NQ * H; i++) {
        if (isinf(full_lse[i])) assert_true(isinf(lse[i]) && lse[i] < 0);
        else if (!(fabs(lse[i] - full_lse[i]) <= 1e-6 * fmax(fabs(full_lse[i]), 1)))
            fail_msg("mode %u P %lld: lse[%d] merged %.9g, one attend %.9g", w->mode, (long long)parts, i,
                     (double)lse[i], (double)full_lse[i]);
    }
    assert_true(tu_all_zero((const uint8_t *)(out + 2 * H * D), H * D * 2)); /* query 2: nothing anywhere */
}

static void merge_should_equal_one_attend_over_the_whole_row(void **state) {
    (void)state;
    static attend_world_t w;
    static uint16_t full[NQ * H * D];
    float full_lse[NQ * H];
    const uint32_t modes[2] = {NVFP4_MLA_SCALE_PER_TOKEN, NVFP4_MLA_SCALE_STATIC};
    for (int m = 0; m < 2; m++) {
        make_attend_world(&w, modes[m], m ? 0.3f * 4 / 2688 : 0.0f);
        attend_into(&w, w.row, full, full_lse);
        for (int64_t parts = 1; parts <= PMAX; parts++) merge_parts_of_the_row(&w, parts, full, full_lse);
    }
}

/* ---- Argument checks: the status, the words, and outputs left as they were. ---- */

typedef struct bad_case {
    const char *needle;
    nvfp4_mla_status_t status;
} bad_case_t;

static const bad_case_t bad_cases[] = {
    {"merge: flags must be zero in ABI 1.1", NVFP4_MLA_ERR_INVALID_ARGUMENT},
    {"merge: reserved must be zero in ABI 1.1", NVFP4_MLA_ERR_INVALID_ARGUMENT},
    {"merge: stream must be NULL on a CPU context", NVFP4_MLA_ERR_INVALID_ARGUMENT},
    {"merge: partial_out: dtype is f16 (6), must be bf16 or f32", NVFP4_MLA_ERR_INVALID_ARGUMENT},
    {"merge: partial_out: ndim is 3, must be 4", NVFP4_MLA_ERR_INVALID_ARGUMENT},
    {"merge: partial_out: P = shape[0] is 0, must be 1..65536",
     NVFP4_MLA_ERR_INVALID_ARGUMENT},
    {"merge: partial_out: shape[3] is 500, must be 512 (latent)", NVFP4_MLA_ERR_INVALID_ARGUMENT},
    {"merge: partial_out: strides[3] is 2, must be 1 (each row's 512 values contiguous)",
     NVFP4_MLA_ERR_INVALID_ARGUMENT},
    {"merge: partial_out: lives on device (type 2, index 0), the context is on (type 1, index 0)",
     NVFP4_MLA_ERR_INVALID_ARGUMENT},
    {"merge: partial_lse: dtype is bf16 (5), must be f32", NVFP4_MLA_ERR_INVALID_ARGUMENT},
    {"merge: partial_lse: shape[0] is 2, must be 3 (P, as partial_out)", NVFP4_MLA_ERR_INVALID_ARGUMENT},
    {"merge: partial_lse: shape[2] is 5, must be 4 (h, as partial_out)", NVFP4_MLA_ERR_INVALID_ARGUMENT},
    {"merge: out: dtype is f32 (4), must be bf16", NVFP4_MLA_ERR_INVALID_ARGUMENT},
    {"merge: out: shape[0] is 2, must be 3 (n_q)", NVFP4_MLA_ERR_INVALID_ARGUMENT},
    {"merge: out: strides[2] is 2, must be 1", NVFP4_MLA_ERR_INVALID_ARGUMENT},
    {"merge: out heads: a stride of 100 elements overlaps rows of 512", NVFP4_MLA_ERR_INVALID_ARGUMENT},
    {"merge: out overlaps partial_out", NVFP4_MLA_ERR_INVALID_ARGUMENT},
    {"merge: lse: shape[1] is 3, must be 4 (h)", NVFP4_MLA_ERR_INVALID_ARGUMENT},
    {"merge: lse overlaps partial_lse", NVFP4_MLA_ERR_INVALID_ARGUMENT},
    {"merge: lse overlaps out", NVFP4_MLA_ERR_INVALID_ARGUMENT},
    {"merge: partial_lse[1, 2, 3] is nan; an attention's lse is finite, or -inf for a part without a valid entry",
     NVFP4_MLA_ERR_INVALID_ARGUMENT},
    {"merge: partial_lse[0, 0, 1] is inf;", NVFP4_MLA_ERR_INVALID_ARGUMENT},
    {"merge: the cpu context lacks capability op.merge_partials", NVFP4_MLA_ERR_UNSUPPORTED},
    {"merge: nvfp4_mla_merge_args_t: struct_size 4 is smaller than the ABI 1.0 size", NVFP4_MLA_ERR_VERSION},
};

/* Case c's one fault in otherwise valid arguments (po, pl, out, lse: the buffers behind them). */
static void break_args(int c, nvfp4_mla_merge_args_t *a, float *pl, uint16_t *out) {
    switch (c) {
    case 0: a->flags = 1; break;
    case 1: a->reserved[3] = 1; break;
    case 2: a->stream = (void *)16; break;
    case 3: a->partial_out.dtype = NVFP4_MLA_DTYPE_F16; break;
    case 4: a->partial_out.ndim = 3, a->partial_out.shape[3] = a->partial_out.strides[3] = 0; break;
    case 5: a->partial_out.shape[0] = 0; break;
    case 6: a->partial_out.shape[3] = 500; break;
    case 7: a->partial_out.strides[3] = 2; break;
    case 8: a->partial_out.device_type = NVFP4_MLA_DEVICE_CUDA; break;
    case 9: a->partial_lse.dtype = NVFP4_MLA_DTYPE_BF16; break;
    case 10: a->partial_lse.shape[0] = 2; break;
    case 11: a->partial_lse.shape[2] = 5; break;
    case 12: a->out.dtype = NVFP4_MLA_DTYPE_F32; break;
    case 13: a->out.shape[0] = 2; break;
    case 14: a->out.strides[2] = 2; break;
    case 15: a->out.strides[1] = 100; break;
    case 16: a->out.data = (uint16_t *)a->partial_out.data + 1000; break;
    case 17: a->lse.shape[1] = 3; break;
    case 18: a->lse.data = pl + 5; break;
    case 19: a->lse.data = out + 64; break;
    case 20: pl[(1 * NQ + 2) * H + 3] = NAN; break;
    case 21: pl[1] = INFINITY; break;
    case 22: ctx->capability_bits &= ~NVFP4_MLA_CAP_OP_MERGE_PARTIALS; break;
    case 23: a->struct_size = 4; break;
    }
}

static void merge_should_refuse_bad_arguments_by_name(void **state) {
    (void)state;
    static synth_t s;
    static uint16_t out[NQ * H * D];
    float lse[NQ * H];
    for (size_t c = 0; c < sizeof bad_cases / sizeof bad_cases[0]; c++) {
        make_synth(&s, 3);
        memset(out, 0x5A, sizeof out);
        memset(lse, 0x5A, sizeof lse);
        nvfp4_mla_merge_args_t a = merge_args(3, s.po, NVFP4_MLA_DTYPE_F32, &s.pl[0][0][0], out, lse);
        const uint64_t caps = ctx->capability_bits;
        break_args((int)c, &a, &s.pl[0][0][0], out);
        const nvfp4_mla_status_t st = nvfp4_op_merge(ctx, &a);
        ctx->capability_bits = caps;
        assert_int_equal(st, bad_cases[c].status);
        if (!strstr(nvfp4_last_error(), bad_cases[c].needle))
            fail_msg("case %zu: \"%s\" lacks \"%s\"", c, nvfp4_last_error(), bad_cases[c].needle);
        for (size_t i = 0; i < sizeof out / 2; i++) assert_int_equal(out[i], 0x5A5A);
        for (int i = 0; i < NQ * H; i++) assert_int_equal(tu_bits_at((const uint8_t *)&lse[i]), 0x5A5A5A5A);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(merge_should_equal_a_float64_softmax_over_the_union),
        cmocka_unit_test(merge_should_give_zeros_and_minus_inf_where_no_part_holds_an_entry),
        cmocka_unit_test(merge_should_read_and_write_any_strides),
        cmocka_unit_test(merge_should_equal_one_attend_over_the_whole_row),
        cmocka_unit_test(merge_should_refuse_bad_arguments_by_name),
    };
    return cmocka_run_group_tests(tests, tu_setup_cpu, tu_teardown_cpu);
}
