/* The pieces of nvfp4-mla-bench (CUDA C++): the run's state, timing and result rows, shared by
 * bench.cu (main, writer, gather reader, JSON), bench_attend.cu, bench_ceilings.cu, bench_check.cu
 * (each timed call's output), bench_data.cu (the data every timed call reads) and
 * bench_provenance.cu. */
#ifndef NVFP4_MLA_CLI_BENCH_H
#define NVFP4_MLA_CLI_BENCH_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <functional>
#include <initializer_list>
#include <vector>

#include "attend_check.h"
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

/* The times of one launch, microseconds: median and spread over the timed samples. */
struct bench_timing {
    double median_us, min_us, max_us, p25_us, p75_us;
    int samples;
};

struct bench_row {
    char op[64];
    int64_t size;
    bench_timing t;
    double tbps, ratio; /* from t.median_us */
    const char *ceiling;
    int correct; /* 1 PASS, 0 FAIL, -1 no check */
    /* every timed call's output against the checked call's (bench_check.cu; 0 calls: no such check) */
    int64_t timed_calls;
    unsigned long long timed_bad; /* elements (records: bytes) outside the bound, over all of them */
    double tflops; /* attend rows: over the real heads (0: none) */
    /* attend rows: what the check of the timed call's own output against the CPU found (bench_attend.cu) */
    int64_t check_queries;     /* queries checked (0: no check) */
    attend_check_stats_t check;
};

struct bench {
    /* What the command line asks for. */
    const char *only;    /* "", "write", "gather" or "attend" */
    int64_t only_tokens; /* writer size filter, 0 = all */
    int quick;           /* 1 GiB instead of 4 GiB */
    int flush_l2;        /* an L2-sized write before each timed launch (outside its events), every row */
    int64_t check_queries; /* attend: queries of the timed call checked against the CPU (16) */
    /* The plugin: its CPU context (host.cpu) is the correctness oracle, `gpu` is timed. */
    cli_host_t host;
    const nvfp4_mla_plugin_t *t;
    nvfp4_mla_context_t *gpu;
    nvfp4_mla_context_info_t info;
    cudaStream_t s;
    int sm_count;        /* the device's multiprocessors (the check's query spread) */
    void *flush_buf;     /* twice the device's L2: --flush-l2's write, and bench_evict_l2's always */
    size_t flush_bytes;
    /* The big cache (>= 4 GiB, the copy ceiling's source): random slots of every timed operation;
     * every record written from random tokens before the readers run (bench_fill_cache_368). */
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

/* One timed side: its launch, and what runs on b.s outside the launch's events around each launch
 * (either may be empty): `before` poisons the output, `after` compares it (bench_check.cu). */
struct bench_side {
    std::function<void()> launch, before, after;
};

/* Times sides[0..n): `warmup` untimed rounds, then `iters` rounds; a round launches every side
 * once, in turn (A B A B ...: drifts of clocks and temperature fall on every side alike), each
 * launch between its own CUDA events on b.s, after its side's `before`. With b.flush_l2, an L2-sized
 * write comes between `before` and the launch, outside its events, and evicts what `before` wrote. */
std::vector<bench_timing> bench_time_sides(const bench &b, const std::vector<bench_side> &sides, int warmup, int iters);

/* One side. */
template <typename F> static bench_timing bench_time(const bench &b, F launch, int warmup, int iters) {
    return bench_time_sides(b, {bench_side{std::function<void()>(launch), {}, {}}}, warmup, iters)[0];
}

/* ---- bench_check.cu: each timed call's output, poisoned before and compared after it ---- */

/* A device counter of the elements outside the bound over a row's timed calls. */
struct bench_watch {
    unsigned long long *d_bad;
};
bench_watch bench_watch_open();
unsigned long long bench_watch_close(bench_watch &w); /* the count; frees the counter */

/* The writer and gather timed as an engine calls them (issue 57): an engine's writer finds its
 * target records cold (the slots of new tokens, last touched steps ago) and its inputs warm (the
 * projection that produced kv_c and k_pe just wrote them); a gather finds its output cold. The
 * harness's own poison of the targets, written just before, would leave up to an L2 of them hot (the
 * scatter368 ceiling moved from 0.79 to 0.92 of copy with a harness change and the same kernel; warm
 * targets are the likely cause, not yet measured apart).
 * bench_evict_l2 writes twice the L2 to a buffer of its own after the poison; bench_warm_inputs then
 * reads the inputs (into that buffer) when inputs and copy fit in half the L2. Outside the events. */
void bench_evict_l2(const bench &b);
void bench_warm_inputs(const bench &b, const void *inputs, size_t bytes);

/* 0xFF bytes over p[0..bytes) (NaN in bf16 and f32), on s. */
void bench_poison(void *p, size_t bytes, cudaStream_t s);
/* 0xFF bytes over the records of slots[0..n) (int64 slots of a cache of `block`-record pages of rb bytes). */
void bench_poison_records(uint8_t *cache, int64_t block, int32_t rb, const int64_t *d_slots, int64_t n, cudaStream_t s);
/* Counts into *d_bad the bytes of those records that differ from d_want [n, rb]. */
void bench_compare_records(const uint8_t *cache, int64_t block, int32_t rb, const int64_t *d_slots, int64_t n,
                           const uint8_t *d_want, unsigned long long *d_bad, cudaStream_t s);
/* Counts the 16-bit elements of got[0..n) that differ from want's. */
void bench_compare_u16(const uint16_t *got, const uint16_t *want, int64_t n, unsigned long long *d_bad, cudaStream_t s);
/* attend rows [rows, 512] bf16 and lse [rows]: counts the elements and the lse outside
 * attend_check_default_bounds' element and lse bounds of want's (elem_rel of themselves + of_row_max of
 * the row's largest |want|; lse_rel of max(|lse|, 1); both -inf agree; NaN never does). */
void bench_compare_attend(const uint16_t *got, const float *got_lse, const uint16_t *want, const float *want_lse,
                          int64_t rows, unsigned long long *d_bad, cudaStream_t s);

/* One reproducible random stream for the whole run (xorshift64). */
uint64_t bench_rand();

/* A CUDA tensor descriptor on device 0. */
nvfp4_mla_tensor_t bench_tensor(void *p, int32_t dtype, int ndim, std::initializer_list<int64_t> shape,
                                std::initializer_list<int64_t> strides);

/* Prints a row of the table (median, and the spread as min / max) and keeps it for --json; the
 * timed-call check is added by bench_note_timed. */
bench_row &bench_add_row(bench &b, const char *op, int64_t size, const bench_timing &t, double bytes,
                         double ceiling_tbps, const char *ceiling, int correct);

/* Folds a row's timed-call check into it (calls compared, elements outside the bound) and its
 * verdict; prints one line. */
void bench_note_timed(bench_row &r, int64_t calls, unsigned long long bad);

/* Write arguments for T tokens of the bench's token buffer (576-value rows) into 368-byte records
 * of the compact cache [T, 1, 368] at identity slots (the writer's checks, attend's records); the
 * writer's timed calls swap in the big cache and random slots. */
nvfp4_mla_write_args_t bench_write_args_368(const bench &b, uint32_t mode, float scale, int64_t T, uint32_t policy);

/* bench_provenance.cu: bench.json's "provenance" object (bench/provenance.py's keys) as JSON text;
 * the caller frees it. */
char *bench_provenance_json(const bench &b, int argc, char **argv);

/* bench_ceilings.cu: the copy, plain 368-byte gather and mma.sync ceilings (setting copy_tbps,
 * g368_tbps, mma_tflops), and the writer's scatter ceiling (after the token buffers exist). */
void bench_ceilings(bench &b);
void bench_scatter_ceiling(bench &b);

/* bench_attend.cu: attend over 368 per-token and 656 records at h = 16, 32, 64, 128. */
void bench_attend(bench &b);

/* ---- bench_data.cu: data like a model's, made on the device ----
 * Row t of stream `seed`: 576 bf16 values (latent and RoPE) N(0, 1) x one log-normal magnitude
 * base x exp(0.5 N(0, 1)) a row, a pure function of (seed, t); rows [first, first + n) into d_rows
 * [n, 576]. Tokens take base 0.5, queries 2 (scores of about unit spread under 1/sqrt(576)). */
void bench_tokens(uint16_t *d_rows, int64_t first, int64_t n, uint64_t seed, float base, cudaStream_t s);

/* Every record of `cache` ([capacity / 64, 64, 368] at b.cache) written by the plugin's CUDA writer
 * in per-token mode from tokens of stream `seed` (chunks of BENCH_T_MAX through b.d_tokens, whose
 * contents it leaves changed). 0 when a write failed. */
int bench_fill_cache_368(bench &b, uint8_t *cache, int64_t capacity, uint64_t seed);

/* Every record of a 656-byte cache of `capacity` records (contiguous) written by FlashMLA's rule
 * (power-of-two tile scales, as host_encode_fp8_656_pow2) from tokens of stream `seed`. */
void bench_fill_cache_656(bench &b, uint8_t *cache, int64_t capacity, uint64_t seed);

/* The records of slots[0..n) (-1: a zero record) copied from a cache of `block`-record pages of
 * `rb` bytes into dst [n, rb]: what the CPU reference of a checked query reads. */
void bench_copy_records(const uint8_t *cache, int64_t block, int32_t rb, const int32_t *d_slots, int64_t n,
                        uint8_t *d_dst, cudaStream_t s);

#endif
