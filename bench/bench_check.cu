/* nvfp4-mla-bench: what every timed call is held to, on the GPU and outside its events (issue 47).
 * Before each timed launch its output is poisoned (0xFF bytes: NaN in bf16 and f32, a code no writer
 * emits in a record); after it, the output is compared with the output of the row's checked call
 * (itself compared with the plugin's CPU backend), and the elements outside the bound are counted
 * on the device. Writer records and gather rows must be equal to the bit (both are pure functions of
 * their inputs); attend rows within attend_check.h's element and lse bounds (attend_check_default_bounds,
 * the tests' own: elem_rel of the element + of_row_max of the row's largest |value|, lse_rel of
 * max(|lse|, 1)) of the checked call's, so that a reordered split merge would still pass and a stale
 * or unwritten row never does. */
#include "bench.h"

/* Grid-stride bytes of n records at `slots` (int64, < capacity) of a paged cache. */
static __device__ __forceinline__ int64_t record_byte(int64_t i, int32_t rb, int64_t block, const int64_t *slots) {
    const int64_t rec = i / rb, slot = slots[rec];
    return (slot / block) * block * rb + (slot % block) * rb + i % rb;
}

static __global__ void poison_records_k(uint8_t *cache, int64_t block, int32_t rb, const int64_t *slots, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n * rb; i += (int64_t)gridDim.x * blockDim.x)
        cache[record_byte(i, rb, block, slots)] = 0xFF;
}

/* Adds this thread's count to *bad, one atomic a warp. */
static __device__ __forceinline__ void add_bad(unsigned long long n, unsigned long long *bad) {
    for (int o = 16; o > 0; o >>= 1) n += __shfl_down_sync(0xFFFFFFFFu, n, o);
    if ((threadIdx.x & 31) == 0 && n) atomicAdd(bad, n);
}

static __global__ void compare_records_k(const uint8_t *cache, int64_t block, int32_t rb, const int64_t *slots,
                                         int64_t n, const uint8_t *want, unsigned long long *bad) {
    unsigned long long mine = 0;
    const int64_t total = n * rb, stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    for (int64_t i = first; i < total; i += stride) mine += cache[record_byte(i, rb, block, slots)] != want[i];
    add_bad(mine, bad);
}

static __global__ void compare_u16_k(const uint16_t *got, const uint16_t *want, int64_t n, unsigned long long *bad) {
    unsigned long long mine = 0;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += stride) mine += got[i] != want[i];
    add_bad(mine, bad);
}

static __device__ __forceinline__ float bf16f(uint16_t v) { return __uint_as_float((uint32_t)v << 16); }

/* attend_check_bounds_t's element and lse bounds in the float arithmetic of compare_attend_k. */
struct attend_device_bounds {
    float elem_rel, of_row_max, lse_rel;
};

/* One warp a (query, head) row of 512: its largest |want|, then each element's verdict; lane 0
 * judges the lse. NaN fails every comparison. */
static __global__ void compare_attend_k(const uint16_t *got, const float *got_lse, const uint16_t *want,
                                        const float *want_lse, int64_t rows, attend_device_bounds b,
                                        unsigned long long *bad) {
    const int64_t row = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return; /* a whole warp leaves together: rows are whole warps */
    const uint16_t *g = got + row * 512, *w = want + row * 512;
    float row_max = 0.f;
    for (int i = lane; i < 512; i += 32) row_max = fmaxf(row_max, fabsf(bf16f(w[i])));
    for (int o = 16; o > 0; o >>= 1) row_max = fmaxf(row_max, __shfl_xor_sync(0xFFFFFFFFu, row_max, o));
    unsigned long long mine = 0;
    for (int i = lane; i < 512; i += 32) {
        const float gv = bf16f(g[i]), wv = bf16f(w[i]);
        mine += !(fabsf(gv - wv) <= b.elem_rel * fabsf(wv) + b.of_row_max * row_max);
    }
    if (lane == 0) {
        const float gl = got_lse[row], wl = want_lse[row];
        const bool both_empty = isinf(wl) && wl < 0 && isinf(gl) && gl < 0;
        mine += !both_empty && !(fabsf(gl - wl) <= b.lse_rel * fmaxf(fabsf(wl), 1.f));
    }
    add_bad(mine, bad);
}

void bench_poison(void *p, size_t bytes, cudaStream_t s) { CK(cudaMemsetAsync(p, 0xFF, bytes, s)); }

void bench_evict_l2(const bench &b) { CK(cudaMemsetAsync(b.flush_buf, 0x5A, b.flush_bytes, b.s)); }

void bench_warm_inputs(const bench &b, const void *inputs, size_t bytes) {
    if (4 * bytes <= b.flush_bytes) /* inputs and their copy within half the L2 (flush_bytes is twice it) */
        CK(cudaMemcpyAsync(b.flush_buf, inputs, bytes, cudaMemcpyDeviceToDevice, b.s));
}

void bench_poison_records(uint8_t *cache, int64_t block, int32_t rb, const int64_t *d_slots, int64_t n, cudaStream_t s) {
    poison_records_k<<<1024, 256, 0, s>>>(cache, block, rb, d_slots, n);
    CK(cudaGetLastError());
}

void bench_compare_records(const uint8_t *cache, int64_t block, int32_t rb, const int64_t *d_slots, int64_t n,
                           const uint8_t *d_want, unsigned long long *d_bad, cudaStream_t s) {
    compare_records_k<<<1024, 256, 0, s>>>(cache, block, rb, d_slots, n, d_want, d_bad);
    CK(cudaGetLastError());
}

void bench_compare_u16(const uint16_t *got, const uint16_t *want, int64_t n, unsigned long long *d_bad, cudaStream_t s) {
    compare_u16_k<<<1024, 256, 0, s>>>(got, want, n, d_bad);
    CK(cudaGetLastError());
}

void bench_compare_attend(const uint16_t *got, const float *got_lse, const uint16_t *want, const float *want_lse,
                          int64_t rows, unsigned long long *d_bad, cudaStream_t s) {
    const attend_check_bounds_t &c = attend_check_default_bounds;
    const attend_device_bounds b = {(float)c.elem_rel, (float)c.of_row_max, (float)c.lse_rel};
    compare_attend_k<<<(unsigned)((rows * 32 + 255) / 256), 256, 0, s>>>(got, got_lse, want, want_lse, rows, b, d_bad);
    CK(cudaGetLastError());
}

/* bench.h */
bench_watch bench_watch_open() {
    bench_watch w = {};
    CK(cudaMalloc(&w.d_bad, sizeof *w.d_bad));
    CK(cudaMemset(w.d_bad, 0, sizeof *w.d_bad));
    return w;
}

unsigned long long bench_watch_close(bench_watch &w) {
    unsigned long long bad = 0;
    CK(cudaMemcpy(&bad, w.d_bad, sizeof bad, cudaMemcpyDeviceToHost));
    cudaFree(w.d_bad);
    w.d_bad = NULL;
    return bad;
}
