/* The settings table and its rule (see settings.h). Plain C with no plugin dependency beyond the ABI
 * headers, because the host loader compiles this file as well. */
#include "settings.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "nvfp4_mla.h"

/* The writer policies in id order (nvfp4_mla_record.h), as NVFP4_MLA_WRITER_POLICY spells them. */
static const char *const policy_names[NVFP4_MLA_WRITER_POLICY_COUNT] = {
#define NVFP4_POLICY_NAME(id, name) [id] = name,
    NVFP4_MLA_FOR_EACH_WRITER_POLICY(NVFP4_POLICY_NAME)
#undef NVFP4_POLICY_NAME
};
/* The attention's engines and merges; init maps the index (context.c). */
static const char *const mma_names[] = {"auto", "sync"};
static const char *const merge_names[] = {"auto", "separate", "in-launch"};
static const char *const graph_names[] = {"auto", "off"};
#define NAMES(list) list, (int)(sizeof list / sizeof list[0])

const nvfp4_setting_t nvfp4_settings[NVFP4_SETTINGS] = {
    [NVFP4_SETTING_DYNAMIC_SCALE] = {NVFP4_ENV_DYNAMIC_SCALE, NVFP4_SETTING_KIND_BOOL, "config_create", "off"},
    [NVFP4_SETTING_FP8_ROPE] = {NVFP4_ENV_FP8_ROPE, NVFP4_SETTING_KIND_BOOL, "config_create", "off"},
    [NVFP4_SETTING_SCALES_FILE] = {NVFP4_ENV_SCALES_FILE, NVFP4_SETTING_KIND_PATH_STRIPPED, "config_create",
                                   "none"},
    [NVFP4_SETTING_WRITER_POLICY] = {NVFP4_ENV_WRITER_POLICY, NVFP4_SETTING_KIND_CHOICE, "config_create", "rtn",
                                     NAMES(policy_names)},
    [NVFP4_SETTING_ATTEND_SMEM_CAP] = {NVFP4_ENV_ATTEND_SMEM_CAP, NVFP4_SETTING_KIND_COUNT, "init", "no cap", NULL, 0,
                                       "a decimal byte count", 16384, INT32_MAX},
    [NVFP4_SETTING_ATTEND_MMA] = {NVFP4_ENV_ATTEND_MMA, NVFP4_SETTING_KIND_CHOICE, "init", "auto", NAMES(mma_names)},
    [NVFP4_SETTING_ATTEND_MERGE] = {NVFP4_ENV_ATTEND_MERGE, NVFP4_SETTING_KIND_CHOICE, "init", "auto",
                                    NAMES(merge_names)},
    [NVFP4_SETTING_ATTEND_GRAPHS] = {NVFP4_ENV_ATTEND_GRAPHS, NVFP4_SETTING_KIND_CHOICE, "init", "auto",
                                     NAMES(graph_names)},
    [NVFP4_SETTING_PLUGIN] = {NVFP4_MLA_PLUGIN_ENV, NVFP4_SETTING_KIND_PATH, "loader", "no plugin selected"},
    [NVFP4_SETTING_UNCALIBRATED] = {NVFP4_ENV_UNCALIBRATED, NVFP4_SETTING_KIND_BOOL, "vllm_plugin", "off"},
};

/* Appends `piece` when it fits whole: a cut message beats an overflow (callers size the buffer). */
static void append(char *out, size_t out_size, size_t *used, const char *piece) {
    size_t len = strlen(piece);
    if (*used + len < out_size) {
        memcpy(out + *used, piece, len + 1);
        *used += len;
    }
}

void nvfp4_setting_quote(const char *value, char *out, size_t out_size) {
    size_t used = 0, n = strlen(value);
    if (!out_size) {
        return;
    }
    out[0] = '\0';
    append(out, out_size, &used, "\"");
    for (size_t i = 0; i < n && i < NVFP4_SETTING_QUOTE_MAX; i++) {
        unsigned char c = (unsigned char)value[i];
        char piece[8];
        if (c == '"' || c == '\\') {
            snprintf(piece, sizeof piece, "\\%c", c);
        } else if (c == '\t' || c == '\n' || c == '\r') {
            snprintf(piece, sizeof piece, "\\%c", c == '\t' ? 't' : c == '\n' ? 'n' : 'r');
        } else if (c < 0x20 || c >= 0x7F) {
            snprintf(piece, sizeof piece, "\\x%02x", c);
        } else {
            snprintf(piece, sizeof piece, "%c", c);
        }
        append(out, out_size, &used, piece);
    }
    append(out, out_size, &used, n > NVFP4_SETTING_QUOTE_MAX ? "\"..." : "\"");
}

int nvfp4_setting_bool(const char *name, const char *value, int *on, char *message, size_t message_size) {
    *on = 0;
    if (!value || !value[0] || strcmp(value, "0") == 0 || strcasecmp(value, "false") == 0) {
        return 0;
    }
    if (strcmp(value, "1") == 0 || strcasecmp(value, "true") == 0) {
        *on = 1;
        return 0;
    }
    char quoted[NVFP4_SETTING_QUOTED_MAX];
    nvfp4_setting_quote(value, quoted, sizeof quoted);
    snprintf(message, message_size,
             "%s=%s is not a boolean: use 1 or true for on, 0 or false for off (any case); unset or empty is off",
             name, quoted);
    return -1;
}

static int is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* `len` bytes of `value` into `out` as a path, or -1 and `message` when they do not fit. */
static int copy_path(const char *name, const char *value, size_t len, char *out, size_t out_size, char *message,
                     size_t message_size) {
    if (len >= out_size) {
        snprintf(message, message_size, "%s is %zu bytes long, longer than the %zu-byte limit of a path", name, len,
                 out_size - 1);
        return -1;
    }
    memcpy(out, value, len);
    out[len] = '\0';
    return 0;
}

int nvfp4_setting_path(const char *name, const char *value, char *out, size_t out_size, char *message,
                       size_t message_size) {
    out[0] = '\0';
    if (!value || !value[0]) {
        return 0;
    }
    size_t len = strlen(value);
    if (is_space(value[0]) || is_space(value[len - 1])) {
        char quoted[NVFP4_SETTING_QUOTED_MAX];
        nvfp4_setting_quote(value, quoted, sizeof quoted);
        snprintf(message, message_size,
                 "%s=%s has leading or trailing whitespace: give the path without it; unset or empty means none",
                 name, quoted);
        return -1;
    }
    return copy_path(name, value, len, out, out_size, message, message_size);
}

int nvfp4_setting_path_stripped(const char *name, const char *value, char *out, size_t out_size, char *message,
                                size_t message_size) {
    out[0] = '\0';
    if (!value) {
        return 0;
    }
    size_t len = strlen(value);
    while (len && is_space(value[len - 1])) {
        len--;
    }
    while (len && is_space(value[0])) {
        value++, len--;
    }
    return copy_path(name, value, len, out, out_size, message, message_size);
}

int nvfp4_setting_choice(const char *name, const char *value, const char *const *names, int count, int *index,
                         char *message, size_t message_size) {
    *index = 0;
    if (!value || !value[0]) {
        return 0;
    }
    for (int i = 0; i < count; i++) {
        if (strcasecmp(value, names[i]) == 0) {
            *index = i;
            return 0;
        }
    }
    char quoted[NVFP4_SETTING_QUOTED_MAX], list[256] = "";
    size_t used = 0;
    nvfp4_setting_quote(value, quoted, sizeof quoted);
    for (int i = 0; i < count; i++) {
        append(list, sizeof list, &used, i ? ", " : "");
        append(list, sizeof list, &used, names[i]);
    }
    snprintf(message, message_size, "%s=%s is not one of: %s (any case); unset or empty is %s", name, quoted, list,
             count ? names[0] : "the default");
    return -1;
}

int nvfp4_setting_count(const char *name, const char *value, const char *what, unsigned long long lo,
                        unsigned long long hi, const char *none, unsigned long long *out, char *message,
                        size_t message_size) {
    if (!value || !value[0]) {
        return 0;
    }
    char *end = NULL;
    errno = 0;
    const unsigned long long v = strtoull(value, &end, 10);
    if (value[0] < '0' || value[0] > '9' || *end || errno || v < lo || v > hi) {
        char quoted[NVFP4_SETTING_QUOTED_MAX];
        nvfp4_setting_quote(value, quoted, sizeof quoted);
        snprintf(message, message_size, "%s=%s is not %s in [%llu, %llu]; unset or empty is %s", name, quoted, what,
                 lo, hi, none);
        return -1;
    }
    *out = v;
    return 0;
}

const char *nvfp4_setting_lookup(const char *const *environ, const char *name) {
    if (!environ) {
        return secure_getenv(name);
    }
    size_t n = strlen(name);
    for (const char *const *e = environ; *e; e++) {
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') {
            return *e + n + 1;
        }
    }
    return NULL;
}

int nvfp4_setting_parse(const nvfp4_setting_t *s, const char *value, nvfp4_setting_value_t *out, char *message,
                        size_t message_size) {
    switch (s->kind) {
    case NVFP4_SETTING_KIND_BOOL: return nvfp4_setting_bool(s->name, value, &out->on, message, message_size);
    case NVFP4_SETTING_KIND_PATH:
        return nvfp4_setting_path(s->name, value, out->path, out->path_size, message, message_size);
    case NVFP4_SETTING_KIND_PATH_STRIPPED:
        return nvfp4_setting_path_stripped(s->name, value, out->path, out->path_size, message, message_size);
    case NVFP4_SETTING_KIND_CHOICE:
        return nvfp4_setting_choice(s->name, value, s->choices, s->choice_count, &out->index, message, message_size);
    case NVFP4_SETTING_KIND_COUNT:
        return nvfp4_setting_count(s->name, value, s->what, s->lo, s->hi, s->unset, &out->count, message,
                                   message_size);
    }
    snprintf(message, message_size, "%s: setting kind %d is unknown", s->name, (int)s->kind);
    return -1;
}

int nvfp4_setting_read(nvfp4_setting_id_t id, const char *const *environ, nvfp4_setting_value_t *out, char *message,
                       size_t message_size) {
    const nvfp4_setting_t *s = &nvfp4_settings[id];
    return nvfp4_setting_parse(s, nvfp4_setting_lookup(environ, s->name), out, message, message_size);
}
