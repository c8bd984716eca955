/* The record operations of the table: validate the host's ABI structs, lower them to the kernels'
 * flat argument structs (kernels/kernel_args.h), dispatch to the context's backend (kernels/backends.h).
 * ops.c: write, gather and the checks all share; ops_attend.c: attend; ops_merge.c: merge (ABI 1.1),
 * which reads partial attentions rather than records. */
#ifndef NVFP4_MLA_PLUGIN_OPS_H
#define NVFP4_MLA_PLUGIN_OPS_H

#include "kernel_args.h"
#include "nvfp4_mla.h"

nvfp4_mla_status_t nvfp4_op_write(nvfp4_mla_context_t *ctx, const nvfp4_mla_write_args_t *args);
nvfp4_mla_status_t nvfp4_op_gather(nvfp4_mla_context_t *ctx, const nvfp4_mla_gather_args_t *args);
nvfp4_mla_status_t nvfp4_op_attend_workspace_bytes(nvfp4_mla_context_t *ctx, const nvfp4_mla_attend_args_t *args,
                                                   uint64_t *bytes_out);
nvfp4_mla_status_t nvfp4_op_attend(nvfp4_mla_context_t *ctx, const nvfp4_mla_attend_args_t *args);
nvfp4_mla_status_t nvfp4_op_merge(nvfp4_mla_context_t *ctx, const nvfp4_mla_merge_args_t *args);

/* The validation halves, exposed so that tests and fuzzers reach them without a kernel. */
nvfp4_mla_status_t nvfp4_lower_write(const nvfp4_mla_context_t *ctx, const nvfp4_mla_write_args_t *args,
                                     nvfp4_mla_write_kernel_args_t *out);
nvfp4_mla_status_t nvfp4_lower_gather(const nvfp4_mla_context_t *ctx, const nvfp4_mla_gather_args_t *args,
                                      nvfp4_mla_gather_kernel_args_t *out);
/* Shapes only, the same for attend_workspace_bytes and attend: fills the host's struct as this
 * version reads it (`a`) and the kernel arguments without the workspace (`out`). */
nvfp4_mla_status_t nvfp4_lower_attend(const nvfp4_mla_context_t *ctx, const nvfp4_mla_attend_args_t *args,
                                      nvfp4_mla_attend_args_t *a, nvfp4_mla_attend_kernel_args_t *out);
/* Every check of merge but the CPU's look at the lse values (nvfp4_op_merge makes that one). */
nvfp4_mla_status_t nvfp4_lower_merge(const nvfp4_mla_context_t *ctx, const nvfp4_mla_merge_args_t *args,
                                     nvfp4_mla_merge_kernel_args_t *out);

/* No stream on a CPU context (every operation's rule; merge, which has no record mode, calls it alone). */
nvfp4_mla_status_t nvfp4_check_stream(const nvfp4_mla_context_t *ctx, const char *op, const void *stream);

/* Shared by the operations: the ABI's mode rule, every capability the context must serve for the
 * call (nvfp4_mla_caps_needed of nvfp4_mla_record.h), and nvfp4_check_stream. */
nvfp4_mla_status_t nvfp4_check_call(const nvfp4_mla_context_t *ctx, const char *op, uint64_t op_cap, uint32_t layout,
                                    uint32_t scale_mode, float outer_scale, const void *stream);

/* A backend's result as this thread's status and last error ("op: words"). */
nvfp4_mla_status_t nvfp4_finish(const char *op, const nvfp4_mla_kernel_result_t *res);

#endif
