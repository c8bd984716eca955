/* nvfp4-mla calibrate: per-rank captures of max |kv_c| per layer -> a v1 outer-scale file.
 *
 * Positional files are the ranks of one capture: "layer,max_abs" lines (# comments allowed) or a
 * JSON array indexed by layer. The ranks must agree within --tolerance (relative); the worst
 * disagreement is always reported. The envelope (max per layer) becomes max_abs, and
 * scales = max_abs / 2688. --envelope-with FILE folds in an earlier v1 file (another capture).
 * The output is checked by loading it through the plugin, as a server would. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

#define MAX_LAYERS 4096

typedef struct capture {
    double value[MAX_LAYERS];
    int layers;
} capture_t;

static int parse_json_capture(const char *path, const char *text, size_t len, capture_t *c, const char *key) {
    cJSON *root = cJSON_ParseWithLength(text, len);
    const cJSON *array = key ? cJSON_GetObjectItemCaseSensitive(root, key) : root;
    int rc = 0;
    if (!cJSON_IsArray(array)) {
        rc = cli_fail("calibrate", "%s: expected a JSON array%s%s of max_abs per layer", path, key ? " under " : "",
                      key ? key : "");
    }
    c->layers = 0;
    for (const cJSON *item = rc ? NULL : array->child; item && !rc; item = item->next) {
        if (c->layers >= MAX_LAYERS) {
            rc = cli_fail("calibrate", "%s: more than %d layers", path, MAX_LAYERS);
        } else if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble) || item->valuedouble <= 0) {
            rc = cli_fail("calibrate", "%s: entry %d is not a finite positive number", path, c->layers);
        } else {
            c->value[c->layers++] = item->valuedouble;
        }
    }
    cJSON_Delete(root);
    return rc;
}

static int parse_lines_capture(const char *path, char *text, capture_t *c) {
    int seen[MAX_LAYERS] = {0};
    int line_no = 0;
    c->layers = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        line_no++;
        while (*line == ' ' || *line == '\t' || *line == '\r') line++;
        if (!*line || *line == '#') {
            continue;
        }
        char *end;
        long layer = strtol(line, &end, 10);
        if (end == line || *end != ',' || layer < 0 || layer >= MAX_LAYERS) {
            return cli_fail("calibrate", "%s:%d: expected \"layer,max_abs\" with layer in [0, %d)", path, line_no,
                            MAX_LAYERS);
        }
        char *value_text = end + 1;
        double value = strtod(value_text, &end);
        while (*end == ' ' || *end == '\r' || *end == '\t') end++;
        if (end == value_text || *end || !isfinite(value) || value <= 0) {
            return cli_fail("calibrate", "%s:%d: max_abs must be a finite positive number", path, line_no);
        }
        if (seen[layer]++) {
            return cli_fail("calibrate", "%s:%d: layer %ld appears twice", path, line_no, layer);
        }
        c->value[layer] = value;
        c->layers = layer + 1 > c->layers ? (int)layer + 1 : c->layers;
    }
    for (int l = 0; l < c->layers; l++) {
        if (!seen[l]) {
            return cli_fail("calibrate", "%s: layer %d is missing (layers must run 0..%d)", path, l, c->layers - 1);
        }
    }
    if (!c->layers) {
        return cli_fail("calibrate", "%s: no layers", path);
    }
    return 0;
}

static int load_capture(const char *path, capture_t *c, const char *json_key) {
    uint8_t *text;
    size_t len;
    if (cli_read_file("calibrate", path, &text, &len)) {
        return 1;
    }
    char *s = realloc(text, len + 1);
    if (!s) {
        free(text);
        return cli_fail("calibrate", "out of memory");
    }
    s[len] = '\0';
    size_t i = 0;
    while (i < len && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) i++;
    int rc = (json_key || (i < len && s[i] == '[')) ? parse_json_capture(path, s, len, c, json_key)
                                                    : parse_lines_capture(path, s, c);
    free(s);
    return rc;
}

/* Loads the written file through the plugin's configuration, as a server would. */
static int self_check(const char *out) {
    cli_host_t host;
    if (cli_host_open(&host, NULL)) {
        fprintf(stderr, "nvfp4-mla calibrate: note: no plugin loaded, %s was not checked by the loader\n", out);
        return 0;
    }
    char env_file[4200];
    snprintf(env_file, sizeof env_file, "VLLM_NVFP4_MLA_SCALES_FILE=%s", out);
    const char *env[] = {env_file, "KV_FP8_ROPE=1", NULL};
    nvfp4_mla_config_request_t req = {sizeof req, 0, "nvfp4_ds_mla", NULL, env, NULL, {0}};
    nvfp4_mla_config_t *cfg;
    int rc = 0;
    if (host.table->config_create(&req, &cfg) != NVFP4_MLA_OK) {
        rc = cli_fail("calibrate", "the plugin rejects the written file: %s", host.table->last_error());
    } else {
        nvfp4_mla_config_info_t info = {.struct_size = sizeof info};
        host.table->config_info(cfg, &info);
        printf("loader check: %u layers, cache identity %s\n", info.num_layers, info.identity);
        host.table->config_destroy(cfg);
    }
    cli_host_close(&host);
    return rc;
}

int cli_calibrate_cmd(int argc, char **argv) {
    const char *out = NULL, *model = "unknown", *dataset = "unknown", *hook = "unknown", *envelope_with = NULL;
    const char *created_utc = NULL;
    double tolerance = 0.05;
    const char *files[64];
    int nfiles = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strncmp(argv[i], "--", 2) != 0) {
            if (nfiles == 64) {
                return cli_fail("calibrate", "at most 64 capture files");
            }
            files[nfiles++] = argv[i];
            continue;
        }
        if (!v) {
            return cli_fail("calibrate", "%s needs a value", argv[i]);
        } else if (strcmp(argv[i], "--out") == 0) {
            out = v;
        } else if (strcmp(argv[i], "--model") == 0) {
            model = v;
        } else if (strcmp(argv[i], "--dataset") == 0) {
            dataset = v;
        } else if (strcmp(argv[i], "--hook") == 0) {
            hook = v;
        } else if (strcmp(argv[i], "--created-utc") == 0) {
            created_utc = v;
        } else if (strcmp(argv[i], "--envelope-with") == 0) {
            envelope_with = v;
        } else if (strcmp(argv[i], "--tolerance") == 0) {
            char *end;
            tolerance = strtod(v, &end);
            if (*end || !(tolerance >= 0)) {
                return cli_fail("calibrate", "--tolerance is \"%s\", must be a number >= 0", v);
            }
        } else {
            return cli_fail("calibrate", "unknown flag %s", argv[i]);
        }
        i++;
    }
    if (!out || !nfiles) {
        return cli_fail("calibrate", "usage: calibrate --out FILE [--model M] [--dataset D] [--hook H] "
                                     "[--created-utc T] [--tolerance T] [--envelope-with V1FILE] CAPTURE...");
    }
    capture_t *ranks = calloc((size_t)nfiles + 1, sizeof *ranks);
    double envelope[MAX_LAYERS], worst = 0;
    int worst_layer = -1, rc = 0;
    for (int r = 0; r < nfiles && !rc; r++) {
        rc = load_capture(files[r], &ranks[r], NULL);
        if (!rc && ranks[r].layers != ranks[0].layers) {
            rc = cli_fail("calibrate", "%s has %d layers, %s has %d", files[r], ranks[r].layers, files[0], ranks[0].layers);
        }
    }
    int layers = rc ? 0 : ranks[0].layers;
    for (int l = 0; l < layers; l++) {
        double lo = ranks[0].value[l], hi = lo;
        for (int r = 1; r < nfiles; r++) {
            lo = fmin(lo, ranks[r].value[l]);
            hi = fmax(hi, ranks[r].value[l]);
        }
        envelope[l] = hi;
        if ((hi - lo) / hi > worst) {
            worst = (hi - lo) / hi;
            worst_layer = l;
        }
    }
    if (!rc) {
        printf("%d ranks, %d layers; worst rank disagreement %.3g%% (layer %d)\n", nfiles, layers, 100 * worst,
               worst_layer < 0 ? 0 : worst_layer);
        if (worst > tolerance) {
            rc = cli_fail("calibrate", "ranks disagree by %.3g%% at layer %d, more than --tolerance %.3g%%: the captures "
                                       "are not of one model/input", 100 * worst, worst_layer, 100 * tolerance);
        }
    }
    if (!rc && envelope_with) {
        rc = load_capture(envelope_with, &ranks[nfiles], "max_abs");
        if (!rc && ranks[nfiles].layers != layers) {
            rc = cli_fail("calibrate", "%s has %d layers, the captures %d", envelope_with, ranks[nfiles].layers, layers);
        }
        for (int l = 0; l < layers && !rc; l++) {
            envelope[l] = fmax(envelope[l], ranks[nfiles].value[l]);
        }
    }
    free(ranks);
    if (rc) {
        return rc;
    }
    char created[64];
    time_t now = time(NULL);
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%S+00:00", gmtime(&now));
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "format", "nvfp4_ds_mla_outer_scale_v1");
    cJSON_AddNumberToObject(o, "num_layers", layers);
    cJSON_AddNumberToObject(o, "latent_dim", 512);
    cJSON_AddRawToObject(o, "denominator", "2688.0");
    cJSON_AddStringToObject(o, "formula", "s_l = max_abs(kv_c_normed) / (6 * 448)");
    cJSON_AddStringToObject(o, "model", model);
    cJSON *ds = cJSON_AddObjectToObject(o, "dataset");
    cJSON_AddStringToObject(ds, "name", dataset);
    cJSON_AddNumberToObject(ds, "ranks", nfiles);
    cJSON_AddStringToObject(o, "created_utc", created_utc ? created_utc : created);
    cJSON_AddStringToObject(o, "hook", hook);
    cJSON *m = cJSON_AddArrayToObject(o, "max_abs");
    cJSON *s = cJSON_AddArrayToObject(o, "scales");
    for (int l = 0; l < layers; l++) {
        cJSON_AddItemToArray(m, cJSON_CreateNumber(envelope[l]));
        cJSON_AddItemToArray(s, cJSON_CreateNumber(envelope[l] / 2688.0));
    }
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    rc = !text || cli_write_file("calibrate", out, text, strlen(text));
    free(text);
    if (!rc) {
        printf("wrote %s (%d layers)\n", out, layers);
        rc = self_check(out);
    }
    return rc;
}
