/* PTX wrappers of the CUDA attention kernel (kernels/attend/attend_cuda.cu): asynchronous 16-byte copies
 * into shared memory, ldmatrix, and the bf16 tensor-core MMA. sm_80 and up. */
#ifndef NVFP4_MLA_MMA_CUDA_CUH
#define NVFP4_MLA_MMA_CUDA_CUH

#include <stdint.h>

#include "attend_probe.cuh" /* the NO_MMA probe's stand-in (off in normal builds) */

static __device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, asynchronously; src_bytes = 0 fills zeros without reading. */
static __device__ __forceinline__ void cp_async16(void *dst, const void *src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(src_bytes));
}
/* Waits until every one of this thread's cp.async copies has landed. */
static __device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.wait_all;\n" ::: "memory");
}

/* Four 8x8 bf16 matrices from shared memory; lane l gives the row address of matrix l / 8. */
static __device__ __forceinline__ void ldsm_x4(uint32_t *r, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
/* The same, each matrix transposed (the B operand of P.V from a row-major V). */
static __device__ __forceinline__ void ldsm_x4_trans(uint32_t *r, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}

/* d += a * b: m16n8k16, bf16 in, f32 accumulate (a: 4 registers, b: 2). */
static __device__ __forceinline__ void mma_bf16(float *d, const uint32_t *a, uint32_t b0, uint32_t b1) {
    if constexpr (att_probe<ATT_PROBE_NO_MMA>()) return att_probe_mma_skipped<4>(d);
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#endif
