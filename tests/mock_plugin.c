/* A mock plugin, built several times with different defines to form the loader's compatibility
 * matrix (tests/meson.build lists the variants):
 *   MOCK_MAGIC, MOCK_MAJOR, MOCK_MINOR   header values
 *   MOCK_TABLE_SIZE                      header.struct_size (smaller = older minor, larger = newer)
 *   MOCK_CAPS                            capability bits
 *   MOCK_ENTRY_NAME                      exported symbol (nvfp4_mla_plugin_v2 = a future major only)
 *   MOCK_RETURN_NULL                     the entry returns NULL
 *   MOCK_NO_ENTRY                        a shared object that is not a plugin at all
 *   MOCK_NULL_MEMBER                     this table member is NULL (the loaders must refuse it)
 * Every other member is set: context and codec entry points are stubs that refuse with
 * ERR_UNSUPPORTED; the configuration is a fixed one (mock_config_info). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "nvfp4_mla.h"

#ifndef MOCK_MAGIC
#define MOCK_MAGIC NVFP4_MLA_ABI_MAGIC
#endif
#ifndef MOCK_MAJOR
#define MOCK_MAJOR NVFP4_MLA_ABI_MAJOR
#endif
#ifndef MOCK_MINOR
#define MOCK_MINOR NVFP4_MLA_ABI_MINOR
#endif
#ifndef MOCK_CAPS
#define MOCK_CAPS (UINT64_C(0x7FF) | NVFP4_MLA_CAP_CONFIG_CACHE_IDENTITY)
#endif
#ifndef MOCK_ENTRY_NAME
#define MOCK_ENTRY_NAME nvfp4_mla_plugin_v1
#endif

/* A future minor: the 1.0 table followed by members this host does not know. */
typedef struct mock_table {
    nvfp4_mla_plugin_t v1;
    void *future_members[4];
} mock_table_t;

#ifndef MOCK_TABLE_SIZE
#define MOCK_TABLE_SIZE sizeof(nvfp4_mla_plugin_t)
#endif

static const nvfp4_mla_capability_t caps[] = {
    {"backend.cpu", 1, 0, NVFP4_MLA_CAP_BACKEND_CPU},
    {"future.capability", 3, 0, UINT64_C(1) << 40},
};

static const char *status_string(nvfp4_mla_status_t s) {
    return s == 0 ? "NVFP4_MLA_OK" : "mock status";
}

static const char *last_error(void) {
    return "mock plugin: every entry point is a stub";
}

static nvfp4_mla_status_t mock_init(const nvfp4_mla_init_args_t *args, nvfp4_mla_context_t **out) {
    (void)args;
    *out = NULL;
    return NVFP4_MLA_ERR_UNSUPPORTED;
}

static nvfp4_mla_status_t mock_shutdown(nvfp4_mla_context_t *ctx) {
    (void)ctx;
    return NVFP4_MLA_OK;
}

static nvfp4_mla_status_t mock_context_info(const nvfp4_mla_context_t *ctx, nvfp4_mla_context_info_t *info) {
    (void)ctx, (void)info;
    return NVFP4_MLA_ERR_UNSUPPORTED;
}

/* A configuration that wants per-token scales when VLLM_NVFP4_MLA_DYNAMIC_SCALE is set, so that a host's
 * capability check (require) can be exercised against the mock's capability bits. */
static char mock_config_object;

static nvfp4_mla_status_t mock_config_create(const nvfp4_mla_config_request_t *request, nvfp4_mla_config_t **out) {
    (void)request;
    *out = (nvfp4_mla_config_t *)&mock_config_object;
    return NVFP4_MLA_OK;
}

static nvfp4_mla_status_t mock_config_info(const nvfp4_mla_config_t *config, nvfp4_mla_config_info_t *info) {
    (void)config;
    int per_token = getenv("VLLM_NVFP4_MLA_DYNAMIC_SCALE") != NULL;
    const char *policy = getenv("NVFP4_MLA_WRITER_POLICY");
    nvfp4_mla_config_info_t full = {sizeof full, 1, NVFP4_MLA_LAYOUT_FP8_ROPE_368,
                                    per_token ? NVFP4_MLA_SCALE_PER_TOKEN : NVFP4_MLA_SCALE_STATIC,
                                    per_token ? NVFP4_MLA_SCALE_SOURCE_PER_TOKEN : NVFP4_MLA_SCALE_SOURCE_NONE,
                                    0, "mock-identity", "", policy && policy[0] == 'm', 0};
#if MOCK_MINOR == 0
    /* A 1.0 plugin knows no writer policy: it fills the 1.0 struct and says so. */
    full.struct_size = offsetof(nvfp4_mla_config_info_t, writer_policy);
    memcpy(info, &full, full.struct_size);
#else
    *info = full;
#endif
    return NVFP4_MLA_OK;
}

static nvfp4_mla_status_t mock_config_layer_scale(const nvfp4_mla_config_t *config, uint32_t layer, float *scale) {
    (void)config, (void)layer;
    *scale = 1.0f;
    return NVFP4_MLA_OK;
}

static void mock_config_destroy(nvfp4_mla_config_t *config) {
    (void)config;
}

static nvfp4_mla_status_t mock_write(nvfp4_mla_context_t *ctx, const nvfp4_mla_write_args_t *args) {
    (void)ctx, (void)args;
    return NVFP4_MLA_ERR_UNSUPPORTED;
}

static nvfp4_mla_status_t mock_gather(nvfp4_mla_context_t *ctx, const nvfp4_mla_gather_args_t *args) {
    (void)ctx, (void)args;
    return NVFP4_MLA_ERR_UNSUPPORTED;
}

static nvfp4_mla_status_t mock_attend_workspace_bytes(nvfp4_mla_context_t *ctx, const nvfp4_mla_attend_args_t *args,
                                                      uint64_t *bytes) {
    (void)ctx, (void)args, (void)bytes;
    return NVFP4_MLA_ERR_UNSUPPORTED;
}

static nvfp4_mla_status_t mock_attend(nvfp4_mla_context_t *ctx, const nvfp4_mla_attend_args_t *args) {
    (void)ctx, (void)args;
    return NVFP4_MLA_ERR_UNSUPPORTED;
}

static nvfp4_mla_status_t mock_merge(nvfp4_mla_context_t *ctx, const nvfp4_mla_merge_args_t *args) {
    (void)ctx, (void)args;
    return NVFP4_MLA_ERR_UNSUPPORTED;
}

/* Not const: MOCK_NULL_MEMBER clears one member at the first call. */
static mock_table_t table = {
    .v1 = {
        .header = {MOCK_MAGIC, MOCK_TABLE_SIZE, MOCK_MAJOR, MOCK_MINOR, 0},
        .plugin_name = "mock",
        .version = "0.0.0-mock",
        .git_revision = "mock",
        .cuda_archs = "",
        .record_format = NVFP4_MLA_RECORD_FORMAT,
        .capability_bits = MOCK_CAPS,
        .capability_count = 2,
        .capabilities = caps,
        .status_string = status_string,
        .last_error = last_error,
        .init = mock_init,
        .shutdown = mock_shutdown,
        .context_info = mock_context_info,
        .config_create = mock_config_create,
        .config_info = mock_config_info,
        .config_layer_scale = mock_config_layer_scale,
        .config_destroy = mock_config_destroy,
        .write = mock_write,
        .gather = mock_gather,
        .attend_workspace_bytes = mock_attend_workspace_bytes,
        .attend = mock_attend,
        .merge = mock_merge,
    },
};

#ifndef MOCK_NO_ENTRY
__attribute__((visibility("default"))) const nvfp4_mla_plugin_t *MOCK_ENTRY_NAME(void) {
#ifdef MOCK_RETURN_NULL
    (void)table;
    return NULL;
#else
#ifdef MOCK_NULL_MEMBER
    table.v1.MOCK_NULL_MEMBER = NULL;
#endif
    return &table.v1;
#endif
}
#else
__attribute__((visibility("default"))) int not_a_plugin(void) {
    return table.v1.header.abi_major;
}
#endif
