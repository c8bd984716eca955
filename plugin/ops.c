/* write / gather / attend entries (see ops.h). Every check happens here, before any backend code
 * runs, so that both backends see only arguments that cannot make them write out of bounds. */
#include "ops.h"

#include <math.h>
#include <string.h>

#include "args.h"
#include "capabilities.h"
#include "context.h"
#include "errors.h"

static uint64_t mode_caps(uint32_t layout, uint32_t scale_mode) {
    uint64_t need = layout == NVFP4_MLA_LAYOUT_FP8_ROPE_368 ? NVFP4_MLA_CAP_LAYOUT_FP8_ROPE_368
                                                            : NVFP4_MLA_CAP_LAYOUT_BF16_ROPE_432;
    return need | (scale_mode == NVFP4_MLA_SCALE_PER_TOKEN ? 0 : NVFP4_MLA_CAP_SCALE_STATIC_OUTER);
}

static nvfp4_mla_status_t check_stream(const nvfp4_mla_context_t *ctx, const char *op, const void *stream) {
    if (ctx->device_type == NVFP4_MLA_DEVICE_CPU && stream) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "%s: stream must be NULL on a CPU context", op);
    }
    return NVFP4_MLA_OK;
}

/* A pointer the kernel writes one value through: aligned, on the context's device (by contract). */
static nvfp4_mla_status_t check_scalar_out(const char *op, const char *name, const void *p, size_t align) {
    if (p && ((uintptr_t)p % align)) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "%s: %s %p is not %zu-byte aligned", op, name, p, align);
    }
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_lower_write(const nvfp4_mla_context_t *ctx, const nvfp4_mla_write_args_t *host_args,
                                     nvfp4_mla_write_kernel_args_t *k) {
    nvfp4_mla_write_args_t a;
    nvfp4_mla_status_t st = nvfp4_copy_versioned(&a, sizeof a, sizeof a, host_args, "write: nvfp4_mla_write_args_t");
    if (st || (st = nvfp4_check_zero("write", "flags", &a.flags, sizeof a.flags)) ||
        (st = nvfp4_check_zero("write", "reserved0", &a.reserved0, sizeof a.reserved0)) ||
        (st = nvfp4_check_zero("write", "reserved", a.reserved, sizeof a.reserved)) ||
        (st = nvfp4_check_mode("write", a.layout, a.scale_mode, a.outer_scale)) ||
        (st = nvfp4_context_require(ctx, "write", NVFP4_MLA_CAP_OP_WRITE | mode_caps(a.layout, a.scale_mode) |
                                                      (a.scale_mode == NVFP4_MLA_SCALE_PER_TOKEN
                                                           ? NVFP4_MLA_CAP_WRITE_PER_TOKEN_SCALE
                                                           : 0))) ||
        (st = check_stream(ctx, "write", a.stream))) {
        return st;
    }
    nvfp4_tensor_rule_t r = {"write", "kv_c", NVFP4_MLA_DTYPE_BF16, NVFP4_MLA_DTYPE_F16, 2, ctx->device_type,
                             ctx->device_index};
    if ((st = nvfp4_check_tensor(&a.kv_c, &r)) || (st = nvfp4_check_rows(&a.kv_c, &r, NVFP4_MLA_LATENT_DIM))) {
        return st;
    }
    int64_t tokens = a.kv_c.shape[0];
    r.name = "k_pe";
    r.dtype = a.kv_c.dtype;
    r.alt_dtype = 0;
    if ((st = nvfp4_check_tensor(&a.k_pe, &r)) || (st = nvfp4_check_rows(&a.k_pe, &r, NVFP4_MLA_ROPE_DIM)) ||
        (st = nvfp4_check_dim(&a.k_pe, &r, 0, tokens, "one RoPE row per kv_c row"))) {
        return st;
    }
    r = (nvfp4_tensor_rule_t){"write", "slot_mapping", NVFP4_MLA_DTYPE_I64, 0, 1, ctx->device_type, ctx->device_index};
    if ((st = nvfp4_check_tensor(&a.slot_mapping, &r)) ||
        (st = nvfp4_check_dim(&a.slot_mapping, &r, 0, tokens, "one slot per kv_c row"))) {
        return st;
    }
    r = (nvfp4_tensor_rule_t){"write", "cache", NVFP4_MLA_DTYPE_U8, 0, 3, ctx->device_type, ctx->device_index};
    nvfp4_cache_geometry_t g;
    if ((st = nvfp4_check_cache(&a.cache, &r, a.layout, &g)) ||
        (st = check_scalar_out("write", "capture_max_abs", a.capture_max_abs, sizeof(float))) ||
        (st = check_scalar_out("write", "nonfinite_count", a.nonfinite_count, sizeof(uint64_t)))) {
        return st;
    }
    if (ctx->device_type == NVFP4_MLA_DEVICE_CUDA &&
        (((uintptr_t)a.kv_c.data | (uintptr_t)a.k_pe.data) % 16 || a.kv_c.strides[0] % 8 || a.k_pe.strides[0] % 8)) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT,
                          "write: kv_c/k_pe on CUDA need 16-byte aligned bases and row strides that are multiples "
                          "of 8 elements (got %p/%p, strides %lld/%lld)",
                          a.kv_c.data, a.k_pe.data, (long long)a.kv_c.strides[0], (long long)a.k_pe.strides[0]);
    }
    *k = (nvfp4_mla_write_kernel_args_t){
        .kv_c = a.kv_c.data,
        .k_pe = a.k_pe.data,
        .slot_mapping = a.slot_mapping.data,
        .cache = a.cache.data,
        .capture_max_abs = a.capture_max_abs,
        .nonfinite_count = a.nonfinite_count,
        .stream = a.stream,
        .num_tokens = tokens,
        .kv_c_row_stride = a.kv_c.strides[0],
        .k_pe_row_stride = a.k_pe.strides[0],
        .slot_stride = a.slot_mapping.strides[0],
        .block_stride = g.block_stride,
        .block_size = g.block_size,
        .capacity = g.capacity,
        .input_is_f16 = a.kv_c.dtype == NVFP4_MLA_DTYPE_F16,
        .record_bytes = g.record_bytes,
        .per_token = a.scale_mode == NVFP4_MLA_SCALE_PER_TOKEN,
        .outer_scale = a.outer_scale,
        .device_index = ctx->device_index,
    };
    return NVFP4_MLA_OK;
}

/* Slot ids of a CPU gather are checked here (a CUDA gather cannot read them without a sync, so
 * its kernel turns out-of-range ids into zero rows instead). */
static nvfp4_mla_status_t check_cpu_slots(const nvfp4_mla_gather_kernel_args_t *k) {
    for (int64_t n = 0; n < k->num_rows; n++) {
        int32_t slot = k->slots[n * k->slot_stride];
        if (slot != -1 && (slot < 0 || slot >= k->capacity)) {
            return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT,
                              "gather: slots[%lld] = %d is neither -1 nor in [0, %lld) (the cache's capacity)",
                              (long long)n, slot, (long long)k->capacity);
        }
    }
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_lower_gather(const nvfp4_mla_context_t *ctx, const nvfp4_mla_gather_args_t *host_args,
                                      nvfp4_mla_gather_kernel_args_t *k) {
    nvfp4_mla_gather_args_t a;
    nvfp4_mla_status_t st =
        nvfp4_copy_versioned(&a, sizeof a, sizeof a, host_args, "gather: nvfp4_mla_gather_args_t");
    if (st || (st = nvfp4_check_zero("gather", "flags", &a.flags, sizeof a.flags)) ||
        (st = nvfp4_check_zero("gather", "reserved0", &a.reserved0, sizeof a.reserved0)) ||
        (st = nvfp4_check_zero("gather", "reserved", a.reserved, sizeof a.reserved)) ||
        (st = nvfp4_check_mode("gather", a.layout, a.scale_mode, a.outer_scale)) ||
        (st = nvfp4_context_require(ctx, "gather", NVFP4_MLA_CAP_OP_GATHER | mode_caps(a.layout, a.scale_mode))) ||
        (st = check_stream(ctx, "gather", a.stream))) {
        return st;
    }
    nvfp4_tensor_rule_t r = {"gather", "cache", NVFP4_MLA_DTYPE_U8, 0, 3, ctx->device_type, ctx->device_index};
    nvfp4_cache_geometry_t g;
    if ((st = nvfp4_check_cache(&a.cache, &r, a.layout, &g))) {
        return st;
    }
    r = (nvfp4_tensor_rule_t){"gather", "slots", NVFP4_MLA_DTYPE_I32, 0, 1, ctx->device_type, ctx->device_index};
    if ((st = nvfp4_check_tensor(&a.slots, &r))) {
        return st;
    }
    int64_t rows = a.slots.shape[0];
    r = (nvfp4_tensor_rule_t){"gather", "out", NVFP4_MLA_DTYPE_BF16, 0, 2, ctx->device_type, ctx->device_index};
    if ((st = nvfp4_check_tensor(&a.out, &r)) || (st = nvfp4_check_rows(&a.out, &r, NVFP4_GATHER_ROW)) ||
        (st = nvfp4_check_dim(&a.out, &r, 0, rows, "one row per slot"))) {
        return st;
    }
    if (ctx->device_type == NVFP4_MLA_DEVICE_CUDA && (((uintptr_t)a.out.data % 16) || a.out.strides[0] % 8)) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT,
                          "gather: out on CUDA needs a 16-byte aligned base and a row stride that is a multiple of "
                          "8 elements (got %p, stride %lld)", a.out.data, (long long)a.out.strides[0]);
    }
    *k = (nvfp4_mla_gather_kernel_args_t){
        .cache = a.cache.data,
        .slots = a.slots.data,
        .out = a.out.data,
        .stream = a.stream,
        .num_rows = rows,
        .slot_stride = a.slots.strides[0],
        .out_row_stride = a.out.strides[0],
        .block_stride = g.block_stride,
        .block_size = g.block_size,
        .capacity = g.capacity,
        .record_bytes = g.record_bytes,
        .per_token = a.scale_mode == NVFP4_MLA_SCALE_PER_TOKEN,
        .outer_scale = a.outer_scale,
        .device_index = ctx->device_index,
    };
    if (ctx->device_type == NVFP4_MLA_DEVICE_CPU) {
        return check_cpu_slots(k);
    }
    return NVFP4_MLA_OK;
}

static nvfp4_mla_status_t finish(const char *op, const nvfp4_mla_kernel_result_t *res) {
    if (res->status) {
        return nvfp4_fail(res->status, "%s: %s", op, res->message);
    }
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_op_write(nvfp4_mla_context_t *ctx, const nvfp4_mla_write_args_t *args) {
    nvfp4_clear_error();
    nvfp4_mla_write_kernel_args_t k;
    nvfp4_mla_status_t st = nvfp4_lower_write(ctx, args, &k);
    if (st) {
        return st;
    }
    nvfp4_mla_kernel_result_t res = {0, ""};
    ctx->ops->write(&k, &res);
    return finish("write", &res);
}

nvfp4_mla_status_t nvfp4_op_gather(nvfp4_mla_context_t *ctx, const nvfp4_mla_gather_args_t *args) {
    nvfp4_clear_error();
    nvfp4_mla_gather_kernel_args_t k;
    nvfp4_mla_status_t st = nvfp4_lower_gather(ctx, args, &k);
    if (st) {
        return st;
    }
    nvfp4_mla_kernel_result_t res = {0, ""};
    ctx->ops->gather(&k, &res);
    return finish("gather", &res);
}

/* An optional tensor is absent when the host leaves it zeroed (data NULL, ndim 0). */
static int absent(const nvfp4_mla_tensor_t *t) {
    return t->data == NULL && t->ndim == 0;
}

/* Rows of `inner` contiguous values, `count` of them `stride` apart, must not overlap (outputs). */
static nvfp4_mla_status_t check_no_overlap(const char *name, int64_t count, int64_t stride, int64_t extent) {
    if (count > 1 && stride < extent) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "attend: %s: a stride of %lld elements overlaps rows of %lld",
                          name, (long long)stride, (long long)extent);
    }
    return NVFP4_MLA_OK;
}

static nvfp4_mla_status_t check_cpu_attend_values(const nvfp4_mla_attend_kernel_args_t *k) {
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
                return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT,
                                  "attend: slots[%lld, %lld] = %d is neither -1 nor in [0, %lld) (the cache's capacity)",
                                  (long long)q, (long long)e, slot, (long long)k->capacity);
            }
        }
    }
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_lower_attend(const nvfp4_mla_context_t *ctx, const nvfp4_mla_attend_args_t *host_args,
                                      nvfp4_mla_attend_kernel_args_t *k, int for_launch) {
    const nvfp4_mla_status_t bad = NVFP4_MLA_ERR_INVALID_ARGUMENT;
    nvfp4_mla_attend_args_t a;
    nvfp4_mla_status_t st =
        nvfp4_copy_versioned(&a, sizeof a, sizeof a, host_args, "attend: nvfp4_mla_attend_args_t");
    if (st || (st = nvfp4_check_zero("attend", "flags", &a.flags, sizeof a.flags)) ||
        (st = nvfp4_check_zero("attend", "reserved", a.reserved, sizeof a.reserved))) {
        return st;
    }
    const int fp8_656 = a.layout == NVFP4_MLA_LAYOUT_FP8_DS_MLA_656;
    if (fp8_656 && (a.scale_mode != NVFP4_MLA_SCALE_STATIC || a.outer_scale != 1.0f)) {
        return nvfp4_fail(bad, "attend: layout fp8_ds_mla_656 carries its own tile scales: scale_mode must be static "
                               "with outer_scale 1.0");
    }
    uint64_t need = NVFP4_MLA_CAP_OP_ATTEND;
    if (fp8_656) {
        need |= NVFP4_MLA_CAP_READ_FP8_DS_MLA_656;
    } else {
        need |= mode_caps(a.layout, a.scale_mode) |
                (a.scale_mode == NVFP4_MLA_SCALE_PER_TOKEN ? NVFP4_MLA_CAP_READ_LATENT_SCALE_PER_TOKEN : 0);
    }
    if ((!fp8_656 && (st = nvfp4_check_mode("attend", a.layout, a.scale_mode, a.outer_scale))) ||
        (st = nvfp4_context_require(ctx, "attend", need)) || (st = check_stream(ctx, "attend", a.stream))) {
        return st;
    }
    if (!(a.sm_scale > 0.0f) || !isfinite(a.sm_scale)) {
        return nvfp4_fail(bad, "attend: sm_scale is %g, must be finite and > 0", (double)a.sm_scale);
    }
    nvfp4_tensor_rule_t r = {"attend", "q", NVFP4_MLA_DTYPE_BF16, 0, 3, ctx->device_type, ctx->device_index};
    if ((st = nvfp4_check_tensor(&a.q, &r)) || (st = nvfp4_check_dim(&a.q, &r, 2, NVFP4_GATHER_ROW, "576 = 512 + 64"))) {
        return st;
    }
    const int64_t nq = a.q.shape[0], heads = a.q.shape[1];
    if (heads < 1 || heads > 128 || a.q.strides[2] != 1) {
        return nvfp4_fail(bad, "attend: q: h = shape[1] is %lld (must be 1..128) and strides[2] %lld (must be 1)",
                          (long long)heads, (long long)a.q.strides[2]);
    }
    r = (nvfp4_tensor_rule_t){"attend", "slots", NVFP4_MLA_DTYPE_I32, 0, 2, ctx->device_type, ctx->device_index};
    if ((st = nvfp4_check_tensor(&a.slots, &r)) || (st = nvfp4_check_dim(&a.slots, &r, 0, nq, "one row per query"))) {
        return st;
    }
    const int64_t topk = a.slots.shape[1];
    if (topk > 1 && a.slots.strides[1] != 1) {
        return nvfp4_fail(bad, "attend: slots: strides[1] is %lld, must be 1", (long long)a.slots.strides[1]);
    }
    if (!absent(&a.valid_len)) {
        r = (nvfp4_tensor_rule_t){"attend", "valid_len", NVFP4_MLA_DTYPE_I32, 0, 1, ctx->device_type, ctx->device_index};
        if ((st = nvfp4_check_tensor(&a.valid_len, &r)) ||
            (st = nvfp4_check_dim(&a.valid_len, &r, 0, nq, "one length per query"))) {
            return st;
        }
    }
    r = (nvfp4_tensor_rule_t){"attend", "cache", NVFP4_MLA_DTYPE_U8, 0, 3, ctx->device_type, ctx->device_index};
    nvfp4_cache_geometry_t g;
    if ((st = nvfp4_check_cache(&a.cache, &r, a.layout, &g))) {
        return st;
    }
    r = (nvfp4_tensor_rule_t){"attend", "out", NVFP4_MLA_DTYPE_BF16, 0, 3, ctx->device_type, ctx->device_index};
    if ((st = nvfp4_check_tensor(&a.out, &r)) || (st = nvfp4_check_dim(&a.out, &r, 0, nq, "n_q")) ||
        (st = nvfp4_check_dim(&a.out, &r, 1, heads, "h")) || (st = nvfp4_check_dim(&a.out, &r, 2, 512, "latent")) ||
        (a.out.strides[2] != 1 &&
         (st = nvfp4_fail(bad, "attend: out: strides[2] is %lld, must be 1", (long long)a.out.strides[2]))) ||
        (st = check_no_overlap("out heads", heads, a.out.strides[1], 512)) ||
        (st = check_no_overlap("out queries", nq, a.out.strides[0], (heads - 1) * a.out.strides[1] + 512))) {
        return st;
    }
    if (!absent(&a.lse)) {
        r = (nvfp4_tensor_rule_t){"attend", "lse", NVFP4_MLA_DTYPE_F32, 0, 2, ctx->device_type, ctx->device_index};
        if ((st = nvfp4_check_tensor(&a.lse, &r)) || (st = nvfp4_check_dim(&a.lse, &r, 0, nq, "n_q")) ||
            (st = nvfp4_check_dim(&a.lse, &r, 1, heads, "h")) || (st = check_no_overlap("lse heads", heads, a.lse.strides[1], 1)) ||
            (st = check_no_overlap("lse queries", nq, a.lse.strides[0], (heads - 1) * a.lse.strides[1] + 1))) {
            return st;
        }
    }
    if (ctx->device_type == NVFP4_MLA_DEVICE_CUDA &&
        (((uintptr_t)a.q.data | (uintptr_t)a.out.data) % 16 || a.q.strides[0] % 8 || a.q.strides[1] % 8 ||
         a.out.strides[0] % 8 || a.out.strides[1] % 8)) {
        return nvfp4_fail(bad, "attend: q/out on CUDA need 16-byte aligned bases and strides that are multiples of 8 "
                               "elements");
    }
    *k = (nvfp4_mla_attend_kernel_args_t){
        .q = a.q.data, .slots = a.slots.data, .valid_len = absent(&a.valid_len) ? NULL : a.valid_len.data,
        .cache = a.cache.data, .out = a.out.data, .lse = absent(&a.lse) ? NULL : a.lse.data,
        .workspace = absent(&a.workspace) ? NULL : a.workspace.data, .stream = a.stream,
        .num_queries = nq, .num_heads = heads, .topk = topk,
        .q_stride_token = a.q.strides[0], .q_stride_head = a.q.strides[1], .slot_stride = a.slots.strides[0],
        .valid_len_stride = absent(&a.valid_len) ? 0 : a.valid_len.strides[0],
        .out_stride_token = a.out.strides[0], .out_stride_head = a.out.strides[1],
        .lse_stride_token = absent(&a.lse) ? 0 : a.lse.strides[0], .lse_stride_head = absent(&a.lse) ? 0 : a.lse.strides[1],
        .block_stride = g.block_stride, .block_size = g.block_size, .capacity = g.capacity,
        .layout = (int32_t)a.layout, .record_bytes = g.record_bytes,
        .per_token = a.scale_mode == NVFP4_MLA_SCALE_PER_TOKEN, .outer_scale = a.outer_scale, .sm_scale = a.sm_scale,
        .device_index = ctx->device_index,
        .sm_count = ctx->cuda.sm_count, .smem_per_block = ctx->cuda.smem_per_block, .arch = ctx->cuda.arch,
        .force_mma_sync = ctx->attend_force_mma_sync,
    };
    if (!for_launch) {
        return NVFP4_MLA_OK; /* attend_workspace_bytes: shapes only */
    }
    uint64_t need_bytes = ctx->ops->attend_workspace(k);
    {
        uint64_t have = 0;
        if (!absent(&a.workspace)) {
            r = (nvfp4_tensor_rule_t){"attend", "workspace", NVFP4_MLA_DTYPE_U8, 0, 1, ctx->device_type,
                                      ctx->device_index};
            if ((st = nvfp4_check_tensor(&a.workspace, &r))) {
                return st;
            }
            have = (uint64_t)a.workspace.shape[0];
        }
        if (have < need_bytes) {
            return nvfp4_fail(bad, "attend: workspace has %llu bytes, these shapes need %llu (attend_workspace_bytes)",
                              (unsigned long long)have, (unsigned long long)need_bytes);
        }
        k->workspace_bytes = have;
    }
    if (ctx->device_type == NVFP4_MLA_DEVICE_CPU) {
        return check_cpu_attend_values(k);
    }
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_op_attend_workspace_bytes(nvfp4_mla_context_t *ctx, const nvfp4_mla_attend_args_t *args,
                                                   uint64_t *bytes_out) {
    nvfp4_clear_error();
    if (!bytes_out) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "attend_workspace_bytes: bytes_out is NULL");
    }
    *bytes_out = 0;
    nvfp4_mla_attend_kernel_args_t k;
    nvfp4_mla_status_t st = nvfp4_lower_attend(ctx, args, &k, 0);
    if (st) {
        return st;
    }
    *bytes_out = ctx->ops->attend_workspace(&k);
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_op_attend(nvfp4_mla_context_t *ctx, const nvfp4_mla_attend_args_t *args) {
    nvfp4_clear_error();
    nvfp4_mla_attend_kernel_args_t k;
    nvfp4_mla_status_t st = nvfp4_lower_attend(ctx, args, &k, 1);
    if (st) {
        return st;
    }
    nvfp4_mla_kernel_result_t res = {0, ""};
    ctx->ops->attend(&k, &res);
    return finish("attend", &res);
}
