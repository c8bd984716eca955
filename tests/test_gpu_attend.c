/* CUDA attend against the CPU attend (the float64 reference): random shapes, h in {1, 16, 32, 64,
 * 128}, topk in {1, 64, 2048, 3000}, -1 entries and per-query lengths, both NVFP4 modes, the 432
 * layout and the 656-byte baseline layout written by FlashMLA's rule (power-of-two tile scales),
 * split-K and single-split paths, every tiling and stage count. The CPU reference works in double
 * over the records' binary32 values (656: their bf16 decode), as the kernel does up to f32 sums,
 * P rounded to bf16 for the P.V product and, in split-K calls, each split's partial rows rounded to
 * bf16 before the merge.
 * Every case runs in four configurations of the CUDA context: the default (wgmma on sm_90a, the
 * consumer the plan picks; split-K merged in the attention launch, as auto does on an eager
 * stream), NVFP4_MLA_ATTEND_MMA=sync (the mma.sync consumers other targets use),
 * NVFP4_MLA_ATTEND_SMEM_CAP=101376 (the 99 KB shared-memory configuration of sm_120 parts) and
 * NVFP4_MLA_ATTEND_MERGE=separate (the merge kernel, which auto takes under graph capture); the
 * 656 records also under in-launch, and some cases captured into a CUDA graph.
 * The check (host_shims/common/attend_check.h): every (query, head) row on its own scale, relative
 * RMS <= 1/128, each element within 2/128 of itself + 1/128 of the row's largest |value|, lse rel
 * 1e-5; every query of a call of up to 512 queries, 64+ spread ones above (first, last, both sides
 * of the CTA round robin's wraps). A self-test injects faults into what the GPU reads (a heavy
 * entry's V row x 1.1 and one of its group scales one code up, a row's light entries x 1.1, a
 * skipped tile), on every layout at 16, 32 and 64 heads (each kind), in three configurations, and
 * one split's lse shifted in what it wrote, merged by the GPU merge kernel; the same check must fail
 * them all (each shown on the CPU, by test_attend_check, to move a row by twice a bound). One
 * PASS/FAIL line per case on stderr, a summary line last.
 * Exits 77 without a CUDA device. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "attend_case.h"
#include "attend_case_gpu.h"
#include "context.h"
#include "fp_codes.h"

static nvfp4_mla_context_t *cpu, *gpu;
static const char *config_name = "default";
static uint64_t rng = 17, next_seed = 100;
static attend_check_stats_t totals; /* every checked case */
static int cases_run, faults_caught, faults_tried;

static double uniform(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-53;
}

static int setup(void **state) {
    (void)state;
    attend_gpu_require_device();
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CPU, 0, 0, NULL, {0}, NULL};
    return nvfp4_context_init(&init, &cpu);
}

static int teardown(void **state) {
    (void)state;
    return nvfp4_context_shutdown(cpu);
}

static void open_gpu_merge(const char *name, const char *mma, const char *smem_cap, const char *merge) {
    gpu = attend_gpu_open(mma, smem_cap, merge);
    config_name = name;
}
static void open_gpu(const char *name, const char *mma, const char *smem_cap) {
    open_gpu_merge(name, mma, smem_cap, NULL);
}
static void close_gpu(void) {
    nvfp4_context_shutdown(gpu);
    gpu = NULL;
}

static const char *layout_name(const attend_case_t *c) {
    if (c->rb == 656)
        return c->o.random_656 ? "656/random" : "656/pow2";
    if (c->rb == 432)
        return "432/static";
    return c->o.mode == NVFP4_MLA_SCALE_PER_TOKEN ? "368/token" : "368/static";
}

/* The check of a case the GPU has run: its queries as attend_check_pick_queries picks them (the
 * CTA round robin of this device's SMs), one line, a failure ends the test. */
static void check_case(const attend_case_t *c, const attend_gpu_call_t *call, const char *note) {
    int64_t *picks = malloc((size_t)(c->o.nq > 136 ? c->o.nq : 136) * sizeof *picks);
    const int64_t n = attend_check_pick_queries(c->o.nq, 512, 64, gpu->cuda.sm_count, picks);
    attend_check_stats_t s = {0};
    attend_case_check(c, cpu, picks, n, &s);
    attend_check_merge_stats(&totals, &s);
    cases_run++;
    char line[512];
    fprintf(stderr, "%s %-9s nq %4lld h %3lld topk %4lld %-10s pad %2lld ws %9llu%s%s: %lld queries, %s\n",
            s.failed ? "FAIL" : "PASS", config_name, (long long)c->o.nq, (long long)c->o.h, (long long)c->o.topk,
            layout_name(c), (long long)c->o.pad, (unsigned long long)call->ws, call->graph ? " graph" : "", note,
            (long long)n, attend_check_summary(&s, line, sizeof line));
    free(picks);
    if (s.failed)
        fail_msg("%s: %s", config_name, s.first_failure);
}

static attend_case_opts_t opts(int64_t nq, int64_t h, int64_t topk, uint32_t layout, uint32_t mode) {
    attend_case_opts_t o = attend_case_opts(nq, h, topk, layout, mode);
    o.seed = next_seed++;
    return o;
}

/* Makes, runs (eager, or captured when graph) and checks one case. */
static void run_opts(const attend_case_opts_t *o, int graph) {
    attend_case_t c;
    attend_case_make(&c, o, cpu);
    attend_gpu_call_t call = {.ws_fill = -1, .graph = graph};
    attend_case_run_gpu(&c, gpu, &call);
    check_case(&c, &call, "");
    attend_case_free(&c);
}

static void run_padded(int64_t nq, int64_t h, int64_t topk, uint32_t layout, uint32_t mode, int64_t pad) {
    attend_case_opts_t o = opts(nq, h, topk, layout, mode);
    o.pad = pad;
    run_opts(&o, 0);
}

static void run_case(int64_t nq, int64_t h, int64_t topk, uint32_t layout, uint32_t mode) {
    run_padded(nq, h, topk, layout, mode, 0);
}

/* The layout's own mode: per-token for 368 records (432 and 656 are static only). */
static attend_case_opts_t layout_opts(int64_t nq, int64_t h, int64_t topk, uint32_t layout) {
    const bool per_token = layout == NVFP4_MLA_LAYOUT_FP8_ROPE_368;
    return opts(nq, h, topk, layout, per_token ? NVFP4_MLA_SCALE_PER_TOKEN : NVFP4_MLA_SCALE_STATIC);
}

/* As run_case, with every query q where q % 5 == 1 given valid_len 0. On S SMs CTA x walks
 * queries x, x + S, x + 2S, ...; 5 shares no factor with the sm_90 parts' 132 or 114 SMs, so with
 * 400 queries some walks have an item of no tiles before, between and after items with tiles (on
 * 132 SMs: CTA 1 walks 1 (none), 133, 265; CTA 4 walks 4, 136 (none), 268). The producer's cursor
 * skips such items and must stay in step with the consumers, whose epilogues still store the
 * item's zero rows and lse. Every query is checked. */
static void run_case_zero_lengths(int64_t nq, int64_t h, int64_t topk, uint32_t layout, uint32_t mode) {
    attend_case_t c;
    const attend_case_opts_t o = opts(nq, h, topk, layout, mode);
    attend_case_make(&c, &o, cpu);
    for (int64_t q = 1; q < nq; q += 5)
        c.valid[q] = 0;
    attend_gpu_call_t call = {.ws_fill = -1};
    attend_case_run_gpu(&c, gpu, &call);
    check_case(&c, &call, " zero lengths");
    attend_case_free(&c);
}

/* Under racecheck (NVFP4_MLA_GPU_TEST_RACECHECK) every test but all_shapes' is skipped, and says so
 * (CMocka's SKIPPED, counted in its summary: not an OK that checked nothing). */
static bool skipped_under_racecheck(void) {
    if (!getenv("NVFP4_MLA_GPU_TEST_RACECHECK"))
        return false;
    fprintf(stderr, "skipped under racecheck: all_shapes' race set runs every kind instead\n");
    return true;
}

/* compute-sanitizer racecheck's run (NVFP4_MLA_GPU_TEST_RACECHECK): it instruments every shared
 * access, so it gets one small case per consumer and record size, on a context whose planner sees
 * 2 SMs (white-box: the plan's arithmetic is the same for any SM count). One query of 1024 entries
 * is then 2 splits of 8 tiles: each CTA wraps its raw stages, its operand ring (at most 2 tiles of
 * blocks) and its metadata ring (4 tiles) several times, which is where producer and consumers
 * reuse shared memory. (With every SM planned, such a query is 5+ splits of 2 tiles: no ring wraps.) */
static bool race_shapes(void) {
    if (!getenv("NVFP4_MLA_GPU_TEST_RACECHECK"))
        return false;
    const int32_t sms = gpu->cuda.sm_count;
    gpu->cuda.sm_count = 2;
    const int64_t heads[] = {16, 32, 64};
    for (int hi = 0; hi < 3; hi++) {
        run_case(1, heads[hi], 1024, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN);
        run_case(1, heads[hi], 1024, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC);
    }
    run_case(1, 16, 1024, NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC);
    run_case(3, 128, 512, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC);   /* wide, items after items */
    run_case(9, 32, 1024, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC);   /* 32 heads, items after items */
    /* 2 splits of 16 tiles: the wide kind's instantiation for long items (load_q_chunks), its
     * partials and the merge. */
    run_case(1, 64, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN);
    /* The wide kind with 32 items of one or two tiles a CTA. */
    run_case(16, 128, 128, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN); /* wide, 368 per-token */
    run_case(32, 64, 64, NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC);     /* wide, 432: two-buffer too */
    run_case(32, 64, 64, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC);    /* wide, 656: the 12-slot ring */
    /* Full shapes (top-k 2048, 128 heads) of every kind the plan has: the two-buffer wide kind on 368
     * and 432 records, the 656 ring kind, and the narrow kinds at 16 and 32 heads, each 2 splits of
     * 16 tiles on the 2 SMs (issue 57: the wide and ring kinds had only short items here). */
    run_case(1, 128, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN);
    run_case(1, 128, 2048, NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC);
    run_case(1, 128, 2048, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC);
    run_case(1, 16, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN);
    run_case(1, 32, 2048, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC);
    gpu->cuda.sm_count = 64; /* 16 items on 64 SMs: 2 splits of one tile, the wide kind's partials and the merge */
    run_case(16, 64, 128, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN);
    /* 9 items of 32 heads: 2 splits of 2 tiles, merged in the launch (the default config on an eager stream) */
    run_case(9, 32, 256, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN);
    gpu->cuda.sm_count = sms;
    return true;
}

/* The shapes every configuration must get right. */
static void all_shapes(void) {
    if (race_shapes())
        return;
    const int64_t heads[] = {1, 16, 32, 64, 128}, topks[] = {1, 64, 2048, 3000};
    const int64_t max_q = getenv("NVFP4_MLA_GPU_TEST_MAX_T") ? 2 : 6;
    for (int hi = 0; hi < 5; hi++)
        for (int ti = 0; ti < 4; ti++) {
            int64_t nq = 1 + (int64_t)(uniform() * (double)max_q);
            run_case(nq, heads[hi], topks[ti], NVFP4_MLA_LAYOUT_FP8_ROPE_368,
                     (hi + ti) % 2 ? NVFP4_MLA_SCALE_PER_TOKEN : NVFP4_MLA_SCALE_STATIC);
        }
    /* Each consumer (16, 32, 64 heads) with each record size, partial head groups, the 432 layout,
     * padded pages, and enough items for one split. */
    run_case(3, 32, 2048, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC);
    run_case(2, 128, 2048, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC);
    attend_case_opts_t random_codes = opts(2, 32, 1000, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC);
    random_codes.random_656 = 1; /* every finite E4M3 code, scales not powers of two */
    run_opts(&random_codes, 0);
    run_case(2, 48, 700, NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC);
    run_case(3, 20, 3000, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN);
    run_case(140, 8, 256, NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC);         /* one split */
    run_padded(3, 16, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 48); /* padded pages */
    run_padded(2, 64, 1000, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC, 16);
    run_case(300, 16, 128, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN); /* enough CTAs: one split */
    run_case(200, 128, 192, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC);   /* several items per CTA */
    /* The two-buffer wide kind on padded pages (80 queries are planned wide below 160 SMs). */
    run_padded(80, 64, 512, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 48);
}

static void cuda_attend_should_match_the_cpu_reference(void **state) {
    (void)state;
    open_gpu("default", NULL, NULL);
    all_shapes();
    close_gpu();
}

static void cuda_attend_should_match_with_the_mma_sync_consumers(void **state) {
    (void)state;
    open_gpu("mma.sync", "sync", NULL);
    all_shapes();
    close_gpu();
}

static void cuda_attend_should_match_in_99_kb_of_shared_memory(void **state) {
    (void)state;
    open_gpu("99KB", NULL, "101376");
    all_shapes();
    close_gpu();
}

/* Split-K merged by a second kernel (NVFP4_MLA_ATTEND_MERGE=separate; auto takes it under graph
 * capture, and merges eager calls' splits in the attention launch). */
static void cuda_attend_should_match_with_the_separate_merge(void **state) {
    (void)state;
    open_gpu_merge("separate", NULL, NULL, "separate");
    all_shapes();
    close_gpu();
}

/* Extend / prefill: thousands of query tokens with their own top-k; 64+ queries checked (the
 * first, the last, both sides of the round robin's wraps, evenly spread ones). */
static void cuda_attend_should_match_for_thousands_of_queries(void **state) {
    (void)state;
    if (skipped_under_racecheck())
        skip(); /* all_shapes covers its kernels */
    open_gpu("default", NULL, NULL);
    if (getenv("NVFP4_MLA_GPU_TEST_MAX_T")) { /* the sanitizers' short run */
        run_case(1100, 16, 256, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN);
        close_gpu();
        return;
    }
    run_case(4096, 16, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN);
    run_case(2048, 128, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN);
    run_case(1500, 64, 2048, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC);
    close_gpu();
    open_gpu("99KB", NULL, "101376");
    run_case(4096, 16, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC);
    close_gpu();
}


/* A copy of a case's out and lse after one call, to hold the next call's bits against. */
typedef struct {
    uint16_t *out; /* [nq, h, 512] */
    float *lse;    /* [nq, h] */
    size_t n_out, n_lse;
} rows_copy_t;

static rows_copy_t copy_rows(const attend_case_t *c) {
    rows_copy_t r = {.n_out = (size_t)(c->o.nq * c->o.h * 512), .n_lse = (size_t)(c->o.nq * c->o.h)};
    r.out = malloc(r.n_out * 2), r.lse = malloc(r.n_lse * 4);
    memcpy(r.out, c->out, r.n_out * 2), memcpy(r.lse, c->lse, r.n_lse * 4);
    return r;
}
static bool same_out(const attend_case_t *c, const rows_copy_t *r) {
    return !memcmp(c->out, r->out, r->n_out * 2);
}
static bool same_lse(const attend_case_t *c, const rows_copy_t *r) {
    return !memcmp(c->lse, r->lse, r->n_lse * 4);
}
static void free_rows(rows_copy_t *r) {
    free(r->out), free(r->lse);
}

/* out with padded strides (head stride 520, token stride h x 520 + 24 elements): the rows come out
 * bit-identical to a contiguous out's (the plan does not depend on out's strides) and no padding
 * element is written. Covers the staged epilogue's 16-byte stores, the merge of split partials, and
 * the head guards of partial head groups, whose stray rows would land in the padding or in the
 * next token's rows. */
static void strided_case(int64_t nq, int64_t h, int64_t topk, uint32_t layout) {
    attend_case_t c;
    const attend_case_opts_t o = layout_opts(nq, h, topk, layout);
    attend_case_make(&c, &o, cpu);
    attend_gpu_call_t contiguous = {.ws_fill = -1},
                      strided = {.ws_fill = -1, .hs = 520, .ts = h * 520 + 24, .want_span = 1};
    attend_case_run_gpu(&c, gpu, &contiguous);
    const size_t span = attend_out_span(nq, h, strided.ts, strided.hs);
    rows_copy_t rows = copy_rows(&c);
    attend_case_run_gpu(&c, gpu, &strided);
    if (!same_out(&c, &rows))
        fail_msg("strided out: nq %lld h %lld: rows differ from a contiguous out's", (long long)nq, (long long)h);
    uint8_t *in_row = calloc(span, 1); /* 1: an element of out's rows */
    for (int64_t q = 0; q < nq; q++)
        for (int64_t head = 0; head < h; head++)
            memset(in_row + q * strided.ts + head * strided.hs, 1, 512);
    size_t padding = 0;
    for (size_t i = 0; i < span; i++) {
        if (in_row[i])
            continue;
        padding++;
        if (strided.span[i] != 0xFFFF)
            fail_msg("strided out: padding element %zu (of %zu) written: %#x", i, span, strided.span[i]);
    }
    fprintf(stderr,
            "PASS strided   nq %4lld h %3lld topk %4lld %-10s ws %9llu: rows identical to contiguous, %zu padding "
            "elements untouched\n",
            (long long)nq, (long long)h, (long long)topk, layout_name(&c), (unsigned long long)strided.ws, padding);
    check_case(&c, &strided, " strided");
    free_rows(&rows), free(in_row), free(strided.span);
    attend_case_free(&c);
}

/* Split-K merged by each group's last split in the attention launch (NVFP4_MLA_ATTEND_MERGE=
 * in-launch, as auto's eager calls) against the separate merge kernel: bit-identical out and lse, whatever
 * the workspace held before (its arrival counters count a word without their tag as zero), and
 * again on a workspace the same call used just before (the last arrival leaves its counter at 0). */
static void one_launch_case(int64_t nq, int64_t h, int64_t topk, uint32_t layout) {
    attend_case_t c;
    const attend_case_opts_t o = layout_opts(nq, h, topk, layout);
    attend_case_make(&c, &o, cpu);
    open_gpu_merge("separate", NULL, NULL, "separate");
    attend_gpu_call_t call = {.ws_fill = -1};
    attend_case_run_gpu(&c, gpu, &call);
    check_case(&c, &call, "");
    close_gpu();
    rows_copy_t sep = copy_rows(&c);
    open_gpu_merge("in-launch", NULL, NULL, "in-launch");
    const int fills[] = {-1, 0, 0xFF, 256}, calls[] = {1, 2, 1, 3};
    for (int f = 0; f < 4; f++) {
        attend_gpu_call_t again = {.ws_fill = fills[f], .calls = calls[f]};
        attend_case_run_gpu(&c, gpu, &again);
        for (size_t i = 0; i < sep.n_out; i++)
            if (c.out[i] != sep.out[i])
                fail_msg("one launch (workspace fill %d, %d calls): nq %lld h %lld topk %lld: out[%zu] %#x, separate "
                         "merge %#x",
                         fills[f], calls[f], (long long)nq, (long long)h, (long long)topk, i, c.out[i], sep.out[i]);
        if (!same_lse(&c, &sep))
            fail_msg("one launch (workspace fill %d): nq %lld h %lld: lse differs from the separate merge's", fills[f],
                     (long long)nq, (long long)h);
    }
    close_gpu();
    fprintf(stderr,
            "PASS in-launch nq %4lld h %3lld topk %4lld %-10s ws %9llu: bit-identical to the separate merge over 4 "
            "workspace states\n",
            (long long)nq, (long long)h, (long long)topk, layout_name(&c), (unsigned long long)call.ws);
    free_rows(&sep);
    attend_case_free(&c);
}

static void cuda_attend_should_merge_splits_in_one_launch_whatever_the_workspace_held(void **state) {
    (void)state;
    if (skipped_under_racecheck())
        skip();
    /* Merged in the launch (at most ATT_ONE_LAUNCH_MERGE_BYTES of partials a group, 132 SMs): */
    one_launch_case(20, 16, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368);   /* 16-head groups, 6 splits */
    one_launch_case(40, 32, 2048, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656); /* 32-head groups, 3 splits */
    one_launch_case(40, 20, 3000, NVFP4_MLA_LAYOUT_BF16_ROPE_432);  /* a partial 32-head group, valid lengths */
    /* Past the bound, and the wide kind (no in-launch merge): the merge kernel in both runs. */
    one_launch_case(1, 16, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368);    /* 32 splits of one group */
    one_launch_case(3, 128, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368);   /* wide, 11 splits */
}

/* Split grids launch in clusters of 4 where the device runs all of theirs at once (placement only:
 * attend_cuda.cu, placement_cluster). The same calls without clusters (white-box: a count of 0)
 * give the same bits, eager (the 16-head case merges in its launch) and captured (the merge
 * kernel). On 132 SMs both cases are grids of 64 CTAs: 16 clusters. */
static void placement_case(int64_t nq, int64_t h, int64_t topk, uint32_t layout) {
    attend_case_t c;
    const attend_case_opts_t o = layout_opts(nq, h, topk, layout);
    attend_case_make(&c, &o, cpu);
    const int32_t quads = gpu->cuda.quad_clusters;
    gpu->cuda.quad_clusters = 0;
    attend_gpu_call_t plain = {.ws_fill = -1};
    attend_case_run_gpu(&c, gpu, &plain);
    check_case(&c, &plain, " no clusters");
    gpu->cuda.quad_clusters = quads;
    rows_copy_t plain_rows = copy_rows(&c);
    for (int graph = 0; graph < 2; graph++) {
        attend_gpu_call_t call = {.ws_fill = -1, .graph = graph};
        attend_case_run_gpu(&c, gpu, &call);
        check_case(&c, &call, " clusters of 4");
        if (!same_out(&c, &plain_rows) || !same_lse(&c, &plain_rows))
            fail_msg("nq %lld h %lld topk %lld (%s): out or lse differs between clusters of 4 and none", (long long)nq,
                     (long long)h, (long long)topk, graph ? "graph" : "eager");
    }
    free_rows(&plain_rows);
    attend_case_free(&c);
}

static void cuda_attend_should_give_the_same_bits_in_clusters_of_4(void **state) {
    (void)state;
    if (skipped_under_racecheck())
        skip();
    open_gpu("default", NULL, NULL);
    fprintf(stderr, "clusters of 4 attend CTAs this device runs at once: %d\n", gpu->cuda.quad_clusters);
    if (gpu->cuda.quad_clusters < 1)
        fail_msg("sm_%d: no cluster of 4 attend CTAs counted (cudaOccupancyMaxActiveClusters)", gpu->cuda.arch);
    placement_case(4, 64, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368);   /* wide, 16 splits of 2 tiles */
    placement_case(8, 16, 1024, NVFP4_MLA_LAYOUT_BF16_ROPE_432);  /* 16-head groups, 8 splits of 2 tiles */
    close_gpu();
}

/* Each consumer where the plan now puts it (all_shapes' light calls reach some kinds less): the
 * kinds the plan picks for these shapes, and the wide consumer with each record size and a padded
 * page. */
static void cuda_attend_should_match_on_each_consumer_the_plan_picks(void **state) {
    (void)state;
    if (skipped_under_racecheck())
        skip();
    open_gpu("default", NULL, NULL);
    run_case(6, 128, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN);
    run_case(12, 64, 1500, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC);
    run_padded(80, 64, 512, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC, 16);
    run_case(80, 128, 300, NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC);
    run_case(80, 96, 700, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN);
    /* The wide kind (two-buffer for 368 / 432 records, the 12-slot ring for 656) with one tile an
     * item (not light: 300 x 64 heads x 1 tile > 128 x 132 head-tiles; 300 x 2 > 132 fills it);
     * 432 records on padded pages; items of no tiles before, between and after items with tiles. */
    run_case(300, 64, 64, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC);
    run_padded(80, 64, 512, NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC, 48);
    run_case_zero_lengths(400, 64, 512, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN);
    run_case_zero_lengths(400, 64, 512, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC);
    run_case(12, 32, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN); /* 32-head groups, splits */
    /* The wide kind's instantiation for long items (load_q_chunks) with split partials: on 2 SMs
     * one query is 2 splits of 16 tiles (white-box, as race_shapes). */
    const int32_t sms = gpu->cuda.sm_count;
    gpu->cuda.sm_count = 2;
    run_case(1, 64, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN);
    run_case(1, 128, 2048, NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC);
    gpu->cuda.sm_count = sms;
    close_gpu();
}

/* ---- Q's RoPE part outside f16's exact range (two-buffer 368 kind: wide_twobuf/rope_f16.cuh) ----
 * That kind runs its RoPE k-steps in f16 (wide_twobuf_rope_f16): a Q row whose RoPE values
 * pass 65504 or fall below 2^-17 is converted times a power of two of its own, undone on its
 * scores. These cases put such rows before the CPU reference, which computes in double: without
 * the shift the large rows would score inf (NaN outputs) and the small ones lose their RoPE terms
 * (f16's smallest subnormal is 2^-24). */
enum { QR_ORDINARY, QR_LARGE, QR_SMALL, QR_MIXED, QR_KINDS };
static const char *const qr_names[QR_KINDS] = {"ordinary", "past 65504", "below 2^-14", "mixed"};

static uint16_t bf16_pow2(uint16_t v, int k) {
    return nvfp4_f32_to_bf16(ldexpf(nvfp4_bf16_to_f32(v), k));
}

/* One Q row (576 bf16) made into row kind `kind`: QR_LARGE, every value times 2^16 (a N(0, 1) RoPE
 * value past 65504 wherever |value| > 1, and up to ~2^18); QR_SMALL, times 2^-24 (every RoPE value
 * below 2^-14, most below 2^-24); QR_MIXED, the latent as it is, even RoPE dims times 2^16, odd
 * ones times 2^-24 (one row: a shift for the large values, the small ones 40 binades under them). */
static void q_row_kind(uint16_t *row, int kind) {
    for (int i = 0; i < 576; i++) {
        const bool rope = i >= 512;
        if (kind == QR_LARGE)
            row[i] = bf16_pow2(row[i], 16);
        else if (kind == QR_SMALL)
            row[i] = bf16_pow2(row[i], -24);
        else if (kind == QR_MIXED && rope)
            row[i] = bf16_pow2(row[i], i % 2 ? -24 : 16);
    }
}

/* A case whose Q rows are of row kind `kind` (QR_LARGE or QR_SMALL: every row, sm_scale times the
 * inverse power, so that the scores are an ordinary case's and the check sees any error of the
 * RoPE terms; the latent of even heads zeroed, so that their scores are RoPE terms alone), or,
 * kind -1, head h of kind h % 4 at the default sm_scale (rows of every kind in one warp, each
 * with its own shift: an ordinary row given another's factor would score 2^16 times too high or
 * low). `sms` > 0: the planner sees that many SMs (white-box, as race_shapes: 2 SMs give one query
 * 2 splits of 16 tiles, the load_q_chunks instantiation; else short items, load_q_rows). */
static void q_rope_range_case(int64_t nq, int64_t h, int64_t topk, uint32_t mode, int kind, int32_t sms) {
    attend_case_t c;
    const attend_case_opts_t o = opts(nq, h, topk, NVFP4_MLA_LAYOUT_FP8_ROPE_368, mode);
    attend_case_make(&c, &o, cpu);
    for (int64_t q = 0; q < nq; q++)
        for (int64_t head = 0; head < h; head++) {
            uint16_t *row = c.q + (q * h + head) * 576;
            q_row_kind(row, kind >= 0 ? kind : (int)(head % QR_KINDS));
            if (kind >= 0 && head % 2 == 0)
                memset(row, 0, 512 * sizeof *row);
        }
    if (kind == QR_LARGE)
        c.a.sm_scale = ldexpf(c.a.sm_scale, -16);
    else if (kind == QR_SMALL)
        c.a.sm_scale = ldexpf(c.a.sm_scale, 24);
    const int32_t planned = gpu->cuda.sm_count;
    if (sms > 0)
        gpu->cuda.sm_count = sms;
    attend_gpu_call_t call = {.ws_fill = -1};
    attend_case_run_gpu(&c, gpu, &call);
    gpu->cuda.sm_count = planned;
    char note[96];
    snprintf(note, sizeof note, " Q RoPE %s%s", kind >= 0 ? qr_names[kind] : "rows of every kind",
             sms > 0 ? ", 2 SMs planned" : "");
    check_case(&c, &call, note);
    attend_case_free(&c);
}

static void cuda_attend_should_match_with_q_rope_values_outside_f16_range(void **state) {
    (void)state;
    if (skipped_under_racecheck())
        skip();
    open_gpu("default", NULL, NULL);
    for (int kind = -1; kind <= QR_SMALL; kind++) {
        if (kind == QR_ORDINARY)
            continue; /* every other case */
        const uint32_t mode = kind == QR_SMALL ? NVFP4_MLA_SCALE_STATIC : NVFP4_MLA_SCALE_PER_TOKEN;
        q_rope_range_case(5, 128, 2048, mode, kind, 0); /* two-buffer, short items (load_q_rows), splits */
        q_rope_range_case(1, 64, 2048, mode, kind, 2);  /* two-buffer, long items (load_q_chunks) */
        q_rope_range_case(80, 64, 512, mode, kind, 0);  /* two-buffer, several items a CTA */
    }
    close_gpu();
}

/* The default merge, auto, merges an eager call's splits inside the attention launch when the merge
 * reads at most 128 KB of partials (one query of 16 heads over 256 entries: 4 splits): its last
 * split resets the (query, group) arrival counter, the workspace's last 8 bytes, to 0, which the
 * separate merge never writes. A workspace of 0xFF bytes before the call shows which merge ran,
 * and that the reset happened (without it the word would hold the tag and the split count). */
static void cuda_attend_should_merge_eager_splits_in_the_launch_by_default(void **state) {
    (void)state;
    if (skipped_under_racecheck())
        skip();
    const char *merges[] = {NULL, "in-launch", "separate"}; /* NULL: unset, the default */
    const uint64_t expected[] = {0, 0, UINT64_MAX};
    for (int i = 0; i < 3; i++) {
        attend_case_t c;
        const attend_case_opts_t o = layout_opts(1, 16, 256, NVFP4_MLA_LAYOUT_FP8_ROPE_368);
        attend_case_make(&c, &o, cpu);
        open_gpu_merge(merges[i] ? merges[i] : "default", NULL, NULL, merges[i]);
        attend_gpu_call_t call = {.ws_fill = 0xFF};
        attend_case_run_gpu(&c, gpu, &call);
        check_case(&c, &call, "");
        close_gpu();
        attend_case_free(&c);
        if (call.ws < 8)
            skip(); /* this device's plan for one query does not split */
        if (call.ws_last_word != expected[i])
            fail_msg("merge %s: the workspace's last counter word is %#llx after an eager split call, expected %#llx",
                     merges[i] ? merges[i] : "unset (auto)", (unsigned long long)call.ws_last_word,
                     (unsigned long long)expected[i]);
    }
}

static void cuda_attend_should_write_only_its_rows_of_a_strided_out(void **state) {
    (void)state;
    if (skipped_under_racecheck())
        skip();
    open_gpu("default", NULL, NULL);
    strided_case(3, 16, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368);    /* split partials, then their merge */
    strided_case(140, 16, 256, NVFP4_MLA_LAYOUT_FP8_ROPE_368);   /* one split: the overlapped 16-head path */
    strided_case(140, 20, 256, NVFP4_MLA_LAYOUT_FP8_ROPE_368);   /* 20 of a 32-head group's rows */
    strided_case(140, 48, 256, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656); /* 48 of the wide consumer's 64 */
    strided_case(2, 128, 1000, NVFP4_MLA_LAYOUT_BF16_ROPE_432);  /* wide: two 64-head groups, splits */
    close_gpu();
}

/* 656-byte records by FlashMLA's rule at every kind the planner picks for them (attend_cuda.cu,
 * attend_plan_for): 16-head groups (h <= 16, and light calls), 32-head groups with and without
 * splits, partial groups, the wide ring kind (h > 32 once 64-head groups fill half the SMs, wgmma
 * only) on contiguous and padded pages; in every configuration: wgmma, mma.sync (no wide kind),
 * 99 KB (narrow, streaming), the separate and the in-launch merge; and captured into a graph. */
static void flashmla_656_shapes(int graph) {
    static const int64_t shapes[][4] = {
        /* nq, h, topk, pad */
        {1, 16, 2048, 0},  {3, 128, 2048, 0}, {12, 64, 1500, 0}, {2, 48, 700, 0},    {140, 8, 256, 0},
        {300, 20, 256, 0}, {80, 64, 512, 0},  {80, 64, 512, 16}, {160, 128, 256, 0}, {300, 64, 64, 0},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        attend_case_opts_t o =
            opts(shapes[i][0], shapes[i][1], shapes[i][2], NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC);
        o.pad = shapes[i][3];
        run_opts(&o, graph);
    }
}

static void cuda_attend_should_match_on_flashmla_656_records_at_every_kind(void **state) {
    (void)state;
    if (skipped_under_racecheck())
        skip();
    static const char *const configs[][4] = {
        /* name, mma, smem cap, merge */
        {"default", NULL, NULL, NULL},        {"mma.sync", "sync", NULL, NULL},       {"99KB", NULL, "101376", NULL},
        {"separate", NULL, NULL, "separate"}, {"in-launch", NULL, NULL, "in-launch"},
    };
    for (int k = 0; k < 5; k++) {
        open_gpu_merge(configs[k][0], configs[k][1], configs[k][2], configs[k][3]);
        flashmla_656_shapes(0);
        if (k == 0)
            flashmla_656_shapes(1); /* captured: auto merges with the second kernel */
        close_gpu();
    }
}

/* ---- the fault self-test: the check must fail what a wrong kernel would write ---- */

/* The case's output (with a fault in it) against the reference: every query checked, the verdict
 * printed; passing a fault fails the test. */
static void expect_caught(const attend_case_t *c, const char *what) {
    int64_t picks[512];
    const int64_t n = attend_check_pick_queries(c->o.nq, 512, 64, gpu->cuda.sm_count, picks);
    attend_check_stats_t s = {0};
    attend_case_check(c, cpu, picks, n, &s);
    faults_tried++, faults_caught += s.failed > 0;
    char line[512];
    fprintf(stderr, "%s %-9s fault %s: %s\n", s.failed ? "CAUGHT" : "MISSED", config_name, what,
            attend_check_summary(&s, line, sizeof line));
    if (!s.failed)
        fail_msg("%s: fault %s: the check passed a faulty output", config_name, what);
}

/* One fault through the GPU: visible on the CPU first (it moves some row by twice a bound:
 * test_attend_check shows it for every case), then the GPU attends over the fault's records and
 * top-k, and the check must fail what it wrote. */
static void gpu_fault(attend_case_t *c, const attend_fault_t *f) {
    attend_check_stats_t effect = {0};
    char line[512], what[1024];
    snprintf(what, sizeof what, "%s h %lld %s", layout_name(c), (long long)c->o.h, f->what);
    if (!attend_case_fault_visible(c, cpu, f, &effect))
        fail_msg("fault %s: too small on the CPU to ask the check (%s)", what,
                 attend_check_summary(&effect, line, sizeof line));
    int32_t *right = c->slots;
    c->slots = f->slots; /* what the GPU reads */
    attend_gpu_call_t call = {.ws_fill = -1, .cache = f->cache};
    attend_case_run_gpu(c, gpu, &call);
    c->slots = right;
    expect_caught(c, what);
}

/* Every fault of one fault case (attend_case_faults: a heavy entry's V row and group scale, the
 * light entries of a row, a skipped tile) in the configuration open; the right records pass first. */
static void record_faults(const attend_fault_case_t *fc) {
    attend_case_t c;
    int64_t query = 0, head = 0, slot = -1;
    double weight = 0;
    attend_case_make_fault_target(&c, fc->layout, fc->mode, fc->h, fc->seed, cpu, &query, &head, &slot, &weight);
    attend_gpu_call_t call = {.ws_fill = -1};
    attend_case_run_gpu(&c, gpu, &call);
    check_case(&c, &call, " fault-free");
    attend_fault_t faults[ATTEND_FAULTS];
    attend_case_faults(&c, cpu, query, head, slot, weight, faults);
    for (int f = 0; f < ATTEND_FAULTS; f++)
        gpu_fault(&c, &faults[f]);
    attend_faults_free(faults);
    attend_case_free(&c);
}

/* Splits of a call as its workspace holds them (kernels/attend/attend_consumer.cuh: partial O
 * [splits, n_q, h, 512] bf16, partial log2-sum-exp [splits, n_q, h] f32, then, 8-byte aligned, one
 * 8-byte counter per (query, head group) of 16, 32 or 64 heads); fails the test when the size fits
 * no such layout. */
static int64_t workspace_splits(uint64_t ws, int64_t nq, int64_t h) {
    const uint64_t per_split = (uint64_t)(nq * h) * (512 * 2 + 4), splits = ws / per_split;
    const uint64_t counters = ws - (splits * per_split + 7) / 8 * 8;
    for (int64_t heads = 16; heads <= 64; heads *= 2)
        if (splits > 1 && counters == (uint64_t)(nq * ((h + heads - 1) / heads)) * 8)
            return (int64_t)splits;
    fail_msg("a workspace of %llu bytes for %lld queries x %lld heads is not the split-K layout attend_consumer.cuh "
             "documents (or the call did not split)",
             (unsigned long long)ws, (long long)nq, (long long)h);
    return 0;
}

/* (c) one split's lse shifted, merged on the GPU: a split-K call under the separate merge leaves
 * its partials in the workspace; handed to the plugin's merge op on the device (kernels/merge: the
 * arithmetic of attend's split-K merge) as they were written they must pass; with the lse of the
 * split of largest weight (row 0's) shifted by 0.1, its weight 10.5% off in every row, they must fail. */
static void split_lse_fault(uint32_t layout, uint32_t mode) {
    attend_case_opts_t o = opts(2, 16, 2048, layout, mode);
    o.lengths = 0, o.empty_first = 0;
    attend_case_t c;
    attend_case_make(&c, &o, cpu);
    open_gpu_merge("separate", NULL, NULL, "separate");
    attend_gpu_call_t call = {.ws_fill = -1, .want_workspace = 1};
    attend_case_run_gpu(&c, gpu, &call);
    check_case(&c, &call, " fault-free");
    const int64_t rows = o.nq * o.h, splits = workspace_splits(call.ws, o.nq, o.h);
    const uint16_t *po = call.workspace;
    const float *pl = (const float *)(po + splits * rows * 512); /* log2 */
    int64_t heavy = 0;
    for (int64_t s = 1; s < splits; s++)
        heavy = pl[s * rows] > pl[heavy * rows] ? s : heavy;
    float *lse = malloc((size_t)(splits * rows) * sizeof *lse);
    for (int shifted = 0; shifted < 2; shifted++) {
        for (int64_t i = 0; i < splits * rows; i++)
            lse[i] = pl[i] * 0.6931472f + (shifted && i / rows == heavy ? 0.1f : 0.0f);
        attend_gpu_merge(gpu, splits, o.nq, o.h, po, lse, c.out, c.lse);
        char what[160];
        snprintf(what, sizeof what, "(c) %s split %lld of %lld: lse + 0.1, merged by the GPU merge kernel",
                 layout_name(&c), (long long)heavy, (long long)splits);
        if (shifted)
            expect_caught(&c, what);
        else
            check_case(&c, &call, " the workspace's partials merged by the GPU merge kernel");
    }
    close_gpu();
    free(lse), free(call.workspace);
    attend_case_free(&c);
}

/* Every fault case in the default configuration (16-head groups, 32-head groups, the wide kind on
 * each layout), some in the mma.sync consumers' and the 99 KB configuration's kinds, and the split
 * fault through the GPU merge. */
static void cuda_attend_check_should_fail_on_injected_faults(void **state) {
    (void)state;
    if (skipped_under_racecheck())
        skip();
    open_gpu("default", NULL, NULL);
    for (int i = 0; i < attend_fault_case_count; i++)
        record_faults(&attend_fault_cases[i]);
    close_gpu();
    static const int others[] = {0, 2, 5, 8}; /* 368 at h 16 and 64, 432 and 656 at h 64 */
    open_gpu("mma.sync", "sync", NULL);
    for (int i = 0; i < 4; i++)
        record_faults(&attend_fault_cases[others[i]]);
    close_gpu();
    open_gpu("99KB", NULL, "101376");
    for (int i = 0; i < 4; i++)
        record_faults(&attend_fault_cases[others[i]]);
    close_gpu();
    split_lse_fault(NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN);
    split_lse_fault(NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cuda_attend_check_should_fail_on_injected_faults),
        cmocka_unit_test(cuda_attend_should_match_the_cpu_reference),
        cmocka_unit_test(cuda_attend_should_match_with_the_mma_sync_consumers),
        cmocka_unit_test(cuda_attend_should_match_in_99_kb_of_shared_memory),
        cmocka_unit_test(cuda_attend_should_match_with_the_separate_merge),
        cmocka_unit_test(cuda_attend_should_match_on_flashmla_656_records_at_every_kind),
        cmocka_unit_test(cuda_attend_should_match_for_thousands_of_queries),
        cmocka_unit_test(cuda_attend_should_write_only_its_rows_of_a_strided_out),
        cmocka_unit_test(cuda_attend_should_merge_splits_in_one_launch_whatever_the_workspace_held),
        cmocka_unit_test(cuda_attend_should_give_the_same_bits_in_clusters_of_4),
        cmocka_unit_test(cuda_attend_should_match_on_each_consumer_the_plan_picks),
        cmocka_unit_test(cuda_attend_should_merge_eager_splits_in_the_launch_by_default),
        cmocka_unit_test(cuda_attend_should_match_with_q_rope_values_outside_f16_range),
    };
    const int failed = cmocka_run_group_tests(tests, setup, teardown);
    char line[512];
    fprintf(stderr, "test_gpu_attend: %d tests failed; %d cases checked, %s; faults caught %d of %d\n", failed,
            cases_run, attend_check_summary(&totals, line, sizeof line), faults_caught, faults_tried);
    return failed;
}
