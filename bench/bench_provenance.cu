/* nvfp4-mla-bench: where bench.json came from, written into it (issue 47), with the keys of
 * bench/provenance.py (the Python measurements' helper; compare_table.py reads both): the shared
 * part (the plugin as it reports itself, the date, the command, the environment's settings) from
 * host_shims/cli/provenance.c, then this build and the device and its driver. */
#include <cjson/cJSON.h>
#include <string.h>

#include "bench.h"

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

char *bench_provenance_json(const bench &b, int argc, char **argv) {
    cJSON *prov = cli_provenance(&b.host, NULL, argc, argv); /* plugin, date, command, environment */
    cJSON *build = cJSON_AddObjectToObject(prov, "build");
    cJSON_AddStringToObject(build, "buildtype", NVFP4_MLA_BENCH_BUILDTYPE);
    cJSON_AddStringToObject(build, "bench", NVFP4_MLA_BENCH_BUILD);
    cJSON_AddItemToObject(prov, "device", device_part(b));
    char *text = cJSON_PrintUnformatted(prov);
    cJSON_Delete(prov);
    return text;
}
