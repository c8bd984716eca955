/* The CPU backend's dispatch table (backends.h): the plain-C twins, always built. */
#include "backends.h"

const nvfp4_mla_backend_ops_t nvfp4_mla_cpu_ops = {"cpu", nvfp4_mla_write_cpu, nvfp4_mla_gather_cpu,
                                                   nvfp4_mla_attend_workspace_cpu, nvfp4_mla_attend_cpu,
                                                   nvfp4_mla_merge_cpu};
