/* CUDA attend against the CPU attend (the float64 reference): random shapes, h in {1, 16, 32, 64,
 * 128}, topk in {1, 64, 2048, 3000}, -1 entries and per-query lengths, both NVFP4 modes, the 432
 * layout and the 656-byte baseline layout, split-K and single-split paths, every tiling and stage
 * count. The CPU reference works in double over the records' binary32 values (the 656 layout: its
 * bf16 decode), as the kernel does up to f32 sums and P rounded to bf16 for the P.V product.
 * Every case runs in four configurations of the CUDA context: the default (wgmma on sm_90a, the
 * consumer the plan picks; split-K merged in the attention launch, as auto does on an eager
 * stream), NVFP4_MLA_ATTEND_MMA=sync (the mma.sync consumers other targets use),
 * NVFP4_MLA_ATTEND_SMEM_CAP=101376 (the 99 KB shared-memory configuration of sm_120 parts) and
 * NVFP4_MLA_ATTEND_MERGE=separate (the merge kernel, which auto takes under graph capture);
 * extend/prefill shapes (n_q in the thousands) are checked on a subset of their queries.
 * Tolerances (the FlashMLA-level ones, with "abs 1e-3 on outputs of unit scale" taken
 * relative to the outputs' scale, max|V|, since the test's values are not of unit scale): outputs
 * |gpu - cpu| <= 2/128 |cpu| + 1e-3 max|V|, LSE rel 1e-5 (abs 1e-5 near 0).
 * Exits 77 without a CUDA device. */
#include <cuda_runtime.h>
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

#include "context.h"
#include "errors.h"
#include "ops.h"
#include "test_util.h"

#define CK(call) assert_int_equal((call), cudaSuccess)

static nvfp4_mla_context_t *cpu, *gpu;
static uint64_t rng = 17;
static double uniform(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-53;
}
static double gauss(void) { return sqrt(-2 * log(uniform() + 1e-300)) * cos(6.283185307179586 * uniform()); }

static int setup(void **state) {
    (void)state;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        fprintf(stderr, "no CUDA device: skipping\n");
        exit(77);
    }
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CPU, 0, 0, NULL, {0}};
    return nvfp4_context_init(&init, &cpu);
}

static int teardown(void **state) {
    (void)state;
    return nvfp4_context_shutdown(cpu);
}

/* A CUDA context whose attend settings (read once at init) are `mma`, `smem_cap` and `merge`
 * (NULL: unset). */
static const char *config_name = "default";
static void open_gpu_merge(const char *name, const char *mma, const char *smem_cap, const char *merge) {
    if (mma) setenv("NVFP4_MLA_ATTEND_MMA", mma, 1); else unsetenv("NVFP4_MLA_ATTEND_MMA");
    if (smem_cap) setenv("NVFP4_MLA_ATTEND_SMEM_CAP", smem_cap, 1); else unsetenv("NVFP4_MLA_ATTEND_SMEM_CAP");
    if (merge) setenv("NVFP4_MLA_ATTEND_MERGE", merge, 1); else unsetenv("NVFP4_MLA_ATTEND_MERGE");
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CUDA, 0, 0, NULL, {0}};
    if (nvfp4_context_init(&init, &gpu) != NVFP4_MLA_OK) fail_msg("init (%s): %s", name, nvfp4_last_error());
    unsetenv("NVFP4_MLA_ATTEND_MMA");
    unsetenv("NVFP4_MLA_ATTEND_SMEM_CAP");
    unsetenv("NVFP4_MLA_ATTEND_MERGE");
    config_name = name;
}
static void open_gpu(const char *name, const char *mma, const char *smem_cap) {
    open_gpu_merge(name, mma, smem_cap, NULL);
}
static void close_gpu(void) {
    nvfp4_context_shutdown(gpu);
    gpu = NULL;
}

static nvfp4_mla_tensor_t on(nvfp4_mla_tensor_t t, void *data, int dev) {
    t.data = data;
    t.device_type = dev;
    return t;
}

static void *to_gpu(const void *host, size_t bytes) {
    void *d;
    CK(cudaMalloc(&d, bytes ? bytes : 16));
    if (bytes) CK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    return d;
}

/* The CPU reference for queries [q0, q0 + n) of the GPU call `g`'s host twin `a` into out/lse. */
static void cpu_reference(const nvfp4_mla_attend_args_t *a, int64_t q0, int64_t n, uint16_t *out, float *lse) {
    nvfp4_mla_attend_args_t c = *a;
    const int64_t h = a->q.shape[1], topk = a->slots.shape[1];
    c.q = tu_tensor((uint16_t *)a->q.data + q0 * h * 576, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){n, h, 576},
                    (int64_t[]){h * 576, 576, 1});
    c.slots = tu_rows((int32_t *)a->slots.data + q0 * topk, NVFP4_MLA_DTYPE_I32, n, topk, topk);
    c.valid_len = tu_vec((int32_t *)a->valid_len.data + q0, NVFP4_MLA_DTYPE_I32, n);
    c.out = tu_tensor(out, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){n, h, 512}, (int64_t[]){h * 512, 512, 1});
    c.lse = tu_rows(lse, NVFP4_MLA_DTYPE_F32, n, h, h);
    if (nvfp4_op_attend(cpu, &c) != NVFP4_MLA_OK) fail_msg("cpu: %s", nvfp4_last_error());
}

/* One case: the host inputs, the CPU twin of the GPU call, and the GPU's outputs. */
typedef struct attend_case {
    int64_t nq, h, topk, pad, slots_n, block, stride;
    uint32_t layout, mode;
    int32_t rb;
    float scale;
    uint8_t *cache;     /* [slots_n / block] pages of `stride` bytes */
    uint16_t *tok, *q;  /* [slots_n, 576] source tokens; [nq, h, 576] queries */
    int32_t *slots, *valid;
    uint16_t *out_gpu;  /* [nq, h, 512] */
    float *lse_gpu;     /* [nq, h] */
    nvfp4_mla_attend_args_t a; /* host twin of the GPU call (outputs: out_gpu, lse_gpu) */
    uint64_t ws;
} attend_case_t;

static uint8_t *case_record(const attend_case_t *c, int64_t t) {
    return c->cache + (t / c->block) * c->stride + (t % c->block) * c->rb;
}

/* The cache: random valid fp8_ds_mla records, or the CPU writer's records of random tokens. */
static void case_cache(attend_case_t *c) {
    c->cache = calloc((size_t)(c->slots_n / c->block), (size_t)c->stride);
    c->tok = malloc((size_t)c->slots_n * 576 * 2);
    for (int64_t i = 0; i < c->slots_n * 576; i++) c->tok[i] = nvfp4_f32_to_bf16((float)(gauss() * 0.5));
    nvfp4_mla_tensor_t cache_t = tu_cache(c->cache, c->slots_n / c->block, c->block, c->rb, c->stride);
    if (c->rb == 656) {
        for (int64_t t = 0; t < c->slots_n; t++) {
            uint8_t *rec = case_record(c, t);
            for (int i = 0; i < 512; i++) rec[i] = (uint8_t)(uniform() * 256) & 0xF7; /* never 0x7F/0xFF */
            for (int i = 0; i < 4; i++) { float s = (float)(0.001 + uniform() * 0.01); memcpy(rec + 512 + 4 * i, &s, 4); }
            memcpy(rec + 528, c->tok + t * 576 + 512, 128);
        }
    } else {
        int64_t *ids = malloc((size_t)c->slots_n * 8);
        for (int64_t t = 0; t < c->slots_n; t++) ids[t] = t;
        nvfp4_mla_write_args_t w = {.struct_size = sizeof w, .layout = c->layout, .scale_mode = c->mode,
                                    .outer_scale = c->scale,
                                    .kv_c = tu_rows(c->tok, NVFP4_MLA_DTYPE_BF16, c->slots_n, 512, 576),
                                    .k_pe = tu_rows(c->tok + 512, NVFP4_MLA_DTYPE_BF16, c->slots_n, 64, 576),
                                    .slot_mapping = tu_vec(ids, NVFP4_MLA_DTYPE_I64, c->slots_n), .cache = cache_t};
        assert_int_equal(nvfp4_op_write(cpu, &w), NVFP4_MLA_OK);
        free(ids);
    }
    c->a.cache = cache_t;
}

/* Queries, top-k rows (10% -1, query 0 all -1), per-query lengths, and the host twin's arguments. */
static void case_queries(attend_case_t *c) {
    const int64_t nq = c->nq, h = c->h, topk = c->topk;
    const size_t q_n = (size_t)(nq * h * 576);
    c->q = malloc(q_n * 2);
    if (nq * h <= 4096) {
        for (size_t i = 0; i < q_n; i++) c->q[i] = nvfp4_f32_to_bf16((float)gauss());
    } else { /* big extend shapes: a cheaper source of the same scale */
        for (size_t i = 0; i < q_n; i++) c->q[i] = nvfp4_f32_to_bf16((float)((uniform() - 0.5) * 3.46));
    }
    c->slots = malloc((size_t)(nq * topk * 4 + 4)), c->valid = malloc((size_t)(nq * 4));
    for (int64_t i = 0; i < nq * topk; i++) c->slots[i] = uniform() < 0.1 ? -1 : (int32_t)(uniform() * c->slots_n);
    for (int64_t i = 0; i < nq; i++) c->valid[i] = i % 3 == 2 ? (int32_t)(uniform() * (double)(topk + 1)) : (int32_t)topk;
    if (nq > 1) for (int64_t e = 0; e < topk; e++) c->slots[e] = -1; /* query 0: nothing valid */
    c->out_gpu = malloc((size_t)(nq * h * 512) * 2);
    c->lse_gpu = malloc((size_t)(nq * h * 4));
    nvfp4_mla_attend_args_t *a = &c->a;
    a->struct_size = sizeof *a, a->layout = c->layout, a->scale_mode = c->mode, a->outer_scale = c->scale;
    a->sm_scale = 1.0f / sqrtf(576.0f);
    a->q = tu_tensor(c->q, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){nq, h, 576}, (int64_t[]){h * 576, 576, 1});
    a->slots = tu_rows(c->slots, NVFP4_MLA_DTYPE_I32, nq, topk, topk);
    a->valid_len = tu_vec(c->valid, NVFP4_MLA_DTYPE_I32, nq);
    a->out = tu_tensor(c->out_gpu, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){nq, h, 512}, (int64_t[]){h * 512, 512, 1});
    a->lse = tu_rows(c->lse_gpu, NVFP4_MLA_DTYPE_F32, nq, h, h);
}

/* Elements of an out buffer of nq tokens x h heads x 512 with token stride ts and head stride hs. */
static size_t out_span(int64_t nq, int64_t h, int64_t ts, int64_t hs) {
    return (size_t)((nq - 1) * ts + (h - 1) * hs + 512);
}

/* How case_run_gpu_into treats its workspace: bytes it holds before the first call (-1: as
 * cudaMalloc left them, 256: random, else that byte) and calls made on it in a row. */
static int ws_fill = -1, ws_calls = 1;
static uint64_t ws_last_word; /* the workspace's last 8 bytes after the last call (0 without one) */

/* The GPU call on copies of the inputs, with poisoned outputs (0xFFFF) and the workspace it asks
 * for; out goes to a buffer of token stride ts and head stride hs (elements), copied back whole
 * into out_host (out_span elements). */
static void case_run_gpu_into(attend_case_t *c, int64_t ts, int64_t hs, uint16_t *out_host) {
    const int64_t nq = c->nq, h = c->h;
    const size_t out_n = out_span(nq, h, ts, hs);
    void *dq = to_gpu(c->q, (size_t)(nq * h * 576) * 2), *ds = to_gpu(c->slots, (size_t)(nq * c->topk * 4));
    void *dv = to_gpu(c->valid, (size_t)(nq * 4)), *dc = to_gpu(c->cache, (size_t)(c->slots_n / c->block * c->stride));
    void *dout, *dlse, *dws = NULL;
    CK(cudaMalloc(&dout, out_n * 2));
    CK(cudaMalloc(&dlse, (size_t)(nq * h * 4)));
    CK(cudaMemset(dout, 0xFF, out_n * 2)); /* poison: every output must be written */
    CK(cudaMemset(dlse, 0xFF, (size_t)(nq * h * 4)));
    nvfp4_mla_attend_args_t g = c->a;
    g.q = on(g.q, dq, 2), g.slots = on(g.slots, ds, 2), g.valid_len = on(g.valid_len, dv, 2), g.cache = on(g.cache, dc, 2);
    g.out = on(tu_tensor(dout, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){nq, h, 512}, (int64_t[]){ts, hs, 1}), dout, 2);
    g.lse = on(g.lse, dlse, 2);
    assert_int_equal(nvfp4_op_attend_workspace_bytes(gpu, &g, &c->ws), NVFP4_MLA_OK);
    if (c->ws) {
        CK(cudaMalloc(&dws, c->ws));
        if (ws_fill == 256) {
            uint8_t *junk = malloc(c->ws);
            for (uint64_t i = 0; i < c->ws; i++) junk[i] = (uint8_t)(uniform() * 256.0);
            CK(cudaMemcpy(dws, junk, c->ws, cudaMemcpyHostToDevice));
            free(junk);
        } else if (ws_fill >= 0) {
            CK(cudaMemset(dws, ws_fill, c->ws));
        }
        g.workspace = tu_vec(dws, NVFP4_MLA_DTYPE_U8, (int64_t)c->ws);
        g.workspace.device_type = 2;
    }
    for (int call = 0; call < ws_calls; call++)
        if (nvfp4_op_attend(gpu, &g) != NVFP4_MLA_OK) fail_msg("gpu (%s): %s", config_name, nvfp4_last_error());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(out_host, dout, out_n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(c->lse_gpu, dlse, (size_t)(nq * h * 4), cudaMemcpyDeviceToHost));
    ws_last_word = 0;
    if (c->ws >= 8) CK(cudaMemcpy(&ws_last_word, (uint8_t *)dws + c->ws - 8, 8, cudaMemcpyDeviceToHost));
    cudaFree(dq), cudaFree(ds), cudaFree(dv), cudaFree(dc), cudaFree(dout), cudaFree(dlse), cudaFree(dws);
}

static void case_run_gpu(attend_case_t *c) {
    case_run_gpu_into(c, c->h * 512, 512, c->out_gpu);
}

/* The largest dequantised value a query can average: the outputs' scale for the absolute bound. */
static double case_vmax(const attend_case_t *c) {
    double vmax = 0;
    uint16_t row[576];
    for (int64_t t = 0; t < c->slots_n; t++) {
        if (c->rb == 656) nvfp4_mla_decode_fp8_656_cpu(case_record(c, t), row);
        else nvfp4_mla_decode_record_cpu(case_record(c, t), c->rb, c->mode == NVFP4_MLA_SCALE_PER_TOKEN, c->scale, row);
        for (int i = 0; i < 512; i++) vmax = fmax(vmax, fabs(nvfp4_bf16_to_f32(row[i])));
    }
    return vmax;
}

/* Query qi against the CPU reference; worst[0..2] track max |out diff|, the part beyond the
 * relative term in units of vmax, and max |lse diff|. */
static void case_check_query(const attend_case_t *c, int64_t qi, double vmax, double *worst) {
    const int64_t h = c->h;
    uint16_t *out_cpu = malloc((size_t)(h * 512 * 2));
    float *lse_cpu = malloc((size_t)(h * 4));
    cpu_reference(&c->a, qi, 1, out_cpu, lse_cpu);
    for (int64_t i = 0; i < h * 512; i++) {
        double cv = nvfp4_bf16_to_f32(out_cpu[i]), d = nvfp4_bf16_to_f32(c->out_gpu[qi * h * 512 + i]);
        double beyond_rel = fabs(cv - d) - (2.0 / 128) * fabs(cv);
        if (!(beyond_rel <= 1e-3 * vmax))
            fail_msg("%s: nq %lld h %lld topk %lld layout %u mode %u: out[q %lld, head %lld, dim %lld] gpu %g cpu %g "
                     "(vmax %g)", config_name, (long long)c->nq, (long long)h, (long long)c->topk, c->layout, c->mode,
                     (long long)qi, (long long)(i / 512), (long long)(i % 512), d, cv, vmax);
        worst[0] = fmax(worst[0], fabs(cv - d));
        worst[1] = fmax(worst[1], beyond_rel / vmax);
    }
    for (int64_t i = 0; i < h; i++) {
        const float lc = lse_cpu[i], lg = c->lse_gpu[qi * h + i];
        if (isinf(lc)) {
            if (!(isinf(lg) && lg < 0)) fail_msg("%s: lse[q %lld, head %lld] gpu %g, cpu -inf", config_name, (long long)qi, (long long)i, lg);
            continue;
        }
        double err = fabs((double)lc - lg);
        if (!(err <= 1e-5 * fmax(fabs(lc), 1.0)))
            fail_msg("%s: lse[q %lld, head %lld] gpu %.8g cpu %.8g", config_name, (long long)qi, (long long)i, lg, lc);
        worst[2] = fmax(worst[2], err);
    }
    free(out_cpu), free(lse_cpu);
}

/* A case's cache and queries (random, in this order: the draws of the cases after it depend on it).
 * pad: bytes added to each page of 64 records (a padded block stride, the non-contiguous path). */
static attend_case_t case_make(int64_t nq, int64_t h, int64_t topk, uint32_t layout, uint32_t mode, int64_t pad) {
    attend_case_t c = {.nq = nq, .h = h, .topk = topk, .pad = pad, .slots_n = 4096, .block = 64, .layout = layout,
                       .mode = mode, .rb = (int32_t)nvfp4_mla_record_bytes(layout)};
    c.stride = c.block * c.rb + pad;
    c.scale = mode == NVFP4_MLA_SCALE_PER_TOKEN ? 0.0f : (layout == NVFP4_MLA_LAYOUT_FP8_DS_MLA_656 ? 1.0f : 0.01f);
    case_cache(&c);
    case_queries(&c);
    return c;
}

/* The layout's own mode: per-token for 368 records (432 and 656 are static only), unpadded pages. */
static attend_case_t case_for_layout(int64_t nq, int64_t h, int64_t topk, uint32_t layout) {
    const bool per_token = layout == NVFP4_MLA_LAYOUT_FP8_ROPE_368;
    return case_make(nq, h, topk, layout, per_token ? NVFP4_MLA_SCALE_PER_TOKEN : NVFP4_MLA_SCALE_STATIC, 0);
}

static void case_free(attend_case_t *c) {
    free(c->cache), free(c->tok), free(c->q), free(c->slots), free(c->valid), free(c->out_gpu), free(c->lse_gpu);
}

/* check: queries compared with the CPU (every query when >= nq; else that many spread over nq). */
static void run_case_checked(int64_t nq, int64_t h, int64_t topk, uint32_t layout, uint32_t mode, int64_t pad,
                             int64_t check) {
    attend_case_t c = case_make(nq, h, topk, layout, mode, pad);
    case_run_gpu(&c);
    const double vmax = case_vmax(&c);
    double worst[3] = {0, 0, 0};
    const int64_t checked = check >= nq ? nq : check;
    for (int64_t k = 0; k < checked; k++) /* every query, or the first, the last and evenly spread ones */
        case_check_query(&c, checked == nq ? k : k == checked - 1 ? nq - 1 : k * (nq / checked), vmax, worst);
    fprintf(stderr, "%-8s nq %4lld h %3lld topk %4lld layout %u mode %u pad %2lld checked %4lld workspace %9llu: max |out diff| "
            "%.2e, beyond rel 2/128: %.2e of max|V| (bound 1e-3), max |lse diff| %.2e\n", config_name, (long long)nq,
            (long long)h, (long long)topk, layout, mode, (long long)pad, (long long)checked, (unsigned long long)c.ws,
            worst[0], worst[1], worst[2]);
    case_free(&c);
}

static void run_case(int64_t nq, int64_t h, int64_t topk, uint32_t layout, uint32_t mode) {
    run_case_checked(nq, h, topk, layout, mode, 0, nq);
}

/* As run_case_checked, with every query q where q % 5 == 1 given valid_len 0, checked at the
 * queries of `check` (n_check of them). On S SMs CTA x walks queries x, x + S, x + 2S, ...; 5
 * shares no factor with the sm_90 parts' 132 or 114 SMs, so with 400 queries some walks have an
 * item of no tiles before, between and after items with tiles (on 132 SMs: CTA 1 walks 1 (none),
 * 133, 265; CTA 4 walks 4, 136 (none), 268). The producer's cursor skips such items and must stay
 * in step with the consumers, whose epilogues still store the item's zero rows and lse. */
static void run_case_zero_lengths(int64_t nq, int64_t h, int64_t topk, uint32_t layout, uint32_t mode,
                                  const int64_t *check, int n_check) {
    attend_case_t c = case_make(nq, h, topk, layout, mode, 0);
    for (int64_t q = 1; q < nq; q += 5) c.valid[q] = 0;
    case_run_gpu(&c);
    const double vmax = case_vmax(&c);
    double worst[3] = {0, 0, 0};
    for (int i = 0; i < n_check; i++)
        if (check[i] < nq) case_check_query(&c, check[i], vmax, worst);
    fprintf(stderr, "%-8s nq %4lld h %3lld topk %4lld layout %u mode %u zero lengths, checked %4d: max |out diff| "
            "%.2e, beyond rel 2/128: %.2e of max|V| (bound 1e-3), max |lse diff| %.2e\n", config_name, (long long)nq,
            (long long)h, (long long)topk, layout, mode, n_check, worst[0], worst[1], worst[2]);
    case_free(&c);
}

/* compute-sanitizer racecheck's run (NVFP4_MLA_GPU_TEST_RACECHECK): it instruments every shared
 * access, so it gets one small case per consumer and record size, on a context whose planner sees
 * 2 SMs (white-box: the plan's arithmetic is the same for any SM count). One query of 1024 entries
 * is then 2 splits of 8 tiles: each CTA wraps its raw stages, its operand ring (at most 2 tiles of
 * blocks) and its metadata ring (4 tiles) several times, which is where producer and consumers
 * reuse shared memory. (With every SM planned, such a query is 5+ splits of 2 tiles: no ring wraps.) */
static bool race_shapes(void) {
    if (!getenv("NVFP4_MLA_GPU_TEST_RACECHECK")) return false;
    const int32_t sms = gpu->cuda.sm_count;
    gpu->cuda.sm_count = 2;
    const int64_t heads[] = {16, 32, 64};
    for (int hi = 0; hi < 3; hi++) {
        run_case(1, heads[hi], 1024, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN);
        run_case(1, heads[hi], 1024, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC);
    }
    run_case(1, 16, 1024, NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC);
    run_case(3, 128, 512, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC); /* items after items */
    run_case(2, 64, 512, NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC);  /* wide, 432: paired too */
    run_case(2, 64, 512, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC); /* wide, 656: the 12-slot ring */
    run_case(2, 64, 512, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN); /* wide, 368 per-token */
    gpu->cuda.sm_count = sms;
    return true;
}

/* The shapes every configuration must get right. */
static void all_shapes(void) {
    if (race_shapes()) return;
    const int64_t heads[] = {1, 16, 32, 64, 128}, topks[] = {1, 64, 2048, 3000};
    const int64_t max_q = getenv("NVFP4_MLA_GPU_TEST_MAX_T") ? 2 : 6;
    for (int hi = 0; hi < 5; hi++)
        for (int ti = 0; ti < 4; ti++) {
            int64_t nq = 1 + (int64_t)(uniform() * (double)max_q);
            run_case(nq, heads[hi], topks[ti], NVFP4_MLA_LAYOUT_FP8_ROPE_368, (hi + ti) % 2 ? NVFP4_MLA_SCALE_PER_TOKEN : NVFP4_MLA_SCALE_STATIC);
        }
    /* Each consumer (16, 32, 64 heads) with each record size, partial head groups, the 432 layout,
     * padded pages, and enough items for one split. */
    run_case(3, 32, 2048, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC);
    run_case(2, 128, 2048, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC);
    run_case(2, 48, 700, NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC);
    run_case(3, 20, 3000, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN);
    run_case(140, 8, 256, NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC); /* one split */
    run_case_checked(3, 16, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 48, 3); /* padded pages */
    run_case_checked(2, 64, 1000, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC, 16, 2);
    run_case(300, 16, 128, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN); /* enough CTAs: one split */
    run_case(200, 128, 192, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC);   /* several items per CTA */
    /* The paired wide kind on padded pages (80 queries are planned wide below 160 SMs); last, so
     * that the cases above keep their random draws. */
    run_case_checked(80, 64, 512, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 48, 4);
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

/* Extend / prefill: thousands of query tokens with their own top-k, a subset checked. */
static void cuda_attend_should_match_for_thousands_of_queries(void **state) {
    (void)state;
    if (getenv("NVFP4_MLA_GPU_TEST_RACECHECK")) return; /* all_shapes covers its kernels */
    if (getenv("NVFP4_MLA_GPU_TEST_MAX_T")) { /* the sanitizers' short run */
        open_gpu("default", NULL, NULL);
        run_case_checked(1100, 16, 256, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 0, 4);
        close_gpu();
        return;
    }
    open_gpu("default", NULL, NULL);
    run_case_checked(4096, 16, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 0, 26);
    run_case_checked(2048, 128, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 0, 10);
    close_gpu();
    open_gpu("99KB", NULL, "101376");
    run_case_checked(4096, 16, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC, 0, 10);
    close_gpu();
}

/* out with padded strides (head stride 520, token stride h x 520 + 24 elements): the rows come out
 * bit-identical to a contiguous out's (the plan does not depend on out's strides) and no padding
 * element is written. Covers the staged epilogue's 16-byte stores, the merge of split partials, and
 * the head guards of partial head groups, whose stray rows would land in the padding or in the
 * next token's rows. */
static void strided_case(int64_t nq, int64_t h, int64_t topk, uint32_t layout) {
    attend_case_t c = case_for_layout(nq, h, topk, layout);
    case_run_gpu(&c);
    const int64_t hs = 520, ts = h * 520 + 24;
    const size_t span = out_span(nq, h, ts, hs);
    uint16_t *buf = malloc(span * 2);
    uint8_t *row = calloc(span, 1); /* 1: an element of out's rows */
    case_run_gpu_into(&c, ts, hs, buf);
    for (int64_t q = 0; q < nq; q++)
        for (int64_t head = 0; head < h; head++)
            for (int64_t d = 0; d < 512; d++) {
                const size_t at = (size_t)(q * ts + head * hs + d);
                row[at] = 1;
                if (buf[at] != c.out_gpu[(q * h + head) * 512 + d])
                    fail_msg("strided out: q %lld head %lld dim %lld: %#x, contiguous out %#x", (long long)q,
                             (long long)head, (long long)d, buf[at], c.out_gpu[(q * h + head) * 512 + d]);
            }
    size_t padding = 0;
    for (size_t i = 0; i < span; i++) {
        if (row[i]) continue;
        padding++;
        if (buf[i] != 0xFFFF) fail_msg("strided out: padding element %zu (of %zu) written: %#x", i, span, buf[i]);
    }
    fprintf(stderr, "strided nq %4lld h %3lld topk %4lld layout %u workspace %9llu: rows identical, %zu padding elements untouched\n",
            (long long)nq, (long long)h, (long long)topk, layout, (unsigned long long)c.ws, padding);
    free(buf), free(row);
    case_free(&c);
}

/* Split-K merged by each group's last split in the attention launch (NVFP4_MLA_ATTEND_MERGE=
 * in-launch, as auto's eager calls) against the separate merge kernel: bit-identical out and lse, whatever
 * the workspace held before (its arrival counters count a word without their tag as zero), and
 * again on a workspace the same call used just before (the last arrival leaves its counter at 0). */
static void one_launch_case(int64_t nq, int64_t h, int64_t topk, uint32_t layout) {
    attend_case_t c = case_for_layout(nq, h, topk, layout);
    open_gpu_merge("separate", NULL, NULL, "separate");
    case_run_gpu(&c);
    close_gpu();
    const size_t n_out = (size_t)(nq * h * 512), n_lse = (size_t)(nq * h);
    uint16_t *out_sep = malloc(n_out * 2);
    float *lse_sep = malloc(n_lse * 4);
    memcpy(out_sep, c.out_gpu, n_out * 2), memcpy(lse_sep, c.lse_gpu, n_lse * 4);
    open_gpu_merge("in-launch", NULL, NULL, "in-launch");
    const int fills[] = {-1, 0, 0xFF, 256}, calls[] = {1, 2, 1, 3};
    for (int f = 0; f < 4; f++) {
        ws_fill = fills[f], ws_calls = calls[f];
        memset(c.out_gpu, 0, n_out * 2);
        case_run_gpu(&c);
        for (size_t i = 0; i < n_out; i++)
            if (c.out_gpu[i] != out_sep[i])
                fail_msg("one launch (workspace fill %d, %d calls): nq %lld h %lld topk %lld: out[%zu] %#x, separate "
                         "merge %#x", fills[f], calls[f], (long long)nq, (long long)h, (long long)topk, i, c.out_gpu[i],
                         out_sep[i]);
        if (memcmp(c.lse_gpu, lse_sep, n_lse * 4))
            fail_msg("one launch (workspace fill %d): nq %lld h %lld: lse differs from the separate merge's", fills[f],
                     (long long)nq, (long long)h);
    }
    ws_fill = -1, ws_calls = 1;
    close_gpu();
    fprintf(stderr, "one launch nq %3lld h %3lld topk %4lld layout %u workspace %9llu: bit-identical to the separate "
            "merge over 4 workspace states\n", (long long)nq, (long long)h, (long long)topk, layout,
            (unsigned long long)c.ws);
    free(out_sep), free(lse_sep);
    case_free(&c);
}

/* Runs after the other tests (its random draws leave theirs as they were). */
static void cuda_attend_should_merge_splits_in_one_launch_whatever_the_workspace_held(void **state) {
    (void)state;
    if (getenv("NVFP4_MLA_GPU_TEST_RACECHECK")) return;
    one_launch_case(1, 16, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368);     /* 16 splits of one group */
    one_launch_case(3, 128, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368);    /* light: 16-head groups */
    one_launch_case(6, 128, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368);    /* 32-head groups, 5 splits */
    one_launch_case(12, 64, 2048, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656);  /* 32-head groups, 5 splits */
    one_launch_case(2, 20, 3000, NVFP4_MLA_LAYOUT_BF16_ROPE_432);    /* a partial group, valid lengths */
}

/* Each consumer where the plan now puts it (light calls take 16-head groups whatever h, so
 * all_shapes reaches the others less): 32-head groups with splits for h > 32, and the wide
 * consumer with each record size and a padded page. Runs last, like the test above. */
static void cuda_attend_should_match_on_each_consumer_the_plan_picks(void **state) {
    (void)state;
    if (getenv("NVFP4_MLA_GPU_TEST_RACECHECK")) return;
    open_gpu("default", NULL, NULL);
    run_case_checked(6, 128, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 0, 2);
    run_case_checked(12, 64, 1500, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC, 0, 3);
    run_case_checked(80, 64, 512, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC, 16, 3);
    run_case_checked(80, 128, 300, NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC, 0, 3);
    run_case_checked(80, 96, 700, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 0, 3);
    /* The wide kind (paired for 368 / 432 records, the 12-slot ring for 656) with one tile an
     * item (not light: 300 x 64 heads x 1 tile > 128 x 132 head-tiles; 300 x 2 > 132 fills it);
     * 432 records on padded pages; items of no tiles before, between and after items with tiles. */
    static const int64_t zero_walks[] = {1, 4, 133, 136, 265, 268};
    run_case_checked(300, 64, 64, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC, 0, 4);
    run_case_checked(80, 64, 512, NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC, 48, 3);
    run_case_zero_lengths(400, 64, 512, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, zero_walks, 6);
    run_case_zero_lengths(400, 64, 512, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC, zero_walks, 6);
    close_gpu();
}

/* The default merge, auto, merges an eager call's splits inside the attention launch when the merge
 * reads at most 128 KB of partials (one query of 16 heads over 256 entries: 4 splits): its last
 * split resets the (query, group) arrival counter, the workspace's last 8 bytes, to 0, which the
 * separate merge never writes. A workspace of 0xFF bytes before the call shows which merge ran,
 * and that the reset happened (without it the word would hold the tag and the split count).
 * Runs last (after the two tests above), so that the others' random draws stay as they were. */
static void cuda_attend_should_merge_eager_splits_in_the_launch_by_default(void **state) {
    (void)state;
    if (getenv("NVFP4_MLA_GPU_TEST_RACECHECK")) return;
    const char *merges[] = {NULL, "in-launch", "separate"}; /* NULL: unset, the default */
    const uint64_t expected[] = {0, 0, UINT64_MAX};
    for (int i = 0; i < 3; i++) {
        attend_case_t c = case_for_layout(1, 16, 256, NVFP4_MLA_LAYOUT_FP8_ROPE_368);
        open_gpu_merge(merges[i] ? merges[i] : "default", NULL, NULL, merges[i]);
        ws_fill = 0xFF;
        case_run_gpu(&c);
        ws_fill = -1;
        close_gpu();
        if (c.ws < 8) {
            case_free(&c);
            skip(); /* this device's plan for one query does not split */
        }
        if (ws_last_word != expected[i])
            fail_msg("merge %s: the workspace's last counter word is %#llx after an eager split call, expected %#llx",
                     merges[i] ? merges[i] : "unset (auto)", (unsigned long long)ws_last_word,
                     (unsigned long long)expected[i]);
        case_free(&c);
    }
}

static void cuda_attend_should_write_only_its_rows_of_a_strided_out(void **state) {
    (void)state;
    if (getenv("NVFP4_MLA_GPU_TEST_RACECHECK")) return;
    open_gpu("default", NULL, NULL);
    strided_case(3, 16, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368);    /* split partials, then their merge */
    strided_case(140, 16, 256, NVFP4_MLA_LAYOUT_FP8_ROPE_368);   /* one split: the overlapped 16-head path */
    strided_case(140, 20, 256, NVFP4_MLA_LAYOUT_FP8_ROPE_368);   /* 20 of a 32-head group's rows */
    strided_case(140, 48, 256, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656); /* 48 of the wide consumer's 64 */
    strided_case(2, 128, 1000, NVFP4_MLA_LAYOUT_BF16_ROPE_432);  /* light: eight 16-head groups, splits */
    close_gpu();
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cuda_attend_should_match_the_cpu_reference),
        cmocka_unit_test(cuda_attend_should_match_with_the_mma_sync_consumers),
        cmocka_unit_test(cuda_attend_should_match_in_99_kb_of_shared_memory),
        cmocka_unit_test(cuda_attend_should_match_with_the_separate_merge),
        cmocka_unit_test(cuda_attend_should_match_for_thousands_of_queries),
        cmocka_unit_test(cuda_attend_should_write_only_its_rows_of_a_strided_out),
        cmocka_unit_test(cuda_attend_should_merge_splits_in_one_launch_whatever_the_workspace_held),
        cmocka_unit_test(cuda_attend_should_match_on_each_consumer_the_plan_picks),
        cmocka_unit_test(cuda_attend_should_merge_eager_splits_in_the_launch_by_default),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
