/* The C host loader (see nvfp4_mla_loader.h). */
#include "nvfp4_mla_loader.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int say(char *message, size_t size, int result, const char *fmt, ...) {
    if (message && size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(message, size, fmt, ap);
        va_end(ap);
    }
    return result;
}

const char *nvfp4_mla_loader_cap_name(uint64_t bit) {
    return nvfp4_mla_capability_name(bit);
}

/* A folder selection means the plugin file inside it. */
static int resolve_path(const char *selection, char *path, size_t size) {
    struct stat st;
    if (stat(selection, &st) == 0 && S_ISDIR(st.st_mode)) {
        return (size_t)snprintf(path, size, "%s/%s", selection, NVFP4_MLA_PLUGIN_FILE) < size ? 0 : -1;
    }
    return (size_t)snprintf(path, size, "%s", selection) < size ? 0 : -1;
}

int nvfp4_mla_loader_open(nvfp4_mla_loader_t *loader, const char *selection, char *message, size_t size) {
    memset(loader, 0, sizeof *loader);
    if (!selection) {
        selection = secure_getenv(NVFP4_MLA_PLUGIN_ENV);
    }
    if (!selection || !selection[0]) {
        return say(message, size, NVFP4_MLA_LOAD_NOT_SELECTED,
                   "no nvfp4-mla plugin selected (set %s to the plugin file or its folder)", NVFP4_MLA_PLUGIN_ENV);
    }
    if (strcmp(selection, "none") == 0) {
        return say(message, size, NVFP4_MLA_LOAD_DISABLED, "nvfp4-mla plugin disabled (%s=none)", NVFP4_MLA_PLUGIN_ENV);
    }
    if (resolve_path(selection, loader->path, sizeof loader->path)) {
        return say(message, size, NVFP4_MLA_LOAD_FAILED, "nvfp4-mla plugin path is too long: %s", selection);
    }
    void *handle = dlopen(loader->path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *why = dlerror();
        return say(message, size, NVFP4_MLA_LOAD_FAILED, "cannot load nvfp4-mla plugin %s: %s", loader->path,
                   why ? why : "unknown dlopen error");
    }
    void *symbol = dlsym(handle, NVFP4_MLA_ENTRY_SYMBOL);
    nvfp4_mla_entry_fn entry = NULL;
    memcpy(&entry, &symbol, sizeof entry); /* POSIX: a data pointer from dlsym names a function */
    if (!symbol) {
        int other_major = dlsym(handle, "nvfp4_mla_plugin_v2") != NULL;
        dlclose(handle);
        return say(message, size, NVFP4_MLA_LOAD_FAILED,
                   "nvfp4-mla plugin %s does not export %s (host ABI %d.%d)%s", loader->path, NVFP4_MLA_ENTRY_SYMBOL,
                   NVFP4_MLA_ABI_MAJOR, NVFP4_MLA_ABI_MINOR,
                   other_major ? "; it implements ABI major 2 only: upgrade the host" : "; it is not an nvfp4-mla plugin");
    }
    const nvfp4_mla_plugin_t *t = entry();
    const char *refusal = NULL;
    char detail[256] = "";
    if (!t) {
        refusal = "its entry returned no table";
    } else if (t->header.magic != NVFP4_MLA_ABI_MAGIC) {
        refusal = "wrong magic";
        snprintf(detail, sizeof detail, " (0x%08x, expected 0x%08x)", t->header.magic, NVFP4_MLA_ABI_MAGIC);
    } else if (t->header.abi_major != NVFP4_MLA_ABI_MAJOR) {
        refusal = "ABI major mismatch";
        snprintf(detail, sizeof detail, " (plugin ABI %u.%u, host ABI %d.%d)", t->header.abi_major,
                 t->header.abi_minor, NVFP4_MLA_ABI_MAJOR, NVFP4_MLA_ABI_MINOR);
    } else if (t->header.struct_size < NVFP4_MLA_TABLE_MIN_SIZE) {
        refusal = "table too small";
        snprintf(detail, sizeof detail, " (struct_size %u < %zu; plugin ABI %u.%u, host ABI %d.%d)",
                 t->header.struct_size, (size_t)NVFP4_MLA_TABLE_MIN_SIZE, t->header.abi_major, t->header.abi_minor,
                 NVFP4_MLA_ABI_MAJOR, NVFP4_MLA_ABI_MINOR);
    }
    if (refusal) {
        dlclose(handle);
        return say(message, size, NVFP4_MLA_LOAD_FAILED, "nvfp4-mla plugin %s refused: %s%s", loader->path, refusal,
                   detail);
    }
    loader->handle = handle;
    loader->table = t;
    return say(message, size, NVFP4_MLA_LOAD_OK, "nvfp4-mla plugin %s (ABI %u.%u, host ABI %d.%d) loaded",
               loader->path, t->header.abi_major, t->header.abi_minor, NVFP4_MLA_ABI_MAJOR, NVFP4_MLA_ABI_MINOR);
}

void nvfp4_mla_loader_close(nvfp4_mla_loader_t *loader) {
    if (loader->handle) {
        dlclose(loader->handle);
    }
    loader->handle = NULL;
    loader->table = NULL;
}

uint64_t nvfp4_mla_requirement_caps(const nvfp4_mla_requirement_t *want) {
    uint64_t need = NVFP4_MLA_CAP_OP_WRITE | NVFP4_MLA_CAP_OP_GATHER | want->extra_caps;
    need |= want->layout == NVFP4_MLA_LAYOUT_FP8_ROPE_368 ? NVFP4_MLA_CAP_LAYOUT_FP8_ROPE_368
                                                          : NVFP4_MLA_CAP_LAYOUT_BF16_ROPE_432;
    if (want->scale_mode == NVFP4_MLA_SCALE_PER_TOKEN) {
        need |= NVFP4_MLA_CAP_WRITE_PER_TOKEN_SCALE | NVFP4_MLA_CAP_READ_LATENT_SCALE_PER_TOKEN;
    } else {
        need |= NVFP4_MLA_CAP_SCALE_STATIC_OUTER;
    }
    return need;
}

uint64_t nvfp4_mla_loader_table_caps(const nvfp4_mla_loader_t *loader) {
    const nvfp4_mla_plugin_t *t = loader->table;
    if (!t) {
        return 0;
    }
    uint64_t bits = t->capability_bits;
    if (!NVFP4_MLA_TABLE_HAS(t, write)) {
        bits &= ~NVFP4_MLA_CAP_OP_WRITE;
    }
    if (!NVFP4_MLA_TABLE_HAS(t, gather)) {
        bits &= ~NVFP4_MLA_CAP_OP_GATHER;
    }
    if (!NVFP4_MLA_TABLE_HAS(t, attend)) {
        bits &= ~NVFP4_MLA_CAP_OP_ATTEND;
    }
    if (!NVFP4_MLA_TABLE_HAS(t, config_destroy)) {
        bits &= ~NVFP4_MLA_CAP_CONFIG_CACHE_IDENTITY;
    }
    return bits;
}

int nvfp4_mla_loader_require(const nvfp4_mla_loader_t *loader, const nvfp4_mla_requirement_t *want, uint64_t available,
                             char *message, size_t size) {
    const nvfp4_mla_plugin_t *t = loader->table;
    if (!t) {
        return say(message, size, -1, "no nvfp4-mla plugin is loaded");
    }
    uint64_t missing = nvfp4_mla_requirement_caps(want) & ~available;
    const char *mode = want->scale_mode == NVFP4_MLA_SCALE_PER_TOKEN ? "per-token" : "static";
    const char *layout = want->layout == NVFP4_MLA_LAYOUT_FP8_ROPE_368 ? "fp8_rope_368" : "bf16_rope_432";
    if (!missing) {
        return say(message, size, 0, "nvfp4-mla plugin %s (ABI %u.%u, host ABI %d.%d) serves %s scales on %s",
                   loader->path, t->header.abi_major, t->header.abi_minor, NVFP4_MLA_ABI_MAJOR, NVFP4_MLA_ABI_MINOR,
                   mode, layout);
    }
    char names[512] = "";
    size_t used = 0;
    for (int b = 0; b < 64; b++) {
        uint64_t bit = UINT64_C(1) << b;
        if ((missing & bit) && used < sizeof names) {
            used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "",
                                     nvfp4_mla_loader_cap_name(bit));
        }
    }
    return say(message, size, -1,
               "nvfp4-mla plugin %s (ABI %u.%u, host ABI %d.%d) cannot serve %s scales on %s%s: missing %s",
               loader->path, t->header.abi_major, t->header.abi_minor, NVFP4_MLA_ABI_MAJOR, NVFP4_MLA_ABI_MINOR, mode,
               layout, want->user_requested ? " (requested by the configuration)" : "", names);
}

int nvfp4_mla_loader_cache_identity(const nvfp4_mla_loader_t *loader, const char *cache_dtype, const char *model_dir,
                                    char *identity, size_t size) {
    const nvfp4_mla_plugin_t *t = loader->table;
    if (!t || !NVFP4_MLA_TABLE_HAS(t, config_destroy)) {
        return say(identity, size, -1, "no nvfp4-mla plugin with a cache configuration is loaded");
    }
    nvfp4_mla_config_request_t req = {sizeof req, 0, cache_dtype, model_dir, NULL, NULL, {0}};
    nvfp4_mla_config_t *cfg = NULL;
    if (t->config_create(&req, &cfg) != NVFP4_MLA_OK) {
        return say(identity, size, -1, "%s", t->last_error());
    }
    nvfp4_mla_config_info_t info = {.struct_size = sizeof info};
    int rc = t->config_info(cfg, &info) == NVFP4_MLA_OK ? say(identity, size, 0, "%s", info.identity)
                                                        : say(identity, size, -1, "%s", t->last_error());
    t->config_destroy(cfg);
    return rc;
}
