/* The start of the GPU tests that reach the plugin as a host does, through the loader and the ABI
 * (test_gpu_graph.c, test_gpu_merge.c): Meson's skip (exit 77) without a CUDA device, then the
 * plugin NVFP4_MLA_PLUGIN_PATH names. */
#ifndef NVFP4_MLA_TESTS_GPU_LOADER_H
#define NVFP4_MLA_TESTS_GPU_LOADER_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "nvfp4_mla_loader.h"

/* The plugin's table, or NULL (the loader's message printed). Exits 77 when no CUDA device is
 * there: such a machine skips the test instead of failing or passing it. Tests call it through
 * GPU_LOADER_OPEN, which also asks for the table member they exercise. */
static inline const nvfp4_mla_plugin_t *gpu_loader_open(nvfp4_mla_loader_t *loader) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        fprintf(stderr, "no CUDA device: skipping\n");
        exit(77);
    }
    char msg[1024];
    if (nvfp4_mla_loader_open(loader, getenv("NVFP4_MLA_PLUGIN_PATH"), msg, sizeof msg) != NVFP4_MLA_LOAD_OK) {
        fprintf(stderr, "%s\n", msg);
        return NULL;
    }
    return loader->table;
}

/* `has`: whether the table holds the member the test needs (NVFP4_MLA_TABLE_HAS); says so if not. */
static inline int gpu_loader_has(const nvfp4_mla_plugin_t *table, int has, const char *member) {
    if (!has) fprintf(stderr, "the plugin's table (%u bytes) lacks %s\n", table->header.struct_size, member);
    return has;
}

/* gpu_loader_open, then the table must hold `member`: the table, or NULL (said why). */
#define GPU_LOADER_OPEN(loader, member)                                                                  \
    (gpu_loader_open(loader) && gpu_loader_has((loader)->table, NVFP4_MLA_TABLE_HAS((loader)->table, member), #member) \
         ? (loader)->table                                                                                \
         : NULL)

#endif
