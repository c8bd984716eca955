/* The cache-format configuration: one immutable object per process (docs/record-format.md 6 and 7).
 * Built from the environment (VLLM_NVFP4_MLA_DYNAMIC_SCALE, VLLM_NVFP4_MLA_SCALES_FILE,
 * KV_FP8_ROPE, NVFP4_MLA_WRITER_POLICY: rows of the settings table, settings.h), the cache dtype and
 * the checkpoint; it fixes layout, mode, per-layer scales, the writer policy and the
 * persistent-cache identity. The policy is decided here, once, and not at context init: the host
 * passes it in every write as it passes the layout and mode of the same configuration, so one
 * decision (from the host's environment snapshot too) serves every context. It stays out of the
 * identity: readers decode the records of every policy with the same arithmetic. */
#ifndef NVFP4_MLA_PLUGIN_CONFIG_H
#define NVFP4_MLA_PLUGIN_CONFIG_H

#include "nvfp4_mla.h"
#include "settings.h" /* the variables' names (NVFP4_ENV_*) and their rule */

#define NVFP4_CHECKPOINT_FIELD "nvfp4_mla_outer_scales"
#define NVFP4_IDENTITY_DEFAULT "vllm-default-v1"
#define NVFP4_CONFIG_JSON_MAX_BYTES (16u << 20)

nvfp4_mla_status_t nvfp4_config_create(const nvfp4_mla_config_request_t *request, nvfp4_mla_config_t **out);
nvfp4_mla_status_t nvfp4_config_info(const nvfp4_mla_config_t *config, nvfp4_mla_config_info_t *info);
nvfp4_mla_status_t nvfp4_config_layer_scale(const nvfp4_mla_config_t *config, uint32_t layer, float *scale_out);
void nvfp4_config_destroy(nvfp4_mla_config_t *config);

/* The checkpoint part alone, from config.json text (exposed for tests and the fuzzer): fills
 * `config`'s scales, identity and source, or fails naming `config_path` and the key. `config` comes
 * from nvfp4_config_new. */
nvfp4_mla_status_t nvfp4_checkpoint_from_text(nvfp4_mla_config_t *config, const char *text, size_t len,
                                              const char *model_dir, const char *config_path,
                                              const char *layout_name);
nvfp4_mla_config_t *nvfp4_config_new(void);

#endif
