/* nvfp4-mla-bench: where bench.json came from, written into it (issue 47), with the keys of
 * bench/provenance.py (the Python measurements' helper; compare_table.py reads both): the plugin as
 * it reports itself, this build, the device and its driver, the date, the command and the settings
 * in the environment. */
#include <cjson/cJSON.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <string>

#include "bench.h"

extern char **environ;

/* The NVIDIA kernel driver's version ("580.159.04") from /proc, else "unknown". */
static void driver_version(char *out, size_t n) {
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    if (!f) return;
    char line[512];
    if (fgets(line, sizeof line, f)) {
        /* The first word after "Kernel Module" made of digits and dots with a dot in it: "for x86_64"
         * may stand between ("Open Kernel Module for x86_64  580.159.04": digits alone read "86"). */
        const char *k = strstr(line, "Kernel Module");
        for (k = k ? k + strlen("Kernel Module") : NULL; k && *k; k += strcspn(k, " \t")) {
            k += strspn(k, " \t");
            const size_t len = strspn(k, "0123456789."), word = strcspn(k, " \t\n");
            if (len > 0 && len == word && memchr(k, '.', len) && len < n) {
                snprintf(out, n, "%.*s", (int)len, k);
                break;
            }
        }
    }
    fclose(f);
}

static cJSON *plugin_part(const bench &b) {
    cJSON *p = cJSON_CreateObject();
    char real[4096];
    cJSON_AddStringToObject(p, "path", realpath(b.host.loader.path, real) ? real : b.host.loader.path);
    cJSON_AddStringToObject(p, "name", b.t->plugin_name);
    cJSON_AddStringToObject(p, "version", b.t->version);
    cJSON_AddStringToObject(p, "git_revision", b.t->git_revision);
    cJSON_AddStringToObject(p, "cuda_archs", b.t->cuda_archs);
    cJSON_AddStringToObject(p, "record_format", b.t->record_format);
    return p;
}

static cJSON *device_part(const bench &b) {
    cJSON *d = cJSON_CreateObject();
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    char text[64];
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    cJSON_AddStringToObject(d, "name", b.info.device_name);
    cJSON_AddNumberToObject(d, "sm_count", prop.multiProcessorCount);
    snprintf(text, sizeof text, "%d.%d", prop.major, prop.minor);
    cJSON_AddStringToObject(d, "compute_capability", text);
    driver_version(text, sizeof text);
    cJSON_AddStringToObject(d, "driver", text);
    snprintf(text, sizeof text, "%d.%d", drv / 1000, drv % 1000 / 10);
    cJSON_AddStringToObject(d, "cuda_driver_api", text);
    snprintf(text, sizeof text, "%d.%d", rt / 1000, rt % 1000 / 10);
    cJSON_AddStringToObject(d, "cuda_runtime", text);
    return d;
}

/* The command line as one string (arguments with spaces quoted), and the NVFP4_MLA_* and CUDA_*
 * settings of the environment. */
static void command_part(cJSON *prov, int argc, char **argv) {
    std::string cmd;
    for (int i = 0; i < argc; i++) {
        if (i) cmd += ' ';
        const bool quote = strpbrk(argv[i], " \t\"'") != NULL;
        cmd += quote ? "'" + std::string(argv[i]) + "'" : std::string(argv[i]);
    }
    cJSON_AddStringToObject(prov, "command", cmd.c_str());
    char cwd[4096];
    cJSON_AddStringToObject(prov, "cwd", getcwd(cwd, sizeof cwd) ? cwd : "?");
    cJSON *env = cJSON_AddObjectToObject(prov, "environment");
    for (char **e = environ; e && *e; e++) {
        const char *eq = strchr(*e, '=');
        if (eq && (!strncmp(*e, "NVFP4_MLA_", 10) || !strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21)))
            cJSON_AddStringToObject(env, std::string(*e, eq - *e).c_str(), eq + 1);
    }
}

char *bench_provenance_json(const bench &b, int argc, char **argv) {
    cJSON *prov = cJSON_CreateObject();
    cJSON_AddStringToObject(prov, "schema", "nvfp4-mla provenance 1");
    char date[32];
    const time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    cJSON_AddStringToObject(prov, "date_utc", date);
    command_part(prov, argc, argv);
    cJSON_AddItemToObject(prov, "plugin", plugin_part(b));
    cJSON *build = cJSON_AddObjectToObject(prov, "build");
    cJSON_AddStringToObject(build, "buildtype", NVFP4_MLA_BENCH_BUILDTYPE);
    cJSON_AddStringToObject(build, "bench", NVFP4_MLA_BENCH_BUILD);
    cJSON_AddItemToObject(prov, "device", device_part(b));
    char *text = cJSON_PrintUnformatted(prov);
    cJSON_Delete(prov);
    return text;
}
