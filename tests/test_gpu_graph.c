/* A decode step captured through the C API with cudaStreamBeginCapture, as a host captures it: the
 * built plugin loaded by the C loader (its own statically linked CUDA runtime, beside this test's),
 * `write` of the step's new tokens, `gather` of their rows, then `attend` over top-k slots that
 * include them, on a non-blocking stream in the strictest capture mode (global). The graph is
 * replayed with new data copied into the captured buffers, step after step, and must give the bytes
 * of the same calls made eagerly on a twin cache: cache, rows, out and lse. The graph's attend
 * workspace (split-K scratch) is allocated before capture and freed only after the graph is
 * destroyed: a captured attend reads it on every replay. Also: a refused call (a short workspace)
 * returns its status before enqueuing anything, so the capture stays valid, and
 * attend_workspace_bytes answers during capture (it reads shapes only). Split-K merges: under the
 * default NVFP4_MLA_ATTEND_MERGE=auto a captured attend merges with a second kernel (a graph node of
 * its own) and an eager one inside its launch, so every replay is also checked bit for bit against
 * the other merge; with in-launch the graph holds one attend node. Eager calls whose arguments repeat
 * (the context's own prebuilt graphs, attend_launches.h) write what their structs say. And init's
 * attention settings from the host's snapshot (ABI 1.1). Exits 77 without a device. */
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

#include "gpu_loader.h"
#include "nvfp4_mla_loader.h"

#define CK(call) assert_int_equal((call), cudaSuccess)
#define OK(call) assert_int_equal((call), NVFP4_MLA_OK)

enum { BLOCKS = 64, BLOCK = 64, CAPACITY = BLOCKS * BLOCK, HISTORY = CAPACITY - 128, TOPK = 2048, STEPS = 3 };
#define RB 368
#define CACHE_BYTES ((size_t)CAPACITY * RB)

static nvfp4_mla_loader_t loader;
static const nvfp4_mla_plugin_t *plugin;
static nvfp4_mla_context_t *ctx, *default_ctx; /* ctx: the context the tests call */
static uint64_t rng = 29;

static double uniform(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-53;
}

/* bf16 bits of a Gaussian value (truncated: the test needs varied finite inputs, not rounding). */
static uint16_t bf16_gauss(void) {
    float v = (float)(sqrt(-2 * log(uniform() + 1e-300)) * cos(6.283185307179586 * uniform()));
    uint32_t u;
    memcpy(&u, &v, 4);
    return (uint16_t)(u >> 16);
}

static int setup(void **state) {
    (void)state;
    if (!(plugin = GPU_LOADER_OPEN(&loader, attend))) {
        return -1;
    }
    unsetenv("NVFP4_MLA_ATTEND_MERGE"); /* the node counts assume the default merge, auto */
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CUDA, 0, 0, NULL, {0}, NULL};
    if (plugin->init(&init, &ctx) != NVFP4_MLA_OK) {
        fprintf(stderr, "CUDA init failed: %s\n", plugin->last_error());
        return -1;
    }
    default_ctx = ctx;
    return 0;
}

/* CMocka runs the group teardown after a failed setup too: with no plugin loaded (NVFP4_MLA_PLUGIN_PATH
 * and NVFP4_MLA_PLUGIN unset, a test run by hand) or no context made, there is nothing to release. */
static int teardown(void **state) {
    (void)state;
    if (!plugin) return 0;
    if (ctx && ctx != default_ctx) plugin->shutdown(ctx); /* a failed in-launch test left its context */
    if (default_ctx) plugin->shutdown(default_ctx);
    nvfp4_mla_loader_close(&loader);
    return 0;
}

static nvfp4_mla_tensor_t dev(void *p, int32_t dtype, int ndim, const int64_t *shape) {
    nvfp4_mla_tensor_t t = {p, dtype, ndim, {0}, {0}, NVFP4_MLA_DEVICE_CUDA, 0};
    int64_t step = 1;
    for (int d = ndim - 1; d >= 0; d--)
        t.shape[d] = shape[d], t.strides[d] = step, step *= shape[d];
    return t;
}

/* One decode step's device buffers: inputs shared by both runs, a cache and outputs per run. */
typedef struct step {
    int64_t batch, heads;
    uint16_t *kv, *q;  /* [batch, 576], [batch, heads, 576] bf16 */
    int64_t *slots;    /* [batch] */
    int32_t *topk;     /* [batch, TOPK] */
    uint8_t *cache[2]; /* graph, eager */
    uint16_t *rows[2]; /* [batch, 576] bf16 */
    uint16_t *out[2];  /* [batch, heads, 512] bf16 */
    float *lse[2];     /* [batch, heads] */
    uint8_t *ws[2];
    uint64_t ws_bytes;
} step_t;

typedef struct calls {
    nvfp4_mla_write_args_t w;
    nvfp4_mla_gather_args_t g;
    nvfp4_mla_attend_args_t a;
} calls_t;

/* The argument structs of run `r` (0 = graph, 1 = eager) on `stream`. */
static calls_t calls_for(const step_t *s, int r, cudaStream_t stream) {
    const int64_t b = s->batch, h = s->heads;
    const int64_t cache_shape[] = {BLOCKS, BLOCK, RB};
    calls_t c = {.w = {.struct_size = sizeof c.w,
                       .layout = NVFP4_MLA_LAYOUT_FP8_ROPE_368,
                       .scale_mode = NVFP4_MLA_SCALE_PER_TOKEN,
                       .stream = stream},
                 .g = {.struct_size = sizeof c.g,
                       .layout = NVFP4_MLA_LAYOUT_FP8_ROPE_368,
                       .scale_mode = NVFP4_MLA_SCALE_PER_TOKEN,
                       .stream = stream},
                 .a = {.struct_size = sizeof c.a,
                       .layout = NVFP4_MLA_LAYOUT_FP8_ROPE_368,
                       .scale_mode = NVFP4_MLA_SCALE_PER_TOKEN,
                       .sm_scale = 0.0416666679f,
                       .stream = stream}};
    c.w.kv_c = dev(s->kv, NVFP4_MLA_DTYPE_BF16, 2, (int64_t[]){b, 512});
    c.w.k_pe = dev(s->kv + 512, NVFP4_MLA_DTYPE_BF16, 2, (int64_t[]){b, 64});
    c.w.kv_c.strides[0] = c.w.k_pe.strides[0] = 576;
    c.w.slot_mapping = dev(s->slots, NVFP4_MLA_DTYPE_I64, 1, (int64_t[]){b});
    c.w.cache = c.g.cache = c.a.cache = dev(s->cache[r], NVFP4_MLA_DTYPE_U8, 3, cache_shape);
    /* gather reads the step's new slots as int32: the first `batch` top-k entries of query 0 */
    c.g.slots = dev(s->topk, NVFP4_MLA_DTYPE_I32, 1, (int64_t[]){b});
    c.g.out = dev(s->rows[r], NVFP4_MLA_DTYPE_BF16, 2, (int64_t[]){b, 576});
    c.a.q = dev(s->q, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){b, h, 576});
    c.a.slots = dev(s->topk, NVFP4_MLA_DTYPE_I32, 2, (int64_t[]){b, TOPK});
    c.a.out = dev(s->out[r], NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){b, h, 512});
    c.a.lse = dev(s->lse[r], NVFP4_MLA_DTYPE_F32, 2, (int64_t[]){b, h});
    if (s->ws_bytes)
        c.a.workspace = dev(s->ws[r], NVFP4_MLA_DTYPE_U8, 1, (int64_t[]){(int64_t)s->ws_bytes});
    return c;
}

/* The step's buffers, and HISTORY earlier tokens written into both caches (eagerly). */
static void step_init(step_t *s, int64_t batch, int64_t heads) {
    memset(s, 0, sizeof *s);
    s->batch = batch, s->heads = heads;
    CK(cudaMalloc((void **)&s->kv, (size_t)HISTORY * 576 * 2));
    CK(cudaMalloc((void **)&s->slots, (size_t)HISTORY * 8));
    CK(cudaMalloc((void **)&s->q, (size_t)batch * heads * 576 * 2));
    CK(cudaMalloc((void **)&s->topk, (size_t)batch * TOPK * 4));
    for (int r = 0; r < 2; r++) {
        CK(cudaMalloc((void **)&s->cache[r], CACHE_BYTES));
        CK(cudaMalloc((void **)&s->rows[r], (size_t)batch * 576 * 2));
        CK(cudaMalloc((void **)&s->out[r], (size_t)batch * heads * 512 * 2));
        CK(cudaMalloc((void **)&s->lse[r], (size_t)batch * heads * 4));
    }
    uint16_t *kv = malloc((size_t)HISTORY * 576 * 2);
    int64_t *slots = malloc((size_t)HISTORY * 8);
    for (int64_t i = 0; i < HISTORY * 576; i++)
        kv[i] = bf16_gauss();
    for (int64_t i = 0; i < HISTORY; i++)
        slots[i] = i;
    CK(cudaMemcpy(s->kv, kv, (size_t)HISTORY * 576 * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(s->slots, slots, (size_t)HISTORY * 8, cudaMemcpyHostToDevice));
    free(kv), free(slots);
    /* cudaMemcpy from pageable memory may return before its DMA lands, and the calls below run on a
     * non-blocking stream that does not wait for the legacy one: let the inputs land first. */
    CK(cudaDeviceSynchronize());
    CK(cudaMemset(s->cache[0], 0, CACHE_BYTES));
    int64_t b = s->batch;
    s->batch = HISTORY; /* the history write, through the same struct builder */
    calls_t c = calls_for(s, 0, NULL);
    OK(plugin->write(ctx, &c.w));
    s->batch = b;
    CK(cudaMemcpy(s->cache[1], s->cache[0], CACHE_BYTES, cudaMemcpyDeviceToDevice));
    c = calls_for(s, 0, NULL);
    OK(plugin->attend_workspace_bytes(ctx, &c.a, &s->ws_bytes));
    for (int r = 0; r < 2 && s->ws_bytes; r++)
        CK(cudaMalloc((void **)&s->ws[r], s->ws_bytes));
}

static void step_free(step_t *s) {
    cudaFree(s->kv), cudaFree(s->slots), cudaFree(s->q), cudaFree(s->topk);
    for (int r = 0; r < 2; r++)
        cudaFree(s->cache[r]), cudaFree(s->rows[r]), cudaFree(s->out[r]), cudaFree(s->lse[r]);
    for (int r = 0; r < 2; r++)
        cudaFree(s->ws[r]);
}

/* New data in the captured input buffers: tokens at the next free slots, queries, and top-k over
 * the history and these tokens (their slots first, so attend reads what write just wrote). */
static void refill(step_t *s, int step) {
    const int64_t b = s->batch, first = HISTORY + step * b;
    uint16_t *kv = malloc((size_t)b * 576 * 2), *q = malloc((size_t)b * s->heads * 576 * 2);
    int64_t *slots = malloc((size_t)b * 8);
    int32_t *topk = malloc((size_t)b * TOPK * 4);
    for (int64_t i = 0; i < b * 576; i++)
        kv[i] = bf16_gauss();
    for (int64_t i = 0; i < b * s->heads * 576; i++)
        q[i] = bf16_gauss();
    for (int64_t i = 0; i < b; i++)
        slots[i] = first + i;
    for (int64_t i = 0; i < b * TOPK; i++) {
        int64_t e = i % TOPK;
        topk[i] = e < b ? (int32_t)(first + e) : (int32_t)(uniform() * (double)(first + b + 1)) - 1;
    }
    CK(cudaMemcpy(s->kv, kv, (size_t)b * 576 * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(s->q, q, (size_t)b * s->heads * 576 * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(s->slots, slots, (size_t)b * 8, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(s->topk, topk, (size_t)b * TOPK * 4, cudaMemcpyHostToDevice));
    free(kv), free(q), free(slots), free(topk);
    CK(cudaDeviceSynchronize()); /* as in step_init: the new inputs have landed before the non-blocking stream reads them */
}

/* The graph's and the eager run's buffer `r0`/`r1` hold the same bytes. */
static void assert_same(const void *a, const void *b, size_t bytes, const char *what, int step) {
    uint8_t *ha = malloc(bytes), *hb = malloc(bytes);
    CK(cudaMemcpy(ha, a, bytes, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb, b, bytes, cudaMemcpyDeviceToHost));
    if (memcmp(ha, hb, bytes) != 0)
        fail_msg("step %d: %s differs between the graph and the eager calls", step, what);
    free(ha), free(hb);
}

static void copy_out(const step_t *s, uint16_t *host) {
    CK(cudaMemcpy(host, s->out[1], (size_t)s->batch * s->heads * 512 * 2, cudaMemcpyDeviceToHost));
}

/* Capture once, then STEPS times: new data, replay, the same calls eagerly on the twin buffers.
 * `merge_node`: whether a captured split attend adds the merge kernel's node (the context's
 * NVFP4_MLA_ATTEND_MERGE: auto or separate). */
static void replay_should_match_eager_calls(int64_t heads, int64_t batch, bool merge_node) {
    step_t s;
    step_init(&s, batch, heads);
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    calls_t g = calls_for(&s, 0, stream), e = calls_for(&s, 1, stream);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    OK(plugin->write(ctx, &g.w));
    OK(plugin->gather(ctx, &g.g));
    OK(plugin->attend(ctx, &g.a));
    CK(cudaStreamEndCapture(stream, &graph));
    size_t nodes = 0;
    CK(cudaGraphGetNodes(graph, NULL, &nodes));
    assert_int_equal(nodes, s.ws_bytes && merge_node ? 4 : 3); /* write, gather, attend (and its merge) */
    CK(cudaGraphInstantiate(&exec, graph, 0));
    assert_same(s.cache[0], s.cache[1], CACHE_BYTES, "cache after capture (capturing runs nothing)", -1);
    const size_t out_bytes = (size_t)batch * heads * 512 * 2;
    uint16_t *previous = calloc(1, out_bytes), *current = malloc(out_bytes);
    for (int step = 0; step < STEPS; step++) {
        refill(&s, step);
        CK(cudaGraphLaunch(exec, stream));
        OK(plugin->write(ctx, &e.w));
        OK(plugin->gather(ctx, &e.g));
        OK(plugin->attend(ctx, &e.a));
        CK(cudaStreamSynchronize(stream));
        assert_same(s.cache[0], s.cache[1], CACHE_BYTES, "cache", step);
        assert_same(s.rows[0], s.rows[1], (size_t)batch * 576 * 2, "gathered rows", step);
        assert_same(s.out[0], s.out[1], out_bytes, "out", step);
        assert_same(s.lse[0], s.lse[1], (size_t)batch * heads * 4, "lse", step);
        copy_out(&s, current);
        assert_memory_not_equal(previous, current, out_bytes); /* the replay read this step's data */
        memcpy(previous, current, out_bytes);
    }
    free(previous), free(current);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    step_free(&s); /* the graph's workspace outlives the graph, never the other way round */
    CK(cudaStreamDestroy(stream));
}

static void graph_should_replay_h16_batch1_like_eager_calls(void **state) {
    (void)state;
    replay_should_match_eager_calls(16, 1, true);
}

static void graph_should_replay_h16_batch8_like_eager_calls(void **state) {
    (void)state;
    replay_should_match_eager_calls(16, 8, true);
}

static void graph_should_replay_h128_batch1_like_eager_calls(void **state) {
    (void)state;
    replay_should_match_eager_calls(128, 1, true);
}

static void graph_should_replay_h128_batch32_like_eager_calls(void **state) {
    (void)state;
    replay_should_match_eager_calls(128, 32, true);
}

/* NVFP4_MLA_ATTEND_MERGE=in-launch: a captured split attend whose merge reads at most 128 KB of
 * partials (ATT_ONE_LAUNCH_MERGE_BYTES: 32 or 40 queries of 16 heads, 4 or 3 splits) is one node,
 * whose replays reset the workspace's arrival counters for the next (the eager calls share nothing
 * with the graph's). */
static void graph_should_replay_the_merge_in_the_launch_like_eager_calls(void **state) {
    (void)state;
    setenv("NVFP4_MLA_ATTEND_MERGE", "in-launch", 1);
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CUDA, 0, 0, NULL, {0}, NULL};
    const nvfp4_mla_status_t st = plugin->init(&init, &ctx);
    unsetenv("NVFP4_MLA_ATTEND_MERGE");
    if (st != NVFP4_MLA_OK) fail_msg("init (in-launch): %s", plugin->last_error());
    replay_should_match_eager_calls(16, 32, false);
    replay_should_match_eager_calls(16, 40, false);
    plugin->shutdown(ctx);
    ctx = default_ctx;
}

/* The prebuilt-graph lines the plugin logs (DEBUG, one a graph built; WARN, one a build that failed). */
static int graphs_logged, graph_failures_logged;

static void count_graph_lines(void *user, int32_t level, const char *line) {
    (void)user;
    if (strstr(line, "now one prebuilt graph")) graphs_logged++;
    if (level == NVFP4_MLA_LOG_WARN && strstr(line, "could not build a launch graph")) graph_failures_logged++;
}

/* Calls per struct before its graph: ATT_LAUNCH_BUILD_AT (kernels/attend/attend_launches.h). */
enum { GRAPH_AT = 4 };

/* An eager attend whose arguments repeat launches, from its GRAPH_AT-th call on, the graph the
 * context built of its kernels (kernels/attend/attend_launches.h): every call must still be the call
 * its struct describes. GRAPH_AT + 1 calls of one struct (direct, graph built, graph reused) write the
 * same bytes, a direct call's merge in the launch and the graph's merge kernel included, and the log
 * says the graph was built once, at that call; the struct pointed at another out and lse writes there
 * (its own graph) and leaves the old buffers alone; and new data in the inputs is read. A context of
 * its own, with a log sink. */
static void eager_repeats_should_write_what_their_arguments_say(int64_t heads, int64_t batch) {
    nvfp4_mla_host_desc_t host = {sizeof host, 0, "test_gpu_graph", count_graph_lines, NULL};
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CUDA, 0, 0, &host, {0}, NULL};
    nvfp4_mla_context_t *logged = NULL;
    OK(plugin->init(&init, &logged));
    graphs_logged = graph_failures_logged = 0;
    step_t s;
    step_init(&s, batch, heads);
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    refill(&s, 0);
    const size_t out_bytes = (size_t)batch * heads * 512 * 2, lse_bytes = (size_t)batch * heads * 4;
    uint16_t *first = malloc(out_bytes), *got = malloc(out_bytes), *poison = malloc(out_bytes);
    float *first_lse = malloc(lse_bytes), *got_lse = malloc(lse_bytes);
    memset(poison, 0xFF, out_bytes);
    calls_t e = calls_for(&s, 1, stream);
    for (int call = 1; call <= GRAPH_AT + 1; call++) {
        CK(cudaMemsetAsync(s.out[1], 0xFF, out_bytes, stream));
        CK(cudaMemsetAsync(s.lse[1], 0xFF, lse_bytes, stream));
        OK(plugin->attend(logged, &e.a));
        CK(cudaStreamSynchronize(stream));
        assert_int_equal(graphs_logged, call >= GRAPH_AT ? 1 : 0);
        CK(cudaMemcpy(call > 1 ? got : first, s.out[1], out_bytes, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(call > 1 ? got_lse : first_lse, s.lse[1], lse_bytes, cudaMemcpyDeviceToHost));
        if (call > 1 && (memcmp(first, got, out_bytes) || memcmp(first_lse, got_lse, lse_bytes)))
            fail_msg("h %lld batch %lld: eager call %d of one struct differs from the first", (long long)heads,
                     (long long)batch, call);
    }
    assert_memory_not_equal(first, poison, out_bytes);
    /* The same struct with out and lse moved to run 0's buffers: written there, run 1's left poisoned.
     * The poison goes on the calls' stream: a non-blocking stream does not wait for the legacy stream's
     * cudaMemset, which could land after a stray write and hide it. */
    calls_t moved = e;
    moved.a.out.data = s.out[0], moved.a.lse.data = s.lse[0];
    CK(cudaMemsetAsync(s.out[1], 0xFF, out_bytes, stream));
    CK(cudaMemsetAsync(s.lse[1], 0xFF, lse_bytes, stream));
    for (int call = 1; call <= GRAPH_AT + 1; call++) {
        CK(cudaMemsetAsync(s.out[0], 0xFF, out_bytes, stream));
        CK(cudaMemsetAsync(s.lse[0], 0xFF, lse_bytes, stream));
        OK(plugin->attend(logged, &moved.a));
        CK(cudaStreamSynchronize(stream));
        assert_int_equal(graphs_logged, call >= GRAPH_AT ? 2 : 1);
        CK(cudaMemcpy(got, s.out[0], out_bytes, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(got_lse, s.lse[0], lse_bytes, cudaMemcpyDeviceToHost));
        assert_memory_equal(got, first, out_bytes);
        assert_memory_equal(got_lse, first_lse, lse_bytes);
    }
    CK(cudaMemcpy(got, s.out[1], out_bytes, cudaMemcpyDeviceToHost));
    assert_memory_equal(got, poison, out_bytes);
    CK(cudaMemcpy(got_lse, s.lse[1], lse_bytes, cudaMemcpyDeviceToHost));
    assert_memory_equal(got_lse, poison, lse_bytes); /* poison: out_bytes >= lse_bytes of 0xFF */
    /* New queries under the first struct (its graph built): the output follows them, bit for bit what a
     * struct this test has not called writes (run 0's cache, a copy of run 1's, its own workspace and
     * outputs: its first call, a direct launch). */
    refill(&s, 1);
    OK(plugin->attend(logged, &e.a));
    const calls_t fresh = calls_for(&s, 0, stream);
    OK(plugin->attend(logged, &fresh.a));
    CK(cudaStreamSynchronize(stream));
    assert_same(s.out[0], s.out[1], out_bytes, "out of new queries", 1);
    assert_same(s.lse[0], s.lse[1], lse_bytes, "lse of new queries", 1);
    CK(cudaMemcpy(got, s.out[1], out_bytes, cudaMemcpyDeviceToHost));
    assert_memory_not_equal(got, first, out_bytes);
    assert_int_equal(graphs_logged, 2);
    assert_int_equal(graph_failures_logged, 0);
    free(first), free(got), free(poison), free(first_lse), free(got_lse);
    step_free(&s);
    CK(cudaStreamDestroy(stream));
    OK(plugin->shutdown(logged));
}

static void eager_repeats_should_follow_their_arguments_h16_batch1(void **state) {
    (void)state;
    eager_repeats_should_write_what_their_arguments_say(16, 1); /* 32 splits: the merge kernel */
}

static void eager_repeats_should_follow_their_arguments_h16_batch32(void **state) {
    (void)state;
    eager_repeats_should_write_what_their_arguments_say(16, 32); /* a direct call merges in the launch */
}

static void eager_repeats_should_follow_their_arguments_h128_batch8(void **state) {
    (void)state;
    eager_repeats_should_write_what_their_arguments_say(128, 8); /* the wide kind, split */
}

static void eager_repeats_should_follow_their_arguments_h128_batch64(void **state) {
    (void)state;
    eager_repeats_should_write_what_their_arguments_say(128, 64); /* unsplit: one kernel in the graph */
}

/* NVFP4_MLA_ATTEND_GRAPHS=off (the host's snapshot): GRAPH_AT + 1 eager calls of one struct build no
 * graph (none logged) and write what a context with graphs writes. */
static void graphs_off_should_launch_every_call_directly(void **state) {
    (void)state;
    nvfp4_mla_host_desc_t host = {sizeof host, 0, "test_gpu_graph", count_graph_lines, NULL};
    const char *off[] = {"NVFP4_MLA_ATTEND_GRAPHS=off", NULL};
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CUDA, 0, 0, &host, {0}, off};
    nvfp4_mla_context_t *direct = NULL;
    OK(plugin->init(&init, &direct));
    graphs_logged = graph_failures_logged = 0;
    step_t s;
    step_init(&s, 8, 128);
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    refill(&s, 0);
    const calls_t e = calls_for(&s, 1, stream), g = calls_for(&s, 0, stream);
    for (int call = 1; call <= GRAPH_AT + 1; call++) {
        OK(plugin->attend(direct, &e.a));
        OK(plugin->attend(ctx, &g.a)); /* the default context: its graph from call GRAPH_AT */
    }
    CK(cudaStreamSynchronize(stream));
    assert_int_equal(graphs_logged, 0);
    assert_same(s.out[0], s.out[1], (size_t)8 * 128 * 512 * 2, "out with and without graphs", 0);
    assert_same(s.lse[0], s.lse[1], (size_t)8 * 128 * 4, "lse with and without graphs", 0);
    step_free(&s);
    CK(cudaStreamDestroy(stream));
    OK(plugin->shutdown(direct));
}

/* A CUDA context reads its attention settings from the host's snapshot (init_args.environ, ABI
 * 1.1) when one is passed, ignoring the process environment; a 1.0-sized struct (no snapshot)
 * reads the process environment. */
static void init_should_read_the_attention_settings_from_the_host_snapshot(void **state) {
    (void)state;
    setenv("NVFP4_MLA_ATTEND_MMA", "bogus", 1); /* the process's value: refused when read */
    const char *good[] = {"NVFP4_MLA_ATTEND_MERGE=in-launch", NULL};
    const char *bad[] = {"NVFP4_MLA_ATTEND_MMA=wgmma", NULL};
    nvfp4_mla_init_args_t init = {sizeof init, NVFP4_MLA_DEVICE_CUDA, 0, 0, NULL, {0}, good};
    nvfp4_mla_context_t *c = NULL;
    const nvfp4_mla_status_t from_snapshot = plugin->init(&init, &c);
    if (c) plugin->shutdown(c);
    init.environ = bad;
    const nvfp4_mla_status_t refused = plugin->init(&init, &c);
    if (refused == NVFP4_MLA_OK) plugin->shutdown(c);
    char refused_message[512];
    snprintf(refused_message, sizeof refused_message, "%s", plugin->last_error());
    init.struct_size = (uint32_t)offsetof(nvfp4_mla_init_args_t, environ); /* a 1.0 host */
    const nvfp4_mla_status_t from_process = plugin->init(&init, &c);
    if (from_process == NVFP4_MLA_OK) plugin->shutdown(c);
    unsetenv("NVFP4_MLA_ATTEND_MMA");
    assert_int_equal(from_snapshot, NVFP4_MLA_OK);
    assert_int_equal(refused, NVFP4_MLA_ERR_CONFIG);
    assert_non_null(strstr(refused_message, "NVFP4_MLA_ATTEND_MMA=\"wgmma\" is not one of: auto, sync"));
    assert_int_equal(from_process, NVFP4_MLA_ERR_CONFIG);
    assert_non_null(strstr(plugin->last_error(), "NVFP4_MLA_ATTEND_MMA=\"bogus\""));
}

/* A refused call returns before enqueuing anything: the capture goes on, and the graph holds only
 * what succeeded. */
static void refused_call_should_leave_the_capture_valid(void **state) {
    (void)state;
    step_t s;
    step_init(&s, 1, 16);
    if (s.ws_bytes == 0) {
        step_free(&s);
        skip(); /* this device's plan for one query does not split: nothing to shorten */
    }
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    calls_t g = calls_for(&s, 0, stream);
    g.a.workspace.shape[0] = (int64_t)s.ws_bytes - 1;
    CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    uint64_t need = 0;
    OK(plugin->attend_workspace_bytes(ctx, &g.a, &need)); /* host arithmetic: fine during capture */
    assert_int_equal(need, s.ws_bytes);
    assert_int_equal(plugin->attend(ctx, &g.a), NVFP4_MLA_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(plugin->last_error(), "attend_workspace_bytes"));
    enum cudaStreamCaptureStatus status;
    CK(cudaStreamIsCapturing(stream, &status));
    assert_int_equal(status, cudaStreamCaptureStatusActive);
    OK(plugin->write(ctx, &g.w));
    cudaGraph_t graph;
    CK(cudaStreamEndCapture(stream, &graph));
    size_t nodes = 0;
    CK(cudaGraphGetNodes(graph, NULL, &nodes));
    assert_int_equal(nodes, 1); /* the write kernel */
    CK(cudaGraphDestroy(graph));
    step_free(&s);
    CK(cudaStreamDestroy(stream));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(graph_should_replay_h16_batch1_like_eager_calls),
        cmocka_unit_test(graph_should_replay_h16_batch8_like_eager_calls),
        cmocka_unit_test(graph_should_replay_h128_batch1_like_eager_calls),
        cmocka_unit_test(graph_should_replay_h128_batch32_like_eager_calls),
        cmocka_unit_test(graph_should_replay_the_merge_in_the_launch_like_eager_calls),
        cmocka_unit_test(refused_call_should_leave_the_capture_valid),
        cmocka_unit_test(eager_repeats_should_follow_their_arguments_h16_batch1),
        cmocka_unit_test(eager_repeats_should_follow_their_arguments_h16_batch32),
        cmocka_unit_test(eager_repeats_should_follow_their_arguments_h128_batch8),
        cmocka_unit_test(eager_repeats_should_follow_their_arguments_h128_batch64),
        cmocka_unit_test(graphs_off_should_launch_every_call_directly),
        cmocka_unit_test(init_should_read_the_attention_settings_from_the_host_snapshot),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
