/* nvfp4-mla bench: the writer and the gather reader on the GPU against ceilings measured in the
 * same run (performance.md): a >= 4 GiB device copy, a plain random gather of 368-byte records and
 * the mma.sync bf16 matrix rate.
 * Every kernel's correctness check (CUDA bytes == the plugin's CPU bytes) runs in the same process.
 * Times are medians of CUDA-event-timed launches after warm-up, on a cache of >= 4 GiB with random
 * slots. The plugin is reached through the loader and the ABI only, as a runtime would. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

#include <algorithm>
#include <map>
#include <vector>

#include "cli.h"
#include "mma_cuda.cuh" /* the MMA wrapper attend uses */

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "nvfp4-mla bench: %s failed: %s\n", #call, cudaGetErrorString(e_));    \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static const int64_t BLOCK = 64;

struct result_row {
    char op[64];
    int64_t size;
    double median_us, tbps, ratio;
    const char *ceiling;
    int correct;
};
static std::vector<result_row> rows;

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

/* The ceiling of every reader: a plain gather of 368-byte records by index, one 16-byte chunk per
 * thread, 4 independent chunks in flight per thread. */
__global__ void gather368_ceiling(const uint4 *cache, const int32_t *index, uint4 *out, int32_t n) {
    const int32_t chunks = n * 23; /* 32-bit index arithmetic: division by 23 stays cheap */
    const int32_t stride = gridDim.x * blockDim.x;
    for (int32_t base = blockIdx.x * blockDim.x + threadIdx.x; base < chunks; base += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int32_t c = base + k * stride;
            if (c < chunks) v[k] = __ldg(&cache[(int64_t)__ldg(&index[c / 23]) * 23 + c % 23]);
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (base + k * stride < chunks) out[base + k * stride] = v[k];
        }
    }
}

/* The writer's memory ceiling: read each token's 1152 input bytes, write 368 bytes at its random
 * slot, no arithmetic (one warp per token, 16-byte accesses, like the writer). */
__global__ void scatter368_ceiling(const uint4 *in, const int64_t *slots, uint4 *cache, int32_t n) {
    const int32_t t = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (t >= n) return;
    const uint4 a = __ldg(&in[(int64_t)t * 72 + lane]), b = __ldg(&in[(int64_t)t * 72 + 32 + lane]);
    const uint4 c = lane < 8 ? __ldg(&in[(int64_t)t * 72 + 64 + lane]) : make_uint4(0, 0, 0, 0);
    const uint4 v = make_uint4(a.x ^ b.y ^ c.z, a.y ^ b.z ^ c.w, a.z ^ b.w ^ c.x, a.w ^ b.x ^ c.y);
    if (lane < 23) cache[__ldg(&slots[t]) * 23 + lane] = v;
}

/* The matrix-rate ceiling of attend's tensor-core instruction: mma.sync m16n8k16 bf16 -> f32 from
 * registers, 8 independent accumulators per warp, no memory traffic. */
__global__ void mma_ceiling(float *sink, int iters) {
    uint32_t a[4] = {0x3F803F80u ^ threadIdx.x, 0x3F80BF80u, 0x3F003F80u, 0xBF803F00u}, b0 = 0x3F803F80u ^ blockIdx.x, b1 = 0x3F00BF80u;
    float c[8][4] = {};
    for (int i = 0; i < iters; i++)
#pragma unroll
        for (int k = 0; k < 8; k++) mma_bf16(c[k], a, b0, b1);
    float sum = 0.0f;
    for (int k = 0; k < 8; k++) sum += c[k][0] + c[k][1] + c[k][2] + c[k][3];
    if (sum == 1.2345f) *sink = sum; /* keeps the work; never true for these inputs */
}

static nvfp4_mla_tensor_t dev_tensor(void *p, int32_t dtype, int ndim, std::initializer_list<int64_t> shape,
                                     std::initializer_list<int64_t> strides) {
    nvfp4_mla_tensor_t t = {p, dtype, ndim, {0}, {0}, NVFP4_MLA_DEVICE_CUDA, 0};
    int d = 0;
    for (int64_t v : shape) t.shape[d++] = v;
    d = 0;
    for (int64_t v : strides) t.strides[d++] = v;
    return t;
}

/* Write arguments for T tokens of the bench's token buffer (576-value rows) into 368-byte
 * records; slots and cache are set by the caller. */
static nvfp4_mla_write_args_t write_args_368(uint32_t mode, float scale, uint16_t *tokens, int64_t T, cudaStream_t s) {
    nvfp4_mla_write_args_t w = {};
    w.struct_size = sizeof w;
    w.layout = NVFP4_MLA_LAYOUT_FP8_ROPE_368;
    w.scale_mode = mode;
    w.outer_scale = scale;
    w.kv_c = dev_tensor(tokens, NVFP4_MLA_DTYPE_BF16, 2, {T, 512}, {576, 1});
    w.k_pe = dev_tensor(tokens + 512, NVFP4_MLA_DTYPE_BF16, 2, {T, 64}, {576, 1});
    w.stream = s;
    return w;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand() {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return rng_state;
}

static void add_row(const char *op, int64_t size, double us, double bytes, double ceiling_tbps, const char *ceiling,
                    int correct) {
    result_row r;
    snprintf(r.op, sizeof r.op, "%s", op);
    r.size = size;
    r.median_us = us;
    r.tbps = bytes / (us * 1e-6) / 1e12;
    r.ratio = ceiling_tbps > 0 ? r.tbps / ceiling_tbps : 0;
    r.ceiling = ceiling;
    r.correct = correct;
    rows.push_back(r);
    printf("%-28s %9lld %11.2f %9.3f %8.3f  %-10s %s\n", r.op, (long long)size, us, r.tbps, r.ratio, ceiling,
           correct < 0 ? "-" : correct ? "PASS" : "FAIL");
    fflush(stdout);
}

extern "C" int cli_bench_cmd(int argc, char **argv) {
    const char *plugin = NULL, *json_path = NULL, *only = "";
    int quick = 0;
    int64_t only_tokens = 0;
    cli_seen_t seen = {};
    for (int i = 1; i < argc; i++) {
        long long tokens_value = 0;
        if (cli_once("bench", &seen, argv[i])) return 1;
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--only")) only = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--tokens")) {
            if (cli_parse_int("bench", argv[i], argv[i + 1], 1, INT64_C(1) << 32, &tokens_value)) return 1;
            only_tokens = tokens_value;
            i++;
        }
        else if (i + 1 < argc && !strcmp(argv[i], "--json")) json_path = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--plugin")) plugin = argv[++i];
        else return cli_fail("bench", "unknown or incomplete argument %s", argv[i]);
    }
    int failed_json = 0;
    cli_host_t host;
    if (cli_host_open(&host, plugin)) return 1;
    const nvfp4_mla_plugin_t *t = host.table;
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CUDA, 0, 0, NULL, {0}};
    nvfp4_mla_context_t *gpu;
    if (t->init(&init, &gpu) != NVFP4_MLA_OK) {
        int rc = cli_fail("bench", "%s", t->last_error());
        cli_host_close(&host);
        return rc;
    }
    nvfp4_mla_context_info_t info = {};
    info.struct_size = sizeof info;
    t->context_info(gpu, &info);
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    printf("device %s; plugin %s %s (git %s)\n", info.device_name, t->plugin_name, t->version, t->git_revision);
    printf("%-28s %9s %11s %9s %8s  %-10s %s\n", "operation", "size", "median us", "TB/s", "ratio", "ceiling", "check");

    /* ---- ceilings ---- */
    const size_t copy_bytes = quick ? (size_t)1 << 30 : (size_t)4 << 30;
    void *src, *dst;
    CK(cudaMalloc(&src, copy_bytes));
    CK(cudaMalloc(&dst, copy_bytes));
    CK(cudaMemsetAsync(src, 0x3C, copy_bytes, s));
    double us = median_us([&] { CK(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice, s)); }, 2, 10, s);
    const double copy_tbps = 2.0 * copy_bytes / (us * 1e-6) / 1e12;
    add_row("ceiling: copy", (int64_t)(copy_bytes >> 20), us, 2.0 * copy_bytes, copy_tbps, "copy", -1);
    CK(cudaFree(dst));

    /* One big cache (>= 4 GiB) for the writer and the readers; src doubles as it. */
    const int64_t capacity = (int64_t)(copy_bytes / 368) / BLOCK * BLOCK;
    uint8_t *cache = (uint8_t *)src;
    const int64_t N = 262144;
    std::vector<int32_t> index(N);
    for (auto &v : index) v = (int32_t)(next_rand() % (uint64_t)capacity);
    int32_t *d_index;
    uint16_t *d_out;
    CK(cudaMalloc(&d_index, N * 4));
    CK(cudaMalloc(&d_out, N * 576 * 2));
    CK(cudaMemcpy(d_index, index.data(), N * 4, cudaMemcpyHostToDevice));
    us = median_us([&] { gather368_ceiling<<<132 * 16, 256, 0, s>>>((const uint4 *)cache, d_index, (uint4 *)d_out, (int32_t)N); },
                   3, 20, s);
    CK(cudaGetLastError());
    const double g368_tbps = (N * 368.0 * 2 + N * 4.0) / (us * 1e-6) / 1e12;
    add_row("ceiling: gather368", N, us, N * 368.0 * 2 + N * 4.0, copy_tbps, "copy", -1);

    /* bf16 tensor-core rate of mma.sync (the instruction attend uses): 4 CTAs of 8 warps per SM. */
    const int mma_iters = 4096;
    us = median_us([&] { mma_ceiling<<<132 * 4, 256, 0, s>>>((float *)d_out, mma_iters); }, 2, 10, s);
    CK(cudaGetLastError());
    const double mma_tflops = 132.0 * 4 * 8 * mma_iters * 8 * 4096.0 / (us * 1e-6) / 1e12;
    add_row("ceiling: mma.sync bf16", 132 * 4 * 8, us, mma_tflops * 1e12 * us * 1e-6, 0, "TFLOP/s", -1);

    /* ---- writer ---- */
    const int64_t T_max = 262144;
    std::vector<uint16_t> tokens(T_max * 576);
    for (auto &v : tokens) { /* bf16 of N(0,1)-ish values: a random sign, exponent and mantissa */
        uint64_t r = next_rand();
        v = (uint16_t)(((r & 1) << 15) | ((120 + (r >> 1) % 10) << 7) | ((r >> 8) & 0x7F));
    }
    std::vector<int64_t> slots(T_max);
    for (int64_t i = 0; i < T_max; i++) slots[i] = (int64_t)(next_rand() % (uint64_t)(capacity / 4)) * 4 + (i & 3);
    uint16_t *d_tokens;
    int64_t *d_slots, *d_ident;
    CK(cudaMalloc(&d_tokens, T_max * 576 * 2));
    CK(cudaMalloc(&d_slots, T_max * 8));
    CK(cudaMalloc(&d_ident, T_max * 8));
    CK(cudaMemcpy(d_tokens, tokens.data(), T_max * 576 * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_slots, slots.data(), T_max * 8, cudaMemcpyHostToDevice));
    std::vector<int64_t> ident(T_max);
    for (int64_t i = 0; i < T_max; i++) ident[i] = i;
    CK(cudaMemcpy(d_ident, ident.data(), T_max * 8, cudaMemcpyHostToDevice));
    us = median_us([&] { scatter368_ceiling<<<(unsigned)(T_max / 8), 256, 0, s>>>((const uint4 *)d_tokens, d_slots, (uint4 *)cache, (int32_t)T_max); },
                   3, 20, s);
    CK(cudaGetLastError());
    add_row("ceiling: scatter368", T_max, us, T_max * 1528.0, copy_tbps, "copy", -1);
    uint8_t *d_compact;
    CK(cudaMalloc(&d_compact, T_max * 368));
    std::vector<uint8_t> cpu_records(T_max * 368), gpu_records(T_max * 368);
    const int64_t sizes[] = {1, 64, 512, 16384, 262144};
    const char *mode_names[2] = {"per-token", "static"};
    for (int m = 0; m < 2; m++) {
        const uint32_t mode = m ? NVFP4_MLA_SCALE_STATIC : NVFP4_MLA_SCALE_PER_TOKEN;
        const float scale = m ? 0.003f : 0.0f;
        for (int64_t T : sizes) {
            if ((only[0] && strcmp(only, "write")) || (only_tokens && T != only_tokens)) continue;
            nvfp4_mla_write_args_t w = write_args_368(mode, scale, d_tokens, T, s);
            /* Correctness: the same kernel on identity slots of a compact cache vs the CPU writer. */
            w.slot_mapping = dev_tensor(d_ident, NVFP4_MLA_DTYPE_I64, 1, {T}, {1});
            w.cache = dev_tensor(d_compact, NVFP4_MLA_DTYPE_U8, 3, {T, 1, 368}, {368, 368, 1});
            int ok = t->write(gpu, &w) == NVFP4_MLA_OK;
            CK(cudaStreamSynchronize(s));
            CK(cudaMemcpy(gpu_records.data(), d_compact, T * 368, cudaMemcpyDeviceToHost));
            cli_codec_flags_t f = {NVFP4_MLA_LAYOUT_FP8_ROPE_368, 368, mode, scale};
            ok = ok && !cli_encode("bench", &host, &f, tokens.data(), T, cpu_records.data()) &&
                 memcmp(cpu_records.data(), gpu_records.data(), T * 368) == 0;
            /* Timed: random slots over the >= 4 GiB cache. */
            w.slot_mapping = dev_tensor(d_slots, NVFP4_MLA_DTYPE_I64, 1, {T}, {1});
            w.cache = dev_tensor(cache, NVFP4_MLA_DTYPE_U8, 3, {capacity / BLOCK, BLOCK, 368}, {BLOCK * 368, 368, 1});
            int launched = 1;
            us = median_us([&] { launched &= t->write(gpu, &w) == NVFP4_MLA_OK; }, 3, T >= 16384 ? 20 : 50, s);
            char name[64];
            snprintf(name, sizeof name, "write %s", mode_names[m]);
            add_row(name, T, us, T * 1528.0, copy_tbps, "copy", ok && launched);
            if (T <= 512) {
                /* Device time per launch without host enqueue latency: 100 launches in one graph. */
                cudaGraph_t graph;
                cudaGraphExec_t exec;
                CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
                for (int k = 0; k < 100; k++) launched &= t->write(gpu, &w) == NVFP4_MLA_OK;
                CK(cudaStreamEndCapture(s, &graph));
                CK(cudaGraphInstantiate(&exec, graph, 0));
                us = median_us([&] { CK(cudaGraphLaunch(exec, s)); }, 2, 20, s) / 100.0;
                snprintf(name, sizeof name, "write %s (graph)", mode_names[m]);
                add_row(name, T, us, T * 1528.0, copy_tbps, "copy", ok && launched);
                cudaGraphExecDestroy(exec);
                cudaGraphDestroy(graph);
            }
        }
    }

    /* ---- gather reader ---- */
    for (int m = 0; m < 2 && (!only[0] || !strcmp(only, "gather")); m++) {
        const uint32_t mode = m ? NVFP4_MLA_SCALE_STATIC : NVFP4_MLA_SCALE_PER_TOKEN;
        const float scale = m ? 0.003f : 0.0f;
        nvfp4_mla_gather_args_t g = {};
        g.struct_size = sizeof g;
        g.layout = NVFP4_MLA_LAYOUT_FP8_ROPE_368;
        g.scale_mode = mode;
        g.outer_scale = scale;
        g.stream = s;
        g.out = dev_tensor(d_out, NVFP4_MLA_DTYPE_BF16, 2, {N, 576}, {576, 1});
        g.slots = dev_tensor(d_index, NVFP4_MLA_DTYPE_I32, 1, {N}, {1});
        /* Correctness: the compact cache written by the last writer check (static records for m = 1;
         * the per-token pass re-writes it first), gathered at random slots, vs the CPU reader. */
        nvfp4_mla_write_args_t w = write_args_368(mode, scale, d_tokens, T_max, s);
        w.slot_mapping = dev_tensor(d_ident, NVFP4_MLA_DTYPE_I64, 1, {T_max}, {1});
        w.cache = dev_tensor(d_compact, NVFP4_MLA_DTYPE_U8, 3, {T_max, 1, 368}, {368, 368, 1});
        int ok = t->write(gpu, &w) == NVFP4_MLA_OK;
        std::vector<int32_t> check_slots(N);
        for (auto &v : check_slots) v = (next_rand() % 10 == 0) ? -1 : (int32_t)(next_rand() % (uint64_t)T_max);
        int32_t *d_check;
        CK(cudaMalloc(&d_check, N * 4));
        CK(cudaMemcpy(d_check, check_slots.data(), N * 4, cudaMemcpyHostToDevice));
        nvfp4_mla_gather_args_t gc = g;
        gc.cache = w.cache;
        gc.slots = dev_tensor(d_check, NVFP4_MLA_DTYPE_I32, 1, {N}, {1});
        ok = ok && t->gather(gpu, &gc) == NVFP4_MLA_OK;
        CK(cudaStreamSynchronize(s));
        std::vector<uint16_t> got(N * 576), want(N * 576);
        CK(cudaMemcpy(got.data(), d_out, N * 576 * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(gpu_records.data(), d_compact, T_max * 368, cudaMemcpyDeviceToHost));
        nvfp4_mla_gather_args_t hc = gc;
        hc.cache.data = gpu_records.data();
        hc.slots.data = check_slots.data();
        hc.out.data = want.data();
        hc.cache.device_type = hc.slots.device_type = hc.out.device_type = NVFP4_MLA_DEVICE_CPU;
        hc.stream = NULL;
        ok = ok && t->gather(host.cpu, &hc) == NVFP4_MLA_OK && got == want;
        cudaFree(d_check);
        /* Timed: random slots over the big cache. */
        g.cache = dev_tensor(cache, NVFP4_MLA_DTYPE_U8, 3, {capacity / BLOCK, BLOCK, 368}, {BLOCK * 368, 368, 1});
        int launched = 1;
        us = median_us([&] { launched &= t->gather(gpu, &g) == NVFP4_MLA_OK; }, 3, 20, s);
        char name[64];
        snprintf(name, sizeof name, "gather %s", mode_names[m]);
        add_row(name, N, us, N * (368.0 + 1152 + 4), copy_tbps, "copy", ok && launched);
        printf("%-28s %9s %11s %9s %8.3f  %-10s\n", "  (vs gather368 ceiling)", "", "", "",
               rows.back().tbps / g368_tbps, "gather368");
    }

    /* ---- attend: batch 128, top-k 2048, random slots over the big cache; 368 per-token and the
     * 656-byte fp8_ds_mla baseline through the same kernel ---- */
    const int64_t NQ = 128, TOPK = 2048;
    const int64_t heads_list[4] = {16, 32, 64, 128};
    std::vector<int32_t> topk_slots(NQ * TOPK);
    int32_t *d_topk, *d_small_topk;
    uint16_t *d_q, *d_aout;
    float *d_lse;
    void *d_ws = NULL;
    size_t ws_cap = 0;
    CK(cudaMalloc(&d_topk, NQ * TOPK * 4));
    CK(cudaMalloc(&d_small_topk, NQ * TOPK * 4));
    CK(cudaMalloc(&d_q, NQ * 128 * 576 * 2));
    CK(cudaMalloc(&d_aout, NQ * 128 * 512 * 2));
    CK(cudaMalloc(&d_lse, NQ * 128 * 4));
    {
        std::vector<uint16_t> qh(NQ * 128 * 576);
        for (auto &v : qh) {
            uint64_t r = next_rand();
            v = (uint16_t)(((r & 1) << 15) | ((122 + (r >> 1) % 6) << 7) | ((r >> 8) & 0x7F));
        }
        CK(cudaMemcpy(d_q, qh.data(), qh.size() * 2, cudaMemcpyHostToDevice));
    }
    /* 656-byte records for the baseline: valid random codes and scales, in the compact buffer. */
    std::vector<uint8_t> rec656(T_max / 2 * 656);
    for (size_t i = 0; i < rec656.size(); i++) {
        const size_t off = i % 656;
        rec656[i] = off < 512 ? (uint8_t)(next_rand() & 0x77) : (uint8_t)0;
    }
    for (int64_t r = 0; r < T_max / 2; r++)
        for (int t4 = 0; t4 < 4; t4++) {
            float sc = 0.004f;
            memcpy(&rec656[r * 656 + 512 + 4 * t4], &sc, 4);
        }
    uint8_t *d_656;
    CK(cudaMalloc(&d_656, rec656.size()));
    CK(cudaMemcpy(d_656, rec656.data(), rec656.size(), cudaMemcpyHostToDevice));
    std::map<int64_t, double> attend368_us; /* per h, for the 656 rows' speedup */
    for (int layout_i = 0; layout_i < 2 && (!only[0] || !strcmp(only, "attend")); layout_i++) {
        const int is656 = layout_i == 1;
        const int32_t rb = is656 ? 656 : 368;
        const int64_t cap = is656 ? (int64_t)(copy_bytes / 656) / BLOCK * BLOCK : capacity;
        const int64_t small_cap = is656 ? T_max / 2 : T_max;
        for (auto &v : topk_slots) v = (int32_t)(next_rand() % (uint64_t)cap);
        CK(cudaMemcpy(d_topk, topk_slots.data(), NQ * TOPK * 4, cudaMemcpyHostToDevice));
        std::vector<int32_t> small(NQ * TOPK);
        for (auto &v : small) v = (next_rand() % 16 == 0) ? -1 : (int32_t)(next_rand() % (uint64_t)small_cap);
        CK(cudaMemcpy(d_small_topk, small.data(), NQ * TOPK * 4, cudaMemcpyHostToDevice));
        if (!is656) { /* the compact cache holds per-token records of the check tokens */
            nvfp4_mla_write_args_t w = write_args_368(NVFP4_MLA_SCALE_PER_TOKEN, 0.0f, d_tokens, T_max, s);
            w.slot_mapping = dev_tensor(d_ident, NVFP4_MLA_DTYPE_I64, 1, {T_max}, {1});
            w.cache = dev_tensor(d_compact, NVFP4_MLA_DTYPE_U8, 3, {T_max, 1, 368}, {368, 368, 1});
            t->write(gpu, &w);
        }
        for (int64_t H : heads_list) {
            nvfp4_mla_attend_args_t at = {};
            at.struct_size = sizeof at;
            at.layout = is656 ? NVFP4_MLA_LAYOUT_FP8_DS_MLA_656 : NVFP4_MLA_LAYOUT_FP8_ROPE_368;
            at.scale_mode = is656 ? NVFP4_MLA_SCALE_STATIC : NVFP4_MLA_SCALE_PER_TOKEN;
            at.outer_scale = is656 ? 1.0f : 0.0f;
            at.sm_scale = 0.0416666f;
            at.stream = s;
            at.q = dev_tensor(d_q, NVFP4_MLA_DTYPE_BF16, 3, {NQ, H, 576}, {H * 576, 576, 1});
            at.out = dev_tensor(d_aout, NVFP4_MLA_DTYPE_BF16, 3, {NQ, H, 512}, {H * 512, 512, 1});
            at.lse = dev_tensor(d_lse, NVFP4_MLA_DTYPE_F32, 2, {NQ, H}, {H, 1});
            /* Correctness: 4 queries over the compact records against the CPU attend. */
            const int64_t CQ = 4;
            nvfp4_mla_attend_args_t ac = at;
            ac.q.shape[0] = ac.out.shape[0] = ac.lse.shape[0] = CQ;
            ac.slots = dev_tensor(d_small_topk, NVFP4_MLA_DTYPE_I32, 2, {CQ, TOPK}, {TOPK, 1});
            ac.cache = is656 ? dev_tensor(d_656, NVFP4_MLA_DTYPE_U8, 3, {small_cap / BLOCK, BLOCK, 656}, {BLOCK * 656, 656, 1})
                             : dev_tensor(d_compact, NVFP4_MLA_DTYPE_U8, 3, {T_max, 1, 368}, {368, 368, 1});
            uint64_t ws = 0;
            int ok = t->attend_workspace_bytes(gpu, &ac, &ws) == NVFP4_MLA_OK;
            at.slots = dev_tensor(d_topk, NVFP4_MLA_DTYPE_I32, 2, {NQ, TOPK}, {TOPK, 1});
            at.cache = dev_tensor(cache, NVFP4_MLA_DTYPE_U8, 3, {cap / BLOCK, BLOCK, rb}, {BLOCK * rb, rb, 1});
            uint64_t ws2 = 0;
            ok = ok && t->attend_workspace_bytes(gpu, &at, &ws2) == NVFP4_MLA_OK;
            const uint64_t need = ws > ws2 ? ws : ws2;
            if (need > ws_cap) {
                if (d_ws) cudaFree(d_ws);
                CK(cudaMalloc(&d_ws, need));
                ws_cap = need;
            }
            ac.workspace = at.workspace = dev_tensor(d_ws, NVFP4_MLA_DTYPE_U8, 1, {(int64_t)ws_cap}, {1});
            ok = ok && t->attend(gpu, &ac) == NVFP4_MLA_OK;
            CK(cudaStreamSynchronize(s));
            std::vector<uint16_t> got(CQ * H * 512), want(CQ * H * 512), qh(CQ * H * 576);
            std::vector<float> lse_got(CQ * H), lse_want(CQ * H);
            CK(cudaMemcpy(got.data(), d_aout, got.size() * 2, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(lse_got.data(), d_lse, lse_got.size() * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(qh.data(), d_q, qh.size() * 2, cudaMemcpyDeviceToHost));
            std::vector<uint8_t> cache_h(is656 ? rec656.size() : (size_t)T_max * 368);
            if (is656) cache_h = rec656;
            else CK(cudaMemcpy(cache_h.data(), d_compact, cache_h.size(), cudaMemcpyDeviceToHost));
            nvfp4_mla_attend_args_t hc = ac;
            hc.q.data = qh.data(), hc.slots.data = small.data(), hc.cache.data = cache_h.data();
            hc.out.data = want.data(), hc.lse.data = lse_want.data();
            hc.workspace = nvfp4_mla_tensor_t{};
            hc.stream = NULL;
            for (nvfp4_mla_tensor_t *tt : {&hc.q, &hc.slots, &hc.cache, &hc.out, &hc.lse}) tt->device_type = NVFP4_MLA_DEVICE_CPU;
            ok = ok && t->attend(host.cpu, &hc) == NVFP4_MLA_OK;
            /* Outputs: rel 2/128 plus 1e-3 * max|V| (tests/test_gpu_attend.c). */
            float vmax = 0.0f;
            for (const int32_t sl : small) {
                if (sl < 0 || sl >= (is656 ? T_max / 2 : T_max)) continue;
                if (is656) {
                    for (int t4 = 0; t4 < 4; t4++) vmax = fmaxf(vmax, 448.0f * 0.004f);
                } else {
                    float st;
                    memcpy(&st, &cache_h[(size_t)sl * 368 + 292], 4);
                    vmax = fmaxf(vmax, 6.0f * 448.0f * st);
                }
            }
            for (size_t i = 0; ok && i < got.size(); i++) {
                uint32_t cb = (uint32_t)want[i] << 16, db = (uint32_t)got[i] << 16;
                float c, d;
                memcpy(&c, &cb, 4);
                memcpy(&d, &db, 4);
                ok = fabsf(c - d) <= 1e-3f * vmax + (2.0f / 128) * fabsf(c);
            }
            for (size_t i = 0; ok && i < lse_got.size(); i++)
                ok = isinf(lse_want[i]) ? isinf(lse_got[i]) : fabsf(lse_want[i] - lse_got[i]) <= 1e-5f * fmaxf(fabsf(lse_want[i]), 1.0f);
            int launched = 1;
            us = median_us([&] { launched &= t->attend(gpu, &at) == NVFP4_MLA_OK; }, 3, 20, s);
            const double bytes = NQ * TOPK * (double)rb + NQ * H * (576.0 + 512) * 2;
            const double flops = 2.0 * NQ * H * TOPK * (576 + 512);
            char name[64];
            snprintf(name, sizeof name, "attend %s h=%lld", is656 ? "fp8-656" : "nvfp4-368", (long long)H);
            add_row(name, NQ * TOPK, us, bytes, copy_tbps, "copy", ok && launched);
            const double tflops = flops / (us * 1e-6) / 1e12;
            printf("%-28s %9s %11s %9.1f %8.3f  %-10s (TFLOP/s; time ratio gather368/attend; %.2f of mma.sync)\n", "", "",
                   "", tflops, (N * 368.0 * 2 + N * 4.0) / (g368_tbps * 1e12) / (us * 1e-6), "gather368", tflops / mma_tflops);
            if (!is656) attend368_us[H] = us;
            else printf("%-28s %9s %11s %9s %8.3f  %-10s\n", "  (368 speedup over 656)", "", "", "", us / attend368_us[H], "656/368");
        }
    }
    cudaFree(d_656);

    cli_out_t out;
    if (json_path && cli_out_open("bench", json_path, &out)) json_path = NULL, failed_json = 1;
    if (json_path) {
        FILE *f = out.f; /* a temporary file beside json_path, renamed over it when complete */
        fprintf(f, "{\"device\": \"%s\", \"copy_tbps\": %.4f, \"gather368_tbps\": %.4f, \"rows\": [\n", info.device_name,
                copy_tbps, g368_tbps);
        for (size_t i = 0; i < rows.size(); i++) {
            const result_row &r = rows[i];
            fprintf(f, "  {\"op\": \"%s\", \"size\": %lld, \"median_us\": %.3f, \"tbps\": %.4f, \"ratio\": %.4f, "
                       "\"ceiling\": \"%s\", \"check\": \"%s\"}%s\n", r.op, (long long)r.size, r.median_us, r.tbps,
                    r.ratio, r.ceiling, r.correct < 0 ? "-" : r.correct ? "pass" : "fail", i + 1 < rows.size() ? "," : "");
        }
        fprintf(f, "]}\n");
        failed_json = cli_out_commit(&out);
    }
    int failed = failed_json;
    for (const result_row &r : rows) failed |= r.correct == 0;
    t->shutdown(gpu);
    cli_host_close(&host);
    return failed;
}
