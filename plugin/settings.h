/* The one rule for settings read from the environment: booleans, paths, choices and counts.
 *
 * Shared by the plugin's configuration (config.c: VLLM_NVFP4_MLA_DYNAMIC_SCALE, KV_FP8_ROPE,
 * VLLM_NVFP4_MLA_SCALES_FILE, NVFP4_MLA_WRITER_POLICY) and the C host loader (NVFP4_MLA_PLUGIN; the loader library compiles
 * this file too), and mirrored rule for rule and word for word by the Python shim
 * (host_shims/python/nvfp4_mla/settings.py).
 *
 * Why strict: a value the old parser did not understand ("true", "yes", "1 ") silently meant off, which
 * ran a server on static scales at 1.0 when the user asked for per-token scales; a whitespace-only
 * scales file silently meant uncalibrated. Now:
 *   boolean  unset or "" is off; "0"/"false" off and "1"/"true" on, in any case; anything else fails;
 *   path     unset or "" is none; leading or trailing whitespace fails (it is never part of a path a
 *            user meant, and trimming it hid mistakes). One exception, where the runtime the
 *            variable comes from set the convention: VLLM_NVFP4_MLA_SCALES_FILE is read there as
 *            os.getenv(name, "").strip(), so deployments carry values such as " /x/s.json\n" that
 *            work there; it takes the stripped path (ASCII whitespace: " \t\n\v\f\r"), and empty
 *            after stripping is none (nvfp4_setting_path_stripped). NVFP4_MLA_PLUGIN, which has no
 *            such convention, keeps refusing whitespace.
 *   choice   unset or "" is the default (the first name); one of the names in any case; anything
 *            else fails (whitespace included), listing the names.
 *   count    unset or "" is the caller's default; decimal digits only, within the bounds the
 *            message gives (the plugin's NVFP4_MLA_ATTEND_SMEM_CAP; the Python shim reads no count).
 * A failure message names the variable, shows the value quoted (control, quote, backslash and
 * non-ASCII bytes escaped, so whitespace shows) and says what is accepted. No I/O, no state: the
 * functions are safe from any thread.
 */
#ifndef NVFP4_MLA_PLUGIN_SETTINGS_H
#define NVFP4_MLA_PLUGIN_SETTINGS_H

#include <stddef.h>

/* Enough for any message below (the quoted value is cut at NVFP4_SETTING_QUOTE_MAX bytes). */
#define NVFP4_SETTING_MESSAGE_MAX 768
#define NVFP4_SETTING_QUOTE_MAX 100
/* Bytes of nvfp4_setting_quote's output for any value (every byte escaped as \xHH, quotes, "..."). */
#define NVFP4_SETTING_QUOTED_MAX (NVFP4_SETTING_QUOTE_MAX * 4 + 8)

/* `value` NULL means unset. 0 and *on = 0 or 1, or -1 and `message` (NUL-terminated) says why. */
int nvfp4_setting_bool(const char *name, const char *value, int *on, char *message, size_t message_size);

/* `value` NULL means unset. 0 and the path in `out` ("" = none), or -1 and `message` says why
 * (surrounding whitespace, or longer than out_size - 1 bytes); `out` is then "". */
int nvfp4_setting_path(const char *name, const char *value, char *out, size_t out_size, char *message,
                       size_t message_size);

/* The same path with ASCII whitespace (" \t\n\v\f\r") stripped from both ends first, as the runtime
 * that defines the variable strips it; "" after stripping is none. -1 and `message` only when the
 * stripped path is longer than out_size - 1 bytes. */
int nvfp4_setting_path_stripped(const char *name, const char *value, char *out, size_t out_size, char *message,
                                size_t message_size);

/* A choice among `count` names (`names[0]` is the default). `value` NULL means unset. 0 and *index:
 * 0 for unset or "", else the position of the name `value` equals with ASCII case ignored; or -1
 * and `message` names the variable, shows the value quoted and lists every accepted name. */
int nvfp4_setting_choice(const char *name, const char *value, const char *const *names, int count, int *index,
                         char *message, size_t message_size);

/* A decimal count in [lo, hi] (digits only; `what` names it in the message, `none` says what unset
 * means). `value` NULL means unset. 0 and *out (left as it was for unset or ""), or -1 and
 * `message` names the variable, shows the value quoted and gives the bounds. */
int nvfp4_setting_count(const char *name, const char *value, const char *what, unsigned long long lo,
                        unsigned long long hi, const char *none, unsigned long long *out, char *message,
                        size_t message_size);

/* `value` between double quotes, escaped as above and cut after NVFP4_SETTING_QUOTE_MAX bytes ("..."
 * follows the closing quote then). Always NUL-terminated. */
void nvfp4_setting_quote(const char *value, char *out, size_t out_size);

#endif
