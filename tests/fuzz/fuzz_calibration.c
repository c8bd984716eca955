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
            /* ... whose implied max_abs is a latent magnitude (issue 58, N12; float rounding allowed for) */
            const double max_abs = (double)cal.scales[l] * NVFP4_CALIBRATION_DENOMINATOR;
            if (!(max_abs >= NVFP4_CALIBRATION_MIN_MAX_ABS * 0.999999 && max_abs <= NVFP4_CALIBRATION_MAX_MAX_ABS * 1.000001)) {
                __builtin_trap();
            }
            if (size >= 3 && data[0] == 0xEF && data[1] == 0xBB && data[2] == 0xBF) {
                __builtin_trap(); /* nor start with a byte order mark */
            }
        }
        nvfp4_calibration_free(&cal);
    }
    return 0;
}
