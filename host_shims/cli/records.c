/* nvfp4-mla encode / decode / inspect: records on raw little-endian files, no runtime needed.
 *   encode: bf16 [T, 576] (512 latent then 64 RoPE per token) -> T records in slot order
 *   decode: T records -> bf16 [T, 576]
 *   inspect: per-token scales, group-scale code histogram, subnormal/zero groups, saturation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "fp_codes.h"

#define ROW_BYTES (576 * 2)

/* Parses [--layout L] [--mode M] [--scale S] [--plugin P] [--tokens N] (each at most once) and two (or
 * one) positional files. */
static int parse(const char *cmd, int argc, char **argv, cli_codec_flags_t *f, const char **plugin,
                 const char **files, int nfiles, long long *tokens) {
    int positional = 0;
    cli_seen_t seen = {0};
    for (int i = 1; i < argc; i++) {
        if (strncmp(argv[i], "--", 2) == 0) {
            const char *value = i + 1 < argc ? argv[i + 1] : NULL;
            int own = strcmp(argv[i], "--plugin") == 0 || (tokens && strcmp(argv[i], "--tokens") == 0);
            if (!own) {
                if (cli_parse_codec_flag(cmd, argv[i], value, f, &seen)) {
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

int cli_encode_cmd(int argc, char **argv) {
    cli_codec_flags_t f = {0};
    const char *plugin = NULL, *files[2];
    if (parse("encode", argc, argv, &f, &plugin, files, 2, NULL) || cli_check_codec_flags("encode", &f, 1) ||
        cli_check_distinct("encode", files[1], files, 1)) {
        return 1;
    }
    uint8_t *in;
    size_t len;
    if (cli_read_file("encode", files[0], CLI_MAX_DATA_BYTES, &in, &len)) {
        return 1;
    }
    if (len % ROW_BYTES) {
        free(in);
        return cli_fail("encode", "%s is %zu bytes, not a whole number of bf16 [T,576] rows (%d bytes each)", files[0],
                        len, ROW_BYTES);
    }
    int64_t count = (int64_t)(len / ROW_BYTES);
    uint8_t *records = malloc((size_t)(count * f.record_bytes) + 1);
    cli_host_t host;
    int rc = !records || cli_host_open_for(&host, plugin, NVFP4_MLA_CAP_OP_WRITE);
    if (!rc) {
        rc = cli_encode("encode", &host, &f, (const uint16_t *)in, count, records) ||
             cli_write_file("encode", files[1], records, (size_t)(count * f.record_bytes));
        cli_host_close(&host);
    }
    free(records);
    free(in);
    return rc;
}

int cli_decode_cmd(int argc, char **argv) {
    cli_codec_flags_t f = {0};
    const char *plugin = NULL, *files[2];
    if (parse("decode", argc, argv, &f, &plugin, files, 2, NULL) || cli_check_codec_flags("decode", &f, 1) ||
        cli_check_distinct("decode", files[1], files, 1)) {
        return 1;
    }
    uint8_t *in;
    size_t len;
    if (cli_read_file("decode", files[0], CLI_MAX_DATA_BYTES, &in, &len)) {
        return 1;
    }
    if (len % (size_t)f.record_bytes) {
        free(in);
        return cli_fail("decode", "%s is %zu bytes, not a whole number of %d-byte records (wrong --layout or a short file?)",
                        files[0], len, f.record_bytes);
    }
    int64_t count = (int64_t)(len / (size_t)f.record_bytes);
    uint16_t *rows = malloc((size_t)count * ROW_BYTES + 1);
    cli_host_t host;
    int rc = !rows || cli_host_open_for(&host, plugin, NVFP4_MLA_CAP_OP_GATHER);
    if (!rc) {
        rc = cli_decode("decode", &host, &f, in, count, rows) ||
             cli_write_file("decode", files[1], rows, (size_t)count * ROW_BYTES);
        cli_host_close(&host);
    }
    free(rows);
    free(in);
    return rc;
}

static float read_f32(const uint8_t *p) {
    float v;
    memcpy(&v, p, sizeof v);
    return v;
}

int cli_inspect_cmd(int argc, char **argv) {
    cli_codec_flags_t f = {0};
    const char *plugin = NULL, *files[1];
    long long show = 8;
    if (parse("inspect", argc, argv, &f, &plugin, files, 1, &show) || cli_check_codec_flags("inspect", &f, 0)) {
        return 1;
    }
    (void)plugin; /* inspect reads bytes only; it needs no plugin */
    uint8_t *in;
    size_t len;
    if (cli_read_file("inspect", files[0], CLI_MAX_DATA_BYTES, &in, &len)) {
        return 1;
    }
    if (len % (size_t)f.record_bytes || len == 0) {
        free(in);
        return cli_fail("inspect", "%s is %zu bytes, not a positive whole number of %d-byte records", files[0], len,
                        f.record_bytes);
    }
    size_t count = len / (size_t)f.record_bytes;
    uint64_t histogram[128] = {0}, subnormal = 0, zero = 0, saturated = 0, zero_tokens = 0;
    printf("%zu records of %d bytes\n%8s %14s %14s\n", count, f.record_bytes, "token", "s_t", "rope_scale");
    for (size_t t = 0; t < count; t++) {
        const uint8_t *r = in + t * (size_t)f.record_bytes;
        float s_t = read_f32(r + 292);
        if ((long long)t < show) {
            if (f.record_bytes == 368) {
                printf("%8zu %14.7g %14.7g\n", t, (double)s_t, (double)read_f32(r + 288));
            } else {
                printf("%8zu %14s %14s\n", t, "-", "(bf16 RoPE)");
            }
        }
        int all_zero = 1;
        for (int g = 0; g < 32; g++) {
            uint8_t code = r[256 + g] & 0x7F;
            histogram[code]++;
            zero += code == 0;
            subnormal += code >= 1 && code <= 7;
            all_zero &= code == 0;
        }
        zero_tokens += all_zero;
        for (int i = 0; i < 256; i++) {
            saturated += ((r[i] & 0x7) == 7) + (((r[i] >> 4) & 0x7) == 7);
        }
    }
    uint64_t groups = count * 32;
    printf("group scales: %llu groups, %llu zero (%.2f%%), %llu E4M3 subnormal (%.2f%%); %llu tokens with all groups zero\n",
           (unsigned long long)groups, (unsigned long long)zero, 100.0 * (double)zero / (double)groups,
           (unsigned long long)subnormal, 100.0 * (double)subnormal / (double)groups, (unsigned long long)zero_tokens);
    printf("saturated elements (|code| = 6): %llu of %llu (%.3f%%)\n", (unsigned long long)saturated,
           (unsigned long long)(count * 512), 100.0 * (double)saturated / (double)(count * 512));
    printf("group-scale code histogram (code: value count):\n");
    for (int c = 0; c < 128; c++) {
        if (histogram[c]) {
            printf("  0x%02x: %-10.6g %llu\n", c, (double)nvfp4_e4m3_decode((uint8_t)c), (unsigned long long)histogram[c]);
        }
    }
    free(in);
    return 0;
}
