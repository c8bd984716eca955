/* nvfp4-mla probe: load a plugin as a runtime does and say what it is, what it can do, and whether
 * it serves the cache configuration in this environment. Exit 0 when it does, 1 when refused. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "settings.h"

extern char **environ;

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
    int vllm_fp8_rope;            /* -1, or the layout a vLLM dtype name chooses: 1 for 368, 0 for 432 */
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

/* vLLM's names for this plugin's records (nvfp4_mla.vllm_plugin): the name chooses the layout. */
static const struct {
    const char *name;
    int fp8_rope;
} vllm_dtypes[] = {{"nvfp4_mla368_ds_mla", 1}, {"nvfp4_mla432_ds_mla", 0}};

/* The process environment with KV_FP8_ROPE (and, when `dynamic`, the per-token switch) set as a vLLM
 * dtype name says: the snapshot config_create is given (`env` holds `cap` pointers; `own` the two
 * strings). Returns 0, or -1 when the environment has more variables than `cap` holds. */
static int vllm_snapshot(const probe_t *p, int dynamic, const char **env, size_t cap, char own[2][64]) {
    size_t n = 0;
    snprintf(own[0], sizeof own[0], "%s=%s", NVFP4_ENV_FP8_ROPE, p->vllm_fp8_rope ? "1" : "0");
    snprintf(own[1], sizeof own[1], "%s=1", NVFP4_ENV_DYNAMIC_SCALE);
    for (char **e = environ; e && *e; e++) {
        const size_t rope = strlen(NVFP4_ENV_FP8_ROPE), dyn = strlen(NVFP4_ENV_DYNAMIC_SCALE);
        if ((strncmp(*e, NVFP4_ENV_FP8_ROPE, rope) == 0 && (*e)[rope] == '=') ||
            (dynamic && strncmp(*e, NVFP4_ENV_DYNAMIC_SCALE, dyn) == 0 && (*e)[dyn] == '=')) {
            continue;
        }
        if (n + 3 >= cap) {
            return -1;
        }
        env[n++] = *e;
    }
    env[n++] = own[0];
    if (dynamic) {
        env[n++] = own[1];
    }
    env[n] = NULL;
    return 0;
}

/* A bool row of the process environment; 0 on a bad value (config_create then names it). */
static int env_flag(nvfp4_setting_id_t id, int *set) {
    nvfp4_setting_value_t v = {0};
    char message[NVFP4_SETTING_MESSAGE_MAX];
    const char *raw = nvfp4_setting_lookup(NULL, nvfp4_settings[id].name);
    *set = raw && raw[0];
    return nvfp4_setting_read(id, NULL, &v, message, sizeof message) == 0 && v.on;
}

/* The attention kernel's settings (read by a CUDA context's init): checked here, without a GPU, so
 * that a typo is refused now and not when a serving worker makes its context. 0, or -1 and `why`. */
static int check_init_settings(char *why, size_t size) {
    for (int id = 0; id < NVFP4_SETTINGS; id++) {
        if (strcmp(nvfp4_settings[id].reader, "init") != 0) {
            continue;
        }
        char path[8];
        nvfp4_setting_value_t v = {.path = path, .path_size = sizeof path};
        char message[NVFP4_SETTING_MESSAGE_MAX];
        if (nvfp4_setting_read((nvfp4_setting_id_t)id, NULL, &v, message, sizeof message) != 0) {
            snprintf(why, size, "%s (read by a CUDA context's init)", message);
            return -1;
        }
    }
    return 0;
}

/* After config_create for a vLLM dtype name: the vLLM plugin's rule for a cache nothing calibrates
 * (nvfp4_mla/vllm_plugin/serving.py): per-token scales where the layout has them and the plugin
 * serves them (1: make the configuration again with them), else a refusal unless
 * NVFP4_MLA_UNCALIBRATED=1 (-1 and `why`), else 0 (keep it). */
static int vllm_scales_rule(const probe_t *p, char *why, size_t size) {
    int set = 0;
    const uint64_t per_token = NVFP4_MLA_CAP_WRITE_PER_TOKEN_SCALE | NVFP4_MLA_CAP_READ_LATENT_SCALE_PER_TOKEN;
    if (p->info.scale_source != NVFP4_MLA_SCALE_SOURCE_NONE || env_flag(NVFP4_SETTING_UNCALIBRATED, &set)) {
        return 0;
    }
    if (p->vllm_fp8_rope && (nvfp4_mla_loader_table_caps(&p->loader) & per_token) == per_token) {
        return 1;
    }
    snprintf(why, size,
             "%s: no outer scales (no %s, no nvfp4_mla_outer_scales in the checkpoint) and %s: give a calibration "
             "file (%s=<file>, made by nvfp4-mla calibrate), %sor set %s=1 to serve every layer at outer scale 1.0",
             p->dtype, NVFP4_ENV_SCALES_FILE,
             p->vllm_fp8_rope ? "the plugin does not serve per-token scales" : "the 432-byte record has none per token",
             NVFP4_ENV_SCALES_FILE, p->vllm_fp8_rope ? "" : "serve nvfp4_mla368_ds_mla (per-token scales), ",
             NVFP4_ENV_UNCALIBRATED);
    return -1;
}

/* config_create and config_info into p->cfg and p->info: 0, or -1 (p->cfg may then be set). For a
 * vLLM dtype name that nothing calibrates, the configuration is made again with per-token scales
 * where vllm_scales_rule says so (the vLLM plugin serves that), and the switch is logged. */
static int create_config(probe_t *p, nvfp4_mla_config_request_t *req, const char **env, size_t cap, char own[2][64],
                         int quiet) {
    const nvfp4_mla_plugin_t *t = p->loader.table;
    char why[512]; /* only the rule's verdict is used here; sized so its message fits (no truncation warning) */
    if (t->config_create(req, &p->cfg) != NVFP4_MLA_OK || t->config_info(p->cfg, &p->info) != NVFP4_MLA_OK) {
        return -1;
    }
    if (p->vllm_fp8_rope < 0 || vllm_scales_rule(p, why, sizeof why) != 1 || vllm_snapshot(p, 1, env, cap, own)) {
        if (p->vllm_fp8_rope >= 0 && p->info.scale_source == NVFP4_MLA_SCALE_SOURCE_NONE && !quiet) {
            log_to_stderr(NULL, NVFP4_MLA_LOG_WARN, "every layer's outer scale is 1.0 (" NVFP4_ENV_UNCALIBRATED
                                                    "=1): the vLLM plugin serves this uncalibrated, as asked");
        }
        return 0;
    }
    t->config_destroy(p->cfg);
    p->cfg = NULL;
    if (!quiet) {
        log_to_stderr(NULL, NVFP4_MLA_LOG_INFO, "no calibration: the vLLM plugin serves this dtype with per-token "
                                                "outer scales, which need none");
    }
    p->info = (nvfp4_mla_config_info_t){.struct_size = sizeof p->info};
    return t->config_create(req, &p->cfg) != NVFP4_MLA_OK || t->config_info(p->cfg, &p->info) != NVFP4_MLA_OK ? -1 : 0;
}

/* The decision for the configuration in this environment. */
static void decide(probe_t *p, const char *model_dir, int quiet) {
    const nvfp4_mla_plugin_t *t = p->loader.table;
    nvfp4_mla_host_desc_t host = {sizeof host, 0, "nvfp4-mla probe", quiet ? NULL : log_to_stderr, NULL};
    /* environ NULL: the plugin reads the process environment itself (config_create), by its own rule;
     * a vLLM dtype name passes a snapshot with the layout it chooses. */
    nvfp4_mla_config_request_t req = {sizeof req, 0, p->dtype, model_dir, NULL, &host, {0}};
    static const char *env[4096];
    char own[2][64];
    int rope_set = 0;
    const int rope = env_flag(NVFP4_SETTING_FP8_ROPE, &rope_set);
    uint32_t asked = NVFP4_MLA_WRITER_POLICY_RTN;
    char why[1024];
    p->info = (nvfp4_mla_config_info_t){.struct_size = sizeof p->info};
    if (check_init_settings(why, sizeof why)) {
        p->reason = "config_error";
        snprintf(p->decision, sizeof p->decision, "configuration refused: %s", why);
        return;
    }
    if (p->vllm_fp8_rope >= 0) {
        req.cache_dtype = NVFP4_MLA_RECORD_FORMAT;
        if (rope_set && rope != p->vllm_fp8_rope) {
            p->reason = "config_error";
            snprintf(p->decision, sizeof p->decision,
                     "configuration refused: --cache-dtype %s asks for %d-byte records, but %s=\"%s\" says %d-byte "
                     "records: unset %s (the dtype name chooses the layout), or ask for %s",
                     p->dtype, p->vllm_fp8_rope ? 368 : 432, NVFP4_ENV_FP8_ROPE,
                     nvfp4_setting_lookup(NULL, NVFP4_ENV_FP8_ROPE), rope ? 368 : 432, NVFP4_ENV_FP8_ROPE,
                     vllm_dtypes[p->vllm_fp8_rope ? 1 : 0].name);
            return;
        }
        if (vllm_snapshot(p, 0, env, sizeof env / sizeof env[0], own)) {
            p->reason = "config_error";
            snprintf(p->decision, sizeof p->decision, "configuration refused: the environment has over %zu variables",
                     sizeof env / sizeof env[0] - 3);
            return;
        }
        req.environ = env;
    }
    if (!NVFP4_MLA_TABLE_HAS(t, config_destroy)) {
        p->reason = "missing_capability";
        snprintf(p->decision, sizeof p->decision, "plugin %s has no configuration entries (config.cache_identity)",
                 p->loader.path);
    } else if (create_config(p, &req, env, sizeof env / sizeof env[0], own, quiet) != 0) {
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
    } else if (p->vllm_fp8_rope >= 0 && vllm_scales_rule(p, why, sizeof why) < 0) {
        p->reason = "config_error";
        snprintf(p->decision, sizeof p->decision, "configuration refused: %s", why);
        t->config_destroy(p->cfg);
        p->cfg = NULL;
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

static int check_cache_dtype(const char *dtype, int *vllm_fp8_rope) {
    const char *name = strncmp(dtype, "torch.", 6) == 0 ? dtype + 6 : dtype;
    char list[256] = "";
    *vllm_fp8_rope = -1;
    for (size_t i = 0; i < sizeof vllm_dtypes / sizeof vllm_dtypes[0]; i++) {
        if (strcmp(name, vllm_dtypes[i].name) == 0) {
            *vllm_fp8_rope = vllm_dtypes[i].fp8_rope;
            return 0;
        }
    }
    for (size_t i = 0; i < sizeof cache_dtypes / sizeof cache_dtypes[0]; i++) {
        if (strcmp(name, cache_dtypes[i]) == 0) {
            return 0;
        }
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", cache_dtypes[i]);
    }
    return cli_fail("probe", "--cache-dtype is \"%s\", must be one of: %s, %s, %s", dtype, vllm_dtypes[0].name,
                    vllm_dtypes[1].name, list);
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
    if (check_cache_dtype(p.dtype, &p.vllm_fp8_rope)) {
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
