/* Reading one JSON text, and why the JSON reader refused it, in words that name the real cause.
 *
 * cJSON_ParseWithLengthOpts returns NULL and a position for five different mistakes: an empty file,
 * a file cut short, NaN or Infinity (Python's json.dump writes them), nesting past cJSON's depth
 * limit, and a syntax error; and it stops at the end of the first value, saying nothing of what
 * follows. "malformed JSON near byte offset 4559" for a file nested 10,000 deep sent users looking
 * for a typo. Plain C with no plugin dependency: the nvfp4-mla tool compiles this file too (as the
 * loader compiles settings.c), so that it reads JSON as the plugin does and in the same words. No
 * I/O, no state: safe from any thread.
 */
#ifndef NVFP4_MLA_PLUGIN_JSON_TEXT_H
#define NVFP4_MLA_PLUGIN_JSON_TEXT_H

#include <stddef.h>

/* Enough for any refusal below. */
#define NVFP4_JSON_REFUSAL_MAX 160

/* `text` [len bytes, no NUL needed] as one JSON value followed by nothing but whitespace: the root
 * (the caller cJSON_Delete()s it), or NULL and `why` (always NUL-terminated) one of, with the byte
 * offset where it applies:
 *   "is empty (no JSON value)"
 *   "ends at byte offset N before its JSON value is complete (cut short?)"
 *   "nests arrays and objects more than 1000 deep at byte offset N (the JSON reader's limit)"
 *   "holds NaN at byte offset N: NaN and Infinity are not JSON numbers"
 *   "is malformed JSON near byte offset N"
 *   "has trailing data after its JSON value at byte offset N"
 * and, for what cJSON would take but JSON is not (each would change what the text means):
 *   "holds a NUL byte at byte offset N (no JSON text has one)"
 *   "holds \u0000 at byte offset N: a key or string with a NUL in it would be cut there"
 *   "holds the control character 0xXX in a string at byte offset N (JSON escapes them)"
 *   "holds invalid UTF-8 in a string at byte offset N"
 *   "holds a number with a leading zero at byte offset N (not JSON)"
 * Callers put the text's name before it ("x.json: is empty ...", or "x.json is empty ..."). */
struct cJSON;
struct cJSON *nvfp4_json_read(const char *text, size_t len, char *why, size_t why_size);

/* Length of the UTF-8 sequence at p (`left` bytes there, at least 1), or 0 when it is not well formed
 * (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF). The JSON reader's rule for
 * strings, and the tool's for the text it writes into JSON. */
size_t nvfp4_utf8_length(const unsigned char *p, size_t left);

/* The JSON type of a parsed value, for "... is a string, not an object": "null", "a boolean",
 * "a number", "a string", "an array", "an object" (cJSON's type bits, as int). */
const char *nvfp4_json_type_name(int cjson_type);

#endif
