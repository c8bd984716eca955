/* A mock plugin, built several times with different defines to form the loader's compatibility
 * matrix (tests/meson.build lists the variants):
 *   MOCK_MAGIC, MOCK_MAJOR, MOCK_MINOR   header values
 *   MOCK_TABLE_SIZE                      header.struct_size (smaller = older minor, larger = newer)
 *   MOCK_CAPS                            capability bits
 *   MOCK_ENTRY_NAME                      exported symbol (nvfp4_mla_plugin_v2 = a future major only)
 *   MOCK_RETURN_NULL                     the entry returns NULL
 *   MOCK_NO_ENTRY                        a shared object that is not a plugin at all */
#include <stddef.h>

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
    return "";
}

static const mock_table_t table = {
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
    },
};

#ifndef MOCK_NO_ENTRY
__attribute__((visibility("default"))) const nvfp4_mla_plugin_t *MOCK_ENTRY_NAME(void) {
#ifdef MOCK_RETURN_NULL
    (void)table;
    return NULL;
#else
    return &table.v1;
#endif
}
#else
__attribute__((visibility("default"))) int not_a_plugin(void) {
    return table.v1.header.abi_major;
}
#endif
