/* Issue 48, case 2, on CUDA: corrupt record fields are read by the rule of docs/record-format.md
 * section 5, as the CPU twin reads them. For every row of tests/corrupt_fields.h (NaN, +-Inf and
 * negative r, s_t and 656 tile scales; NaN and +-Inf bf16 RoPE values of 432 and 656 records; E4M3 NaN
 * codes in group scales, RoPE codes and 656 latent codes), a cache of 1024 records of which every third
 * holds that corruption:
 *   gather (368 and 432): the CUDA rows equal the CPU rows byte for byte, and none is NaN or infinite;
 *   attend: h 16, 64 and 128 (the narrow, wide and paired producers), on the default context and
 *   under NVFP4_MLA_ATTEND_MMA=sync, within attend_check's bounds of the CPU reference over the same
 *   corrupt records, no NaN or infinity in out, no NaN or +inf in lse.
 * Every row runs, one PASS/FAIL line each on stderr, and the test fails at the end naming the rows
 * that failed (so that one run shows every reader that breaks the rule). Exits 77 without a CUDA
 * device. */
#include <cuda_runtime.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "attend_case.h"
#include "attend_case_gpu.h"
#include "context.h"
#include "corrupt_fields.h"
#include "errors.h"
#include "ops.h"
#include "test_util.h"

#define CK(call)                                                                                                       \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) fail_msg("%s: %s", #call, cudaGetErrorString(e_));                                     \
    } while (0)

enum { SLOTS = 1024, NQ = 6, TOPK = 384 };

#define cpu tu_cpu
static char failed_rows[4096];

static int setup(void **state) {
    attend_gpu_require_device();
    return tu_setup_cpu(state);
}

/* Every third record of the case's cache gets the corruption. */
static void corrupt_case(attend_case_t *c, const corrupt_field_t *f) {
    for (int64_t s = 1; s < c->o.slots_n; s += 3) corrupt_field_put(attend_case_record(c, c->cache, s), f, f->bad);
}

static void note_failure(const corrupt_field_t *f, const char *where) {
    fprintf(stderr, "FAIL %-50s %s\n", f->what, where);
    if (!strstr(failed_rows, f->what) && strlen(failed_rows) + strlen(f->what) + 3 < sizeof failed_rows) {
        strcat(failed_rows, failed_rows[0] ? "; " : "");
        strcat(failed_rows, f->what);
    }
}

/* gather of every slot on the CPU and on CUDA: equal bytes, all finite. 0 when it held. */
static int gather_matches(const attend_case_t *c, nvfp4_mla_context_t *gpu, const corrupt_field_t *f) {
    const int64_t n = c->o.slots_n;
    const size_t cache_bytes = (size_t)(n / c->o.block) * (size_t)c->stride, rows_bytes = (size_t)n * 576 * 2;
    int32_t *slots = malloc((size_t)n * 4);
    uint16_t *want = malloc(rows_bytes), *got = malloc(rows_bytes);
    for (int64_t i = 0; i < n; i++) slots[i] = (int32_t)i;
    nvfp4_mla_gather_args_t g = {.struct_size = sizeof g, .layout = c->o.layout, .scale_mode = c->o.mode,
                                 .outer_scale = c->scale, .cache = c->a.cache,
                                 .slots = tu_vec(slots, NVFP4_MLA_DTYPE_I32, n),
                                 .out = tu_rows(want, NVFP4_MLA_DTYPE_BF16, n, 576, 576)};
    if (nvfp4_op_gather(cpu, &g) != NVFP4_MLA_OK) fail_msg("cpu gather: %s", nvfp4_last_error());
    void *d_cache, *d_slots, *d_rows;
    CK(cudaMalloc(&d_cache, cache_bytes));
    CK(cudaMalloc(&d_slots, (size_t)n * 4));
    CK(cudaMalloc(&d_rows, rows_bytes));
    CK(cudaMemcpy(d_cache, c->cache, cache_bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_slots, slots, (size_t)n * 4, cudaMemcpyHostToDevice));
    g.cache.data = d_cache, g.slots.data = d_slots, g.out.data = d_rows;
    g.cache.device_type = g.slots.device_type = g.out.device_type = NVFP4_MLA_DEVICE_CUDA;
    if (nvfp4_op_gather(gpu, &g) != NVFP4_MLA_OK) fail_msg("cuda gather: %s", nvfp4_last_error());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(got, d_rows, rows_bytes, cudaMemcpyDeviceToHost));
    int bad = memcmp(got, want, rows_bytes) != 0;
    for (int64_t i = 0; i < n * 576 && !bad; i++) bad = corrupt_bf16_nonfinite(got[i]);
    cudaFree(d_cache), cudaFree(d_slots), cudaFree(d_rows);
    free(slots), free(want), free(got);
    if (bad) note_failure(f, "gather: CUDA rows differ from the CPU's, or are not finite");
    return bad;
}

/* attend on `gpu` against the CPU reference over the same records; out finite, lse never NaN or +inf. */
static int attend_matches(attend_case_t *c, nvfp4_mla_context_t *gpu, const corrupt_field_t *f, const char *config) {
    attend_gpu_call_t call = {.ws_fill = -1};
    attend_case_run_gpu(c, gpu, &call);
    int64_t picks[NQ];
    for (int64_t i = 0; i < NQ; i++) picks[i] = i;
    attend_check_stats_t s = {0};
    int bad = attend_case_check(c, cpu, picks, NQ, &s) != 0;
    for (int64_t i = 0; i < NQ * c->o.h * 512 && !bad; i++) bad = corrupt_bf16_nonfinite(c->out[i]);
    for (int64_t i = 0; i < NQ * c->o.h && !bad; i++) bad = isnan(c->lse[i]) || c->lse[i] == INFINITY;
    char where[512], line[256];
    snprintf(where, sizeof where, "attend %s h %lld: %s%s%s", config, (long long)c->o.h,
             attend_check_summary(&s, line, sizeof line), s.first_failure[0] ? "; " : "", s.first_failure);
    if (bad) note_failure(f, where);
    else fprintf(stderr, "PASS %-50s %s\n", f->what, where);
    return bad;
}

static void cuda_readers_should_take_corrupt_fields_as_the_cpu_does(void **state) {
    (void)state;
    static const char *const mma[] = {NULL, "sync"};
    static const int64_t heads[] = {16, 64, 128};
    int failures = 0;
    for (int r = 0; r < CORRUPT_FIELD_COUNT; r++) {
        const corrupt_field_t *f = &corrupt_fields[r];
        for (int m = 0; m < 2; m++) {
            nvfp4_mla_context_t *gpu = attend_gpu_open(mma[m], NULL, NULL);
            for (int hi = 0; hi < 3; hi++) {
                attend_case_opts_t o = attend_case_opts(NQ, heads[hi], TOPK, f->layout, f->mode);
                o.slots_n = SLOTS, o.seed = 500 + (uint64_t)r;
                attend_case_t c;
                attend_case_make(&c, &o, cpu);
                corrupt_case(&c, f);
                if (m == 0 && hi == 0 && f->layout != NVFP4_MLA_LAYOUT_FP8_DS_MLA_656) failures += gather_matches(&c, gpu, f);
                failures += attend_matches(&c, gpu, f, mma[m] ? "mma=sync" : "default");
                attend_case_free(&c);
            }
            nvfp4_context_shutdown(gpu);
        }
    }
    if (failures) fail_msg("%d checks failed; rows: %s", failures, failed_rows);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cuda_readers_should_take_corrupt_fields_as_the_cpu_does),
    };
    return cmocka_run_group_tests(tests, setup, tu_teardown_cpu);
}
