/* The CUDA readers and writer on a cache larger than 4 GiB (issue 47): every layout (368 per-token
 * and static, 432, 656 by FlashMLA's rule), the case's records placed at the end of a cache of just
 * over 4 GiB so that half of them sit below byte 2^32 and half above it, the last one at the cache's
 * last slot, and every other byte 0xFF: a reader that truncates a byte offset to 32 bits (or
 * overflows a signed 32-bit product) reads 0xFF bytes, NaN, and fails the check, or faults.
 *   attend: each kind the plan picks (16-head groups, 32-head groups, the wide kind, thousands of
 *   queries), eager and captured, against the CPU reference over the case's own small cache with the
 *   GPU tests' per-row bound (host_shims/common/attend_check.h);
 *   gather: every slot of the case, bit-equal to the CPU gather; write: every token of the case to
 *   its slot past 2^32, bit-equal to the CPU writer's records (368 and 432: the layouts it writes).
 * About 4 GiB of device memory a case, freed after it. Exits 77 without a CUDA device. */
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
#include "errors.h"
#include "ops.h"
#include "test_util.h"

static nvfp4_mla_context_t *cpu, *gpu;
static uint64_t next_seed = 4700;

/* The big cache of a case: its tokens (a multiple of the block) and where the case's slots start
 * (rounded down to a block), so that about half of the case's records start past byte 2^32 and the
 * case's last slot is the cache's last. */
static void big_layout(const attend_case_t *c, int64_t *cache_slots, int64_t *offset) {
    const int64_t block = c->o.block, half = c->o.slots_n / 2;
    const int64_t first_past = ((INT64_C(1) << 32) + c->rb - 1) / c->rb; /* first slot at or past 2^32 bytes */
    *offset = (first_past - half) / block * block;
    *cache_slots = *offset + c->o.slots_n;
    if (!(*offset * c->rb < (INT64_C(1) << 32) && (*cache_slots - 1) * c->rb >= (INT64_C(1) << 32)))
        fail_msg("the case's slots do not straddle byte 2^32");
}

static attend_case_opts_t opts(int64_t nq, int64_t h, int64_t topk, uint32_t layout, uint32_t mode) {
    attend_case_opts_t o = attend_case_opts(nq, h, topk, layout, mode);
    o.seed = next_seed++;
    return o;
}

static void attend_big(int64_t nq, int64_t h, int64_t topk, uint32_t layout, uint32_t mode, int graph) {
    attend_case_t c;
    const attend_case_opts_t o = opts(nq, h, topk, layout, mode);
    attend_case_make(&c, &o, cpu);
    attend_gpu_call_t call = {.ws_fill = -1, .graph = graph};
    big_layout(&c, &call.cache_slots, &call.slot_offset);
    attend_case_run_gpu(&c, gpu, &call);
    int64_t *picks = malloc((size_t)(nq > 136 ? nq : 136) * sizeof *picks);
    const int64_t n = attend_check_pick_queries(nq, 512, 64, gpu->cuda.sm_count, picks);
    attend_check_stats_t s = {0};
    attend_case_check(&c, cpu, picks, n, &s);
    char line[512];
    fprintf(stderr, "%s big cache %.2f GiB, slots %lld..%lld: nq %4lld h %3lld topk %4lld rb %d%s: %s\n",
            s.failed ? "FAIL" : "PASS", (double)call.cache_slots * c.rb / (1 << 30), (long long)call.slot_offset,
            (long long)(call.cache_slots - 1), (long long)nq, (long long)h, (long long)topk, c.rb,
            graph ? " graph" : "", attend_check_summary(&s, line, sizeof line));
    free(picks);
    attend_case_free(&c);
    if (s.failed)
        fail_msg("attend on a cache past 4 GiB: %s", s.first_failure);
}

static void cuda_attend_should_read_records_past_4_gib(void **state) {
    (void)state;
    static const struct {
        int64_t nq, h, topk;
        uint32_t layout, mode;
        int graph;
    } cases[] = {
        {3, 16, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 0},   /* 16-head groups, splits */
        {9, 32, 1024, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC, 0},      /* 32-head groups */
        {4, 64, 2048, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 1},   /* wide, light, captured */
        {300, 128, 256, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 0}, /* wide, many items */
        {2000, 16, 512, NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 0}, /* prefill-like */
        {3, 32, 1000, NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC, 0},
        {80, 64, 512, NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC, 0},
        {2, 16, 2048, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC, 0},
        {12, 64, 1500, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC, 0},
        {160, 128, 256, NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        attend_big(cases[i].nq, cases[i].h, cases[i].topk, cases[i].layout, cases[i].mode, cases[i].graph);
}

/* The case's records, read back from a big cache at slots [offset, offset + slots_n). */
static uint8_t *region(const attend_case_t *c, const uint8_t *d, int64_t offset) {
    const size_t bytes = (size_t)(c->o.slots_n / c->o.block) * (size_t)c->stride;
    uint8_t *h = malloc(bytes);
    attend_gpu_download(h, d + (size_t)(offset / c->o.block) * (size_t)c->stride, bytes);
    return h;
}

/* write of every token of the case to its slot past the start of a big cache, on the GPU; 1 when the
 * records there equal the CPU writer's (the case's own). */
static int write_big(const attend_case_t *c, uint8_t *d_cache, int64_t cache_slots, int64_t offset) {
    const int64_t n = c->o.slots_n;
    int64_t *slots = malloc((size_t)n * 8);
    for (int64_t t = 0; t < n; t++)
        slots[t] = offset + t;
    void *d_slots = attend_gpu_upload(slots, (size_t)n * 8), *d_tok = attend_gpu_upload(c->tok, (size_t)n * 576 * 2);
    nvfp4_mla_write_args_t w = {.struct_size = sizeof w, .layout = c->o.layout, .scale_mode = c->o.mode,
                                .outer_scale = c->scale,
                                .kv_c = tu_rows(d_tok, NVFP4_MLA_DTYPE_BF16, n, 512, 576),
                                .k_pe = tu_rows((uint16_t *)d_tok + 512, NVFP4_MLA_DTYPE_BF16, n, 64, 576),
                                .slot_mapping = tu_vec(d_slots, NVFP4_MLA_DTYPE_I64, n),
                                .cache = tu_cache(d_cache, cache_slots / c->o.block, c->o.block, c->rb, c->stride)};
    w.kv_c.device_type = w.k_pe.device_type = w.slot_mapping.device_type = w.cache.device_type = NVFP4_MLA_DEVICE_CUDA;
    if (nvfp4_op_write(gpu, &w) != NVFP4_MLA_OK)
        fail_msg("gpu write past 4 GiB: %s", nvfp4_last_error());
    attend_gpu_sync();
    uint8_t *written = region(c, d_cache, offset);
    const int ok = !memcmp(written, c->cache, (size_t)(n / c->o.block) * (size_t)c->stride);
    attend_gpu_free(d_slots), attend_gpu_free(d_tok);
    free(slots), free(written);
    return ok;
}

/* gather of every slot of the case from a big cache on the GPU; 1 when equal to the CPU gather of
 * the case's own cache. */
static int gather_big(const attend_case_t *c, uint8_t *d_cache, int64_t cache_slots, int64_t offset) {
    const int64_t n = c->o.slots_n;
    int32_t *slots = malloc((size_t)n * 4), *ids = malloc((size_t)n * 4);
    for (int64_t t = 0; t < n; t++)
        slots[t] = (int32_t)(offset + t), ids[t] = (int32_t)t;
    void *d_slots = attend_gpu_upload(slots, (size_t)n * 4), *d_rows = attend_gpu_alloc((size_t)n * 576 * 2, 0xFF);
    nvfp4_mla_gather_args_t g = {.struct_size = sizeof g, .layout = c->o.layout, .scale_mode = c->o.mode,
                                 .outer_scale = c->scale,
                                 .cache = tu_cache(d_cache, cache_slots / c->o.block, c->o.block, c->rb, c->stride),
                                 .slots = tu_vec(d_slots, NVFP4_MLA_DTYPE_I32, n),
                                 .out = tu_rows(d_rows, NVFP4_MLA_DTYPE_BF16, n, 576, 576)};
    g.cache.device_type = g.slots.device_type = g.out.device_type = NVFP4_MLA_DEVICE_CUDA;
    if (nvfp4_op_gather(gpu, &g) != NVFP4_MLA_OK)
        fail_msg("gpu gather past 4 GiB: %s", nvfp4_last_error());
    uint16_t *got = malloc((size_t)n * 576 * 2), *want = malloc((size_t)n * 576 * 2);
    attend_gpu_download(got, d_rows, (size_t)n * 576 * 2);
    nvfp4_mla_gather_args_t hc = {.struct_size = sizeof hc, .layout = c->o.layout, .scale_mode = c->o.mode,
                                  .outer_scale = c->scale, .cache = c->a.cache,
                                  .slots = tu_vec(ids, NVFP4_MLA_DTYPE_I32, n),
                                  .out = tu_rows(want, NVFP4_MLA_DTYPE_BF16, n, 576, 576)};
    if (nvfp4_op_gather(cpu, &hc) != NVFP4_MLA_OK)
        fail_msg("cpu gather: %s", nvfp4_last_error());
    const int ok = !memcmp(got, want, (size_t)n * 576 * 2);
    attend_gpu_free(d_slots), attend_gpu_free(d_rows);
    free(slots), free(ids), free(got), free(want);
    return ok;
}

/* write, then gather, on a big cache of 0xFF bytes. */
static void codec_big(uint32_t layout, uint32_t mode) {
    attend_case_t c;
    const attend_case_opts_t o = opts(1, 16, 1, layout, mode);
    attend_case_make(&c, &o, cpu);
    int64_t cache_slots, offset;
    big_layout(&c, &cache_slots, &offset);
    const size_t bytes = (size_t)(cache_slots / c.o.block) * (size_t)c.stride;
    uint8_t *d_cache = attend_gpu_alloc(bytes, 0xFF);
    const int write_ok = write_big(&c, d_cache, cache_slots, offset);
    const int gather_ok = gather_big(&c, d_cache, cache_slots, offset);
    fprintf(stderr, "%s big cache %.2f GiB, rb %d, slots %lld..%lld: write %s, gather %s\n",
            write_ok && gather_ok ? "PASS" : "FAIL", (double)bytes / (1 << 30), c.rb, (long long)offset,
            (long long)(cache_slots - 1), write_ok ? "equal to the CPU writer" : "DIFFERS",
            gather_ok ? "equal to the CPU gather" : "DIFFERS");
    attend_gpu_free(d_cache);
    const int rb = c.rb;
    attend_case_free(&c);
    if (!write_ok || !gather_ok)
        fail_msg("rb %d: %s past 4 GiB differs from the CPU's", rb, write_ok ? "gather" : "write");
}

static void cuda_write_and_gather_should_reach_records_past_4_gib(void **state) {
    (void)state;
    codec_big(NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN);
    codec_big(NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_STATIC);
    codec_big(NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC);
}

static int setup(void **state) {
    (void)state;
    attend_gpu_require_device();
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CPU, 0, 0, NULL, {0}, NULL};
    if (nvfp4_context_init(&init, &cpu) != NVFP4_MLA_OK)
        return 1;
    gpu = attend_gpu_open(NULL, NULL, NULL);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    nvfp4_context_shutdown(gpu);
    return nvfp4_context_shutdown(cpu);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cuda_attend_should_read_records_past_4_gib),
        cmocka_unit_test(cuda_write_and_gather_should_reach_records_past_4_gib),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
