/* Number formats and the 656-byte record as a host sees them: bf16 and E4M3 values, and the
 * encoders of the fp8_ds_mla record (docs/record-format.md section 8: the spec's scale rule and
 * FlashMLA's), which no plugin entry writes.
 *
 * Shared by the nvfp4-mla tool and its tests. Written here rather than taken from kernels/: a host
 * reaches the plugin only through the ABI (nvfp4_mla.h), so it brings its own conversions, as a
 * runtime does; tests/test_host_codes.c checks them against the plugin's own (kernels/fp_codes.h).
 * Pure functions: no state, safe from any thread.
 */
#ifndef NVFP4_MLA_HOST_CODES_H
#define NVFP4_MLA_HOST_CODES_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* binary32 -> bf16 bits, round to nearest even; NaN -> 0x7FFF. */
uint16_t host_bf16_bits(float value);

/* bf16 bits -> binary32 (exact). */
float host_bf16_value(uint16_t bits);

/* Whether a record field reads as 0 by the corrupt-field rule (docs/record-format.md section 5): a
 * float32 scale field (bits) that is NaN, +-Inf or has its sign bit set; a stored bf16 value that is
 * NaN or +-Inf (all exponent bits set). No writer stores them. */
int host_scale_field_corrupt(uint32_t bits);
int host_bf16_nonfinite(uint16_t bits);

/* E4M3 (OCP e4m3fn) code of `value`: round to nearest, ties to the even code, saturated to +-448;
 * NaN -> 0 (a writer never emits the NaN codes). */
uint8_t host_e4m3_code(float value);

/* Exact value of an E4M3 code; the NaN codes 0x7F/0xFF read as +-448 (never written). */
float host_e4m3_value(uint8_t code);

/* One bf16 token [576] (latent then RoPE) as a 656-byte fp8_ds_mla record: per 128-value tile the
 * scale max(finite tile amax / 448, FLT_MIN), E4M3 codes of value / scale, the RoPE copied. */
void host_encode_fp8_656(const uint16_t *token, uint8_t *record);

/* The same record by FlashMLA's quantiser (record-format.md section 8): each tile's scale the power
 * of two 2^ceil(log2(max(tile_amax / 448, 1e-4))), taken exactly (never below tile_amax / 448, so no
 * code saturates), E4M3 codes of value / scale (exact divisions), the RoPE copied. */
void host_encode_fp8_656_pow2(const uint16_t *token, uint8_t *record);

/* The 512 latent values of a 656-byte record in binary32: E4M3 value times its tile's scale. */
void host_decode_fp8_656_latent(const uint8_t *record, float *latent);

#ifdef __cplusplus
}
#endif
#endif
