/* The per-row judgement of attend outputs (see attend_check.h). */
#include "attend_check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host_codes.h"

const attend_check_bounds_t attend_check_default_bounds = {1.0 / 128, 2.0 / 128, 1.0 / 128, 1e-5};

/* lse: both -inf, both NaN (no lse returned), or within lse_rel of max(|want|, 1). `err` gets the
 * relative error of a finite reference (0 otherwise); `why` the words of a failure. */
static int lse_verdict(float got, float want, const attend_check_bounds_t *b, double *err, char *why, size_t n) {
    *err = 0;
    if (isnan(got) && isnan(want))
        return 1;
    if (isinf(want) && want < 0) {
        if (isinf(got) && got < 0)
            return 1;
        snprintf(why, n, "lse %g, reference -inf (no valid entry)", got);
        return 0;
    }
    *err = fabs((double)got - (double)want) / fmax(fabs((double)want), 1.0);
    if (*err <= b->lse_rel)
        return 1; /* false for NaN */
    snprintf(why, n, "lse %.8g, reference %.8g (relative error %.3g, bound %.3g)", got, want, *err, b->lse_rel);
    return 0;
}

int attend_check_row(const uint16_t *got, float got_lse, const uint16_t *want, float want_lse,
                     const attend_check_bounds_t *bounds, attend_check_stats_t *stats, const char *where) {
    const attend_check_bounds_t *b = bounds ? bounds : &attend_check_default_bounds;
    double diff2 = 0, want2 = 0, row_max = 0, excess = 0;
    for (int i = 0; i < 512; i++) {
        const double w = host_bf16_value(want[i]);
        want2 += w * w;
        row_max = fmax(row_max, fabs(w));
    }
    int bad = -1; /* the first element outside its bound */
    for (int i = 0; i < 512; i++) {
        const double g = host_bf16_value(got[i]), w = host_bf16_value(want[i]), d = fabs(g - w);
        if (bad < 0 && !(d <= b->elem_rel * fabs(w) + b->of_row_max * row_max))
            bad = i; /* NaN fails */
        diff2 += d * d;
        const double e = d - b->elem_rel * fabs(w);
        if (!(e <= excess))
            excess = e;
    }
    const double rel_rms = want2 > 0 ? sqrt(diff2 / want2) : diff2 > 0 || diff2 != diff2 ? INFINITY : 0.0;
    const double excess_of_max = row_max > 0 ? excess / row_max : excess > 0 || excess != excess ? INFINITY : 0.0;
    char why[192] = "";
    if (bad >= 0)
        snprintf(why, sizeof why, "out[%d] %.6g, reference %.6g (bound %.3g |ref| + %.3g x row max %.6g)", bad,
                 host_bf16_value(got[bad]), host_bf16_value(want[bad]), b->elem_rel, b->of_row_max, row_max);
    else if (!(rel_rms <= b->rel_rms))
        snprintf(why, sizeof why, "relative RMS error %.3g of the row (bound %.3g)", rel_rms, b->rel_rms);
    double lse_err;
    char lse_why[160] = "";
    const int lse_good = lse_verdict(got_lse, want_lse, b, &lse_err, lse_why, sizeof lse_why);
    const int ok = !why[0] && lse_good;
    if (!stats)
        return ok;
    stats->rows++;
    if (!(rel_rms <= stats->worst_rel_rms))
        stats->worst_rel_rms = rel_rms;
    if (!(excess_of_max <= stats->worst_excess))
        stats->worst_excess = excess_of_max;
    if (!(lse_err <= stats->worst_lse))
        stats->worst_lse = lse_err;
    if (!ok) {
        stats->failed++;
        if (!stats->first_failure[0])
            snprintf(stats->first_failure, sizeof stats->first_failure, "%s: %s", where ? where : "row",
                     why[0] ? why : lse_why);
    }
    return ok;
}

int64_t attend_check_query(const uint16_t *got, const float *got_lse, const uint16_t *want, const float *want_lse,
                           int64_t heads, int64_t query, const attend_check_bounds_t *bounds,
                           attend_check_stats_t *stats) {
    int64_t failed = 0;
    for (int64_t h = 0; h < heads; h++) {
        char where[64];
        snprintf(where, sizeof where, "q %lld head %lld", (long long)query, (long long)h);
        failed += !attend_check_row(got + h * 512, got_lse[h], want + h * 512, want_lse[h], bounds, stats, where);
    }
    return failed;
}

const char *attend_check_summary(const attend_check_stats_t *s, char *buf, int size) {
    int n = snprintf(buf, (size_t)size, "rows %lld failed %lld, worst: rel RMS %.2e, excess %.2e of row max, lse %.2e",
                     (long long)s->rows, (long long)s->failed, s->worst_rel_rms, s->worst_excess, s->worst_lse);
    if (s->first_failure[0] && n > 0 && n < size)
        snprintf(buf + n, (size_t)(size - n), "; first: %s", s->first_failure);
    return buf;
}

void attend_check_merge_stats(attend_check_stats_t *total, const attend_check_stats_t *part) {
    total->rows += part->rows;
    total->failed += part->failed;
    if (!(part->worst_rel_rms <= total->worst_rel_rms))
        total->worst_rel_rms = part->worst_rel_rms;
    if (!(part->worst_excess <= total->worst_excess))
        total->worst_excess = part->worst_excess;
    if (!(part->worst_lse <= total->worst_lse))
        total->worst_lse = part->worst_lse;
    if (!total->first_failure[0] && part->first_failure[0])
        memcpy(total->first_failure, part->first_failure, sizeof total->first_failure);
}

/* Adds q to out[0..n) unless it is outside [0, n_q), already there, or no room is left. */
static int64_t add_query(int64_t *out, int64_t n, int64_t room, int64_t q, int64_t n_q) {
    if (q < 0 || q >= n_q || n >= room)
        return n;
    for (int64_t i = 0; i < n; i++)
        if (out[i] == q)
            return n;
    out[n] = q;
    return n + 1;
}

static int cmp_i64(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

int64_t attend_check_pick_queries(int64_t n_q, int64_t all_up_to, int64_t spread, int64_t period, int64_t *out) {
    if (n_q <= all_up_to || n_q <= spread) {
        for (int64_t q = 0; q < n_q; q++)
            out[q] = q;
        return n_q;
    }
    const int64_t room = 2 * spread + 8;
    int64_t n = 0;
    for (int64_t k = 0; k < 3; k++)
        n = add_query(out, add_query(out, n, room, k, n_q), room, n_q - 1 - k, n_q);
    /* Where the round robin wraps: query q's items start at q x per, the walk wraps at multiples of
     * period. A quarter of the spread for each of per = 1, 2, 4, 8 items a query, both sides. */
    for (int64_t per = 1; per <= 8 && period > 0; per *= 2) {
        const int64_t stop = n + spread / 4;
        for (int64_t wrap = period; wrap / per < n_q && n + 2 <= stop; wrap += period)
            n = add_query(out, add_query(out, n, room, wrap / per - 1, n_q), room, wrap / per, n_q);
    }
    const int64_t even = spread / 2 > 1 ? spread / 2 : 1; /* then evenly spaced ones */
    for (int64_t k = 0; k <= even; k++)
        n = add_query(out, n, room, k * (n_q - 1) / even, n_q);
    uint64_t x = (uint64_t)n_q * 0x9E3779B97F4A7C15ull + 1; /* and a reproducible few more, to spread */
    while (n < spread) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        n = add_query(out, n, room, (int64_t)(x % (uint64_t)n_q), n_q);
    }
    qsort(out, (size_t)n, sizeof *out, cmp_i64);
    return n;
}
