/* The same-run ceilings of nvfp4-mla-bench (BENCHMARKS.md, "What is measured"): what the hardware
 * does with the bytes and the tensor-core instruction alone, no codec arithmetic. Every operation's
 * ratio is taken against these, measured in the same process on the same device. */
#include <string.h>

#include "bench.h"

/* The ceiling of every reader: a plain gather of 368-byte records by index, one 16-byte chunk per
 * thread, 4 independent chunks in flight per thread. */
__global__ void gather368_ceiling(const uint4 *cache, const int32_t *index, uint4 *out, int32_t n) {
    const int32_t chunks = n * 23; /* 32-bit index arithmetic: division by 23 stays cheap */
    const int32_t stride = gridDim.x * blockDim.x;
    for (int32_t base = blockIdx.x * blockDim.x + threadIdx.x; base < chunks; base += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int32_t c = base + k * stride;
            if (c < chunks) v[k] = __ldg(&cache[(int64_t)__ldg(&index[c / 23]) * 23 + c % 23]);
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (base + k * stride < chunks) out[base + k * stride] = v[k];
        }
    }
}

/* The writer's memory ceiling: read each token's 1152 input bytes, write 368 bytes at its random
 * slot, no arithmetic (one warp per token, 16-byte accesses, like the writer). */
__global__ void scatter368_ceiling(const uint4 *in, const int64_t *slots, uint4 *cache, int32_t n) {
    const int32_t t = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (t >= n) return;
    const uint4 a = __ldg(&in[(int64_t)t * 72 + lane]), b = __ldg(&in[(int64_t)t * 72 + 32 + lane]);
    const uint4 c = lane < 8 ? __ldg(&in[(int64_t)t * 72 + 64 + lane]) : make_uint4(0, 0, 0, 0);
    const uint4 v = make_uint4(a.x ^ b.y ^ c.z, a.y ^ b.z ^ c.w, a.z ^ b.w ^ c.x, a.w ^ b.x ^ c.y);
    if (lane < 23) cache[__ldg(&slots[t]) * 23 + lane] = v;
}

/* d += a * b, m16n8k16 bf16 -> f32: the tensor-core instruction attend's mma.sync consumers issue
 * (the same PTX as their wrapper; the bench is a host and keeps its own copy). */
static __device__ __forceinline__ void mma_bf16(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* The matrix-rate ceiling: mma.sync from registers, 8 independent accumulators per warp, no memory
 * traffic. */
__global__ void mma_ceiling(float *sink, int iters) {
    uint32_t a[4] = {0x3F803F80u ^ threadIdx.x, 0x3F80BF80u, 0x3F003F80u, 0xBF803F00u}, b0 = 0x3F803F80u ^ blockIdx.x,
             b1 = 0x3F00BF80u;
    float c[8][4] = {};
    for (int i = 0; i < iters; i++)
#pragma unroll
        for (int k = 0; k < 8; k++) mma_bf16(c[k], a, b0, b1);
    float sum = 0.0f;
    for (int k = 0; k < 8; k++) sum += c[k][0] + c[k][1] + c[k][2] + c[k][3];
    if (sum == 1.2345f) *sink = sum; /* keeps the work; never true for these inputs */
}

/* A >= 4 GiB device copy; its source stays allocated as the run's big cache. */
static void copy_ceiling(bench &b) {
    void *dst;
    CK(cudaMalloc(&b.cache, b.copy_bytes));
    CK(cudaMalloc(&dst, b.copy_bytes));
    CK(cudaMemsetAsync(b.cache, 0x3C, b.copy_bytes, b.s));
    const bench_timing us = bench_time(
        b, [&] { CK(cudaMemcpyAsync(dst, b.cache, b.copy_bytes, cudaMemcpyDeviceToDevice, b.s)); }, 2, 10);
    b.copy_tbps = 2.0 * b.copy_bytes / (us.median_us * 1e-6) / 1e12;
    bench_add_row(b, "ceiling: copy", (int64_t)(b.copy_bytes >> 20), us, 2.0 * b.copy_bytes, b.copy_tbps, "copy", -1);
    CK(cudaFree(dst));
}

/* The readers' buffers (random slots over the big cache) and the plain gather of their records. */
static void gather_ceiling(bench &b) {
    const int64_t N = BENCH_N;
    b.capacity = (int64_t)(b.copy_bytes / 368) / BENCH_BLOCK * BENCH_BLOCK;
    std::vector<int32_t> index(N);
    for (auto &v : index) v = (int32_t)(bench_rand() % (uint64_t)b.capacity);
    CK(cudaMalloc(&b.d_index, N * 4));
    CK(cudaMalloc(&b.d_out, N * 576 * 2));
    CK(cudaMemcpy(b.d_index, index.data(), N * 4, cudaMemcpyHostToDevice));
    const bench_timing us = bench_time(
        b,
        [&] {
            gather368_ceiling<<<132 * 16, 256, 0, b.s>>>((const uint4 *)b.cache, b.d_index, (uint4 *)b.d_out,
                                                         (int32_t)N);
        },
        3, 20);
    CK(cudaGetLastError());
    b.g368_tbps = (N * 368.0 * 2 + N * 4.0) / (us.median_us * 1e-6) / 1e12;
    bench_add_row(b, "ceiling: gather368", N, us, N * 368.0 * 2 + N * 4.0, b.copy_tbps, "copy", -1);
}

/* bf16 tensor-core rate of mma.sync (the instruction attend uses): 4 CTAs of 8 warps per SM. */
static void mma_rate_ceiling(bench &b) {
    const int mma_iters = 4096;
    const bench_timing us =
        bench_time(b, [&] { mma_ceiling<<<132 * 4, 256, 0, b.s>>>((float *)b.d_out, mma_iters); }, 2, 10);
    CK(cudaGetLastError());
    b.mma_tflops = 132.0 * 4 * 8 * mma_iters * 8 * 4096.0 / (us.median_us * 1e-6) / 1e12;
    bench_add_row(b, "ceiling: mma.sync bf16", 132 * 4 * 8, us, b.mma_tflops * 1e12 * us.median_us * 1e-6, 0, "TFLOP/s",
                  -1);
}

void bench_ceilings(bench &b) {
    copy_ceiling(b);
    gather_ceiling(b);
    mma_rate_ceiling(b);
}

void bench_scatter_ceiling(bench &b) {
    const int64_t T = BENCH_T_MAX;
    /* its targets evicted before each launch, as the writer's are (bench_evict_l2): the same launch
     * again and again otherwise finds up to an L2 of them from the previous one */
    const bench_timing us =
        bench_time_sides(b,
                         {bench_side{[&] {
                                         scatter368_ceiling<<<(unsigned)(T / 8), 256, 0, b.s>>>(
                                             (const uint4 *)b.d_tokens, b.d_slots, (uint4 *)b.cache, (int32_t)T);
                                     },
                                     [&] { bench_evict_l2(b); }, {}}},
                         3, 20)[0];
    CK(cudaGetLastError());
    bench_add_row(b, "ceiling: scatter368", T, us, T * 1528.0, b.copy_tbps, "copy", -1);
}
