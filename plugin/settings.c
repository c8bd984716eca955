/* Boolean, path and choice settings (see settings.h). Plain C with no plugin dependency, because the host
 * loader compiles this file as well. */
#include "settings.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
    if (len >= out_size) {
        snprintf(message, message_size, "%s is %zu bytes long, longer than the %zu-byte limit of a path", name, len,
                 out_size - 1);
        return -1;
    }
    memcpy(out, value, len + 1);
    return 0;
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
    if (len >= out_size) {
        snprintf(message, message_size, "%s is %zu bytes long, longer than the %zu-byte limit of a path", name, len,
                 out_size - 1);
        return -1;
    }
    memcpy(out, value, len);
    out[len] = '\0';
    return 0;
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
