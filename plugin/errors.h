/* The plugin's error and log plumbing: a thread-local last-error text and the host's log sink.
 *
 * The plugin never prints, exits or aborts (docs/architecture.md, ABI rule 6): a failing entry sets the
 * calling thread's message and returns a frozen status; optional diagnostics go to the host's
 * callback and nowhere else.
 */
#ifndef NVFP4_MLA_PLUGIN_ERRORS_H
#define NVFP4_MLA_PLUGIN_ERRORS_H

#include "nvfp4_mla.h"

#if defined(__GNUC__)
#define NVFP4_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define NVFP4_PRINTF(fmt, args)
#endif

/* Sets this thread's last error and returns `status`, so that callers write
 * `return nvfp4_fail(NVFP4_MLA_ERR_INVALID_ARGUMENT, "write: kv_c: ...")`. */
nvfp4_mla_status_t nvfp4_fail(nvfp4_mla_status_t status, const char *fmt, ...) NVFP4_PRINTF(2, 3);

/* Puts a formatted prefix before this thread's last error, the cause a callee already set:
 * "<fmt ...>: <cause>". For a caller that names the context a callee's refusal happened in
 * (`return nvfp4_fail_because(st, "model_dir %s holds no readable config.json", dir)`). */
nvfp4_mla_status_t nvfp4_fail_because(nvfp4_mla_status_t status, const char *fmt, ...) NVFP4_PRINTF(2, 3);

/* Clears this thread's last error at the start of every entry. */
void nvfp4_clear_error(void);

const char *nvfp4_last_error(void);
const char *nvfp4_status_string(nvfp4_mla_status_t status);

/* Sends one line to the host's log sink, if it gave one. */
void nvfp4_log(const nvfp4_mla_host_desc_t *host, int32_t level, const char *fmt, ...) NVFP4_PRINTF(3, 4);

#endif
