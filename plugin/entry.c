/* The plugin's one exported symbol and the const table it returns (design.md, ABI rules 1-4).
 *
 * The entry is pure: it returns the address of a static const table and does nothing else, so
 * dlopen + probe run no plugin code beyond this and never touch CUDA. Everything else is hidden by
 * -fvisibility=hidden and plugin/plugin.map.
 */
#include "capabilities.h"
#include "config.h"
#include "context.h"
#include "errors.h"
#include "nvfp4_mla.h"
#include "ops.h"

#ifndef NVFP4_MLA_VERSION
#define NVFP4_MLA_VERSION "0.0.0"
#endif
#ifndef NVFP4_MLA_GIT_REVISION
#define NVFP4_MLA_GIT_REVISION "unknown"
#endif
#ifndef NVFP4_MLA_CUDA_ARCHS
#define NVFP4_MLA_CUDA_ARCHS ""
#endif

/* What this build carries, names with revisions; bits mirror NVFP4_CAPS_COMPILED. */
static const nvfp4_mla_capability_t compiled[] = {
    {"backend.cpu", 1, 0, NVFP4_MLA_CAP_BACKEND_CPU},
    {"layout.fp8_rope_368", 1, 0, NVFP4_MLA_CAP_LAYOUT_FP8_ROPE_368},
    {"layout.bf16_rope_432", 1, 0, NVFP4_MLA_CAP_LAYOUT_BF16_ROPE_432},
    {"scale.static_outer", 1, 0, NVFP4_MLA_CAP_SCALE_STATIC_OUTER},
    {"write.per_token_scale", 1, 0, NVFP4_MLA_CAP_WRITE_PER_TOKEN_SCALE},
    {"write.capture_max_abs", 1, 0, NVFP4_MLA_CAP_WRITE_CAPTURE_MAX_ABS},
    {"op.write", 1, 0, NVFP4_MLA_CAP_OP_WRITE},
    {"op.gather", 1, 0, NVFP4_MLA_CAP_OP_GATHER},
    {"config.cache_identity", 1, 0, NVFP4_MLA_CAP_CONFIG_CACHE_IDENTITY},
    {"op.attend", 1, 0, NVFP4_MLA_CAP_OP_ATTEND},
    {"read.latent_scale_per_token", 1, 0, NVFP4_MLA_CAP_READ_LATENT_SCALE_PER_TOKEN},
    {"read.fp8_ds_mla_656", 1, 0, NVFP4_MLA_CAP_READ_FP8_DS_MLA_656},
#if NVFP4_MLA_HAVE_CUDA
    {"backend.cuda", 1, 0, NVFP4_MLA_CAP_BACKEND_CUDA},
#endif
};

static const nvfp4_mla_plugin_t table = {
    .header = {NVFP4_MLA_ABI_MAGIC, sizeof(nvfp4_mla_plugin_t), NVFP4_MLA_ABI_MAJOR, NVFP4_MLA_ABI_MINOR, 0},
    .plugin_name = "nvfp4-mla",
    .version = NVFP4_MLA_VERSION,
    .git_revision = NVFP4_MLA_GIT_REVISION,
    .cuda_archs = NVFP4_MLA_CUDA_ARCHS,
    .record_format = NVFP4_MLA_RECORD_FORMAT,
    .capability_bits = NVFP4_CAPS_COMPILED,
    .capability_count = sizeof compiled / sizeof compiled[0],
    .capabilities = compiled,
    .status_string = nvfp4_status_string,
    .last_error = nvfp4_last_error,
    .init = nvfp4_context_init,
    .shutdown = nvfp4_context_shutdown,
    .context_info = nvfp4_context_info,
    .config_create = nvfp4_config_create,
    .config_info = nvfp4_config_info,
    .config_layer_scale = nvfp4_config_layer_scale,
    .config_destroy = nvfp4_config_destroy,
    .write = nvfp4_op_write,
    .gather = nvfp4_op_gather,
    .attend_workspace_bytes = nvfp4_op_attend_workspace_bytes,
    .attend = nvfp4_op_attend,
};

__attribute__((visibility("default"))) const nvfp4_mla_plugin_t *nvfp4_mla_plugin_v1(void) {
    return &table;
}
