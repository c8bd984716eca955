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

cJSON *nvfp4_json_read(const char *text, size_t len, char *why, size_t why_size) {
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
