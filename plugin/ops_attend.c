/* attend and attend_workspace_bytes entries (see ops.h): the host's struct is checked field by field
 * (shapes only, the same for both entries), then the call's own data: the workspace the backend
 * weighs against the one plan it makes, and on the CPU the slot and length values. */
#include <math.h>
#include <string.h>

#include "args.h"
#include "context.h"
#include "errors.h"
#include "ops.h"

static nvfp4_tensor_rule_t rule(const nvfp4_mla_context_t *ctx, const char *name, int32_t dtype, int32_t ndim) {
    return (nvfp4_tensor_rule_t){"attend", name, dtype, 0, ndim, ctx->device_type, ctx->device_index};
}

/* The struct itself, the mode and the capabilities, sm_scale. */
static nvfp4_mla_status_t check_header(const nvfp4_mla_context_t *ctx, const nvfp4_mla_attend_args_t *host_args,
                                       nvfp4_mla_attend_args_t *a) {
    nvfp4_mla_status_t st = NVFP4_TAKE_ARGS("attend", nvfp4_mla_attend_args_t, a, host_args, sizeof *a);
    if (st || (st = nvfp4_check_call(ctx, "attend", NVFP4_MLA_CAP_OP_ATTEND, a->layout, a->scale_mode, a->outer_scale,
                               a->stream))) {
        return st;
    }
    if (!(a->sm_scale > 0.0f) || !isfinite(a->sm_scale)) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "attend: sm_scale is %g, must be finite and > 0",
                          (double)a->sm_scale);
    }
    return NVFP4_MLA_OK;
}

/* q [n_q, h, 576], slots [n_q, topk] and the optional valid_len [n_q]. */
static nvfp4_mla_status_t check_inputs(const nvfp4_mla_context_t *ctx, const nvfp4_mla_attend_args_t *a) {
    nvfp4_tensor_rule_t r = rule(ctx, "q", NVFP4_MLA_DTYPE_BF16, 3);
    nvfp4_mla_status_t st;
    if ((st = nvfp4_check_tensor(&a->q, &r)) ||
        (st = nvfp4_check_dim(&a->q, &r, 2, NVFP4_MLA_ROW_DIM, "576 = 512 + 64"))) {
        return st;
    }
    const int64_t nq = a->q.shape[0], heads = a->q.shape[1];
    if (heads < 1 || heads > 128) { /* each rule alone: a message names only what is wrong (issue 58, N18) */
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "attend: q: h = shape[1] is %lld, must be 1..128",
                          (long long)heads);
    }
    if (a->q.strides[2] != 1) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "attend: q: strides[2] is %lld, must be 1 (each row's 576 "
                          "values contiguous)", (long long)a->q.strides[2]);
    }
    r = rule(ctx, "slots", NVFP4_MLA_DTYPE_I32, 2);
    if ((st = nvfp4_check_tensor(&a->slots, &r)) || (st = nvfp4_check_dim(&a->slots, &r, 0, nq, "one row per query"))) {
        return st;
    }
    if (a->slots.shape[1] > 1 && a->slots.strides[1] != 1) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "attend: slots: strides[1] is %lld, must be 1",
                          (long long)a->slots.strides[1]);
    }
    if (nvfp4_tensor_absent(&a->valid_len)) {
        return NVFP4_MLA_OK;
    }
    r = rule(ctx, "valid_len", NVFP4_MLA_DTYPE_I32, 1);
    if ((st = nvfp4_check_tensor(&a->valid_len, &r))) {
        return st;
    }
    return nvfp4_check_dim(&a->valid_len, &r, 0, nq, "one length per query");
}

/* out [n_q, h, 512] and the optional lse [n_q, h]: shapes, and rows that do not overlap. */
static nvfp4_mla_status_t check_outputs(const nvfp4_mla_context_t *ctx, const nvfp4_mla_attend_args_t *a) {
    return nvfp4_check_head_outputs("attend", ctx->device_type, ctx->device_index, &a->out, &a->lse, a->q.shape[0],
                                    a->q.shape[1]);
}

/* The CUDA kernels read q and write out in 16-byte units. */
static nvfp4_mla_status_t check_cuda_alignment(const nvfp4_mla_context_t *ctx, const nvfp4_mla_attend_args_t *a) {
    if (ctx->device_type == NVFP4_MLA_DEVICE_CUDA &&
        (((uintptr_t)a->q.data | (uintptr_t)a->out.data) % 16 || a->q.strides[0] % 8 || a->q.strides[1] % 8 ||
         a->out.strides[0] % 8 || a->out.strides[1] % 8)) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "attend: q/out on CUDA need 16-byte aligned bases and "
                                                          "strides that are multiples of 8 elements");
    }
    return NVFP4_MLA_OK;
}

/* The flat kernel arguments of a checked struct (the workspace is the launch's business). */
static nvfp4_mla_attend_kernel_args_t flatten(const nvfp4_mla_context_t *ctx, const nvfp4_mla_attend_args_t *a,
                                              const nvfp4_cache_geometry_t *g) {
    const int has_len = !nvfp4_tensor_absent(&a->valid_len), has_lse = !nvfp4_tensor_absent(&a->lse);
    return (nvfp4_mla_attend_kernel_args_t){
        .q = a->q.data, .slots = a->slots.data, .valid_len = has_len ? a->valid_len.data : NULL,
        .cache = a->cache.data, .out = a->out.data, .lse = has_lse ? a->lse.data : NULL, .stream = a->stream,
        .num_queries = a->q.shape[0], .num_heads = a->q.shape[1], .topk = a->slots.shape[1],
        .q_stride_token = a->q.strides[0], .q_stride_head = a->q.strides[1], .slot_stride = a->slots.strides[0],
        .valid_len_stride = has_len ? a->valid_len.strides[0] : 0,
        .out_stride_token = a->out.strides[0], .out_stride_head = a->out.strides[1],
        .lse_stride_token = has_lse ? a->lse.strides[0] : 0, .lse_stride_head = has_lse ? a->lse.strides[1] : 0,
        .block_stride = g->block_stride, .block_size = g->block_size, .capacity = g->capacity,
        .record_bytes = g->record_bytes, .per_token = a->scale_mode == NVFP4_MLA_SCALE_PER_TOKEN,
        .outer_scale = a->outer_scale, .sm_scale = a->sm_scale, .device_index = ctx->device_index,
        .sm_count = ctx->cuda.sm_count, .smem_per_block = ctx->cuda.smem_per_block, .arch = ctx->cuda.arch,
        .force_mma_sync = ctx->attend_force_mma_sync,
        .merge_mode = ctx->attend_merge_mode, .quad_clusters = ctx->cuda.quad_clusters,
    };
}

nvfp4_mla_status_t nvfp4_lower_attend(const nvfp4_mla_context_t *ctx, const nvfp4_mla_attend_args_t *host_args,
                                      nvfp4_mla_attend_args_t *a, nvfp4_mla_attend_kernel_args_t *k) {
    nvfp4_mla_status_t st = check_header(ctx, host_args, a);
    if (st || (st = check_inputs(ctx, a))) {
        return st;
    }
    nvfp4_tensor_rule_t r = rule(ctx, "cache", NVFP4_MLA_DTYPE_U8, 3);
    nvfp4_cache_geometry_t g;
    if ((st = nvfp4_check_cache(&a->cache, &r, a->layout, &g)) || (st = check_outputs(ctx, a)) ||
        (st = check_cuda_alignment(ctx, a))) {
        return st;
    }
    *k = flatten(ctx, a, &g);
    return NVFP4_MLA_OK;
}

/* Slot ids and lengths of a CPU call (a CUDA attend cannot read them without a sync, so its kernel
 * counts entries outside the cache as unused instead). */
static nvfp4_mla_status_t check_cpu_values(const nvfp4_mla_attend_kernel_args_t *k) {
    for (int64_t q = 0; q < k->num_queries; q++) {
        if (k->valid_len) {
            int32_t v = k->valid_len[q * k->valid_len_stride];
            if (v < 0 || v > k->topk) {
                return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "attend: valid_len[%lld] = %d is outside [0, %lld]",
                                  (long long)q, v, (long long)k->topk);
            }
        }
        for (int64_t e = 0; e < k->topk; e++) {
            int32_t slot = k->slots[q * k->slot_stride + e];
            if (slot != -1 && (slot < 0 || slot >= k->capacity)) {
                return nvfp4_fail(
                    NVFP4_MLA_ERR_INVALID_ARGUMENT,
                    "attend: slots[%lld, %lld] = %d is neither -1 nor in [0, %lld) (the cache's capacity)",
                    (long long)q, (long long)e, slot, (long long)k->capacity);
            }
        }
    }
    return NVFP4_MLA_OK;
}

/* out, lse and the workspace apart from the inputs and each other (here, not in nvfp4_lower_attend:
 * attend_workspace_bytes reads shapes only, and the workspace is the call's). */
static nvfp4_mla_status_t check_apart(const nvfp4_mla_attend_args_t *a) {
    const nvfp4_named_span_t outputs[] = {{"out", nvfp4_tensor_span(&a->out)},
                                          {"lse", nvfp4_tensor_span(&a->lse)},
                                          {"workspace", nvfp4_tensor_span(&a->workspace)}};
    const nvfp4_named_span_t inputs[] = {{"q", nvfp4_tensor_span(&a->q)},
                                         {"slots", nvfp4_tensor_span(&a->slots)},
                                         {"valid_len", nvfp4_tensor_span(&a->valid_len)},
                                         {"cache", nvfp4_tensor_span(&a->cache)}};
    return nvfp4_check_outputs_apart("attend", NVFP4_SPANS(outputs), NVFP4_SPANS(inputs));
}

nvfp4_mla_status_t nvfp4_op_attend_workspace_bytes(nvfp4_mla_context_t *ctx, const nvfp4_mla_attend_args_t *args,
                                                   uint64_t *bytes_out) {
    nvfp4_clear_error();
    if (!bytes_out) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "attend_workspace_bytes: bytes_out is NULL");
    }
    *bytes_out = 0;
    nvfp4_mla_attend_args_t a;
    nvfp4_mla_attend_kernel_args_t k;
    nvfp4_mla_status_t st = nvfp4_lower_attend(ctx, args, &a, &k);
    if (!st && k.num_queries > 0) { /* no query, no scratch: the backend is not asked */
        *bytes_out = ctx->ops->attend_workspace(&k);
    }
    return st;
}

nvfp4_mla_status_t nvfp4_op_attend(nvfp4_mla_context_t *ctx, const nvfp4_mla_attend_args_t *args) {
    nvfp4_clear_error();
    nvfp4_mla_attend_args_t a;
    nvfp4_mla_attend_kernel_args_t k;
    nvfp4_mla_status_t st = nvfp4_lower_attend(ctx, args, &a, &k);
    if (st) {
        return st;
    }
    if (!nvfp4_tensor_absent(&a.workspace)) {
        nvfp4_tensor_rule_t r = rule(ctx, "workspace", NVFP4_MLA_DTYPE_U8, 1);
        if ((st = nvfp4_check_tensor(&a.workspace, &r))) {
            return st;
        }
        if ((uintptr_t)a.workspace.data % 16) { /* the CUDA kernels keep split partials there */
            return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT,
                              "attend: workspace: base %p is not 16-byte aligned (split-K partials are bf16 rows)",
                              a.workspace.data);
        }
        k.workspace = a.workspace.data;
        k.workspace_bytes = (uint64_t)a.workspace.shape[0];
    }
    if ((st = check_apart(&a)) || (ctx->device_type == NVFP4_MLA_DEVICE_CPU && (st = check_cpu_values(&k)))) {
        return st;
    }
    nvfp4_mla_kernel_result_t res = {0, ""};
    const nvfp4_attend_launches_t *t = ctx->attend_launches;
    const int32_t built = t ? t->graphs_built : 0, failed = t ? t->graphs_failed : 0;
    /* plans once, and refuses a workspace shorter than its plan; no table: every call launches directly */
    ctx->ops->attend(&k, ctx->attend_graphs ? &ctx->attend_launches : NULL, &res);
    if ((t = ctx->attend_launches) && t->graphs_built != built) {
        nvfp4_log(&ctx->host, NVFP4_MLA_LOG_DEBUG,
                  "nvfp4-mla: attend: call %d of one argument struct: its launches are now one prebuilt graph "
                  "(%d structs in the table, %d graphs built)",
                  ATT_LAUNCH_BUILD_AT, t->used, t->graphs_built);
    }
    if (t && t->graphs_failed != failed) {
        nvfp4_log(&ctx->host, NVFP4_MLA_LOG_WARN,
                  "nvfp4-mla: attend: could not build a launch graph for a repeated call (%d so far); it "
                  "launches its kernels directly from now on",
                  t->graphs_failed);
    }
    return nvfp4_finish("attend", &res);
}
