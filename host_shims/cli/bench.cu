/* nvfp4-mla bench: the writer and the gather reader on the GPU against ceilings measured in the
 * same run (performance.md): a >= 4 GiB device copy and a plain random gather of 368-byte records.
 * Every kernel's correctness check (CUDA bytes == the plugin's CPU bytes) runs in the same process.
 * Times are medians of CUDA-event-timed launches after warm-up, on a cache of >= 4 GiB with random
 * slots. The plugin is reached through the loader and the ABI only, as a runtime would. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
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

static nvfp4_mla_tensor_t dev_tensor(void *p, int32_t dtype, int ndim, std::initializer_list<int64_t> shape,
                                     std::initializer_list<int64_t> strides) {
    nvfp4_mla_tensor_t t = {p, dtype, ndim, {0}, {0}, NVFP4_MLA_DEVICE_CUDA, 0};
    int d = 0;
    for (int64_t v : shape) t.shape[d++] = v;
    d = 0;
    for (int64_t v : strides) t.strides[d++] = v;
    return t;
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
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--only")) only = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--tokens")) only_tokens = atoll(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--json")) json_path = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--plugin")) plugin = argv[++i];
        else return cli_fail("bench", "unknown or incomplete argument %s", argv[i]);
    }
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
            nvfp4_mla_write_args_t w = {};
            w.struct_size = sizeof w;
            w.layout = NVFP4_MLA_LAYOUT_FP8_ROPE_368;
            w.scale_mode = mode;
            w.outer_scale = scale;
            w.kv_c = dev_tensor(d_tokens, NVFP4_MLA_DTYPE_BF16, 2, {T, 512}, {576, 1});
            w.k_pe = dev_tensor(d_tokens + 512, NVFP4_MLA_DTYPE_BF16, 2, {T, 64}, {576, 1});
            w.stream = s;
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
        nvfp4_mla_write_args_t w = {};
        w.struct_size = sizeof w;
        w.layout = NVFP4_MLA_LAYOUT_FP8_ROPE_368;
        w.scale_mode = mode;
        w.outer_scale = scale;
        w.kv_c = dev_tensor(d_tokens, NVFP4_MLA_DTYPE_BF16, 2, {T_max, 512}, {576, 1});
        w.k_pe = dev_tensor(d_tokens + 512, NVFP4_MLA_DTYPE_BF16, 2, {T_max, 64}, {576, 1});
        w.slot_mapping = dev_tensor(d_ident, NVFP4_MLA_DTYPE_I64, 1, {T_max}, {1});
        w.cache = dev_tensor(d_compact, NVFP4_MLA_DTYPE_U8, 3, {T_max, 1, 368}, {368, 368, 1});
        w.stream = s;
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

    if (json_path) {
        FILE *f = fopen(json_path, "w");
        if (!f) return cli_fail("bench", "cannot create %s", json_path);
        fprintf(f, "{\"device\": \"%s\", \"copy_tbps\": %.4f, \"gather368_tbps\": %.4f, \"rows\": [\n", info.device_name,
                copy_tbps, g368_tbps);
        for (size_t i = 0; i < rows.size(); i++) {
            const result_row &r = rows[i];
            fprintf(f, "  {\"op\": \"%s\", \"size\": %lld, \"median_us\": %.3f, \"tbps\": %.4f, \"ratio\": %.4f, "
                       "\"ceiling\": \"%s\", \"check\": \"%s\"}%s\n", r.op, (long long)r.size, r.median_us, r.tbps,
                    r.ratio, r.ceiling, r.correct < 0 ? "-" : r.correct ? "pass" : "fail", i + 1 < rows.size() ? "," : "");
        }
        fprintf(f, "]}\n");
        fclose(f);
    }
    int failed = 0;
    for (const result_row &r : rows) failed |= r.correct == 0;
    t->shutdown(gpu);
    cli_host_close(&host);
    return failed;
}
