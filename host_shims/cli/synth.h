/* Synthetic latents and reconstruction-error measurement, shared by `quality` and `demo`.
 *
 * Latents as QUALITY.md describes them: per layer, Gaussian or Student-t (nu = 3) values
 * with a fixed per-channel magnitude spread (log-normal, sigma 0.5) and a per-token norm spread
 * (log-normal, sigma 1), scaled so that the layer's largest |value| equals the real max_abs of that
 * layer. */
#ifndef NVFP4_MLA_CLI_SYNTH_H
#define NVFP4_MLA_CLI_SYNTH_H

#include <stdint.h>

#include "cli.h"

typedef struct synth_rng {
    uint64_t state;
} synth_rng_t;

double synth_normal(synth_rng_t *rng);

/* Fills tokens [count, 576] bf16 for one layer of largest |latent| = amax. */
void synth_layer(synth_rng_t *rng, double amax, int heavy_tailed, int64_t count, uint16_t *tokens);

/* What a mode did to one layer's tokens. */
typedef struct synth_error {
    double layer_rel_rms;      /* ||x_hat - x|| / ||x|| over the layer */
    double median_token_rel;   /* median over tokens of ||x_hat_t - x_t|| / ||x_t|| */
    double zero_tokens;        /* fraction of non-zero tokens decoded to all zeros */
    double subnormal_groups;   /* fraction of group scales that are E4M3 subnormal (NVFP4 modes) */
    double zero_groups;        /* fraction of group scales that are zero (NVFP4 modes) */
} synth_error_t;

/* Round trip through the plugin (write then gather) in one NVFP4 mode. */
int synth_measure_nvfp4(cli_host_t *host, const cli_codec_flags_t *flags, const uint16_t *tokens, int64_t count,
                        synth_error_t *err);

/* Round trip through the 656-byte fp8_ds_mla record (docs/record-format.md section 8), encoded and
 * decoded by host_codes.h (no plugin entry writes or gathers it). */
void synth_measure_fp8_656(const uint16_t *tokens, int64_t count, synth_error_t *err);

/* Relative error of attention read from records, against float64 attention over the unquantised
 * bf16 tokens: `queries` random queries of `heads` heads, each over `topk` random tokens of the layer.
 * flags: an NVFP4 mode (records through the plugin's writer), or the 656-byte fp8_ds_mla layout in
 * static mode at 1.0 (records encoded by host_codes.h); the plugin's attend reads either. */
int synth_attend_error(cli_host_t *host, const cli_codec_flags_t *flags, const uint16_t *tokens, int64_t count,
                       int queries, int heads, int topk, double *rel_err);

/* The real per-layer max_abs profile (profile.c) and the scales file the plugin reads for it. */
typedef struct cli_profile {
    double *max_abs;        /* [layers], owned */
    int layers;
    char scales_path[4400]; /* the v1 file handed to the plugin: --scales, or a copy of the built-in */
    char temp_dir[4096];    /* the private folder of that copy, "" for --scales; removed by free */
    int cleanup[2];         /* signal cleanup slots of that folder and copy (cli_cleanup_add); -1: none */
    char label[4200];       /* how output names the profile: the --scales path or "built-in <name>" */
} cli_profile_t;

/* path: a v1 file (--scales), or NULL for the profile built into the tool. Prints and returns 1 on
 * failure (holding nothing then). */
int cli_profile_load(const char *cmd, const char *path, cli_profile_t *profile);
void cli_profile_free(cli_profile_t *profile);

#endif
