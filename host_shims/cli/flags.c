/* Strict flag values and the codec flags (see cli.h). strtol and friends take "abc" as 0, "12abc" as
 * 12 and clamp overflow silently; each parser here accepts the whole text or says which of two
 * things is wrong: it is not a number at all, or it is a number outside the flag's range. Messages
 * go through cli_fail (cli_common.c), which calls nothing here. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "json_text.h"

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

int cli_check_text(const char *cmd, const char *flag, const char *value) {
    const unsigned char *p = (const unsigned char *)value;
    const size_t len = strlen(value);
    for (size_t i = 0, n; i < len; i += n) {
        n = nvfp4_utf8_length(p + i, len - i);
        if (n == 0 || p[i] < 0x20 || p[i] == 0x7F) {
            return cli_fail(cmd, "%s holds %s at byte %zu: give printable UTF-8 text (it is written into a JSON "
                                 "file that other readers must read)", flag,
                            n == 0 ? "invalid UTF-8" : "a control character", i);
        }
    }
    return 0;
}

/* ---- the codec flags (--layout, --mode, --scale, --policy) ---- */

const char *cli_policy_names(void) {
    /* Joined from the header's list at compile time: no name is spelled twice. */
#define CLI_POLICY_NAME(id, name) ", " name
    static const char list[] = NVFP4_MLA_FOR_EACH_WRITER_POLICY(CLI_POLICY_NAME);
#undef CLI_POLICY_NAME
    return list + 2;
}

int cli_parse_policy(const char *cmd, const char *value, uint32_t *policy) {
    for (uint32_t p = 0; p < NVFP4_MLA_WRITER_POLICY_COUNT; p++) {
        if (strcmp(value, nvfp4_mla_writer_policy_name(p)) == 0) {
            *policy = p;
            return 0;
        }
    }
    return cli_fail(cmd, "--policy is \"%s\", must be one of: %s", value, cli_policy_names());
}

int cli_parse_codec_flag(const char *cmd, const char *flag, const char *value, cli_codec_flags_t *out,
                         cli_seen_t *seen, int with_policy) {
    const int layout = strcmp(flag, "--layout") == 0, mode = strcmp(flag, "--mode") == 0;
    const int scale = strcmp(flag, "--scale") == 0, policy = with_policy && strcmp(flag, "--policy") == 0;
    if (!(layout || mode || scale || policy)) { /* before the value: "--bogus needs a value" named the wrong mistake */
        return cli_fail(cmd, "unknown flag %s (nvfp4-mla %s --help lists the flags)", flag, cmd);
    }
    if (!value) {
        return cli_fail(cmd, "%s needs a value", flag);
    }
    if (cli_once(cmd, seen, flag)) {
        return 1;
    }
    if (scale) {
        return cli_parse_scale(cmd, flag, value, &out->scale);
    }
    if (policy) {
        return cli_parse_policy(cmd, value, &out->writer_policy);
    }
    if (layout) {
        if (strcmp(value, "368") == 0) {
            out->layout = NVFP4_MLA_LAYOUT_FP8_ROPE_368;
        } else if (strcmp(value, "432") == 0) {
            out->layout = NVFP4_MLA_LAYOUT_BF16_ROPE_432;
        } else {
            return cli_fail(cmd, "--layout is \"%s\", must be 368 or 432", value);
        }
    } else if (strcmp(value, "per-token") == 0) { /* --mode */
        out->scale_mode = NVFP4_MLA_SCALE_PER_TOKEN;
    } else if (strcmp(value, "static") == 0) {
        out->scale_mode = NVFP4_MLA_SCALE_STATIC;
    } else {
        return cli_fail(cmd, "--mode is \"%s\", must be per-token or static", value);
    }
    return 0;
}

int cli_check_codec_flags(const char *cmd, cli_codec_flags_t *f, int need_mode) {
    if (!f->layout) {
        return cli_fail(cmd, "--layout 368|432 is required");
    }
    if (need_mode && !f->scale_mode) {
        return cli_fail(cmd, "--mode per-token|static is required");
    }
    if (f->scale == 0.0f) { /* not given (a given --scale is a positive normal float) */
        f->scale = nvfp4_mla_default_outer_scale(f->scale_mode);
    }
    return 0;
}
