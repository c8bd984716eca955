/* Synthetic latents and error measurement (see synth.h). */
#include "synth.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fp_codes.h"

static uint64_t next_u64(synth_rng_t *rng) { /* splitmix64: small, well mixed, reproducible */
    uint64_t z = (rng->state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static double uniform01(synth_rng_t *rng) {
    return ((double)(next_u64(rng) >> 11) + 0.5) * 0x1p-53;
}

double synth_normal(synth_rng_t *rng) {
    return sqrt(-2.0 * log(uniform01(rng))) * cos(6.283185307179586 * uniform01(rng));
}

static double student_t3(synth_rng_t *rng) {
    double chi2 = 0;
    for (int k = 0; k < 3; k++) {
        double z = synth_normal(rng);
        chi2 += z * z;
    }
    return synth_normal(rng) / sqrt(chi2 / 3.0);
}

void synth_layer(synth_rng_t *rng, double amax, int heavy, int64_t count, uint16_t *tokens) {
    double channel[512];
    for (int j = 0; j < 512; j++) {
        channel[j] = exp(0.5 * synth_normal(rng));
    }
    double *raw = malloc((size_t)count * 512 * sizeof *raw);
    double peak = 0;
    for (int64_t t = 0; t < count; t++) {
        double norm = exp(synth_normal(rng));
        for (int j = 0; j < 512; j++) {
            double v = (heavy ? student_t3(rng) : synth_normal(rng)) * channel[j] * norm;
            raw[t * 512 + j] = v;
            peak = fmax(peak, fabs(v));
        }
    }
    for (int64_t t = 0; t < count; t++) {
        uint16_t *row = tokens + t * 576;
        for (int j = 0; j < 512; j++) {
            row[j] = nvfp4_f32_to_bf16((float)(raw[t * 512 + j] / peak * amax));
        }
        for (int j = 0; j < 64; j++) {
            row[512 + j] = nvfp4_f32_to_bf16((float)synth_normal(rng));
        }
    }
    free(raw);
}

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Errors of decoded latents `got` (f32 [count, 512]) against the bf16 input. */
static void score(const uint16_t *tokens, const float *got, int64_t count, synth_error_t *err) {
    double num = 0, den = 0;
    double *per_token = malloc((size_t)count * sizeof *per_token);
    int64_t nonzero = 0, lost = 0;
    for (int64_t t = 0; t < count; t++) {
        double tn = 0, td = 0, out_norm = 0;
        for (int j = 0; j < 512; j++) {
            double x = nvfp4_bf16_to_f32(tokens[t * 576 + j]);
            double d = got[t * 512 + j] - x;
            tn += d * d;
            td += x * x;
            out_norm += (double)got[t * 512 + j] * got[t * 512 + j];
        }
        num += tn;
        den += td;
        per_token[t] = td > 0 ? sqrt(tn / td) : 0;
        nonzero += td > 0;
        lost += td > 0 && out_norm == 0;
    }
    qsort(per_token, (size_t)count, sizeof *per_token, compare_double);
    err->layer_rel_rms = den > 0 ? sqrt(num / den) : 0;
    err->median_token_rel = count ? per_token[count / 2] : 0;
    err->zero_tokens = nonzero ? (double)lost / (double)nonzero : 0;
    free(per_token);
}

int synth_measure_nvfp4(cli_host_t *host, const cli_codec_flags_t *f, const uint16_t *tokens, int64_t count,
                        synth_error_t *err) {
    uint8_t *records = malloc((size_t)(count * f->record_bytes));
    uint16_t *rows = malloc((size_t)count * 576 * sizeof *rows);
    float *got = calloc((size_t)count * 512 + 1, sizeof *got);
    int rc = !records || !rows || !got;
    if (!rc) {
        rc = cli_encode("quality", host, f, tokens, count, records) || cli_decode("quality", host, f, records, count, rows);
    }
    if (!rc) {
        int64_t subnormal = 0, zero = 0;
        for (int64_t t = 0; t < count; t++) {
            for (int g = 0; g < 32; g++) {
                uint8_t code = records[t * f->record_bytes + 256 + g] & 0x7F;
                subnormal += code >= 1 && code <= 7;
                zero += code == 0;
            }
            for (int j = 0; j < 512; j++) {
                got[t * 512 + j] = nvfp4_bf16_to_f32(rows[t * 576 + j]);
            }
        }
        score(tokens, got, count, err);
        err->subnormal_groups = count ? (double)subnormal / (double)(count * 32) : 0;
        err->zero_groups = count ? (double)zero / (double)(count * 32) : 0;
    }
    free(records);
    free(rows);
    free(got);
    return rc;
}

/* The 656-byte fp8_ds_mla record of one bf16 token (record-format.md section 8). */
static void encode_fp8_656(const uint16_t *row, uint8_t *rec) {
    for (int tile = 0; tile < 4; tile++) {
        float amax = 0;
        for (int j = 0; j < 128; j++) {
            float a = nvfp4_abs(nvfp4_bf16_to_f32(row[tile * 128 + j]));
            amax = nvfp4_is_finite(a) && a > amax ? a : amax;
        }
        float scale = amax / 448.0f < NVFP4_FLT_MIN ? NVFP4_FLT_MIN : amax / 448.0f;
        memcpy(rec + 512 + 4 * tile, &scale, 4);
        for (int j = 0; j < 128; j++) rec[tile * 128 + j] = nvfp4_e4m3_encode(nvfp4_bf16_to_f32(row[tile * 128 + j]) / scale);
    }
    memcpy(rec + 528, row + 512, 128);
}

void synth_measure_fp8_656(const uint16_t *tokens, int64_t count, synth_error_t *err) {
    float *got = calloc((size_t)count * 512 + 1, sizeof *got);
    if (!got) {
        memset(err, 0, sizeof *err);
        return;
    }
    uint8_t rec[656];
    for (int64_t t = 0; t < count; t++) {
        encode_fp8_656(tokens + t * 576, rec);
        for (int j = 0; j < 512; j++) {
            float scale;
            memcpy(&scale, rec + 512 + 4 * (j / 128), sizeof scale);
            got[t * 512 + j] = nvfp4_e4m3_decode(rec[j]) * scale;
        }
    }
    score(tokens, got, count, err);
    err->subnormal_groups = err->zero_groups = 0;
    free(got);
}

int synth_attend_error(cli_host_t *host, const cli_codec_flags_t *f, const uint16_t *tokens, int64_t count,
                       int queries, int heads, int topk, double *rel_err) {
    const int32_t rb = f ? f->record_bytes : 656;
    uint8_t *records = malloc((size_t)(count * rb));
    uint16_t *q = malloc((size_t)queries * heads * 576 * sizeof *q), *out = malloc((size_t)queries * heads * 512 * 2);
    int32_t *slots = malloc((size_t)queries * topk * sizeof *slots);
    int rc = !records || !q || !out || !slots;
    if (!rc && f) {
        rc = cli_encode("quality", host, f, tokens, count, records);
    } else if (!rc) {
        for (int64_t t = 0; t < count; t++) encode_fp8_656(tokens + t * 576, records + t * 656);
    }
    synth_rng_t rng = {7};
    /* Queries scaled so that scores spread like a real softmax over the layer (unit logits). */
    double key_norm = 0;
    for (int64_t i = 0; i < count * 576; i++) key_norm += (double)nvfp4_bf16_to_f32(tokens[i]) * nvfp4_bf16_to_f32(tokens[i]);
    key_norm = sqrt(key_norm / (double)count);
    for (int64_t i = 0; i < (int64_t)queries * heads * 576; i++) q[i] = nvfp4_f32_to_bf16((float)(synth_normal(&rng) / key_norm * 24.0));
    /* Through int64_t: a negative double converted straight to uint64_t is undefined (UBSan). */
    for (int64_t i = 0; i < (int64_t)queries * topk; i++)
        slots[i] = (int32_t)(((uint64_t)(int64_t)(synth_normal(&rng) * 1e6) & 0x7FFFFFFF) % (uint64_t)count);
    double num = 0, den = 0;
    if (!rc) {
        nvfp4_mla_attend_args_t a = {.struct_size = sizeof a,
                                     .layout = f ? f->layout : NVFP4_MLA_LAYOUT_FP8_DS_MLA_656,
                                     .scale_mode = f ? f->scale_mode : NVFP4_MLA_SCALE_STATIC,
                                     .outer_scale = f ? (f->scale_mode == NVFP4_MLA_SCALE_STATIC ? f->scale : 0.0f) : 1.0f,
                                     .sm_scale = 1.0f / 24.0f};
        a.q = (nvfp4_mla_tensor_t){q, NVFP4_MLA_DTYPE_BF16, 3, {queries, heads, 576, 0}, {heads * 576, 576, 1, 0},
                                   NVFP4_MLA_DEVICE_CPU, 0};
        a.slots = cli_tensor_2d(slots, NVFP4_MLA_DTYPE_I32, queries, topk, topk);
        a.cache = (nvfp4_mla_tensor_t){records, NVFP4_MLA_DTYPE_U8, 3, {count, 1, rb, 0}, {rb, rb, 1, 0}, NVFP4_MLA_DEVICE_CPU, 0};
        a.out = (nvfp4_mla_tensor_t){out, NVFP4_MLA_DTYPE_BF16, 3, {queries, heads, 512, 0}, {heads * 512, 512, 1, 0},
                                     NVFP4_MLA_DEVICE_CPU, 0};
        if (host->table->attend(host->cpu, &a) != NVFP4_MLA_OK) rc = cli_fail("quality", "%s", host->table->last_error());
    }
    double *s = malloc((size_t)topk * sizeof *s);
    for (int qi = 0; !rc && qi < queries; qi++)
        for (int h = 0; h < heads; h++) {
            const uint16_t *qv = q + ((int64_t)qi * heads + h) * 576;
            double m = -INFINITY, l = 0, ref[512] = {0};
            for (int k = 0; k < topk; k++) {
                const uint16_t *kv = tokens + (int64_t)slots[qi * topk + k] * 576;
                double dot = 0;
                for (int i = 0; i < 576; i++) dot += (double)nvfp4_bf16_to_f32(qv[i]) * nvfp4_bf16_to_f32(kv[i]);
                s[k] = dot / 24.0;
                m = s[k] > m ? s[k] : m;
            }
            for (int k = 0; k < topk; k++) {
                const uint16_t *kv = tokens + (int64_t)slots[qi * topk + k] * 576;
                double p = exp(s[k] - m);
                l += p;
                for (int i = 0; i < 512; i++) ref[i] += p * nvfp4_bf16_to_f32(kv[i]);
            }
            for (int i = 0; i < 512; i++) {
                double d = nvfp4_bf16_to_f32(out[((int64_t)qi * heads + h) * 512 + i]) - ref[i] / l;
                num += d * d;
                den += ref[i] / l * ref[i] / l;
            }
        }
    *rel_err = den > 0 ? sqrt(num / den) : 0;
    free(s), free(records), free(q), free(out), free(slots);
    return rc;
}
