/* The CPU backend's dispatch table (backends.h): the plain-C twins, always built. */
#include "backends.h"

const nvfp4_mla_backend_ops_t nvfp4_mla_cpu_ops = {"cpu", nvfp4_mla_write_cpu, nvfp4_mla_gather_cpu,
                                                   nvfp4_mla_attend_workspace_cpu, nvfp4_mla_attend_cpu,
                                                   nvfp4_mla_release_launches_cpu, nvfp4_mla_merge_cpu};

/* The CPU backend keeps no launch table (its attend ignores `launches`). */
void nvfp4_mla_release_launches_cpu(int32_t device_index, nvfp4_attend_launches_t *launches) {
    (void)device_index, (void)launches;
}
