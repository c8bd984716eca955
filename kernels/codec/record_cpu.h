/* The CPU record codec (codec/write_cpu.c, codec/gather_cpu.c): one token encoded into one record, one
 * record decoded into its row, as the writer and the readers compute them. The backends' bodies use
 * them; tests and tools build or read records with them without a cache. */
#ifndef NVFP4_MLA_RECORD_CPU_H
#define NVFP4_MLA_RECORD_CPU_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Encode one token into one record (the writer's body, exposed for tests and tools that build
 * records without a cache). `latent` [512] and `rope` [64] are f32 already converted from the
 * input; `rope_bf16` [64] holds the input's RoPE as bf16 for the 432 layout; `writer_policy` an
 * NVFP4_MLA_WRITER_POLICY_* id (kernels/codec/write_policy.h). Returns the number of non-finite inputs
 * seen. */
uint32_t nvfp4_mla_encode_record_cpu(const float *latent, const float *rope, const uint16_t *rope_bf16,
                                     int32_t record_bytes, int32_t per_token, float outer_scale,
                                     int32_t writer_policy, uint8_t *record);

/* Decode one record into its 576 binary32 values (latent then RoPE): the spec's reader arithmetic
 * before any bf16 conversion; attention's reference uses these. */
void nvfp4_mla_decode_record_f32_cpu(const uint8_t *record, int32_t record_bytes, int32_t per_token,
                                     float outer_scale, float *row);

/* Decode one record into 576 bf16 values (latent then RoPE): the binary32 values rounded to
 * nearest-even; the 432 layout's RoPE bits copied (NaN and +-Inf as 0, nvfp4_rope_bf16_field). */
void nvfp4_mla_decode_record_cpu(const uint8_t *record, int32_t record_bytes, int32_t per_token,
                                 float outer_scale, uint16_t *row);

/* Decode one 656-byte fp8_ds_mla record into 576 bf16 values: E4M3 code times its 128-value tile's
 * f32 scale (binary32, then bf16 round-to-nearest-even), RoPE copied; a NaN, infinite or negative
 * tile scale reads as 0, and so does a NaN or infinite RoPE value (fp_codes.h). */
void nvfp4_mla_decode_fp8_656_cpu(const uint8_t *record, uint16_t *row);

#ifdef __cplusplus
}
#endif
#endif /* NVFP4_MLA_RECORD_CPU_H */
