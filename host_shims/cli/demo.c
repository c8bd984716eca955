/* nvfp4-mla demo: the README's main job. Shows, on whatever backend is there (the CPU here), what
 * a runtime sees: the plugin and its capabilities, generated latents of three real layers (the
 * shallowest, a middle and the deepest of the GLM-5.2 profile) written in each mode, the group-scale
 * statistics `inspect` reports, the decoded error per mode (static and per-token also written with
 * the writer policy of --policy, mse by default), and the cache identity of each mode. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "synth.h"

#define DEMO_TOKENS 256

/* The identity of the configuration `env` gives; a refusal names the profile as the user knows it
 * (`shown`), never the private copy (`given`) that is gone by the time the user reads the line. */
static void identity_of(cli_host_t *host, const char *const *env, const char *label, const char *given,
                        const char *shown) {
    nvfp4_mla_config_t *cfg;
    if (cli_config_for_env(host, env, &cfg) != NVFP4_MLA_OK) {
        char why[2048];
        cli_scales_refusal(host, given, shown, why, sizeof why);
        printf("  %-34s refused: %s\n", label, why);
        return;
    }
    nvfp4_mla_config_info_t info = {.struct_size = sizeof info};
    host->table->config_info(cfg, &info);
    printf("  %-34s %s\n", label, info.identity);
    host->table->config_destroy(cfg);
}

/* --plugin P, --scales FILE and --policy NAME, each at most once. */
static int parse_demo(int argc, char **argv, const char **plugin, const char **scales, uint32_t *policy) {
    cli_seen_t seen = {0};
    for (int i = 1; i < argc; i += 2) {
        const int is_policy = strcmp(argv[i], "--policy") == 0;
        if (strcmp(argv[i], "--plugin") != 0 && strcmp(argv[i], "--scales") != 0 && !is_policy) {
            return cli_fail("demo", strncmp(argv[i], "--", 2) == 0 ? "unknown flag %s (nvfp4-mla demo --help lists the "
                                                                      "flags)"
                                                                    : "unexpected argument %s: demo takes flags only",
                            argv[i]);
        }
        if (i + 1 >= argc) {
            return cli_fail("demo", "%s needs a value", argv[i]);
        }
        if (cli_once("demo", &seen, argv[i])) {
            return 1;
        }
        if (is_policy) {
            if (cli_parse_policy("demo", argv[i + 1], policy)) {
                return 1;
            }
        } else {
            *(argv[i][3] == 'l' ? plugin : scales) = argv[i + 1];
        }
    }
    return 0;
}

/* One layer in each mode: the error table's rows (static and per-token again with `policy`, when
 * it is not rtn: the same records' format, other codes). */
static int demo_layer(cli_host_t *host, const nvfp4_mla_config_t *cfg, synth_rng_t *rng, int l, double max_abs,
                      uint32_t policy, uint16_t *tokens) {
    float scale;
    host->table->config_layer_scale(cfg, (uint32_t)l, &scale);
    synth_layer(rng, max_abs, 0, DEMO_TOKENS, tokens);
    const float per_token = nvfp4_mla_default_outer_scale(NVFP4_MLA_SCALE_PER_TOKEN);
    char static_policy[32], per_token_policy[32];
    snprintf(static_policy, sizeof static_policy, "static-%s", nvfp4_mla_writer_policy_name(policy));
    snprintf(per_token_policy, sizeof per_token_policy, "per-token-%s", nvfp4_mla_writer_policy_name(policy));
    const struct {
        const char *name;
        cli_codec_flags_t flags;
    } modes[] = {{"outer-1.0", {NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC, 1.0f, 0}},
                 {"static", {NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC, scale, 0}},
                 {"per-token", {NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, per_token, 0}},
                 {static_policy, {NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC, scale, policy}},
                 {per_token_policy, {NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, per_token, policy}}};
    synth_error_t e;
    for (int m = 0; m < (policy == NVFP4_MLA_WRITER_POLICY_RTN ? 3 : 5); m++) {
        if (synth_measure_nvfp4(host, &modes[m].flags, tokens, DEMO_TOKENS, &e)) {
            return 1;
        }
        printf("%5d %8.4g %-13s %10.2f%% %10.2f%% %11.1f%% %12.1f%% %11.1f%%\n", l, max_abs, modes[m].name,
               100 * e.layer_rel_rms, 100 * e.median_token_rel, 100 * e.zero_tokens, 100 * e.subnormal_groups,
               100 * e.zero_groups);
    }
    synth_measure_fp8_656(tokens, DEMO_TOKENS, &e);
    printf("%5d %8.4g %-13s %10.2f%% %10.2f%% %11.1f%% %13s %12s\n", l, max_abs, "fp8-656", 100 * e.layer_rel_rms,
           100 * e.median_token_rel, 100 * e.zero_tokens, "-", "-");
    return 0;
}

/* The shallowest, a middle and the deepest layer, written and decoded in every mode. Static scales
 * come from the plugin's configuration of the profile's scales file (cli_scales_config), exactly as a
 * server gets them. */
static int demo_layers(cli_host_t *host, const cli_profile_t *profile, uint32_t policy) {
    nvfp4_mla_config_t *cfg = cli_scales_config(host, "demo", profile->scales_path, profile->label,
                                                 "the plugin refuses the scales file %s: %s");
    if (!cfg) {
        return 1;
    }
    const double *max_abs = profile->max_abs;
    int shallow = 0, deep = 0;
    for (int l = 0; l < profile->layers; l++) {
        shallow = max_abs[l] < max_abs[shallow] ? l : shallow;
        deep = max_abs[l] > max_abs[deep] ? l : deep;
    }
    const int picks[3] = {shallow, profile->layers / 2, deep};
    uint16_t *tokens = malloc((size_t)DEMO_TOKENS * NVFP4_MLA_ROW_DIM * sizeof *tokens);
    synth_rng_t rng = {42};
    int rc = tokens ? 0 : cli_fail("demo", "out of memory");
    printf("\n%d Gaussian tokens per layer, 368-byte records, encode -> inspect -> decode on the CPU backend\n"
           "(writer policy rtn; the -%s rows: the same modes written with writer policy %s)\n",
           DEMO_TOKENS, nvfp4_mla_writer_policy_name(policy), nvfp4_mla_writer_policy_name(policy));
    printf("%5s %8s %-13s %11s %11s %12s %13s %12s\n", "layer", "max_abs", "mode", "rel RMS", "median tok",
           "zero tokens", "subnormal gs", "zero gs");
    for (int p = 0; p < 3 && !rc; p++) {
        rc = demo_layer(host, cfg, &rng, picks[p], max_abs[picks[p]], policy, tokens);
    }
    free(tokens);
    host->table->config_destroy(cfg);
    return rc;
}

int cli_demo_cmd(int argc, char **argv) {
    const char *plugin = NULL, *path = NULL;
    uint32_t policy = NVFP4_MLA_WRITER_POLICY_MSE;
    cli_profile_t profile;
    if (parse_demo(argc, argv, &plugin, &path, &policy) || cli_profile_load("demo", path, &profile)) {
        return 1;
    }
    cli_host_t host;
    if (cli_host_open_for(&host, plugin, NVFP4_MLA_CAP_OP_WRITE | NVFP4_MLA_CAP_OP_GATHER |
                                             NVFP4_MLA_CAP_CONFIG_CACHE_IDENTITY)) {
        cli_profile_free(&profile);
        return 1;
    }
    printf("plugin %s: %s %s, ABI %u.%u\n", host.loader.path, host.table->plugin_name, host.table->version,
           host.table->header.abi_major, host.table->header.abi_minor);
    printf("magnitude profile: %s (%d layers)\n", profile.label, profile.layers);
    char env_file[CLI_SCALES_ENV_MAX];
    const char *static_env[3];
    cli_scales_env(profile.scales_path, env_file, static_env);
    int rc = demo_layers(&host, &profile, policy);
    if (!rc) {
        printf("\ncache identity per configuration (persistent offload namespaces):\n");
        const char *none[] = {NULL};
        const char *per_token[] = {"VLLM_NVFP4_MLA_DYNAMIC_SCALE=1", "KV_FP8_ROPE=1", NULL};
        const char *both[] = {"VLLM_NVFP4_MLA_DYNAMIC_SCALE=1", "KV_FP8_ROPE=1", env_file, NULL};
        /* A writer policy changes no reader: the per-token identity stays the same. */
        const char *per_token_mse[] = {"VLLM_NVFP4_MLA_DYNAMIC_SCALE=1", "KV_FP8_ROPE=1",
                                       "NVFP4_MLA_WRITER_POLICY=mse", NULL};
        char shown[sizeof profile.label + 32];
        snprintf(shown, sizeof shown, strcmp(profile.label, profile.scales_path) ? "<a copy of the %s profile>" : "%s",
                 profile.label);
        const char *given = profile.scales_path;
        identity_of(&host, none, "nvfp4_ds_mla, uncalibrated:", given, shown);
        identity_of(&host, static_env, "nvfp4_ds_mla, static calibrated:", given, shown);
        identity_of(&host, per_token, "nvfp4_ds_mla, per-token:", given, shown);
        identity_of(&host, per_token_mse, "per-token, writer policy mse:", given, shown);
        identity_of(&host, both, "per-token + scales file:", given, shown);
    }
    cli_host_close(&host);
    cli_profile_free(&profile);
    return rc;
}
