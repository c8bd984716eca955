/* How an attend output is judged against a reference (the CPU backend's attend, in double): each
 * (query, head) row of 512 values on its own scale, and its lse. Shared by the GPU tests
 * (tests/test_gpu_attend*.c) and `nvfp4-mla-bench`, so that the bench's PASS means what the tests'
 * does; tests/test_attend_check.c shows on the CPU what it accepts and what it rejects.
 *
 * Why per row: a bound taken from the whole cache's largest |V| (what the tests used before) is
 * about 14% of a typical output of top-k 2048 and lets a wrong V row or a wrong tile scale through.
 * A row of attention averages many values, so its own scale is far below the cache's.
 *
 * What a correct kernel differs by (tests/test_attend_check.c emulates it: P rounded to bf16, f32
 * sums, out rounded to bf16): relative RMS about 0.35% of the row at worst, element errors beyond
 * 2/128 of the element below 0.2% of the row's largest |value|: the emulation leaves about 2x under
 * the bounds below. Measured, the headroom is smaller: on the H200 (the gpu suite at 9145314, issue
 * 47's independent run) the worst row of the CUDA kernels came to 1/1.37 of a bound, 1.37x of
 * headroom. A
 * fault moves a row by its weight in the softmax times its size: a V row 10% off that carries a
 * quarter of the row's weight moves it by about 2.5%, and is caught; the same V row among 2048
 * entries of equal weight moves it by 0.005%, under bf16's own rounding, and no bound can see it.
 *
 * Pure functions of their arguments; safe from any thread.
 */
#ifndef NVFP4_MLA_ATTEND_CHECK_H
#define NVFP4_MLA_ATTEND_CHECK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The bounds of one row. A row passes when all three hold:
 *   ||got - want||_2 <= rel_rms * ||want||_2;
 *   |got_i - want_i| <= elem_rel * |want_i| + of_row_max * max_j |want_j| for every i (elem_rel:
 *   bf16's rounding of both sides, 2/128);
 *   lse: both -inf (no valid entry, out all zero), or |got - want| <= lse_rel * max(|want|, 1). */
typedef struct attend_check_bounds {
    double rel_rms;    /* of the row's own RMS */
    double elem_rel;   /* of each element's own |value| */
    double of_row_max; /* of the row's largest |value| */
    double lse_rel;    /* of max(|lse|, 1) */
} attend_check_bounds_t;

/* rel_rms 1/128, elem_rel 2/128, of_row_max 1/128, lse_rel 1e-5. */
extern const attend_check_bounds_t attend_check_default_bounds;

/* What a run of checks found: counts, the worst of each measure, the first failure in words. */
typedef struct attend_check_stats {
    int64_t rows;            /* rows checked */
    int64_t failed;          /* rows outside the bounds */
    double worst_rel_rms;    /* largest ||got - want|| / ||want|| */
    double worst_excess;     /* largest (|got_i - want_i| - elem_rel |want_i|) / max|want|, of the row */
    double worst_lse;        /* largest |got - want| / max(|want|, 1) of finite lse */
    char first_failure[256]; /* "" while none failed */
} attend_check_stats_t;

/* One row. got, want: [512] bf16 bits; got_lse, want_lse: natural-log lse (pass NAN for both when
 * the call returned none). `where` names the row in a failure ("q 7 head 3"). Accumulates into
 * `stats` (NULL: none); returns 1 when the row is within `bounds` (NULL: the default ones), else 0.
 * A NaN anywhere in got fails. */
int attend_check_row(const uint16_t *got, float got_lse, const uint16_t *want, float want_lse,
                     const attend_check_bounds_t *bounds, attend_check_stats_t *stats, const char *where);

/* Every head's row of one query: got [heads, 512] with got_lse [heads] against want and want_lse
 * alike, each row as attend_check_row judges it and named "q <query> head <h>" in a failure.
 * Returns the rows outside `bounds`. */
int64_t attend_check_query(const uint16_t *got, const float *got_lse, const uint16_t *want, const float *want_lse,
                           int64_t heads, int64_t query, const attend_check_bounds_t *bounds,
                           attend_check_stats_t *stats);

/* stats as one line: "rows N failed F worst rel RMS x, excess y of row max, lse z" (+ the first
 * failure). Returns `buf`. */
const char *attend_check_summary(const attend_check_stats_t *stats, char *buf, int size);

/* Folds `part` into `total` (counts added, worsts kept, the first failure kept). */
void attend_check_merge_stats(attend_check_stats_t *total, const attend_check_stats_t *part);

/* The queries to check of a call of n_q queries: every one when n_q <= all_up_to (or n_q <=
 * spread); else at least `spread` of them, at most 2 x spread + 8: the first and last three; both
 * sides of the first boundaries where a round robin of `period` work items (the GPU's CTAs; 0:
 * none) wraps, at 1, 2, 4 and 8 items a query (spread / 4 queries each); spread / 2 + 1 evenly
 * spaced ones; then reproducible pseudo-random ones up to `spread`. Sorted, distinct, into `out`
 * (room for 2 x spread + 8, or n_q when all are taken). Returns how many. */
int64_t attend_check_pick_queries(int64_t n_q, int64_t all_up_to, int64_t spread, int64_t period, int64_t *out);

#ifdef __cplusplus
}
#endif
#endif
