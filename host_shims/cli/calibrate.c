/* nvfp4-mla calibrate: per-rank captures of max |kv_c| per layer -> a v1 outer-scale file.
 *
 * Positional files are the ranks of one capture: "layer,max_abs" lines (# comments allowed) or a
 * JSON array indexed by layer. The ranks must agree within --tolerance (relative); the worst
 * disagreement is always reported. The envelope (max per layer) becomes max_abs, and
 * scales = max_abs / 2688. --envelope-with FILE folds in an earlier v1 file (another capture).
 * The file is checked by the plugin's own loader, as a server would load it, before it replaces
 * anything: it is written to a temporary file beside --out, loaded through the plugin from there,
 * and renamed over --out only when accepted. Without a plugin to check against, calibrate fails
 * unless --no-check says to write the file unchecked. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "json_text.h"

#define MAX_LAYERS 4096
#define V1_FORMAT "nvfp4_ds_mla_outer_scale_v1"

typedef struct capture {
    double value[MAX_LAYERS];
    int layers;
} capture_t;

/* The max_abs values a capture may hold: the plugin's bounds on a v1 file (plugin/calibration.h,
 * NVFP4_CALIBRATION_*_MAX_ABS: f16's normal range), checked here so that a refusal names the capture's
 * line or entry rather than the file calibrate would have written (issue 58, N16). */
#define CAPTURE_MIN_MAX_ABS 6.103515625e-05
#define CAPTURE_MAX_MAX_ABS 65504.0

/* Why `value` is not a max_abs a capture can hold, or NULL. */
static const char *max_abs_refusal(double value) {
    if (!isfinite(value) || value <= 0) {
        return "is not a finite positive number";
    }
    return value < CAPTURE_MIN_MAX_ABS || value > CAPTURE_MAX_MAX_ABS
               ? "is outside [6.10352e-05, 65504], the latent magnitudes a model stores (f16's normal range; the "
                 "plugin refuses the scale, max_abs / 2688, that it would give): is this a capture of max |kv_c|?"
               : NULL;
}

/* max_abs per layer from a JSON array (a capture), or the array `array` of a v1 file times `factor`. */
static int capture_from_array(const char *path, const cJSON *array, double factor, capture_t *c) {
    int rc = 0;
    c->layers = 0;
    for (const cJSON *item = array->child; item && !rc; item = item->next) {
        if (c->layers >= MAX_LAYERS) {
            rc = cli_fail("calibrate", "%s: more than %d layers", path, MAX_LAYERS);
        } else if (!cJSON_IsNumber(item)) {
            rc = cli_fail("calibrate", "%s: entry %d is %s, not a number", path, c->layers,
                          nvfp4_json_type_name(item->type));
        } else if (factor == 1.0 && max_abs_refusal(item->valuedouble)) {
            rc = cli_fail("calibrate", "%s: entry %d, max_abs %g, %s", path, c->layers, item->valuedouble,
                          max_abs_refusal(item->valuedouble));
        } else if (!isfinite(item->valuedouble) || item->valuedouble <= 0) {
            rc = cli_fail("calibrate", "%s: entry %d is not a finite positive number", path, c->layers);
        } else {
            c->value[c->layers++] = item->valuedouble * factor;
        }
    }
    if (!rc && !c->layers) {
        rc = cli_fail("calibrate", "%s: no layers (an empty array)", path);
    }
    return rc;
}

static int parse_json_capture(const char *path, const char *text, size_t len, capture_t *c) {
    cJSON *root = cli_json_parse("calibrate", path, text, len);
    if (!root) {
        return 1;
    }
    int rc = cJSON_IsArray(root) ? capture_from_array(path, root, 1.0, c)
                                 : cli_fail("calibrate", "%s: holds %s; a JSON capture is an array of max_abs per layer "
                                                         "(a v1 scales file is folded in with --envelope-with)",
                                            path, nvfp4_json_type_name(root->type));
    cJSON_Delete(root);
    return rc;
}

/* --envelope-with: a v1 scales file (its "format" says so); its max_abs, or scales x 2688 where it has
 * none (max_abs is optional in v1). A file the plugin refuses is refused before this when a plugin is
 * there (calibrate checks it as it checks --out). */
static int parse_envelope_file(const char *path, const char *text, size_t len, capture_t *c) {
    cJSON *root = cli_json_parse("calibrate", path, text, len);
    if (!root) {
        return 1;
    }
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *max_abs = cJSON_GetObjectItemCaseSensitive(root, "max_abs");
    const cJSON *scales = cJSON_GetObjectItemCaseSensitive(root, "scales");
    int rc;
    if (!cJSON_IsObject(root) || !cJSON_IsString(format) || strcmp(format->valuestring, V1_FORMAT) != 0) {
        rc = cli_fail("calibrate", "--envelope-with %s is not a v1 scales file (its \"format\" must be \"%s\")", path,
                      V1_FORMAT);
    } else if (max_abs) {
        rc = cJSON_IsArray(max_abs) ? capture_from_array(path, max_abs, 1.0, c)
                                    : cli_fail("calibrate", "%s: \"max_abs\" is %s, not an array", path,
                                               nvfp4_json_type_name(max_abs->type));
    } else {
        rc = cJSON_IsArray(scales) ? capture_from_array(path, scales, 2688.0, c)
                                   : cli_fail("calibrate", "%s: has neither a \"max_abs\" nor a \"scales\" array", path);
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
        char *comment = strchr(line, '#'); /* '#' starts a comment, at the start of a line or after a value */
        if (comment) {
            *comment = '\0';
        }
        if (!*line) {
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
        if (max_abs_refusal(value)) {
            return cli_fail("calibrate", "%s:%d: max_abs %g %s", path, line_no, value, max_abs_refusal(value));
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

/* A capture (lines or a JSON array), or with `v1_file` the --envelope-with file. */
static int load_capture(const char *path, capture_t *c, int v1_file) {
    uint8_t *text;
    size_t len;
    if (cli_read_file("calibrate", path, v1_file ? CLI_MAX_CALIBRATION_BYTES : CLI_MAX_CAPTURE_BYTES, &text, &len)) {
        return 1;
    }
    char *s = (char *)text; /* NUL-terminated by cli_read_file */
    size_t i = 0;
    while (i < len && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r')) i++;
    const char *nul = v1_file ? NULL : memchr(s, '\0', len); /* a line capture's NUL (below) */
    int rc;
    if (!v1_file && !(i < len && (s[i] == '[' || s[i] == '{')) && nul) {
        /* the lines parser stops at a NUL, so every layer after it would be dropped without a word */
        int line = 1;
        for (const char *p = s; p < nul; p++) line += *p == '\n';
        rc = cli_fail("calibrate", "%s:%d: holds a NUL byte at byte offset %zu: a line capture is text (is it "
                                   "binary, or cut and joined?)", path, line, (size_t)(nul - s));
    } else if (v1_file) {
        rc = parse_envelope_file(path, s, len, c);
    } else {
        rc = i < len && (s[i] == '[' || s[i] == '{') ? parse_json_capture(path, s, len, c)
                                                      : parse_lines_capture(path, s, c);
    }
    free(s);
    return rc;
}

/* The --envelope-with file through the plugin's loader, as --out will be: an earlier file the plugin
 * refuses (a bad key, scales that disagree with max_abs) is refused in its words, not folded in. */
static int plugin_refuses_input(cli_host_t *host, const char *path) {
    nvfp4_mla_config_t *cfg = cli_scales_config(host, "calibrate", path, path,
                                                "the plugin refuses --envelope-with %s, so nothing was written: %s");
    if (cfg) {
        host->table->config_destroy(cfg);
    }
    return !cfg;
}

/* Loads `path` through the plugin's configuration, as a server would. `shown` names the file in
 * messages (the user's --out while `path` is still the temporary file). */
static int plugin_check(cli_host_t *host, const char *path, const char *shown) {
    nvfp4_mla_config_t *cfg =
        cli_scales_config(host, "calibrate", path, shown, "the plugin rejects the file, so %s was not written: %s");
    if (!cfg) {
        return 1;
    }
    nvfp4_mla_config_info_t info = {.struct_size = sizeof info};
    host->table->config_info(cfg, &info);
    printf("loader check: %u layers, cache identity %s\n", info.num_layers, info.identity);
    host->table->config_destroy(cfg);
    return 0;
}

/* What the command line asks for. */
typedef struct calibrate_opts {
    const char *out, *model, *dataset, *hook, *envelope_with, *created_utc, *plugin;
    double tolerance;
    int no_check;
    const char *files[64]; /* [nfiles] capture paths, borrowed from argv */
    int nfiles;
} calibrate_opts_t;

static int parse_opts(int argc, char **argv, calibrate_opts_t *o) {
    cli_seen_t seen = {0};
    *o = (calibrate_opts_t){.model = "unknown", .dataset = "unknown", .hook = "unknown", .tolerance = 0.05};
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strncmp(flag, "--", 2) != 0) {
            if (o->nfiles == 64) {
                return cli_fail("calibrate", "at most 64 capture files");
            }
            o->files[o->nfiles++] = flag;
            continue;
        }
        if (cli_once("calibrate", &seen, flag)) {
            return 1;
        }
        if (strcmp(flag, "--no-check") == 0) {
            o->no_check = 1;
            continue;
        }
        const char **slot = strcmp(flag, "--out") == 0             ? &o->out
                            : strcmp(flag, "--model") == 0         ? &o->model
                            : strcmp(flag, "--dataset") == 0       ? &o->dataset
                            : strcmp(flag, "--hook") == 0          ? &o->hook
                            : strcmp(flag, "--created-utc") == 0   ? &o->created_utc
                            : strcmp(flag, "--envelope-with") == 0 ? &o->envelope_with
                            : strcmp(flag, "--plugin") == 0        ? &o->plugin
                                                                   : NULL;
        if (!slot && strcmp(flag, "--tolerance") != 0) {
            return cli_fail("calibrate", "unknown flag %s", flag);
        } else if (!v) {
            return cli_fail("calibrate", "%s needs a value", flag);
        } else if (slot) {
            *slot = v;
            const int text = slot == &o->model || slot == &o->dataset || slot == &o->hook || slot == &o->created_utc;
            if (text && cli_check_text("calibrate", flag, v)) {
                return 1;
            }
        } else if (cli_parse_real("calibrate", flag, v, 0, 1, &o->tolerance)) {
            return 1;
        }
        i++;
    }
    if (!o->out || !o->nfiles) {
        return cli_fail("calibrate", "--out FILE and at least one CAPTURE are required (nvfp4-mla calibrate --help "
                                     "lists the flags and the capture format)");
    }
    const char *inputs[65];
    memcpy(inputs, o->files, (size_t)o->nfiles * sizeof *inputs);
    inputs[o->nfiles] = o->envelope_with;
    return cli_check_distinct("calibrate", o->out, inputs, o->nfiles + 1);
}

/* The ranks' envelope (max per layer), their worst disagreement checked against --tolerance, and
 * --envelope-with folded in. */
static int envelope_of(const calibrate_opts_t *o, double *envelope, int *layers_out) {
    capture_t *ranks = calloc((size_t)o->nfiles + 1, sizeof *ranks);
    double worst = 0;
    int worst_layer = -1, rc = ranks ? 0 : cli_fail("calibrate", "out of memory");
    for (int r = 0; r < o->nfiles && !rc; r++) {
        rc = load_capture(o->files[r], &ranks[r], 0);
        if (!rc && ranks[r].layers != ranks[0].layers) {
            rc = cli_fail("calibrate", "%s has %d layers, %s has %d", o->files[r], ranks[r].layers, o->files[0],
                          ranks[0].layers);
        }
    }
    int layers = rc ? 0 : ranks[0].layers;
    for (int l = 0; l < layers; l++) {
        double lo = ranks[0].value[l], hi = lo;
        for (int r = 1; r < o->nfiles; r++) {
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
        printf("%d ranks, %d layers; worst rank disagreement %.3g%% (layer %d)\n", o->nfiles, layers, 100 * worst,
               worst_layer < 0 ? 0 : worst_layer);
        if (worst > o->tolerance) {
            rc = cli_fail("calibrate",
                          "ranks disagree by %.3g%% at layer %d, more than --tolerance %.3g%%: the captures "
                          "are not of one model/input",
                          100 * worst, worst_layer, 100 * o->tolerance);
        }
    }
    if (!rc && o->envelope_with) {
        rc = load_capture(o->envelope_with, &ranks[o->nfiles], 1);
        if (!rc && ranks[o->nfiles].layers != layers) {
            rc = cli_fail("calibrate", "%s has %d layers, the captures %d", o->envelope_with, ranks[o->nfiles].layers,
                          layers);
        }
        for (int l = 0; l < layers && !rc; l++) {
            envelope[l] = fmax(envelope[l], ranks[o->nfiles].value[l]);
        }
    }
    free(ranks);
    *layers_out = layers;
    return rc;
}

/* The v1 document (cJSON_Print text; the caller frees). */
static char *v1_text(const calibrate_opts_t *o, const double *envelope, int layers) {
    char created[64];
    time_t now = time(NULL);
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%S+00:00", gmtime(&now));
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", V1_FORMAT);
    cJSON_AddNumberToObject(root, "num_layers", layers);
    cJSON_AddNumberToObject(root, "latent_dim", 512);
    cJSON_AddRawToObject(root, "denominator", "2688.0");
    cJSON_AddStringToObject(root, "formula", "s_l = max_abs(kv_c_normed) / (6 * 448)");
    cJSON_AddStringToObject(root, "model", o->model);
    cJSON *ds = cJSON_AddObjectToObject(root, "dataset");
    cJSON_AddStringToObject(ds, "name", o->dataset);
    cJSON_AddNumberToObject(ds, "ranks", o->nfiles);
    cJSON_AddStringToObject(root, "created_utc", o->created_utc ? o->created_utc : created);
    cJSON_AddStringToObject(root, "hook", o->hook);
    cJSON *m = cJSON_AddArrayToObject(root, "max_abs");
    cJSON *s = cJSON_AddArrayToObject(root, "scales");
    for (int l = 0; l < layers; l++) {
        cJSON_AddItemToArray(m, cJSON_CreateNumber(envelope[l]));
        cJSON_AddItemToArray(s, cJSON_CreateNumber(envelope[l] / 2688.0));
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    return text;
}

/* Temporary file beside --out, checked by the plugin there, renamed over --out when accepted. */
static int write_checked(const calibrate_opts_t *o, cli_host_t *host, const char *text, int layers) {
    cli_out_t out;
    if (cli_out_open("calibrate", o->out, &out)) {
        return 1;
    }
    cli_out_write(&out, text, strlen(text)); /* a failure (and its errno) is reported by the sync */
    if (cli_out_sync(&out)) {
        return 1;
    }
    if (host && plugin_check(host, out.temp, o->out)) {
        cli_out_abort(&out);
        return 1;
    }
    if (cli_out_commit(&out)) {
        return 1;
    }
    printf("wrote %s (%d layers)%s\n", o->out, layers, host ? "" : "; not checked by a plugin (--no-check)");
    return 0;
}

/* Why nothing was written when the plugin that checks the file did not open: none selected, or the one
 * the user gave (--plugin, NVFP4_MLA_PLUGIN, else the installed one) refused on the line above. */
static int no_plugin(const calibrate_opts_t *o, const cli_host_t *host) {
    const char *env = getenv(NVFP4_MLA_PLUGIN_ENV);
    if (host->loader.reason && strcmp(host->loader.reason, NVFP4_MLA_REASON_NOT_SELECTED) == 0) {
        return cli_fail("calibrate", "no plugin to check %s against, so nothing was written: set NVFP4_MLA_PLUGIN "
                                     "(or --plugin), or pass --no-check to write it unchecked", o->out);
    }
    char given[4200];
    snprintf(given, sizeof given, o->plugin ? "--plugin %s" : env && env[0] ? NVFP4_MLA_PLUGIN_ENV "=%s" : "%s",
             o->plugin ? o->plugin : env && env[0] ? env : host->loader.path);
    return cli_fail("calibrate", "the plugin that would check %s (%s) cannot be used (the line above says why), so "
                                 "nothing was written: fix it, or pass --no-check to write the file unchecked",
                    o->out, given);
}

int cli_calibrate_cmd(int argc, char **argv) {
    calibrate_opts_t o;
    if (parse_opts(argc, argv, &o)) {
        return 1;
    }
    cli_host_t host;
    int have_host = !o.no_check;
    if (have_host && cli_host_open_for(&host, o.plugin, NVFP4_MLA_CAP_CONFIG_CACHE_IDENTITY)) {
        return no_plugin(&o, &host);
    }
    double envelope[MAX_LAYERS];
    int layers, rc = have_host && o.envelope_with ? plugin_refuses_input(&host, o.envelope_with) : 0;
    rc = rc ? rc : envelope_of(&o, envelope, &layers);
    char *text = rc ? NULL : v1_text(&o, envelope, layers);
    if (!rc) {
        rc = !text ? cli_fail("calibrate", "out of memory") : write_checked(&o, have_host ? &host : NULL, text, layers);
    }
    free(text);
    if (have_host) {
        cli_host_close(&host);
    }
    return rc;
}
