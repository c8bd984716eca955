/* nvfp4-mla bench, attend: batch 128, top-k 2048, random slots over the big cache; 368-byte
 * per-token records and the 656-byte fp8_ds_mla baseline through the same kernel, h = 16..128.
 * Each row is checked first: 4 queries over a compact cache through the CUDA and the CPU attend,
 * outputs within rel 2/128 + 1e-3 max|V| and LSE within rel 1e-5 (tests/test_gpu_attend.c). */
#include <math.h>
#include <string.h>

#include <map>

#include "bench.h"

static const int64_t NQ = 128, TOPK = 2048, CQ = 4; /* queries timed, top-k, queries checked */

/* What the attend rows share: queries, slots, outputs, the workspace, the 656-byte records. */
struct attend_bufs {
    int32_t *d_topk, *d_small_topk; /* [NQ, TOPK] over the big cache / the compact caches */
    uint16_t *d_q, *d_aout;         /* [NQ, 128, 576] / [NQ, 128, 512] bf16 */
    float *d_lse;                   /* [NQ, 128] */
    void *d_ws;                     /* grown to the largest attend_workspace_bytes */
    size_t ws_cap;
    std::vector<uint8_t> rec656;    /* [BENCH_T_MAX / 2, 656] valid random codes, scale 0.004 */
    uint8_t *d_656;
    std::vector<int32_t> small;     /* the check's slots, host copy of d_small_topk */
    std::map<int64_t, double> us368; /* per h, for the 656 rows' speedup */
};

static void attend_setup(attend_bufs &a) {
    CK(cudaMalloc(&a.d_topk, NQ * TOPK * 4));
    CK(cudaMalloc(&a.d_small_topk, NQ * TOPK * 4));
    CK(cudaMalloc(&a.d_q, NQ * 128 * 576 * 2));
    CK(cudaMalloc(&a.d_aout, NQ * 128 * 512 * 2));
    CK(cudaMalloc(&a.d_lse, NQ * 128 * 4));
    std::vector<uint16_t> qh(NQ * 128 * 576);
    for (auto &v : qh) {
        uint64_t r = bench_rand();
        v = (uint16_t)(((r & 1) << 15) | ((122 + (r >> 1) % 6) << 7) | ((r >> 8) & 0x7F));
    }
    CK(cudaMemcpy(a.d_q, qh.data(), qh.size() * 2, cudaMemcpyHostToDevice));
    a.rec656.resize(BENCH_T_MAX / 2 * NVFP4_MLA_RECORD_BYTES_656);
    for (size_t i = 0; i < a.rec656.size(); i++) {
        const size_t off = i % NVFP4_MLA_RECORD_BYTES_656;
        a.rec656[i] = off < NVFP4_MLA_LATENT_DIM ? (uint8_t)(bench_rand() & 0x77) : (uint8_t)0;
    }
    for (int64_t r = 0; r < BENCH_T_MAX / 2; r++)
        for (int t4 = 0; t4 < NVFP4_MLA_FP8_656_TILES; t4++) {
            float sc = 0.004f;
            memcpy(&a.rec656[r * 656 + NVFP4_MLA_FP8_656_TILE_SCALE_OFFSET + 4 * t4], &sc, 4);
        }
    CK(cudaMalloc(&a.d_656, a.rec656.size()));
    CK(cudaMemcpy(a.d_656, a.rec656.data(), a.rec656.size(), cudaMemcpyHostToDevice));
}

/* The arguments of one row, timed over the big cache (its slots in d_topk). */
static nvfp4_mla_attend_args_t timed_args(const bench &b, const attend_bufs &a, int is656, int64_t H, int64_t cap) {
    nvfp4_mla_attend_args_t at = {};
    at.struct_size = sizeof at;
    at.layout = is656 ? NVFP4_MLA_LAYOUT_FP8_DS_MLA_656 : NVFP4_MLA_LAYOUT_FP8_ROPE_368;
    const int32_t rb = (int32_t)nvfp4_mla_record_bytes(at.layout);
    at.scale_mode = is656 ? NVFP4_MLA_SCALE_STATIC : NVFP4_MLA_SCALE_PER_TOKEN;
    at.outer_scale = nvfp4_mla_default_outer_scale(at.scale_mode);
    at.sm_scale = 0.0416666f;
    at.stream = b.s;
    at.q = bench_tensor(a.d_q, NVFP4_MLA_DTYPE_BF16, 3, {NQ, H, 576}, {H * 576, 576, 1});
    at.out = bench_tensor(a.d_aout, NVFP4_MLA_DTYPE_BF16, 3, {NQ, H, 512}, {H * 512, 512, 1});
    at.lse = bench_tensor(a.d_lse, NVFP4_MLA_DTYPE_F32, 2, {NQ, H}, {H, 1});
    at.slots = bench_tensor(a.d_topk, NVFP4_MLA_DTYPE_I32, 2, {NQ, TOPK}, {TOPK, 1});
    at.cache = bench_tensor(b.cache, NVFP4_MLA_DTYPE_U8, 3, {cap / BENCH_BLOCK, BENCH_BLOCK, rb}, {BENCH_BLOCK * rb, rb, 1});
    return at;
}

/* The check's arguments: CQ queries over the compact records (d_656, or the 368 per-token records
 * of the writer's tokens in d_compact). */
static nvfp4_mla_attend_args_t check_args(const bench &b, const attend_bufs &a, const nvfp4_mla_attend_args_t &at,
                                          int is656) {
    nvfp4_mla_attend_args_t ac = at;
    ac.q.shape[0] = ac.out.shape[0] = ac.lse.shape[0] = CQ;
    ac.slots = bench_tensor(a.d_small_topk, NVFP4_MLA_DTYPE_I32, 2, {CQ, TOPK}, {TOPK, 1});
    const int64_t small_cap = BENCH_T_MAX / 2;
    ac.cache = is656 ? bench_tensor(a.d_656, NVFP4_MLA_DTYPE_U8, 3, {small_cap / BENCH_BLOCK, BENCH_BLOCK, 656},
                                    {BENCH_BLOCK * 656, 656, 1})
                     : bench_tensor(b.d_compact, NVFP4_MLA_DTYPE_U8, 3, {BENCH_T_MAX, 1, 368}, {368, 368, 1});
    return ac;
}

/* One workspace for both calls of a row, grown as the shapes need. */
static int size_workspace(bench &b, attend_bufs &a, nvfp4_mla_attend_args_t &ac, nvfp4_mla_attend_args_t &at) {
    uint64_t ws = 0, ws2 = 0;
    int ok = b.t->attend_workspace_bytes(b.gpu, &ac, &ws) == NVFP4_MLA_OK &&
             b.t->attend_workspace_bytes(b.gpu, &at, &ws2) == NVFP4_MLA_OK;
    const uint64_t need = ws > ws2 ? ws : ws2;
    if (need > a.ws_cap) {
        if (a.d_ws) cudaFree(a.d_ws);
        CK(cudaMalloc(&a.d_ws, need));
        a.ws_cap = need;
    }
    ac.workspace = at.workspace = bench_tensor(a.d_ws, NVFP4_MLA_DTYPE_U8, 1, {(int64_t)a.ws_cap}, {1});
    return ok;
}

/* Largest |value| a checked record can decode to (the absolute part of the tolerance). */
static float value_bound(const attend_bufs &a, const std::vector<uint8_t> &cache_h, int is656) {
    float vmax = 0.0f;
    for (const int32_t sl : a.small) {
        if (sl < 0 || sl >= (is656 ? BENCH_T_MAX / 2 : BENCH_T_MAX)) continue;
        if (is656) {
            vmax = fmaxf(vmax, 448.0f * 0.004f);
        } else {
            float st;
            memcpy(&st, &cache_h[(size_t)sl * 368 + NVFP4_MLA_RECORD_TOKEN_SCALE_OFFSET], 4);
            vmax = fmaxf(vmax, 6.0f * 448.0f * st);
        }
    }
    return vmax;
}

/* The CUDA attend of `ac` against the CPU attend of the same bytes. */
static int check_row(bench &b, const attend_bufs &a, const nvfp4_mla_attend_args_t &ac, int is656, int64_t H) {
    int ok = b.t->attend(b.gpu, &ac) == NVFP4_MLA_OK;
    CK(cudaStreamSynchronize(b.s));
    std::vector<uint16_t> got(CQ * H * 512), want(CQ * H * 512), qh(CQ * H * 576);
    std::vector<float> lse_got(CQ * H), lse_want(CQ * H);
    CK(cudaMemcpy(got.data(), a.d_aout, got.size() * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(lse_got.data(), a.d_lse, lse_got.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(qh.data(), a.d_q, qh.size() * 2, cudaMemcpyDeviceToHost));
    std::vector<uint8_t> cache_h(is656 ? a.rec656.size() : (size_t)BENCH_T_MAX * 368);
    if (is656) cache_h = a.rec656;
    else CK(cudaMemcpy(cache_h.data(), b.d_compact, cache_h.size(), cudaMemcpyDeviceToHost));
    nvfp4_mla_attend_args_t hc = ac;
    hc.q.data = qh.data(), hc.slots.data = (void *)a.small.data(), hc.cache.data = cache_h.data();
    hc.out.data = want.data(), hc.lse.data = lse_want.data();
    hc.workspace = nvfp4_mla_tensor_t{};
    hc.stream = NULL;
    for (nvfp4_mla_tensor_t *tt : {&hc.q, &hc.slots, &hc.cache, &hc.out, &hc.lse}) tt->device_type = NVFP4_MLA_DEVICE_CPU;
    ok = ok && b.t->attend(b.host.cpu, &hc) == NVFP4_MLA_OK;
    const float vmax = value_bound(a, cache_h, is656);
    for (size_t i = 0; ok && i < got.size(); i++) {
        uint32_t cb = (uint32_t)want[i] << 16, db = (uint32_t)got[i] << 16;
        float c, d;
        memcpy(&c, &cb, 4);
        memcpy(&d, &db, 4);
        ok = fabsf(c - d) <= 1e-3f * vmax + (2.0f / 128) * fabsf(c);
    }
    for (size_t i = 0; ok && i < lse_got.size(); i++)
        ok = isinf(lse_want[i]) ? isinf(lse_got[i]) : fabsf(lse_want[i] - lse_got[i]) <= 1e-5f * fmaxf(fabsf(lse_want[i]), 1.0f);
    return ok;
}

/* One row: checked, timed, printed with its TFLOP/s, ratios and (656) the speedup of 368. */
static void attend_row(bench &b, attend_bufs &a, int is656, int64_t H, int64_t cap, int records_ok) {
    nvfp4_mla_attend_args_t at = timed_args(b, a, is656, H, cap), ac = check_args(b, a, at, is656);
    int ok = size_workspace(b, a, ac, at) && records_ok;
    ok = check_row(b, a, ac, is656, H) && ok;
    int launched = 1;
    const double us = median_us([&] { launched &= b.t->attend(b.gpu, &at) == NVFP4_MLA_OK; }, 3, 20, b.s);
    const int32_t rb = (int32_t)nvfp4_mla_record_bytes(at.layout);
    const double bytes = NQ * TOPK * (double)rb + NQ * H * (576.0 + 512) * 2;
    const double flops = 2.0 * NQ * H * TOPK * (576 + 512);
    char name[64];
    snprintf(name, sizeof name, "attend %s h=%lld", is656 ? "fp8-656" : "nvfp4-368", (long long)H);
    bench_add_row(b, name, NQ * TOPK, us, bytes, b.copy_tbps, "copy", ok && launched);
    const double tflops = flops / (us * 1e-6) / 1e12;
    printf("%-28s %9s %11s %9.1f %8.3f  %-10s (TFLOP/s; time ratio gather368/attend; %.2f of mma.sync)\n", "", "", "",
           tflops, (BENCH_N * 368.0 * 2 + BENCH_N * 4.0) / (b.g368_tbps * 1e12) / (us * 1e-6), "gather368",
           tflops / b.mma_tflops);
    if (!is656) a.us368[H] = us;
    else printf("%-28s %9s %11s %9s %8.3f  %-10s\n", "  (368 speedup over 656)", "", "", "", us / a.us368[H], "656/368");
}

/* New random slots for one layout: over its big cache (timed) and its compact cache (checked, 1 in
 * 16 unused); for 368 the compact cache is re-written with per-token records of the tokens.
 * 0 when that write failed: the layout's rows then fail their check (the CPU twin would read the
 * same stale records and agree). */
static int layout_slots(bench &b, attend_bufs &a, int is656, int64_t cap) {
    const int64_t small_cap = is656 ? BENCH_T_MAX / 2 : BENCH_T_MAX;
    std::vector<int32_t> topk_slots(NQ * TOPK);
    for (auto &v : topk_slots) v = (int32_t)(bench_rand() % (uint64_t)cap);
    CK(cudaMemcpy(a.d_topk, topk_slots.data(), NQ * TOPK * 4, cudaMemcpyHostToDevice));
    a.small.assign(NQ * TOPK, 0);
    for (auto &v : a.small) v = (bench_rand() % 16 == 0) ? -1 : (int32_t)(bench_rand() % (uint64_t)small_cap);
    CK(cudaMemcpy(a.d_small_topk, a.small.data(), NQ * TOPK * 4, cudaMemcpyHostToDevice));
    if (is656) return 1;
    const nvfp4_mla_write_args_t w = bench_write_args_368(b, NVFP4_MLA_SCALE_PER_TOKEN,
                                                          nvfp4_mla_default_outer_scale(NVFP4_MLA_SCALE_PER_TOKEN),
                                                          BENCH_T_MAX, 0);
    return b.t->write(b.gpu, &w) == NVFP4_MLA_OK;
}

void bench_attend(bench &b) {
    static attend_bufs a; /* large; one per process */
    attend_setup(a);
    const int64_t heads_list[4] = {16, 32, 64, 128};
    for (int is656 = 0; is656 < 2 && (!b.only[0] || !strcmp(b.only, "attend")); is656++) {
        const int64_t cap = is656 ? (int64_t)(b.copy_bytes / 656) / BENCH_BLOCK * BENCH_BLOCK : b.capacity;
        const int records_ok = layout_slots(b, a, is656, cap);
        for (int64_t H : heads_list) attend_row(b, a, is656, H, cap, records_ok);
    }
    cudaFree(a.d_656);
}
