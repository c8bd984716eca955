/* The check of attend outputs (host_shims/common/attend_check.h) on the CPU: what it accepts (exact
 * rows, rows computed with a GPU kernel's arithmetic: P rounded to bf16, f32 sums, online softmax
 * over 64-key tiles), what it rejects (a scaled row, one element off, NaN, a wrong lse), the three
 * faults the GPU tests inject (one V row x 1.1, one group scale one code up, one split's lse
 * shifted) applied to CPU outputs on every layout, and the queries it picks for big calls. The
 * GPU tests (tests/test_gpu_attend.c) run the same faults on CUDA outputs. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "attend_case.h"
#include "attend_check.h"
#include "context.h"
#include "test_util.h"

static uint64_t rng = 5;
static double uniform(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return ((double)(rng >> 11) + 0.5) * 0x1p-53;
}
static double gauss(void) {
    return sqrt(-2 * log(uniform())) * cos(6.283185307179586 * uniform());
}
static float bf16_round(float v) {
    return nvfp4_bf16_to_f32(nvfp4_f32_to_bf16(v));
}

static void row_of(uint16_t *row, double scale) {
    for (int i = 0; i < 512; i++)
        row[i] = nvfp4_f32_to_bf16((float)(gauss() * scale));
}

static void attend_check_should_accept_identical_and_empty_rows(void **state) {
    (void)state;
    uint16_t want[512], zero[512] = {0};
    row_of(want, 0.03);
    attend_check_stats_t s = {0};
    assert_true(attend_check_row(want, 4.5f, want, 4.5f, NULL, &s, "same"));
    assert_true(attend_check_row(zero, -INFINITY, zero, -INFINITY, NULL, &s, "empty"));
    assert_true(attend_check_row(want, NAN, want, NAN, NULL, &s, "no lse"));
    assert_int_equal(s.rows, 3);
    assert_int_equal(s.failed, 0);
    assert_true(s.worst_rel_rms == 0 && s.worst_excess == 0 && s.worst_lse == 0);
    assert_string_equal(s.first_failure, "");
}

/* One row of attention over n keys: the reference in double (as the CPU backend: out rounded to
 * bf16) and a GPU kernel's arithmetic: scores in f32, online softmax over 64-key tiles in base 2,
 * P rounded to bf16 before P.V, f32 sums, out rounded to bf16. */
static void emulate_row(int n, const float *keys, const float *q, uint16_t *want, float *want_lse, uint16_t *got,
                        float *got_lse) {
    double s[512], m = -INFINITY, l = 0, acc[512] = {0};
    for (int k = 0; k < n; k++) {
        double dot = 0;
        for (int i = 0; i < 576; i++)
            dot += (double)q[i] * keys[k * 576 + i];
        s[k] = dot / 24.0;
        m = fmax(m, s[k]);
    }
    for (int k = 0; k < n; k++) {
        const double p = exp(s[k] - m);
        l += p;
        for (int i = 0; i < 512; i++)
            acc[i] += p * keys[k * 576 + i];
    }
    for (int i = 0; i < 512; i++)
        want[i] = nvfp4_f32_to_bf16((float)(acc[i] / l));
    *want_lse = (float)(m + log(l));
    float mf = -INFINITY, lf = 0, o[512] = {0};
    for (int t = 0; t < n; t += 64) {
        float sf[64], tmax = mf;
        const int end = t + 64 < n ? t + 64 : n;
        for (int k = t; k < end; k++) {
            float dot = 0;
            for (int i = 0; i < 576; i++)
                dot += q[i] * keys[k * 576 + i];
            sf[k - t] = dot * (1.0f / 24.0f) * 1.44269504f;
            tmax = fmaxf(tmax, sf[k - t]);
        }
        const float rescale = exp2f(mf - tmax);
        lf *= rescale;
        for (int i = 0; i < 512; i++)
            o[i] *= rescale;
        for (int k = t; k < end; k++) {
            const float p = exp2f(sf[k - t] - tmax);
            lf += p;
            const float pb = bf16_round(p);
            for (int i = 0; i < 512; i++)
                o[i] += pb * keys[k * 576 + i];
        }
        mf = tmax;
    }
    for (int i = 0; i < 512; i++)
        got[i] = nvfp4_f32_to_bf16(o[i] / lf);
    *got_lse = (mf + log2f(lf)) * 0.69314718f;
}

/* A correct kernel's rows pass with room: 400 rows of 1 to 512 keys (per-token log-normal
 * magnitudes, queries of scale 1 and 3: flat and peaked softmax) stay under half of each bound. */
static void attend_check_should_accept_rows_of_a_gpu_kernels_arithmetic(void **state) {
    (void)state;
    float *keys = malloc(512 * 576 * sizeof *keys), q[576];
    uint16_t want[512], got[512];
    float want_lse, got_lse;
    attend_check_stats_t s = {0};
    for (int trial = 0; trial < 400; trial++) {
        const int n = 1 + (int)(uniform() * 511);
        for (int k = 0; k < n; k++) {
            const double mag = 0.5 * exp(0.5 * gauss());
            for (int i = 0; i < 576; i++)
                keys[k * 576 + i] = bf16_round((float)(gauss() * mag));
        }
        const double qs = trial % 2 ? 3.0 : 1.0;
        for (int i = 0; i < 576; i++)
            q[i] = bf16_round((float)(gauss() * qs));
        emulate_row(n, keys, q, want, &want_lse, got, &got_lse);
        attend_check_row(got, got_lse, want, want_lse, NULL, &s, "emulated");
    }
    free(keys);
    char line[512];
    fprintf(stderr, "emulated GPU arithmetic: %s\n", attend_check_summary(&s, line, sizeof line));
    assert_int_equal(s.failed, 0);
    const attend_check_bounds_t *b = &attend_check_default_bounds;
    assert_true(s.worst_rel_rms < b->rel_rms / 2);
    assert_true(s.worst_excess < b->of_row_max / 2);
    assert_true(s.worst_lse < b->lse_rel / 2);
}

static void attend_check_should_reject_wrong_rows(void **state) {
    (void)state;
    uint16_t want[512], got[512];
    row_of(want, 0.03);
    attend_check_stats_t s = {0};
    for (int i = 0; i < 512; i++)
        got[i] = nvfp4_f32_to_bf16(nvfp4_bf16_to_f32(want[i]) * 1.02f);
    assert_false(attend_check_row(got, 4.5f, want, 4.5f, NULL, &s, "scaled 1.02"));
    assert_non_null(strstr(s.first_failure, "scaled 1.02: relative RMS error"));
    memcpy(got, want, sizeof got);
    double row_max = 0;
    for (int i = 0; i < 512; i++)
        row_max = fmax(row_max, fabs(nvfp4_bf16_to_f32(want[i])));
    got[100] = nvfp4_f32_to_bf16(nvfp4_bf16_to_f32(want[100]) + (float)(0.04 * row_max));
    assert_false(attend_check_row(got, 4.5f, want, 4.5f, NULL, &s, "one element"));
    memcpy(got, want, sizeof got);
    got[7] = 0x7FC0; /* NaN */
    assert_false(attend_check_row(got, 4.5f, want, 4.5f, NULL, &s, "nan"));
    uint16_t zero[512] = {0};
    assert_false(attend_check_row(zero, 4.5f, want, 4.5f, NULL, &s, "zero"));
    assert_false(attend_check_row(want, 4.5f + 1e-4f, want, 4.5f, NULL, &s, "lse"));
    assert_false(attend_check_row(want, 4.5f, want, -INFINITY, NULL, &s, "lse of nothing"));
    assert_false(attend_check_row(zero, -INFINITY, want, 4.5f, NULL, &s, "lse -inf"));
    assert_false(attend_check_row(want, NAN, want, 4.5f, NULL, &s, "lse nan"));
    assert_int_equal(s.rows, 8);
    assert_int_equal(s.failed, 8);
    assert_non_null(strstr(s.first_failure, "scaled 1.02")); /* the first one kept */
    char line[512];
    assert_non_null(strstr(attend_check_summary(&s, line, sizeof line), "rows 8 failed 8"));
}

/* Every query up to all_up_to; else at least `spread`, sorted and distinct, with the first and
 * last queries and both sides of the round robin's first wraps. */
static void attend_check_should_pick_edges_and_wraps(void **state) {
    (void)state;
    int64_t picks[512];
    assert_int_equal(attend_check_pick_queries(300, 512, 64, 132, picks), 300);
    assert_true(picks[0] == 0 && picks[299] == 299);
    const int64_t sizes[] = {513, 700, 4096, 100000};
    for (int k = 0; k < 4; k++) {
        const int64_t n_q = sizes[k], n = attend_check_pick_queries(n_q, 512, 64, 132, picks);
        assert_true(n >= 64 && n <= 2 * 64 + 8);
        assert_true(picks[0] == 0 && picks[1] == 1 && picks[n - 1] == n_q - 1 && picks[n - 2] == n_q - 2);
        int wrap131 = 0, wrap132 = 0, wrap65 = 0;
        for (int64_t i = 0; i < n; i++) {
            if (i)
                assert_true(picks[i] > picks[i - 1]);
            wrap131 |= picks[i] == 131, wrap132 |= picks[i] == 132, wrap65 |= picks[i] == 65;
        }
        assert_true(wrap131 && wrap132 && wrap65); /* 132 SMs at 1 and at 2 items a query */
    }
}

/* ---- the three faults on CPU outputs ---- */

static const struct {
    uint32_t layout, mode;
    const char *name;
} layouts[] = {
    {NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, "368 per-token"},
    {NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC, "368 static"},
    {NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC, "432 static"},
    {NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC, "656 FlashMLA rule"},
};

/* Layout l's fault case (attend_case_make_fault_target) and its target entry: query, slot, weight. */
typedef struct fault_target {
    int64_t query, slot;
    double weight;
} fault_target_t;

static fault_target_t fault_case(attend_case_t *c, int l) {
    fault_target_t t;
    attend_case_make_fault_target(c, layouts[l].layout, layouts[l].mode, 16, 40 + 8 * (uint64_t)l, tu_cpu, &t.query,
                                  NULL, &t.slot, &t.weight);
    return t;
}

/* The CPU attend over `cache` into the case's output; then the check of query qi must fail. */
static void expect_caught(attend_case_t *c, const uint8_t *cache, int64_t qi, const char *what) {
    attend_case_reference(c, tu_cpu, NULL, 0, c->o.nq, c->out, c->lse); /* every row right... */
    attend_case_reference(c, tu_cpu, cache, qi, 1, c->out + qi * c->o.h * 512, c->lse + qi * c->o.h); /* but qi's */
    attend_check_stats_t s = {0};
    const int64_t all[4] = {0, 1, 2, 3};
    attend_case_check(c, tu_cpu, all, c->o.nq, &s);
    char line[512];
    fprintf(stderr, "%s: %s\n", what, attend_check_summary(&s, line, sizeof line));
    if (s.failed == 0)
        fail_msg("%s: the check passed a faulty output", what);
}

static void attend_check_should_catch_a_v_row_and_a_group_scale_fault(void **state) {
    (void)state;
    for (int l = 0; l < 4; l++) {
        attend_case_t c;
        const fault_target_t t = fault_case(&c, l);
        const size_t bytes = (size_t)(c.o.slots_n / c.o.block) * (size_t)c.stride;
        uint8_t *bad = malloc(bytes);
        char what[160];
        memcpy(bad, c.cache, bytes);
        attend_fault_scale_latent(&c, tu_cpu, bad, t.slot, 1.1f);
        snprintf(what, sizeof what, "%s, fault (a) V row x 1.1 (weight %.2f)", layouts[l].name, t.weight);
        expect_caught(&c, bad, t.query, what);
        memcpy(bad, c.cache, bytes);
        const int group = attend_fault_bump_scale(&c, bad, t.slot);
        snprintf(what, sizeof what, "%s, fault (b) group %d scale one code up (weight %.2f)", layouts[l].name, group,
                 t.weight);
        expect_caught(&c, bad, t.query, what);
        free(bad);
        attend_case_free(&c);
    }
}

/* Query qi's attention over entries [first, first + n) of its top-k (the others -1): out as f32
 * rows [h, 512] and lse [h]. */
static void partial(attend_case_t *c, int64_t qi, int64_t first, int64_t n, float *o, double *lse) {
    const int64_t h = c->o.h, topk = c->o.topk;
    int32_t *row = c->slots + qi * topk, *keep = malloc((size_t)topk * 4);
    memcpy(keep, row, (size_t)topk * 4);
    for (int64_t e = 0; e < topk; e++)
        if (e < first || e >= first + n)
            row[e] = -1;
    uint16_t *out = malloc((size_t)h * 512 * 2);
    float *l = malloc((size_t)h * 4);
    attend_case_reference(c, tu_cpu, NULL, qi, 1, out, l);
    for (int64_t i = 0; i < h * 512; i++)
        o[i] = nvfp4_bf16_to_f32(out[i]);
    for (int64_t i = 0; i < h; i++)
        lse[i] = l[i];
    memcpy(row, keep, (size_t)topk * 4);
    free(keep), free(out), free(l);
}

/* (c): query qi's two halves of its top-k merged as split-K merges them pass; with the lse of the
 * half that holds the heaviest entry shifted by 0.1 (its weight off by 10.5%) they fail. */
static void attend_check_should_catch_a_split_lse_fault(void **state) {
    (void)state;
    for (int l = 0; l < 4; l++) {
        attend_case_t c;
        const fault_target_t t = fault_case(&c, l);
        const int64_t qi = t.query, h = c.o.h, half = c.o.topk / 2;
        float *o = malloc((size_t)(2 * h * 512) * sizeof *o);
        double lse[2][128];
        partial(&c, qi, 0, half, o, lse[0]);
        partial(&c, qi, half, c.o.topk - half, o + h * 512, lse[1]);
        int heavy_half = 1;
        for (int64_t e = 0; e < half; e++)
            heavy_half &= c.slots[qi * c.o.topk + e] != t.slot;
        for (int shifted = 0; shifted < 2; shifted++) {
            attend_case_reference(&c, tu_cpu, NULL, 0, c.o.nq, c.out, c.lse);
            for (int64_t hd = 0; hd < h; hd++) {
                const float *parts[2] = {o + hd * 512, o + (h + hd) * 512};
                double ls[2] = {lse[0][hd], lse[1][hd]};
                if (shifted)
                    ls[heavy_half] += 0.1;
                attend_merge_partials(2, parts, ls, c.out + (qi * h + hd) * 512, c.lse + qi * h + hd);
            }
            attend_check_stats_t s = {0};
            attend_case_check(&c, tu_cpu, &qi, 1, &s);
            char line[512];
            fprintf(stderr, "%s, split halves merged%s: %s\n", layouts[l].name,
                    shifted ? ", fault (c) one split's lse + 0.1" : "", attend_check_summary(&s, line, sizeof line));
            if (shifted ? s.failed == 0 : s.failed != 0)
                fail_msg("%s: the merge of split halves %s the check", layouts[l].name,
                         shifted ? "with a shifted lse passed" : "failed");
        }
        free(o);
        attend_case_free(&c);
    }
}

/* Every fault the GPU self-test injects (tests/test_gpu_attend.c: the same fault cases, seeds and
 * faults, attend_case_faults), on the CPU: each moves some row by at least twice a bound, so a
 * correct kernel's own error cannot hide it and the GPU test's verdict is the check's alone. */
static void attend_check_should_see_every_fault_of_the_gpu_self_test(void **state) {
    (void)state;
    for (int i = 0; i < attend_fault_case_count; i++) {
        const attend_fault_case_t *fc = &attend_fault_cases[i];
        attend_case_t c;
        int64_t query = 0, head = 0, slot = -1;
        double weight = 0;
        attend_case_make_fault_target(&c, fc->layout, fc->mode, fc->h, fc->seed, tu_cpu, &query, &head, &slot, &weight);
        attend_fault_t faults[ATTEND_FAULTS];
        attend_case_faults(&c, tu_cpu, query, head, slot, weight, faults);
        for (int f = 0; f < ATTEND_FAULTS; f++) {
            attend_check_stats_t s = {0};
            const int visible = attend_case_fault_visible(&c, tu_cpu, &faults[f], &s);
            char line[512];
            fprintf(stderr, "%s rb %d h %lld %s: %s\n", visible ? "visible" : "INVISIBLE", c.rb, (long long)fc->h,
                    faults[f].what, attend_check_summary(&s, line, sizeof line));
            if (!visible)
                fail_msg("rb %d h %lld, fault %s moves no row by twice a bound", c.rb, (long long)fc->h, faults[f].what);
        }
        attend_faults_free(faults);
        attend_case_free(&c);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(attend_check_should_see_every_fault_of_the_gpu_self_test),
        cmocka_unit_test(attend_check_should_accept_identical_and_empty_rows),
        cmocka_unit_test(attend_check_should_accept_rows_of_a_gpu_kernels_arithmetic),
        cmocka_unit_test(attend_check_should_reject_wrong_rows),
        cmocka_unit_test(attend_check_should_pick_edges_and_wraps),
        cmocka_unit_test(attend_check_should_catch_a_v_row_and_a_group_scale_fault),
        cmocka_unit_test(attend_check_should_catch_a_split_lse_fault),
    };
    return cmocka_run_group_tests(tests, tu_setup_cpu, tu_teardown_cpu);
}
