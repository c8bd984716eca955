/* The part of a results file's provenance that every writer of one shares (the keys of
 * bench/provenance.py, which the Python measurements use; bench/compare_table.py reads them all):
 * the plugin as it reports itself, the date, the command line and the NVFP4_MLA_* / CUDA_VISIBLE_DEVICES
 * settings of the environment. The caller adds what only it knows ("build", "device"):
 * nvfp4-mla-bench (bench/bench_provenance.cu) and `nvfp4-mla quality --json` (quality.c). */
#include <cJSON.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

extern char **environ;

static cJSON *plugin_part(const cli_host_t *host) {
    cJSON *p = cJSON_CreateObject();
    char real[PATH_MAX];
    cJSON_AddStringToObject(p, "path", realpath(host->loader.path, real) ? real : host->loader.path);
    cJSON_AddStringToObject(p, "name", host->table->plugin_name);
    cJSON_AddStringToObject(p, "version", host->table->version);
    cJSON_AddStringToObject(p, "git_revision", host->table->git_revision);
    cJSON_AddStringToObject(p, "cuda_archs", host->table->cuda_archs);
    cJSON_AddStringToObject(p, "record_format", host->table->record_format);
    return p;
}

/* The command line as one string, `program` (may be NULL) first; an argument holding a space or a
 * quote is put in single quotes. Cut at the buffer's end, never past it. */
static void command_line(const char *program, int argc, char **argv, char *out, size_t size) {
    size_t used = 0;
    out[0] = '\0';
    for (int i = program ? -1 : 0; i < argc && used < size; i++) {
        const char *arg = i < 0 ? program : argv[i];
        const char *quote = strpbrk(arg, " \t\"'") ? "'" : "";
        const int n = snprintf(out + used, size - used, "%s%s%s%s", used ? " " : "", quote, arg, quote);
        used += n > 0 ? (size_t)n : 0;
    }
}

struct cJSON *cli_provenance(const cli_host_t *host, const char *program, int argc, char **argv) {
    cJSON *prov = cJSON_CreateObject();
    cJSON_AddItemToObject(prov, "plugin", plugin_part(host));
    cJSON_AddStringToObject(prov, "schema", "nvfp4-mla provenance 1");
    char date[32], text[8192];
    const time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    cJSON_AddStringToObject(prov, "date_utc", date);
    command_line(program, argc, argv, text, sizeof text);
    cJSON_AddStringToObject(prov, "command", text);
    cJSON_AddStringToObject(prov, "cwd", getcwd(text, sizeof text) ? text : "?");
    cJSON *env = cJSON_AddObjectToObject(prov, "environment");
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (eq && (!strncmp(*e, "NVFP4_MLA_", 10) || !strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21))) {
            snprintf(text, sizeof text, "%.*s", (int)(eq - *e), *e);
            cJSON_AddStringToObject(env, text, eq + 1);
        }
    }
    return prov;
}
