/* nvfp4-mla-bench: the writer, the gather reader and attend on the GPU against ceilings measured in
 * the same run (BENCHMARKS.md, "What is measured"): a >= 4 GiB device copy, a plain random gather of
 * 368-byte records and the mma.sync bf16 matrix rate (bench_ceilings.cu).
 * Every row's correctness check runs in the same process: its first call (the timed call's own
 * arguments) against the plugin's CPU output, then every timed call's output, poisoned before the
 * call and compared after it with that checked output on the GPU (bench_check.cu), outside the
 * call's events. Times: median and spread of CUDA-event-timed launches after warm-up, sides
 * compared in one row interleaved, optionally with L2 flushed before each launch (--flush-l2), on a
 * cache of >= 4 GiB whose every record holds a random token (bench_data.cu), at random slots. The
 * plugin is reached through the loader and the ABI only, as a runtime would.
 * This file: main, timing, the writer and gather sections, the JSON (its provenance:
 * bench_provenance.cu); attend: bench_attend.cu. */
#include <cjson/cJSON.h>
#include <string.h>

#include "bench.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
uint64_t bench_rand() {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return rng_state;
}

nvfp4_mla_tensor_t bench_tensor(void *p, int32_t dtype, int ndim, std::initializer_list<int64_t> shape,
                                std::initializer_list<int64_t> strides) {
    nvfp4_mla_tensor_t t = {p, dtype, ndim, {0}, {0}, NVFP4_MLA_DEVICE_CUDA, 0};
    int d = 0;
    for (int64_t v : shape) t.shape[d++] = v;
    d = 0;
    for (int64_t v : strides) t.strides[d++] = v;
    return t;
}

std::vector<bench_timing> bench_time_sides(const bench &b, const std::vector<bench_side> &sides, int warmup, int iters) {
    const size_t n = sides.size();
    std::vector<cudaEvent_t> ev(2 * n);
    for (auto &e : ev) CK(cudaEventCreate(&e));
    std::vector<std::vector<float>> ms(n);
    for (int round = 0; round < warmup + iters; round++) {
        for (size_t k = 0; k < n; k++) {
            /* The poison first: the flush after it evicts the lines the poison touched (the outputs it
             * wrote; for the writer's records, the slot list it read), so that a flushed launch starts on
             * a cache holding none of its data. The flush writes only its own buffer: the check that
             * follows the launch still sees the poison's bytes wherever the call did not write. */
            if (sides[k].before) sides[k].before();
            if (b.flush_l2) CK(cudaMemsetAsync(b.flush_buf, round & 0xFF, b.flush_bytes, b.s));
            CK(cudaEventRecord(ev[2 * k], b.s));
            sides[k].launch();
            CK(cudaEventRecord(ev[2 * k + 1], b.s));
            if (sides[k].after) sides[k].after();
        }
        CK(cudaEventSynchronize(ev[2 * n - 1]));
        for (size_t k = 0; k < n && round >= warmup; k++) {
            float t;
            CK(cudaEventElapsedTime(&t, ev[2 * k], ev[2 * k + 1]));
            ms[k].push_back(t);
        }
    }
    for (auto &e : ev) cudaEventDestroy(e);
    std::vector<bench_timing> out(n);
    for (size_t k = 0; k < n; k++) {
        std::vector<float> &v = ms[k];
        std::sort(v.begin(), v.end());
        const size_t m = v.size();
        out[k] = bench_timing{v[m / 2] * 1e3, v[0] * 1e3, v[m - 1] * 1e3, v[m / 4] * 1e3, v[(3 * m) / 4] * 1e3, (int)m};
    }
    return out;
}

bench_row &bench_add_row(bench &b, const char *op, int64_t size, const bench_timing &t, double bytes,
                         double ceiling_tbps, const char *ceiling, int correct) {
    bench_row r = {};
    snprintf(r.op, sizeof r.op, "%s", op);
    r.size = size;
    r.t = t;
    r.tbps = bytes / (t.median_us * 1e-6) / 1e12;
    r.ratio = ceiling_tbps > 0 ? r.tbps / ceiling_tbps : 0;
    r.ceiling = ceiling;
    r.correct = correct;
    b.rows.push_back(r);
    printf("%-28s %9lld %11.2f %9.3f %8.3f  %-10s %-5s %9.2f %9.2f\n", r.op, (long long)size, t.median_us, r.tbps,
           r.ratio, ceiling, correct < 0 ? "-" : correct ? "PASS" : "FAIL", t.min_us, t.max_us);
    fflush(stdout);
    return b.rows.back();
}

void bench_note_timed(bench_row &r, int64_t calls, unsigned long long bad) {
    r.timed_calls = calls;
    r.timed_bad = bad;
    if (bad && r.correct) r.correct = 0;
    printf("%-28s every timed call's output (%lld, poisoned first) against the checked call's: %s (%llu elements "
           "outside)\n", "", (long long)calls, bad ? "FAIL" : "PASS", bad);
    fflush(stdout);
}

/* bench.h */
nvfp4_mla_write_args_t bench_write_args_368(const bench &b, uint32_t mode, float scale, int64_t T, uint32_t policy) {
    nvfp4_mla_write_args_t w = {};
    w.struct_size = sizeof w;
    w.layout = NVFP4_MLA_LAYOUT_FP8_ROPE_368;
    w.scale_mode = mode;
    w.outer_scale = scale;
    w.writer_policy = policy;
    w.kv_c = bench_tensor(b.d_tokens, NVFP4_MLA_DTYPE_BF16, 2, {T, 512}, {576, 1});
    w.k_pe = bench_tensor(b.d_tokens + 512, NVFP4_MLA_DTYPE_BF16, 2, {T, 64}, {576, 1});
    w.slot_mapping = bench_tensor(b.d_ident, NVFP4_MLA_DTYPE_I64, 1, {T}, {1});
    w.cache = bench_tensor(b.d_compact, NVFP4_MLA_DTYPE_U8, 3, {T, 1, 368}, {368, 368, 1});
    w.stream = b.s;
    return w;
}

static nvfp4_mla_tensor_t big_cache(bench &b) {
    return bench_tensor(b.cache, NVFP4_MLA_DTYPE_U8, 3, {b.capacity / BENCH_BLOCK, BENCH_BLOCK, 368},
                        {BENCH_BLOCK * 368, 368, 1});
}

/* The writer's inputs: tokens like a model's latents (bench_tokens: Gaussian values times a
 * per-token log-normal magnitude, RoPE included; a host copy for the CPU writer), random slots (4
 * consecutive tokens share a 4-slot run), identity slots, the compact cache. */
static void writer_buffers(bench &b) {
    const int64_t T = BENCH_T_MAX;
    b.tokens.resize(T * 576);
    std::vector<int64_t> slots(T), ident(T);
    /* distinct runs: two tokens of one slot would race, and the timed calls' records could differ */
    std::vector<uint8_t> taken((size_t)(b.capacity / 4), 0);
    for (int64_t i = 0; i < T; i += 4) {
        uint64_t run;
        do run = bench_rand() % (uint64_t)(b.capacity / 4);
        while (taken[run]);
        taken[run] = 1;
        for (int64_t j = i; j < i + 4 && j < T; j++) slots[j] = (int64_t)run * 4 + (j & 3);
    }
    for (int64_t i = 0; i < T; i++) ident[i] = i;
    CK(cudaMalloc(&b.d_tokens, T * 576 * 2));
    CK(cudaMalloc(&b.d_slots, T * 8));
    CK(cudaMalloc(&b.d_ident, T * 8));
    CK(cudaMalloc(&b.d_compact, T * 368));
    bench_tokens(b.d_tokens, 0, T, 0x5EED0001, 0.5f, b.s);
    CK(cudaStreamSynchronize(b.s));
    CK(cudaMemcpy(b.tokens.data(), b.d_tokens, T * 576 * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b.d_slots, slots.data(), T * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.d_ident, ident.data(), T * 8, cudaMemcpyHostToDevice));
}

/* Device time per launch without host enqueue latency: 100 launches in one graph; `check` poisons
 * before and compares after each graph launch. */
static bench_timing graph_us(bench &b, const nvfp4_mla_write_args_t &w, int &launched, const bench_side &check) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(b.s, cudaStreamCaptureModeThreadLocal));
    for (int k = 0; k < 100; k++) launched &= b.t->write(b.gpu, &w) == NVFP4_MLA_OK;
    CK(cudaStreamEndCapture(b.s, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    bench_timing t =
        bench_time_sides(b, {bench_side{[&] { CK(cudaGraphLaunch(exec, b.s)); }, check.before, check.after}}, 2, 20)[0];
    for (double *v : {&t.median_us, &t.min_us, &t.max_us, &t.p25_us, &t.p75_us}) *v /= 100.0;
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return t;
}

/* One writer row (and its graph row for small T) of one writer policy: the CUDA records of T tokens
 * equal the CPU writer's bytes (same policy); then the timed launches at random slots over the big
 * cache, the records at those slots poisoned before each and compared with the CPU's bytes after
 * each. Rows of a policy other than rtn carry its name ("write per-token mse"). */
static void write_case(bench &b, int m, uint32_t policy, int64_t T) {
    static const char *const mode_names[2] = {"per-token", "static"};
    const uint32_t mode = m ? NVFP4_MLA_SCALE_STATIC : NVFP4_MLA_SCALE_PER_TOKEN;
    const float scale = m ? 0.003f : nvfp4_mla_default_outer_scale(mode);
    nvfp4_mla_write_args_t w = bench_write_args_368(b, mode, scale, T, policy);
    int ok = b.t->write(b.gpu, &w) == NVFP4_MLA_OK;
    CK(cudaStreamSynchronize(b.s));
    std::vector<uint8_t> cpu_records(T * 368), gpu_records(T * 368);
    CK(cudaMemcpy(gpu_records.data(), b.d_compact, T * 368, cudaMemcpyDeviceToHost));
    cli_codec_flags_t f = {NVFP4_MLA_LAYOUT_FP8_ROPE_368, mode, scale, policy};
    ok = ok && !cli_encode("bench", &b.host, &f, b.tokens.data(), T, cpu_records.data()) &&
         memcmp(cpu_records.data(), gpu_records.data(), T * 368) == 0;
    uint8_t *d_want; /* the CPU writer's bytes: what every timed call must leave at its slots */
    CK(cudaMalloc(&d_want, T * 368));
    CK(cudaMemcpy(d_want, cpu_records.data(), T * 368, cudaMemcpyHostToDevice));
    w.slot_mapping = bench_tensor(b.d_slots, NVFP4_MLA_DTYPE_I64, 1, {T}, {1});
    w.cache = big_cache(b);
    int launched = 1;
    int64_t calls = 0;
    bench_watch watch = bench_watch_open();
    /* before each timed call: its target records poisoned, then evicted from L2 (cold, as an engine's
     * new slots are), its inputs read back in when they fit (warm, as the projection left them) */
    const bench_side check = {{},
                              [&] {
                                  bench_poison_records(b.cache, BENCH_BLOCK, 368, b.d_slots, T, b.s);
                                  bench_evict_l2(b);
                                  bench_warm_inputs(b, b.d_tokens, (size_t)T * 576 * 2);
                              },
                              [&] {
                                  bench_compare_records(b.cache, BENCH_BLOCK, 368, b.d_slots, T, d_want, watch.d_bad, b.s);
                                  calls++;
                              }};
    bench_timing us = bench_time_sides(b, {bench_side{[&] { launched &= b.t->write(b.gpu, &w) == NVFP4_MLA_OK; },
                                                      check.before, check.after}},
                                       3, T >= 16384 ? 20 : 50)[0];
    char name[64], policy_suffix[16] = "";
    if (policy != NVFP4_MLA_WRITER_POLICY_RTN)
        snprintf(policy_suffix, sizeof policy_suffix, " %s", nvfp4_mla_writer_policy_name(policy));
    snprintf(name, sizeof name, "write %s%s", mode_names[m], policy_suffix);
    bench_note_timed(bench_add_row(b, name, T, us, T * 1528.0, b.copy_tbps, "copy", ok && launched), calls,
                     bench_watch_close(watch));
    if (T <= 512) {
        calls = 0;
        watch = bench_watch_open();
        us = graph_us(b, w, launched, check);
        snprintf(name, sizeof name, "write %s%s (graph)", mode_names[m], policy_suffix);
        bench_note_timed(bench_add_row(b, name, T, us, T * 1528.0, b.copy_tbps, "copy", ok && launched), calls,
                         bench_watch_close(watch));
    }
    cudaFree(d_want);
}

/* Every writer policy, mode and size (issue 16's target: a policy within 1.5x of rtn at 16k and
 * 256k tokens, and small batches within 5 us a launch in a graph). */
static void bench_write(bench &b) {
    const int64_t sizes[] = {1, 64, 512, 16384, 262144};
    for (uint32_t policy = 0; policy < NVFP4_MLA_WRITER_POLICY_COUNT; policy++) {
        for (int m = 0; m < 2; m++) {
            for (int64_t T : sizes) {
                if ((b.only[0] && strcmp(b.only, "write")) || (b.only_tokens && T != b.only_tokens)) continue;
                write_case(b, m, policy, T);
            }
        }
    }
}

/* The timed gather `g` once, its rows against the CPU gather of the same records (copied from the
 * device); *d_want gets a device copy of those rows, what every timed call must write. */
static int gather_checked_call(bench &b, const nvfp4_mla_gather_args_t &g, uint16_t **d_want) {
    const int64_t N = g.slots.shape[0];
    CK(cudaMalloc(d_want, N * 576 * 2));
    int ok = b.t->gather(b.gpu, &g) == NVFP4_MLA_OK;
    uint8_t *d_rec;
    CK(cudaMalloc(&d_rec, N * 368));
    bench_copy_records(b.cache, BENCH_BLOCK, 368, (const int32_t *)g.slots.data, N, d_rec, b.s);
    CK(cudaMemcpyAsync(*d_want, b.d_out, N * 576 * 2, cudaMemcpyDeviceToDevice, b.s));
    CK(cudaStreamSynchronize(b.s));
    std::vector<uint8_t> records(N * 368);
    std::vector<uint16_t> got(N * 576), want(N * 576);
    std::vector<int32_t> ids(N);
    for (int64_t i = 0; i < N; i++) ids[i] = (int32_t)i;
    CK(cudaMemcpy(records.data(), d_rec, N * 368, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(got.data(), *d_want, N * 576 * 2, cudaMemcpyDeviceToHost));
    cudaFree(d_rec);
    nvfp4_mla_gather_args_t hc = g;
    hc.cache = bench_tensor(records.data(), NVFP4_MLA_DTYPE_U8, 3, {N, 1, 368}, {368, 368, 1});
    hc.slots = bench_tensor(ids.data(), NVFP4_MLA_DTYPE_I32, 1, {N}, {1});
    hc.out.data = want.data();
    hc.cache.device_type = hc.slots.device_type = hc.out.device_type = NVFP4_MLA_DEVICE_CPU;
    hc.stream = NULL;
    return ok && b.t->gather(b.host.cpu, &hc) == NVFP4_MLA_OK && got == want;
}

/* One gather row: the compact cache re-written in this mode and gathered at random slots (10%
 * unused) equals the CPU gather of the same bytes; the timed gather over the big cache once, against
 * the CPU's gather of its records; then the timed calls, each poisoned before and compared after. */
static void gather_case(bench &b, int m) {
    const int64_t N = BENCH_N, T = BENCH_T_MAX;
    const uint32_t mode = m ? NVFP4_MLA_SCALE_STATIC : NVFP4_MLA_SCALE_PER_TOKEN;
    const float scale = m ? 0.003f : nvfp4_mla_default_outer_scale(mode);
    nvfp4_mla_gather_args_t g = {};
    g.struct_size = sizeof g;
    g.layout = NVFP4_MLA_LAYOUT_FP8_ROPE_368;
    g.scale_mode = mode;
    g.outer_scale = scale;
    g.stream = b.s;
    g.out = bench_tensor(b.d_out, NVFP4_MLA_DTYPE_BF16, 2, {N, 576}, {576, 1});
    nvfp4_mla_write_args_t w = bench_write_args_368(b, mode, scale, T, 0);
    int ok = b.t->write(b.gpu, &w) == NVFP4_MLA_OK;
    std::vector<int32_t> check_slots(N);
    for (auto &v : check_slots) v = (bench_rand() % 10 == 0) ? -1 : (int32_t)(bench_rand() % (uint64_t)T);
    int32_t *d_check;
    CK(cudaMalloc(&d_check, N * 4));
    CK(cudaMemcpy(d_check, check_slots.data(), N * 4, cudaMemcpyHostToDevice));
    nvfp4_mla_gather_args_t gc = g;
    gc.cache = w.cache;
    gc.slots = bench_tensor(d_check, NVFP4_MLA_DTYPE_I32, 1, {N}, {1});
    ok = ok && b.t->gather(b.gpu, &gc) == NVFP4_MLA_OK;
    CK(cudaStreamSynchronize(b.s));
    std::vector<uint16_t> got(N * 576), want(N * 576);
    std::vector<uint8_t> records(T * 368);
    CK(cudaMemcpy(got.data(), b.d_out, N * 576 * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(records.data(), b.d_compact, T * 368, cudaMemcpyDeviceToHost));
    nvfp4_mla_gather_args_t hc = gc;
    hc.cache.data = records.data(), hc.slots.data = check_slots.data(), hc.out.data = want.data();
    hc.cache.device_type = hc.slots.device_type = hc.out.device_type = NVFP4_MLA_DEVICE_CPU;
    hc.stream = NULL;
    ok = ok && b.t->gather(b.host.cpu, &hc) == NVFP4_MLA_OK && got == want;
    cudaFree(d_check);
    g.cache = big_cache(b);
    g.slots = bench_tensor(b.d_index, NVFP4_MLA_DTYPE_I32, 1, {N}, {1});
    uint16_t *d_want;
    ok = ok && gather_checked_call(b, g, &d_want);
    int launched = 1;
    int64_t calls = 0;
    bench_watch watch = bench_watch_open();
    const bench_timing us = bench_time_sides(
        b, {bench_side{[&] { launched &= b.t->gather(b.gpu, &g) == NVFP4_MLA_OK; },
                       [&] { bench_poison(b.d_out, N * 576 * 2, b.s), bench_evict_l2(b); }, /* out cold */
                       [&] { bench_compare_u16(b.d_out, d_want, N * 576, watch.d_bad, b.s), calls++; }}},
        3, 20)[0];
    bench_row &r = bench_add_row(b, m ? "gather static" : "gather per-token", N, us, N * (368.0 + 1152 + 4),
                                 b.copy_tbps, "copy", ok && launched);
    bench_note_timed(r, calls, bench_watch_close(watch));
    printf("%-28s %9s %11s %9s %8.3f  %-10s\n", "  (vs gather368 ceiling)", "", "", "",
           b.rows.back().tbps / b.g368_tbps, "gather368");
    cudaFree(d_want);
}

static void bench_gather(bench &b) {
    for (int m = 0; m < 2 && (!b.only[0] || !strcmp(b.only, "gather")); m++) gather_case(b, m);
}

/* One row of bench.json: the keys plot_results.py and earlier readers use (op, size, median_us,
 * tbps, ratio, ceiling, check), the spread of the samples, and for attend rows TFLOP/s over the
 * real heads and what the check of the timed call found. */
static void json_row(FILE *f, const bench_row &r, const char *sep) {
    fprintf(f, "  {\"op\": \"%s\", \"size\": %lld, \"median_us\": %.3f, \"tbps\": %.4f, \"ratio\": %.4f, "
               "\"ceiling\": \"%s\", \"check\": \"%s\", \"min_us\": %.3f, \"max_us\": %.3f, \"p25_us\": %.3f, "
               "\"p75_us\": %.3f, \"samples\": %d", r.op, (long long)r.size, r.t.median_us, r.tbps, r.ratio, r.ceiling,
            r.correct < 0 ? "-" : r.correct ? "pass" : "fail", r.t.min_us, r.t.max_us, r.t.p25_us, r.t.p75_us,
            r.t.samples);
    if (r.tflops > 0) fprintf(f, ", \"tflops\": %.2f", r.tflops);
    if (r.timed_calls > 0)
        fprintf(f, ", \"timed_calls\": %lld, \"timed_bad_elements\": %llu", (long long)r.timed_calls, r.timed_bad);
    if (r.check_queries > 0)
        fprintf(f, ", \"check_queries\": %lld, \"check_rows\": %lld, \"check_failed_rows\": %lld, "
                   "\"worst_rel_rms\": %.3e, \"worst_excess\": %.3e, \"worst_lse\": %.3e",
                (long long)r.check_queries, (long long)r.check.rows, (long long)r.check.failed, r.check.worst_rel_rms,
                r.check.worst_excess, r.check.worst_lse);
    fprintf(f, "}%s\n", sep);
}

/* bench.json: the device, the ceilings, how times were taken, and every row; written whole or not
 * at all. */
static int bench_json(const bench &b, const char *path, int argc, char **argv) {
    cli_out_t out;
    if (cli_out_open("bench", path, &out)) return 1;
    FILE *f = out.f;
    char *prov = bench_provenance_json(b, argc, argv);
    fprintf(f, "{\"provenance\": %s,\n\"device\": \"%s\", \"copy_tbps\": %.4f, \"gather368_tbps\": %.4f, "
               "\"flush_l2\": %s, \"timing\": \"CUDA events around each launch; sides of a row interleaved\", "
               "\"checks\": \"each row's first call against the CPU backend; every timed call's output poisoned "
               "before it and compared with that call's after it (timed_calls, timed_bad_elements)\", "
               "\"data\": \"every record from random tokens, per-token log-normal magnitudes\", \"rows\": [\n",
            prov, b.info.device_name, b.copy_tbps, b.g368_tbps, b.flush_l2 ? "true" : "false");
    cJSON_free(prov);
    for (size_t i = 0; i < b.rows.size(); i++) json_row(f, b.rows[i], i + 1 < b.rows.size() ? "," : "");
    fprintf(f, "]}\n");
    return cli_out_commit(&out);
}

/* [--quick] [--only write|gather|attend] [--tokens T] [--json FILE] [--plugin P] [--flush-l2]
 * [--check-queries N], each once. */
static int parse_bench(int argc, char **argv, bench &b, const char **plugin, const char **json_path) {
    cli_seen_t seen = {};
    for (int i = 1; i < argc; i++) {
        long long tokens_value = 0, queries = 0;
        if (cli_once("bench", &seen, argv[i])) return 1;
        else if (!strcmp(argv[i], "--quick")) b.quick = 1;
        else if (!strcmp(argv[i], "--flush-l2")) b.flush_l2 = 1;
        else if (i + 1 < argc && !strcmp(argv[i], "--check-queries")) {
            if (cli_parse_int("bench", argv[i], argv[i + 1], 1, 128, &queries)) return 1;
            b.check_queries = queries;
            i++;
        }
        else if (i + 1 < argc && !strcmp(argv[i], "--only")) b.only = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--tokens")) {
            if (cli_parse_int("bench", argv[i], argv[i + 1], 1, INT64_C(1) << 32, &tokens_value)) return 1;
            b.only_tokens = tokens_value;
            i++;
        } else if (i + 1 < argc && !strcmp(argv[i], "--json")) *json_path = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--plugin")) *plugin = argv[++i];
        else return cli_fail("bench", "unknown or incomplete argument %s", argv[i]);
    }
    return 0;
}

/* The plugin with a CPU and a CUDA context, a stream, the table's header line. */
static int bench_open(bench &b, const char *plugin) {
    if (cli_host_open(&b.host, plugin)) return 1;
    b.t = b.host.table;
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CUDA, 0, 0, NULL, {0}, NULL};
    if (b.t->init(&init, &b.gpu) != NVFP4_MLA_OK) {
        int rc = cli_fail("bench", "%s", b.t->last_error());
        cli_host_close(&b.host);
        return rc;
    }
    b.info.struct_size = sizeof b.info;
    b.t->context_info(b.gpu, &b.info);
    CK(cudaStreamCreateWithFlags(&b.s, cudaStreamNonBlocking));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    b.sm_count = prop.multiProcessorCount;
    /* twice the L2: --flush-l2's write before every launch, and bench_evict_l2's before the writer's and
     * the gather's (each then starts on a cache holding none of its targets) */
    b.flush_bytes = 2 * (size_t)prop.l2CacheSize;
    CK(cudaMalloc(&b.flush_buf, b.flush_bytes));
    printf("device %s; plugin %s %s (git %s); L2 %s between launches\n", b.info.device_name, b.t->plugin_name,
           b.t->version, b.t->git_revision, b.flush_l2 ? "flushed" : "not flushed");
    printf("%-28s %9s %11s %9s %8s  %-10s %-5s %9s %9s\n", "operation", "size", "median us", "TB/s", "ratio", "ceiling",
           "check", "min us", "max us");
    return 0;
}

static const char usage[] =
    "usage: nvfp4-mla-bench [--quick] [--only write|gather|attend] [--tokens T] [--flush-l2] [--check-queries N]\n"
    "                       [--json FILE] [--plugin P]\n"
    "  writer, gather and attend on the GPU against same-run ceilings; each row's first call checked against the\n"
    "  plugin's CPU backend, every timed call's output poisoned before it and compared after it (BENCHMARKS.md)\n";

int main(int argc, char **argv) {
    static bench b; /* large; one per process */
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return fputs(usage, stdout) < 0;
    const char *plugin = NULL, *json_path = NULL;
    b.only = "";
    b.check_queries = 16;
    if (parse_bench(argc, argv, b, &plugin, &json_path) || bench_open(b, plugin)) return 1;
    b.copy_bytes = b.quick ? (size_t)1 << 30 : (size_t)4 << 30;
    bench_ceilings(b);
    writer_buffers(b);
    bench_scatter_ceiling(b);
    bench_write(b);
    /* the readers read real records at every slot (the writer rows left static ones at theirs) */
    int filled = bench_fill_cache_368(b, b.cache, b.capacity, 0x5EED0368);
    if (!filled) printf("nvfp4-mla bench: writing the big cache failed: %s\n", b.t->last_error());
    bench_gather(b);
    bench_attend(b);
    int failed = json_path ? bench_json(b, json_path, argc, argv) : 0;
    failed |= !filled;
    for (const bench_row &r : b.rows) failed |= r.correct == 0;
    b.t->shutdown(b.gpu);
    cli_host_close(&b.host);
    if (b.flush_buf) cudaFree(b.flush_buf);
    if (fflush(stdout) || ferror(stdout)) return fprintf(stderr, "nvfp4-mla bench: cannot write standard output\n"), 1;
    return failed;
}
