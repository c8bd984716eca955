/* Synthetic latents and error measurement (see synth.h). */
#include "synth.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "host_codes.h"

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
            row[j] = host_bf16_bits((float)(raw[t * 512 + j] / peak * amax));
        }
        for (int j = 0; j < 64; j++) {
            row[512 + j] = host_bf16_bits((float)synth_normal(rng));
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
            double x = host_bf16_value(tokens[t * 576 + j]);
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
    const int32_t rb = cli_record_bytes(f);
    uint8_t *records = malloc((size_t)(count * rb));
    uint16_t *rows = malloc((size_t)count * 576 * sizeof *rows);
    float *got = calloc((size_t)count * 512 + 1, sizeof *got);
    int rc = !records || !rows || !got;
    if (!rc) {
        rc = cli_encode("quality", host, f, tokens, count, records) ||
             cli_decode("quality", host, f, records, count, rows);
    }
    if (!rc) {
        int64_t subnormal = 0, zero = 0;
        for (int64_t t = 0; t < count; t++) {
            for (int g = 0; g < 32; g++) {
                uint8_t code = records[t * rb + NVFP4_MLA_RECORD_GROUP_SCALE_OFFSET + g] & 0x7F;
                subnormal += code >= 1 && code <= 7;
                zero += code == 0;
            }
            for (int j = 0; j < 512; j++) {
                got[t * 512 + j] = host_bf16_value(rows[t * 576 + j]);
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

void synth_measure_fp8_656(const uint16_t *tokens, int64_t count, synth_error_t *err) {
    float *got = calloc((size_t)count * 512 + 1, sizeof *got);
    if (!got) {
        memset(err, 0, sizeof *err);
        return;
    }
    uint8_t rec[NVFP4_MLA_RECORD_BYTES_656];
    for (int64_t t = 0; t < count; t++) {
        host_encode_fp8_656(tokens + t * 576, rec);
        host_decode_fp8_656_latent(rec, got + t * 512);
    }
    score(tokens, got, count, err);
    err->subnormal_groups = err->zero_groups = 0;
    free(got);
}

/* The layer's records in the flags' layout: through the plugin's writer, or (656) encoded here. */
static int records_of(cli_host_t *host, const cli_codec_flags_t *f, const uint16_t *tokens, int64_t count,
                      uint8_t *records) {
    if (f->layout != NVFP4_MLA_LAYOUT_FP8_DS_MLA_656) {
        return cli_encode("quality", host, f, tokens, count, records);
    }
    for (int64_t t = 0; t < count; t++) {
        host_encode_fp8_656(tokens + t * NVFP4_MLA_ROW_DIM, records + t * NVFP4_MLA_RECORD_BYTES_656);
    }
    return 0;
}

/* Random queries scaled so that scores spread like a real softmax over the layer (unit logits),
 * and random top-k slots into the layer's tokens. */
static void draw_queries(const uint16_t *tokens, int64_t count, int64_t q_values, uint16_t *q, int64_t n_slots,
                         int32_t *slots) {
    synth_rng_t rng = {7};
    double key_norm = 0;
    for (int64_t i = 0; i < count * 576; i++)
        key_norm += (double)host_bf16_value(tokens[i]) * host_bf16_value(tokens[i]);
    key_norm = sqrt(key_norm / (double)count);
    for (int64_t i = 0; i < q_values; i++) q[i] = host_bf16_bits((float)(synth_normal(&rng) / key_norm * 24.0));
    /* Through int64_t: a negative double converted straight to uint64_t is undefined (UBSan). */
    for (int64_t i = 0; i < n_slots; i++)
        slots[i] = (int32_t)(((uint64_t)(int64_t)(synth_normal(&rng) * 1e6) & 0x7FFFFFFF) % (uint64_t)count);
}

/* The plugin's CPU attend over the records: out [queries, heads, 512] bf16. */
static int plugin_attend(cli_host_t *host, const cli_codec_flags_t *f, uint8_t *records, int64_t count, uint16_t *q,
                         int32_t *slots, int queries, int heads, int topk, uint16_t *out) {
    const int32_t rb = cli_record_bytes(f);
    nvfp4_mla_attend_args_t a = {.struct_size = sizeof a, .layout = f->layout, .scale_mode = f->scale_mode,
                                 .outer_scale = f->scale, .sm_scale = 1.0f / 24.0f};
    a.q = (nvfp4_mla_tensor_t){q, NVFP4_MLA_DTYPE_BF16, 3, {queries, heads, 576, 0}, {heads * 576, 576, 1, 0},
                               NVFP4_MLA_DEVICE_CPU, 0};
    a.slots = cli_tensor_2d(slots, NVFP4_MLA_DTYPE_I32, queries, topk, topk);
    a.cache = (nvfp4_mla_tensor_t){records,        NVFP4_MLA_DTYPE_U8,   3, {count, 1, rb, 0},
                                   {rb, rb, 1, 0}, NVFP4_MLA_DEVICE_CPU, 0};
    a.out = (nvfp4_mla_tensor_t){out, NVFP4_MLA_DTYPE_BF16, 3, {queries, heads, 512, 0}, {heads * 512, 512, 1, 0},
                                 NVFP4_MLA_DEVICE_CPU, 0};
    if (host->table->attend(host->cpu, &a) != NVFP4_MLA_OK) {
        return cli_fail("quality", "%s", host->table->last_error());
    }
    return 0;
}

/* Float64 attention of one query head over the unquantised tokens of its slots; accumulates the
 * squared error of `got` [512] into *num and the squared reference into *den. */
static void score_head(const uint16_t *tokens, const uint16_t *qv, const int32_t *slots, int topk, const uint16_t *got,
                       double *s, double *num, double *den) {
    double m = -INFINITY, l = 0, ref[512] = {0};
    for (int k = 0; k < topk; k++) {
        const uint16_t *kv = tokens + (int64_t)slots[k] * 576;
        double dot = 0;
        for (int i = 0; i < 576; i++) dot += (double)host_bf16_value(qv[i]) * host_bf16_value(kv[i]);
        s[k] = dot / 24.0;
        m = s[k] > m ? s[k] : m;
    }
    for (int k = 0; k < topk; k++) {
        const uint16_t *kv = tokens + (int64_t)slots[k] * 576;
        double p = exp(s[k] - m);
        l += p;
        for (int i = 0; i < 512; i++) ref[i] += p * host_bf16_value(kv[i]);
    }
    for (int i = 0; i < 512; i++) {
        double d = host_bf16_value(got[i]) - ref[i] / l;
        *num += d * d;
        *den += ref[i] / l * ref[i] / l;
    }
}

int synth_attend_error(cli_host_t *host, const cli_codec_flags_t *f, const uint16_t *tokens, int64_t count,
                       int queries, int heads, int topk, double *rel_err) {
    const int64_t q_values = (int64_t)queries * heads * 576, n_slots = (int64_t)queries * topk;
    uint8_t *records = malloc((size_t)(count * cli_record_bytes(f)));
    uint16_t *q = malloc((size_t)q_values * sizeof *q), *out = malloc((size_t)queries * heads * 512 * 2);
    int32_t *slots = malloc((size_t)n_slots * sizeof *slots);
    double *s = malloc((size_t)topk * sizeof *s), num = 0, den = 0;
    int rc = !records || !q || !out || !slots || !s ? cli_fail("quality", "out of memory") : 0;
    if (!rc) {
        draw_queries(tokens, count, q_values, q, n_slots, slots);
        rc = records_of(host, f, tokens, count, records) ||
             plugin_attend(host, f, records, count, q, slots, queries, heads, topk, out);
    }
    for (int64_t row = 0; !rc && row < (int64_t)queries * heads; row++) {
        score_head(tokens, q + row * 576, slots + (row / heads) * topk, topk, out + row * 512, s, &num, &den);
    }
    *rel_err = den > 0 ? sqrt(num / den) : 0;
    free(s), free(records), free(q), free(out), free(slots);
    return rc;
}
