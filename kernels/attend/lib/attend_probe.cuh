/* Stage-removal probes of the attention pipeline: compile-time switches that take one part of a
 * tile's work out of a build, so that what is left can be timed (bench/attend_probes.py;
 * -Dattend_probes=true). Off in every normal build: NVFP4_MLA_ATTEND_PROBE is 0 and every switch a
 * constant false of it (docs/performance-notes.md, "Stage-removal probes"). A probe's outputs are
 * garbage by design; it keeps every barrier protocol, every index a loop or a wait needs and every
 * address in bounds, so it neither hangs nor touches memory a normal build would not. The producer
 * probes start after its warm tiles (att_probe_warm_tiles), so that every ring block and raw stage
 * holds a real tile's bytes that the skipped tiles then reuse.
 */
#ifndef NVFP4_MLA_ATTEND_PROBE_CUH
#define NVFP4_MLA_ATTEND_PROBE_CUH

#include <stdint.h>

#include "kernel_args.h"

#ifndef NVFP4_MLA_ATTEND_PROBE
#define NVFP4_MLA_ATTEND_PROBE 0
#endif

/* The switches, bits of NVFP4_MLA_ATTEND_PROBE. */
enum {
    /* The producer issues no global load after its warm tiles: no block indices, no records (the
     * bulk copies' barriers get their arrivals without copies; the two-buffer producer keeps the quarter
     * record it holds). Its dequantisation then works on the bytes it already has. */
    ATT_PROBE_NO_LOADS = 1,
    /* The producer writes no operand block after its warm tiles: no dequantisation, no stores to the
     * ring. The key metadata is still written (the consumers read it), and the ring's barriers pass
     * as before. */
    ATT_PROBE_NO_DEQUANT = 2,
    /* The consumers issue no tensor-core product (wgmma, mma.sync): the wrappers of mma_cuda.cuh and
     * sm90_cuda.cuh leave their accumulators as they were. The wgmma fences, commits and waits (ptxas
     * keeps a disabled HGMMA for a commit), the ring's waits, the softmax, the P stores, the releases
     * and the epilogue stay; the mma.sync kinds' ldmatrix go with their products (ptxas drops loads
     * whose registers nothing reads). */
    ATT_PROBE_NO_MMA = 4,
    /* The wide kind's P.V products of one warpgroup alone (its wgmma skipped, as NO_MMA skips them;
     * everything else kept): value warpgroup 1's (dims 256..511, P from the P tile) or score
     * warpgroup 0's (dims 0..255, P from its registers). What each saves bounds moving that half of
     * P.V under the softmax (performance-notes.md, "P.V under the softmax"). */
    ATT_PROBE_NO_PV_VALUE = 8,
    ATT_PROBE_NO_PV_SCORE = 16,
    ATT_PROBE_ALL = 31,
};
static_assert((NVFP4_MLA_ATTEND_PROBE & ~ATT_PROBE_ALL) == 0, "NVFP4_MLA_ATTEND_PROBE: bits of ATT_PROBE_*");

/* Whether this build has switch BIT on (a constant: the call sites are `if constexpr`). */
template <int BIT>
__host__ __device__ constexpr bool att_probe() {
    return (NVFP4_MLA_ATTEND_PROBE & BIT) != 0;
}

/* The warm tiles of a producer with raw stages: enough tiles to write every ring block once
 * (ceil(blocks / blocks a tile)) and to fill every raw stage once. (The two-buffer producer's are its two
 * buffers: schedules/wide_twobuf/twobuf_producer.cuh.) */
__host__ __device__ constexpr uint32_t att_probe_warm_tiles(int stages, int blocks, int per_tile) {
    return (uint32_t)(stages > (blocks + per_tile - 1) / per_tile ? stages : (blocks + per_tile - 1) / per_tile);
}

/* Whether a producer keeps the part that switch BIT removes (its loads: ATT_PROBE_NO_LOADS; its
 * operand writes: ATT_PROBE_NO_DEQUANT) for tile `tile` of its walk, `warm` its warm tiles: always,
 * in a normal build. */
template <int BIT>
static __device__ __forceinline__ bool att_probe_keeps(uint32_t tile, uint32_t warm) {
    if constexpr (att_probe<BIT>()) return tile < warm;
    else return true;
}

/* The NO_MMA probe's stand-in for a tensor-core product into the N accumulators at d: no
 * instruction; d as it was (changed, for nvcc: fence_regs' form, so that the softmax and the
 * epilogue still read values it cannot fold). Its operands' address arithmetic may go with it. */
template <int N>
static __device__ __forceinline__ void att_probe_mma_skipped(float *d) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i]));
}

/* 0 at run time, from the call's arguments (h is 1..128: the plugin checks it), which no compiler
 * can know: a test on it that never passes keeps code, and the values it reads, that a probe does
 * not run, so that what the probe does run is compiled as in a normal build (not hoisted out of its
 * loop, not dropped as dead). */
static __device__ __forceinline__ uint32_t att_probe_zero(const nvfp4_mla_attend_kernel_args_t &a) {
    return (uint32_t)((uint64_t)a.num_heads >> 32);
}

#endif
