/* CUDA merge against the CPU merge, through the built plugin and the C loader as a host calls it
 * (one CPU and one CUDA context of the same table): P = 1..8, h in {1, 16, 128}, n_q in {1, 7, 128},
 * bf16 and f32 partials, contiguous arrays (the kernel's 4-wide loads) and odd strides (its scalar
 * path), empty parts (lse -inf) whose out holds NaN, rows with no part at all, lse far apart. Bound
 * (nvfp4_mla_ops.h): out |gpu - cpu| <= 2^-7 |cpu| (one bf16 ulp: f32 and double sums may round
 * to neighbours) + 1e-5 max|out_p|, lse 1e-6 max(|lse|, 1); -inf
 * rows exactly zeros and -inf. A NaN or +inf lse, which the CPU entry refuses, makes that row NaN on
 * CUDA and leaves the others alone. Graph capture: merge captured in global mode on a non-blocking
 * stream, replayed with new data, equals eager calls byte for byte; a refused merge leaves the
 * capture valid. Exits 77 without a CUDA device. */
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

#include "gpu_loader.h"
#include "nvfp4_mla_loader.h"

#define CK(call) assert_int_equal((call), cudaSuccess)
#define OK(call) assert_int_equal((call), NVFP4_MLA_OK)

static nvfp4_mla_loader_t loader;
static const nvfp4_mla_plugin_t *plugin;
static nvfp4_mla_context_t *cpu, *gpu;
static uint64_t rng = 41;

static double uniform(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (double)(rng >> 11) * 0x1p-53;
}
static double gauss(void) {
    return sqrt(-2 * log(uniform() + 1e-300)) * cos(6.283185307179586 * uniform());
}
static float bf16_value(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float v;
    memcpy(&v, &u, 4);
    return v;
}
static uint16_t bf16_of(float v) { /* round to nearest even; NaN stays NaN */
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

static int setup(void **state) {
    (void)state;
    if (!(plugin = GPU_LOADER_OPEN(&loader, merge))) {
        return -1;
    }
    nvfp4_mla_init_args_t on_cpu = {sizeof on_cpu, NVFP4_MLA_DEVICE_CPU, 0, 0, NULL, {0}, NULL};
    nvfp4_mla_init_args_t on_gpu = {sizeof on_gpu, NVFP4_MLA_DEVICE_CUDA, 0, 0, NULL, {0}, NULL};
    if (plugin->init(&on_cpu, &cpu) != NVFP4_MLA_OK || plugin->init(&on_gpu, &gpu) != NVFP4_MLA_OK) {
        fprintf(stderr, "init failed: %s\n", plugin->last_error());
        return -1;
    }
    return 0;
}

/* After a failed setup too (CMocka runs it): only what setup made (test_gpu_graph.c's teardown). */
static int teardown(void **state) {
    (void)state;
    if (!plugin) return 0;
    if (cpu) plugin->shutdown(cpu);
    if (gpu) plugin->shutdown(gpu);
    nvfp4_mla_loader_close(&loader);
    return 0;
}

/* One merge: shapes, strides (elements) and host buffers; device copies made per call. */
typedef struct merge_case {
    int64_t parts, nq, h;
    int f32;                         /* partial_out dtype */
    int64_t po_strides[4], pl_strides[3], out_strides[3];
    size_t po_elems, pl_elems, out_elems, po_offset; /* po_offset: elements before partial_out's base */
    void *po;                        /* partial_out host buffer (po_offset + po_elems elements) */
    float *pl;
    uint16_t *out_cpu, *out_gpu;
    float *lse_cpu, *lse_gpu;
} merge_case_t;

static size_t extent(const int64_t *shape, const int64_t *strides, int ndim) {
    size_t last = 0;
    for (int d = 0; d < ndim; d++) last += (size_t)((shape[d] - 1) * strides[d]);
    return last + 1;
}

/* Contiguous (odd = 0), or padded rows with an odd head stride and a base one element in (odd = 1,
 * which rules the 4-wide path out). lse stored [h, n_q, P] in both. */
static void case_shape(merge_case_t *c, int odd) {
    const int64_t p = c->parts, nq = c->nq, h = c->h, row = 512 + (odd ? 3 : 0);
    int64_t po[4] = {nq * h * row, h * row, row, 1}, pl[3] = {1, p, nq * p};
    int64_t out[3] = {h * (512 + (odd ? 1 : 0)), 512 + (odd ? 1 : 0), 1};
    memcpy(c->po_strides, po, sizeof po), memcpy(c->pl_strides, pl, sizeof pl), memcpy(c->out_strides, out, sizeof out);
    c->po_offset = odd ? 1 : 0;
    c->po_elems = extent((int64_t[]){p, nq, h, 512}, po, 4);
    c->pl_elems = extent((int64_t[]){p, nq, h}, pl, 3);
    c->out_elems = extent((int64_t[]){nq, h, 512}, out, 3);
}

/* Random lse (20% of (part, row) pairs empty, the last row empty in every part, parts up to 30
 * apart) and partial outs (NaN in the empty parts: never read). */
static void case_fill(merge_case_t *c) {
    const size_t es = c->f32 ? 4 : 2;
    c->po = calloc(c->po_offset + c->po_elems, es);
    c->pl = calloc(c->pl_elems, 4);
    for (int64_t p = 0; p < c->parts; p++)
        for (int64_t q = 0; q < c->nq; q++)
            for (int64_t j = 0; j < c->h; j++) {
                const int empty = uniform() < 0.2 || (q == c->nq - 1 && c->nq > 1);
                const float lse = empty ? -INFINITY : (float)(5 * gauss() - (uniform() < 0.1 ? 30 : 0));
                c->pl[p * c->pl_strides[0] + q * c->pl_strides[1] + j * c->pl_strides[2]] = lse;
                const size_t base =
                    c->po_offset + (size_t)(p * c->po_strides[0] + q * c->po_strides[1] + j * c->po_strides[2]);
                for (int i = 0; i < 512; i++) {
                    const float v = empty ? NAN : (float)gauss();
                    if (c->f32) ((float *)c->po)[base + (size_t)i] = v;
                    else ((uint16_t *)c->po)[base + (size_t)i] = bf16_of(v);
                }
            }
    c->out_cpu = calloc(c->out_elems, 2), c->out_gpu = calloc(c->out_elems, 2);
    c->lse_cpu = calloc((size_t)(c->nq * c->h), 4), c->lse_gpu = calloc((size_t)(c->nq * c->h), 4);
}

static nvfp4_mla_tensor_t desc(void *p, int32_t dtype, int ndim, const int64_t *shape, const int64_t *strides,
                               int dev) {
    nvfp4_mla_tensor_t t = {p, dtype, ndim, {0}, {0}, dev, 0};
    for (int d = 0; d < ndim; d++) t.shape[d] = shape[d], t.strides[d] = strides[d];
    return t;
}

static nvfp4_mla_merge_args_t case_args(const merge_case_t *c, void *po, float *pl, uint16_t *out, float *lse, int dev,
                                        cudaStream_t stream) {
    nvfp4_mla_merge_args_t a = {.struct_size = sizeof a, .stream = stream};
    a.partial_out = desc(po, c->f32 ? NVFP4_MLA_DTYPE_F32 : NVFP4_MLA_DTYPE_BF16, 4,
                         (int64_t[]){c->parts, c->nq, c->h, 512}, c->po_strides, dev);
    a.partial_lse = desc(pl, NVFP4_MLA_DTYPE_F32, 3, (int64_t[]){c->parts, c->nq, c->h}, c->pl_strides, dev);
    a.out = desc(out, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){c->nq, c->h, 512}, c->out_strides, dev);
    a.lse = desc(lse, NVFP4_MLA_DTYPE_F32, 2, (int64_t[]){c->nq, c->h}, (int64_t[]){c->h, 1}, dev);
    return a;
}

/* The device copies of a case's inputs and outputs (outputs poisoned: every element is written). */
typedef struct device_bufs {
    void *po_base, *po;
    float *pl, *lse;
    uint16_t *out;
} device_bufs_t;

static device_bufs_t to_device(const merge_case_t *c) {
    const size_t es = c->f32 ? 4 : 2;
    device_bufs_t d;
    CK(cudaMalloc(&d.po_base, (c->po_offset + c->po_elems) * es));
    CK(cudaMemcpy(d.po_base, c->po, (c->po_offset + c->po_elems) * es, cudaMemcpyHostToDevice));
    d.po = (char *)d.po_base + c->po_offset * es;
    CK(cudaMalloc((void **)&d.pl, c->pl_elems * 4));
    CK(cudaMemcpy(d.pl, c->pl, c->pl_elems * 4, cudaMemcpyHostToDevice));
    CK(cudaMalloc((void **)&d.out, c->out_elems * 2));
    CK(cudaMemset(d.out, 0xFF, c->out_elems * 2));
    CK(cudaMalloc((void **)&d.lse, (size_t)(c->nq * c->h) * 4));
    CK(cudaMemset(d.lse, 0xFF, (size_t)(c->nq * c->h) * 4));
    return d;
}

static void free_device(device_bufs_t *d) {
    cudaFree(d->po_base), cudaFree(d->pl), cudaFree(d->out), cudaFree(d->lse);
}

/* Both backends on the case's inputs: the CPU's outputs in out_cpu/lse_cpu, CUDA's in out_gpu/lse_gpu. */
static void case_run(merge_case_t *c) {
    const size_t es = c->f32 ? 4 : 2;
    nvfp4_mla_merge_args_t a = case_args(c, (char *)c->po + c->po_offset * es, c->pl, c->out_cpu, c->lse_cpu,
                                         NVFP4_MLA_DEVICE_CPU, NULL);
    if (plugin->merge(cpu, &a) != NVFP4_MLA_OK) fail_msg("cpu: %s", plugin->last_error());
    device_bufs_t d = to_device(c);
    a = case_args(c, d.po, d.pl, d.out, d.lse, NVFP4_MLA_DEVICE_CUDA, NULL);
    if (plugin->merge(gpu, &a) != NVFP4_MLA_OK) fail_msg("gpu: %s", plugin->last_error());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(c->out_gpu, d.out, c->out_elems * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(c->lse_gpu, d.lse, (size_t)(c->nq * c->h) * 4, cudaMemcpyDeviceToHost));
    free_device(&d);
}

static double case_vmax(const merge_case_t *c) {
    double vmax = 0;
    for (size_t i = 0; i < c->po_elems; i++) {
        const float v = c->f32 ? ((float *)c->po)[c->po_offset + i] : bf16_value(((uint16_t *)c->po)[c->po_offset + i]);
        vmax = isnan(v) ? vmax : fmax(vmax, fabs(v));
    }
    return vmax;
}

/* The bound of nvfp4_mla_ops.h on every element; worst[0..1]: out beyond 2^-7 rel (of vmax), lse. */
static void case_check(const merge_case_t *c, double *worst) {
    const double vmax = case_vmax(c);
    for (int64_t q = 0; q < c->nq; q++)
        for (int64_t j = 0; j < c->h; j++) {
            const size_t row = (size_t)(q * c->out_strides[0] + j * c->out_strides[1]);
            for (int i = 0; i < 512; i++) {
                const double want = bf16_value(c->out_cpu[row + (size_t)i]),
                             got = bf16_value(c->out_gpu[row + (size_t)i]);
                const double beyond = fabs(got - want) - 0x1p-7 * fabs(want);
                if (!(beyond <= 1e-5 * vmax))
                    fail_msg("P %lld nq %lld h %lld f32 %d: out[%lld, %lld, %d] gpu %.9g cpu %.9g", (long long)c->parts,
                             (long long)c->nq, (long long)c->h, c->f32, (long long)q, (long long)j, i, got, want);
                worst[0] = fmax(worst[0], beyond / vmax);
            }
            const float lc = c->lse_cpu[q * c->h + j], lg = c->lse_gpu[q * c->h + j];
            if (isinf(lc)) {
                if (!(isinf(lg) && lg < 0))
                    fail_msg("lse[%lld, %lld]: gpu %g, cpu -inf", (long long)q, (long long)j, lg);
                continue;
            }
            if (!(fabs((double)lg - lc) <= 1e-6 * fmax(fabs(lc), 1.0)))
                fail_msg("P %lld: lse[%lld, %lld] gpu %.9g cpu %.9g", (long long)c->parts, (long long)q, (long long)j,
                         lg, lc);
            worst[1] = fmax(worst[1], fabs((double)lg - lc));
        }
}

static void case_free(merge_case_t *c) {
    free(c->po), free(c->pl), free(c->out_cpu), free(c->out_gpu), free(c->lse_cpu), free(c->lse_gpu);
}

static void cuda_merge_should_match_the_cpu_merge(void **state) {
    (void)state;
    const int64_t heads[3] = {1, 16, 128}, queries[3] = {1, 7, 128};
    double worst[2] = {0, 0};
    for (int64_t parts = 1; parts <= 8; parts++)
        for (int hi = 0; hi < 3; hi++)
            for (int f32 = 0; f32 < 2; f32++)
                for (int odd = 0; odd < 2; odd++) {
                    merge_case_t c = {.parts = parts, .nq = queries[(parts + hi) % 3], .h = heads[hi], .f32 = f32};
                    case_shape(&c, odd);
                    case_fill(&c);
                    case_run(&c);
                    case_check(&c, worst);
                    case_free(&c);
                }
    fprintf(stderr, "cuda merge vs cpu: out beyond 2^-7 rel: %.2e of max|out_p| (bound 1e-5), max |lse diff| %.2e\n",
            worst[0], worst[1]);
}

/* A NaN or +inf lse is no attention's: the CPU refuses it; CUDA marks that row NaN, nothing else. */
static void cuda_merge_should_mark_rows_with_a_nan_or_infinite_lse(void **state) {
    (void)state;
    merge_case_t c = {.parts = 3, .nq = 2, .h = 16, .f32 = 1};
    case_shape(&c, 0);
    case_fill(&c);
    c.pl[0 * c.pl_strides[0] + 0 * c.pl_strides[1] + 3 * c.pl_strides[2]] = NAN;
    c.pl[2 * c.pl_strides[0] + 0 * c.pl_strides[1] + 5 * c.pl_strides[2]] = INFINITY;
    nvfp4_mla_merge_args_t a = case_args(&c, c.po, c.pl, c.out_cpu, c.lse_cpu, NVFP4_MLA_DEVICE_CPU, NULL);
    assert_int_equal(plugin->merge(cpu, &a), NVFP4_MLA_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(plugin->last_error(), "merge: partial_lse[0, 0, 3] is nan"));
    device_bufs_t d = to_device(&c);
    a = case_args(&c, d.po, d.pl, d.out, d.lse, NVFP4_MLA_DEVICE_CUDA, NULL);
    OK(plugin->merge(gpu, &a));
    CK(cudaMemcpy(c.out_gpu, d.out, c.out_elems * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(c.lse_gpu, d.lse, (size_t)(c.nq * c.h) * 4, cudaMemcpyDeviceToHost));
    for (int64_t j = 0; j < c.h; j++) {
        const int marked = j == 3 || j == 5;
        assert_int_equal(isnan(c.lse_gpu[j]) != 0, marked);
        assert_int_equal(isnan(bf16_value(c.out_gpu[j * 512 + 7])) != 0, marked);
    }
    free_device(&d);
    case_free(&c);
}

static void copy_inputs(const merge_case_t *c, const device_bufs_t *d) {
    const size_t es = c->f32 ? 4 : 2;
    CK(cudaMemcpy(d->po_base, c->po, (c->po_offset + c->po_elems) * es, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d->pl, c->pl, c->pl_elems * 4, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize()); /* the copies ran on the legacy stream; the graph runs on another */
}

static void assert_same_bytes(const void *a, const void *b, size_t bytes, const char *what, int step) {
    uint8_t *ha = malloc(bytes), *hb = malloc(bytes);
    CK(cudaMemcpy(ha, a, bytes, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb, b, bytes, cudaMemcpyDeviceToHost));
    if (memcmp(ha, hb, bytes) != 0) fail_msg("step %d: %s differs between the graph and the eager call", step, what);
    free(ha), free(hb);
}

/* Captured once, replayed on new data three times: the eager call's bytes each time. */
static void graph_should_replay_merge_like_eager_calls(void **state) {
    (void)state;
    merge_case_t c = {.parts = 4, .nq = 32, .h = 16, .f32 = 0};
    case_shape(&c, 0);
    case_fill(&c);
    device_bufs_t g = to_device(&c), e = to_device(&c); /* e: the eager call's outputs (its inputs unused) */
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    nvfp4_mla_merge_args_t captured = case_args(&c, g.po, g.pl, g.out, g.lse, NVFP4_MLA_DEVICE_CUDA, stream);
    nvfp4_mla_merge_args_t eager = case_args(&c, g.po, g.pl, e.out, e.lse, NVFP4_MLA_DEVICE_CUDA, stream);
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    OK(plugin->merge(gpu, &captured));
    CK(cudaStreamEndCapture(stream, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    const size_t out_bytes = c.out_elems * 2, lse_bytes = (size_t)(c.nq * c.h) * 4;
    uint16_t *previous = calloc(1, out_bytes);
    for (int step = 0; step < 3; step++) {
        case_free(&c);
        case_fill(&c);
        copy_inputs(&c, &g);
        CK(cudaGraphLaunch(exec, stream));
        OK(plugin->merge(gpu, &eager));
        CK(cudaStreamSynchronize(stream));
        assert_same_bytes(g.out, e.out, out_bytes, "out", step);
        assert_same_bytes(g.lse, e.lse, lse_bytes, "lse", step);
        CK(cudaMemcpy(c.out_gpu, g.out, out_bytes, cudaMemcpyDeviceToHost));
        assert_memory_not_equal(previous, c.out_gpu, out_bytes); /* the replay read this step's data */
        memcpy(previous, c.out_gpu, out_bytes);
    }
    free(previous);
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
    CK(cudaStreamDestroy(stream));
    free_device(&g), free_device(&e);
    case_free(&c);
}

/* A refused merge returns before enqueuing anything: the capture goes on with the next call. */
static void refused_merge_should_leave_the_capture_valid(void **state) {
    (void)state;
    merge_case_t c = {.parts = 2, .nq = 4, .h = 16, .f32 = 1};
    case_shape(&c, 0);
    case_fill(&c);
    device_bufs_t d = to_device(&c);
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    nvfp4_mla_merge_args_t good = case_args(&c, d.po, d.pl, d.out, d.lse, NVFP4_MLA_DEVICE_CUDA, stream);
    nvfp4_mla_merge_args_t bad = good;
    bad.out.data = d.po; /* in place over the partials: refused */
    CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    assert_int_equal(plugin->merge(gpu, &bad), NVFP4_MLA_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(plugin->last_error(), "merge: out overlaps partial_out"));
    enum cudaStreamCaptureStatus status;
    CK(cudaStreamIsCapturing(stream, &status));
    assert_int_equal(status, cudaStreamCaptureStatusActive);
    OK(plugin->merge(gpu, &good));
    cudaGraph_t graph;
    CK(cudaStreamEndCapture(stream, &graph));
    size_t nodes = 0;
    CK(cudaGraphGetNodes(graph, NULL, &nodes));
    assert_int_equal(nodes, 1); /* the good merge's kernel */
    CK(cudaGraphDestroy(graph));
    CK(cudaStreamDestroy(stream));
    free_device(&d);
    case_free(&c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(cuda_merge_should_match_the_cpu_merge),
        cmocka_unit_test(cuda_merge_should_mark_rows_with_a_nan_or_infinite_lse),
        cmocka_unit_test(graph_should_replay_merge_like_eager_calls),
        cmocka_unit_test(refused_merge_should_leave_the_capture_valid),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
