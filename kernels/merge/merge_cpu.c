/* The merge of partial attentions on the CPU: the reference the CUDA merge is tested against.
 *
 * For each query and head, over the parts whose lse is not -inf: m = max lse_p, w_p = exp(lse_p - m),
 * out = sum w_p out_p / sum w_p, lse = m + log(sum w_p); no such part: out = 0, lse = -inf
 * (nvfp4_mla_ops.h states the contract). Everything in double, out rounded to bf16 once at the end:
 * subtracting the largest lse keeps every weight in (0, 1] with one weight exactly 1, so the sum
 * cannot overflow and loses nothing to a part far below the others. An empty part's out is never
 * read: a rank that held no entry of a query may have left anything there. The plugin has refused
 * NaN and +inf lse values before this runs (plugin/ops_merge.c).
 */
#include <math.h>

#include "backends.h"
#include "fp_codes.h"

/* One partial output value, widened exactly (bf16 and f32 are both doubles without rounding). */
static double partial_value(const nvfp4_mla_merge_kernel_args_t *a, int64_t offset) {
    if (a->partial_is_f32) {
        return ((const float *)a->partial_out)[offset];
    }
    return nvfp4_bf16_to_f32(((const uint16_t *)a->partial_out)[offset]);
}

static void merge_row(const nvfp4_mla_merge_kernel_args_t *a, int64_t qi, int64_t h) {
    const float *lse = a->partial_lse + qi * a->pl_stride_token + h * a->pl_stride_head;
    double m = -INFINITY, wsum = 0, acc[512] = {0};
    for (int64_t p = 0; p < a->num_parts; p++) {
        m = fmax(m, lse[p * a->pl_stride_part]); /* -inf parts leave m alone */
    }
    for (int64_t p = 0; p < a->num_parts && m != -INFINITY; p++) {
        const double l = lse[p * a->pl_stride_part];
        if (l == -INFINITY) {
            continue; /* an empty part: its out is not read */
        }
        const double w = exp(l - m);
        const int64_t base = p * a->po_stride_part + qi * a->po_stride_token + h * a->po_stride_head;
        wsum += w;
        for (int i = 0; i < 512; i++) {
            acc[i] += w * partial_value(a, base + i);
        }
    }
    uint16_t *out = a->out + qi * a->out_stride_token + h * a->out_stride_head;
    for (int i = 0; i < 512; i++) {
        out[i] = nvfp4_f32_to_bf16(wsum > 0 ? (float)(acc[i] / wsum) : 0.0f);
    }
    if (a->lse) {
        a->lse[qi * a->lse_stride_token + h * a->lse_stride_head] = wsum > 0 ? (float)(m + log(wsum)) : -INFINITY;
    }
}

void nvfp4_mla_merge_cpu(const nvfp4_mla_merge_kernel_args_t *a, nvfp4_mla_kernel_result_t *result) {
    for (int64_t qi = 0; qi < a->num_queries; qi++) {
        for (int64_t h = 0; h < a->num_heads; h++) {
            merge_row(a, qi, h);
        }
    }
    result->status = 0;
    result->message[0] = '\0';
}
