/* Attend test cases on the host (see attend_case.h). */
#include "attend_case.h"

#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "kernel_args.h"
#include "context.h"
#include "errors.h"
#include "host_codes.h"
#include "ops.h"
#include "record_cpu.h"
#include "test_util.h"

attend_case_opts_t attend_case_opts(int64_t nq, int64_t h, int64_t topk, uint32_t layout, uint32_t mode) {
    attend_case_opts_t o = {.nq = nq,
                            .h = h,
                            .topk = topk,
                            .layout = layout,
                            .mode = mode,
                            .block = 64,
                            .slots_n = 4096,
                            .unused = 0.1,
                            .lengths = 1,
                            .empty_first = 1,
                            .magnitude_sigma = 0.5,
                            .q_sigma = 1.0,
                            .seed = 1};
    return o;
}

/* The case's random stream: xorshift64 over a mixed seed. */
static double uniform(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return ((double)(*s >> 11) + 0.5) * 0x1p-53;
}

/* N(0, 1) values: a table of 2^16 Box-Muller draws made once, indexed by the case's stream (cheap:
 * big cases draw tens of millions). */
static double gauss(uint64_t *s) {
    static double table[1 << 16];
    static int made;
    if (!made) {
        uint64_t t = 0x853C49E6748FEA9Bull;
        for (int i = 0; i < (1 << 16); i += 2) {
            const double r = sqrt(-2 * log(uniform(&t))), a = 6.283185307179586 * uniform(&t);
            table[i] = r * cos(a), table[i + 1] = r * sin(a);
        }
        made = 1;
    }
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return table[*s >> 48];
}

static void *must_alloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p)
        fail_msg("cannot allocate %zu bytes", bytes);
    return p;
}

uint8_t *attend_case_record(const attend_case_t *c, uint8_t *cache, int64_t slot) {
    return cache + (slot / c->o.block) * c->stride + (slot % c->o.block) * c->rb;
}

/* Tokens: Gaussian latent and RoPE, times one log-normal magnitude a token. */
static void make_tokens(attend_case_t *c, uint64_t *rng) {
    const int64_t n = c->o.slots_n;
    c->tok = must_alloc((size_t)n * 576 * 2);
    for (int64_t t = 0; t < n; t++) {
        const double mag = 0.5 * exp(c->o.magnitude_sigma * gauss(rng));
        for (int i = 0; i < 576; i++)
            c->tok[t * 576 + i] = nvfp4_f32_to_bf16((float)(gauss(rng) * mag));
    }
}

/* Writes token rows [first, first + n) of `kv` (latent rows of 576-value stride) into `cache` at
 * slots `ids` with the CPU writer in the case's mode. */
static void write_records(const attend_case_t *c, nvfp4_mla_context_t *cpu, uint8_t *cache, const uint16_t *kv,
                          const int64_t *ids, int64_t n) {
    nvfp4_mla_write_args_t w = {.struct_size = sizeof w,
                                .layout = c->o.layout,
                                .scale_mode = c->o.mode,
                                .outer_scale = c->scale,
                                .kv_c = tu_rows((void *)kv, NVFP4_MLA_DTYPE_BF16, n, 512, 576),
                                .k_pe = tu_rows((void *)(kv + 512), NVFP4_MLA_DTYPE_BF16, n, 64, 576),
                                .slot_mapping = tu_vec((void *)ids, NVFP4_MLA_DTYPE_I64, n),
                                .cache = tu_cache(cache, c->o.slots_n / c->o.block, c->o.block, c->rb, c->stride)};
    if (nvfp4_op_write(cpu, &w) != NVFP4_MLA_OK)
        fail_msg("cpu write: %s", nvfp4_last_error());
}

static void make_cache(attend_case_t *c, nvfp4_mla_context_t *cpu, uint64_t *rng) {
    const int64_t n = c->o.slots_n;
    c->cache = calloc((size_t)(n / c->o.block), (size_t)c->stride);
    if (!c->cache)
        fail_msg("cannot allocate the cache");
    if (c->rb != NVFP4_MLA_RECORD_BYTES_656) {
        int64_t *ids = must_alloc((size_t)n * 8);
        for (int64_t t = 0; t < n; t++)
            ids[t] = t;
        write_records(c, cpu, c->cache, c->tok, ids, n);
        free(ids);
        return;
    }
    for (int64_t t = 0; t < n; t++) {
        uint8_t *rec = attend_case_record(c, c->cache, t);
        if (!c->o.random_656) {
            host_encode_fp8_656_pow2(c->tok + t * 576, rec);
            continue;
        }
        for (int i = 0; i < 512; i++)
            rec[i] = (uint8_t)(uniform(rng) * 256) & 0xF7; /* never 0x7F / 0xFF */
        for (int i = 0; i < 4; i++) {
            const float s = (float)(0.001 + uniform(rng) * 0.01);
            memcpy(rec + 512 + 4 * i, &s, 4);
        }
        memcpy(rec + 528, c->tok + t * 576 + 512, 128);
    }
}

static void make_queries(attend_case_t *c, uint64_t *rng) {
    const int64_t nq = c->o.nq, h = c->o.h, topk = c->o.topk;
    const size_t q_n = (size_t)(nq * h * 576);
    c->q = must_alloc(q_n * 2);
    for (size_t i = 0; i < q_n; i++)
        c->q[i] = nvfp4_f32_to_bf16((float)(gauss(rng) * c->o.q_sigma));
    c->slots = must_alloc((size_t)(nq * topk) * 4);
    c->valid = must_alloc((size_t)nq * 4);
    for (int64_t i = 0; i < nq * topk; i++)
        c->slots[i] = uniform(rng) < c->o.unused ? -1 : (int32_t)(uniform(rng) * (double)c->o.slots_n);
    for (int64_t i = 0; i < nq; i++)
        c->valid[i] = c->o.lengths && i % 3 == 2 ? (int32_t)(uniform(rng) * (double)(topk + 1)) : (int32_t)topk;
    if (c->o.empty_first && nq > 1)
        for (int64_t e = 0; e < topk; e++)
            c->slots[e] = -1;
}

void attend_case_make(attend_case_t *c, const attend_case_opts_t *o, nvfp4_mla_context_t *cpu) {
    memset(c, 0, sizeof *c);
    c->o = *o;
    c->rb = (int32_t)nvfp4_mla_record_bytes(o->layout);
    c->stride = o->block * c->rb + o->pad;
    c->scale = o->mode == NVFP4_MLA_SCALE_PER_TOKEN ? 0.0f : c->rb == NVFP4_MLA_RECORD_BYTES_656 ? 1.0f : 0.01f;
    uint64_t rng = o->seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    make_tokens(c, &rng);
    make_cache(c, cpu, &rng);
    make_queries(c, &rng);
    const int64_t nq = o->nq, h = o->h, topk = o->topk;
    c->out = must_alloc((size_t)(nq * h * 512) * 2);
    c->lse = must_alloc((size_t)(nq * h) * 4);
    nvfp4_mla_attend_args_t *a = &c->a;
    a->struct_size = sizeof *a, a->layout = o->layout, a->scale_mode = o->mode, a->outer_scale = c->scale;
    a->sm_scale = 1.0f / sqrtf(576.0f);
    a->q = tu_tensor(c->q, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){nq, h, 576}, (int64_t[]){h * 576, 576, 1});
    a->slots = tu_rows(c->slots, NVFP4_MLA_DTYPE_I32, nq, topk, topk);
    a->valid_len = tu_vec(c->valid, NVFP4_MLA_DTYPE_I32, nq);
    a->cache = tu_cache(c->cache, o->slots_n / o->block, o->block, c->rb, c->stride);
    a->out = tu_tensor(c->out, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){nq, h, 512}, (int64_t[]){h * 512, 512, 1});
    a->lse = tu_rows(c->lse, NVFP4_MLA_DTYPE_F32, nq, h, h);
}

void attend_case_free(attend_case_t *c) {
    free(c->cache), free(c->tok), free(c->q), free(c->slots), free(c->valid), free(c->out), free(c->lse);
    memset(c, 0, sizeof *c);
}

/* The CPU attend of queries [q0, q0 + n) over `cache` (NULL: the case's): its status (no cmocka
 * call, so that threads may use it). */
static nvfp4_mla_status_t reference(const attend_case_t *c, nvfp4_mla_context_t *cpu, const uint8_t *cache, int64_t q0,
                                    int64_t n, uint16_t *out, float *lse) {
    nvfp4_mla_attend_args_t r = c->a;
    const int64_t h = c->o.h, topk = c->o.topk;
    r.q = tu_tensor(c->q + q0 * h * 576, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){n, h, 576}, (int64_t[]){h * 576, 576, 1});
    r.slots = tu_rows(c->slots + q0 * topk, NVFP4_MLA_DTYPE_I32, n, topk, topk);
    r.valid_len = tu_vec(c->valid + q0, NVFP4_MLA_DTYPE_I32, n);
    if (cache)
        r.cache.data = (void *)cache;
    r.out = tu_tensor(out, NVFP4_MLA_DTYPE_BF16, 3, (int64_t[]){n, h, 512}, (int64_t[]){h * 512, 512, 1});
    r.lse = tu_rows(lse, NVFP4_MLA_DTYPE_F32, n, h, h);
    r.workspace = (nvfp4_mla_tensor_t){0};
    r.stream = NULL;
    return nvfp4_op_attend(cpu, &r);
}

void attend_case_reference(const attend_case_t *c, nvfp4_mla_context_t *cpu, const uint8_t *cache, int64_t q0,
                           int64_t n, uint16_t *out, float *lse) {
    if (reference(c, cpu, cache, q0, n, out, lse) != NVFP4_MLA_OK)
        fail_msg("cpu attend: %s", nvfp4_last_error());
}

/* One thread's share of attend_case_check: picks[i] for i = first, first + step, ... */
typedef struct check_job {
    const attend_case_t *c;
    nvfp4_mla_context_t *cpu;
    const int64_t *picks;
    int64_t n, first, step;
    attend_check_stats_t stats;
    int cpu_failed;
    char cpu_error[256];
} check_job_t;

static void *check_worker(void *arg) {
    check_job_t *j = arg;
    const attend_case_t *c = j->c;
    const int64_t h = c->o.h;
    uint16_t *want = must_alloc((size_t)h * 512 * 2);
    float *want_lse = must_alloc((size_t)h * 4);
    for (int64_t i = j->first; i < j->n && !j->cpu_failed; i += j->step) {
        const int64_t qi = j->picks[i];
        if (reference(c, j->cpu, NULL, qi, 1, want, want_lse) != NVFP4_MLA_OK) {
            j->cpu_failed = 1;
            snprintf(j->cpu_error, sizeof j->cpu_error, "%s", nvfp4_last_error());
            break;
        }
        attend_check_query(c->out + qi * h * 512, c->lse + qi * h, want, want_lse, h, qi, NULL, &j->stats);
    }
    free(want), free(want_lse);
    return NULL;
}

int64_t attend_case_check(const attend_case_t *c, nvfp4_mla_context_t *cpu, const int64_t *picks, int64_t n,
                          attend_check_stats_t *stats) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t threads = cores < 1 ? 1 : cores > 16 ? 16 : cores;
    threads = threads < n ? threads : n > 0 ? n : 1;
    check_job_t jobs[16];
    pthread_t tid[16];
    for (int64_t t = 0; t < threads; t++) {
        jobs[t] = (check_job_t){.c = c, .cpu = cpu, .picks = picks, .n = n, .first = t, .step = threads};
        if (pthread_create(&tid[t], NULL, check_worker, &jobs[t]))
            fail_msg("pthread_create");
    }
    attend_check_stats_t all = {0};
    for (int64_t t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        if (jobs[t].cpu_failed)
            fail_msg("cpu attend: %s", jobs[t].cpu_error);
        attend_check_merge_stats(&all, &jobs[t].stats);
    }
    attend_check_merge_stats(stats, &all);
    return all.failed;
}

/* One entry's key as binary32 (what the CPU reference computes with). */
static void entry_key(const attend_case_t *c, int32_t slot, float *row) {
    const uint8_t *rec = attend_case_record(c, c->cache, slot);
    if (c->rb == NVFP4_MLA_RECORD_BYTES_656) {
        uint16_t bf[576];
        nvfp4_mla_decode_fp8_656_cpu(rec, bf);
        for (int i = 0; i < 576; i++)
            row[i] = nvfp4_bf16_to_f32(bf[i]);
    } else {
        nvfp4_mla_decode_record_f32_cpu(rec, c->rb, c->o.mode == NVFP4_MLA_SCALE_PER_TOKEN, c->scale, row);
    }
}

/* The softmax weight of each entry's slot in (query qi, head)'s row (duplicates summed; 0 for -1
 * entries and those past valid_len): [topk], the caller frees. */
static double *slot_weights(const attend_case_t *c, int64_t qi, int64_t head) {
    const int64_t topk = c->o.topk, limit = c->valid[qi] < topk ? c->valid[qi] : topk;
    const uint16_t *q = c->q + (qi * c->o.h + head) * 576;
    double *score = must_alloc((size_t)(topk ? topk : 1) * sizeof *score), m = -INFINITY, l = 0;
    double *w = must_alloc((size_t)(topk ? topk : 1) * sizeof *w);
    float key[576];
    for (int64_t k = 0; k < topk; k++) {
        const int32_t slot = c->slots[qi * topk + k];
        score[k] = -INFINITY;
        if (slot < 0 || k >= limit)
            continue;
        entry_key(c, slot, key);
        double dot = 0;
        for (int i = 0; i < 576; i++)
            dot += (double)nvfp4_bf16_to_f32(q[i]) * key[i];
        score[k] = dot * c->a.sm_scale;
        m = fmax(m, score[k]);
    }
    for (int64_t k = 0; k < topk; k++)
        l += score[k] == -INFINITY ? 0 : exp(score[k] - m);
    for (int64_t k = 0; k < topk; k++) {
        w[k] = 0;
        for (int64_t j = 0; j < topk && score[k] != -INFINITY; j++)
            if (c->slots[qi * topk + j] == c->slots[qi * topk + k] && score[j] != -INFINITY)
                w[k] += exp(score[j] - m) / l;
    }
    free(score);
    return w;
}

int64_t attend_case_heaviest_entry(const attend_case_t *c, int64_t qi, int64_t head, double *weight) {
    double *w = slot_weights(c, qi, head);
    int64_t best = -1;
    *weight = 0;
    for (int64_t k = 0; k < c->o.topk; k++)
        if (w[k] > *weight)
            *weight = w[k], best = c->slots[qi * c->o.topk + k];
    free(w);
    return best;
}

int64_t attend_case_light_slots(const attend_case_t *c, int64_t qi, int64_t head, double cap, int64_t *slots,
                                int64_t max, double *total) {
    double *w = slot_weights(c, qi, head);
    int64_t n = 0;
    *total = 0;
    for (int64_t k = 0; k < c->o.topk && n < max; k++) {
        const int64_t slot = c->slots[qi * c->o.topk + k];
        int seen = w[k] <= 0 || w[k] >= cap;
        for (int64_t i = 0; i < n && !seen; i++)
            seen = slots[i] == slot;
        if (!seen)
            slots[n++] = slot, *total += w[k];
    }
    free(w);
    return n;
}

int64_t attend_case_lightest_tile(const attend_case_t *c, int64_t qi, int64_t head, double *weight) {
    double *w = slot_weights(c, qi, head);
    int64_t best = -1;
    *weight = INFINITY;
    for (int64_t t = 0; t * 64 < c->o.topk; t++) {
        double sum = 0;
        int any = 0;
        for (int64_t k = t * 64; k < t * 64 + 64 && k < c->o.topk; k++)
            sum += w[k], any |= w[k] > 0; /* a duplicated slot counts its whole weight: an upper bound */
        if (any && sum < *weight)
            *weight = sum, best = t;
    }
    free(w);
    return best;
}

int attend_case_make_fault_target(attend_case_t *c, uint32_t layout, uint32_t mode, int64_t h, uint64_t seed,
                                  nvfp4_mla_context_t *cpu, int64_t *query, int64_t *head, int64_t *slot,
                                  double *weight) {
    int used = 0;
    *weight = 0;
    for (; used < 8 && *weight < 0.25; used++) { /* data where one entry matters */
        if (used)
            attend_case_free(c);
        attend_case_opts_t o = attend_case_opts(4, h, 128, layout, mode);
        o.lengths = 0, o.empty_first = 0, o.unused = 0, o.seed = seed + (uint64_t)used;
        attend_case_make(c, &o, cpu);
        for (int64_t q = 0; q < o.nq; q++)
            for (int64_t j = 0; j < o.h; j++) {
                double w;
                const int64_t s = attend_case_heaviest_entry(c, q, j, &w);
                if (w > *weight) {
                    *weight = w, *slot = s;
                    if (query)
                        *query = q;
                    if (head)
                        *head = j;
                }
            }
    }
    if (*weight < 0.25)
        fail_msg("%d-byte records, %s, h %lld: no entry carries a quarter of a row (%.3f): the fault would be invisible",
                 c->rb, mode == NVFP4_MLA_SCALE_PER_TOKEN ? "per-token" : "static", (long long)h, *weight);
    return used;
}

void attend_fault_scale_latent(const attend_case_t *c, nvfp4_mla_context_t *cpu, uint8_t *cache, int64_t slot,
                               float factor) {
    uint8_t *rec = attend_case_record(c, cache, slot);
    if (c->rb == NVFP4_MLA_RECORD_BYTES_656) {
        for (int t = 0; t < 4; t++) {
            float s;
            memcpy(&s, rec + 512 + 4 * t, 4);
            s *= factor;
            memcpy(rec + 512 + 4 * t, &s, 4);
        }
        return;
    }
    uint16_t row[576];
    for (int i = 0; i < 576; i++) {
        const float v = nvfp4_bf16_to_f32(c->tok[slot * 576 + i]);
        row[i] = i < 512 ? nvfp4_f32_to_bf16(v * factor) : c->tok[slot * 576 + i];
    }
    const int64_t id = slot;
    write_records(c, cpu, cache, row, &id, 1);
}

int attend_fault_bump_scale(const attend_case_t *c, uint8_t *cache, int64_t slot) {
    const int is656 = c->rb == NVFP4_MLA_RECORD_BYTES_656;
    int group = 0;
    float vmax = 0;
    for (int i = 0; i < 512; i++) {
        const float v = fabsf(nvfp4_bf16_to_f32(c->tok[slot * 576 + i]));
        if (v > vmax)
            vmax = v, group = is656 ? i / 128 : i / 16;
    }
    uint8_t *rec = attend_case_record(c, cache, slot);
    if (is656) {
        float s;
        memcpy(&s, rec + 512 + 4 * group, 4);
        s *= 2.0f;
        memcpy(rec + 512 + 4 * group, &s, 4);
        return group;
    }
    uint8_t *code = rec + 256 + group;
    *code = (uint8_t)((*code & 0x7F) < 0x7E ? *code + 1 : *code - 1); /* never a NaN code */
    return group;
}

void attend_merge_partials(int n, const float *const *o, const double *lse, uint16_t *out, float *lse_out) {
    double m = -INFINITY, l = 0, acc[512] = {0};
    for (int s = 0; s < n; s++)
        m = fmax(m, lse[s]);
    if (m != -INFINITY)
        for (int s = 0; s < n; s++) {
            const double w = exp(lse[s] - m);
            l += w;
            for (int i = 0; i < 512; i++)
                acc[i] += w * o[s][i];
        }
    for (int i = 0; i < 512; i++)
        out[i] = nvfp4_f32_to_bf16(l > 0 ? (float)(acc[i] / l) : 0.0f);
    *lse_out = l > 0 ? (float)(m + log(l)) : -INFINITY;
}

const attend_fault_case_t attend_fault_cases[] = {
    {NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 16, 4700},
    {NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 32, 4716},
    {NVFP4_MLA_LAYOUT_FP8_ROPE_368, NVFP4_MLA_SCALE_PER_TOKEN, 64, 4732},
    {NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC, 16, 4748},
    {NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC, 32, 4764},
    {NVFP4_MLA_LAYOUT_BF16_ROPE_432, NVFP4_MLA_SCALE_STATIC, 64, 4780},
    {NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC, 16, 4796},
    {NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC, 32, 4812},
    {NVFP4_MLA_LAYOUT_FP8_DS_MLA_656, NVFP4_MLA_SCALE_STATIC, 64, 4828},
};
const int attend_fault_case_count = sizeof attend_fault_cases / sizeof attend_fault_cases[0];

static size_t case_cache_bytes(const attend_case_t *c) {
    return (size_t)(c->o.slots_n / c->o.block) * (size_t)c->stride;
}

/* A fault: copies of the case's records and top-k for the caller to change. */
static void fault_copy(const attend_case_t *c, attend_fault_t *f) {
    f->cache = must_alloc(case_cache_bytes(c));
    memcpy(f->cache, c->cache, case_cache_bytes(c));
    f->slots = must_alloc((size_t)(c->o.nq * c->o.topk) * 4);
    memcpy(f->slots, c->slots, (size_t)(c->o.nq * c->o.topk) * 4);
}

void attend_case_faults(const attend_case_t *c, nvfp4_mla_context_t *cpu, int64_t query, int64_t head, int64_t slot,
                        double weight, attend_fault_t faults[ATTEND_FAULTS]) {
    for (int i = 0; i < ATTEND_FAULTS; i++)
        fault_copy(c, &faults[i]);
    attend_fault_scale_latent(c, cpu, faults[0].cache, slot, 1.1f);
    snprintf(faults[0].what, sizeof faults[0].what, "(a) slot %lld V row x 1.1 (weight %.2f)", (long long)slot, weight);
    const int group = attend_fault_bump_scale(c, faults[1].cache, slot);
    snprintf(faults[1].what, sizeof faults[1].what, "(b) slot %lld group %d scale one code up (weight %.2f)",
             (long long)slot, group, weight);
    int64_t light[2048];
    double total = 0;
    const int64_t n = attend_case_light_slots(c, query, head, 0.5 / (double)c->o.topk, light, 2048, &total);
    for (int64_t i = 0; i < n; i++)
        attend_fault_scale_latent(c, cpu, faults[2].cache, light[i], 1.1f);
    snprintf(faults[2].what, sizeof faults[2].what,
             "(d) q %lld head %lld: its %lld light entries (each under half the mean weight, %.3f in all) latent x 1.1",
             (long long)query, (long long)head, (long long)n, total);
    double tw = 0;
    const int64_t t = attend_case_lightest_tile(c, query, head, &tw);
    for (int64_t k = t * 64; k < t * 64 + 64 && k < c->o.topk; k++)
        faults[3].slots[query * c->o.topk + k] = -1;
    snprintf(faults[3].what, sizeof faults[3].what, "(e) q %lld: its lightest tile (entries %lld..%lld, weight %.3f in "
             "head %lld) skipped", (long long)query, (long long)(t * 64), (long long)(t * 64 + 63), tw, (long long)head);
}

void attend_faults_free(attend_fault_t faults[ATTEND_FAULTS]) {
    for (int i = 0; i < ATTEND_FAULTS; i++)
        free(faults[i].cache), free(faults[i].slots), faults[i].cache = NULL, faults[i].slots = NULL;
}

int attend_case_fault_visible(attend_case_t *c, nvfp4_mla_context_t *cpu, const attend_fault_t *f,
                              attend_check_stats_t *stats) {
    const int64_t nq = c->o.nq, h = c->o.h;
    uint16_t *out = must_alloc((size_t)(nq * h * 512) * 2), *right_out = c->out;
    float *lse = must_alloc((size_t)(nq * h) * 4), *right_lse = c->lse;
    int32_t *right_slots = c->slots;
    c->slots = f->slots; /* the reference reads the case's top-k: the fault's, for this call */
    attend_case_reference(c, cpu, f->cache, 0, nq, out, lse);
    c->slots = right_slots;
    c->out = out, c->lse = lse;
    int64_t *all = must_alloc((size_t)nq * sizeof *all);
    for (int64_t q = 0; q < nq; q++)
        all[q] = q;
    attend_case_check(c, cpu, all, nq, stats);
    c->out = right_out, c->lse = right_lse;
    free(out), free(lse), free(all);
    const attend_check_bounds_t *b = &attend_check_default_bounds;
    return stats->worst_rel_rms >= 2 * b->rel_rms || stats->worst_excess >= 2 * b->of_row_max ||
           stats->worst_lse >= 2 * b->lse_rel;
}
