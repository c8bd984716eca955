/* An attend test case (tests/attend_case.h) run on a CUDA context of the plugin's internals: the
 * context under NVFP4_MLA_ATTEND_* settings, and the call eager or captured into a CUDA graph, on a
 * contiguous or strided out, with a workspace in a chosen state. Shared by tests/test_gpu_attend.c
 * and tests/test_gpu_attend_random.c. */
#ifndef NVFP4_MLA_TESTS_ATTEND_CASE_GPU_H
#define NVFP4_MLA_TESTS_ATTEND_CASE_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "attend_case.h"

/* Exits 77 (Meson's skip) when no CUDA device is there. */
void attend_gpu_require_device(void);

/* A CUDA context on device 0 whose attend settings (read once at init) are NVFP4_MLA_ATTEND_MMA =
 * mma, _SMEM_CAP = smem_cap and _MERGE = merge (NULL: unset), handed to init as its snapshot
 * (init_args.environ): the process environment is neither read nor changed. */
nvfp4_mla_context_t *attend_gpu_open(const char *mma, const char *smem_cap, const char *merge);

/* How attend_case_run_gpu makes the call, and what it reports back. */
typedef struct attend_gpu_call {
    int64_t ts, hs;       /* out's token and head strides in elements (0, 0: contiguous rows) */
    int graph;            /* 1: captured into a CUDA graph on a non-blocking stream, then launched */
    int ws_fill;          /* the workspace before the first call: -1 as cudaMalloc left it, 256 random, else the byte */
    int calls;            /* calls in a row on the same workspace (0 counts as 1) */
    const uint8_t *cache; /* records the GPU reads (NULL: the case's own; a faulty copy for the self-test) */
    int64_t cache_slots;  /* 0: a device cache of the case's slots_n tokens; else one of cache_slots (a multiple of
                             the case's block), every byte 0xFF but the case's records, which sit at slots
                             [slot_offset, slot_offset + slots_n) (slot_offset a multiple of block): the
                             call's top-k are the case's plus slot_offset. A > 4 GiB cache puts byte offsets
                             past 2^32; a reader that truncates one reads 0xFF bytes (NaN) */
    int64_t slot_offset;
    int want_workspace;   /* 1: `workspace` gets a malloc'd copy of the workspace after the calls */
    int want_span;        /* 1: `span` gets a malloc'd copy of the whole (strided) out buffer */
    /* filled by the call */
    uint64_t ws;           /* workspace bytes the plugin asked for (attend_workspace_bytes) */
    uint64_t ws_last_word; /* the workspace's last 8 bytes after the calls (0 without a workspace) */
    void *workspace;       /* [ws] bytes, when asked for (the caller frees it) */
    uint16_t *span;        /* [attend_out_span(...)] elements, when asked for (the caller frees it) */
} attend_gpu_call_t;

/* Elements an out buffer of nq tokens x h heads x 512 spans with token stride ts and head stride hs. */
size_t attend_out_span(int64_t nq, int64_t h, int64_t ts, int64_t hs);

/* The case's call on `gpu`: inputs copied to the device, out and lse poisoned (0xFF bytes: every
 * element must be written), the workspace the plugin asks for; then out's rows (contiguous) and lse
 * back into c->out / c->lse. Fails the test, naming the plugin's message, when a call fails. */
void attend_case_run_gpu(attend_case_t *c, nvfp4_mla_context_t *gpu, attend_gpu_call_t *call);

/* The merge op on `gpu` (kernels/merge's CUDA kernel, the arithmetic of attend's split-K merge):
 * P partial attentions of nq x h rows, partial_out [P, nq, h, 512] bf16 and partial_lse [P, nq, h]
 * (natural log) on the host, copied to the device, merged there into out [nq, h, 512] and lse
 * [nq, h] (host). Fails the test, naming the plugin's message, when the call fails. */
void attend_gpu_merge(nvfp4_mla_context_t *gpu, int64_t parts, int64_t nq, int64_t h, const uint16_t *partial_out,
                      const float *partial_lse, uint16_t *out, float *lse);

/* Device memory for the tests, each failing the test on a CUDA error: `bytes` filled with the byte
 * `fill` (-1: as cudaMalloc left them); a copy of host bytes; bytes back to the host; freed. */
void *attend_gpu_alloc(size_t bytes, int fill);
void *attend_gpu_upload(const void *host, size_t bytes);
void attend_gpu_download(void *host, const void *device, size_t bytes);
void attend_gpu_free(void *device);
void attend_gpu_sync(void);

/* Device memory in use now (total - free, cudaMemGetInfo), bytes. */
uint64_t attend_gpu_used_bytes(void);

#endif
