/* nvfp4-mla quality: reconstruction error per layer and mode on synthetic latents that follow the
 * real per-layer max_abs profile (QUALITY.md). Modes: outer scale 1.0, static
 * calibrated (scales through the plugin's configuration), per-token, static and per-token written
 * with the writer policy of --policy (mse by default; none with --policy rtn: every other mode is
 * written by rtn), and the 656-byte FP8 record. */
#include <cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "synth.h"

enum { MODE_IDENTITY, MODE_STATIC, MODE_PER_TOKEN, MODE_STATIC_POLICY, MODE_PER_TOKEN_POLICY, MODE_FP8_656, MODES };
/* The policy modes' names carry the policy's ("static-mse"); set by quality_open. */
static char mode_names[MODES][32] = {"outer-1.0", "static", "per-token", "static-", "per-token-", "fp8-656"};
static int policy_modes; /* 0 under --policy rtn: the policy columns are left out */

static int active(int m) {
    return policy_modes || (m != MODE_STATIC_POLICY && m != MODE_PER_TOKEN_POLICY);
}

/* Per-layer static scales, asked of the plugin exactly as a runtime would. */
static int layer_scales(cli_host_t *host, const char *path, const char *shown, int layers, float *scales) {
    nvfp4_mla_config_t *cfg = cli_scales_config(host, "quality", path, shown, "the plugin refuses the scales file %s: %s");
    if (!cfg) {
        return 1;
    }
    for (int l = 0; l < layers; l++) {
        host->table->config_layer_scale(cfg, (uint32_t)l, &scales[l]);
    }
    host->table->config_destroy(cfg);
    return 0;
}

/* The records of each mode for a layer of static scale `scale`; `policy` writes the policy modes. */
static void mode_flags(float scale, uint32_t policy, cli_codec_flags_t f[MODES]) {
    const float per_token = nvfp4_mla_default_outer_scale(NVFP4_MLA_SCALE_PER_TOKEN);
    f[MODE_IDENTITY] = (cli_codec_flags_t){NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC, 1.0f, 0};
    f[MODE_STATIC] = (cli_codec_flags_t){NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC, scale, 0};
    f[MODE_PER_TOKEN] = (cli_codec_flags_t){NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, per_token, 0};
    f[MODE_STATIC_POLICY] = (cli_codec_flags_t){NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC, scale, policy};
    f[MODE_PER_TOKEN_POLICY] =
        (cli_codec_flags_t){NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, per_token, policy};
    f[MODE_FP8_656] = (cli_codec_flags_t){NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC, 1.0f, 0};
}

/* Every active mode on one layer's tokens. */
static int measure_layer(cli_host_t *host, const uint16_t *tokens, int64_t count, float scale, uint32_t policy,
                         synth_error_t *err) {
    cli_codec_flags_t f[MODES];
    mode_flags(scale, policy, f);
    memset(err, 0, MODES * sizeof *err);
    for (int m = MODE_IDENTITY; m < MODE_FP8_656; m++) {
        if (active(m) && synth_measure_nvfp4(host, &f[m], tokens, count, &err[m])) {
            return 1;
        }
    }
    synth_measure_fp8_656(tokens, count, &err[MODE_FP8_656]);
    return 0;
}

/* What the command line asks for. */
typedef struct quality_opts {
    const char *plugin, *scales, *json_path; /* borrowed from argv; scales NULL = the built-in profile */
    long long count;
    unsigned long long seed;
    uint32_t policy; /* --policy: the writer policy measured beside rtn */
} quality_opts_t;

static int parse_quality(int argc, char **argv, quality_opts_t *o) {
    cli_seen_t seen = {0};
    *o = (quality_opts_t){.count = 512, .seed = 1, .policy = NVFP4_MLA_WRITER_POLICY_MSE};
    for (int i = 1; i < argc; i += 2) { /* every flag takes a value */
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        const char **slot = strcmp(argv[i], "--plugin") == 0   ? &o->plugin
                            : strcmp(argv[i], "--scales") == 0 ? &o->scales
                            : strcmp(argv[i], "--json") == 0   ? &o->json_path
                                                               : NULL;
        const int numeric = strcmp(argv[i], "--tokens") == 0 || strcmp(argv[i], "--seed") == 0;
        if (!slot && !numeric && strcmp(argv[i], "--policy") != 0) {
            return cli_fail("quality", strncmp(argv[i], "--", 2) == 0 ? "unknown flag %s (nvfp4-mla quality --help "
                                                                         "lists the flags)"
                                                                       : "unexpected argument %s: quality takes flags only",
                            argv[i]);
        } else if (!v) {
            return cli_fail("quality", "%s needs a value", argv[i]);
        } else if (cli_once("quality", &seen, argv[i])) {
            return 1;
        } else if (slot) {
            *slot = v;
        } else if (!numeric) {
            if (cli_parse_policy("quality", v, &o->policy)) {
                return 1;
            }
        } else if (strcmp(argv[i], "--tokens") == 0 ? cli_parse_int("quality", argv[i], v, 2, 65536, &o->count)
                                                    : cli_parse_u64("quality", argv[i], v, &o->seed)) {
            return 1;
        }
    }
    return o->json_path ? cli_check_distinct("quality", o->json_path, &o->scales, 1) : 0;
}

/* A JSON string literal for `text` (quotes and escapes by cJSON); the caller frees. */
static char *json_string(const char *text) {
    cJSON *s = cJSON_CreateString(text);
    char *out = s ? cJSON_PrintUnformatted(s) : NULL;
    cJSON_Delete(s);
    return out;
}

/* Where a --json file came from: the shared keys (provenance.c), this tool's build and the backend
 * (always the CPU one: the figures are arithmetic, the same on any machine). bench/device_code.py
 * --stamp then adds the device code's digest (issue 57). NULL when out of memory; the caller frees. */
static char *provenance_json(const cli_host_t *host, int argc, char **argv) {
    cJSON *prov = cli_provenance(host, "nvfp4-mla", argc, argv);
    cJSON *build = cJSON_AddObjectToObject(prov, "build"), *dev = cJSON_AddObjectToObject(prov, "device");
    cJSON_AddStringToObject(build, "buildtype", NVFP4_MLA_CLI_BUILDTYPE);
    cJSON_AddStringToObject(dev, "name", "the CPU backend");
    cJSON_AddStringToObject(dev, "driver", "none (no GPU used)");
    char *text = cJSON_PrintUnformatted(prov);
    cJSON_Delete(prov);
    return text;
}

/* A run: the profile, its static scales from the plugin, the open plugin, the token buffer and the
 * optional JSON output (with --json, rows go to `out` as they are measured, comma-separated after
 * the first). */
typedef struct quality_run {
    quality_opts_t o;
    int argc;         /* the command line, for the JSON's provenance */
    char **argv;
    cli_profile_t profile;
    cli_host_t host;
    float *scales;    /* [profile.layers] */
    uint16_t *tokens; /* [o.count, 576] bf16 */
    cli_out_t out;    /* open while o.json_path is set; written through cli_out_printf, which keeps a
                         failed write's errno */
    int rows;         /* JSON rows written */
} quality_run_t;

static void print_mode_columns(void) {
    for (int m = 0; m < MODES; m++) {
        if (active(m)) printf(" %13s", mode_names[m]);
    }
}

static void print_percent_row(const double *v) {
    for (int m = 0; m < MODES; m++) {
        if (active(m)) printf(" %12.2f%%", 100 * v[m]);
    }
}

/* One layer of the reconstruction table: its row, its JSON rows, the running sums. */
static int reconstruction_row(quality_run_t *r, synth_rng_t *rng, int heavy, int l, double sums[3][MODES]) {
    const double max_abs = r->profile.max_abs[l];
    synth_error_t err[MODES];
    synth_layer(rng, max_abs, heavy, r->o.count, r->tokens);
    if (measure_layer(&r->host, r->tokens, r->o.count, r->scales[l], r->o.policy, err)) {
        return 1;
    }
    double rms[MODES], median[MODES];
    for (int m = 0; m < MODES; m++) {
        rms[m] = err[m].layer_rel_rms, median[m] = err[m].median_token_rel;
        sums[0][m] += rms[m], sums[1][m] += median[m], sums[2][m] = fmax(sums[2][m], rms[m]);
        if (r->o.json_path && active(m)) {
            cli_out_printf(&r->out,
                           "%s{\"dist\": \"%s\", \"layer\": %d, \"max_abs\": %g, \"mode\": \"%s\", \"rel_rms\": %.6f, "
                           "\"median_token_rel\": %.6f, \"zero_tokens\": %.6f, \"subnormal_groups\": %.6f}",
                           r->rows++ ? ",\n" : "", heavy ? "student-t3" : "gaussian", l, max_abs, mode_names[m],
                           rms[m], median[m], err[m].zero_tokens, err[m].subnormal_groups);
        }
    }
    printf("%5d %9.4g |", l, max_abs);
    print_percent_row(rms);
    printf(" |");
    print_percent_row(median);
    printf(" | %8.1f%% %8.1f%%\n", 100 * err[MODE_IDENTITY].zero_tokens, 100 * err[MODE_IDENTITY].subnormal_groups);
    return 0;
}

/* The reconstruction table of one latent distribution over every layer, with mean and worst. */
static int reconstruction_table(quality_run_t *r, int heavy) {
    synth_rng_t rng = {r->o.seed * 1000003u + (uint64_t)heavy};
    double sums[3][MODES] = {{0}}; /* rel RMS, median per-token, worst rel RMS */
    printf("\n%s latents, %lld tokens per layer: relative RMS error | median per-token error | zero tokens\n",
           heavy ? "Student-t (nu=3)" : "Gaussian", r->o.count);
    printf("%5s %9s |", "layer", "max_abs");
    print_mode_columns();
    printf(" |");
    print_mode_columns();
    printf(" | %9s %9s\n", "1.0-zero", "1.0-subn");
    for (int l = 0; l < r->profile.layers; l++) {
        if (reconstruction_row(r, &rng, heavy, l, sums)) {
            return 1;
        }
    }
    double mean[MODES], median[MODES];
    for (int m = 0; m < MODES; m++) {
        mean[m] = sums[0][m] / r->profile.layers, median[m] = sums[1][m] / r->profile.layers;
    }
    printf("%15s |", "mean");
    print_percent_row(mean);
    printf(" |");
    print_percent_row(median);
    printf("\n%15s |", "worst layer");
    print_percent_row(sums[2]);
    printf("\n");
    return 0;
}

/* Attention output error against float64 attention over the unquantised bf16 latents, on the
 * shallowest, a middle and the deepest layer of the profile. */
static int attention_table(quality_run_t *r) {
    const double *max_abs = r->profile.max_abs;
    int shallow = 0, deep = 0;
    for (int l = 0; l < r->profile.layers; l++) {
        shallow = max_abs[l] < max_abs[shallow] ? l : shallow;
        deep = max_abs[l] > max_abs[deep] ? l : deep;
    }
    const int picks[3] = {shallow, r->profile.layers / 2, deep};
    printf("\nAttention output, 4 queries x 16 heads over 256 of %lld tokens: relative RMS error against float64\n"
           "attention over the unquantised bf16 latents (Gaussian latents)\n%5s %9s |", r->o.count, "layer", "max_abs");
    print_mode_columns();
    printf("\n");
    for (int p = 0; p < 3; p++) {
        synth_rng_t rng = {r->o.seed * 7919u + (uint64_t)p};
        synth_layer(&rng, max_abs[picks[p]], 0, r->o.count, r->tokens);
        cli_codec_flags_t f[MODES];
        mode_flags(r->scales[picks[p]], r->o.policy, f);
        double e[MODES] = {0};
        for (int m = 0; m < MODES; m++) {
            if (active(m) && synth_attend_error(&r->host, &f[m], r->tokens, r->o.count, 4, 16, 256, &e[m])) {
                return 1;
            }
        }
        printf("%5d %9.4g |", picks[p], max_abs[picks[p]]);
        print_percent_row(e);
        printf("\n");
        for (int m = 0; r->o.json_path && m < MODES; m++) {
            if (active(m)) {
                cli_out_printf(&r->out, ",\n{\"attend\": true, \"layer\": %d, \"mode\": \"%s\", \"rel_rms\": %.6f}",
                               picks[p], mode_names[m], e[m]);
            }
        }
    }
    return 0;
}

/* The plugin, the scales and the buffers of a run; the JSON output opened with its header. */
static int quality_open(quality_run_t *r) {
    const int layers = r->profile.layers;
    const char *policy = nvfp4_mla_writer_policy_name(r->o.policy);
    policy_modes = r->o.policy != NVFP4_MLA_WRITER_POLICY_RTN;
    snprintf(mode_names[MODE_STATIC_POLICY], sizeof mode_names[0], "static-%s", policy);
    snprintf(mode_names[MODE_PER_TOKEN_POLICY], sizeof mode_names[0], "per-token-%s", policy);
    r->scales = malloc((size_t)layers * sizeof *r->scales);
    r->tokens = malloc((size_t)r->o.count * NVFP4_MLA_ROW_DIM * sizeof *r->tokens);
    if (!r->scales || !r->tokens) {
        return cli_fail("quality", "out of memory");
    }
    if (cli_host_open(&r->host, r->o.plugin)) {
        return 1;
    }
    if (layer_scales(&r->host, r->profile.scales_path, r->profile.label, layers, r->scales) ||
        (r->o.json_path && cli_out_open("quality", r->o.json_path, &r->out))) {
        cli_host_close(&r->host);
        return 1;
    }
    if (r->o.json_path) {
        char *label = json_string(r->profile.label), *prov = provenance_json(&r->host, r->argc, r->argv);
        cli_out_printf(&r->out,
                       "{\"provenance\": %s,\n\"scales_file\": %s, \"tokens_per_layer\": %lld, \"seed\": %llu, "
                       "\"writer_policy\": \"%s\", \"layers\": [\n",
                       prov ? prov : "{}", label ? label : "null", r->o.count, r->o.seed, policy);
        free(label);
        free(prov);
    }
    return 0;
}

int cli_quality_cmd(int argc, char **argv) {
    static quality_run_t r;
    memset(&r, 0, sizeof r);
    r.argc = argc, r.argv = argv;
    if (parse_quality(argc, argv, &r.o) || cli_profile_load("quality", r.o.scales, &r.profile)) {
        return 1;
    }
    int rc = quality_open(&r);
    if (!rc) {
        rc = reconstruction_table(&r, 0) || reconstruction_table(&r, 1) || attention_table(&r);
        if (r.o.json_path) {
            cli_out_printf(&r.out, "\n]}\n");
            rc = rc ? (cli_out_abort(&r.out), rc) : cli_out_commit(&r.out);
        }
        cli_host_close(&r.host);
    }
    cli_profile_free(&r.profile);
    free(r.scales);
    free(r.tokens);
    return rc;
}
