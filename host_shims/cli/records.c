/* nvfp4-mla encode / decode / inspect: records on raw little-endian files, no runtime needed.
 *   encode: bf16 [T, 576] (512 latent then 64 RoPE per token) -> T records in slot order, written
 *           with --policy (default rtn; decode and inspect take none: every policy reads the same);
 *           NaN/Inf input (the plugin's nonfinite_count) is refused unless --force
 *   decode: T records -> bf16 [T, 576]; records whose s_t field contradicts --mode, or whose zero
 *           bytes are not zero (not records of --layout: files carry no layout tag), are refused
 *           unless --force
 *   inspect: per-token scales, group-scale code histogram, subnormal/zero groups, saturation. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "host_codes.h"

#define ROW_BYTES (NVFP4_MLA_ROW_DIM * 2)

/* Parses [--layout L] [--mode M] [--scale S] [--policy P (encode)] [--plugin P] [--tokens N]
 * [--force (encode, decode; `force` non-NULL)] (each at most once) and two (or one) positional files. */
static int parse(const char *cmd, int argc, char **argv, cli_codec_flags_t *f, const char **plugin,
                 const char **files, int nfiles, long long *tokens, int *force) {
    int positional = 0;
    cli_seen_t seen = {0};
    const int inspect = strcmp(cmd, "inspect") == 0;
    for (int i = 1; i < argc; i++) {
        if (inspect && (!strcmp(argv[i], "--mode") || !strcmp(argv[i], "--scale") || !strcmp(argv[i], "--plugin"))) {
            /* taken and ignored before: inspect reads the bytes, with neither a plugin nor a mode */
            return cli_fail(cmd, "unknown flag %s: inspect reads the records' bytes only and takes --layout, --tokens "
                                 "and IN", argv[i]);
        }
        if (force && strcmp(argv[i], "--force") == 0) {
            if (cli_once(cmd, &seen, argv[i])) {
                return 1;
            }
            *force = 1;
        } else if (strncmp(argv[i], "--", 2) == 0) {
            const char *value = i + 1 < argc ? argv[i + 1] : NULL;
            int own = strcmp(argv[i], "--plugin") == 0 || (tokens && strcmp(argv[i], "--tokens") == 0);
            if (!own) {
                if (cli_parse_codec_flag(cmd, argv[i], value, f, &seen, strcmp(cmd, "encode") == 0)) {
                    return 1;
                }
            } else if (!value) {
                return cli_fail(cmd, "%s needs a value", argv[i]);
            } else if (cli_once(cmd, &seen, argv[i])) {
                return 1;
            } else if (strcmp(argv[i], "--plugin") == 0) {
                *plugin = value;
            } else if (cli_parse_int(cmd, argv[i], value, 0, 1000000000, tokens)) {
                return 1;
            }
            i++;
        } else if (positional < nfiles) {
            files[positional++] = argv[i];
        } else {
            return cli_fail(cmd, "unexpected argument %s", argv[i]);
        }
    }
    if (positional != nfiles) {
        return cli_fail(cmd, "expected %s", nfiles == 2 ? "IN and OUT files" : "an IN file");
    }
    return 0;
}

/* The token and element of the first NaN/Inf value of bf16 rows [count, 576], or -1. */
static int64_t first_nonfinite(const uint16_t *rows, int64_t count) {
    for (int64_t i = 0; i < count * NVFP4_MLA_ROW_DIM; i++) {
        if (host_bf16_nonfinite(rows[i])) {
            return i;
        }
    }
    return -1;
}

/* The records of bf16 rows, unless the rows hold NaN/Inf (the plugin's nonfinite_count) and the user
 * did not --force them: a record holds neither, so they would be written as something else. */
static int encode_checked(cli_host_t *host, const cli_codec_flags_t *f, const uint16_t *rows, int64_t count,
                          uint8_t *records, const char *path, int force) {
    uint64_t nonfinite = 0;
    if (cli_encode_counted("encode", host, f, rows, count, records, &nonfinite)) {
        return 1;
    }
    if (nonfinite && !force) {
        const int64_t at = first_nonfinite(rows, count);
        return cli_fail("encode",
                        "%s holds %llu NaN/Inf values (the plugin's nonfinite_count; the first is token %lld, "
                        "element %lld): records hold neither (NaN is written as 0, +-Inf as its group's "
                        "largest code, a group of nothing else as zeros), so nothing was written; fix the "
                        "input, or pass --force to write them so",
                        path, (unsigned long long)nonfinite, (long long)(at / NVFP4_MLA_ROW_DIM),
                        (long long)(at % NVFP4_MLA_ROW_DIM));
    }
    if (nonfinite) {
        fprintf(stderr, "nvfp4-mla encode: warning: %llu NaN/Inf values of %s written as finite codes (--force)\n",
                (unsigned long long)nonfinite, path);
    }
    return 0;
}

int cli_encode_cmd(int argc, char **argv) {
    cli_codec_flags_t f = {0};
    const char *plugin = NULL, *files[2];
    int force = 0;
    if (parse("encode", argc, argv, &f, &plugin, files, 2, NULL, &force) || cli_check_codec_flags("encode", &f, 1) ||
        cli_check_distinct("encode", files[1], files, 1)) {
        return 1;
    }
    uint8_t *in;
    size_t len;
    if (cli_read_file("encode", files[0], CLI_MAX_DATA_BYTES, &in, &len)) {
        return 1;
    }
    if (len % ROW_BYTES || len == 0) {
        free(in);
        return cli_fail("encode", "%s is %zu bytes, not a positive whole number of bf16 [T,576] rows (%d bytes each): "
                                  "nothing was written", files[0], len, ROW_BYTES);
    }
    int64_t count = (int64_t)(len / ROW_BYTES);
    const int32_t rb = cli_record_bytes(&f);
    uint8_t *records = malloc((size_t)(count * rb) + 1);
    cli_host_t host;
    int rc = !records || cli_host_open_for(&host, plugin, NVFP4_MLA_CAP_OP_WRITE);
    if (!rc) {
        rc = encode_checked(&host, &f, (const uint16_t *)in, count, records, files[0], force) ||
             cli_write_file("encode", files[1], records, (size_t)(count * rb));
        cli_host_close(&host);
    }
    free(records);
    free(in);
    return rc;
}

static float read_f32(const uint8_t *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* What a 368-byte record's s_t field [292,296) says it is: 0 in every static record; in a per-token
 * record a positive normal float, or 0 in a zero token (every group scale code zero too). Records carry
 * no mode marker (docs/record-format.md section 6), but this field tells the two apart: decoding
 * per-token records as static multiplies them by the --scale instead of their s_t (errors of
 * 40,000 %), and the reverse decodes zeros. A value of neither kind (negative, NaN, infinite,
 * subnormal) is a corrupt record in either mode. */
enum { KIND_CORRUPT, KIND_STATIC, KIND_PER_TOKEN, KIND_EITHER, KINDS };

static int record_kind(const uint8_t *r) {
    uint32_t bits;
    memcpy(&bits, r + NVFP4_MLA_RECORD_TOKEN_SCALE_OFFSET, sizeof bits);
    const float s_t = read_f32(r + NVFP4_MLA_RECORD_TOKEN_SCALE_OFFSET);
    if (bits) {
        return isfinite(s_t) && s_t >= FLT_MIN ? KIND_PER_TOKEN : KIND_CORRUPT;
    }
    for (int g = 0; g < NVFP4_MLA_GROUPS; g++) {
        if (r[NVFP4_MLA_RECORD_GROUP_SCALE_OFFSET + g]) {
            return KIND_STATIC;
        }
    }
    return KIND_EITHER;
}

/* How many records of each kind, and the first of each (-1: none). Every record is read: the advice
 * "decode them with --mode X" holds only when no record of the file says otherwise (issue 58, D18). */
typedef struct mode_tally {
    int64_t n[KINDS], first[KINDS];
} mode_tally_t;

static mode_tally_t tally_modes(const uint8_t *records, int64_t count) {
    mode_tally_t t = {{0}, {-1, -1, -1, -1}};
    for (int64_t i = 0; i < count; i++) {
        const int k = record_kind(records + i * NVFP4_MLA_RECORD_BYTES_368);
        t.first[k] = t.n[k]++ ? t.first[k] : i;
    }
    return t;
}

/* The words after "record I of PATH holds s_t = V at bytes [292,296), " for the first record that
 * contradicts `mode`, and its index in *at; NULL when no record does. */
static const char *mode_contradiction(const mode_tally_t *t, uint32_t mode, int64_t *at, char *words, size_t size) {
    const int against = mode == NVFP4_MLA_SCALE_STATIC ? KIND_PER_TOKEN : KIND_STATIC;
    const int with = mode == NVFP4_MLA_SCALE_STATIC ? KIND_STATIC : KIND_PER_TOKEN;
    const int kind = t->n[KIND_CORRUPT] ? KIND_CORRUPT : t->n[against] ? against : -1;
    if (kind < 0) {
        return NULL;
    }
    *at = t->first[kind];
    const char *base = kind == KIND_CORRUPT
                           ? "which is neither 0 (a static record) nor a positive normal float (a per-token record): "
                             "no writer wrote this record"
                       : kind == KIND_PER_TOKEN ? "where a static record holds 0"
                                                : "beside non-zero group scales, which only a static record has (a "
                                                  "per-token record holds a positive s_t, or 0 with all its groups "
                                                  "zero)";
    const char *all = kind == KIND_PER_TOKEN ? ": these are per-token records (decode them with --mode per-token)"
                                             : ": these are static records (decode them with --mode static and their "
                                               "--scale)";
    if (kind == KIND_CORRUPT) {
        snprintf(words, size, "%s (%lld such records)", base, (long long)t->n[KIND_CORRUPT]);
    } else if (t->n[with]) {
        snprintf(words, size, "%s, while %lld other records are %s ones (the first: record %lld): the file mixes the "
                              "two modes (%lld static, %lld per-token records), which no one --mode decodes (records of "
                              "two writers, or damaged?)",
                 base, (long long)t->n[with], mode == NVFP4_MLA_SCALE_STATIC ? "static" : "per-token",
                 (long long)t->first[with], (long long)t->n[KIND_STATIC], (long long)t->n[KIND_PER_TOKEN]);
    } else {
        snprintf(words, size, "%s%s", base, all);
    }
    return words;
}

/* Fields the readers take as 0 (docs/record-format.md section 5): an r or s_t that is NaN, +-Inf or
 * negative (sign bit set), a 432 record's bf16 RoPE value that is NaN or +-Inf. No writer stores them;
 * the plugin reads them as 0 so that one corrupt record cannot make attention NaN, and the tool says
 * how many there were (the plugin's readers count nothing: a host reading the bytes can). */
typedef struct corrupt_count {
    uint64_t r, s_t, rope;
    int64_t first;          /* the first record holding one; -1 while none */
    const char *first_what; /* its field */
    double first_value;
} corrupt_count_t;

static int corrupt_scale(const uint8_t *p) {
    uint32_t bits;
    memcpy(&bits, p, sizeof bits);
    return host_scale_field_corrupt(bits);
}

static void note_corrupt(corrupt_count_t *c, uint64_t *counter, int64_t record, const char *what, double value) {
    if (c->first < 0) {
        c->first = record, c->first_what = what, c->first_value = value;
    }
    (*counter)++;
}

/* Counts the corrupt fields of `count` records; s_t only where it is read (`with_s_t`). */
static corrupt_count_t count_corrupt(const uint8_t *records, int64_t count, int32_t record_bytes, int with_s_t) {
    corrupt_count_t c = {0, 0, 0, -1, NULL, 0};
    for (int64_t i = 0; i < count; i++) {
        const uint8_t *r = records + i * record_bytes;
        if (record_bytes == NVFP4_MLA_RECORD_BYTES_432) {
            for (int j = 0; j < NVFP4_MLA_ROPE_DIM; j++) {
                uint16_t v;
                memcpy(&v, r + NVFP4_MLA_RECORD_ROPE_OFFSET + 2 * j, sizeof v);
                if (host_bf16_nonfinite(v)) note_corrupt(&c, &c.rope, i, "a bf16 RoPE value", host_bf16_value(v));
            }
            continue;
        }
        if (corrupt_scale(r + NVFP4_MLA_RECORD_ROPE_SCALE_OFFSET))
            note_corrupt(&c, &c.r, i, "r at bytes [288,292)", read_f32(r + NVFP4_MLA_RECORD_ROPE_SCALE_OFFSET));
        if (with_s_t && corrupt_scale(r + NVFP4_MLA_RECORD_TOKEN_SCALE_OFFSET))
            note_corrupt(&c, &c.s_t, i, "s_t at bytes [292,296)", read_f32(r + NVFP4_MLA_RECORD_TOKEN_SCALE_OFFSET));
    }
    return c;
}

/* "N r, N s_t, N RoPE values" of a count, for both commands' lines. */
static void corrupt_words(const corrupt_count_t *c, char *out, size_t size) {
    snprintf(out, size, "%llu r, %llu s_t, %llu bf16 RoPE values", (unsigned long long)c->r,
             (unsigned long long)c->s_t, (unsigned long long)c->rope);
}

/* decode's report of the fields its output holds as 0 (a warning: the rule is the format's). */
static void warn_corrupt(const uint8_t *records, int64_t count, const cli_codec_flags_t *f, const char *path) {
    const corrupt_count_t c =
        count_corrupt(records, count, cli_record_bytes(f), f->scale_mode == NVFP4_MLA_SCALE_PER_TOKEN);
    if (c.first < 0) {
        return;
    }
    char words[128];
    corrupt_words(&c, words, sizeof words);
    fprintf(stderr, "nvfp4-mla decode: warning: %s holds %llu corrupt fields (%s; the first: record %lld, %s = %g), "
                    "decoded as 0 by the record format's rule (NaN, +-Inf or negative scales, NaN or +-Inf RoPE "
                    "values: docs/record-format.md section 5)\n",
            path, (unsigned long long)(c.r + c.s_t + c.rope), words, (long long)c.first, c.first_what, c.first_value);
}

/* Refuses records of another mode than --mode (unless --force), naming the first such record and, when
 * the file holds both kinds, how many of each. */
static int check_record_mode(const cli_codec_flags_t *f, const uint8_t *records, int64_t count, const char *path,
                             int force) {
    if (f->layout != NVFP4_MLA_LAYOUT_FP8_ROPE_368) {
        return 0; /* the 432 record has static mode only, and no s_t field */
    }
    const mode_tally_t t = tally_modes(records, count);
    char words[768];
    int64_t i = 0;
    const char *why = mode_contradiction(&t, f->scale_mode, &i, words, sizeof words);
    if (!why) {
        return 0;
    }
    const char *mode = f->scale_mode == NVFP4_MLA_SCALE_STATIC ? "static" : "per-token";
    const double s_t = read_f32(records + i * NVFP4_MLA_RECORD_BYTES_368 + NVFP4_MLA_RECORD_TOKEN_SCALE_OFFSET);
    if (force) {
        fprintf(stderr, "nvfp4-mla decode: warning: record %lld of %s holds s_t = %g, which contradicts --mode %s; "
                        "decoded as %s anyway (--force)\n", (long long)i, path, s_t, mode, mode);
        return 0;
    }
    return cli_fail("decode", "--mode %s, but record %lld of %s holds s_t = %g at bytes [292,296), %s; or pass "
                              "--force to decode them as %s anyway",
                    mode, (long long)i, path, s_t, why, mode);
}

/* The bytes every writer zeroes in a record (docs/record-format.md section 2): [296,304) of a 368-byte
 * record, [288,304) of a 432-byte one. Record files carry no layout tag (they are the cache's bytes, as
 * a runtime stores and offloads them), and a file of 27 x 368 = 23 x 432 bytes fits both sizes: read
 * with the other layout, records start mid-record, and these bytes stop being zero (issue 58, N13). How
 * many records break the rule, and the first in *first. */
static int64_t padding_breaks(const uint8_t *records, size_t len, int32_t rb, int64_t *first) {
    const size_t lo = rb == NVFP4_MLA_RECORD_BYTES_368 ? 296 : 288, hi = 304;
    int64_t n = 0;
    *first = -1;
    for (size_t i = 0; i < len / (size_t)rb; i++) {
        for (size_t b = lo; b < hi; b++) {
            if (records[i * (size_t)rb + b]) {
                *first = n++ ? *first : (int64_t)i;
                break;
            }
        }
    }
    return n;
}

/* decode refuses (inspect warns about) records whose zero bytes are not zero: not records of --layout, or
 * damaged; naming the other layout when the file's size fits it too. --force decodes them anyway. */
static int check_record_layout(const char *cmd, const cli_codec_flags_t *f, const uint8_t *in, size_t len,
                               const char *path, int force) {
    const int32_t rb = cli_record_bytes(f);
    if (rb != NVFP4_MLA_RECORD_BYTES_368 && rb != NVFP4_MLA_RECORD_BYTES_432) {
        return 0;
    }
    int64_t first;
    const int64_t n = padding_breaks(in, len, rb, &first);
    if (!n) {
        return 0;
    }
    const int32_t other = rb == NVFP4_MLA_RECORD_BYTES_368 ? NVFP4_MLA_RECORD_BYTES_432 : NVFP4_MLA_RECORD_BYTES_368;
    char also[160] = "";
    if (len % (size_t)other == 0) {
        snprintf(also, sizeof also, " (its %zu bytes are also %zu records of %d bytes: --layout %d?)", len,
                 len / (size_t)other, other, other);
    }
    char what[512];
    snprintf(what, sizeof what, "%lld of the %zu records of %s (the first: record %lld) hold non-zero bytes in [%d,304), "
                                "which every writer of %d-byte records zeroes: these are not --layout %d records%s, or "
                                "they are damaged (record files carry no layout tag)",
             (long long)n, len / (size_t)rb, path, (long long)first, rb == NVFP4_MLA_RECORD_BYTES_368 ? 296 : 288, rb,
             rb, also);
    if (force) {
        fprintf(stderr, "nvfp4-mla %s: warning: %s; %s\n", cmd, what,
                strcmp(cmd, "decode") == 0 ? "decoded anyway (--force)" : "counted as they are");
        return 0;
    }
    return cli_fail(cmd, "%s: nothing was written; pass --force to decode them anyway", what);
}

int cli_decode_cmd(int argc, char **argv) {
    cli_codec_flags_t f = {0};
    const char *plugin = NULL, *files[2];
    int force = 0;
    if (parse("decode", argc, argv, &f, &plugin, files, 2, NULL, &force) || cli_check_codec_flags("decode", &f, 1) ||
        cli_check_distinct("decode", files[1], files, 1)) {
        return 1;
    }
    uint8_t *in;
    size_t len;
    if (cli_read_file("decode", files[0], CLI_MAX_DATA_BYTES, &in, &len)) {
        return 1;
    }
    const size_t rb = (size_t)cli_record_bytes(&f);
    if (len % rb || len == 0) {
        free(in);
        return cli_fail("decode",
                        "%s is %zu bytes, not a positive whole number of %zu-byte records (wrong --layout or a short "
                        "file?): nothing was written", files[0], len, rb);
    }
    int64_t count = (int64_t)(len / rb);
    if (check_record_layout("decode", &f, in, len, files[0], force) || check_record_mode(&f, in, count, files[0], force)) {
        free(in);
        return 1;
    }
    uint16_t *rows = malloc((size_t)count * ROW_BYTES + 1);
    cli_host_t host;
    int rc = !rows || cli_host_open_for(&host, plugin, NVFP4_MLA_CAP_OP_GATHER);
    if (!rc) {
        rc = cli_decode("decode", &host, &f, in, count, rows) ||
             cli_write_file("decode", files[1], rows, (size_t)count * ROW_BYTES);
        cli_host_close(&host);
    }
    if (!rc) {
        warn_corrupt(in, count, &f, files[0]);
    }
    free(rows);
    free(in);
    return rc;
}

/* What inspect counts over a file's records. */
typedef struct tally {
    uint64_t histogram[128]; /* group-scale magnitude codes */
    uint64_t records, subnormal, zero, saturated, zero_tokens;
} tally_t;

/* One record: the scales of the first `show` tokens printed, its codes counted. */
static void tally_record(const uint8_t *r, int32_t record_bytes, int show, tally_t *t) {
    if (show) {
        if (record_bytes == NVFP4_MLA_RECORD_BYTES_368) {
            printf("%8llu %14.7g %14.7g\n", (unsigned long long)t->records,
                   (double)read_f32(r + NVFP4_MLA_RECORD_TOKEN_SCALE_OFFSET),
                   (double)read_f32(r + NVFP4_MLA_RECORD_ROPE_SCALE_OFFSET));
        } else {
            printf("%8llu %14s %14s\n", (unsigned long long)t->records, "-", "(bf16 RoPE)");
        }
    }
    int all_zero = 1;
    for (int g = 0; g < NVFP4_MLA_GROUPS; g++) {
        uint8_t code = r[NVFP4_MLA_RECORD_GROUP_SCALE_OFFSET + g] & 0x7F;
        t->histogram[code]++;
        t->zero += code == 0;
        t->subnormal += code >= 1 && code <= 7;
        all_zero &= code == 0;
    }
    t->zero_tokens += all_zero;
    for (int i = 0; i < NVFP4_MLA_LATENT_DIM / 2; i++) {
        t->saturated += ((r[i] & 0x7) == 7) + (((r[i] >> 4) & 0x7) == 7);
    }
    t->records++;
}

static void print_tally(const tally_t *t, const corrupt_count_t *c) {
    const uint64_t groups = t->records * NVFP4_MLA_GROUPS, elements = t->records * NVFP4_MLA_LATENT_DIM;
    printf("group scales: %llu groups, %llu zero (%.2f%%), %llu E4M3 subnormal (%.2f%%); %llu tokens with all groups "
           "zero\n",
           (unsigned long long)groups, (unsigned long long)t->zero, 100.0 * (double)t->zero / (double)groups,
           (unsigned long long)t->subnormal, 100.0 * (double)t->subnormal / (double)groups,
           (unsigned long long)t->zero_tokens);
    printf("saturated elements (|code| = 6): %llu of %llu (%.3f%%)\n", (unsigned long long)t->saturated,
           (unsigned long long)elements, 100.0 * (double)t->saturated / (double)elements);
    char words[128];
    corrupt_words(c, words, sizeof words);
    printf("corrupt fields (no writer stores them; readers take them as 0): %s", words);
    if (c->first >= 0) {
        printf("; the first: record %lld, %s = %g", (long long)c->first, c->first_what, c->first_value);
    }
    printf("\ngroup-scale code histogram (code: value count):\n");
    for (int c = 0; c < 128; c++) {
        if (t->histogram[c]) {
            printf("  0x%02x: %-10.6g %llu\n", c, (double)host_e4m3_value((uint8_t)c),
                   (unsigned long long)t->histogram[c]);
        }
    }
}

int cli_inspect_cmd(int argc, char **argv) {
    cli_codec_flags_t f = {0};
    const char *plugin = NULL, *files[1];
    long long show = 8;
    if (parse("inspect", argc, argv, &f, &plugin, files, 1, &show, NULL) || cli_check_codec_flags("inspect", &f, 0)) {
        return 1;
    }
    (void)plugin; /* inspect reads bytes only; it needs no plugin */
    uint8_t *in;
    size_t len;
    if (cli_read_file("inspect", files[0], CLI_MAX_DATA_BYTES, &in, &len)) {
        return 1;
    }
    const int32_t rb = cli_record_bytes(&f);
    if (len % (size_t)rb || len == 0) {
        free(in);
        return cli_fail("inspect", "%s is %zu bytes, not a positive whole number of %d-byte records", files[0], len,
                        rb);
    }
    check_record_layout("inspect", &f, in, len, files[0], 1); /* a warning: inspect shows what is there */
    static tally_t t;
    memset(&t, 0, sizeof t);
    printf("%zu records of %d bytes\n%8s %14s %14s\n", len / (size_t)rb, rb, "token", "s_t", "rope_scale");
    for (size_t i = 0; i < len / (size_t)rb; i++) {
        tally_record(in + i * (size_t)rb, rb, (long long)i < show, &t);
    }
    const corrupt_count_t corrupt = count_corrupt(in, (int64_t)(len / (size_t)rb), rb, 1);
    print_tally(&t, &corrupt);
    free(in);
    return 0;
}
