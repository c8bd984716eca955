/* libFuzzer target: the checkpoint's config.json text (the nvfp4_mla_outer_scales field). */
#include <stddef.h>
#include <stdint.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    nvfp4_mla_config_t *cfg = nvfp4_config_new();
    if (!cfg) {
        return 0;
    }
    nvfp4_checkpoint_from_text(cfg, (const char *)data, size, "/nonexistent-model", "/nonexistent-model/config.json",
                               "fp8-rope-368");
    nvfp4_config_destroy(cfg);
    return 0;
}
