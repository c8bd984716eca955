/* Thread-local last error, status names and the host log sink (see errors.h). */
#include "errors.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error_text[1024];

nvfp4_mla_status_t nvfp4_fail(nvfp4_mla_status_t status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error_text, sizeof last_error_text, fmt, ap);
    va_end(ap);
    return status;
}

nvfp4_mla_status_t nvfp4_fail_because(nvfp4_mla_status_t status, const char *fmt, ...) {
    char cause[sizeof last_error_text];
    memcpy(cause, last_error_text, sizeof cause);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(last_error_text, sizeof last_error_text, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof last_error_text) {
        snprintf(last_error_text + n, sizeof last_error_text - (size_t)n, ": %s", cause);
    }
    return status;
}

void nvfp4_clear_error(void) {
    last_error_text[0] = '\0';
}

const char *nvfp4_last_error(void) {
    return last_error_text;
}

const char *nvfp4_status_string(nvfp4_mla_status_t status) {
    switch (status) {
    case NVFP4_MLA_OK: return "NVFP4_MLA_OK";
    case NVFP4_MLA_ERR_INVALID_ARGUMENT: return "NVFP4_MLA_ERR_INVALID_ARGUMENT";
    case NVFP4_MLA_ERR_UNSUPPORTED: return "NVFP4_MLA_ERR_UNSUPPORTED";
    case NVFP4_MLA_ERR_OUT_OF_MEMORY: return "NVFP4_MLA_ERR_OUT_OF_MEMORY";
    case NVFP4_MLA_ERR_DEVICE: return "NVFP4_MLA_ERR_DEVICE";
    case NVFP4_MLA_ERR_IO: return "NVFP4_MLA_ERR_IO";
    case NVFP4_MLA_ERR_CONFIG: return "NVFP4_MLA_ERR_CONFIG";
    case NVFP4_MLA_ERR_VERSION: return "NVFP4_MLA_ERR_VERSION";
    case NVFP4_MLA_ERR_INTERNAL: return "NVFP4_MLA_ERR_INTERNAL";
    default: return "unknown status";
    }
}

void nvfp4_log(const nvfp4_mla_host_desc_t *host, int32_t level, const char *fmt, ...) {
    if (!host || !host->log) {
        return;
    }
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    host->log(host->log_user_data, level, line);
}
