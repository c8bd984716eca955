/* write / gather entries and the checks every operation shares (see ops.h; attend: ops_attend.c).
 * Every check happens here, before any backend code runs, so that both backends see only arguments
 * that cannot make them write out of bounds. */
#include "ops.h"

#include <string.h>

#include "args.h"
#include "context.h"
#include "errors.h"

nvfp4_mla_status_t nvfp4_check_stream(const nvfp4_mla_context_t *ctx, const char *op, const void *stream) {
    if (ctx->device_type == NVFP4_MLA_DEVICE_CPU && stream) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "%s: stream must be NULL on a CPU context", op);
    }
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_check_call(const nvfp4_mla_context_t *ctx, const char *op, uint64_t op_cap, uint32_t layout,
                                    uint32_t scale_mode, float outer_scale, const void *stream) {
    nvfp4_mla_status_t st = nvfp4_check_mode(op, op_cap, layout, scale_mode, outer_scale);
    if (st || (st = nvfp4_context_require(ctx, op, nvfp4_mla_caps_needed(op_cap, layout, scale_mode)))) {
        return st;
    }
    return nvfp4_check_stream(ctx, op, stream);
}

nvfp4_mla_status_t nvfp4_finish(const char *op, const nvfp4_mla_kernel_result_t *res) {
    if (res->status) {
        return nvfp4_fail(res->status, "%s: %s", op, res->message);
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

/* A policy this version knows, which the context's writer serves. */
static nvfp4_mla_status_t check_policy(const nvfp4_mla_context_t *ctx, uint32_t policy) {
    if (policy >= NVFP4_MLA_WRITER_POLICY_COUNT) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "write: writer_policy is %u, must be %d (rtn) or %d (mse)",
                          policy, NVFP4_MLA_WRITER_POLICY_RTN, NVFP4_MLA_WRITER_POLICY_MSE);
    }
    return nvfp4_context_require(ctx, "write", nvfp4_mla_writer_policy_cap(policy));
}

/* A CPU write's slots: one at or past the capacity is a host bug that would lose that token's
 * record, refused before anything is written (CUDA cannot read them without a sync: its kernel
 * counts them in out_of_range_count instead). Negative slots are padding, skipped. */
static nvfp4_mla_status_t check_cpu_write_slots(const nvfp4_mla_write_kernel_args_t *k) {
    for (int64_t t = 0; t < k->num_tokens; t++) {
        const int64_t slot = k->slot_mapping[t * k->slot_stride];
        if (slot >= k->capacity) {
            return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT,
                              "write: slot_mapping[%lld] = %lld is at or past the cache's capacity %lld "
                              "(num_blocks * block_size): its token's record would be lost; negative slots are the "
                              "padding that is skipped, nothing was written",
                              (long long)t, (long long)slot, (long long)k->capacity);
        }
    }
    return NVFP4_MLA_OK;
}

/* write's outputs (the cache, the optional capture and counters) apart from its inputs and each other. */
static nvfp4_mla_status_t check_write_apart(const nvfp4_mla_write_args_t *a) {
    const nvfp4_named_span_t outputs[] = {
        {"cache", nvfp4_tensor_span(&a->cache)},
        {"capture_max_abs", nvfp4_pointer_span(a->capture_max_abs, sizeof(float))},
        {"nonfinite_count", nvfp4_pointer_span(a->nonfinite_count, sizeof(uint64_t))},
        {"out_of_range_count", nvfp4_pointer_span(a->out_of_range_count, sizeof(uint64_t))},
    };
    const nvfp4_named_span_t inputs[] = {{"kv_c", nvfp4_tensor_span(&a->kv_c)},
                                         {"k_pe", nvfp4_tensor_span(&a->k_pe)},
                                         {"slot_mapping", nvfp4_tensor_span(&a->slot_mapping)}};
    return nvfp4_check_outputs_apart("write", NVFP4_SPANS(outputs), NVFP4_SPANS(inputs));
}

nvfp4_mla_status_t nvfp4_lower_write(const nvfp4_mla_context_t *ctx, const nvfp4_mla_write_args_t *host_args,
                                     nvfp4_mla_write_kernel_args_t *k) {
    nvfp4_mla_write_args_t a;
    /* out_of_range_count is the last member and the newest (ABI 1.1): a host built before it passes a
     * struct that ends before it, which reads as NULL. */
    nvfp4_mla_status_t st = NVFP4_TAKE_ARGS("write", nvfp4_mla_write_args_t, &a, host_args,
                                            offsetof(nvfp4_mla_write_args_t, out_of_range_count));
    if (st || (st = nvfp4_check_call(ctx, "write", NVFP4_MLA_CAP_OP_WRITE, a.layout, a.scale_mode, a.outer_scale,
                               a.stream)) ||
        (st = check_policy(ctx, a.writer_policy))) {
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
        (st = check_scalar_out("write", "nonfinite_count", a.nonfinite_count, sizeof(uint64_t))) ||
        (st = check_scalar_out("write", "out_of_range_count", a.out_of_range_count, sizeof(uint64_t))) ||
        (st = check_write_apart(&a))) {
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
        .out_of_range_count = a.out_of_range_count,
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
        .writer_policy = (int32_t)a.writer_policy,
    };
    return ctx->device_type == NVFP4_MLA_DEVICE_CPU ? check_cpu_write_slots(k) : NVFP4_MLA_OK;
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
    nvfp4_mla_status_t st = NVFP4_TAKE_ARGS("gather", nvfp4_mla_gather_args_t, &a, host_args, sizeof a);
    if (st || (st = nvfp4_check_zero("gather", "reserved0", &a.reserved0, sizeof a.reserved0)) ||
        (st = nvfp4_check_call(ctx, "gather", NVFP4_MLA_CAP_OP_GATHER, a.layout, a.scale_mode, a.outer_scale,
                               a.stream))) {
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
    if ((st = nvfp4_check_tensor(&a.out, &r)) || (st = nvfp4_check_rows(&a.out, &r, NVFP4_MLA_ROW_DIM)) ||
        (st = nvfp4_check_dim(&a.out, &r, 0, rows, "one row per slot"))) {
        return st;
    }
    const nvfp4_named_span_t out[] = {{"out", nvfp4_tensor_span(&a.out)}};
    const nvfp4_named_span_t inputs[] = {{"cache", nvfp4_tensor_span(&a.cache)},
                                         {"slots", nvfp4_tensor_span(&a.slots)}};
    if ((st = nvfp4_check_outputs_apart("gather", NVFP4_SPANS(out), NVFP4_SPANS(inputs)))) {
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

nvfp4_mla_status_t nvfp4_op_write(nvfp4_mla_context_t *ctx, const nvfp4_mla_write_args_t *args) {
    nvfp4_clear_error();
    nvfp4_mla_write_kernel_args_t k;
    nvfp4_mla_status_t st = nvfp4_lower_write(ctx, args, &k);
    if (st) {
        return st;
    }
    nvfp4_mla_kernel_result_t res = {0, ""};
    ctx->ops->write(&k, &res);
    return nvfp4_finish("write", &res);
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
    return nvfp4_finish("gather", &res);
}
