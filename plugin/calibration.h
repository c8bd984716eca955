/* Static calibration files, format nvfp4_ds_mla_outer_scale_v1 (docs/record-format.md section 7).
 *
 * A strict loader: exact format string, exact key case, no duplicate keys at any depth, no unknown
 * keys, exactly num_layers finite positive scales whose implied max_abs (scale * 2688) is a latent
 * magnitude a model stores (NVFP4_CALIBRATION_*_MAX_ABS), max_abs consistent with them; every rejection
 * names the key (and the byte offset for malformed JSON) and the file it came from.
 */
#ifndef NVFP4_MLA_PLUGIN_CALIBRATION_H
#define NVFP4_MLA_PLUGIN_CALIBRATION_H

#include <cJSON.h>
#include <stddef.h>

#include "nvfp4_mla.h"

#define NVFP4_CALIBRATION_FORMAT "nvfp4_ds_mla_outer_scale_v1"
#define NVFP4_CALIBRATION_DENOMINATOR 2688.0
#define NVFP4_CALIBRATION_MAX_LAYERS 4096
#define NVFP4_CALIBRATION_MAX_FILE_BYTES (4u << 20)
/* The latent magnitudes a scale may imply (max_abs = scale * 2688): f16's normal range, [2^-14, 65504].
 * Outside it no layer of a real model is served: a scale of 1e30 (max_abs 2.7e33) decodes every latent
 * to 0, one of 1e-30 saturates every latent; the calibrated layers of real models lie at 0.02-5.2. */
#define NVFP4_CALIBRATION_MIN_MAX_ABS 6.103515625e-05
#define NVFP4_CALIBRATION_MAX_MAX_ABS 65504.0
/* max_abs[l] / 2688 and scales[l] may differ by float printing, never by more than this (relative). */
#define NVFP4_CALIBRATION_REL_TOLERANCE 1e-6

typedef struct nvfp4_calibration {
    uint32_t num_layers; /* layers with a scale; later layers (a draft layer) use 1.0 */
    float *scales;       /* [num_layers], owned; free with nvfp4_calibration_free */
} nvfp4_calibration_t;

/* Reads a whole regular file of at most max_bytes into a NUL-terminated heap buffer. ERR_IO (cannot
 * open or read) or ERR_CONFIG (not a regular file, too large) names the file. */
nvfp4_mla_status_t nvfp4_read_file(const char *path, size_t max_bytes, char **data, size_t *len);

/* Parses JSON text (length-bounded, no NUL needed) by nvfp4_json_read; `origin` names it in
 * messages. A refusal (ERR_CONFIG) names its cause (empty, cut short, NaN/Infinity, nested past the
 * reader's limit, malformed, trailing data; json_text.h) and the byte offset. The caller
 * cJSON_Delete()s *root. */
nvfp4_mla_status_t nvfp4_json_parse(const char *text, size_t len, const char *origin, cJSON **root);

/* Refuses an object, at any depth, that holds a key twice (cJSON keeps both and a lookup finds the
 * first, while other JSON readers take the last): ERR_CONFIG naming the key path, e.g.
 * key "dataset"."name" appears more than once. */
#define NVFP4_JSON_PATH_MAX 256
nvfp4_mla_status_t nvfp4_json_unique_keys(const cJSON *root, const char *origin);

/* Validates a v1 object (its keys unique at every depth); on success fills *out (caller frees). */
nvfp4_mla_status_t nvfp4_calibration_from_json(const cJSON *object, const char *origin, nvfp4_calibration_t *out);

/* Parses and validates v1 JSON text (length-bounded); `origin` names it in messages. */
nvfp4_mla_status_t nvfp4_calibration_from_text(const char *text, size_t len, const char *origin,
                                               nvfp4_calibration_t *out);

/* Reads, parses and validates a v1 file. */
nvfp4_mla_status_t nvfp4_calibration_load_file(const char *path, nvfp4_calibration_t *out);

void nvfp4_calibration_free(nvfp4_calibration_t *cal);

#endif
