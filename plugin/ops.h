/* The record operations of the table: validate the host's ABI structs, lower them to the kernels'
 * flat argument structs (kernels/codec.h), dispatch to the context's backend. */
#ifndef NVFP4_MLA_PLUGIN_OPS_H
#define NVFP4_MLA_PLUGIN_OPS_H

#include "codec.h"
#include "nvfp4_mla.h"

nvfp4_mla_status_t nvfp4_op_write(nvfp4_mla_context_t *ctx, const nvfp4_mla_write_args_t *args);
nvfp4_mla_status_t nvfp4_op_gather(nvfp4_mla_context_t *ctx, const nvfp4_mla_gather_args_t *args);
nvfp4_mla_status_t nvfp4_op_attend_workspace_bytes(nvfp4_mla_context_t *ctx, const nvfp4_mla_attend_args_t *args,
                                                   uint64_t *bytes_out);
nvfp4_mla_status_t nvfp4_op_attend(nvfp4_mla_context_t *ctx, const nvfp4_mla_attend_args_t *args);

/* The validation halves, exposed so that tests and fuzzers reach them without a kernel. */
nvfp4_mla_status_t nvfp4_lower_write(const nvfp4_mla_context_t *ctx, const nvfp4_mla_write_args_t *args,
                                     nvfp4_mla_write_kernel_args_t *out);
nvfp4_mla_status_t nvfp4_lower_gather(const nvfp4_mla_context_t *ctx, const nvfp4_mla_gather_args_t *args,
                                      nvfp4_mla_gather_kernel_args_t *out);

/* for_launch = 0: shapes only (attend_workspace_bytes); 1: also the workspace and, on the CPU, the
 * slot and length values. */
nvfp4_mla_status_t nvfp4_lower_attend(const nvfp4_mla_context_t *ctx, const nvfp4_mla_attend_args_t *args,
                                      nvfp4_mla_attend_kernel_args_t *out, int for_launch);

#endif
