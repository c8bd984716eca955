/* Small helpers of the CUDA launchers: a device guard, the launchers' common checks, and launch
 * checking into a kernel result. */
#ifndef NVFP4_MLA_CUDA_UTIL_CUH
#define NVFP4_MLA_CUDA_UTIL_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include "kernel_args.h"

/* Makes `device` current for the launch and restores the caller's device afterwards, so a host
 * thread driving several GPUs keeps its own notion of the current device. */
struct nvfp4_device_guard {
    int previous = -1;
    cudaError_t error = cudaSuccess;
    explicit nvfp4_device_guard(int device) {
        error = cudaGetDevice(&previous);
        if (error == cudaSuccess && previous != device) {
            error = cudaSetDevice(device);
        } else {
            previous = -1;
        }
    }
    ~nvfp4_device_guard() {
        if (previous >= 0) {
            cudaSetDevice(previous);
        }
    }
};

static inline void nvfp4_cuda_result(nvfp4_mla_kernel_result_t *result, cudaError_t error, const char *what) {
    if (error == cudaSuccess) {
        result->status = 0;
        result->message[0] = '\0';
    } else {
        result->status = NVFP4_MLA_ERR_DEVICE;
        snprintf(result->message, sizeof result->message, "%s: %s (%s)", what, cudaGetErrorString(error),
                 cudaGetErrorName(error));
    }
}

/* The common start of every launcher, after its zero-work return: true when the context's device
 * was selected; else the result says why and the launcher returns. */
static inline bool nvfp4_cuda_guard_ok(const nvfp4_device_guard &guard, nvfp4_mla_kernel_result_t *result,
                                       const char *op) {
    if (guard.error == cudaSuccess) return true;
    char what[64];
    snprintf(what, sizeof what, "%s: selecting the context's device", op);
    nvfp4_cuda_result(result, guard.error, what);
    return false;
}

/* The launch attribute for clusters of `cluster` CTAs along x (the launches below, and occupancy
 * queries of the same shape). */
static inline cudaLaunchAttribute nvfp4_cluster_attribute(int cluster) {
    cudaLaunchAttribute attribute;
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = (unsigned)cluster;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    return attribute;
}

/* Launches `kernel` on `stream` in clusters of `cluster` CTAs along x (1: no cluster; more needs a
 * grid of whole clusters, and past 8 the kernel's non-portable cluster attribute); `dependent`:
 * with programmatic stream serialisation, so that the grid may begin while the stream's previous
 * grid finishes. A kernel launched that way calls pdl_wait (attend/lib/sm90_cuda.cuh) before it touches
 * memory that grid may write or read; stream capture records the dependency as a programmatic
 * graph edge. Returns the launch's error. */
template <typename... Params, typename... Args>
static inline cudaError_t nvfp4_launch_clustered(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                                                 void *stream, bool dependent, int cluster, Args &&...args) {
    cudaLaunchAttribute attributes[2];
    int count = 0;
    if (dependent) {
        attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attributes[count++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (cluster > 1) attributes[count++] = nvfp4_cluster_attribute(cluster);
    cudaLaunchConfig_t config = {};
    config.gridDim = grid;
    config.blockDim = block;
    config.dynamicSmemBytes = smem;
    config.stream = (cudaStream_t)stream;
    config.attrs = attributes;
    config.numAttrs = count;
    return cudaLaunchKernelEx(&config, kernel, static_cast<Args &&>(args)...);
}

/* The type itself, in a context that deduces nothing (nvfp4_graph_add_kernel's arguments take the
 * kernel's parameter types). */
template <typename T>
struct nvfp4_same_type {
    typedef T type;
};

/* Adds to `graph` a kernel node running kernel(args...) as nvfp4_launch_clustered launches it (grid,
 * block, smem, clusters of `cluster` along x), after `after` (NULL: a root node): through a
 * programmatic edge when `dependent` (the edge a captured dependent launch records: the kernel's
 * pdl_wait pairs with it), else a full one. Built without a stream capture, which would fail other
 * host threads' device-wide synchronisation while open. Returns the first error. */
template <typename... Params>
static inline cudaError_t nvfp4_graph_add_kernel(cudaGraph_t graph, cudaGraphNode_t *node, cudaGraphNode_t after,
                                                 bool dependent, void (*kernel)(Params...), dim3 grid, dim3 block,
                                                 size_t smem, int cluster,
                                                 typename nvfp4_same_type<Params>::type... args) {
    void *params[] = {(void *)&args...};
    cudaKernelNodeParams p = {};
    p.func = (void *)kernel;
    p.gridDim = grid;
    p.blockDim = block;
    p.sharedMemBytes = (unsigned)smem;
    p.kernelParams = params;
    cudaError_t e = cudaGraphAddKernelNode(node, graph, NULL, 0, &p);
    if (e == cudaSuccess && cluster > 1) {
        const cudaLaunchAttributeValue dim = nvfp4_cluster_attribute(cluster).val;
        e = cudaGraphKernelNodeSetAttribute(*node, cudaLaunchAttributeClusterDimension, &dim);
    }
    if (e == cudaSuccess && after) {
        cudaGraphEdgeData edge = {};
        if (dependent) {
            edge.from_port = cudaGraphKernelNodePortProgrammatic;
            edge.type = cudaGraphDependencyTypeProgrammatic;
        }
#if CUDART_VERSION >= 13000
        e = cudaGraphAddDependencies(graph, &after, node, &edge, 1);
#else
        e = cudaGraphAddDependencies_v2(graph, &after, node, &edge, 1);
#endif
    }
    return e;
}


/* A grid of `blocks` CTAs fits one launch; else INVALID_ARGUMENT naming `count` `items` of `op`. */
static inline bool nvfp4_cuda_grid_fits(int64_t blocks, nvfp4_mla_kernel_result_t *result, const char *op,
                                        int64_t count, const char *items) {
    if (blocks <= INT32_MAX) return true;
    result->status = NVFP4_MLA_ERR_INVALID_ARGUMENT;
    snprintf(result->message, sizeof result->message, "%s: %lld %s exceed one launch", op, (long long)count, items);
    return false;
}

#endif
