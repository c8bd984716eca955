/* Strict flag values (see cli.h). strtol and friends take "abc" as 0, "12abc" as 12 and clamp
 * overflow silently; each parser here accepts the whole text or says which of two things is wrong:
 * it is not a number at all, or it is a number outside the flag's range. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_once(const char *cmd, cli_seen_t *seen, const char *flag) {
    for (int i = 0; i < seen->count; i++) {
        if (strcmp(seen->flags[i], flag) == 0) {
            return cli_fail(cmd, "%s is given twice: give each flag once", flag);
        }
    }
    if (seen->count == (int)(sizeof seen->flags / sizeof seen->flags[0])) {
        return cli_fail(cmd, "too many flags");
    }
    seen->flags[seen->count++] = flag;
    return 0;
}

/* Decimal digits with an optional leading minus, and nothing else (strtoll alone skips spaces and
 * accepts "+", "0x" is not decimal, and a trailing remainder is easy to miss). */
static int is_integer_text(const char *s) {
    s += *s == '-';
    if (!*s) {
        return 0;
    }
    for (; *s; s++) {
        if (*s < '0' || *s > '9') {
            return 0;
        }
    }
    return 1;
}

int cli_parse_int(const char *cmd, const char *flag, const char *value, long long lo, long long hi, long long *out) {
    if (!is_integer_text(value)) {
        return cli_fail(cmd, "%s is \"%s\": not an integer", flag, value);
    }
    errno = 0;
    long long v = strtoll(value, NULL, 10);
    if (errno == ERANGE || v < lo || v > hi) {
        return cli_fail(cmd, "%s is \"%s\": out of range, must be an integer in [%lld, %lld]", flag, value, lo, hi);
    }
    *out = v;
    return 0;
}

int cli_parse_u64(const char *cmd, const char *flag, const char *value, unsigned long long *out) {
    if (!is_integer_text(value)) {
        return cli_fail(cmd, "%s is \"%s\": not an integer", flag, value);
    }
    errno = 0;
    unsigned long long v = strtoull(value, NULL, 10);
    if (value[0] == '-' || errno == ERANGE) { /* strtoull wraps "-1" to the largest value */
        return cli_fail(cmd, "%s is \"%s\": out of range, must be an integer in [0, %llu]", flag, value,
                        (unsigned long long)UINT64_MAX);
    }
    *out = v;
    return 0;
}

/* A decimal or hex float as strtod reads it, the whole text; NaN is not a number. */
static int parse_real_text(const char *value, double *out) {
    char *end;
    if (!value[0] || value[0] == ' ' || value[0] == '\t') {
        return -1;
    }
    errno = 0;
    *out = strtod(value, &end);
    if (end == value || *end || isnan(*out)) {
        return -1;
    }
    return errno == ERANGE ? 1 : 0; /* 1: overflow or underflow, a number out of range */
}

int cli_parse_real(const char *cmd, const char *flag, const char *value, double lo, double hi, double *out) {
    double v;
    int r = parse_real_text(value, &v);
    if (r < 0) {
        return cli_fail(cmd, "%s is \"%s\": not a number", flag, value);
    }
    if (r > 0 || !isfinite(v) || v < lo || v > hi) {
        return cli_fail(cmd, "%s is \"%s\": out of range, must be a finite number in [%g, %g]", flag, value, lo, hi);
    }
    *out = v;
    return 0;
}

int cli_parse_scale(const char *cmd, const char *flag, const char *value, float *out) {
    double v;
    int r = parse_real_text(value, &v);
    if (r < 0) {
        return cli_fail(cmd, "%s is \"%s\": not a number", flag, value);
    }
    /* A usable outer scale is a positive normal float: its reciprocal is then finite (spec 4.1). */
    float f = (float)v;
    if (r > 0 || !(v > 0) || !isnormal(f) || !isfinite(f)) {
        return cli_fail(cmd, "%s is \"%s\": out of range, must be a positive normal float (%g to %g)", flag, value,
                        (double)FLT_MIN, (double)FLT_MAX);
    }
    *out = f;
    return 0;
}
