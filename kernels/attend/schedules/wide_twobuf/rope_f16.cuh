/* The RoPE block in f16, where an instantiation of the two-buffer schedule takes it (ROPE_F16,
 * wide_twobuf_rope_f16: 368-byte records): the producer writes the keys' RoPE codes through the
 * hardware E4M3 -> f16 conversion (e4m3x16_f16), the consumer runs the RoPE k-steps as f16 wgmma
 * against Q's RoPE part converted to f16 when Q is loaded; the latent stays bf16.
 *
 * Q's RoPE part in f16. A bf16 value is exact in f16 when its exponent is -17..15. A row (a head)
 * whose finite nonzero RoPE values all lie there is converted as it is: every product and f32 sum
 * of the wgmma is then the bf16 form's. Any other row is converted times 2^s, one power of two for
 * the row, s = 15 - (its largest exponent), at most 126: nothing overflows, every value within 32
 * binades of the row's largest is exact, and smaller ones are rounded by at most 2^-40 of it. The f32
 * score is then the unshifted one times 2^s with the same roundings, and the softmax multiplies it
 * by 2^-s (rope_unshift) first: exact again, unless the true score leaves f32's range, where the
 * bf16 form's sums overflow too. The factors 2^-s wait in the wide consumer's xl array (wide_red.x:
 * the rows' 1 / l, written only in the epilogue), and only warps holding a shifted row multiply. A
 * shift, not a clamp or a flush: those change scores where the bf16 form was exact. NaN and +-Inf
 * in Q pass unchanged (their exponent does not count towards s), as in the bf16 form. */
#ifndef NVFP4_MLA_ROPE_F16_CUH
#define NVFP4_MLA_ROPE_F16_CUH

#include "lib/attend_consumer.cuh"

/* bf16 exponent fields (bias 127) of the values f16 holds exactly: 2^-17 .. 2^16 (see above). */
#define ATT_F16_EXACT_EMIN 110
#define ATT_F16_EXACT_EMAX 142
#define ATT_F16_SHIFT_MAX 126 /* 2^126 takes the smallest bf16 subnormal (2^-133) to 2^-7 */

/* Q's RoPE block (rope_block: the 9th SW128 block of Q) rows [row0, row0 + ROWS) from bf16 to f16
 * in place by the rule above, each row's 2^-s into unshift[row]. Thread t of a warpgroup takes chunk
 * t % 8 of rows row0 + t / 8 + 16k (load_q_rows's chunks: the caller makes them visible to it), so
 * that a row's eight chunks are eight consecutive lanes. Ends with the proxy fence for the wgmma. */
template <int ROWS>
static __device__ __forceinline__ void q_rope_to_f16(uint8_t *rope_block, int row0, int t, float *unshift) {
    static_assert(ROWS % 16 == 0 && ROWS <= 64, "16 rows a pass of a warpgroup");
    const int cc = t & 7, lane = t & 31;
#pragma unroll 1
    for (int r = row0 + (t >> 3); r < row0 + ROWS; r += 16) {
        uint4 *p = reinterpret_cast<uint4 *>(rope_block + swizzle_off(r, cc * 8));
        const uint4 v = *p;
        uint32_t w[4] = {v.x, v.y, v.z, v.w};
        uint32_t emax = 0;
        bool outside = false;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const uint32_t b = (w[i >> 1] >> (16 * (i & 1))) & 0xFFFFu, e = (b >> 7) & 0xFFu;
            if (e == 0xFFu) continue; /* NaN, +-Inf: as they are */
            emax = max(emax, e);
            outside |= (b & 0x7FFFu) != 0u && (e < ATT_F16_EXACT_EMIN || e > ATT_F16_EXACT_EMAX);
        }
#pragma unroll
        for (int x = 1; x < 8; x <<= 1) emax = max(emax, __shfl_xor_sync(0xFFFFFFFFu, emax, x));
        outside = ((__ballot_sync(0xFFFFFFFFu, outside) >> (lane & 24)) & 0xFFu) != 0u;
        const int s = outside ? min(ATT_F16_EXACT_EMAX - (int)emax, ATT_F16_SHIFT_MAX) : 0;
        const float up = __uint_as_float((uint32_t)(127 + s) << 23); /* 2^s: -112 <= s <= 126 */
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 f = __bfloat1622float2(as_bf162(w[i]));
            const __half2 h = __floats2half2_rn(f.x * up, f.y * up); /* exact products; one rounding */
            w[i] = *reinterpret_cast<const uint32_t *>(&h);
        }
        *p = make_uint4(w[0], w[1], w[2], w[3]);
        if (cc == 0) unshift[r] = __uint_as_float((uint32_t)(127 - s) << 23);
    }
    fence_proxy_async();
}


/* The RoPE scores of rows 16 warp + lane / 4 (+ 8) (the n64 accumulator: rope[i] in row
 * (i >> 1) & 1) times their rows' 2^-s from q_rope_to_f16, before the softmax uses them; skipped by
 * whole warps, since ordinary rows are not shifted (factor 1). */
static __device__ __forceinline__ void rope_unshift(float *rope, const float *unshift, int warp, int lane) {
    const int g = lane >> 2;
    const float u[2] = {unshift[16 * warp + g], unshift[16 * warp + g + 8]};
    if (__any_sync(0xFFFFFFFFu, u[0] != 1.0f || u[1] != 1.0f)) {
#pragma unroll
        for (int i = 0; i < 32; i++) rope[i] *= u[(i >> 1) & 1];
    }
}

#endif
