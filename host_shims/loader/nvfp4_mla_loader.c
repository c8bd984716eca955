/* The C host loader (see nvfp4_mla_loader.h). */
#include "nvfp4_mla_loader.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "settings.h"

static int say(char *message, size_t size, int result, const char *fmt, ...) {
    if (message && size) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(message, size, fmt, ap);
        va_end(ap);
    }
    return result;
}

int nvfp4_mla_loader_writer_policy(const char *const *environ, uint32_t *policy, char *message,
                                    size_t message_size) {
    nvfp4_setting_value_t value = {0};
    char why[NVFP4_SETTING_MESSAGE_MAX];
    *policy = NVFP4_MLA_WRITER_POLICY_RTN;
    if (nvfp4_setting_read(NVFP4_SETTING_WRITER_POLICY, environ, &value, why, sizeof why)) {
        return say(message, message_size, -1, "%s", why);
    }
    *policy = (uint32_t)value.index; /* the row's names are the policies in id order */
    say(message, message_size, 0, "");
    return 0;
}

const char *nvfp4_mla_loader_cap_name(uint64_t bit) {
    return nvfp4_mla_capability_name(bit);
}

#define SELECTED -1 /* select_plugin's "go on": loader->path names the file to open */

/* Values a user may have meant as a switch; refused (when no such file exists) rather than reported
 * as a missing plugin file, because "none" alone disables the plugin. */
static int keyword_like(const char *s) {
    static const char *const words[] = {"none", "0",  "1",   "false",   "true",    "off",
                                        "on",   "no", "yes", "disable", "disabled"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        if (strcasecmp(s, words[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

static int refuse(nvfp4_mla_loader_t *loader, const char *reason, int outcome, char *message, size_t size,
                  const char *text) {
    loader->reason = reason;
    return say(message, size, outcome, "%s", text);
}

/* The selection rule (plugin/settings.h for the whitespace part): unset or "" is no selection,
 * "none" disables, a folder means the plugin file inside it. */
static int select_plugin(nvfp4_mla_loader_t *loader, const char *selection, char *message, size_t size) {
    const char *name = selection ? "plugin selection" : NVFP4_MLA_PLUGIN_ENV;
    char text[NVFP4_SETTING_MESSAGE_MAX + 64], checked[sizeof loader->path - sizeof NVFP4_MLA_PLUGIN_FILE - 1];
    selection = selection ? selection : nvfp4_setting_lookup(NULL, nvfp4_settings[NVFP4_SETTING_PLUGIN].name);
    if (!selection || !selection[0]) {
        snprintf(text, sizeof text, "no nvfp4-mla plugin selected (set %s to the plugin file or its folder)",
                 NVFP4_MLA_PLUGIN_ENV);
        return refuse(loader, NVFP4_MLA_REASON_NOT_SELECTED, NVFP4_MLA_LOAD_NOT_SELECTED, message, size, text);
    }
    if (strcmp(selection, "none") == 0) {
        snprintf(text, sizeof text, "nvfp4-mla plugin disabled (%s=none)", NVFP4_MLA_PLUGIN_ENV);
        return refuse(loader, NVFP4_MLA_REASON_DISABLED, NVFP4_MLA_LOAD_DISABLED, message, size, text);
    }
    if (nvfp4_setting_path(name, selection, checked, sizeof checked, text, sizeof text)) {
        return refuse(loader, NVFP4_MLA_REASON_INVALID_SELECTION, NVFP4_MLA_LOAD_FAILED, message, size, text);
    }
    struct stat st;
    int exists = stat(checked, &st) == 0;
    if (!exists && keyword_like(checked)) {
        char quoted[NVFP4_SETTING_QUOTED_MAX];
        nvfp4_setting_quote(checked, quoted, sizeof quoted);
        snprintf(text, sizeof text,
                 "%s=%s names no file and is not the keyword \"none\" (exactly, lower case), which disables the "
                 "plugin: give the plugin file or its folder",
                 name, quoted);
        return refuse(loader, NVFP4_MLA_REASON_INVALID_SELECTION, NVFP4_MLA_LOAD_FAILED, message, size, text);
    }
    /* A name without a slash is a file in the working folder: dlopen would search the loader's path
     * for it instead (LD_LIBRARY_PATH, ld.so.cache, /lib: "libc.so.6" loaded the system libc). */
    snprintf(loader->path, sizeof loader->path,
             exists && S_ISDIR(st.st_mode) ? "%s/" NVFP4_MLA_PLUGIN_FILE : strchr(checked, '/') ? "%s" : "./%s",
             checked);
    return SELECTED;
}

/* The first member the table's struct_size covers but leaves NULL, or NULL when all are set. A host
 * calls these without looking again, so a NULL one would crash it at address 0. */
static const char *null_member(const nvfp4_mla_plugin_t *t) {
#define NVFP4_NULL_IF_COVERED(member)                                                                    \
    if (NVFP4_MLA_TABLE_HAS(t, member) && !t->member) {                                                  \
        return #member;                                                                                  \
    }
    NVFP4_NULL_IF_COVERED(plugin_name)
    NVFP4_NULL_IF_COVERED(version)
    NVFP4_NULL_IF_COVERED(git_revision)
    NVFP4_NULL_IF_COVERED(cuda_archs)
    NVFP4_NULL_IF_COVERED(record_format)
    NVFP4_NULL_IF_COVERED(status_string)
    NVFP4_NULL_IF_COVERED(last_error)
    NVFP4_NULL_IF_COVERED(init)
    NVFP4_NULL_IF_COVERED(shutdown)
    NVFP4_NULL_IF_COVERED(context_info)
    NVFP4_NULL_IF_COVERED(config_create)
    NVFP4_NULL_IF_COVERED(config_info)
    NVFP4_NULL_IF_COVERED(config_layer_scale)
    NVFP4_NULL_IF_COVERED(config_destroy)
    NVFP4_NULL_IF_COVERED(write)
    NVFP4_NULL_IF_COVERED(gather)
    NVFP4_NULL_IF_COVERED(attend_workspace_bytes)
    NVFP4_NULL_IF_COVERED(attend)
    NVFP4_NULL_IF_COVERED(merge)
#undef NVFP4_NULL_IF_COVERED
    return t->capability_count && !t->capabilities ? "capabilities" : NULL;
}

/* Why the table is refused (and *reason, and words in `detail`), or NULL when it is usable. */
static const char *check_table(const nvfp4_mla_plugin_t *t, const char **reason, char *detail, size_t size) {
    const char *member;
    detail[0] = '\0';
    *reason = NVFP4_MLA_REASON_NOT_A_PLUGIN;
    if (!t) {
        return "its entry returned no table";
    }
    if (t->header.magic != NVFP4_MLA_ABI_MAGIC) {
        snprintf(detail, size, " (0x%08x, expected 0x%08x)", t->header.magic, NVFP4_MLA_ABI_MAGIC);
        return "wrong magic";
    }
    *reason = NVFP4_MLA_REASON_ABI_MISMATCH;
    if (t->header.abi_major != NVFP4_MLA_ABI_MAJOR) {
        snprintf(detail, size, " (plugin ABI %u.%u, host ABI %d.%d)", t->header.abi_major, t->header.abi_minor,
                 NVFP4_MLA_ABI_MAJOR, NVFP4_MLA_ABI_MINOR);
        return "ABI major mismatch";
    }
    if (t->header.struct_size < NVFP4_MLA_TABLE_MIN_SIZE) {
        snprintf(detail, size, " (struct_size %u < %zu; plugin ABI %u.%u, host ABI %d.%d)", t->header.struct_size,
                 (size_t)NVFP4_MLA_TABLE_MIN_SIZE, t->header.abi_major, t->header.abi_minor, NVFP4_MLA_ABI_MAJOR,
                 NVFP4_MLA_ABI_MINOR);
        return "table too small";
    }
    if ((member = null_member(t))) {
        *reason = NVFP4_MLA_REASON_INCOMPLETE_TABLE;
        snprintf(detail, size, " \"%s\" is NULL (plugin ABI %u.%u, host ABI %d.%d; every member its struct_size %u "
                               "covers must be set)",
                 member, t->header.abi_major, t->header.abi_minor, NVFP4_MLA_ABI_MAJOR, NVFP4_MLA_ABI_MINOR,
                 t->header.struct_size);
        return "table member";
    }
    return NULL;
}

int nvfp4_mla_loader_open(nvfp4_mla_loader_t *loader, const char *selection, char *message, size_t size) {
    memset(loader, 0, sizeof *loader);
    int selected = select_plugin(loader, selection, message, size);
    if (selected != SELECTED) {
        return selected;
    }
    void *handle = dlopen(loader->path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *why = dlerror();
        struct stat st;
        int missing = stat(loader->path, &st) != 0 && errno == ENOENT; /* loader->path always holds a '/' */
        loader->reason = missing ? NVFP4_MLA_REASON_NOT_FOUND : NVFP4_MLA_REASON_LOAD_ERROR;
        return say(message, size, NVFP4_MLA_LOAD_FAILED, "cannot load nvfp4-mla plugin %s: %s", loader->path,
                   why ? why : "unknown dlopen error");
    }
    void *symbol = dlsym(handle, NVFP4_MLA_ENTRY_SYMBOL);
    nvfp4_mla_entry_fn entry = NULL;
    memcpy(&entry, &symbol, sizeof entry); /* POSIX: a data pointer from dlsym names a function */
    if (!symbol) {
        int other_major = dlsym(handle, "nvfp4_mla_plugin_v2") != NULL;
        dlclose(handle);
        loader->reason = other_major ? NVFP4_MLA_REASON_ABI_MISMATCH : NVFP4_MLA_REASON_NOT_A_PLUGIN;
        return say(message, size, NVFP4_MLA_LOAD_FAILED, "nvfp4-mla plugin %s does not export %s (host ABI %d.%d)%s",
                   loader->path, NVFP4_MLA_ENTRY_SYMBOL, NVFP4_MLA_ABI_MAJOR, NVFP4_MLA_ABI_MINOR,
                   other_major ? "; it implements ABI major 2 only: upgrade the host"
                               : "; it is not an nvfp4-mla plugin");
    }
    const nvfp4_mla_plugin_t *t = entry();
    char detail[256];
    const char *reason, *refusal = check_table(t, &reason, detail, sizeof detail);
    if (refusal) {
        dlclose(handle);
        loader->reason = reason;
        return say(message, size, NVFP4_MLA_LOAD_FAILED, "nvfp4-mla plugin %s refused: %s%s", loader->path, refusal,
                   detail);
    }
    loader->handle = handle;
    loader->table = t;
    loader->reason = NVFP4_MLA_REASON_NONE;
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
    const uint64_t ops = NVFP4_MLA_CAP_OP_WRITE | NVFP4_MLA_CAP_OP_GATHER | NVFP4_MLA_CAP_OP_ATTEND;
    const uint64_t called = NVFP4_MLA_CAP_OP_WRITE | NVFP4_MLA_CAP_OP_GATHER | (want->extra_caps & ops);
    return nvfp4_mla_caps_needed(called, want->layout, want->scale_mode) | want->extra_caps;
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
    if (!NVFP4_MLA_TABLE_HAS(t, merge)) {
        bits &= ~NVFP4_MLA_CAP_OP_MERGE_PARTIALS;
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
    const char *layout = nvfp4_mla_layout_name(want->layout);
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
