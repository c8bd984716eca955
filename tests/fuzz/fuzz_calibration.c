/* libFuzzer target: the strict nvfp4_ds_mla_outer_scale_v1 loader on arbitrary bytes. */
#include <stddef.h>
#include <stdint.h>

#include "calibration.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    nvfp4_calibration_t cal;
    if (nvfp4_calibration_from_text((const char *)data, size, "fuzz.json", &cal) == NVFP4_MLA_OK) {
        for (uint32_t l = 0; l < cal.num_layers; l++) {
            if (!(cal.scales[l] > 0.0f)) {
                __builtin_trap(); /* an accepted file must hold only positive scales */
            }
        }
        nvfp4_calibration_free(&cal);
    }
    return 0;
}
