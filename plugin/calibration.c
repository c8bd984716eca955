/* The strict nvfp4_ds_mla_outer_scale_v1 loader (see calibration.h). */
#include "calibration.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"

nvfp4_mla_status_t nvfp4_read_file(const char *path, size_t max_bytes, char **data, size_t *len) {
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        return nvfp4_fail(NVFP4_MLA_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    }
    char *buf = malloc(max_bytes + 1);
    if (!buf) {
        fclose(f);
        return nvfp4_fail(NVFP4_MLA_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes to read %s", max_bytes, path);
    }
    size_t n = fread(buf, 1, max_bytes + 1, f);
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        return nvfp4_fail(NVFP4_MLA_ERR_IO, "cannot read %s", path);
    }
    if (n > max_bytes) {
        free(buf);
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s is larger than the %zu-byte limit", path, max_bytes);
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_json_parse(const char *text, size_t len, const char *origin, cJSON **root) {
    const char *end = NULL;
    *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!*root) {
        size_t offset = end && end >= text ? (size_t)(end - text) : 0;
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: malformed JSON near byte offset %zu", origin, offset);
    }
    /* Anything but whitespace after the value is an error too (cJSON stops at the value's end). */
    for (const char *p = end; p && p < text + len; p++) {
        if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t') {
            cJSON_Delete(*root);
            *root = NULL;
            return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: trailing data after the JSON value at byte offset %zu",
                              origin, (size_t)(p - text));
        }
    }
    return NVFP4_MLA_OK;
}

static const char *const known_keys[] = {"format", "num_layers", "latent_dim", "denominator", "formula",
                                         "model",  "dataset",    "created_utc", "hook",       "max_abs",
                                         "scales"};

static nvfp4_mla_status_t check_keys(const cJSON *object, const char *origin) {
    for (const cJSON *item = object->child; item; item = item->next) {
        int known = 0;
        for (size_t k = 0; k < sizeof known_keys / sizeof known_keys[0]; k++) {
            known |= strcmp(item->string, known_keys[k]) == 0;
        }
        if (!known) {
            return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: unknown key \"%s\" (keys are case-sensitive)", origin,
                              item->string);
        }
        for (const cJSON *other = item->next; other; other = other->next) {
            if (strcmp(item->string, other->string) == 0) {
                return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: key \"%s\" appears more than once", origin, item->string);
            }
        }
    }
    return NVFP4_MLA_OK;
}

static nvfp4_mla_status_t get_integer(const cJSON *object, const char *key, const char *origin, double lo, double hi,
                                      double *out) {
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, key);
    if (!item) {
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: missing key \"%s\"", origin, key);
    }
    if (!cJSON_IsNumber(item) || item->valuedouble != floor(item->valuedouble) || item->valuedouble < lo ||
        item->valuedouble > hi) {
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: \"%s\" must be an integer in [%.0f, %.0f]", origin, key, lo, hi);
    }
    *out = item->valuedouble;
    return NVFP4_MLA_OK;
}

/* Provenance fields are optional, but when present they must have their documented types. */
static nvfp4_mla_status_t check_provenance(const cJSON *object, const char *origin) {
    static const char *const strings[] = {"formula", "model", "created_utc", "hook"};
    for (size_t k = 0; k < sizeof strings / sizeof strings[0]; k++) {
        const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, strings[k]);
        if (item && !cJSON_IsString(item)) {
            return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: \"%s\" must be a string", origin, strings[k]);
        }
    }
    const cJSON *dataset = cJSON_GetObjectItemCaseSensitive(object, "dataset");
    if (dataset && !cJSON_IsObject(dataset)) {
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: \"dataset\" must be an object", origin);
    }
    return NVFP4_MLA_OK;
}

/* An array of exactly n numbers (booleans are not numbers); returns the items in order. */
static nvfp4_mla_status_t get_number_array(const cJSON *object, const char *key, const char *origin, uint32_t n,
                                           const cJSON **first) {
    const cJSON *array = cJSON_GetObjectItemCaseSensitive(object, key);
    if (!cJSON_IsArray(array)) {
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: \"%s\" must be an array of %u numbers", origin, key, n);
    }
    uint32_t count = 0;
    for (const cJSON *item = array->child; item; item = item->next, count++) {
        if (!cJSON_IsNumber(item)) {
            return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: \"%s\"[%u] is not a number", origin, key, count);
        }
    }
    if (count != n) {
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: \"%s\" has %u entries, \"num_layers\" says %u", origin, key, count, n);
    }
    *first = array->child;
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_calibration_from_json(const cJSON *object, const char *origin, nvfp4_calibration_t *out) {
    out->num_layers = 0;
    out->scales = NULL;
    if (!cJSON_IsObject(object)) {
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: the calibration must be a JSON object", origin);
    }
    nvfp4_mla_status_t st = check_keys(object, origin);
    if (st) {
        return st;
    }
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(object, "format");
    if (!cJSON_IsString(format) || strcmp(format->valuestring, NVFP4_CALIBRATION_FORMAT) != 0) {
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: \"format\" must be \"%s\"", origin, NVFP4_CALIBRATION_FORMAT);
    }
    double layers = 0, latent_dim = 0;
    if ((st = get_integer(object, "num_layers", origin, 1, NVFP4_CALIBRATION_MAX_LAYERS, &layers)) ||
        (st = get_integer(object, "latent_dim", origin, 0, 1e9, &latent_dim))) {
        return st;
    }
    if (latent_dim != NVFP4_MLA_LATENT_DIM) {
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: \"latent_dim\" is %.0f, must be 512", origin, latent_dim);
    }
    const cJSON *denominator = cJSON_GetObjectItemCaseSensitive(object, "denominator");
    if (!cJSON_IsNumber(denominator) || denominator->valuedouble != NVFP4_CALIBRATION_DENOMINATOR) {
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: \"denominator\" must be the number 2688.0 (6 * 448)", origin);
    }
    if ((st = check_provenance(object, origin))) {
        return st;
    }
    uint32_t n = (uint32_t)layers;
    const cJSON *scale_item, *max_abs_item = NULL;
    if ((st = get_number_array(object, "scales", origin, n, &scale_item))) {
        return st;
    }
    if (cJSON_GetObjectItemCaseSensitive(object, "max_abs") &&
        (st = get_number_array(object, "max_abs", origin, n, &max_abs_item))) {
        return st;
    }
    float *scales = malloc(n * sizeof *scales);
    if (!scales) {
        return nvfp4_fail(NVFP4_MLA_ERR_OUT_OF_MEMORY, "%s: cannot allocate %u scales", origin, n);
    }
    for (uint32_t l = 0; l < n; l++, scale_item = scale_item->next) {
        double s = scale_item->valuedouble;
        float f = (float)s;
        /* A usable scale is a positive normal float: its reciprocal is then finite (spec 4.1). */
        if (!isfinite(s) || s <= 0 || !isnormal(f)) {
            free(scales);
            return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: \"scales\"[%u] = %g must be finite, positive and a normal float",
                              origin, l, s);
        }
        if (max_abs_item) {
            double m = max_abs_item->valuedouble;
            if (!isfinite(m) || fabs(m / NVFP4_CALIBRATION_DENOMINATOR - s) > NVFP4_CALIBRATION_REL_TOLERANCE * s) {
                free(scales);
                return nvfp4_fail(NVFP4_MLA_ERR_CONFIG,
                                  "%s: \"max_abs\"[%u] = %g disagrees with \"scales\"[%u] = %g (expected max_abs / 2688)",
                                  origin, l, m, l, s);
            }
            max_abs_item = max_abs_item->next;
        }
        scales[l] = f;
    }
    out->num_layers = n;
    out->scales = scales;
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_calibration_from_text(const char *text, size_t len, const char *origin,
                                               nvfp4_calibration_t *out) {
    cJSON *root;
    nvfp4_mla_status_t st = nvfp4_json_parse(text, len, origin, &root);
    if (!st) {
        st = nvfp4_calibration_from_json(root, origin, out);
        cJSON_Delete(root);
    }
    return st;
}

nvfp4_mla_status_t nvfp4_calibration_load_file(const char *path, nvfp4_calibration_t *out) {
    char *text;
    size_t len;
    nvfp4_mla_status_t st = nvfp4_read_file(path, NVFP4_CALIBRATION_MAX_FILE_BYTES, &text, &len);
    if (!st) {
        st = nvfp4_calibration_from_text(text, len, path, out);
        free(text);
    }
    return st;
}

void nvfp4_calibration_free(nvfp4_calibration_t *cal) {
    free(cal->scales);
    cal->scales = NULL;
    cal->num_layers = 0;
}
