/* The writer policies' arithmetic (docs/record-format.md section 4b), written once for both backends.
 *
 * docs/record-format.md fixes what a reader computes from the codes, not how a writer picks them: any
 * group-scale code is a valid record. The `mse` policy picks, per group, the code whose decoded
 * group has the least squared error among six candidates instead of taking the `amax / 6` code
 * (`rtn`, the spec's step 3). Step 4 (the nearest E2M1 code of each element for the chosen scale),
 * the outer scale s_t (step 1) and the RoPE (step 5) are the rtn writer's.
 *
 * Why one header: the CUDA writer must be bit-identical to the CPU writer (the oracle), so both
 * compile these functions. Every step is one IEEE binary32 operation with round-to-nearest-even,
 * written with nvfp4_mul_rn/add_rn/sub_rn (never contracted into an FMA; the CUDA side uses the
 * __f*_rn intrinsics and -fmad=false). The sum runs over the elements in index order, so it is one
 * sequence of roundings on every backend. Tested against hand-computed groups and against the E2M1
 * encoder in tests/test_write_policy.c; CUDA against CPU bytes in tests/test_gpu_codec.c.
 */
#ifndef NVFP4_MLA_WRITE_POLICY_H
#define NVFP4_MLA_WRITE_POLICY_H

#include "fp_codes.h"

#if defined(__CUDA_ARCH__) /* the device pass only: the host compilers know no such pragma */
#define NVFP4_UNROLL _Pragma("unroll")
#else
#define NVFP4_UNROLL
#endif

/* Scaling the group maximum to 4 instead of 6 ("four over six"): a_g * 0.25 is exact in binary32
 * down to 2^-124, and rounds like any product below that. */
#define NVFP4_K4 0.25f

/* Squared error of a group of 16 scaled values y (step 2) decoded with group scale d (a decoded
 * E4M3 code, d >= 0) and the nearest E2M1 code of each element (step 4):
 *   E = sum over i = 0..15 in order, of finite y_i only, of e_i * e_i with e_i = |y_i| - v_i,
 * each operation rounded to binary32, the sum starting at +0. v_i = M[k] * d (exact), where M =
 * {0, 0.5, 1, 1.5, 2, 3, 4, 6} and k is the magnitude index of nvfp4_e2m1_encode (the same
 * comparisons against the same exact thresholds m * d). With d = 0 every v_i is 0, which is the
 * zero payload step 3 writes then. Non-finite y_i are left out: their codes (0 for NaN, +-6 for
 * +-Inf) do not depend on the choice. An overflowing e_i * e_i makes E = +Inf (never NaN).
 * `all_finite` (a constant at each call site) drops the finiteness test where the caller knows. */
NVFP4_HD float nvfp4_group_sse(const float *y, float d, int all_finite) {
    const float t0 = nvfp4_mul_rn(0.25f, d), t1 = nvfp4_mul_rn(0.75f, d), t2 = nvfp4_mul_rn(1.25f, d);
    const float t3 = nvfp4_mul_rn(1.75f, d), t4 = nvfp4_mul_rn(2.5f, d), t5 = nvfp4_mul_rn(3.5f, d);
    const float t6 = nvfp4_mul_rn(5.0f, d);
    const float v1 = nvfp4_mul_rn(0.5f, d), v3 = nvfp4_mul_rn(1.5f, d), v4 = nvfp4_mul_rn(2.0f, d);
    const float v5 = nvfp4_mul_rn(3.0f, d), v6 = nvfp4_mul_rn(4.0f, d), v7 = nvfp4_mul_rn(6.0f, d);
    float sum = 0.0f;
    NVFP4_UNROLL
    for (int i = 0; i < 16; i++) {
        const float a = nvfp4_abs(y[i]);
        if (!all_finite && !nvfp4_is_finite(a)) {
            continue;
        }
        /* The binary search of nvfp4_e2m1_encode: index bit 2, bit 1, then the strict bit 0. */
        const int upper = a >= t3;
        const int mid = a >= (upper ? t5 : t1);
        const float strict = upper ? (mid ? t6 : t4) : (mid ? t2 : t0);
        const float even = upper ? (mid ? v6 : v4) : (mid ? d : 0.0f); /* index 6, 4, 2, 0 */
        const float odd = upper ? (mid ? v7 : v5) : (mid ? v3 : v1);   /* index 7, 5, 3, 1 */
        const float e = nvfp4_sub_rn(a, a > strict ? odd : even);
        sum = nvfp4_add_rn(sum, nvfp4_mul_rn(e, e));
    }
    return sum;
}

/* The mse policy's group-scale code. c6 = E4M3_RN_SATFINITE(a_g * K6) (the rtn code) and
 * c4 = E4M3_RN_SATFINITE(a_g * K4), both magnitude codes. Candidates, in this order:
 *   c6, c6 - 1, c6 + 1, c4 - 1, c4, c4 + 1   (those outside [0, 0x7E] are skipped)
 * The first candidate is taken, and a later one replaces the choice only when its E
 * (nvfp4_group_sse) is strictly smaller: ties keep the earlier one, so a group that no candidate
 * improves keeps its rtn code (an all-zero group stays code 0). */
NVFP4_HD uint32_t nvfp4_mse_group_code(const float *y, uint32_t c6, uint32_t c4, int all_finite) {
    const int32_t candidates[5] = {(int32_t)c6 - 1, (int32_t)c6 + 1, (int32_t)c4 - 1, (int32_t)c4, (int32_t)c4 + 1};
    uint32_t best = c6;
    float best_sse = nvfp4_group_sse(y, nvfp4_e4m3_decode((uint8_t)c6), all_finite);
    NVFP4_UNROLL
    for (int k = 0; k < 5; k++) {
        const int32_t c = candidates[k];
        if (c < 0 || c > (int32_t)NVFP4_E4M3_MAX_CODE) {
            continue;
        }
        const float sse = nvfp4_group_sse(y, nvfp4_e4m3_decode((uint8_t)c), all_finite);
        if (sse < best_sse) {
            best_sse = sse;
            best = (uint32_t)c;
        }
    }
    return best;
}

#endif /* NVFP4_MLA_WRITE_POLICY_H */
