/* A fixed set of tokens written in every mode, layout and input dtype, hashed: the fingerprint of
 * the rtn writer's bytes. tests/test_write_policy.c compares it with the digest the writer produced
 * before writer policies existed (commit adb5110, built from this same file), so `rtn` stays
 * today's bytes exactly. Uses only what that commit's tests could: the ABI write entry on a CPU
 * context and test_util.h. */
#ifndef NVFP4_MLA_TEST_RTN_INPUTS_H
#define NVFP4_MLA_TEST_RTN_INPUTS_H

#include <openssl/sha.h>

#define RTN_TOKENS 300

/* Gaussian tokens over 1e-4..1e3 per token, with exact E2M1 ties, zero tokens, NaN/Inf and the
 * real 240x in-token range, as bf16 or fp16 bits [RTN_TOKENS, 576]. */
static void rtn_tokens(uint16_t *v, int is_f16) {
    static const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f};
    uint64_t s = 12345;
    for (int t = 0; t < RTN_TOKENS; t++) {
        const int kind = t % 7;
        const double mag = pow(10.0, -4 + 7 * ((t * 37) % 100) / 100.0) * (is_f16 ? 1e-1 : 1.0);
        for (int i = 0; i < 576; i++) {
            double x = tu_gauss(&s) * mag;
            if (kind == 1) x = ties[(t + i) % 8] * ldexp(1.0, (i % 8) - 4) * ((i & 1) ? -1 : 1);
            if (kind == 2) x = 0;
            if (kind == 3 && i % 37 == 5) x = (i % 3 == 0) ? NAN : ((i % 3 == 1) ? INFINITY : -INFINITY);
            if (kind == 4) x = tu_gauss(&s) * (i < 256 ? 5.19 : 0.0217);
            v[t * 576 + i] = is_f16 ? tu_f32_to_f16((float)x) : nvfp4_f32_to_bf16((float)x);
        }
    }
}

/* SHA-256 over the records of every (layout, mode, scale, dtype) case, written by `ctx`. */
static void rtn_records_digest(nvfp4_mla_context_t *ctx, unsigned char digest[32]) {
    static const struct {
        uint32_t layout, mode;
        float scale;
    } cases[] = {{NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC, 1.0f},
                 {NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC, 0.003f},
                 {NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f},
                 {NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC, 1.0f},
                 {NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC, 0.0217f / 2688}};
    static uint16_t tokens[RTN_TOKENS * 576];
    static uint8_t cache[RTN_TOKENS * 432], all[2 * 5 * RTN_TOKENS * 432];
    size_t used = 0;
    int64_t slots[RTN_TOKENS];
    for (int t = 0; t < RTN_TOKENS; t++) slots[t] = t;
    for (int is_f16 = 0; is_f16 < 2; is_f16++) {
        rtn_tokens(tokens, is_f16);
        const int32_t dtype = is_f16 ? NVFP4_MLA_DTYPE_F16 : NVFP4_MLA_DTYPE_BF16;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            const int32_t rb = (int32_t)nvfp4_mla_record_bytes(cases[c].layout);
            nvfp4_mla_write_args_t w = {
                .struct_size = sizeof w, .layout = cases[c].layout, .scale_mode = cases[c].mode,
                .outer_scale = cases[c].scale,
                .kv_c = tu_rows(tokens, dtype, RTN_TOKENS, 512, 576),
                .k_pe = tu_rows(tokens + 512, dtype, RTN_TOKENS, 64, 576),
                .slot_mapping = tu_vec(slots, NVFP4_MLA_DTYPE_I64, RTN_TOKENS),
                .cache = tu_cache(cache, RTN_TOKENS, 1, rb, rb),
            };
            memset(cache, 0xA5, sizeof cache);
            if (nvfp4_op_write(ctx, &w) != NVFP4_MLA_OK) {
                memset(digest, 0, 32);
                return;
            }
            memcpy(all + used, cache, (size_t)RTN_TOKENS * (size_t)rb);
            used += (size_t)RTN_TOKENS * (size_t)rb;
        }
    }
    SHA256(all, used, digest);
}

#endif
