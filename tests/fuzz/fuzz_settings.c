/* libFuzzer target: the settings rule (plugin/settings.h) and the configuration it feeds.
 *
 * The input is up to four values separated by '\n'. The first is checked against the rule as a
 * property: a boolean is accepted exactly when it is "", 0, 1, false or true (any case) and then has
 * the right value; a path is accepted exactly when it has no surrounding whitespace and then comes
 * back unchanged; a stripped path (VLLM_NVFP4_MLA_SCALES_FILE) is accepted whenever it fits once
 * stripped, and comes back as the value without its surrounding whitespace; a choice (the writer
 * policies) exactly when it is "" or a name in any case, and then picks that name; a refusal names
 * the variable and quotes the value in printable ASCII. All four then go through
 * nvfp4_config_create as the DYNAMIC_SCALE, KV_FP8_ROPE, SCALES_FILE and WRITER_POLICY of an
 * environment snapshot (sanitizers watch the rest). A broken property is __builtin_trap. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"
#include "settings.h"

static void check(int ok) {
    if (!ok) {
        __builtin_trap();
    }
}

static int printable_ascii(const char *s) {
    for (; *s; s++) {
        if (*s < 0x20 || *s >= 0x7F) {
            return 0;
        }
    }
    return 1;
}

static int is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

static void check_rule(const char *v) {
    char message[NVFP4_SETTING_MESSAGE_MAX], out[64];
    int on = -1;
    int accepted = !v[0] || !strcmp(v, "0") || !strcmp(v, "1") || !strcasecmp(v, "false") || !strcasecmp(v, "true");
    if (nvfp4_setting_bool("FUZZ_BOOL", v, &on, message, sizeof message) == 0) {
        check(accepted && on == (!strcmp(v, "1") || !strcasecmp(v, "true")));
    } else {
        check(!accepted && !strncmp(message, "FUZZ_BOOL=\"", 11) && strstr(message, "is not a boolean") &&
              printable_ascii(message));
    }
    static const char *const choices[2] = {"rtn", "mse"};
    int index = -1;
    const int known = !strcasecmp(v, "rtn") ? 0 : !strcasecmp(v, "mse") ? 1 : -1;
    if (nvfp4_setting_choice("FUZZ_CHOICE", v, choices, 2, &index, message, sizeof message) == 0) {
        check((!v[0] && index == 0) || (known >= 0 && index == known));
    } else {
        check(v[0] && known < 0 && !strncmp(message, "FUZZ_CHOICE=\"", 13) &&
              strstr(message, "is not one of: rtn, mse (any case); unset or empty is rtn") && printable_ascii(message));
    }
    size_t n = strlen(v);
    int spaced = n && (is_space(v[0]) || is_space(v[n - 1]));
    if (nvfp4_setting_path("FUZZ_PATH", v, out, sizeof out, message, sizeof message) == 0) {
        check(!spaced && n < sizeof out && !strcmp(out, v));
    } else {
        check((spaced || n >= sizeof out) && !strncmp(message, "FUZZ_PATH", 9) && printable_ascii(message) && !out[0]);
    }
    size_t lead = 0, kept = n;
    while (kept && is_space(v[kept - 1])) kept--;
    while (lead < kept && is_space(v[lead])) lead++;
    kept -= lead;
    if (nvfp4_setting_path_stripped("FUZZ_PATH", v, out, sizeof out, message, sizeof message) == 0) {
        check(kept < sizeof out && strlen(out) == kept && !strncmp(out, v + lead, kept) &&
              (!kept || (!is_space(out[0]) && !is_space(out[kept - 1]))));
    } else {
        check(kept >= sizeof out && !strncmp(message, "FUZZ_PATH", 9) && printable_ascii(message) && !out[0]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) {
        return 0;
    }
    memcpy(text, data, size);
    text[size] = '\0'; /* an embedded NUL ends the text, as it ends an environment value */
    char *values[4] = {text, "", "", ""};
    for (int i = 1; i < 4; i++) {
        char *nl = strchr(values[i - 1], '\n');
        if (!nl) {
            break;
        }
        *nl = '\0';
        values[i] = nl + 1;
    }
    check_rule(values[0]);
    static const char *const names[4] = {NVFP4_ENV_DYNAMIC_SCALE "=", NVFP4_ENV_FP8_ROPE "=", NVFP4_ENV_SCALES_FILE "=",
                                         NVFP4_ENV_WRITER_POLICY "="};
    char *env[5] = {NULL, NULL, NULL, NULL, NULL};
    for (int i = 0; i < 4; i++) {
        env[i] = malloc(strlen(names[i]) + strlen(values[i]) + 1);
        if (env[i]) {
            strcat(strcpy(env[i], names[i]), values[i]);
        }
    }
    if (env[0] && env[1] && env[2] && env[3]) {
        nvfp4_mla_config_request_t req = {sizeof req, 0, "nvfp4_ds_mla", NULL, (const char *const *)env, NULL, {0}};
        nvfp4_mla_config_t *cfg = NULL;
        if (nvfp4_config_create(&req, &cfg) == NVFP4_MLA_OK) {
            nvfp4_config_destroy(cfg);
        }
    }
    for (int i = 0; i < 4; i++) {
        free(env[i]);
    }
    free(text);
    return 0;
}
