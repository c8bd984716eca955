/* The host side's number formats (host_shims/common/host_codes.h, what the CLI and its tests use)
 * against the plugin's own (kernels/fp_codes.h): a host brings its own conversions, and they must
 * give the same bits. Also the 656-byte encoders (the spec's scale rule, FlashMLA's power of two)
 * against the plugin's 656 decoder. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "kernel_args.h"
#include "fp_codes.h"
#include "record_cpu.h"
#include "host_codes.h"

static float from_bits(uint32_t u) {
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

static void host_bf16_should_equal_the_plugins(void **state) {
    (void)state;
    for (uint64_t u = 0; u < (UINT64_C(1) << 32); u += 251) { /* every exponent, dense mantissas */
        const float v = from_bits((uint32_t)u);
        assert_int_equal(host_bf16_bits(v), nvfp4_f32_to_bf16(v));
    }
    for (uint32_t h = 0; h < 0x10000; h++) {
        const float a = host_bf16_value((uint16_t)h), b = nvfp4_bf16_to_f32((uint16_t)h);
        assert_memory_equal(&a, &b, sizeof a);
    }
}

static void host_e4m3_should_equal_the_plugins(void **state) {
    (void)state;
    for (uint64_t u = 0; u < (UINT64_C(1) << 32); u += 127) {
        const float v = from_bits((uint32_t)u);
        if (host_e4m3_code(v) != nvfp4_e4m3_encode(v)) {
            fail_msg("%a (0x%08x): host 0x%02x, plugin 0x%02x", (double)v, (uint32_t)u, host_e4m3_code(v),
                     nvfp4_e4m3_encode(v));
        }
    }
    for (int c = 0; c < 256; c++) { /* every code, and every midpoint between neighbours (the ties) */
        assert_true(host_e4m3_value((uint8_t)c) == nvfp4_e4m3_decode((uint8_t)c));
        if ((c & 0x7F) < 0x7E) {
            const float mid = 0.5f * (nvfp4_e4m3_decode((uint8_t)c) + nvfp4_e4m3_decode((uint8_t)(c + 1)));
            assert_int_equal(host_e4m3_code(mid), nvfp4_e4m3_encode(mid));
        }
    }
}

static void host_656_record_should_decode_as_the_plugin_reads_it(void **state) {
    (void)state;
    uint16_t token[576], row[576];
    uint8_t record[656];
    float latent[512];
    for (int i = 0; i < 576; i++) {
        token[i] = host_bf16_bits((float)((i % 37) - 18) * (i < 128 ? 1e-3f : 0.37f));
    }
    host_encode_fp8_656(token, record);
    nvfp4_mla_decode_fp8_656_cpu(record, row);
    host_decode_fp8_656_latent(record, latent);
    for (int i = 0; i < 512; i++) {
        assert_int_equal(host_bf16_bits(latent[i]), row[i]); /* the reader rounds the same value */
        const float x = host_bf16_value(token[i]);
        assert_true(fabsf(latent[i] - x) <= 0.0625f * fabsf(x) + 1e-30f); /* E4M3: 3 mantissa bits */
    }
    assert_memory_equal(row + 512, token + 512, 128); /* RoPE copied */
}

/* FlashMLA's rule: every tile scale a power of two, the smallest at or above max(amax / 448, 1e-4),
 * so that no code saturates; values within E4M3's rounding; the RoPE copied. Tiles of amax 448 x
 * 2^k (a scale exactly 2^k), just above it (2^(k+1)), tiny (the 1e-4 floor: 2^-13) and zero. */
static void host_656_pow2_record_should_hold_power_of_two_scales(void **state) {
    (void)state;
    const float amax[4] = {448.0f * 0.25f, 448.0f * 0.25f * 1.01f, 1e-6f, 0.0f};
    const float expect[4] = {0.25f, 0.5f, 0x1p-13f, 0x1p-13f};
    uint16_t token[576], row[576];
    uint8_t record[656];
    for (int i = 0; i < 576; i++) {
        const int tile = i / 128;
        const float x = i < 512 ? amax[tile] * (float)((i * 37) % 101 - 50) / 50.0f : (float)i * 0.01f;
        token[i] = host_bf16_bits(x);
    }
    for (int t = 0; t < 3; t++) token[t * 128 + 7] = host_bf16_bits(amax[t]); /* the tile's amax itself */
    host_encode_fp8_656_pow2(token, record);
    nvfp4_mla_decode_fp8_656_cpu(record, row);
    for (int t = 0; t < 4; t++) {
        float scale;
        memcpy(&scale, record + 512 + 4 * t, 4);
        if (scale != expect[t]) fail_msg("tile %d: scale %a, expected %a", t, (double)scale, (double)expect[t]);
    }
    for (int i = 0; i < 512; i++) {
        assert_true((record[i] & 0x7F) <= 0x7E);
        const float x = host_bf16_value(token[i]), v = nvfp4_bf16_to_f32(row[i]);
        if (!(fabsf(v - x) <= 0.0625f * fabsf(x) + 0x1p-13f * 0x1p-9f))
            fail_msg("element %d: %g decodes to %g", i, (double)x, (double)v);
    }
    assert_memory_equal(row + 512, token + 512, 128);
}

/* The corrupt-field rule as the tool counts it (host_codes.h) is the one the readers apply
 * (fp_codes.h): a field the host calls corrupt is one the plugin reads as +0, and no other. */
static void host_corrupt_fields_should_be_the_plugins(void **state) {
    (void)state;
    for (uint64_t u = 0; u < (UINT64_C(1) << 32); u += 251) {
        const uint32_t bits = (uint32_t)u;
        const float read = nvfp4_scale_field(from_bits(bits));
        uint32_t read_bits;
        memcpy(&read_bits, &read, sizeof read_bits);
        const int zeroed = read_bits == 0 && bits != 0;
        if (host_scale_field_corrupt(bits) != zeroed) fail_msg("scale bits 0x%08x", bits);
    }
    for (uint32_t h = 0; h < 0x10000; h++) {
        const int zeroed = nvfp4_rope_bf16_field((uint16_t)h) == 0 && h != 0;
        if (host_bf16_nonfinite((uint16_t)h) != zeroed) fail_msg("bf16 bits 0x%04x", h);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(host_bf16_should_equal_the_plugins),
        cmocka_unit_test(host_e4m3_should_equal_the_plugins),
        cmocka_unit_test(host_corrupt_fields_should_be_the_plugins),
        cmocka_unit_test(host_656_record_should_decode_as_the_plugin_reads_it),
        cmocka_unit_test(host_656_pow2_record_should_hold_power_of_two_scales),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
