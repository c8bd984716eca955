/* The merge entry (ABI 1.1, see ops.h): the host's struct checked field by field, outputs that
 * overlap nothing they are computed from, and on the CPU the lse values; then the backend. */
#include <math.h>
#include <string.h>

#include "args.h"
#include "context.h"
#include "errors.h"
#include "ops.h"

/* The most partials one merge takes: the work is P times the output's rows, and P is the one extent no
 * output bounds (partial_out may repeat a part with stride 0). A decode context-parallel group, or the
 * splits of one attention, are far fewer; 2^40 parts with stride 0 ran for minutes before any refusal. */
#define NVFP4_MERGE_MAX_PARTS 65536

static nvfp4_tensor_rule_t rule(const nvfp4_mla_context_t *ctx, const char *name, int32_t dtype, int32_t alt,
                                int32_t ndim) {
    return (nvfp4_tensor_rule_t){"merge", name, dtype, alt, ndim, ctx->device_type, ctx->device_index};
}

/* The struct itself, the capability, the stream. */
static nvfp4_mla_status_t check_header(const nvfp4_mla_context_t *ctx, const nvfp4_mla_merge_args_t *host_args,
                                       nvfp4_mla_merge_args_t *a) {
    nvfp4_mla_status_t st = NVFP4_TAKE_ARGS("merge", nvfp4_mla_merge_args_t, a, host_args, sizeof *a);
    if (st || (st = nvfp4_context_require(ctx, "merge", NVFP4_MLA_CAP_OP_MERGE_PARTIALS))) {
        return st;
    }
    return nvfp4_check_stream(ctx, "merge", a->stream);
}

/* partial_out [P, n_q, h, 512] and partial_lse [P, n_q, h]. */
static nvfp4_mla_status_t check_inputs(const nvfp4_mla_context_t *ctx, const nvfp4_mla_merge_args_t *a) {
    nvfp4_tensor_rule_t r = rule(ctx, "partial_out", NVFP4_MLA_DTYPE_BF16, NVFP4_MLA_DTYPE_F32, 4);
    nvfp4_mla_status_t st;
    if ((st = nvfp4_check_tensor(&a->partial_out, &r)) ||
        (st = nvfp4_check_dim(&a->partial_out, &r, 3, NVFP4_MLA_LATENT_DIM, "latent"))) {
        return st;
    }
    if (a->partial_out.shape[0] < 1 || a->partial_out.shape[0] > NVFP4_MERGE_MAX_PARTS) { /* each rule alone */
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "merge: partial_out: P = shape[0] is %lld, must be 1..%d",
                          (long long)a->partial_out.shape[0], NVFP4_MERGE_MAX_PARTS);
    }
    if (a->partial_out.strides[3] != 1) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "merge: partial_out: strides[3] is %lld, must be 1 (each "
                          "row's 512 values contiguous)", (long long)a->partial_out.strides[3]);
    }
    r = rule(ctx, "partial_lse", NVFP4_MLA_DTYPE_F32, 0, 3);
    if ((st = nvfp4_check_tensor(&a->partial_lse, &r))) {
        return st;
    }
    const char *why[3] = {"P, as partial_out", "n_q, as partial_out", "h, as partial_out"};
    for (int d = 0; d < 3; d++) {
        if ((st = nvfp4_check_dim(&a->partial_lse, &r, d, a->partial_out.shape[d], why[d]))) {
            return st;
        }
    }
    return NVFP4_MLA_OK;
}

/* out [n_q, h, 512], the optional lse [n_q, h]: shapes, rows that do not overlap, nothing shared. */
static nvfp4_mla_status_t check_outputs(const nvfp4_mla_context_t *ctx, const nvfp4_mla_merge_args_t *a) {
    nvfp4_mla_status_t st = nvfp4_check_head_outputs("merge", ctx->device_type, ctx->device_index, &a->out, &a->lse,
                                                     a->partial_out.shape[1], a->partial_out.shape[2]);
    const nvfp4_named_span_t outputs[] = {{"out", nvfp4_tensor_span(&a->out)}, {"lse", nvfp4_tensor_span(&a->lse)}};
    const nvfp4_named_span_t inputs[] = {{"partial_out", nvfp4_tensor_span(&a->partial_out)},
                                         {"partial_lse", nvfp4_tensor_span(&a->partial_lse)}};
    return st ? st : nvfp4_check_outputs_apart("merge", NVFP4_SPANS(outputs), NVFP4_SPANS(inputs));
}

nvfp4_mla_status_t nvfp4_lower_merge(const nvfp4_mla_context_t *ctx, const nvfp4_mla_merge_args_t *host_args,
                                     nvfp4_mla_merge_kernel_args_t *k) {
    nvfp4_mla_merge_args_t a;
    nvfp4_mla_status_t st = check_header(ctx, host_args, &a);
    if (st || (st = check_inputs(ctx, &a)) || (st = check_outputs(ctx, &a))) {
        return st;
    }
    const int has_lse = !nvfp4_tensor_absent(&a.lse);
    const int64_t *po = a.partial_out.strides, *pl = a.partial_lse.strides;
    *k = (nvfp4_mla_merge_kernel_args_t){
        .partial_out = a.partial_out.data, .partial_lse = a.partial_lse.data, .out = a.out.data,
        .lse = has_lse ? a.lse.data : NULL, .stream = a.stream, .num_parts = a.partial_out.shape[0],
        .num_queries = a.partial_out.shape[1], .num_heads = a.partial_out.shape[2],
        .po_stride_part = po[0], .po_stride_token = po[1], .po_stride_head = po[2],
        .pl_stride_part = pl[0], .pl_stride_token = pl[1], .pl_stride_head = pl[2],
        .out_stride_token = a.out.strides[0], .out_stride_head = a.out.strides[1],
        .lse_stride_token = has_lse ? a.lse.strides[0] : 0, .lse_stride_head = has_lse ? a.lse.strides[1] : 0,
        .partial_is_f32 = a.partial_out.dtype == NVFP4_MLA_DTYPE_F32, .device_index = ctx->device_index,
    };
    return NVFP4_MLA_OK;
}

/* The lse values of a CPU call: attention gives a finite value or -inf, nothing else (a CUDA call
 * cannot read them without a sync; its kernel marks such a row NaN instead). */
static nvfp4_mla_status_t check_cpu_lse(const nvfp4_mla_merge_kernel_args_t *k) {
    for (int64_t p = 0; p < k->num_parts; p++) {
        for (int64_t q = 0; q < k->num_queries; q++) {
            for (int64_t h = 0; h < k->num_heads; h++) {
                const float l = k->partial_lse[p * k->pl_stride_part + q * k->pl_stride_token + h * k->pl_stride_head];
                if (isnan(l) || l == INFINITY) {
                    return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT,
                                      "merge: partial_lse[%lld, %lld, %lld] is %g; an attention's lse is finite, or "
                                      "-inf for a part without a valid entry",
                                      (long long)p, (long long)q, (long long)h, (double)l);
                }
            }
        }
    }
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_op_merge(nvfp4_mla_context_t *ctx, const nvfp4_mla_merge_args_t *args) {
    nvfp4_clear_error();
    nvfp4_mla_merge_kernel_args_t k;
    nvfp4_mla_status_t st = nvfp4_lower_merge(ctx, args, &k);
    if (st || (ctx->device_type == NVFP4_MLA_DEVICE_CPU && (st = check_cpu_lse(&k)))) {
        return st;
    }
    nvfp4_mla_kernel_result_t res = {0, ""};
    ctx->ops->merge(&k, &res);
    return nvfp4_finish("merge", &res);
}
