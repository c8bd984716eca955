/* Several threads at once through the real plugin (loaded by the C loader), each with its own
 * context: writes and gathers on separate caches give exactly the serial results; init/shutdown
 * and configuration create/destroy race freely; each thread sees only its own last error. Run
 * under ThreadSanitizer by .ci/run. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "nvfp4_mla_loader.h"

enum { THREADS = 4, T = 96, ROUNDS = 20 };

static nvfp4_mla_loader_t loader;
static const nvfp4_mla_plugin_t *plugin;

static int setup(void **state) {
    (void)state;
    char msg[1024];
    if (nvfp4_mla_loader_open(&loader, getenv("NVFP4_MLA_PLUGIN_PATH"), msg, sizeof msg) != NVFP4_MLA_LOAD_OK) {
        fprintf(stderr, "%s\n", msg);
        return -1;
    }
    plugin = loader.table;
    /* The members called below lie past NVFP4_MLA_TABLE_MIN_SIZE: the table must hold them. */
    if (!NVFP4_MLA_TABLE_HAS(plugin, config_destroy) || !NVFP4_MLA_TABLE_HAS(plugin, gather)) {
        fprintf(stderr, "the plugin's table (%u bytes) lacks config/write/gather\n", plugin->header.struct_size);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    nvfp4_mla_loader_close(&loader);
    return 0;
}

static nvfp4_mla_tensor_t tensor(void *p, int32_t dtype, int ndim, int64_t s0, int64_t s1, int64_t s2, int64_t st0,
                                 int64_t st1) {
    nvfp4_mla_tensor_t t = {p, dtype, ndim, {s0, s1, s2, 0}, {st0, st1, ndim == 3 ? 1 : 0, 0}, NVFP4_MLA_DEVICE_CPU, 0};
    if (ndim == 1) t.strides[0] = 1, t.strides[1] = 0;
    return t;
}

/* One worker's job: its own tokens (seeded by `id`), its own cache and rows. */
typedef struct job {
    int id;
    uint16_t tokens[T * 576];
    uint8_t cache[T * 368];
    uint16_t rows[T * 576];
    int failures;
} job_t;

static void make_tokens(job_t *j) {
    uint32_t s = 2654435761u * (uint32_t)(j->id + 1);
    for (int i = 0; i < T * 576; i++) {
        s = s * 1664525u + 1013904223u;
        j->tokens[i] = (uint16_t)(0x3800 + ((s >> 16) & 0x0FFF) + ((s & 1) << 15)); /* finite bf16 */
    }
}

static int run_job(nvfp4_mla_context_t *ctx, job_t *j) {
    int64_t slots[T];
    int32_t gslots[T];
    for (int i = 0; i < T; i++) slots[i] = (i * 37 + j->id) % T, gslots[i] = (int32_t)i;
    nvfp4_mla_write_args_t w = {.struct_size = sizeof w, .layout = NVFP4_MLA_LAYOUT_FP8_ROPE_368,
                                .scale_mode = NVFP4_MLA_SCALE_PER_TOKEN};
    w.kv_c = tensor(j->tokens, NVFP4_MLA_DTYPE_BF16, 2, T, 512, 0, 576, 1);
    w.k_pe = tensor(j->tokens + 512, NVFP4_MLA_DTYPE_BF16, 2, T, 64, 0, 576, 1);
    w.slot_mapping = tensor(slots, NVFP4_MLA_DTYPE_I64, 1, T, 0, 0, 1, 0);
    w.cache = tensor(j->cache, NVFP4_MLA_DTYPE_U8, 3, T / 8, 8, 368, 8 * 368, 368);
    nvfp4_mla_gather_args_t g = {.struct_size = sizeof g, .layout = NVFP4_MLA_LAYOUT_FP8_ROPE_368,
                                 .scale_mode = NVFP4_MLA_SCALE_PER_TOKEN, .cache = w.cache};
    g.slots = tensor(gslots, NVFP4_MLA_DTYPE_I32, 1, T, 0, 0, 1, 0);
    g.out = tensor(j->rows, NVFP4_MLA_DTYPE_BF16, 2, T, 576, 0, 576, 1);
    return plugin->write(ctx, &w) != NVFP4_MLA_OK || plugin->gather(ctx, &g) != NVFP4_MLA_OK;
}

static job_t serial[THREADS], parallel[THREADS];

static void *worker(void *arg) {
    job_t *j = arg;
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CPU, 0, 0, NULL, {0}, NULL};
    for (int round = 0; round < ROUNDS; round++) {
        nvfp4_mla_context_t *ctx;
        if (plugin->init(&init, &ctx) != NVFP4_MLA_OK) {
            j->failures++;
            continue;
        }
        j->failures += run_job(ctx, j);
        j->failures += memcmp(j->cache, serial[j->id].cache, sizeof j->cache) != 0;
        j->failures += memcmp(j->rows, serial[j->id].rows, sizeof j->rows) != 0;
        plugin->shutdown(ctx);
    }
    return NULL;
}

static void threads_should_reproduce_the_serial_results(void **state) {
    (void)state;
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CPU, 0, 0, NULL, {0}, NULL};
    nvfp4_mla_context_t *ctx;
    assert_int_equal(plugin->init(&init, &ctx), NVFP4_MLA_OK);
    for (int i = 0; i < THREADS; i++) {
        serial[i].id = parallel[i].id = i;
        make_tokens(&serial[i]);
        make_tokens(&parallel[i]);
        assert_int_equal(run_job(ctx, &serial[i]), 0);
    }
    plugin->shutdown(ctx);
    assert_memory_not_equal(serial[0].cache, serial[1].cache, sizeof serial[0].cache); /* distinct jobs */
    pthread_t th[THREADS];
    for (int i = 0; i < THREADS; i++) assert_int_equal(pthread_create(&th[i], NULL, worker, &parallel[i]), 0);
    for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < THREADS; i++) assert_int_equal(parallel[i].failures, 0);
}

/* Racing lifecycles and per-thread error text. */
static void *churn(void *arg) {
    intptr_t id = (intptr_t)arg, bad = 0;
    char want[64];
    snprintf(want, sizeof want, "device_index is %d, must be 0 for the CPU", (int)id + 1);
    const char *env[] = {"KV_FP8_ROPE=1", "VLLM_NVFP4_MLA_DYNAMIC_SCALE=1", NULL};
    for (int round = 0; round < 200; round++) {
        nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CPU, (int32_t)id + 1, 0, NULL, {0}, NULL};
        nvfp4_mla_context_t *ctx = NULL;
        bad += plugin->init(&init, &ctx) != NVFP4_MLA_ERR_INVALID_ARGUMENT || !strstr(plugin->last_error(), want);
        init.device_index = 0;
        bad += plugin->init(&init, &ctx) != NVFP4_MLA_OK;
        nvfp4_mla_config_request_t req = {sizeof req, 0, "nvfp4_ds_mla", NULL, env, NULL, {0}};
        nvfp4_mla_config_t *cfg = NULL;
        bad += plugin->config_create(&req, &cfg) != NVFP4_MLA_OK;
        plugin->config_destroy(cfg);
        bad += plugin->shutdown(ctx) != NVFP4_MLA_OK;
    }
    return (void *)bad;
}

static void init_shutdown_and_errors_should_race_safely(void **state) {
    (void)state;
    pthread_t th[8];
    for (intptr_t i = 0; i < 8; i++) assert_int_equal(pthread_create(&th[i], NULL, churn, (void *)i), 0);
    for (int i = 0; i < 8; i++) {
        void *bad;
        pthread_join(th[i], &bad);
        assert_int_equal((intptr_t)bad, 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(threads_should_reproduce_the_serial_results),
        cmocka_unit_test(init_shutdown_and_errors_should_race_safely),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
