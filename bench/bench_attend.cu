/* nvfp4-mla-bench, attend: batch 128, top-k 2048, random slots over two big caches whose every
 * record holds a random token (bench_data.cu): 368-byte per-token records written by the plugin's
 * writer, and 656-byte fp8_ds_mla records written by FlashMLA's rule (power-of-two tile scales);
 * h = 16, 32, 64, 128. At each h the two layouts are timed interleaved (368, 656, 368, 656, ...),
 * each launch between its own events.
 * Each row checks the call it times: the output of that call (the same arguments, so the same
 * plan: kind and split; out and lse poisoned first) against the plugin's CPU backend on
 * --check-queries of its queries (16: the first and the last, both sides of the CTA round robin's
 * wraps, evenly spread ones), every head, with the GPU tests' per-row bound
 * (host_shims/common/attend_check.h); the CPU reads the same records, copied from the device. Every
 * timed call's out and lse are then poisoned before it and compared after it with that checked
 * output, every row, on the GPU (bench_check.cu). */
#include <math.h>
#include <string.h>

#include <thread>

#include "attend_check.h"
#include "bench.h"

static const int64_t NQ = 128, TOPK = 2048, HMAX = 128;

/* One layout's side of the attend rows. */
struct attend_side {
    int is656;
    uint8_t *cache;          /* b.cache (368) or the 656-byte cache */
    int64_t capacity;        /* its records, whole blocks */
    int32_t *d_topk;         /* [NQ, TOPK] random slots over the cache */
    std::vector<int32_t> topk;
    uint16_t *d_out;         /* [NQ, HMAX, 512] */
    float *d_lse;            /* [NQ, HMAX] */
    uint16_t *d_want_out;    /* [NQ, HMAX, 512]: the checked call's out and lse, what each timed call */
    float *d_want_lse;       /* [NQ, HMAX]        is compared with (bench_check.cu) */
    void *d_ws;              /* grown to the largest attend_workspace_bytes */
    uint64_t ws_cap;
};

/* Queries [NQ, HMAX, 576] (bench_tokens rows, base 2) on the device and their host copy. */
struct attend_queries {
    uint16_t *d_q;
    std::vector<uint16_t> q;
};

static void side_setup(bench &b, attend_side &a, int is656) {
    a.is656 = is656;
    const int32_t rb = is656 ? 656 : 368;
    a.capacity = (int64_t)(b.copy_bytes / rb) / BENCH_BLOCK * BENCH_BLOCK;
    if (is656) {
        CK(cudaMalloc(&a.cache, (size_t)a.capacity * 656));
        bench_fill_cache_656(b, a.cache, a.capacity, 0x5EED0656);
    } else {
        a.cache = b.cache; /* filled by main (bench.cu) before the readers (bench_fill_cache_368) */
    }
    a.topk.resize(NQ * TOPK);
    for (auto &v : a.topk) v = (int32_t)(bench_rand() % (uint64_t)a.capacity);
    CK(cudaMalloc(&a.d_topk, NQ * TOPK * 4));
    CK(cudaMemcpy(a.d_topk, a.topk.data(), NQ * TOPK * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&a.d_out, NQ * HMAX * 512 * 2));
    CK(cudaMalloc(&a.d_lse, NQ * HMAX * 4));
    CK(cudaMalloc(&a.d_want_out, NQ * HMAX * 512 * 2));
    CK(cudaMalloc(&a.d_want_lse, NQ * HMAX * 4));
}

static void side_free(attend_side &a) {
    if (a.is656) cudaFree(a.cache);
    cudaFree(a.d_topk), cudaFree(a.d_out), cudaFree(a.d_lse), cudaFree(a.d_ws);
    cudaFree(a.d_want_out), cudaFree(a.d_want_lse);
}

/* The timed call of one side at H heads, its workspace sized (0 when attend_workspace_bytes failed). */
static int timed_args(bench &b, attend_side &a, const attend_queries &aq, int64_t H, nvfp4_mla_attend_args_t &at) {
    at = nvfp4_mla_attend_args_t{};
    at.struct_size = sizeof at;
    at.layout = a.is656 ? NVFP4_MLA_LAYOUT_FP8_DS_MLA_656 : NVFP4_MLA_LAYOUT_FP8_ROPE_368;
    const int32_t rb = (int32_t)nvfp4_mla_record_bytes(at.layout);
    at.scale_mode = a.is656 ? NVFP4_MLA_SCALE_STATIC : NVFP4_MLA_SCALE_PER_TOKEN;
    at.outer_scale = nvfp4_mla_default_outer_scale(at.scale_mode);
    at.sm_scale = 0.0416666f;
    at.stream = b.s;
    at.q = bench_tensor(aq.d_q, NVFP4_MLA_DTYPE_BF16, 3, {NQ, H, 576}, {H * 576, 576, 1});
    at.out = bench_tensor(a.d_out, NVFP4_MLA_DTYPE_BF16, 3, {NQ, H, 512}, {H * 512, 512, 1});
    at.lse = bench_tensor(a.d_lse, NVFP4_MLA_DTYPE_F32, 2, {NQ, H}, {H, 1});
    at.slots = bench_tensor(a.d_topk, NVFP4_MLA_DTYPE_I32, 2, {NQ, TOPK}, {TOPK, 1});
    at.cache = bench_tensor(a.cache, NVFP4_MLA_DTYPE_U8, 3, {a.capacity / BENCH_BLOCK, BENCH_BLOCK, rb},
                            {BENCH_BLOCK * rb, rb, 1});
    uint64_t need = 0;
    if (b.t->attend_workspace_bytes(b.gpu, &at, &need) != NVFP4_MLA_OK) return 0;
    if (need > a.ws_cap) {
        if (a.d_ws) cudaFree(a.d_ws);
        CK(cudaMalloc(&a.d_ws, need));
        a.ws_cap = need;
    }
    if (need) at.workspace = bench_tensor(a.d_ws, NVFP4_MLA_DTYPE_U8, 1, {(int64_t)need}, {1});
    return 1;
}

/* The CPU reference of the checked queries, on up to 16 threads: query picks[i]'s records are
 * records [i x TOPK, (i + 1) x TOPK) of `rec` (a cache of pages of one record), its slots those ids. */
static int cpu_reference(bench &b, const nvfp4_mla_attend_args_t &at, const attend_queries &aq,
                         const std::vector<int64_t> &picks, std::vector<uint8_t> &rec, std::vector<uint16_t> &want,
                         std::vector<float> &want_lse) {
    const int64_t H = at.q.shape[1], n = (int64_t)picks.size();
    const int32_t rb = (int32_t)at.cache.shape[2];
    std::vector<int32_t> ids(n * TOPK);
    for (int64_t i = 0; i < n * TOPK; i++) ids[i] = (int32_t)i;
    const unsigned cores = std::thread::hardware_concurrency(), threads = cores < 1 ? 1 : cores > 16 ? 16 : cores;
    std::vector<int> ok(threads, 1);
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; t++)
        pool.emplace_back([&, t] {
            for (int64_t i = t; i < n; i += threads) {
                nvfp4_mla_attend_args_t hc = at;
                hc.q = bench_tensor((void *)(aq.q.data() + picks[i] * H * 576), NVFP4_MLA_DTYPE_BF16, 3, {1, H, 576},
                                    {H * 576, 576, 1});
                hc.slots = bench_tensor(ids.data() + i * TOPK, NVFP4_MLA_DTYPE_I32, 2, {1, TOPK}, {TOPK, 1});
                hc.cache = bench_tensor(rec.data(), NVFP4_MLA_DTYPE_U8, 3, {n * TOPK, 1, rb}, {rb, rb, 1});
                hc.out = bench_tensor(want.data() + i * H * 512, NVFP4_MLA_DTYPE_BF16, 3, {1, H, 512},
                                      {H * 512, 512, 1});
                hc.lse = bench_tensor(want_lse.data() + i * H, NVFP4_MLA_DTYPE_F32, 2, {1, H}, {H, 1});
                hc.workspace = nvfp4_mla_tensor_t{};
                hc.stream = NULL;
                for (nvfp4_mla_tensor_t *x : {&hc.q, &hc.slots, &hc.cache, &hc.out, &hc.lse})
                    x->device_type = NVFP4_MLA_DEVICE_CPU;
                ok[t] &= b.t->attend(b.host.cpu, &hc) == NVFP4_MLA_OK;
            }
        });
    for (auto &th : pool) th.join();
    int all = 1;
    for (int v : ok) all &= v;
    return all;
}

/* The output the timed call `at` left in a.d_out / a.d_lse, at the checked queries (their count in
 * *queries), against the CPU backend over the same records (copied from the device). */
static attend_check_stats_t check_timed_call(bench &b, const attend_side &a, const attend_queries &aq,
                                             const nvfp4_mla_attend_args_t &at, int64_t *queries, int *ok) {
    const int64_t H = at.q.shape[1];
    const int32_t rb = (int32_t)at.cache.shape[2];
    std::vector<int64_t> picks(2 * b.check_queries + 8);
    picks.resize(attend_check_pick_queries(NQ, 0, b.check_queries, b.sm_count, picks.data()));
    const int64_t n = (int64_t)picks.size();
    std::vector<int32_t> slots(n * TOPK);
    for (int64_t i = 0; i < n; i++) memcpy(&slots[i * TOPK], &a.topk[picks[i] * TOPK], TOPK * 4);
    int32_t *d_slots;
    uint8_t *d_rec;
    CK(cudaMalloc(&d_slots, n * TOPK * 4));
    CK(cudaMalloc(&d_rec, n * TOPK * rb));
    CK(cudaMemcpy(d_slots, slots.data(), n * TOPK * 4, cudaMemcpyHostToDevice));
    bench_copy_records(a.cache, BENCH_BLOCK, rb, d_slots, n * TOPK, d_rec, b.s);
    CK(cudaStreamSynchronize(b.s));
    std::vector<uint8_t> rec(n * TOPK * rb);
    std::vector<uint16_t> got(NQ * H * 512), want(n * H * 512);
    std::vector<float> got_lse(NQ * H), want_lse(n * H);
    CK(cudaMemcpy(rec.data(), d_rec, rec.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(got.data(), a.d_out, got.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(got_lse.data(), a.d_lse, got_lse.size() * 4, cudaMemcpyDeviceToHost));
    cudaFree(d_slots), cudaFree(d_rec);
    *ok = cpu_reference(b, at, aq, picks, rec, want, want_lse);
    attend_check_stats_t s = {};
    for (int64_t i = 0; i < n && *ok; i++)
        attend_check_query(&got[picks[i] * H * 512], &got_lse[picks[i] * H], &want[i * H * 512], &want_lse[i * H], H,
                           picks[i], NULL, &s);
    char line[512];
    printf("  check of attend %s h=%lld, the timed call: %lld queries (%lld .. %lld), %s\n",
           a.is656 ? "fp8-656" : "nvfp4-368", (long long)H, (long long)n, (long long)picks[0], (long long)picks[n - 1],
           attend_check_summary(&s, line, sizeof line));
    *ok = *ok && s.failed == 0;
    *queries = n;
    return s;
}

/* One side's timed launch, with its output poisoned before and compared after it (its calls
 * counted into *calls, its bad elements into watch). */
static bench_side watched(bench &b, const attend_side &a, const nvfp4_mla_attend_args_t &at, int *launched,
                          bench_watch watch, int64_t *calls) {
    const int64_t rows = NQ * at.q.shape[1];
    return bench_side{[&b, &at, launched] { *launched &= b.t->attend(b.gpu, &at) == NVFP4_MLA_OK; },
                      [&b, &a, rows] {
                          bench_poison(a.d_out, rows * 512 * 2, b.s);
                          bench_poison(a.d_lse, rows * 4, b.s);
                      },
                      [&b, &a, rows, watch, calls] {
                          bench_compare_attend(a.d_out, a.d_lse, a.d_want_out, a.d_want_lse, rows, watch.d_bad, b.s);
                          ++*calls;
                      }};
}

/* The rows of one h: each side's timed call made once (its output poisoned first) and checked
 * against the CPU, kept as what the timed calls are compared with; then both timed interleaved;
 * each row printed with TFLOP/s over its H real heads, and the 656 row with 368's speedup. */
static void attend_rows(bench &b, attend_side *sides, const attend_queries &aq, int64_t H) {
    nvfp4_mla_attend_args_t at[2];
    int ok[2], launched[2] = {1, 1};
    attend_check_stats_t check[2] = {};
    int64_t queries[2] = {0, 0}, calls[2] = {0, 0};
    bench_watch watch[2];
    for (int k = 0; k < 2; k++) {
        ok[k] = timed_args(b, sides[k], aq, H, at[k]);
        bench_poison(sides[k].d_out, NQ * H * 512 * 2, b.s);
        bench_poison(sides[k].d_lse, NQ * H * 4, b.s);
        ok[k] = ok[k] && b.t->attend(b.gpu, &at[k]) == NVFP4_MLA_OK;
        CK(cudaMemcpyAsync(sides[k].d_want_out, sides[k].d_out, NQ * H * 512 * 2, cudaMemcpyDeviceToDevice, b.s));
        CK(cudaMemcpyAsync(sides[k].d_want_lse, sides[k].d_lse, NQ * H * 4, cudaMemcpyDeviceToDevice, b.s));
        CK(cudaStreamSynchronize(b.s));
        int checked = 0;
        if (ok[k]) check[k] = check_timed_call(b, sides[k], aq, at[k], &queries[k], &checked);
        ok[k] = ok[k] && checked;
        watch[k] = bench_watch_open();
    }
    const std::vector<bench_timing> t =
        bench_time_sides(b, {watched(b, sides[0], at[0], &launched[0], watch[0], &calls[0]),
                             watched(b, sides[1], at[1], &launched[1], watch[1], &calls[1])},
                         3, 20);
    for (int k = 0; k < 2; k++) {
        const int32_t rb = k ? 656 : 368;
        const double bytes = NQ * TOPK * (double)rb + NQ * H * (576.0 + 512) * 2;
        const double flops = 2.0 * NQ * H * TOPK * (576 + 512);
        char name[64];
        snprintf(name, sizeof name, "attend %s h=%lld", k ? "fp8-656" : "nvfp4-368", (long long)H);
        bench_row &r = bench_add_row(b, name, NQ * TOPK, t[k], bytes, b.copy_tbps, "copy", ok[k] && launched[k]);
        r.tflops = flops / (t[k].median_us * 1e-6) / 1e12;
        r.check_queries = queries[k];
        r.check = check[k];
        printf("%-28s %9s %11s %9.1f %8.3f  %-10s (TFLOP/s over %lld heads; time ratio gather368/attend; %.2f of "
               "mma.sync; IQR %.2f .. %.2f us)\n", "", "", "", r.tflops,
               (BENCH_N * 368.0 * 2 + BENCH_N * 4.0) / (b.g368_tbps * 1e12) / (t[k].median_us * 1e-6), "gather368",
               (long long)H, r.tflops / b.mma_tflops, t[k].p25_us, t[k].p75_us);
        bench_note_timed(r, calls[k], bench_watch_close(watch[k]));
    }
    printf("%-28s %9s %11s %9s %8.3f  %-10s\n", "  (368 speedup over 656)", "", "", "", t[1].median_us / t[0].median_us,
           "656/368");
}

void bench_attend(bench &b) {
    if (b.only[0] && strcmp(b.only, "attend")) return;
    static attend_side sides[2]; /* large; one per process */
    attend_queries aq;
    CK(cudaMalloc(&aq.d_q, NQ * HMAX * 576 * 2));
    bench_tokens(aq.d_q, 0, NQ * HMAX, 0x5EED0009, 2.0f, b.s);
    CK(cudaStreamSynchronize(b.s));
    aq.q.resize(NQ * HMAX * 576);
    CK(cudaMemcpy(aq.q.data(), aq.d_q, aq.q.size() * 2, cudaMemcpyDeviceToHost));
    side_setup(b, sides[0], 0);
    side_setup(b, sides[1], 1);
    for (int64_t H : {16, 32, 64, 128}) attend_rows(b, sides, aq, H);
    side_free(sides[0]);
    side_free(sides[1]);
    cudaFree(aq.d_q);
}
