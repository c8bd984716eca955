/* Randomized differential test of attend, CUDA against the CPU reference, as kernel libraries test
 * themselves: random configurations, one after another, for a time budget, each checked with the
 * per-row bound of tests/test_gpu_attend.c (host_shims/common/attend_check.h).
 *
 * A configuration draws: the layout and mode (368 per-token / static, 432, 656 by FlashMLA's rule
 * or of random codes); h in 1..128 (odd counts included); top-k in 1..3072 (mostly not a multiple
 * of 64); n_q in 1..4096 (log-uniform, n_q x h <= 32768); block sizes 1..128, padded pages,
 * -1 entries (none to all), per-query valid lengths, token and query scales; a strided out; the
 * context's settings (NVFP4_MLA_ATTEND_MMA, _SMEM_CAP, _MERGE: a fresh context each time) and,
 * white-box, sometimes a smaller SM count for the planner, so that small shapes reach its split,
 * wide and round-robin regimes; eager or captured into a CUDA graph; the workspace's prior state
 * and 1 or 2 calls on it. The CPU work per configuration is bounded: every query when the call is
 * small, else a spread of 16 to 64 (first, last, both sides of the CTA round robin's wraps).
 *
 * Environment:
 *   NVFP4_MLA_RANDOM_SECONDS  budget (default 120; soak 1800): no configuration starts after it
 *   NVFP4_MLA_RANDOM_SEED     the run's seed (default: from the clock; printed first)
 *   NVFP4_MLA_RANDOM_ONLY     replay configuration #i of the seed alone (printed with a failure)
 *   NVFP4_MLA_RANDOM_CONFIGS  at most this many configurations (sanitizer runs)
 *   NVFP4_MLA_RANDOM_SOAK=1   the longer budget, and device memory in use after the run must not
 *                             exceed what it was after the warm-up by more than 8 MiB (nothing leaks)
 *   NVFP4_MLA_RANDOM_VERBOSE=1  a line for every configuration, not only failures
 *   NVFP4_MLA_GPU_TEST_MAX_T  (compute-sanitizer runs, .ci/gpu) small shapes only
 * Output: the seed, a progress line every 15 s, a line per failure (with its replay command),
 * coverage counts, then one summary line. Exits 77 without a CUDA device. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "attend_case.h"
#include "attend_case_gpu.h"
#include "context.h"

static nvfp4_mla_context_t *cpu;

/* The context settings a configuration runs under: name, NVFP4_MLA_ATTEND_MMA, _SMEM_CAP, _MERGE. */
static const char *const settings[][4] = {
    {"default", NULL, NULL, NULL},
    {"sync", "sync", NULL, NULL},
    {"99KB", NULL, "101376", NULL},
    {"separate", NULL, NULL, "separate"},
    {"in-launch", NULL, NULL, "in-launch"},
    {"sync+99KB", "sync", "101376", NULL},
    {"99KB+separate", NULL, "101376", "separate"},
};
enum { SETTINGS = sizeof settings / sizeof settings[0] };
static const char *const layout_names[] = {"368/token", "368/static", "432/static", "656/pow2", "656/random"};

/* One configuration, drawn from (seed, index). */
typedef struct config {
    int64_t index;
    attend_case_opts_t o;
    int layout;                              /* into layout_names */
    int setting, graph, ws_fill, calls, sms; /* sms: the planner's SM count (0: the device's) */
    int64_t ts, hs;                          /* out strides (0: contiguous) */
} config_t;

typedef struct run_state {
    uint64_t seed;
    double seconds;
    int64_t max_configs, only, verbose, small, soak;
    int64_t configs, failed, queries, rows;
    attend_check_stats_t stats;
    int64_t by_layout[5], by_setting[SETTINGS], by_regime[4], split, graph, strided, padded, faked_sms, odd_h;
} run_state_t;

static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}
static uint64_t next(uint64_t *s) {
    return *s = mix(*s);
}
static int64_t pick(uint64_t *s, int64_t lo, int64_t hi) { /* uniform in [lo, hi] */
    return lo + (int64_t)(next(s) % (uint64_t)(hi - lo + 1));
}
static int64_t pick_log(uint64_t *s, int64_t lo, int64_t hi) { /* log-uniform in [lo, hi] */
    const double u = (double)(next(s) >> 11) * 0x1p-53;
    const int64_t v = (int64_t)floor(exp(log((double)lo) + u * (log((double)hi + 1) - log((double)lo))));
    return v < lo ? lo : v > hi ? hi : v;
}
static int chance(uint64_t *s, double p) {
    return (double)(next(s) >> 11) * 0x1p-53 < p;
}

static int64_t draw_heads(uint64_t *s) {
    static const int64_t common[] = {1, 2, 8, 16, 17, 20, 31, 32, 33, 48, 63, 64, 65, 96, 127, 128};
    return chance(s, 0.5) ? common[pick(s, 0, 15)] : pick(s, 1, 128);
}

static int64_t draw_topk(uint64_t *s, int small) {
    static const int64_t edges[] = {1, 2, 63, 64, 65, 127, 128, 129, 511, 513, 1000, 2047, 2048, 2049, 3000};
    const int64_t k = chance(s, 0.3) ? edges[pick(s, 0, 14)] : pick_log(s, 1, 3072);
    return small && k > 600 ? 1 + k % 600 : k;
}

/* The shape, data and call of configuration `index` of the run's seed. */
static config_t draw(const run_state_t *st, int64_t index) {
    uint64_t s = mix(st->seed ^ mix((uint64_t)index + 1));
    config_t c = {.index = index};
    c.layout = (int)pick(&s, 0, 4);
    static const uint32_t layouts[] = {NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_LAYOUT_FP8_ROPE_368,
                                       NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656,
                                       NVFP4_MLA_LAYOUT_FP8_DS_MLA_656};
    const int64_t h = draw_heads(&s), topk = draw_topk(&s, (int)st->small);
    const int64_t nq_max = st->small ? 16 : 32768 / h < 4096 ? 32768 / h : 4096;
    int64_t nq = pick_log(&s, 1, nq_max);
    if (nq * topk > (INT64_C(1) << 22))
        nq = ((INT64_C(1) << 22) / topk) > 0 ? (INT64_C(1) << 22) / topk : 1;
    c.o = attend_case_opts(nq, h, topk, layouts[c.layout],
                           c.layout == 0 ? NVFP4_MLA_SCALE_PER_TOKEN : NVFP4_MLA_SCALE_STATIC);
    c.o.random_656 = c.layout == 4;
    static const int64_t blocks[] = {64, 64, 64, 1, 16, 32, 128};
    c.o.block = blocks[pick(&s, 0, 6)];
    const int64_t pages = pick_log(&s, (64 + c.o.block - 1) / c.o.block, (st->small ? 2048 : 16384) / c.o.block);
    c.o.slots_n = pages * c.o.block;
    static const int64_t pads[] = {0, 0, 0, 16, 48, 512};
    c.o.pad = pads[pick(&s, 0, 5)];
    static const double unused[] = {0, 0.1, 0.1, 0.1, 0.3, 0.5, 0.97, 1.0};
    c.o.unused = unused[pick(&s, 0, 7)];
    c.o.lengths = chance(&s, 0.5), c.o.empty_first = chance(&s, 0.3);
    static const double sigmas[] = {0, 0.5, 0.5, 1.0}, q_sigmas[] = {0.5, 1, 1, 3};
    c.o.magnitude_sigma = sigmas[pick(&s, 0, 3)], c.o.q_sigma = q_sigmas[pick(&s, 0, 3)];
    c.o.seed = next(&s);
    c.setting = (int)pick(&s, 0, SETTINGS - 1);
    c.graph = chance(&s, 0.25);
    static const int fills[] = {-1, 0, 0xFF, 256};
    c.ws_fill = fills[pick(&s, 0, 3)];
    c.calls = chance(&s, 0.2) ? 2 : 1;
    static const int sm_counts[] = {2, 8, 33, 66};
    c.sms = chance(&s, 0.25) ? sm_counts[pick(&s, 0, 3)] : 0;
    if (chance(&s, 0.25))
        c.hs = 512 + 8 * pick(&s, 0, 4), c.ts = h * c.hs + 8 * pick(&s, 0, 3);
    if (index < 2 * SETTINGS)
        c.setting = (int)(index % SETTINGS), c.graph = (int)(index / SETTINGS); /* warm-up */
    return c;
}

/* The planner's input regime (attend_cuda.cu, attend_plan_for): 16-head groups, light calls,
 * 32-head groups, or h > 32 with 64-head groups filling half the SMs (the wide kind under wgmma). */
static int regime(const config_t *c, int sms) {
    const int64_t tiles = (c->o.topk + 63) / 64;
    if (c->o.h <= 16)
        return 0;
    if (c->o.nq * c->o.h * tiles <= 128 * (int64_t)sms)
        return 1;
    return c->o.h > 32 && c->o.nq * ((c->o.h + 63) / 64) * 2 > sms ? 3 : 2;
}
static const char *const regime_names[] = {"h<=16", "light", "32-head", "wide-fills"};

static void describe(const config_t *c, char *buf, size_t n) {
    snprintf(buf, n,
             "#%lld %s nq %lld h %lld topk %lld block %lld pages %lld pad %lld unused %.2f lengths %d %s%s sms %d "
             "ws_fill %d calls %d%s",
             (long long)c->index, layout_names[c->layout], (long long)c->o.nq, (long long)c->o.h, (long long)c->o.topk,
             (long long)c->o.block, (long long)(c->o.slots_n / c->o.block), (long long)c->o.pad, c->o.unused,
             c->o.lengths, settings[c->setting][0], c->graph ? " graph" : "", c->sms, c->ws_fill, c->calls,
             c->ts ? " strided" : "");
}

static run_state_t run;
static char in_flight[512]; /* the configuration being run: printed with its replay if it fails */
static int64_t in_flight_index;

/* The queries a configuration checks: all of a call of up to 1e9 multiply-adds of CPU reference,
 * else 16 to 64 spread ones (2e9 at most, beyond 16 queries). */
static int64_t checked_queries(const config_t *c, int sms, int64_t *picks) {
    const double per_query = (double)c->o.h * (double)c->o.topk * 1088.0;
    if (c->o.nq <= 512 && c->o.nq * per_query <= 1e9)
        return attend_check_pick_queries(c->o.nq, c->o.nq, 1, sms, picks);
    int64_t spread = (int64_t)(2e9 / (per_query > 1 ? per_query : 1));
    spread = spread < 16 ? 16 : spread > 64 ? 64 : spread;
    return attend_check_pick_queries(c->o.nq, 0, spread, sms, picks);
}

static void count(const config_t *c, int sms, uint64_t ws) {
    run.by_layout[c->layout]++, run.by_setting[c->setting]++, run.by_regime[regime(c, sms)]++;
    run.split += ws > 0, run.graph += c->graph, run.strided += c->ts != 0, run.padded += c->o.pad != 0;
    run.faked_sms += c->sms != 0, run.odd_h += c->o.h % 2;
}

static void run_config(const config_t *cf) {
    describe(cf, in_flight, sizeof in_flight);
    in_flight_index = cf->index;
    attend_case_t c;
    attend_case_make(&c, &cf->o, cpu);
    nvfp4_mla_context_t *gpu =
        attend_gpu_open(settings[cf->setting][1], settings[cf->setting][2], settings[cf->setting][3]);
    if (cf->sms && cf->sms < gpu->cuda.sm_count)
        gpu->cuda.sm_count = cf->sms; /* white-box: the planner's SMs */
    const int sms = gpu->cuda.sm_count;
    attend_gpu_call_t call = {
        .ts = cf->ts, .hs = cf->hs, .graph = cf->graph, .ws_fill = cf->ws_fill, .calls = cf->calls};
    attend_case_run_gpu(&c, gpu, &call);
    nvfp4_context_shutdown(gpu);
    int64_t *picks = malloc((size_t)(c.o.nq > 136 ? c.o.nq : 136) * sizeof *picks);
    const int64_t n = checked_queries(cf, sms, picks);
    attend_check_stats_t s = {0};
    attend_case_check(&c, cpu, picks, n, &s);
    free(picks);
    attend_check_merge_stats(&run.stats, &s);
    run.configs++, run.queries += n, run.failed += s.failed > 0;
    count(cf, sms, call.ws);
    char line[512];
    if (s.failed || run.verbose)
        fprintf(stderr, "%s %s ws %llu: %lld queries, %s\n", s.failed ? "FAIL" : "PASS", in_flight,
                (unsigned long long)call.ws, (long long)n, attend_check_summary(&s, line, sizeof line));
    attend_case_free(&c);
    if (s.failed)
        fail_msg("configuration #%lld failed; replay: NVFP4_MLA_RANDOM_SEED=%llu NVFP4_MLA_RANDOM_ONLY=%lld",
                 (long long)cf->index, (unsigned long long)run.seed, (long long)cf->index);
    in_flight[0] = '\0';
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int64_t env_int(const char *name, int64_t fallback) {
    const char *v = getenv(name);
    return v && *v ? strtoll(v, NULL, 10) : fallback;
}

static void print_coverage(void) {
    fprintf(stderr, "coverage:");
    for (int i = 0; i < 5; i++)
        fprintf(stderr, " %s %lld,", layout_names[i], (long long)run.by_layout[i]);
    for (int i = 0; i < SETTINGS; i++)
        fprintf(stderr, " %s %lld,", settings[i][0], (long long)run.by_setting[i]);
    for (int i = 0; i < 4; i++)
        fprintf(stderr, " %s %lld,", regime_names[i], (long long)run.by_regime[i]);
    fprintf(stderr, " split-K %lld, graph %lld, strided out %lld, padded pages %lld, odd h %lld, fewer SMs %lld\n",
            (long long)run.split, (long long)run.graph, (long long)run.strided, (long long)run.padded,
            (long long)run.odd_h, (long long)run.faked_sms);
}

static void cuda_attend_should_match_the_cpu_on_random_configurations(void **state) {
    (void)state;
    const double start = now_s();
    double last_note = start;
    uint64_t used_warm = 0;
    if (run.only >= 0) {
        const config_t cf = draw(&run, run.only);
        run_config(&cf);
        return;
    }
    for (int64_t i = 0; i < run.max_configs && (i < 2 * SETTINGS || now_s() - start < run.seconds); i++) {
        const config_t cf = draw(&run, i);
        run_config(&cf);
        if (i == 2 * SETTINGS - 1)
            used_warm = attend_gpu_used_bytes(); /* every setting ran, eager and captured */
        if (now_s() - last_note >= 15) {
            last_note = now_s();
            fprintf(stderr, "... %.0f s: %lld configurations, %lld failed\n", last_note - start, (long long)run.configs,
                    (long long)run.failed);
        }
    }
    print_coverage();
    const uint64_t used_end = attend_gpu_used_bytes();
    char line[512];
    fprintf(stderr,
            "test_gpu_attend_random: seed %llu, %lld configurations in %.0f s, %lld failed; %lld queries, %s; "
            "device memory in use %.1f MiB after warm-up, %.1f MiB at the end\n",
            (unsigned long long)run.seed, (long long)run.configs, now_s() - start, (long long)run.failed,
            (long long)run.queries, attend_check_summary(&run.stats, line, sizeof line), used_warm / 1048576.0,
            used_end / 1048576.0);
    if (run.soak && used_warm && used_end > used_warm + (8u << 20))
        fail_msg("soak: device memory in use grew by %.1f MiB over %lld configurations",
                 (used_end - used_warm) / 1048576.0, (long long)run.configs);
}

static int print_in_flight(void **state) {
    (void)state;
    if (in_flight[0])
        fprintf(stderr, "FAIL %s\nreplay: NVFP4_MLA_RANDOM_SEED=%llu NVFP4_MLA_RANDOM_ONLY=%lld\n", in_flight,
                (unsigned long long)run.seed, (long long)in_flight_index);
    return 0;
}

static int setup(void **state) {
    (void)state;
    attend_gpu_require_device();
    run.soak = env_int("NVFP4_MLA_RANDOM_SOAK", 0);
    run.seconds = (double)env_int("NVFP4_MLA_RANDOM_SECONDS", run.soak ? 1800 : 120);
    run.seed = (uint64_t)env_int("NVFP4_MLA_RANDOM_SEED", (int64_t)(mix((uint64_t)time(NULL)) >> 1));
    run.only = env_int("NVFP4_MLA_RANDOM_ONLY", -1);
    run.max_configs = env_int("NVFP4_MLA_RANDOM_CONFIGS", INT64_MAX);
    run.verbose = env_int("NVFP4_MLA_RANDOM_VERBOSE", 0);
    run.small = getenv("NVFP4_MLA_GPU_TEST_MAX_T") != NULL;
    fprintf(stderr, "test_gpu_attend_random: seed %llu (NVFP4_MLA_RANDOM_SEED), budget %.0f s%s%s\n",
            (unsigned long long)run.seed, run.seconds, run.soak ? ", soak" : "", run.small ? ", small shapes" : "");
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CPU, 0, 0, NULL, {0}, NULL};
    return nvfp4_context_init(&init, &cpu);
}

static int teardown(void **state) {
    (void)state;
    return nvfp4_context_shutdown(cpu);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(cuda_attend_should_match_the_cpu_on_random_configurations, print_in_flight),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
