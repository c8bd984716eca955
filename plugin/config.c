/* Cache-format configuration and the persistent-cache identity (see config.h).
 *
 * The identity string is byte-compatible with the serving stack that already writes these records:
 * the dtype must be exactly nvfp4_ds_mla (after a "torch." prefix) to leave "vllm-default-v1"; the
 * static digest is SHA-256 (OpenSSL's libcrypto) of the bytes that define the scales. Where the
 * scales come from, in order: the environment's file, the checkpoint's config.json field (inline
 * object or sidecar file), else 1.0 for every layer; the winner is logged and reported.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "args.h"
#include "calibration.h"
#include "errors.h"

/* A live configuration's magic (as a context's, context.h): config_destroy clears it, so that a second
 * destroy of the same pointer is ignored instead of freeing twice, and a dead or foreign pointer is
 * refused by the other entries. */
#define NVFP4_CONFIG_MAGIC 0x6643344Eu /* "N4Cf" */

struct nvfp4_mla_config {
    uint32_t magic;               /* NVFP4_CONFIG_MAGIC while it lives */
    nvfp4_mla_config_info_t info; /* strings point into the arrays below */
    char identity[160];
    char source_path[4096];
    nvfp4_calibration_t calibration;
};

/* The settings, as read once from the environment or the host's snapshot. */
typedef struct env_settings {
    int dynamic_scale;
    int fp8_rope;
    int writer_policy; /* NVFP4_MLA_WRITER_POLICY_* */
    char scales_file[4096];
} env_settings_t;

/* The settings by the one rule of settings.h, from the host's snapshot or the process environment:
 * a value that is not understood is an error, never "off" or a default. */
static nvfp4_mla_status_t read_settings(const char *const *environ, env_settings_t *s) {
    char why[NVFP4_SETTING_MESSAGE_MAX];
    nvfp4_setting_value_t dynamic = {0}, rope = {0}, policy = {0};
    nvfp4_setting_value_t file = {.path = s->scales_file, .path_size = sizeof s->scales_file};
    if (nvfp4_setting_read(NVFP4_SETTING_DYNAMIC_SCALE, environ, &dynamic, why, sizeof why) ||
        nvfp4_setting_read(NVFP4_SETTING_FP8_ROPE, environ, &rope, why, sizeof why) ||
        nvfp4_setting_read(NVFP4_SETTING_SCALES_FILE, environ, &file, why, sizeof why) ||
        nvfp4_setting_read(NVFP4_SETTING_WRITER_POLICY, environ, &policy, why, sizeof why)) {
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s", why);
    }
    s->dynamic_scale = dynamic.on;
    s->fp8_rope = rope.on;
    s->writer_policy = policy.index; /* the table's names are the policies in id order */
    return NVFP4_MLA_OK;
}

static void sha256_hex(const void *data, size_t len, char hex[65]) {
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256(data, len, digest);
    for (int i = 0; i < SHA256_DIGEST_LENGTH; i++) {
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
    }
}

/* Loads a calibration file and sets the static identity from the digest of its bytes. */
static nvfp4_mla_status_t load_static_file(nvfp4_mla_config_t *cfg, const char *path, const char *layout_name) {
    char *text;
    size_t len;
    nvfp4_mla_status_t st = nvfp4_read_file(path, NVFP4_CALIBRATION_MAX_FILE_BYTES, &text, &len);
    if (st) {
        return st;
    }
    if (!(st = nvfp4_calibration_from_text(text, len, path, &cfg->calibration))) {
        char hex[65];
        sha256_hex(text, len, hex);
        snprintf(cfg->identity, sizeof cfg->identity, "nvfp4_ds_mla:%s:static-calibrated-v1:%s", layout_name, hex);
        snprintf(cfg->source_path, sizeof cfg->source_path, "%s", path);
    }
    free(text);
    return st;
}

/* A resolved sidecar path must lie under the resolved model folder. */
static int inside(const char *dir, const char *file) {
    size_t n = strlen(dir);
    return strncmp(file, dir, n) == 0 && (file[n] == '/' || (n == 1 && dir[0] == '/'));
}

/* A sidecar path from config.json: relative, and inside the model folder once every link on the
 * way is resolved (the text alone cannot tell: "calib" may be a link to /etc). */
static nvfp4_mla_status_t sidecar_path(const char *model_dir, const char *config_path, const cJSON *file, char *out,
                                       size_t out_size) {
    if (!cJSON_IsString(file) || !file->valuestring[0]) {
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: \"%s\".\"file\" must be a non-empty string", config_path,
                          NVFP4_CHECKPOINT_FIELD);
    }
    const char *rel = file->valuestring;
    if (rel[0] == '/' || strcmp(rel, "..") == 0 || strncmp(rel, "../", 3) == 0 || strstr(rel, "/../") ||
        (strlen(rel) >= 3 && strcmp(rel + strlen(rel) - 3, "/..") == 0)) {
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG,
                          "%s: \"%s\".\"file\" = \"%s\" must be a path relative to the model folder, inside it",
                          config_path, NVFP4_CHECKPOINT_FIELD, rel);
    }
    char joined[PATH_MAX + 64], real_dir[PATH_MAX], real_file[PATH_MAX];
    if ((size_t)snprintf(joined, sizeof joined, "%s/%s", model_dir, rel) >= sizeof joined) {
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: sidecar path is too long", config_path);
    }
    if (!realpath(model_dir, real_dir)) {
        return nvfp4_fail(NVFP4_MLA_ERR_IO, "cannot open %s: %s", model_dir, strerror(errno));
    }
    if (!realpath(joined, real_file)) {
        return nvfp4_fail(NVFP4_MLA_ERR_IO, "cannot open %s: %s", joined, strerror(errno));
    }
    struct stat st;
    if (strcmp(real_dir, real_file) == 0 || (stat(real_file, &st) == 0 && S_ISDIR(st.st_mode))) {
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: \"%s\".\"file\" = \"%s\" names %s, not a v1 scales file in it",
                          config_path, NVFP4_CHECKPOINT_FIELD, rel,
                          strcmp(real_dir, real_file) == 0 ? "the model folder itself" : "a folder");
    }
    if (!inside(real_dir, real_file)) {
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG,
                          "%s: \"%s\".\"file\" = \"%s\" resolves to %s, outside the model folder %s (a link on the "
                          "way leads out of it)",
                          config_path, NVFP4_CHECKPOINT_FIELD, rel, real_file, real_dir);
    }
    if ((size_t)snprintf(out, out_size, "%s", real_file) >= out_size) {
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: sidecar path is too long", config_path);
    }
    return NVFP4_MLA_OK;
}

/* The field once at most: cJSON would find the first of two, another reader the last. */
static int field_count(const cJSON *root) {
    int n = 0;
    for (const cJSON *c = root->child; c; c = c->next) {
        n += strcmp(c->string, NVFP4_CHECKPOINT_FIELD) == 0;
    }
    return n;
}

/* A key that is the field's name in another case ("Nvfp4_mla_outer_scales"): a checkpoint that means
 * to carry calibration, which an exact lookup would pass over without a word. NULL when none. */
static const char *field_in_another_case(const cJSON *root) {
    for (const cJSON *c = root->child; c; c = c->next) {
        if (strcasecmp(c->string, NVFP4_CHECKPOINT_FIELD) == 0 && strcmp(c->string, NVFP4_CHECKPOINT_FIELD) != 0) {
            return c->string;
        }
    }
    return NULL;
}

/* The checkpoint's field in config.json text: absent (nothing to do), an inline v1 object, or
 * {"file": "..."} naming a sidecar inside model_dir. */
nvfp4_mla_status_t nvfp4_checkpoint_from_text(nvfp4_mla_config_t *cfg, const char *text, size_t len,
                                              const char *model_dir, const char *config_path,
                                              const char *layout_name) {
    cJSON *root;
    nvfp4_mla_status_t st = nvfp4_json_parse(text, len, config_path, &root);
    if (st) {
        return st;
    }
    const cJSON *field = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, NVFP4_CHECKPOINT_FIELD) : NULL;
    const char *other_case = cJSON_IsObject(root) ? field_in_another_case(root) : NULL;
    if (!cJSON_IsObject(root)) {
        st = nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: config.json must be a JSON object", config_path);
    } else if (field_count(root) > 1) {
        st = nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: key \"%s\" appears more than once", config_path,
                        NVFP4_CHECKPOINT_FIELD);
    } else if (other_case) {
        st = nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: key \"%s\" is \"%s\" in another case: keys are case-sensitive, "
                                              "so it would be ignored (rename it, or remove it)",
                        config_path, other_case, NVFP4_CHECKPOINT_FIELD);
    } else if (!field) {
        cfg->info.scale_source = NVFP4_MLA_SCALE_SOURCE_NONE;
    } else if (!cJSON_IsObject(field)) {
        st = nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: \"%s\" must be an object (the v1 calibration or {\"file\": ...})",
                        config_path, NVFP4_CHECKPOINT_FIELD);
    } else if (cJSON_GetObjectItemCaseSensitive(field, "file")) {
        const cJSON *file = cJSON_GetObjectItemCaseSensitive(field, "file");
        char path[PATH_MAX];
        if (cJSON_GetArraySize(field) != 1) {
            st = nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: \"%s\" with \"file\" must have no other key", config_path,
                            NVFP4_CHECKPOINT_FIELD);
        } else if (!(st = sidecar_path(model_dir, config_path, file, path, sizeof path)) &&
                   !(st = load_static_file(cfg, path, layout_name))) {
            cfg->info.scale_source = NVFP4_MLA_SCALE_SOURCE_CHECKPOINT_FILE;
        }
    } else {
        char origin[4200];
        snprintf(origin, sizeof origin, "%s: \"%s\"", config_path, NVFP4_CHECKPOINT_FIELD);
        if (!(st = nvfp4_calibration_from_json(field, origin, &cfg->calibration))) {
            /* The inline object has no bytes of its own: the digest covers the whole config.json,
             * which separates caches at least as finely as the scales do. */
            char hex[65];
            sha256_hex(text, len, hex);
            snprintf(cfg->identity, sizeof cfg->identity, "nvfp4_ds_mla:%s:static-calibrated-v1:%s", layout_name, hex);
            snprintf(cfg->source_path, sizeof cfg->source_path, "%s", config_path);
            cfg->info.scale_source = NVFP4_MLA_SCALE_SOURCE_CHECKPOINT_INLINE;
        }
    }
    if (st && field) { /* only a field that is there can be "present but unusable" */
        nvfp4_fail_because(st, "checkpoint calibration is present but unusable (no silent fallback to 1.0)");
    }
    cJSON_Delete(root);
    return st;
}

/* model_dir's config.json text (the caller frees), with its path in config_path: a missing folder or
 * config.json is said as such (no checkpoint to read), never as calibration "present but unusable". */
static nvfp4_mla_status_t read_checkpoint(const char *model_dir, char *config_path, size_t path_size, char **text,
                                          size_t *len) {
    if ((size_t)snprintf(config_path, path_size, "%s/config.json", model_dir) >= path_size) {
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "model_dir is too long");
    }
    struct stat st_dir;
    if (stat(model_dir, &st_dir) != 0) {
        return nvfp4_fail(NVFP4_MLA_ERR_IO, "model_dir %s: %s (no checkpoint there to read calibration from)",
                          model_dir, strerror(errno));
    }
    if (!S_ISDIR(st_dir.st_mode)) {
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "model_dir %s is not a folder (a checkpoint is the folder that holds "
                                                "config.json)", model_dir);
    }
    nvfp4_mla_status_t st = nvfp4_read_file(config_path, NVFP4_CONFIG_JSON_MAX_BYTES, text, len);
    if (st) {
        return nvfp4_fail_because(st, "model_dir %s holds no readable checkpoint config.json", model_dir);
    }
    return NVFP4_MLA_OK;
}

/* The checkpoint's calibration (no field: every layer 1.0). */
static nvfp4_mla_status_t load_checkpoint(nvfp4_mla_config_t *cfg, const char *model_dir, const char *layout_name) {
    char config_path[4096], *text = NULL;
    size_t len;
    nvfp4_mla_status_t st = read_checkpoint(model_dir, config_path, sizeof config_path, &text, &len);
    if (!st) {
        st = nvfp4_checkpoint_from_text(cfg, text, len, model_dir, config_path, layout_name);
        free(text);
    }
    return st;
}

/* A checkpoint the scales do not come from (per-token mode; the environment's file, which comes
 * first): its folder and config.json are read all the same, so that a bad model_dir is refused in
 * every mode (docs/integration.md), and a calibration field it carries is named in a warning instead
 * of being passed over without a word. `unused` says why the field is not used. */
static nvfp4_mla_status_t check_unused_checkpoint(const char *model_dir, const char *unused,
                                                  const nvfp4_mla_host_desc_t *host) {
    char config_path[4096], *text = NULL;
    size_t len;
    cJSON *root = NULL;
    nvfp4_mla_status_t st = read_checkpoint(model_dir, config_path, sizeof config_path, &text, &len);
    if (st || (st = nvfp4_json_parse(text, len, config_path, &root))) {
        free(text);
        return st;
    }
    const char *key = !cJSON_IsObject(root) ? NULL
                      : field_count(root)     ? NVFP4_CHECKPOINT_FIELD
                                              : field_in_another_case(root);
    if (!cJSON_IsObject(root)) {
        st = nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: config.json must be a JSON object", config_path);
    } else if (key) {
        nvfp4_log(host, NVFP4_MLA_LOG_WARN, "nvfp4-mla: %s carries calibration (\"%s\") that is not used: %s",
                  config_path, key, unused);
    }
    cJSON_Delete(root);
    free(text);
    return st;
}

static const char *source_name(uint32_t source) {
    switch (source) {
    case NVFP4_MLA_SCALE_SOURCE_ENV_FILE: return "environment (" NVFP4_ENV_SCALES_FILE ")";
    case NVFP4_MLA_SCALE_SOURCE_CHECKPOINT_INLINE: return "checkpoint config.json (inline)";
    case NVFP4_MLA_SCALE_SOURCE_CHECKPOINT_FILE: return "checkpoint sidecar file";
    case NVFP4_MLA_SCALE_SOURCE_PER_TOKEN: return "per-token (records carry s_t)";
    default: return "none (every layer 1.0)";
    }
}

/* Decides mode, layout, scales and identity for an NVFP4 cache. */
static nvfp4_mla_status_t configure_nvfp4(nvfp4_mla_config_t *cfg, const env_settings_t *s, const char *model_dir,
                                          const nvfp4_mla_host_desc_t *host) {
    if (s->dynamic_scale && s->scales_file[0]) {
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s=%s and %s=1 are mutually exclusive: pick static calibration or "
                                                "per-token scales", NVFP4_ENV_SCALES_FILE, s->scales_file,
                          NVFP4_ENV_DYNAMIC_SCALE);
    }
    cfg->info.layout = s->fp8_rope ? NVFP4_MLA_LAYOUT_FP8_ROPE_368 : NVFP4_MLA_LAYOUT_BF16_ROPE_432;
    cfg->info.scale_mode = s->dynamic_scale ? NVFP4_MLA_SCALE_PER_TOKEN : NVFP4_MLA_SCALE_STATIC;
    if (!nvfp4_mla_layout_has_mode(cfg->info.layout, cfg->info.scale_mode)) {
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s=1 requires %s=1: per-token scales exist only in the 368-byte "
                                                "fp8-rope record", NVFP4_ENV_DYNAMIC_SCALE, NVFP4_ENV_FP8_ROPE);
    }
    /* The identity's spelling of the layout (docs/record-format.md section 6). */
    const char *layout_name = s->fp8_rope ? "fp8-rope-368" : "bf16-rope-432";
    nvfp4_mla_status_t st = NVFP4_MLA_OK;
    char unused[4200] = ""; /* why a checkpoint is not read for scales; empty when it is */
    if (s->dynamic_scale) {
        snprintf(cfg->identity, sizeof cfg->identity, "nvfp4_ds_mla:fp8-rope-368:dynamic-token-v1");
        cfg->info.scale_source = NVFP4_MLA_SCALE_SOURCE_PER_TOKEN;
        snprintf(unused, sizeof unused, "per-token mode (%s=1) takes each token's own scale", NVFP4_ENV_DYNAMIC_SCALE);
    } else if (s->scales_file[0]) {
        if ((st = load_static_file(cfg, s->scales_file, layout_name))) {
            return nvfp4_fail_because(st, "%s=%s names a scales file the plugin cannot use", NVFP4_ENV_SCALES_FILE,
                                      s->scales_file);
        }
        cfg->info.scale_source = NVFP4_MLA_SCALE_SOURCE_ENV_FILE;
        snprintf(unused, sizeof unused, "%s=%s comes first", NVFP4_ENV_SCALES_FILE, s->scales_file);
    } else if (model_dir && (st = load_checkpoint(cfg, model_dir, layout_name))) {
        return st;
    }
    if (model_dir && unused[0] && (st = check_unused_checkpoint(model_dir, unused, host))) {
        return st;
    }
    if (!cfg->identity[0]) {
        snprintf(cfg->identity, sizeof cfg->identity, NVFP4_IDENTITY_DEFAULT);
    }
    nvfp4_log(host, NVFP4_MLA_LOG_INFO,
              "nvfp4-mla: outer scales: %s%s%s (%u calibrated layers); writer policy %s; cache identity %s",
              source_name(cfg->info.scale_source), cfg->source_path[0] ? " from " : "", cfg->source_path,
              cfg->calibration.num_layers, nvfp4_mla_writer_policy_name((uint32_t)s->writer_policy), cfg->identity);
    return NVFP4_MLA_OK;
}

nvfp4_mla_config_t *nvfp4_config_new(void) {
    nvfp4_mla_config_t *cfg = calloc(1, sizeof *cfg);
    if (cfg) {
        cfg->magic = NVFP4_CONFIG_MAGIC;
    }
    return cfg;
}

/* INVALID_ARGUMENT naming `op` unless cfg is a live configuration. */
static nvfp4_mla_status_t check_config(const nvfp4_mla_config_t *cfg, const char *op) {
    if (!cfg) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "%s: config is NULL", op);
    }
    if (cfg->magic != NVFP4_CONFIG_MAGIC) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT,
                          "%s: config %p is not a live configuration (destroyed already, or not one from "
                          "config_create)", op, (const void *)cfg);
    }
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_config_create(const nvfp4_mla_config_request_t *host_request, nvfp4_mla_config_t **out) {
    nvfp4_clear_error();
    if (!out) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "config_create: out is NULL");
    }
    *out = NULL;
    nvfp4_mla_config_request_t req;
    nvfp4_mla_status_t st =
        NVFP4_TAKE_ARGS("config_create", nvfp4_mla_config_request_t, &req, host_request, sizeof req);
    if (st) {
        return st;
    }
    if (!req.cache_dtype) {
        return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "config_create: cache_dtype is NULL");
    }
    nvfp4_mla_host_desc_t host = {0};
    if (req.host && (st = nvfp4_copy_versioned(&host, sizeof host, sizeof host, req.host, "config_create: host"))) {
        return st;
    }
    env_settings_t settings;
    if ((st = read_settings(req.environ, &settings))) {
        return st;
    }
    nvfp4_mla_config_t *cfg = nvfp4_config_new();
    if (!cfg) {
        return nvfp4_fail(NVFP4_MLA_ERR_OUT_OF_MEMORY, "config_create: cannot allocate the configuration");
    }
    const char *dtype = req.cache_dtype;
    if (strncmp(dtype, "torch.", 6) == 0) {
        dtype += 6;
    }
    cfg->info.is_nvfp4 = strcmp(dtype, NVFP4_MLA_RECORD_FORMAT) == 0;
    cfg->info.layout = settings.fp8_rope ? NVFP4_MLA_LAYOUT_FP8_ROPE_368 : NVFP4_MLA_LAYOUT_BF16_ROPE_432;
    cfg->info.scale_mode = NVFP4_MLA_SCALE_STATIC;
    if (cfg->info.is_nvfp4) {
        st = configure_nvfp4(cfg, &settings, req.model_dir, &host);
    } else {
        snprintf(cfg->identity, sizeof cfg->identity, NVFP4_IDENTITY_DEFAULT);
        if (settings.dynamic_scale || settings.scales_file[0] || settings.writer_policy) {
            nvfp4_log(&host, NVFP4_MLA_LOG_INFO, "nvfp4-mla: cache dtype %s is not %s; NVFP4 settings are ignored",
                      req.cache_dtype, NVFP4_MLA_RECORD_FORMAT);
        }
    }
    if (st) {
        nvfp4_config_destroy(cfg);
        return st;
    }
    cfg->info.struct_size = sizeof cfg->info;
    cfg->info.writer_policy = (uint32_t)settings.writer_policy;
    cfg->info.num_layers = cfg->calibration.num_layers;
    cfg->info.identity = cfg->identity;
    cfg->info.scale_source_path = cfg->source_path;
    *out = cfg;
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_config_info(const nvfp4_mla_config_t *cfg, nvfp4_mla_config_info_t *info) {
    nvfp4_clear_error();
    nvfp4_mla_status_t st = check_config(cfg, "config_info");
    if (st || !info) {
        return st ? st : nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "config_info: info is NULL");
    }
    /* A 1.0 host's struct ends at scale_source_path: fill what it has, and say how much. */
    const size_t v1_0 = offsetof(nvfp4_mla_config_info_t, writer_policy);
    if (info->struct_size < v1_0) {
        return nvfp4_fail(NVFP4_MLA_ERR_VERSION, "config_info: info->struct_size %u is smaller than %zu (ABI 1.0)",
                          info->struct_size, v1_0);
    }
    const size_t filled = info->struct_size < sizeof *info ? v1_0 : sizeof *info;
    memcpy(info, &cfg->info, filled);
    info->struct_size = (uint32_t)filled;
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_config_layer_scale(const nvfp4_mla_config_t *cfg, uint32_t layer, float *scale_out) {
    nvfp4_clear_error();
    nvfp4_mla_status_t st = check_config(cfg, "config_layer_scale");
    if (st || !scale_out) {
        return st ? st : nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "config_layer_scale: scale_out is NULL");
    }
    if (cfg->info.scale_mode == NVFP4_MLA_SCALE_PER_TOKEN) {
        *scale_out = 0.0f;
    } else {
        *scale_out = layer < cfg->calibration.num_layers ? cfg->calibration.scales[layer] : 1.0f;
    }
    return NVFP4_MLA_OK;
}

void nvfp4_config_destroy(nvfp4_mla_config_t *cfg) {
    if (cfg && cfg->magic == NVFP4_CONFIG_MAGIC) { /* a dead or foreign pointer: nothing to free (never fails) */
        cfg->magic = 0;
        nvfp4_calibration_free(&cfg->calibration);
        free(cfg);
    }
}
