/* Attend test cases on a CUDA context (see attend_case_gpu.h). */
#include "attend_case_gpu.h"

#include <cuda_runtime.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "context.h"
#include "errors.h"
#include "ops.h"
#include "test_util.h"

#define CK(call)                                                                                                       \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess)                                                                                         \
            fail_msg("%s: %s", #call, cudaGetErrorString(e_));                                                         \
    } while (0)

void attend_gpu_require_device(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        fprintf(stderr, "no CUDA device: skipping\n");
        exit(77);
    }
}

nvfp4_mla_context_t *attend_gpu_open(const char *mma, const char *smem_cap, const char *merge) {
    /* init's snapshot (ABI 1.1): the context reads these and nothing of the process environment */
    const char *names[] = {"NVFP4_MLA_ATTEND_MMA", "NVFP4_MLA_ATTEND_SMEM_CAP", "NVFP4_MLA_ATTEND_MERGE"};
    const char *values[] = {mma, smem_cap, merge};
    char entries[3][96];
    const char *snapshot[4] = {NULL};
    for (int i = 0, n = 0; i < 3; i++)
        if (values[i]) {
            snprintf(entries[i], sizeof entries[i], "%s=%s", names[i], values[i]);
            snapshot[n++] = entries[i];
        }
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CUDA, 0, 0, NULL, {0}, snapshot};
    nvfp4_mla_context_t *gpu = NULL;
    if (nvfp4_context_init(&init, &gpu) != NVFP4_MLA_OK)
        fail_msg("CUDA init (mma %s, smem cap %s, merge %s): %s", mma ? mma : "-", smem_cap ? smem_cap : "-",
                 merge ? merge : "-", nvfp4_last_error());
    return gpu;
}

size_t attend_out_span(int64_t nq, int64_t h, int64_t ts, int64_t hs) {
    return (size_t)((nq - 1) * ts + (h - 1) * hs + 512);
}

void *attend_gpu_alloc(size_t bytes, int fill) {
    void *d;
    CK(cudaMalloc(&d, bytes ? bytes : 16));
    if (fill >= 0)
        CK(cudaMemset(d, fill, bytes));
    return d;
}

void *attend_gpu_upload(const void *host, size_t bytes) {
    void *d = attend_gpu_alloc(bytes, -1);
    if (bytes)
        CK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}

void attend_gpu_download(void *host, const void *device, size_t bytes) {
    CK(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
}

void attend_gpu_free(void *device) {
    cudaFree(device);
}

void attend_gpu_sync(void) {
    CK(cudaDeviceSynchronize());
}

static void *to_gpu(const void *host, size_t bytes) {
    return attend_gpu_upload(host, bytes);
}

static nvfp4_mla_tensor_t on_device(nvfp4_mla_tensor_t t, void *data) {
    t.data = data;
    t.device_type = NVFP4_MLA_DEVICE_CUDA;
    return t;
}

/* The workspace: `bytes`, in the state ws_fill asks for (NULL when none is needed). */
static void *make_workspace(uint64_t bytes, int ws_fill) {
    if (!bytes)
        return NULL;
    void *d;
    CK(cudaMalloc(&d, bytes));
    if (ws_fill == 256) {
        uint8_t *junk = malloc(bytes);
        uint64_t x = 0x243F6A8885A308D3ull ^ bytes;
        for (uint64_t i = 0; i < bytes; i++)
            x ^= x << 13, x ^= x >> 7, x ^= x << 17, junk[i] = (uint8_t)x;
        CK(cudaMemcpy(d, junk, bytes, cudaMemcpyHostToDevice));
        free(junk);
    } else if (ws_fill >= 0) {
        CK(cudaMemset(d, ws_fill, bytes));
    }
    return d;
}

/* The calls: eager on the legacy stream, or captured on a non-blocking stream and launched. */
static void make_calls(nvfp4_mla_context_t *gpu, nvfp4_mla_attend_args_t *g, const attend_gpu_call_t *call) {
    const int calls = call->calls > 0 ? call->calls : 1;
    CK(cudaDeviceSynchronize()); /* the poison memsets ran on the legacy stream; a captured call runs on another */
    if (!call->graph) {
        for (int k = 0; k < calls; k++)
            if (nvfp4_op_attend(gpu, g) != NVFP4_MLA_OK)
                fail_msg("gpu attend: %s", nvfp4_last_error());
        CK(cudaDeviceSynchronize());
        return;
    }
    cudaStream_t s;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    g->stream = s;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    int ok = 1;
    for (int k = 0; k < calls && ok; k++)
        ok = nvfp4_op_attend(gpu, g) == NVFP4_MLA_OK;
    const cudaError_t end = cudaStreamEndCapture(s, &graph);
    if (!ok)
        fail_msg("gpu attend (captured): %s", nvfp4_last_error());
    CK(end);
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
    g->stream = NULL;
}

/* The device cache of the call: the case's records alone, or placed in a larger cache of 0xFF bytes
 * (call->cache_slots); *slots gets the top-k the call passes (shifted by slot_offset). */
static void *device_cache(const attend_case_t *c, const attend_gpu_call_t *call, void **slots) {
    const size_t case_bytes = (size_t)(c->o.slots_n / c->o.block) * c->stride;
    const uint8_t *records = call->cache ? call->cache : c->cache;
    const size_t n = (size_t)(c->o.nq * c->o.topk);
    if (!call->cache_slots) {
        *slots = to_gpu(c->slots, n * 4);
        return to_gpu(records, case_bytes);
    }
    int32_t *shifted = malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        shifted[i] = c->slots[i] < 0 ? c->slots[i] : (int32_t)(c->slots[i] + call->slot_offset);
    *slots = to_gpu(shifted, n * 4);
    free(shifted);
    void *d = attend_gpu_alloc((size_t)(call->cache_slots / c->o.block) * (size_t)c->stride, 0xFF);
    CK(cudaMemcpy((uint8_t *)d + (size_t)(call->slot_offset / c->o.block) * (size_t)c->stride, records, case_bytes,
                  cudaMemcpyHostToDevice));
    return d;
}

void attend_case_run_gpu(attend_case_t *c, nvfp4_mla_context_t *gpu, attend_gpu_call_t *call) {
    const int64_t nq = c->o.nq, h = c->o.h;
    const int64_t ts = call->ts ? call->ts : h * 512, hs = call->hs ? call->hs : 512;
    const size_t span = attend_out_span(nq, h, ts, hs);
    void *dq = to_gpu(c->q, (size_t)(nq * h * 576) * 2), *ds = NULL;
    void *dv = to_gpu(c->valid, (size_t)nq * 4), *dc = device_cache(c, call, &ds);
    void *dout, *dlse;
    CK(cudaMalloc(&dout, span * 2));
    CK(cudaMalloc(&dlse, (size_t)(nq * h) * 4));
    CK(cudaMemset(dout, 0xFF, span * 2));
    CK(cudaMemset(dlse, 0xFF, (size_t)(nq * h) * 4));
    nvfp4_mla_attend_args_t g = c->a;
    g.q = on_device(g.q, dq), g.slots = on_device(g.slots, ds), g.valid_len = on_device(g.valid_len, dv);
    g.cache = on_device(g.cache, dc);
    if (call->cache_slots)
        g.cache.shape[0] = call->cache_slots / c->o.block;
    g.out = on_device(tu_tensor(dout, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){nq, h, 512}, (int64_t[]){ts, hs, 1}), dout);
    g.lse = on_device(g.lse, dlse);
    if (nvfp4_op_attend_workspace_bytes(gpu, &g, &call->ws) != NVFP4_MLA_OK)
        fail_msg("attend_workspace_bytes: %s", nvfp4_last_error());
    void *dws = make_workspace(call->ws, call->ws_fill);
    if (dws)
        g.workspace = on_device(tu_vec(dws, NVFP4_MLA_DTYPE_U8, (int64_t)call->ws), dws);
    make_calls(gpu, &g, call);
    uint16_t *whole = malloc(span * 2);
    CK(cudaMemcpy(whole, dout, span * 2, cudaMemcpyDeviceToHost));
    for (int64_t q = 0; q < nq; q++)
        for (int64_t head = 0; head < h; head++)
            memcpy(c->out + (q * h + head) * 512, whole + q * ts + head * hs, 512 * 2);
    CK(cudaMemcpy(c->lse, dlse, (size_t)(nq * h) * 4, cudaMemcpyDeviceToHost));
    call->ws_last_word = 0;
    if (call->ws >= 8)
        CK(cudaMemcpy(&call->ws_last_word, (uint8_t *)dws + call->ws - 8, 8, cudaMemcpyDeviceToHost));
    if (call->want_workspace && dws) {
        call->workspace = malloc(call->ws);
        CK(cudaMemcpy(call->workspace, dws, call->ws, cudaMemcpyDeviceToHost));
    }
    if (call->want_span)
        call->span = whole;
    else
        free(whole);
    cudaFree(dq), cudaFree(ds), cudaFree(dv), cudaFree(dc), cudaFree(dout), cudaFree(dlse), cudaFree(dws);
}

void attend_gpu_merge(nvfp4_mla_context_t *gpu, int64_t parts, int64_t nq, int64_t h, const uint16_t *partial_out,
                      const float *partial_lse, uint16_t *out, float *lse) {
    const size_t rows = (size_t)(nq * h);
    void *dpo = to_gpu(partial_out, (size_t)parts * rows * 512 * 2), *dpl = to_gpu(partial_lse, (size_t)parts * rows * 4);
    void *dout, *dlse;
    CK(cudaMalloc(&dout, rows * 512 * 2));
    CK(cudaMalloc(&dlse, rows * 4));
    CK(cudaMemset(dout, 0xFF, rows * 512 * 2)); /* poisoned: every row must be written */
    CK(cudaMemset(dlse, 0xFF, rows * 4));
    nvfp4_mla_merge_args_t m = {.struct_size = sizeof m};
    m.partial_out = on_device(tu_tensor(dpo, NVFP4_MLA_DTYPE_BF16, 4, (int64_t[]){parts, nq, h, 512},
                                        (int64_t[]){(int64_t)rows * 512, h * 512, 512, 1}), dpo);
    m.partial_lse = on_device(tu_tensor(dpl, NVFP4_MLA_DTYPE_F32, 3, (int64_t[]){parts, nq, h},
                                        (int64_t[]){(int64_t)rows, h, 1}), dpl);
    m.out = on_device(tu_tensor(dout, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){nq, h, 512}, (int64_t[]){h * 512, 512, 1}),
                      dout);
    m.lse = on_device(tu_rows(dlse, NVFP4_MLA_DTYPE_F32, nq, h, h), dlse);
    if (nvfp4_op_merge(gpu, &m) != NVFP4_MLA_OK)
        fail_msg("gpu merge: %s", nvfp4_last_error());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(out, dout, rows * 512 * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(lse, dlse, rows * 4, cudaMemcpyDeviceToHost));
    cudaFree(dpo), cudaFree(dpl), cudaFree(dout), cudaFree(dlse);
}

uint64_t attend_gpu_used_bytes(void) {
    size_t free_b = 0, total_b = 0;
    CK(cudaMemGetInfo(&free_b, &total_b));
    return (uint64_t)(total_b - free_b);
}
