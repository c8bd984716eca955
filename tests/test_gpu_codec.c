/* CUDA writer and gather against the CPU twins: bytes equal for every mode, dtype, layout and size,
 * on adversarial inputs; guard bytes and skip rules (slots past the cache: refused on the CPU, counted
 * on CUDA); identity then calibrated scale in one process;
 * CUDA graph capture on a non-default stream. Exits 77 (skip) without a usable CUDA device.
 * NVFP4_MLA_GPU_TEST_MAX_T caps the largest T (compute-sanitizer runs use a small one). */
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
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

#define GUARD 4096
#define BLOCK 64
#define PAD 32 /* padded block stride: BLOCK * record_bytes + PAD, a multiple of 16 */

static nvfp4_mla_context_t *cpu, *gpu;
static int64_t max_tokens = 200000;
static uint64_t rng = 7;

static uint64_t next(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}
static double uniform(void) { return (double)(next() >> 11) * 0x1p-53; }
static double gauss(void) { return sqrt(-2 * log(uniform() + 1e-300)) * cos(6.283185307179586 * uniform()); }

#define CHECK_CUDA(call) assert_int_equal((call), cudaSuccess)

static int setup(void **state) {
    (void)state;
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        fprintf(stderr, "no CUDA device: skipping the gpu suite\n");
        exit(77);
    }
    const char *cap = getenv("NVFP4_MLA_GPU_TEST_MAX_T");
    if (cap) max_tokens = atoll(cap);
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CPU, 0, 0, NULL, {0}, NULL};
    if (nvfp4_context_init(&init, &cpu)) return -1;
    init.device_type = NVFP4_MLA_DEVICE_CUDA;
    if (nvfp4_context_init(&init, &gpu)) {
        fprintf(stderr, "CUDA init failed: %s\n", nvfp4_last_error());
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    nvfp4_context_shutdown(cpu);
    return nvfp4_context_shutdown(gpu);
}

/* Groups whose mse candidates tie or nearly tie (write_policy.h keeps the earlier one), scaled by a
 * power of two per token: {6, 3} (c6 and c4 both exact), {6, 5.25 x 15} (c4 - 1 wins),
 * {6, 5.625 x 15} (c6 - 1 wins), and on the E2M1 grid of d = 1 (c4 exact). */
static double policy_pattern(int64_t t, int i) {
    const double scale = ldexp(1.0, (int)(t % 24) - 16) * ((i / 16) & 1 ? -1 : 1);
    const int k = i % 16;
    static const double grid[16] = {4, 3, 2, 1.5, 1, .5, 0, -4, -3, -2, -1.5, -1, -.5, 0, 0, 0};
    switch ((i / 16) % 4) {
    case 0: return (k == 0 ? 6 : k == 1 ? 3 : 0) * scale;
    case 1: return (k == 0 ? 6 : 5.25) * scale;
    case 2: return (k == 0 ? 6 : 5.625) * scale;
    default: return grid[k] * scale;
    }
}

/* Adversarial tokens [T, 576] in bf16 or fp16 bits: magnitudes 1e-4..1e3, exact E2M1 ties, zero
 * tokens, NaN/Inf, the real per-layer range, a 240x spread inside one token, and the mse policy's
 * tie patterns (policy_pattern). */
static void make_tokens(uint16_t *v, int64_t count, int is_f16) {
    static const float ties[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f};
    for (int64_t t = 0; t < count; t++) {
        int kind = (int)(next() % 8);
        double mag = pow(10.0, -4 + 7 * uniform());
        if (is_f16) mag = fmin(fmax(mag, 1e-3), 1e3);
        for (int i = 0; i < 576; i++) {
            double x = gauss() * mag;
            if (kind == 1) x = ties[next() % 8] * ldexp(1.0, (int)(next() % 8) - 4) * ((next() & 1) ? -1 : 1);
            if (kind == 2) x = 0;
            if (kind == 3 && next() % 50 == 0) x = (next() & 1) ? NAN : ((next() & 1) ? INFINITY : -INFINITY);
            if (kind == 4) x = gauss() * (i < 256 ? 5.19 : 0.0217); /* the real 240x range in one token */
            if (kind == 5) x = gauss() * 0.0217 / 4;                   /* a shallow layer */
            if (kind == 6) x = policy_pattern(t, i);                   /* mse candidates that tie */
            if (is_f16) {
                v[t * 576 + i] = tu_f32_to_f16((float)x);
            } else {
                v[t * 576 + i] = nvfp4_f32_to_bf16((float)x);
            }
        }
    }
}

typedef struct world {
    int64_t count, blocks, capacity, stride, bytes_total;
    int64_t out_of_range;   /* slots >= capacity among `slots` */
    int32_t record_bytes;
    uint16_t *tokens;       /* host [T, 576] */
    int64_t *slots;         /* host [T]: padding (-1) and slots past the capacity among them */
    int64_t *cpu_slots;     /* host [T]: `slots` with those past the capacity as -1, what a CUDA write
                               writes by the slot rule; the CPU refuses the raw ones (issue 37) */
    uint8_t *cpu_cache;     /* host, GUARD + cache + GUARD */
    void *d_tokens, *d_slots, *d_cache;
} world_t;

static void world_init(world_t *w, int64_t count, int32_t record_bytes, int is_f16) {
    w->count = count;
    w->record_bytes = record_bytes;
    w->blocks = (count + count / 4) / BLOCK + 2;
    w->capacity = w->blocks * BLOCK;
    w->stride = BLOCK * record_bytes + PAD;
    w->bytes_total = w->blocks * w->stride + 2 * GUARD;
    w->tokens = malloc((size_t)count * 576 * 2);
    w->slots = malloc((size_t)count * 8);
    w->cpu_slots = malloc((size_t)count * 8);
    w->cpu_cache = malloc((size_t)w->bytes_total);
    make_tokens(w->tokens, count, is_f16);
    for (int64_t t = 0; t < count; t++) w->slots[t] = t; /* unique slots, shuffled, some skipped */
    for (int64_t t = count - 1; t > 0; t--) {
        int64_t j = (int64_t)(next() % (uint64_t)(t + 1)), tmp = w->slots[t];
        w->slots[t] = w->slots[j], w->slots[j] = tmp;
    }
    for (int64_t t = 0; t < count; t += 17) w->slots[t] = (t % 34) ? -1 : w->capacity + (int64_t)(next() % 1000);
    w->out_of_range = 0;
    for (int64_t t = 0; t < count; t++) {
        w->out_of_range += w->slots[t] >= w->capacity;
        w->cpu_slots[t] = w->slots[t] >= w->capacity ? -1 : w->slots[t];
    }
    memset(w->cpu_cache, 0xA5, (size_t)w->bytes_total);
    CHECK_CUDA(cudaMalloc(&w->d_tokens, (size_t)count * 576 * 2));
    CHECK_CUDA(cudaMalloc(&w->d_slots, (size_t)count * 8));
    CHECK_CUDA(cudaMalloc(&w->d_cache, (size_t)w->bytes_total));
    CHECK_CUDA(cudaMemcpy(w->d_tokens, w->tokens, (size_t)count * 576 * 2, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(w->d_slots, w->slots, (size_t)count * 8, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(w->d_cache, w->cpu_cache, (size_t)w->bytes_total, cudaMemcpyHostToDevice));
}

static void world_free(world_t *w) {
    free(w->tokens), free(w->slots), free(w->cpu_slots), free(w->cpu_cache);
    cudaFree(w->d_tokens), cudaFree(w->d_slots), cudaFree(w->d_cache);
}

static nvfp4_mla_write_args_t args_for(const world_t *w, int on_gpu, int is_f16, uint32_t mode, float scale,
                                       uint32_t policy) {
    int32_t dev = on_gpu ? NVFP4_MLA_DEVICE_CUDA : NVFP4_MLA_DEVICE_CPU;
    uint16_t *tok = on_gpu ? w->d_tokens : w->tokens;
    nvfp4_mla_write_args_t a = {
        .struct_size = sizeof a,
        .layout = w->record_bytes == 368 ? NVFP4_MLA_LAYOUT_FP8_ROPE_368 : NVFP4_MLA_LAYOUT_BF16_ROPE_432,
        .scale_mode = mode,
        .outer_scale = scale,
        .writer_policy = policy,
        .kv_c = tu_rows(tok, is_f16 ? NVFP4_MLA_DTYPE_F16 : NVFP4_MLA_DTYPE_BF16, w->count, 512, 576),
        .k_pe = tu_rows(tok + 512, is_f16 ? NVFP4_MLA_DTYPE_F16 : NVFP4_MLA_DTYPE_BF16, w->count, 64, 576),
        .slot_mapping = tu_vec(on_gpu ? w->d_slots : w->cpu_slots, NVFP4_MLA_DTYPE_I64, w->count),
        .cache = tu_cache((uint8_t *)(on_gpu ? w->d_cache : w->cpu_cache) + GUARD, w->blocks, BLOCK, w->record_bytes,
                          w->stride),
    };
    a.kv_c.device_type = a.k_pe.device_type = a.slot_mapping.device_type = a.cache.device_type = dev;
    return a;
}

/* Writes on both backends with `policy` and compares the whole buffers (guards included) and the
 * counters (the GPU's out_of_range_count: the slots past the capacity); returns the GPU bytes. */
static uint8_t *write_both(world_t *w, int is_f16, uint32_t mode, float scale, uint32_t policy) {
    float cap_cpu = 0, *d_cap;
    uint64_t nf_cpu = 0, *d_nf, *d_oor;
    CHECK_CUDA(cudaMalloc((void **)&d_cap, sizeof(float)));
    CHECK_CUDA(cudaMalloc((void **)&d_nf, sizeof(uint64_t)));
    CHECK_CUDA(cudaMalloc((void **)&d_oor, sizeof(uint64_t)));
    CHECK_CUDA(cudaMemset(d_cap, 0, sizeof(float)));
    CHECK_CUDA(cudaMemset(d_nf, 0, sizeof(uint64_t)));
    CHECK_CUDA(cudaMemset(d_oor, 0, sizeof(uint64_t)));
    nvfp4_mla_write_args_t a = args_for(w, 0, is_f16, mode, scale, policy);
    a.capture_max_abs = &cap_cpu;
    a.nonfinite_count = &nf_cpu;
    assert_int_equal(nvfp4_op_write(cpu, &a), NVFP4_MLA_OK);
    a = args_for(w, 1, is_f16, mode, scale, policy);
    a.capture_max_abs = d_cap;
    a.nonfinite_count = d_nf;
    a.out_of_range_count = d_oor;
    if (nvfp4_op_write(gpu, &a) != NVFP4_MLA_OK) fail_msg("%s", nvfp4_last_error());
    uint8_t *got = malloc((size_t)w->bytes_total);
    CHECK_CUDA(cudaMemcpy(got, w->d_cache, (size_t)w->bytes_total, cudaMemcpyDeviceToHost));
    float cap_gpu;
    uint64_t nf_gpu, oor_gpu;
    CHECK_CUDA(cudaMemcpy(&cap_gpu, d_cap, sizeof cap_gpu, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(&nf_gpu, d_nf, sizeof nf_gpu, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(&oor_gpu, d_oor, sizeof oor_gpu, cudaMemcpyDeviceToHost));
    cudaFree(d_cap), cudaFree(d_nf), cudaFree(d_oor);
    assert_int_equal(oor_gpu, (uint64_t)w->out_of_range);
    for (int64_t i = 0; i < w->bytes_total; i++) {
        if (got[i] != w->cpu_cache[i]) {
            fail_msg("T=%lld layout %d mode %u scale %g f16 %d policy %s: byte %lld differs (gpu %02x, cpu %02x)",
                     (long long)w->count, w->record_bytes, mode, (double)scale, is_f16,
                     nvfp4_mla_writer_policy_name(policy), (long long)(i - GUARD), got[i], w->cpu_cache[i]);
        }
    }
    assert_true(cap_gpu == cap_cpu);
    assert_int_equal(nf_gpu, nf_cpu);
    return got;
}

/* Gathers random slots (some -1) on both backends and compares the rows. */
static void gather_both(world_t *w, uint32_t mode, float scale) {
    const int64_t n = w->count < 4096 ? w->count : 4096;
    int32_t *slots = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) slots[i] = (next() % 9 == 0) ? -1 : (int32_t)(next() % (uint64_t)w->capacity);
    uint16_t *rows = malloc((size_t)n * 576 * 2), *got = malloc((size_t)n * 576 * 2);
    void *d_slots, *d_rows;
    CHECK_CUDA(cudaMalloc(&d_slots, (size_t)n * 4));
    CHECK_CUDA(cudaMalloc(&d_rows, (size_t)n * 576 * 2));
    CHECK_CUDA(cudaMemcpy(d_slots, slots, (size_t)n * 4, cudaMemcpyHostToDevice));
    nvfp4_mla_write_args_t wa = args_for(w, 0, 0, mode, scale, 0);
    nvfp4_mla_gather_args_t g = {sizeof g,
                                 wa.layout,
                                 mode,
                                 0,
                                 scale,
                                 0,
                                 wa.cache,
                                 tu_vec(slots, NVFP4_MLA_DTYPE_I32, n),
                                 tu_rows(rows, NVFP4_MLA_DTYPE_BF16, n, 576, 576),
                                 NULL,
                                 {0}};
    assert_int_equal(nvfp4_op_gather(cpu, &g), NVFP4_MLA_OK);
    wa = args_for(w, 1, 0, mode, scale, 0);
    g.cache = wa.cache;
    g.slots = tu_vec(d_slots, NVFP4_MLA_DTYPE_I32, n);
    g.out = tu_rows(d_rows, NVFP4_MLA_DTYPE_BF16, n, 576, 576);
    g.slots.device_type = g.out.device_type = NVFP4_MLA_DEVICE_CUDA;
    if (nvfp4_op_gather(gpu, &g) != NVFP4_MLA_OK) fail_msg("%s", nvfp4_last_error());
    CHECK_CUDA(cudaMemcpy(got, d_rows, (size_t)n * 576 * 2, cudaMemcpyDeviceToHost));
    assert_memory_equal(got, rows, (size_t)n * 576 * 2);
    free(slots), free(rows), free(got);
    cudaFree(d_slots), cudaFree(d_rows);
}

/* Every size, layout, dtype, mode and writer policy: the CUDA bytes are the CPU writer's (the mse
 * policy's search runs the same write_policy.h arithmetic on both; rtn is the tuned fast path). */
static void cuda_writer_should_equal_the_cpu_writer_byte_for_byte(void **state) {
    (void)state;
    const int64_t sizes[] = {1, 7, 64, 513, 4096, 200000};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        if (sizes[s] > max_tokens) continue;
        for (int layout = 0; layout < 2; layout++)
            for (int is_f16 = 0; is_f16 < 2; is_f16++) {
                world_t w;
                world_init(&w, sizes[s], layout ? 432 : 368, is_f16);
                const uint32_t modes[3] = {NVFP4_MLA_SCALE_STATIC, NVFP4_MLA_SCALE_STATIC, NVFP4_MLA_SCALE_PER_TOKEN};
                const float scales[3] = {1.0f, 0.0217f / 2688, 0.0f};
                for (int m = 0; m < (layout ? 2 : 3); m++) {
                    for (uint32_t policy = 0; policy < NVFP4_MLA_WRITER_POLICY_COUNT; policy++) {
                        free(write_both(&w, is_f16, modes[m], scales[m], policy));
                        gather_both(&w, modes[m], scales[m]);
                    }
                }
                world_free(&w);
            }
        fprintf(stderr, "T=%lld: all modes, dtypes, layouts and writer policies equal\n", (long long)sizes[s]);
    }
}

static void identity_then_calibrated_layer_should_both_match_in_one_process(void **state) {
    (void)state;
    /* The specialisation defect: a kernel made for outer scale 1.0 replayed on a calibrated layer. */
    world_t a, b;
    world_init(&a, 2048, 368, 0);
    world_init(&b, 2048, 368, 0);
    free(write_both(&a, 0, NVFP4_MLA_SCALE_STATIC, 1.0f, NVFP4_MLA_WRITER_POLICY_RTN));
    free(write_both(&b, 0, NVFP4_MLA_SCALE_STATIC, 0.003f, NVFP4_MLA_WRITER_POLICY_RTN));
    gather_both(&b, NVFP4_MLA_SCALE_STATIC, 0.003f);
    free(write_both(&a, 0, NVFP4_MLA_SCALE_STATIC, 1.0f, NVFP4_MLA_WRITER_POLICY_RTN));
    world_free(&a), world_free(&b);
}

static void policies_should_alternate_in_one_process(void **state) {
    (void)state;
    /* The policy selects a kernel per launch: mse, rtn, mse again on one cache, each equal to the CPU. */
    world_t w;
    world_init(&w, 3000, 368, 0);
    const uint32_t order[] = {NVFP4_MLA_WRITER_POLICY_MSE, NVFP4_MLA_WRITER_POLICY_RTN, NVFP4_MLA_WRITER_POLICY_MSE};
    for (int k = 0; k < 3; k++) {
        free(write_both(&w, 0, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f, order[k]));
        free(write_both(&w, 0, NVFP4_MLA_SCALE_STATIC, 0.003f, order[k]));
    }
    world_free(&w);
}

static void cuda_write_should_replay_inside_a_graph_on_a_side_stream(void **state) {
    (void)state;
    world_t w;
    world_init(&w, 1000, 368, 0);
    cudaStream_t stream;
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    nvfp4_mla_write_args_t a = args_for(&w, 1, 0, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f, NVFP4_MLA_WRITER_POLICY_MSE);
    a.stream = stream;
    CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    assert_int_equal(nvfp4_op_write(gpu, &a), NVFP4_MLA_OK);
    CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
    CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    CHECK_CUDA(cudaGraphLaunch(exec, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    a = args_for(&w, 0, 0, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f, NVFP4_MLA_WRITER_POLICY_MSE);
    assert_int_equal(nvfp4_op_write(cpu, &a), NVFP4_MLA_OK);
    uint8_t *got = malloc((size_t)w.bytes_total);
    CHECK_CUDA(cudaMemcpy(got, w.d_cache, (size_t)w.bytes_total, cudaMemcpyDeviceToHost));
    assert_memory_equal(got, w.cpu_cache, (size_t)w.bytes_total);
    free(got);
    cudaGraphExecDestroy(exec), cudaGraphDestroy(graph), cudaStreamDestroy(stream);
    world_free(&w);
}

/* Issue 37, the slot rule: a slot past the capacity is refused by a CPU write before anything is
 * written; a CUDA write, which cannot see it without a sync, writes nothing for that token and counts
 * it in out_of_range_count (every other token written, as the CPU writes them with those slots as
 * padding); a host struct that ends before the counter (1.1 before issue 37) is still served. */
static void slots_past_the_cache_should_be_refused_on_the_cpu_and_counted_on_cuda(void **state) {
    (void)state;
    world_t w;
    world_init(&w, 4096, 368, 0);
    assert_true(w.out_of_range > 0);
    nvfp4_mla_write_args_t a = args_for(&w, 0, 0, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f, 0);
    a.slot_mapping.data = w.slots;
    assert_int_equal(nvfp4_op_write(cpu, &a), NVFP4_MLA_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(nvfp4_last_error(), "is at or past the cache's capacity"));
    uint8_t *untouched = malloc((size_t)w.bytes_total);
    memset(untouched, 0xA5, (size_t)w.bytes_total);
    assert_memory_equal(w.cpu_cache, untouched, (size_t)w.bytes_total); /* nothing was written */
    free(untouched);
    free(write_both(&w, 0, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f, 0)); /* bytes equal; the count checked there */
    uint64_t *d_oor, oor = 0;
    CHECK_CUDA(cudaMalloc((void **)&d_oor, sizeof(uint64_t)));
    CHECK_CUDA(cudaMemset(d_oor, 0, sizeof(uint64_t)));
    a = args_for(&w, 1, 0, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f, 0);
    a.out_of_range_count = d_oor;
    a.struct_size = (uint32_t)offsetof(nvfp4_mla_write_args_t, out_of_range_count); /* the counter is past it */
    assert_int_equal(nvfp4_op_write(gpu, &a), NVFP4_MLA_OK);
    a.struct_size = sizeof a;
    assert_int_equal(nvfp4_op_write(gpu, &a), NVFP4_MLA_OK);
    assert_int_equal(nvfp4_op_write(gpu, &a), NVFP4_MLA_OK);
    CHECK_CUDA(cudaMemcpy(&oor, d_oor, sizeof oor, cudaMemcpyDeviceToHost));
    assert_int_equal(oor, 2 * (uint64_t)w.out_of_range); /* added to, never reset: the host initialises it */
    a.out_of_range_count = (uint64_t *)((uint8_t *)d_oor + 4);
    assert_int_equal(nvfp4_op_write(gpu, &a), NVFP4_MLA_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(nvfp4_last_error(), "write: out_of_range_count"));
    cudaFree(d_oor);
    world_free(&w);
}

static void cuda_entries_should_reject_bad_arguments_before_launch(void **state) {
    (void)state;
    world_t w;
    world_init(&w, 64, 432, 0);
    nvfp4_mla_write_args_t a = args_for(&w, 1, 0, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f, 0);
    assert_int_equal(nvfp4_op_write(gpu, &a), NVFP4_MLA_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(nvfp4_last_error(), "per-token requires layout fp8_rope_368"));
    a = args_for(&w, 1, 0, NVFP4_MLA_SCALE_STATIC, 1.0f, 0);
    a.cache.data = (uint8_t *)a.cache.data + 8;
    assert_int_equal(nvfp4_op_write(gpu, &a), NVFP4_MLA_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(nvfp4_last_error(), "16-byte aligned base"));
    a = args_for(&w, 1, 0, NVFP4_MLA_SCALE_STATIC, 1.0f, 0);
    a.kv_c.device_type = NVFP4_MLA_DEVICE_CPU;
    assert_int_equal(nvfp4_op_write(gpu, &a), NVFP4_MLA_ERR_INVALID_ARGUMENT);
    a = args_for(&w, 1, 0, NVFP4_MLA_SCALE_STATIC, 1.0f, NVFP4_MLA_WRITER_POLICY_COUNT);
    assert_int_equal(nvfp4_op_write(gpu, &a), NVFP4_MLA_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(nvfp4_last_error(), "writer_policy is 2, must be 0 (rtn) or 1 (mse)"));
    uint8_t *got = malloc((size_t)w.bytes_total);
    CHECK_CUDA(cudaMemcpy(got, w.d_cache, (size_t)w.bytes_total, cudaMemcpyDeviceToHost));
    assert_memory_equal(got, w.cpu_cache, (size_t)w.bytes_total); /* nothing was written */
    free(got);
    world_free(&w);
}

/* Several host threads, each with its own CUDA context of the plugin and its own stream, writing
 * their own caches at once: every cache equals the CPU writer's bytes. */
typedef struct stream_job {
    world_t *w;
    int failures;
} stream_job_t;

static void *stream_worker(void *arg) {
    stream_job_t *job = arg;
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CUDA, 0, 0, NULL, {0}, NULL};
    nvfp4_mla_context_t *ctx;
    cudaStream_t stream;
    if (nvfp4_context_init(&init, &ctx) != NVFP4_MLA_OK || cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)) {
        job->failures++;
        return NULL;
    }
    for (int round = 0; round < 10; round++) {
        nvfp4_mla_write_args_t a = args_for(job->w, 1, 0, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f, 0);
        a.stream = stream;
        job->failures += nvfp4_op_write(ctx, &a) != NVFP4_MLA_OK;
    }
    job->failures += cudaStreamSynchronize(stream) != cudaSuccess;
    cudaStreamDestroy(stream);
    nvfp4_context_shutdown(ctx);
    return NULL;
}

static void threads_on_separate_streams_should_match_the_serial_cpu_bytes(void **state) {
    (void)state;
    enum { JOBS = 4 };
    world_t w[JOBS];
    stream_job_t jobs[JOBS];
    pthread_t th[JOBS];
    for (int i = 0; i < JOBS; i++) {
        world_init(&w[i], 3000 + 100 * i, 368, 0);
        nvfp4_mla_write_args_t a = args_for(&w[i], 0, 0, NVFP4_MLA_SCALE_PER_TOKEN, 0.0f, 0);
        assert_int_equal(nvfp4_op_write(cpu, &a), NVFP4_MLA_OK);
        jobs[i] = (stream_job_t){&w[i], 0};
    }
    for (int i = 0; i < JOBS; i++) assert_int_equal(pthread_create(&th[i], NULL, stream_worker, &jobs[i]), 0);
    for (int i = 0; i < JOBS; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < JOBS; i++) {
        assert_int_equal(jobs[i].failures, 0);
        uint8_t *got = malloc((size_t)w[i].bytes_total);
        CHECK_CUDA(cudaMemcpy(got, w[i].d_cache, (size_t)w[i].bytes_total, cudaMemcpyDeviceToHost));
        assert_memory_equal(got, w[i].cpu_cache, (size_t)w[i].bytes_total);
        free(got);
        world_free(&w[i]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cuda_writer_should_equal_the_cpu_writer_byte_for_byte),
        cmocka_unit_test(identity_then_calibrated_layer_should_both_match_in_one_process),
        cmocka_unit_test(policies_should_alternate_in_one_process),
        cmocka_unit_test(cuda_write_should_replay_inside_a_graph_on_a_side_stream),
        cmocka_unit_test(slots_past_the_cache_should_be_refused_on_the_cpu_and_counted_on_cuda),
        cmocka_unit_test(cuda_entries_should_reject_bad_arguments_before_launch),
        cmocka_unit_test(threads_on_separate_streams_should_match_the_serial_cpu_bytes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
