/* The real per-layer magnitude profile `demo` and `quality` generate latents from (see synth.h).
 *
 * The default profile is compiled in (profile_data.h, generated from
 * data/glm52-nvfp4-nf3-hybrid_mla_outer_scales_v1.json at build time), so an installed tool
 * works from any folder. The plugin still reads the static scales from a file, exactly as a server
 * does: the built-in bytes are copied into a private temporary folder for that, removed afterwards,
 * and their cache identity is the real file's. */
#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json_text.h"
#include "profile_data.h"
#include "synth.h"

/* The max_abs array of a v1 document, or NULL after saying what the text is instead. */
static const cJSON *max_abs_of(const char *cmd, const char *origin, const cJSON *root) {
    const cJSON *array = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "max_abs") : NULL;
    if (!cJSON_IsObject(root)) {
        cli_fail(cmd, "%s holds %s, not a v1 scales file (a JSON object with a \"max_abs\" array)", origin,
                 nvfp4_json_type_name(root->type));
    } else if (!array) {
        cli_fail(cmd, "%s: no \"max_abs\" key to take the magnitude profile from", origin);
    } else if (!cJSON_IsArray(array) || !array->child) {
        cli_fail(cmd, "%s: \"max_abs\" is %s, not a non-empty array of per-layer magnitudes", origin,
                 cJSON_IsArray(array) ? "empty" : nvfp4_json_type_name(array->type));
    } else {
        return array;
    }
    return NULL;
}

/* max_abs[] of a v1 document. */
static int profile_from_text(const char *cmd, const char *origin, const char *text, size_t len, cli_profile_t *p) {
    cJSON *root = cli_json_parse(cmd, origin, text, len);
    const cJSON *array = root ? max_abs_of(cmd, origin, root) : NULL;
    if (!array) {
        cJSON_Delete(root);
        return 1;
    }
    const int n = cJSON_GetArraySize(array);
    if (!(p->max_abs = malloc((size_t)n * sizeof *p->max_abs))) {
        cJSON_Delete(root);
        return cli_fail(cmd, "out of memory");
    }
    int l = 0;
    for (const cJSON *item = array->child; item; item = item->next) {
        if (!cJSON_IsNumber(item) || !(item->valuedouble > 0)) {
            cJSON_Delete(root);
            return cli_fail(cmd, "%s: \"max_abs\"[%d] is not a positive number", origin, l);
        }
        p->max_abs[l++] = item->valuedouble;
    }
    p->layers = n;
    cJSON_Delete(root);
    return 0;
}

/* The built-in bytes as a file the plugin can read, in a folder of our own. */
static int builtin_file(const char *cmd, cli_profile_t *p) {
    const char *tmp = getenv("TMPDIR");
    snprintf(p->temp_dir, sizeof p->temp_dir, "%s/nvfp4-mla-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    /* Registered for the signal cleanup from before the folder exists: an interrupted run leaves nothing. */
    sigset_t held;
    cli_signals_hold(&held);
    const int made = mkdtemp(p->temp_dir) != NULL, e = errno;
    if (made) {
        snprintf(p->scales_path, sizeof p->scales_path, "%s/%s", p->temp_dir, cli_profile_name);
        p->cleanup[0] = cli_cleanup_add(p->temp_dir, 1);
        p->cleanup[1] = cli_cleanup_add(p->scales_path, 0);
    }
    cli_signals_release(&held);
    if (!made) {
        p->temp_dir[0] = '\0';
        return cli_fail(cmd, "cannot create a temporary folder for the built-in profile in %s (%s): %s",
                        tmp && tmp[0] ? tmp : "/tmp", tmp && tmp[0] ? "TMPDIR" : "TMPDIR is unset: the default",
                        strerror(e));
    }
    if (p->cleanup[0] < 0 || p->cleanup[1] < 0) {
        return cli_fail(cmd, "%s: too many temporary files to clean up on a signal", p->scales_path);
    }
    return cli_write_file(cmd, p->scales_path, cli_profile_bytes, cli_profile_size);
}

int cli_profile_load(const char *cmd, const char *path, cli_profile_t *p) {
    memset(p, 0, sizeof *p);
    p->cleanup[0] = p->cleanup[1] = -1;
    if (!path) {
        snprintf(p->label, sizeof p->label, "built-in %s", cli_profile_name);
        int rc = profile_from_text(cmd, p->label, (const char *)cli_profile_bytes, cli_profile_size, p) ||
                 builtin_file(cmd, p);
        if (rc) {
            cli_profile_free(p);
        }
        return rc;
    }
    const size_t n = strlen(path);
    if (n && (strchr(" \t\n\v\f\r", path[0]) || strchr(" \t\n\v\f\r", path[n - 1]))) {
        /* The plugin reads VLLM_NVFP4_MLA_SCALES_FILE stripped (as vLLM does): it would read another file. */
        return cli_fail(cmd, "--scales \"%s\" has leading or trailing whitespace, which the plugin strips from "
                             "VLLM_NVFP4_MLA_SCALES_FILE: give the path without it", path);
    }
    uint8_t *text;
    size_t len;
    if (cli_read_file(cmd, path, CLI_MAX_CALIBRATION_BYTES, &text, &len)) {
        return 1;
    }
    snprintf(p->label, sizeof p->label, "%s", path);
    snprintf(p->scales_path, sizeof p->scales_path, "%s", path);
    int rc = profile_from_text(cmd, path, (const char *)text, len, p);
    free(text);
    if (rc) {
        cli_profile_free(p);
    }
    return rc;
}

void cli_profile_free(cli_profile_t *p) {
    free(p->max_abs);
    p->max_abs = NULL;
    if (p->temp_dir[0]) {
        sigset_t held;
        cli_signals_hold(&held);
        unlink(p->scales_path);
        rmdir(p->temp_dir);
        cli_cleanup_forget(p->cleanup[0]);
        cli_cleanup_forget(p->cleanup[1]);
        p->cleanup[0] = p->cleanup[1] = -1;
        p->temp_dir[0] = '\0';
        cli_signals_release(&held);
    }
}
