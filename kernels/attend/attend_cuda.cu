/* Sparse MLA attention over records on CUDA: the launchers (docs/architecture.md, "The attention
 * pipeline"). Checked against kernels/attend/attend_cpu.c (tests/test_gpu_attend.c). The plan
 * (attend_plan.c) picks the schedule, the split-K and the shared-memory map; the launch path makes no
 * device query. Here: the table of kernels every chooser reads, the merge kernel's launch (or the
 * in-launch merge: NVFP4_MLA_ATTEND_MERGE, auto decided in plan_as_launched), and the prebuilt
 * graphs of eager calls (attend_launches.h). Entries with slot -1, past valid_len, or outside the
 * cache count for nothing (the CPU entry rejects out-of-range ids; a CUDA entry cannot read them
 * without a sync). How the outputs differ from the CPU reference: docs/architecture.md.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attend_kernels.cuh"
#include "attend_launches.h"
#include "lib/attend_split_merge.cuh"
#include "backends.h"
#include "kernel_args.h"
#include "cuda_util.cuh"

/* The table of attention kernels: a row a record size (attend_kernels.cuh). */
static const struct {
    int32_t record_bytes;
    const attend_kernel_row *kernels;
} attend_kernel_table[] = {
    {NVFP4_MLA_RECORD_BYTES_368, &attend_kernels_368},
    {NVFP4_MLA_RECORD_BYTES_432, &attend_kernels_432},
    {NVFP4_MLA_RECORD_BYTES_656, &attend_kernels_656},
};

/* The kernel for records of `record_bytes`, a kind and a variant; NULL for none. */
static attend_kernel_t attend_kernel_for(int32_t record_bytes, int kind, int variant) {
    for (const auto &row : attend_kernel_table)
        if (row.record_bytes == record_bytes) return (*row.kernels)[kind][variant];
    return NULL;
}

/* The merge kernel's instantiation for `splits` (its BATCH: the comment above). */
typedef void (*merge_kernel_t)(const nvfp4_mla_attend_kernel_args_t, int);
static merge_kernel_t merge_kernel_for(int splits) {
    return splits <= 4 ? nvfp4_attend_merge_kernel<4> : splits <= 16 ? nvfp4_attend_merge_kernel<16>
                                                                     : nvfp4_attend_merge_kernel<32>;
}

extern "C" uint64_t nvfp4_mla_attend_workspace_cuda(const nvfp4_mla_attend_kernel_args_t *a) {
    const attend_plan pl = attend_plan_for(a);
    return attend_workspace_of(a, &pl);
}

/* ---- launch ---- */

/* One kernel launch of a call, as both ways of launching it take it (launch_call: directly on the
 * stream; build_graph: a node of the call's graph): the kernel, its geometry and attributes, and its
 * arguments. */
template <typename Extra>
struct attend_launch {
    void (*kernel)(nvfp4_mla_attend_kernel_args_t, Extra);
    const nvfp4_mla_attend_kernel_args_t *args; /* the kernel's first argument: the call's struct */
    unsigned grid;  /* CTAs along x */
    int threads;    /* a CTA */
    int smem;       /* dynamic shared memory bytes */
    int cluster;    /* CTAs a cluster along x; 1: none */
    bool dependent; /* on the launch before it: programmatic stream serialisation on a stream, a
                       programmatic edge in a graph (the kernel's pdl_wait pairs with either) */
    Extra extra;    /* the kernel's second argument */
};

/* The call's launches, in order, each handed to visit(launch) until one fails (its error returned):
 * the attention grid, then, for a split plan without the in-launch merge, the merge kernel, one CTA
 * a (query, head) row, dependent on it. The one description of a call's kernels: the direct launch
 * and the prebuilt graph both read it, so that they cannot drift apart.
 * A split attention grid (the light calls, where the chain of launches is the time) is dependent on
 * the stream's previous grid: its barrier set-up and register reallocation overlap that grid's tail,
 * and in a captured graph its node's launch does (the kernel waits, pdl_wait, before it reads or
 * writes global memory). An unsplit grid runs for tens of microseconds or more and gains nothing
 * from it: it launches as a plain kernel. In a prebuilt graph the attention node is the root: its
 * flag has no launch before it to depend on. */
template <typename Visit>
static cudaError_t each_launch(const nvfp4_mla_attend_kernel_args_t *a, const attend_plan &pl, Visit &&visit) {
    const attend_kernel_t kernel = attend_kernel_for(a->record_bytes, attend_kind_of(&pl), attend_variant_of(&pl));
    if (!kernel) return cudaErrorInvalidDeviceFunction; /* a plan outside the table: none is (test_attend_plan) */
    cudaError_t err = visit(attend_launch<attend_plan>{kernel, a, (unsigned)pl.grid, pl.threads, pl.bytes,
                                                       attend_placement_cluster(a, &pl), pl.splits > 1, pl});
    if (err == cudaSuccess && pl.splits > 1 && !pl.one_launch)
        err = visit(attend_launch<int>{merge_kernel_for(pl.splits), a, (unsigned)(a->num_queries * a->num_heads),
                                       ATT_MERGE_THREADS, 0, 1, true, (int)pl.splits});
    return err;
}

/* The call's kernels (each_launch) on `stream`. */
static cudaError_t launch_call(const nvfp4_mla_attend_kernel_args_t *a, const attend_plan &pl, void *stream) {
    return each_launch(a, pl, [&](const auto &l) {
        return nvfp4_launch_clustered(l.kernel, dim3(l.grid), dim3(l.threads), l.smem, stream, l.dependent, l.cluster,
                                      *l.args, l.extra);
    });
}

/* Whether `stream` is capturing: a stream whose state cannot be read (the legacy stream while a
 * blocking stream of the device captures, or an earlier asynchronous error) counts as capturing; the
 * launch then reports the error itself. The query reads the stream's capture state on the host (a
 * fraction of a microsecond): no device query, safe while capturing. */
static bool stream_capturing(void *stream) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing((cudaStream_t)stream, &capture) != cudaSuccess) {
        (void)cudaGetLastError();
        return true;
    }
    return capture != cudaStreamCaptureStatusNone;
}

/* The plan as a call launches it: NVFP4_ATTEND_MERGE_AUTO keeps the plan's in-launch merge only for
 * a direct launch on an eager stream (`direct`: one launch, and the eager caller waits on the host's
 * launch time). A captured call (a replay costs GPU time alone) or a prebuilt graph (one host launch
 * whatever it holds) takes the separate merge kernel, which spends less GPU time. The other settings
 * are the plan's own (attend_plan_for read them). The one place auto is decided. */
static attend_plan plan_as_launched(const attend_plan &planned, const nvfp4_mla_attend_kernel_args_t *a, bool direct) {
    attend_plan pl = planned;
    if (a->merge_mode == NVFP4_ATTEND_MERGE_AUTO && !direct) pl.one_launch = 0;
    return pl;
}

/* ---- eager calls as prebuilt graphs (attend_launches.h) ---- */

static void destroy_graph(void *graph) {
    (void)cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

/* The call's kernels (each_launch) as a graph, built node by node (no stream capture: one open on
 * any stream of the device would fail another host thread's cudaDeviceSynchronize meanwhile), each
 * node after the one before it, and instantiated; NULL when any step fails (the error is cleared:
 * the caller then launches directly, which reports its own). */
static cudaGraphExec_t build_graph(const nvfp4_mla_attend_kernel_args_t *a, const attend_plan &pl) {
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaError_t e = cudaGraphCreate(&graph, 0);
    if (e == cudaSuccess) {
        cudaGraphNode_t previous = NULL; /* NULL: the next node is the root */
        e = each_launch(a, pl, [&](const auto &l) {
            cudaGraphNode_t node = NULL;
            const cudaError_t added = nvfp4_graph_add_kernel(graph, &node, previous, l.dependent, l.kernel,
                                                             dim3(l.grid), dim3(l.threads), l.smem, l.cluster,
                                                             *l.args, l.extra);
            previous = node;
            return added;
        });
    }
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
    if (graph) (void)cudaGraphDestroy(graph);
    if (e != cudaSuccess) {
        exec = NULL;
        (void)cudaGetLastError();
    }
    return exec;
}

/* The prebuilt graph for this eager call, built now at its struct's ATT_LAUNCH_BUILD_AT-th call; `seen`:
 * the struct's entry, which attend_launch_find counted this call in (NULL: a struct the table does not
 * hold, added now that its checks passed). NULL: launch directly (an earlier call, a table that cannot
 * be allocated, a graph that could not be built). */
static cudaGraphExec_t eager_graph(nvfp4_attend_launches_t **launches, attend_launch_entry *seen,
                                   const nvfp4_mla_attend_kernel_args_t *a, const attend_plan &planned) {
    if (!launches) return NULL; /* NVFP4_MLA_ATTEND_GRAPHS=off */
    if (!*launches && !(*launches = (nvfp4_attend_launches_t *)calloc(1, sizeof **launches))) return NULL;
    attend_launch_entry *e = seen ? seen : attend_launch_add(*launches, a, destroy_graph);
    if (!e->graph && e->calls >= ATT_LAUNCH_BUILD_AT && !e->no_graph) {
        e->graph = build_graph(a, plan_as_launched(planned, a, false));
        e->no_graph = !e->graph;
        if (e->graph) (*launches)->graphs_built++;
        else (*launches)->graphs_failed++;
    }
    return (cudaGraphExec_t)e->graph;
}

extern "C" void nvfp4_mla_release_launches_cuda(int32_t device_index, nvfp4_attend_launches_t *launches) {
    if (!launches) return;
    nvfp4_device_guard guard(device_index); /* a failed guard: the driver is gone, so are the graphs */
    attend_launch_clear(launches, destroy_graph);
    (void)cudaGetLastError();
    free(launches);
}

/* The call's plan, after the launcher's checks of it (a configuration that fits the shared memory,
 * the workspace, launchable grids); false: the result says why. Pure functions of the argument struct
 * (attend_plan_for reads nothing else): nvfp4_mla_attend_cuda relies on it. */
static bool checked_plan(const nvfp4_mla_attend_kernel_args_t *args, attend_plan *pl,
                         nvfp4_mla_kernel_result_t *result) {
    *pl = attend_plan_for(args);
    if (!pl->bytes) {
        result->status = NVFP4_MLA_ERR_UNSUPPORTED;
        snprintf(result->message, sizeof result->message,
                 "attend: no kernel configuration fits %d bytes of shared memory per block on device %d "
                 "(%d-byte records need at least about 68 KB)",
                 args->smem_per_block, args->device_index, args->record_bytes);
        return false;
    }
    const uint64_t need = attend_workspace_of(args, pl); /* the backend contract's check, from the one plan */
    if (args->workspace_bytes < need) {
        result->status = NVFP4_MLA_ERR_INVALID_ARGUMENT;
        snprintf(result->message, sizeof result->message,
                 "workspace has %llu bytes, these shapes need %llu (attend_workspace_bytes)",
                 (unsigned long long)args->workspace_bytes, (unsigned long long)need);
        return false;
    }
    const int64_t rows = args->num_queries * args->num_heads; /* the merge kernel's CTAs */
    return nvfp4_cuda_grid_fits(pl->grid, result, "attend", pl->grid, "CTAs") &&
           (pl->splits <= 1 || nvfp4_cuda_grid_fits(rows, result, "attend", rows, "merged rows"));
}

/* An eager call whose struct the table holds with its graph built launches that graph before any plan
 * or check: the struct, compared byte for byte, is the whole of what checked_plan reads, and it passed
 * them before the graph was built (a struct enters the table only after passing; the plugin's own
 * checks, which make the struct, have run for this call already). Nothing on the host reads the
 * device memory behind its pointers, so that memory cannot undo a check. */
extern "C" void nvfp4_mla_attend_cuda(const nvfp4_mla_attend_kernel_args_t *args, nvfp4_attend_launches_t **launches,
                                      nvfp4_mla_kernel_result_t *result) {
    if (args->num_queries == 0) {
        nvfp4_cuda_result(result, cudaSuccess, "attend");
        return;
    }
    nvfp4_device_guard guard(args->device_index);
    if (!nvfp4_cuda_guard_ok(guard, result, "attend")) {
        return;
    }
    const bool capturing = stream_capturing(args->stream);
    attend_launch_entry *seen = !capturing && launches && *launches ? attend_launch_find(*launches, args) : NULL;
    cudaGraphExec_t graph = seen ? (cudaGraphExec_t)seen->graph : NULL;
    if (!graph) { /* planned and checked; then its graph built now, or its kernels launched directly */
        attend_plan pl;
        if (!checked_plan(args, &pl, result)) {
            return;
        }
        if (!capturing) graph = eager_graph(launches, seen, args, pl);
        if (!graph) {
            nvfp4_cuda_result(result, launch_call(args, plan_as_launched(pl, args, !capturing), args->stream),
                              "attend: kernel launch");
            return;
        }
    }
    nvfp4_cuda_result(result, cudaGraphLaunch(graph, (cudaStream_t)args->stream), "attend: graph launch");
}

/* ---- once per context ---- */

/* Every kernel of the table may use `bytes` of dynamic shared memory. */
static cudaError_t allow_smem(int bytes) {
    cudaError_t e = cudaSuccess;
    for (const auto &row : attend_kernel_table)
        for (int kind = 0; kind < KIND_COUNT; kind++)
            for (int variant = 0; variant < VARIANT_COUNT; variant++) {
                const attend_kernel_t kernel = (*row.kernels)[kind][variant];
                if (kernel && e == cudaSuccess)
                    e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
            }
    return e;
}

/* The clusters of 4 CTAs of the wide kind (the most registers and shared memory a CTA of any kind:
 * one an SM at the full opt-in size) the current device runs at once with `smem_per_block` bytes;
 * 0 when the count fails. */
static int32_t count_quad_clusters(int smem_per_block) {
    cudaLaunchAttribute dim = nvfp4_cluster_attribute(ATT_QUAD);
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(ATT_QUAD);
    config.blockDim = dim3(kind_threads(KIND_WIDE, NVFP4_MLA_RECORD_BYTES_368));
    config.dynamicSmemBytes = (size_t)smem_per_block;
    config.attrs = &dim;
    config.numAttrs = 1;
    int count = 0;
    const attend_kernel_t wide = attend_kernel_for(NVFP4_MLA_RECORD_BYTES_368, KIND_WIDE, VARIANT_ROW_Q);
    if (cudaOccupancyMaxActiveClusters(&count, wide, &config) != cudaSuccess) {
        (void)cudaGetLastError();
        count = 0;
    }
    return count;
}

/* Lets every attend kernel use `smem_per_block` bytes of dynamic shared memory on the current
 * device (called by the context's init with its device selected; a per-function attribute), and
 * counts its clusters of 4 into *quad_clusters (count_quad_clusters; 0 when the attributes fail). */
extern "C" int nvfp4_mla_attend_cuda_prepare(int smem_per_block, int32_t *quad_clusters) {
    cudaError_t e = allow_smem(smem_per_block);
    /* Loads the merge kernel now as the attribute calls load the others (lazy module loading):
     * under NVFP4_MLA_ATTEND_MERGE=auto eager calls with small merges do not launch it, so its
     * first launch could otherwise fall inside a graph capture, which drivers before CUDA 12.3
     * refuse. */
    cudaFuncAttributes merge_attributes;
    for (int splits : {4, 16, 64}) /* each of merge_kernel_for's instantiations */
        if (e == cudaSuccess) e = cudaFuncGetAttributes(&merge_attributes, merge_kernel_for(splits));
    if (e != cudaSuccess) (void)cudaGetLastError();
    *quad_clusters = e == cudaSuccess ? count_quad_clusters(smem_per_block) : 0;
    return e == cudaSuccess ? 0 : (int)e;
}
