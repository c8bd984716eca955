/* Helpers shared by the CPU test executables: tensors, a CPU context, token builders. */
#ifndef NVFP4_MLA_TEST_UTIL_H
#define NVFP4_MLA_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fp_codes.h"
#include "nvfp4_mla.h"

static inline nvfp4_mla_tensor_t tu_tensor(void *data, int32_t dtype, int ndim, const int64_t *shape,
                                           const int64_t *strides) {
    nvfp4_mla_tensor_t t = {data, dtype, ndim, {0}, {0}, NVFP4_MLA_DEVICE_CPU, 0};
    for (int d = 0; d < ndim; d++) {
        t.shape[d] = shape[d];
        t.strides[d] = strides[d];
    }
    return t;
}

static inline nvfp4_mla_tensor_t tu_rows(void *data, int32_t dtype, int64_t rows, int64_t cols, int64_t stride) {
    return tu_tensor(data, dtype, 2, (int64_t[]){rows, cols}, (int64_t[]){stride, 1});
}

static inline nvfp4_mla_tensor_t tu_vec(void *data, int32_t dtype, int64_t n) {
    return tu_tensor(data, dtype, 1, (int64_t[]){n}, (int64_t[]){1});
}

static inline nvfp4_mla_tensor_t tu_cache(uint8_t *data, int64_t blocks, int64_t block_size, int32_t record_bytes,
                                          int64_t block_stride) {
    return tu_tensor(data, NVFP4_MLA_DTYPE_U8, 3, (int64_t[]){blocks, block_size, record_bytes},
                     (int64_t[]){block_stride, record_bytes, 1});
}

/* A small reproducible Gaussian source for test data (64-bit LCG + Box-Muller). */
static inline double tu_gauss(uint64_t *state) {
    double u[2];
    for (int i = 0; i < 2; i++) {
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        u[i] = ((double)(*state >> 11) + 0.5) * 0x1p-53;
    }
    return sqrt(-2 * log(u[0])) * cos(6.283185307179586 * u[1]);
}

/* binary32 -> binary16 bits, round to nearest even (a test-side conversion, independent of the
 * plugin's code; compilers without _Float16 need it). */
static inline uint16_t tu_f32_to_f16(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    uint32_t sign = (u >> 16) & 0x8000u, mag = u & 0x7FFFFFFFu;
    if (mag > 0x7F800000u) return (uint16_t)(sign | 0x7E00u);           /* NaN */
    if (mag >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u);          /* rounds past 65504: inf */
    if (mag < 0x38800000u) {                                            /* f16 subnormal or zero */
        float m;
        memcpy(&m, &mag, 4);
        double q = (double)m * 16777216.0;                               /* in units of 2^-24 */
        double f = q - (double)(uint32_t)q;
        uint32_t k = (uint32_t)q + (f > 0.5 || (f == 0.5 && ((uint32_t)q & 1u)));
        return (uint16_t)(sign | k);
    }
    uint32_t rounded = mag + 0xFFFu + ((mag >> 13) & 1u) - 0x38000000u; /* rebias 127 -> 15 */
    return (uint16_t)(sign | (rounded >> 13));
}

/* A token as bf16 [576]: latent then RoPE, from f32 values (exactly representable ones in tests). */
typedef struct tu_token {
    uint16_t v[576];
} tu_token_t;

static inline void tu_set(tu_token_t *t, int i, float x) {
    t->v[i] = nvfp4_f32_to_bf16(x);
}

static inline float tu_f32_at(const uint8_t *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint32_t tu_bits_at(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline int tu_all_zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (p[i]) {
            return 0;
        }
    }
    return 1;
}

/* A CPU context for the white-box tests (the plugin's internals, plugin/context.h). */
#ifdef NVFP4_MLA_PLUGIN_CONTEXT_H
static nvfp4_mla_context_t *tu_cpu;

__attribute__((unused)) static int tu_setup_cpu(void **state) {
    (void)state;
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CPU, 0, 0, NULL, {0}, NULL};
    return nvfp4_context_init(&init, &tu_cpu);
}

__attribute__((unused)) static int tu_teardown_cpu(void **state) {
    (void)state;
    return nvfp4_context_shutdown(tu_cpu);
}
#endif

#endif
