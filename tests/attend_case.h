/* An attend test case on the host: a paged cache of records of random tokens, queries, top-k rows,
 * the host twin of the call, the CPU reference over a chosen set of queries (threads), the check of
 * an output under test against it (host_shims/common/attend_check.h), and the faults the check must
 * catch. Shared by tests/test_attend_check.c (CPU, unit suite: the faults applied to CPU outputs)
 * and the GPU tests (tests/attend_case_gpu.c runs a case on a CUDA context).
 *
 * The data behaves like a model's: every token's latent is Gaussian times a per-token log-normal
 * magnitude, RoPE included; 656-byte records are written by FlashMLA's rule (power-of-two tile
 * scales, host_encode_fp8_656_pow2) unless a case asks for random codes. White-box: links the
 * plugin's internals (its CPU writer and decoders). */
#ifndef NVFP4_MLA_TESTS_ATTEND_CASE_H
#define NVFP4_MLA_TESTS_ATTEND_CASE_H

#include <stdint.h>

#include "attend_check.h"
#include "nvfp4_mla.h"

/* What a case is; attend_case_opts fills the defaults. */
typedef struct attend_case_opts {
    int64_t nq, h, topk;    /* queries, heads (1..128), top-k entries a query */
    uint32_t layout, mode;  /* NVFP4_MLA_LAYOUT_*, NVFP4_MLA_SCALE_* */
    int64_t block;          /* tokens a page (64) */
    int64_t pad;            /* bytes added to each page: block_stride = block x record bytes + pad (0) */
    int64_t slots_n;        /* tokens in the cache, a multiple of block (4096) */
    double unused;          /* share of -1 entries (0.1) */
    int lengths;            /* 1: every third query gets a random valid_len in [0, topk] (1) */
    int empty_first;        /* 1: query 0 is all -1 when nq > 1 (1) */
    double magnitude_sigma; /* tokens: N(0, 0.5^2) x exp(sigma N(0, 1)) per token (0.5) */
    double q_sigma;         /* queries: N(0, q_sigma^2) (1) */
    int random_656;         /* 1: 656-byte records of random valid codes and scales, not FlashMLA's rule (0) */
    uint64_t seed;          /* the case's random stream (1) */
} attend_case_opts_t;

attend_case_opts_t attend_case_opts(int64_t nq, int64_t h, int64_t topk, uint32_t layout, uint32_t mode);

/* A made case. out / lse hold the output under test (written by whoever runs the call). */
typedef struct attend_case {
    attend_case_opts_t o;
    int32_t rb;                /* record bytes */
    int64_t stride;            /* block_stride, bytes */
    float scale;               /* outer scale (static: 0.01, 656: 1.0; per-token: 0) */
    uint8_t *cache;            /* [slots_n / block] pages of `stride` bytes */
    uint16_t *tok;             /* [slots_n, 576] the tokens the records hold */
    uint16_t *q;               /* [nq, h, 576] */
    int32_t *slots, *valid;    /* [nq, topk], [nq] */
    uint16_t *out;             /* [nq, h, 512] output under test */
    float *lse;                /* [nq, h] */
    nvfp4_mla_attend_args_t a; /* the call, every tensor on the host (out / lse: the two above) */
} attend_case_t;

/* Makes the case (`cpu`: a CPU context, for its writer). Aborts the test on failure. */
void attend_case_make(attend_case_t *c, const attend_case_opts_t *o, nvfp4_mla_context_t *cpu);
void attend_case_free(attend_case_t *c);

/* Where slot's record lives in `cache` (the case's or a copy of it). */
uint8_t *attend_case_record(const attend_case_t *c, uint8_t *cache, int64_t slot);

/* The CPU reference of queries [q0, q0 + n) over `cache` (NULL: the case's) into out [n, h, 512]
 * and lse [n, h]. */
void attend_case_reference(const attend_case_t *c, nvfp4_mla_context_t *cpu, const uint8_t *cache, int64_t q0,
                           int64_t n, uint16_t *out, float *lse);

/* c->out / c->lse at the queries `picks` [n] against the CPU reference over the case's cache, on
 * up to 16 threads; every head's row of each query. Accumulates into `stats`; returns the rows
 * that failed. */
int64_t attend_case_check(const attend_case_t *c, nvfp4_mla_context_t *cpu, const int64_t *picks, int64_t n,
                          attend_check_stats_t *stats);

/* The top-k entry with the largest softmax weight for (query qi, head) over the case's cache, and
 * that weight (of 1; a slot's weight sums its duplicate entries). */
int64_t attend_case_heaviest_entry(const attend_case_t *c, int64_t qi, int64_t head, double *weight);

/* The light entries of (query qi, head): the distinct slots whose weight in that row is under
 * `cap` (0.5 / valid entries: under half the mean), up to `max` of them into slots[], and their
 * total weight in *total. Returns how many. */
int64_t attend_case_light_slots(const attend_case_t *c, int64_t qi, int64_t head, double cap, int64_t *slots,
                                int64_t max, double *total);

/* The 64-entry tile of (query qi, head)'s top-k row (entries [64 t, 64 t + 64)) of least total
 * weight among those holding a valid entry; that weight in *weight. */
int64_t attend_case_lightest_tile(const attend_case_t *c, int64_t qi, int64_t head, double *weight);

/* ---- faults the check must catch (each changes `cache`: the case's or a copy) ---- */

/* A small case for the faults below: 4 queries of h heads (16: the 16-head kind; 32: 32-head
 * groups; 64 or 128: the wide kind where the plan has it) over top-k 128, every entry valid and every
 * query at full length, made from seeds seed, seed + 1, ... (8 at most) until one entry carries at
 * least a quarter of its (query, head) row's softmax weight: a fault moves a row by its weight times
 * its size, so a fault on that entry is one a check can be asked to see. That row and entry: *query
 * and *head (NULL: not wanted), *slot, *weight. Returns the seeds used; fails the test when none
 * gave such an entry. */
int attend_case_make_fault_target(attend_case_t *c, uint32_t layout, uint32_t mode, int64_t h, uint64_t seed,
                                  nvfp4_mla_context_t *cpu, int64_t *query, int64_t *head, int64_t *slot,
                                  double *weight);

/* (a) slot's latent (K's first 512 values and V: MLA keeps one latent) times `factor`: NVFP4
 * records re-written by the CPU writer from the token's latent times factor, 656-byte records with
 * their four tile scales times factor. */
void attend_fault_scale_latent(const attend_case_t *c, nvfp4_mla_context_t *cpu, uint8_t *cache, int64_t slot,
                               float factor);

/* (b) one group's scale one code up, in the group holding slot's largest |latent| value (which it
 * returns): NVFP4 the E4M3 group-scale code of that group (0..31) plus one (its value up by 1/16 to
 * 1/8); 656 the tile (group 0..3) scale times 2, the next power of two, one code of FlashMLA's
 * power-of-two scales. */
int attend_fault_bump_scale(const attend_case_t *c, uint8_t *cache, int64_t slot);

/* The self-test's fault cases: every layout at the head counts of each kind (16-head groups, 32-head
 * groups, the wide kind at 64), with fixed seeds, so that the CPU unit test (test_attend_check)
 * shows every fault of every case visible before the GPU test asks the check to catch it. */
typedef struct attend_fault_case {
    uint32_t layout, mode;
    int64_t h;
    uint64_t seed;
} attend_fault_case_t;
extern const attend_fault_case_t attend_fault_cases[];
extern const int attend_fault_case_count;

/* One fault of a fault case: what the GPU reads instead of the case's records and top-k. */
typedef struct attend_fault {
    char what[200];
    uint8_t *cache; /* the records with the fault (a copy of the case's) */
    int32_t *slots; /* [nq, topk] the top-k with the fault (a copy of the case's) */
} attend_fault_t;
enum { ATTEND_FAULTS = 4 };

/* The faults of a case made by attend_case_make_fault_target (its row query / head, its heavy entry
 * `slot` of `weight`): (a) that entry's V row x 1.1, (b) one of its group scales one code up, (d) the
 * row's light entries (each under half the mean weight) with their latent x 1.1, (e) the row's
 * lightest 64-entry tile skipped (its top-k -1 for that query: a kernel that drops a tile). */
void attend_case_faults(const attend_case_t *c, nvfp4_mla_context_t *cpu, int64_t query, int64_t head, int64_t slot,
                        double weight, attend_fault_t faults[ATTEND_FAULTS]);
void attend_faults_free(attend_fault_t faults[ATTEND_FAULTS]);

/* The CPU attend over a fault, every query, judged against the case's right reference into `stats`;
 * returns 1 when the fault is visible: some measure at least twice its bound, so that a correct
 * kernel's own error (within a bound) cannot hide it. */
int attend_case_fault_visible(attend_case_t *c, nvfp4_mla_context_t *cpu, const attend_fault_t *f,
                              attend_check_stats_t *stats);

/* (c) The merge of n partial attentions of one row (o[s]: 512 f32 values, lse[s] natural log,
 * -inf for a part with no entry) into out (bf16) and its lse, in double: how split-K partials are
 * merged, so that a test can shift one part's lse. */
void attend_merge_partials(int n, const float *const *o, const double *lse, uint16_t *out, float *lse_out);

#endif
