/* The strict nvfp4_ds_mla_outer_scale_v1 loader (see calibration.h). */
#include "calibration.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "errors.h"
#include "json_text.h"

static const char *file_kind(mode_t mode) {
    return S_ISDIR(mode) ? "a directory" : S_ISFIFO(mode) ? "a FIFO" : S_ISCHR(mode) ? "a character device"
           : S_ISBLK(mode) ? "a block device" : S_ISSOCK(mode) ? "a socket" : "not a regular file";
}

/* Only regular files: a FIFO would block the open (hence O_NONBLOCK until fstat has refused it) and
 * /dev/zero would be read until the limit; the size is checked before a byte is read or allocated. */
nvfp4_mla_status_t nvfp4_read_file(const char *path, size_t max_bytes, char **data, size_t *len) {
    *data = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        return nvfp4_fail(NVFP4_MLA_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    }
    struct stat st;
    nvfp4_mla_status_t status = NVFP4_MLA_OK;
    if (fstat(fd, &st) != 0) {
        status = nvfp4_fail(NVFP4_MLA_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        status = nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s is %s, not a regular file", path, file_kind(st.st_mode));
    } else if ((uint64_t)st.st_size > max_bytes) {
        status = nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s is larger than the %zu-byte limit (%lld bytes)", path, max_bytes,
                            (long long)st.st_size);
    }
    size_t size = status ? 0 : (size_t)st.st_size, n = 0;
    char *buf = status ? NULL : malloc(size + 1);
    if (!status && !buf) {
        status = nvfp4_fail(NVFP4_MLA_ERR_OUT_OF_MEMORY, "cannot allocate %zu bytes to read %s", size + 1, path);
    }
    while (!status && n <= size) { /* one byte more than fstat said: a file that grew is refused */
        ssize_t got = read(fd, buf + n, size + 1 - n);
        if (got < 0 && errno != EINTR) {
            status = nvfp4_fail(NVFP4_MLA_ERR_IO, "cannot read %s: %s", path, strerror(errno));
        } else if (got == 0) {
            break;
        } else if (got > 0) {
            n += (size_t)got;
        }
    }
    close(fd);
    if (!status && n != size) {
        status = nvfp4_fail(NVFP4_MLA_ERR_IO, "%s changed size while being read", path);
    }
    if (status) {
        free(buf);
        return status;
    }
    buf[n] = '\0';
    *data = buf;
    *len = n;
    return NVFP4_MLA_OK;
}

nvfp4_mla_status_t nvfp4_json_parse(const char *text, size_t len, const char *origin, cJSON **root) {
    char why[NVFP4_JSON_REFUSAL_MAX];
    if (!(*root = nvfp4_json_read(text, len, why, sizeof why))) {
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: %s", origin, why);
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
    }
    return nvfp4_json_unique_keys(object, origin);
}

static int compare_keys(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The keys of one object, sorted (n log n: a fuzzed object may hold a hundred thousand keys). */
static nvfp4_mla_status_t object_unique(const cJSON *object, const char *origin, const char *path) {
    size_t n = 0;
    for (const cJSON *c = object->child; c; c = c->next) {
        n++;
    }
    if (n < 2) {
        return NVFP4_MLA_OK;
    }
    const char **keys = malloc(n * sizeof *keys);
    if (!keys) {
        return nvfp4_fail(NVFP4_MLA_ERR_OUT_OF_MEMORY, "%s: cannot allocate %zu keys", origin, n);
    }
    n = 0;
    for (const cJSON *c = object->child; c; c = c->next) {
        keys[n++] = c->string;
    }
    qsort(keys, n, sizeof *keys, compare_keys);
    nvfp4_mla_status_t st = NVFP4_MLA_OK;
    for (size_t i = 1; i < n && !st; i++) {
        if (strcmp(keys[i - 1], keys[i]) == 0) {
            st = nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: key %s%s\"%s\" appears more than once", origin, path,
                            path[0] ? "." : "", keys[i]);
        }
    }
    free(keys);
    return st;
}

/* path[0..used) names `item` ("" at the top, then "dataset" quoted, "dataset"."w"[1] and so on); depth
 * is bounded by cJSON's nesting limit. */
static nvfp4_mla_status_t unique_below(const cJSON *item, const char *origin, char *path, size_t used) {
    nvfp4_mla_status_t st = cJSON_IsObject(item) ? object_unique(item, origin, path) : NVFP4_MLA_OK;
    size_t index = 0;
    for (const cJSON *c = item->child; c && !st; c = c->next, index++) {
        if (!cJSON_IsObject(c) && !cJSON_IsArray(c)) {
            continue;
        }
        int wrote = cJSON_IsObject(item)
                        ? snprintf(path + used, NVFP4_JSON_PATH_MAX - used, "%s\"%s\"", used ? "." : "", c->string)
                        : snprintf(path + used, NVFP4_JSON_PATH_MAX - used, "[%zu]", index);
        size_t next = used + (size_t)wrote;
        if (wrote < 0 || next >= NVFP4_JSON_PATH_MAX) { /* too deep to name: the path stops here */
            path[used] = '\0';
            next = used;
        }
        st = unique_below(c, origin, path, next);
        path[used] = '\0';
    }
    return st;
}

nvfp4_mla_status_t nvfp4_json_unique_keys(const cJSON *root, const char *origin) {
    char path[NVFP4_JSON_PATH_MAX] = "";
    return unique_below(root, origin, path, 0);
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
        return nvfp4_fail(NVFP4_MLA_ERR_CONFIG, "%s: \"%s\" has %u entries, \"num_layers\" says %u", origin, key, count,
                          n);
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
            return nvfp4_fail(NVFP4_MLA_ERR_CONFIG,
                              "%s: \"scales\"[%u] = %g must be finite, positive and a normal float", origin, l, s);
        }
        if (s * NVFP4_CALIBRATION_DENOMINATOR < NVFP4_CALIBRATION_MIN_MAX_ABS ||
            s * NVFP4_CALIBRATION_DENOMINATOR > NVFP4_CALIBRATION_MAX_MAX_ABS) {
            free(scales);
            return nvfp4_fail(NVFP4_MLA_ERR_CONFIG,
                              "%s: \"scales\"[%u] = %g implies max_abs %g (scale * 2688), outside [%g, %g], the "
                              "latent magnitudes a model stores (f16's normal range; real layers lie at 0.02-5): it "
                              "would decode that layer's latents %s",
                              origin, l, s, s * NVFP4_CALIBRATION_DENOMINATOR, NVFP4_CALIBRATION_MIN_MAX_ABS,
                              NVFP4_CALIBRATION_MAX_MAX_ABS,
                              s * NVFP4_CALIBRATION_DENOMINATOR < NVFP4_CALIBRATION_MIN_MAX_ABS ? "saturated" : "as zeros");
        }
        if (max_abs_item) {
            double m = max_abs_item->valuedouble;
            if (!isfinite(m) || fabs(m / NVFP4_CALIBRATION_DENOMINATOR - s) > NVFP4_CALIBRATION_REL_TOLERANCE * s) {
                free(scales);
                return nvfp4_fail(
                    NVFP4_MLA_ERR_CONFIG,
                    "%s: \"max_abs\"[%u] = %g disagrees with \"scales\"[%u] = %g (expected max_abs / 2688)", origin, l,
                    m, l, s);
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
