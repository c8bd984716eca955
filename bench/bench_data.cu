/* The data of nvfp4-mla-bench, made on the device: tokens like a model's latents (Gaussian values
 * times a per-token log-normal magnitude, RoPE included), every record of the big caches written
 * from them (368-byte records by the plugin's own writer, 656-byte ones by FlashMLA's rule), and
 * the copy of the records a checked query reads. Why: the attend kernels skip the output rescale
 * when the running maximum does not change, which near-constant data makes the common case; a
 * cache of 0x3C bytes with 2% real records timed a path real data rarely takes. */
#include <cuda_fp8.h>
#include <math.h>

#include "bench.h"

/* A 64-bit mix (splitmix64's finaliser): the random source of token t's element i. */
static __device__ __forceinline__ uint64_t mix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Two N(0, 1) values from one 64-bit draw (Box-Muller on two 32-bit uniforms in (0, 1)). */
static __device__ __forceinline__ float2 gauss2(uint64_t r) {
    const float u1 = ((float)(uint32_t)r + 0.5f) * 0x1p-32f, u2 = ((float)(uint32_t)(r >> 32) + 0.5f) * 0x1p-32f;
    const float rad = sqrtf(-2.0f * logf(u1));
    float sn, cs;
    sincospif(2.0f * u2, &sn, &cs);
    return make_float2(rad * cs, rad * sn);
}

static __device__ __forceinline__ uint16_t bf16_bits(float v) {
    const uint32_t u = __float_as_uint(v);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16); /* round to nearest even (finite values) */
}

/* One warp a token: 288 pairs of values, the token's magnitude from its own draw. */
__global__ void tokens_kernel(uint16_t *out, int64_t first, int64_t n, uint64_t seed, float base) {
    const int64_t t = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (t >= n) return;
    const uint64_t key = mix64(seed ^ mix64((uint64_t)(first + t)));
    const float mag = base * expf(0.5f * gauss2(key).x);
    for (int p = lane; p < 288; p += 32) {
        const float2 g = gauss2(mix64(key + 1 + (uint64_t)p));
        const uint32_t pair = bf16_bits(g.x * mag) | ((uint32_t)bf16_bits(g.y * mag) << 16);
        *(uint32_t *)(out + t * 576 + 2 * p) = pair;
    }
}

void bench_tokens(uint16_t *d_tokens, int64_t first, int64_t n, uint64_t seed, float base, cudaStream_t s) {
    tokens_kernel<<<(unsigned)((n + 7) / 8), 256, 0, s>>>(d_tokens, first, n, seed, base);
    CK(cudaGetLastError());
}

int bench_fill_cache_368(bench &b, uint8_t *cache, int64_t capacity, uint64_t seed) {
    int ok = 1;
    for (int64_t first = 0; first < capacity; first += BENCH_T_MAX) {
        const int64_t n = capacity - first < BENCH_T_MAX ? capacity - first : BENCH_T_MAX;
        bench_tokens(b.d_tokens, first, n, seed, 0.5f, b.s);
        nvfp4_mla_write_args_t w = bench_write_args_368(b, NVFP4_MLA_SCALE_PER_TOKEN,
                                                        nvfp4_mla_default_outer_scale(NVFP4_MLA_SCALE_PER_TOKEN), n, 0);
        /* identity slots shifted by `first`: a cache view that starts at record `first` */
        w.cache = bench_tensor(cache + first * 368, NVFP4_MLA_DTYPE_U8, 3, {n, 1, 368}, {368, 368, 1});
        ok &= b.t->write(b.gpu, &w) == NVFP4_MLA_OK;
    }
    CK(cudaStreamSynchronize(b.s));
    return ok;
}

/* One warp a token, 8 lanes a 128-value tile (lane l: values 16l .. 16l + 15): the tile's amax by
 * shuffles within its 8 lanes; the scale 2^ceil(log2(max(amax / 448, 1e-4))) taken exactly
 * (frexpf); codes E4M3 of value / scale (exact: a power of two), saturating (never needed: the
 * scale is at least amax / 448); the RoPE's 128 bytes copied. */
__global__ void encode_656_kernel(const uint16_t *tokens, uint8_t *cache, int64_t n) {
    const int64_t t = (int64_t)blockIdx.x * 8 + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (t >= n) return;
    const uint16_t *x = tokens + t * 576;
    uint8_t *rec = cache + t * 656;
    float v[16], amax = 0.0f;
    for (int j = 0; j < 16; j++) {
        v[j] = __uint_as_float((uint32_t)x[lane * 16 + j] << 16);
        amax = fmaxf(amax, fabsf(v[j]));
    }
    for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, o));
    int e;
    const float target = fmaxf(amax / 448.0f, 1e-4f), fraction = frexpf(target, &e);
    const float scale = fraction == 0.5f ? target : ldexpf(1.0f, e);
    for (int j = 0; j < 16; j++)
        rec[lane * 16 + j] = (uint8_t)__nv_cvt_float_to_fp8(v[j] / scale, __NV_SATFINITE, __NV_E4M3);
    if ((lane & 7) == 0) *(float *)(rec + 512 + 4 * (lane >> 3)) = scale;
    if (lane < 16) ((uint64_t *)(rec + 528))[lane] = ((const uint64_t *)(x + 512))[lane];
}

void bench_fill_cache_656(bench &b, uint8_t *cache, int64_t capacity, uint64_t seed) {
    for (int64_t first = 0; first < capacity; first += BENCH_T_MAX) {
        const int64_t n = capacity - first < BENCH_T_MAX ? capacity - first : BENCH_T_MAX;
        bench_tokens(b.d_tokens, first, n, seed, 0.5f, b.s);
        encode_656_kernel<<<(unsigned)((n + 7) / 8), 256, 0, b.s>>>(b.d_tokens, cache + first * 656, n);
        CK(cudaGetLastError());
    }
    CK(cudaStreamSynchronize(b.s));
}

/* One thread a 16-byte chunk of the destination. */
__global__ void copy_records_kernel(const uint8_t *cache, int64_t block, int32_t rb, const int32_t *slots, int64_t n,
                                    uint8_t *dst) {
    const int32_t chunks = rb / 16;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * chunks) return;
    const int64_t r = i / chunks, c = i % chunks;
    const int32_t slot = slots[r];
    uint4 v = make_uint4(0, 0, 0, 0);
    if (slot >= 0) v = *(const uint4 *)(cache + (slot / block) * block * rb + (slot % block) * rb + 16 * c);
    *(uint4 *)(dst + r * rb + 16 * c) = v;
}

void bench_copy_records(const uint8_t *cache, int64_t block, int32_t rb, const int32_t *d_slots, int64_t n,
                        uint8_t *d_dst, cudaStream_t s) {
    const int64_t threads = n * (rb / 16);
    copy_records_kernel<<<(unsigned)((threads + 255) / 256), 256, 0, s>>>(cache, block, rb, d_slots, n, d_dst);
    CK(cudaGetLastError());
}
