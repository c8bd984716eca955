/* The pieces of `nvfp4-mla bench` (CUDA C++): the run's state, timing and result rows, shared by
 * bench.cu (command, writer, gather reader, JSON), bench_attend.cu and bench_ceilings.cu. */
#ifndef NVFP4_MLA_CLI_BENCH_H
#define NVFP4_MLA_CLI_BENCH_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <initializer_list>
#include <vector>

#include "cli.h"

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "nvfp4-mla bench: %s failed: %s\n", #call, cudaGetErrorString(e_));    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static const int64_t BENCH_BLOCK = 64;      /* tokens per cache block */
static const int64_t BENCH_N = 262144;      /* rows gathered */
static const int64_t BENCH_T_MAX = 262144;  /* tokens written, at most */

struct bench_row {
    char op[64];
    int64_t size;
    double median_us, tbps, ratio;
    const char *ceiling;
    int correct; /* 1 PASS, 0 FAIL, -1 no check */
};

struct bench {
    /* What the command line asks for. */
    const char *only;    /* "", "write", "gather" or "attend" */
    int64_t only_tokens; /* writer size filter, 0 = all */
    int quick;           /* 1 GiB instead of 4 GiB */
    /* The plugin: its CPU context (host.cpu) is the correctness oracle, `gpu` is timed. */
    cli_host_t host;
    const nvfp4_mla_plugin_t *t;
    nvfp4_mla_context_t *gpu;
    nvfp4_mla_context_info_t info;
    cudaStream_t s;
    /* The big cache (>= 4 GiB, the copy ceiling's source): random slots of every timed operation. */
    size_t copy_bytes;
    uint8_t *cache;
    int64_t capacity;    /* 368-byte records it holds, whole blocks */
    /* Readers: BENCH_N random slots, [BENCH_N, 576] bf16 rows. */
    int32_t *d_index;
    uint16_t *d_out;
    /* Writer: BENCH_T_MAX tokens, random and identity slots, a compact cache for the checks. */
    std::vector<uint16_t> tokens;
    uint16_t *d_tokens;
    int64_t *d_slots, *d_ident;
    uint8_t *d_compact;
    /* Same-run ceilings. */
    double copy_tbps, g368_tbps, mma_tflops;
    std::vector<bench_row> rows;
};

/* Median of `iters` CUDA-event-timed launches after `warmup` untimed ones, in microseconds. */
template <typename F> static double median_us(F launch, int warmup, int iters, cudaStream_t s) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < warmup; i++) launch();
    std::vector<float> ms;
    for (int i = 0; i < iters; i++) {
        CK(cudaEventRecord(a, s));
        launch();
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        float t;
        CK(cudaEventElapsedTime(&t, a, b));
        ms.push_back(t);
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2] * 1000.0;
}

/* One reproducible random stream for the whole run (xorshift64). */
uint64_t bench_rand();

/* A CUDA tensor descriptor on device 0. */
nvfp4_mla_tensor_t bench_tensor(void *p, int32_t dtype, int ndim, std::initializer_list<int64_t> shape,
                                std::initializer_list<int64_t> strides);

/* Prints a row of the table and keeps it for --json. */
void bench_add_row(bench &b, const char *op, int64_t size, double us, double bytes, double ceiling_tbps,
                   const char *ceiling, int correct);

/* Write arguments for T tokens of the bench's token buffer (576-value rows) into 368-byte records
 * of the compact cache [T, 1, 368] at identity slots (the writer's checks, attend's records); the
 * writer's timed calls swap in the big cache and random slots. */
nvfp4_mla_write_args_t bench_write_args_368(const bench &b, uint32_t mode, float scale, int64_t T, uint32_t policy);

/* bench_ceilings.cu: the copy, plain 368-byte gather and mma.sync ceilings (setting copy_tbps,
 * g368_tbps, mma_tflops), and the writer's scatter ceiling (after the token buffers exist). */
void bench_ceilings(bench &b);
void bench_scatter_ceiling(bench &b);

/* bench_attend.cu: attend over 368 per-token and 656 records at h = 16, 32, 64, 128. */
void bench_attend(bench &b);

#endif
