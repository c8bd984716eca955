/* CUDA device probing and the CUDA backend's dispatch table (declared in backends.h).
 *
 * `init` asks here whether this process can run our kernels on an ordinal: a driver, a device, and
 * an image of our kernels the device can load (cudaFuncGetAttributes fails when the fatbin holds
 * neither the device's SASS nor PTX it can JIT). That turns backend.cuda off at init instead of
 * failing on the first launch. Nothing here runs before init: probing the plugin makes no CUDA call.
 */
#include <cuda_runtime.h>
#include <stdio.h>

#include "backends.h"
#include "cuda_util.cuh"

__global__ void nvfp4_probe_kernel() {}

extern "C" int nvfp4_mla_cuda_probe(int ordinal, char *name, size_t name_size, char *note, size_t note_size,
                                    nvfp4_mla_cuda_limits_t *limits) {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
        snprintf(note, note_size, "no usable CUDA driver or device (%s)", cudaGetErrorString(err));
        return 1;
    }
    if (ordinal >= count) {
        snprintf(note, note_size, "device %d does not exist (%d CUDA device(s))", ordinal, count);
        return 1;
    }
    cudaDeviceProp prop;
    if ((err = cudaGetDeviceProperties(&prop, ordinal)) != cudaSuccess) {
        snprintf(note, note_size, "cannot read device %d properties (%s)", ordinal, cudaGetErrorString(err));
        return 1;
    }
    snprintf(name, name_size, "%s (sm_%d%d)", prop.name, prop.major, prop.minor);
    nvfp4_device_guard guard(ordinal);
    cudaFuncAttributes attr;
    if (guard.error != cudaSuccess || (err = cudaFuncGetAttributes(&attr, nvfp4_probe_kernel)) != cudaSuccess) {
        snprintf(note, note_size, "sm_%d%d cannot load this build's kernels (%s)", prop.major, prop.minor,
                 cudaGetErrorString(guard.error != cudaSuccess ? guard.error : err));
        cudaGetLastError(); /* do not leave our probe's error for the host's next check */
        return 1;
    }
    limits->sm_count = prop.multiProcessorCount;
    limits->smem_per_block = (int32_t)prop.sharedMemPerBlockOptin;
    limits->arch = 10 * prop.major + prop.minor;
    note[0] = '\0';
    return 0;
}

/* Once per context: lets the attend kernels use `smem_per_block` bytes on `ordinal`. 0 = done,
 * else a cudaError_t, described in `note`. */
extern "C" int nvfp4_mla_cuda_prepare(int ordinal, nvfp4_mla_cuda_limits_t *limits, char *note, size_t note_size) {
    nvfp4_device_guard guard(ordinal);
    int err = guard.error != cudaSuccess ? (int)guard.error
                                         : nvfp4_mla_attend_cuda_prepare(limits->smem_per_block, &limits->quad_clusters);
    if (err) {
        snprintf(note, note_size, "cannot allow %d bytes of shared memory for attend on device %d (%s)",
                 limits->smem_per_block, ordinal, cudaGetErrorString((cudaError_t)err));
        (void)cudaGetLastError();
    }
    return err;
}

extern "C" const nvfp4_mla_backend_ops_t nvfp4_mla_cuda_ops = {"cuda", nvfp4_mla_write_cuda, nvfp4_mla_gather_cuda,
                                                               nvfp4_mla_attend_workspace_cuda, nvfp4_mla_attend_cuda,
                                                               nvfp4_mla_release_launches_cuda, nvfp4_mla_merge_cuda};
