/* PTX wrappers of the Hopper-generation asynchronous machinery the attention pipeline uses
 * (kernels/attend/attend_cuda.cu): mbarriers with transaction counts, bulk copies global -> shared,
 * named barriers, proxy fences, stmatrix, and (sm_90a only) wgmma with its shared-memory matrix
 * descriptors and setmaxnreg. Everything but wgmma/setmaxnreg exists on every target the plugin
 * builds (sm_90, sm_100a, sm_120a); NVFP4_HAVE_WGMMA says where wgmma does.
 *
 * Shared-memory operand layout used by every descriptor below: "SW128 K-major rows", the canonical
 * 128-byte-swizzle atom of 8 rows x 128 bytes (64 bf16), atoms stacked along the rows 1024 bytes
 * apart, each atom 1024-byte aligned. Element (row r, column c < 64) of such a tile is at byte
 * (r / 8) * 1024 + (r % 8) * 128 + (((c / 8) ^ (r % 8)) * 16) + (c % 8) * 2 (swizzle_off below).
 * Read with rows as M or N and the 64 columns as K it is a K-major operand (k-step of 16 columns:
 * +32 bytes on the start address); read with the rows as K and the columns as M or N it is the
 * MN-major operand of the transposed product (k-step of 16 rows: +2048 bytes).
 */
#ifndef NVFP4_MLA_SM90_CUDA_CUH
#define NVFP4_MLA_SM90_CUDA_CUH

#include <stdint.h>

#include "mma_cuda.cuh" /* smem_addr */

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define NVFP4_HAVE_WGMMA 1
#else
#define NVFP4_HAVE_WGMMA 0
#endif

/* Byte offset of element (row, col) (col < 64, bf16) inside a SW128 K-major tile. */
static __device__ __forceinline__ uint32_t swizzle_off(uint32_t row, uint32_t col) {
    return (row >> 3) * 1024u + (row & 7u) * 128u + ((((col >> 3) ^ row) & 7u) << 4) + (col & 7u) * 2u;
}

/* ---- mbarriers (shared::cta) ---- */

static __device__ __forceinline__ void mbar_init(void *bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
/* Makes the initialised barriers visible to the async proxy (bulk copies complete on them). */
static __device__ __forceinline__ void mbar_init_fence() {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
static __device__ __forceinline__ void mbar_arrive(void *bar) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.shared::cta.b64 st, [%0];\n}\n" ::"r"(smem_addr(bar)) : "memory");
}
/* Arrives and announces `bytes` of bulk copies that will complete on this phase. */
static __device__ __forceinline__ void mbar_arrive_expect_tx(void *bar, uint32_t bytes) {
    asm volatile("{\n.reg .b64 st;\nmbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n}\n"
                 ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}
/* Blocks until the phase with the given parity has completed (acquire). A fresh barrier counts
 * its phase "-1" (parity 1) as complete, which is how an empty block is first handed out. The
 * suspend-time hint lets the waiting warp sleep until the phase completes instead of polling:
 * producer and consumer warps share each scheduler, and a polling warp takes issue slots from
 * the one doing the work. */
static __device__ __forceinline__ void mbar_wait(void *bar, uint32_t parity) {
    uint32_t done;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2, %3;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(smem_addr(bar)), "r"(parity), "r"(0x100000u)
            : "memory");
    } while (!done);
}

/* ---- copies and fences ---- */

/* `bytes` (a multiple of 16, both addresses 16-byte aligned) global -> shared, completing as
 * transaction bytes on `bar`. */
static __device__ __forceinline__ void bulk_copy_g2s(void *dst, const void *src, uint32_t bytes, void *bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 ::"r"(smem_addr(dst)), "l"(src), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}
/* Orders this thread's generic-proxy shared-memory accesses before later async-proxy ones (wgmma
 * operand reads, bulk copies) and vice versa. */
static __device__ __forceinline__ void fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* ---- programmatic dependent launch (sm_90+; grids launched dependent by nvfp4_launch_clustered) ----
 * A grid launched with programmatic stream serialisation may start while the grid before it on
 * the stream still runs: its prologue (barrier set-up, register reallocation) overlaps that grid's
 * tail, or, in a CUDA graph, the launch of its node does. pdl_wait blocks until the grids it
 * depends on have completed and their memory is visible; a thread reads or writes nothing that
 * another grid of the stream touches before it. pdl_release lets the grid after this one start
 * launching once every CTA of this grid has released (or exited). Both are no-ops for a grid
 * launched without the attribute. */
static __device__ __forceinline__ void pdl_wait() {
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
}
static __device__ __forceinline__ void pdl_release() {
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

/* Barrier `id` (1..15) over `count` threads (a multiple of 32) of the CTA. */
static __device__ __forceinline__ void named_sync(uint32_t id, uint32_t count) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

/* Arrives on named barrier `id` (of `count` threads) without waiting: the threads that bar.sync
 * on it go on once all `count` have arrived, and see this thread's earlier writes. */
static __device__ __forceinline__ void named_arrive(uint32_t id, uint32_t count) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

/* ---- stmatrix: 8x8 b16 matrices from the mma accumulator fragment to shared memory ---- */

/* Two matrices, transposed: lane 8i + r (i < 2) addresses stored row r of matrix i, which holds
 * column r of the fragment's matrix i. */
static __device__ __forceinline__ void stsm_x2_trans(void *row_addr, uint32_t m0, uint32_t m1) {
    asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};\n" ::"r"(smem_addr(row_addr)), "r"(m0),
                 "r"(m1)
                 : "memory");
}
/* Four matrices as they are: lane 8i + r addresses row r of matrix i. */
static __device__ __forceinline__ void stsm_x4(void *row_addr, uint32_t m0, uint32_t m1, uint32_t m2, uint32_t m3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_addr(row_addr)),
                 "r"(m0), "r"(m1), "r"(m2), "r"(m3)
                 : "memory");
}

/* ---- wgmma (sm_90a) ---- */

/* Descriptor of a SW128 operand at `addr` (1024-byte aligned atoms; the start may step 16-byte
 * units into the first row for K steps): `sbo` = bytes between 8-row groups, `lbo` = bytes
 * between 64-column groups of an MN-major operand (used by the n128 shapes, whose B spans two
 * groups; the others stay inside one). */
static __device__ __forceinline__ uint64_t sw128_desc(uint32_t addr, uint32_t sbo, uint32_t lbo) {
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFFu) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFFu) << 32) | (1ull << 62);
}

#if NVFP4_HAVE_WGMMA
static __device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
static __device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
static __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
template <int REGS>
static __device__ __forceinline__ void setmaxnreg_inc() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REGS));
}
template <int REGS>
static __device__ __forceinline__ void setmaxnreg_dec() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REGS));
}

/* D[64 x 16] (+)= A[64 x 16] * B[16 x 16], A and B from shared memory; TRANS_A: A MN-major (1, the
 * blocks' transposed view in P.V) or K-major (0); B is K-major. */
template <int TRANS_A>
static __device__ __forceinline__ void wgmma_ss_n16(float *d, uint64_t da, uint64_t db, int accumulate) {
    if constexpr (att_probe<ATT_PROBE_NO_MMA>()) return att_probe_mma_skipped<8>(d);
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, "
                 "1, %11, %12;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                 : "l"(da), "l"(db), "r"(accumulate), "n"(TRANS_A), "n"(0));
}

/* D[64 x 32] (+)= A[64 x 16] * B[16 x 32], A and B from shared memory; TRANS_A: A MN-major (1, the
 * blocks' transposed view in P.V) or K-major (0); B is K-major. */
template <int TRANS_A>
static __device__ __forceinline__ void wgmma_ss_n32(float *d, uint64_t da, uint64_t db, int accumulate) {
    if constexpr (att_probe<ATT_PROBE_NO_MMA>()) return att_probe_mma_skipped<16>(d);
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
                 "%11, %12, %13, %14, %15}, %16, %17, p, 1, 1, %19, %20;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "l"(da), "l"(db), "r"(accumulate), "n"(TRANS_A), "n"(0));
}

/* D[64 x 64] (+)= A[64 x 16] * B[16 x 64], A and B from shared memory; A K-major; TRANS_B: B MN-major
 * (1, the blocks' transposed view in P.V) or K-major (0). F16: both operands f16 (the two-buffer kind's
 * RoPE k-steps where ROPE_F16: schedules/wide_twobuf/rope_f16.cuh), else bf16. The two forms
 * differ in the instruction's type suffix alone. */
#define ATT_WGMMA_SS_N64(TYPES)                                                                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"                                                          \
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPES " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, "     \
                 "%10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, "    \
                 "%29, %30, %31}, %32, %33, p, 1, 1, %35, %36;\n}\n"                                                    \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),    \
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),          \
                   "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),        \
                   "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),        \
                   "+f"(d[29]), "+f"(d[30]), "+f"(d[31])                                                             \
                 : "l"(da), "l"(db), "r"(accumulate), "n"(0), "n"(TRANS_B))
template <int TRANS_B, bool F16 = false>
static __device__ __forceinline__ void wgmma_ss_n64(float *d, uint64_t da, uint64_t db, int accumulate) {
    if constexpr (att_probe<ATT_PROBE_NO_MMA>()) return att_probe_mma_skipped<32>(d);
    if constexpr (F16) ATT_WGMMA_SS_N64("f16.f16");
    else ATT_WGMMA_SS_N64("bf16.bf16");
}
#undef ATT_WGMMA_SS_N64

/* D[64 x 64] (+)= A[64 x 16] * B[16 x 64], A from registers (the accumulator-shaped bf16
 * fragment), B from shared memory, MN-major (the blocks' transposed view in P.V). */
static __device__ __forceinline__ void wgmma_rs_n64(float *d, const uint32_t *a, uint64_t db, int accumulate) {
    if constexpr (att_probe<ATT_PROBE_NO_MMA>()) return att_probe_mma_skipped<32>(d);
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
                 "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, "
                 "%31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
                   "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate), "n"(1));
}

/* D[64 x 128] (+)= A[64 x 16] * B[16 x 128], A and B from shared memory; A K-major and B MN-major
 * (the only use: P times V, the blocks' transposed view), B's two 64-column groups `lbo` apart
 * (sw128_desc). d: 64 accumulators, the n64 layout of columns 64b.. at d + 32b. (n256's 128
 * accumulators fail ptxas C7602: it checks them against __launch_bounds__(512, 1)'s 128
 * registers a thread, not against the setmaxnreg counts.) */
static __device__ __forceinline__ void wgmma_ss_n128(float *d, uint64_t da, uint64_t db, int accumulate) {
    if constexpr (att_probe<ATT_PROBE_NO_MMA>()) return att_probe_mma_skipped<64>(d);
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, "
                 "%11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, "
                 "%31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, "
                 "%51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, %67, %68;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]),
                   "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]),
                   "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
                   "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]),
                   "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]),
                   "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(da), "l"(db), "r"(accumulate), "n"(0), "n"(1));
}

/* D[64 x 128] (+)= A[64 x 16] * B[16 x 128], A from registers, B from shared memory (as
 * wgmma_ss_n128). */
static __device__ __forceinline__ void wgmma_rs_n128(float *d, const uint32_t *a, uint64_t db, int accumulate) {
    if constexpr (att_probe<ATT_PROBE_NO_MMA>()) return att_probe_mma_skipped<64>(d);
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
        "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, "
        "%35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, "
        "%57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
          "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
          "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
          "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(accumulate), "n"(1));
}

#endif /* NVFP4_HAVE_WGMMA */

/* 2^x in one MUFU.EX2 (subnormal results flushed to zero): exp2f compiles to five instructions
 * guarding the subnormal range, which the softmax (probabilities rounded to bf16, |error| of the
 * approximation ~2 ulp) does not need. */
static __device__ __forceinline__ float exp2_ftz(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* Pins register values in program order against the volatile wgmma statements: after a wait,
 * reads of accumulators cannot move above it (the asynchronous writes are invisible to the
 * compiler); before a wgmma fence, writes to accumulators (rescaling) cannot sink below it, which
 * would make ptxas serialise the wgmma (C7519). */
template <int N>
static __device__ __forceinline__ void fence_regs(float *r) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(r[i])::"memory");
}

#endif
