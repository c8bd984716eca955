/* nvfp4-mla probe: load a plugin as a runtime does and say what it is, what it can do, and whether
 * it serves the cache configuration in this environment. Exit 0 when it does, 1 when refused. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void log_to_stderr(void *user, int32_t level, const char *message) {
    (void)user;
    fprintf(stderr, "[%s] %s\n", level <= NVFP4_MLA_LOG_ERROR ? "error" : level == NVFP4_MLA_LOG_WARN ? "warn" : "info",
            message);
}

static const char *source_name(uint32_t source) {
    static const char *const names[] = {"none (every layer 1.0)", "environment (VLLM_NVFP4_MLA_SCALES_FILE)",
                                        "checkpoint config.json (inline)", "checkpoint sidecar file",
                                        "per-token (records carry s_t)"};
    return source < sizeof names / sizeof names[0] ? names[source] : "unknown";
}

static cJSON *caps_json(uint64_t bits) {
    cJSON *list = cJSON_CreateArray();
    for (int b = 0; b < 64; b++) {
        if (bits & (UINT64_C(1) << b)) {
            cJSON_AddItemToArray(list, cJSON_CreateString(nvfp4_mla_loader_cap_name(UINT64_C(1) << b)));
        }
    }
    return list;
}

static void print_caps(const char *title, uint64_t bits) {
    printf("%-22s", title);
    for (int b = 0; b < 64; b++) {
        if (bits & (UINT64_C(1) << b)) {
            printf(" %s", nvfp4_mla_loader_cap_name(UINT64_C(1) << b));
        }
    }
    printf("\n");
}

/* Runtime capabilities of a context on (type, index); 0 bits and a note when init fails. */
static uint64_t runtime_caps(const nvfp4_mla_plugin_t *t, int32_t type, int32_t index, char *note, size_t size) {
    nvfp4_mla_init_args_t init = {sizeof init, type, index, 0, NULL, {0}, NULL};
    nvfp4_mla_context_t *ctx = NULL;
    if (t->init(&init, &ctx) != NVFP4_MLA_OK) {
        snprintf(note, size, "%s", t->last_error());
        return 0;
    }
    nvfp4_mla_context_info_t info = {.struct_size = sizeof info};
    uint64_t bits = 0;
    if (t->context_info(ctx, &info) == NVFP4_MLA_OK) {
        bits = info.capability_bits;
        snprintf(note, size, "%s", info.device_name);
    }
    t->shutdown(ctx);
    return bits;
}

/* A load failure as JSON: what a script needs to tell a missing file from an ABI mismatch. */
static void print_load_failure(const nvfp4_mla_loader_t *loader, const char *message) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "loaded", 0);
    cJSON_AddBoolToObject(o, "accepted", 0);
    cJSON_AddStringToObject(o, "reason", loader->reason);
    cJSON_AddStringToObject(o, "message", message);
    if (loader->path[0]) {
        cJSON_AddStringToObject(o, "path", loader->path);
    }
    char *text = cJSON_Print(o);
    printf("%s\n", text ? text : "{\"loaded\": false}");
    free(text);
    cJSON_Delete(o);
}

/* The writer policies a table serves: rtn always (every writer is one), the others by capability. */
static int policy_served(const nvfp4_mla_loader_t *loader, uint32_t policy) {
    const uint64_t cap = nvfp4_mla_writer_policy_cap(policy);
    return !cap || (nvfp4_mla_loader_table_caps(loader) & cap) == cap;
}

static void print_policies(const nvfp4_mla_loader_t *loader) {
    for (uint32_t p = 0, n = 0; p < NVFP4_MLA_WRITER_POLICY_COUNT; p++) {
        if (policy_served(loader, p)) printf("%s%s", n++ ? ", " : "", nvfp4_mla_writer_policy_name(p));
    }
}

/* What probe found: the loaded plugin, its runtime capabilities and the configuration decision. */
typedef struct probe {
    nvfp4_mla_loader_t loader;
    const char *dtype;
    uint64_t cpu_bits, cuda_bits;
    char cpu_note[256], cuda_note[512];
    nvfp4_mla_config_t *cfg;      /* NULL when the configuration was refused; owned */
    nvfp4_mla_config_info_t info; /* valid with cfg */
    int has_policy;               /* the plugin filled info.writer_policy (ABI 1.1 and later) */
    const char *reason;           /* NULL when accepted, else "config_error" or "missing_capability" */
    char decision[8192];
} probe_t;

/* The writer policy the configuration takes: rtn from a plugin older than writer policies. */
static uint32_t writer_policy(const probe_t *p) {
    return p->has_policy ? p->info.writer_policy : NVFP4_MLA_WRITER_POLICY_RTN;
}

/* The decision for the configuration in this environment. */
static void decide(probe_t *p, const char *model_dir, int quiet) {
    const nvfp4_mla_plugin_t *t = p->loader.table;
    nvfp4_mla_host_desc_t host = {sizeof host, 0, "nvfp4-mla probe", quiet ? NULL : log_to_stderr, NULL};
    /* environ NULL: the plugin reads the process environment itself (config_create), by its own rule. */
    nvfp4_mla_config_request_t req = {sizeof req, 0, p->dtype, model_dir, NULL, &host, {0}};
    uint32_t asked = NVFP4_MLA_WRITER_POLICY_RTN;
    char why[1024];
    p->info = (nvfp4_mla_config_info_t){.struct_size = sizeof p->info};
    if (!NVFP4_MLA_TABLE_HAS(t, config_destroy)) {
        p->reason = "missing_capability";
        snprintf(p->decision, sizeof p->decision, "plugin %s has no configuration entries (config.cache_identity)",
                 p->loader.path);
    } else if (t->config_create(&req, &p->cfg) != NVFP4_MLA_OK || t->config_info(p->cfg, &p->info) != NVFP4_MLA_OK) {
        p->reason = "config_error";
        snprintf(p->decision, sizeof p->decision, "configuration refused: %s", t->last_error());
        if (p->cfg) {
            t->config_destroy(p->cfg);
            p->cfg = NULL;
        }
    } else if (!(p->has_policy = p->info.struct_size >= sizeof p->info) &&
               nvfp4_mla_loader_writer_policy(NULL, &asked, why, sizeof why)) {
        /* A plugin older than writer policies ignores the variable and cannot report it: the
         * loader reads it by the plugin's rule, so that the user's request does not vanish. */
        p->reason = "config_error";
        snprintf(p->decision, sizeof p->decision, "configuration refused: %s", why);
    } else if (!p->has_policy && asked != NVFP4_MLA_WRITER_POLICY_RTN) {
        p->reason = "missing_capability";
        snprintf(p->decision, sizeof p->decision,
                 "plugin %s (ABI %u.%u) has no writer policies, but NVFP4_MLA_WRITER_POLICY=\"%s\" asks for one",
                 p->loader.path, t->header.abi_major, t->header.abi_minor, nvfp4_mla_writer_policy_name(asked));
    } else if (!p->info.is_nvfp4) {
        snprintf(p->decision, sizeof p->decision, "cache dtype %s does not use the plugin", p->dtype);
    } else {
        const uint32_t policy = writer_policy(p);
        nvfp4_mla_requirement_t want = {p->info.layout, p->info.scale_mode, nvfp4_mla_writer_policy_cap(policy),
                                        p->info.scale_source != NVFP4_MLA_SCALE_SOURCE_NONE ||
                                            policy != NVFP4_MLA_WRITER_POLICY_RTN};
        if (nvfp4_mla_loader_require(&p->loader, &want, nvfp4_mla_loader_table_caps(&p->loader), p->decision,
                                     sizeof p->decision) != 0) {
            p->reason = "missing_capability";
        }
    }
}

static void print_json(const probe_t *p) {
    const nvfp4_mla_plugin_t *t = p->loader.table;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "loaded", 1);
    cJSON_AddStringToObject(o, "path", p->loader.path);
    char abi[32];
    snprintf(abi, sizeof abi, "%u.%u", t->header.abi_major, t->header.abi_minor);
    cJSON_AddStringToObject(o, "abi", abi);
    snprintf(abi, sizeof abi, "%d.%d", NVFP4_MLA_ABI_MAJOR, NVFP4_MLA_ABI_MINOR);
    cJSON_AddStringToObject(o, "host_abi", abi);
    cJSON_AddStringToObject(o, "version", t->version);
    cJSON_AddStringToObject(o, "git_revision", t->git_revision);
    cJSON_AddStringToObject(o, "cuda_archs", t->cuda_archs);
    cJSON *caps = cJSON_AddArrayToObject(o, "capabilities");
    for (uint32_t i = 0; i < t->capability_count; i++) {
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "name", t->capabilities[i].name);
        cJSON_AddNumberToObject(c, "revision", t->capabilities[i].revision);
        cJSON_AddItemToArray(caps, c);
    }
    cJSON_AddItemToObject(o, "runtime_cpu", caps_json(p->cpu_bits));
    cJSON_AddItemToObject(o, "runtime_cuda0", caps_json(p->cuda_bits));
    cJSON_AddStringToObject(o, "cuda0_note", p->cuda_note);
    cJSON *policies = cJSON_AddArrayToObject(o, "writer_policies");
    for (uint32_t w = 0; w < NVFP4_MLA_WRITER_POLICY_COUNT; w++) {
        if (policy_served(&p->loader, w)) {
            cJSON_AddItemToArray(policies, cJSON_CreateString(nvfp4_mla_writer_policy_name(w)));
        }
    }
    if (p->cfg) {
        cJSON_AddStringToObject(o, "writer_policy",
                                nvfp4_mla_writer_policy_name(writer_policy(p)));
        cJSON_AddStringToObject(o, "cache_identity", p->info.identity);
        cJSON_AddStringToObject(o, "scale_source", source_name(p->info.scale_source));
        cJSON_AddStringToObject(o, "scale_source_path", p->info.scale_source_path);
        cJSON_AddNumberToObject(o, "calibrated_layers", p->info.num_layers);
    }
    cJSON_AddBoolToObject(o, "accepted", !p->reason);
    cJSON_AddStringToObject(o, "decision", p->decision);
    if (p->reason) {
        cJSON_AddStringToObject(o, "reason", p->reason);
        cJSON_AddStringToObject(o, "message", p->decision);
    }
    char *text = cJSON_Print(o);
    printf("%s\n", text);
    free(text);
    cJSON_Delete(o);
}

static void print_text(const probe_t *p) {
    const nvfp4_mla_plugin_t *t = p->loader.table;
    printf("plugin                %s\n", p->loader.path);
    printf("ABI                   %u.%u (host %d.%d), table %u bytes\n", t->header.abi_major, t->header.abi_minor,
           NVFP4_MLA_ABI_MAJOR, NVFP4_MLA_ABI_MINOR, t->header.struct_size);
    printf("build                 %s %s (git %s), CUDA archs: %s\n", t->plugin_name, t->version, t->git_revision,
           t->cuda_archs[0] ? t->cuda_archs : "none");
    printf("capabilities          ");
    for (uint32_t i = 0; i < t->capability_count; i++) {
        printf("%s%s r%u", i ? ", " : "", t->capabilities[i].name, t->capabilities[i].revision);
    }
    printf("\n");
    print_caps("runtime (cpu)", p->cpu_bits);
    if (p->cuda_bits) {
        print_caps("runtime (cuda:0)", p->cuda_bits);
    } else if (!t->cuda_archs[0]) { /* not a failure: the build has no CUDA code to run (issue 58) */
        printf("runtime (cuda:0)      not built: a CPU-only plugin (CUDA archs: none)\n");
    } else {
        printf("runtime (cuda:0)      none: %s\n", p->cuda_note);
    }
    if (p->cfg) {
        printf("cache dtype           %s\n", p->dtype);
        printf("cache identity        %s\n", p->info.identity);
        printf("outer scales          %s%s%s, %u calibrated layers\n", source_name(p->info.scale_source),
               p->info.scale_source_path[0] ? " from " : "", p->info.scale_source_path, p->info.num_layers);
        printf("writer policy         %s%s (available: ",
               nvfp4_mla_writer_policy_name(writer_policy(p)),
               p->has_policy ? "" : " (the plugin predates writer policies)");
        print_policies(&p->loader);
        printf("; NVFP4_MLA_WRITER_POLICY; not part of the cache identity)\n");
    }
    printf("decision              %s: %s\n", p->reason ? "REFUSED" : "accepted", p->decision);
}

/* The KV-cache dtypes a runtime names (vLLM's CacheDType, whose identity rule the plugin keeps, and
 * this record's): probe asks about one of them. The plugin itself takes any name, and answers
 * "does not use the plugin" for all but nvfp4_ds_mla, which for a typo ("nvfp4_ds_mal", "") would
 * accept a configuration nobody asked about. A "torch." prefix is taken, as the plugin takes it. */
static const char *const cache_dtypes[] = {NVFP4_MLA_RECORD_FORMAT, "auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2",
                                           "fp8_inc", "fp8_ds_mla"};

static int check_cache_dtype(const char *dtype) {
    const char *name = strncmp(dtype, "torch.", 6) == 0 ? dtype + 6 : dtype;
    char list[256] = "";
    for (size_t i = 0; i < sizeof cache_dtypes / sizeof cache_dtypes[0]; i++) {
        if (strcmp(name, cache_dtypes[i]) == 0) {
            return 0;
        }
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", cache_dtypes[i]);
    }
    return cli_fail("probe", "--cache-dtype is \"%s\", must be one of: %s", dtype, list);
}

int cli_probe(int argc, char **argv) {
    static probe_t p; /* large; one per process */
    const char *plugin = NULL, *model_dir = NULL;
    int json = 0;
    cli_seen_t seen = {0};
    memset(&p, 0, sizeof p);
    p.dtype = "nvfp4_ds_mla";
    for (int i = 1; i < argc; i++) {
        if (cli_once("probe", &seen, argv[i])) {
            return 1;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (i + 1 < argc && strcmp(argv[i], "--plugin") == 0) {
            plugin = argv[++i];
        } else if (i + 1 < argc && strcmp(argv[i], "--model-dir") == 0) {
            model_dir = argv[++i];
        } else if (i + 1 < argc && strcmp(argv[i], "--cache-dtype") == 0) {
            p.dtype = argv[++i];
        } else {
            return cli_fail("probe", "unknown or incomplete argument %s", argv[i]);
        }
    }
    if (check_cache_dtype(p.dtype)) {
        return 1;
    }
    char message[1024];
    if (cli_loader_open("probe", &p.loader, plugin, message, sizeof message) != NVFP4_MLA_LOAD_OK) {
        if (json) {
            print_load_failure(&p.loader, message);
        }
        return cli_fail("probe", "%s", message);
    }
    const nvfp4_mla_plugin_t *t = p.loader.table;
    p.cpu_bits = runtime_caps(t, NVFP4_MLA_DEVICE_CPU, 0, p.cpu_note, sizeof p.cpu_note);
    p.cuda_bits = runtime_caps(t, NVFP4_MLA_DEVICE_CUDA, 0, p.cuda_note, sizeof p.cuda_note);
    decide(&p, model_dir, json);
    if (json) {
        print_json(&p);
    } else {
        print_text(&p);
    }
    if (p.cfg) {
        t->config_destroy(p.cfg);
    }
    nvfp4_mla_loader_close(&p.loader);
    if (p.reason) {
        fprintf(stderr, "nvfp4-mla probe: %s\n", p.decision);
    }
    return p.reason != NULL;
}
