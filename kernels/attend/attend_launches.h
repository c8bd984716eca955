/* The eager attend calls' launch table, on the host (attend_launches.c): from an argument struct's
 * ATT_LAUNCH_BUILD_AT-th call on, a CUDA context launches the call as one prebuilt graph of its
 * kernels (the attention grid and, for split-K, the merge kernel with the programmatic edge).
 * docs/architecture.md says why and what stays a direct launch. The key is the whole struct, stream
 * included (a graph holds its launches' parameters by value), and the struct is all that the
 * backend's plan and checks read, so a built graph launches before them (attend_launch_find first;
 * attend_launch_add only for a call that passed). At most ATT_LAUNCH_ENTRIES structs, the least
 * recently used making room; the table is the context's (one thread at a time). Plain C over opaque
 * graph handles: tests/test_attend_launches.c holds its rules without a GPU; attend_cuda.cu builds,
 * launches and destroys the graphs node by node (never by stream capture).
 */
#ifndef NVFP4_MLA_ATTEND_LAUNCHES_H
#define NVFP4_MLA_ATTEND_LAUNCHES_H

#include <stdint.h>

#include "kernel_args.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Structs the table remembers: a model's layers (61 for DeepSeek-V3.2) times a decode and a prefill
 * call each fit. */
#define ATT_LAUNCH_ENTRIES 128

/* The call of a struct that builds its graph: a struct called three times before is a loop's (the
 * prepared calls, a decode step's layers); a padded batch size an eager engine keeps for a step or two
 * is not worth a build. */
#define ATT_LAUNCH_BUILD_AT 4

typedef struct attend_launch_entry {
    nvfp4_mla_attend_kernel_args_t key; /* the call's arguments, compared byte for byte (no padding) */
    void *graph;       /* its cudaGraphExec_t once built; NULL before, or when building it failed */
    uint64_t last_use; /* the table's clock at this entry's last call: the least recent is replaced */
    int32_t calls;     /* calls with this key since it entered the table (1 = first seen now), up to INT32_MAX */
    int32_t no_graph;  /* 1: building its graph failed once; the key launches directly from then on */
} attend_launch_entry;

/* The table; zero-initialised (calloc) is empty. */
typedef struct nvfp4_attend_launches {
    attend_launch_entry entries[ATT_LAUNCH_ENTRIES];
    int32_t used;           /* entries[0 .. used) hold keys */
    uint64_t clock;         /* calls looked up */
    int32_t graphs_built;   /* graphs built since the table was made (the plugin logs each) */
    int32_t graphs_failed;  /* builds that failed (their keys launch directly; logged as warnings) */
} nvfp4_attend_launches_t;

/* The entry of `key` with this call counted (calls + 1, last_use now), or NULL when the table holds
 * none; nothing is added (attend_launch_add makes the entry once the call has passed its checks). */
attend_launch_entry *attend_launch_find(nvfp4_attend_launches_t *table, const nvfp4_mla_attend_kernel_args_t *key);

/* A new entry for `key`, which attend_launch_find has just not found: calls = 1 and no graph, made in
 * a free slot or in the least recently used one, whose graph (if any) goes to release(graph) first.
 * Never NULL. */
attend_launch_entry *attend_launch_add(nvfp4_attend_launches_t *table, const nvfp4_mla_attend_kernel_args_t *key,
                                       void (*release)(void *graph));

/* Every entry's graph to release(graph), the table emptied (the counters kept). */
void attend_launch_clear(nvfp4_attend_launches_t *table, void (*release)(void *graph));

#ifdef __cplusplus
}
#endif
#endif
