/* init / shutdown / context_info: a context per device (docs/architecture.md, ABI rule 7). */
#include "context.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "capabilities.h"
#include "errors.h"
#include "settings.h"

/* The attention kernel's settings, read once per CUDA context through the settings table
 * (settings.h: quoted values, one wording) from the host's snapshot or the process environment.
 * See context.h. All are checked before any output is set. */
nvfp4_mla_status_t nvfp4_attend_settings_parse(const char *const *environ, int32_t *smem_per_block,
                                               int32_t *force_mma_sync, int32_t *merge_mode, int32_t *graphs) {
    char message[NVFP4_SETTING_MESSAGE_MAX];
    nvfp4_setting_value_t cap = {.count = INT32_MAX}, engine = {0}, merge = {0}, graph = {0};
    /* The merge modes in the order of the table's names (auto, separate, in-launch). */
    static const int32_t merge_modes[] = {NVFP4_ATTEND_MERGE_AUTO, NVFP4_ATTEND_MERGE_SEPARATE,
                                          NVFP4_ATTEND_MERGE_IN_LAUNCH};
    if (nvfp4_settings[NVFP4_SETTING_ATTEND_MERGE].choice_count != (int)(sizeof merge_modes / sizeof *merge_modes)) {
        return nvfp4_fail(NVFP4_MLA_ERR_INTERNAL, "init: %s has %d names for %zu merge modes", NVFP4_ENV_ATTEND_MERGE,
                          nvfp4_settings[NVFP4_SETTING_ATTEND_MERGE].choice_count,
                          sizeof merge_modes / sizeof *merge_modes);
    }
    if (nvfp4_setting_read(NVFP4_SETTING_ATTEND_SMEM_CAP, environ, &cap, message, sizeof message) ||
        nvfp4_setting_read(NVFP4_SETTING_ATTEND_MMA, environ, &engine, message, sizeof message) ||
        nvfp4_setting_read(NVFP4_SETTING_ATTEND_MERGE, environ, &merge, message, sizeof message) ||
        nvfp4_setting_read(NVFP4_SETTING_ATTEND_GRAPHS, environ, &graph, message, sizeof message)) {
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "init: %s", message);
    }
    if ((int32_t)cap.count < *smem_per_block) {
        *smem_per_block = (int32_t)cap.count;
    }
    *force_mma_sync = engine.index == 1; /* "sync" */
    *merge_mode = merge_modes[merge.index];
    *graphs = graph.index == 0; /* "auto" */
    return NVFP4_MLA_OK;
}

static nvfp4_mla_status_t init_cuda(nvfp4_mla_context_t *ctx, const char *const *environ) {
#if NVFP4_MLA_HAVE_CUDA
    if (nvfp4_mla_cuda_probe(ctx->device_index, ctx->device_name, sizeof ctx->device_name, ctx->backend_note,
                             sizeof ctx->backend_note, &ctx->cuda) != 0) {
        return nvfp4_fail(NVFP4_MLA_ERR_UNSUPPORTED, "init: CUDA device %d is unusable: %s (backend.cuda absent)",
                          ctx->device_index, ctx->backend_note);
    }
    nvfp4_mla_status_t st = nvfp4_attend_settings_parse(environ, &ctx->cuda.smem_per_block, &ctx->attend_force_mma_sync,
                                                        &ctx->attend_merge_mode, &ctx->attend_graphs);
    if (st) {
        return st;
    }
    if (nvfp4_mla_cuda_prepare(ctx->device_index, &ctx->cuda, ctx->backend_note, sizeof ctx->backend_note) != 0) {
        return nvfp4_fail(NVFP4_MLA_ERR_DEVICE, "init: %s", ctx->backend_note);
    }
    ctx->ops = &nvfp4_mla_cuda_ops;
    ctx->capability_bits = NVFP4_CAPS_CUDA;
    return NVFP4_MLA_OK;
#else
    (void)environ;
    snprintf(ctx->backend_note, sizeof ctx->backend_note,
             "this build has no CUDA backend (built with -Dcuda=disabled or no toolkit)");
    return nvfp4_fail(NVFP4_MLA_ERR_UNSUPPORTED, "init: CUDA device %d requested, but %s", ctx->device_index,
                      ctx->backend_note);
#endif
}

nvfp4_mla_status_t nvfp4_context_init(const nvfp4_mla_init_args_t *host_args, nvfp4_mla_context_t **out) {
    if (!out) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "init: out is NULL");
    }
    *out = NULL;
    nvfp4_mla_init_args_t args;
    /* A host struct that ends before environ (ABI 1.1; every host built before it) reads as NULL. */
    nvfp4_mla_status_t st = NVFP4_TAKE_ARGS("init", nvfp4_mla_init_args_t, &args, host_args,
                                            offsetof(nvfp4_mla_init_args_t, environ));
    if (st) {
        return st;
    }
    nvfp4_mla_context_t *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        return nvfp4_fail(NVFP4_MLA_ERR_OUT_OF_MEMORY, "init: cannot allocate a context");
    }
    ctx->magic = NVFP4_CONTEXT_MAGIC;
    ctx->device_type = args.device_type;
    ctx->device_index = args.device_index;
    if (args.host && (st = nvfp4_copy_versioned(&ctx->host, sizeof ctx->host, sizeof ctx->host, args.host,
                                                "init: host (nvfp4_mla_host_desc_t)"))) {
        free(ctx);
        return st;
    }
    if (args.device_type == NVFP4_MLA_DEVICE_CPU) {
        if (args.device_index != 0) {
            free(ctx);
            return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "init: device_index is %d, must be 0 for the CPU",
                              args.device_index);
        }
        ctx->ops = &nvfp4_mla_cpu_ops;
        ctx->capability_bits = NVFP4_CAPS_CPU;
        snprintf(ctx->device_name, sizeof ctx->device_name, "cpu");
    } else if (args.device_type == NVFP4_MLA_DEVICE_CUDA) {
        if (args.device_index < 0) {
            free(ctx);
            return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "init: device_index is %d, must be >= 0",
                              args.device_index);
        }
        if ((st = init_cuda(ctx, args.environ))) {
            nvfp4_log(&ctx->host, NVFP4_MLA_LOG_WARN, "nvfp4-mla: %s", nvfp4_last_error());
            free(ctx);
            return st;
        }
    } else {
        free(ctx);
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "init: device_type is %d, must be 1 (cpu) or 2 (cuda)",
                          args.device_type);
    }
    nvfp4_log(&ctx->host, NVFP4_MLA_LOG_DEBUG, "nvfp4-mla: context on %s", ctx->device_name);
    *out = ctx;
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_context_shutdown(nvfp4_mla_context_t *ctx) {
    nvfp4_clear_error();
    nvfp4_mla_status_t st = ctx ? nvfp4_context_check(ctx, "shutdown") : NVFP4_MLA_OK;
    if (ctx && !st) {
        ctx->magic = 0; /* a second shutdown of this pointer is refused, not a double free */
        ctx->ops->release_launches(ctx->device_index, ctx->attend_launches);
        free(ctx);
    }
    return st;
}

nvfp4_mla_status_t nvfp4_context_check(const nvfp4_mla_context_t *ctx, const char *op) {
    if (!ctx) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "%s: ctx is NULL", op);
    }
    if (ctx->magic != NVFP4_CONTEXT_MAGIC) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT,
                          "%s: ctx %p is not a live context (shut down already, or not a context from init)", op,
                          (const void *)ctx);
    }
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_context_info(const nvfp4_mla_context_t *ctx, nvfp4_mla_context_info_t *info) {
    nvfp4_clear_error();
    nvfp4_mla_status_t st = nvfp4_context_check(ctx, "context_info");
    if (st) {
        return st;
    }
    if (!info) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "context_info: info is NULL");
    }
    if (info->struct_size < sizeof(nvfp4_mla_context_info_t)) {
        return nvfp4_fail(NVFP4_MLA_ERR_VERSION, "context_info: info->struct_size %u is smaller than %zu",
                          info->struct_size, sizeof(nvfp4_mla_context_info_t));
    }
    info->device_type = ctx->device_type;
    info->device_index = ctx->device_index;
    info->reserved0 = 0;
    info->capability_bits = ctx->capability_bits;
    info->device_name = ctx->device_name;
    info->backend_note = ctx->backend_note;
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_context_require(const nvfp4_mla_context_t *ctx, const char *op, uint64_t need) {
    nvfp4_mla_status_t st = nvfp4_context_check(ctx, op);
    if (st) {
        return st;
    }
    uint64_t missing = need & ~ctx->capability_bits;
    if (missing) {
        uint64_t first = missing & (~missing + 1);
        return nvfp4_fail(NVFP4_MLA_ERR_UNSUPPORTED, "%s: the %s context lacks capability %s", op, ctx->device_name,
                          nvfp4_mla_capability_name(first));
    }
    return NVFP4_MLA_OK;
}
