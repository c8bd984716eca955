/* nvfp4-mla quality: reconstruction error per layer and mode on synthetic latents that follow the
 * real per-layer max_abs profile (performance.md, "Quality"). Modes: outer scale 1.0, static
 * calibrated (scales through the plugin's configuration), per-token, and the 656-byte FP8 record. */
#include <cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "synth.h"

enum { MODE_IDENTITY, MODE_STATIC, MODE_PER_TOKEN, MODE_FP8_656, MODES };
static const char *const mode_names[MODES] = {"outer-1.0", "static", "per-token", "fp8-656"};

/* Per-layer static scales, asked of the plugin exactly as a runtime would. */
static int layer_scales(cli_host_t *host, const char *path, int layers, float *scales) {
    char env_file[4500];
    snprintf(env_file, sizeof env_file, "VLLM_NVFP4_MLA_SCALES_FILE=%s", path);
    const char *env[] = {env_file, "KV_FP8_ROPE=1", NULL};
    nvfp4_mla_config_request_t req = {sizeof req, 0, "nvfp4_ds_mla", NULL, env, NULL, {0}};
    nvfp4_mla_config_t *cfg;
    if (host->table->config_create(&req, &cfg) != NVFP4_MLA_OK) {
        return cli_fail("quality", "%s", host->table->last_error());
    }
    for (int l = 0; l < layers; l++) {
        host->table->config_layer_scale(cfg, (uint32_t)l, &scales[l]);
    }
    host->table->config_destroy(cfg);
    return 0;
}

/* All four modes on one layer's tokens. */
static int measure_layer(cli_host_t *host, const uint16_t *tokens, int64_t count, float scale, synth_error_t *err) {
    cli_codec_flags_t f = {NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_RECORD_BYTES_368, NVFP4_MLA_SCALE_STATIC, 1.0f};
    if (synth_measure_nvfp4(host, &f, tokens, count, &err[MODE_IDENTITY])) {
        return 1;
    }
    f.scale = scale;
    if (synth_measure_nvfp4(host, &f, tokens, count, &err[MODE_STATIC])) {
        return 1;
    }
    f.scale_mode = NVFP4_MLA_SCALE_PER_TOKEN;
    f.scale = 0.0f;
    if (synth_measure_nvfp4(host, &f, tokens, count, &err[MODE_PER_TOKEN])) {
        return 1;
    }
    synth_measure_fp8_656(tokens, count, &err[MODE_FP8_656]);
    return 0;
}

/* What the command line asks for. */
typedef struct quality_opts {
    const char *plugin, *scales, *json_path; /* borrowed from argv; scales NULL = the built-in profile */
    long long count;
    unsigned long long seed;
} quality_opts_t;

static int parse_quality(int argc, char **argv, quality_opts_t *o) {
    cli_seen_t seen = {0};
    *o = (quality_opts_t){.count = 512, .seed = 1};
    for (int i = 1; i < argc; i += 2) { /* every flag takes a value */
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        const char **slot = strcmp(argv[i], "--plugin") == 0   ? &o->plugin
                            : strcmp(argv[i], "--scales") == 0 ? &o->scales
                            : strcmp(argv[i], "--json") == 0   ? &o->json_path
                                                               : NULL;
        if (!slot && strcmp(argv[i], "--tokens") != 0 && strcmp(argv[i], "--seed") != 0) {
            return cli_fail("quality", "unknown flag %s", argv[i]);
        } else if (!v) {
            return cli_fail("quality", "%s needs a value", argv[i]);
        } else if (cli_once("quality", &seen, argv[i])) {
            return 1;
        } else if (slot) {
            *slot = v;
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

int cli_quality_cmd(int argc, char **argv) {
    quality_opts_t o;
    cli_profile_t profile;
    if (parse_quality(argc, argv, &o) || cli_profile_load("quality", o.scales, &profile)) {
        return 1;
    }
    const double *max_abs = profile.max_abs;
    const int layers = profile.layers;
    const long count = (long)o.count;
    const unsigned long long seed = o.seed;
    cli_host_t host;
    float *scales = malloc((size_t)layers * sizeof *scales);
    uint16_t *tokens = malloc((size_t)count * 576 * sizeof *tokens);
    if (!scales || !tokens || cli_host_open(&host, o.plugin)) {
        free(scales);
        free(tokens);
        cli_profile_free(&profile);
        return 1;
    }
    int rc = layer_scales(&host, profile.scales_path, layers, scales);
    cli_out_t out = {0};
    rc = rc || (o.json_path && cli_out_open("quality", o.json_path, &out));
    FILE *json = rc ? NULL : out.f;
    if (json) {
        char *label = json_string(profile.label);
        fprintf(json, "{\"scales_file\": %s, \"tokens_per_layer\": %ld, \"seed\": %llu, \"layers\": [\n",
                label ? label : "null", count, seed);
        free(label);
    }
    for (int heavy = 0; heavy < 2 && !rc; heavy++) {
        synth_rng_t rng = {seed * 1000003u + (uint64_t)heavy};
        double sum[MODES] = {0}, worst[MODES] = {0}, sum_median[MODES] = {0};
        printf("\n%s latents, %ld tokens per layer: relative RMS error | median per-token error | zero tokens\n",
               heavy ? "Student-t (nu=3)" : "Gaussian", count);
        printf("%5s %9s |", "layer", "max_abs");
        for (int m = 0; m < MODES; m++) printf(" %9s", mode_names[m]);
        printf(" |");
        for (int m = 0; m < MODES; m++) printf(" %9s", mode_names[m]);
        printf(" | %9s %9s\n", "1.0-zero", "1.0-subn");
        for (int l = 0; l < layers && !rc; l++) {
            synth_error_t err[MODES];
            synth_layer(&rng, max_abs[l], heavy, count, tokens);
            if ((rc = measure_layer(&host, tokens, count, scales[l], err))) {
                break;
            }
            printf("%5d %9.4g |", l, max_abs[l]);
            for (int m = 0; m < MODES; m++) printf(" %8.2f%%", 100 * err[m].layer_rel_rms);
            printf(" |");
            for (int m = 0; m < MODES; m++) printf(" %8.2f%%", 100 * err[m].median_token_rel);
            printf(" | %8.1f%% %8.1f%%\n", 100 * err[MODE_IDENTITY].zero_tokens, 100 * err[MODE_IDENTITY].subnormal_groups);
            for (int m = 0; m < MODES; m++) {
                sum[m] += err[m].layer_rel_rms;
                sum_median[m] += err[m].median_token_rel;
                worst[m] = err[m].layer_rel_rms > worst[m] ? err[m].layer_rel_rms : worst[m];
                if (json) {
                    fprintf(json, "%s{\"dist\": \"%s\", \"layer\": %d, \"max_abs\": %g, \"mode\": \"%s\", \"rel_rms\": %.6f, "
                                  "\"median_token_rel\": %.6f, \"zero_tokens\": %.6f, \"subnormal_groups\": %.6f}",
                            heavy || l || m ? ",\n" : "", heavy ? "student-t3" : "gaussian", l, max_abs[l], mode_names[m],
                            err[m].layer_rel_rms, err[m].median_token_rel, err[m].zero_tokens, err[m].subnormal_groups);
                }
            }
        }
        if (!rc) {
            printf("%15s |", "mean");
            for (int m = 0; m < MODES; m++) printf(" %8.2f%%", 100 * sum[m] / layers);
            printf(" |");
            for (int m = 0; m < MODES; m++) printf(" %8.2f%%", 100 * sum_median[m] / layers);
            printf("\n%15s |", "worst layer");
            for (int m = 0; m < MODES; m++) printf(" %8.2f%%", 100 * worst[m]);
            printf("\n");
        }
    }
    /* Attention output error against float64 attention over the unquantised bf16 latents, on the
     * shallowest, a middle and the deepest layer of the profile. */
    int shallow = 0, deep = 0;
    for (int l = 0; l < layers; l++) {
        shallow = max_abs[l] < max_abs[shallow] ? l : shallow;
        deep = max_abs[l] > max_abs[deep] ? l : deep;
    }
    const int picks[3] = {shallow, layers / 2, deep};
    printf("\nAttention output, 4 queries x 16 heads over 256 of %ld tokens: relative RMS error against float64\n"
           "attention over the unquantised bf16 latents (Gaussian latents)\n%5s %9s |", count, "layer", "max_abs");
    for (int m = 0; m < MODES; m++) printf(" %9s", mode_names[m]);
    printf("\n");
    for (int p = 0; p < 3 && !rc; p++) {
        synth_rng_t rng = {seed * 7919u + (uint64_t)p};
        synth_layer(&rng, max_abs[picks[p]], 0, count, tokens);
        cli_codec_flags_t f = {NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_RECORD_BYTES_368, NVFP4_MLA_SCALE_STATIC, 1.0f};
        double e[MODES];
        rc = synth_attend_error(&host, &f, tokens, count, 4, 16, 256, &e[MODE_IDENTITY]);
        f.scale = scales[picks[p]];
        rc = rc || synth_attend_error(&host, &f, tokens, count, 4, 16, 256, &e[MODE_STATIC]);
        f.scale_mode = NVFP4_MLA_SCALE_PER_TOKEN;
        f.scale = 0.0f;
        rc = rc || synth_attend_error(&host, &f, tokens, count, 4, 16, 256, &e[MODE_PER_TOKEN]);
        rc = rc || synth_attend_error(&host, NULL, tokens, count, 4, 16, 256, &e[MODE_FP8_656]);
        if (!rc) {
            printf("%5d %9.4g |", picks[p], max_abs[picks[p]]);
            for (int m = 0; m < MODES; m++) printf(" %8.2f%%", 100 * e[m]);
            printf("\n");
            for (int m = 0; json && m < MODES; m++)
                fprintf(json, ",\n{\"attend\": true, \"layer\": %d, \"mode\": \"%s\", \"rel_rms\": %.6f}", picks[p],
                        mode_names[m], e[m]);
        }
    }
    if (json) {
        fprintf(json, "\n]}\n");
        rc = rc ? (cli_out_abort(&out), rc) : cli_out_commit(&out);
    }
    cli_host_close(&host);
    cli_profile_free(&profile);
    free(scales);
    free(tokens);
    return rc;
}
