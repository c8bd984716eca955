/* E4M3 / E2M1 / bf16 / fp16 conversions (kernels/fp_codes.h) against independent references:
 * exhaustive where the domain is small, a dense grid with every tie where it is not. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fp_codes.h"

/* Reference E4M3 magnitudes by formula (not by bit tricks): code c = e << 3 | m. */
static double ref_e4m3(int c) {
    int e = (c >> 3) & 15, m = c & 7;
    return e == 0 ? m * ldexp(1, -9) : (1 + m / 8.0) * ldexp(1, e - 7);
}

/* Nearest finite E4M3 magnitude code by exhaustive search, ties to the even code, clamp to 448. */
static int ref_e4m3_nearest(double a) {
    int best = 0;
    for (int c = 1; c <= 0x7E; c++) {
        double d = fabs(ref_e4m3(c) - a), bd = fabs(ref_e4m3(best) - a);
        if (d < bd || (d == bd && (c & 1) == 0)) {
            best = c;
        }
    }
    return best;
}

static void e4m3_decode_should_match_formula_for_every_code(void **state) {
    (void)state;
    for (int c = 0; c < 256; c++) {
        if ((c & 0x7F) == 0x7F) {
            continue; /* NaN codes: never written */
        }
        double want = (c & 0x80) ? -ref_e4m3(c & 0x7F) : ref_e4m3(c & 0x7F);
        assert_true(nvfp4_e4m3_decode((uint8_t)c) == (float)want);
    }
}

static void e4m3_encode_should_round_to_nearest_even_on_every_midpoint(void **state) {
    (void)state;
    /* Every code value, every midpoint between neighbours, and a point just either side of each. */
    for (int c = 0; c < 0x7E; c++) {
        double lo = ref_e4m3(c), hi = ref_e4m3(c + 1), mid = (lo + hi) / 2;
        double probes[] = {lo, mid, hi, nextafterf((float)mid, 0.0f), nextafterf((float)mid, 1000.0f)};
        for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
            float v = (float)probes[i];
            assert_int_equal(nvfp4_e4m3_encode(v), ref_e4m3_nearest(v));
            assert_int_equal(nvfp4_e4m3_encode(-v), 0x80 | ref_e4m3_nearest(v));
        }
    }
}

static void e4m3_encode_should_match_search_on_a_dense_grid(void **state) {
    (void)state;
    for (double a = 1e-5; a < 600; a *= 1.0007) {
        assert_int_equal(nvfp4_e4m3_encode((float)a), ref_e4m3_nearest((float)a));
    }
}

static void e4m3_encode_should_saturate_and_handle_specials(void **state) {
    (void)state;
    assert_int_equal(nvfp4_e4m3_encode(448.0f), 0x7E);
    assert_int_equal(nvfp4_e4m3_encode(464.0f), 0x7E);
    assert_int_equal(nvfp4_e4m3_encode(1e30f), 0x7E);
    assert_int_equal(nvfp4_e4m3_encode(INFINITY), 0x7E);
    assert_int_equal(nvfp4_e4m3_encode(-INFINITY), 0xFE);
    assert_int_equal(nvfp4_e4m3_encode(NAN), 0x00);
    assert_int_equal(nvfp4_e4m3_encode(-0.0f), 0x80);
    assert_int_equal(nvfp4_e4m3_encode(0x1p-10f), 0x00);          /* half the smallest subnormal: tie to 0 */
    assert_int_equal(nvfp4_e4m3_encode(0x1.000002p-10f), 0x01);   /* just above: 2^-9 */
    assert_int_equal(nvfp4_e4m3_encode(0x1p-149f), 0x00);         /* float subnormal input */
}

/* Division-based E2M1 reference: round y/d to the nearest of {0,.5,1,1.5,2,3,4,6}, ties to even. */
static int ref_e2m1(double y, double d) {
    static const double mags[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    double q = fabs(y) / d;
    int best = 0;
    for (int m = 1; m < 8; m++) {
        double dm = fabs(mags[m] - q), db = fabs(mags[best] - q);
        if (dm < db || (dm == db && (m & 1) == 0)) {
            best = m;
        }
    }
    return (signbit(y) ? 8 : 0) | best;
}

static void e2m1_threshold_encoder_should_equal_division_on_grid_with_ties(void **state) {
    (void)state;
    const float scales[] = {0x1p-9f, 3 * 0x1p-9f, 0x1p-6f, 0.375f, 1.0f, 1.125f, 6.5f, 448.0f};
    for (size_t s = 0; s < sizeof scales / sizeof scales[0]; s++) {
        float d = scales[s];
        for (int k = -800; k <= 800; k++) { /* steps of 1/100 of d, exact ties included below */
            float y = (float)(k * 0.01) * d;
            assert_int_equal(nvfp4_e2m1_encode(y, d), ref_e2m1(y, d));
        }
        const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
        const int want[] = {0, 2, 2, 4, 4, 6, 6};
        for (int t = 0; t < 7; t++) {
            assert_int_equal(nvfp4_e2m1_encode(ties[t] * d, d), want[t]);
            assert_int_equal(nvfp4_e2m1_encode(-ties[t] * d, d), 8 | want[t]);
            assert_int_equal(nvfp4_e2m1_encode(nextafterf(ties[t] * d, INFINITY), d),
                             want[t] | (t == 0 || t == 2 || t == 4 || t == 6));
        }
    }
}

static void e2m1_encoder_should_follow_the_special_value_rules(void **state) {
    (void)state;
    assert_int_equal(nvfp4_e2m1_encode(NAN, 1.0f), 0);
    assert_int_equal(nvfp4_e2m1_encode(INFINITY, 1.0f), 7);
    assert_int_equal(nvfp4_e2m1_encode(-INFINITY, 1.0f), 15);
    assert_int_equal(nvfp4_e2m1_encode(-0.1f, 1.0f), 8); /* negative rounding to zero keeps its sign */
    assert_int_equal(nvfp4_e2m1_encode(100.0f, 1.0f), 7); /* saturates at 6 */
    for (int c = 0; c < 16; c++) {
        static const float mags[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
        assert_true(nvfp4_e2m1_decode((uint8_t)c) == ((c & 8) ? -mags[c & 7] : mags[c & 7]));
    }
}

static void constants_should_be_the_single_precision_reciprocals(void **state) {
    (void)state;
    volatile float six = 6.0f, d2688 = 2688.0f, d448 = 448.0f;
    assert_true(NVFP4_K6 == 1.0f / six);
    assert_true(NVFP4_K2688 == 1.0f / d2688);
    assert_true(NVFP4_K448 == 1.0f / d448);
    assert_true(NVFP4_FLT_MIN == FLT_MIN);
}

/* binary16 by its definition: (-1)^s * (e == 0 ? m * 2^-24 : (1 + m/1024) * 2^(e-15)). */
static double ref_f16(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double mag = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? ldexp(m, -24) : ldexp(1 + m / 1024.0, e - 15);
    return s ? -mag : mag;
}

static void f16_and_bf16_conversions_should_be_exact_for_every_pattern(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        uint16_t bits = (uint16_t)h;
        double ref = ref_f16(bits);
        float got = nvfp4_f16_to_f32(bits);
        if (isnan(ref)) {
            assert_true(isnan(got));
        } else {
            assert_true(got == (float)ref && !!signbit(got) == !!signbit(ref));
        }
        float b = nvfp4_bf16_to_f32(bits);
        if (!isnan(b)) {
            assert_int_equal(nvfp4_f32_to_bf16(b), bits); /* bf16 -> f32 -> bf16 is the identity */
        }
    }
    assert_int_equal(nvfp4_f32_to_bf16(1.00390625f), 0x3F80);      /* tie 1 + 2^-8: to even (1.0) */
    assert_int_equal(nvfp4_f32_to_bf16(1.01171875f), 0x3F82);      /* tie 1 + 3*2^-8: to even (up) */
    assert_int_equal(nvfp4_f32_to_bf16(0x1.fffffep127f), 0x7F80);  /* rounds to +inf */
    assert_int_equal(nvfp4_f32_to_bf16(-NAN), 0x7FFF);              /* canonical NaN, as cvt.rn.bf16 */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(e4m3_decode_should_match_formula_for_every_code),
        cmocka_unit_test(e4m3_encode_should_round_to_nearest_even_on_every_midpoint),
        cmocka_unit_test(e4m3_encode_should_match_search_on_a_dense_grid),
        cmocka_unit_test(e4m3_encode_should_saturate_and_handle_specials),
        cmocka_unit_test(e2m1_threshold_encoder_should_equal_division_on_grid_with_ties),
        cmocka_unit_test(e2m1_encoder_should_follow_the_special_value_rules),
        cmocka_unit_test(constants_should_be_the_single_precision_reciprocals),
        cmocka_unit_test(f16_and_bf16_conversions_should_be_exact_for_every_pattern),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
