/* Sparse MLA attention on the CPU: the reference the CUDA kernel is tested against.
 *
 * For each query token and head: scores over the valid top-k entries (slot != -1, index <
 * valid_len), key = the record's 576 dequantised values in binary32 (docs/record-format.md section 5,
 * before gather's bf16 rounding: the CUDA kernel keeps e2m1 * d exact and folds the outer and RoPE
 * scales into the scores, so this is the value it computes with; the 656-byte baseline is decoded
 * to bf16 by nvfp4_mla_decode_fp8_656_cpu, as its readers do), value = its 512 latent values;
 * softmax in double; out = sum p * v, rounded to bf16; lse = natural log of sum exp(sm_scale * score). No valid entry:
 * out = 0, lse = -inf. Duplicates count as often as they appear. Straightforward loops, accumulation in double
 * (tests/test_attend.c checks it against a float64 attention written independently).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends.h"
#include "fp_codes.h"
#include "record_cpu.h"

uint64_t nvfp4_mla_attend_workspace_cpu(const nvfp4_mla_attend_kernel_args_t *args) {
    (void)args;
    return 0; /* the CPU version allocates its own row buffer per call, so any workspace will do */
}

/* The dequantised key/value rows of one query's valid entries, in entry order. */
static int64_t load_rows(const nvfp4_mla_attend_kernel_args_t *a, int64_t qi, float *rows) {
    int64_t limit = a->topk, n = 0;
    if (a->valid_len) {
        int64_t v = a->valid_len[qi * a->valid_len_stride];
        limit = v < limit ? v : limit;
    }
    for (int64_t k = 0; k < limit; k++) {
        int64_t slot = a->slots[qi * a->slot_stride + k];
        if (slot < 0 || slot >= a->capacity) {
            continue; /* -1: unused entry (the plugin rejected any other out-of-range id) */
        }
        const uint8_t *rec =
            a->cache + (slot / a->block_size) * a->block_stride + (slot % a->block_size) * a->record_bytes;
        float *row = rows + n * 576;
        if (a->record_bytes == NVFP4_MLA_RECORD_BYTES_656) {
            uint16_t bf16[576];
            nvfp4_mla_decode_fp8_656_cpu(rec, bf16);
            for (int i = 0; i < 576; i++) row[i] = nvfp4_bf16_to_f32(bf16[i]);
        } else {
            nvfp4_mla_decode_record_f32_cpu(rec, a->record_bytes, a->per_token, a->outer_scale, row);
        }
        n++;
    }
    return n;
}

void nvfp4_mla_attend_cpu(const nvfp4_mla_attend_kernel_args_t *a, nvfp4_attend_launches_t **launches,
                          nvfp4_mla_kernel_result_t *result) {
    (void)launches; /* a CUDA context's table (backends.h) */
    float *rows = malloc((size_t)(a->topk ? a->topk : 1) * 576 * sizeof *rows);
    double *scores = malloc((size_t)(a->topk ? a->topk : 1) * sizeof *scores);
    double acc[512];
    if (!rows || !scores) {
        free(rows), free(scores);
        result->status = NVFP4_MLA_ERR_OUT_OF_MEMORY;
        snprintf(result->message, sizeof result->message, "attend: cannot allocate %lld rows", (long long)a->topk);
        return;
    }
    for (int64_t qi = 0; qi < a->num_queries; qi++) {
        int64_t n = load_rows(a, qi, rows);
        for (int64_t h = 0; h < a->num_heads; h++) {
            const uint16_t *q = a->q + qi * a->q_stride_token + h * a->q_stride_head;
            uint16_t *out = a->out + qi * a->out_stride_token + h * a->out_stride_head;
            double m = -INFINITY, l = 0;
            for (int64_t k = 0; k < n; k++) {
                double dot = 0;
                for (int i = 0; i < 576; i++) dot += (double)nvfp4_bf16_to_f32(q[i]) * rows[k * 576 + i];
                scores[k] = dot * a->sm_scale;
                m = scores[k] > m ? scores[k] : m;
            }
            memset(acc, 0, sizeof acc);
            for (int64_t k = 0; k < n; k++) {
                double p = exp(scores[k] - m);
                l += p;
                for (int i = 0; i < 512; i++) acc[i] += p * rows[k * 576 + i];
            }
            for (int i = 0; i < 512; i++) out[i] = nvfp4_f32_to_bf16(n ? (float)(acc[i] / l) : 0.0f);
            if (a->lse) {
                a->lse[qi * a->lse_stride_token + h * a->lse_stride_head] = n ? (float)(m + log(l)) : -INFINITY;
            }
        }
    }
    free(rows), free(scores);
    result->status = 0;
    result->message[0] = '\0';
}
