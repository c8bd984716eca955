/* The narrow consumer's engines (narrow_consumer.cuh holds the tile flow that uses them):
 * its accumulator state, the score and P.V products on the two engines (wgmma from shared memory
 * on sm_90a, mma.sync with ldmatrix elsewhere), the resident ring's descriptors, and where an
 * O^T value sits. */
#ifndef NVFP4_MLA_NARROW_ENGINES_CUH
#define NVFP4_MLA_NARROW_ENGINES_CUH

#include "lib/attend_consumer.cuh"
#include "lib/mma_cuda.cuh"

template <int N, bool WG>
struct narrow_state {
    float o[ATT_LATENT_BLOCKS][N / 2]; /* O^T accumulators, 8 row blocks of 64 (wgmma) or 16x4 (mma.sync) dims */
    float m[N / 4];     /* running column maximum (log2 domain) of this thread's columns */
    float l[N / 4];     /* this thread's part of the running column sum */
};

/* Column index of this thread's accumulator value i (i = 4j + v). */
static __device__ __forceinline__ int frag_col(int i, int lane) {
    return 8 * (i >> 2) + 2 * (lane & 3) + (i & 1);
}

/* ---- the two engines ---- */

/* Independent accumulator chains for the latent scores (wgmma): consecutive wgmma into one
 * accumulator wait for each other, and at N = 16 or 32 each is too small to hide that. */
template <int N, bool WG>
struct qk_chains {
    static constexpr int value = WG ? (N == 16 ? 4 : 2) : 1;
};

/* After the wait for the scores' wgmma: pins the C chains and the RoPE scores (fence_regs). */
template <int N, int C>
static __device__ __forceinline__ void qk_pin(float (*lat)[N / 2], float *rope) {
#pragma unroll
    for (int c = 0; c < C; c++) fence_regs<N / 2>(lat[c]);
    fence_regs<N / 2>(rope);
}

/* The latent scores: the sum of the C chains. */
template <int N, int C>
static __device__ __forceinline__ void qk_sum(float (*lat)[N / 2], float *lat_out) {
#pragma unroll
    for (int i = 0; i < N / 2; i++) {
        float v = lat[0][i];
#pragma unroll
        for (int c = 1; c < C; c++) v += lat[c][i];
        lat_out[i] = v;
    }
}

#if NVFP4_HAVE_WGMMA
/* S^T over one operand block from its descriptor da and Q block's db (wgmma): 4 k-steps of 16
 * dims, k-step kk into chain kk % C (first: the first block of a product starts each chain). */
template <int N, int C>
static __device__ __forceinline__ void qk_block_desc(float (*acc)[N / 2], uint64_t da, uint64_t db, bool first) {
#pragma unroll
    for (int kk = 0; kk < 4; kk++) { /* +32 bytes = +2 in the descriptors' address field */
        if (N == 16) wgmma_ss_n16<0>(acc[kk % C], da + 2 * kk, db + 2 * kk, !(first && kk < C));
        else wgmma_ss_n32<0>(acc[kk % C], da + 2 * kk, db + 2 * kk, !(first && kk < C));
    }
}

/* The wgmma descriptors of a resident tile's nine ring blocks (0: RoPE, 1..8: latent), the tile's
 * first block at ring position pos0, from the ring's base in uniform registers (warp_uniform).
 * A block's descriptor is block 0's plus 512 a block (8 KB in the address field, which cannot carry
 * below 256 KB), so no block is masked and shifted. CONTIG, for an 18-block ring only (fit_ring's
 * largest; positions advance 9 a tile, so tiles start at block 0 or 9): block i is block s0 + i;
 * otherwise a tile's blocks may wrap (ring_index_after).
 * Each block's block from its position (ring_index) and its address from a per-thread base took
 * about 8 instructions a wgmma, 2 of them R2UR (SASS, h = 16). */
template <bool CONTIG>
struct resident_descs {
    uint32_t ring; /* shared address of block 0 */
    uint32_t s0;   /* block of block 0 */
    __device__ __forceinline__ resident_descs(uint8_t *smem, const attend_plan &pl, uint32_t pos0)
        : ring(warp_uniform(smem_addr(smem + pl.off_ring))), s0(ring_index(pos0, pl)) {}
    __device__ __forceinline__ uint64_t of(const attend_plan &pl, int i, uint32_t sbo, uint32_t lbo) const {
        return sw128_desc(ring, sbo, lbo) + 512u * (CONTIG ? s0 + (uint32_t)i : ring_index_after(s0, (uint32_t)i, pl));
    }
};
#endif

/* S^T over one operand block: 4 k-steps of 16 dims against Q block `qblk` (N rows); k-step kk
 * accumulates into chain kk % C (the first block of a product starts each chain). */
template <int N, bool WG, int C>
static __device__ __forceinline__ void qk_block(float (*acc)[N / 2], const uint8_t *blk, const uint8_t *qblk,
                                                bool first, int warp, int lane) {
    if constexpr (WG) {
#if NVFP4_HAVE_WGMMA
        qk_block_desc<N, C>(acc, sw128_desc(smem_addr(blk), 1024, 16), sw128_desc(smem_addr(qblk), 1024, 16), first);
#endif
    } else {
        if (first) {
#pragma unroll
            for (int i = 0; i < N / 2; i++) acc[0][i] = 0.0f;
        }
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            uint32_t af[4];
            ldsm_x4(af, blk + swizzle_off(16 * warp + (lane & 15), 16 * kk + 8 * (lane >> 4)));
#pragma unroll
            for (int jp = 0; jp < N / 16; jp++) {
                uint32_t bf[4];
                ldsm_x4(bf,
                        qblk + swizzle_off(16 * jp + 8 * (lane >> 4) + (lane & 7), 16 * kk + 8 * ((lane >> 3) & 1)));
                mma_bf16(acc[0] + 4 * (2 * jp), af, bf[0], bf[1]);
                mma_bf16(acc[0] + 4 * (2 * jp + 1), af, bf[2], bf[3]);
            }
        }
    }
}

/* O^T += V^T P^T for latent block b (dims 64b..64b+63). wgmma: the whole warpgroup, accumulators
 * o[b]. mma.sync: warp w owns blocks 2w and 2w+1 (o[4(b - 2w) + m] for its four 16-dim rows). */
template <int N, bool WG>
static __device__ __forceinline__ void pv_block(narrow_state<N, WG> &st, const uint8_t *blk, const uint8_t *pt, int b,
                                                int warp, int lane) {
    if constexpr (WG) {
#if NVFP4_HAVE_WGMMA
        const uint64_t da = sw128_desc(smem_addr(blk), 1024, ATT_BLOCK), db = sw128_desc(smem_addr(pt), 1024, 16);
#pragma unroll
        for (int kk = 0; kk < 4; kk++) { /* +2048 bytes (A, 16 rows) and +32 (B) a k-step */
            if (N == 16) wgmma_ss_n16<1>(st.o[b], da + 128 * kk, db + 2 * kk, 1);
            else wgmma_ss_n32<1>(st.o[b], da + 128 * kk, db + 2 * kk, 1);
        }
#endif
    } else {
        if ((b >> 1) != warp) return;
        const int half = b & 1;
#pragma unroll
        for (int kk = 0; kk < 4; kk++) {
            uint32_t bf[N / 16][4];
#pragma unroll
            for (int jp = 0; jp < N / 16; jp++)
                ldsm_x4(bf[jp],
                        pt + swizzle_off(16 * jp + 8 * (lane >> 4) + (lane & 7), 16 * kk + 8 * ((lane >> 3) & 1)));
#pragma unroll
            for (int m = 0; m < 4; m++) {
                uint32_t af[4];
                ldsm_x4_trans(af, blk + swizzle_off(16 * kk + 8 * ((lane >> 4) & 1) + (lane & 7),
                                                    16 * m + 8 * ((lane >> 3) & 1)));
#pragma unroll
                for (int jp = 0; jp < N / 16; jp++) {
                    mma_bf16(st.o[4 * half + m] + 4 * (2 * jp), af, bf[jp][0], bf[jp][1]);
                    mma_bf16(st.o[4 * half + m] + 4 * (2 * jp + 1), af, bf[jp][2], bf[jp][3]);
                }
            }
        }
    }
}

#if NVFP4_HAVE_WGMMA
/* O^T += V^T P^T over all 8 resident latent blocks, k-step major so that consecutive wgmma go to
 * different accumulators. */
template <int N, bool CONTIG>
static __device__ __forceinline__ void pv_resident_wgmma(narrow_state<N, true> &st, const attend_plan &pl,
                                                         const resident_descs<CONTIG> &tile, const uint8_t *pt) {
    const uint64_t db = sw128_desc(warp_uniform(smem_addr(pt)), 1024, 16);
    uint64_t da[ATT_LATENT_BLOCKS];
#pragma unroll
    for (int b = 0; b < ATT_LATENT_BLOCKS; b++) da[b] = tile.of(pl, 1 + b, 1024, ATT_BLOCK);
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
#pragma unroll
        for (int b = 0; b < ATT_LATENT_BLOCKS; b++) {
            if (N == 16) wgmma_ss_n16<1>(st.o[b], da[b] + 128 * kk, db + 2 * kk, 1);
            else wgmma_ss_n32<1>(st.o[b], da[b] + 128 * kk, db + 2 * kk, 1);
        }
    }
}

/* After the wait for P.V over a resident tile: pins O^T, then frees the tile's 8 latent blocks, in
 * ring order. */
template <int N, bool CONTIG>
static __device__ __forceinline__ void pv_resident_done(narrow_state<N, true> &st, const attend_bars &bars,
                                                        const resident_descs<CONTIG> &tile, const attend_plan &pl) {
#pragma unroll
    for (int b = 0; b < ATT_LATENT_BLOCKS; b++) fence_regs<N / 2>(st.o[b]);
#pragma unroll 1
    for (int b = 1; b < ATT_TILE_BLOCKS; b++) release_block_at(bars, ring_index_after(tile.s0, b, pl));
}

/* Issues S^T of a resident tile (RoPE block into `rope`, latent blocks into the chains `lat`)
 * without waiting, in one batch behind one wgmma fence: unrolled, since accumulators in flight
 * across a loop edge or branch join make ptxas serialise wgmma (C7519). The overlapped loop issues
 * it while the previous tile's P.V is in flight. */
template <int N, int C, bool CONTIG>
static __device__ __forceinline__ void qk_issue_resident(float (*lat)[N / 2], float *rope, uint8_t *smem,
                                                         const attend_plan &pl, const resident_descs<CONTIG> &tile) {
    const uint64_t dq = sw128_desc(warp_uniform(smem_addr(smem + pl.off_q)), 1024, 16); /* Q block j: + 8 N j */
    float(*rope1)[N / 2] = reinterpret_cast<float(*)[N / 2]>(rope);
    qk_block_desc<N, 1>(rope1, tile.of(pl, 0, 1024, 16), dq + 8 * N * ATT_LATENT_BLOCKS, true);
#pragma unroll
    for (int i = 1; i < ATT_TILE_BLOCKS; i++)
        qk_block_desc<N, C>(lat, tile.of(pl, i, 1024, 16), dq + 8 * N * (i - 1), i == 1);
}

/* Pins the score accumulators after a wait and sums the chains into lat_out. */
template <int N, int C>
static __device__ __forceinline__ void qk_collect(float (*lat)[N / 2], float *rope, float *lat_out) {
    qk_pin<N, C>(lat, rope);
    qk_sum<N, C>(lat, lat_out);
}
#endif

/* O^T value (block b, index i) of a thread sits at operand dim (row) narrow_row0 + narrow_row(b, i)
 * and head (column) 2 (lane % 4) + narrow_col(i). The row's last three bits are lane / 4, so its
 * latent dim is latent_dim(narrow_row0) + narrow_row(b, i): a per-thread base plus a constant. */
template <bool WG>
static __device__ __forceinline__ int narrow_row0(int warp, int lane) {
    return (WG ? 16 : 128) * warp + (lane >> 2);
}
template <bool WG>
static __device__ __forceinline__ constexpr int narrow_row(int b, int i) {
    return (WG ? 64 : 16) * b + 8 * ((i >> 1) & 1);
}
static __device__ __forceinline__ constexpr int narrow_col(int i) {
    return 8 * (i >> 2) + (i & 1);
}

#endif
