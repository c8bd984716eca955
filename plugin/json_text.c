/* Reading one JSON text, and why the JSON reader refused it (see json_text.h). */
#include "json_text.h"

#include <cJSON.h>
#include <stdio.h>
#include <string.h>

/* Brackets open at byte `stop` (strings skipped); where the string open there began, or `stop`
 * when none is open. */
static size_t depth_at(const char *text, size_t stop, size_t *open_string) {
    size_t depth = 0, quote = stop;
    for (size_t i = 0; i < stop; i++) {
        const char c = text[i];
        if (quote < stop) {
            if (c == '\\') {
                i++;
            } else if (c == '"') {
                quote = stop;
            }
        } else if (c == '"') {
            quote = i;
        } else if (c == '[' || c == '{') {
            depth++;
        } else if ((c == ']' || c == '}') && depth) {
            depth--;
        }
    }
    *open_string = quote;
    return depth;
}

static int starts_with(const char *p, size_t left, const char *word) {
    const size_t n = strlen(word);
    return left >= n && strncmp(p, word, n) == 0;
}

/* Why cJSON refused `text` [len bytes], given the position `end` it returned (may be NULL). */
static void refusal(const char *text, size_t len, const char *end, char *out, size_t out_size) {
    size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
    size_t last = len; /* one past the last byte that is not whitespace */
    while (last > 0 && strchr(" \t\r\n", text[last - 1])) {
        last--;
    }
    size_t open_string;
    const size_t open_at_end = depth_at(text, len, &open_string);
    if (last == 0) {
        snprintf(out, out_size, "is empty (no JSON value)");
    } else if (at < len && (text[at] == '[' || text[at] == '{') &&
               depth_at(text, at, &open_string) >= CJSON_NESTING_LIMIT) {
        snprintf(out, out_size,
                 "nests arrays and objects more than %d deep at byte offset %zu (the JSON reader's limit)",
                 CJSON_NESTING_LIMIT, at);
    } else if ((open_string < len && at >= open_string) || (at + 1 >= last && open_at_end > 0)) {
        /* the refusal falls in a string the text never closes, or on its last byte with brackets open */
        snprintf(out, out_size, "ends at byte offset %zu before its JSON value is complete (cut short?)", len);
    } else {
        const char *words[] = {"NaN", "-NaN", "nan", "Infinity", "-Infinity", "inf", "-inf"};
        for (size_t w = 0; w < sizeof words / sizeof words[0]; w++) {
            if (starts_with(text + at, len - at, words[w])) {
                snprintf(out, out_size, "holds %s at byte offset %zu: NaN and Infinity are not JSON numbers", words[w],
                         at);
                return;
            }
        }
        snprintf(out, out_size, "is malformed JSON near byte offset %zu", at);
    }
}

size_t nvfp4_utf8_length(const unsigned char *p, size_t left) {
    const unsigned char c = p[0];
    size_t n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (n == 0 || n > left) {
        return 0;
    }
    const unsigned char lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    for (size_t i = 1; i < n; i++) {
        if (p[i] < (i == 1 ? lo : 0x80) || p[i] > (i == 1 ? hi : 0xBF)) {
            return 0;
        }
    }
    return n;
}

/* What cJSON takes but JSON (RFC 8259) does not, which would change what the text means: a NUL byte
 * (a trailing one after the value; inside a string, where C cuts the string there), a \u0000 escape
 * ("scales\u0000evil" read as the key "scales"), a raw control character or ill-formed UTF-8 in a
 * string (Python's json refuses the file the tool wrote), a number with a leading zero ("078" read as
 * 78), a leading UTF-8 byte order mark (which cJSON skips and Python's json refuses). The refusal's words in `why` and 1, else 0. */
static int lexical_refusal(const char *text, size_t len, char *why, size_t size) {
    const unsigned char *t = (const unsigned char *)text;
    int in_string = 0;
    if (len >= 3 && t[0] == 0xEF && t[1] == 0xBB && t[2] == 0xBF) { /* cJSON skips it, Python's json refuses it */
        snprintf(why, size, "starts with a UTF-8 byte order mark (bytes EF BB BF), which JSON text must not carry "
                            "(RFC 8259 section 8.1): save the file without it");
        return 1;
    }
    for (size_t i = 0; i < len; i++) {
        const unsigned char c = t[i];
        size_t n = 1;
        if (c == 0) {
            snprintf(why, size, "holds a NUL byte at byte offset %zu (no JSON text has one)", i);
        } else if (in_string && c == '\\' && i + 5 < len && t[i + 1] == 'u' && strncmp(text + i + 2, "0000", 4) == 0) {
            snprintf(why, size, "holds \\u0000 at byte offset %zu: a key or string with a NUL in it would be cut "
                                "there", i);
        } else if (in_string && c < 0x20) {
            snprintf(why, size, "holds the control character 0x%02x in a string at byte offset %zu (JSON escapes "
                                "them)", c, i);
        } else if (in_string && c >= 0x80 && !(n = nvfp4_utf8_length(t + i, len - i))) {
            snprintf(why, size, "holds invalid UTF-8 in a string at byte offset %zu", i);
        } else if (!in_string && (c == '-' || (c >= '0' && c <= '9')) &&
                   (i == 0 || !strchr("0123456789.eE+-", t[i - 1]))) {
            const size_t d = i + (c == '-'); /* a number starts: its first digit may be 0 only alone */
            if (d + 1 < len && t[d] == '0' && t[d + 1] >= '0' && t[d + 1] <= '9') {
                snprintf(why, size, "holds a number with a leading zero at byte offset %zu (not JSON)", i);
                return 1;
            }
            continue;
        } else {
            in_string ^= c == '"';
            i += (in_string && c == '\\') ? 1 : n - 1; /* an escape's second byte is never the string's end */
            continue;
        }
        return 1;
    }
    return 0;
}

cJSON *nvfp4_json_read(const char *text, size_t len, char *why, size_t why_size) {
    if (lexical_refusal(text, len, why, why_size)) {
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        refusal(text, len, end, why, why_size);
        return NULL;
    }
    for (const char *p = end; p && p < text + len; p++) { /* cJSON stops at the value's end */
        if (!strchr(" \t\r\n", *p)) {
            cJSON_Delete(root);
            snprintf(why, why_size, "has trailing data after its JSON value at byte offset %zu", (size_t)(p - text));
            return NULL;
        }
    }
    why[0] = '\0';
    return root;
}

const char *nvfp4_json_type_name(int type) {
    switch (type & 0xFF) {
    case cJSON_NULL: return "null";
    case cJSON_False:
    case cJSON_True: return "a boolean";
    case cJSON_Number: return "a number";
    case cJSON_String: return "a string";
    case cJSON_Array: return "an array";
    case cJSON_Object: return "an object";
    default: return "not a JSON value";
    }
}
