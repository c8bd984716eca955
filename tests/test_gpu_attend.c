/* CUDA attend against the CPU attend (the float64 reference): random shapes, h in {1, 16, 32, 64,
 * 128}, topk in {1, 64, 2048, 3000}, -1 entries and per-query lengths, both NVFP4 modes, the 432
 * layout and the 656-byte baseline layout, split-K and single-split paths, every tiling and stage
 * count. The CPU reference works in double over the records' binary32 values (the 656 layout: its
 * bf16 decode), as the kernel does up to f32 sums and P rounded to bf16 for the P.V product.
 * Tolerances (the FlashMLA-level ones, with "abs 1e-3 on outputs of unit scale" taken
 * relative to the outputs' scale, max|V|, since the test's values are not of unit scale): outputs
 * |gpu - cpu| <= 2/128 |cpu| + 1e-3 max|V|, LSE rel 1e-5 (abs 1e-5 near 0).
 * Exits 77 without a CUDA device. */
#include <cuda_runtime.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
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
    if (nvfp4_context_init(&init, &cpu)) return -1;
    init.device_type = NVFP4_MLA_DEVICE_CUDA;
    return nvfp4_context_init(&init, &gpu);
}

static int teardown(void **state) {
    (void)state;
    nvfp4_context_shutdown(cpu);
    return nvfp4_context_shutdown(gpu);
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

/* pad: bytes added to each page of 64 records (a padded block stride, the non-contiguous path). */
static void run_case_padded(int64_t nq, int64_t h, int64_t topk, uint32_t layout, uint32_t mode, int64_t pad) {
    const int32_t rb = layout == NVFP4_MLA_LAYOUT_FP8_DS_MLA_656 ? 656 : layout == NVFP4_MLA_LAYOUT_BF16_ROPE_432 ? 432 : 368;
    const int64_t slots_n = 4096, block = 64;
    const int64_t stride = block * rb + pad;
    uint8_t *cache = calloc((size_t)(slots_n / block), (size_t)stride);
#define REC(t) (cache + ((t) / block) * stride + ((t) % block) * rb)
    const float scale = mode == NVFP4_MLA_SCALE_PER_TOKEN ? 0.0f : (layout == NVFP4_MLA_LAYOUT_FP8_DS_MLA_656 ? 1.0f : 0.01f);
    uint16_t *tok = malloc((size_t)slots_n * 576 * 2);
    for (int64_t i = 0; i < slots_n * 576; i++) tok[i] = nvfp4_f32_to_bf16((float)(gauss() * 0.5));
    nvfp4_mla_tensor_t cache_t = tu_cache(cache, slots_n / block, block, rb, stride);
    if (rb == 656) {
        for (int64_t t = 0; t < slots_n; t++) { /* random valid fp8_ds_mla records */
            uint8_t *rec = REC(t);
            for (int i = 0; i < 512; i++) rec[i] = (uint8_t)(uniform() * 256) & 0xF7; /* never 0x7F/0xFF */
            for (int i = 0; i < 4; i++) { float s = (float)(0.001 + uniform() * 0.01); memcpy(rec + 512 + 4 * i, &s, 4); }
            memcpy(rec + 528, tok + t * 576 + 512, 128);
        }
    } else {
        int64_t *ids = malloc((size_t)slots_n * 8);
        for (int64_t t = 0; t < slots_n; t++) ids[t] = t;
        nvfp4_mla_write_args_t w = {.struct_size = sizeof w, .layout = layout, .scale_mode = mode, .outer_scale = scale,
                                    .kv_c = tu_rows(tok, NVFP4_MLA_DTYPE_BF16, slots_n, 512, 576),
                                    .k_pe = tu_rows(tok + 512, NVFP4_MLA_DTYPE_BF16, slots_n, 64, 576),
                                    .slot_mapping = tu_vec(ids, NVFP4_MLA_DTYPE_I64, slots_n), .cache = cache_t};
        assert_int_equal(nvfp4_op_write(cpu, &w), NVFP4_MLA_OK);
        free(ids);
    }
    uint16_t *q = malloc((size_t)(nq * h * 576 * 2));
    for (int64_t i = 0; i < nq * h * 576; i++) q[i] = nvfp4_f32_to_bf16((float)gauss());
    int32_t *slots = malloc((size_t)(nq * topk * 4 + 4)), *valid = malloc((size_t)(nq * 4));
    for (int64_t i = 0; i < nq * topk; i++) slots[i] = uniform() < 0.1 ? -1 : (int32_t)(uniform() * slots_n);
    for (int64_t i = 0; i < nq; i++) valid[i] = i % 3 == 2 ? (int32_t)(uniform() * (double)(topk + 1)) : (int32_t)topk;
    if (nq > 1) for (int64_t e = 0; e < topk; e++) slots[e] = -1; /* query 0: nothing valid */
    const size_t out_n = (size_t)(nq * h * 512);
    uint16_t *out_cpu = malloc(out_n * 2), *out_gpu = malloc(out_n * 2);
    float *lse_cpu = malloc((size_t)(nq * h * 4)), *lse_gpu = malloc((size_t)(nq * h * 4));
    nvfp4_mla_attend_args_t a = {.struct_size = sizeof a, .layout = layout, .scale_mode = mode, .outer_scale = scale,
                                 .sm_scale = 1.0f / sqrtf(576.0f)};
    a.q = tu_tensor(q, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){nq, h, 576}, (int64_t[]){h * 576, 576, 1});
    a.slots = tu_rows(slots, NVFP4_MLA_DTYPE_I32, nq, topk, topk);
    a.valid_len = tu_vec(valid, NVFP4_MLA_DTYPE_I32, nq);
    a.cache = cache_t;
    a.out = tu_tensor(out_cpu, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){nq, h, 512}, (int64_t[]){h * 512, 512, 1});
    a.lse = tu_rows(lse_cpu, NVFP4_MLA_DTYPE_F32, nq, h, h);
    if (nvfp4_op_attend(cpu, &a) != NVFP4_MLA_OK) fail_msg("cpu: %s", nvfp4_last_error());
    void *dq = to_gpu(q, (size_t)(nq * h * 576 * 2)), *ds = to_gpu(slots, (size_t)(nq * topk * 4));
    void *dv = to_gpu(valid, (size_t)(nq * 4)), *dc = to_gpu(cache, (size_t)(slots_n / block * stride));
    void *dout, *dlse, *dws = NULL;
    CK(cudaMalloc(&dout, out_n * 2));
    CK(cudaMalloc(&dlse, (size_t)(nq * h * 4)));
    CK(cudaMemset(dout, 0xFF, out_n * 2)); /* poison: every output must be written */
    nvfp4_mla_attend_args_t g = a;
    g.q = on(a.q, dq, 2), g.slots = on(a.slots, ds, 2), g.valid_len = on(a.valid_len, dv, 2), g.cache = on(a.cache, dc, 2);
    g.out = on(a.out, dout, 2), g.lse = on(a.lse, dlse, 2);
    uint64_t ws = 0;
    assert_int_equal(nvfp4_op_attend_workspace_bytes(gpu, &g, &ws), NVFP4_MLA_OK);
    if (ws) {
        CK(cudaMalloc(&dws, ws));
        g.workspace = tu_vec(dws, NVFP4_MLA_DTYPE_U8, (int64_t)ws);
        g.workspace.device_type = 2;
    }
    if (nvfp4_op_attend(gpu, &g) != NVFP4_MLA_OK) fail_msg("gpu: %s", nvfp4_last_error());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(out_gpu, dout, out_n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(lse_gpu, dlse, (size_t)(nq * h * 4), cudaMemcpyDeviceToHost));
    double worst = 0, worst_lse = 0, vmax = 0;
    uint16_t row[576];
    for (int64_t t = 0; t < slots_n; t++) { /* the largest dequantised value a query can average */
        if (rb == 656) nvfp4_mla_decode_fp8_656_cpu(REC(t), row);
        else nvfp4_mla_decode_record_cpu(REC(t), rb, mode == NVFP4_MLA_SCALE_PER_TOKEN, scale, row);
        for (int i = 0; i < 512; i++) vmax = fmax(vmax, fabs(nvfp4_bf16_to_f32(row[i])));
    }
    double worst_abs = 0; /* the part of a difference beyond the relative term, in units of max|V| */
    for (size_t i = 0; i < out_n; i++) {
        double c = nvfp4_bf16_to_f32(out_cpu[i]), d = nvfp4_bf16_to_f32(out_gpu[i]);
        double beyond_rel = fabs(c - d) - (2.0 / 128) * fabs(c);
        if (!(beyond_rel <= 1e-3 * vmax)) fail_msg("nq %lld h %lld topk %lld layout %u mode %u: out[%zu] gpu %g cpu %g (vmax %g)",
                                                   (long long)nq, (long long)h, (long long)topk, layout, mode, i, d, c, vmax);
        worst = fmax(worst, fabs(c - d));
        worst_abs = fmax(worst_abs, beyond_rel / vmax);
    }
    for (int64_t i = 0; i < nq * h; i++) {
        if (isinf(lse_cpu[i])) { assert_true(isinf(lse_gpu[i]) && lse_gpu[i] < 0); continue; }
        double err = fabs((double)lse_cpu[i] - lse_gpu[i]);
        if (err > 1e-5 * fmax(fabs(lse_cpu[i]), 1.0)) fail_msg("lse[%lld] gpu %.8g cpu %.8g", (long long)i, lse_gpu[i], lse_cpu[i]);
        worst_lse = fmax(worst_lse, err);
    }
    fprintf(stderr, "nq %3lld h %3lld topk %4lld layout %u mode %u pad %lld workspace %8llu: max |out diff| %.2e, beyond rel "
            "2/128: %.2e of max|V| (bound 1e-3), max |lse diff| %.2e\n", (long long)nq, (long long)h, (long long)topk, layout, mode,
            (long long)pad, (unsigned long long)ws, worst, worst_abs, worst_lse);
    cudaFree(dq), cudaFree(ds), cudaFree(dv), cudaFree(dc), cudaFree(dout), cudaFree(dlse), cudaFree(dws);
    free(cache), free(tok), free(q), free(slots), free(valid), free(out_cpu), free(out_gpu), free(lse_cpu), free(lse_gpu);
#undef REC
}

static void run_case(int64_t nq, int64_t h, int64_t topk, uint32_t layout, uint32_t mode) {
    run_case_padded(nq, h, topk, layout, mode, 0);
}

static void cuda_attend_should_match_the_cpu_reference(void **state) {
    (void)state;
    const int64_t heads[] = {1, 16, 32, 64, 128}, topks[] = {1, 64, 2048, 3000};
    const int64_t max_q = getenv("NVFP4_MLA_GPU_TEST_MAX_T") ? 2 : 6;
    for (int hi = 0; hi < 5; hi++)
        for (int ti = 0; ti < 4; ti++) {
            int64_t nq = 1 + (int64_t)(uniform() * (double)max_q);
            run_case(nq, heads[hi], topks[ti], NVFP4_MLA_LAYOUT_FP8_ROPE_368, (hi + ti) % 2 ? NVFP4_MLA_SCALE_PER_TOKEN : NVFP4_MLA_SCALE_STATIC);
        }
    /* Each tiling (16, 32, 64 heads per CTA) with each record size (1 to 3 raw stages), a partial
     * last head group, and the 432 layout. */
    run_case(3, 32, 2048, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC);
    run_case(2, 128, 2048, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC);
    run_case(2, 48, 700, NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC);
    run_case(3, 20, 3000, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN);
    run_case(140, 8, 256, NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC); /* one split */
    run_case_padded(3, 16, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 48); /* padded pages */
    run_case_padded(2, 64, 1000, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC, 16);
    run_case(300, 16, 128, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN); /* enough CTAs: one split */
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(cuda_attend_should_match_the_cpu_reference)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
